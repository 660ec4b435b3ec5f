"""The core training loop: resume, checkpoint timing, logging, the finished state."""

import json

import numpy as np
import pytest
import torch

from fieldrl.checkpoint import CheckpointError, CheckpointManager
from fieldrl.config import FieldrlConfig
from fieldrl.runs import Run, read_metrics
from fieldrl.training import LAYOUT, finished_step, fit


class Noisy:
    """A toy trainer whose every step draws from torch, numpy's global generator and its own."""

    def __init__(self, total: int = 6) -> None:
        self.total, self.done = total, 0
        self.rng = np.random.default_rng(7)
        self.generators = (self.rng,)
        self.weights = torch.randn(3)
        self.closed = False

    def step(self) -> dict[str, float]:
        self.weights += torch.randn(3) + float(np.random.rand()) + float(self.rng.random())
        self.done += 1
        return {"norm": float(self.weights.norm())}

    def state_dict(self) -> dict:
        return {"weights": self.weights.clone(), "done": self.done}

    def load_state_dict(self, state: dict) -> None:
        self.weights, self.done = state["weights"].clone(), int(state["done"])

    def close(self) -> None:
        self.closed = True


def _config(every: int = 2) -> FieldrlConfig:
    return FieldrlConfig(experiment={"loggers": ["jsonl"], "checkpoint_every": every})


def test_a_killed_run_resumes_exactly(kill_and_resume):
    straight, resumed = kill_and_resume(Noisy, kill_at=3)
    assert torch.equal(straight.weights, resumed.weights)
    assert resumed.closed


def test_checkpoints_every_n_iterations_and_at_the_end_with_one_layout(tmp_path):
    cfg = _config(every=4)
    with Run.create(cfg, root=tmp_path) as run:
        fit(lambda: Noisy(total=6), run, seed=1, description="toy", metadata={"extra": 5})
    manager = CheckpointManager(run.dir / "checkpoints")
    assert manager.steps() == [4, 6]
    meta = manager.load_latest().metadata
    assert meta["layout"] == LAYOUT and meta["app"] == "fieldrl" and meta["extra"] == 5
    assert meta["finished"] and (meta["done"], meta["total"]) == (6, 6)
    assert [r["step"] for r in read_metrics(run.dir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


def test_a_finished_run_is_not_trained_again(tmp_path):
    with Run.create(_config(), root=tmp_path) as run:
        first = fit(Noisy, run, seed=1, description="toy")
    rows = (run.dir / "metrics.jsonl").read_text()
    assert finished_step(run.dir) == 6
    with Run.resume(run.dir, FieldrlConfig) as again:
        second = fit(Noisy, again, seed=1, description="toy")
    assert torch.equal(first.weights, second.weights) and second.done == 6
    assert (run.dir / "metrics.jsonl").read_text() == rows


def test_without_a_run_nothing_is_written_and_close_runs_on_failure(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = fit(Noisy, None, seed=1, description="toy")
    assert trainer.done == 6 and trainer.closed and not list(tmp_path.iterdir())
    made = []

    def broken() -> Noisy:
        made.append(Noisy())
        made[-1].step = lambda: 1 / 0
        return made[-1]

    with pytest.raises(ZeroDivisionError):
        fit(broken, None, seed=1, description="toy")
    assert made[0].closed
    stuck = Noisy()
    stuck.step = lambda: {}
    with pytest.raises(RuntimeError, match="Noisy.step\\(\\) did not advance done"):
        fit(lambda: stuck, None, seed=1, description="toy")


def test_the_same_seed_gives_the_same_training():
    a, b, c = (fit(Noisy, None, seed=s, description="toy") for s in (3, 3, 4))
    assert torch.equal(a.weights, b.weights) and not torch.equal(a.weights, c.weights)


def test_a_checkpoint_from_an_older_layout_is_refused_with_advice(tmp_path):
    with Run.create(_config(), root=tmp_path) as run:
        fit(lambda: Noisy(total=2), run, seed=1, description="toy")
    meta_path = CheckpointManager(run.dir / "checkpoints").latest() / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["metadata"]["layout"]
    meta_path.write_text(json.dumps(meta))
    with Run.resume(run.dir, FieldrlConfig) as again, pytest.raises(CheckpointError) as err:
        fit(Noisy, again, seed=1, description="toy")
    assert "made by an older fieldrl" in str(err.value) and "retrain" in str(err.value)


def test_opening_a_run_from_an_older_layout_says_so(tmp_path):
    from fieldrl.runs import open_run

    with Run.create(_config(), root=tmp_path) as run:
        fit(lambda: Noisy(total=2), run, seed=1, description="toy")
    assert open_run(run.dir, FieldrlConfig).step == 2
    meta_path = CheckpointManager(run.dir / "checkpoints").latest() / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["metadata"]["layout"] = "fieldrl-run/1"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="made by an older fieldrl.*retrain the run"):
        open_run(run.dir, FieldrlConfig)


def test_a_corrupt_newest_checkpoint_falls_back_to_the_intact_one_and_says_so(
    tmp_path, monkeypatch, capsys
):
    with Run.create(_config(every=1), root=tmp_path / "straight") as run:
        straight = fit(lambda: Noisy(total=6), run, seed=0, description="straight")
    original = CheckpointManager.save

    def save_then_die(self, step, *args, **kwargs):
        path = original(self, step, *args, **kwargs)
        if step == 4:
            raise KeyboardInterrupt
        return path

    killed = Run.create(_config(every=1), root=tmp_path / "killed")
    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt), killed:
        patch.setattr(CheckpointManager, "save", save_then_die)
        fit(lambda: Noisy(total=6), killed, seed=0, description="killed")
    weights = next((killed.dir / "checkpoints" / "step_0000000004").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-10])  # the disk filled up mid-write
    with Run.resume(killed.dir, FieldrlConfig) as again:
        resumed = fit(lambda: Noisy(total=6), again, seed=0, description="resumed")
    said = capsys.readouterr().err
    assert "step_0000000004" in said and "intact checkpoint at step 3" in said
    assert torch.equal(straight.weights, resumed.weights)
    assert [r["step"] for r in read_metrics(killed.dir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert (killed.dir / "checkpoints" / "corrupt-step_0000000004").is_dir()
    # with nothing intact, the newest checkpoint's error is raised
    for path in (killed.dir / "checkpoints").glob("step_*/*.safetensors"):
        path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="step_0000000006"):
        CheckpointManager(killed.dir / "checkpoints").load_latest()


def test_a_run_at_a_fixed_folder_resumes_its_own_config_and_replaces_another(tmp_path):
    """Run.at, for a benchmark's jobs: the same config goes on from the newest checkpoint
    (a killed job does not start over), another config starts afresh in that folder."""
    folder = tmp_path / "jobs" / "reinvent|qed|0"
    straight = fit(Noisy, None, seed=0, description="straight")

    class Dying(Noisy):
        def step(self) -> dict[str, float]:
            if self.done == 4:
                raise KeyboardInterrupt
            return super().step()

    with pytest.raises(KeyboardInterrupt), Run.at(folder, _config()) as run:
        fit(Dying, run, seed=0, description="killed")
    with Run.at(folder, _config()) as run:
        assert not run.new
        assert run.checkpoints.steps() == [2, 4]
        resumed = fit(Noisy, run, seed=0, description="resumed")
    assert torch.equal(resumed.weights, straight.weights)
    with Run.at(folder, _config(every=3)) as other:  # another config: a new run there
        assert other.new and other.checkpoints.steps() == []
