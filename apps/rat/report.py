"""Tables and plots of the rat app: exploration against the library, held-out tracking,
sparse-task success and learning curves, adapter ranks; for a trained run, an MP4 of the
rat exploring, gait spectra, an ethogram and the latent path."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.apps.rat.fidelity import COMPOSER_TASKS
from fieldrl.apps.rat.naturalness import NATURALNESS
from fieldrl.benchmark import Benchmark
from fieldrl.report import Report, save_figure

__all__ = [
    "demo_report",
    "plot_curves",
    "plot_ethogram",
    "plot_paths",
    "plot_ranks",
    "plot_spectra",
    "sections",
    "write_video",
]

EXPLORE = ["method", "w1_library", "w1_library_low", "w1_library_high",
           *(m for m in NATURALNESS if m not in ("w1_library", "jerk", "energy"))]  # fmt: skip
TRACK = [
    "method",
    "tracking_error",
    "tracking_error_low",
    "tracking_error_high",
    "tracking_error_all_hinges",
    "fall_rate",
    "stop_rate",
]
TASKS = ["method", "success_rate", "success_rate_low", "success_rate_high", "auc", "cpu_s"]


def plot_curves(
    path: Path, curves: Mapping[str, tuple[Sequence[float], Sequence[Any]]], title: str
) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for name, (x, y) in curves.items():
        ax.plot(x, [np.nan if v is None else v for v in y], marker="o", label=name)
    ax.set(title=title, xlabel="environment steps", ylabel="training-episode success")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_ranks(
    path: Path, ranks: Sequence[float], overlap: Sequence[Sequence[float]], hidden: int
) -> Path:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.2))
    a.bar(range(len(ranks)), ranks)
    a.axhline(hidden, ls="--", c="grey", lw=0.8)
    a.set(title=f"effective rank of each adapter (of {hidden})", xlabel="adapter")
    image = b.imshow(np.asarray(overlap), vmin=0, vmax=1, cmap="viridis")
    b.set(title="subspace overlap", xlabel="adapter", ylabel="adapter")
    fig.colorbar(image, ax=b)
    return save_figure(fig, path)


def plot_spectra(path: Path, signals: Mapping[str, np.ndarray], fps: float) -> Path:
    """Power spectrum of the left hip angle for each behaviour source."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    for name, x in signals.items():
        if len(x) < 16:
            continue
        x = (x - x.mean()) * np.hanning(len(x))
        power = np.abs(np.fft.rfft(x)) ** 2
        freqs = np.fft.rfftfreq(len(x), 1 / fps)
        ax.semilogy(freqs, power / power.max(), label=name)
    ax.set(title="left hip angle spectrum", xlabel="Hz", ylabel="relative power", xlim=(0, 12))
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_peak_vs_speed(path: Path, arms: Mapping[str, Mapping[str, Sequence[float]]]) -> Path:
    """Each episode's gait-spectrum peak against its mean speed, per arm (a trot's stride
    frequency rises with speed)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.4))
    for name, figures in arms.items():
        speed, peak = (np.asarray(figures[k], dtype=float) for k in ("speed_m_s", "gait_peak_hz"))
        ax.scatter(speed, peak, label=name, s=14)  # None (no peak) reads as nan: not drawn
    ax.set(xlabel="mean speed, m/s", ylabel="gait peak, Hz", title="gait peak vs speed")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_paths(
    path: Path,
    paths: Mapping[str, Sequence[Sequence[Sequence[float]]]],
    half: float,
    seconds: float,
) -> Path:
    """Top-down paths, one panel per source (exploration arms and library clips), in the
    walled arena: how far and where each one goes."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(paths), figsize=(2.6 * len(paths), 2.9), squeeze=False)
    for ax, (name, runs) in zip(axes[0], paths.items(), strict=True):
        for run in runs:
            xy = np.asarray(run)
            ax.plot(xy[:, 0], xy[:, 1], lw=0.9)
            ax.plot(*xy[0], "k.", ms=3)
        ax.add_patch(plt.Rectangle((-half, -half), 2 * half, 2 * half, fill=False, lw=0.8))
        ax.set(xlim=(-half, half), ylim=(-half, half), aspect="equal", title=name.replace("_", " "))
        ax.tick_params(labelsize=6)
    fig.suptitle(
        f"top-down paths ({seconds:g} s episodes; library clips from the centre)", fontsize=8
    )
    return save_figure(fig, path)


def plot_ethogram(path: Path, labels: Sequence[str], fps: float, title: str) -> Path:
    import matplotlib.pyplot as plt

    kinds = sorted(set(labels))
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.3 * len(kinds)))
    for row, kind in enumerate(kinds):
        on = np.array([label == kind for label in labels])
        starts = np.flatnonzero(np.diff(np.r_[0, on.astype(int)]) == 1)
        ends = np.flatnonzero(np.diff(np.r_[on.astype(int), 0]) == -1) + 1
        ax.broken_barh(
            [(s / fps, (e - s) / fps) for s, e in zip(starts, ends, strict=True)], (row - 0.4, 0.8)
        )
    ax.set(yticks=range(len(kinds)), yticklabels=kinds, xlabel="s", title=title)
    return save_figure(fig, path)


def write_video(path: Path, frames: Sequence[np.ndarray], fps: float) -> Path | None:
    """An MP4 (imageio-ffmpeg ships its own ffmpeg); None if frames could not be drawn."""
    if not frames:
        return None
    import imageio.v2 as imageio

    path.parent.mkdir(parents=True, exist_ok=True)
    with imageio.get_writer(path, fps=fps, codec="libx264", quality=6, macro_block_size=8) as w:
        for frame in frames:
            w.append_data(frame)
    return path


def _demo_sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    import matplotlib.pyplot as plt

    extra, figures = data["data"], out / "figures"
    fps, clip = extra["fps"], extra["clip"]
    order = [r["method"] for r in data["rows"]] + ["library"]
    paths = {name: extra["paths"][name] for name in order}  # the JSON sorted them
    image = plot_paths(figures / "paths.png", paths, extra["arena_size"], extra["seconds"])
    rep.figure(image, "where each exploration arm goes", out)
    rep.text("Three exploration episodes per arm in the open arena.").table(
        data["rows"], [c for c in EXPLORE if not c.endswith(("_low", "_high"))]
    )
    hips = {k: np.asarray(v) for k, v in extra["hips"].items()}
    rep.figure(plot_spectra(figures / "spectra.png", hips, fps), "gait spectra", out)
    ethogram = plot_ethogram(figures / "ethogram.png", np.asarray(clip["labels"]), fps,
                             f"library clip {clip['name']}")  # fmt: skip
    rep.figure(ethogram, "ethogram", out)
    fig, ax = plt.subplots(figsize=(6.4, 3))
    latents = np.asarray(extra["latents"])
    ax.plot(np.arange(len(latents)) / fps, latents[:, :4])
    ax.set(title="behaviour-prior latent (first 4 dims)", xlabel="s")
    rep.figure(save_figure(fig, figures / "latent.png"), "latent path", out)
    if extra["adapters"] is not None:
        a = extra["adapters"]
        rep.figure(plot_ranks(figures / "adapters.png", a["ranks"], a["overlap"], a["hidden"]),
                   "adapters", out)  # fmt: skip
    if extra["video"] is not None:
        rep.text(f"Video: [{extra['video']}](figures/{extra['video']}) (an episode of "
                 "behaviour-prior exploration, up to its fall).")  # fmt: skip


def sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    """The benchmark report, from ``benchmark.json`` alone (a demo's results: its own)."""
    if data["data"].get("demo"):
        return _demo_sections(data, out, rep)
    extra, rows = data["data"], data["rows"]
    figures = out / "figures"
    jobs, seeds = extra["jobs"], data["seeds"]
    explored = jobs[f"explore|{seeds[0]}"]
    if "paths" in explored:  # benchmarks before 2026-12-07 did not keep them
        half = data["config"]["task"]["arena_size"]
        seconds = data["config"]["benchmark"]["explore_seconds"]
        order = [r["method"] for r in rows if r.get("part") == "exploration"] + ["library"]
        ordered = {name: explored["paths"][name] for name in order}  # the JSON sorted them
        paths = plot_paths(figures / "paths.png", ordered, half, seconds)
        rep.figure(paths, f"where each exploration arm goes, seed {seeds[0]}", out)
    speed = extra["speed"]
    ours = {
        k.removesuffix("_steps_per_s"): v
        for k, v in speed.items()
        if k.endswith("_steps_per_s") and not k.startswith(("composer_", "dm_settings_"))
    }
    like_for_like = ", ".join(
        f"{task} {speed[f'dm_settings_{task}_steps_per_s']:,.0f} against "
        f"{speed[f'composer_{task}_steps_per_s']:,.0f}"
        for task in COMPOSER_TASKS
        if f"dm_settings_{task}_steps_per_s" in speed
    )
    rep.text(
        "Per training seed: the motor system on the CPG library, then exploration, held-out "
        "tracking and the sparse tasks. Speeds (one core, random actions, control steps/s): "
        + ", ".join(f"{k} {v:,.0f}" for k, v in ours.items())
        + f"; raw mj_step {speed['mj_step_per_s']:,.0f}/s. Like for like with dm_control "
        "(its 1 ms physics step, elliptic cones, 5 no-slip iterations), these tasks here "
        "against dm_control's composer tasks: " + (like_for_like or "not measured") + "."
    )
    part = lambda name: [r for r in rows if r.get("part") == name]  # noqa: E731
    rep.text("## Exploration (W1 of joint angles to the library; lower is closer)").table(
        part("exploration"), EXPLORE
    )
    rep.text(
        "## Held-out sequences (RMS error over the actuated limb joints, rad; all 67 hinges "
        "beside it; test clips only, the option policy adapted on the other held-out clips)"
    ).table(part("held-out tracking"), TRACK)
    rep.text("## Sparse tasks").table(part("sparse task"), TASKS)
    arms = {r["method"]: explored[r["method"]] for r in part("exploration")}
    rep.figure(
        plot_peak_vs_speed(figures / "peak_vs_speed.png", arms),
        f"gait peak vs speed, seed {seeds[0]}",
        out,
    )
    tasks = sorted({r["method"].split("/")[1] for r in part("sparse task")})
    for task in tasks:
        curves = {}
        for r in part("sparse task"):
            kind, t = r["method"].split("/")
            if t == task:
                run = jobs[f"agent|{seeds[0]}|{task}|{kind}"]
                curves[kind] = (run["curve_x"], run["curve"])
        rep.figure(
            plot_curves(figures / f"curve_{task}.png", curves, f"{task}, seed {seeds[0]}"),
            f"learning curves on {task}",
            out,
        )
    motor = extra["motor"][0]
    hidden = next(r["hidden"] for r in rows if r["method"] == "adapter_bank")
    rep.figure(
        plot_ranks(figures / "adapters.png", motor["ranks"], motor["overlap"], hidden),
        "adapter ranks and overlaps (first seed)",
        out,
    )


def demo_report(run: Any, *, resources: Any) -> str:
    """The demo's results into the run folder's ``benchmark.json``: the trained priors
    explore; naturalness against the library and random actions, gait spectra, the
    library's ethogram, the latent path and the adapters' ranks (:func:`sections` draws
    them), and an MP4 of the rat (an artifact beside it). Returns the headline."""
    import os

    from fieldrl.apps.rat.adapters import effective_rank, subspace_overlap
    from fieldrl.apps.rat.env import RatEnv
    from fieldrl.apps.rat.naturalness import naturalness, random_actions, record, top_down
    from fieldrl.apps.rat.npmp import LatentWalker
    from fieldrl.config import derive

    trained = run.trained
    cfg, models, out, library = run.config, trained.models, Path(run.dir), trained.library
    explore = derive(cfg, task={"name": "explore"})
    env = RatEnv(explore)
    fps = 1.0 / cfg.body.control_dt
    arms = {
        "behaviour_prior": lambda r: LatentWalker(models.motion, models.behaviour, r),
        "random_latent": lambda r: LatentWalker(models.motion, None, r),
        "random_actions": random_actions,
    }
    table, hips, paths = [], {}, {}
    hip = 7 + env.body.joint_names.index("hip_L_extend")
    for name, make in arms.items():
        trajectories = record(env, make, 3, 777)
        figures = naturalness(
            trajectories,
            library,
            env.body.joint_names,
            fps,
            explore.task.arena_size,
            env.body.actuated_qpos,
        )
        means = {k: v[np.isfinite(v)].mean() if np.isfinite(v).any() else None
                 for k, v in figures.items()}  # fmt: skip
        table.append(
            {"method": name, **{k: None if m is None else float(m) for k, m in means.items()}}
        )
        hips[name] = trajectories[0].qpos[:, hip]
        paths[name] = [top_down(t.xy) for t in trajectories]
    paths["library"] = [top_down(c.qpos[:, :2] - c.qpos[0, :2]) for c in library.clips[:3]]
    clip = library.clips[0]
    hips["library"] = clip.qpos[:, hip]
    walker = LatentWalker(models.motion, models.behaviour, np.random.default_rng(5))
    env.reset(seed=5)
    latents, frames = [], []
    video = os.environ.get("FIELDRL_RAT_VIDEO", "1") != "0"
    render_env = RatEnv(explore, render_mode="rgb_array") if video else None
    if render_env is not None:
        render_env.reset(seed=5)
    for _ in range(env.max_steps):
        target = render_env or env
        action = walker(target.body.proprioception())
        _, _, terminated, truncated, _ = target.step(action)
        latents.append(walker.z[0].numpy().copy())
        if render_env is not None:
            try:
                frames.append(render_env.render())
            except Exception:  # noqa: BLE001 - no OpenGL here: the report goes on without video
                render_env, frames = None, []
        if terminated or truncated:
            break
    if render_env is not None:
        render_env.close()  # free the EGL context now, not at interpreter exit
    adapters = None
    if models.adapters is not None and "adapters" in cfg.train.stages:
        bank = models.adapters.bank.detach()
        adapters = {"ranks": [effective_rank(a) for a in bank],
                    "overlap": [[subspace_overlap(a, b) for b in bank] for a in bank],
                    "hidden": cfg.adapters.hidden}  # fmt: skip
    movie = write_video(out / "figures" / "explore.mp4", frames, fps)  # an artifact of the run
    data = {"title": f"rat demo: {', '.join(cfg.train.stages)} on {len(library.clips)} clips",
            "demo": True, "fps": fps, "hips": hips, "latents": latents, "adapters": adapters,
            "paths": paths, "arena_size": explore.task.arena_size,
            "seconds": explore.task.duration,
            "clip": {"name": clip.name, "labels": clip.labels},
            "video": None if movie is None else movie.name}  # fmt: skip
    plain = json.loads(json.dumps(data, default=lambda x: np.asarray(x).tolist()))
    Benchmark(cfg, out, quick=True, workers=1).write(table, seeds=[777], data=plain)
    prior = table[0]
    peak = prior["gait_peak_hz"]
    return (
        f"behaviour prior: W1 to library {prior['w1_library']:.3f} rad, falls "
        f"{prior['fall']:.0%}, " + ("no gait peak" if peak is None else f"gait peak {peak:.1f} Hz")
    )
