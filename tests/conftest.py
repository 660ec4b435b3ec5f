"""Shared fixtures: one torch thread, temp run folders, the reference app importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

REFERENCE = Path(__file__).parent / "reference"
sys.path.insert(0, str(REFERENCE))
# Ray workers and subprocesses inherit this, so they can import the reference app too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REFERENCE), os.environ.get("PYTHONPATH")])
)
torch.set_num_threads(1)
