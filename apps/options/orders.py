"""Multi-leg orders (JSON in and out) and the reason codes an order is rejected with.

An order is validated all or nothing: the first broken rule rejects the whole order with a
:class:`Rejection` naming its code, the leg and the field. The codes are the same in the
environment, the LLM adapter's tool replies, the service's 4xx bodies and the metrics.
"""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

__all__ = ["Leg", "Order", "Reject", "Rejection", "parse_order"]


class Reject(StrEnum):
    """Why an order was refused. Each has a one-line meaning in :data:`MEANING`."""

    SCHEMA = "schema_invalid"
    TOO_MANY_LEGS = "too_many_legs"
    UNKNOWN_UNDERLYING = "unknown_underlying"
    MIXED_UNDERLYINGS = "mixed_underlyings"
    UNLISTED = "unlisted_contract"
    EXPIRED = "expired_contract"
    BAD_QUANTITY = "bad_quantity"
    DUPLICATE_LEG = "duplicate_leg"
    MARKET_CLOSED = "market_closed"
    PRICE_OUTSIDE_QUOTE = "price_outside_quote"
    NO_QUOTE = "no_quote"
    NAKED_CALL_CASH = "naked_call_in_cash_account"
    NAKED_SHORT_NOT_ALLOWED = "naked_short_not_allowed"
    SHORT_STOCK = "short_stock_not_allowed"
    INSUFFICIENT_BUYING_POWER = "insufficient_buying_power"
    POSITION_LIMIT = "position_limit"
    EUROPEAN_EARLY_EXERCISE = "european_early_exercise"
    NOTHING_TO_EXERCISE = "nothing_to_exercise"
    RETRIES_EXHAUSTED = "retries_exhausted"
    STRATEGY_OPEN = "strategy_already_open"


MEANING = {
    Reject.SCHEMA: "the order is not valid JSON for the order schema",
    Reject.TOO_MANY_LEGS: "more legs than the account allows in one order",
    Reject.UNKNOWN_UNDERLYING: "the underlying is not traded in this market",
    Reject.MIXED_UNDERLYINGS: "the legs are on different underlyings",
    Reject.UNLISTED: "no such strike, expiry or right is listed today",
    Reject.EXPIRED: "the contract expired before today",
    Reject.BAD_QUANTITY: "quantity must be a whole number of contracts or shares, above 0",
    Reject.DUPLICATE_LEG: "the same contract appears in two legs",
    Reject.MARKET_CLOSED: "orders are accepted only while the market is open",
    Reject.PRICE_OUTSIDE_QUOTE: "the limit price is outside the combination's bid-ask range",
    Reject.NO_QUOTE: "the contract has no two-sided quote",
    Reject.NAKED_CALL_CASH: "a short call not covered by stock needs a margin account",
    Reject.NAKED_SHORT_NOT_ALLOWED: "the task's constraints forbid uncovered short options",
    Reject.SHORT_STOCK: "selling stock the account does not hold",
    Reject.INSUFFICIENT_BUYING_POWER: "cash after the trade would not cover the margin",
    Reject.POSITION_LIMIT: "the trade would exceed the task's contract or risk limit",
    Reject.EUROPEAN_EARLY_EXERCISE: "European options can be exercised only at expiry",
    Reject.NOTHING_TO_EXERCISE: "the account holds no such long option to exercise",
    Reject.RETRIES_EXHAUSTED: "the agent used up its retries for this step",
    Reject.STRATEGY_OPEN: "the suite holds one strategy at a time: close it first",
}


class Rejection(Exception):  # noqa: N818 - a rejection is an outcome, not a failure
    """An order refused for ``code``; ``leg`` (0-based) and ``field`` say where."""

    def __init__(self, code: Reject, detail: str = "", leg: int | None = None,
                 field: str | None = None) -> None:  # fmt: skip
        self.code, self.leg, self.field = code, leg, field
        self.detail = detail or MEANING[code]
        where = f"leg {leg}" if leg is not None else "order"
        super().__init__(f"{code.value} ({where}{', ' + field if field else ''}): {self.detail}")

    def as_dict(self) -> dict:
        return {"code": self.code.value, "leg": self.leg, "field": self.field,
                "message": self.detail}  # fmt: skip


class Leg(BaseModel):
    """One leg: an option contract (right, strike, expiry) or shares of the underlying."""

    model_config = ConfigDict(extra="forbid")

    instrument: Literal["option", "stock"] = "option"
    underlying: str | None = Field(None, description="if given, must be the order's")
    right: Literal["call", "put"] | None = None
    strike: float | None = Field(None, gt=0, le=1e7, allow_inf_nan=False)
    expiry: dt.date | None = None
    side: Literal["buy", "sell"]
    # a float so that 1.5 reaches the validator and gets its own code, not a schema error
    quantity: float = Field(allow_inf_nan=False, le=1e6,
                            description="contracts (options) or shares")  # fmt: skip

    def key(self) -> tuple:
        return (self.instrument, self.right, self.strike, self.expiry)


class Order(BaseModel):
    """A multi-leg order on one underlying. ``limit`` is the net price per share of the
    combination, positive for a debit (paid) and negative for a credit (received);
    ``mid_offset`` prices it at the combination's mid plus the offset instead."""

    model_config = ConfigDict(extra="forbid")

    underlying: str = Field(min_length=1, max_length=16)
    legs: list[Leg] = Field(min_length=1, max_length=16)
    action: Literal["trade", "exercise"] = "trade"
    order_type: Literal["limit", "mid_offset", "market"] = "market"
    limit: float | None = Field(None, ge=-1e7, le=1e7, allow_inf_nan=False)
    mid_offset: float = Field(0.0, ge=-1e7, le=1e7, allow_inf_nan=False)
    time_in_force: Literal["day", "ioc"] = "day"
    view: Literal["bullish", "bearish", "neutral", "volatile", "vol_down"] | None = Field(
        None, description="the agent's stated view; graded against the position's Greeks"
    )


def parse_order(data: object) -> Order:
    """An :class:`Order` from a JSON string or a dict, or a ``schema_invalid`` Rejection
    naming the first bad field (``legs.1.strike``)."""
    try:
        if isinstance(data, str | bytes):
            return Order.model_validate_json(data)
        return Order.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        path = [str(p) for p in first["loc"]]
        leg = int(path[1]) if len(path) > 1 and path[0] == "legs" and path[1].isdigit() else None
        raise Rejection(Reject.SCHEMA, f"{'.'.join(path) or 'order'}: {first['msg']}", leg,
                        ".".join(path[2:]) if leg is not None else ".".join(path) or None
                        ) from None  # fmt: skip
