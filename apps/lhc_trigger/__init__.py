"""LHC trigger control: RL control of H_T and anomaly-detection trigger thresholds.

Implements GFPO-F / GFPO-FR streaming threshold control (and GRPO, PPO, Lagrangian PPO,
PD, quantile-tracker and static-menu baselines) on an LHC fill emulator or CMS NanoAOD.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``; ``sim`` (the fill emulator), ``data`` (NanoAOD), ``triggers`` (H_T and the
  autoencoder), ``stream`` (scored windows), ``env`` (the control problem);
- ``controllers`` (baselines and the guard), ``gfpo``, ``ppo``: the controllers;
- ``pipeline``: ``train``, ``load``, ``evaluate``; ``cli``: ``simulate``, ``train-ad``;
- ``service``: ``service``, ``example_request``, ``request_variant``; ``benchmark``,
  ``metrics``: the benchmark; ``report``: its sections and the demo.
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
