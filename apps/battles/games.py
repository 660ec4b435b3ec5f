"""Two-team population games with exact solutions: the fixtures that show whether a
learner found the equilibrium.

Blue's population distribution over k pure strategies is mu, red's is nu; blue earns
mu^T A nu and red its negative (zero-sum at the team level). A constrained game caps the
share of a team on each strategy. Exploitability is the duality gap,

    max over feasible mu' of mu'^T A nu  -  min over feasible nu' of mu^T A nu',

never negative and zero exactly at an equilibrium. N agents sampled from the exact
equilibrium still show a gap of order 1/sqrt(N) (``noise_floor`` measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fieldrl.apps.battles.battlefield import StepResult
from fieldrl.errors import FieldrlError

__all__ = [
    "GAMES",
    "MatrixGame",
    "PopulationGame",
    "PopulationState",
    "lq_game",
    "tv_distance",
]


@dataclass(frozen=True)
class MatrixGame:
    """A zero-sum two-team population game with payoff ``payoff[i, j]`` to blue."""

    name: str
    payoff: np.ndarray
    blue_cap: np.ndarray | None = None  # at most this share of blue on each strategy
    red_cap: np.ndarray | None = None

    def __post_init__(self) -> None:
        k_blue, k_red = self.payoff.shape
        for cap, k, team in ((self.blue_cap, k_blue, "blue"), (self.red_cap, k_red, "red")):
            if cap is not None and (cap.shape != (k,) or cap.sum() < 1 or (cap < 0).any()):
                raise FieldrlError(f"{self.name}: {team}_cap must be {k} shares summing to >= 1")

    def value(self, mu: np.ndarray, nu: np.ndarray) -> float:
        """Blue's payoff mu^T A nu."""
        return float(mu @ self.payoff @ nu)

    def exploitability(self, mu: np.ndarray, nu: np.ndarray) -> float:
        """The duality gap: what the best feasible deviations of the two teams gain."""
        best_blue = _best_share(self.payoff @ nu, self.blue_cap) @ (self.payoff @ nu)
        best_red = _best_share(-(mu @ self.payoff), self.red_cap) @ (mu @ self.payoff)
        return float(best_blue - best_red)

    def equilibrium(self) -> tuple[np.ndarray, np.ndarray, float]:
        """The exact (mu*, nu*, value) by linear programming (each team's maximin)."""
        mu, value = _maximin(self.payoff, self.blue_cap, self.red_cap)
        nu, neg_value = _maximin(-self.payoff.T, self.red_cap, self.blue_cap)
        if abs(value + neg_value) > 1e-6:
            raise FieldrlError(f"{self.name}: the two LPs disagree ({value} vs {-neg_value})")
        return mu, nu, value

    def noise_floor(self, n_agents: int, samples: int = 200, seed: int = 0) -> float:
        """Mean exploitability of ``n_agents`` per team drawn from the exact equilibrium."""
        mu, nu, _ = self.equilibrium()
        rng = np.random.default_rng(seed)
        gaps = [
            self.exploitability(rng.multinomial(n_agents, mu) / n_agents,
                                rng.multinomial(n_agents, nu) / n_agents)
            for _ in range(samples)
        ]  # fmt: skip
        return float(np.mean(gaps))


def _best_share(gain: np.ndarray, cap: np.ndarray | None) -> np.ndarray:
    """The feasible distribution maximising ``gain . share``: fill the best strategies
    first, each up to its cap."""
    share = np.zeros_like(gain, dtype=float)
    if cap is None:
        share[np.argmax(gain)] = 1.0
        return share
    left = 1.0
    for i in np.argsort(-gain, kind="stable"):
        share[i] = min(cap[i], left)
        left -= share[i]
    return share


def _maximin(
    payoff: np.ndarray, own_cap: np.ndarray | None, other_cap: np.ndarray | None
) -> tuple[np.ndarray, float]:
    """max over own mu of min over the other's feasible nu of mu^T payoff nu.

    The inner minimum over {nu >= 0, sum nu = 1, nu <= c} is replaced by its LP dual,
    max t - c.s subject to t - s_j <= (payoff^T mu)_j, s >= 0.
    Variables: [mu (k), t, s (m)].
    """
    k, m = payoff.shape
    cap = np.ones(m) if other_cap is None else other_cap
    objective = np.concatenate([np.zeros(k), [-1.0], cap])  # minimise -(t - c.s)
    a_ub = np.hstack([-payoff.T, np.ones((m, 1)), -np.eye(m)])
    a_eq = np.concatenate([np.ones(k), [0.0], np.zeros(m)])[None]
    own = np.ones(k) if own_cap is None else own_cap
    bounds = [(0.0, float(c)) for c in own] + [(None, None)] + [(0.0, None)] * m
    from scipy.optimize import linprog

    result = linprog(objective, a_ub, np.zeros(m), a_eq, [1.0], bounds, method="highs")
    if not result.success:
        raise FieldrlError(f"equilibrium LP failed: {result.message}")
    mu = np.clip(result.x[:k], 0.0, None)
    return mu / mu.sum(), float(-result.fun)


def tv_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Total-variation distance between two distributions."""
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


def lq_game(
    levels: int = 21, q_blue: float = 2.0, q_red: float = 2.0, coupling: float = 1.0,
    pull_blue: float = 0.5, pull_red: float = 0.3,
) -> tuple[MatrixGame, tuple[float, float]]:  # fmt: skip
    """A linear-quadratic team game on the action grid a in [-1, 1] (``levels`` points):

        J(mu, nu) = E[-q_b/2 a^2 + d_b a] - E[-q_r/2 b^2 + d_r b] + c E[a] E[b],

    blue maximising, red minimising (a of blue agents ~ mu, b of red ~ nu). J is bilinear
    in (mu, nu), so it is a matrix game; in continuous actions its saddle point solves
    -q_b x + c y + d_b = 0, c x + q_r y - d_r = 0 (returned as the closed form)."""
    a = np.linspace(-1.0, 1.0, levels)
    payoff = (
        (-0.5 * q_blue * a**2 + pull_blue * a)[:, None]
        - (-0.5 * q_red * a**2 + pull_red * a)[None, :]
        + coupling * np.outer(a, a)
    )
    x, y = np.linalg.solve(np.array([[-q_blue, coupling], [coupling, q_red]]),
                           np.array([-pull_blue, pull_red]))  # fmt: skip
    return MatrixGame("lq", payoff), (float(x), float(y))


RPS = np.array([[0.0, -1.0, 1.0], [1.0, 0.0, -1.0], [-1.0, 1.0, 0.0]])
GAMES = {
    "rps": MatrixGame("rps", RPS),
    # the weighted RPS of the reference: mu* = (0.545, 0.273, 0.182), value 0.545
    "weighted_rps": MatrixGame(
        "weighted_rps", np.array([[0.0, -1.0, 2.0], [4.0, 0.0, -2.0], [-3.0, 6.0, 0.0]])
    ),
    # RPS where at most 20% of blue may play rock (an arms-control constraint)
    "constrained_rps": MatrixGame("constrained_rps", RPS, blue_cap=np.array([0.2, 1.0, 1.0])),
    "lq": lq_game()[0],
}


class PopulationGame:
    """A matrix game played by two finite populations, vectorized over copies.

    An agent's local state is the strategy it played last; each step it picks the
    strategy it plays next. Blue's reward is mu^T A nu of the new empirical distributions;
    the episode lasts ``horizon`` steps. A capped game enforces its caps: agents beyond a
    strategy's cap are moved, at random, to strategies with room (the rule binds the team,
    whatever its agents choose).
    """

    def __init__(
        self, game: MatrixGame, agents_per_team: int, copies: int = 1, horizon: int = 8,
        seed: int = 0,
    ) -> None:  # fmt: skip
        self.game, self.n, self.copies, self.horizon = game, agents_per_team, copies, horizon
        self.k = game.payoff.shape[0]
        if game.payoff.shape != (self.k, self.k):
            raise FieldrlError(f"{game.name}: a population game needs a square payoff matrix")
        self.n_local = self.n_actions = self.map_dim = self.k
        self.rng = np.random.default_rng(seed)

    def reset(self) -> PopulationState:
        strategy = self.rng.integers(0, self.k, (self.copies, 2, self.n)).astype(np.int32)
        return PopulationState(strategy, 0)

    def local_state(self, state: PopulationState) -> np.ndarray:
        return state.strategy

    def alive(self, state: PopulationState) -> np.ndarray:
        return np.ones(state.strategy.shape, bool)

    def maps(self, state: PopulationState) -> np.ndarray:
        """``[B, 2, k]`` empirical distributions (blue first)."""
        one_hot = np.eye(self.k)[state.strategy]  # [B, 2, N, k]
        return one_hot.mean(axis=2)

    def local_feature_tables(self) -> tuple[np.ndarray, None, float]:
        """One-hot of the strategy played last; no neighbourhood."""
        return np.eye(self.k), None, 1.0

    @property
    def full_state_dim(self) -> int:
        return 2 * self.n

    def full_state(self, state: PopulationState) -> np.ndarray:
        """``[B, 2, N]`` every agent's strategy scaled to [0, 1]."""
        return (state.strategy / max(self.k - 1, 1)).astype(np.float32)

    def step(
        self, state: PopulationState, actions: np.ndarray
    ) -> tuple[PopulationState, StepResult]:
        strategy = actions.astype(np.int32)
        for team, cap in enumerate((self.game.blue_cap, self.game.red_cap)):
            if cap is not None:
                self._enforce(strategy[:, team], cap)
        new = PopulationState(strategy, state.t + 1)
        dist = self.maps(new)
        reward = np.einsum("bi,ij,bj->b", dist[:, 0], self.game.payoff, dist[:, 1])
        done = np.full(self.copies, new.t >= self.horizon)
        return new, StepResult(reward, done, np.zeros((self.copies, 2), np.int64))

    def _enforce(self, strategy: np.ndarray, cap: np.ndarray) -> None:
        """Move agents over a cap, in place (``strategy`` is ``[B, N]``)."""
        limit = np.floor(cap * self.n + 1e-9).astype(np.int64)
        for row in strategy:
            counts = np.bincount(row, minlength=self.k)
            over = counts - limit
            if (over <= 0).all():
                continue
            movers = np.concatenate([
                self.rng.choice(np.flatnonzero(row == i), over[i], replace=False)
                for i in np.flatnonzero(over > 0)
            ])  # fmt: skip
            room = np.clip(-over, 0, None)
            targets = self.rng.permutation(np.repeat(np.arange(self.k), room))[: movers.size]
            row[movers] = targets


@dataclass
class PopulationState:
    strategy: np.ndarray  # [B, 2, N]
    t: int = 0
