"""LHC trigger control: RL control of H_T and anomaly-detection trigger thresholds.

Implements GFPO-F / GFPO-FR streaming threshold control (and GRPO, PPO, Lagrangian PPO,
PD, quantile-tracker and static-menu baselines) on an LHC fill emulator or CMS NanoAOD.
"""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App
from fieldrl.apps.lhc_trigger.config import LHCTriggerConfig

APP = App(
    summary="RL control of LHC trigger thresholds (GFPO-F/FR) on simulated fills or NanoAOD.",
    config_model=LHCTriggerConfig,
    presets_dir=Path(__file__).parent / "configs",
    # what loads, trains, evaluates, serves and benchmarks (module:function in this package)
    load="pipeline:load",
    train="pipeline:train",
    evaluate="pipeline:evaluate",
    service="service:service",
    example_request="service:example_request",
    benchmark="benchmark:benchmark",
    report="report:sections",
    demo_report="report:demo_report",
    request_variant="service:request_variant",
    add_commands="cli:add_commands",
    sweep_metric="validation_in_band_fraction",
    status="ready (issues 3, 28)",
    units={
        "fraction": "share of windows",
        "_khz": "kHz",
        "_ms": "ms",
        "efficiency": "share",
        "efficiency_in_band": "share",
        "step_rms": "menu units",
        "checkpoint_step": "window",
    },
    data_key="data.files",
)
