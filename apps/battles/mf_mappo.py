"""MF-MAPPO: PPO for two teams, one shared actor and one minimally informed critic per team.

- The **actor** pi(a | local state, mu_own, mu_opp, time left) is shared by a team's agents
  and evaluated once per occupied local state (``policy.py``).
- The **critic** V(mu_own, mu_opp, time left) sees only the two distributions: its size does
  not grow with the number of agents.
- With a team reward and a team critic every agent of a team shares one advantage per step,
  so the PPO loss is summed over (step, local state, action) *counts*: an update costs what
  the occupied states cost, not what the agents cost.

Any batched mean-field environment works: it exposes ``copies``, ``n``, ``n_local``,
``map_dim``, ``n_actions``, ``horizon``, ``reset()``, ``local_state(s)``, ``alive(s)``,
``maps(s)`` and ``step(s, actions) -> (s, result)`` with ``result.reward`` (blue's; red
gets its negative) and ``result.done``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.battles.policy import (
    LocalStates,
    MeanFieldActor,
    MeanFieldCritic,
    group_by_local_state,
    sample_actions,
)

__all__ = ["MFMAPPOConfig", "Team", "rollout", "team_policy", "train_mf_mappo"]


@dataclass
class MFMAPPOConfig:
    iterations: int = 100
    lr: float = 3e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    epochs: int = 4
    entropy: float = 0.01
    value_coef: float = 0.5
    hidden: int = 64


class Team(nn.Module):
    """One team's actor and critic."""

    def __init__(self, env: Any, hidden: int) -> None:
        super().__init__()
        self.actor = MeanFieldActor(env.n_local, env.map_dim, env.n_actions, hidden)
        self.critic = MeanFieldCritic(env.map_dim, hidden)


@dataclass
class Step:
    """What one team saw and did at one step, grouped by local state."""

    maps: torch.Tensor  # [B, 2, map_dim], own team first
    time_left: torch.Tensor  # [B]
    states: LocalStates
    counts: torch.Tensor  # [K, actions] alive agents per (local state, action)
    old_logp: torch.Tensor  # [K, actions]
    value: torch.Tensor  # [B]


def _team_view(maps: np.ndarray, team: int) -> torch.Tensor:
    view = maps if team == 0 else maps[:, ::-1]
    return torch.as_tensor(np.ascontiguousarray(view), dtype=torch.float32)


@torch.no_grad()
def rollout(
    env: Any, teams: list[Team], rng: np.random.Generator
) -> tuple[list[list[Step]], np.ndarray, Any]:
    """One episode on every copy: per team the steps, blue's rewards ``[T, B]``, the end state."""
    state = env.reset()
    steps: list[list[Step]] = [[], []]
    rewards = []
    for t in range(env.horizon):
        maps, local, alive = env.maps(state), env.local_state(state), env.alive(state)
        time_left = torch.full((env.copies,), 1.0 - t / env.horizon)
        actions = np.zeros(local.shape, np.int8)
        for team, model in enumerate(teams):
            view = _team_view(maps, team)
            states = group_by_local_state(local[:, team], env.n_local)
            logp = torch.log_softmax(model.actor.logits_per_state(view, time_left, states), -1)
            chosen = sample_actions(logp.exp().numpy(), states.inverse, rng)
            actions[:, team] = chosen.reshape(env.copies, -1)
            live = alive[:, team].ravel()
            flat = states.inverse[live] * env.n_actions + chosen[live]
            counts = np.bincount(flat, minlength=states.size * env.n_actions)
            steps[team].append(Step(view, time_left, states,
                                    torch.from_numpy(counts.reshape(states.size, -1)).float(),
                                    logp, model.critic(view, time_left)))  # fmt: skip
        state, result = env.step(state, actions)
        rewards.append(result.reward)
    return steps, np.asarray(rewards), state


def _advantages(
    rewards: np.ndarray, values: torch.Tensor, cfg: MFMAPPOConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE over ``[T, B]`` team rewards; the episode ends after the last step."""
    r = torch.as_tensor(rewards, dtype=torch.float32)
    adv = torch.zeros_like(r)
    last = torch.zeros(r.shape[1])
    for t in reversed(range(r.shape[0])):
        next_value = values[t + 1] if t + 1 < r.shape[0] else torch.zeros(r.shape[1])
        delta = r[t] + cfg.gamma * next_value - values[t]
        last = delta + cfg.gamma * cfg.gae_lambda * last
        adv[t] = last
    return adv, adv + values


def _update(model: Team, opt: torch.optim.Optimizer, steps: list[Step], rewards: np.ndarray,
            cfg: MFMAPPOConfig) -> dict[str, float]:  # fmt: skip
    values = torch.stack([s.value for s in steps])
    adv, returns = _advantages(rewards, values, cfg)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    for _ in range(cfg.epochs):
        policy_loss = entropy = value_loss = torch.zeros(())
        total = sum(float(s.counts.sum()) for s in steps)
        for t, s in enumerate(steps):
            logp = torch.log_softmax(
                model.actor.logits_per_state(s.maps, s.time_left, s.states), -1
            )
            ratio = torch.exp(logp - s.old_logp)
            a = adv[t][torch.from_numpy(s.states.copy)][:, None]
            surrogate = torch.min(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a)
            policy_loss = policy_loss - (s.counts * surrogate).sum() / total
            weight = s.counts.sum(1) / total
            entropy = entropy - (weight * (logp.exp() * logp).sum(-1)).sum()
            value_loss = value_loss + (model.critic(s.maps, s.time_left) - returns[t]).pow(2).mean()
        loss = policy_loss - cfg.entropy * entropy + cfg.value_coef * value_loss / len(steps)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return {"policy_loss": policy_loss.item(), "entropy": entropy.item(),
            "value_loss": value_loss.item() / len(steps)}  # fmt: skip


def train_mf_mappo(
    env: Any,
    cfg: MFMAPPOConfig,
    log: Callable[[int, dict[str, float]], None],
    advance: Callable[[int], None],
    seed: int = 0,
    evaluate: Callable[[list[Team]], dict[str, float]] | None = None,
) -> list[Team]:
    """Both teams learn at once (self-play); ``evaluate(teams)`` is logged each iteration."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    teams = [Team(env, cfg.hidden) for _ in range(2)]
    opts = [torch.optim.Adam(t.parameters(), lr=cfg.lr) for t in teams]
    for iteration in range(1, cfg.iterations + 1):
        steps, rewards, _ = rollout(env, teams, rng)
        stats: dict[str, float] = {"blue_return": float(rewards.sum(0).mean())}
        for team, (model, opt) in enumerate(zip(teams, opts, strict=True)):
            team_rewards = rewards if team == 0 else -rewards
            for k, v in _update(model, opt, steps[team], team_rewards, cfg).items():
                stats[f"{('blue', 'red')[team]}/{k}"] = v
        if evaluate is not None:
            stats |= evaluate(teams)
        log(iteration, stats)
        advance(1)
    return teams


def team_policy(model: Team) -> Callable[[Any, Any, int, np.random.Generator], np.ndarray]:
    """A trained team as a cross-play policy (actions sampled per local state)."""

    @torch.no_grad()
    def act(env: Any, state: Any, team: int, rng: np.random.Generator) -> np.ndarray:
        view = _team_view(env.maps(state), team)
        time_left = torch.full((env.copies,), 1.0 - state.t / env.horizon)
        states = group_by_local_state(env.local_state(state)[:, team], env.n_local)
        probs = torch.softmax(model.actor.logits_per_state(view, time_left, states), -1)
        return sample_actions(probs.numpy(), states.inverse, rng).reshape(env.copies, -1)

    return act
