"""A parametric central pattern generator for the rat, and the poses it blends with.

A gait is a sine per joint: ``ctrl = offset + amplitude x sin(2 pi f t + phase)`` for the
hip, knee, ankle and toe of each hindlimb and the shoulder, elbow and wrist of each
forelimb, with the trot's limb phases (diagonal pairs together, left and right half a cycle
apart) and the spine swaying at the stride frequency. Turning scales the amplitudes of one
side down and bends the spine. Rearing and grooming-like poses are static targets with a
small oscillation of the forelimbs. Parameters are found by random search in the simulator
(:func:`tune_gait`, :func:`tune_pose`) and saved as JSON beside the library.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fieldrl.apps.rat.body import RatBody
from fieldrl.seeding import derive_seed

__all__ = ["GAIT_JOINTS", "Gait", "Pose", "Program", "actuator_index", "tune_gait", "tune_pose"]

# (joint stem, limb) -- the side is added: hip_L_extend, knee_L, ...
GAIT_JOINTS = (
    ("hip_{}_extend", "hind"),
    ("knee_{}", "hind"),
    ("ankle_{}", "hind"),
    ("toe_{}", "hind"),
    ("shoulder_{}", "fore"),
    ("elbow_{}", "fore"),
    ("wrist_{}", "fore"),
)
# Trot: left hind with right fore, right hind with left fore, the pairs half a cycle apart.
LIMB_PHASE = {("hind", "L"): 0.0, ("fore", "R"): 0.0, ("hind", "R"): np.pi, ("fore", "L"): np.pi}

# stride shortening and spine bend at a full turn; bending the spine toppled 3 of 8 turns
TURN_SHRINK, TURN_BEND = 0.4, 0.0

Program = Callable[[float], np.ndarray]  # time since the segment began, s -> ctrl (38,)


def actuator_index(names: tuple[str, ...], name: str) -> int:
    try:
        return names.index(name)
    except ValueError:
        raise KeyError(f"the rat has no actuator {name!r}") from None


def pose_vector(names: tuple[str, ...], values: dict[str, float]) -> np.ndarray:
    """Per-actuator values from named ones (``{}`` in a name: both sides); 0 elsewhere."""
    out = np.zeros(len(names))
    for name, value in values.items():
        for side in ("L", "R") if "{}" in name else ("",):
            out[actuator_index(names, name.format(side))] = value
    return out


@dataclass
class Gait:
    """Trot parameters: per gait joint (offset, amplitude, phase), spine sway, and a rest
    pose for the joints the gait leaves alone. ``params`` is the flat vector searched."""

    params: np.ndarray  # (len(GAIT_JOINTS) * 3 + 2,)
    base: dict[str, float] = field(default_factory=dict)  # the pose of the other joints

    @staticmethod
    def size() -> int:
        return len(GAIT_JOINTS) * 3 + 2

    @classmethod
    def initial(cls, pose: dict[str, float] | None = None) -> Gait:
        """Small strides around ``pose`` (``{}`` names, as :class:`Pose`; default all 0)."""
        pose = pose or {}
        p = np.zeros(cls.size())
        p[1 : 3 * len(GAIT_JOINTS) : 3] = 0.3  # amplitudes
        p[0 : 3 * len(GAIT_JOINTS) : 3] = [pose.get(stem, 0.0) for stem, _ in GAIT_JOINTS]
        return cls(p, dict(pose))

    def program(self, names: tuple[str, ...], frequency: float, turn: float = 0.0) -> Program:
        """``turn`` in [-1, 1]: negative turns left (the left side's strides shorten)."""
        index, offset, amplitude, phase = [], [], [], []
        for j, (stem, limb) in enumerate(GAIT_JOINTS):
            o, a, ph = self.params[3 * j : 3 * j + 3]
            for side in ("L", "R"):
                shrink = 1.0 - TURN_SHRINK * max(0.0, -turn if side == "L" else turn)
                index.append(actuator_index(names, stem.format(side)))
                offset.append(o)
                amplitude.append(a * shrink)
                phase.append(ph + LIMB_PHASE[(limb, side)])
        index_, offset_ = np.array(index), np.array(offset)
        amplitude_, phase_ = np.array(amplitude), np.array(phase)
        sway_amp, sway_phase = self.params[-2:]
        lumbar_bend = actuator_index(names, "lumbar_bend")
        lumbar_extend = actuator_index(names, "lumbar_extend")
        omega = 2 * np.pi * frequency

        base = pose_vector(names, self.base)

        def ctrl(t: float) -> np.ndarray:
            out = base.copy()
            out[index_] = offset_ + amplitude_ * np.sin(omega * t + phase_)
            out[lumbar_extend] = sway_amp * np.sin(2 * omega * t + sway_phase)
            out[lumbar_bend] = TURN_BEND * turn
            return np.clip(out, -1.0, 1.0)

        return ctrl


@dataclass
class Pose:
    """A held posture (ctrl targets on named actuators; ``{}`` in a name means both sides)
    with an optional rhythm: rearing holds the hind legs and spine extended, grooming
    brings the forepaws to the head and strokes them."""

    targets: dict[str, float]
    rhythm: dict[str, float] = field(default_factory=dict)  # actuator -> amplitude
    frequency: float = 4.0

    def program(self, names: tuple[str, ...]) -> Program:
        base, wobble = pose_vector(names, self.targets), pose_vector(names, self.rhythm)
        omega = 2 * np.pi * self.frequency

        def ctrl(t: float) -> np.ndarray:
            return np.clip(base + wobble * np.sin(omega * t), -1.0, 1.0)

        return ctrl


@dataclass
class Outcome:
    upright: bool  # never fell
    path: np.ndarray  # (steps, 2) root xy
    paw_contact: np.ndarray  # (4,) share of steps each paw touched the ground
    other_contact: float  # share of steps another part (elbow, belly) touched it


def rollout(
    body: RatBody, program: Program, seconds: float, rng: np.random.Generator, noise: float = 0.0
) -> Outcome:
    """Run ``program`` from a fresh reset facing +x."""
    body.reset(rng, yaw=0.0)
    steps = round(seconds / body.cfg.control_dt)
    path, paws, other = np.empty((steps, 2)), np.zeros(4), 0.0
    for k in range(steps):
        action = program(k * body.cfg.control_dt)
        if noise:
            action = action + rng.normal(0.0, noise, action.shape)
        body.step(action)
        if body.fallen:
            return Outcome(False, path[:k], paws / max(k, 1), other / max(k, 1))
        path[k] = body.root_xy
        touching, elsewhere = body.ground_contacts()
        paws += touching
        other += elsewhere
    return Outcome(True, path, paws / steps, other / steps)


def tune_gait(
    body: RatBody,
    frequency: float,
    candidates: int,
    seconds: float,
    seed: int,
    start: Gait | None = None,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[Gait, float]:
    """(1+1) random search for the trot that walks furthest along +x in ``seconds``
    without falling, on its paws: the score is the distance (m) less half the sideways
    drift, less 0.5 x the share of steps an elbow or the belly touches the ground, less
    0.3 x (1 - the forepaws' contact share), averaged over two resets."""
    rng = np.random.default_rng(seed)
    best = start or Gait.initial()
    names = body.actuator_names

    def score(gait: Gait) -> float:
        total = 0.0
        for k in range(2):
            out = rollout(
                body,
                gait.program(names, frequency),
                seconds,
                np.random.default_rng(derive_seed(seed, "reset", k)),
            )
            if not out.upright or len(out.path) == 0:
                return -1.0
            dx, dy = out.path[-1] - out.path[0]
            total += (
                dx
                - 0.5 * abs(dy)
                - 0.5 * out.other_contact
                - 0.3 * (1.0 - out.paw_contact[:2].mean())
            )
        return total / 2

    best_score = score(best)
    step = 0.25
    for i in range(candidates):
        trial = Gait(best.params + rng.normal(0.0, step, best.params.size), best.base)
        trial.params[1 : 3 * len(GAIT_JOINTS) : 3] = np.abs(
            trial.params[1 : 3 * len(GAIT_JOINTS) : 3]
        )
        s = score(trial)
        if s > best_score:
            best, best_score = trial, s
        else:
            step = max(0.05, step * 0.98)
        if progress:
            progress(i + 1, best_score)
    return best, best_score


def tune_pose(
    body: RatBody,
    objective: Callable[[RatBody], float],
    joints: list[str],
    candidates: int,
    seconds: float,
    seed: int,
    start: dict[str, float] | None = None,
) -> tuple[Pose, float]:
    """Random search over static targets on ``joints`` maximising ``objective`` (read at the
    end of a hold of ``seconds``) among poses that stay upright."""
    rng = np.random.default_rng(seed)
    best = dict.fromkeys(joints, 0.0) | (start or {})
    names = body.actuator_names

    def score(targets: dict[str, float]) -> float:
        out = rollout(body, Pose(targets).program(names), seconds, np.random.default_rng(seed))
        return objective(body) if out.upright else -np.inf

    best_score = score(best)
    for _ in range(candidates):
        trial = {k: float(np.clip(v + rng.normal(0.0, 0.3), -1, 1)) for k, v in best.items()}
        s = score(trial)
        if s > best_score:
            best, best_score = trial, s
    return Pose(best), best_score
