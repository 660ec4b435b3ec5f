"""Warehouse consolidation: offline RL (AIQL, A²IQL) that ranks tens of thousands of
consolidation moves per planning window, learned from logs of past decisions.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``; ``sim`` (the warehouse), ``selection`` (scores to feasible moves), ``env``
  (episodes), ``logs`` (the log format, read into per-epoch arrays);
- ``aiql``, ``a2iql``: the algorithms; ``baselines``; ``headroom``: the upper references;
- ``pipeline``: ``train``, ``load``, ``evaluate`` (and the logs); ``cli``:
  ``generate-logs``, ``adapt``;
- ``service``: ``service``, ``example_request``; ``benchmark``; ``report``: its sections
  and the demo.
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
