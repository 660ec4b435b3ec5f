"""The hierarchical metrics (validity, decision quality, risk, outcome), as pure functions
of an episode's record, and their bootstrap confidence intervals.

An :class:`EpisodeRecord` is what :func:`record` reads off an environment after an episode:
the NAV path, dollar Greeks, margin, fills, rejections and events. Daily figures use the
steps' NAV changes; intraday suites use the episode's steps.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.pricing import option_price

__all__ = ["EpisodeRecord", "bootstrap_ci", "episode_metrics", "episode_risk", "record",
           "stress_losses"]  # fmt: skip


@dataclass
class EpisodeRecord:
    capital: float
    nav: list[float]
    greeks: list[dict]
    margin: list[float]
    attempts: int
    fills: int
    rejections: Counter
    retries_to_valid: list[int]
    costs: float  # fees plus slippage against the mid
    events: list[dict]
    risk: float  # the risk taken over the episode (dollars): see episode_risk
    stress: dict[str, float] = field(default_factory=dict)  # worst loss per scenario
    edges: list[float] = field(default_factory=list)  # entry edge per unit of risk
    consistent: list[bool] = field(default_factory=list)  # Greeks agree with stated views
    periods_per_year: float = 252.0


def episode_risk(base: float, entries: list[float]) -> float:
    """The risk taken over an episode, in dollars: the sum of each entry's risk (each
    strategy opened risks its own loss, so re-opening adds risk) beyond ``base``, the risk
    of the shares an overlay holds all along (counted once: an overlay entry adds only what
    it risks beyond them)."""
    return base + sum(max(risk - base, 0.0) for risk in entries)


def record(env: OptionsEnv, risk: float, edges: list[float], stress: dict[str, float],
           consistent: list[bool]) -> EpisodeRecord:  # fmt: skip
    log = env.log
    intraday = env.cfg.suite.intraday_minutes
    periods = 252.0 * (390 / intraday) if intraday else 252.0
    return EpisodeRecord(env.cfg.suite.capital, list(log.nav), list(log.greeks),
                         list(log.margin), env.attempts, len(env.account.fills),
                         Counter(env.rejections), list(env.retries_to_valid),
                         env.account.costs + env.account.slippage, list(env.account.events),
                         risk, stress, edges, consistent,
                         periods)  # fmt: skip


def stress_losses(env: OptionsEnv) -> dict[str, float]:
    """Loss (dollars, > 0 is a loss) of the current positions under each stress scenario,
    instantly: a -20% gap, +20 volatility points, and twice the earnings move the chain
    implies (both directions, the worse one), at each position's current volatility and in
    the chain's style (American or European)."""
    chain = env.market.chains[env.t][env.symbol]
    held = env.account.positions.get(env.symbol, {})
    if not held:
        return {"gap_down_20": 0.0, "vol_up_20": 0.0, "earnings_2x": 0.0}
    stock = held.get(("stock", None, None, None), 0.0)
    opts = [(k, q) for k, q in held.items() if k[0] == "option"]
    strike = np.array([k[2] for k, _ in opts])
    call = np.array([k[1] == "call" for k, _ in opts])
    size = np.array([q * 100.0 for _, q in opts])
    marks = [chain.mark(k[1] == "call", k[2], k[3]) for k, _ in opts]
    vol = np.array([float(chain.iv[chain.find(k[1] == "call", k[2], k[3])])
                    if chain.find(k[1] == "call", k[2], k[3]) is not None else 0.3
                    for k, _ in opts])  # fmt: skip
    close = [np.datetime64(k[3], "D") for k, _ in opts]
    years = np.array([max((c - np.datetime64(chain.time.date(), "D")).astype(float), 0.5)
                      for c in close]) / 365  # fmt: skip
    now = stock * chain.spot + sum(s * float(m[0]) for s, m in zip(size, marks, strict=True))

    def value(spot: float, shift: float) -> float:
        if not len(opts):
            return stock * spot
        prices = option_price(spot, strike, years, np.maximum(vol + shift, 0.01), chain.rate,
                              chain.dividend_yield, call, american=chain.american)  # fmt: skip
        return stock * spot + float((size * prices).sum())

    move = 2 * _implied_event_move(env)
    return {"gap_down_20": now - value(0.8 * chain.spot, 0.0),
            "vol_up_20": now - value(chain.spot, 0.20),
            "earnings_2x": max(now - value(chain.spot * (1 - move), 0.0),
                               now - value(chain.spot * (1 + move), 0.0))}  # fmt: skip


def _implied_event_move(env: OptionsEnv) -> float:
    """The earnings move the chain prices: with the at-the-money variance of the first
    expiry after the announcement (t1) and of a later one (t2), and a diffusive variance
    constant between them, the event's variance is ``s1^2 t1 - d^2 t1`` where
    ``d^2 = (s2^2 t2 - s1^2 t1) / (t2 - t1)``. Without an announcement ahead (or a term
    structure to read it from), the reference's typical 5%."""
    chain = env.market.chains[env.t][env.symbol]
    today = chain.time.date()
    events = [e for e in env.market.underlyings[env.symbol].earnings if e >= today]
    after = [e for e in chain.expiries() if events and e > events[0]]
    if len(after) < 2:
        return 0.05
    points = []
    for expiry in after[:2]:
        rows = np.flatnonzero((chain.expiry == np.datetime64(expiry, "D")) & chain.call)
        row = rows[np.argmin(np.abs(chain.strike[rows] - chain.spot))]
        points.append((chain.years[row], chain.iv[row] ** 2))
    (t1, v1), (t2, v2) = points
    diffusive = (v2 * t2 - v1 * t1) / (t2 - t1)
    return float(np.sqrt(max(v1 * t1 - diffusive * t1, 0.0))) or 0.05


def max_drawdown(nav: np.ndarray) -> float:
    peak = np.maximum.accumulate(nav)
    return float(np.max((peak - nav) / peak)) if len(nav) else 0.0


def cvar(returns: np.ndarray, level: float = 0.95) -> float:
    """Mean loss in the worst (1 - level) tail, as a positive number."""
    if not len(returns):
        return 0.0
    cut = np.quantile(returns, 1 - level)
    return float(-returns[returns <= cut].mean())


def episode_metrics(r: EpisodeRecord) -> dict[str, float]:
    """Every metric of one episode (NaN where it does not apply, e.g. no order sent)."""
    nav = np.asarray(r.nav, float)
    pnl = nav[-1] - r.capital
    returns = np.diff(nav) / nav[:-1] if len(nav) > 1 else np.zeros(0)
    scale = np.sqrt(r.periods_per_year)
    std = returns.std() if len(returns) > 1 else 0.0
    # downside deviation: the root mean square of the shortfalls below 0, over every step
    downside = float(np.sqrt(np.mean(np.minimum(returns, 0.0) ** 2))) if len(returns) else 0.0
    drawdown = max_drawdown(nav)
    years = max(len(returns), 1) / r.periods_per_year
    total_return = pnl / r.capital
    annual = total_return / years
    rejected = sum(r.rejections.values())
    refused = rejected - r.rejections.get("retries_exhausted", 0)  # attempts refused
    schema = r.rejections.get("schema_invalid", 0)
    g = {k: np.mean([abs(x[k]) for x in r.greeks]) / np.mean(nav)
         for k in ("delta", "gamma", "vega")}  # fmt: skip
    out = {
        "schema_valid_rate": (r.attempts - schema) / r.attempts if r.attempts else np.nan,
        "executable_rate": (r.attempts - refused) / r.attempts if r.attempts else np.nan,
        "rejections": float(rejected),
        "retries_to_valid": float(np.mean(r.retries_to_valid)) if r.retries_to_valid else np.nan,
        "entry_edge_per_risk": float(np.mean(r.edges)) if r.edges else np.nan,
        "view_consistency": float(np.mean(r.consistent)) if r.consistent else np.nan,
        "max_drawdown": drawdown,
        "cvar95": cvar(returns),
        "dollar_delta_nav": float(g["delta"]),
        "dollar_gamma_nav": float(g["gamma"]),
        "dollar_vega_nav": float(g["vega"]),
        "margin_use": float(np.mean(np.asarray(r.margin) / nav)),
        "limit_breaches": float(sum(m > n for m, n in zip(r.margin, nav, strict=True))),
        "assignments": float(sum(e.get("kind") == "assignment" for e in r.events)),
        **{f"stress_{k}": v / r.capital for k, v in r.stress.items()},
        "return": total_return,
        "sharpe": float(returns.mean() / std * scale) if std > 0 else 0.0,
        "sortino": float(returns.mean() / downside * scale) if downside > 0 else 0.0,
        "calmar": float(annual / drawdown) if drawdown > 0 else 0.0,
        "pnl_per_risk": float(pnl / r.risk) if r.risk > 0 else 0.0,
        "costs": r.costs,
        "pnl": float(pnl),
    }  # fmt: skip
    return out


def bootstrap_ci(values: np.ndarray, n: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, 2.5th, 97.5th percentile of the bootstrap mean)."""
    values = np.asarray([v for v in values if np.isfinite(v)], float)
    if not len(values):
        return (float("nan"),) * 3
    rng = np.random.default_rng(seed)
    means = rng.choice(values, size=(n, len(values))).mean(1)
    return float(values.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))
