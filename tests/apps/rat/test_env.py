from __future__ import annotations

import copy

import numpy as np
import pytest
from dm_control.mujoco import Physics, wrapper
from gymnasium.utils.env_checker import check_env

from fieldrl.apps.rat.env import RatEnv

TASKS = ["explore", "go_to_target", "two_tap", "bowl", "gaps"]


@pytest.mark.parametrize("task", TASKS)
def test_every_task_passes_gymnasiums_checker(rat_config, task):
    env = RatEnv(rat_config(task))
    check_env(env, skip_render_check=True)
    assert env.action_space.shape == (38,)
    obs, _ = env.reset(seed=1)
    assert obs.shape == env.observation_space.shape and np.isfinite(obs).all()


def test_same_seed_same_trajectory(rat_config):
    def run(seed: int) -> np.ndarray:
        env = RatEnv(rat_config("go_to_target"))
        env.reset(seed=seed)
        rng = np.random.default_rng(0)
        out = [env.step(rng.uniform(-1, 1, 38))[0] for _ in range(30)]
        return np.array(out)

    a, b = run(3), run(3)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, run(4))


def test_the_lean_step_matches_dm_controls_physics(rat_config):
    """The wrapper's substepping and control handling do what dm_control's Physics does
    with the same model: same controls, same states."""
    env = RatEnv(rat_config("explore"))
    env.reset(seed=0)
    body = env.body
    physics = Physics.from_model(wrapper.MjModel(copy.copy(body.model)))
    physics.data.qpos[:] = body.data.qpos
    physics.forward()
    rng = np.random.default_rng(0)
    for _ in range(20):
        action = rng.uniform(-1, 1, 38)
        body.step(action)
        physics.set_control(action)
        physics.step(nstep=body.substeps)
    np.testing.assert_allclose(physics.data.qpos, body.data.qpos, atol=1e-6)
    assert np.linalg.norm(body.data.qpos[7:] - body.model.qpos0[7:]) > 0.1  # it moved


def test_ground_contacts_tell_paws_from_elbows_and_ignore_the_tail(rat_config):
    env = RatEnv(rat_config("explore"))
    env.reset(seed=0)
    body = env.body
    body.step(np.zeros(38))
    for _ in range(40):  # settle
        body.step(np.zeros(38))
    paws, elsewhere = body.ground_contacts()
    assert paws.shape == (4,)
    qpos = body.data.qpos.copy()
    qpos[2] = 0.5  # lifted clear of the floor
    body.set_state(qpos)
    assert not body.ground_contacts()[0].any() and not body.ground_contacts()[1]
    tail = [g for g in range(body.model.ngeom) if body._paw_of_geom[g] == -3]
    paw = [g for g in range(body.model.ngeom) if body._paw_of_geom[g] == 2]
    assert len(tail) > 10 and paw  # the 30 caudal vertebrae; the left hind paw's geoms


def test_absl_never_closes_the_processes_stderr():
    """absl's handler closed the stream it was bound to at import when logging shut down
    (a server's dictConfig) under a swapped sys.stderr: pytest's capture, in `make test`.
    The app points it at sys.__stderr__, which absl never closes."""
    import io
    import sys

    import absl.logging

    handler = absl.logging.get_absl_handler().python_handler
    assert handler.stream is sys.__stderr__
    real, sys.stderr = sys.stderr, io.StringIO()
    try:
        handler.close()  # what logging.shutdown() does to it
    finally:
        sys.stderr = real
    assert not sys.__stderr__.closed
