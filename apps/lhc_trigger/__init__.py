"""LHC trigger control: RL control of H_T and anomaly-detection trigger thresholds.

Implements GFPO-F / GFPO-FR streaming threshold control (and GRPO, PPO, Lagrangian PPO,
PD, quantile-tracker and static-menu baselines) on an LHC fill emulator or CMS NanoAOD.
"""

from __future__ import annotations

import os
from pathlib import Path

from fieldrl.app import App, Resources
from fieldrl.apps.lhc_trigger import benchmark, pipeline, service
from fieldrl.apps.lhc_trigger.cli import add_commands
from fieldrl.apps.lhc_trigger.config import LHCTriggerConfig
from fieldrl.config import load_config
from fieldrl.seeding import setup_process

PRESETS = Path(__file__).parent / "configs"


def _demo(out: Path, resources: Resources) -> Path:
    """Simulate fills, train a small GFPO-F controller, benchmark it against the baselines."""
    cfg = load_config(LHCTriggerConfig, PRESETS / "demo.toml")
    setup_process(cfg)
    benchmark.benchmark(cfg, out=out, quick=True, resources=resources)
    run_dir = sorted((out / "runs" / cfg.app).iterdir())[-1]  # the GFPO-F run
    # the run's copy of the report points at the benchmark's plots beside it
    figures = os.path.relpath(out, run_dir)
    (run_dir / "report.md").write_text(
        (out / "report.md").read_text().replace("](", f"]({figures}/")
    )
    return run_dir


APP = App(
    summary="RL control of LHC trigger thresholds (GFPO-F/FR) on simulated fills or NanoAOD.",
    config_model=LHCTriggerConfig,
    presets_dir=PRESETS,
    train=pipeline.train,
    evaluate=pipeline.evaluate,
    benchmark=benchmark.benchmark,
    demo=_demo,
    service=service.service,
    example_request=service.example_request,
    sweep_metric="validation_in_band_fraction",
    status="ready (issue 3)",
    add_commands=add_commands,
    data_key="data.files",
)
