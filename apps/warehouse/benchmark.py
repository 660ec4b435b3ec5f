"""The warehouse benchmark: every method on the same held-out warehouses, on the
evaluation objective (``[objective]``; units per labor hour by default), with common
random numbers, the episodes spread over ``--workers``.

1. Single domain: AIQL, behavior cloning and IQL with a pooled critic, trained on the
   behavior logs (several training seeds), against the noise-free heuristic, the logger
   and random selection, and the two simulator references of the headroom (the best
   interpretable rule and the policy search, chosen on the validation days).
   ``headroom.sensitivity`` adds the headroom of other simulator settings.
2. Transfer: the same warehouse under ``transfer.target_objective`` (logged as the target
   reward), optionally with other dynamics (``transfer.target_overrides``); A²IQL against
   source-only, target-only, data pooling and off-dynamics filtering, at each
   source:target ratio, and the source's best rule there.
3. Latency: scoring + selection of 50,000 candidates on one core.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.app import Resources
from fieldrl.apps.warehouse import headroom, report
from fieldrl.apps.warehouse.a2iql import adapt
from fieldrl.apps.warehouse.aiql import AIQL, AIQLTrainer
from fieldrl.apps.warehouse.baselines import (
    BehaviorPolicy,
    filter_like_target,
    heuristic_scores,
    pooled_data,
    random_scores,
)
from fieldrl.apps.warehouse.config import AIQLConfig, WarehouseConfig
from fieldrl.apps.warehouse.env import select
from fieldrl.apps.warehouse.logs import LoggedData
from fieldrl.apps.warehouse.pipeline import (
    episode_throughputs,
    generate_logs,
    load_all,
    model_scorer,
    summarise,
    target_config,
)
from fieldrl.apps.warehouse.sim import Candidates, Warehouse
from fieldrl.benchmark import Benchmark
from fieldrl.config import derive, load_config
from fieldrl.distributed import ray_session
from fieldrl.seeding import derive_seed
from fieldrl.training import fit

__all__ = ["benchmark", "rank_latency"]

TRANSFER_METHODS = ("a2iql", "source_only", "target_only", "pooling", "off_dynamics_filter")


def _train(data: LoggedData, cfg: AIQLConfig, seed: int) -> AIQL:
    trainer = fit(lambda: AIQLTrainer(data, cfg, seed), None, seed=seed,
                  description=f"training (seed {seed})")  # fmt: skip
    return trainer.model.eval()


REFERENCES = ("best_rule", "policy_search")  # use the simulator: upper references, not methods


def single_domain(
    cfg: WarehouseConfig, source: LoggedData, references: dict[str, Any], resources: Resources
) -> tuple[list[dict[str, Any]], dict[str, AIQL]]:
    """Rows for the heuristic, the logger, random selection, the simulator ``references``
    and the three learned methods; the AIQL models."""
    variants = {
        "aiql": cfg.aiql,
        "behavior_cloning": derive(cfg.aiql, beta=0.0, candidate_advantage=0.0),
        "iql_pooled_critic": derive(cfg.aiql, critic_input="mean_pool"),
    }
    models = {
        f"{name}/{seed}": _train(source, variant, seed)
        for name, variant in variants.items()
        for seed in cfg.eval.train_seeds
    }
    behavior = BehaviorPolicy(cfg.logging.gumbel_scale, cfg.logging.epsilon)
    scorers = {"heuristic": heuristic_scores, "behavior_policy": behavior,
               "random": random_scores, **references}  # fmt: skip
    scorers |= {key: model_scorer(m) for key, m in models.items()}
    results = episode_throughputs(
        cfg, scorers, cfg.eval.seeds, resources.workers, resources.address
    )
    fixed = ["heuristic", "behavior_policy", "random", *references]
    rows = _rows(results, [*fixed, *variants], cfg.eval.train_seeds)
    aiql = {seed: models[f"aiql/{seed}"] for seed in cfg.eval.train_seeds}
    return rows, aiql


def _rows(
    results: dict[str, tuple[np.ndarray, int]], names: list[str], train_seeds: list[int]
) -> list[dict[str, Any]]:
    base = results["heuristic"][0]
    rows = []
    for name in names:
        keys = [name] if name in results else [f"{name}/{s}" for s in train_seeds]
        values = np.stack([results[k][0] for k in keys])
        row = summarise(name, values, base, sum(results[k][1] for k in keys))
        rows.append({**row, "uses_simulator": name in REFERENCES})
    return rows


def sensitivity_configs(cfg: WarehouseConfig) -> dict[str, WarehouseConfig]:
    """Each ``headroom.sensitivity`` setting's warehouse: the benchmarked one with its
    overrides, searched for ``headroom.sensitivity_generations`` (a bad override is a
    config error naming the setting, raised before anything runs)."""
    out = {}
    for label, overrides in cfg.headroom.sensitivity.items():
        data = cfg.model_dump(mode="json")
        data["headroom"]["generations"] = cfg.headroom.sensitivity_generations
        out[label] = load_config(WarehouseConfig, None, overrides, data=data,
                                 origin=f"headroom.sensitivity.{label}")  # fmt: skip
    return out


def sensitivity(
    cfg: WarehouseConfig,
    settings: dict[str, WarehouseConfig],
    out: Path,
    workers: int,
    address: str | None,
) -> list[dict[str, Any]]:
    """The headroom of each setting (:func:`sensitivity_configs`): its own rules and
    policy search on the validation days, then heuristic, random, best rule and policy
    search on the held-out days."""
    rows = []
    for label, scfg in settings.items():
        overrides = cfg.headroom.sensitivity[label]
        found = headroom.search(scfg, out / "headroom", workers, address)
        scorers = {"heuristic": heuristic_scores, "random": random_scores,
                   **headroom.scorers_from(found)}  # fmt: skip
        results = episode_throughputs(scfg, scorers, cfg.eval.seeds, workers, address)
        base = results["heuristic"][0]
        for name, (per_seed, violations) in results.items():
            row = summarise(name, per_seed, base, violations)
            rows.append({**row, "setting": label, "overrides": " ".join(overrides),
                         "best_rule": found["rule"]["describe"]})  # fmt: skip
    return rows


def transfer(
    cfg: WarehouseConfig,
    source: LoggedData,
    source_models: dict[int, AIQL],
    out: Path,
    resources: Resources,
    source_rule: Any,
) -> list[dict[str, Any]]:
    """Transfer rows: every method at every ratio, evaluated in the target domain, and
    the source domain's best rule there (does the target objective change which moves
    are good?)."""
    tcfg = target_config(cfg)
    sizes = {r: max(2, round(source.n_epochs / r)) for r in cfg.transfer.ratios}
    episodes = int(np.ceil(max(sizes.values()) / cfg.sim.horizon_epochs))
    first = derive_seed(cfg.data.first_seed, "target_logs")  # apart from the source logs
    logs = generate_logs(tcfg, out / "logs" / "target", episodes, first, true_outcome=True)
    target_all = load_all([logs], tcfg, cfg.transfer.target_reward)
    scorers: dict[str, Any] = {"heuristic": heuristic_scores, "source_best_rule": source_rule}
    scorers |= {f"source_only/{s}": model_scorer(m) for s, m in source_models.items()}
    for ratio, n in sizes.items():
        target = target_all.subset(np.arange(n))
        for seed, source_model in source_models.items():
            adapted = adapt(source_model, source, target, cfg.aiql, cfg.a2iql, seed)
            scorers[f"a2iql@{ratio}/{seed}"] = model_scorer(adapted)
            data = {
                "target_only": target,
                "pooling": pooled_data(source, target),
                "off_dynamics_filter": filter_like_target(source, target, cfg.transfer.filter_keep),
            }
            for name, d in data.items():
                scorers[f"{name}@{ratio}/{seed}"] = model_scorer(_train(d, cfg.aiql, seed))
    results = episode_throughputs(
        tcfg, scorers, cfg.eval.seeds, resources.workers, resources.address
    )
    base = results["heuristic"][0]
    rows = []
    for ratio, n in sizes.items():
        for name in TRANSFER_METHODS:
            prefix = "source_only" if name == "source_only" else f"{name}@{ratio}"
            keys = [f"{prefix}/{s}" for s in source_models]
            values = np.stack([results[k][0] for k in keys])
            row = summarise(name, values, base, sum(results[k][1] for k in keys))
            rows.append({**row, "ratio": f"{ratio}:1", "target_epochs": n,
                         "source_epochs": source.n_epochs})  # fmt: skip
    for name in ("heuristic", "source_best_rule"):
        row = summarise(name, results[name][0], base, results[name][1])
        rows.append({**row, "ratio": "target domain", "uses_simulator": name != "heuristic"})
    return rows


def rank_latency(cfg: WarehouseConfig, model: AIQL, n: int = 50_000, repeats: int = 30) -> dict:
    """Scoring + selection of ``n`` candidates on one thread: p50 and p99 in ms."""
    cands = Warehouse(cfg, cfg.eval.seeds[0]).candidates()
    rows = np.resize(np.arange(cands.n), n)  # repeat rows with fresh container ids
    copy = rows // max(cands.n, 1)
    offset = copy * (int(max(cands.source.max(), cands.target.max())) + 1)
    big = Candidates(
        source=cands.source[rows] + offset, target=cands.target[rows] + offset,
        item=cands.item[rows], zone=cands.zone[rows], labor_hours=cands.labor_hours[rows],
        features=cands.features[rows], context=cands.context,
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for _ in range(repeats + 3):
            start = time.perf_counter()
            select(cfg, big, model.score_candidates(big))
            times.append((time.perf_counter() - start) * 1000)
    finally:
        torch.set_num_threads(threads)
    times = np.array(times[3:])  # the first calls warm caches
    return {"rank_50k_p50_ms": float(np.percentile(times, 50)),
            "rank_50k_p99_ms": float(np.percentile(times, 99)), "rank_candidates": n}  # fmt: skip


def benchmark(cfg: WarehouseConfig, *, out: Path, quick: bool, resources: Resources) -> Path:
    """Logs, training, transfer and evaluation in one run: ``benchmark.json`` (one Ray
    session for every simulation spread over ``--workers``)."""
    settings = sensitivity_configs(cfg)
    workers, address = resources.workers, resources.address
    with ray_session(workers, address) if workers > 1 or address else nullcontext():
        return _benchmark(cfg, settings, out, quick, resources)


def _benchmark(
    cfg: WarehouseConfig,
    settings: dict[str, WarehouseConfig],
    out: Path,
    quick: bool,
    resources: Resources,
) -> Path:
    bench = Benchmark(cfg, out, quick=quick, workers=resources.workers)
    with bench.phase("logs"):
        logs = generate_logs(cfg, out / "logs" / "source", cfg.data.episodes, cfg.data.first_seed)
        source = load_all([logs], cfg, cfg.aiql.reward)
    with bench.phase("headroom"):
        found = headroom.search(cfg, out / "headroom", resources.workers, resources.address)
        sensitivity_rows = sensitivity(cfg, settings, out, resources.workers, resources.address)
    with bench.phase("single_domain"):
        references = headroom.scorers_from(found)
        rows, source_models = single_domain(cfg, source, references, resources)
    model = source_models[cfg.eval.train_seeds[0]]
    latency = rank_latency(cfg, model)
    with bench.phase("transfer"):
        transfer_rows = transfer(
            cfg, source, source_models, out, resources, references["best_rule"]
        )
    seed = cfg.eval.seeds[0]
    data = {
        "latency": latency,
        "source_epochs": source.n_epochs,
        "day": report.day_series(cfg, {"heuristic": heuristic_scores, "AIQL": model_scorer(model)},
                                 seed),
        "scores": report.score_sample(cfg, model, seed),
        "headroom": {k: found[k] for k in ("rule", "history", "rules_tried", "episodes",
                                           "validation_heuristic")},
        "objective": cfg.objective.describe(),
        "target_objective": cfg.transfer.target_objective.describe(),
    }  # fmt: skip
    targets = report.targets(rows, transfer_rows, latency)
    rows = [{"section": "single_domain", **r} for r in rows]
    rows += [{"section": "transfer", **r} for r in transfer_rows]
    rows += [{"section": "sensitivity", **r} for r in sensitivity_rows]
    return bench.write(rows, seeds=cfg.eval.seeds, targets=targets,
                       train_seeds=cfg.eval.train_seeds, data=data)  # fmt: skip
