import pytest

from fieldrl.apps.battles.baselines import play, random_policy, rush_policy, wilson_interval
from fieldrl.apps.battles.battlefield import Battlefield


def test_the_scripted_rush_beats_random_from_either_side():
    env = Battlefield(10, 10, 60, copies=10, horizon=40, attrition=0.5, seed=0)
    blue = play(env, rush_policy, random_policy, 20)
    red = play(env, random_policy, rush_policy, 20)
    assert blue["win_rate"] >= 0.9 and red["loss_rate"] >= 0.9
    assert blue["ci95_low"] <= blue["win_rate"] <= blue["ci95_high"]
    mirror = play(env, random_policy, random_policy, 20)
    assert mirror["win_rate"] + mirror["draw_rate"] + mirror["loss_rate"] == pytest.approx(1.0)


def test_wilson_interval():
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.404, abs=1e-3) and high == pytest.approx(0.596, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)
