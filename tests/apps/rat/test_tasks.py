from __future__ import annotations

import numpy as np
import pytest

from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.env import RatEnv


def _teleport(env: RatEnv, xy, z=None) -> None:
    qpos = env.body.data.qpos.copy()
    qpos[:2] = xy
    if z is not None:
        qpos[2] = z
    env.body.set_state(qpos)


def test_go_to_target_pays_once_on_arrival(rat_config):
    env = RatEnv(rat_config("go_to_target"))
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step(np.zeros(38))
    assert reward == 0 and not terminated and info["target_distance"] > 0.25
    _teleport(env, env.task.target[:2])
    _, reward, terminated, _, info = env.step(np.zeros(38))
    assert reward == 1.0 and terminated and info["success"]


def test_the_target_observation_is_egocentric(rat_config):
    env = RatEnv(rat_config("go_to_target"))
    obs, _ = env.reset(seed=2)
    target_in_torso = obs[-3:]
    distance = np.linalg.norm(env.task.target - env.body.torso_xpos)
    assert np.linalg.norm(target_in_torso) == pytest.approx(distance, rel=1e-4)


def test_two_tap_pays_only_for_a_second_tap_in_the_window(rat_config):
    env = RatEnv(rat_config("two_tap", duration=5.0))
    env.reset(seed=0)
    task, body = env.task, env.body
    touching = {"now": False}
    task._touching = lambda _body: touching["now"]  # drive the paws' contact directly

    def tap_after(seconds: float) -> float:
        for _ in range(round(seconds / 0.02) - 1):
            assert env.step(np.zeros(38))[1] == 0.0
        touching["now"] = True
        reward = env.step(np.zeros(38))[1]
        touching["now"] = False
        env.step(np.zeros(38))
        return reward

    assert tap_after(0.1) == 0.0  # first tap
    assert tap_after(0.3) == 0.0  # too soon: becomes the new first tap
    assert task.taps == 2
    assert tap_after(0.8 - 0.02) == 1.0  # 0.8 s after the previous onset
    assert body.time > 1.0


def test_bowl_pays_past_the_rim(rat_config):
    env = RatEnv(rat_config("bowl"))
    env.reset(seed=0)
    assert env.body.root_height < -0.05  # starts at the bottom
    _, reward, *_ = env.step(np.zeros(38))
    assert reward == 0
    _teleport(env, (0.55, 0.0), z=0.01)
    _, reward, terminated, _, info = env.step(np.zeros(38))
    assert reward == 1.0 and terminated and info["success"]


def test_bowl_terrain_differs_between_episodes(rat_config):
    env = RatEnv(rat_config("bowl"))
    env.reset(seed=0)
    first = env.body.model.hfield_data.copy()
    env.reset(seed=1)
    assert not np.array_equal(first, env.body.model.hfield_data)


def test_gaps_pay_forward_progress_and_end_in_a_gap(rat_config):
    env = RatEnv(rat_config("gaps"))
    env.reset(seed=0)
    task = env.task
    assert task.edges[0, 0] < env.body.root_xy[0] < task.edges[0, 1]
    gap_middle = (task.edges[0, 1] + task.edges[1, 0]) / 2
    x0 = env.body.root_xy[0]
    _teleport(env, (x0 + 0.005, 0.0))
    _, reward, terminated, *_ = env.step(np.zeros(38))
    assert reward > 0 and not terminated
    _teleport(env, (gap_middle, 0.0), z=-0.15)
    _, reward, terminated, *_ = env.step(np.zeros(38))
    assert terminated and reward == 0


def test_gap_platforms_are_solid_where_they_are_drawn(rat_config):
    """A rat dropped on a platform far down the corridor lands on it (the mocap boxes
    collide where they were moved)."""
    env = RatEnv(rat_config("gaps"))
    env.reset(seed=0)
    start, end = env.task.edges[5]
    _teleport(env, ((start + end) / 2, 0.0), z=0.03)
    for _ in range(25):
        env.step(np.zeros(38))
    assert env.body.root_height > -0.05


def test_gap_platforms_start_clear_of_the_rat_before_a_reset_places_them(rat_config):
    """A reset of MjData puts the mocap platforms at their compiled places, where the
    rat's reset runs ``mj_forward`` before the task lays the corridor out: piled on the rat
    they made about 3,000 contacts (2 s a reset with dm_control's solver settings)."""
    import mujoco

    body = RatEnv(rat_config("gaps")).body
    mujoco.mj_resetData(body.model, body.data)
    mujoco.mj_forward(body.model, body.data)
    assert body.data.ncon < 50


def test_bad_task_ranges_are_named():
    with pytest.raises(ValueError, match="target_distance"):
        RatConfig.model_validate({"task": {"name": "go_to_target", "target_distance": [0.9, 0.2]}})
    with pytest.raises(ValueError, match="whole multiple"):
        RatConfig.model_validate({"body": {"control_dt": 0.021}})
