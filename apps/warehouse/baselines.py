"""Scoring rules that need no learning: the operations heuristic and the noisy logger."""

from __future__ import annotations

import numpy as np

from fieldrl.apps.warehouse.sim import Candidates

__all__ = ["BehaviorPolicy", "heuristic_scores"]


def heuristic_scores(cands: Candidates, rng: np.random.Generator | None = None) -> np.ndarray:
    """Velocity-weighted space freed per labor hour, noise-free (the comparison baseline)."""
    return cands.heuristic_scores().astype(np.float64)


class BehaviorPolicy:
    """The logger: the heuristic's log score plus Gumbel noise, and epsilon-random picks."""

    def __init__(self, gumbel_scale: float = 0.5, epsilon: float = 0.1) -> None:
        self.gumbel_scale, self.epsilon = gumbel_scale, epsilon

    def __call__(self, cands: Candidates, rng: np.random.Generator) -> np.ndarray:
        base = np.log(np.maximum(cands.heuristic_scores().astype(np.float64), 1e-12))
        scores = base + self.gumbel_scale * rng.gumbel(size=cands.n)
        wild = rng.random(cands.n) < self.epsilon
        scores[wild] = rng.uniform(base.min(), base.max() + 1.0, wild.sum())
        return scores
