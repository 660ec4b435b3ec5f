"""Logs in, policies out: generate logs, train AIQL into a run folder, load it back,
evaluate any scorer on the true objective with common random numbers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fieldrl.apps.warehouse.aiql import AIQL, load_logged_data, train_aiql
from fieldrl.apps.warehouse.baselines import BehaviorPolicy, heuristic_scores
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.env import Scorer, run_episode
from fieldrl.apps.warehouse.logs import LogWriter
from fieldrl.benchmark import mean_ci95
from fieldrl.config import config_hash
from fieldrl.errors import DataError
from fieldrl.runs import Run, latest_checkpoint, progress

__all__ = ["evaluate_scorers", "generate_logs", "load_aiql", "train_from_logs"]


def generate_logs(
    cfg: WarehouseConfig,
    folder: Path,
    episodes: int,
    first_seed: int,
    true_outcome: bool = False,
) -> Path:
    """Run the noisy behavior policy for ``episodes`` horizons and log them (one part each)."""
    log = cfg.logging
    writer = LogWriter(folder, log.unselected_rate, true_outcome, seed=first_seed)
    behavior = BehaviorPolicy(log.gumbel_scale, log.epsilon)
    with progress(episodes, "generating logs") as advance:
        for episode in range(episodes):
            run_episode(cfg, first_seed + episode, behavior, writer, episode, heuristic_scores)
            advance()
    return Path(folder)


def train_from_logs(cfg: WarehouseConfig, run: Run, logs: Path, reward: str | None = None) -> AIQL:
    """AIQL on a log folder; the model and its spec are checkpointed in the run."""
    data = load_logged_data(logs, cfg.aiql, reward or cfg.aiql.reward, cfg.experiment.seed)
    with progress(cfg.aiql.steps, "AIQL") as advance:
        model = train_aiql(data, cfg.aiql, run.log, advance, cfg.experiment.seed)
    run.checkpoints.save(
        cfg.aiql.steps,
        {"aiql": model.state_dict()},
        {"aiql": cfg.aiql.model_dump(), "logs": str(logs), "config_hash": config_hash(cfg)},
    )
    return model


def load_aiql(run_dir: str | Path) -> AIQL:
    """The AIQL model of a run folder's newest checkpoint."""
    from fieldrl.apps.warehouse.config import AIQLConfig

    ckpt = latest_checkpoint(run_dir)
    try:
        model = AIQL(AIQLConfig(**ckpt.metadata["aiql"]))
        model.load_state_dict(ckpt.state["aiql"])
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DataError(f"{ckpt.path}: not a warehouse AIQL checkpoint ({exc})") from None
    return model.eval()


def evaluate_scorers(
    cfg: WarehouseConfig, scorers: dict[str, Scorer], seeds: Sequence[int]
) -> list[dict[str, float | str]]:
    """Every scorer on the same seeds (common random numbers): throughput with a 95% CI,
    the gain over the noise-free heuristic (paired per seed), and constraint violations."""
    per_seed: dict[str, list[float]] = {}
    violations: dict[str, int] = {}
    with progress(len(scorers) * len(seeds), "evaluating") as advance:
        for name, scorer in {"heuristic": heuristic_scores, **scorers}.items():
            results = []
            for seed in seeds:
                results.append(run_episode(cfg, seed, scorer, warmup=heuristic_scores))
                advance()
            per_seed[name] = [r.throughput for r in results]
            violations[name] = sum(r.violations for r in results)
    base = np.asarray(per_seed["heuristic"])
    rows = []
    for name, values in per_seed.items():
        mean, low, high = mean_ci95(values)
        gain = float(np.mean(np.asarray(values) / base - 1.0))
        rows.append({"method": name, "throughput": mean, "ci95_low": low, "ci95_high": high,
                     "throughput_gain_vs_heuristic": gain,
                     "constraint_violations": violations[name]})  # fmt: skip
    return rows
