"""Record the rat's behaviour and grade it: naturalness against the library and
exploration statistics.

Exploration episodes have a fixed length: the rollout goes on after a fall (the explore
task would end it there), so every arm is graded on the same number of frames from the
same resets. Cutting at the first fall would grade an arm that falls early on the frames
next to the reset pose, which sit close to the library's standing pose. Falls are scored
on their own (``fall``, ``fallen_share``, ``time_to_fall_s``); the kinematic metrics keep
the frames after a fall (the rat lying down), the same way for every arm."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fieldrl.apps.rat import metrics
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.library import GAITS, Library

__all__ = [
    "NATURALNESS",
    "SPEED_HZ",
    "Trajectory",
    "gait_line",
    "ground_speed",
    "naturalness",
    "record",
    "top_down",
]

# what naturalness() reports per episode
NATURALNESS = ("w1_library", "gait_gap_hz", "gait_peak_hz", "duty_factor", "left_right_phase",
               "jerk", "energy", "control_change", "fall", "fallen_share", "time_to_fall_s",
               "coverage", "wall_time", "pause_s", "move_s", "rears_per_min",
               "speed_m_s")  # fmt: skip

Act = Callable[[np.ndarray], np.ndarray]  # proprioception -> 38 targets


@dataclass
class Trajectory:
    qpos: np.ndarray  # (T, 74)
    action: np.ndarray  # (T, 38)
    paws: np.ndarray  # (T, 4) paw on the ground: fore L, fore R, hind L, hind R
    head_height: np.ndarray  # (T,)
    fallen: np.ndarray  # (T,) the body was down (RatBody.fallen) after the step

    @property
    def fell(self) -> bool:
        return bool(self.fallen.any())

    @property
    def xy(self) -> np.ndarray:
        return self.qpos[:, :2]


def record(
    env: RatEnv, make_actor: Callable[[np.random.Generator], Act], episodes: int, seed: int
) -> list[Trajectory]:
    """``episodes`` rollouts of ``env.max_steps`` steps each on held-out seeds ``seed,
    seed + 1, ...``, simulated through falls (a fixed length for every arm); ``make_actor``
    gets each episode's generator and returns its policy (so random arms are
    reproducible)."""
    out = []
    for e in range(episodes):
        rng = np.random.default_rng(seed + e)
        actor = make_actor(rng)
        env.reset(seed=seed + e)
        rows: dict[str, list] = {k: [] for k in ("qpos", "action", "paws", "head_height", "fallen")}
        for _ in range(env.max_steps):
            action = actor(env.body.proprioception())
            env.step(action)
            for key, value in (
                ("qpos", env.body.data.qpos.copy()),
                ("action", action),
                ("paws", env.body.ground_contacts()[0]),
                ("head_height", env.body.head_height),
                ("fallen", env.body.fallen),
            ):
                rows[key].append(value)
        out.append(Trajectory(**{k: np.array(v) for k, v in rows.items()}))
    return out


def top_down(xy: np.ndarray, every: int = 5) -> list[list[float]]:
    """A path seen from above, for reports: every ``every``-th point, to the millimetre."""
    return np.round(np.asarray(xy)[::every], 3).tolist()


def random_actions(rng: np.random.Generator) -> Act:
    return lambda _proprio: rng.uniform(-1.0, 1.0, 38)


def naturalness(
    trajectories: list[Trajectory],
    library: Library,
    joint_names: tuple[str, ...],
    fps: float,
    arena_half: float,
    joints: np.ndarray,
) -> dict[str, np.ndarray]:
    """Per-trajectory metrics (arrays, one value an episode), for bootstrap CIs:
    ``w1_library`` is the mean over ``joints`` (qpos addresses: the actuated limb joints,
    ``RatBody.actuated_qpos``) of the Wasserstein distance between the episode's angles
    and the library's; ``gait_gap_hz`` how far the episode's gait peak lies from the
    library's at the episode's speed (:func:`gait_line`; nan where the library gives no
    line); speeds are measured between points 0.1 s apart (frame-to-frame path length would
    count a trembling body as travel); ``time_to_fall_s`` is the episode's length when it
    did not fall."""
    reference = np.concatenate([c.qpos[:, joints] for c in library.clips])
    hip_l = 7 + joint_names.index("hip_L_extend")
    hip_r = 7 + joint_names.index("hip_R_extend")
    slope, intercept = gait_line(library, hip_l, fps)
    rows: dict[str, list[float]] = {k: [] for k in NATURALNESS}
    for t in trajectories:
        rows["w1_library"].append(
            float(metrics.wasserstein_per_joint(t.qpos[:, joints], reference).mean())
        )
        peak = metrics.gait_peak(t.qpos[:, hip_l], fps)
        speed = ground_speed(t.xy, fps)
        rows["gait_peak_hz"].append(peak)
        mean_speed = float(speed.mean()) if speed.size else 0.0
        rows["gait_gap_hz"].append(abs(peak - (intercept + slope * mean_speed)))
        rows["duty_factor"].append(metrics.duty_factor(t.paws[:, 2:]))
        rows["left_right_phase"].append(
            metrics.left_right_phase(t.qpos[:, hip_l], t.qpos[:, hip_r])
        )
        rows["jerk"].append(metrics.jerk(t.qpos[:, 7:], fps))
        rows["energy"].append(metrics.energy(t.action))
        rows["control_change"].append(metrics.control_change(t.action))
        rows["fall"].append(float(t.fell))
        rows["fallen_share"].append(float(t.fallen.mean()))
        down = np.flatnonzero(t.fallen)
        rows["time_to_fall_s"].append((down[0] + 1 if down.size else len(t.fallen)) / fps)
        rows["coverage"].append(metrics.coverage(t.xy, arena_half))
        rows["wall_time"].append(metrics.wall_time(t.xy, arena_half))
        pause, move = metrics.bouts(speed, SPEED_HZ)
        rows["pause_s"].append(pause)
        rows["move_s"].append(move)
        rows["rears_per_min"].append(metrics.rearing_rate(t.head_height, fps))
        rows["speed_m_s"].append(mean_speed)
    return {k: np.array(v, dtype=float) for k, v in rows.items()}


SPEED_HZ = 10.0  # ground speed is measured between points this far apart in time


def ground_speed(xy: np.ndarray, fps: float) -> np.ndarray:
    """Ground speed (m/s) between points 1 / SPEED_HZ s apart along a path of ``fps``
    points a second."""
    step = max(1, round(fps / SPEED_HZ))
    return np.linalg.norm(np.diff(np.asarray(xy)[::step], axis=0), axis=1) * fps / step


def gait_line(library: Library, hip: int, fps: float, shortest: float = 1.0) -> tuple[float, float]:
    """(slope, intercept) of the gait peak (Hz) against speed (m/s) over the library's gait
    segments (labels ``trot`` and ``turn``, at least ``shortest`` s; whole clips when the
    library has no labels): the stride frequency a rat of this library uses at each speed.
    (nan, nan) from fewer than two segments with a peak."""
    points = []
    for clip in library.clips:
        if not clip.labels:
            spans = [(0, clip.frames)]
        else:
            labels = np.asarray(clip.labels)
            edges = [0, *(np.flatnonzero(labels[1:] != labels[:-1]) + 1), len(labels)]
            spans = [(a, b) for a, b in zip(edges, edges[1:], strict=False)
                     if labels[a] in GAITS and b - a >= shortest * fps]  # fmt: skip
        for a, b in spans:
            peak = metrics.gait_peak(clip.qpos[a:b, hip], fps)
            if np.isfinite(peak):
                points.append((float(ground_speed(clip.qpos[a:b, :2], fps).mean()), peak))
    if len(points) < 2:
        return float("nan"), float("nan")
    speed, peak = np.array(points).T
    slope, intercept = np.polyfit(speed, peak, 1)
    return float(slope), float(intercept)
