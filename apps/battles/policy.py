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
    "sample_steering",
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

    targets = 4  # own centre, opponent centre, own densest cell, opponent densest cell
    size = 2 * targets + 2

    def __init__(self, positions: np.ndarray, cell_of_state: np.ndarray, moves: np.ndarray):
        super().__init__()
        self.register_buffer("positions", torch.as_tensor(positions, dtype=torch.float32), False)
        self.register_buffer("cell", torch.as_tensor(cell_of_state, dtype=torch.int64), False)
        self.register_buffer("moves", torch.as_tensor(moves, dtype=torch.float32), False)

    def offsets(self, maps: torch.Tensor, copy: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
        """``[K, targets, 2]`` squashed offsets from each local state's cell to the targets."""
        mass = maps.sum(-1, keepdim=True).clamp(min=1e-9)  # [B, 2, 1]
        centre = maps @ self.positions / mass  # [B, 2, 2]
        densest = self.positions[maps.argmax(-1)]  # [B, 2, 2]
        targets = torch.cat([centre, densest], 1)[copy]  # [K, 4, 2]
        return torch.tanh(targets - self.positions[self.cell[local]][:, None])

    def features(
        self, maps: torch.Tensor, copy: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        """``[K, size]``: the ``offsets`` flattened and each team's share in its densest cell."""
        share = maps.amax(-1) / maps.sum(-1).clamp(min=1e-9)  # [B, 2]
        return torch.cat([offsets.flatten(1), share[copy]], 1)

    def alignment(self, offsets: torch.Tensor) -> torch.Tensor:
        """``[K, targets, actions]``: how far each move goes along each target's offset."""
        return offsets @ self.moves.T


class MeanFieldActor(nn.Module):
    """A trunk over ``[own distribution, opponent distribution, time left]`` and a head over
    ``[trunk features, local-state embedding, local features, map directions]`` -> action
    logits (local features and directions when given).

    With ``steering`` a team-level Gaussian head on the trunk draws, per copy and step, one
    weight per map direction target (``steering_distribution``), and every agent's move
    logits get the weighted sum of each move's alignment with the targets: one draw moves
    the whole team towards (or away from) a team's mass at once, a coordinated move that
    per-agent sampling, near-deterministic at thousands of agents, never tries."""

    def __init__(
        self, local_states: int, map_dim: int, actions: int, hidden: int = 64, embed: int = 16,
        features: LocalFeatures | None = None, maps_in: bool = True,
        directions: MapDirections | None = None, steering: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        if steering and directions is None:
            raise ValueError("steering needs map directions")
        self.maps_in = maps_in  # False: an independent learner, blind to the distributions
        self.trunk = nn.Sequential(nn.Linear(2 * map_dim * maps_in + 1, hidden), nn.Tanh(),
                                   nn.Linear(hidden, hidden), nn.Tanh())  # fmt: skip
        self.embedding = nn.Embedding(local_states, embed)
        self.features = features
        self.directions = directions
        extra = features.size if features is not None else 0
        extra += MapDirections.size if directions is not None else 0
        self.head = nn.Sequential(nn.Linear(hidden + embed + extra, hidden), nn.Tanh(),
                                  nn.Linear(hidden, actions))  # fmt: skip
        self.steering = steering
        if steering:
            self.steer_mean = nn.Linear(hidden, MapDirections.targets)
            self.steer_log_std = nn.Parameter(torch.zeros(MapDirections.targets))

    def context(self, maps: torch.Tensor, time_left: torch.Tensor) -> torch.Tensor:
        """Trunk features per copy from ``maps [B, 2, map_dim]`` (own team first)."""
        if not self.maps_in:
            return self.trunk(time_left[:, None])
        return self.trunk(torch.cat([maps.flatten(1), time_left[:, None]], dim=1))

    def steering_distribution(
        self, maps: torch.Tensor, time_left: torch.Tensor
    ) -> torch.distributions.Normal:
        """The team's steering weights per copy: ``[B, targets]`` independent Gaussians."""
        mean = self.steer_mean(self.context(maps, time_left))
        return torch.distributions.Normal(mean, self.steer_log_std.clamp(-3, 1).exp())

    def _logits(self, maps: torch.Tensor, time_left: torch.Tensor, copy: torch.Tensor,
                local: torch.Tensor, steer: torch.Tensor | None) -> torch.Tensor:  # fmt: skip
        parts = [self.context(maps, time_left)[copy], self.embedding(local)]
        if self.features is not None:
            parts.append(self.features(maps, copy, local))
        if self.directions is not None:
            offsets = self.directions.offsets(maps, copy, local)
            parts.append(self.directions.features(maps, copy, offsets))
        logits = self.head(torch.cat(parts, -1))
        if not self.steering:
            return logits
        if steer is None or steer.shape != (maps.shape[0], MapDirections.targets):
            raise ValueError("a steered actor needs [copies, 4] steering weights, got "
                             f"{None if steer is None else tuple(steer.shape)}")  # fmt: skip
        return logits + (steer[copy][:, :, None] * self.directions.alignment(offsets)).sum(1)

    def logits_per_agent(
        self, maps: torch.Tensor, time_left: torch.Tensor, local: torch.Tensor,
        steer: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """``[B, N, actions]`` logits for every agent (the reference evaluation)."""
        b, n = local.shape
        copy = torch.arange(b).repeat_interleave(n)
        return self._logits(maps, time_left, copy, local.reshape(-1), steer).reshape(b, n, -1)

    def logits_per_state(
        self, maps: torch.Tensor, time_left: torch.Tensor, states: LocalStates,
        steer: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """``[K, actions]`` logits, one row per distinct occupied (copy, local state);
        ``steer`` ``[B, targets]``: each copy's steering weights (steered actors only)."""
        return self._logits(maps, time_left, torch.from_numpy(states.copy),
                            torch.from_numpy(states.local), steer)  # fmt: skip


def local_features(env: Any) -> LocalFeatures:
    return LocalFeatures(*env.local_feature_tables())


def make_actor(
    env: Any, hidden: int = 64, maps_in: bool = True, directions: bool = False,
    steering: bool = False,
) -> MeanFieldActor:  # fmt: skip
    """The actor for an environment, with its local features (``maps_in=False``: an
    independent learner that sees only its own state and neighbourhood; ``directions``:
    it also reads :class:`MapDirections` off the maps, on environments with cell positions;
    ``steering``: a team-level steering head over the directions, see
    :class:`MeanFieldActor`)."""
    directions = directions or steering
    if directions and not hasattr(env, "cell_positions"):
        raise FieldrlError(f"{type(env).__name__}: map directions need a grid with cell positions")
    towards = MapDirections(*env.cell_positions()) if directions else None
    return MeanFieldActor(env.n_local, env.map_dim, env.n_actions, hidden,
                          features=local_features(env), maps_in=maps_in,
                          directions=towards, steering=steering)  # fmt: skip


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


def sample_steering(
    actor: MeanFieldActor, maps: torch.Tensor, time_left: torch.Tensor,
    rng: np.random.Generator, greedy: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor]:  # fmt: skip
    """Steering weights per copy and their log-probability (``greedy``: the means; ``None``
    and an empty tensor for an actor without steering, which draws nothing from ``rng``)."""
    if not actor.steering:
        return None, torch.zeros(0)
    dist = actor.steering_distribution(maps, time_left)
    steer = dist.mean
    if not greedy:
        noise = torch.from_numpy(rng.standard_normal(tuple(steer.shape))).float()
        steer = steer + dist.stddev * noise
    return steer, dist.log_prob(steer).sum(-1)
