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
    record,
    stress_losses,
)
from fieldrl.apps.options.strategies import MenuItem

__all__ = ["oracle", "run_episode", "summary"]


def run_episode(env: OptionsEnv, policy: Policy, episode: int) -> EpisodeRecord:
    """Episode ``episode`` of ``env`` under ``policy``; the worst stress loss of any step
    is kept per scenario."""
    env.reset(seed=episode, options={"episode": episode})
    worst: dict[str, float] = {}
    done = False
    while not done:
        action = policy(env)
        if isinstance(action, tuple):
            env.open(action[1])
            done = env.advance()[2]
        else:
            done = env.step(action)[2]
        for name, loss in stress_losses(env).items():
            worst[name] = max(worst.get(name, 0.0), loss)
    views = [e["consistent"] for e in env.entries if e["consistent"] is not None]
    return record(env, [env.base_risk, *(e["risk"] for e in env.entries)],
                  [e["edge"] for e in env.entries], worst, views)  # fmt: skip


def oracle(env: OptionsEnv, episode: int, items: list[MenuItem]) -> tuple[EpisodeRecord, str]:
    """The best of ``items`` on ``episode`` in hindsight (each opened whenever flat and held
    to expiry, at the same risk budget), by P&L per unit of risk: the oracle's record and
    the item it picked."""
    best: tuple[float, EpisodeRecord, str] | None = None
    for item in items:
        r = run_episode(env, rule(item), episode)
        score = episode_metrics(r)["pnl_per_risk"] if r.risk > 0 else 0.0
        if best is None or score > best[0]:
            best = (score, r, item.name)
    if best is None:
        raise ValueError("the oracle needs at least one menu item")
    return best[1], best[2]


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
