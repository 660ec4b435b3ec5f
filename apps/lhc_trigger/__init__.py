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
    add_commands="cli:add_commands",
    request_variant="service:request_variant",
    data_key="data.files",
)
