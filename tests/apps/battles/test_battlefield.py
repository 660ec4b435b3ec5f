import numpy as np
import pytest

from fieldrl.apps.battles.battlefield import Battlefield, BattleState
from fieldrl.errors import FieldrlError


def run(env, steps, seed=0):
    state, rng = env.reset(), np.random.default_rng(seed)
    for _ in range(steps):
        actions = rng.integers(0, 5, state.cell.shape).astype(np.int8)
        before = state.alive.sum(axis=2)
        state, result = env.step(state, actions)
        yield state, result, before


def test_population_is_conserved_minus_deaths_and_agents_stay_on_the_grid():
    env = Battlefield(6, 6, 80, copies=3, attrition=1.0, horizon=30, seed=1)
    total_losses = 0
    for state, result, before in run(env, 30):
        assert (state.alive.sum(axis=2) == before - result.losses).all()
        assert ((state.cell >= 0) & (state.cell < env.cells)).all()
        total_losses += result.losses.sum()
    assert total_losses > 0  # a crowded small grid does fight
    assert result.done.all()


def test_the_team_reward_is_zero_sum_and_scores_holding_and_kills():
    env = Battlefield(4, 6, 4, objective=(0, 0, 4, 2), kill_weight=0.0, seed=0)
    cell = np.array([[[0, 6, 12, 18], [5, 11, 17, 23]]], np.int32)  # blue on the objective
    state = BattleState(cell, np.full((1, 2, 4), 3, np.int8))
    _, result = env.step(state, np.zeros((1, 2, 4), np.int8))
    assert result.reward[0] == pytest.approx(1.0)  # all of blue holds, none of red
    swapped = BattleState(cell[:, ::-1].copy(), state.health.copy())
    _, mirror = env.step(swapped, np.zeros((1, 2, 4), np.int8))
    assert mirror.reward[0] == pytest.approx(-1.0)


def test_local_majority_wins_the_fight_and_the_dead_do_not_move():
    env = Battlefield(3, 3, 10, attrition=1.0, objective=(0, 0, 1, 1), seed=0)
    cell = np.zeros((1, 2, 10), np.int32) + 4  # everyone in the centre cell
    health = np.ones((1, 2, 10), np.int8)
    health[0, 1, 3:] = 0  # red has 3 alive, blue 10
    state, result = env.step(BattleState(cell, health), np.zeros((1, 2, 10), np.int8))
    assert result.losses[0, 1] == 3 and result.losses[0, 0] == 0
    moved, _ = env.step(state, np.full((1, 2, 10), 1, np.int8))  # everyone tries to go up
    assert (moved.cell[0, 1] == 4).all() and (moved.cell[0, 0] == 1).all()


def test_walls_stop_moves_and_bad_actions_are_named():
    env = Battlefield(2, 3, 1, objective=(0, 0, 1, 1))
    assert (env.neighbours[0] == [0, 0, 3, 0, 1]).all()  # stay, up (wall), down, left (wall), right
    state = env.reset()
    with pytest.raises(FieldrlError, match="actions: expected shape"):
        env.step(state, np.zeros((2, 2, 1), np.int8))
    with pytest.raises(FieldrlError, match="no cell on the grid"):
        Battlefield(4, 4, 2, objective=(10, 10, 1, 1))


def test_same_seed_same_battle():
    a = [r.reward.copy() for _, r, _ in run(Battlefield(5, 5, 30, attrition=1.0, seed=3), 10)]
    b = [r.reward.copy() for _, r, _ in run(Battlefield(5, 5, 30, attrition=1.0, seed=3), 10)]
    c = [r.reward.copy() for _, r, _ in run(Battlefield(5, 5, 30, attrition=1.0, seed=4), 10)]
    assert all((x == y).all() for x, y in zip(a, b, strict=True))
    assert any((x != y).any() for x, y in zip(a, c, strict=True))


def test_the_mirror_swaps_the_sides_and_commutes_with_moves():
    env = Battlefield(6, 8, 50, copies=2, seed=0)
    mirror = env.mirror()
    np.testing.assert_array_equal(mirror.cells[mirror.cells], np.arange(env.cells))
    np.testing.assert_array_equal(mirror.local[mirror.local], np.arange(env.n_local))
    # a move seen through the mirror lands on the mirror of the real move's cell
    for a in range(5):
        np.testing.assert_array_equal(
            env.neighbours[mirror.cells, a], mirror.cells[env.neighbours[:, mirror.actions[a]]]
        )
    state = env.reset()
    red_seen = mirror.cells[state.cell[:, 1]] % env.width
    assert red_seen.max() < env.width // 3  # red, reflected, starts where blue starts
    asymmetric = Battlefield(6, 8, 50, objective=(0, 0, 2, 2))
    with pytest.raises(FieldrlError, match="symmetric"):
        asymmetric.mirror()
