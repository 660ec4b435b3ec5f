"""A brokerage account: validates orders all or nothing, fills them against the quotes,
charges fees, holds margin, and handles exercise, assignment, dividends and expiration.

The account sees the market only through the :class:`MarketView` of the step it acts on.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from fieldrl.apps.options.costs import (
    FeeSchedule,
    MarginRules,
    Position,
    margin_requirement,
    order_fees,
)
from fieldrl.apps.options.market import CLOSE, Chain, MarketView
from fieldrl.apps.options.orders import Leg, Order, Reject, Rejection

__all__ = ["Account", "AccountRules", "Fill", "Key", "unlisted_quote"]

Key = tuple[str, str | None, float | None, dt.date | None]  # (instrument, right, strike, expiry)


@dataclass(frozen=True)
class AccountRules:
    """The account type and the task's constraints."""

    margin_account: bool = True
    max_legs: int = 4
    max_contracts: int = 50  # per underlying, long and short together
    # uncovered short options; without, a short put must be cash-secured and a call covered
    allow_naked: bool = True
    fill: str = "spread"  # "mid" | "spread" | "impact"
    impact: float = 0.02  # impact fill: extra half-spreads per 10 contracts (assumption)
    fees: FeeSchedule = FeeSchedule()
    margin: MarginRules = MarginRules()


@dataclass
class Fill:
    """An executed order: the net price a share (+ debit), the cash it moved, its fees."""

    order: Order
    price: float
    cash: float
    fees: float
    time: dt.datetime
    legs: list[tuple[Key, float, float]]  # (contract, signed quantity, price a share)


@dataclass
class Account:
    capital: float
    rules: AccountRules = field(default_factory=AccountRules)
    cash: float = field(init=False)
    positions: dict[str, dict[Key, float]] = field(default_factory=dict)
    fills: list[Fill] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # assignments, exercises, expiries...
    rejections: Counter = field(default_factory=Counter)
    costs: float = 0.0  # fees paid, dollars
    slippage: float = 0.0  # paid against the mid by filling away from it, dollars
    interest: float = 0.0  # earned on cash (paid on a debit balance), dollars

    def __post_init__(self) -> None:
        self.cash = float(self.capital)

    # ------------------------------------------------------------------ orders

    def submit(self, order: Order, view: MarketView) -> Fill | None:
        """Validate and execute ``order`` at ``view``'s time, all or nothing. Returns the
        fill, or None when a limit is less aggressive than the fill model's price (the order
        rests and is cancelled at the end of the step). Raises :class:`Rejection`."""
        try:
            return self._submit(order, view)
        except Rejection as exc:
            self.rejections[exc.code.value] += 1
            raise

    def _submit(self, order: Order, view: MarketView) -> Fill | None:
        if len(order.legs) > self.rules.max_legs:
            raise Rejection(
                Reject.TOO_MANY_LEGS, f"{len(order.legs)} legs; at most {self.rules.max_legs}"
            )
        if order.underlying not in view.chains:
            raise Rejection(
                Reject.UNKNOWN_UNDERLYING,
                f"{order.underlying!r}; traded: {sorted(view.chains)}",
                field="underlying",
            )
        if not view.market_open or view.time.time() > CLOSE:
            raise Rejection(Reject.MARKET_CLOSED, f"at {view.time}")
        chain = view.chain(order.underlying)
        if order.action == "exercise":
            return self._exercise(order, view, chain)
        quotes = self._check_legs(order, chain)
        fill_price, leg_prices = self._fill_price(order, quotes)
        if order.order_type != "market":  # a market order takes the modelled fill
            natural_buy, natural_sell, mid = self._combo_prices(order, quotes)
            if order.order_type == "limit":
                if order.limit is None:
                    raise Rejection(Reject.SCHEMA, "a limit order needs 'limit'", field="limit")
                price = order.limit
            else:
                price = mid + order.mid_offset
            if not natural_sell - 1e-9 <= price <= natural_buy + 1e-9:
                raise Rejection(
                    Reject.PRICE_OUTSIDE_QUOTE,
                    f"{price:.2f} a share is outside "
                    f"[{natural_sell:.2f}, {natural_buy:.2f}] (bid, ask of the "
                    f"combination)",
                    field="limit",
                )
            if price < fill_price - 1e-9:
                return None  # not marketable at the modelled fill (size impact included)
        mids = [0.5 * (bid + ask) for bid, ask in quotes]
        return self._execute(order, view, chain, leg_prices, fill_price, mids)

    def _check_legs(self, order: Order, chain: Chain) -> list[tuple[float, float]]:
        """Each leg's (bid, ask), after the leg-level checks."""
        today = chain.time.date()
        seen: dict[Key, int] = {}
        quotes: list[tuple[float, float]] = []
        held = self.positions.get(order.underlying, {})
        for i, leg in enumerate(order.legs):
            if leg.underlying is not None and leg.underlying != order.underlying:
                raise Rejection(
                    Reject.MIXED_UNDERLYINGS,
                    f"{leg.underlying} in an order on {order.underlying}",
                    i,
                    "underlying",
                )
            _check_quantity(leg, i)
            _check_option_fields(leg, i)
            key = _key(leg)
            if key in seen:
                raise Rejection(Reject.DUPLICATE_LEG, f"same contract as leg {seen[key]}", i)
            seen[key] = i
            if leg.instrument == "stock":
                owned = held.get(key, 0.0)
                if leg.side == "sell" and leg.quantity > owned:
                    raise Rejection(
                        Reject.SHORT_STOCK,
                        f"selling {leg.quantity:g} shares; the account holds {owned:g}",
                        i,
                        "quantity",
                    )
                quotes.append((chain.spot, chain.spot))
                continue
            if leg.expiry < today:
                raise Rejection(Reject.EXPIRED, f"{leg.expiry} is before {today}", i, "expiry")
            row = chain.find(leg.right == "call", leg.strike, leg.expiry)
            closing = held.get(key, 0.0) * (1 if leg.side == "buy" else -1) < 0
            if row is not None:
                bid, ask = float(chain.bid[row]), float(chain.ask[row])
            elif closing and abs(held[key]) >= leg.quantity:
                bid, ask = unlisted_quote(chain, leg.right == "call", leg.strike, leg.expiry)
            else:
                raise Rejection(
                    Reject.UNLISTED,
                    f"{leg.right} {leg.strike:g} {leg.expiry} is not listed on {today}",
                    i,
                    "strike",
                )
            if ask <= 0 or (leg.side == "sell" and bid <= 0):
                raise Rejection(Reject.NO_QUOTE, f"bid {bid:.2f} ask {ask:.2f}", i)
            quotes.append((bid, ask))
        return quotes

    def _combo_prices(
        self, order: Order, quotes: list[tuple[float, float]]
    ) -> tuple[float, float, float]:
        """(natural debit, natural credit, mid) of the combination, a share; quantities
        weight the legs (a 1x2 ratio spread counts its second leg twice)."""
        buy = sell = mid = 0.0
        for leg, (bid, ask) in zip(order.legs, quotes, strict=True):
            sign = 1.0 if leg.side == "buy" else -1.0
            q = _weight(order, leg)
            buy += q * (ask if sign > 0 else -bid)
            sell += q * (bid if sign > 0 else -ask)
            mid += q * sign * 0.5 * (bid + ask)
        return float(buy), float(sell), float(mid)

    def _fill_price(
        self, order: Order, quotes: list[tuple[float, float]]
    ) -> tuple[float, list[float]]:
        """The modelled fill, a share for the combination and per leg: at mid, at the far
        side, or the far side plus impact growing with the number of contracts."""
        contracts = sum(leg.quantity for leg in order.legs if leg.instrument == "option")
        impact = 1.0 + self.rules.impact * contracts / 10
        extra = {"mid": 0.0, "spread": 1.0, "impact": impact}[self.rules.fill]
        leg_prices = []
        for leg, (bid, ask) in zip(order.legs, quotes, strict=True):
            sign = 1.0 if leg.side == "buy" else -1.0
            leg_prices.append(max(0.5 * (bid + ask) + sign * extra * 0.5 * (ask - bid), 0.0))
        combo = sum(
            (1 if leg.side == "buy" else -1) * _weight(order, leg) * p
            for leg, p in zip(order.legs, leg_prices, strict=True)
        )
        return float(combo), leg_prices

    def _execute(
        self,
        order: Order,
        view: MarketView,
        chain: Chain,
        leg_prices: list[float],
        combo: float,
        mids: list[float],
    ) -> Fill:
        multiplier = view.underlyings[order.underlying].multiplier
        legs, cash, slippage = [], 0.0, 0.0
        for leg, price, mid in zip(order.legs, leg_prices, mids, strict=True):
            signed = leg.quantity if leg.side == "buy" else -leg.quantity
            size = 1.0 if leg.instrument == "stock" else multiplier
            cash -= signed * price * size
            slippage += signed * (price - mid) * size
            legs.append((_key(leg), signed, price))
        fees = order_fees([(k[0], q, p) for k, q, p in legs], self.rules.fees)
        after = dict(self.positions.get(order.underlying, {}))
        for key, signed, _ in legs:
            after[key] = after.get(key, 0.0) + signed
            if after[key] == 0:
                del after[key]
        self._check_portfolio(order.underlying, after, view, self.cash + cash - fees)
        self.positions[order.underlying] = after
        self.cash += cash - fees
        self.costs += fees
        self.slippage += slippage
        fill = Fill(order, combo, cash, fees, view.time, legs)
        self.fills.append(fill)
        return fill

    def _check_portfolio(
        self, symbol: str, after: dict[Key, float], view: MarketView, cash_after: float
    ) -> None:
        contracts = sum(abs(q) for k, q in after.items() if k[0] == "option")
        if contracts > self.rules.max_contracts:
            raise Rejection(
                Reject.POSITION_LIMIT,
                f"{contracts:g} contracts in {symbol}; the limit is {self.rules.max_contracts}",
            )
        marked = self.holdings(view, symbol, after)  # marked once: for margin and equity
        margin = self.requirement(view, {**self.positions, symbol: after}, {symbol: marked})
        if margin["naked_calls"] and not self.rules.margin_account:
            raise Rejection(
                Reject.NAKED_CALL_CASH, f"{margin['naked_calls']:g} uncovered short calls"
            )
        if margin["naked"] and not self.rules.allow_naked:
            raise Rejection(
                Reject.NAKED_SHORT_NOT_ALLOWED, f"{margin['naked']:g} uncovered short options"
            )
        excess = cash_after + margin["loan_value"] - margin["requirement"]
        if self.rules.margin_account and margin["requirement"] > 0:
            size = view.underlyings[symbol].multiplier
            equity = cash_after + sum(
                p.quantity * p.price * (1.0 if p.instrument == "stock" else size) for p in marked
            )
            if equity < self.rules.margin.minimum_equity:
                raise Rejection(
                    Reject.INSUFFICIENT_BUYING_POWER,
                    f"equity ${equity:,.0f} is "
                    f"under the ${self.rules.margin.minimum_equity:,.0f} a margin "
                    "account needs",
                )
        if excess < 0:
            raise Rejection(
                Reject.INSUFFICIENT_BUYING_POWER,
                f"needs ${-excess:,.0f} more (requirement ${margin['requirement']:,.0f})",
            )

    def _exercise(self, order: Order, view: MarketView, chain: Chain) -> Fill:
        underlying = view.underlyings[order.underlying]
        held = self.positions.get(order.underlying, {})
        legs = []
        for i, leg in enumerate(order.legs):
            _check_quantity(leg, i)
            _check_option_fields(leg, i)
            key = _key(leg)
            if leg.instrument != "option" or held.get(key, 0.0) < leg.quantity:
                raise Rejection(
                    Reject.NOTHING_TO_EXERCISE, f"the account holds {held.get(key, 0.0):g} of it", i
                )
            if underlying.style == "european" and leg.expiry != view.time.date():
                raise Rejection(
                    Reject.EUROPEAN_EARLY_EXERCISE, f"expires {leg.expiry}", i, "expiry"
                )
            legs.append((key, leg.quantity))
        saved_positions, saved_cash = copy.deepcopy(self.positions), self.cash
        events = []
        for key, quantity in legs:
            events += self._deliver(order.underlying, key, quantity, chain.spot, view, "exercise")
        try:  # the shares an exercise delivers must be paid for, like a purchase
            self._check_portfolio(
                order.underlying, self.positions.get(order.underlying, {}), view, self.cash
            )
        except Rejection:
            self.positions, self.cash = saved_positions, saved_cash
            raise
        self.events += events
        return Fill(order, 0.0, 0.0, 0.0, view.time, [(k, -q, 0.0) for k, q in legs])

    # ------------------------------------------------------------ the account's state

    def holdings(
        self, view: MarketView, symbol: str, held: dict[Key, float] | None = None
    ) -> list[Position]:
        """``symbol``'s positions (or ``held``) marked at ``view``, for margin and risk."""
        chain = view.chain(symbol)
        out = []
        held = self.positions.get(symbol, {}) if held is None else held
        for (instrument, right, strike, expiry), q in held.items():
            if instrument == "stock":
                out.append(Position("stock", q, price=chain.spot))
                continue
            price = chain.price(right == "call", strike, expiry)
            days = (dt.datetime.combine(expiry, CLOSE) - view.time).total_seconds() / 86400
            out.append(Position("option", q, right, strike, days, price))
        return out

    def requirement(
        self,
        view: MarketView,
        positions: dict[str, dict[Key, float]] | None = None,
        marked: dict[str, list[Position]] | None = None,
    ) -> dict[str, float]:
        """Margin over all underlyings (or ``positions``): requirement, loan value, naked
        calls and naked short contracts. ``marked`` holds symbols' holdings already marked."""
        total = {"requirement": 0.0, "loan_value": 0.0, "naked_calls": 0.0, "naked": 0.0}
        for symbol, held in (self.positions if positions is None else positions).items():
            underlying = view.underlyings[symbol]
            holdings = (marked or {}).get(symbol)
            if holdings is None:
                holdings = self.holdings(view, symbol, held)
            m = margin_requirement(
                holdings,
                view.chain(symbol).spot,
                margin_account=self.rules.margin_account,
                index=underlying.index,
                multiplier=underlying.multiplier,
                rules=self.rules.margin,
                secure_puts=not self.rules.allow_naked,
            )
            for k in total:
                total[k] += m[k]
        return total

    def nav(self, view: MarketView) -> float:
        """Cash plus every position at its mark (mid)."""
        value = self.cash
        for symbol in self.positions:
            multiplier = view.underlyings[symbol].multiplier
            for p in self.holdings(view, symbol):
                value += p.quantity * p.price * (1.0 if p.instrument == "stock" else multiplier)
        return value

    def greeks(self, view: MarketView) -> dict[str, float]:
        """Dollar Greeks: delta (per 1% move, times 100: dollars per $1 of exposure),
        gamma (dollars per 1% move, squared), vega (per vol point), theta (per day)."""
        out = {"delta": 0.0, "gamma": 0.0, "vega": 0.0, "theta": 0.0}
        for symbol, held in self.positions.items():
            chain = view.chain(symbol)
            multiplier = view.underlyings[symbol].multiplier
            for (instrument, right, strike, expiry), q in held.items():
                if instrument == "stock":
                    out["delta"] += q * chain.spot
                    continue
                _, g = chain.mark(right == "call", strike, expiry)
                size = q * multiplier
                out["delta"] += size * float(g.delta) * chain.spot
                out["gamma"] += size * float(g.gamma) * chain.spot**2 / 100
                out["vega"] += size * float(g.vega) / 100
                out["theta"] += size * float(g.theta)
        return out

    # --------------------------------------------------- events between the steps

    def accrue(self, rate: float, years: float) -> None:
        """Interest on cash over ``years`` at ``rate``: a credit balance earns it, a debit
        balance (a margin loan) pays it, as option prices assume."""
        interest = self.cash * (np.exp(rate * years) - 1.0)
        self.cash += interest
        self.interest += interest

    def settle(self, view: MarketView) -> list[dict]:
        """Apply what happens by ``view``'s time: dividends on their ex-date, early
        assignment of short in-the-money calls the day before an ex-date when their time
        value is below the dividend, and, at an expiry's settlement, automatic exercise of
        anything at least $0.01 in the money (the rest expires). Returns the new events."""
        new: list[dict] = []
        today = view.time.date()
        for symbol in list(self.positions):
            underlying = view.underlyings[symbol]
            chain = view.chain(symbol)
            held = self.positions[symbol]
            for ex_date, amount in underlying.dividends:
                stock = held.get(("stock", None, None, None), 0.0)
                if ex_date == today and view.time.time() >= CLOSE and stock:
                    self.cash += stock * amount
                    new.append({"event": "dividend", "symbol": symbol, "cash": stock * amount})
                if _last_weekday_before(ex_date) == today and underlying.style == "american":
                    new += self._early_assignment(symbol, chain, view, amount)
            for key, q in list(held.items()):
                instrument, right, strike, expiry = key
                if instrument != "option" or not _settles(underlying.settlement, expiry, view):
                    continue
                itm = chain.spot - strike if right == "call" else strike - chain.spot
                if itm >= 0.01:
                    new += self._deliver(symbol, key, q, chain.spot, view, "expiry")
                else:
                    del held[key]
                    new.append(
                        {
                            "event": "expired",
                            "symbol": symbol,
                            "contract": _name(key),
                            "quantity": q,
                        }
                    )
        self.events += new
        return new

    def _early_assignment(
        self, symbol: str, chain: Chain, view: MarketView, dividend: float
    ) -> list[dict]:
        out = []
        for key, q in list(self.positions[symbol].items()):
            instrument, right, strike, expiry = key
            if instrument != "option" or right != "call" or q >= 0 or chain.spot <= strike:
                continue
            price, _ = chain.mark(True, strike, expiry)
            if price - (chain.spot - strike) < dividend:
                out += self._deliver(symbol, key, q, chain.spot, view, "early assignment")
        return out

    def _deliver(
        self, symbol: str, key: Key, quantity: float, spot: float, view: MarketView, why: str
    ) -> list[dict]:
        """Exercise (quantity > 0) or assignment (< 0) of ``quantity`` contracts of ``key``:
        stock at the strike, or cash for a cash-settled underlying."""
        underlying = view.underlyings[symbol]
        _, right, strike, _ = key
        held = self.positions[symbol]
        held[key] = held.get(key, 0.0) - quantity
        if held[key] == 0:
            del held[key]
        shares = quantity * underlying.multiplier * (1 if right == "call" else -1)
        if underlying.settlement == "physical":
            stock = ("stock", None, None, None)
            held[stock] = held.get(stock, 0.0) + shares
            if held[stock] == 0:
                del held[stock]
            self.cash -= shares * strike
        else:
            self.cash += shares * (spot - strike)
        return [
            {
                "event": why,
                "kind": "exercise" if quantity > 0 else "assignment",
                "symbol": symbol,
                "contract": _name(key),
                "quantity": quantity,
                "spot": spot,
            }
        ]


def unlisted_quote(chain: Chain, call: bool, strike: float, expiry: dt.date
                   ) -> tuple[float, float]:  # fmt: skip
    """(bid, ask) of a held contract the listing no longer shows (the strikes moved with
    the spot), to close it: its model value, 10% (at least 5 cents) each side."""
    mark, _ = chain.mark(call, strike, expiry)
    half = max(0.05, 0.1 * mark)
    return max(mark - half, 0.0), mark + half


def _last_weekday_before(day: dt.date) -> dt.date:
    """The trading day before ``day`` (weekends skipped; holidays are not known here)."""
    day -= dt.timedelta(days=1)
    while day.weekday() >= 5:
        day -= dt.timedelta(days=1)
    return day


def _check_quantity(leg: Leg, i: int) -> None:
    if leg.quantity <= 0 or leg.quantity != int(leg.quantity):
        raise Rejection(Reject.BAD_QUANTITY, f"{leg.quantity}", i, "quantity")


def _check_option_fields(leg: Leg, i: int) -> None:
    if leg.instrument == "option":
        for name in ("right", "strike", "expiry"):
            if getattr(leg, name) is None:
                raise Rejection(Reject.SCHEMA, f"an option leg needs {name}", i, name)


def _key(leg: Leg) -> Key:
    if leg.instrument == "stock":
        return ("stock", None, None, None)
    return ("option", leg.right, float(leg.strike), leg.expiry)


def _name(key: Key) -> str:
    return "stock" if key[0] == "stock" else f"{key[1]} {key[2]:g} {key[3]}"


def _weight(order: Order, leg: Leg) -> float:
    """A leg's weight in the combination's price a share: its quantity over the smallest
    option quantity (a 2-lot condor is 2 units of 1), shares counted in hundreds (a
    buy-write of 100 shares and one call is priced as spot minus the call)."""
    options = [x.quantity for x in order.legs if x.instrument == "option"]
    if not options:
        return 1.0  # shares alone: priced a share
    return leg.quantity / float(min(options)) / (100.0 if leg.instrument == "stock" else 1.0)


def _settles(settlement: str, expiry: dt.date, view: MarketView) -> bool:
    """Whether an option expiring on ``expiry`` settles at ``view``'s time: at the close of
    its expiry day (PM), or the first step of that day (AM-settled index options use the
    opening price), or any later step (a step that skipped the expiry)."""
    today = view.time.date()
    if today > expiry:
        return True
    if today < expiry:
        return False
    return settlement == "cash_am" or view.time.time() >= CLOSE
