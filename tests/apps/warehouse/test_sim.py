from pathlib import Path

import numpy as np
import pytest

from fieldrl.apps.warehouse.baselines import BehaviorPolicy, heuristic_scores
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.env import run_episode, select
from fieldrl.apps.warehouse.logs import LogWriter, iter_log_batches, read_epochs, validate_logs
from fieldrl.apps.warehouse.selection import check_feasible, select_moves
from fieldrl.apps.warehouse.sim import FEATURES, Warehouse
from fieldrl.config import load_config
from fieldrl.errors import DataError, FieldrlError

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


@pytest.fixture
def cfg() -> WarehouseConfig:
    return load_config(WarehouseConfig, TINY)


def test_units_are_conserved_and_capacities_hold(cfg):
    wh = Warehouse(cfg, 3)
    start = wh.stock().sum() + wh.backlog.sum() + wh.pipeline.sum()
    ordered, picked = 0, 0
    for _ in range(10):
        cands = wh.candidates()
        chosen, bad = select(cfg, cands, heuristic_scores(cands))
        assert bad == 0
        result = wh.step(cands, chosen)
        picked += result.units_picked
        ordered += result.units_replenished
        held = wh.item_of >= 0
        volume = wh.units[held] * wh.unit_liters[wh.item_of[held]]
        assert (volume <= wh.capacity[held] + 1e-6).all()
        assert (wh.units[~held] == 0).all() and (wh.units >= 0).all()
    end = wh.stock().sum() + wh.backlog.sum() + wh.pipeline.sum()
    assert end == start + ordered - picked  # moves and put-aways only relocate units


def test_candidates_are_same_item_moves_that_fit(cfg):
    wh = Warehouse(cfg, 1)
    c = wh.candidates()
    assert c.n > 100 and c.features.shape == (c.n, len(FEATURES))
    assert (wh.item_of[c.source] == wh.item_of[c.target]).all() and (c.source != c.target).all()
    room = wh.capacity[c.target] - wh.units[c.target] * wh.unit_liters[c.item]
    assert (wh.units[c.source] * wh.unit_liters[c.item] <= room + 1e-6).all()
    assert np.isfinite(c.features).all() and (c.labor_hours > 0).all()


@pytest.mark.parametrize("kind", ["random", "constant", "nan", "inf", "reversed"])
def test_selection_is_feasible_whatever_the_scores(cfg, kind):
    c = Warehouse(cfg, 2).candidates()
    rng = np.random.default_rng(0)
    scores = {
        "random": rng.normal(size=c.n),
        "constant": np.ones(c.n),
        "nan": np.where(rng.random(c.n) < 0.5, np.nan, 1.0),
        "inf": np.where(rng.random(c.n) < 0.1, np.inf, -np.inf),
        "reversed": -heuristic_scores(c),
    }[kind]
    chosen, bad = select(cfg, c, scores)
    assert bad == 0 and chosen.size > 0
    budget = cfg.labor.hours_per_epoch * cfg.labor.consolidation_share
    assert c.labor_hours[chosen].sum() <= budget + 1e-9


def test_selection_takes_the_best_of_conflicting_moves():
    source, target = np.array([0, 0, 2]), np.array([1, 3, 3])
    zone, labor = np.zeros(3, np.int16), np.ones(3)
    chosen = select_moves(np.array([1.0, 5.0, 4.0]), source, target, zone, labor, 10.0, 5)
    assert list(chosen) == [1]  # 0->3 beats 0->1 and blocks 2->3
    assert check_feasible(np.array([0, 1]), source, target, zone, labor, 10.0, 5) > 0
    with pytest.raises(FieldrlError, match="differ in length"):
        select_moves(np.ones(2), source, target, zone, labor, 1.0, 1)


def greedy_reference(scores, source, target):
    """Plain sequential greedy: best first, skip a move whose containers are taken."""
    used, chosen = set(), []
    for i in sorted(range(scores.size), key=lambda i: (-scores[i], i)):
        if source[i] not in used and target[i] not in used:
            chosen.append(i)
            used.update((source[i], target[i]))
    return sorted(chosen)


@pytest.mark.parametrize("seed", range(5))
def test_selection_equals_sequential_greedy_when_budget_is_loose(seed):
    rng = np.random.default_rng(seed)
    n = 300
    source, target = rng.integers(0, 120, n), rng.integers(120, 200, n)
    flip = rng.random(n) < 0.3  # containers appear both as sources and as targets
    source[flip], target[flip] = target[flip], source[flip]
    scores = rng.normal(size=n)
    chosen = select_moves(scores, source, target, np.zeros(n, int), np.full(n, 0.01), 1e9, n)
    assert sorted(chosen.tolist()) == greedy_reference(scores, source, target)


def test_behavior_policy_picks_mostly_what_the_heuristic_ranks_high(cfg):
    wh = Warehouse(cfg, 3)
    cands = wh.candidates()
    ranks = np.argsort(np.argsort(-cands.heuristic_scores()))
    scores = BehaviorPolicy(0.5, 0.1)(cands, np.random.default_rng(0))
    top = np.argsort(-scores)[:50]
    assert np.mean(ranks[top] < cands.n * 0.05) > 0.7  # noisy heuristic picks
    assert np.mean(ranks[top] >= cands.n * 0.2) > 0.0  # and some exploration


def test_logs_round_trip_and_schema_errors(cfg, tmp_path):
    folder = tmp_path / "logs"
    run_episode(cfg, 5, BehaviorPolicy(), LogWriter(folder), warmup=heuristic_scores)
    epochs = read_epochs(folder)
    assert len(epochs["epoch"]) == cfg.sim.horizon_epochs
    rows = list(iter_log_batches(folder, batch_rows=500))
    assert len(rows) > 1 and all(len(b["selected"]) <= 500 for b in rows)
    assert sum(b["selected"].sum() for b in rows) == epochs["containers_freed"].sum()

    import pyarrow.parquet as pq

    cand = sorted(folder.glob("candidates-*.parquet"))[0]
    table = pq.read_table(cand)
    pq.write_table(table.drop(["f_units"]), cand)
    with pytest.raises(DataError, match=r"candidates-00000.parquet: missing column 'f_units'"):
        validate_logs(folder)
    pq.write_table(table.set_column(table.schema.get_field_index("f_units"), "f_units",
                                    table["f_units"].cast("string")), cand)  # fmt: skip
    with pytest.raises(DataError, match=r"column 'f_units' has type string, expected float"):
        validate_logs(folder)
    cand.write_text("not parquet")
    with pytest.raises(DataError, match="not a readable Parquet file"):
        validate_logs(folder)
    with pytest.raises(DataError, match="no such log folder"):
        validate_logs(tmp_path / "nowhere")


def test_same_seed_same_episode(cfg):
    a = run_episode(cfg, 9, heuristic_scores)
    b = run_episode(cfg, 9, heuristic_scores)
    assert a.throughput == b.throughput and a.violations == 0


def test_any_seed_builds_and_a_too_small_warehouse_is_named(cfg):
    for seed in range(25):
        wh = Warehouse(cfg, seed)
        held = np.bincount(wh.zone[wh.item_of >= 0], minlength=cfg.layout.zones)
        assert (held <= np.bincount(wh.zone, minlength=cfg.layout.zones)).all()
    cfg.items.demand_units_per_epoch *= 10
    with pytest.raises(FieldrlError, match="too small for its stock policy"):
        Warehouse(cfg, 0)


def test_the_first_day_starts_in_the_replenishment_steady_state(cfg):
    wh = Warehouse(cfg, 4)
    per_day = 24 * 60 / cfg.sim.epoch_minutes
    position = wh.stock() + wh.backlog + wh.pipeline.sum(axis=0)
    assert (position >= wh.rate * per_day * cfg.inventory.reorder_days).all()
    arriving = wh.pipeline.sum(axis=1)
    assert arriving.max() < 4 * arriving.mean()  # spread over the lead time, no burst
