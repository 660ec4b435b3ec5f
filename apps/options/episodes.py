"""Episodes of each task suite, split into training, validation and evaluation work that
never overlap: real-data windows by date (2023 January-June / July-August /
September-December) and synthetic paths by seed stream (``derive_seed(seed, "synthetic",
split, i)``)."""

from __future__ import annotations

import datetime as dt
import functools
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fieldrl.apps.options.config import OptionsConfig, SyntheticConfig
from fieldrl.apps.options.data import (
    REPLAY_SYMBOLS,
    atm_vol_history,
    read_chains,
    replay_market,
)
from fieldrl.apps.options.market import Market
from fieldrl.apps.options.sim import simulate, trading_times
from fieldrl.errors import FieldrlError
from fieldrl.files import expand_files
from fieldrl.seeding import derive_seed

__all__ = ["CHAIN_SPLITS", "REPLAY_SPLITS", "Episode", "Split", "SyntheticPaths",
           "make_episodes"]  # fmt: skip

Split = Literal["train", "validation", "eval"]
REPLAY_SPLITS = {"train": ("2023-01-03", "2023-06-30"),
                 "validation": ("2023-07-01", "2023-08-31"),
                 "eval": ("2023-09-01", "2023-12-29")}  # fmt: skip
HISTORY_DAYS = 252  # the trading year an IV rank looks back over
# your own chains: the first 60% of the dates train, the next 20% validate, the last 20% test
CHAIN_SPLITS = {"train": (0.0, 0.6), "validation": (0.6, 0.8), "eval": (0.8, 1.0)}
# SPX-like Heston (Bakshi-Cao-Chen 1997, as in the reference), for the 0DTE suite's index
SPX_LIKE = {"spot": 4500.0, "v0": 0.02, "kappa": 1.15, "theta": 0.04, "vol_of_vol": 0.39,
            "rho": -0.64, "dividend_yield": 0.015, "earnings_days": [], "earnings_move": 0.0,
            "surface_rho": -0.7, "surface_eta": 1.1, "max_expiry_days": 7, "weeklies": 1,
            "strike_range": 0.05}  # fmt: skip


@dataclass(frozen=True)
class Episode:
    market: Market
    symbol: str
    key: str  # what it is, for reports: "AAPL 2023-09-01..2023-10-27" or "synthetic seed 7"
    # fair value's volatility over the quoted one: 1/sqrt(1 + variance premium) in a
    # synthetic market, 1 for real quotes (their mid is taken as fair)
    fair_vol_scale: float = 1.0


def make_episodes(cfg: OptionsConfig, split: Split, n: int, seed: int = 0) -> Sequence[Episode]:
    """``n`` episodes of the config's suite from ``split``: real windows drawn with ``seed``
    (at most as many as the split holds; training windows start a week apart, held-out
    ones do not overlap), or synthetic paths from the split's own seed stream under
    ``seed`` (training paths also for a real market with ``ppo.train_on = "synthetic"``)."""
    kind = cfg.market.kind
    intraday = kind == "synthetic" and cfg.suite.name == "zero_dte"  # the simulated index
    if cfg.suite.episode_days < 2 and not intraday:
        raise FieldrlError(f"suite.episode_days = {cfg.suite.episode_days}: a {kind} episode "
                           "needs at least 2 days (one chain a day); the intraday 0DTE suite "
                           "runs on market.kind = 'synthetic' only")  # fmt: skip
    if split == "train" and (kind == "synthetic" or cfg.ppo.train_on == "synthetic"):
        return SyntheticPaths(cfg, n, seed)  # made when first played: thousands fit
    if kind == "synthetic":
        return [_synthetic(cfg, derive_seed(seed, "synthetic", split, i)) for i in range(n)]
    if kind == "replay":
        markets = {s: _replay(s, *REPLAY_SPLITS[split], cfg.market.spread.model_dump_json())
                   for s in cfg.market.symbols}  # fmt: skip
    else:
        if not cfg.market.data:
            raise FieldrlError("market.kind = 'chains' needs your chain files: --data FILE")
        whole = read_chains(expand_files(cfg.market.data), cfg.market.synthetic.rate,
                            cfg.market.chain_dividend_yield)  # fmt: skip
        markets = {s: _part(_only(whole, s), *CHAIN_SPLITS[split]) for s in whole.underlyings}
    rng = np.random.default_rng(seed)
    # held-out windows never overlap, so their episodes are independent for the CIs
    stride = 5 if split == "train" else cfg.suite.episode_days
    windows = [w for s, m in markets.items() for w in _windows(cfg, m, s, stride)]
    if not windows:
        raise FieldrlError(f"no {cfg.suite.name} episode fits in the {split} data")
    # never the same window twice: a split with fewer windows (the earnings suite's held-out
    # months hold five announcements) gives all it has
    picks = rng.choice(len(windows), size=min(n, len(windows)), replace=False)
    return [windows[i] for i in picks]


class SyntheticPaths(Sequence[Episode]):
    """The synthetic training split: path ``i`` is made when first asked for (from seed
    ``derive_seed(seed, "synthetic", "train", i)``, its market drawn from
    ``market.randomize``) and the last :data:`KEPT` asked for are kept."""

    KEPT = 64

    def __init__(self, cfg: OptionsConfig, n: int, seed: int) -> None:
        self.cfg, self.n, self.seed = cfg, n, seed
        self._kept: OrderedDict[int, Episode] = OrderedDict()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Episode:  # type: ignore[override]
        if not -self.n <= i < self.n:
            raise IndexError(f"path {i} of {self.n}")
        i %= self.n
        if i not in self._kept:
            self._kept[i] = _synthetic(self.cfg, derive_seed(self.seed, "synthetic", "train", i),
                                       randomize=True)  # fmt: skip
            if len(self._kept) > self.KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(i)
        return self._kept[i]


def _synthetic(cfg: OptionsConfig, seed: int, randomize: bool = False) -> Episode:
    suite = cfg.suite
    spec: SyntheticConfig = cfg.market.synthetic
    index = suite.name == "zero_dte"
    if index:
        spec = SyntheticConfig(**{**spec.model_dump(), **SPX_LIKE})
    if randomize:
        spec = cfg.market.randomize.draw(spec, np.random.default_rng(derive_seed(seed, "market")))
    days = 1 if index else suite.episode_days * 7 // 5
    if suite.name == "earnings":
        spec = SyntheticConfig(**{**spec.model_dump(), "earnings_days": [6]})
        days = 10
    start = dt.date(2025, 1, 6) + dt.timedelta(weeks=int(seed % 52))
    times = trading_times(start, days, suite.intraday_minutes if index else None)
    if index:
        times = [t for t in times if t.date() == start]
    market = simulate(spec, "SPX" if index else "SYN", times, seed, cfg.market.spread,
                      index=index, history_days=HISTORY_DAYS)  # fmt: skip
    return Episode(
        market,
        "SPX" if index else "SYN",
        f"synthetic seed {seed}",
        1 / float(np.sqrt(1 + spec.variance_premium)),
    )


@functools.cache
def _replay(symbol: str, start: str, end: str, spread_json: str) -> Market:
    from fieldrl.apps.options.config import SpreadConfig

    if symbol not in REPLAY_SYMBOLS:
        raise FieldrlError(f"no 2023 surfaces for {symbol!r}; replay symbols: {REPLAY_SYMBOLS}")
    return replay_market([symbol], start, end, SpreadConfig.model_validate_json(spread_json))


def _only(market: Market, symbol: str) -> Market:
    return Market({symbol: market.underlyings[symbol]}, market.times,
                  [{symbol: c[symbol]} for c in market.chains], market.open_)  # fmt: skip


def _part(market: Market, start: float, end: float) -> Market:
    """The dates from ``start`` to ``end`` (fractions of the file's span, in time order)."""
    n = len(market)
    i, j = int(round(start * n)), int(round(end * n))
    return Market(market.underlyings, market.times[i:j], market.chains[i:j], market.open_[i:j])


def _slice(market: Market, symbol: str, i: int, j: int,
           history: tuple[tuple[dt.date, ...], np.ndarray] | None = None) -> Episode:  # fmt: skip
    """Steps ``i`` to ``j`` of ``market``, with the ``history`` (dates, 30-day ATM
    volatilities) of the trading year before step ``i``."""
    past = {}
    if history is not None:
        dates, vols = history
        start = market.times[i].date()
        past = {symbol: vols[[d < start for d in dates]][-HISTORY_DAYS:]}
    part = Market(market.underlyings, market.times[i:j], market.chains[i:j], market.open_[i:j],
                  iv_history=past)  # fmt: skip
    key = f"{symbol} {market.times[i].date()}..{market.times[j - 1].date()}"
    return Episode(part, symbol, key)


def _windows(cfg: OptionsConfig, market: Market, symbol: str, stride: int) -> list[Episode]:
    """Every window of the suite's length starting ``stride`` days apart (earnings: 5 days
    before each announcement to 3 after)."""
    n = len(market)
    history = atm_vol_history(symbol) if cfg.market.kind == "replay" else None
    if cfg.suite.name == "earnings":
        out = []
        for event in market.underlyings[symbol].earnings:
            days = [t.date() for t in market.times]
            if event in days:
                i = days.index(event)
                if i >= 5 and i + 4 <= n:
                    out.append(_slice(market, symbol, i - 5, i + 4, history))
        return out
    length = cfg.suite.episode_days
    return [_slice(market, symbol, i, i + length, history)
            for i in range(0, n - length + 1, stride)]  # fmt: skip
