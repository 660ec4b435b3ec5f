import numpy as np
import pytest

from fieldrl.apps.lhc_trigger.config import FillConfig
from fieldrl.apps.lhc_trigger.data import HAA4B, TTBAR
from fieldrl.apps.lhc_trigger.sim import FillSimulator
from fieldrl.apps.lhc_trigger.triggers import ht_scores


def test_pileup_decays_as_configured():
    cfg = FillConfig(n_windows=12, window_events=20_000)
    sim = FillSimulator(cfg, 1)
    mu = np.array([s.mean_pileup for s in sim.states])
    hours = np.array([s.time_h for s in sim.states])
    np.testing.assert_allclose(mu[-1] / mu[0], np.exp(-(hours[-1] - hours[0]) / cfg.lumi_tau_h))
    assert 25 < mu[0] < 35  # 1.3e34 with 2544 bunches: ~31 interactions per crossing
    first, last = sim.window(0), sim.window(11)
    assert first.true_pileup.mean() == pytest.approx(mu[0], rel=0.02)
    assert first.npv.mean() > last.npv.mean()
    assert abs(first.npv.mean() - 0.7 * (first.true_pileup.mean() + 1)) < 0.5


def test_signal_fractions_and_rates(tiny):
    cfg = FillConfig(n_windows=8, window_events=100_000)
    events = FillSimulator(cfg, 2).window(0)
    assert 20 < (events.label == TTBAR).sum() < 90  # 5e-4 of 1e5
    assert 20 < (events.label == HAA4B).sum() < 90
    ht = ht_scores(events, tiny.trigger)
    threshold = np.quantile(ht[events.label == 0], 1 - 0.0025)
    assert 120 < threshold < 300  # GeV, a Level-1-like H_T threshold
    tt = (ht[events.label == TTBAR] > threshold).mean()
    haa = (ht[events.label == HAA4B] > threshold).mean()
    assert tt > 0.6 and haa < tt  # soft 4b signal is harder to keep with H_T


def test_same_seed_same_fill_and_jes_step():
    cfg = FillConfig(n_windows=6, window_events=5000, jes_step=0.04, jes_walk_sigma=0.0)
    a, b = FillSimulator(cfg, 5), FillSimulator(cfg, 5)
    np.testing.assert_array_equal(a.window(2).jet_pt, b.window(2).jet_pt)
    jes = [s.jes for s in a.states]
    assert jes[:3] == [1.0] * 3 and jes[3:] == [1.04] * 3


def test_a_jes_schedule_changes_the_scale_from_each_time_on():
    cfg = FillConfig(n_windows=10, window_events=5000, jes_walk_sigma=0.0,
                     jes_schedule=[(0.3, 0.02), (0.7, -0.05)])  # fmt: skip
    jes = [s.jes for s in FillSimulator(cfg, 1).states]
    np.testing.assert_allclose(jes, [1.0] * 3 + [1.02] * 4 + [0.97] * 3)
    with pytest.raises(ValueError, match="jes_schedule: time 1.5 is not a fill fraction"):
        FillConfig(jes_schedule=[(1.5, 0.02)])


def test_the_bunch_pattern_must_fit_the_orbit_and_its_gaps_shape_out_of_time_pileup():
    with pytest.raises(ValueError, match=r"need 3584 slots; an orbit has 3564"):
        FillConfig(train_gap=20, abort_gap=0)  # 2544 bunches + 52 gaps of 20
    base = dict(n_windows=4, window_events=40_000, bunch_spread=0.0, oot_pileup_jets=0.5)
    for gap, reach in ((1, 0.5 + 0.25), (8, 0.0)):  # slots 2 and 3 back weigh 1/2 and 1/4
        sim = FillSimulator(FillConfig(**base, train_gap=gap), 3)
        first, unit = sim.first_in_train, sim.bunch_factor.max()  # a bunch inside a train
        # a train's first bunch sees the train before it only across a short gap (train 0
        # follows the abort gap); inside a train it always sees the bunch just before
        assert sim.oot_factor[first][1:] == pytest.approx(reach * unit)
        assert sim.oot_factor[first][0] == 0.0 and np.all(
            sim.oot_factor[~first] >= 0.9 * unit - 1e-9
        )
    short = FillSimulator(FillConfig(**base, train_gap=1), 3).window(0)
    long = FillSimulator(FillConfig(**base, train_gap=8), 3).window(0)
    off = FillSimulator(FillConfig(**{**base, "oot_pileup_jets": 0.0}, train_gap=8), 3).window(0)
    assert short.counts.sum() > long.counts.sum() > off.counts.sum()


def test_a_signal_a_user_describes_replaces_a_shipped_one(tiny, tmp_path):
    from fieldrl.apps.lhc_trigger import APP
    from fieldrl.config import ConfigError

    mine = tmp_path / "zprime.toml"
    mine.write_text(
        'base = "tiny.toml"\n[fill]\nttbar_fraction = 0.002\nsignals = [\n'
        '  { name = "zprime_1tev", jets = 2, pt_min = 0.0, mass = 1000.0, eta_sigma = 1.0 },\n'
        '  { name = "haa4b", jets = 4, pt_min = 12.0, pt_scales = [12.0], eta_sigma = 1.3 },\n]\n'
    )
    cfg = APP.load_config(None, mine)
    assert cfg.fill.signals[0].name == "zprime_1tev"
    events = FillSimulator(cfg.fill.model_copy(update={"window_events": 50_000}), 4).window(0)
    zprime = events.label == TTBAR
    assert 40 < zprime.sum() < 160 and np.all(events.counts[zprime] >= 2)
    ht = ht_scores(events, tiny.trigger)
    assert np.median(ht[zprime]) > 600  # two jets near the 500-GeV Jacobian peak
    odd = mine.read_text().replace("jets = 2", "jets = 3")
    mine.write_text(odd)
    with pytest.raises(ConfigError, match="a resonance decays to jet pairs; jets = 3 is odd"):
        APP.load_config(None, mine)


def test_signal_jets_can_come_from_the_users_nanoaod(sample, tmp_path):
    from fieldrl.apps.lhc_trigger.config import SignalShape
    from fieldrl.apps.lhc_trigger.data import read_events
    from fieldrl.apps.lhc_trigger.sim import signal_jets

    shape = SignalShape(name="from_file", events=str(sample))
    per_event, pt, eta, phi = signal_jets(np.random.default_rng(0), 50, shape)
    file = next(read_events([sample]))
    assert per_event.shape == (50,) and pt.size == per_event.sum() == eta.size == phi.size
    assert set(per_event) <= set(file.counts.tolist())
    assert np.isin(pt, file.jet_pt.astype(np.float64)).all()  # jets of the file's events
    fill = FillConfig(n_windows=4, window_events=20_000, ttbar_fraction=0.005,
                      signals=(shape, FillConfig().signals[1]))  # fmt: skip
    events = FillSimulator(fill, 1).window(0)
    assert 50 < (events.label == TTBAR).sum() < 160
    with pytest.raises(ValueError, match="no file matches events = "):
        SignalShape(name="missing", events=str(tmp_path / "none*.root"))
