"""What an agent sees: listed option chains with quotes, and the point-in-time guard.

A :class:`Market` holds a whole episode (a replay of real chains or a simulated path), but
an agent only ever gets a :class:`MarketView`, built for one step from copies of the data
dated at or before that step. The view holds no reference to the market, so there is
nothing later to read, by accident or on purpose; asking for a later time raises
:class:`LookAheadError`.

Also here: the exchange's listing rules (strike increments, monthly and weekly expiries,
daily 0DTE expiries for an index), the bid-ask spread model, and how an earnings
announcement's variance is placed on the expiries after it (both markets use it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from fieldrl.apps.options.config import SpreadConfig
from fieldrl.apps.options.pricing import Greeks, option_greeks
from fieldrl.errors import FieldrlError

__all__ = ["Chain", "LookAheadError", "Market", "MarketView", "Underlying", "earnings_ahead",
           "earnings_variance", "half_spread", "listed_expiries", "listed_strikes", "quotes",
           "strike_increment"]  # fmt: skip

CLOSE = dt.time(16, 0)
_EPOCH = dt.date(1970, 1, 1).toordinal()
OPEN = dt.time(9, 30)


class LookAheadError(FieldrlError):
    """An agent asked for data dated after the step it acts on."""


def _contract_key(expiry_index: np.ndarray, call: np.ndarray, strike: np.ndarray) -> np.ndarray:
    """One int64 a contract: expiry index and right above the strike in millionths (as
    :meth:`Chain.find` rounds it; strikes are at most 1e7, under 2**44 millionths)."""
    micro = np.rint(np.asarray(strike, float) * 1e6).astype(np.int64)
    return (np.asarray(expiry_index, np.int64) * 2 + np.asarray(call, np.int64)) << 44 | micro


@dataclass(frozen=True)
class Underlying:
    """A tradable underlying and the rules of its options."""

    symbol: str
    style: str = "american"  # "american" | "european"
    settlement: str = "physical"  # "physical" | "cash_am" | "cash_pm"
    index: bool = False  # broad-based index: index margin rates, cash settlement
    multiplier: float = 100.0
    dividends: tuple[tuple[dt.date, float], ...] = ()  # (ex-date, dollars a share)
    earnings: tuple[dt.date, ...] = ()  # announcement dates (after the close)


@dataclass
class Chain:
    """One underlying's listed options at one time, as arrays of equal length. Treat it as
    read-only once built: its Greeks, row index and marks are computed once and kept."""

    symbol: str
    time: dt.datetime
    spot: float
    rate: float
    dividend_yield: float
    expiry: np.ndarray  # datetime64[D]
    strike: np.ndarray
    call: np.ndarray  # bool
    bid: np.ndarray
    ask: np.ndarray
    iv: np.ndarray  # the volatility the quotes were made from (NaN where unknown)
    style: str = "european"  # "american": priced with early exercise (Barone-Adesi-Whaley)

    def __len__(self) -> int:
        return len(self.strike)

    @cached_property
    def years(self) -> np.ndarray:
        """Time to each expiry's close, in years (calendar days / 365)."""
        close = self.expiry.astype("datetime64[m]") + np.timedelta64(16 * 60, "m")
        minutes = (close - np.datetime64(self.time, "m")).astype(float)
        return np.maximum(minutes, 0.0) / (365.0 * 24 * 60)

    @property
    def mid(self) -> np.ndarray:
        return 0.5 * (self.bid + self.ask)

    @property
    def american(self) -> bool:
        return self.style == "american"

    @cached_property
    def greeks(self) -> Greeks:
        """Greeks at the quoted volatility (mid-implied where no iv is given), American or
        European as the options are."""
        return option_greeks(self.spot, self.strike, self.years, self.iv, self.rate,
                             self.dividend_yield, self.call, american=self.american)  # fmt: skip

    @cached_property
    def _rows(self) -> dict[tuple[bool, float, int], int]:
        days = self.expiry.astype("datetime64[D]").astype(np.int64)
        rows = zip(self.call.tolist(), self.strike.tolist(), days.tolist(), strict=True)
        return {(bool(c), round(k, 6), d): i for i, (c, k, d) in enumerate(rows)}

    def find(self, call: bool, strike: float, expiry: dt.date) -> int | None:
        """The row of a listed contract, or None."""
        day = expiry.toordinal() - _EPOCH  # days since 1970-01-01, as datetime64[D]
        return self._rows.get((bool(call), round(float(strike), 6), day))

    def find_many(self, call: np.ndarray, strike: np.ndarray, day: np.ndarray) -> np.ndarray:
        """:meth:`find` for arrays of contracts (``day``: days since 1970-01-01): each one's
        row, or -1 where it is not listed."""
        days, keys, order = self._sorted_keys
        at = np.searchsorted(days, day)
        listed = (at < len(days)) & (days[np.minimum(at, len(days) - 1)] == day)
        wanted = _contract_key(np.where(listed, at, 0), call, strike)
        pos = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
        return np.where(listed & (keys[pos] == wanted), order[pos], -1)

    @cached_property
    def _sorted_keys(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The listed expiries (days since 1970), and each row's contract key, sorted."""
        day = self.expiry.astype("datetime64[D]").astype(np.int64)
        days = np.unique(day)
        keys = _contract_key(np.searchsorted(days, day), self.call, self.strike)
        order = np.argsort(keys, kind="stable")
        return days, keys[order], order

    def mark(self, call: bool, strike: float, expiry: dt.date) -> tuple[float, Greeks]:
        """Mid price and Greeks of one contract, listed or not: an unlisted one (the strikes
        moved with the spot) is priced at the volatility of the nearest listed strike of
        the nearest expiry."""
        key = (bool(call), round(float(strike), 6), expiry)
        if key not in self._marks:
            self._marks[key] = self._mark(call, strike, expiry)
        return self._marks[key]

    @cached_property
    def _marks(self) -> dict[tuple, tuple[float, Greeks]]:
        return {}  # a chain is marked many times over replayed episodes

    @cached_property
    def picks(self) -> dict[tuple, int | None]:
        """Strike picks made on this chain, by (expiry, call, delta): a menu asks the same
        few many times (see ``strategies.pick_strike``)."""
        return {}

    def _mark(self, call: bool, strike: float, expiry: dt.date) -> tuple[float, Greeks]:
        row = self.find(call, strike, expiry)
        if row is not None:
            g = self.greeks
            mid = 0.5 * float(self.bid[row] + self.ask[row])
            return mid, Greeks(g.price[row], g.delta[row], g.gamma[row], g.vega[row],
                               g.theta[row], g.rho[row])  # fmt: skip
        day = np.datetime64(expiry, "D")
        close = np.datetime64(dt.datetime.combine(expiry, CLOSE), "m")
        years = max((close - np.datetime64(self.time, "m")).astype(float) / (365.0 * 24 * 60), 0.0)
        near_expiry = self.expiry[np.argmin(np.abs((self.expiry - day).astype(float)))]
        same = np.flatnonzero(self.expiry == near_expiry)
        vol = self.iv[same[np.argmin(np.abs(self.strike[same] - strike))]]
        g = option_greeks(self.spot, strike, years, vol, self.rate, self.dividend_yield, call,
                          american=self.american)  # fmt: skip
        return float(g.price), g

    def price(self, call: bool, strike: float, expiry: dt.date) -> float:
        """The mid of a listed contract, else its model value (see :meth:`mark`)."""
        return self.mark(call, strike, expiry)[0]

    def expiries(self) -> list[dt.date]:
        return list(self._expiries)

    @cached_property
    def _expiries(self) -> tuple[dt.date, ...]:
        return tuple(d.astype(dt.date) for d in np.unique(self.expiry))

    def copy(self) -> Chain:
        arrays = {f.name: getattr(self, f.name).copy() for f in dataclasses.fields(self)
                  if isinstance(getattr(self, f.name), np.ndarray)}  # fmt: skip
        return Chain(self.symbol, self.time, self.spot, self.rate, self.dividend_yield, **arrays,
                     style=self.style)  # fmt: skip

    def as_records(self) -> list[dict]:
        """JSON-ready rows (for the LLM adapter and the service)."""
        g = self.greeks
        return [{"expiry": str(self.expiry[i]), "strike": float(self.strike[i]),
                 "right": "call" if self.call[i] else "put", "bid": round(float(self.bid[i]), 2),
                 "ask": round(float(self.ask[i]), 2), "iv": round(float(self.iv[i]), 4),
                 "delta": round(float(g.delta[i]), 3)} for i in range(len(self))]  # fmt: skip


@dataclass(frozen=True)
class MarketView:
    """Everything an agent may read at one step: the time, the spots up to now, and the
    chains now. Built from copies; asking for another time raises LookAheadError."""

    time: dt.datetime
    history: dict[str, tuple[tuple[dt.datetime, float], ...]]  # symbol -> (time, spot)
    chains: dict[str, Chain]
    underlyings: dict[str, Underlying]
    market_open: bool = True

    def chain(self, symbol: str, at: dt.datetime | None = None) -> Chain:
        """The chain now; only the current chain is kept (past spots are in ``history``)."""
        if at is not None and at != self.time:
            raise LookAheadError(f"chain of {symbol} at {at}: this view holds {self.time} only"
                                 + (" (a later time)" if at > self.time else ""))  # fmt: skip
        if symbol not in self.chains:
            raise FieldrlError(f"no chain for {symbol!r}; underlyings: {sorted(self.chains)}")
        return self.chains[symbol]

    def spots(self, symbol: str, until: dt.datetime | None = None) -> np.ndarray:
        if until is not None and until > self.time:
            raise LookAheadError(f"spots of {symbol} until {until}: the agent acts at {self.time}")
        return np.array([s for t, s in self.history[symbol] if until is None or t <= until])


@dataclass
class Market:
    """An episode's data: for each step, the time, whether the market is open and each
    underlying's chain. Only :meth:`view` is given to agents."""

    underlyings: dict[str, Underlying]
    times: list[dt.datetime]
    chains: list[dict[str, Chain]]  # per step
    open_: list[bool] = field(default_factory=list)
    # symbol -> 30-day at-the-money volatility at each trading day's close before the first
    # step, oldest first (what an IV rank reads of the past; empty where none is known)
    iv_history: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.open_:
            self.open_ = [True] * len(self.times)
        if not (len(self.times) == len(self.chains) == len(self.open_)):
            raise ValueError("times, chains and open_ must have one entry per step")

    def __len__(self) -> int:
        return len(self.times)

    def spot(self, symbol: str, step: int) -> float:
        return self.chains[step][symbol].spot

    def now(self, step: int) -> MarketView:
        """The step's view without copies or history, for the trusted simulator's own
        bookkeeping (the account, marking); agents get :meth:`view`."""
        return MarketView(self.times[step], {}, self.chains[step], self.underlyings,
                          self.open_[step])  # fmt: skip

    def view(self, step: int) -> MarketView:
        history = {s: tuple((self.times[i], self.chains[i][s].spot) for i in range(step + 1))
                   for s in self.underlyings}  # fmt: skip
        return MarketView(self.times[step], history,
                          {s: c.copy() for s, c in self.chains[step].items()},
                          dict(self.underlyings), self.open_[step])  # fmt: skip


# ---------------------------------------------------------------- listing rules


def strike_increment(spot: float, index: bool = False) -> float:
    """Strike spacing near the money: $5 for an index; for stocks $1 below $50, $2.50 to
    $200, $5 above (the increments of liquid US names; an assumption for others)."""
    if index:
        return 5.0
    return 1.0 if spot < 50 else 2.5 if spot < 200 else 5.0


def listed_strikes(spot: float, low: float, high: float, index: bool = False) -> np.ndarray:
    """The listed strikes from ``low`` to ``high`` (prices), on the increment of ``spot``."""
    step = strike_increment(spot, index)
    return np.arange(np.floor(low / step) * step, np.ceil(high / step) * step + step / 2, step)


def _third_friday(year: int, month: int) -> dt.date:
    first = dt.date(year, month, 1)
    return first + dt.timedelta(days=(4 - first.weekday()) % 7 + 14)


def listed_expiries(today: dt.date, max_days: int, *, weeklies: int = 4,
                    daily: bool = False, holidays: frozenset[dt.date] = frozenset()
                    ) -> list[dt.date]:  # fmt: skip
    """Monthly expiries (third Fridays) up to ``max_days`` out, the next ``weeklies``
    Fridays, and every trading day of the coming week for an index with daily (0DTE)
    expiries. An expiry on a holiday moves to the trading day before (Good Friday)."""
    out = set()
    year, month = today.year, today.month
    while True:
        friday = _third_friday(year, month)
        if (friday - today).days > max_days:
            break
        if friday >= today:
            out.add(friday)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    friday = today + dt.timedelta(days=(4 - today.weekday()) % 7)
    for i in range(weeklies):
        out.add(friday + dt.timedelta(weeks=i))
    if daily:
        for i in range(7):
            day = today + dt.timedelta(days=i)
            if day.weekday() < 5:
                out.add(day)
    moved = set()
    for day in out:
        while day in holidays or day.weekday() >= 5:
            day -= dt.timedelta(days=1)
        if day >= today:
            moved.add(day)
    return sorted(moved)


def earnings_ahead(now: dt.datetime, earnings: Sequence[dt.date]) -> list[dt.date]:
    """The announcements not yet out at ``now``, soonest first: each comes after the close of
    its day, so it is ahead until that close has passed."""
    today = now.date()
    return sorted(e for e in earnings if e > today or (e == today and now.time() <= CLOSE))


def earnings_variance(expiry: np.ndarray, now: dt.datetime, earnings: Sequence[dt.date],
                      variance: float) -> np.ndarray:  # fmt: skip
    """The total variance that the announcements ahead at ``now`` add to each expiry
    (``datetime64[D]``): ``variance`` for each announcement before the expiry's day; one
    expiring at an announcement day's close settles before the news and gets none."""
    extra = np.zeros(np.shape(expiry))
    for event in earnings_ahead(now, earnings):
        extra += np.where(expiry > np.datetime64(event, "D"), variance, 0.0)
    return extra


def half_spread(cfg: SpreadConfig, mid: np.ndarray, intrinsic: np.ndarray, days: np.ndarray,
                minutes_since_open: float = 390.0, days_to_earnings: float | None = None
                ) -> np.ndarray:  # fmt: skip
    """The quoted half-spread in dollars a share: ``base + pct x time value + pct_intrinsic x
    intrinsic value`` (at least a tick), widened near expiry, at the open (L-shaped
    intraday) and just before earnings."""
    time_value = np.maximum(mid - intrinsic, 0.0)
    width = np.maximum(cfg.tick, cfg.base + cfg.pct * time_value + cfg.pct_intrinsic * intrinsic)
    width = width * (1 + cfg.near_expiry * np.exp(-np.asarray(days) / cfg.expiry_days))
    width = width * (1 + cfg.at_open * np.exp(-minutes_since_open / cfg.open_minutes))
    if days_to_earnings is not None and 0 <= days_to_earnings <= cfg.earnings_days:
        width = width * (1 + cfg.before_earnings)
    return width


def quotes(cfg: SpreadConfig, fair: np.ndarray, intrinsic: np.ndarray, days: np.ndarray,
           minutes_since_open: float = 390.0, days_to_earnings: float | None = None
           ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(bid, ask) around ``fair`` on a one-cent grid; the bid is never below 0."""
    half = half_spread(cfg, fair, intrinsic, days, minutes_since_open, days_to_earnings)
    bid = np.maximum(np.floor((fair - half) * 100 + 1e-9) / 100, 0.0)
    ask = np.maximum(np.ceil((fair + half) * 100 - 1e-9) / 100, bid + max(cfg.tick, 0.01))
    return bid, ask
