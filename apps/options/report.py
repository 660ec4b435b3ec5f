"""Tables and plots of the options app: per suite and market, every method's figures with
confidence intervals and regret; NAV paths, dollar Greeks over time, rejection codes, and
the payoff at expiry of the strategies an agent opened."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.benchmark import Benchmark
from fieldrl.report import Report, save_figure

__all__ = ["demo_report", "plot_greeks", "plot_nav", "plot_payoffs", "plot_pooled",
           "plot_rejections", "sections"]  # fmt: skip

SUMMARY = ["method", "pnl_per_risk", "pnl_per_risk_low", "pnl_per_risk_high", "return",
           "sharpe", "max_drawdown", "cvar95", "executable_rate", "costs", "regret",
           "stress_gap_down_20", "margin_use", "episodes"]  # fmt: skip


POOLED = ["method", "pnl_per_risk", "per seed", "vs random valid", "vs best rule", "regret"]
DEMO_COLUMNS = [c for c in SUMMARY if c not in ("regret", "stress_gap_down_20", "margin_use")]


def plot_nav(path: Path, paths: Mapping[str, Sequence[float]], title: str) -> Path:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for name, nav in paths.items():
        ax.plot(np.asarray(nav) / nav[0] - 1, label=name)
    ax.set(title=title, xlabel="step", ylabel="return on capital")
    ax.legend(fontsize=7)
    return save_figure(fig, path)


def plot_pooled(path: Path, pool: Mapping[str, Any], order: Sequence[str] = ()) -> Path:
    """Each method's P&L per risk (seed mean) with its 95% CI, and each seed's mean as
    crosses: one suite and market (methods in ``order``, then the rest)."""
    import matplotlib.pyplot as plt

    names = _in_order(pool, order)
    fig, ax = plt.subplots(figsize=(6.4, 0.45 * len(names) + 1.2))
    for y, name in enumerate(names):
        v = pool["methods"][name]
        ax.errorbar(v["pnl_per_risk"], y, xerr=[[v["pnl_per_risk"] - v["pnl_per_risk_low"]],
                    [v["pnl_per_risk_high"] - v["pnl_per_risk"]]], fmt="o", color="C0",
                    capsize=3)  # fmt: skip
        ax.plot(v["per_seed"], [y] * len(v["per_seed"]), "x", color="C1", ms=5)
    ax.axvline(0, color="grey", lw=0.6)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    ax.set(title=f"{pool['suite']}/{pool['market']}: P&L per risk (95% CI; x: each seed)",
           xlabel="P&L per unit of risk")  # fmt: skip
    return save_figure(fig, path)


def plot_greeks(path: Path, greeks: Sequence[Mapping[str, float]], title: str) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(11, 2.8))
    for ax, key in zip(axes, ("delta", "gamma", "vega", "theta"), strict=True):
        ax.plot([g[key] for g in greeks])
        ax.set(title=f"dollar {key}", xlabel="step")
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_rejections(path: Path, counts: Mapping[str, Mapping[str, int]]) -> Path:
    import matplotlib.pyplot as plt

    codes = sorted({c for per in counts.values() for c in per})
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    if codes:
        bottom = np.zeros(len(codes))
        for name, per in counts.items():
            values = np.array([per.get(c, 0) for c in codes], float)
            ax.barh(codes, values, left=bottom, label=name)
            bottom += values
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no order was rejected", ha="center", va="center")
    ax.set(title="rejections by code", xlabel="orders")
    return save_figure(fig, path)


def plot_payoffs(path: Path, strategies: Sequence[Mapping[str, Any]]) -> Path:
    """Each strategy's P&L at expiry against the underlying's price (legs at their fill
    prices, shares at the entry spot), up to six."""
    import matplotlib.pyplot as plt

    shown = list(strategies)[:6]
    fig, axes = plt.subplots(1, max(len(shown), 1), figsize=(3.2 * max(len(shown), 1), 2.8),
                             squeeze=False)  # fmt: skip
    for ax, s in zip(axes[0], shown, strict=False):
        spot = s["spot"]
        x = np.linspace(0.7 * spot, 1.3 * spot, 200)
        pnl = np.zeros_like(x)
        for leg in s["legs"]:
            if leg["right"] is None:
                pnl += leg["quantity"] * (x - leg["price"])
                continue
            payoff = np.maximum(x - leg["strike"], 0) if leg["right"] == "call" else np.maximum(
                leg["strike"] - x, 0)  # fmt: skip
            pnl += leg["quantity"] * 100 * (payoff - leg["price"])
        ax.plot(x, pnl)
        ax.axhline(0, color="grey", lw=0.6)
        ax.axvline(spot, color="grey", lw=0.6, ls="--")
        ax.set(title=f"{s['name']}\n{s['time'][:10]}", xlabel="price at expiry")
    axes[0][0].set_ylabel("P&L, dollars")
    return save_figure(fig, path)


def _demo_sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    extra, cfg = data["data"], data["config"]
    rep.text(f"{extra['episodes']} held-out episodes; MaskablePPO trained for "
             f"{cfg['ppo']['timesteps']:,} steps.").table(data["rows"], DEMO_COLUMNS)  # fmt: skip
    figures = out / "figures"
    rep.figure(plot_nav(figures / "nav.png", extra["nav"], "first held-out episode"), "NAV", out)
    rep.figure(plot_greeks(figures / "greeks.png", extra["greeks"], "MaskablePPO"), "Greeks", out)
    rep.figure(plot_payoffs(figures / "payoffs.png", extra["opened"]),
               "payoffs of the strategies it opened", out)  # fmt: skip
    rep.figure(plot_rejections(figures / "rejections.png", extra["rejections"]), "rejections",
               out)  # fmt: skip


def sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    """The benchmark report, from ``benchmark.json`` alone (a demo's results: its own)."""
    if data["data"].get("demo"):
        return _demo_sections(data, out, rep)
    extra = data["data"]
    figures = out / "figures"
    speed = extra["speed"]
    rep.text(
        "Each suite and market: MaskablePPO trained on the training split, then it, the "
        "suite's rule baselines, a random valid strategy and the hindsight oracle on the "
        "same held-out episodes (non-overlapping windows). P&L per risk: the episode's P&L "
        "over the risk it took, the sum of each opened strategy's risk (the most it could "
        "lose by its first expiry; stress scenarios where unbounded). The oracle: the best "
        "in hindsight, per episode, of each menu item held to expiry and every method's "
        "own play, so no method's regret is below 0. "
        f"Environment: {speed['env_steps_per_s']:,.0f} steps/s on a "
        f"{speed['chain_options']:.0f}-option chain; {speed['orders_per_s']:,.0f} orders/s."
    )
    from fieldrl.apps.options.benchmark import pool_seeds

    for pool in extra.get("pooled") or pool_seeds(extra["jobs"]):  # (older files: none kept)
        suite, market, seeds = pool["suite"], pool["market"], pool["seeds"]
        job = next(j for j in extra["jobs"] if (j["suite"], j["market"]) == (suite, market))
        rows = [r for r in data["rows"] if (r["suite"], r["market"], r.get("seed")) == (
            suite, market, seeds[0])]  # fmt: skip
        order = [r["method"] for r in rows]  # the order they played in
        rep.text(
            f"## {suite} / {market}\n\n{pool['episodes']} held-out episodes, "
            f"training seeds {', '.join(map(str, seeds))}. P&L per risk averaged over "
            "the seeds on each episode, its 95% bootstrap CI over the episodes, each "
            "seed's mean, and the paired difference to random valid and to the best "
            f"rule ({pool['best_rule']}):"
        )
        rep.table(_pooled_rows(pool, order), POOLED)
        rep.text(f"Every figure of seed {seeds[0]} (benchmark.json holds each seed's):").table(
            rows, SUMMARY)  # fmt: skip
        tag = f"{suite}_{market}"
        rep.figure(plot_pooled(figures / f"pnl_per_risk_{tag}.png", pool, order),
                   "P&L per risk by method", out)  # fmt: skip
        navs = {m: p["nav"] for m, p in job["paths"].items()}
        title = f"{suite}/{market}: first held-out episode"
        rep.figure(plot_nav(figures / f"nav_{tag}.png", navs, title), "NAV paths", out)
        greeks = job["paths"]["maskable_ppo"]["greeks"]
        rep.figure(plot_greeks(figures / f"greeks_{tag}.png", greeks, f"MaskablePPO, {tag}"),
                   "dollar Greeks", out)  # fmt: skip
        rep.figure(plot_rejections(figures / f"rejections_{tag}.png", job["rejections"]),
                   "rejection codes", out)  # fmt: skip
    look = extra["lookahead"]
    rep.text("## Look-ahead test (fair market: zero premium, zero costs; the peeking "
             "control reads the next step and must be caught)").table(
        [{"agent": k, **v} for k, v in look.items()])  # fmt: skip
    bull = extra["bull_year"]
    rep.text(f"## 2023 bull year\n\nCovered call {bull['covered_call_30d']:+.1%}, buy-and-hold "
             f"{bull['buy_and_hold']:+.1%}, stock {bull['symbol_return']:+.1%}.")  # fmt: skip


def _in_order(pool: Mapping[str, Any], order: Sequence[str]) -> list[str]:
    return [m for m in order if m in pool["methods"]] + [
        m for m in pool["methods"] if m not in order]  # fmt: skip


def _pooled_rows(pool: Mapping[str, Any], order: Sequence[str]) -> list[dict[str, Any]]:
    def ci(x: Sequence[float]) -> str:
        return f"{x[0]:+.3f} [{x[1]:+.3f}, {x[2]:+.3f}]"

    return [{"method": m, "pnl_per_risk": ci([v["pnl_per_risk"], v["pnl_per_risk_low"],
                                              v["pnl_per_risk_high"]]),
             "per seed": ", ".join(f"{x:+.3f}" for x in v["per_seed"]),
             "vs random valid": ci(v["vs_random_valid"]),
             "vs best rule": ci(v[f"vs_{pool['best_rule']}"]), "regret": v["regret"]}
            for m in _in_order(pool, order) for v in [pool["methods"][m]]]  # fmt: skip


def demo_report(run: Any, *, resources: Any) -> str:
    """The demo's results into the run folder's ``benchmark.json``: the trained agent and the
    suite's baselines on held-out episodes, NAV paths, the agent's Greeks over time, what it
    opened and the rejection codes (:func:`sections` draws them); returns the headline."""
    from fieldrl.apps.options.baselines import suite_policies
    from fieldrl.apps.options.env import OptionsEnv
    from fieldrl.apps.options.episodes import make_episodes
    from fieldrl.apps.options.evaluate import run_episode, summary

    model, cfg = run.trained, run.config
    episodes = make_episodes(cfg, "eval", 8, 0)
    env = OptionsEnv(cfg, episodes)
    policies = suite_policies(model, cfg.suite.name)
    rows, paths, rejections, opened = [], {}, {}, []
    for name, policy in policies.items():
        records = []
        for e in range(len(episodes)):
            records.append(run_episode(env, policy, e))
            if name == "maskable_ppo":
                opened += env.entries[:3]
        rows.append({"method": name, **summary(records)})
        paths[name] = records[0].nav
        rejections[name] = dict(sum((r.rejections for r in records), Counter()))
        if name == "maskable_ppo":
            greeks = records[0].greeks
    data = {"title": f"options demo: {cfg.suite.name} suite, {cfg.market.kind} market",
            "demo": True, "episodes": len(episodes), "nav": paths, "greeks": greeks,
            "opened": _distinct(opened), "rejections": rejections}  # fmt: skip
    plain = json.loads(json.dumps(data, default=float))  # numpy scalars as JSON numbers
    Benchmark(cfg, run.dir, quick=True, workers=1).write(rows, seeds=[0], data=plain)
    ppo = rows[0]
    rate = ppo.get("executable_rate")  # absent when it sent no order
    return (
        f"MaskablePPO P&L per risk {ppo['pnl_per_risk']:+.3f} on {len(episodes)} held-out "
        f"{cfg.suite.name} episodes, "
        + (f"executable {rate:.0%}" if rate is not None else "no order sent")
    )


def _distinct(strategies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first of each kind of strategy, so the payoff plots show different ones."""
    seen, out = set(), []
    for s in strategies:
        if s["name"] not in seen:
            seen.add(s["name"])
            out.append(s)
    return out or strategies
