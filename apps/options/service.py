"""The options service: check an order against a posted portfolio and chain as a broker
would (reason codes), price it and return the margin, dollar Greeks and stress losses of the
resulting portfolio, and/or the trained agent's proposal for the posted chain.

A malformed chain, portfolio or order is a 4xx naming the field (``chain.options.3.bid``,
``order.legs.1.strike``); an order that is well formed but refused is a 200 with
``accepted: false`` and its code, leg and field, as a broker's reject is an answer, not an
error. Requests are capped (options, positions, legs) like every fieldrl service.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

import numpy as np
from pydantic import Field

from fieldrl.apps.options.account import Account, AccountRules
from fieldrl.apps.options.data import MAX_IV, MAX_PRICE, MIN_STRIKE
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import Episode
from fieldrl.apps.options.market import CLOSE, Chain, Market, Underlying
from fieldrl.apps.options.metrics import stress_losses
from fieldrl.apps.options.orders import Leg, Order, Rejection
from fieldrl.apps.options.pricing import implied_vol
from fieldrl.config import derive
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["MAX_OPTIONS", "MAX_POSITIONS", "example_request", "service"]

MAX_OPTIONS, MAX_POSITIONS = 5000, 200


class Quote(RequestModel):
    expiry: dt.date
    strike: float = Field(ge=MIN_STRIKE, le=MAX_PRICE, allow_inf_nan=False)
    right: Literal["call", "put"]
    bid: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    ask: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    iv: float | None = Field(None, gt=0, le=MAX_IV, allow_inf_nan=False)


class ChainIn(RequestModel):
    underlying: str = Field(min_length=1, max_length=16)
    time: dt.datetime = Field(description="Quote time (exchange time, naive).")
    spot: float = Field(ge=MIN_STRIKE, le=MAX_PRICE, allow_inf_nan=False,
                        description="At least a cent.")  # fmt: skip
    rate: float = Field(0.045, ge=-0.1, le=0.5, allow_inf_nan=False)
    dividend_yield: float = Field(0.0, ge=0, le=0.5, allow_inf_nan=False)
    index: bool = Field(False, description="A broad-based index: index margin, cash settlement.")
    style: Literal["american", "european"] | None = Field(
        None, description="The options' exercise style, for their implied volatilities and "
        "Greeks; unset: European for an index, else American (listed single-stock options)."
    )  # fmt: skip
    options: list[Quote] = Field(min_length=1, max_length=MAX_OPTIONS)


class PortfolioIn(RequestModel):
    cash: float = Field(allow_inf_nan=False, ge=-1e12, le=1e12)
    margin_account: bool = True
    allow_naked: bool = False
    positions: list[Leg] = Field(default_factory=list, max_length=MAX_POSITIONS,
                                 description="Held: side buy = long, sell = short.")  # fmt: skip


class OptionsRequest(RequestModel):
    chain: ChainIn
    portfolio: PortfolioIn
    order: Order | None = None
    propose: bool = Field(False, description="Also return the trained agent's proposal.")


class Check(ResponseModel):
    accepted: bool
    code: str | None = None
    leg: int | None = None
    field: str | None = None
    message: str | None = None
    price: float | None = Field(None, description="Net price a share (+ debit).")
    fees: float | None = None
    cash_change: float | None = None


class OptionsResponse(ResponseModel):
    check: Check | None
    nav: float
    margin: dict[str, float]
    greeks: dict[str, float]
    stress: dict[str, float] = Field(description="Loss (dollars, > 0 a loss) per scenario.")
    proposal: dict[str, Any] | None
    model_version: str


def _chain(c: ChainIn) -> tuple[Chain, Underlying]:
    quotes = c.options
    for i, q in enumerate(quotes):
        if q.bid > q.ask:
            raise InputError(f"chain.options.{i}.bid", f"bid {q.bid} above ask {q.ask}")
        if q.expiry < c.time.date():
            raise InputError(f"chain.options.{i}.expiry", f"{q.expiry} is before {c.time.date()}")
    keys = [(q.expiry, q.strike, q.right) for q in quotes]
    if len(set(keys)) != len(keys):
        raise InputError("chain.options", "a contract is quoted twice")
    call = np.array([q.right == "call" for q in quotes])
    style = c.style or ("european" if c.index else "american")
    now = c.time.replace(tzinfo=None)  # read as exchange time
    if now.time() == dt.time(0):
        now = dt.datetime.combine(now.date(), CLOSE)  # a date alone: at the close
    chain = Chain(c.underlying, now, c.spot, c.rate, c.dividend_yield,
                  np.array([q.expiry for q in quotes], dtype="datetime64[D]"),
                  np.array([q.strike for q in quotes]), call,
                  np.array([q.bid for q in quotes]), np.array([q.ask for q in quotes]),
                  np.full(len(quotes), np.nan), style=style)  # fmt: skip
    given = np.array([q.iv if q.iv is not None else np.nan for q in quotes])
    solved = implied_vol(chain.mid, c.spot, chain.strike, chain.years, c.rate, c.dividend_yield,
                         call, american=chain.american)  # fmt: skip
    chain.iv = np.where(np.isfinite(given), given, np.nan_to_num(solved, nan=0.3))
    underlying = Underlying(c.underlying, style=style, index=c.index,
                            settlement="cash_pm" if c.index else "physical")  # fmt: skip
    return chain, underlying


def service(run: LoadedRun) -> ServiceSpec:
    """Serve order checks on posted chains, and the run's trained agent's proposals."""
    model, cfg = run.trained, run.config

    def act(request: OptionsRequest) -> OptionsResponse:
        chain, underlying = _chain(request.chain)
        symbol = underlying.symbol
        now = chain.time
        market = Market({symbol: underlying}, [now], [{symbol: chain}])
        p = request.portfolio
        rules = {"margin_account": p.margin_account, "allow_naked": p.allow_naked}
        posted = derive(cfg, suite={**rules, "shares": 0})
        env = OptionsEnv(posted, [Episode(market, symbol, "posted")])
        env.reset(seed=0)
        held: dict = {}
        for i, leg in enumerate(p.positions):
            where = f"portfolio.positions.{i}"
            if leg.quantity <= 0 or leg.quantity != int(leg.quantity):
                raise InputError(f"{where}.quantity", "a whole number above 0 (side sell: short)")
            if leg.instrument == "option" and None in (leg.strike, leg.expiry, leg.right):
                raise InputError(where, "an option needs right, strike and expiry")
            if leg.underlying not in (None, symbol):
                raise InputError(f"{where}.underlying", f"the chain is for {symbol}; post "
                                 "positions on other underlyings with their own chain")  # fmt: skip
            if leg.instrument == "option" and leg.expiry < now.date():
                raise InputError(f"{where}.expiry", f"expired on {leg.expiry}, before the "
                                 f"chain's {now.date()}: settle it before posting")  # fmt: skip
            key = ("stock", None, None, None) if leg.instrument == "stock" else (
                "option", leg.right, float(leg.strike), leg.expiry)  # fmt: skip
            held[key] = held.get(key, 0.0) + (leg.quantity if leg.side == "buy" else -leg.quantity)
        account = Account(p.cash, AccountRules(margin_account=p.margin_account,
                                               allow_naked=p.allow_naked))  # fmt: skip
        account.positions = {symbol: {k: q for k, q in held.items() if q}} if held else {}
        env.use_account(account)
        check = None
        if request.order is not None:
            if request.order.underlying != symbol:
                raise InputError("order.underlying", f"the chain is for {symbol}")
            try:
                fill = env.account.submit(request.order, market.now(0))
                check = Check(accepted=fill is not None,
                              message=None if fill else "not marketable at the modelled fill",
                              price=fill.price if fill else None, fees=fill.fees if fill else None,
                              cash_change=fill.cash - fill.fees if fill else None)  # fmt: skip
            except Rejection as exc:
                check = Check(accepted=False, **exc.as_dict())
        view = market.now(0)
        proposal = None
        if request.propose:
            nav = env.account.nav(view)
            if not nav > 0:  # the agent reads its Greeks and cash as shares of NAV
                raise InputError("portfolio.cash", f"a proposal needs a positive net asset "
                                 f"value; this portfolio's is {nav:,.2f}")  # fmt: skip
            env.use_account(env.account)  # the portfolio after the checked order
            action = int(model.predict(env.observation(), action_masks=env.action_masks(),
                                       deterministic=True)[0])  # fmt: skip
            proposal = {"action": "hold" if action == 0 else "close" if action == 1 else "open"}
            if action >= 2:
                item = env.menu[action - 2]
                order = env.plan(item).order
                quantity = env.quantity(item)
                proposal.update(strategy=item.name, quantity=quantity,
                                order=order.model_dump(mode="json") if order else None)  # fmt: skip
        return OptionsResponse(check=check, nav=env.account.nav(view),
                               margin=env.account.requirement(view),
                               greeks=env.account.greeks(view), stress=stress_losses(env),
                               proposal=proposal, model_version=run.model_version)  # fmt: skip

    return ServiceSpec.for_run(run, OptionsRequest, OptionsResponse, act,
                               info={"suite": cfg.suite.name, "max_options": MAX_OPTIONS,
                                     "max_positions": MAX_POSITIONS})  # fmt: skip


def example_request(run: LoadedRun) -> dict[str, Any]:
    """A small chain, a portfolio of cash, a 5-wide put credit spread to check, and the
    agent's proposal."""
    expiry = "2025-02-21"
    options = []
    for strike, call_bid, put_bid in ((90, 11.0, 0.6), (95, 6.9, 1.4), (100, 3.6, 3.0),
                                      (105, 1.5, 5.9), (110, 0.5, 9.8)):  # fmt: skip
        options.append({"expiry": expiry, "strike": strike, "right": "call", "bid": call_bid,
                        "ask": round(call_bid + 0.1, 2)})  # fmt: skip
        options.append({"expiry": expiry, "strike": strike, "right": "put", "bid": put_bid,
                        "ask": round(put_bid + 0.1, 2)})  # fmt: skip
    return {"chain": {"underlying": "XYZ", "time": "2025-01-21T15:00:00", "spot": 100.0,
                      "options": options},
            "portfolio": {"cash": 25_000.0},
            "order": {"underlying": "XYZ", "legs": [
                {"right": "put", "strike": 95, "expiry": expiry, "side": "sell", "quantity": 1},
                {"right": "put", "strike": 90, "expiry": expiry, "side": "buy", "quantity": 1}]},
            "propose": True}  # fmt: skip
