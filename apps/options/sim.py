"""The synthetic market: a Heston path with Bates jumps and scheduled earnings jumps, an
arbitrage-free SSVI implied-volatility surface on listed strikes and expiries, and quotes
from the spread model.

The surface is tied to the path's own dynamics: its at-the-money total variance is the
variance the model expects to the expiry (Heston's mean reversion from today's variance,
plus the jumps and each earnings event before the expiry), scaled by
``1 + variance_premium``. With ``variance_premium = 0``, no jumps, no vol of vol and a
drift equal to the rate (``SyntheticConfig.zero_premium``), every option is priced at its
fair value and any strategy's expected P&L is zero: the look-ahead test relies on it.
"""

from __future__ import annotations

import datetime as dt

import numpy as np

from fieldrl.apps.options.config import SpreadConfig, SyntheticConfig
from fieldrl.apps.options.market import (
    CLOSE,
    OPEN,
    Chain,
    Market,
    Underlying,
    earnings_variance,
    listed_expiries,
    listed_strikes,
    quotes,
)
from fieldrl.apps.options.pricing import option_price

__all__ = ["atm_vol_30d", "simulate", "ssvi_total_variance", "trading_times"]

_YEAR_MINUTES = 365.0 * 24 * 60


def trading_times(start: dt.date, days: int, intraday_minutes: int | None = None
                  ) -> list[dt.datetime]:  # fmt: skip
    """The steps of an episode: each weekday's close, or every ``intraday_minutes`` from
    the open to the close."""
    out, day = [], start
    while len(out) == 0 or (out[-1].date() - start).days < days:
        if day.weekday() < 5:
            if intraday_minutes:
                t = dt.datetime.combine(day, OPEN)
                while t.time() <= CLOSE:
                    out.append(t)
                    t += dt.timedelta(minutes=intraday_minutes)
            else:
                out.append(dt.datetime.combine(day, CLOSE))
        day += dt.timedelta(days=1)
    return out


def ssvi_total_variance(k: np.ndarray, theta: np.ndarray, rho: float, eta: float,
                        gamma: float = 0.5) -> np.ndarray:  # fmt: skip
    """SSVI (Gatheral & Jacquier 2014) total implied variance at log-moneyness ``k`` for
    at-the-money total variance ``theta``, power-law ``phi``; free of butterfly and
    calendar arbitrage when ``eta * (1 + |rho|) <= 2`` and ``theta`` rises with maturity."""
    phi = eta / (theta**gamma * (1 + theta) ** (1 - gamma))
    return 0.5 * theta * (1 + rho * phi * k + np.sqrt((phi * k + rho) ** 2 + 1 - rho**2))


def _expected_variance(v: float, years: np.ndarray, spec: SyntheticConfig) -> np.ndarray:
    """Heston's expected integrated variance to each horizon, plus the Bates jumps'."""
    kappa, theta = spec.kappa, spec.theta
    years = np.maximum(years, 1e-9)
    diffusive = theta * years + (v - theta) * (1 - np.exp(-kappa * years)) / kappa
    jumps = spec.jump_intensity * (spec.jump_mean**2 + spec.jump_std**2) * years
    return diffusive + jumps


def simulate(spec: SyntheticConfig, symbol: str, times: list[dt.datetime], seed: int,
             spread: SpreadConfig, *, index: bool = False, history_days: int = 0
             ) -> Market:  # fmt: skip
    """One episode of one underlying on ``times``: the path, then each step's chain. With
    ``history_days``, the variance first runs from ``v0`` through that many trading days
    before the episode, whose closes' 30-day at-the-money volatility becomes the market's
    ``iv_history`` (the past an IV rank reads); the episode starts where that year ended."""
    rng = np.random.default_rng(seed)
    start = times[0].date()
    earnings = tuple(start + dt.timedelta(days=int(d)) for d in spec.earnings_days)
    underlying = Underlying(symbol, style="european" if index else "american",
                            settlement="cash_pm" if index else "physical", index=index,
                            earnings=earnings)  # fmt: skip
    v0, history = spec.v0, {}
    if history_days:
        past = _trading_days_before(start, history_days)
        _, variances = _path(spec, [*past, times[0]], (), rng, spec.v0)
        v0, history = float(variances[-1]), {symbol: atm_vol_30d(spec, variances[:-1])}
    spots, variances = _path(spec, times, earnings, rng, v0)
    chains = []
    for t, s, v in zip(times, spots, variances, strict=True):
        chains.append({symbol: _chain(spec, underlying, t, float(s), float(v), spread)})
    return Market({symbol: underlying}, list(times), chains, iv_history=history)


def atm_vol_30d(spec: SyntheticConfig, variances: np.ndarray) -> np.ndarray:
    """The model's 30-day at-the-money implied volatility at each instantaneous variance
    (the surface at the forward; no earnings in the window)."""
    years = 30 / 365
    total = np.array([_expected_variance(float(v), np.array(years), spec) for v in variances])
    return np.sqrt(total * (1 + spec.variance_premium) / years)


def _trading_days_before(day: dt.date, n: int) -> list[dt.datetime]:
    """The closes of the ``n`` weekdays before ``day``, oldest first."""
    out = []
    while len(out) < n:
        day -= dt.timedelta(days=1)
        if day.weekday() < 5:
            out.append(dt.datetime.combine(day, CLOSE))
    return out[::-1]


def _path(spec: SyntheticConfig, times: list[dt.datetime], earnings: tuple[dt.date, ...],
          rng: np.random.Generator, v0: float) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Spots and variances at ``times`` from ``spec.spot`` and variance ``v0``: log-Euler
    Heston (full truncation, 8 sub-steps a step), compensated Bates jumps, and a
    compensated earnings jump at the first step after each announcement. Time runs in
    calendar years, as the pricing does."""
    spots, variances = [spec.spot], [v0]
    s, v = spec.spot, v0
    compensator = spec.jump_intensity * (np.exp(spec.jump_mean + 0.5 * spec.jump_std**2) - 1)
    for before, after in zip(times[:-1], times[1:], strict=True):
        years = (after - before).total_seconds() / 60 / _YEAR_MINUTES
        h = years / 8
        log_s = np.log(s)
        for _ in range(8):
            z1, z2 = rng.standard_normal(2)
            zv = spec.rho * z1 + np.sqrt(1 - spec.rho**2) * z2
            vp = max(v, 0.0)
            log_s += (spec.drift - spec.dividend_yield - compensator - 0.5 * vp) * h
            log_s += np.sqrt(vp * h) * z1
            v += spec.kappa * (spec.theta - vp) * h + spec.vol_of_vol * np.sqrt(vp * h) * zv
        for _ in range(rng.poisson(spec.jump_intensity * years)):
            log_s += spec.jump_mean + spec.jump_std * rng.standard_normal()
        if any(before.date() <= e < after.date() for e in earnings):
            log_s += -0.5 * spec.earnings_move**2 + spec.earnings_move * rng.standard_normal()
        s = float(np.exp(log_s))
        spots.append(s)
        variances.append(max(v, 1e-6))
    return np.array(spots), np.array(variances)


def _chain(spec: SyntheticConfig, underlying: Underlying, now: dt.datetime, spot: float,
           v: float, spread: SpreadConfig) -> Chain:  # fmt: skip
    today = now.date()
    expiries = listed_expiries(today, spec.max_expiry_days, weeklies=spec.weeklies,
                               daily=underlying.index)  # fmt: skip
    strikes = listed_strikes(spot, spot * (1 - spec.strike_range), spot * (1 + spec.strike_range),
                             underlying.index)  # fmt: skip
    expiry = np.repeat(np.array(expiries, dtype="datetime64[D]"), 2 * len(strikes))
    strike = np.tile(np.concatenate([strikes, strikes]), len(expiries))
    call = np.tile(np.repeat([True, False], len(strikes)), len(expiries))
    close = expiry.astype("datetime64[m]") + np.timedelta64(16 * 60, "m")
    years = np.maximum((close - np.datetime64(now, "m")).astype(float), 0.0) / _YEAR_MINUTES
    total = _expected_variance(v, years, spec)
    total = total + earnings_variance(expiry, now, underlying.earnings, spec.earnings_move**2)
    theta = total * (1 + spec.variance_premium)
    forward = spot * np.exp((spec.rate - spec.dividend_yield) * years)
    k = np.log(strike / forward)
    w = ssvi_total_variance(k, theta, spec.surface_rho, spec.surface_eta)
    iv = np.sqrt(w / np.maximum(years, 1e-9))
    american = underlying.style == "american"
    fair = option_price(spot, strike, years, iv, spec.rate, spec.dividend_yield, call,
                        american=american)  # fmt: skip
    minutes = (now - dt.datetime.combine(today, OPEN)).total_seconds() / 60
    upcoming = [(e - today).days for e in underlying.earnings if e >= today]
    intrinsic = np.where(call, np.maximum(spot - strike, 0), np.maximum(strike - spot, 0))
    bid, ask = quotes(
        spread, fair, intrinsic, years * 365, minutes, min(upcoming) if upcoming else None
    )
    keep = years > 0
    return Chain(underlying.symbol, now, spot, spec.rate, spec.dividend_yield, expiry[keep],
                 strike[keep], call[keep], bid[keep], ask[keep], iv[keep],
                 underlying.style)  # fmt: skip
