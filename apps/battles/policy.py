"""The shared team actor of MF-MAPPO and its per-cell evaluation.

An agent's action distribution depends on its local state (cell, health) and on the two
teams' distribution maps (and the time left). Agents that share a copy, a cell and a health
share a distribution, so the actor is evaluated once per *occupied local state* and the
result is gathered to the agents: the cost follows the occupied cells, not the number of
agents. ``logits_per_agent`` is the plain per-agent evaluation the fast path must equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = ["CellBatch", "MeanFieldActor", "group_by_local_state", "sample_actions"]


class MeanFieldActor(nn.Module):
    """A trunk over ``[own map, opponent map, time left]`` and a head over
    ``[trunk features, cell embedding, health embedding]`` -> 5 move logits."""

    def __init__(self, cells: int, max_health: int, hidden: int = 64, embed: int = 16) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(2 * cells + 1, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())  # fmt: skip
        self.cell_embedding = nn.Embedding(cells, embed)
        self.health_embedding = nn.Embedding(max_health + 1, embed)
        self.head = nn.Sequential(nn.Linear(hidden + 2 * embed, hidden), nn.Tanh(),
                                  nn.Linear(hidden, 5))  # fmt: skip

    def context(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        """Trunk features per copy from ``maps [B, 2, cells]`` (own team first)."""
        return self.trunk(torch.cat([maps.flatten(1), time_left[:, None]], dim=1))

    def logits(self, context: torch.Tensor, cell: torch.Tensor, health: torch.Tensor):
        z = torch.cat([context, self.cell_embedding(cell), self.health_embedding(health)], -1)
        return self.head(z)

    def logits_per_agent(
        self, maps: torch.Tensor, time_left: torch.Tensor, cell: torch.Tensor, health: torch.Tensor
    ) -> torch.Tensor:
        """``[B, N, 5]`` logits for every agent (the reference evaluation)."""
        ctx = self.context(maps, time_left)
        b, n = cell.shape
        return self.logits(ctx[:, None].expand(b, n, -1), cell, health.long())

    def logits_per_cell(
        self, maps: torch.Tensor, time_left: torch.Tensor, batch: CellBatch
    ) -> torch.Tensor:
        """``[K, 5]`` logits, one row per distinct occupied local state."""
        ctx = self.context(maps, time_left)[torch.from_numpy(batch.copy)]
        return self.logits(ctx, torch.from_numpy(batch.cell), torch.from_numpy(batch.health))


@dataclass
class CellBatch:
    """The distinct occupied local states of a batch and how agents map onto them."""

    copy: np.ndarray  # [K] which copy each local state is in
    cell: np.ndarray  # [K]
    health: np.ndarray  # [K]
    inverse: np.ndarray  # [B * N] index into the K states for each agent (alive or not)

    @property
    def size(self) -> int:
        return int(self.copy.size)


def group_by_local_state(cell: np.ndarray, health: np.ndarray, max_health: int) -> CellBatch:
    """Distinct (copy, cell, health) of ``[B, N]`` agents; dead agents share health 0."""
    b, n = cell.shape
    cells = int(cell.max(initial=0)) + 1
    key = (np.arange(b)[:, None] * cells + cell.astype(np.int64)) * (max_health + 1) + health
    unique, inverse = np.unique(key.ravel(), return_inverse=True)
    rest, h = np.divmod(unique, max_health + 1)
    copy, c = np.divmod(rest, cells)
    return CellBatch(copy, c, h, inverse)


def sample_actions(probs: np.ndarray, inverse: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per agent from its local state's distribution (inverse CDF, vectorized)."""
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(inverse.size)
    return (u[:, None] > cdf[inverse]).sum(axis=1).astype(np.int8)
