"""The reference motion library: clips of natural-looking movement made by the CPG and its
poses in the simulator, and a loader for users' joint-angle trajectories.

A clip is a sequence of behaviour segments (trot at 2-5 Hz, turns, rearing, grooming,
stillness) blended over ``blend`` seconds, rolled out from an upright reset, some with
action noise. Every clip is checked to stay upright; a clip that falls is regenerated
with the next seed and counted. Some transitions (``heldout``) never occur in the
training clips: the held-out clips are made of them, to test composition.

File format (``.npz``; the same names as HDF5 datasets and attributes):

- ``fps``: frames a second; ``joint_names``: the names of the columns of ``qpos``: the
  rat's joint names (``hip_L_extend``, ...) after the seven root coordinates ``root_x``,
  ``root_y``, ``root_z``, ``root_qw``, ``root_qx``, ``root_qy``, ``root_qz``;
- ``clip/<name>/qpos``: (frames, columns) per clip, radians and metres; optional
  ``clip/<name>/action`` (frames, 38) and ``clip/<name>/labels`` (frames,) strings.

A user's file (STAC / DANNCE output converted to this layout) may carry a subset of the
joints: the missing ones are held at the rat's rest angles, and every name must be known.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fieldrl.apps.rat.body import RatBody
from fieldrl.apps.rat.config import BEHAVIOURS
from fieldrl.apps.rat.cpg import Gait, Pose, Program, tune_gait, tune_pose
from fieldrl.atomic import atomic_write_bytes
from fieldrl.errors import FieldrlError
from fieldrl.seeding import derive_seed

__all__ = ["BEHAVIOURS", "ROOT", "Clip", "Library", "LibraryError", "load_library"]

ROOT = ("root_x", "root_y", "root_z", "root_qw", "root_qx", "root_qy", "root_qz")
# how far a trajectory's hinge angle may pass the model's range (mocap retargeting overshoots
# a little; a file in degrees or scaled by mistake is far outside), and the root's reach
RANGE_TOLERANCE, MAX_ROOT_M = 0.5, 1000.0
GAITS, POSTURES = ("trot", "turn"), ("rear", "groom")


class LibraryError(FieldrlError):
    """A motion file that cannot be read as a library; the message names file, clip and field."""


@dataclass
class Clip:
    name: str
    qpos: np.ndarray  # (T, 74)
    action: np.ndarray | None = None  # (T, 38): the ctrl that produced frame t+1
    qvel: np.ndarray | None = None  # (T, 73); None: finite differences of qpos
    labels: list[str] = field(default_factory=list)
    act: np.ndarray | None = None  # (T, 38): the servos' filtered targets at frame t

    @property
    def frames(self) -> int:
        return len(self.qpos)


@dataclass
class Library:
    clips: list[Clip]
    fps: float
    joint_names: tuple[str, ...]
    meta: dict = field(default_factory=dict)

    def save(self, path: Path) -> None:
        arrays: dict[str, np.ndarray] = {
            "fps": np.array(self.fps),
            "joint_names": np.array(self.joint_names),
            "meta": np.array(json.dumps(self.meta)),
        }
        for clip in self.clips:
            arrays[f"clip/{clip.name}/qpos"] = clip.qpos.astype(np.float32)
            for key in ("action", "qvel", "act"):
                if getattr(clip, key) is not None:
                    arrays[f"clip/{clip.name}/{key}"] = getattr(clip, key).astype(np.float32)
            if clip.labels:
                arrays[f"clip/{clip.name}/labels"] = np.array(clip.labels)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)
        atomic_write_bytes(path, buffer.getvalue())


# -- generation ---------------------------------------------------------------------------
@dataclass
class Behaviours:
    """The tuned CPG: a gait per frequency and the rearing and grooming poses."""

    gaits: dict[float, Gait]
    rear: Pose
    groom: Pose
    stand: Pose

    def to_json(self) -> dict:
        return {
            "gaits": {str(f): g.params.tolist() for f, g in self.gaits.items()},
            "gait_base": next(iter(self.gaits.values())).base if self.gaits else {},
            "stand": self.stand.targets,
            "rear": self.rear.targets,
            "groom": self.groom.targets,
            "groom_rhythm": self.groom.rhythm,
            "groom_frequency": self.groom.frequency,
        }

    @classmethod
    def from_json(cls, data: dict) -> Behaviours:
        return cls(
            {
                float(f): Gait(np.array(p), data.get("gait_base", {}))
                for f, p in data["gaits"].items()
            },
            Pose(data["rear"]),
            Pose(data["groom"], data.get("groom_rhythm", {}), data.get("groom_frequency", 4.0)),
            Pose(data["stand"]),
        )

    def program(self, names: tuple[str, ...], behaviour: str, rng: np.random.Generator) -> Program:
        frequencies = sorted(self.gaits)
        if behaviour in ("trot", "turn"):
            f = float(rng.choice(frequencies))
            turn = rng.choice([-1, 1]) * rng.uniform(0.5, 1.0) if behaviour == "turn" else 0.0
            return self.gaits[f].program(names, f, turn)
        if behaviour == "rear":
            return self.rear.program(names)
        if behaviour == "groom":
            return self.groom.program(names)
        return self.stand.program(names)


STAND_JOINTS = [
    "shoulder_{}",
    "elbow_{}",
    "wrist_{}",
    "hip_{}_extend",
    "knee_{}",
    "ankle_{}",
    "scapula_{}_extend",
    "scapula_{}_abduct",
    "shoulder_sup_{}",
]
REAR_JOINTS = [
    "lumbar_extend",
    "hip_{}_extend",
    "knee_{}",
    "ankle_{}",
    "shoulder_{}",
    "elbow_{}",
    "cervical_extend",
]
GROOM_JOINTS = [
    "lumbar_extend",
    "hip_{}_extend",
    "knee_{}",
    "shoulder_{}",
    "elbow_{}",
    "wrist_{}",
    "cervical_extend",
    "atlas",
]
GROOM_RHYTHM = {"elbow_{}": 0.3, "shoulder_{}": 0.15}  # strokes at Pose.frequency (assumption)


def _paws_to_head(body: RatBody) -> float:
    paws = body.appendages_world()[:2]
    return -float(np.linalg.norm(paws - body.data.xpos[body.layout.head], axis=1).mean())


def _standing(body: RatBody) -> float:
    paws, elsewhere = body.ground_contacts()
    return float(body.torso_xpos[2] - 0.05 * elsewhere - 0.02 * (4 - paws.sum()))


def tune_behaviours(
    body: RatBody,
    frequencies: list[float],
    candidates: int,
    seed: int,
    progress: Callable[[str, float], None] | None = None,
) -> Behaviours:
    """Tune a standing pose (torso high, on its four paws, nothing else on the ground but
    the tail), then from it a trot per frequency (each search starting from the previous
    frequency's best), the rearing pose (highest head that stays upright for 1 s) and the
    grooming pose (forepaws closest to the head)."""

    def report(message: str, value: float) -> None:
        if progress:
            progress(message, value)

    stand, height = tune_pose(
        body, _standing, STAND_JOINTS, candidates, 1.0, derive_seed(seed, "stand")
    )
    report(f"stand: torso at {height:.3f} m", height)
    gaits: dict[float, Gait] = {}
    previous = Gait.initial(stand.targets)
    for k, frequency in enumerate(sorted(frequencies)):
        previous, score = tune_gait(
            body, frequency, candidates, 2.0, derive_seed(seed, "trot", k), previous
        )
        gaits[frequency] = previous
        report(f"trot {frequency:g} Hz: score {score:.2f}", score)
    rear, head = tune_pose(
        body,
        lambda b: b.head_height,
        REAR_JOINTS,
        candidates,
        1.0,
        derive_seed(seed, "rear"),
        start=_subset(stand.targets, REAR_JOINTS),
    )
    report(f"rear: head at {head:.3f} m", head)
    groom, closeness = tune_pose(
        body,
        _paws_to_head,
        GROOM_JOINTS,
        candidates,
        1.0,
        derive_seed(seed, "groom"),
        start=_subset(stand.targets, GROOM_JOINTS),
    )
    report(f"groom: forepaws {-closeness:.3f} m from the head", closeness)
    return Behaviours(gaits, rear, Pose(groom.targets, GROOM_RHYTHM), stand)


def _subset(targets: dict[str, float], joints: list[str]) -> dict[str, float]:
    return {k: v for k, v in targets.items() if k in joints}


def compose(
    body: RatBody,
    behaviours: Behaviours,
    sequence: list[str],
    seconds: list[float],
    blend: float,
    noise: float,
    rng: np.random.Generator,
) -> Clip | None:
    """Roll out ``sequence`` (behaviour per segment) from an upright reset; None if it falls."""
    names = body.actuator_names
    dt = body.cfg.control_dt
    programs = [behaviours.program(names, b, rng) for b in sequence]
    steps = [round(s / dt) for s in seconds]
    body.reset(rng)
    qpos, qvel, act = [body.data.qpos.copy()], [body.data.qvel.copy()], [body.data.act.copy()]
    actions, labels = [], []
    previous: Program | None = None
    previous_end = 0.0  # where the previous segment's program left off, s
    ou = np.zeros(len(names))
    for program, behaviour, n in zip(programs, sequence, steps, strict=True):
        for k in range(n):
            t = k * dt
            action = program(t)
            if previous is not None and t < blend:
                w = t / blend
                action = (1 - w) * previous(previous_end + t) + w * action
            if noise:  # Ornstein-Uhlenbeck: smooth perturbations, not per-step jitter
                ou += -0.2 * ou + noise * np.sqrt(0.4) * rng.normal(size=ou.shape)
                action = np.clip(action + ou, -1.0, 1.0)
            body.step(action)
            if body.fallen:
                return None
            actions.append(action)
            qpos.append(body.data.qpos.copy())
            qvel.append(body.data.qvel.copy())
            act.append(body.data.act.copy())
            labels.append(behaviour)
        previous, previous_end = program, n * dt
    # frame t+1 follows action t; the last frame has no action after it
    return Clip(
        "", np.array(qpos[:-1]), np.array(actions), np.array(qvel[:-1]), labels, np.array(act[:-1])
    )


def _sequence(
    rng: np.random.Generator,
    segments: int,
    forbidden: set[tuple[str, str]],
    only: set[tuple[str, str]] | None,
    weights: dict[str, float] | None = None,
) -> list[str]:
    """A random behaviour sequence whose transitions avoid ``forbidden`` (training) or
    include one of ``only`` (held-out). A rat stands up before it walks: a posture (rear,
    groom) goes to a gait (trot, turn) through ``still``, which counts as a segment. Each
    segment is drawn by ``weights`` (relative, a missing behaviour weighs 1; None or
    empty: uniform, drawn as before the weights existed)."""
    impossible = {p for p in only or () if p[0] in POSTURES and p[1] in GAITS or p[0] == p[1]}
    if only is not None and impossible == only:
        raise FieldrlError(
            f"held-out transitions {sorted(only)} never occur: a posture goes "
            "to a gait through still, and a behaviour never follows itself"
        )
    p = None  # uniform: numpy draws exactly as it did before the weights existed
    if weights:
        p = np.array([weights.get(b, 1.0) for b in BEHAVIOURS])
        p = p / p.sum()
    while True:
        seq = [str(rng.choice(BEHAVIOURS, p=p))]
        while len(seq) < segments:
            nxt = str(rng.choice(BEHAVIOURS, p=p))
            if seq[-1] in POSTURES and nxt in GAITS:
                nxt = "still"
            if nxt != seq[-1] and (seq[-1], nxt) not in forbidden:
                seq.append(nxt)
        pairs = set(zip(seq, seq[1:], strict=False))
        if only is None or pairs & only:
            return seq


def generate(
    body: RatBody,
    behaviours: Behaviours,
    clips: int,
    segments: int,
    segment_seconds: tuple[float, float],
    blend: float,
    noisy_share: float,
    noise: float,
    heldout: list[tuple[str, str]],
    seed: int,
    split: str = "train",
    progress: Callable[[int, int], None] | None = None,
    weights: dict[str, float] | None = None,
) -> Library:
    """``clips`` upright clips; ``split="heldout"`` makes clips that contain a held-out
    transition, ``"train"`` clips that contain none."""
    rng = np.random.default_rng(seed)
    pairs = {tuple(p) for p in heldout}
    out, rejected = [], 0
    while len(out) < clips:
        forbidden, only = (set(), pairs) if split == "heldout" else (pairs, None)
        sequence = _sequence(rng, segments, forbidden, only, weights)  # type: ignore[arg-type]
        seconds = list(rng.uniform(*segment_seconds, segments))
        noisy = rng.random() < noisy_share
        clip = compose(body, behaviours, sequence, seconds, blend, noise if noisy else 0.0, rng)
        if clip is None:
            rejected += 1
            if rejected > 10 * clips:
                raise FieldrlError(
                    f"{rejected} clips fell: the CPG parameters do not keep the "
                    "rat upright; retune them"
                )
            continue
        clip.name = f"{split}_{len(out):04d}{'_noisy' if noisy else ''}"
        out.append(clip)
        if progress:
            progress(len(out), clips)
    names = ROOT + body.joint_names
    meta = {
        "split": split,
        "seed": seed,
        "rejected_falls": rejected,
        "noisy_share": noisy_share,
        "noise": noise,
        "heldout_transitions": [list(p) for p in pairs],
        "behaviour_weights": dict(weights or {}),
        "behaviours": behaviours.to_json(),
    }
    return Library(out, 1.0 / body.cfg.control_dt, names, meta)


# -- loading ------------------------------------------------------------------------------
def _read(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as f:
                return {k: f[k] for k in f.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # EOFError: empty file
            raise LibraryError(f"{path}: not a readable npz file ({e})") from None
    if path.suffix in (".h5", ".hdf5"):
        import h5py

        out: dict[str, np.ndarray] = {}
        try:
            with h5py.File(path, "r") as f:
                for key, value in f.attrs.items():
                    out[key] = np.asarray(value)
                f.visititems(
                    lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None
                )
        except OSError as e:
            raise LibraryError(f"{path}: not a readable HDF5 file ({e})") from None
        return out
    raise LibraryError(f"{path}: unknown format {path.suffix!r} (use .npz, .h5 or .hdf5)")


def _text(values: np.ndarray) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else str(v) for v in np.asarray(values).ravel()]


def _check_ranges(where: str, qpos: np.ndarray, ranges: np.ndarray, names: tuple) -> None:
    """Refuse a hinge angle beyond its range (plus the tolerance) or a root beyond reason."""
    angles = qpos[:, len(ROOT) :]
    outside = (angles < ranges[:, 0] - RANGE_TOLERANCE) | (angles > ranges[:, 1] + RANGE_TOLERANCE)
    root = qpos[:, : len(ROOT)]
    norm = np.linalg.norm(root[:, 3:], axis=1)
    badroot = (np.abs(root[:, :3]) > MAX_ROOT_M).any(axis=1) | (np.abs(norm - 1) > 0.1)
    if badroot.any():
        frame = int(np.flatnonzero(badroot)[0])
        raise LibraryError(
            f"{where}: frame {frame}: the root is {root[frame].round(3).tolist()}; expected "
            f"a position within {MAX_ROOT_M:g} m and a unit quaternion"
        )
    if outside.any():
        frame, joint = (int(i[0]) for i in np.nonzero(outside))
        low, high = ranges[joint]
        name, value = names[len(ROOT) + joint], angles[frame, joint]
        raise LibraryError(
            f"{where}: frame {frame}, joint {name!r}: {value:.4g} rad is outside its range "
            f"[{low:.3f}, {high:.3f}] by more than {RANGE_TOLERANCE} rad "
            f"({int(outside.sum())} values in all; angles are in radians)"
        )


def load_library(
    path: str | Path,
    joint_names: tuple[str, ...],
    rest_qpos: np.ndarray,
    ranges: np.ndarray | None = None,
) -> Library:
    """Read a library or a user's trajectories; errors name the file, clip and field.
    ``joint_names`` are the rat's (without the root); ``rest_qpos`` fills missing joints;
    ``ranges`` (:meth:`RatBody.joint_ranges`) refuses a joint angle more than
    ``RANGE_TOLERANCE`` outside its range, naming the joint and frame."""
    path = Path(path)
    if not path.exists():
        raise LibraryError(f"{path}: no such file")
    raw = _read(path)
    for key in ("fps", "joint_names"):
        if key not in raw:
            raise LibraryError(f"{path}: missing {key!r} (see the format in docs/apps/rat.md)")
    fps = float(np.asarray(raw["fps"]))
    if not np.isfinite(fps) or fps <= 0:
        raise LibraryError(f"{path}: fps must be a positive number, got {fps}")
    columns = _text(raw["joint_names"])
    known = ROOT + joint_names
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise LibraryError(
            f"{path}: unknown joint names {unknown} (the rat's joints are "
            f"{', '.join(joint_names[:6])}, ...; root columns {', '.join(ROOT)})"
        )
    if len(set(columns)) != len(columns):
        raise LibraryError(f"{path}: joint_names repeats a name")
    index = np.array([known.index(c) for c in columns])
    clip_names = sorted({k.split("/")[1] for k in raw if k.startswith("clip/")})
    if not clip_names:
        raise LibraryError(f"{path}: no clips (expected arrays named clip/<name>/qpos)")
    clips = []
    for name in clip_names:
        where = f"{path}: clip {name!r}"
        if f"clip/{name}/qpos" not in raw:
            raise LibraryError(f"{where}: missing qpos")
        data = np.asarray(raw[f"clip/{name}/qpos"], dtype=np.float64)
        if data.ndim != 2 or data.shape[1] != len(columns):
            raise LibraryError(
                f"{where}: qpos has shape {data.shape}; expected (frames, "
                f"{len(columns)}) to match joint_names"
            )
        bad = np.flatnonzero(~np.isfinite(data).all(axis=1))
        if bad.size:
            raise LibraryError(
                f"{where}: NaN or infinite values in frames "
                f"{bad[:10].tolist()}{' ...' if bad.size > 10 else ''}"
            )
        qpos = np.tile(rest_qpos, (len(data), 1))
        qpos[:, index] = data
        if ranges is not None:
            _check_ranges(where, qpos, ranges, known)
        labels = _text(raw[f"clip/{name}/labels"]) if f"clip/{name}/labels" in raw else []
        action, qvel, act = (raw.get(f"clip/{name}/{k}") for k in ("action", "qvel", "act"))
        for key, value, width in (("action", action, 38), ("qvel", qvel, 73), ("act", act, 38)):
            if value is not None and (
                value.shape != (len(data), width) or not np.isfinite(value).all()
            ):
                raise LibraryError(
                    f"{where}: {key} must be finite with shape ({len(data)}, {width})"
                )
        if act is not None and action is None:
            raise LibraryError(f"{where}: act (the servos' state) needs the action that drove it")
        clips.append(Clip(name, qpos, action, qvel, labels, act))
    meta = json.loads(str(raw["meta"])) if "meta" in raw else {}
    return Library(clips, fps, known, meta)
