"""Baselines: the operations heuristic, the noisy logger, and the data recipes of the
transfer baselines (data pooling and off-dynamics filtering)."""

from __future__ import annotations

import numpy as np

from fieldrl.apps.warehouse.logs import LoggedData, pool
from fieldrl.apps.warehouse.sim import Candidates

__all__ = [
    "BehaviorPolicy",
    "filter_like_target",
    "heuristic_scores",
    "pooled_data",
    "random_scores",
]


def heuristic_scores(cands: Candidates, rng: np.random.Generator | None = None) -> np.ndarray:
    """Velocity-weighted space freed per labor hour, noise-free (the comparison baseline)."""
    return cands.heuristic_scores().astype(np.float64)


def random_scores(cands: Candidates, rng: np.random.Generator) -> np.ndarray:
    """Random selection: any feasible set, uniformly ranked."""
    return rng.random(cands.n)


class BehaviorPolicy:
    """The logger: the heuristic's log score plus Gumbel noise, with about a share epsilon
    of the ranking (and so of the picks) taken by candidates in random order."""

    def __init__(self, gumbel_scale: float = 0.5, epsilon: float = 0.1) -> None:
        self.gumbel_scale, self.epsilon = gumbel_scale, epsilon

    def __call__(self, cands: Candidates, rng: np.random.Generator) -> np.ndarray:
        base = np.log(np.maximum(cands.heuristic_scores().astype(np.float64), 1e-12))
        noisy = base + self.gumbel_scale * rng.gumbel(size=cands.n)
        if self.epsilon <= 0:
            return noisy
        # Merge two orders: the noisy heuristic's at rate 1 - eps and a random permutation's
        # at rate eps; a candidate keeps its earlier position in the merged ranking.
        position = np.empty(cands.n)
        position[np.argsort(-noisy)] = np.arange(cands.n) / max(1.0 - self.epsilon, 1e-9)
        position = np.minimum(position, rng.permutation(cands.n) / self.epsilon)
        return -position


def _unit_reward(data: LoggedData) -> LoggedData:
    return data.with_reward(data.reward / max(float(np.abs(data.reward).mean()), 1e-8))


def pooled_data(source: LoggedData, target: LoggedData) -> LoggedData:
    """Data pooling: both logs as one, each reward in units of its own mean."""
    return pool(_unit_reward(source), _unit_reward(target))


def filter_like_target(source: LoggedData, target: LoggedData, keep: float) -> LoggedData:
    """Off-dynamics filtering: the share ``keep`` of source epochs whose transitions
    (state, next state) lie nearest a target transition, pooled with the target."""

    def transitions(d: LoggedData) -> np.ndarray:
        return np.concatenate([d.state, d.next_state], 1).astype(np.float64)

    src, tgt = transitions(source), transitions(target)
    scale = np.maximum(np.concatenate([src, tgt]).std(0), 1e-6)
    src, tgt = src / scale, tgt / scale
    nearest = np.full(src.shape[0], np.inf)
    for row in tgt:  # target data is scarce: one pass per target epoch
        nearest = np.minimum(nearest, ((src - row) ** 2).sum(1))
    kept = np.sort(np.argsort(nearest)[: max(1, int(round(keep * src.shape[0])))])
    return pooled_data(source.subset(kept), target)
