from pathlib import Path

import numpy as np

from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.pipeline import (
    evaluate_scorers,
    generate_logs,
    load_aiql,
    train_from_logs,
)
from fieldrl.config import load_config
from fieldrl.runs import Run

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


def test_logs_to_run_to_evaluation(tmp_path):
    cfg = load_config(WarehouseConfig, TINY)
    cfg.experiment.loggers = ["jsonl"]
    cfg.aiql.steps, cfg.aiql.batch_epochs, cfg.aiql.max_unselected = 20, 4, 64
    logs = generate_logs(cfg, tmp_path / "logs", episodes=2, first_seed=100)
    with Run.create("warehouse", cfg, root=tmp_path / "runs") as run:
        train_from_logs(cfg, run, [logs])
    model, _ = load_aiql(run.dir)
    rows = evaluate_scorers(cfg, {"aiql": lambda c, rng: model.score_candidates(c)}, [7, 8])
    by = {r["method"]: r for r in rows}
    assert set(by) == {"heuristic", "aiql"}
    assert by["heuristic"]["throughput_gain_vs_heuristic"] == 0.0
    assert all(r["constraint_violations"] == 0 for r in rows)
    assert all(np.isfinite(r["throughput"]) and r["ci95_low"] <= r["throughput"] for r in rows)
