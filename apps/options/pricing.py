"""Black-Scholes-Merton prices, Greeks and implied volatilities, vectorized over whole chains.

Every function takes numpy arrays (or scalars) that broadcast together: spot ``s``, strike
``k``, years to expiry ``t``, volatility ``vol``, continuously compounded rate ``r`` and
dividend yield ``q``, and ``call`` (True for calls, False for puts). Prices are per share;
multiply by the contract multiplier for a contract. Expired options (``t <= 0``) are worth
their intrinsic value and have the Greeks of a step (delta 0 or +-1, the rest 0).

American exercise is not priced here: the account applies early exercise where it matters
(short in-the-money calls before an ex-dividend date, automatic exercise at expiry).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

__all__ = ["Greeks", "bs_greeks", "bs_price", "implied_vol"]

_SQRT_2PI = np.sqrt(2 * np.pi)
_DAYS = 365.0


def _d1_d2(s, k, t, vol, r, q):
    sqrt_t = np.sqrt(np.maximum(t, 1e-12))
    vol_t = np.maximum(vol, 1e-12) * sqrt_t
    with np.errstate(over="ignore", divide="ignore"):  # +-inf: the normal CDF is 0 or 1
        d1 = (np.log(s / k) + (r - q + 0.5 * vol * vol) * t) / vol_t
    return d1, d1 - vol_t, sqrt_t


def bs_price(s, k, t, vol, r=0.0, q=0.0, call=True) -> np.ndarray:
    """Price per share."""
    s, k, t, vol, r, q, call = np.broadcast_arrays(*map(np.asarray, (s, k, t, vol, r, q, call)))
    d1, d2, _ = _d1_d2(s, k, t, vol, r, q)
    disc_q, disc_r = np.exp(-q * t), np.exp(-r * t)
    value_call = s * disc_q * ndtr(d1) - k * disc_r * ndtr(d2)
    value_put = k * disc_r * ndtr(-d2) - s * disc_q * ndtr(-d1)
    value = np.where(call, value_call, value_put)
    intrinsic = np.where(call, np.maximum(s - k, 0.0), np.maximum(k - s, 0.0))
    return np.where(t > 0, np.maximum(value, 0.0), intrinsic)


@dataclass(frozen=True)
class Greeks:
    """Per share: price, delta (per $1 of spot), gamma (per $1), vega (per 1.00 of
    volatility, i.e. 100 vol points), theta (per calendar day), rho (per 1.00 of rate)."""

    price: np.ndarray
    delta: np.ndarray
    gamma: np.ndarray
    vega: np.ndarray
    theta: np.ndarray
    rho: np.ndarray


def bs_greeks(s, k, t, vol, r=0.0, q=0.0, call=True) -> Greeks:
    """Price and the five first-order Greeks (and gamma) in one pass."""
    s, k, t, vol, r, q, call = np.broadcast_arrays(*map(np.asarray, (s, k, t, vol, r, q, call)))
    live = t > 0
    d1, d2, sqrt_t = _d1_d2(s, k, t, vol, r, q)
    disc_q, disc_r = np.exp(-q * t), np.exp(-r * t)
    pdf = np.exp(-0.5 * d1 * d1) / _SQRT_2PI
    nd1, nd2 = ndtr(d1), ndtr(d2)
    price = bs_price(s, k, t, vol, r, q, call)
    delta = np.where(call, disc_q * nd1, disc_q * (nd1 - 1.0))
    gamma = disc_q * pdf / (s * np.maximum(vol, 1e-12) * sqrt_t)
    vega = s * disc_q * pdf * sqrt_t
    decay = -s * disc_q * pdf * vol / (2 * sqrt_t)
    theta_call = decay - r * k * disc_r * nd2 + q * s * disc_q * nd1
    theta_put = decay + r * k * disc_r * (1 - nd2) - q * s * disc_q * (1 - nd1)
    theta = np.where(call, theta_call, theta_put) / _DAYS
    rho = np.where(call, k * t * disc_r * nd2, -k * t * disc_r * (1 - nd2))
    itm = np.where(call, s > k, s < k)
    expired_delta = np.where(itm, np.where(call, 1.0, -1.0), 0.0)
    zero = np.zeros_like(price)
    return Greeks(price, np.where(live, delta, expired_delta), np.where(live, gamma, zero),
                  np.where(live, vega, zero), np.where(live, theta, zero),
                  np.where(live, rho, zero))  # fmt: skip


def implied_vol(price, s, k, t, r=0.0, q=0.0, call=True, *, low: float = 1e-4,
                high: float = 5.0, iterations: int = 60) -> np.ndarray:  # fmt: skip
    """The volatility whose price matches ``price``, by bisection (monotone, never diverges).
    NaN where the price is outside the no-arbitrage bounds or the option has expired."""
    price, s, k, t, r, q, call = np.broadcast_arrays(*map(np.asarray, (price, s, k, t, r, q, call)))
    price = price.astype(float)
    lo, hi = np.full(price.shape, low), np.full(price.shape, high)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = bs_price(s, k, t, mid, r, q, call) > price
        hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
    vol = 0.5 * (lo + hi)
    floor = bs_price(s, k, t, low, r, q, call)
    cap = bs_price(s, k, t, high, r, q, call)
    bad = (t <= 0) | (price < floor - 1e-9) | (price > cap + 1e-9) | ~np.isfinite(price)
    return np.where(bad, np.nan, vol)
