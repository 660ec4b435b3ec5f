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
# Console output must not depend on the terminal or the CPU name's length: rich and typer read
# these when their consoles are built, so every run wraps (if at all) the same way. LC_ALL
# reaches the subprocesses tests start (this process keeps Python's default C numeric locale).
os.environ.update(COLUMNS="400", LINES="50", TERMINAL_WIDTH="400", LC_ALL="C.UTF-8")


@pytest.fixture
def kill_and_resume(tmp_path, monkeypatch):
    """``(build, kill_at) -> (straight, resumed)``: trains ``build()`` through the core loop
    straight, then again killed right after its checkpoint at ``done == kill_at`` (or, with
    ``nth=N``, after its N-th checkpoint) and resumed from that run folder (checkpoints
    every iteration)."""
    from fieldrl.checkpoint import CheckpointManager
    from fieldrl.config import FieldrlConfig
    from fieldrl.runs import Run
    from fieldrl.training import fit

    cfg = FieldrlConfig(experiment={"loggers": ["jsonl"], "checkpoint_every": 1})

    def train(build, kill_at=None, nth=None):
        with Run.create(cfg, root=tmp_path / "straight") as run:
            straight = fit(build, run, seed=0, description="straight")
        original, saved = CheckpointManager.save, []

        def save_then_die(self, step, *args, **kwargs):
            path = original(self, step, *args, **kwargs)
            saved.append(step)
            if step == kill_at or len(saved) == nth:
                raise KeyboardInterrupt
            return path

        killed = Run.create(cfg, root=tmp_path / "killed")
        with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt), killed:
            patch.setattr(CheckpointManager, "save", save_then_die)
            fit(build, killed, seed=0, description="killed")
        with Run.resume(killed.dir, FieldrlConfig) as again:
            resumed = fit(build, again, seed=0, description="resumed")
        return straight, resumed

    return train


@pytest.fixture
def report_rebuilds():
    """``(app, folder)``: the folder's benchmark.json validates against the schema, and
    ``fieldrl <app> report folder`` rebuilds the same report.md from it alone."""
    from typer.testing import CliRunner

    from fieldrl.benchmark import load_benchmark
    from fieldrl.cli import build_root

    def check(app, folder):
        assert load_benchmark(folder)["app"] == app
        first = (folder / "report.md").read_text()
        (folder / "report.md").unlink()
        result = CliRunner().invoke(build_root(), [app, "report", str(folder)])
        assert result.exit_code == 0, result.output
        assert (folder / "report.md").read_text() == first

    return check
