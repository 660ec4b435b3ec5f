"""How a team acts: its networks (``Team``: the shared actor and its critic), what it sees
under partial observability (``Observation``, ``OpponentEstimator``), rollouts of both
teams on a batched environment (``rollout``, grouped by local state into ``Step``s), and a
trained team as a cross-play policy (``team_policy``). ``mf_mappo.py`` learns from the
rollouts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.battles.battlefield import Mirror
from fieldrl.apps.battles.policy import (
    LocalCritic,
    LocalStates,
    MeanFieldCritic,
    group_by_local_state,
    local_features,
    make_actor,
    sample_actions,
    sample_steering,
)

__all__ = [
    "FULL_VIEW",
    "Observation",
    "OpponentEstimator",
    "Step",
    "Team",
    "merge_steps",
    "rollout",
    "side_view",
    "team_mirrors",
    "team_policy",
    "team_view",
]


@dataclass(frozen=True)
class Observation:
    """How an actor sees the opponent's map: ``delay`` steps late, with Gaussian ``noise``
    per cell (in units of the uniform share 1 / cells), through an exponential estimator
    that keeps ``smoothing`` of its previous estimate. The default sees it exactly."""

    noise: float = 0.0
    delay: int = 0
    smoothing: float = 0.0

    @property
    def exact(self) -> bool:
        return self.noise == 0 and self.delay == 0 and self.smoothing == 0


FULL_VIEW = Observation()  # the opponent seen as it is: no delay, no noise


class OpponentEstimator:
    """Per team, the opponent map its actor sees (see :class:`Observation`)."""

    def __init__(self, obs: Observation, rng: np.random.Generator) -> None:
        self.obs, self.rng = obs, rng
        self.history: list[np.ndarray] = []
        self.estimate: np.ndarray | None = None

    def __call__(self, true_map: np.ndarray) -> np.ndarray:
        if self.obs.exact:
            return true_map
        self.history = (self.history + [true_map])[-(self.obs.delay + 1) :]
        seen = self.history[0]
        scale = seen.sum(-1, keepdims=True) / seen.shape[-1]
        seen = np.clip(
            seen + self.obs.noise * scale * self.rng.standard_normal(seen.shape), 0, None
        )
        if self.estimate is None:
            self.estimate = seen
        else:
            self.estimate = self.obs.smoothing * self.estimate + (1 - self.obs.smoothing) * seen
        return self.estimate


class Team(nn.Module):
    """One team's actor and critic. ``critic``: ``mean_field`` (MF-MAPPO), ``full_state``
    (MAPPO: a centralised critic over every agent's state, its input grows with N) or
    ``local`` (IPPO: independent learners, actor and critic see only the agent's own state
    and neighbourhood; advantages are per agent). ``directions``: the actor also reads the
    map directions and ``steering`` a team-level steering head (not for ``local``, which is
    blind to the maps and has no team advantage)."""

    def __init__(
        self, env: Any, hidden: int, critic: str = "mean_field", directions: bool = False,
        steering: bool = False,
    ) -> None:  # fmt: skip
        super().__init__()
        self.critic_kind = critic
        maps_in = critic != "local"
        self.actor = make_actor(env, hidden, maps_in, directions and maps_in, steering and maps_in)
        if critic == "local":
            self.critic: nn.Module = LocalCritic(local_features(env), hidden)
        else:
            inputs = 2 * env.map_dim if critic == "mean_field" else env.full_state_dim
            self.critic = MeanFieldCritic(inputs, hidden)

    def critic_input(self, env: Any, state: Any, own_view: torch.Tensor, team: int,
                     mirror: Mirror | None = None) -> torch.Tensor:  # fmt: skip
        if self.critic_kind != "full_state":
            return own_view.flatten(1)
        full = env.full_state(state)  # [B, 2, D/2], blue first
        full = full if team == 0 else full[:, ::-1]
        if mirror is not None:
            full = mirror.full_state(full)
        return torch.as_tensor(np.ascontiguousarray(full).reshape(env.copies, -1))

    def value(self, step: Step) -> torch.Tensor:
        """``[B]`` team values, or ``[K]`` per local state for the local critic."""
        if self.critic_kind == "local":
            return self.critic(step.maps, step.time_left, step.states)
        return self.critic(step.critic_input, step.time_left)


@dataclass
class Step:
    """What one team saw and did at one step, grouped by local state."""

    maps: torch.Tensor  # [B, 2, map_dim], what the actor saw, own team first
    critic_input: torch.Tensor  # [B, D]
    time_left: torch.Tensor  # [B]
    states: LocalStates
    counts: torch.Tensor  # [K, actions] alive agents per (local state, action)
    old_logp: torch.Tensor  # [K, actions]
    value: torch.Tensor  # [B] team values ([K] per local state for a local critic)
    live: np.ndarray  # [B * N] bool, alive agents (per-agent advantages need them)
    chosen: np.ndarray  # [B * N] int8 actions
    steer: torch.Tensor | None = None  # [B, targets] the team's steering weights per copy
    steer_logp: torch.Tensor = torch.zeros(0)  # [B] their log-probability


def team_view(maps: np.ndarray, team: int) -> torch.Tensor:
    """``[B, 2, D]`` maps with the given team first, as a float tensor."""
    view = maps if team == 0 else maps[:, ::-1]
    return torch.as_tensor(np.ascontiguousarray(view), dtype=torch.float32)


def side_view(
    maps: np.ndarray, local: np.ndarray, team: int, mirror: Mirror | None
) -> tuple[torch.Tensor, np.ndarray]:
    """What ``team`` sees: the maps with its own first and its agents' local states, both
    reflected through ``mirror`` when given."""
    view, own = team_view(maps, team), local[:, team]
    if mirror is None:
        return view, own
    return view[:, :, torch.from_numpy(mirror.cells)], mirror.local[own]


def team_mirrors(env: Any, shared_sides: bool) -> list[Mirror | None]:
    """Per team the reflection its policy sees the battlefield through (red's, when one
    network plays both sides)."""
    return [None, env.mirror() if shared_sides else None]


@torch.no_grad()
def rollout(
    env: Any, teams: list[Team], rng: np.random.Generator, obs: Observation = FULL_VIEW,
    mirrors: list[Mirror | None] = (None, None), grouped: bool = False,
) -> tuple[list[list[Step]], np.ndarray, Any]:  # fmt: skip
    """One episode on every copy: per team the steps (in the team's own frame), blue's
    rewards ``[T, B]``, the end state. ``grouped``: one action draw per local state."""
    state = env.reset()
    steps: list[list[Step]] = [[], []]
    rewards = []
    estimators = [OpponentEstimator(obs, rng) for _ in teams]
    for t in range(env.horizon):
        maps, local, alive = env.maps(state), env.local_state(state), env.alive(state)
        time_left = torch.full((env.copies,), 1.0 - t / env.horizon)
        actions = np.zeros(local.shape, np.int8)
        for team, model in enumerate(teams):
            mirror = mirrors[team]
            true_view, own = side_view(maps, local, team, mirror)
            seen = true_view.clone()
            seen[:, 1] = torch.as_tensor(estimators[team](true_view[:, 1].numpy()))
            states = group_by_local_state(own, env.n_local)
            steer, steer_logp = sample_steering(model.actor, seen, time_left, rng)
            logp = torch.log_softmax(
                model.actor.logits_per_state(seen, time_left, states, steer), -1
            )
            chosen = sample_actions(logp.exp().numpy(), states.inverse, rng, grouped)
            moves = chosen if mirror is None else mirror.actions[chosen]
            actions[:, team] = moves.reshape(env.copies, -1)
            live = alive[:, team].ravel()
            flat = states.inverse[live] * env.n_actions + chosen[live]
            counts = np.bincount(flat, minlength=states.size * env.n_actions)
            critic_input = model.critic_input(env, state, true_view, team, mirror)
            step = Step(seen, critic_input, time_left, states,
                        torch.from_numpy(counts.reshape(states.size, -1)).float(), logp,
                        torch.zeros(0), live, chosen, steer, steer_logp)  # fmt: skip
            step.value = model.value(step)
            steps[team].append(step)
        state, result = env.step(state, actions)
        rewards.append(result.reward)
    return steps, np.asarray(rewards), state


def merge_steps(parts: list[list[Step]]) -> list[Step]:
    """Concatenate the same team's steps from rollouts on separate copies (workers)."""
    merged = []
    for at_t in zip(*parts, strict=True):
        copies = np.cumsum([0] + [s.maps.shape[0] for s in at_t])
        rows = np.cumsum([0] + [s.states.size for s in at_t])
        states = LocalStates(
            np.concatenate([s.states.copy + c for s, c in zip(at_t, copies, strict=False)]),
            np.concatenate([s.states.local for s in at_t]),
            np.concatenate([s.states.inverse + r for s, r in zip(at_t, rows, strict=False)]),
        )
        names = ("maps", "critic_input", "time_left", "counts", "old_logp", "value", "steer_logp")
        fields = {name: torch.cat([getattr(s, name) for s in at_t]) for name in names}
        steered = at_t[0].steer is not None
        fields["steer"] = torch.cat([s.steer for s in at_t]) if steered else None
        agents = {name: np.concatenate([getattr(s, name) for s in at_t])
                  for name in ("live", "chosen")}  # fmt: skip
        merged.append(Step(states=states, **fields, **agents))
    return merged


def team_policy(
    model: Team, obs: Observation = FULL_VIEW, shared_sides: bool = False,
    grouped: bool = False,
) -> Callable[[Any, Any, int, np.random.Generator], np.ndarray]:  # fmt: skip
    """A trained team as a cross-play policy (actions sampled per local state; ``grouped``:
    one draw per local state, as trained). Under partial observability it keeps its opponent
    estimate across the steps of an episode; a ``shared_sides`` network plays red through the
    battlefield's mirror."""
    estimator: list[OpponentEstimator] = []

    @torch.no_grad()
    def act(env: Any, state: Any, team: int, rng: np.random.Generator) -> np.ndarray:
        if state.t == 0:
            estimator[:] = [OpponentEstimator(obs, rng)]
        mirror = team_mirrors(env, shared_sides)[team]
        view, own = side_view(env.maps(state), env.local_state(state), team, mirror)
        view[:, 1] = torch.as_tensor(estimator[0](view[:, 1].numpy()))
        time_left = torch.full((env.copies,), 1.0 - state.t / env.horizon)
        states = group_by_local_state(own, env.n_local)
        steer, _ = sample_steering(model.actor, view, time_left, rng)
        probs = torch.softmax(model.actor.logits_per_state(view, time_left, states, steer), -1)
        chosen = sample_actions(probs.numpy(), states.inverse, rng, grouped)
        moves = chosen if mirror is None else mirror.actions[chosen]
        return moves.reshape(env.copies, -1)

    return act
