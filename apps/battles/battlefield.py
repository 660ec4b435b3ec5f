"""The battlefield: two teams on a grid, vectorized over agents and over parallel copies.

Each agent has a cell and a health; each step it moves (stay, up, down, left, right),
then every cell resolves combat from the local team counts: an agent is hit with
probability clip(attrition * (enemies - friends in its cell) / mean occupancy, 0, 1) and
loses one health; at zero it is dead. Teams score for holding the objective cells and
for the losses they inflict; red's reward is minus blue's (zero-sum at the team level).

State arrays are ``[copies, 2, agents]``: team 0 is blue, team 1 red.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fieldrl.errors import FieldrlError

__all__ = ["MOVES", "BattleState", "Battlefield", "Mirror", "StepResult"]

MOVES = np.array([(0, 0), (-1, 0), (1, 0), (0, -1), (0, 1)])  # stay, up, down, left, right


@dataclass
class BattleState:
    cell: np.ndarray  # [B, 2, N] int32, row * width + col
    health: np.ndarray  # [B, 2, N] int8, 0 = dead
    t: int = 0

    @property
    def alive(self) -> np.ndarray:
        return self.health > 0


@dataclass
class StepResult:
    reward: np.ndarray  # [B] blue's reward; red's is its negative
    done: np.ndarray  # [B] bool
    losses: np.ndarray  # [B, 2] agents lost this step


@dataclass(frozen=True)
class Mirror:
    """The left-right reflection of a battlefield, which swaps the teams' starting sides:
    red seen through it looks like blue, so one policy can play both sides."""

    cells: np.ndarray  # [cells] the reflected cell of each cell
    local: np.ndarray  # [n_local] the reflected local state of each local state
    actions: np.ndarray  # [5] left <-> right

    def full_state(self, full: np.ndarray) -> np.ndarray:
        """Reflect ``[..., 3 N]`` (row, col, health) agent features: col -> 1 - col."""
        out = full.reshape(*full.shape[:-1], -1, 3).copy()
        out[..., 1] = 1.0 - out[..., 1]
        return out.reshape(full.shape)


class Battlefield:
    """``reset()`` then ``step(state, actions)``; ``counts(state)`` gives the team maps."""

    def __init__(
        self,
        height: int,
        width: int,
        agents_per_team: int,
        copies: int = 1,
        *,
        max_health: int = 3,
        attrition: float = 0.5,  # as the presets (scenario.attrition)
        horizon: int = 100,
        objective: tuple[int, int, int, int] | None = None,
        objective_weight: float = 1.0,
        kill_weight: float = 1.0,
        seed: int = 0,
    ) -> None:
        if height < 2 or width < 3 or agents_per_team < 1 or copies < 1:
            raise FieldrlError("battlefield: need a grid of at least 2x3, agents and copies")
        self.height, self.width, self.n, self.copies = height, width, agents_per_team, copies
        self.cells = height * width
        self.max_health, self.attrition, self.horizon = max_health, attrition, horizon
        self.objective_weight, self.kill_weight = objective_weight, kill_weight
        rows, cols = np.divmod(np.arange(self.cells), width)
        r = np.clip(rows[:, None] + MOVES[:, 0], 0, height - 1)
        c = np.clip(cols[:, None] + MOVES[:, 1], 0, width - 1)
        self.neighbours = (r * width + c).astype(np.int32)  # [cells, 5]; walls stop moves
        top, left, h, w = objective or (height // 2 - 1, width // 2 - 1, 2, 2)
        self.objective = np.zeros(self.cells, bool)
        mask = (rows >= top) & (rows < top + h) & (cols >= left) & (cols < left + w)
        self.objective[mask] = True
        if not self.objective.any():
            raise FieldrlError(f"battlefield: objective {objective} has no cell on the grid")
        self.mean_occupancy = 2 * agents_per_team / self.cells
        self.rng = np.random.default_rng(seed)

    def reset(self) -> BattleState:
        """Blue starts in the left third of the grid, red in the right third, at full health."""
        third = max(self.width // 3, 1)
        shape = (self.copies, self.n)
        rows = self.rng.integers(0, self.height, (self.copies, 2, self.n))
        cols = np.stack(
            [
                self.rng.integers(0, third, shape),
                self.rng.integers(self.width - third, self.width, shape),
            ],
            axis=1,
        )
        cell = (rows * self.width + cols).astype(np.int32)
        health = np.full((self.copies, 2, self.n), self.max_health, np.int8)
        return BattleState(cell, health, 0)

    @property
    def n_local(self) -> int:
        """Local states an agent can be in: (cell, health)."""
        return self.cells * (self.max_health + 1)

    def local_state(self, state: BattleState) -> np.ndarray:
        """``[B, 2, N]`` local-state ids, cell * (max_health + 1) + health."""
        return state.cell * (self.max_health + 1) + state.health

    @property
    def map_dim(self) -> int:
        return self.cells

    n_actions = len(MOVES)

    def alive(self, state: BattleState) -> np.ndarray:
        return state.alive

    def maps(self, state: BattleState) -> np.ndarray:
        """``[B, 2, cells]`` alive agents per cell over the team's size (blue first)."""
        return self.counts(state) / self.n

    def mirror(self) -> Mirror:
        """The reflection; an error when the objective is not left-right symmetric."""
        rows, cols = np.divmod(np.arange(self.cells), self.width)
        cells = rows * self.width + (self.width - 1 - cols)
        if not (self.objective[cells] == self.objective).all():
            raise FieldrlError("battlefield: train.shared_sides needs an objective that is "
                               "symmetric under the left-right reflection")  # fmt: skip
        cell, health = np.divmod(np.arange(self.n_local), self.max_health + 1)
        local = cells[cell] * (self.max_health + 1) + health
        return Mirror(cells, local, np.array([0, 1, 2, 4, 3]))

    def local_feature_tables(self) -> tuple[np.ndarray, np.ndarray, float]:
        """Per local state: (row, col, health, on objective) scaled to [0, 1]; the cells it
        sees (its own and its four neighbours); the map-to-density scale (maps are shares
        of a team, densities are in units of the mean occupancy)."""
        local = np.arange(self.n_local)
        cell, health = np.divmod(local, self.max_health + 1)
        rows, cols = np.divmod(cell, self.width)
        static = np.stack([rows / max(self.height - 1, 1), cols / max(self.width - 1, 1),
                           health / self.max_health, self.objective[cell]], axis=1)  # fmt: skip
        return static, self.neighbours[cell].astype(np.int64), self.n / self.mean_occupancy

    def cell_positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``[cells, 2]`` (row, column) of each cell, ``[n_local]`` the cell of each local
        state and ``[actions, 2]`` each move's step (the map directions' tables)."""
        positions = np.stack(np.divmod(np.arange(self.cells), self.width), axis=1)
        return positions, np.arange(self.n_local) // (self.max_health + 1), MOVES

    @property
    def full_state_dim(self) -> int:
        return 2 * self.n * 3

    def full_state(self, state: BattleState) -> np.ndarray:
        """``[B, 2, 3 N]`` every agent's (row, col, health) scaled to [0, 1] (MAPPO's critic
        input: it grows with N)."""
        rows, cols = np.divmod(state.cell, self.width)
        parts = (rows / max(self.height - 1, 1), cols / max(self.width - 1, 1),
                 state.health / self.max_health)  # fmt: skip
        return np.stack(parts, axis=-1).astype(np.float32).reshape(self.copies, 2, -1)

    def counts(self, state: BattleState) -> np.ndarray:
        """Alive agents per ``[copy, team, cell]``."""
        index = np.arange(self.copies * 2).reshape(self.copies, 2, 1) * self.cells + state.cell
        flat = np.bincount(index.ravel(), state.alive.ravel(), self.copies * 2 * self.cells)
        return flat.reshape(self.copies, 2, self.cells)

    def step(self, state: BattleState, actions: np.ndarray) -> tuple[BattleState, StepResult]:
        """Move, fight, score. ``actions`` is ``[B, 2, N]`` in 0..4; dead agents' are ignored."""
        if actions.shape != state.cell.shape:
            raise FieldrlError(f"actions: expected shape {state.cell.shape}, got {actions.shape}")
        alive = state.alive
        moved = self.neighbours[state.cell, np.clip(actions, 0, 4)]
        cell = np.where(alive, moved, state.cell).astype(np.int32)
        moved_state = BattleState(cell, state.health, state.t)
        counts = self.counts(moved_state)
        advantage = (counts[:, ::-1] - counts) / self.mean_occupancy  # enemies - friends
        hit_prob = np.clip(self.attrition * advantage, 0.0, 1.0)
        p = np.take_along_axis(hit_prob, cell, axis=2)
        hit = alive & (self.rng.random(cell.shape, dtype=np.float32) < p)
        health = (state.health - hit).astype(np.int8)
        died = alive & (health <= 0)
        losses = died.sum(axis=2)
        new = BattleState(cell, np.maximum(health, 0).astype(np.int8), state.t + 1)
        held = (new.alive & self.objective[cell]).sum(axis=2) / self.n
        reward = (
            self.objective_weight * (held[:, 0] - held[:, 1])
            + self.kill_weight * (losses[:, 1] - losses[:, 0]) / self.n
        )
        survivors = new.alive.any(axis=2)
        done = (new.t >= self.horizon) | ~survivors.all(axis=1)
        return new, StepResult(reward.astype(np.float64), done, losses)
