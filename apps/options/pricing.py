"""Option prices, Greeks and implied volatilities, vectorized over whole chains:
Black-Scholes-Merton for European exercise, Barone-Adesi-Whaley for American.

Every function takes numpy arrays (or scalars) that broadcast together: spot ``s``, strike
``k``, years to expiry ``t``, volatility ``vol``, continuously compounded rate ``r`` and
dividend yield ``q``, and ``call`` (True for calls, False for puts). Prices are per share;
multiply by the contract multiplier for a contract. Expired options (``t <= 0``) are worth
their intrinsic value and have the Greeks of a step (delta 0 or +-1, the rest 0).

Listed single-stock options are American: priced European, a deep in-the-money put would
quote below what exercising it pays. Barone-Adesi-Whaley (1987) adds the early-exercise
premium in closed form once the critical spot is found (a few vectorized Newton steps), a
few times the cost of Black-Scholes, where a binomial tree costs hundreds of times it.
Its error is a few cents a share at most for the expiries listed here (tested against
QuantLib's binomial engine). There is no premium for a call without a dividend yield or a
put without a positive rate: early exercise never pays then, and the price is European.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr

__all__ = ["Greeks", "american_greeks", "american_price", "bs_greeks", "bs_price",
           "implied_vol", "option_greeks", "option_price"]  # fmt: skip

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


def implied_vol(price, s, k, t, r=0.0, q=0.0, call=True, *, american: bool = False,
                low: float = 1e-4, high: float = 5.0, iterations: int = 60
                ) -> np.ndarray:  # fmt: skip
    """The volatility whose price (American with ``american``) matches ``price``, by
    bisection (monotone, never diverges). NaN where the price is outside the no-arbitrage
    bounds or the option has expired."""
    price, s, k, t, r, q, call = np.broadcast_arrays(*map(np.asarray, (price, s, k, t, r, q, call)))
    price = price.astype(float)
    lo, hi = np.full(price.shape, low), np.full(price.shape, high)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = option_price(s, k, t, mid, r, q, call, american=american) > price
        hi, lo = np.where(above, mid, hi), np.where(above, lo, mid)
    vol = 0.5 * (lo + hi)
    floor = option_price(s, k, t, low, r, q, call, american=american)
    cap = option_price(s, k, t, high, r, q, call, american=american)
    bad = (t <= 0) | (price < floor - 1e-9) | (price > cap + 1e-9) | ~np.isfinite(price)
    return np.where(bad, np.nan, vol)


# ------------------------------------------------------------------- American exercise


@dataclass(frozen=True)
class _EarlyExercise:
    """Barone-Adesi-Whaley's early-exercise terms: beyond the ``critical`` spot exercising
    now is best; short of it the American price is the European one plus
    ``a x (s / critical) ** power``. ``a`` is 0 where early exercise never pays."""

    a: np.ndarray
    power: np.ndarray
    critical: np.ndarray


def _early_exercise(k, t, vol, r, q, call, start=None) -> _EarlyExercise:
    """The early-exercise terms on broadcast float arrays, the critical spot found by
    Newton's method from Barone-Adesi & Whaley's seed (or from ``start``, a nearby
    solution's critical spots, when bumping for Greeks)."""
    phi = np.where(call, 1.0, -1.0)
    a, power, critical = np.zeros(k.shape), np.ones(k.shape), np.where(call, np.inf, 0.0)
    early = (t > 0) & np.where(call, (q > 0) & (r >= 0), r > 0)
    if not early.any():
        return _EarlyExercise(a, power, critical)
    k, t, vol, r, q, phi = (x[early] for x in (k, t, vol, r, q, phi))
    vol = np.maximum(vol, 1e-6)
    variance, sqrt_t = vol * vol, np.sqrt(t)
    n = 2 * (r - q) / variance
    # 2r / (vol^2 (1 - exp(-rt))), which tends to 2 / (vol^2 t) as r goes to 0
    with np.errstate(divide="ignore", invalid="ignore"):
        tiny = r * t <= 1e-12
        m_over_k = np.where(tiny, 2 / (variance * t), 2 * r / (variance * -np.expm1(-r * t)))
    exponent = 0.5 * (1 - n + phi * np.sqrt((n - 1) ** 2 + 4 * m_over_k))
    if start is None:  # the critical spot of the perpetual option, pulled in by maturity
        perpetual = 0.5 * (1 - n + phi * np.sqrt((n - 1) ** 2 + 8 * r / variance))
        far = k / (1 - 1 / perpetual)
        # (at most 0: the seed stays between the perpetual's critical spot and the strike)
        h = np.minimum(-((r - q) * t + phi * 2 * vol * sqrt_t) * k / (far - k), 0.0)
        x = k + (far - k) * -np.expm1(h)
    else:
        x = start[early]
    disc_q, disc_r = np.exp(-q * t), np.exp(-r * t)
    for _ in range(50):  # Newton on phi (x - k) = value(x) + phi (1 - e^-qt N(phi d1)) x / power
        d1, d2, _ = _d1_d2(x, k, t, vol, r, q)
        held = disc_q * ndtr(phi * d1)  # the European delta, in absolute value
        value = phi * (x * held - k * disc_r * ndtr(phi * d2))
        gap = phi * (x - k) - value - phi * (1 - held) * x / exponent
        if np.all(np.abs(gap) <= 1e-9 * k):
            break
        density = np.exp(-0.5 * d1 * d1) / _SQRT_2PI
        slope = phi * (1 - held) * (1 - 1 / exponent) + disc_q * density / (vol * sqrt_t * exponent)
        with np.errstate(divide="ignore", invalid="ignore"):  # flat only where t is ~0
            step = np.where(slope != 0, gap / slope, 0.0)
        x = np.where(phi > 0, np.maximum(x - step, k * (1 + 1e-9)), np.clip(x - step, 1e-9 * k, k))
    else:
        held = disc_q * ndtr(phi * _d1_d2(x, k, t, vol, r, q)[0])
    a[early] = phi * x / exponent * (1 - held)
    power[early], critical[early] = exponent, x
    return _EarlyExercise(a, power, critical)


def _american(s, k, t, vol, r, q, call, start=None) -> tuple[np.ndarray, _EarlyExercise]:
    """The American price and its early-exercise terms on broadcast float arrays."""
    terms = _early_exercise(k, t, vol, r, q, call, start)
    intrinsic = np.where(call, np.maximum(s - k, 0.0), np.maximum(k - s, 0.0))
    exercise = np.where(call, s >= terms.critical, s <= terms.critical)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        premium = np.where(terms.a != 0, terms.a * (s / terms.critical) ** terms.power, 0.0)
    held = bs_price(s, k, t, vol, r, q, call) + premium
    return np.where(exercise, intrinsic, np.maximum(held, intrinsic)), terms


def _floats(*arrays) -> list[np.ndarray]:
    return [x.astype(float) for x in np.broadcast_arrays(*map(np.asarray, arrays))]


def american_price(s, k, t, vol, r=0.0, q=0.0, call=True) -> np.ndarray:
    """American price per share (Barone-Adesi-Whaley): never below the intrinsic value."""
    *numbers, call = _floats(s, k, t, vol, r, q, call)
    return _american(*numbers, call.astype(bool))[0]


def american_greeks(s, k, t, vol, r=0.0, q=0.0, call=True) -> Greeks:
    """American price and Greeks: delta and gamma in closed form from the early-exercise
    term, vega, theta and rho by bumping (0.001 of volatility, one hour, 1e-4 of rate);
    where exercising now is best the option is its intrinsic value (delta +-1, the rest 0).
    Where the early-exercise premium is nil, these are the European Greeks."""
    s, k, t, vol, r, q, call = _floats(s, k, t, vol, r, q, call)
    call = call.astype(bool)
    european = bs_greeks(s, k, t, vol, r, q, call)
    price, terms = _american(s, k, t, vol, r, q, call)
    early = terms.a != 0
    exercise = early & np.where(call, s >= terms.critical, s <= terms.critical)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        term = np.where(early, terms.a * (s / terms.critical) ** terms.power, 0.0)
    delta = european.delta + term * terms.power / s
    gamma = european.gamma + term * terms.power * (terms.power - 1) / (s * s)

    # vega, rho and theta by bumping, where the premium is worth 0.01 cent or more (below,
    # its sensitivities are lost in the European ones)
    hour = 1 / (365 * 24)
    bump = (term >= 1e-4) & (t > hour) & ~exercise
    vega, rho, theta = european.vega.copy(), european.rho.copy(), european.theta.copy()
    if bump.any():
        at = {"s": s, "k": k, "t": t, "vol": vol, "r": r, "q": q}
        at = {name: x[bump] for name, x in at.items()}
        start, now = terms.critical[bump], price[bump]

        def bumped(name: str, step: float) -> np.ndarray:
            moved = {**at, name: at[name] + step}
            return (_american(**moved, call=call[bump], start=start)[0] - now) / step

        vega[bump], rho[bump] = bumped("vol", 1e-3), bumped("r", 1e-4)
        theta[bump] = -bumped("t", -hour) / 365
    zero = np.zeros_like(price)
    return Greeks(price, np.where(exercise, np.where(call, 1.0, -1.0), delta),
                  np.where(exercise, zero, gamma), np.where(exercise, zero, vega),
                  np.where(exercise, zero, theta), np.where(exercise, zero, rho))  # fmt: skip


def option_price(s, k, t, vol, r=0.0, q=0.0, call=True, *, american: bool = False) -> np.ndarray:
    """Price per share: American (Barone-Adesi-Whaley) or European (Black-Scholes-Merton)."""
    return (american_price if american else bs_price)(s, k, t, vol, r, q, call)


def option_greeks(s, k, t, vol, r=0.0, q=0.0, call=True, *, american: bool = False) -> Greeks:
    """Price and Greeks: American (Barone-Adesi-Whaley) or European (Black-Scholes-Merton)."""
    return (american_greeks if american else bs_greeks)(s, k, t, vol, r, q, call)
