from pathlib import Path

import numpy as np
import pytest
import torch

from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.logs import STATE_DIM
from fieldrl.apps.warehouse.pipeline import (
    evaluate_scorers,
    generate_logs,
    load,
    open_aiql,
    train_from_logs,
)
from fieldrl.apps.warehouse.sim import Warehouse
from fieldrl.checkpoint import CheckpointManager
from fieldrl.config import load_config
from fieldrl.errors import DataError
from fieldrl.runs import Run, open_run

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


def test_logs_to_run_to_evaluation(tmp_path):
    cfg = load_config(WarehouseConfig, TINY)
    cfg.experiment.loggers = ["jsonl"]
    cfg.aiql.steps, cfg.aiql.batch_epochs, cfg.aiql.max_unselected = 20, 4, 64
    logs = generate_logs(cfg, tmp_path / "logs", episodes=2, first_seed=100)
    with Run.create(cfg, root=tmp_path / "runs") as run:
        train_from_logs(cfg, run, [logs])
    model = open_aiql(run.dir).trained
    rows = evaluate_scorers(cfg, {"aiql": lambda c, rng: model.score_candidates(c)}, [7, 8])
    by = {r["method"]: r for r in rows}
    assert set(by) == {"heuristic", "aiql"}
    assert by["heuristic"]["throughput_gain_vs_heuristic"] == 0.0
    assert all(r["constraint_violations"] == 0 for r in rows)
    assert all(np.isfinite(r["throughput"]) and r["ci95_low"] <= r["throughput"] for r in rows)


def test_a_run_from_before_the_outcome_head_loads_with_no_uplift(tmp_path):
    cfg = load_config(WarehouseConfig, TINY, ["aiql.steps=10"])
    cfg.experiment.loggers = ["jsonl"]
    logs = generate_logs(cfg, tmp_path / "logs", episodes=1, first_seed=100)
    with Run.create(cfg, root=tmp_path / "runs") as run:
        train_from_logs(cfg, run, [logs])
    current = open_aiql(run.dir).trained
    old = open_run(run.dir, WarehouseConfig)
    weights = old.state["model"]
    for key in [k for k in weights if k.startswith("outcome")]:  # as saved before issue 29
        del weights[key]
    model = load(old)
    cands = Warehouse(cfg, 7).candidates()
    x, state = torch.from_numpy(cands.features), torch.zeros(STATE_DIM)
    assert current.uplift(x, state).abs().max() > 0
    assert torch.equal(model.uplift(x, state), torch.zeros(cands.n))
    assert np.array_equal(model.score_candidates(cands), current.score_candidates(cands))
    del weights[next(iter(weights))]  # any other key missing: not a warehouse checkpoint
    with pytest.raises(DataError, match="not a warehouse AIQL checkpoint"):
        load(old)


def test_training_killed_mid_way_resumes_to_the_same_model(tmp_path, monkeypatch):
    cfg = load_config(WarehouseConfig, TINY, ["aiql.steps=40", "experiment.checkpoint_every=1"])
    cfg.experiment.loggers = ["jsonl"]
    logs = generate_logs(cfg, tmp_path / "logs", episodes=2, first_seed=100)
    with Run.create(cfg, root=tmp_path / "straight") as run:
        straight = train_from_logs(cfg, run, [logs])

    original = CheckpointManager.save

    def save_then_die(self, step, *args, **kwargs):
        original(self, step, *args, **kwargs)
        if step == 20:
            raise KeyboardInterrupt

    monkeypatch.setattr(CheckpointManager, "save", save_then_die)
    run = Run.create(cfg, root=tmp_path / "killed")
    with pytest.raises(KeyboardInterrupt), run:
        train_from_logs(cfg, run, [logs])
    ckpt = open_aiql(run.dir).checkpoint
    assert ckpt.step == 20 and not ckpt.metadata["finished"]
    monkeypatch.setattr(CheckpointManager, "save", original)
    again = Run.resume(run.dir, WarehouseConfig)
    with again:
        resumed = train_from_logs(again.config, again, [logs])
    for key, value in straight.state_dict().items():
        assert torch.equal(value, resumed.state_dict()[key]), key
    final = open_aiql(run.dir).checkpoint
    assert final.step == 40 and final.metadata["finished"]


def test_interrupted_log_generation_resumes_to_the_same_logs(tmp_path):
    import pyarrow.parquet as pq

    cfg = load_config(WarehouseConfig, TINY)
    straight = generate_logs(cfg, tmp_path / "straight", episodes=3, first_seed=100)
    resumed = generate_logs(cfg, tmp_path / "resumed", episodes=1, first_seed=100)
    (resumed / "candidates-00000.parquet").rename(resumed / "tmp")  # part 0 half-written
    (resumed / "tmp").rename(resumed / "candidates-00000.parquet.tmp")
    generate_logs(cfg, resumed, episodes=3, first_seed=100)
    for kind in ("epochs", "candidates"):
        for part in range(3):
            name = f"{kind}-{part:05d}.parquet"
            assert pq.read_table(straight / name).equals(pq.read_table(resumed / name)), name


def test_the_config_names_every_rule_term_headroom_computes():
    from fieldrl.apps.warehouse import config, headroom

    assert tuple(headroom.RULE_TERMS) == config.RULE_TERMS
