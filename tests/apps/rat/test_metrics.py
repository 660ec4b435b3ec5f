from __future__ import annotations

import numpy as np
import pytest

from fieldrl.apps.rat import metrics

FPS = 50.0


def test_a_pure_3hz_gait_peaks_at_3hz_with_duty_factor_half_and_alternation():
    t = np.arange(0, 10, 1 / FPS)
    left = np.sin(2 * np.pi * 3 * t)
    right = np.sin(2 * np.pi * 3 * t + np.pi)
    assert metrics.gait_peak(left, FPS) == pytest.approx(3.0, abs=0.1)
    assert metrics.duty_factor(left > 0) == pytest.approx(0.5, abs=0.02)
    assert metrics.left_right_phase(left, right) == pytest.approx(0.5, abs=0.02)
    assert metrics.left_right_phase(left, left) == pytest.approx(0.0, abs=0.02)
    quarter = np.sin(2 * np.pi * 3 * t - np.pi / 2)  # right lags a quarter cycle
    assert metrics.left_right_phase(left, quarter) == pytest.approx(0.25, abs=0.02)


def test_flat_or_short_signals_have_no_peak():
    assert np.isnan(metrics.gait_peak(np.ones(100), FPS))
    assert np.isnan(metrics.gait_peak(np.arange(4.0), FPS))


def test_wasserstein_of_a_shift_is_the_shift():
    x = np.random.default_rng(0).normal(size=2000)
    assert metrics.wasserstein_1d(x, x + 0.3) == pytest.approx(0.3, abs=1e-9)
    per = metrics.wasserstein_per_joint(np.c_[x, x], np.c_[x, x + 1.0])
    np.testing.assert_allclose(per, [0.0, 1.0], atol=1e-9)


def test_jerk_is_zero_for_a_parabola_and_grows_with_wiggle():
    t = np.arange(0, 2, 1 / FPS)[:, None]
    assert metrics.jerk(t**2, FPS) == pytest.approx(0.0, abs=1e-6)
    assert metrics.jerk(np.sin(2 * np.pi * 5 * t), FPS) > metrics.jerk(np.sin(2 * np.pi * t), FPS)


def test_energy_and_control_change():
    a = np.array([[1.0, -1.0], [1.0, -1.0]])
    assert metrics.energy(a) == 1.0
    assert metrics.control_change(a) == 0.0
    assert metrics.control_change(np.array([[0.0], [1.0], [0.0]])) == 1.0


def test_coverage_wall_time_bouts_and_rearing():
    corners = np.array([[-0.95, -0.95], [0.95, 0.95]])
    assert metrics.coverage(corners, 1.0, cells=10) == pytest.approx(0.02)
    assert metrics.wall_time(np.array([[0.0, 0.0], [0.95, 0.0]]), 1.0) == 0.5
    speed = np.r_[np.zeros(50), np.ones(100), np.zeros(50)]
    assert metrics.bouts(speed, FPS) == pytest.approx((1.0, 2.0))
    head = np.tile(np.r_[np.full(25, 0.07), np.full(25, 0.13)], 3)  # 3 rears in 3 s
    assert metrics.rearing_rate(head, FPS) == pytest.approx(60.0)


def test_exploration_episodes_run_their_full_length_through_a_fall(rat_config):
    """Random actions topple the rat 0.58 s into this episode (seed 3): it is still graded on
    all 2 s, as every arm is, and the fall is scored on its own."""
    from fieldrl.apps.rat.env import RatEnv
    from fieldrl.apps.rat.library import Clip, Library
    from fieldrl.apps.rat.naturalness import naturalness, random_actions, record

    env = RatEnv(rat_config("explore"))
    [trajectory] = record(env, random_actions, 1, 3)
    assert len(trajectory.qpos) == env.max_steps == 100
    assert trajectory.fell and 0.3 < trajectory.fallen.mean() < 1
    body = env.body
    library = Library([Clip("rest", np.tile(body.data.qpos, (5, 1)))], FPS, body.joint_names)
    figures = naturalness([trajectory], library, body.joint_names, FPS, 1.0, body.actuated_qpos)
    first_down = int(np.argmax(trajectory.fallen))
    assert figures["time_to_fall_s"][0] == pytest.approx((first_down + 1) / FPS)
    assert figures["fallen_share"][0] == pytest.approx(trajectory.fallen.mean())
    assert figures["fall"][0] == 1.0


def test_the_gait_gap_measures_the_peak_off_the_librarys_speed_relation(rat_config):
    """Library clips trot at 2 + 10 x speed Hz: a walk on that line has no gap, one at the
    same speed stepping at 8 Hz is 3.5 Hz off."""
    from fieldrl.apps.rat.env import RatEnv
    from fieldrl.apps.rat.library import Clip, Library
    from fieldrl.apps.rat.naturalness import Trajectory, naturalness

    body = RatEnv(rat_config("explore")).body
    hip = 7 + body.joint_names.index("hip_L_extend")
    t = np.arange(500) / FPS

    def qpos(speed: float, hz: float) -> np.ndarray:
        q = np.tile(body.model.qpos0, (len(t), 1))
        q[:, 0] = speed * t
        q[:, hip] += 0.3 * np.sin(2 * np.pi * hz * t)
        return q

    clips = [Clip(f"c{s}", qpos(s, 2 + 10 * s)) for s in (0.1, 0.2, 0.3)]
    library = Library(clips, FPS, body.joint_names)

    def walk(hz: float) -> Trajectory:
        q = qpos(0.25, hz)
        return Trajectory(q, np.zeros((len(t), 38)), np.ones((len(t), 4), bool),
                          np.full(len(t), 0.05), np.zeros(len(t), bool))  # fmt: skip

    figures = naturalness([walk(4.5), walk(8.0)], library, body.joint_names, FPS, 1.0,
                          body.actuated_qpos)  # fmt: skip
    on_line, off_line = figures["gait_gap_hz"]
    assert on_line < 0.15 and off_line == pytest.approx(3.5, abs=0.15)
