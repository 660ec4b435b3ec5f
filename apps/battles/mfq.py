"""Mean-field Q-learning (Yang et al. 2018), the value-based baseline.

Each agent's Q(o, a, a_bar) sees its own observation o (its local state and neighbourhood
densities, the time left) and a_bar, the mean action its teammates in the same cell took
at the previous step; it acts by a Boltzmann policy over Q. The target is the mean-field
value v(o') = sum_a pi(a | o', a_bar') Q_target(o', a, a_bar'). Both teams learn at once
(self-play) from a replay of sampled agents' transitions; the reward is the team's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.battles.policy import (
    LocalStates,
    group_by_local_state,
    local_features,
    sample_actions,
)
from fieldrl.apps.battles.rollout import team_view

__all__ = ["MFQConfig", "MFQTeam", "MFQTrainer", "mfq_policy"]


@dataclass
class MFQConfig:
    iterations: int = 100
    lr: float = 1e-3
    gamma: float = 0.99
    hidden: int = 64
    temperature: float = 0.02  # Boltzmann temperature on Q (team rewards are ~0.01-0.1)
    agents_per_step: int = 256  # transitions sampled per team and step into the replay
    replay: int = 20_000
    batch: int = 256
    updates: int = 20  # gradient steps per rollout
    target_tau: float = 0.05


class MFQTeam(nn.Module):
    """Q(own features, previous mean action of cell-mates, time left) -> one value per action."""

    def __init__(self, env: Any, hidden: int) -> None:
        super().__init__()
        self.features = local_features(env)
        self.n_actions = env.n_actions
        self.q = nn.Sequential(
            nn.Linear(self.features.size + env.n_actions + 1, hidden),
            nn.Tanh(),
            nn.Linear(hidden, hidden),
            nn.Tanh(),
            nn.Linear(hidden, env.n_actions),
        )

    def observe(
        self,
        maps: torch.Tensor,
        time_left: torch.Tensor,
        states: LocalStates,
        mean_action: torch.Tensor,
    ) -> torch.Tensor:
        """``[K, inputs]`` per occupied (copy, local state); ``mean_action`` is ``[K, A]``."""
        copy_ = torch.from_numpy(states.copy)
        own = self.features(maps, copy_, torch.from_numpy(states.local))
        return torch.cat([own, mean_action, time_left[copy_][:, None]], 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.q(x)


def cell_mean_action(
    env: Any, state: Any, team: int, last: np.ndarray | None, states: LocalStates
) -> np.ndarray:
    """``[K, A]`` mean previous action of the alive teammates sharing each state's cell
    (uniform before the first step)."""
    k, a = states.size, env.n_actions
    if last is None:
        return np.full((k, a), 1.0 / a, np.float32)
    cells = env.map_dim
    cell_of = env.local_state(state)[:, team] // (env.n_local // cells)  # [B, N]
    alive = env.alive(state)[:, team]
    key = (np.arange(env.copies)[:, None] * cells + cell_of) * a + last
    counts = np.bincount(key[alive], minlength=env.copies * cells * a).reshape(-1, a)
    mean = counts / np.maximum(counts.sum(1, keepdims=True), 1)
    group_cell = states.copy * cells + states.local // (env.n_local // cells)
    return mean[group_cell].astype(np.float32)


def _act(
    team: MFQTeam,
    env: Any,
    state: Any,
    side: int,
    last: np.ndarray | None,
    temperature: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, torch.Tensor, LocalStates]:
    view = team_view(env.maps(state), side)
    time_left = torch.full((env.copies,), 1.0 - state.t / env.horizon)
    states = group_by_local_state(env.local_state(state)[:, side], env.n_local)
    mean_action = torch.from_numpy(cell_mean_action(env, state, side, last, states))
    obs = team.observe(view, time_left, states, mean_action)
    with torch.no_grad():
        probs = torch.softmax(team(obs) / temperature, -1).numpy()
    actions = sample_actions(probs, states.inverse, rng).reshape(env.copies, -1)
    return actions, obs, states


def mfq_policy(team: MFQTeam, temperature: float) -> Callable[..., np.ndarray]:
    """A trained MF-Q team as a cross-play policy (remembers its last actions per episode)."""
    last: list[np.ndarray | None] = [None]

    def act(env: Any, state: Any, side: int, rng: np.random.Generator) -> np.ndarray:
        if state.t == 0:
            last[0] = None
        actions, _, _ = _act(team, env, state, side, last[0], temperature, rng)
        last[0] = actions
        return actions

    return act


class _Replay:
    """A ring buffer of (obs, action, reward, next obs, next alive, next time) rows."""

    def __init__(self, capacity: int, width: int) -> None:
        self.obs = torch.zeros(capacity, width)
        self.next_obs = torch.zeros(capacity, width)
        self.action = torch.zeros(capacity, dtype=torch.long)
        self.reward = torch.zeros(capacity)
        self.cont = torch.zeros(capacity)  # 0 when the agent died or the episode ended
        self.size = self.head = 0

    def add(
        self,
        obs: torch.Tensor,
        action: torch.Tensor,
        reward: torch.Tensor,
        next_obs: torch.Tensor,
        cont: torch.Tensor,
    ) -> None:
        n, cap = len(obs), len(self.obs)
        idx = (self.head + torch.arange(n)) % cap
        self.obs[idx], self.action[idx], self.reward[idx] = obs, action, reward
        self.next_obs[idx], self.cont[idx] = next_obs, cont
        self.head = int((self.head + n) % cap)
        self.size = min(self.size + n, cap)

    def state(self) -> dict[str, Any]:
        return {
            "obs": self.obs,
            "next_obs": self.next_obs,
            "action": self.action,
            "reward": self.reward,
            "cont": self.cont,
            "size": self.size,
            "head": self.head,
        }

    def load(self, state: dict[str, Any]) -> None:
        for name in ("obs", "next_obs", "action", "reward", "cont"):
            getattr(self, name).copy_(state[name])
        self.size, self.head = int(state["size"]), int(state["head"])


def _update(
    team: MFQTeam,
    target: MFQTeam,
    opt: torch.optim.Optimizer,
    replay: _Replay,
    cfg: MFQConfig,
    gen: torch.Generator,
) -> float:
    total = 0.0
    for _ in range(cfg.updates):
        idx = torch.randint(0, replay.size, (cfg.batch,), generator=gen)
        with torch.no_grad():
            q_next = target(replay.next_obs[idx])
            v_next = (torch.softmax(q_next / cfg.temperature, -1) * q_next).sum(-1)
            y = replay.reward[idx] + cfg.gamma * replay.cont[idx] * v_next
        q = team(replay.obs[idx]).gather(1, replay.action[idx][:, None]).squeeze(1)
        loss = nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(team.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for p, tp in zip(team.parameters(), target.parameters(), strict=True):
                tp.lerp_(p, cfg.target_tau)
        total += loss.item()
    return total / cfg.updates


def _rollout(
    env: Any, teams: list[MFQTeam], cfg: MFQConfig, rng: np.random.Generator, replays: list[_Replay]
) -> float:
    """One episode on every copy; sampled agents' transitions go to each team's replay.
    Returns blue's mean return."""
    state = env.reset()
    last: list[np.ndarray | None] = [None, None]
    pending: list[Any] = [None, None]  # (obs rows, actions, agent ids, rewards) per team
    total = np.zeros(env.copies)
    for _ in range(env.horizon):
        actions = np.zeros(env.local_state(state).shape, np.int8)
        observed = []
        for side, team in enumerate(teams):
            acts, obs, states = _act(team, env, state, side, last[side], cfg.temperature, rng)
            actions[:, side] = acts
            observed.append((obs, states))
        for side in range(2):  # close the previous step's transitions with this observation
            if pending[side] is not None:
                obs_prev, act_prev, agents, reward = pending[side]
                obs, states = observed[side]
                alive = env.alive(state)[:, side].ravel()[agents]
                rows = states.inverse[agents]
                replays[side].add(
                    obs_prev,
                    act_prev,
                    reward,
                    obs[rows],
                    torch.from_numpy(alive.astype(np.float32)),
                )
        alive_now = env.alive(state)
        new_state, result = env.step(state, actions)
        total += result.reward
        for side in range(2):
            obs, states = observed[side]
            live = np.flatnonzero(alive_now[:, side].ravel())
            agents = rng.choice(live, min(cfg.agents_per_step, live.size), replace=False)
            reward = result.reward if side == 0 else -result.reward
            copies = agents // env.n
            pending[side] = (
                obs[states.inverse[agents]],
                torch.from_numpy(actions[:, side].ravel()[agents].astype(np.int64)),
                agents,
                torch.from_numpy(reward[copies]).float(),
            )
        last = [actions[:, 0], actions[:, 1]]
        state = new_state
    for side in range(2):  # the episode ends: no bootstrap
        obs_prev, act_prev, _, reward = pending[side]
        replays[side].add(obs_prev, act_prev, reward, obs_prev, torch.zeros(len(obs_prev)))
    return float(total.mean())


class MFQTrainer:
    """Self-play MF-Q for both teams, one rollout and its updates per :meth:`step`, as a
    :class:`fieldrl.training.Trainer`; its state includes the replays, so a resumed run
    continues exactly. ``teams`` are the two sides' Q-networks."""

    def __init__(self, env: Any, cfg: MFQConfig, seed: int = 0) -> None:
        self.env, self.cfg = env, cfg
        self.total, self.done = cfg.iterations, 0
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng, env.rng)
        self.gen = torch.Generator().manual_seed(seed)  # the replay's minibatches
        self.teams = [MFQTeam(env, cfg.hidden) for _ in range(2)]
        self.targets = [copy.deepcopy(t).requires_grad_(False) for t in self.teams]
        self.opts = [torch.optim.Adam(t.parameters(), lr=cfg.lr) for t in self.teams]
        width = self.teams[0].q[0].in_features
        self.replays = [_Replay(cfg.replay, width) for _ in range(2)]

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"iteration": self.done, "torch_gen": self.gen.get_state()}
        for i in range(2):
            state[f"team_{i}"] = self.teams[i].state_dict()
            state[f"target_{i}"] = self.targets[i].state_dict()
            state[f"opt_{i}"] = self.opts[i].state_dict()
            state[f"replay_{i}"] = self.replays[i].state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for i in range(2):
            self.teams[i].load_state_dict(state[f"team_{i}"])
            self.targets[i].load_state_dict(state[f"target_{i}"])
            self.opts[i].load_state_dict(state[f"opt_{i}"])
            self.replays[i].load(state[f"replay_{i}"])
        self.gen.set_state(state["torch_gen"])
        self.done = int(state["iteration"])

    def step(self) -> dict[str, float]:
        stats = {"blue_return": _rollout(self.env, self.teams, self.cfg, self.rng, self.replays)}
        for side in range(2):
            loss = _update(self.teams[side], self.targets[side], self.opts[side],
                           self.replays[side], self.cfg, self.gen)  # fmt: skip
            stats[f"{('blue', 'red')[side]}/td_loss"] = loss
        self.done += 1
        return stats
