"""Record the rat's behaviour and grade it: naturalness against the library and
exploration statistics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fieldrl.apps.rat import metrics
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.library import Library

__all__ = ["NATURALNESS", "Trajectory", "naturalness", "record"]

# what naturalness() reports per episode
NATURALNESS = ("w1_library", "gait_peak_hz", "duty_factor", "left_right_phase", "jerk", "energy",
               "control_change", "fall", "coverage", "wall_time", "pause_s", "move_s",
               "rears_per_min", "speed_m_s")  # fmt: skip

Act = Callable[[np.ndarray], np.ndarray]  # proprioception -> 38 targets


@dataclass
class Trajectory:
    qpos: np.ndarray  # (T, 74)
    action: np.ndarray  # (T, 38)
    paws: np.ndarray  # (T, 4) paw on the ground: fore L, fore R, hind L, hind R
    head_height: np.ndarray  # (T,)
    fell: bool

    @property
    def xy(self) -> np.ndarray:
        return self.qpos[:, :2]


def record(
    env: RatEnv, make_actor: Callable[[np.random.Generator], Act], episodes: int, seed: int
) -> list[Trajectory]:
    """``episodes`` rollouts on held-out seeds ``seed, seed + 1, ...``; ``make_actor`` gets
    each episode's generator and returns its policy (so random arms are reproducible)."""
    out = []
    for e in range(episodes):
        rng = np.random.default_rng(seed + e)
        actor = make_actor(rng)
        env.reset(seed=seed + e)
        rows: dict[str, list] = {"qpos": [], "action": [], "paws": [], "head": []}
        done, info = False, {}
        while not done:
            action = actor(env.body.proprioception())
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            for key, value in (
                ("qpos", env.body.data.qpos.copy()),
                ("action", action),
                ("paws", env.body.ground_contacts()[0]),
                ("head", env.body.head_height),
            ):
                rows[key].append(value)
        out.append(
            Trajectory(
                np.array(rows["qpos"]),
                np.array(rows["action"]),
                np.array(rows["paws"]),
                np.array(rows["head"]),
                bool(info.get("fallen")),
            )
        )
    return out


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
    and the library's."""
    reference = np.concatenate([c.qpos[:, joints] for c in library.clips])
    hip_l = 7 + joint_names.index("hip_L_extend")
    hip_r = 7 + joint_names.index("hip_R_extend")
    rows: dict[str, list[float]] = {k: [] for k in NATURALNESS}
    for t in trajectories:
        rows["w1_library"].append(
            float(metrics.wasserstein_per_joint(t.qpos[:, joints], reference).mean())
        )
        rows["gait_peak_hz"].append(metrics.gait_peak(t.qpos[:, hip_l], fps))
        rows["duty_factor"].append(metrics.duty_factor(t.paws[:, 2:]))
        rows["left_right_phase"].append(
            metrics.left_right_phase(t.qpos[:, hip_l], t.qpos[:, hip_r])
        )
        rows["jerk"].append(metrics.jerk(t.qpos[:, 7:], fps))
        rows["energy"].append(metrics.energy(t.action))
        rows["control_change"].append(metrics.control_change(t.action))
        rows["fall"].append(float(t.fell))
        rows["coverage"].append(metrics.coverage(t.xy, arena_half))
        rows["wall_time"].append(metrics.wall_time(t.xy, arena_half))
        speed = np.linalg.norm(np.diff(t.xy, axis=0), axis=1) * fps
        pause, move = metrics.bouts(speed, fps)
        rows["pause_s"].append(pause)
        rows["move_s"].append(move)
        rows["rears_per_min"].append(metrics.rearing_rate(t.head_height, fps))
        rows["speed_m_s"].append(float(speed.mean()) if speed.size else 0.0)
    return {k: np.array(v, dtype=float) for k, v in rows.items()}
