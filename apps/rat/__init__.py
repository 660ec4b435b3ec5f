"""Rat motor control: the dm_control rat stepped with MuJoCo directly, a CPG motion library,
SCAMPER-style motion and behaviour priors, a low-rank-adapter motor core with an option
policy, sparse tasks against raw-action PPO and SAC, NWB export of its activity.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``; ``body`` (the MuJoCo rat), ``tasks``, ``env``; ``fidelity`` (dm_control's);
- ``cpg``, ``library``: the motion library; ``imitation``, ``npmp``, ``adapters``: the motor
  models; ``agents``: task agents on top;
- ``pipeline``: ``train``, ``load``, ``evaluate``; ``export`` (NWB); ``cli``: ``library``,
  ``tune-cpg``, ``export-activations``, ``speed``;
- ``service``: ``service``, ``example_request``; ``benchmark``, ``naturalness``,
  ``metrics``: the benchmark and its grading; ``report``: its sections and the demo.
"""

import os
import sys

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering; set before mujoco loads


def _absl_never_closes_stderr() -> None:
    """absl (under dm_control) makes a handler at import bound to the sys.stderr of that
    moment, and closes that stream when logging shuts down unless it is sys.stderr then. A
    server's logging.config.dictConfig (uvicorn, in `fieldrl run-all`) shuts logging down
    while a CLI runner has swapped sys.stderr: absl then closed the process's stderr (or
    pytest's capture of it). Pointed at sys.__stderr__, which it never closes."""
    try:
        import absl.logging
    except ImportError:  # the rat extra is not installed
        return
    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__


_absl_never_closes_stderr()

from pathlib import Path  # noqa: E402

from fieldrl.app import App  # noqa: E402
from fieldrl.apps.rat.config import RatConfig  # noqa: E402

APP = App(
    summary="An embodied MuJoCo rat: motion and behaviour priors, adapter motor core, tasks.",
    config_model=RatConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="motion/tracking_error",
    sweep_mode="min",
    status="ready (issue 27; priors miss the sparse tasks, behaviour prior does not walk)",
    units={"tracking_error": "rad", "success_rate": "share", "w1_library": "rad"},
    add_commands="cli:add_commands",
    data_key="library.files",
    data_flag="--library",
    data_help="Your joint-angle trajectories (npz or HDF5, the library layout).",
)
