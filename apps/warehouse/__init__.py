"""Warehouse consolidation: offline RL (AIQL, A²IQL) that ranks tens of thousands of
consolidation moves per planning window, learned from logs of past decisions.
"""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App, Resources
from fieldrl.apps.warehouse import benchmark, pipeline, report, service
from fieldrl.apps.warehouse.cli import add_commands
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.config import load_config
from fieldrl.runs import Run
from fieldrl.seeding import setup_process

PRESETS = Path(__file__).parent / "configs"


def _demo(out: Path, resources: Resources) -> Path:
    """Generate logs, train AIQL, evaluate it against the heuristic, write a report."""
    from fieldrl.apps.warehouse.baselines import heuristic_scores
    from fieldrl.apps.warehouse.report import day_series, plot_day, plot_scores, score_sample
    from fieldrl.report import Report

    cfg = load_config(WarehouseConfig, PRESETS / "demo.toml")
    setup_process(cfg)
    with Run.create(cfg, root=out / "runs") as run:
        metrics = pipeline.train(cfg, run=run, resources=resources)
        model, _ = pipeline.load_aiql(run.dir)
        rows = pipeline.evaluate_scorers(cfg, {"aiql": pipeline.model_scorer(model)},
                                         cfg.eval.seeds)  # fmt: skip
        run.log(cfg.aiql.steps, metrics)
        seed = cfg.eval.seeds[0]
        rep = Report("Warehouse demo: AIQL from behavior logs")
        rep.text(
            f"AIQL trained on {cfg.data.episodes} logged days of the small warehouse, "
            f"evaluated on {len(cfg.eval.seeds)} held-out days against the noise-free heuristic."
        )
        rep.table(rows, ["method", "throughput", "throughput_gain_vs_heuristic", "ci95_low",
                         "ci95_high", "constraint_violations"])  # fmt: skip
        scorers = {"heuristic": heuristic_scores, "AIQL": pipeline.model_scorer(model)}
        day = plot_day(run.dir / "day.png", day_series(cfg, scorers, seed))
        rep.figure(day, "One held-out day", run.dir)
        scores = plot_scores(run.dir / "scores.png", score_sample(cfg, model, seed))
        rep.figure(scores, "Scores", run.dir)
        rep.write(run.dir / "report.md")
    return run.dir


APP = App(
    summary="Offline RL (AIQL, A²IQL) ranking warehouse consolidation moves from logs.",
    config_model=WarehouseConfig,
    presets_dir=PRESETS,
    train=pipeline.train,
    evaluate=pipeline.evaluate,
    benchmark=benchmark.benchmark,
    demo=_demo,
    service=service.service,
    example_request=service.example_request,
    report=report.sections,
    sweep_metric="validation_gain_vs_heuristic",
    status="ready (issue 4)",
    add_commands=add_commands,
    data_key="data.logs",
    data_flag="--logs",
)
