"""Mean-field battles: MF-MAPPO for zero-sum team games with thousands of agents per team,
on analytic population games (exact equilibria, exploitability) and a grid battlefield.
"""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App, Resources
from fieldrl.apps.battles import benchmark, pipeline, report, service
from fieldrl.apps.battles.config import BattlesConfig
from fieldrl.config import load_config
from fieldrl.runs import Run, open_run
from fieldrl.seeding import setup_process

PRESETS = Path(__file__).parent / "configs"


def _demo(out: Path, resources: Resources) -> Path:
    """Train on weighted RPS and on a small battle; report the exploitability curve,
    population heatmaps, survival curves and an animated replay."""
    from fieldrl.report import Report

    game_cfg = load_config(BattlesConfig, PRESETS / "game.toml", ["train.iterations=200"])
    setup_process(game_cfg)
    with Run.create(game_cfg, root=out / "runs") as game_run:
        game_metrics = pipeline.train(game_cfg, run=game_run, resources=resources)
    cfg = load_config(BattlesConfig, PRESETS / "demo.toml")
    setup_process(cfg)
    with Run.create(cfg, root=out / "runs") as run:
        run.log(cfg.train.iterations, pipeline.train(cfg, run=run, resources=resources))
    metrics = pipeline.evaluate(cfg, run=open_run(run.dir, BattlesConfig), resources=resources,
                                out=run.dir / "eval")  # fmt: skip
    _, teams = pipeline.load_teams(run.dir)
    mine = pipeline.SidedPolicy(cfg, teams)
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    arena = pipeline.make_env(cfg, 1, n, cfg.eval.seeds[0])
    rush, _ = pipeline.opponent_policy("rush")
    records = {
        "MF-MAPPO (blue) vs rush": report.record_battle(arena, mine, rush, 0),
        "rush vs MF-MAPPO (red)": report.record_battle(arena, rush, mine, 1),
        "MF-MAPPO self-play": report.record_battle(arena, mine, mine, 2),
    }
    points = pipeline.exploitability_curve(game_run.dir)
    name = f"{game_cfg.scenario.game}/n{game_cfg.scenario.agents_per_team}"
    rep = Report("Battles demo: MF-MAPPO on a population game and a battlefield")
    rep.text(
        f"Weighted rock-paper-scissors, {game_cfg.scenario.agents_per_team} agents per team: "
        f"final exploitability {game_metrics['validation_exploitability']:.3f} "
        f"(noise floor {game_metrics['validation_noise_floor']:.3f}), TV distance to the "
        f"exact equilibrium {game_metrics['validation_tv_distance']:.3f}."
    )
    rep.figure(report.plot_exploitability(run.dir / "exploitability.png", {name: [points]},
                                          {name: game_metrics["validation_noise_floor"]}),
               "Exploitability during self-play (dashed: 2x noise floor)", run.dir)  # fmt: skip
    rep.text(
        f"Battlefield {cfg.scenario.height}x{cfg.scenario.width}, trained at "
        f"{cfg.scenario.agents_per_team} agents per team, evaluated at {n} per team "
        f"({cfg.eval.episodes} battles per side): win rate "
        + ", ".join(f"{k.removeprefix('win_rate_vs_')} {v:.2f}" for k, v in metrics.items())
        + "."
    )
    rep.figure(report.plot_heatmaps(run.dir / "heatmaps.png", records["MF-MAPPO (blue) vs rush"]),
               "MF-MAPPO (blue) against the scripted rush (red)", run.dir)  # fmt: skip
    rep.figure(report.plot_survival(run.dir / "survival.png", records), "Survival", run.dir)
    rep.figure(report.write_replay(run.dir / "replay.gif", records["MF-MAPPO (blue) vs rush"]),
               "Replay", run.dir)  # fmt: skip
    rep.write(run.dir / "report.md")
    return run.dir


APP = App(
    summary="MF-MAPPO for zero-sum team battles and population games with thousands of agents.",
    config_model=BattlesConfig,
    presets_dir=PRESETS,
    train=pipeline.train,
    evaluate=pipeline.evaluate,
    benchmark=benchmark.benchmark,
    demo=_demo,
    service=service.service,
    example_request=service.example_request,
    report=report.sections,
    sweep_metric="validation_win_rate",
    status="ready (issue 5; cross-play target missed, see docs)",
    data_key="eval.opponents",
    data_flag="--opponent",
    data_help="Opponent(s): random, rush, focus, or a trained run folder (repeatable), e.g. "
    "--opponent focus --opponent runs/battles/<run>.",
)
