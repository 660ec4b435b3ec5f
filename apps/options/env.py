"""The gymnasium environment: one underlying, one strategy at a time, chosen from the
suite's menu, with action masking.

Actions: 0 hold, 1 close the open strategy, 2 + i open menu item i (``env.menu[i]``) at
the suite's risk budget. The mask allows an open only when flat and when the order would
pass the account's checks (buying power, naked rules, quantity of at least one unit), so
a masked agent sends only executable orders; every order still goes through the account.

A policy reads an :class:`AgentView` (:meth:`OptionsEnv.agent_view`): copies of the step's
chain, the spots so far, the observation, the mask and the open strategy, and nothing
later, so no menu agent can look ahead. An agent that writes its own orders (the LLM
adapter) gets an :class:`OrderDesk` (:meth:`OptionsEnv.order_desk`) instead: the step's
AgentView, the account's present state and a way to send orders, at most
``1 + max_retries`` a step, and no way to the env; the env counts attempts, rejections by
code and retries to validity.

Observation (float32): market features read from the chains up to now (returns, realized
and implied volatility, IV rank and percentile over the trailing year, implied minus
realized volatility, term structure, skew, days to earnings, time left) and the
account's state (dollar Greeks, P&L, cash and margin over NAV, the open strategy's age and
days to expiry). Reward: the change of NAV (at mid) over the step, in percent of capital.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from fieldrl.apps.options.account import Account, AccountRules, Fill
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.costs import (
    FeeSchedule,
    MarginRules,
    Position,
    margin_requirement,
    order_fees,
)
from fieldrl.apps.options.engine import strategy_margin
from fieldrl.apps.options.episodes import Episode
from fieldrl.apps.options.market import Chain, MarketView
from fieldrl.apps.options.orders import Order, Reject, Rejection
from fieldrl.apps.options.pricing import option_price
from fieldrl.apps.options.strategies import MenuItem, build_order, pick_expiry, pick_strike

__all__ = ["FEATURES", "AccountState", "AgentView", "OptionsEnv", "OrderDesk", "menu_for",
           "observation_space"]  # fmt: skip

FEATURES = ("ret_1", "ret_5", "ret_20", "realized_vol", "atm_iv", "term_slope", "skew",
            "iv_rank", "iv_percentile", "iv_minus_rv", "earnings_soon", "time_left", "flat",
            "delta", "gamma", "vega", "theta", "pnl", "open_pnl", "cash", "margin", "age",
            "dte")  # fmt: skip


NO_FEES = FeeSchedule(0, 0, 0, 0, 0, 0, 0, 0)
KEPT = 128  # episodes whose per-step plans and features the environment keeps
OVERLAYS = ("covered_call", "collar", "protective_put")  # on the suite's own shares
STOCK_STRATEGIES = ("buy_write", "buy_shares")  # strategies that buy shares themselves


def observation_space(cfg: OptionsConfig) -> gym.spaces.Box:
    """The observation: ``ppo.frame_stack`` feature vectors, oldest first."""
    return gym.spaces.Box(-np.inf, np.inf, (cfg.ppo.frame_stack * len(FEATURES),), np.float32)


def menu_for(cfg: OptionsConfig) -> list[MenuItem]:
    s = cfg.suite
    return [MenuItem(t, d, n) for t in s.templates for d in s.deltas for n in s.dtes]


@dataclass
class Plan:
    """A menu item's order for one unit at one step, and what a unit costs to open."""

    order: Order | None
    risk: float = np.inf  # the most a unit can lose by its first expiry (see assess), dollars
    cash: float = 0.0  # cash a unit needs: requirement plus debit (a credit is negative)
    naked_calls: float = 0.0
    naked: float = 0.0


@dataclass(frozen=True)
class AgentView:
    """What a policy may read at one step: copies of the present (the chain, the
    observation, the mask, the open strategy) and the spots so far; nothing in it leads to
    a later step (``market`` raises :class:`~fieldrl.apps.options.market.LookAheadError`
    when asked for one)."""

    step: int
    symbol: str
    market: MarketView
    observation: np.ndarray
    mask: np.ndarray
    open_item: MenuItem | None
    opened_on: dt.date | None  # the day the open strategy was opened
    days_to_expiry: int | None  # of the open strategy's nearest expiry
    strategy_pnl: float  # dollars the open strategy made so far
    entry_cash: float  # cash the open strategy brought in (a credit > 0)
    shares: int  # the suite's own shares (an overlay's)
    rng: np.random.Generator

    @property
    def today(self) -> dt.date:
        return self.market.time.date()


@dataclass(frozen=True)
class AccountState:
    """The account at one moment, marked at the present step."""

    cash: float
    nav: float
    margin_requirement: float
    greeks: dict[str, float]  # dollar Greeks
    positions: dict[tuple, float]  # the symbol's: (instrument, right, strike, expiry) -> qty


@dataclass(frozen=True)
class OrderDesk:
    """What an agent that writes its own orders may read and do at one step: the step's
    :class:`AgentView`, the account's present state, the tries left, sending an order and
    recording one refused before it was sent (one that did not parse). It holds functions
    made by :meth:`OptionsEnv.order_desk`, not the env, so no attribute leads to the env,
    its market or a later chain (a guard against peeking, not a sandbox: Python's
    introspection can reach anything in the process)."""

    view: AgentView
    _account: Callable[[], AccountState]
    _retries_left: Callable[[], int]
    _submit: Callable[[Order], Fill | None]
    _record_rejection: Callable[[Rejection], Rejection]

    @property
    def symbol(self) -> str:
        return self.view.symbol

    @property
    def retries_left(self) -> int:
        """Orders this step may still send (recorded rejections included)."""
        return self._retries_left()

    def account(self) -> AccountState:
        """The account now (after this step's fills)."""
        return self._account()

    def submit(self, order: Order) -> Fill | None:
        """Send ``order`` now (see :meth:`OptionsEnv.submit`); raises :class:`Rejection`."""
        return self._submit(order)

    def record_rejection(self, rejection: Rejection) -> Rejection:
        """Count an order refused before it was sent (see
        :meth:`OptionsEnv.record_rejection`); returns the rejection counted."""
        return self._record_rejection(rejection)


@dataclass
class StepLog:
    nav: list[float] = field(default_factory=list)
    greeks: list[dict] = field(default_factory=list)
    margin: list[float] = field(default_factory=list)
    features: list[np.ndarray] = field(default_factory=list)  # as first seen (frame stacking)


class OptionsEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, cfg: OptionsConfig, episodes: Sequence[Episode], keep: int = KEPT
                 ) -> None:  # fmt: skip
        """``keep``: how many episodes' per-step plans to keep for replays (at least the
        one being played)."""
        if not episodes:
            raise ValueError("OptionsEnv needs at least one episode")
        self.cfg, self.episodes = cfg, episodes
        self.menu = menu_for(cfg)
        s = cfg.suite
        costs = cfg.market.costs
        self.rules = AccountRules(margin_account=s.margin_account, allow_naked=s.allow_naked,
                                  max_contracts=s.max_contracts,
                                  fill=cfg.market.fill if costs else "mid",
                                  fees=FeeSchedule() if costs else NO_FEES)  # fmt: skip
        self.action_space = gym.spaces.Discrete(2 + len(self.menu))
        self.observation_space = observation_space(cfg)
        # per episode, what its steps computed once: the menu's plans and surface features
        # (replayed episodes reuse them; the last `keep` episodes played are kept)
        self._memo: OrderedDict[int, dict[tuple, Any]] = OrderedDict()
        self._keep = max(1, keep)
        self._rng = np.random.default_rng()
        self.episode_index = -1

    # ------------------------------------------------------------------ gym API

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if options and "episode" in options:
            self.episode_index = int(options["episode"]) % len(self.episodes)
        else:
            self.episode_index = int(self._rng.integers(len(self.episodes)))
        self.episode = self.episodes[self.episode_index]
        self.market, self.symbol = self.episode.market, self.episode.symbol
        self._log_spots = np.log([c[self.symbol].spot for c in self.market.chains])
        self.t = 0
        self.account = Account(self.cfg.suite.capital, self.rules)
        if self.cfg.suite.shares:
            self._buy_shares(self.cfg.suite.shares)
        self.open_item: MenuItem | None = None
        self.opened_at, self.entry_nav = 0, self.account.nav(self._now())
        self.entry_cash = 0.0  # cash the open strategy brought in (a credit > 0)
        self.attempts, self.rejections, self.retries_to_valid = 0, Counter(), []
        self.entries: list[dict] = []  # each strategy opened: risk, edge, view agreement
        # what the overlay's shares alone risk (a 20% gap): holding them is a strategy too
        self.base_risk = 0.2 * self.cfg.suite.shares * self._chain().spot
        self.retries_left = self.cfg.suite.max_retries + 1
        self.log = StepLog()
        self._record()
        return self.observation(), {}

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.action_space.n, dtype=bool)
        mask[0] = True
        held_for = self.t - self.opened_at
        mask[1] = self._holding_strategy() and held_for >= self.cfg.suite.min_hold
        if self.open_item is None and self._now().market_open:
            for i in range(len(self.menu)):
                mask[2 + i] = self.quantity(self.menu[i]) >= 1
        return mask

    def step(self, action: int):
        action = int(action)
        if action == 1 and self._holding_strategy():
            self.close()
        elif action >= 2:
            item = self.menu[action - 2]
            if self.open_item is not None or self.quantity(item) < 1:
                # an agent that ignores the mask: an attempt refused, under its reason
                self.attempts += 1
                code = Reject.STRATEGY_OPEN if self.open_item else Reject.INSUFFICIENT_BUYING_POWER
                self._count(Rejection(code, item.name))
            else:
                try:
                    self.open(item)
                except Rejection:
                    pass  # refused by the account: counted in ``rejections``
        return self.advance()

    def advance(self):
        """Move to the next step: settle what happens in between, mark, reward."""
        before = self.log.nav[-1]  # before this step's trades: their costs count
        years = (self.market.times[self.t + 1] - self.market.times[self.t]).total_seconds()
        self.t += 1
        last = self.t >= len(self.market) - 1
        now = self._now()
        self.account.accrue(self._chain().rate, years / (365.0 * 86400))
        self.account.settle(now)
        self._flatten_delivered_stock()
        if self.open_item is not None and not self._holding_strategy():
            self.open_item = None  # expired or assigned away
        self.retries_left = self.cfg.suite.max_retries + 1
        self._record()
        after = self.log.nav[-1]
        reward = 100.0 * (after - before) / self.cfg.suite.capital
        return self.observation(), float(reward), last, False, {"nav": after}

    # ---------------------------------------------------------- order-level API

    def submit(self, order: Order, item: MenuItem | None = None) -> Fill | None:
        """Send ``order`` now; raises :class:`Rejection` (counted) when refused or when the
        step's tries are used up. ``item`` tags a menu strategy as the open one."""
        if self.retries_left <= 0:
            raise self._count(self._exhausted())
        self.retries_left -= 1
        self.attempts += 1
        tries = self.cfg.suite.max_retries + 1 - self.retries_left
        try:
            fill = self.account.submit(order, self._now())
        except Rejection as exc:
            self.rejections[exc.code.value] += 1
            raise
        self.retries_to_valid.append(tries - 1)
        if fill is not None and order.action == "trade" and self.open_item is None:
            self.open_item = item or MenuItem("custom", 0.0, 0)
            self._entered(order, fill)
            self.opened_at, self.entry_nav = self.t, self.account.nav(self._now())
            self.entry_cash = -fill.cash
        return fill

    def record_rejection(self, rejection: Rejection) -> Rejection:
        """Count an order refused before it reached :meth:`submit` (one that did not
        parse) as an attempt that used one of the step's tries; with none left, as
        ``retries_exhausted``. Returns the rejection counted."""
        if self.retries_left <= 0:
            rejection = self._exhausted()
        else:
            self.retries_left -= 1
            self.attempts += 1
        return self._count(rejection)

    def _exhausted(self) -> Rejection:
        return Rejection(Reject.RETRIES_EXHAUSTED, f"{self.cfg.suite.max_retries} retries a step")

    def _entered(self, order: Order, fill: Fill) -> None:
        """Record a new strategy's risk, its entry edge (fair value minus the price paid,
        per unit of risk; fair value: the quotes' mid, or in a synthetic market the price
        at the volatility without the variance premium, American or European as the chain's
        options are) and whether its Greeks agree with the view the agent stated."""
        chain = self._chain()
        risk = self.assess(order).risk
        edge = 0.0
        scale = self.episode.fair_vol_scale
        for key, signed, price in fill.legs:
            if key[0] != "option":
                continue
            row = chain.find(key[1] == "call", key[2], key[3])
            fair = float(option_price(chain.spot, key[2], chain.years[row], chain.iv[row] * scale,
                                      chain.rate, chain.dividend_yield, key[1] == "call",
                                      american=chain.american))  # fmt: skip
            edge += (fair - price) * signed * 100
        now = self._now()
        consistent = _agrees(order.view, self.account.greeks(now), self.account.nav(now))
        legs = [{"right": k[1], "strike": k[2], "quantity": q, "price": p}
                for k, q, p in fill.legs]  # fmt: skip
        self.entries.append({"risk": risk, "edge": edge / risk, "view": order.view,
                             "consistent": consistent, "name": self.open_item.name,
                             "time": str(now.time), "spot": chain.spot, "legs": legs})  # fmt: skip

    def open(self, item: MenuItem) -> Fill | None:
        """Open ``item`` at the risk budget (None when flat is not the case, or the account
        cannot afford one unit): the menu actions and the rule baselines go through here."""
        quantity = self.quantity(item)
        plan = self.plan(item)
        if quantity < 1 or plan.order is None or self.open_item is not None:
            return None
        return self.submit(_scaled(plan.order, quantity), item=item)

    def close(self) -> Fill | None:
        """Close the open strategy's legs at market, each order an attempt (the overlay's
        shares stay). At the end of an episode nothing is sold: everything is marked."""
        held = self.account.positions.get(self.symbol, {})
        chain = self._chain()
        legs = []
        for (instrument, right, strike, expiry), q in held.items():
            if instrument != "option":
                continue
            row = chain.find(right == "call", strike, expiry)
            if q > 0 and (
                chain.bid[row] <= 0
                if row is not None
                else chain.mark(right == "call", strike, expiry)[0] < 0.05
            ):
                continue  # worthless long options: left to expire
            legs.append({"right": right, "strike": strike, "expiry": expiry,
                         "side": "sell" if q > 0 else "buy", "quantity": abs(q)})  # fmt: skip
        stock = held.get(("stock", None, None, None), 0.0)
        if self.open_item is not None and self.open_item.template in STOCK_STRATEGIES and stock:
            legs.append({"instrument": "stock", "side": "sell", "quantity": stock})
        if not legs:
            self.open_item = None
            return None
        # buy back the shorts before selling the longs, in orders of at most max_legs legs
        legs.sort(key=lambda leg: leg["side"] != "buy")
        size, fill = self.rules.max_legs, None
        for start in range(0, len(legs), size):
            self.attempts += 1
            order = Order(underlying=self.symbol, legs=legs[start : start + size])
            try:
                fill = self.account.submit(order, self._now())
            except Rejection as exc:
                self.rejections[exc.code.value] += 1
                return None
        self.open_item = None
        return fill

    def use_account(self, account: Account) -> None:
        """Act for ``account`` from now on (the service's posted portfolio): its options
        count as the open strategy, and the record restarts from its NAV and Greeks."""
        self.account = account
        self.open_item = MenuItem("posted", 0.0, 0) if self._holding_strategy() else None
        self.opened_at, self.entry_nav = self.t, account.nav(self._now())
        self.log = StepLog()
        self._record()

    def days_to_expiry(self) -> int | None:
        """Calendar days to the open strategy's nearest expiry (None without options)."""
        today = self.market.times[self.t].date()
        held = self.account.positions.get(self.symbol, {})
        days = [(k[3] - today).days for k in held if k[0] == "option"]
        return min(days) if days else None

    def strategy_pnl(self) -> float:
        """Dollars the open strategy made so far (NAV now minus NAV when it opened)."""
        return self.account.nav(self._now()) - self.entry_nav if self.open_item else 0.0

    def view(self) -> MarketView:
        """What an agent may read now (copies; nothing later)."""
        return self.market.view(self.t)

    def agent_view(self) -> AgentView:
        """Everything a policy may read now (see :class:`AgentView`)."""
        opened_on = self.market.times[self.opened_at].date() if self.open_item else None
        return AgentView(self.t, self.symbol, self.view(), self.observation(),
                         self.action_masks(), self.open_item, opened_on, self.days_to_expiry(),
                         self.strategy_pnl(), self.entry_cash, self.cfg.suite.shares,
                         self.np_random)  # fmt: skip

    def account_state(self) -> AccountState:
        """The account now, marked at this step (see :class:`AccountState`)."""
        now = self._now()
        held = self.account.positions.get(self.symbol, {})
        return AccountState(self.account.cash, self.account.nav(now),
                            self.account.requirement(now)["requirement"],
                            self.account.greeks(now), dict(held))  # fmt: skip

    def order_desk(self) -> OrderDesk:
        """What an agent that writes its own orders gets now (see :class:`OrderDesk`):
        the env is reached only through these functions."""
        return OrderDesk(self.agent_view(), lambda: self.account_state(),
                         lambda: self.retries_left, lambda order: self.submit(order),
                         lambda rejection: self.record_rejection(rejection))  # fmt: skip

    # ------------------------------------------------------------------ helpers

    def _now(self) -> MarketView:
        return self.market.now(self.t)

    def _chain(self) -> Chain:
        return self.market.chains[self.t][self.symbol]

    def _count(self, rejection: Rejection) -> Rejection:
        self.rejections[rejection.code.value] += 1
        return rejection

    def _holding_strategy(self) -> bool:
        held = self.account.positions.get(self.symbol, {})
        if any(k[0] == "option" for k in held):
            return True
        template = self.open_item.template if self.open_item is not None else None
        return template in STOCK_STRATEGIES and bool(held)

    def _flatten_delivered_stock(self) -> None:
        """Trade shares delivered by exercise or assignment back to the suite's own (none,
        or the overlay's; a buy-write keeps its shares) at market, so that each strategy
        starts from the same holdings. Logged as an event."""
        held = self.account.positions.get(self.symbol, {})
        stock = held.get(("stock", None, None, None), 0.0)
        keep = float(self.cfg.suite.shares)
        template = self.open_item.template if self.open_item is not None else None
        if template == "buy_shares":
            keep = stock
        elif template == "buy_write":  # the shares the short calls still cover
            short_calls = sum(-q for k, q in held.items() if k[0] == "option" and k[1] == "call")
            keep = max(keep, min(stock, 100.0 * max(short_calls, 0.0)))
        if stock == keep or not self._now().market_open:
            return
        side = "sell" if stock > keep else "buy"
        order = Order(
            underlying=self.symbol,
            legs=[{"instrument": "stock", "side": side, "quantity": abs(stock - keep)}],
        )
        try:
            self.account.submit(order, self._now())
            done = "delivered stock traded back"
        except Rejection as exc:
            done = f"delivered stock kept: {exc}"
        self.account.events.append({"event": done, "shares": stock - keep})

    def _buy_shares(self, shares: int) -> None:
        spot = self._chain().spot
        self.account.positions[self.symbol] = {("stock", None, None, None): float(shares)}
        self.account.cash -= shares * spot

    def plan(self, item: MenuItem) -> Plan:
        """A unit of ``item`` at this step. The first ask of a step plans the whole menu at
        once (its stress scenarios priced in one call), as the mask needs every item."""
        memo = self._episode_memo()
        plans = memo.get(("plans", self.t))
        if plans is None:
            plans = memo["plans", self.t] = self._make_plans(self.menu)
        if item not in plans:  # an item off the menu
            plans.update(self._make_plans([item]))
        return plans[item]

    def _episode_memo(self) -> dict[tuple, Any]:
        memo = self._memo.setdefault(self.episode_index, {})
        self._memo.move_to_end(self.episode_index)
        if len(self._memo) > self._keep:
            self._memo.popitem(last=False)
        return memo

    def _make_plans(self, items: list[MenuItem]) -> dict[MenuItem, Plan]:
        chain = self._chain()
        orders = [build_order(item, chain, 1) for item in items]
        assessed = iter(self.assess_many([o for o in orders if o is not None]))
        return {item: Plan(None) if order is None else next(assessed)
                for item, order in zip(items, orders, strict=True)}  # fmt: skip

    def assess(self, order: Order) -> Plan:
        """What ``order`` would need and risk if opened from flat (beside the overlay's
        shares): its cash need (margin added plus debit, less loan value) and its risk, its
        worst loss together with the overlay's shares under the stress scenarios, instantly
        or held to its first expiry (see :meth:`_stress_losses`; a long option's risk is its
        premium), at most the most it can lose when that is bounded (the margin it adds
        plus its debit, with no naked leg or shares), fees in and out included."""
        return self.assess_many([order])[0]

    def assess_many(self, orders: list[Order]) -> list[Plan]:
        """:meth:`assess` of each of ``orders``: their margins computed at once
        (:func:`~fieldrl.apps.options.engine.strategy_margin`), their stress scenarios
        priced at once."""
        chain = self._chain()
        shares = float(self.cfg.suite.shares)
        underlying = self.market.underlyings[self.symbol]
        rules = {"margin_account": self.rules.margin_account, "index": underlying.index,
                 "secure_puts": not self.rules.allow_naked}  # fmt: skip
        held = [Position("stock", shares, price=chain.spot)] if shares else []
        before = margin_requirement(held, chain.spot, **rules)
        priced, legs = [], []  # (order, fees, debit, stock), option legs
        for order in orders:
            debit, traded, options, stock = 0.0, [], [], 0.0
            for leg in order.legs:
                side = 1.0 if leg.side == "buy" else -1.0
                if leg.instrument == "stock":
                    debit += side * leg.quantity * chain.spot
                    stock += side * leg.quantity
                    traded.append(("stock", leg.quantity, chain.spot))
                    continue
                row = chain.find(leg.right == "call", leg.strike, leg.expiry)
                price = np.nan if row is None else float(chain.ask[row] if side > 0
                                                         else chain.bid[row])  # fmt: skip
                if not price > 0:  # not listed, or no bid to sell into
                    break
                debit += side * leg.quantity * 100 * price
                traded.append(("option", leg.quantity, price))
                days, mark = (leg.expiry - chain.time.date()).days + 0.5, float(chain.mid[row])
                options.append((side * leg.quantity, leg.strike, leg.right == "call", days, mark,
                                chain.years[row], chain.iv[row]))  # fmt: skip
            else:
                fees = 2 * order_fees(traded, self.rules.fees)  # to open, and again to close
                priced.append((order, fees, debit, stock))
                legs.append(options)
                continue
            priced.append(None)
            legs.append([])
        ok = [i for i, p in enumerate(priced) if p is not None]
        plans = [Plan(None)] * len(orders)
        if not ok:
            return plans
        width = max(1, *(len(legs[i]) for i in ok))
        book = np.zeros((len(ok), width, 5))  # quantity, strike, call, days, mark
        for row, i in enumerate(ok):
            for j, leg in enumerate(legs[i]):
                book[row, j] = leg[:5]
        stock_after = np.array([shares + priced[i][3] for i in ok])
        after = strategy_margin(book[..., 0], book[..., 2] > 0, book[..., 1], book[..., 3],
                                book[..., 4], stock_after, chain.spot, rules=MarginRules(),
                                **rules)  # fmt: skip
        losses = self._stress_losses(chain, [priced[i][2] for i in ok], list(stock_after),
                                     [[(100 * q, k, c, y, v) for q, k, c, _, _, y, v in legs[i]]
                                      for i in ok])  # fmt: skip
        for row, (i, risk) in enumerate(zip(ok, losses, strict=True)):
            order, fees, debit, stock = priced[i]
            need = after["requirement"][row] - before["requirement"]
            cash = need + debit - (after["loan_value"][row] - before["loan_value"])
            naked, naked_calls = float(after["naked"][row]), float(after["naked_calls"][row])
            if not stock and not shares and not naked and not naked_calls:
                risk = min(risk, need + debit)  # defined risk: margin plus debit is the most lost
            plans[i] = Plan(order, max(risk + fees, 1.0), float(cash), naked_calls, naked)
        return plans

    def _stress_losses(self, chain: Chain, debits: list[float], stocks: list[float],
                       legs: list[list[tuple]]) -> list[float]:  # fmt: skip
        """The worst loss of each position: ``stocks`` shares (the overlay's own included)
        and option ``legs`` (signed shares, strike, call, years, volatility) bought for
        ``debits``, under the stress scenarios: instantly, spot -20% or +20% and volatility
        +-20 points; at the first expiry, spot at -20%, 0%, +20% or at any of its strikes
        (where the payoff bends, so a spread's or a long option's worst case to expiry is
        among them). Options are priced in the chain's style: an American one is never
        worth less than exercising it. Every position and scenario is priced in one call
        (American pricing costs most per call): (position, scenario, leg) arrays, the
        positions' legs padded with empty ones."""
        spot, n = chain.spot, len(legs)
        held_shares = float(self.cfg.suite.shares)
        base = np.array(debits) + held_shares * spot
        instant = np.array([0.8, 1.2, 1.0, 1.0]) * spot
        stock = np.array(stocks)
        losses = np.max(base[:, None] - stock[:, None] * instant, axis=1) if n else np.zeros(0)
        width = max((len(x) for x in legs), default=0)
        with_options = [i for i, x in enumerate(legs) if x]
        if not with_options:
            return losses.tolist()
        sign, strike, call, years, vol = (np.zeros((len(with_options), width)) for _ in range(5))
        present = np.zeros((len(with_options), width), bool)
        for row, i in enumerate(with_options):
            for j, leg in enumerate(legs[i]):
                sign[row, j], strike[row, j], call[row, j], years[row, j], vol[row, j] = leg
                present[row, j] = True
        first = np.where(present, years, np.inf).min(1, keepdims=True)
        # an empty leg: no shares, at the money, expiring with the first (prices finite)
        strike, years = np.where(present, strike, spot), np.where(present, years, first)
        vol = np.where(present, vol, 0.2)
        at_expiry = np.concatenate([np.broadcast_to([0.8 * spot, spot, 1.2 * spot],
                                                    (len(with_options), 3)),
                                    np.where(present, strike, 0.8 * spot)], 1)  # fmt: skip
        spots = np.concatenate([np.broadcast_to(instant, (len(with_options), 4)), at_expiry], 1)
        left = np.concatenate([np.broadcast_to(years[:, None, :], (len(with_options), 4, width)),
                               np.broadcast_to((years - first)[:, None, :],
                                               (len(with_options), at_expiry.shape[1], width))],
                              1)  # fmt: skip
        shock = np.zeros(spots.shape[1])
        shock[2:4] = 0.2, -0.2
        sigma = np.maximum(vol[:, None, :] + shock[None, :, None], 0.01)
        prices = option_price(spots[..., None], strike[:, None, :], left, sigma, chain.rate,
                              chain.dividend_yield, call[:, None, :].astype(bool),
                              american=chain.american)  # fmt: skip
        value = stock[with_options, None] * spots + (sign[:, None, :] * prices).sum(-1)
        losses[with_options] = np.max(base[with_options, None] - value, axis=1)
        return losses.tolist()

    def quantity(self, item: MenuItem) -> int:
        """Units of menu item ``item`` at the risk budget that the account can afford now."""
        plan = self.plan(item)
        if plan.order is None:
            return 0
        if plan.naked_calls and not self.rules.margin_account:
            return 0
        if plan.naked and not self.rules.allow_naked:
            return 0
        budget = self.cfg.suite.risk_budget * self.cfg.suite.capital
        units = int(budget // plan.risk)
        if item.template in OVERLAYS:
            units = int(self.cfg.suite.shares // 100)  # one contract per 100 shares held
        cash = self.account.cash - 5.0 * units  # room for fees
        if plan.cash > 0:
            units = min(units, int(max(cash, 0) // plan.cash))
        held = sum(abs(q) for k, q in self.account.positions.get(self.symbol, {}).items()
                   if k[0] == "option")  # fmt: skip
        per_unit = sum(leg.quantity for leg in plan.order.legs if leg.instrument == "option")
        if per_unit:
            units = min(units, int((self.rules.max_contracts - held) // per_unit))
        return max(units, 0)

    def _record(self) -> None:
        now = self._now()
        self.log.nav.append(self.account.nav(now))
        self.log.greeks.append(self.account.greeks(now))
        self.log.margin.append(self.account.requirement(now)["requirement"])
        if self.cfg.ppo.frame_stack > 1:
            self.log.features.append(self.features())

    def _surface(self, step: int) -> tuple[float, float, float]:
        """The surface features of the chain at ``step`` (at most the present)."""
        memo = self._episode_memo()
        if ("surface", step) not in memo:
            memo["surface", step] = _surface_features(self.market.chains[step][self.symbol])
        return memo["surface", step]

    def _iv_past(self) -> np.ndarray:
        """30-day ATM volatility of the trading year before now: the market's history
        before the episode, then the episode's earlier steps."""
        history = self.market.iv_history.get(self.symbol, np.zeros(0))
        earlier = [self._surface(step)[0] for step in range(self.t)]
        return np.concatenate([history, earlier])[-252:]

    def observation(self) -> np.ndarray:
        """:meth:`features` now, after those seen at the ``ppo.frame_stack - 1`` steps
        before (the first step's repeated at an episode's start): a memory of the episode."""
        now = self.features()
        k = self.cfg.ppo.frame_stack
        if k == 1:
            return now
        past = self.log.features[-k:-1]  # the last entry is this step's, as first seen
        return np.concatenate([*[past[0] if past else now] * (k - 1 - len(past)), *past, now])

    def features(self) -> np.ndarray:
        """The :data:`FEATURES` of this step."""
        chain = self._chain()
        logs = self._log_spots[: self.t + 1]  # the episode's spots up to now

        def ret(n: int) -> float:
            return float(logs[-1] - logs[max(len(logs) - 1 - n, 0)])

        realized = float(np.std(np.diff(logs[-21:])) * np.sqrt(252)) if len(logs) > 2 else 0.0
        atm, slope, skew = self._surface(self.t)
        memo = self._episode_memo()
        if ("iv_rank", self.t) not in memo:
            memo["iv_rank", self.t] = iv_rank(atm, self._iv_past())
        rank, percentile = memo["iv_rank", self.t]
        today = chain.time.date()
        soon = [(e - today).days for e in self.market.underlyings[self.symbol].earnings
                if e >= today]  # fmt: skip
        nav = self.log.nav[-1]
        g = self.log.greeks[-1]
        capital = self.cfg.suite.capital
        held_expiry = [
            k[3] for k in self.account.positions.get(self.symbol, {}) if k[0] == "option"
        ]
        dte = min((e - today).days for e in held_expiry) / 30 if held_expiry else 0.0
        features = [
            ret(1), ret(5), ret(20), realized, atm, slope, skew, rank, percentile,
            atm - realized,
            min(soon) / 30 if soon else 1.0,
            1 - self.t / max(len(self.market) - 1, 1),
            float(self.open_item is None),
            g["delta"] / nav, g["gamma"] / nav, g["vega"] / nav * 10, g["theta"] / nav * 100,
            (nav - capital) / capital,
            (nav - self.entry_nav) / capital if self.open_item is not None else 0.0,
            self.account.cash / nav, self.log.margin[-1] / nav,
            (self.t - self.opened_at) / 30 if self.open_item is not None else 0.0,
            dte,
        ]  # fmt: skip
        return np.nan_to_num(np.array(features, dtype=np.float32), posinf=0.0, neginf=0.0)


def iv_rank(now: float, past: np.ndarray) -> tuple[float, float]:
    """IV rank (where ``now`` sits between the past's low and high, 0 to 1) and IV
    percentile (the share of past values below ``now``); 0.5 and 0.5 without a past."""
    past = past[np.isfinite(past)]
    if not len(past) or not np.isfinite(now):
        return 0.5, 0.5
    low, high = float(past.min()), float(past.max())
    rank = (now - low) / (high - low) if high > low else 0.5
    return float(np.clip(rank, 0.0, 1.0)), float(np.mean(past < now))


def _surface_features(chain: Chain) -> tuple[float, float, float]:
    """(ATM volatility near 30 days, its change from ~7 to ~45 days, 25-delta put minus
    call volatility near 30 days), read from the chain's own quotes."""

    def atm_vol(dte: int) -> float:
        expiry = pick_expiry(chain, dte)
        if expiry is None:
            return float("nan")
        row = pick_strike(chain, expiry, True, 0.5)
        return float(chain.iv[row]) if row is not None else float("nan")

    near = pick_expiry(chain, 30)
    put = pick_strike(chain, near, False, 0.25) if near else None
    call = pick_strike(chain, near, True, 0.25) if near else None
    skew = float(chain.iv[put] - chain.iv[call]) if put is not None and call is not None else 0.0
    return atm_vol(30), atm_vol(45) - atm_vol(7), skew


def _agrees(view: str | None, greeks: dict[str, float], nav: float) -> bool | None:
    """Whether the position's dollar Greeks agree with the agent's stated view (neutral:
    a dollar delta under 5% of NAV)."""
    if view is None:
        return None
    return {"bullish": greeks["delta"] > 0, "bearish": greeks["delta"] < 0,
            "neutral": abs(greeks["delta"]) < 0.05 * nav,
            "volatile": greeks["vega"] > 0, "vol_down": greeks["vega"] < 0}[view]  # fmt: skip


def _scaled(order: Order, quantity: int) -> Order:
    return order.model_copy(update={"legs": [leg.model_copy(update={"quantity": leg.quantity
                                                                    * quantity})
                                             for leg in order.legs]})  # fmt: skip
