"""Play any policy (a rule baseline, the RL agent, the LLM agent) on episodes and read its
record; the hindsight oracle; the metrics of a set of episodes with bootstrap CIs."""

from __future__ import annotations

import numpy as np

from fieldrl.apps.options.baselines import Policy, rule
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.metrics import (
    EpisodeRecord,
    bootstrap_ci,
    episode_metrics,
    episode_risk,
    record,
    stress_losses,
)
from fieldrl.apps.options.strategies import MenuItem

__all__ = ["oracle", "run_episode", "summary"]


def run_episode(env: OptionsEnv, policy: Policy, episode: int) -> EpisodeRecord:
    """Episode ``episode`` of ``env`` under ``policy``; the worst stress loss of any step
    is kept per scenario. The policy reads the step's :class:`AgentView`; an agent that
    writes its own orders (``writes_orders``: the LLM adapter) gets the step's
    :class:`OrderDesk` instead (the same view, its account and the order API, not the
    env)."""
    env.reset(seed=episode, options={"episode": episode})
    worst: dict[str, float] = {}
    done = False
    writes_orders = getattr(policy, "writes_orders", False)
    while not done:
        action = policy(env.order_desk() if writes_orders else env.agent_view())
        if isinstance(action, tuple):
            env.open(action[1])
            done = env.advance()[2]
        else:
            done = env.step(action)[2]
        for name, loss in stress_losses(env).items():
            worst[name] = max(worst.get(name, 0.0), loss)
    views = [e["consistent"] for e in env.entries if e["consistent"] is not None]
    return record(env, episode_risk(env.base_risk, [e["risk"] for e in env.entries]),
                  [e["edge"] for e in env.entries], worst, views)  # fmt: skip


def oracle(env: OptionsEnv, episode: int, items: list[MenuItem],
           played: dict[str, EpisodeRecord]) -> tuple[EpisodeRecord, str]:  # fmt: skip
    """The best play of ``episode`` in hindsight, by P&L per unit of risk: of each of
    ``items`` opened whenever flat and held to expiry (at the same risk budget), and of
    each method's own play of the episode (``played``, by name). The best of a set that
    holds every method's play, it is an upper bound on each of them: regret >= 0. Returns
    the record and what it picked (a menu item's or a method's name)."""
    candidates = [(item.name, run_episode(env, rule(item), episode)) for item in items]
    candidates += list(played.items())
    if not candidates:
        raise ValueError("the oracle needs at least one menu item or play")
    name, best = max(candidates, key=lambda c: episode_metrics(c[1])["pnl_per_risk"])
    return best, name


def summary(records: list[EpisodeRecord]) -> dict[str, float]:
    """Mean of each metric over episodes, with its bootstrap 95% CI (``<metric>_low`` and
    ``<metric>_high``) for the outcome and risk figures; a metric no episode has (no order
    sent, no view stated) is left out."""
    rows = [episode_metrics(r) for r in records]
    out: dict[str, float] = {"episodes": float(len(rows))}
    for key in rows[0]:
        values = np.array([row[key] for row in rows], float)
        mean, low, high = bootstrap_ci(values)
        if not np.isfinite(mean):
            continue  # not applicable to any episode (no order sent, no view stated)
        out[key] = mean
        if key in ("pnl_per_risk", "return", "pnl", "sharpe", "max_drawdown", "cvar95"):
            out[f"{key}_low"], out[f"{key}_high"] = low, high
    return out
