"""Option trading: a LiveOption-class testbed (a market that cannot leak the future, orders
validated like a broker's, costs and margin like a real account) with MaskablePPO, an LLM
agent adapter, rule baselines and a hindsight oracle, graded by a hierarchical metric suite.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``; ``sim`` (synthetic market), ``data`` (real chains), ``market``, ``pricing``;
- ``orders``, ``account``, ``costs``, ``strategies``: execution, margin and the menu;
- ``env``, ``episodes``: the environment and its splits; ``ppo``, ``llm``, ``baselines``:
  the agents; ``evaluate``, ``metrics``: playing and grading an episode (the oracle too);
- ``pipeline``: ``train``, ``load``, ``evaluate``; ``cli``: ``play``, ``agents``;
- ``service``: ``service``, ``example_request``; ``benchmark``; ``report``: its sections
  and the demo.
"""

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
