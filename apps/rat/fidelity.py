"""dm_control's own rodent tasks (composer), for fidelity checks and speed comparisons.

``composer_env`` builds the 2020 virtual-rodent tasks as ``basic_rodent_2020`` does, with
the egocentric camera off (the example switches it on); the bowl still needs an OpenGL
context at every reset, which ``MUJOCO_GL=egl`` provides. ``compare_on_floor`` steps the
composer rat and :class:`~fieldrl.apps.rat.body.RatBody` from the same pose with the same
controls and returns how far their joint angles drift apart.
"""

from __future__ import annotations

import time

import numpy as np

__all__ = ["COMPOSER_TASKS", "compare_on_floor", "composer_env", "composer_speed"]

COMPOSER_TASKS = ("bowl", "gaps", "two_tap")
PHYSICS_DT, CONTROL_DT = 0.001, 0.02  # basic_rodent_2020


def composer_env(task: str, seed: int = 0):
    """A dm_control ``composer.Environment`` for ``task`` (camera off)."""
    import functools

    from dm_control import composer
    from dm_control.composer.variation import distributions
    from dm_control.locomotion.arenas import bowl, corridors, floors
    from dm_control.locomotion.props import target_sphere
    from dm_control.locomotion.tasks import corridors as corridor_tasks
    from dm_control.locomotion.tasks import escape, reach
    from dm_control.locomotion.walkers import rodent

    if task not in COMPOSER_TASKS:
        raise ValueError(f"unknown composer task {task!r}; choose from {', '.join(COMPOSER_TASKS)}")
    walker = rodent.Rat(observable_options={"egocentric_camera": {"enabled": False}})
    timing = {"physics_timestep": PHYSICS_DT, "control_timestep": CONTROL_DT}
    if task == "bowl":
        built = escape.Escape(walker=walker, arena=bowl.Bowl(size=(20.0, 20.0)), **timing)
        limit = 20
    elif task == "gaps":
        arena = corridors.GapsCorridor(
            platform_length=distributions.Uniform(0.4, 0.8),
            gap_length=distributions.Uniform(0.05, 0.2),
            corridor_width=2,
            corridor_length=40,
        )
        built = corridor_tasks.RunThroughCorridor(
            walker=walker,
            arena=arena,
            walker_spawn_position=(5, 0, 0),
            target_velocity=1.0,
            contact_termination=False,
            **timing,
        )
        limit = 30
    else:
        built = reach.TwoTouch(
            walker=walker,
            arena=floors.Floor(size=(10.0, 10.0)),
            target_builders=[functools.partial(target_sphere.TargetSphereTwoTouch, radius=0.025)],
            randomize_spawn_rotation=True,
            target_type_rewards=[25.0],
            shuffle_target_builders=False,
            target_area=(1.5, 1.5),
            **timing,
        )
        limit = 30
    walker.observables.egocentric_camera.enabled = False  # the tasks switch it on
    return composer.Environment(
        time_limit=limit, task=built, random_state=seed, strip_singleton_obs_buffer_dim=True
    )


def composer_speed(task: str, seconds: float) -> float:
    """Control steps a second of the composer task under random actions (resets included)."""
    env = composer_env(task)
    spec = env.action_spec()
    rng = np.random.default_rng(0)
    env.reset()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step = env.step(rng.uniform(spec.minimum, spec.maximum))
        steps += 1
        if step.last():
            env.reset()
    return steps / (time.perf_counter() - start)


def compare_on_floor(steps: int, seed: int = 0, warmup: int = 0) -> float:
    """Largest joint-angle difference (rad) between the composer rat on the two-tap task's
    floor and the lean body in the explore arena, from the same state under the same random
    controls, both at the composer's 1 ms physics step and with its solver settings.
    ``warmup`` random control steps of the composer rat come first, so the comparison can
    start from a moving state rather than the reset pose."""
    from fieldrl.apps.rat.config import RatConfig
    from fieldrl.apps.rat.env import RatEnv

    env = composer_env("two_tap", seed)
    # dm_control's reach task draws the walker's spawn rotation from numpy's global generator
    # (reach.py, _respawn_walker), so the spawn, and whether the flailing rat then bumps a
    # target sphere, followed whatever ran before in the process: draw it from the seed,
    # leaving the global generator as it was
    saved = np.random.get_state()
    np.random.seed(seed)
    try:
        env.reset()
    finally:
        np.random.set_state(saved)
    rng = np.random.default_rng(seed)
    for _ in range(warmup):
        env.step(rng.uniform(-1.0, 1.0, 38))
    physics = env.physics
    cfg = RatConfig.model_validate(
        {"body": {"physics_dt": PHYSICS_DT, "control_dt": CONTROL_DT, "dm_control_solver": True}}
    )
    body = RatEnv(cfg).body
    body.set_state(physics.data.qpos.copy(), physics.data.qvel.copy(), physics.data.act.copy())
    worst = 0.0
    for _ in range(steps):
        action = rng.uniform(-1.0, 1.0, 38)
        env.step(action)
        body.step(action)
        worst = max(worst, float(np.abs(env.physics.data.qpos[7:] - body.data.qpos[7:]).max()))
    return worst
