"""The battles benchmark, in one run:

1. **Scaling**: agent-steps/s and peak memory of the battlefield alone and with both teams'
   actors, at each total agent count, each in a fresh process; MAgent2 battle_v4 with
   random actions as the reference point.
2. **Analytic games**: MF-MAPPO self-play on each game at each N (the ``game`` preset's
   recipe); exploitability and TV distance to the exact equilibrium against training
   iterations, the final figures against the finite-population noise floor.
3. **Cross-play**: every method trained on the configured battlefield (each training
   seed), evaluated at ``eval.agents_per_team`` on the evaluation seeds against the
   scripted and random teams and against MF-MAPPO, from both sides.
4. **Partial observability**: MF-MAPPO trained on a noisy, delayed opponent map with each
   gradient-penalty weight lambda, then played against the fully observing MF-MAPPO under
   every (noise, delay) of the sweep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.app import Resources
from fieldrl.apps.battles.baselines import SCRIPTED
from fieldrl.apps.battles.config import BattlesConfig
from fieldrl.apps.battles.pipeline import (
    SidedPolicy,
    battles,
    exploitability_curve,
    game_jobs,
    observation,
    open_teams,
    opponent_policy,
    pool,
    train,
)
from fieldrl.apps.battles.scaling import measure_in_subprocess
from fieldrl.benchmark import Benchmark, Target
from fieldrl.config import derive
from fieldrl.distributed import parallel_map
from fieldrl.errors import FieldrlError
from fieldrl.runs import Run, progress

__all__ = ["benchmark"]


def scaling_rows(cfg: BattlesConfig) -> list[dict[str, Any]]:
    b = cfg.benchmark
    rows = []
    with progress(len(b.scaling_agents), "scaling") as advance:
        for n in b.scaling_agents:
            env = measure_in_subprocess("env", n, b.scaling_steps)
            pol = measure_in_subprocess("env_policy", n, max(2, b.scaling_steps // 5),
                                        directions=cfg.train.directions)  # fmt: skip
            row = {
                "n_agents": n,
                "env_agent_steps_per_s": env.get("agent_steps_per_s"),
                "env_policy_agent_steps_per_s": pol.get("agent_steps_per_s"),
                "peak_mem_mb": max(env.get("peak_mem_mb", 0), pol.get("peak_mem_mb", 0)),
                "env_peak_mem_mb": env.get("peak_mem_mb"),
            }
            if b.magent2 and n <= 20_000:  # battle_v4 at 100k would take minutes per step
                mag = measure_in_subprocess("magent2", n, max(2, b.scaling_steps // 5))
                row["magent2_agent_steps_per_s"] = mag.get("agent_steps_per_s")
                row["magent2_agents"] = mag.get("magent2_agents")
                row["magent2_error"] = mag.get("error")
            else:
                row["magent2_agent_steps_per_s"] = None
            rows.append(row)
            advance(1)
    return rows


def _train_job(job: tuple[BattlesConfig, str]) -> str:
    """Train one config into a new run under ``root``; returns the run folder."""
    cfg, root = job
    cfg = derive(cfg, experiment={"loggers": ["jsonl"]})  # progress bars, not metric lines
    with Run.create(cfg, root=root) as run:
        run.log(cfg.train.iterations, train(cfg, run=run, resources=Resources()))
    return str(run.dir)


def game_rows(cfg: BattlesConfig, run_dirs: list[str]) -> tuple[list[dict], dict[str, Any]]:
    """Final exploitability per (game, N), mean over training seeds, and the curves."""
    from fieldrl.apps.battles.pipeline import game_metrics

    finals: dict[tuple[str, int], list[dict[str, float]]] = {}
    curves: dict[str, Any] = {}
    for run_dir in run_dirs:
        opened = open_teams(run_dir)
        run_cfg, teams = opened.trained_config, opened.trained
        game, n = run_cfg.scenario.game, run_cfg.scenario.agents_per_team
        per_seed = [game_metrics(run_cfg, teams, n, s) for s in cfg.eval.seeds]
        finals.setdefault((game, n), []).append(
            {k: float(np.mean([m[k] for m in per_seed])) for k in per_seed[0]}
        )
        points = exploitability_curve(run_dir)
        curves.setdefault(f"{game}/n{n}", []).append(points)
    rows = []
    for (game, n), seeds in finals.items():
        expl = [s["exploitability"] for s in seeds]
        floor = float(np.mean([s["noise_floor"] for s in seeds]))
        rows.append(
            {
                "game": game,
                "n_agents": n,
                "exploitability": float(np.mean(expl)),
                "exploitability_std": float(np.std(expl)),
                "noise_floor": floor,
                "ratio_to_floor": float(np.mean(expl)) / floor,
                "tv_distance": float(np.mean([s["tv_distance"] for s in seeds])),
                "seeds": len(seeds),
            }
        )
    return rows, curves


def method_jobs(cfg: BattlesConfig, root: str) -> list[tuple[BattlesConfig, str]]:
    """Every method x training seed on the configured battlefield, with the shared [train]
    settings (``shared_sides`` included) and the method's own ``benchmark.method_train``."""
    return [
        (
            derive(
                cfg,
                train={**cfg.benchmark.method_train.get(method, {}), "method": method},
                experiment={
                    "seed": seed,
                    "name": f"{method}-s{seed}",
                },
            ),
            root,
        )
        for method in cfg.benchmark.methods
        for seed in cfg.benchmark.train_seeds
    ]


def _battles_job(job: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Load a run's teams (and an opponent: a baseline name or a run) and play them."""
    cfg, run_dir, opponent, noise_delay, seeds, n = job
    opened = open_teams(run_dir)
    run_cfg, teams = opened.trained_config, opened.trained
    obs = None
    if noise_delay is not None:
        seen = derive(run_cfg, observation=dict(zip(("noise", "delay"), noise_delay, strict=True)))
        obs = observation(seen)
    mine = SidedPolicy(run_cfg, teams, obs)
    theirs, _ = opponent_policy(opponent)
    return battles(cfg, mine, theirs, seeds, n)


def crossplay_rows(cfg: BattlesConfig, runs: dict[str, list[str]],
                   resources: Resources) -> list[dict[str, Any]]:  # fmt: skip
    """Every method against the scripted teams (random, rush, focus), and MF-MAPPO against
    every other method (training seed i against training seed i), both sides, on the
    evaluation seeds at ``eval.agents_per_team``; rows pool the training seeds."""
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    matchups = [(m, o) for m in runs for o in SCRIPTED]
    if "mf_mappo" in runs:
        matchups += [("mf_mappo", o) for o in runs if o != "mf_mappo"]
    jobs, keys = [], []
    for method, opp in matchups:
        for i, run_dir in enumerate(runs[method]):
            spec = opp if opp in SCRIPTED else runs[opp][i % len(runs[opp])]
            jobs.append((cfg, run_dir, spec, None, cfg.eval.seeds, n))
            keys.append((method, opp))
    results = parallel_map(_battles_job, jobs, resources.workers, resources.address,
                           "cross-play matchups")  # fmt: skip
    rows = []
    for method, opp in matchups:
        per_seed = [r for k, r in zip(keys, results, strict=True) if k == (method, opp)]
        row = pool(method, opp, n, [rec for recs in per_seed for rec in recs])
        row["training_seeds"] = len(per_seed)
        row["win_rate_per_training_seed"] = [pool(method, opp, n, recs)["win_rate"]
                                             for recs in per_seed]  # fmt: skip
        rows.append(row)
    return rows


def po_jobs(cfg: BattlesConfig, root: str) -> list[tuple[BattlesConfig, str]]:
    """MF-MAPPO trained on the sweep's hardest observation (largest noise and delay), with
    the estimator smoothing half of each step, once per lambda (first training seed)."""
    b = cfg.benchmark
    seed = b.train_seeds[0]
    return [
        (
            derive(
                cfg,
                train={"method": "mf_mappo"},
                observation={
                    "opponent": "estimated",
                    "noise": max(b.po_noise),
                    "delay": max(b.po_delay),
                    "smoothing": 0.5,
                    "gradient_penalty": lam,
                },
                experiment={
                    "seed": seed,
                    "name": f"po-lambda{lam}-s{seed}",
                },
            ),
            root,
        )
        for lam in b.po_lambdas
    ]


def po_rows(cfg: BattlesConfig, po_dirs: list[str], reference: str,
            resources: Resources) -> list[dict[str, Any]]:  # fmt: skip
    """Each lambda's team, seeing the opponent through every (noise, delay), against the
    fully observing MF-MAPPO team (``reference``), at the training N."""
    b = cfg.benchmark
    n = cfg.scenario.agents_per_team
    conditions = [(noise, delay) for noise in b.po_noise for delay in b.po_delay]
    jobs = [(cfg, d, reference, c, cfg.eval.seeds, n) for d in po_dirs for c in conditions]
    results = parallel_map(_battles_job, jobs, resources.workers, resources.address,
                           "partial-observability battles")  # fmt: skip
    rows = []
    for (_, run_dir, _, (noise, delay), _, _), records in zip(jobs, results, strict=True):
        lam = open_teams(run_dir).trained_config.observation.gradient_penalty
        row = pool("mf_mappo_po", "mf_mappo", n, records)
        rows.append({"lambda": lam, "noise": noise, "delay": delay, **row})
    return rows


def benchmark(cfg: BattlesConfig, *, out: Path, quick: bool, resources: Resources) -> Path:
    """Scaling, analytic games, cross-play and the partial-observability sweep."""
    b = cfg.benchmark
    if cfg.scenario.kind != "battlefield" and (b.methods or b.po_lambdas):
        raise FieldrlError(
            "benchmark: cross-play and the partial-observability sweep play battles, so "
            "scenario.kind must be 'battlefield' (the games come from benchmark.games); to "
            "benchmark games only, set benchmark.methods=[] and benchmark.po_lambdas=[]"
        )
    if b.po_lambdas and "mf_mappo" not in b.methods:
        raise FieldrlError(
            "benchmark: the partial-observability sweep plays against MF-MAPPO: "
            "add mf_mappo to benchmark.methods or set benchmark.po_lambdas=[]"
        )
    bench = Benchmark(cfg, out, quick=quick, workers=resources.workers)
    root = str(out / "runs")
    with bench.phase("scaling"):
        scaling = scaling_rows(cfg)
    jobs = game_jobs(cfg, root) + method_jobs(cfg, root) + po_jobs(cfg, root)
    with bench.phase("training"):
        run_dirs = parallel_map(_train_job, jobs, resources.workers, resources.address,
                                "training runs")  # fmt: skip
    n_games = len(game_jobs(cfg, root))
    n_methods = len(method_jobs(cfg, root))
    game_dirs = run_dirs[:n_games]
    method_dirs = run_dirs[n_games : n_games + n_methods]
    po_dirs = run_dirs[n_games + n_methods :]
    with bench.phase("games_eval"):
        games, curves = game_rows(cfg, game_dirs)
    by_method: dict[str, list[str]] = {}
    for (job, _), run_dir in zip(method_jobs(cfg, root), method_dirs, strict=True):
        by_method.setdefault(job.train.method, []).append(run_dir)
    with bench.phase("crossplay_eval"):
        cross = crossplay_rows(cfg, by_method, resources)
    reference = by_method.get("mf_mappo", [None])[0]
    with bench.phase("po_eval"):
        po = po_rows(cfg, po_dirs, reference, resources) if reference else []
    rows = [{"section": "scaling", **r} for r in scaling]
    rows += [{"section": "game", **r} for r in games]
    rows += [{"section": "crossplay", **r} for r in cross]
    rows += [{"section": "partial_observability", **r} for r in po]
    return bench.write(rows, seeds=cfg.eval.seeds, targets=targets(rows),
                       train_seeds=cfg.benchmark.train_seeds,
                       data={"exploitability_curves": curves})  # fmt: skip


def targets(rows: Sequence[Mapping[str, Any]]) -> list[Target]:
    """The issue's targets, each met or missed with the figure behind it."""
    out = []
    scaling = [r for r in rows if r["section"] == "scaling"]
    env = [r for r in scaling if r["n_agents"] >= 2_000 and r["env_agent_steps_per_s"]]
    if env:
        worst = min(r["env_agent_steps_per_s"] for r in env)
        out.append(Target("battlefield throughput", ">= 5M agent-steps/s at N >= 2k",
                          f"min {worst / 1e6:.1f}M", worst >= 5e6))  # fmt: skip
    pol = [r for r in scaling if r["n_agents"] == 10_000 and r["env_policy_agent_steps_per_s"]]
    if pol:
        rate = pol[0]["env_policy_agent_steps_per_s"]
        out.append(Target("battlefield + actors throughput", ">= 200k agent-steps/s at 10k",
                          f"{rate / 1e3:.0f}k", rate >= 2e5))  # fmt: skip
    for r in (r for r in rows if r["section"] == "game"):
        out.append(Target(
            f"{r['game']} N={r['n_agents']} exploitability", "<= 2x the noise floor",
            f"{r['exploitability']:.3f} = {r['ratio_to_floor']:.1f}x floor {r['noise_floor']:.3f}",
            r["ratio_to_floor"] <= 2,
        ))  # fmt: skip
    for r in (r for r in rows if r["section"] == "crossplay" and r["method"] == "mf_mappo"):
        out.append(Target(
            f"MF-MAPPO vs {r['opponent']}", "wins >= 70% (both sides)",
            f"{r['win_rate']:.2f} [{r['ci95_low']:.2f}, {r['ci95_high']:.2f}]",
            r["win_rate"] >= 0.7,
        ))  # fmt: skip
    return out
