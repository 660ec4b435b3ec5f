"""MF-MAPPO: PPO for two teams, one shared actor and one minimally informed critic per team.

- The **actor** pi(a | local state, mu_own, mu_opp, time left) is shared by a team's agents
  and evaluated once per occupied local state (``policy.py``).
- The **critic** V(mu_own, mu_opp, time left) sees only the two distributions: its size does
  not grow with the number of agents. ``critic="full_state"`` gives MAPPO's centralised
  critic over every agent's state instead (its input grows with N): the baseline.
- With a team reward and a team critic every agent of a team shares one advantage per step,
  so the PPO loss is summed over (step, local state, action) *counts*: an update costs what
  the occupied states cost, not what the agents cost.
- **Partial observability** (``Observation``): the actor sees the opponent's map delayed and
  noisy, smoothed by an exponential estimator; a penalty lambda * |d logits / d maps|^2
  keeps the policy from over-reacting to its distribution inputs.
- **Averaging** (``average_tail``): in a zero-sum game self-play iterates cycle around the
  equilibrium; the uniform average of the actor's weights over the last iterations sits
  closer to it than any one iterate, and is the policy training returns.

Any batched mean-field environment works: it exposes ``copies``, ``n``, ``n_local``,
``map_dim``, ``n_actions``, ``horizon``, ``full_state_dim``, ``reset()``,
``local_state(s)``, ``alive(s)``, ``maps(s)``, ``full_state(s)`` and
``step(s, actions) -> (s, result)`` with ``result.reward`` (blue's; red gets its negative).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.battles.config import TrainConfig
from fieldrl.apps.battles.policy import (
    MeanFieldActor,
)
from fieldrl.apps.battles.rollout import (
    FULL_VIEW,
    Observation,
    Step,
    Team,
    merge_steps,
    rollout,
    team_mirrors,
)
from fieldrl.errors import FieldrlError

__all__ = ["CRITICS", "MFMAPPOTrainer"]


# the critic each policy-gradient method (``train.method``) gives its team
CRITICS = {"mf_mappo": "mean_field", "mappo": "full_state", "ippo": "local"}


class ActorAverage:
    """A running uniform average of an actor's weights, kept in a copy of its team."""

    def __init__(self, team: Team) -> None:
        self.team = copy.deepcopy(team).requires_grad_(False)
        self.count = 0

    @torch.no_grad()
    def add(self, actor: MeanFieldActor) -> None:
        self.count += 1
        for mean, weight in zip(self.team.actor.parameters(), actor.parameters(), strict=True):
            mean.lerp_(weight, 1.0 / self.count)


def _advantages(
    rewards: np.ndarray, values: torch.Tensor, cfg: TrainConfig
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


def _map_gradient_penalty(actor: MeanFieldActor, s: Step) -> torch.Tensor:
    """Mean over local states of |d logits / d maps|^2 (squared Frobenius norm of each
    state's Jacobian), estimated with one Gaussian probe (Hutchinson): E|J^T v|^2 = |J|^2."""
    maps = s.maps.clone().requires_grad_(True)
    logits = actor.logits_per_state(maps, s.time_left, s.states, s.steer)
    probe = torch.randn_like(logits)
    (grad,) = torch.autograd.grad((logits * probe).sum(), maps, create_graph=True)
    return grad.pow(2).sum() / s.states.size


@dataclass
class _Targets:
    """One step's PPO targets: the summed positive and negative normalised advantages per
    (local state, action), and the value targets with their weights."""

    positive: torch.Tensor  # [K, actions]
    negative: torch.Tensor  # [K, actions]
    returns: torch.Tensor  # [B] (team critics) or [K] (local critic)
    weight: torch.Tensor  # same shape as returns, sums to 1 over the step
    team_advantage: torch.Tensor = torch.zeros(0)  # [B] normalised (team critics only)


def _team_targets(steps: list[Step], rewards: np.ndarray, cfg: TrainConfig) -> list[_Targets]:
    """One advantage per copy and step, shared by the team's agents."""
    values = torch.stack([s.value for s in steps])
    adv, returns = _advantages(rewards, values, cfg)
    if cfg.center_advantages and adv.shape[1] > 1:
        # leave-one-out mean over the other copies at the same step: a baseline that is
        # independent of this copy's actions, with the critic's common error removed
        b = adv.shape[1]
        adv = adv - (adv.sum(1, keepdim=True) - adv) / (b - 1)
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    out = []
    for t, s in enumerate(steps):
        a = adv[t][torch.from_numpy(s.states.copy)][:, None]
        b = returns.shape[1]
        out.append(_Targets(s.counts * a.clamp(min=0), s.counts * a.clamp(max=0), returns[t],
                            torch.full((b,), 1.0 / b), adv[t]))  # fmt: skip
    return out


def _agent_targets(steps: list[Step], rewards: np.ndarray, cfg: TrainConfig,
                   n_actions: int) -> list[_Targets]:  # fmt: skip
    """Per-agent GAE (an agent's episode ends when it dies), summed per (local state,
    action) split by sign, so PPO's clipped objective stays exact for each agent."""
    horizon, size = len(steps), steps[0].live.size
    per_copy = size // rewards.shape[1]
    value = np.zeros((horizon + 1, size), np.float32)
    live = np.zeros((horizon + 1, size), bool)
    for t, s in enumerate(steps):
        live[t] = s.live
        value[t] = np.where(s.live, s.value.numpy()[s.states.inverse], 0.0)
    reward = np.repeat(rewards, per_copy, axis=1)
    adv = np.zeros((horizon, size), np.float32)
    last = np.zeros(size, np.float32)
    for t in reversed(range(horizon)):
        alive_next = live[t + 1]
        delta = reward[t] + cfg.gamma * value[t + 1] * alive_next - value[t]
        last = delta + cfg.gamma * cfg.gae_lambda * last * alive_next
        adv[t] = np.where(live[t], last, 0.0)
    returns = adv + value[:horizon]
    mask = live[:horizon]
    mean, std = adv[mask].mean(), adv[mask].std() + 1e-8
    out = []
    for t, s in enumerate(steps):
        rows = s.states.inverse[s.live]
        pair = rows * n_actions + s.chosen[s.live]
        a = (adv[t][s.live] - mean) / std
        cells = s.states.size * n_actions
        pos = np.bincount(pair, np.maximum(a, 0), cells).reshape(s.states.size, -1)
        neg = np.bincount(pair, np.minimum(a, 0), cells).reshape(s.states.size, -1)
        n = np.bincount(rows, minlength=s.states.size)
        target = np.bincount(rows, returns[t][s.live], s.states.size) / np.maximum(n, 1)
        out.append(_Targets(torch.from_numpy(pos).float(), torch.from_numpy(neg).float(),
                            torch.from_numpy(target).float(),
                            torch.from_numpy(n / max(n.sum(), 1)).float()))  # fmt: skip
    return out


def _update(model: Team, opt: torch.optim.Optimizer, steps: list[Step], rewards: np.ndarray,
            cfg: TrainConfig, magnet: MeanFieldActor | None, map_penalty: float = 0.0
            ) -> dict[str, float]:  # fmt: skip
    if model.critic_kind == "local":
        targets = _agent_targets(steps, rewards, cfg, steps[0].counts.shape[1])
    else:
        targets = _team_targets(steps, rewards, cfg)
    total = sum(float(s.counts.sum()) for s in steps)
    for _ in range(cfg.epochs):
        policy_loss = entropy = value_loss = kl = penalty = torch.zeros(())
        steer_loss = steer_entropy = torch.zeros(())
        for s, target in zip(steps, targets, strict=True):
            logp = torch.log_softmax(
                model.actor.logits_per_state(s.maps, s.time_left, s.states, s.steer), -1
            )
            ratio = torch.exp(logp - s.old_logp)
            clipped = ratio.clamp(1 - cfg.clip, 1 + cfg.clip)
            # sum over agents of min(ratio * A, clipped * A), split by the sign of A
            surrogate = (target.positive * torch.min(ratio, clipped)
                         + target.negative * torch.max(ratio, clipped))  # fmt: skip
            policy_loss = policy_loss - surrogate.sum() / total
            weight = s.counts.sum(1) / total
            entropy = entropy - (weight * (logp.exp() * logp).sum(-1)).sum()
            if magnet is not None:
                with torch.no_grad():
                    anchor = torch.log_softmax(magnet.logits_per_state(
                        s.maps, s.time_left, s.states, s.steer), -1)  # fmt: skip
                kl = kl + (weight * (logp.exp() * (logp - anchor)).sum(-1)).sum()
            if map_penalty > 0:
                penalty = penalty + _map_gradient_penalty(model.actor, s) / len(steps)
            if s.steer is not None:  # the team's one decision per copy, on the team advantage
                dist = model.actor.steering_distribution(s.maps, s.time_left)
                ratio = torch.exp(dist.log_prob(s.steer).sum(-1) - s.steer_logp)
                a = target.team_advantage
                surrogate = torch.min(ratio * a, ratio.clamp(1 - cfg.clip, 1 + cfg.clip) * a)
                steer_loss = steer_loss - surrogate.mean() / len(steps)
                steer_entropy = steer_entropy + dist.entropy().sum(-1).mean() / len(steps)
            error = (model.value(s) - target.returns).pow(2)
            value_loss = value_loss + (target.weight * error).sum() / len(steps)
        loss = (policy_loss - cfg.entropy * entropy + cfg.magnet * kl
                + map_penalty * penalty + cfg.value_coef * value_loss
                + steer_loss - cfg.steer_entropy * steer_entropy)  # fmt: skip
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        opt.step()
    return {"policy_loss": policy_loss.item(), "entropy": entropy.item(),
            "value_loss": value_loss.item(), "magnet_kl": kl.item(),
            "map_gradient": penalty.item(), "steer_loss": steer_loss.item(),
            "steer_entropy": steer_entropy.item()}  # fmt: skip


class MFMAPPOTrainer:
    """Both teams learn at once (self-play), one iteration per :meth:`step`, as a
    :class:`fieldrl.training.Trainer`. ``evaluate(teams, iteration, averaged)`` is logged
    each iteration (``averaged``: the teams with their running average actors, once
    averaging has begun, else None). ``collect(teams)`` replaces the local rollout (e.g. by
    rollouts on Ray workers). ``teams`` are the two sides' teams (one network for both
    with ``shared_sides``). ``cfg`` is the app's ``[train]`` section as this run uses it
    (``train.method`` picks the critic, :data:`CRITICS`); ``map_penalty`` is the lambda of
    the map-gradient penalty (``observation.gradient_penalty``)."""

    def __init__(
        self,
        env: Any,
        cfg: TrainConfig,
        seed: int = 0,
        evaluate: Callable[[list[Team], int, list[Team] | None], dict[str, float]] | None = None,
        obs: Observation = FULL_VIEW,
        collect: Callable[[list[Team]], tuple[list[list[Step]], np.ndarray]] | None = None,
        map_penalty: float = 0.0,
    ) -> None:
        if cfg.past_opponents > 0 and not cfg.shared_sides:
            raise FieldrlError("train.past_opponents needs one network for both sides "
                               "(train.shared_sides on a battlefield)")  # fmt: skip
        self.env, self.cfg, self.evaluate, self.obs, self.collect = env, cfg, evaluate, obs, collect
        self.map_penalty = map_penalty
        self.total, self.done = cfg.iterations, 0
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng, env.rng)
        self.mirrors = team_mirrors(env, cfg.shared_sides)
        self.learners = [
            Team(env, cfg.hidden, CRITICS[cfg.method], cfg.directions, cfg.steering)
            for _ in range(1 if cfg.shared_sides else 2)
        ]
        self.teams = [self.learners[0], self.learners[-1]]
        self.opts = [torch.optim.Adam(t.parameters(), lr=cfg.lr) for t in self.learners]
        self.magnets: list[MeanFieldActor | None] = [None] * len(self.learners)
        self.averages: list[ActorAverage] = []
        self.average_from = cfg.iterations - round(cfg.average_tail * cfg.iterations) + 1
        self.past = copy.deepcopy(self.learners[0]).requires_grad_(False)  # the drawn snapshot
        self.snapshots: list[dict[str, torch.Tensor]] = []

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"iteration": self.done, "snapshots": len(self.snapshots)}
        for i, learner in enumerate(self.learners):
            state[f"team_{i}"] = learner.state_dict()
            state[f"opt_{i}"] = self.opts[i].state_dict()
            if self.magnets[i] is not None:
                state[f"magnet_{i}"] = self.magnets[i].state_dict()
        for i, average in enumerate(self.averages):
            state[f"average_{i}"] = average.team.actor.state_dict()
        if self.averages:
            state["average_count"] = self.averages[0].count
        for j, snapshot in enumerate(self.snapshots):
            state[f"snapshot_{j}"] = snapshot
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for i, learner in enumerate(self.learners):
            learner.load_state_dict(state[f"team_{i}"])
            self.opts[i].load_state_dict(state[f"opt_{i}"])
            if f"magnet_{i}" in state:
                self.magnets[i] = copy.deepcopy(learner.actor).requires_grad_(False)
                self.magnets[i].load_state_dict(state[f"magnet_{i}"])
        self.snapshots = [state[f"snapshot_{j}"] for j in range(int(state["snapshots"]))]
        if "average_count" in state:
            self.averages = [ActorAverage(t) for t in self.learners]
            for i, average in enumerate(self.averages):
                average.team.actor.load_state_dict(state[f"average_{i}"])
                average.count = int(state["average_count"])
        self.done = int(state["iteration"])

    def step(self) -> dict[str, float]:
        cfg, learners, iteration = self.cfg, self.learners, self.done + 1
        if cfg.magnet > 0 and (iteration - 1) % cfg.magnet_every == 0:
            self.magnets = [copy.deepcopy(t.actor).requires_grad_(False) for t in learners]
        if cfg.anneal_lr:
            for opt in self.opts:
                opt.param_groups[0]["lr"] = cfg.lr * (1 - (iteration - 1) / cfg.iterations)
        if cfg.past_opponents > 0 and (iteration - 1) % cfg.snapshot_every == 0:
            self.snapshots.append(copy.deepcopy(learners[0].actor.state_dict()))
        against_past = cfg.past_opponents > 0 and self.rng.random() < cfg.past_opponents
        if against_past:
            self.past.actor.load_state_dict(self.snapshots[self.rng.integers(len(self.snapshots))])
        players = [self.teams[0], self.past] if against_past else self.teams
        if self.collect is None:
            steps, rewards, _ = rollout(self.env, players, self.rng, self.obs, self.mirrors,
                                        cfg.sampling == "state")  # fmt: skip
        else:
            steps, rewards = self.collect(players)
        stats: dict[str, float] = {"blue_return": float(rewards.sum(0).mean()),
                                   "against_past": float(against_past)}  # fmt: skip
        if against_past:  # only the learner's side is on-policy
            data = [(steps[0], rewards)]
        elif cfg.shared_sides:  # both sides' experience trains the one network
            data = [(merge_steps(steps), np.concatenate([rewards, -rewards], axis=1))]
        else:
            data = [(steps[0], rewards), (steps[1], -rewards)]
        for i, (team_steps, team_rewards) in enumerate(data):
            update = _update(learners[i], self.opts[i], team_steps, team_rewards, cfg,
                             self.magnets[i], self.map_penalty)  # fmt: skip
            stats |= {f"{('blue', 'red')[i] if len(data) > 1 else 'shared'}/{k}": v
                      for k, v in update.items()}  # fmt: skip
        if iteration >= self.average_from:
            self.averages = self.averages or [ActorAverage(t) for t in learners]
            for learner, average in zip(learners, self.averages, strict=True):
                average.add(learner.actor)
            if iteration == cfg.iterations:  # training returns (and saves) the average
                for learner, average in zip(learners, self.averages, strict=True):
                    learner.actor.load_state_dict(average.team.actor.state_dict())
        if self.evaluate is not None:
            averaged = [self.averages[0].team, self.averages[-1].team] if self.averages else None
            stats |= self.evaluate(self.teams, iteration, averaged)
        self.done = iteration
        return stats
