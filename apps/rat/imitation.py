"""Closed-loop imitation of the motion library: what every motor model here is trained by.

The student acts in the simulator from a library frame; at every state it visits, the
tracking expert says what it should have done: the reference's own action at that frame
plus a correction toward the reference pose (``gain x (pose targets of the reference -
pose targets of where the body is)``). Training on the states the student reaches, not only
the reference's, is DAgger (Ross et al. 2011); ``expert_share`` of the actions early in
training are the expert's, to keep rollouts near the reference while the student is poor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import mujoco
import numpy as np
import torch

from fieldrl.apps.rat.body import RatBody
from fieldrl.apps.rat.config import ImitationConfig
from fieldrl.apps.rat.library import Clip

__all__ = [
    "Controller",
    "ImitationTrainer",
    "Reference",
    "Rollout",
    "Segments",
    "SequenceModel",
    "evaluate_tracking",
    "track",
    "window_size",
]

ROOT_DIM, JOINT_DIM = 3, 67
ALL_HINGES = slice(7, None)  # qpos addresses of the 67 hinges, spine and tail included


def window_size(horizon: int) -> int:
    return horizon * (ROOT_DIM + JOINT_DIM)


class Reference:
    """A clip ready to be tracked: its frames, pose targets, action labels and velocities."""

    def __init__(self, clip: Clip, body: RatBody, fps: float, lead: int = 2) -> None:
        if abs(fps - 1.0 / body.cfg.control_dt) > 1e-6:
            raise ValueError(
                f"clip {clip.name!r} runs at {fps} fps; the body steps at "
                f"{1.0 / body.cfg.control_dt:g} (resample it first)"
            )
        self.name = clip.name
        self.qpos = clip.qpos
        self.ctrl = body.pose_ctrl(clip.qpos)
        # a clip of joint angles only: servo toward the pose ``lead`` frames ahead
        ahead = np.minimum(np.arange(len(clip.qpos)) + lead, len(clip.qpos) - 1)
        self.action = clip.action if clip.action is not None else self.ctrl[ahead]
        self.qvel = clip.qvel if clip.qvel is not None else self._differentiate(clip.qpos, body)
        # a clip without the servos' state: filter its actions from the target holding frame 0
        self.act = (
            clip.act if clip.act is not None else body.filter_activations(self.action, self.ctrl[0])
        )
        self.labels = clip.labels

    @staticmethod
    def _differentiate(qpos: np.ndarray, body: RatBody) -> np.ndarray:
        qvel = np.zeros((len(qpos), body.model.nv))
        for k in range(len(qpos) - 1):
            mujoco.mj_differentiatePos(
                body.model, qvel[k], body.cfg.control_dt, qpos[k], qpos[k + 1]
            )
        qvel[-1] = qvel[-2] if len(qpos) > 1 else 0.0
        return qvel

    @property
    def frames(self) -> int:
        return len(self.qpos)

    def start(self, body: RatBody, t: int) -> None:
        """Put ``body`` in frame ``t``'s state: pose, velocity and the servos' activations."""
        body.set_state(self.qpos[t], self.qvel[t], self.act[t])

    def window(self, body: RatBody, t: int, horizon: int) -> np.ndarray:
        """The next ``horizon`` reference frames seen from the body: joint angles minus the
        body's, and where the reference's root goes from frame ``t``, in the torso frame.

        The root term is the reference's own displacement, not its offset from the body: the
        expert does not track the root, so a body that lags behind a trot sees an offset
        that grows beyond anything in training, and a student reading it stopped travelling
        (0.05-0.18 m where the reference went 0.83-1.13 m in 4 s; 0.32-0.37 m with this)."""
        idx = np.minimum(np.arange(t + 1, t + 1 + horizon), self.frames - 1)
        ref = self.qpos[idx]
        joints = ref[:, 7:] - body.data.qpos[7:]
        torso = body.data.xmat[body.layout.torso].reshape(3, 3)
        root = (ref[:, :3] - self.qpos[t, :3]) @ torso
        return np.concatenate([10.0 * root, joints], axis=1).ravel().astype(np.float32)

    def expert(self, body: RatBody, t: int, gain: float) -> np.ndarray:
        return np.clip(self.action[t] + gain * (self.ctrl[t] - body.current_ctrl()), -1.0, 1.0)

    def joint_error(self, body: RatBody, t: int, joints: np.ndarray | slice = ALL_HINGES) -> float:
        """RMS joint-angle difference to frame ``t`` over ``joints`` (qpos addresses; all
        67 hinges by default), rad."""
        return float(np.sqrt(np.mean((body.data.qpos[joints] - self.qpos[t, joints]) ** 2)))


class Controller:
    """A student: ``reset()`` at a new rollout, then an action per (proprio, window)."""

    def reset(self) -> None: ...

    def __call__(self, proprio: np.ndarray, window: np.ndarray) -> np.ndarray: ...


@dataclass
class Rollout:
    proprio: np.ndarray  # (n, P)
    window: np.ndarray  # (n, W)
    label: np.ndarray  # (n, 38) the expert's action at each visited state
    action: np.ndarray  # (n, 38) what was done
    error: np.ndarray  # (n,) RMS error over all 67 hinges after the step
    limb_error: np.ndarray  # (n,) RMS error over the actuated limb joints after the step
    qpos: np.ndarray  # (n, 74) after the step
    fell: bool  # the body fell
    stopped: bool  # it fell, or drifted more than abort_error from the reference


def track(
    body: RatBody,
    ref: Reference,
    start: int,
    steps: int,
    student: Controller | None,
    horizon: int,
    gain: float,
    expert_share: float,
    rng: np.random.Generator,
    abort_error: float = 0.6,
    action_noise: float = 0.0,
) -> Rollout:
    """Follow ``ref`` from frame ``start`` for up to ``steps`` steps; ``student=None`` is
    the expert itself. Stops early on a fall or an all-hinge error above ``abort_error``
    rad."""
    ref.start(body, start)
    if student is not None:
        student.reset()
    rows: dict[str, list] = {
        k: [] for k in ("proprio", "window", "label", "action", "error", "limb_error", "qpos")
    }
    fell = stopped = False
    for t in range(start, min(start + steps, ref.frames - 1)):
        proprio = body.proprioception()
        window = ref.window(body, t, horizon)
        label = ref.expert(body, t, gain)
        use_expert = student is None or rng.random() < expert_share
        action = label if use_expert else student(proprio, window)  # type: ignore[misc]
        if action_noise:
            action = np.clip(action + rng.normal(0.0, action_noise, action.shape), -1, 1)
        body.step(action)
        error = ref.joint_error(body, t + 1)
        for key, value in (
            ("proprio", proprio),
            ("window", window),
            ("label", label),
            ("action", action),
            ("error", error),
            ("limb_error", ref.joint_error(body, t + 1, body.actuated_qpos)),
            ("qpos", body.data.qpos.copy()),
        ):
            rows[key].append(value)
        fell = body.fallen
        if fell or error > abort_error:
            stopped = True
            break
    arrays = {k: np.asarray(v, dtype=np.float32) for k, v in rows.items()}
    return Rollout(fell=fell, stopped=stopped, **arrays)


class Segments:
    """The aggregated DAgger data as equal-length sequences for the sequence models:
    ``sample(batch, length)`` draws windows from rollouts at least ``length`` long. Only
    what training reads is kept (visited proprioception, reference window, expert label),
    so the whole buffer fits in a checkpoint: ``state_dict`` holds it as float32 tensors."""

    FIELDS = ("proprio", "window", "label")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.rollouts: list[dict[str, np.ndarray]] = []

    def add(self, rollout: Rollout) -> None:
        if len(rollout.label):
            self.rollouts.append({k: getattr(rollout, k) for k in self.FIELDS})
        while len(self) > self.capacity:
            self.rollouts.pop(0)

    def __len__(self) -> int:
        return sum(len(r["label"]) for r in self.rollouts)

    def sample(self, batch: int, length: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        pool = [r for r in self.rollouts if len(r["label"]) >= length]
        if not pool:
            raise ValueError(f"no rollout is {length} steps long yet")
        out: dict[str, list] = {k: [] for k in self.FIELDS}
        for i in rng.integers(0, len(pool), batch):
            r = pool[i]
            s = int(rng.integers(0, len(r["label"]) - length + 1))
            for key in out:
                out[key].append(r[key][s : s + length])
        return {k: np.stack(v, axis=1) for k, v in out.items()}  # (length, batch, ...)

    def state_dict(self) -> dict[str, Any]:
        lengths = [len(r["label"]) for r in self.rollouts]
        state: dict[str, Any] = {"lengths": torch.tensor(lengths, dtype=torch.int64)}
        for key in self.FIELDS:
            parts = [r[key] for r in self.rollouts]
            state[key] = torch.from_numpy(np.concatenate(parts)) if parts else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        lengths = state["lengths"].tolist()
        ends = np.cumsum(lengths)
        self.rollouts = [
            {key: state[key][end - n : end].numpy().copy() for key in self.FIELDS}
            for n, end in zip(lengths, ends, strict=True)
        ]


def evaluate_tracking(
    body: RatBody,
    refs: list[Reference],
    student: Controller | None,
    horizon: int,
    gain: float,
    steps: int,
    rng: np.random.Generator,
    abort_error: float = 0.6,
) -> dict[str, float]:
    """Track each reference from its first frame: the mean RMS joint error (rad) over the
    actuated limb joints (``RatBody.actuated_qpos``, the joints W1 grades), ``tracking_error``,
    and over all 67 hinges, ``tracking_error_all_hinges`` (the spine and tail hinges move a
    few degrees); a rollout that stopped early counts the abort error for the frames it
    missed. Also the share of rollouts that fell and the share that stopped early (fell or
    drifted past ``abort_error`` over all hinges)."""
    limbs, hinges, falls, stops = [], [], 0, 0
    for ref in refs:
        n = min(steps, ref.frames - 1)
        r = track(body, ref, 0, n, student, horizon, gain, 0.0, rng, abort_error)
        missed = (n - len(r.error)) * abort_error
        limbs.append((r.limb_error.sum() + missed) / n)
        hinges.append((r.error.sum() + missed) / n)
        falls += r.fell
        stops += r.stopped
    count = max(1, len(refs))
    return {
        "tracking_error": float(np.mean(limbs)),
        "tracking_error_all_hinges": float(np.mean(hinges)),
        "fall_rate": falls / count,
        "stop_rate": stops / count,
    }


class SequenceModel(Protocol):
    """A motor model trained by :class:`ImitationTrainer` (NPMP, adapters, multitask)."""

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]: ...

    def controller(self, deterministic: bool = False) -> Controller: ...

    def parameters(self) -> Any: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> Any: ...


class ImitationTrainer:
    """DAgger on the library, one iteration a :meth:`step`: roll the student out from random
    frames of random clips (a share of the actions still the expert's early on), keep every
    visited state with the expert's label, then take gradient steps on sequences. The
    aggregated states are checkpointed with the model (2.4 kB a state, so at most
    ``capacity`` x 2.4 kB: 97 MB at the end of the default 40 x 16 rollouts), so a run
    resumed after a kill trains on exactly what it would have."""

    def __init__(
        self,
        model: SequenceModel,
        body: RatBody,
        refs: list[Reference],
        cfg: ImitationConfig,
        seed: int,
    ) -> None:
        self.model, self.body, self.refs, self.cfg = model, body, refs, cfg
        self.total, self.done = cfg.iterations, 0
        self.rng = np.random.default_rng(seed)
        self.generators = [self.rng]
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.data = Segments(cfg.capacity)

    def expert_share(self) -> float:
        warm = max(1, self.total // 2)
        return self.cfg.expert_share * max(0.0, 1.0 - self.done / warm)

    def collect(
        self,
        rollouts: int | None = None,
        expert_share: float | None = None,
        student: Controller | None = None,
    ) -> dict[str, float]:
        """Roll the student out (``expert_share`` of its actions the expert's; default:
        the decaying schedule) and keep the visited states with the expert's labels.
        ``student`` acts instead of the model's own controller (its rollouts still train
        the model)."""
        student = student or self.model.controller()
        share = self.expert_share() if expert_share is None else expert_share
        count = rollouts or self.cfg.rollouts
        errors, falls, stops = [], 0, 0
        for _ in range(count):
            ref = self.refs[int(self.rng.integers(len(self.refs)))]
            start = int(self.rng.integers(0, max(1, ref.frames - self.cfg.sequence - 1)))
            with torch.no_grad():
                r = track(
                    self.body,
                    ref,
                    start,
                    self.cfg.rollout_steps,
                    student,
                    self.cfg.horizon,
                    self.cfg.gain,
                    share,
                    self.rng,
                    self.cfg.abort_error,
                    self.cfg.action_noise,
                )
            self.data.add(r)
            errors.append(float(r.error.mean()) if len(r.error) else self.cfg.abort_error)
            falls += r.fell
            stops += r.stopped
        return {
            "rollout_error": float(np.mean(errors)),
            "rollout_falls": falls / count,
            "rollout_stops": stops / count,
        }

    def step(self) -> dict[str, float]:
        metrics = self.collect()
        logs: list[dict[str, float]] = []
        for _ in range(self.cfg.updates):
            batch = self.data.sample(self.cfg.batch, self.cfg.sequence, self.rng)
            loss, parts = self.model.loss({k: torch.as_tensor(v) for k, v in batch.items()})
            self.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.optimizer.step()
            logs.append(parts)
        self.done += 1
        return metrics | {k: float(np.mean([p[k] for p in logs])) for k in logs[0]}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "done": self.done,
            "data": self.data.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.done = int(state["done"])
        self.data.load_state_dict(state["data"])
