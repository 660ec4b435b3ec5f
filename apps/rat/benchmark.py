"""``fieldrl rat benchmark``: in one run, per training seed,

1. the motor system (motion prior, behaviour prior, adapter core, multitask baseline) on
   the CPG library;
2. exploration: random rollouts of the behaviour prior, random latents through the
   decoder, and random actions in the open arena, graded against the library;
3. held-out sequences (clips made of transitions no training clip has), split into
   adaptation clips and test clips: the option policy that sequences the adapters (the
   network frozen) is trained on the adaptation clips; the multitask baseline, the adapter
   core with its own selector and the adapters with the option policy are scored on the
   test clips alone; adapter ranks and overlaps;
4. sparse tasks: PPO over the priors' latent against raw-action PPO and SAC at the same
   step budget: success on held-out episodes and the learning curve;

and the speeds, with the lean body also timed at dm_control's physics step and solver
settings beside dm_control's own tasks (like for like). Every job is saved as it
finishes, so a killed benchmark resumes.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.app import Resources
from fieldrl.apps.rat.adapters import effective_rank, subspace_overlap, train_option_policy
from fieldrl.apps.rat.agents import held_out_success, learning_curve, make_trainer
from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.fidelity import COMPOSER_TASKS, CONTROL_DT, PHYSICS_DT, composer_speed
from fieldrl.apps.rat.imitation import Reference, evaluate_tracking
from fieldrl.apps.rat.naturalness import (
    NATURALNESS,
    ground_speed,
    naturalness,
    random_actions,
    record,
    top_down,
)
from fieldrl.apps.rat.npmp import LatentWalker
from fieldrl.apps.rat.pipeline import NETWORKS, MotorTrainer, build_library, motor_system
from fieldrl.benchmark import Benchmark, Target, mean_ci95
from fieldrl.checkpoint import CheckpointManager, save_checkpoint
from fieldrl.config import ConfigError, derive
from fieldrl.seeding import derive_seed
from fieldrl.training import fit

__all__ = ["benchmark", "speed"]

ARMS = ("behaviour_prior", "random_latent", "random_actions")
COVERAGE_BEFORE = 0.029  # the behaviour prior's 10-s coverage at 2815ef0, the baseline


def motor_job(job: tuple[str, int, dict[str, Any], str]) -> dict[str, Any]:
    """Train the motor system of one seed; save its networks beside the benchmark."""
    _, seed, data, folder = job
    torch.set_num_threads(1)
    cfg = derive(RatConfig.model_validate(data), experiment={"seed": seed})
    start = time.process_time()
    trainer = fit(
        lambda: MotorTrainer(cfg, None), None, seed=seed, description=f"motor system, seed {seed}"
    )
    networks = {name: getattr(trainer.models, name).state_dict() for name in NETWORKS}
    save_checkpoint(Path(folder) / f"motor_seed{seed}", trainer.done, networks)
    bank = trainer.models.adapters.bank.detach()
    ranks = [effective_rank(a) for a in bank]
    overlap = [[subspace_overlap(a, b) for b in bank] for a in bank]
    return {
        "cpu_s": time.process_time() - start,
        "ranks": ranks,
        "overlap": overlap,
        "library_rejected": trainer.library.meta.get("rejected_falls", 0),
    }


def _motor(cfg: RatConfig, seed: int, folder: str) -> tuple[RatConfig, Any, Any]:
    cfg = derive(cfg, experiment={"seed": seed})
    env = RatEnv(cfg)
    saved = CheckpointManager(Path(folder) / f"motor_seed{seed}").load_latest()
    models = motor_system(cfg, env.body.proprio_size, saved.state)
    return cfg, env, models


def explore_job(job: tuple[str, int, dict[str, Any], str]) -> dict[str, Any]:
    """Each exploration arm in the open arena, graded against the training library."""
    _, seed, data, folder = job
    torch.set_num_threads(1)
    base = RatConfig.model_validate(data)
    b = base.benchmark
    cfg, env, models = _motor(
        derive(base, task={"name": "explore", "duration": b.explore_seconds}), seed, folder
    )
    library = build_library(cfg, env.body)
    arms = {
        "behaviour_prior": lambda r: LatentWalker(models.motion, models.behaviour, r),
        "random_latent": lambda r: LatentWalker(models.motion, None, r),
        "random_actions": random_actions,
    }
    fps = 1.0 / cfg.body.control_dt
    clips = library.clips[: b.explore_episodes]
    out: dict[str, Any] = {
        "paths": {"library": [top_down(c.qpos[:, :2] - c.qpos[0, :2]) for c in clips]},
        "library_speed_m_s": float(
            np.mean([ground_speed(c.qpos[:, :2], fps).mean() for c in library.clips])
        ),
    }
    for name, make in arms.items():
        trajectories = record(env, make, b.explore_episodes, derive_seed(seed, "explore"))
        figures = naturalness(
            trajectories,
            library,
            env.body.joint_names,
            fps,
            cfg.task.arena_size,
            env.body.actuated_qpos,
        )
        # JSON has no NaN: a metric an episode does not have (no gait peak, no gait line) is None
        out[name] = {
            k: [float(x) if np.isfinite(x) else None for x in v] for k, v in figures.items()
        }
        out["paths"][name] = [top_down(t.xy) for t in trajectories]
    return out


def adaptation_count(heldout: int, share: float) -> int:
    """How many of ``heldout`` clips adapt: ``share`` of them rounded half up (5 clips at
    0.5: 3), at least one and at most all but one (the rest score)."""
    if heldout < 2:
        raise ConfigError(
            f"library.heldout_clips is {heldout}: the benchmark needs 2 or more (some adapt "
            "the option policy, the others score it)"
        )
    return min(heldout - 1, max(1, math.floor(share * heldout + 0.5)))


def split_heldout(refs: list[Reference], share: float) -> tuple[list[Reference], list[Reference]]:
    """The held-out clips as (adaptation clips, test clips): the first
    :func:`adaptation_count` adapt, the rest score."""
    adapt = adaptation_count(len(refs), share)
    return refs[:adapt], refs[adapt:]


def tracking_job(job: tuple[str, int, dict[str, Any], str]) -> dict[str, Any]:
    """Held-out sequences, scored on the test clips: multitask, adapters with their
    selector, adapters sequenced by an option policy learned on the adaptation clips with
    the network frozen."""
    _, seed, data, folder = job
    torch.set_num_threads(1)
    cfg, env, models = _motor(RatConfig.model_validate(data), seed, folder)
    body = env.body
    held = build_library(cfg, body, "heldout")
    adaptation, test = split_heldout(
        [Reference(c, body, held.fps) for c in held.clips], cfg.benchmark.adaptation_share
    )
    steps = round(cfg.benchmark.tracking_seconds / cfg.body.control_dt)
    im = cfg.imitation
    rng = np.random.default_rng(seed)

    def score(controller: Any) -> dict[str, float]:
        return evaluate_tracking(
            body, test, controller, im.horizon, im.gain, steps, rng, im.abort_error
        )

    start = time.process_time()
    option = train_option_policy(
        models.adapters,
        body,
        adaptation,
        im.horizon,
        cfg.adapters.option_hidden,
        cfg.adapters.option_steps,
        seed,
        abort_error=im.abort_error,
    )
    option_cpu = time.process_time() - start
    return {
        "multitask": score(models.multitask.controller(True)),
        "adapters_selector": score(models.adapters.controller(True)),
        "adapters_options": score(option.controller(models.adapters)),
        "motion_prior": score(models.motion.controller(True)),
        "expert": score(None),
        "option_cpu_s": option_cpu,
        "adaptation_clips": [r.name for r in adaptation],
        "test_clips": [r.name for r in test],
    }


def agent_job(job: tuple[str, int, dict[str, Any], str, str, str]) -> dict[str, Any]:
    """One agent on one sparse task: training curve, then held-out success."""
    _, seed, data, folder, task, kind = job
    torch.set_num_threads(1)
    given = RatConfig.model_validate(data)
    base = derive(given, task={"name": task}, agent={"steps": given.benchmark.agent_steps})
    cfg, _, models = _motor(base, seed, folder)
    start = time.process_time()
    trainer = fit(
        lambda: make_trainer(kind, cfg, seed, (models.motion, models.behaviour)),
        None,
        seed=seed,
        description=f"{kind} on {task}, seed {seed}",
    )
    cpu = time.process_time() - start
    x, curve = learning_curve(trainer.log.episodes, trainer.total)
    env = trainer.model.get_env().envs[0]
    successes = held_out_success(
        trainer.model, env, cfg.agent.eval_episodes, derive_seed(seed, "held_out")
    )
    finite = curve[np.isfinite(curve)]
    return {
        "success": float(np.mean(successes)),
        "curve_x": x.tolist(),
        "curve": [None if not np.isfinite(c) else float(c) for c in curve],
        "auc": float(finite.mean()) if finite.size else 0.0,
        "train_episodes": len(trainer.log.episodes),
        "cpu_s": cpu,
    }


def _env_speed(cfg: RatConfig, seconds: float, rng: np.random.Generator) -> float:
    """Control steps a second of ``RatEnv(cfg)`` under random actions, resets included."""
    env = RatEnv(cfg)
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, 38))
        steps += 1
        if terminated or truncated:
            env.reset()
    return steps / (time.perf_counter() - start)


def speed(cfg: RatConfig) -> dict[str, float]:
    """Control steps a second per task (one core, random actions, resets included) at the
    config's physics settings, raw ``mj_step`` at the physics step, and like for like with
    dm_control's composer tasks: each of those tasks here at the composer's 1 ms physics
    step, elliptic cones and 5 no-slip iterations (``dm_settings_<task>``) beside the
    composer task itself (``composer_<task>``)."""
    import mujoco

    out: dict[str, float] = {}
    seconds = cfg.benchmark.speed_seconds
    rng = np.random.default_rng(0)
    for task in ("explore", "go_to_target", "two_tap", "bowl", "gaps"):
        out[f"{task}_steps_per_s"] = _env_speed(derive(cfg, task={"name": task}), seconds, rng)
    dm_body = {"physics_dt": PHYSICS_DT, "control_dt": CONTROL_DT, "dm_control_solver": True}
    for task in COMPOSER_TASKS:  # dm_control's own tasks and ours at their settings
        same = derive(cfg, task={"name": task}, body=dm_body)
        out[f"dm_settings_{task}_steps_per_s"] = _env_speed(same, seconds, rng)
        out[f"composer_{task}_steps_per_s"] = composer_speed(task, seconds)
    body = RatEnv(cfg).body
    body.reset(rng)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        mujoco.mj_step(body.model, body.data, nstep=100)
        steps += 100
    out["mj_step_per_s"] = steps / (time.perf_counter() - start)
    out["substeps"] = float(body.substeps)
    return out


def _dispatch(job: tuple) -> dict[str, Any]:
    return {
        "motor": motor_job,
        "explore": explore_job,
        "tracking": tracking_job,
        "agent": agent_job,
    }[job[0]](job)


def _key(job: tuple) -> str:
    return "|".join(str(j) for i, j in enumerate(job) if i not in (2, 3))


def benchmark(cfg: RatConfig, *, out: Path, quick: bool, resources: Resources) -> Path:
    """Every job of every seed (each saved as it finishes) -> benchmark.json; the core
    writes report.md from it."""
    b = cfg.benchmark
    adaptation_count(cfg.library.heldout_clips, b.adaptation_share)  # fails before any work
    bench = Benchmark(cfg, out, quick=quick, workers=resources.workers)
    folder = str(Path(out) / "models")
    Path(folder).mkdir(parents=True, exist_ok=True)
    data = cfg.model_dump(mode="json")
    with bench.phase("motor"):
        motor = bench.run_jobs(
            _dispatch,
            [("motor", s, data, folder) for s in b.seeds],
            _key,
            address=resources.address,
            description="rat motor systems",
        )
    jobs: list[tuple] = []
    for s in b.seeds:
        jobs += [("explore", s, data, folder), ("tracking", s, data, folder)]
        jobs += [("agent", s, data, folder, t, k) for t in b.tasks for k in b.agents]
    with bench.phase("evaluations"):
        results = bench.run_jobs(
            _dispatch,
            jobs,
            _key,
            address=resources.address,
            description="rat exploration, tracking and tasks",
        )
    with bench.phase("speed"):
        speeds = speed(cfg)
    by = {_key(job): r for job, r in zip(jobs, results, strict=True)}
    rows = _rows(cfg, motor, by)
    path = bench.write(
        rows,
        seeds=b.seeds,
        targets=targets(cfg, rows, by, speeds, bench),
        data={"motor": motor, "jobs": by, "speed": speeds},
    )
    return path


def _rows(cfg: RatConfig, motor: list[dict], by: dict[str, Any]) -> list[dict[str, Any]]:
    b = cfg.benchmark
    rows: list[dict[str, Any]] = []
    for arm in ARMS:
        # a seed is one replication (its own motor system): its episodes' mean is one value
        row: dict[str, Any] = {"method": arm, "part": "exploration"}
        for metric in NATURALNESS:
            per_seed = [_finite_mean(by[f"explore|{s}"][arm][metric]) for s in b.seeds]
            values = [v for v in per_seed if np.isfinite(v)]
            mean, low, high = mean_ci95(values) if values else (None, None, None)  # JSON: no NaN
            row |= {metric: mean, f"{metric}_low": low, f"{metric}_high": high}
        rows.append(row)
    for method in ("expert", "motion_prior", "multitask", "adapters_selector", "adapters_options"):
        runs = [by[f"tracking|{s}"][method] for s in b.seeds]
        mean, low, high = mean_ci95([r["tracking_error"] for r in runs])
        rows.append(
            {
                "method": method,
                "part": "held-out tracking",
                "tracking_error": mean,
                "tracking_error_low": low,
                "tracking_error_high": high,
                "tracking_error_all_hinges": float(
                    np.mean([r["tracking_error_all_hinges"] for r in runs])
                ),
                "fall_rate": float(np.mean([r["fall_rate"] for r in runs])),
                "stop_rate": float(np.mean([r["stop_rate"] for r in runs])),
            }
        )
    for task in b.tasks:
        for kind in b.agents:
            runs = [by[f"agent|{s}|{task}|{kind}"] for s in b.seeds]
            mean, low, high = mean_ci95([r["success"] for r in runs])
            rows.append(
                {
                    "method": f"{kind}/{task}",
                    "part": "sparse task",
                    "success_rate": mean,
                    "success_rate_low": low,
                    "success_rate_high": high,
                    "auc": float(np.mean([r["auc"] for r in runs])),
                    "cpu_s": float(np.mean([r["cpu_s"] for r in runs])),
                }
            )
    ranks = [r for m in motor for r in m["ranks"]]
    rows.append(
        {
            "method": "adapter_bank",
            "part": "adapters",
            "effective_rank": float(np.mean(ranks)),
            "hidden": cfg.adapters.hidden,
            "cpu_s": float(np.mean([m["cpu_s"] for m in motor])),
        }
    )
    return rows


def _finite_mean(values: list[float | None]) -> float:
    """The mean of an arm's episodes where the metric exists (a gait peak needs movement)."""
    kept = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(kept)) if kept else float("nan")


def targets(
    cfg: RatConfig,
    rows: list[dict[str, Any]],
    by: dict[str, Any],
    speeds: dict[str, float],
    bench: Benchmark,
) -> list[Target]:
    b = cfg.benchmark
    get = {r["method"]: r for r in rows}
    out = []
    for task in b.tasks:
        if {"prior_ppo", "ppo", "sac"} <= set(b.agents):
            prior = get[f"prior_ppo/{task}"]
            best_raw = max(get[f"ppo/{task}"], get[f"sac/{task}"], key=lambda r: r["success_rate"])
            met = prior["success_rate_low"] > best_raw["success_rate_high"]
            out.append(
                Target(
                    f"{task}: priors above raw PPO and SAC",
                    "higher success than raw PPO and SAC at the same step budget (CIs over seeds)",
                    f"prior_ppo {prior['success_rate']:.2f} [{prior['success_rate_low']:.2f}, "
                    f"{prior['success_rate_high']:.2f}] vs best raw {best_raw['method']} "
                    f"{best_raw['success_rate']:.2f} [{best_raw['success_rate_low']:.2f}, "
                    f"{best_raw['success_rate_high']:.2f}]",
                    bool(met),
                    f"{b.agent_steps} steps, {len(b.seeds)} seeds",
                )
            )
    arms = [get[arm] for arm in ARMS]
    gap = "gait peak off the library's at the same speed"
    for metric, what in (("w1_library", "W1 to the library"), ("gait_gap_hz", gap)):
        pairs = zip(arms, arms[1:], strict=False)
        known = all(a[metric] is not None for a in arms)
        ordered = known and all(a[f"{metric}_high"] < b[f"{metric}_low"] for a, b in pairs)
        out.append(
            Target(
                f"exploration ordering ({metric})",
                f"{what}: behaviour prior < random latents < random actions (CIs)",
                ", ".join(
                    f"{a['method']} " + ("n/a" if a[metric] is None else f"{a[metric]:.3f}")
                    for a in arms
                ),
                bool(ordered),
            )
        )
    prior = get["behaviour_prior"]
    library_speed = float(np.mean([by[f"explore|{s}"]["library_speed_m_s"] for s in b.seeds]))
    walks = (prior["speed_m_s"] >= 0.5 * library_speed and prior["fall"] <= 0.2
             and prior["coverage"] >= COVERAGE_BEFORE * 5)  # fmt: skip
    out.append(
        Target(
            "a behaviour prior that walks",
            f"{b.explore_seconds:g}-s rollouts: mean speed >= 50% of the library's, falls <= 20%, "
            f"arena coverage >= 5x {COVERAGE_BEFORE:.1%} (before issue 41)",
            f"speed {prior['speed_m_s']:.3f} m/s ({prior['speed_m_s'] / library_speed:.0%} of "
            f"the library's {library_speed:.3f}), falls {prior['fall']:.0%}, coverage "
            f"{prior['coverage']:.1%}",
            bool(walks),
        )
    )
    expert = get["expert"]
    out.append(
        Target(
            "an expert that keeps its balance",
            f"falls in <= 10% of {b.tracking_seconds:g}-s held-out clip rollouts",
            f"falls {expert['fall_rate']:.0%}, limb tracking error {expert['tracking_error']:.3f} "
            f"rad [{expert['tracking_error_low']:.3f}, {expert['tracking_error_high']:.3f}]",
            bool(expert["fall_rate"] <= 0.1),
        )
    )
    multitask, options = get["multitask"], get["adapters_options"]
    selector = get["adapters_selector"]
    ratio = multitask["tracking_error"] / max(options["tracking_error"], 1e-9)
    unadapted = multitask["tracking_error"] / max(selector["tracking_error"], 1e-9)
    first = by[f"tracking|{b.seeds[0]}"]
    out.append(
        Target(
            "adapters on held-out sequences",
            "limb tracking error on held-out test clips >= 3x lower than the multitask "
            "baseline (the option policy adapted on other held-out clips; the baseline has "
            "no codes to adapt)",
            f"multitask {multitask['tracking_error']:.3f} rad, adapters + options "
            f"{options['tracking_error']:.3f} rad ({ratio:.2f}x); neither adapted: adapters "
            f"with their selector {selector['tracking_error']:.3f} rad ({unadapted:.2f}x)",
            bool(ratio >= 3),
            f"{len(first['test_clips'])} test clips, {len(first['adaptation_clips'])} "
            "adaptation clips a seed",
        )
    )
    flat = speeds["explore_steps_per_s"]
    out.append(
        Target(
            "speed",
            ">= 500 control steps/s per core at 20 ms control",
            f"{flat:.0f} steps/s flat arena (raw mj_step {speeds['mj_step_per_s']:.0f}/s,"
            f" {speeds['substeps']:.0f} substeps a control step)",
            bool(flat >= 500),
        )
    )
    limit = 300 if bench.quick else 10_800
    seconds = time.perf_counter() - bench.started
    out.append(
        Target(
            "cost",
            f"{'--quick' if bench.quick else 'default'} <= {limit / 60:.0f} min",
            f"{seconds / 60:.1f} min with {bench.workers} workers",
            bool(seconds <= limit),
        )
    )
    return out
