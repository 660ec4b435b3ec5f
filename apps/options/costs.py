"""Commissions, regulatory and clearing fees, and Reg-T / Cboe strategy-based margin.

Sources (``../shared/reference/options.md`` summarises them):
- commissions: Interactive Brokers' tiered US option schedule ($0.65 a contract at a premium
  of $0.10 or more, $0.50 from $0.05 to $0.10, $0.25 below, $1 minimum an order);
- fees: the Options Regulatory Fee ($0.02815 a contract, March 2025) and OCC clearing
  ($0.025 a contract, February 2025);
- stock commission: $0.005 a share, $1 minimum (IBKR fixed; an assumption for this app);
- margin: Cboe Rule 10.3 and FINRA 4210, strategy-based. A short option is covered by
  stock, paired into a spread, or naked; long options at most 9 months out are paid in full.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FeeSchedule", "MarginRules", "Position", "margin_requirement", "order_fees"]


@dataclass(frozen=True)
class FeeSchedule:
    per_contract: float = 0.65
    per_contract_cheap: float = 0.50  # premium from $0.05 to $0.10
    per_contract_penny: float = 0.25  # premium below $0.05
    order_minimum: float = 1.0
    regulatory: float = 0.02815  # ORF, per contract
    clearing: float = 0.025  # OCC, per contract
    per_share: float = 0.005
    share_minimum: float = 1.0


def order_fees(legs: list[tuple[str, float, float]], fees: FeeSchedule = FeeSchedule()) -> float:
    """Dollars for one order; ``legs`` is (instrument, quantity, price per share)."""
    commission = shares = contracts = 0.0
    for instrument, quantity, price in legs:
        quantity = abs(quantity)
        if instrument == "stock":
            shares += quantity
            continue
        contracts += quantity
        rate = (fees.per_contract if price >= 0.10 else
                fees.per_contract_cheap if price >= 0.05 else fees.per_contract_penny)  # fmt: skip
        commission += rate * quantity
    if contracts:
        commission = max(commission, fees.order_minimum)
    if shares:
        commission += max(fees.per_share * shares, fees.share_minimum)
    return commission + (fees.regulatory + fees.clearing) * contracts


@dataclass(frozen=True)
class MarginRules:
    """Rates of the strategy-based rules; broad-based index options use the index rates."""

    naked_rate: float = 0.20
    naked_floor: float = 0.10
    index_naked_rate: float = 0.15
    index_naked_floor: float = 0.10
    stock_initial: float = 0.50  # Reg-T: half of a long stock position may be borrowed
    leaps_months: float = 9.0
    leaps_paid: float = 0.75  # long options beyond 9 months: 75% paid, 25% loan value
    minimum_equity: float = 2000.0


@dataclass(frozen=True)
class Position:
    """A holding: ``quantity`` signed (short < 0), contracts for options, shares for stock."""

    instrument: str  # "option" | "stock"
    quantity: float
    right: str | None = None  # "call" | "put"
    strike: float | None = None
    expiry_days: float | None = None  # calendar days to expiry
    price: float = 0.0  # current price per share (mark)


def margin_requirement(positions: list[Position], spot: float, *, margin_account: bool,
                       index: bool = False, multiplier: float = 100.0,
                       rules: MarginRules = MarginRules(), secure_puts: bool = False
                       ) -> dict[str, float]:  # fmt: skip
    """The strategy-based requirement of one underlying's positions, in dollars.

    Short calls are first covered by long stock (100 shares each), then short options are
    paired with long options of the same right expiring no earlier, narrowest loss first
    (a vertical or calendar spread needs its maximum loss, the width); a put spread and a
    call spread in one expiry form an iron condor, which needs only the wider of the two.
    What is left short is cash-secured (puts in a cash account, or with ``secure_puts``:
    the strike) or naked (margin account).

    Returns ``requirement`` (to be held in cash, including the short options'
    own value, as brokers apply the sale proceeds) and ``loan_value`` (what long stock and
    long-dated long options can borrow against, margin accounts only), ``naked_calls``
    (short calls with no cover, which a cash account cannot hold) and ``naked`` (uncovered
    short contracts, cash-secured puts excepted).
    """
    stock = sum(p.quantity for p in positions if p.instrument == "stock")
    options = [p for p in positions if p.instrument == "option" and p.quantity != 0]
    shorts = [[p, -p.quantity] for p in options if p.quantity < 0]
    longs = [[p, p.quantity] for p in options if p.quantity > 0]
    requirement = 0.0

    covering = max(stock, 0.0) / multiplier
    for short in sorted((s for s in shorts if s[0].right == "call"), key=lambda s: s[0].strike):
        used = min(short[1], covering)
        short[1] -= used
        covering -= used

    spreads: dict[tuple[float | None, str], float] = {}  # (expiry, right) -> width x contracts
    for same_expiry in (True, False):  # verticals first, then calendars and diagonals
        for short in sorted(shorts, key=lambda s: s[0].expiry_days or 0):
            p = short[0]
            candidates = [x for x in longs if x[0].right == p.right and x[1] > 0 and (
                x[0].expiry_days == p.expiry_days if same_expiry
                else (x[0].expiry_days or 0) >= (p.expiry_days or 0))]  # fmt: skip
            for long in sorted(candidates, key=lambda x: _spread_loss(p, x[0])):
                if short[1] <= 0:
                    break
                used = min(short[1], long[1])
                short[1] -= used
                long[1] -= used
                key = (p.expiry_days, p.right)
                spreads[key] = spreads.get(key, 0.0) + _spread_loss(p, long[0]) * used * multiplier
    expiries = {e for e, _ in spreads}
    for expiry in expiries:  # iron condors: only one side can finish in the money
        requirement += max(spreads.get((expiry, "call"), 0.0), spreads.get((expiry, "put"), 0.0))

    naked_calls = naked = 0.0
    rate, floor = ((rules.index_naked_rate, rules.index_naked_floor) if index else
                   (rules.naked_rate, rules.naked_floor))  # fmt: skip
    for p, left in shorts:
        if left <= 0:
            continue
        value = p.price * multiplier * left
        if p.right == "put" and (secure_puts or not margin_account):
            requirement += p.strike * multiplier * left  # cash-secured
            continue
        naked += left
        if p.right == "call":
            naked_calls += left
        otm = max(p.strike - spot, 0.0) if p.right == "call" else max(spot - p.strike, 0.0)
        base = spot if p.right == "call" else p.strike
        requirement += value + max(rate * spot - otm, floor * base) * multiplier * left

    if stock < 0:  # short shares (left by an assignment): Reg-T's 150%, proceeds included
        requirement += 1.5 * -stock * spot
    loan = 0.0
    if margin_account:
        loan += rules.stock_initial * max(stock, 0.0) * spot
        for p, _ in longs:
            if (p.expiry_days or 0) > rules.leaps_months * 30.4:
                loan += (1 - rules.leaps_paid) * p.price * multiplier * p.quantity
    return {
        "requirement": requirement,
        "loan_value": loan,
        "naked_calls": naked_calls,
        "naked": naked,
    }


def _spread_loss(short: Position, long: Position) -> float:
    """Maximum loss per share of short + long (same right): the width when the long leg is
    further out of the money, 0 when it is not (a debit spread)."""
    if short.right == "call":
        return max(long.strike - short.strike, 0.0)
    return max(short.strike - long.strike, 0.0)
