"""PettingZoo ``ParallelEnv`` view of one battlefield, for interoperability with other
MARL libraries (training uses the batched Battlefield directly: it is ~1000x faster).

Agents are ``blue_<i>`` and ``red_<i>``; each observes its own (row, col, health), scaled
to [0, 1], and the alive-agent maps of its own team and of the opponent (each normalised
by the team size), flattened; actions are Discrete(5) (stay, up, down, left, right).
Every agent receives its team's reward; a dead agent is terminated and leaves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from fieldrl.apps.battles.battlefield import Battlefield, BattleState

__all__ = ["BattleParallelEnv"]

TEAMS = ("blue", "red")


class BattleParallelEnv(ParallelEnv):
    metadata = {"name": "fieldrl_battle_v0", "render_modes": []}

    def __init__(self, height: int = 8, width: int = 8, agents_per_team: int = 10, **kwargs: Any):
        self._kwargs = dict(height=height, width=width, agents_per_team=agents_per_team, **kwargs)
        self.field = Battlefield(copies=1, **self._kwargs)
        n = agents_per_team
        self.possible_agents = [f"{team}_{i}" for team in TEAMS for i in range(n)]
        self._index = {a: divmod(k, n) for k, a in enumerate(self.possible_agents)}
        dim = 3 + 2 * self.field.cells
        self._obs_space = spaces.Box(0.0, 1.0, (dim,), np.float32)
        self._act_space = spaces.Discrete(5)
        self.agents: list[str] = []
        self.state_: BattleState | None = None

    def observation_space(self, agent: str) -> spaces.Box:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.field = Battlefield(copies=1, seed=seed, **self._kwargs)
        self.state_ = self.field.reset()
        self.agents = list(self.possible_agents)
        return self._observations(), {a: {} for a in self.agents}

    def _observations(self) -> dict[str, np.ndarray]:
        f, s = self.field, self.state_
        maps = f.counts(s)[0] / f.n  # [2, cells]
        rows, cols = np.divmod(s.cell[0], f.width)
        obs = {}
        for agent in self.agents:
            team, i = self._index[agent]
            own = [rows[team, i] / max(f.height - 1, 1), cols[team, i] / max(f.width - 1, 1),
                   s.health[0, team, i] / f.max_health]  # fmt: skip
            obs[agent] = np.concatenate([own, maps[team], maps[1 - team]]).astype(np.float32)
        return obs

    def step(self, actions: dict[str, int]):
        act = np.zeros((1, 2, self.field.n), np.int8)
        for agent, a in actions.items():
            team, i = self._index[agent]
            act[0, team, i] = a
        self.state_, result = self.field.step(self.state_, act)
        reward = float(result.reward[0])
        alive = self.state_.alive[0]
        done = bool(result.done[0])
        rewards, terms, truncs = {}, {}, {}
        for agent in self.agents:
            team, i = self._index[agent]
            rewards[agent] = reward if team == 0 else -reward
            terms[agent] = not alive[team, i] or (done and self.state_.t < self.field.horizon)
            truncs[agent] = done and self.state_.t >= self.field.horizon
        obs = self._observations()
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        return obs, rewards, terms, truncs, infos
