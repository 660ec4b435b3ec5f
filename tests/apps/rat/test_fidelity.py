"""The lean body against dm_control's own rodent tasks (composer)."""

import numpy as np
import pytest

from fieldrl.apps.rat.fidelity import COMPOSER_TASKS, compare_on_floor, composer_env


def test_the_lean_body_moves_like_dm_controls_composer_rat():
    """Same pose, same controls, dm_control's solver settings: the same joint angles
    (chaos amplifies float differences later: 5 control steps are 0.1 s)."""
    assert compare_on_floor(5) < 1e-3


@pytest.mark.parametrize("task", COMPOSER_TASKS)
def test_dm_controls_tasks_build_offline_with_the_camera_off(task):
    env = composer_env(task)
    env.reset()
    step = env.step(np.zeros(38))
    assert "walker/egocentric_camera" not in step.observation
    assert np.isfinite(step.reward)
