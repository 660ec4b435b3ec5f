"""The lean body against dm_control's own rodent tasks (composer)."""

import numpy as np
import pytest

from fieldrl.apps.rat.fidelity import COMPOSER_TASKS, compare_on_floor, composer_env


def test_the_lean_body_moves_like_dm_controls_composer_rat_from_rest():
    """Same pose, same controls, dm_control's solver settings: the same joint angles."""
    assert compare_on_floor(5) < 1e-6


@pytest.mark.parametrize("seed", [0, 1])
def test_the_lean_body_stays_with_dm_controls_rat_from_a_moving_state(seed):
    """After 1 s of random controls (a moving, tumbling rat), 0.5 s more stay within 1e-3 rad
    (without dm_control's compiler mass floors the root frame is massless: 1e-2 rad)."""
    assert compare_on_floor(25, seed=seed, warmup=50) < 1e-3


def test_the_comparison_does_not_follow_numpys_global_generator():
    """dm_control's reach task spawns the rat at a rotation drawn from numpy's global
    generator: a test that ran before (SB3 seeds it) once turned this comparison into a
    0.08 rad miss. The comparison now draws it from its own seed and restores the state."""
    results = []
    for before in (3, 20):
        np.random.seed(before)
        results.append(compare_on_floor(5, seed=0, warmup=10))
        assert np.random.get_state()[1][0] == np.random.RandomState(before).get_state()[1][0]
    assert results[0] == results[1]


@pytest.mark.parametrize("task", COMPOSER_TASKS)
def test_dm_controls_tasks_build_offline_with_the_camera_off(task):
    env = composer_env(task)
    env.reset()
    step = env.step(np.zeros(38))
    assert "walker/egocentric_camera" not in step.observation
    assert np.isfinite(step.reward)
