"""Rat motor control: the dm_control rat stepped with MuJoCo directly, a CPG motion library,
SCAMPER-style motion and behaviour priors, a low-rank-adapter motor core with an option
policy, sparse tasks against raw-action PPO and SAC, NWB export of its activity."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering; set before mujoco loads

from pathlib import Path  # noqa: E402

from fieldrl.app import App  # noqa: E402
from fieldrl.apps.rat.cli import add_commands  # noqa: E402
from fieldrl.apps.rat.config import RatConfig  # noqa: E402

APP = App(
    summary="An embodied MuJoCo rat: motion and behaviour priors, adapter motor core, tasks.",
    config_model=RatConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="motion/tracking_error",
    sweep_mode="min",
    status="in development (issue 27)",
    units={"tracking_error": "rad", "success_rate": "share", "w1_library": "rad"},
    add_commands=add_commands,
    data_key="library.files",
    data_flag="--library",
    data_help="Your joint-angle trajectories (npz or HDF5, the library layout).",
)
