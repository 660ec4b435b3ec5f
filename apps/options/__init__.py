"""Option trading: a LiveOption-class testbed (a market that cannot leak the future, orders
validated like a broker's, costs and margin like a real account) with MaskablePPO, an LLM
agent adapter, rule baselines and a hindsight oracle, graded by a hierarchical metric suite."""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App
from fieldrl.apps.options.config import OptionsConfig

APP = App(
    summary="Multi-leg option strategies under real execution and margin rules: RL and LLM agents.",
    config_model=OptionsConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="pnl_per_risk",
    status="ready (issue 26; MaskablePPO does not beat the rules, order checks under 20k/s)",
    units={
        "pnl_per_risk": "P&L / risk",
        "return": "share of capital",
        "sharpe": "annualized",
        "max_drawdown": "share of NAV",
        "executable_rate": "share",
        "costs": "dollars",
    },  # fmt: skip
    add_commands="cli:add_commands",
    data_key="market.data",
    data_help="Your option-chain files (CSV or Parquet) or glob patterns (repeatable).",
)
