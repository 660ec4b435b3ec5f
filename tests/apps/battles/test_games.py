import numpy as np
import pytest

from fieldrl.apps.battles.games import GAMES, MatrixGame, PopulationGame, lq_game, tv_distance
from fieldrl.errors import FieldrlError


def test_weighted_rps_equilibrium_matches_the_reference_fixture():
    mu, nu, value = GAMES["weighted_rps"].equilibrium()
    np.testing.assert_allclose(mu, [0.545, 0.273, 0.182], atol=1e-3)
    np.testing.assert_allclose(nu, [0.338, 0.260, 0.403], atol=1e-3)
    assert value == pytest.approx(0.545, abs=1e-3)


@pytest.mark.parametrize("name", sorted(GAMES))
def test_exact_equilibrium_is_unexploitable_and_everything_else_is_not(name):
    game = GAMES[name]
    mu, nu, value = game.equilibrium()
    assert game.exploitability(mu, nu) == pytest.approx(0.0, abs=1e-7)
    assert game.value(mu, nu) == pytest.approx(value, abs=1e-7)
    rng = np.random.default_rng(0)
    k = game.payoff.shape[0]
    for _ in range(50):
        p, q = rng.dirichlet(np.ones(k)), rng.dirichlet(np.ones(k))
        if game.blue_cap is not None:
            p = np.minimum(p, game.blue_cap)
            p[np.argmax(game.blue_cap - p)] += 1 - p.sum()
        assert game.exploitability(p, q) >= -1e-9
    pure = np.eye(k)[0]
    assert game.exploitability(pure if game.blue_cap is None else mu, np.eye(k)[1]) > 0.1


def test_the_finite_population_noise_floor_is_about_five_over_root_n():
    game = GAMES["weighted_rps"]
    for n in (1_000, 10_000):
        assert 2.5 / np.sqrt(n) < game.noise_floor(n) < 10 / np.sqrt(n)


def test_constrained_game_respects_its_cap_and_the_best_response_fills_in_order():
    game = GAMES["constrained_rps"]
    mu, nu, _ = game.equilibrium()
    assert mu[0] <= 0.2 + 1e-9 and mu.sum() == pytest.approx(1.0)
    # against all-scissors blue wants rock, capped at 0.2; the rest goes to its next best
    gap = game.exploitability(np.array([0.2, 0.4, 0.4]), np.eye(3)[2])
    scissors = game.payoff @ np.eye(3)[2]
    best = 0.2 * scissors[0] + 0.8 * max(scissors[1], scissors[2])
    red_best = min(np.array([0.2, 0.4, 0.4]) @ game.payoff)
    assert gap == pytest.approx(best - red_best)
    with pytest.raises(FieldrlError, match="blue_cap"):
        MatrixGame("bad", game.payoff, blue_cap=np.array([0.1, 0.1, 0.1]))


def test_tv_distance():
    assert tv_distance([1, 0, 0], [0, 1, 0]) == 1.0
    assert tv_distance([0.5, 0.5], [0.5, 0.5]) == 0.0


def test_lq_game_equilibrium_is_the_closed_form_saddle_up_to_the_grid():
    levels = 41
    game, (x, y) = lq_game(levels=levels, pull_blue=0.7, pull_red=-0.4)
    mu, nu, _ = game.equilibrium()
    grid = np.linspace(-1, 1, levels)
    step = grid[1] - grid[0]
    assert abs(mu @ grid - x) <= step and abs(nu @ grid - y) <= step
    assert game.exploitability(mu, nu) == pytest.approx(0.0, abs=1e-7)


def test_a_capped_game_enforces_its_caps_on_the_agents():
    game = GAMES["constrained_rps"]  # at most 20% of blue on rock
    env = PopulationGame(game, 101, copies=3, horizon=2, seed=0)
    state = env.reset()
    everyone_rock = np.zeros((3, 2, 101), np.int8)
    state, _ = env.step(state, everyone_rock)
    blue = env.maps(state)[:, 0]
    assert (blue[:, 0] <= 0.2 + 1e-9).all() and np.allclose(blue.sum(1), 1)
    assert (env.maps(state)[:, 1, 0] == 1).all()  # red is not capped
