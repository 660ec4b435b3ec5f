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
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.errors import FieldrlError

__all__ = [
    "LocalCritic",
    "LocalFeatures",
    "LocalStates",
    "MeanFieldActor",
    "MeanFieldCritic",
    "MapDirections",
    "group_by_local_state",
    "local_features",
    "make_actor",
    "sample_actions",
    "sample_plans",
]


class LocalFeatures(nn.Module):
    """What an agent knows about its own surroundings, per occupied (copy, local state):
    a static row per local state (a battlefield's row, column, health, on-objective flag)
    and, when the environment gives neighbour cells, both teams' densities in them read
    off the maps (log1p of agents per mean occupancy). Built from the environment's
    ``local_feature_tables()``; its tables are rebuilt with the environment, not saved."""

    def __init__(self, static: np.ndarray, neighbours: np.ndarray | None, scale: float) -> None:
        super().__init__()
        self.register_buffer("static", torch.as_tensor(static, dtype=torch.float32), False)
        has = neighbours is not None
        self.register_buffer("neighbours", torch.as_tensor(neighbours if has else
                                                           np.zeros((len(static), 0), np.int64)),
                             False)  # fmt: skip
        self.scale = scale
        self.size = self.static.shape[1] + 2 * self.neighbours.shape[1]

    def forward(self, maps: torch.Tensor, copy: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        own = self.static[local]
        if self.neighbours.shape[1] == 0:
            return own
        cells = self.neighbours[local]  # [K, M]
        near = maps[copy[:, None], :, cells]  # [K, M, 2], without copying a map per state
        return torch.cat([own, torch.log1p(near.transpose(1, 2).flatten(1) * self.scale)], 1)


class MapDirections(nn.Module):
    """Where each team is, read off the maps, as seen from an agent's cell: per team the
    offsets (rows, columns) to its centre of mass and to its densest cell, squashed by tanh
    (a cell away is 0.76, three or more nearly 1), and the densest cell's share of the team.
    Every agent of a team points at the same cells, so one weight moves the whole team
    towards (or away from) a team's mass: a feature of the distributions an MLP over the
    flattened maps finds hard to learn. Built from ``cell_positions()``, not saved."""

    size = 10

    def __init__(self, positions: np.ndarray, cell_of_state: np.ndarray) -> None:
        super().__init__()
        self.register_buffer("positions", torch.as_tensor(positions, dtype=torch.float32), False)
        self.register_buffer("cell", torch.as_tensor(cell_of_state, dtype=torch.int64), False)

    def forward(self, maps: torch.Tensor, copy: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        mass = maps.sum(-1, keepdim=True).clamp(min=1e-9)  # [B, 2, 1]
        centre = maps @ self.positions / mass  # [B, 2, 2]
        densest = self.positions[maps.argmax(-1)]  # [B, 2, 2]
        share = maps.amax(-1) / mass[..., 0]  # [B, 2]
        targets = torch.cat([centre, densest], 1)[copy]  # [K, 4, 2]
        offsets = torch.tanh(targets - self.positions[self.cell[local]][:, None])
        return torch.cat([offsets.flatten(1), share[copy]], 1)


class MeanFieldActor(nn.Module):
    """A trunk over ``[own distribution, opponent distribution, time left]`` and a head over
    ``[trunk features, local-state embedding, local features, map directions, plan]`` ->
    action logits (local features and directions when given).

    With ``plans`` > 0 a team-level head on the trunk picks one of ``plans`` plans per copy
    and step (``plan_logits``), and every agent of the team sees the chosen plan (one-hot):
    a signal all agents share, so one plan switches the whole team's flow at once (a
    coordinated move that per-agent sampling, near-deterministic at thousands of agents,
    never tries)."""

    def __init__(
        self, local_states: int, map_dim: int, actions: int, hidden: int = 64, embed: int = 16,
        features: LocalFeatures | None = None, maps_in: bool = True,
        directions: MapDirections | None = None, plans: int = 0,
    ) -> None:  # fmt: skip
        super().__init__()
        self.maps_in = maps_in  # False: an independent learner, blind to the distributions
        self.trunk = nn.Sequential(nn.Linear(2 * map_dim * maps_in + 1, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())  # fmt: skip
        self.embedding = nn.Embedding(local_states, embed)
        self.features = features
        self.directions = directions
        extra = features.size if features is not None else 0
        extra += MapDirections.size if directions is not None else 0
        self.plans = plans
        self.plan_head = nn.Linear(hidden, plans) if plans else None
        extra += plans
        self.head = nn.Sequential(nn.Linear(hidden + embed + extra, hidden), nn.Tanh(),
                                  nn.Linear(hidden, actions))  # fmt: skip

    def context(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        """Trunk features per copy from ``maps [B, 2, map_dim]`` (own team first)."""
        if not self.maps_in:
            return self.trunk(time_left[:, None])
        return self.trunk(torch.cat([maps.flatten(1), time_left[:, None]], dim=1))

    def plan_logits(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        """``[B, plans]`` the team-level plan logits per copy."""
        assert self.plan_head is not None, "an actor without plans"
        return self.plan_head(self.context(maps, time_left))

    def _logits(self, maps: torch.Tensor, time_left: torch.Tensor, copy: torch.Tensor,
                local: torch.Tensor, plan: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        parts = [self.context(maps, time_left)[copy], self.embedding(local)]
        if self.features is not None:
            parts.append(self.features(maps, copy, local))
        if self.directions is not None:
            parts.append(self.directions(maps, copy, local))
        if self.plans:
            if plan is None or plan.shape != (maps.shape[0],):
                raise ValueError(f"an actor with plans needs one plan per copy, got {plan}")
            parts.append(nn.functional.one_hot(plan, self.plans).float()[copy])
        return self.head(torch.cat(parts, -1))

    def logits_per_agent(
        self, maps: torch.Tensor, time_left: torch.Tensor, local: torch.Tensor,
        plan: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """``[B, N, actions]`` logits for every agent (the reference evaluation)."""
        b, n = local.shape
        copy = torch.arange(b).repeat_interleave(n)
        return self._logits(maps, time_left, copy, local.reshape(-1), plan).reshape(b, n, -1)

    def logits_per_state(
        self, maps: torch.Tensor, time_left: torch.Tensor, states: LocalStates,
        plan: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """``[K, actions]`` logits, one row per distinct occupied (copy, local state);
        ``plan`` ``[B]``: each copy's plan (actors with plans only)."""
        return self._logits(maps, time_left, torch.from_numpy(states.copy),
                            torch.from_numpy(states.local), plan)  # fmt: skip


def local_features(env: Any) -> LocalFeatures:
    return LocalFeatures(*env.local_feature_tables())


def make_actor(
    env: Any, hidden: int = 64, maps_in: bool = True, directions: bool = False, plans: int = 0
) -> MeanFieldActor:
    """The actor for an environment, with its local features (``maps_in=False``: an
    independent learner that sees only its own state and neighbourhood; ``directions``:
    it also reads :class:`MapDirections` off the maps, on environments with cell positions;
    ``plans``: a team-level plan head, see :class:`MeanFieldActor`)."""
    if directions and not hasattr(env, "cell_positions"):
        raise FieldrlError(f"{type(env).__name__}: map directions need a grid with cell positions")
    towards = MapDirections(*env.cell_positions()) if directions else None
    return MeanFieldActor(env.n_local, env.map_dim, env.n_actions, hidden,
                          features=local_features(env), maps_in=maps_in,
                          directions=towards, plans=plans)  # fmt: skip


class LocalCritic(nn.Module):
    """IPPO's critic: V(own local features, time left), one value per local state."""

    def __init__(self, features: LocalFeatures, hidden: int = 64) -> None:
        super().__init__()
        self.features = features
        self.net = nn.Sequential(nn.Linear(features.size + 1, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 1))  # fmt: skip

    def forward(
        self, maps: torch.Tensor, time_left: torch.Tensor, states: LocalStates
    ) -> torch.Tensor:
        copy = torch.from_numpy(states.copy)
        x = self.features(maps, copy, torch.from_numpy(states.local))
        return self.net(torch.cat([x, time_left[copy][:, None]], 1)).squeeze(-1)


class MeanFieldCritic(nn.Module):
    """V(input, time left). MF-MAPPO's input is the two distributions (its size does not
    depend on the number of agents); MAPPO's is every agent's state."""

    def __init__(self, inputs: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(inputs + 1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, 1),
        )  # fmt: skip

    def forward(self, x: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([x, time_left[:, None]], dim=1)).squeeze(-1)


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


def sample_actions(
    probs: np.ndarray, inverse: np.ndarray, rng: np.random.Generator, grouped: bool = False
) -> np.ndarray:
    """One action per agent from its local state's distribution (inverse CDF, vectorized).
    ``grouped``: one draw per local state, so all agents that share it move together (each
    agent's action still has its state's distribution; only the independence goes)."""
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    u = rng.random(probs.shape[0])[inverse] if grouped else rng.random(inverse.size)
    return (u[:, None] > cdf[inverse]).sum(axis=1).astype(np.int8)


def sample_plans(
    actor: MeanFieldActor, maps: torch.Tensor, time_left: torch.Tensor,
    rng: np.random.Generator, greedy: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor]:  # fmt: skip
    """One plan per copy and its log-probability (``None`` and an empty tensor for an actor
    without plans, which draws nothing from ``rng``)."""
    if not actor.plans:
        return None, torch.zeros(0)
    logp = torch.log_softmax(actor.plan_logits(maps, time_left), -1)
    if greedy:
        plan = logp.argmax(-1)
    else:
        probs = logp.detach().exp().numpy()
        plan = torch.from_numpy(sample_actions(probs, np.arange(len(logp)), rng))
        plan = plan.long()
    return plan, logp.gather(1, plan[:, None])[:, 0]
