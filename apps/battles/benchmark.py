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

import time
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.app import Resources
from fieldrl.apps.battles import report
from fieldrl.apps.battles.config import BattlesConfig
from fieldrl.apps.battles.pipeline import (
    SidedPolicy,
    crossplay,
    exploitability_curve,
    load_teams,
    observation,
    opponent_policy,
    train,
)
from fieldrl.apps.battles.scaling import measure_in_subprocess
from fieldrl.benchmark import write_benchmark
from fieldrl.config import load_config
from fieldrl.distributed import parallel_map
from fieldrl.runs import Run, progress

__all__ = ["benchmark"]

PRESETS = Path(__file__).parent / "configs"


def scaling_rows(cfg: BattlesConfig) -> list[dict[str, Any]]:
    b = cfg.benchmark
    rows = []
    with progress(len(b.scaling_agents), "scaling") as advance:
        for n in b.scaling_agents:
            env = measure_in_subprocess("env", n, b.scaling_steps)
            pol = measure_in_subprocess("env_policy", n, max(2, b.scaling_steps // 5))
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
    with Run.create("battles", cfg, root=root) as run:
        run.log(cfg.train.iterations, train(cfg, run, Resources()))
    return str(run.dir)


def _with(cfg: BattlesConfig, **sections: dict[str, Any]) -> BattlesConfig:
    """``cfg`` with some sections' fields replaced (validated)."""
    data = cfg.model_dump()
    for name, fields in sections.items():
        data[name] = {**data[name], **fields}
    return BattlesConfig.model_validate(data)


def game_jobs(cfg: BattlesConfig, root: str) -> list[tuple[BattlesConfig, str]]:
    recipe = load_config(BattlesConfig, PRESETS / "game.toml")
    b = cfg.benchmark
    jobs = []
    for game in b.games:
        for n in b.game_agents:
            for seed in b.train_seeds:
                job = _with(
                    recipe,
                    scenario={"game": game, "agents_per_team": n},
                    train={"iterations": b.game_iterations},
                    experiment={
                        **cfg.experiment.model_dump(),
                        "seed": seed,
                        "name": f"{game}-n{n}-s{seed}",
                    },
                )
                jobs.append((job, root))
    return jobs


def game_rows(cfg: BattlesConfig, run_dirs: list[str]) -> tuple[list[dict], dict[str, Any]]:
    """Final exploitability per (game, N), mean over training seeds, and the curves."""
    from fieldrl.apps.battles.pipeline import game_metrics

    finals: dict[tuple[str, int], list[dict[str, float]]] = {}
    curves: dict[str, Any] = {}
    for run_dir in run_dirs:
        run_cfg, teams = load_teams(run_dir)
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
    """Every method x training seed on the configured battlefield; the policy-gradient
    baselines share MF-MAPPO's training set-up (``shared_sides`` included)."""
    return [
        (
            _with(
                cfg,
                train={"method": method},
                experiment={
                    **cfg.experiment.model_dump(),
                    "seed": seed,
                    "name": f"{method}-s{seed}",
                },
            ),
            root,
        )
        for method in cfg.benchmark.methods
        for seed in cfg.benchmark.train_seeds
    ]


def crossplay_rows(cfg: BattlesConfig, runs: dict[str, list[str]]) -> list[dict[str, Any]]:
    """Each method (pooled over its training seeds) against every baseline and every other
    method, both sides, at ``eval.agents_per_team`` on the evaluation seeds."""
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    policies = {
        m: [SidedPolicy(c, t) for c, t in map(load_teams, dirs)] for m, dirs in runs.items()
    }
    opponents: dict[str, list[Any]] = {
        name: [opponent_policy(name)[0]] for name in ("random", "rush")
    }
    opponents |= policies
    rows = []
    jobs = [(m, o) for m in policies for o in opponents if o != m]
    with progress(len(jobs), "cross-play") as advance:
        for method, opp in jobs:
            per_seed = []
            for i, mine in enumerate(policies[method]):
                theirs = opponents[opp][i % len(opponents[opp])]
                per_seed.append(crossplay(cfg, method, mine, theirs, opp, cfg.eval.seeds, n))
            rows.append(_pool_rows(per_seed))
            advance(1)
    return rows


def _pool_rows(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same matchup's rows over training seeds (episodes summed)."""
    from fieldrl.apps.battles.baselines import wilson_interval

    episodes = sum(r["episodes"] for r in rows)
    wins = sum(r["win_rate"] * r["episodes"] for r in rows)
    draws = sum(r["draw_rate"] * r["episodes"] for r in rows)
    low, high = wilson_interval(wins, episodes)
    weighted = lambda key: sum(r[key] * r["episodes"] for r in rows) / episodes  # noqa: E731
    return {
        **{k: rows[0][k] for k in ("method", "opponent", "agents_per_team")},
        "episodes": episodes,
        "training_seeds": len(rows),
        "win_rate": wins / episodes,
        "draw_rate": draws / episodes,
        "loss_rate": 1 - (wins + draws) / episodes,
        "ci95_low": low,
        "ci95_high": high,
        "win_rate_as_blue": weighted("win_rate_as_blue"),
        "win_rate_as_red": weighted("win_rate_as_red"),
        "win_rate_per_training_seed": [r["win_rate"] for r in rows],
    }


def po_jobs(cfg: BattlesConfig, root: str) -> list[tuple[BattlesConfig, str]]:
    """MF-MAPPO trained on the sweep's hardest observation (largest noise and delay), with
    the estimator smoothing half of each step, once per lambda (first training seed)."""
    b = cfg.benchmark
    seed = b.train_seeds[0]
    return [
        (
            _with(
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
                    **cfg.experiment.model_dump(),
                    "seed": seed,
                    "name": f"po-lambda{lam}-s{seed}",
                },
            ),
            root,
        )
        for lam in b.po_lambdas
    ]


def po_rows(cfg: BattlesConfig, po_dirs: list[str], reference: str) -> list[dict[str, Any]]:
    """Each lambda's team, seeing the opponent through every (noise, delay), against the
    fully observing MF-MAPPO team (``reference``)."""
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    ref_cfg, ref_teams = load_teams(reference)
    full = SidedPolicy(ref_cfg, ref_teams)
    b = cfg.benchmark
    rows = []
    conditions = [(noise, delay) for noise in b.po_noise for delay in b.po_delay]
    with progress(len(po_dirs) * len(conditions), "partial observability") as advance:
        for run_dir in po_dirs:
            run_cfg, teams = load_teams(run_dir)
            lam = run_cfg.observation.gradient_penalty
            for noise, delay in conditions:
                seen = _with(run_cfg, observation={"noise": noise, "delay": delay})
                mine = SidedPolicy(run_cfg, teams, observation(seen))
                row = crossplay(cfg, "mf_mappo_po", mine, full, "mf_mappo", cfg.eval.seeds, n)
                rows.append({"lambda": lam, "noise": noise, "delay": delay, **row})
                advance(1)
    return rows


def benchmark(cfg: BattlesConfig, out_dir: Path, quick: bool, resources: Resources) -> Path:
    """Scaling, analytic games, cross-play and the partial-observability sweep."""
    started = time.perf_counter()
    out_dir = Path(out_dir)
    root = str(out_dir / "runs")
    timings: dict[str, float] = {}

    def timed(name: str, fn: Any, *args: Any) -> Any:
        t0 = time.perf_counter()
        result = fn(*args)
        timings[f"{name}_s"] = round(time.perf_counter() - t0, 1)
        return result

    scaling = timed("scaling", scaling_rows, cfg)
    jobs = game_jobs(cfg, root) + method_jobs(cfg, root) + po_jobs(cfg, root)
    run_dirs = timed(
        "training", parallel_map, _train_job, jobs, resources.workers, resources.address
    )
    n_games = len(game_jobs(cfg, root))
    n_methods = len(method_jobs(cfg, root))
    game_dirs = run_dirs[:n_games]
    method_dirs = run_dirs[n_games : n_games + n_methods]
    po_dirs = run_dirs[n_games + n_methods :]
    games, curves = timed("games_eval", game_rows, cfg, game_dirs)
    by_method: dict[str, list[str]] = {}
    for (job, _), run_dir in zip(method_jobs(cfg, root), method_dirs, strict=True):
        by_method.setdefault(job.train.method, []).append(run_dir)
    cross = timed("crossplay_eval", crossplay_rows, cfg, by_method)
    po = timed("po_eval", po_rows, cfg, po_dirs, by_method["mf_mappo"][0]) if po_dirs else []
    rows = [{"section": "scaling", **r} for r in scaling]
    rows += [{"section": "game", **r} for r in games]
    rows += [{"section": "crossplay", **r} for r in cross]
    rows += [{"section": "partial_observability", **r} for r in po]
    cost = {
        "seconds": round(time.perf_counter() - started, 1),
        "quick": quick,
        "workers": resources.workers,
        **timings,
    }
    path = write_benchmark(
        out_dir,
        "battles",
        rows,
        config=cfg,
        seeds=cfg.eval.seeds,
        cost=cost,
        extra={"train_seeds": cfg.benchmark.train_seeds, "exploitability_curves": curves},
    )
    report.write_report(out_dir, path)
    return path
