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
from typing import Any, Literal

import numpy as np
import torch
from torch import nn

from fieldrl.apps.battles.battlefield import Mirror
from fieldrl.apps.battles.policy import (
    LocalCritic,
    LocalStates,
    MeanFieldActor,
    MeanFieldCritic,
    group_by_local_state,
    local_features,
    make_actor,
    sample_actions,
    sample_steering,
)
from fieldrl.errors import FieldrlError

__all__ = [
    "MFMAPPOConfig",
    "MFMAPPOTrainer",
    "Observation",
    "Step",
    "Team",
    "merge_steps",
    "rollout",
    "team_policy",
]


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
    critic: Literal["mean_field", "full_state", "local"] = "mean_field"
    # magnetic mirror descent: a KL pull towards a frozen copy of the actor (the magnet),
    # refreshed every magnet_every iterations. 0 switches it off.
    magnet: float = 0.0
    magnet_every: int = 20
    anneal_lr: bool = False  # linearly to zero over the iterations
    gradient_penalty: float = 0.0  # lambda on |d logits / d maps|^2
    # one network plays both sides, red through the battlefield's mirror (symmetric self-play)
    shared_sides: bool = False
    center_advantages: bool = False
    # the returned actor is the uniform average of the actors after the last
    # average_tail * iterations updates; 0 returns the last actor
    average_tail: float = 0.0
    # "state": one action draw per occupied local state, so the agents sharing it move as one
    # block (population-level exploration); "agent": every agent draws its own
    sampling: Literal["agent", "state"] = "agent"
    # the actor also reads the directions to each team's centre and densest cell off the maps
    directions: bool = False
    # share of iterations (shared_sides only) in which the learner plays blue against a frozen
    # snapshot of its own past actor, kept every snapshot_every iterations, and learns from
    # blue's side only (fictitious self-play: a fixed opponent can be exploited, a mirror not)
    past_opponents: float = 0.0
    snapshot_every: int = 10
    # a team-level steering head (see MeanFieldActor), trained by PPO on the team advantage
    # with its own entropy bonus
    steering: bool = False
    steer_entropy: float = 0.01


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
    env: Any, teams: list[Team], rng: np.random.Generator, obs: Observation = Observation(),
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


def _team_targets(steps: list[Step], rewards: np.ndarray, cfg: MFMAPPOConfig) -> list[_Targets]:
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


def _agent_targets(steps: list[Step], rewards: np.ndarray, cfg: MFMAPPOConfig,
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
            cfg: MFMAPPOConfig, magnet: MeanFieldActor | None) -> dict[str, float]:  # fmt: skip
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
            if cfg.gradient_penalty > 0:
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
                + cfg.gradient_penalty * penalty + cfg.value_coef * value_loss
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
    with ``shared_sides``)."""

    def __init__(
        self,
        env: Any,
        cfg: MFMAPPOConfig,
        seed: int = 0,
        evaluate: Callable[[list[Team], int, list[Team] | None], dict[str, float]] | None = None,
        obs: Observation = Observation(),
        collect: Callable[[list[Team]], tuple[list[list[Step]], np.ndarray]] | None = None,
    ) -> None:
        if cfg.past_opponents > 0 and not cfg.shared_sides:
            raise FieldrlError("train.past_opponents needs one network for both sides "
                               "(train.shared_sides on a battlefield)")  # fmt: skip
        self.env, self.cfg, self.evaluate, self.obs, self.collect = env, cfg, evaluate, obs, collect
        self.total, self.done = cfg.iterations, 0
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng, env.rng)
        self.mirrors = team_mirrors(env, cfg.shared_sides)
        self.learners = [
            Team(env, cfg.hidden, cfg.critic, cfg.directions, cfg.steering)
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
                             self.magnets[i])  # fmt: skip
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


def team_policy(
    model: Team, obs: Observation = Observation(), shared_sides: bool = False,
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
