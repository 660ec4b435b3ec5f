"""The dm_control rat, compiled once from its MJCF and stepped with ``mujoco`` directly.

dm_control's composer runs observables, callbacks and Python contact loops around every
physics step; this wrapper does only what training needs: set the 38 position targets,
run ``control_dt / physics_dt`` physics steps in one ``mj_step`` call, and read the
proprioception out of ``MjData`` with a few array slices.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import mujoco
import numpy as np
from dm_control import mjcf
from dm_control.locomotion.walkers import rodent

from fieldrl.apps.rat.config import BodyConfig

__all__ = ["APPENDAGES", "TOUCH", "RatBody", "build_model", "new_arena"]

TOUCH = ("palm_L", "palm_R", "sole_L", "sole_R")
# The bodies whose geoms count as each paw's contact: fore left, fore right, hind left, hind
# right (the order of TOUCH). The touch sensors' small sites register few of these contacts.
PAWS = (("hand_L", "finger_L"), ("hand_R", "finger_R"), ("foot_L", "toe_L"), ("foot_R", "toe_R"))
APPENDAGES = ("lower_arm_R", "lower_arm_L", "foot_R", "foot_L")  # framepos sensors, torso frame
PREFIX = "walker/"


def new_arena(name: str = "arena") -> mjcf.RootElement:
    """An empty world with light and a checker texture, ready for a task's geometry.

    The compiler's mass and inertia floors are dm_control's (``composer/arena.xml``):
    without them the rat's root frame compiles with zero mass and the body drifts from
    dm_control's rat (3e-5 rad in 5 control steps from rest, 1e-2 rad from a moving state)."""
    root = mjcf.RootElement(model=name)
    root.compiler.boundmass = 1e-5
    root.compiler.boundinertia = 1e-11
    root.visual.headlight.ambient = (0.4, 0.4, 0.4)
    root.visual.headlight.diffuse = (0.6, 0.6, 0.6)
    texture = root.asset.add(
        "texture",
        name="grid",
        type="2d",
        builtin="checker",
        width=256,
        height=256,
        rgb1=(0.25, 0.28, 0.32),
        rgb2=(0.32, 0.36, 0.40),
    )
    root.asset.add("material", name="ground", texture=texture, texrepeat=(8, 8))
    root.asset.add("material", name="wall", rgba=(0.45, 0.5, 0.55, 1))
    root.asset.add("material", name="target", rgba=(0.9, 0.3, 0.2, 0.8))
    root.worldbody.add("light", pos=(0, 0, 3), dir=(0, 0, -1), directional=True)
    return root


def build_model(arena: mjcf.RootElement) -> mujoco.MjModel:
    """Attach a fresh rat (free joint first, so qpos[:7] is its root) and compile."""
    rat = rodent.Rat(name=PREFIX.rstrip("/"))
    arena.attach(rat.mjcf_model).add("freejoint")
    return mujoco.MjModel.from_xml_string(arena.to_xml_string(), arena.get_assets())


def _ids(model: mujoco.MjModel, kind: mujoco.mjtObj, names: tuple[str, ...]) -> np.ndarray:
    return np.array([mujoco.mj_name2id(model, kind, PREFIX + name) for name in names])


@dataclass(frozen=True)
class _Layout:
    """Where each part of the proprioception lives in MjData."""

    torso: int
    head: int
    touch: np.ndarray  # sensordata addresses
    appendages: np.ndarray  # sensordata addresses, 3 each
    velocimeter: int
    gyro: int
    accelerometer: int


class RatBody:
    """One rat in one arena: reset, step with 38 actions in [-1, 1], read its state.

    ``build`` adds the task's geometry to the arena before the rat is attached."""

    def __init__(self, cfg: BodyConfig, build: Callable[[mjcf.RootElement], None]) -> None:
        arena = new_arena()
        build(arena)
        self.model = build_model(arena)
        self.model.opt.timestep = cfg.physics_dt
        if cfg.dm_control_solver:  # what dm_control's locomotion arenas set
            self.model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
            self.model.opt.noslip_iterations = 5
        self.data = mujoco.MjData(self.model)
        self.cfg = cfg
        self.substeps = round(cfg.control_dt / cfg.physics_dt)
        self.n_actions = self.model.nu
        self.joint_names = tuple(
            self.model.joint(i).name.removeprefix(PREFIX) for i in range(1, self.model.njnt)
        )
        self.actuator_names = tuple(
            self.model.actuator(i).name.removeprefix(PREFIX) for i in range(self.model.nu)
        )
        sensor = self.model.sensor_adr
        sensors = mujoco.mjtObj.mjOBJ_SENSOR
        appendage_ids = _ids(self.model, sensors, tuple(f"{a}_end_effector" for a in APPENDAGES))
        first = {
            n: int(sensor[_ids(self.model, sensors, (n,))][0])
            for n in ("velocimeter", "gyro", "accelerometer")
        }
        self.layout = _Layout(
            torso=mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, PREFIX + "torso"),
            head=mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_BODY, PREFIX + "skull"),
            touch=sensor[_ids(self.model, sensors, TOUCH)],
            appendages=(sensor[appendage_ids][:, None] + np.arange(3)).ravel(),
            **first,
        )
        # per geom: which paw it belongs to (0-3), -1 other parts of the rat, -2 the arena,
        # -3 the tail (caudal vertebrae C1-C30, which a rat drags: not a fault)
        self._paw_of_geom = np.full(self.model.ngeom, -2)
        rat_bodies = {
            i for i in range(self.model.nbody) if self.model.body(i).name.startswith(PREFIX)
        }
        for g in range(self.model.ngeom):
            name = self.model.body(self.model.geom_bodyid[g]).name.removeprefix(PREFIX)
            if self.model.geom_bodyid[g] in rat_bodies:
                tail = re.fullmatch(r"vertebra_C\d+", name) is not None
                paw = next((k for k, paw in enumerate(PAWS) if name in paw), -1)
                self._paw_of_geom[g] = -3 if tail else paw
        self.n_joints = self.model.nq - 7
        # qpos addresses of the joints an actuator drives directly (the limbs, jaw, atlas;
        # the spine and tail move through tendons)
        direct = self.model.actuator_trntype == mujoco.mjtTrn.mjTRN_JOINT
        self.actuated_qpos = self.model.jnt_qposadr[self.model.actuator_trnid[direct, 0]]
        self.proprio_size = self.proprioception().size

    # -- state ---------------------------------------------------------------------------
    def reset(
        self,
        rng: np.random.Generator,
        xy: tuple[float, float] = (0.0, 0.0),
        yaw: float | None = None,
        height: float | None = None,
    ) -> None:
        """The upright pose at ``xy`` facing ``yaw`` (random if None), joints jittered."""
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        yaw = rng.uniform(-np.pi, np.pi) if yaw is None else yaw
        d.qpos[:3] = (xy[0], xy[1], self.cfg.spawn_height if height is None else height)
        d.qpos[3:7] = (np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2))
        joints = d.qpos[7:] + rng.normal(0.0, self.cfg.joint_noise, self.n_joints)
        low, high = m.jnt_range[1:, 0], m.jnt_range[1:, 1]
        limited = m.jnt_limited[1:].astype(bool)
        d.qpos[7:] = np.where(limited, np.clip(joints, low, high), joints)
        self.forward()

    def joint_ranges(self) -> np.ndarray:
        """(joints, 2): each hinge's [low, high] in radians, [-inf, inf] where unlimited."""
        m = self.model
        limited = m.jnt_limited[1:, None].astype(bool)
        return np.where(limited, m.jnt_range[1:], [-np.inf, np.inf])

    def step(self, action: np.ndarray) -> None:
        """Hold ``action`` (position targets in [-1, 1]) for one control step."""
        np.clip(action, -1.0, 1.0, out=self.data.ctrl)
        mujoco.mj_step(self.model, self.data, nstep=self.substeps)

    def forward(self) -> None:
        """Recompute positions and sensors after the state or the arena was edited."""
        mujoco.mj_forward(self.model, self.data)

    def current_ctrl(self) -> np.ndarray:
        """The position targets that would hold the body where it is now."""
        return _ctrl_from_lengths(self.model, self.data.actuator_length)

    def pose_ctrl(self, qpos: np.ndarray) -> np.ndarray:
        """Position targets (frames, 38) that hold each configuration in ``qpos`` (frames, 74):
        the action labels of a trajectory given as joint angles only."""
        scratch = mujoco.MjData(self.model)
        out = np.empty((len(qpos), self.model.nu))
        for k, frame in enumerate(qpos):
            scratch.qpos[:] = frame
            mujoco.mj_kinematics(self.model, scratch)
            mujoco.mj_comPos(self.model, scratch)
            mujoco.mj_tendon(self.model, scratch)
            mujoco.mj_transmission(self.model, scratch)
            out[k] = _ctrl_from_lengths(self.model, scratch.actuator_length)
        return out

    def set_state(
        self, qpos: np.ndarray, qvel: np.ndarray | None = None, act: np.ndarray | None = None
    ) -> None:
        """Put the body in a given configuration (qpos over all 74 coordinates), velocity and
        actuator activation (the servos' filtered targets)."""
        self.data.qpos[:] = qpos
        self.data.qvel[:] = 0.0 if qvel is None else qvel
        self.data.act[:] = 0.0 if act is None else act
        self.forward()

    def filter_activations(self, actions: np.ndarray, first: np.ndarray) -> np.ndarray:
        """The servos' activations (MuJoCo's ``act``, frames x 38) along a clip whose frame t+1
        followed ``actions[t]``, from ``first`` at frame 0: each servo's target passes a
        first-order filter (time constant ``dynprm[0]``, integrated as the model is, once per
        physics step), so the state of a clip frame is (qpos, qvel, act), not (qpos, qvel)."""
        m = self.model
        tau, h = m.actuator_dynprm[:, 0], m.opt.timestep
        filters = [int(mujoco.mjtDyn.mjDYN_FILTER), int(mujoco.mjtDyn.mjDYN_FILTEREXACT)]
        if (
            not np.isin(m.actuator_dyntype, filters).all()
            or m.actuator_actlimited.any()
            or (m.actuator_actnum != 1).any()
            or m.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4
        ):
            raise ValueError(
                "filter_activations models unclamped filter actuators, one activation each, "
                "integrated once a physics step (not RK4)"
            )
        exact = m.actuator_dyntype == filters[1]
        keep = np.where(exact, np.exp(-h / tau), 1.0 - h / tau) ** self.substeps
        low, high = np.where(m.actuator_ctrllimited[:, None], m.actuator_ctrlrange, [-1.0, 1.0]).T
        act = np.empty((len(actions), m.na))
        act[0] = first
        for t in range(len(actions) - 1):
            target = np.clip(np.clip(actions[t], -1.0, 1.0), low, high)  # step's clip, MuJoCo's
            act[t + 1] = target + keep * (act[t] - target)
        return act

    @property
    def time(self) -> float:
        return float(self.data.time)

    @property
    def root_xy(self) -> np.ndarray:
        return self.data.qpos[:2].copy()

    @property
    def root_height(self) -> float:
        return float(self.data.qpos[2])

    @property
    def torso_xpos(self) -> np.ndarray:
        return self.data.xpos[self.layout.torso].copy()

    @property
    def head_height(self) -> float:
        return float(self.data.xpos[self.layout.head, 2])

    @property
    def upright(self) -> float:
        """Vertical component of the torso's up axis: 1 standing, 0 on its side."""
        return float(self.data.xmat[self.layout.torso, 8])

    @property
    def heading(self) -> float:
        """Yaw of the torso's forward (x) axis, rad."""
        xmat = self.data.xmat[self.layout.torso]
        return float(np.arctan2(xmat[3], xmat[0]))

    @property
    def fallen(self) -> bool:
        return self.upright < self.cfg.fall_upright

    def ground_contacts(self) -> tuple[np.ndarray, bool]:
        """Which paws (fore L, fore R, hind L, hind R) touch the arena, and whether any
        other part of the rat does (elbows, belly, head)."""
        geoms = self.data.contact.geom[: self.data.ncon]
        owner = self._paw_of_geom[geoms]  # (ncon, 2)
        with_arena = (owner == -2).any(axis=1) & (owner != -3).all(axis=1)
        rat_side = owner.max(axis=1)[with_arena]
        paws = np.zeros(4, bool)
        paws[rat_side[rat_side >= 0]] = True
        return paws, bool((rat_side == -1).any())

    def appendages_world(self) -> np.ndarray:
        """Paws and feet in the world frame, shape (4, 3)."""
        local = self.data.sensordata[self.layout.appendages].reshape(4, 3)
        torso = self.layout.torso
        return self.data.xpos[torso] + local @ self.data.xmat[torso].reshape(3, 3).T

    def egocentric(self, points: np.ndarray) -> np.ndarray:
        """World points (n, 3) in the torso frame."""
        torso = self.layout.torso
        return (points - self.data.xpos[torso]) @ self.data.xmat[torso].reshape(3, 3)

    def proprioception(self) -> np.ndarray:
        """Joint angles and velocities, actuator activations, velocimeter, gyro,
        accelerometer, touch (log1p), paws and feet in the torso frame, torso up axis and
        head height: what the rat's own senses report, float32."""
        d, lay = self.data, self.layout
        s = d.sensordata
        return np.concatenate(
            (
                d.qpos[7:],
                0.1 * d.qvel[6:],
                d.act,
                s[lay.velocimeter : lay.velocimeter + 3],
                0.1 * s[lay.gyro : lay.gyro + 3],
                0.01 * s[lay.accelerometer : lay.accelerometer + 3],
                np.log1p(s[lay.touch]),
                10.0 * s[lay.appendages],
                d.xmat[lay.torso, 6:9],
                (10.0 * d.xpos[lay.head, 2],),
            )
        ).astype(np.float32)


def _ctrl_from_lengths(model: mujoco.MjModel, lengths: np.ndarray) -> np.ndarray:
    """The position targets that hold actuators at ``lengths``: the ctrl where the servo's
    force ``gain x ctrl + b0 + b1 x length`` is zero, clipped to [-1, 1]."""
    gain, b0, b1 = (
        model.actuator_gainprm[:, 0],
        model.actuator_biasprm[:, 0],
        model.actuator_biasprm[:, 1],
    )
    return np.clip((-b1 * lengths - b0) / gain, -1.0, 1.0)
