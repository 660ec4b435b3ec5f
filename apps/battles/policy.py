"""The shared team actor and the minimally informed critic of MF-MAPPO, and the actor's
per-local-state evaluation.

An agent's action distribution depends on its local state (an id: a battlefield agent's
cell and health, a population-game agent's current strategy) and on the two teams'
distributions (and the time left). Agents that share a copy and a local state share a
distribution, so the actor is evaluated once per *occupied local state* and gathered to
the agents: the cost follows the occupied states, not the number of agents.
``logits_per_agent`` is the plain per-agent evaluation the fast path must equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

__all__ = [
    "LocalStates",
    "MeanFieldActor",
    "MeanFieldCritic",
    "group_by_local_state",
    "sample_actions",
]


def _trunk(map_dim: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(2 * map_dim + 1, hidden), nn.Tanh(),
                         nn.Linear(hidden, hidden), nn.Tanh())  # fmt: skip


class MeanFieldActor(nn.Module):
    """A trunk over ``[own distribution, opponent distribution, time left]`` and a head over
    ``[trunk features, local-state embedding]`` -> action logits."""

    def __init__(
        self, local_states: int, map_dim: int, actions: int, hidden: int = 64, embed: int = 16
    ) -> None:
        super().__init__()
        self.trunk = _trunk(map_dim, hidden)
        self.embedding = nn.Embedding(local_states, embed)
        self.head = nn.Sequential(nn.Linear(hidden + embed, hidden), nn.Tanh(),
                                  nn.Linear(hidden, actions))  # fmt: skip

    def context(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        """Trunk features per copy from ``maps [B, 2, map_dim]`` (own team first)."""
        return self.trunk(torch.cat([maps.flatten(1), time_left[:, None]], dim=1))

    def logits_per_agent(
        self, maps: torch.Tensor, time_left: torch.Tensor, local: torch.Tensor
    ) -> torch.Tensor:
        """``[B, N, actions]`` logits for every agent (the reference evaluation)."""
        ctx = self.context(maps, time_left)
        b, n = local.shape
        return self.head(torch.cat([ctx[:, None].expand(b, n, -1), self.embedding(local)], -1))

    def logits_per_state(
        self, maps: torch.Tensor, time_left: torch.Tensor, states: LocalStates
    ) -> torch.Tensor:
        """``[K, actions]`` logits, one row per distinct occupied (copy, local state)."""
        ctx = self.context(maps, time_left)[torch.from_numpy(states.copy)]
        return self.head(torch.cat([ctx, self.embedding(torch.from_numpy(states.local))], -1))


class MeanFieldCritic(nn.Module):
    """V(mu_own, mu_opponent, time left): its size does not depend on the number of agents."""

    def __init__(self, map_dim: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(_trunk(map_dim, hidden), nn.Linear(hidden, 1))

    def forward(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([maps.flatten(1), time_left[:, None]], dim=1)).squeeze(-1)


@dataclass
class LocalStates:
    """The distinct occupied (copy, local state) pairs of a batch and its agents' rows."""

    copy: np.ndarray  # [K]
    local: np.ndarray  # [K]
    inverse: np.ndarray  # [B * N] each agent's row among the K

    @property
    def size(self) -> int:
        return int(self.copy.size)


def group_by_local_state(local: np.ndarray, n_local: int) -> LocalStates:
    """Distinct (copy, local state) of ``[B, N]`` agents."""
    b, _ = local.shape
    key = np.arange(b)[:, None] * n_local + local.astype(np.int64)
    unique, inverse = np.unique(key.ravel(), return_inverse=True)
    copy, state = np.divmod(unique, n_local)
    return LocalStates(copy, state, inverse)


def sample_actions(probs: np.ndarray, inverse: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One action per agent from its local state's distribution (inverse CDF, vectorized)."""
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(inverse.size)
    return (u[:, None] > cdf[inverse]).sum(axis=1).astype(np.int8)
