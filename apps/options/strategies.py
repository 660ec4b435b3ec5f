"""The strategy menu: named multi-leg templates turned into orders on a chain.

A template picks its strikes by delta and its expiry by days to expiry, so one menu entry
(template, delta, DTE) means the same trade on any chain. Agents choose from the menu (the
RL agent's action space, the baselines, the oracle) or write orders themselves (the LLM
agent); either way the account validates the order.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from fieldrl.apps.options.market import Chain
from fieldrl.apps.options.orders import Order

__all__ = ["TEMPLATES", "MenuItem", "build_order", "pick_expiry", "pick_strike"]

# name -> legs as (instrument, right, side, delta role); roles: "d" the menu's delta, "wing"
# a third of it (the protective legs of spreads and condors), "atm" delta 0.5
TEMPLATES: dict[str, tuple[tuple[str, str | None, str, str], ...]] = {
    "long_call": (("option", "call", "buy", "d"),),
    "long_put": (("option", "put", "buy", "d"),),
    "cash_secured_put": (("option", "put", "sell", "d"),),
    "buy_write": (("stock", None, "buy", ""), ("option", "call", "sell", "d")),
    "covered_call": (("option", "call", "sell", "d"),),
    "protective_put": (("option", "put", "buy", "d"),),
    "collar": (("option", "call", "sell", "d"), ("option", "put", "buy", "d")),
    "bull_put_spread": (("option", "put", "sell", "d"), ("option", "put", "buy", "wing")),
    "bear_call_spread": (("option", "call", "sell", "d"), ("option", "call", "buy", "wing")),
    "bull_call_spread": (("option", "call", "buy", "atm"), ("option", "call", "sell", "d")),
    "bear_put_spread": (("option", "put", "buy", "atm"), ("option", "put", "sell", "d")),
    "iron_condor": (("option", "put", "sell", "d"), ("option", "put", "buy", "wing"),
                    ("option", "call", "sell", "d"), ("option", "call", "buy", "wing")),
    "long_straddle": (("option", "call", "buy", "atm"), ("option", "put", "buy", "atm")),
    "long_strangle": (("option", "call", "buy", "d"), ("option", "put", "buy", "d")),
    "short_strangle": (("option", "call", "sell", "d"), ("option", "put", "sell", "d")),
    "buy_shares": (("stock", None, "buy", ""),),  # buy-and-hold, in lots of 100 shares
}  # fmt: skip


@dataclass(frozen=True)
class MenuItem:
    template: str
    delta: float  # the |delta| of the "d" legs
    dte: int  # target calendar days to expiry

    @property
    def name(self) -> str:
        return f"{self.template}:{round(self.delta * 100)}d:{self.dte}dte"


def pick_expiry(chain: Chain, dte: int) -> dt.date | None:
    """The listed expiry closest to ``dte`` days (0: today's, if listed); None if none."""
    today = chain.time.date()
    expiries = [e for e in chain.expiries() if (e - today).days >= (0 if dte == 0 else 1)]
    if not expiries:
        return None
    return min(expiries, key=lambda e: (abs((e - today).days - dte), e))


def pick_strike(chain: Chain, expiry: dt.date, call: bool, delta: float) -> int | None:
    """The row of ``expiry``'s call (put) whose |delta| is closest to ``delta``."""
    key = (expiry, bool(call), delta)
    if key not in chain.picks:
        rows = np.flatnonzero((chain.expiry == np.datetime64(expiry, "D")) & (chain.call == call))
        gap = np.abs(np.abs(chain.greeks.delta[rows]) - delta)
        found = len(rows) and not np.isnan(gap).all()
        chain.picks[key] = int(rows[np.nanargmin(gap)]) if found else None
    return chain.picks[key]


def build_order(item: MenuItem, chain: Chain, quantity: int) -> Order | None:
    """The order for ``quantity`` units of ``item`` on ``chain``, or None when the chain
    cannot express it (no expiry, or the wing would land on the short strike)."""
    expiry = pick_expiry(chain, item.dte)
    if expiry is None:
        return None
    legs, rows = [], {}
    for instrument, right, side, role in TEMPLATES[item.template]:
        if instrument == "stock":
            legs.append({"instrument": "stock", "side": side, "quantity": 100 * quantity})
            continue
        target = {"d": item.delta, "wing": item.delta / 3, "atm": 0.5}[role]
        row = pick_strike(chain, expiry, right == "call", target)
        if row is not None and role == "wing":
            row = _beyond(chain, row, rows[(right, "d")], right == "call")
        if row is None or row in rows.values():
            return None  # the chain has no such strike, or two legs would be one contract
        rows[(right, role)] = row
        legs.append({"right": right, "strike": float(chain.strike[row]), "expiry": expiry,
                     "side": side, "quantity": quantity})  # fmt: skip
    return Order(underlying=chain.symbol, legs=legs)


def _beyond(chain: Chain, wing: int, short: int, call: bool) -> int | None:
    """``wing`` if it is further out of the money than ``short`` (same expiry), else the
    next listed strike beyond ``short``; None at the end of the chain."""
    out = 1 if call else -1
    if (chain.strike[wing] - chain.strike[short]) * out > 0:
        return wing
    same = np.flatnonzero((chain.expiry == chain.expiry[short]) & (chain.call == call)
                          & ((chain.strike - chain.strike[short]) * out > 0))  # fmt: skip
    if not len(same):
        return None
    return int(same[np.argmin(np.abs(chain.strike[same] - chain.strike[short]))])
