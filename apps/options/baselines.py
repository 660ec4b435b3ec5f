"""The baselines: rules a desk would run and a random valid strategy at the same risk
budget (the hindsight oracle, which replays these rules, is in ``evaluate.py``).

A policy is ``policy(view) -> action`` on the step's :class:`AgentView` (0 hold, 1 close,
or ``("open", MenuItem)`` to open a strategy that need not be in the suite's menu); every
order is sized at the suite's risk budget and validated by the account like the agents'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fieldrl.apps.options.env import AgentView
from fieldrl.apps.options.ppo import masked_policy
from fieldrl.apps.options.strategies import MenuItem
from fieldrl.config import ConfigError

__all__ = ["AGENTS", "BASELINES", "CLOSE", "HOLD", "SUITE_BASELINES", "Action", "Policy",
           "policy_for", "random_valid", "rule", "suite_policies"]  # fmt: skip

Action = int | tuple[str, MenuItem]
Policy = Callable[[AgentView], Action]
HOLD, CLOSE = 0, 1


def rule(item: MenuItem, exit_dte: int | None = None, take_profit: float | None = None,
         enter_days_before_earnings: int | None = None, exit_after_earnings: bool = False
         ) -> Policy:  # fmt: skip
    """Open ``item`` whenever flat (at most ``enter_days_before_earnings`` days before an
    announcement, if given); close at ``exit_dte`` days to expiry, at ``take_profit`` of the
    credit received, or on the first step after the announcement."""

    def policy(view: AgentView) -> Action:
        today = view.today
        events = view.market.underlyings[view.symbol].earnings
        if view.open_item is None:
            if enter_days_before_earnings is not None and not any(
                0 <= (e - today).days <= enter_days_before_earnings for e in events
            ):
                return HOLD
            return ("open", item)
        dte = view.days_to_expiry
        if exit_dte is not None and dte is not None and dte <= exit_dte:
            return CLOSE
        if take_profit is not None and view.entry_cash > 0:
            if view.strategy_pnl >= take_profit * view.entry_cash:
                return CLOSE
        if exit_after_earnings and any(view.opened_on <= e < today for e in events):
            return CLOSE
        return HOLD

    return policy


def buy_and_hold(view: AgentView) -> Action:
    """Hold the shares (overlay), or put the capital in the stock on the first step."""
    if view.shares or view.step > 0 or view.open_item is not None:
        return HOLD
    return ("open", MenuItem("buy_shares", 0.0, 0))


def random_valid(p_open: float = 0.2, p_close: float = 0.1) -> Policy:
    """A valid menu action at random: open a random affordable strategy with probability
    ``p_open`` when flat, close with probability ``p_close`` when holding one."""

    def policy(view: AgentView) -> Action:
        mask, rng = view.mask, view.rng
        if mask[1]:
            return CLOSE if rng.random() < p_close else HOLD
        opens = np.flatnonzero(mask[2:]) + 2
        if len(opens) and rng.random() < p_open:
            return int(rng.choice(opens))
        return HOLD

    return policy


BASELINES: dict[str, Callable[[], Policy]] = {
    "buy_and_hold": lambda: buy_and_hold,
    "covered_call_30d": lambda: rule(MenuItem("covered_call", 0.30, 30)),
    "buy_write_30d": lambda: rule(MenuItem("buy_write", 0.30, 30)),
    "cash_secured_put_30d": lambda: rule(MenuItem("cash_secured_put", 0.30, 30)),
    "iron_condor_16d": lambda: rule(
        MenuItem("iron_condor", 0.16, 45), exit_dte=21, take_profit=0.5
    ),  # fmt: skip
    "pre_earnings_straddle": lambda: rule(
        MenuItem("long_straddle", 0.5, 7), enter_days_before_earnings=3, exit_after_earnings=True
    ),  # fmt: skip
    "random_valid": random_valid,
}


# the rules each suite is compared with (and random valid, and the trained agent)
SUITE_BASELINES = {
    "overlay": ["buy_and_hold", "covered_call_30d"],
    "strategy": ["buy_and_hold", "buy_write_30d", "cash_secured_put_30d", "iron_condor_16d"],
    "earnings": ["pre_earnings_straddle", "iron_condor_16d"],
    "zero_dte": ["iron_condor_0dte"],
}

AGENTS = [*BASELINES, "iron_condor_0dte"]  # what ``fieldrl options simulate --agent`` takes


def policy_for(name: str) -> Policy:
    """A baseline by name (the suites' rules, and the 0DTE iron condor at the open)."""
    if name == "iron_condor_0dte":
        return rule(MenuItem("iron_condor", 0.10, 0))
    if name not in BASELINES:
        raise ConfigError(f"no agent {name!r}; agents: {[*AGENTS, 'llm']}")
    return BASELINES[name]()


def suite_policies(model: Any, suite: str) -> dict[str, Policy]:
    """A trained MaskablePPO beside the suite's rule baselines and random valid."""
    return {"maskable_ppo": masked_policy(model),
            **{name: policy_for(name) for name in SUITE_BASELINES[suite]},
            "random_valid": random_valid()}  # fmt: skip
