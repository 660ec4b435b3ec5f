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

Program = Callable[[float], np.ndarray]  # time since the segment began, s -> ctrl (38,)


def actuator_index(names: tuple[str, ...], name: str) -> int:
    try:
        return names.index(name)
    except ValueError:
        raise KeyError(f"the rat has no actuator {name!r}") from None


@dataclass
class Gait:
    """Trot parameters: per gait joint (offset, amplitude, phase), spine sway, and a rest
    pose for the joints the gait leaves alone. ``params`` is the flat vector searched."""

    params: np.ndarray  # (len(GAIT_JOINTS) * 3 + 2,)

    @staticmethod
    def size() -> int:
        return len(GAIT_JOINTS) * 3 + 2

    @classmethod
    def initial(cls) -> Gait:
        p = np.zeros(cls.size())
        p[1 : 3 * len(GAIT_JOINTS) : 3] = 0.3  # amplitudes
        return cls(p)

    def program(self, names: tuple[str, ...], frequency: float, turn: float = 0.0) -> Program:
        """``turn`` in [-1, 1]: negative turns left (the left side's strides shorten)."""
        index, offset, amplitude, phase = [], [], [], []
        for j, (stem, limb) in enumerate(GAIT_JOINTS):
            o, a, ph = self.params[3 * j : 3 * j + 3]
            for side in ("L", "R"):
                shrink = 1.0 - 0.6 * max(0.0, -turn if side == "L" else turn)
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

        def ctrl(t: float) -> np.ndarray:
            out = np.zeros(len(names))
            out[index_] = offset_ + amplitude_ * np.sin(omega * t + phase_)
            out[lumbar_extend] = sway_amp * np.sin(2 * omega * t + sway_phase)
            out[lumbar_bend] = 0.5 * turn
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
        base, wobble = np.zeros(len(names)), np.zeros(len(names))
        for values, out in ((self.targets, base), (self.rhythm, wobble)):
            for name, value in values.items():
                for side in ("L", "R") if "{}" in name else ("",):
                    out[actuator_index(names, name.format(side))] = value
        omega = 2 * np.pi * self.frequency

        def ctrl(t: float) -> np.ndarray:
            return np.clip(base + wobble * np.sin(omega * t), -1.0, 1.0)

        return ctrl


def rollout(
    body: RatBody, program: Program, seconds: float, rng: np.random.Generator, noise: float = 0.0
) -> tuple[bool, np.ndarray]:
    """Run ``program`` from a fresh reset facing +x; returns (stayed upright, root xy path)."""
    body.reset(rng, yaw=0.0)
    steps = round(seconds / body.cfg.control_dt)
    path = np.empty((steps, 2))
    for k in range(steps):
        action = program(k * body.cfg.control_dt)
        if noise:
            action = action + rng.normal(0.0, noise, action.shape)
        body.step(action)
        if body.fallen:
            return False, path[:k]
        path[k] = body.root_xy
    return True, path


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
    without falling, judged on two resets. Returns the gait and its distance, m."""
    rng = np.random.default_rng(seed)
    best = start or Gait.initial()
    names = body.actuator_names

    def score(gait: Gait) -> float:
        total = 0.0
        for k in range(2):
            upright, path = rollout(
                body, gait.program(names, frequency), seconds, np.random.default_rng(seed * 100 + k)
            )
            if not upright or len(path) == 0:
                return -1.0
            total += path[-1, 0] - path[0, 0] - 0.5 * abs(path[-1, 1] - path[0, 1])
        return total / 2

    best_score = score(best)
    step = 0.25
    for i in range(candidates):
        trial = Gait(best.params + rng.normal(0.0, step, best.params.size))
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
        upright, _ = rollout(
            body, Pose(targets).program(names), seconds, np.random.default_rng(seed)
        )
        return objective(body) if upright else -np.inf

    best_score = score(best)
    for _ in range(candidates):
        trial = {k: float(np.clip(v + rng.normal(0.0, 0.3), -1, 1)) for k, v in best.items()}
        s = score(trial)
        if s > best_score:
            best, best_score = trial, s
    return Pose(best), best_score
