"""Shared fixtures: one torch thread, temp run folders, the reference app importable."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

REFERENCE = Path(__file__).parent / "reference"
sys.path.insert(0, str(REFERENCE))
# Ray workers and subprocesses inherit this, so they can import the reference app too.
os.environ["PYTHONPATH"] = os.pathsep.join(
    filter(None, [str(REFERENCE), os.environ.get("PYTHONPATH")])
)
torch.set_num_threads(1)


@pytest.fixture
def tiny_cartpole_overrides() -> list[str]:
    """Shrinks the reference preset to seconds of training."""
    return [
        "algo.total_steps=1024",
        "algo.rollout_steps=64",
        "env.num_envs=2",
        "eval.episodes=2",
        "experiment.checkpoint_every=2",
        "experiment.loggers=['jsonl','tensorboard']",
    ]
