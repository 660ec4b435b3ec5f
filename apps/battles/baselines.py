"""Team policies that need no learning, and cross-play: who wins a battle.

A team policy maps ``(env, state, team, rng)`` to ``[copies, N]`` actions for that team.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fieldrl.apps.battles.battlefield import MOVES, Battlefield, BattleState
from fieldrl.benchmark import wilson_interval

__all__ = [
    "SCRIPTED",
    "TeamPolicy",
    "focus_policy",
    "play",
    "random_policy",
    "run_episode",
    "rush_policy",
]

TeamPolicy = Callable[[Battlefield, BattleState, int, np.random.Generator], np.ndarray]


def random_policy(
    env: Battlefield, state: BattleState, team: int, rng: np.random.Generator
) -> np.ndarray:
    return rng.integers(0, len(MOVES), state.cell[:, team].shape).astype(np.int8)


def _step_towards(
    env: Battlefield, state: BattleState, team: int, targets: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Every agent's move closest to its copy's nearest target cell (``targets``: ``[B or 1,
    K]`` cell indices), ties broken at random."""
    t_rows, t_cols = np.divmod(targets[:, None, None, :], env.width)
    rows, cols = np.divmod(env.neighbours[state.cell[:, team]][..., None], env.width)
    dist = np.min(np.abs(rows - t_rows) + np.abs(cols - t_cols), axis=-1)  # [B, N, 5]
    noise = rng.random(dist.shape) * 0.1
    return np.argmin(dist + noise, axis=-1).astype(np.int8)


def rush_policy(
    env: Battlefield, state: BattleState, team: int, rng: np.random.Generator
) -> np.ndarray:
    """Scripted: every agent takes the move that brings it closest to the nearest
    objective cell (concentrating the team there), ties broken at random."""
    return _step_towards(env, state, team, np.flatnonzero(env.objective)[None], rng)


def focus_policy(
    env: Battlefield, state: BattleState, team: int, rng: np.random.Generator, strike_at: int = 6
) -> np.ndarray:
    """Scripted probe: rush for ``strike_at`` steps, then the whole team heads for the
    objective cell holding the most enemies, to outnumber them there (focus fire)."""
    if state.t < strike_at:
        return rush_policy(env, state, team, rng)
    objective = np.flatnonzero(env.objective)
    enemies = env.counts(state)[:, 1 - team][:, objective]  # [B, objective cells]
    return _step_towards(env, state, team, objective[np.argmax(enemies, axis=1)][:, None], rng)


SCRIPTED: dict[str, TeamPolicy] = {
    "random": random_policy,
    "rush": rush_policy,
    "focus": focus_policy,
}


def run_episode(env: Any, blue: TeamPolicy, red: TeamPolicy,
                rng: np.random.Generator) -> tuple[Any, np.ndarray]:  # fmt: skip
    """One episode on every copy: the end state and blue's return per copy (steps after a
    copy's battle ended do not count)."""
    state, total = env.reset(), np.zeros(env.copies)
    done = np.zeros(env.copies, bool)
    while not done.all():
        actions = np.stack([blue(env, state, 0, rng), red(env, state, 1, rng)], axis=1)
        state, result = env.step(state, actions)
        total += np.where(done, 0.0, result.reward)
        done |= result.done
    return state, total


def play(
    env: Battlefield, blue: TeamPolicy, red: TeamPolicy, episodes: int, seed: int = 0,
    draw_margin: float = 0.05,
) -> dict[str, Any]:  # fmt: skip
    """``episodes`` battles (``env.copies`` at a time): blue wins when its return beats
    red's by more than ``draw_margin`` per step on average; win/draw/loss rates with CIs."""
    rng = np.random.default_rng(seed)
    outcomes = []
    while len(outcomes) < episodes:
        _, total = run_episode(env, blue, red, rng)
        margin = total / env.horizon
        outcomes.extend(np.sign(np.where(np.abs(margin) <= draw_margin, 0, margin)).tolist())
    outcomes_arr = np.asarray(outcomes[:episodes])
    wins, draws = float((outcomes_arr > 0).sum()), float((outcomes_arr == 0).sum())
    low, high = wilson_interval(wins, episodes)
    return {"win_rate": wins / episodes, "draw_rate": draws / episodes,
            "loss_rate": 1 - (wins + draws) / episodes, "ci95_low": low, "ci95_high": high,
            "episodes": episodes}  # fmt: skip
