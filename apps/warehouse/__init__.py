"""Warehouse consolidation: offline RL (AIQL, A²IQL) that ranks tens of thousands of
consolidation moves per planning window, learned from logs of past decisions.
"""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App
from fieldrl.apps.warehouse.config import WarehouseConfig

APP = App(
    summary="Offline RL (AIQL, A²IQL) ranking warehouse consolidation moves from logs.",
    config_model=WarehouseConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="validation_gain_vs_heuristic",
    status="ready (issues 4, 29)",
    units={
        "throughput": "units / labor h",
        "ci95_low": "units / labor h",
        "ci95_high": "units / labor h",
        "gain_vs_heuristic": "fraction",
        "violations": "count",
        "checkpoint_step": "gradient step",
    },
    add_commands="cli:add_commands",
    data_key="data.logs",
    data_flag="--logs",
)
