from pathlib import Path

import awkward as ak
import numpy as np
import pytest

from fieldrl.apps.lhc_trigger.data import Events, read_events, write_events
from fieldrl.apps.lhc_trigger.sim import FillSimulator
from fieldrl.apps.lhc_trigger.stream import rewindow
from fieldrl.errors import DataError

HERE = Path(__file__).parent


def test_sample_file_reads_in_chunks(sample):
    chunks = list(read_events([sample], chunk_events=3000))
    assert len(chunks) > 1 and max(c.n for c in chunks) <= 3000
    events = Events.concat(chunks)
    assert events.n == sum(c.n for c in chunks) > 10_000
    assert events.jet_pt.size == events.counts.sum() and (events.jet_pt > 0).all()
    assert (events.npv > 0).any() and np.isfinite(events.true_pileup).all()


def test_roundtrip_keeps_every_value(tmp_path, tiny):
    events = FillSimulator(tiny.fill, 3).window(0)
    path = write_events(tmp_path / "f.root", events)
    back = Events.concat(list(read_events([path], chunk_events=2500)))
    for field in ("counts", "jet_pt", "jet_eta", "npv", "label", "lumi_block"):
        np.testing.assert_array_equal(getattr(back, field), getattr(events, field))


def test_branch_names_are_mappable(tmp_path, tiny):
    import awkward as ak
    import uproot

    events = FillSimulator(tiny.fill, 3).window(0)
    jets = ak.zip({k: ak.unflatten(getattr(events, f"jet_{k}"), events.counts)
                   for k in ("pt", "eta", "phi")})  # fmt: skip
    path = tmp_path / "renamed.root"
    with uproot.recreate(path) as f:
        f.mktree("Events", {"Jet": jets.type, "nPV": np.int32},
                 field_name=lambda o, i: f"{o}_{i}", counter_name=lambda c: f"n{c}")  # fmt: skip
        f["Events"].extend({"Jet": jets, "nPV": events.npv})
    with pytest.raises(DataError, match=r"renamed.root: missing branch 'PV_npvsGood' or 'PV_npvs'"):
        next(read_events([path]))
    back = next(read_events([path], branches={"PV_npvs": "nPV"}))
    np.testing.assert_array_equal(back.npv, events.npv)


def test_missing_branch_names_file_and_branch(tmp_path, sample):
    import uproot

    path = tmp_path / "nojets.root"
    with uproot.recreate(path) as f:
        f["Events"] = {"PV_npvs": np.arange(10, dtype=np.int32)}
    with pytest.raises(DataError, match=r"nojets.root: missing branch 'nJet'"):
        next(read_events([path]))


def test_not_root_and_truncated_files(tmp_path, sample):
    text = tmp_path / "notes.root"
    text.write_text("run,lumi\n1,2\n")
    with pytest.raises(DataError, match="notes.root: not a ROOT file"):
        next(read_events([text]))
    cut = tmp_path / "cut.root"
    cut.write_bytes(sample.read_bytes()[: sample.stat().st_size // 2])
    with pytest.raises(DataError, match="cut.root"):
        list(read_events([cut]))


def test_rewindow_makes_exact_windows(sample):
    windows = list(rewindow(read_events([sample], chunk_events=1700), 5000))
    assert windows and all(w.n == 5000 for w in windows)


def test_a_real_cms_file_missing_jet_eta_is_named():
    """scikit-hep-testdata's small CMS Drell-Yan NanoAOD skim has Jet_pt but no Jet_eta."""
    skhep_testdata = pytest.importorskip("skhep_testdata")
    path = skhep_testdata.data_path("uproot-small-dy-withoffsets.root")
    with pytest.raises(DataError, match=r"no tree 'Events' \(has \['tree'\]\)"):
        next(read_events([path]))
    with pytest.raises(
        DataError, match=r"uproot-small-dy-withoffsets.root: missing branch 'Jet_eta'"
    ):
        next(read_events([path], tree="tree"))


def test_an_rntuple_reads_like_the_ttree(tmp_path, tiny):
    """Newer CMS open data ships NanoAOD as RNTuple, whose reads return keys beside the
    ones asked for (NanoAOD's ``_collectionN``; a collection ``Jet`` for ``Jet.pt``)."""
    import awkward as ak
    import uproot

    events = FillSimulator(tiny.fill, 3).window(0)
    jets = ak.zip({k: ak.unflatten(getattr(events, f"jet_{k}"), events.counts)
                   for k in ("pt", "eta", "phi")})  # fmt: skip
    path = tmp_path / "nano_rntuple.root"
    with uproot.recreate(path) as f:
        f["Events"] = {"nJet": events.counts.astype(np.uint32), "Jet": jets,
                       "PV_npvs": events.npv, "run": events.run.astype(np.uint32)}  # fmt: skip
    assert type(uproot.open(path)["Events"]).__name__.endswith("RNTuple")
    jet_fields = {f"Jet_{k}": f"Jet.{k}" for k in ("pt", "eta", "phi")}
    chunks = list(read_events([path], branches=jet_fields, chunk_events=3000))
    assert [c.n for c in chunks] == [3000, 3000, 2000]
    back = Events.concat(chunks)
    for field in ("counts", "jet_pt", "jet_eta", "jet_phi", "npv", "run"):
        np.testing.assert_array_equal(getattr(back, field), getattr(events, field))


def test_a_cms_nanoaod_rntuple_reads_with_the_default_names():
    """A real CMS NanoAOD converted to RNTuple (10 tt events of 2015 open data, from
    scikit-hep-testdata: see data/README.md here): uproot returns each projected field with the
    ``_collectionN`` it points into (was ``unreadable data (KeyError: '_collection10')``)."""
    import uproot

    path = HERE / "data" / "cms_nanoaod_rntuple.root"
    events = Events.concat(list(read_events([path])))
    truth = uproot.open(path)["Events"].arrays(["nJet", "PV_npvsGood", "Jet_pt"], library="ak")
    np.testing.assert_array_equal(events.counts, truth["nJet"].to_numpy())
    np.testing.assert_array_equal(events.npv, truth["PV_npvsGood"].to_numpy())
    np.testing.assert_allclose(events.jet_pt, ak.flatten(truth["Jet_pt"]).to_numpy())
