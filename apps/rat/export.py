"""Export the network's activity with the body's kinematics as NWB (Neurodata Without
Borders), so it can be set beside neural recordings (MIMIC compared its virtual rat's units
with striatum and motor cortex this way).

One NWB file holds, at the control rate (50 Hz):
- ``acquisition/joint_angles`` (frames x 67, rad; the joint names in the description),
  ``acquisition/root_position`` (frames x 3, m) and ``acquisition/motor_commands``
  (frames x 38 position targets);
- ``processing/network``: ``track`` mode: ``core_hidden`` (the adapter core's GRU state)
  and ``adapter_code``; ``explore`` mode: ``latent`` and ``decoder_hidden``;
- ``trials``: one interval per episode.
"""

from __future__ import annotations

import datetime as dt
import uuid
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.imitation import Reference
from fieldrl.apps.rat.npmp import LatentWalker
from fieldrl.apps.rat.pipeline import MotorSystem, build_library, load
from fieldrl.runs import open_run

__all__ = ["export_activations"]


def _record_track(
    cfg: RatConfig, env: RatEnv, models: MotorSystem, refs: list[Reference], seconds: float
) -> list[dict[str, np.ndarray]]:
    body, core = env.body, models.adapters
    episodes = []
    for ref in refs:
        steps = min(round(seconds / body.cfg.control_dt), ref.frames - 1)
        ref.start(body, 0)
        h = core.core.initial_state(1)
        rows: dict[str, list] = {k: [] for k in ("qpos", "action", "core_hidden", "adapter_code")}
        for t in range(steps):
            p = torch.as_tensor(body.proprioception())[None, None]
            w = torch.as_tensor(ref.window(body, t, cfg.imitation.horizon))[None, None]
            with torch.no_grad():
                out, codes, h = core.run(p, w, h)
            action = out[0, 0].numpy().astype(np.float64)
            body.step(action)
            for key, value in (
                ("qpos", body.data.qpos.copy()),
                ("action", action),
                ("core_hidden", h[0].numpy()),
                ("adapter_code", codes[0, 0].numpy()),
            ):
                rows[key].append(value)
            if body.fallen:
                break
        episodes.append({k: np.asarray(v) for k, v in rows.items()})
    return episodes


def _record_explore(
    env: RatEnv, models: MotorSystem, episodes: int, seconds: float, seed: int
) -> list[dict[str, np.ndarray]]:
    body = env.body
    decoder_hidden = models.motion.decoder[:-1]  # every layer but the output
    out = []
    for e in range(episodes):
        rng = np.random.default_rng(seed + e)
        walker = LatentWalker(models.motion, models.behaviour, rng)
        env.reset(seed=seed + e)
        rows: dict[str, list] = {k: [] for k in ("qpos", "action", "latent", "decoder_hidden")}
        for _ in range(round(seconds / body.cfg.control_dt)):
            proprio = body.proprioception()
            action = walker(proprio)
            with torch.no_grad():
                hidden = decoder_hidden(torch.cat([torch.as_tensor(proprio)[None], walker.z], -1))
            body.step(action)
            for key, value in (
                ("qpos", body.data.qpos.copy()),
                ("action", action),
                ("latent", walker.z[0].numpy()),
                ("decoder_hidden", hidden[0].numpy()),
            ):
                rows[key].append(value)
            if body.fallen:
                break
        out.append({k: np.asarray(v) for k, v in rows.items()})
    return out


def export_activations(
    run_dir: str | Path,
    out: str | Path,
    mode: Literal["track", "explore"],
    episodes: int = 4,
    seconds: float = 4.0,
    seed: int = 0,
) -> Path:
    """Roll the run's network out (tracking held-out library clips, or exploring) and write
    activity and kinematics to ``out`` (.nwb)."""
    from pynwb import NWBHDF5IO, NWBFile, TimeSeries
    from pynwb.behavior import Position

    run = open_run(run_dir, RatConfig)
    cfg, models = run.config, load(run).models
    env = RatEnv(cfg)
    if mode == "track":
        held = build_library(cfg, env.body, "heldout")
        refs = [Reference(c, env.body, held.fps) for c in held.clips[:episodes]]
        recorded = _record_track(cfg, env, models, refs, seconds)
        names = ("core_hidden", "adapter_code")
    else:
        recorded = _record_explore(env, models, episodes, seconds, seed)
        names = ("latent", "decoder_hidden")
    rate = 1.0 / cfg.body.control_dt
    joined = {k: np.concatenate([r[k] for r in recorded]) for k in recorded[0]}
    nwb = NWBFile(
        session_description=f"fieldrl rat: {mode} rollouts of run {Path(run_dir).name}",
        identifier=str(uuid.uuid4()),
        session_start_time=dt.datetime.now(dt.UTC),
        experimenter=["fieldrl"],
        lab="virtual rodent (dm_control rat, MuJoCo)",
    )
    joints = ", ".join(env.body.joint_names)
    nwb.add_acquisition(
        TimeSeries(
            name="joint_angles",
            data=joined["qpos"][:, 7:],
            unit="rad",
            rate=rate,
            description=f"columns: {joints}",
        )
    )
    position = Position(name="root_position")
    position.create_spatial_series(
        name="root",
        data=joined["qpos"][:, :3],
        rate=rate,
        reference_frame="arena origin, z up",
        unit="meters",
    )
    nwb.add_acquisition(position)
    actuators = ", ".join(env.body.actuator_names)
    nwb.add_acquisition(
        TimeSeries(
            name="motor_commands",
            data=joined["action"],
            unit="a.u.",
            rate=rate,
            description=f"position targets in [-1, 1]: {actuators}",
        )
    )
    network = nwb.create_processing_module("network", f"activity of the rat's network ({mode})")
    for name in names:
        network.add(TimeSeries(name=name, data=joined[name], unit="a.u.", rate=rate))
    start = 0.0
    for r in recorded:
        length = len(r["qpos"]) / rate
        nwb.add_trial(start_time=start, stop_time=start + length)
        start += length
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.stem + ".partial.nwb")
    with NWBHDF5IO(str(partial), "w") as io:
        io.write(nwb)
    partial.replace(out)
    return out
