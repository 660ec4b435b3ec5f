"""Many orders checked at once: what :meth:`Account.submit` would do with each of a batch
of trade orders (its rejection code and leg, or its fill price, fees and the margin after
it), computed with array operations over (order, leg) and (order, position) arrays instead
of leg-by-leg Python, and without changing the account.

:class:`~fieldrl.apps.options.account.Account` stays the definition: it executes one order
at a time and says in words what is wrong; a property test holds this engine to its codes
and figures over randomized orders. Exercise orders go through the account only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fieldrl.apps.options.account import Account, AccountRules, unlisted_quote
from fieldrl.apps.options.costs import MarginRules
from fieldrl.apps.options.market import _EPOCH, CLOSE, MarketView
from fieldrl.apps.options.orders import Order, Reject

__all__ = ["Checks", "check_orders", "strategy_margin"]

# a leg's checks in the order the account makes them: the first that fails names the leg
LEG_CHECKS = (Reject.MIXED_UNDERLYINGS, Reject.BAD_QUANTITY, Reject.SCHEMA,
              Reject.DUPLICATE_LEG, Reject.SHORT_STOCK, Reject.EXPIRED, Reject.UNLISTED,
              Reject.NO_QUOTE)  # fmt: skip
ORDER_TYPES = ("market", "limit", "mid_offset")


@dataclass(frozen=True)
class Checks:
    """One entry an order. ``code`` is the rejection's code ("" when the order would be
    accepted) and ``leg`` its leg (-1: the order as a whole); ``rests`` marks a limit the
    modelled fill does not reach (no fill, so no margin check). The fill's ``price`` (a share
    of the combination, + debit), ``cash`` (before fees) and ``fees`` are NaN for orders
    rejected before them, the margin after the fill (every underlying) for orders rejected
    before the portfolio checks."""

    code: np.ndarray
    leg: np.ndarray
    rests: np.ndarray
    price: np.ndarray
    cash: np.ndarray
    fees: np.ndarray
    requirement: np.ndarray
    loan_value: np.ndarray
    naked: np.ndarray
    naked_calls: np.ndarray

    @property
    def accepted(self) -> np.ndarray:
        return self.code == ""


def check_orders(account: Account, orders: Sequence[Order], view: MarketView) -> Checks:
    """What ``account.submit(order, view)`` would do with each of ``orders`` (trade orders)
    from the account as it is now; nothing is executed or counted."""
    if any(o.action != "trade" for o in orders):
        raise ValueError("check_orders takes trade orders; send an exercise to Account.submit")
    n = len(orders)
    nan = np.full(n, np.nan)
    out = {"code": np.full(n, "", dtype=object), "leg": np.full(n, -1), "rests": np.zeros(n, bool),
           **{k: nan.copy() for k in ("price", "cash", "fees", "requirement", "loan_value",
                                      "naked", "naked_calls")}}  # fmt: skip
    closed = not view.market_open or view.time.time() > CLOSE
    for i, o in enumerate(orders):
        if len(o.legs) > account.rules.max_legs:
            out["code"][i] = Reject.TOO_MANY_LEGS.value
        elif o.underlying not in view.chains:
            out["code"][i] = Reject.UNKNOWN_UNDERLYING.value
        elif closed:
            out["code"][i] = Reject.MARKET_CLOSED.value
    for symbol in {o.underlying for o in orders} & set(view.chains):
        rows = np.flatnonzero([o.underlying == symbol and not out["code"][i]
                               for i, o in enumerate(orders)])  # fmt: skip
        if len(rows):
            part = _check_symbol(account, [orders[i] for i in rows], view, symbol)
            for key, values in part.items():
                out[key][rows] = values
    return Checks(**out)


@dataclass
class _Legs:
    """A batch's legs as (order, leg) arrays, padded with absent legs."""

    present: np.ndarray
    option: np.ndarray
    call: np.ndarray
    strike: np.ndarray
    day: np.ndarray  # expiry, days since 1970-01-01
    buy: np.ndarray
    quantity: np.ndarray
    mixed: np.ndarray  # names another underlying
    missing: np.ndarray  # an option leg without right, strike or expiry

    @classmethod
    def of(cls, orders: Sequence[Order]) -> _Legs:
        width = max(len(o.legs) for o in orders)
        rows = []
        for o in orders:
            for leg in o.legs:
                missing = leg.instrument == "option" and (
                    leg.right is None or leg.strike is None or leg.expiry is None)  # fmt: skip
                rows.append((True, leg.instrument == "option", leg.right == "call",
                             leg.strike or 0.0,
                             leg.expiry.toordinal() - _EPOCH if leg.expiry else 0,
                             leg.side == "buy", leg.quantity,
                             leg.underlying is not None and leg.underlying != o.underlying,
                             missing))  # fmt: skip
            rows += [(False, False, False, 0.0, 0, False, 0.0, False, False)] * (
                width - len(o.legs))  # fmt: skip
        columns = list(zip(*rows, strict=True))
        shape = (len(orders), width)
        return cls(*(np.array(c).reshape(shape) for c in columns))

    def same_contract(self, strike: np.ndarray, call: np.ndarray, day: np.ndarray,
                      option: np.ndarray) -> np.ndarray:  # fmt: skip
        """(order, leg, other) whether each leg is the contract of each ``other`` (arrays
        with a trailing axis of others, broadcast against the legs)."""
        stock = ~self.option[..., None] & ~option
        return stock | (
            self.option[..., None]
            & option
            & (self.call[..., None] == call)
            & (self.strike[..., None] == strike)
            & (self.day[..., None] == day)
        )


def _check_symbol(account: Account, orders: list[Order], view: MarketView, symbol: str
                  ) -> dict[str, np.ndarray]:  # fmt: skip
    rules = account.rules
    chain = view.chain(symbol)
    legs = _Legs.of(orders)
    n, width = legs.present.shape
    sign = np.where(legs.buy, 1.0, -1.0)
    held = account.positions.get(symbol, {})
    stock_key = ("stock", None, None, None)
    owned = held.get(stock_key, 0.0)
    held_keys = [k for k in held if k[0] == "option"]
    h_call = np.array([k[1] == "call" for k in held_keys], bool)
    h_strike = np.array([k[2] for k in held_keys], float)
    h_day = np.array([k[3].toordinal() - _EPOCH for k in held_keys], np.int64)
    h_qty = np.array([held[k] for k in held_keys], float)
    h_option = np.ones(len(held_keys), bool)

    # the leg-level checks, each an (order, leg) array
    failed = np.zeros((n, width, len(LEG_CHECKS)), bool)
    failed[..., 0] = legs.mixed
    q = legs.quantity
    failed[..., 1] = legs.present & ((q <= 0) | (q != np.floor(q)))
    failed[..., 2] = legs.missing
    earlier = np.tril(np.ones((width, width), bool), -1)  # [leg, other]: other < leg
    same = legs.same_contract(legs.strike[:, None, :], legs.call[:, None, :],
                              legs.day[:, None, :], legs.option[:, None, :])  # fmt: skip
    failed[..., 3] = legs.present & (same & earlier & legs.present[:, None, :]).any(-1)
    stock = legs.present & ~legs.option
    failed[..., 4] = stock & ~legs.buy & (q > owned)
    option = legs.present & legs.option
    failed[..., 5] = option & (legs.day < chain.time.date().toordinal() - _EPOCH)
    row = chain.find_many(legs.call, legs.strike, legs.day)
    matches = legs.same_contract(h_strike, h_call, h_day, h_option) & option[..., None]
    held_q = (matches * h_qty).sum(-1)
    closing_unlisted = option & (row < 0) & (held_q * sign < 0) & (np.abs(held_q) >= q)
    failed[..., 6] = option & (row < 0) & ~closing_unlisted
    safe = np.maximum(row, 0)
    bid = np.where(stock, chain.spot, np.where(row >= 0, chain.bid[safe], 0.0))
    ask = np.where(stock, chain.spot, np.where(row >= 0, chain.ask[safe], 0.0))
    for i, j in np.argwhere(closing_unlisted):
        expiry = dt.date.fromordinal(int(legs.day[i, j]) + _EPOCH)
        bid[i, j], ask[i, j] = unlisted_quote(chain, bool(legs.call[i, j]),
                                              float(legs.strike[i, j]), expiry)  # fmt: skip
    failed[..., 7] = option & ((ask <= 0) | (~legs.buy & (bid <= 0)))

    code = np.full(n, "", dtype=object)
    bad_leg = failed.any(-1)
    first = np.argmax(bad_leg, axis=1)
    leg_of = np.where(bad_leg.any(1), first, -1)
    for i in np.flatnonzero(leg_of >= 0):
        code[i] = LEG_CHECKS[int(np.argmax(failed[i, first[i]]))].value

    # the combination's prices and the modelled fill
    weight = _weights(legs)
    contracts = np.where(option, q, 0.0).sum(1)
    extra = {"mid": np.zeros(n), "spread": np.ones(n),
             "impact": 1.0 + rules.impact * contracts / 10}[rules.fill]  # fmt: skip
    leg_price = np.maximum(0.5 * (bid + ask) + sign * extra[:, None] * 0.5 * (ask - bid), 0.0)
    leg_price = np.where(legs.present, leg_price, 0.0)
    price = (sign * weight * leg_price).sum(1)
    natural_buy = (weight * np.where(legs.buy, ask, -bid)).sum(1)
    natural_sell = (weight * np.where(legs.buy, bid, -ask)).sum(1)
    mid = (weight * sign * 0.5 * (bid + ask)).sum(1)
    kind = np.array([ORDER_TYPES.index(o.order_type) for o in orders])
    limit = np.array([np.nan if o.limit is None else o.limit for o in orders])
    asked = np.where(kind == 1, limit, mid + np.array([o.mid_offset for o in orders]))
    ok = code == ""
    code[ok & (kind == 1) & np.isnan(limit)] = Reject.SCHEMA.value
    ok = code == ""
    outside = (kind > 0) & ~((natural_sell - 1e-9 <= asked) & (asked <= natural_buy + 1e-9))
    code[ok & outside] = Reject.PRICE_OUTSIDE_QUOTE.value
    ok = code == ""
    rests = ok & (kind > 0) & (asked < price - 1e-9)
    filled = ok & ~rests

    # the fill's cash and fees
    multiplier = view.underlyings[symbol].multiplier
    signed = np.where(legs.present, sign * q, 0.0)
    size = np.where(legs.option, multiplier, 1.0)
    cash = -(signed * leg_price * size).sum(1)
    fees = _fees(rules, option, stock, q, leg_price)

    # the positions after the fill: held contracts (changed by the legs that trade them),
    # then the legs' new contracts in leg order, as the account's dict keeps them
    new = option & ~matches.any(-1)
    slots = {
        "quantity": np.concatenate([h_qty + (matches * signed[..., None]).sum(1),
                                    np.where(new, signed, 0.0)], 1),
        "call": np.concatenate([np.broadcast_to(h_call, (n, len(h_call))), legs.call], 1),
        "strike": np.concatenate([np.broadcast_to(h_strike, (n, len(h_call))), legs.strike], 1),
        "day": np.concatenate([np.broadcast_to(h_day, (n, len(h_call))), legs.day], 1),
        "price": np.concatenate([np.broadcast_to([chain.price(k[1] == "call", k[2], k[3])
                                                  for k in held_keys], (n, len(h_call))),
                                 np.where(row >= 0, chain.mid[safe], 0.0)], 1),
    }  # fmt: skip
    # days to each expiry's close, as the account computes them (whole seconds: exact)
    close = (dt.datetime.combine(dt.date(1970, 1, 1), CLOSE) - view.time).total_seconds()
    days = (slots["day"] * 86400.0 + close) / 86400
    stock_after = owned + np.where(stock, signed, 0.0).sum(1)
    margin = strategy_margin(slots["quantity"], slots["call"], slots["strike"], days,
                             slots["price"], stock_after, chain.spot,
                             margin_account=rules.margin_account,
                             index=view.underlyings[symbol].index, multiplier=multiplier,
                             rules=rules.margin, secure_puts=not rules.allow_naked)  # fmt: skip
    others = account.requirement(view, {s: p for s, p in account.positions.items() if s != symbol})
    for key in margin:
        margin[key] = margin[key] + others[key]

    # the portfolio checks, in the account's order
    cash_after = account.cash + cash - fees
    option_contracts = np.abs(slots["quantity"]).sum(1)
    equity = cash_after + stock_after * chain.spot + (
        slots["quantity"] * slots["price"] * multiplier).sum(1)  # fmt: skip
    checks = (
        (option_contracts > rules.max_contracts, Reject.POSITION_LIMIT),
        ((margin["naked_calls"] > 0) & (not rules.margin_account), Reject.NAKED_CALL_CASH),
        ((margin["naked"] > 0) & (not rules.allow_naked), Reject.NAKED_SHORT_NOT_ALLOWED),
        (rules.margin_account & (margin["requirement"] > 0)
         & (equity < rules.margin.minimum_equity), Reject.INSUFFICIENT_BUYING_POWER),
        (cash_after + margin["loan_value"] - margin["requirement"] < 0,
         Reject.INSUFFICIENT_BUYING_POWER),
    )  # fmt: skip
    for broken, reject in checks:
        code[(code == "") & filled & broken] = reject.value
    reached = leg_of < 0
    keep = lambda x: np.where(reached, x, np.nan)  # noqa: E731 - figures of orders priced
    return {"code": code, "leg": leg_of, "rests": rests, "price": keep(price),
            "cash": keep(cash), "fees": keep(fees),
            **{k: np.where(filled, v, np.nan) for k, v in margin.items()}}  # fmt: skip


def _weights(legs: _Legs) -> np.ndarray:
    """Each leg's weight in the combination's price a share (see ``account._weight``)."""
    option = legs.present & legs.option
    smallest = np.where(option, legs.quantity, np.inf).min(1, keepdims=True)
    usable = np.isfinite(smallest) & (smallest > 0)  # else no option leg, or a bad quantity
    weight = legs.quantity / np.where(usable, smallest, 1.0) / np.where(legs.option, 1.0, 100.0)
    return np.where(usable, weight, 1.0)


def _fees(rules: AccountRules, option: np.ndarray, stock: np.ndarray, quantity: np.ndarray,
          price: np.ndarray) -> np.ndarray:  # fmt: skip
    """``order_fees`` of each order."""
    f = rules.fees
    rate = np.where(
        price >= 0.10,
        f.per_contract,
        np.where(price >= 0.05, f.per_contract_cheap, f.per_contract_penny),
    )
    contracts = np.where(option, quantity, 0.0).sum(1)
    shares = np.where(stock, quantity, 0.0).sum(1)
    commission = np.where(option, rate * quantity, 0.0).sum(1)
    commission = np.where(contracts > 0, np.maximum(commission, f.order_minimum), commission)
    commission += np.where(shares > 0, np.maximum(f.per_share * shares, f.share_minimum), 0.0)
    return commission + (f.regulatory + f.clearing) * contracts


def strategy_margin(quantity: np.ndarray, call: np.ndarray, strike: np.ndarray,
                    days: np.ndarray, price: np.ndarray, stock: np.ndarray, spot: float, *,
                    margin_account: bool, index: bool = False, multiplier: float = 100.0,
                    rules: MarginRules, secure_puts: bool = False
                    ) -> dict[str, np.ndarray]:  # fmt: skip
    """``costs.margin_requirement`` for many portfolios at once: (portfolio, position)
    arrays of option contracts (signed quantity, right, strike, days to expiry, mark; a zero
    quantity is no position) and each portfolio's shares. The same rules in the same order:
    short calls covered by stock from the lowest strike, then shorts (nearest expiry first)
    paired with longs of the same right, narrowest loss first, verticals before calendars;
    iron condors by expiry; the rest cash-secured or naked."""
    n, width = quantity.shape
    at = np.arange(n)
    short, long = quantity < 0, quantity > 0
    left = np.where(short, -quantity, 0.0)
    free = np.where(long, quantity, 0.0)

    covering = np.maximum(stock, 0.0) / multiplier
    covered = short & call
    for s in np.argsort(np.where(covered, strike, np.inf), axis=1, kind="stable").T:
        used = np.where(covered[at, s], np.minimum(left[at, s], covering), 0.0)
        left[at, s] -= used
        covering = covering - used

    spread = np.zeros((n, width))  # dollars at risk in spreads, by the short leg
    by_expiry = np.argsort(np.where(short, days, np.inf), axis=1, kind="stable").T
    for same_expiry in (True, False):
        for s in by_expiry:
            s_call, s_strike, s_days = call[at, s, None], strike[at, s, None], days[at, s, None]
            reach = days == s_days if same_expiry else days >= s_days
            pairs = short[at, s, None] & long & (call == s_call) & (free > 0) & reach
            loss = np.maximum(np.where(s_call, strike - s_strike, s_strike - strike), 0.0)
            for x in np.argsort(np.where(pairs, loss, np.inf), axis=1, kind="stable").T:
                used = np.where(pairs[at, x], np.minimum(left[at, s], free[at, x]), 0.0)
                left[at, s] -= used
                free[at, x] -= used
                spread[at, s] += loss[at, x] * used * multiplier
    same_day = (days[:, :, None] == days[:, None, :]) & short[:, None, :]
    calls = (same_day * np.where(call, spread, 0.0)[:, None, :]).sum(-1)
    puts = (same_day * np.where(call, 0.0, spread)[:, None, :]).sum(-1)
    first = short & ~(same_day & np.tril(np.ones((width, width), bool), -1)).any(-1)
    requirement = np.where(first, np.maximum(calls, puts), 0.0).sum(1)

    rate, floor = ((rules.index_naked_rate, rules.index_naked_floor) if index else
                   (rules.naked_rate, rules.naked_floor))  # fmt: skip
    left = np.where(short, left, 0.0)
    secured = (left > 0) & ~call & (secure_puts or not margin_account)
    naked = (left > 0) & ~secured
    otm = np.maximum(np.where(call, strike - spot, spot - strike), 0.0)
    base = np.where(call, spot, strike)
    need = (price + np.maximum(rate * spot - otm, floor * base)) * multiplier * left
    requirement = requirement + np.where(secured, strike * multiplier * left, 0.0).sum(1)
    requirement = requirement + np.where(naked, need, 0.0).sum(1)
    requirement = requirement + np.where(stock < 0, 1.5 * -stock * spot, 0.0)
    loan = np.zeros(n)
    if margin_account:
        leaps = long & (days > rules.leaps_months * 30.4)
        loan = rules.stock_initial * np.maximum(stock, 0.0) * spot + np.where(
            leaps, (1 - rules.leaps_paid) * price * multiplier * quantity, 0.0).sum(1)  # fmt: skip
    return {"requirement": requirement, "loan_value": loan,
            "naked_calls": np.where(naked & call, left, 0.0).sum(1),
            "naked": np.where(naked, left, 0.0).sum(1)}  # fmt: skip
