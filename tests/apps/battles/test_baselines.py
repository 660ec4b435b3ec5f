import numpy as np

from fieldrl.apps.battles.baselines import (
    focus_policy,
    play,
    random_policy,
    rush_policy,
)
from fieldrl.apps.battles.battlefield import Battlefield


def test_the_scripted_rush_beats_random_from_either_side():
    env = Battlefield(10, 10, 60, copies=10, horizon=40, attrition=0.5, seed=0)
    blue = play(env, rush_policy, random_policy, 20)
    red = play(env, random_policy, rush_policy, 20)
    assert blue["win_rate"] >= 0.9 and red["loss_rate"] >= 0.9
    assert blue["ci95_low"] <= blue["win_rate"] <= blue["ci95_high"]
    # a battle is a draw when the mean reward per step is within the margin
    assert play(env, rush_policy, random_policy, 20, draw_margin=10.0)["draw_rate"] == 1.0
    assert play(env, random_policy, random_policy, 20, draw_margin=0.0)["draw_rate"] < 0.5


def test_focus_fire_beats_the_rush_it_starts_as():
    env = Battlefield(12, 12, 200, copies=10, horizon=40, attrition=0.5, seed=0)
    assert play(env, focus_policy, rush_policy, 20)["win_rate"] >= 0.9
    assert play(env, rush_policy, focus_policy, 20)["loss_rate"] >= 0.9
    state, rng = env.reset(), np.random.default_rng(0)
    while state.t < 6:
        state, _ = env.step(state, np.stack([rush_policy(env, state, t, rng) for t in (0, 1)], 1))
    objective = np.flatnonzero(env.objective)
    target = objective[np.argmax(env.counts(state)[:, 1][:, objective], axis=1)]
    moved = env.neighbours[state.cell[:, 0], focus_policy(env, state, 0, rng)]

    def distance(cells):
        (r, c), (tr, tc) = np.divmod(cells, 12), np.divmod(target[:, None], 12)
        return np.abs(r - tr) + np.abs(c - tc)

    assert (distance(moved) == np.maximum(distance(state.cell[:, 0]) - 1, 0)).all()
