"""Pictures of a battle and of learning: population heatmaps over time, survival curves,
an animated replay (GIF), exploitability curves, and the cross-play matrix."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.animation import FuncAnimation, PillowWriter  # noqa: E402

from fieldrl.apps.battles.baselines import TeamPolicy  # noqa: E402
from fieldrl.apps.battles.battlefield import Battlefield  # noqa: E402
from fieldrl.benchmark import Benchmark  # noqa: E402
from fieldrl.report import Report, save_figure  # noqa: E402
from fieldrl.runs import Run  # noqa: E402

if TYPE_CHECKING:
    from fieldrl.app import Resources
    from fieldrl.runs import LoadedRun


__all__ = [
    "BattleRecord",
    "demo_report",
    "sections",
    "plot_crossplay",
    "plot_heatmaps",
    "plot_survival",
    "record_battle",
    "write_replay",
]


@dataclass
class BattleRecord:
    """One battle (the first copy): alive agents per cell ``[T + 1, 2, H, W]`` and per team."""

    counts: np.ndarray
    alive: np.ndarray  # [T + 1, 2]
    objective: np.ndarray  # [H, W] bool
    agents_per_team: int


def record_battle(env: Battlefield, blue: TeamPolicy, red: TeamPolicy, seed: int) -> BattleRecord:
    """Play one episode on every copy of ``env`` and keep the first copy's frames."""
    rng = np.random.default_rng(seed)
    state = env.reset()
    frames = [env.counts(state)[0]]
    for _ in range(env.horizon):
        actions = np.stack([blue(env, state, 0, rng), red(env, state, 1, rng)], axis=1)
        state, result = env.step(state, actions)
        frames.append(env.counts(state)[0])
        if result.done[0]:
            break
    counts = np.stack(frames).reshape(len(frames), 2, env.height, env.width)
    return BattleRecord(
        counts, counts.sum((2, 3)), env.objective.reshape(env.height, env.width), env.n
    )


def _density_image(frame: np.ndarray, scale: float | None = None) -> np.ndarray:
    """RGB: blue team in the blue channel, red in the red channel, brightness the square
    root of agents per cell over ``scale`` (default: the frame's densest cell)."""
    scale = max(float(frame.max()) if scale is None else scale, 1.0)
    image = np.zeros((*frame.shape[1:], 3))
    image[..., 2] = frame[0] / scale
    image[..., 0] = frame[1] / scale
    return np.sqrt(image)


def _outline_objective(ax: Any, objective: np.ndarray) -> None:
    rows, cols = np.nonzero(objective)
    for r, c in zip(rows, cols, strict=True):
        ax.add_patch(plt.Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="gold", lw=1.2))


def plot_heatmaps(path: Path, record: BattleRecord, panels: int = 5) -> Path:
    """Both teams' densities at ``panels`` times on one scale (blue = blue team, red = red
    team), with the grid's rows and columns and a colour scale in agents per cell."""
    times = np.linspace(0, len(record.counts) - 1, panels).astype(int)
    scale = max(float(record.counts[times].max()), 1.0)
    fig, axes = plt.subplots(1, panels + 1, figsize=(2.3 * panels + 1.2, 2.9),
                             gridspec_kw={"width_ratios": [1] * panels + [0.12]})  # fmt: skip
    for ax, t in zip(axes[:-1], times, strict=True):
        ax.imshow(_density_image(record.counts[t], scale), interpolation="nearest")
        _outline_objective(ax, record.objective)
        ax.set(title=f"step {t}", xlabel="column")
    axes[0].set_ylabel("row")
    norm = matplotlib.colors.PowerNorm(0.5, vmin=0, vmax=scale)
    bar = fig.colorbar(matplotlib.cm.ScalarMappable(norm, "Blues"), cax=axes[-1])
    bar.set_label("agents per cell (blue / red)", fontsize=8)
    fig.suptitle("Population density over the battle (gold: objective cells)", fontsize=9)
    return save_figure(fig, path)


def plot_survival(path: Path, records: Mapping[str, BattleRecord]) -> Path:
    """Share of each team alive over the battle, one panel per matchup."""
    fig, axes = plt.subplots(
        1, len(records), figsize=(3.6 * len(records), 3), dpi=110, squeeze=False
    )
    for ax, (title, rec) in zip(axes[0], records.items(), strict=True):
        share = rec.alive / rec.agents_per_team
        ax.plot(share[:, 0], color="tab:blue", lw=2.5, alpha=0.6, label="blue")
        ax.plot(share[:, 1], color="tab:red", lw=1.2, ls="--", label="red")  # visible on top
        ax.set(title=title, xlabel="step", ylabel="alive share", ylim=(0, 1.05))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def write_replay(path: Path, record: BattleRecord, fps: int = 6) -> Path:
    """An animated GIF of the battle's densities."""
    fig, ax = plt.subplots(figsize=(3.2, 3.4), dpi=90)
    image = ax.imshow(_density_image(record.counts[0]), interpolation="nearest")
    _outline_objective(ax, record.objective)
    ax.set(xticks=[], yticks=[])

    def frame(t: int) -> list[Any]:
        image.set_data(_density_image(record.counts[t]))
        blue, red = record.alive[t]
        ax.set_title(f"t = {t}   blue {blue:,}  red {red:,}", fontsize=8)
        return [image]

    FuncAnimation(fig, frame, frames=len(record.counts), blit=False).save(
        str(path), writer=PillowWriter(fps=fps)
    )
    plt.close(fig)
    return path


def plot_crossplay(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Win rate (both sides pooled) of each method against each opponent; blank: not played."""
    methods = sorted({r["method"] for r in rows})
    opponents = sorted({r["opponent"] for r in rows})
    fig, ax = plt.subplots(figsize=(1.8 + 1.4 * len(opponents), 1.2 + 0.6 * len(methods)), dpi=110)
    grid = np.full((len(methods), len(opponents)), np.nan)
    for i, m in enumerate(methods):
        for j, o in enumerate(opponents):
            cell = [r["win_rate"] for r in rows if r["method"] == m and r["opponent"] == o]
            if cell:
                grid[i, j] = float(np.mean(cell))
                ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=9)
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set(
        xticks=range(len(opponents)),
        yticks=range(len(methods)),
        xlabel="opponent",
        title="Win rate (both sides)",
    )
    ax.set_xticklabels(opponents, fontsize=8)
    ax.set_yticklabels(methods, fontsize=8)
    return save_figure(fig, path)


def plot_scaling(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Agent-steps per second against the number of agents (log-log)."""
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    series = [
        ("env_agent_steps_per_s", "battlefield alone"),
        ("env_policy_agent_steps_per_s", "battlefield + both teams' actors"),
        ("magent2_agent_steps_per_s", "MAgent2 battle_v4, random actions"),
    ]
    for key, label in series:
        points = [(r["n_agents"], r[key]) for r in rows if r.get(key)]
        if points:
            x, y = zip(*points, strict=True)
            ax.plot(x, y, marker="o", label=label)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="agents (both teams)",
        ylabel="agent-steps / s",
        title="Throughput on 2 CPU cores",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_exploitability(path: Path, curves: Mapping[str, Any], floors: Mapping[str, float]) -> Path:
    """Exploitability against training iterations, one colour per (game, N), one line per
    seed: the current actors thin, their running average (where training averages) thick;
    twice the noise floor dashed (the target)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6), dpi=110)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, seeds) in enumerate(curves.items()):
        colour = colours[k % len(colours)]
        for i, points in enumerate(seeds):
            averaged = [(p[0], p[3]) for p in points if p[3] is not None]
            if points:
                steps, expl = [p[0] for p in points], [p[1] for p in points]
                ax.plot(steps, expl, color=colour, alpha=0.4 if averaged else 0.8,
                        linewidth=0.8 if averaged else 1.5,
                        label=name if i == 0 else None)  # fmt: skip
            if averaged:
                steps, expl = zip(*averaged, strict=True)
                ax.plot(steps, expl, color=colour, linewidth=2.2,
                        label=f"{name}, averaged actors" if i == 0 else None)  # fmt: skip
        if name in floors:
            ax.axhline(2 * floors[name], color=colour, linestyle="--", linewidth=1)
    ax.set(
        xlabel="iteration",
        ylabel="exploitability",
        yscale="log",
        title="Exploitability in self-play (dashed: 2x noise floor)",
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_po(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Win rate against the fully observing team per (noise, delay), one line per lambda."""
    fig, ax = plt.subplots(figsize=(6.5, 3.4), dpi=110)
    conditions = sorted({(r["noise"], r["delay"]) for r in rows})
    labels = [f"noise {n}\ndelay {d}" for n, d in conditions]
    for lam in sorted({r["lambda"] for r in rows}):
        y = [
            next(
                r["win_rate"] for r in rows if r["lambda"] == lam and (r["noise"], r["delay"]) == c
            )
            for c in conditions
        ]
        ax.plot(range(len(conditions)), y, marker="o", label=f"lambda = {lam}")
    ax.set_xticks(range(len(conditions)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set(
        ylabel="win rate vs full-observation MF-MAPPO",
        ylim=(0, 1),
        title="Robustness to a noisy, delayed opponent map",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


COLUMNS = {
    "scaling": ["n_agents", "env_agent_steps_per_s", "env_policy_agent_steps_per_s",
                "peak_mem_mb", "magent2_agent_steps_per_s"],
    "game": ["game", "n_agents", "exploitability", "exploitability_std", "noise_floor",
             "ratio_to_floor", "tv_distance", "seeds"],
    "crossplay": ["method", "opponent", "agents_per_team", "episodes", "win_rate", "draw_rate",
                  "loss_rate", "ci95_low", "ci95_high", "win_rate_as_blue", "win_rate_as_red",
                  "win_rate_per_training_seed"],
    "partial_observability": ["lambda", "noise", "delay", "win_rate", "draw_rate", "loss_rate",
                              "ci95_low", "ci95_high"],
}  # fmt: skip


def _demo_sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    game, field = data["data"]["game"], data["data"]["battlefield"]
    floor = game["validation_noise_floor"]
    rep.text(
        f"The population game {game['game']}, {game['agents_per_team']} agents per team, "
        f"{game['iterations']} iterations of self-play: final exploitability "
        f"{game['validation_exploitability']:.3f} (noise floor {floor:.3f}), TV distance to "
        f"the exact equilibrium {game['validation_tv_distance']:.3f}."
    )
    curve = {game["name"]: [game["curve"]]}
    rep.figure(plot_exploitability(out / "exploitability.png", curve, {game["name"]: floor}),
               "Exploitability during self-play (dashed: 2x noise floor)", out)  # fmt: skip
    wins = ", ".join(f"{k.removeprefix('win_rate_vs_')} {v:.2f}"
                     for k, v in field["win_rates"].items())  # fmt: skip
    rep.text(
        f"Battlefield {field['height']}x{field['width']}, trained at {field['agents_per_team']} "
        f"agents per team, evaluated at {field['evaluated_at']} per team ({field['episodes']} "
        f"battles per side): win rate {wins}."
    )
    rep.figure(out / "heatmaps.png", "MF-MAPPO (blue) against the scripted rush (red)", out)
    rep.figure(out / "survival.png", "Survival", out)
    rep.figure(out / "replay.gif", "Replay", out)


def sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    """The benchmark report's tables and plots, from ``benchmark.json``'s rows and data (a
    demo's results: its own, with the pictures it drew)."""
    if data["data"].get("demo"):
        return _demo_sections(data, out, rep)
    rows = data["rows"]

    def section(name: str) -> list[Mapping[str, Any]]:
        return [r for r in rows if r["section"] == name]

    if section("scaling"):
        rep.text("## Scaling").table(section("scaling"), COLUMNS["scaling"])
        rep.figure(plot_scaling(out / "scaling.png", section("scaling")), "Scaling", out)
    if section("game"):
        rep.text("## Analytic games").table(section("game"), COLUMNS["game"])
        floors = {f"{r['game']}/n{r['n_agents']}": r["noise_floor"] for r in section("game")}
        curves = data["data"].get("exploitability_curves", {})
        rep.figure(plot_exploitability(out / "exploitability.png", curves, floors),
                   "Exploitability during training", out)  # fmt: skip
    if section("crossplay"):
        rep.text("## Cross-play").table(section("crossplay"), COLUMNS["crossplay"])
        rep.figure(plot_crossplay(out / "crossplay.png", section("crossplay")),
                   "Cross-play win rates", out)  # fmt: skip
    po = section("partial_observability")
    if po:
        rep.text("## Partial observability").table(po, COLUMNS["partial_observability"])
        rep.figure(plot_po(out / "partial_observability.png", po),
                   "Partial observability sweep", out)  # fmt: skip


def demo_report(run: LoadedRun, *, resources: Resources) -> str:
    """The demo's results into the run folder's ``benchmark.json``: the benchmark's first
    game run (``benchmark.games``, its first N and training seed) trained beside the
    battlefield run, with its exploitability curve; then the battlefield team against the
    scripted and random teams at the evaluation population, with heatmaps, survival curves
    and a replay (drawn here; :func:`sections` writes the report)."""
    from fieldrl.apps.battles import pipeline

    cfg = run.config
    game_cfg, _ = pipeline.game_jobs(cfg, "")[0]
    with Run.create(game_cfg, root=run.dir.parents[1]) as game_run:
        game = pipeline.train(game_cfg, run=game_run, resources=resources)
    metrics = pipeline.evaluate(cfg, run=run, resources=resources, out=run.dir / "eval")
    mine = pipeline.SidedPolicy(cfg, run.trained)
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    arena = pipeline.make_env(cfg, 1, n, cfg.eval.seeds[0])
    rush, _ = pipeline.opponent_policy("rush")
    records = {
        "MF-MAPPO (blue) vs rush": record_battle(arena, mine, rush, 0),
        "rush vs MF-MAPPO (red)": record_battle(arena, rush, mine, 1),
        "MF-MAPPO self-play": record_battle(arena, mine, mine, 2),
    }
    name = f"{game_cfg.scenario.game}/n{game_cfg.scenario.agents_per_team}"
    battle = records["MF-MAPPO (blue) vs rush"]
    # the battles' frames stay out of the results file: their pictures are its artifacts
    plot_heatmaps(run.dir / "heatmaps.png", battle)
    plot_survival(run.dir / "survival.png", records)
    write_replay(run.dir / "replay.gif", battle)
    data = {
        "title": "Battles demo: MF-MAPPO on a population game and a battlefield",
        "demo": True,
        "game": {"name": name, "game": game_cfg.scenario.game,
                 "agents_per_team": game_cfg.scenario.agents_per_team,
                 "iterations": game_cfg.train.iterations, **game,
                 "curve": pipeline.exploitability_curve(game_run.dir)},
        "battlefield": {"height": cfg.scenario.height, "width": cfg.scenario.width,
                        "agents_per_team": cfg.scenario.agents_per_team, "evaluated_at": n,
                        "episodes": cfg.eval.episodes, "win_rates": metrics},
    }  # fmt: skip
    rows = [{"method": "mf_mappo", **metrics}]
    Benchmark(cfg, run.dir, quick=True, workers=resources.workers).write(
        rows, seeds=cfg.eval.seeds, data=json.loads(json.dumps(data, default=float))
    )
    floor = game["validation_noise_floor"]
    wins = ", ".join(f"{k.removeprefix('win_rate_vs_')} {v:.2f}" for k, v in metrics.items())
    exploitability = game["validation_exploitability"]
    return (f"MF-MAPPO win rate at {n} per team: {wins}; {game_cfg.scenario.game} "
            f"exploitability {exploitability:.3f} (floor {floor:.3f})")  # fmt: skip
