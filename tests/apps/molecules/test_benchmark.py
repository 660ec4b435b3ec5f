"""The PMO harness on a tiny prior: every method through its own oracle counter, the
summary and targets in benchmark.json, and the report rebuilt from it."""

import json
import logging

import pytest

from fieldrl.app import Resources
from fieldrl.apps.molecules.benchmark import PUBLISHED_REINVENT, benchmark
from fieldrl.apps.molecules.config import MoleculesConfig
from fieldrl.apps.molecules.oracles import PMO_TASKS
from fieldrl.apps.molecules.pipeline import export_prior, train_prior
from fieldrl.apps.molecules.report import sections
from fieldrl.report import write_benchmark_report
from fieldrl.runs import Run

SMILES = ["CC(=O)Oc1ccccc1C(=O)O", "Clc1ccc(Br)cc1", "CC(N)C(=O)O", "CCN(CC)CC", "CCO",
          "c1ccccc1O", "CC1=CC(=O)CCC1", "OCC1OC(O)C(O)C(O)C1O", "CCCCO", "CCOC(=O)C"]  # fmt: skip


@pytest.fixture(scope="module")
def prior(tmp_path_factory):
    root = tmp_path_factory.mktemp("prior")
    (root / "set.smi").write_text("\n".join(SMILES) + "\n")
    cfg = MoleculesConfig(experiment={"loggers": ["jsonl"]},
                          model={"embedding": 8, "hidden": 16, "layers": 1, "max_tokens": 30},
                          prior={"smiles": str(root / "set.smi"), "epochs": 20, "batch_size": 5,
                                 "holdout": 0, "validation_samples": 10})  # fmt: skip
    with Run.create(cfg, root=root) as run:
        train_prior(cfg, run=run)
    return export_prior(run.dir, root / "exported", {})


def tiny(prior):
    return MoleculesConfig(
        model={"max_tokens": 30},
        agent={"prior": str(prior), "batch_size": 16, "patience": 3},
        alignment={"fit_molecules": 30},
        benchmark={"tasks": ["qed", "median1"], "seeds": [0, 1], "budget": 30},
    )  # fmt: skip


def test_every_method_runs_through_its_own_oracle_counter(prior, tmp_path):
    logging.getLogger("mol_ga").setLevel(logging.WARNING)
    cfg = tiny(prior)
    path = benchmark(cfg, out=tmp_path / "bench", quick=True, resources=Resources())
    data = json.loads(path.read_text())
    summary = [r for r in data["rows"] if "top10_auc_sum" in r]
    runs = [r for r in data["rows"] if "top10_auc_sum" not in r]
    assert [r["method"] for r in summary] == list(cfg.benchmark.methods)
    assert len(runs) == 5 * 2 * 2
    for r in runs:
        assert 0 <= r["oracle_calls"] <= 30 and 0 <= r["top10_auc"] <= r["top1"] <= 1, r
        assert 0 <= r["novelty"] <= 1 and r["molecules_per_s"] > 0
    ga = [r for r in runs if r["method"] == "mol_ga"]
    assert all(r["validity"] == 1.0 and r["oracle_calls"] == 30 for r in ga)  # graph edits
    assert sum(r["oracle_calls"] for r in runs if r["method"] == "reinvent") > 0
    names = [t["name"] for t in data["targets"]]
    assert sum("paired" in n for n in names) == 2 and any("within 5%" in n for n in names)
    assert any(n.startswith("fingerprint-aligned") for n in names)
    assert data["data"]["published_reinvent"]["qed"] == 0.941
    first = (path.parent / "report.md").read_text()
    assert "top10_auc_sum" in first and "top_molecules.png" in first
    (path.parent / "report.md").unlink()
    write_benchmark_report(path.parent, sections)  # from benchmark.json alone
    assert (path.parent / "report.md").read_text() == first


def test_a_benchmark_killed_halfway_reruns_only_the_missing_runs(prior, tmp_path, monkeypatch):
    import fieldrl.apps.molecules.benchmark as module

    logging.getLogger("mol_ga").setLevel(logging.WARNING)
    cfg = tiny(prior).model_copy(update={"benchmark": tiny(prior).benchmark.model_copy(
        update={"tasks": ["qed"], "seeds": [0]})})  # fmt: skip
    path = benchmark(cfg, out=tmp_path, quick=True, resources=Resources())
    first = json.loads(path.read_text())["rows"]
    saved = sorted((tmp_path / "runs").glob("*.json"))
    assert [p.stem for p in saved] == sorted(f"{m}|qed|0" for m in cfg.benchmark.methods)
    saved[3].unlink()
    calls = []
    real = module.run_job
    monkeypatch.setattr(module, "run_job", lambda job: calls.append(job[0]) or real(job))
    again = json.loads(benchmark(cfg, out=tmp_path, quick=True,
                                 resources=Resources()).read_text())["rows"]  # fmt: skip
    assert calls == [saved[3].stem.split("|")[0]]
    timing = ("seconds", "molecules_per_s")
    assert [{k: v for k, v in r.items() if k not in timing} for r in again] == [
        {k: v for k, v in r.items() if k not in timing} for r in first
    ]


def test_the_published_table_covers_every_task():
    assert set(PUBLISHED_REINVENT) == set(PMO_TASKS)
    assert sum(PUBLISHED_REINVENT.values()) == pytest.approx(11.591, abs=1e-3)
