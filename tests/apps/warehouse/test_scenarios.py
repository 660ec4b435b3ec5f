"""Issue 29: scenarios a planner writes (demand shocks, labor calendars, the evaluation
objective), the per-candidate outcome columns of the logs, and the headroom search."""

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from fieldrl.apps.warehouse import headroom
from fieldrl.apps.warehouse.aiql import AIQLTrainer
from fieldrl.apps.warehouse.baselines import BehaviorPolicy, heuristic_scores
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.env import run_episode
from fieldrl.apps.warehouse.logs import LogWriter, load_logged_data, read_epochs
from fieldrl.apps.warehouse.pipeline import episode_throughputs, model_scorer, target_config
from fieldrl.apps.warehouse.sim import Warehouse
from fieldrl.config import ConfigError, load_config
from fieldrl.errors import DataError

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


def tiny(*overrides: str) -> WarehouseConfig:
    return load_config(WarehouseConfig, TINY, list(overrides))


def test_the_default_objective_is_throughput_and_a_travel_penalty_lowers_it():
    plain = run_episode(tiny(), 4, heuristic_scores)
    assert plain.objective == plain.throughput > 0
    penalised = run_episode(tiny("objective.travel_penalty=5"), 4, heuristic_scores)
    walked = sum(e.travel_m for e in penalised.epochs) / 1000
    assert penalised.throughput == plain.throughput  # the penalty changes only the score
    assert penalised.objective == pytest.approx(
        plain.throughput - 5 * walked / penalised.labor_hours
    )
    fast = run_episode(tiny("objective.class_weights=[2.0, 1.0, 0.0]"), 4, heuristic_scores)
    assert fast.objective != fast.throughput


def test_velocity_classes_follow_demand_rank():
    wh = Warehouse(tiny(), 2)
    order = np.argsort(-wh.rate)
    classes = wh.item_class[order]
    assert (np.diff(classes) >= 0).all() and set(classes) == {0, 1, 2}
    assert abs((classes == 0).mean() - 0.2) < 0.01


def test_a_labor_calendar_scales_the_hours_the_budget_and_the_denominator():
    cfg = tiny("labor.calendar=[{start_epoch = 2, epochs = 3, factor = 0.5}]")
    result = run_episode(cfg, 4, heuristic_scores)
    hours = [e.labor_hours for e in result.epochs]
    assert hours == [2.0, 2.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0]
    assert result.labor_hours == sum(hours)
    budget = [e.labor_consolidation for e in result.epochs]
    assert max(budget[2:5]) <= 1.0 * cfg.labor.consolidation_share + 1e-9


def test_a_demand_shock_hits_only_its_items_and_window():
    base = tiny()
    cfg = tiny(
        "items.demand_shock=[{start_epoch = 1, epochs = 2, factor = 4.0, items_share = 0.5}]"
    )
    plain, shocked = Warehouse(base, 3), Warehouse(cfg, 3)
    assert (plain.rate == shocked.rate).all()  # the warehouse draws stay the same
    hit = shocked.shocked[0]
    assert 0.4 < hit.mean() < 0.6
    shocked.epoch = base.sim.warmup_epochs + 1
    assert np.allclose(shocked._demand_rate(), np.where(hit, 4 * plain.rate, plain.rate))
    shocked.epoch = base.sim.warmup_epochs + 3
    assert (shocked._demand_rate() == plain.rate).all()


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("objective.class_weights=[1.0, 2.0]", "one weight per velocity class"),
        ("objective.class_shares=[0.5, 0.3, 0.3]", "sum to 1"),
        ("items.demand_shock=[{start_epoch = 1, factor = 2.0}]", "epochs"),
        ("headroom.rule_grid={speed = [1.0]}", "unknown term 'speed'"),
    ],
)
def test_bad_scenarios_are_one_line_errors(override, words):
    with pytest.raises(ConfigError, match=words):
        tiny(override)


def test_the_transfer_target_keeps_the_users_warehouse():
    cfg = tiny("items.zipf_alpha=1.1", "labor.hours_per_epoch=1.5")
    target = target_config(cfg)
    assert target.items.zipf_alpha == 1.1 and target.labor.hours_per_epoch == 1.5
    assert target.objective == cfg.transfer.target_objective
    assert target.objective != cfg.objective


def _write_logs(cfg: WarehouseConfig, folder: Path, episodes: int = 2) -> Path:
    writer = LogWriter(folder, 0.3, True, outcome_epochs=3)
    for episode in range(episodes):
        run_episode(cfg, 40 + episode, BehaviorPolicy(), writer, episode, heuristic_scores)
    return folder


def test_logs_carry_each_candidates_refill_outcome(tmp_path):
    cfg = tiny()
    folder = _write_logs(cfg, tmp_path / "logs")
    cands = pq.read_table(folder / "candidates-00000.parquet").to_pandas()
    epochs = read_epochs(folder)
    assert (cands.outcome_epochs <= 3).all() and (cands.outcome_epochs >= 1).all()
    last = cands.epoch.max()
    assert (cands.outcome_epochs[cands.epoch == last] == 1).all()  # cut by the day's end
    chosen = cands[cands.selected]
    complete = cands[cands.outcome_epochs == 3]
    refilled = (complete.refill_units > 0).groupby(complete.selected).mean()
    assert refilled[True] > 2 * refilled[False]  # a move's emptied container is refilled
    per_epoch = chosen.groupby("epoch").refill_units.sum()
    logged = dict(zip(epochs["epoch"][epochs["episode"] == 0],
                      epochs["refill_units"][epochs["episode"] == 0], strict=True))  # fmt: skip
    assert all(logged[e] == pytest.approx(v) for e, v in per_epoch.items())
    data = load_logged_data(folder, cfg.aiql, "refill_units")
    known = np.isfinite(data.outcome)
    assert known.any() and not known.all()  # the last epochs' windows are incomplete


def test_old_logs_without_outcomes_load_and_name_what_they_lack(tmp_path):
    cfg = tiny()
    folder = _write_logs(cfg, tmp_path / "logs", episodes=1)
    for path in folder.glob("candidates-*.parquet"):  # as written before issue 29
        pq.write_table(pq.read_table(path).drop(["refill_units", "outcome_epochs"]), path)
    for path in folder.glob("epochs-*.parquet"):
        pq.write_table(pq.read_table(path).drop(["refill_units"]), path)
    with pytest.raises(DataError, match="no 'refill_units' column.*aiql.reward=liters_freed"):
        load_logged_data(folder, cfg.aiql, cfg.aiql.reward)  # the default reward
    data = load_logged_data(folder, cfg.aiql, "liters_freed")
    assert data.outcome is None
    AIQLTrainer(data, cfg.aiql.model_copy(update={"outcome_weight": 0.0}))
    with pytest.raises(DataError, match="refill_units, outcome_epochs.*outcome_weight=0"):
        AIQLTrainer(data, cfg.aiql)


def test_headroom_search_beats_the_heuristic_on_validation_and_is_cached(tmp_path, monkeypatch):
    cfg = tiny(
        "headroom.population=4", "headroom.elite=2", "headroom.generations=2",
        "eval.validation_seeds=[900, 901]",
        'headroom.rule_grid={liters_per_labor_minute = [0.0, 1.0], slow_mover = [0.0, 1.0]}',
    )  # fmt: skip
    result = headroom.search(cfg, tmp_path)
    assert result["rules_tried"] == 3
    assert result["rule"]["validation"] >= result["validation_heuristic"] - 1e-9
    best = [h["best"] for h in result["history"]]
    assert best == sorted(best) and best[0] >= result["rule"]["validation"] - 1e-9
    scorers = headroom.scorers_from(result)
    again = headroom.validation_objective(cfg, [scorers["policy_search"]], [900, 901])
    assert again.mean() == pytest.approx(result["linear"]["validation"])

    def fail(*args, **kwargs):
        raise AssertionError("a cached search ran again")

    monkeypatch.setattr(headroom, "validation_objective", fail)
    assert headroom.search(cfg, tmp_path) == result
    other = cfg.model_copy(update={"labor": cfg.labor.model_copy(update={"hours_per_epoch": 3.0})})
    with pytest.raises(AssertionError, match="ran again"):
        headroom.search(other, tmp_path)  # another simulator setting is another search


def test_the_shipped_peak_season_scenario_runs_as_described():
    path = Path(__file__).parents[3] / "data" / "warehouse" / "peak_season.toml"
    cfg = load_config(WarehouseConfig, path, presets=TINY.parent)
    assert cfg.items.demand_shock[0].factor == 2.5 and cfg.labor.calendar[0].factor == 0.6
    result = run_episode(cfg, 5, heuristic_scores)
    hours = [e.labor_hours for e in result.epochs]
    assert hours[11] == cfg.labor.hours_per_epoch and hours[12] == 0.6 * hours[11]
    assert result.violations == 0
    free = run_episode(cfg.model_copy(update={"objective": cfg.objective.model_copy(
        update={"travel_penalty": 0.0})}), 5, heuristic_scores)  # fmt: skip
    walked = sum(e.travel_m for e in result.epochs) / 1000
    assert result.objective == pytest.approx(free.objective - 2.0 * walked / result.labor_hours)
    assert free.objective != free.throughput  # fast movers weigh double, slow ones half
    plain = run_episode(load_config(WarehouseConfig, TINY.parent / "quick.toml"), 5,
                        heuristic_scores)  # fmt: skip
    shocked = sum(e.units_picked + e.units_lost for e in result.epochs[4:12])
    usual = sum(e.units_picked + e.units_lost for e in plain.epochs[4:12])
    assert shocked > 1.2 * usual  # the promotion's demand arrives


@pytest.mark.slow
def test_evaluation_over_ray_workers_matches_the_serial_one(tmp_path):
    pytest.importorskip("ray")
    cfg = tiny()
    folder = _write_logs(cfg, tmp_path / "logs", episodes=1)
    model = AIQLTrainer(load_logged_data(folder, cfg.aiql, cfg.aiql.reward), cfg.aiql).model
    scorers = {"heuristic": heuristic_scores, "aiql": model_scorer(model.eval())}
    serial = episode_throughputs(cfg, scorers, [5, 6])
    spread = episode_throughputs(cfg, scorers, [5, 6], workers=2)
    for name, (values, violations) in serial.items():
        assert spread[name][0].tolist() == values.tolist() and spread[name][1] == violations
