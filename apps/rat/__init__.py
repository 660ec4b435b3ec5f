"""Rat motor control: the dm_control rat with SCAMPER-style motion and behaviour priors and
a low-rank-adapter motor core (in development, issue 27)."""

import os

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering; set before mujoco loads
