"""The rat's tasks: their arenas, resets, task observations, rewards and ends.

Checks are array arithmetic on positions (dm_control's tasks loop over MuJoCo contacts in
Python every physics step). Sparse tasks pay 1 on success and end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from dm_control import mjcf

from fieldrl.apps.rat.body import RatBody
from fieldrl.apps.rat.config import TaskConfig

__all__ = ["Outcome", "Task", "make_task"]

WALL_HEIGHT = 0.1
WALL_THICKNESS = 0.02


@dataclass
class Outcome:
    reward: float
    terminated: bool  # success or fall: the episode ends
    success: bool


def _add_square_arena(arena: mjcf.RootElement, half: float) -> None:
    arena.worldbody.add(
        "geom", name="floor", type="plane", size=(half + 0.5, half + 0.5, 0.1), material="ground"
    )
    for name, pos, size in (
        ("wall_px", (half + WALL_THICKNESS, 0, WALL_HEIGHT / 2), (WALL_THICKNESS, half, 0)),
        ("wall_nx", (-half - WALL_THICKNESS, 0, WALL_HEIGHT / 2), (WALL_THICKNESS, half, 0)),
        ("wall_py", (0, half + WALL_THICKNESS, WALL_HEIGHT / 2), (half, WALL_THICKNESS, 0)),
        ("wall_ny", (0, -half - WALL_THICKNESS, WALL_HEIGHT / 2), (half, WALL_THICKNESS, 0)),
    ):
        arena.worldbody.add(
            "geom",
            name=name,
            type="box",
            material="wall",
            pos=pos,
            size=(size[0] + WALL_THICKNESS, size[1] + WALL_THICKNESS, WALL_HEIGHT / 2),
        )


class Task:
    """A task owns its arena geometry and the per-episode state of its reward."""

    name = "task"
    obs_size = 0

    def __init__(self, cfg: TaskConfig) -> None:
        self.cfg = cfg

    def build(self, arena: mjcf.RootElement) -> None:
        _add_square_arena(arena, self.cfg.arena_size)

    def reset(self, body: RatBody, rng: np.random.Generator) -> None:
        body.reset(rng)

    def observe(self, body: RatBody) -> np.ndarray:
        return np.zeros(0, np.float32)

    def outcome(self, body: RatBody) -> Outcome:
        return Outcome(0.0, body.fallen, False)

    def info(self, body: RatBody) -> dict[str, float]:
        return {}


class Explore(Task):
    """Free exploration of a walled square: no reward; the naturalness metrics judge it."""

    name = "explore"


def _place(rng: np.random.Generator, distance: tuple[float, float]) -> np.ndarray:
    angle = rng.uniform(-np.pi, np.pi)
    return rng.uniform(*distance) * np.array([np.cos(angle), np.sin(angle)])


class GoToTarget(Task):
    """Reach a target on the floor (sparse: 1 when the root is within its radius)."""

    name = "go_to_target"
    obs_size = 3

    def build(self, arena: mjcf.RootElement) -> None:
        super().build(arena)
        arena.worldbody.add(
            "geom",
            name="target",
            type="cylinder",
            contype=0,
            conaffinity=0,
            size=(self.cfg.target_radius, 0.001),
            material="target",
        )

    def reset(self, body: RatBody, rng: np.random.Generator) -> None:
        body.reset(rng)
        self.target = np.zeros(3)
        self.target[:2] = _place(rng, self.cfg.target_distance)
        body.model.geom("target").pos[:] = self.target

    def observe(self, body: RatBody) -> np.ndarray:
        return body.egocentric(self.target[None])[0].astype(np.float32)

    def distance(self, body: RatBody) -> float:
        return float(np.linalg.norm(body.root_xy - self.target[:2]))

    def outcome(self, body: RatBody) -> Outcome:
        if self.distance(body) < self.cfg.target_radius:
            return Outcome(1.0, True, True)
        return Outcome(0.0, body.fallen, False)

    def info(self, body: RatBody) -> dict[str, float]:
        return {"target_distance": self.distance(body)}


class TwoTap(Task):
    """Touch an orb with a paw, then again ``tap_interval +- tap_tolerance`` s later (1 on the
    second tap in the window; a second tap outside it, or none, restarts the count)."""

    name = "two_tap"
    obs_size = 4

    def build(self, arena: mjcf.RootElement) -> None:
        super().build(arena)
        arena.worldbody.add(
            "geom",
            name="orb",
            type="sphere",
            contype=0,
            conaffinity=0,
            size=(self.cfg.orb_radius,),
            material="target",
        )

    def reset(self, body: RatBody, rng: np.random.Generator) -> None:
        body.reset(rng)
        self.orb = np.zeros(3)
        self.orb[:2] = _place(rng, self.cfg.orb_distance)
        self.orb[2] = self.cfg.orb_height
        body.model.geom("orb").pos[:] = self.orb
        self.touching = False
        self.first_tap: float | None = None
        self.taps = 0

    def observe(self, body: RatBody) -> np.ndarray:
        since = 0.0 if self.first_tap is None else body.time - self.first_tap
        return np.append(body.egocentric(self.orb[None])[0], since).astype(np.float32)

    def _touching(self, body: RatBody) -> bool:
        paws = body.appendages_world()[:2]  # the forepaws
        reach = self.cfg.orb_radius + 0.01
        return bool((np.linalg.norm(paws - self.orb, axis=1) < reach).any())

    def outcome(self, body: RatBody) -> Outcome:
        touching = self._touching(body)
        onset, self.touching = touching and not self.touching, touching
        now = body.time
        if self.first_tap is not None and now - self.first_tap > (
            self.cfg.tap_interval + self.cfg.tap_tolerance
        ):
            self.first_tap = None
        if onset:
            self.taps += 1
            if (
                self.first_tap is not None
                and abs(now - self.first_tap - self.cfg.tap_interval) <= self.cfg.tap_tolerance
            ):
                return Outcome(1.0, True, True)
            self.first_tap = now
        return Outcome(0.0, body.fallen, False)

    def info(self, body: RatBody) -> dict[str, float]:
        return {
            "taps": float(self.taps),
            "orb_distance": float(
                np.linalg.norm(body.appendages_world()[:2] - self.orb, axis=1).min()
            ),
        }


class Bowl(Task):
    """Climb out of a bumpy bowl (sparse: 1 when the root passes the rim)."""

    name = "bowl"
    obs_size = 2
    resolution = 41  # 0.08 m cells; 81 cost 40% of the speed (189 vs 298 steps/s)

    def build(self, arena: mjcf.RootElement) -> None:
        half = self.cfg.bowl_radius * 1.6
        arena.asset.add(
            "hfield",
            name="bowl",
            nrow=self.resolution,
            ncol=self.resolution,
            size=(half, half, self.cfg.bowl_depth + self.cfg.bowl_bumps, 0.05),
        )
        arena.worldbody.add(
            "geom",
            name="bowl",
            type="hfield",
            hfield="bowl",
            material="ground",
            pos=(0, 0, -self.cfg.bowl_depth),
        )
        axis = np.linspace(-half, half, self.resolution)
        radius = np.hypot(*np.meshgrid(axis, axis))
        self._shape = np.minimum(radius / self.cfg.bowl_radius, 1.0) ** 2 * self.cfg.bowl_depth

    def reset(self, body: RatBody, rng: np.random.Generator) -> None:
        m = body.model
        bumps = rng.uniform(0, self.cfg.bowl_bumps, (9, 9))
        # bilinear upsampling of a coarse random grid: smooth bumps ~ 0.1 m across
        coarse = np.linspace(0, 8, self.resolution)
        rows = np.array([np.interp(coarse, np.arange(9), row) for row in bumps])
        fine = np.array([np.interp(coarse, np.arange(9), col) for col in rows.T]).T
        height = (self._shape + fine) / (self.cfg.bowl_depth + self.cfg.bowl_bumps)
        hfield = m.hfield("bowl")
        m.hfield_data[hfield.adr[0] : hfield.adr[0] + height.size] = height.ravel()
        body.reset(
            rng,
            height=-self.cfg.bowl_depth + fine[self.resolution // 2, self.resolution // 2] + 0.005,
        )

    def observe(self, body: RatBody) -> np.ndarray:
        radius = float(np.linalg.norm(body.root_xy))
        return np.array(
            [radius / self.cfg.bowl_radius, body.root_height / self.cfg.bowl_depth], np.float32
        )

    def outcome(self, body: RatBody) -> Outcome:
        if np.linalg.norm(body.root_xy) > self.cfg.bowl_radius:
            return Outcome(1.0, True, True)
        return Outcome(0.0, body.fallen, False)

    def info(self, body: RatBody) -> dict[str, float]:
        return {"radius": float(np.linalg.norm(body.root_xy))}


class Gaps(Task):
    """Run along a corridor of platforms separated by gaps (dense: forward speed up to
    ``target_speed``; falling into a gap ends the episode)."""

    name = "gaps"
    obs_size = 6
    pit = 0.3
    width = 0.3

    def build(self, arena: mjcf.RootElement) -> None:
        length = self.cfg.platforms * (self.cfg.platform_length[1] + self.cfg.gap_length[1]) + 1
        arena.worldbody.add(
            "geom",
            name="pit",
            type="plane",
            pos=(length / 2, 0, -self.pit),
            size=(length, 2, 0.1),
            material="wall",
        )
        # A platform is two boxes of half the longest length, one flush with each end, so
        # any length up to the longest is covered without resizing geoms at run time;
        # the boxes sit on mocap bodies, which MuJoCo's collision detection follows. Their
        # compiled places (where a reset of MjData puts them) are apart and behind the
        # rat's start: piled on the rat they made thousands of contacts, and one
        # ``mj_forward`` there took 2 s with dm_control's solver settings.
        self.box = self.cfg.platform_length[1] / 2
        for i in range(2 * self.cfg.platforms):
            place = (-2.0 - i * 2 * self.box, 0.0, -self.pit / 2)
            arena.worldbody.add("body", name=f"box_{i}", mocap=True, pos=place).add(
                "geom", type="box", material="ground", size=(self.box / 2, self.width, self.pit / 2)
            )

    def reset(self, body: RatBody, rng: np.random.Generator) -> None:
        lengths = rng.uniform(*self.cfg.platform_length, self.cfg.platforms)
        lengths = np.maximum(lengths, self.box)
        gaps = rng.uniform(*self.cfg.gap_length, self.cfg.platforms)
        gaps[0] = 0.0
        starts = np.cumsum(gaps + np.r_[0.0, lengths[:-1]]) - 0.25
        self.edges = np.stack([starts, starts + lengths], axis=1)
        centres = np.concatenate([self.edges[:, 0] + self.box / 2, self.edges[:, 1] - self.box / 2])
        body.reset(rng, yaw=rng.normal(0.0, 0.3))
        body.data.mocap_pos[:, 0] = centres
        body.data.mocap_pos[:, 1] = 0.0
        body.data.mocap_pos[:, 2] = -self.pit / 2
        body.forward()
        self.start_x = self.last_x = body.root_xy[0]

    def observe(self, body: RatBody) -> np.ndarray:
        """Distances ahead to the next two gap starts and ends, lateral offset, heading."""
        x = body.root_xy[0]
        ahead = self.edges[:, 1][self.edges[:, 1] > x][:2] - x
        nxt = self.edges[:, 0][self.edges[:, 0] > x][:2] - x
        pad = lambda v: np.pad(v, (0, 2 - v.size), constant_values=2.0)  # noqa: E731
        return np.concatenate([pad(ahead), pad(nxt), [body.root_xy[1], body.heading]]).astype(
            np.float32
        )

    def outcome(self, body: RatBody) -> Outcome:
        # progress, not the instantaneous velocity: jitter in place then nets zero
        x = body.root_xy[0]
        step = (x - self.last_x) / (self.cfg.target_speed * body.cfg.control_dt)
        self.last_x = x
        fell = body.root_height < -0.05 or body.fallen
        return Outcome(0.0 if fell else float(np.clip(step, -1.0, 1.0)), fell, False)

    def info(self, body: RatBody) -> dict[str, float]:
        return {"distance": float(body.root_xy[0] - self.start_x)}


TASKS: dict[str, type[Task]] = {t.name: t for t in (Explore, GoToTarget, TwoTap, Bowl, Gaps)}


def make_task(cfg: TaskConfig) -> Task:
    return TASKS[cfg.name](cfg)
