"""Logs in, policies out: generate logs, train AIQL into a run folder, load it back,
adapt it with A²IQL, evaluate any scorer on the true objective with common random numbers."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from fieldrl.app import Resources
from fieldrl.apps.warehouse.a2iql import adapt
from fieldrl.apps.warehouse.aiql import AIQL, AIQLTrainer
from fieldrl.apps.warehouse.baselines import BehaviorPolicy, heuristic_scores
from fieldrl.apps.warehouse.config import AIQLConfig, WarehouseConfig
from fieldrl.apps.warehouse.env import Scorer, run_episode
from fieldrl.apps.warehouse.logs import LoggedData, LogWriter, load_logged_data, pool
from fieldrl.atomic import atomic_write_json
from fieldrl.benchmark import mean_ci95
from fieldrl.config import load_config
from fieldrl.distributed import parallel_map
from fieldrl.errors import DataError
from fieldrl.runs import LoadedRun, Run, open_run, progress
from fieldrl.training import fit

__all__ = [
    "adapt_run",
    "evaluate",
    "episode_throughputs",
    "evaluate_scorers",
    "generate_logs",
    "load",
    "open_aiql",
    "summarise",
    "model_scorer",
    "target_config",
    "train",
    "train_from_logs",
]


def generate_logs(
    cfg: WarehouseConfig,
    folder: Path,
    episodes: int,
    first_seed: int,
    true_outcome: bool = False,
) -> Path:
    """Run the noisy behavior policy for ``episodes`` days and log them, part ``i`` for day
    ``first_seed + i``; parts already complete in ``folder`` are kept (a resumed run)."""
    log = cfg.logging
    writer = LogWriter(
        folder,
        log.unselected_rate,
        true_outcome,
        seed=first_seed,
        outcome_epochs=log.outcome_epochs,
    )
    behavior = BehaviorPolicy(log.gumbel_scale, log.epsilon)
    with progress(episodes, "generating logs") as advance:
        for episode in range(episodes):
            if not writer.has_part(episode):
                writer.start_part(episode)
                run_episode(cfg, first_seed + episode, behavior, writer, episode, heuristic_scores)
            advance()
    return Path(folder)


def train_from_logs(
    cfg: WarehouseConfig, run: Run, logs: Sequence[Path], reward: str | None = None
) -> AIQL:
    """AIQL on log folders, checkpointed in the run by the core loop (a killed run
    resumes where it stopped)."""
    data = load_all(logs, cfg, reward or cfg.aiql.reward)
    trainer = fit(
        lambda: AIQLTrainer(data, cfg.aiql, cfg.experiment.seed), run,
        seed=cfg.experiment.seed, description="AIQL",
        metadata={"aiql": cfg.aiql.model_dump(), "logs": [str(p) for p in logs]},
    )  # fmt: skip
    return trainer.model.eval()


def load_all(logs: Sequence[Path], cfg: WarehouseConfig, reward: str) -> LoggedData:
    """Several log folders as one data set."""
    if not logs:
        raise DataError("no log folders given")
    parts = [load_logged_data(p, cfg.aiql, reward, cfg.experiment.seed) for p in logs]
    return parts[0] if len(parts) == 1 else pool(*parts)


def model_scorer(model: AIQL) -> Scorer:
    return lambda cands, rng: model.score_candidates(cands)


def train(cfg: WarehouseConfig, *, run: Run, resources: Resources) -> dict[str, float]:
    """AIQL on ``data.logs`` (or on freshly generated behavior logs), then the learned
    scorer against the heuristic on the validation days."""
    logs = [Path(p) for p in cfg.data.logs]
    if not logs:
        logs = [generate_logs(cfg, run.dir / "logs", cfg.data.episodes, cfg.data.first_seed)]
    model = train_from_logs(cfg, run, logs)
    rows = evaluate_scorers(cfg, {"aiql": model_scorer(model)}, cfg.eval.validation_seeds)
    aiql = next(r for r in rows if r["method"] == "aiql")
    return {
        "validation_throughput": float(aiql["throughput"]),
        "validation_gain_vs_heuristic": float(aiql["throughput_gain_vs_heuristic"]),
    }


def evaluate(
    cfg: WarehouseConfig, *, run: LoadedRun, resources: Resources, out: Path
) -> dict[str, float]:
    """The run's scorer against the heuristic on every evaluation warehouse."""
    rows = evaluate_scorers(cfg, {"aiql": model_scorer(run.trained)}, cfg.eval.seeds)
    metrics: dict[str, float] = {"checkpoint_step": run.step}
    for row in rows:
        keys = ["throughput", "ci95_low", "ci95_high"]
        if row["method"] != "heuristic":  # the heuristic's gain over itself is 0 by definition
            keys.insert(1, "throughput_gain_vs_heuristic")
        for key in keys:
            metrics[f"{row['method']}_{key}"] = float(row[key])
        metrics[f"{row['method']}_constraint_violations"] = int(row["constraint_violations"])
    atomic_write_json(out / "eval.json", metrics)
    return metrics


def target_config(cfg: WarehouseConfig) -> WarehouseConfig:
    """The target domain: the user's config with ``transfer.target_objective`` as its
    objective and ``transfer.target_overrides`` applied on top."""
    data = cfg.model_dump(mode="json")
    data["objective"] = data["transfer"]["target_objective"]
    return load_config(
        WarehouseConfig, None, cfg.transfer.target_overrides, data=data, origin="transfer"
    )


def adapt_run(
    cfg: WarehouseConfig, run: Run, source_run: Path, target_logs: Sequence[Path]
) -> AIQL:
    """A²IQL: the source run's AIQL adapted to ``target_logs``' ``transfer.target_reward``."""
    opened = open_aiql(source_run)
    source_model, saved = opened.trained, opened.checkpoint.metadata
    source_logs = [Path(p) for p in saved.get("logs", [])]
    missing = [p for p in source_logs if not p.is_dir()]
    if not source_logs or missing:
        raise DataError(
            f"{source_run}: A²IQL re-reads the source logs, and "
            + (f"{missing[0]} is gone" if missing else "the run records none")
        )
    source = load_all(source_logs, cfg, cfg.aiql.reward)
    target = load_all(target_logs, cfg, cfg.transfer.target_reward)
    metadata = {
        "aiql": saved["aiql"],
        "logs": [str(p) for p in source_logs],
        "target_logs": [str(p) for p in target_logs],
        "source_run": str(source_run),
    }
    return adapt(source_model, source, target, cfg.aiql, cfg.a2iql, cfg.experiment.seed,
                 run, metadata)  # fmt: skip


def open_aiql(path: str | Path) -> LoadedRun[WarehouseConfig]:
    """A warehouse run folder opened with :func:`load` as its loader (``run.trained``)."""
    return open_run(path, WarehouseConfig, loader=load)


def load(run: LoadedRun) -> AIQL:
    """``App.load``: the AIQL model of the run's final checkpoint, in evaluation mode."""
    ckpt = run.checkpoint
    try:
        model = AIQL(AIQLConfig(**ckpt.metadata["aiql"]))
        # runs trained before the outcome head existed lack it (it only trains the actor):
        # a zeroed head predicts no uplift, so adapting such a run adds none
        missing, unexpected = model.load_state_dict(run.state["model"], strict=False)
        if unexpected or any(not k.startswith("outcome") for k in missing):
            raise RuntimeError(f"missing {missing}, unexpected {unexpected}")
        if missing:
            torch.nn.init.zeros_(model.outcome[-1].weight)
            torch.nn.init.zeros_(model.outcome[-1].bias)
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DataError(f"{ckpt.path}: not a warehouse AIQL checkpoint ({exc})") from None
    return model.eval()


def _episode(job: tuple[WarehouseConfig, Scorer, int]) -> tuple[float, int]:
    cfg, scorer, seed = job
    result = run_episode(cfg, seed, scorer, warmup=heuristic_scores)
    return result.objective, result.violations


def episode_throughputs(
    cfg: WarehouseConfig,
    scorers: dict[str, Scorer],
    seeds: Sequence[int],
    workers: int = 1,
    address: str | None = None,
    description: str | None = "evaluating",
) -> dict[str, tuple[np.ndarray, int]]:
    """Each scorer's objective per seed (``objective``: plain throughput by default; common
    random numbers: every scorer meets the same days) and its violations, the episodes
    spread over ``workers``."""
    jobs = [(cfg, scorer, seed) for scorer in scorers.values() for seed in seeds]
    results = parallel_map(_episode, jobs, workers, address, description)
    n, out = len(seeds), {}
    for k, name in enumerate(scorers):
        part = results[k * n : (k + 1) * n]
        out[name] = (np.array([r[0] for r in part]), sum(r[1] for r in part))
    return out


def summarise(
    name: str, per_seed: np.ndarray, heuristic: np.ndarray, violations: int
) -> dict[str, float | str | int]:
    """A benchmark row from throughputs [train seeds, eval seeds] (or [eval seeds])."""
    per_seed = np.atleast_2d(per_seed)
    mean_over_training = per_seed.mean(0)
    mean, low, high = mean_ci95(mean_over_training)
    per_training_seed = per_seed.mean(1)
    return {
        "method": name,
        "throughput": mean,
        "throughput_gain_vs_heuristic": float(np.mean(mean_over_training / heuristic - 1.0)),
        "ci95_low": low,
        "ci95_high": high,
        "constraint_violations": int(violations),
        "std_across_seeds": float(per_training_seed.std(ddof=1)) if per_seed.shape[0] > 1 else 0.0,
        "training_seeds": int(per_seed.shape[0]),
    }


def evaluate_scorers(
    cfg: WarehouseConfig, scorers: dict[str, Scorer], seeds: Sequence[int]
) -> list[dict[str, float | str | int]]:
    """Every scorer and the noise-free heuristic on the same seeds: throughput with a 95%
    CI, the gain over the heuristic (paired per seed), and constraint violations."""
    results = episode_throughputs(cfg, {"heuristic": heuristic_scores, **scorers}, seeds)
    base = results["heuristic"][0]
    return [summarise(name, values, base, bad) for name, (values, bad) in results.items()]
