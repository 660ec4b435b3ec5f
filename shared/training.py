"""One training loop for every app: seeding, resume, checkpoint timing, metric logging,
progress and RNG capture.

An algorithm is a :class:`Trainer`: it holds its networks, optimisers and generators and
advances one iteration per :meth:`~Trainer.step`. :func:`fit` seeds the process, builds the
trainer, restores the run's newest checkpoint if it has one, runs the iterations, logs
what each returns at ``trainer.done`` and checkpoints every ``checkpoint_every``
iterations and at the end. Every app's run folder therefore has one checkpoint layout::

    state    = {"trainer": trainer.state_dict(), "rng": ..., "iteration": n}
    metadata = {"layout": LAYOUT, "app", "config_hash", "done", "total", "finished", ...}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from fieldrl.checkpoint import Checkpoint, CheckpointManager
from fieldrl.config import config_hash
from fieldrl.runs import LAYOUT, Run, check_layout, progress
from fieldrl.seeding import get_rng_state, seed_everything, set_rng_state

__all__ = ["LAYOUT", "Trainer", "finished_step", "fit", "is_finished"]


class Trainer(Protocol):
    """What :func:`fit` drives. ``total`` and ``done`` count the app's units of work
    (iterations, windows, gradient steps); ``done`` is part of the state, so it comes back
    with :meth:`load_state_dict`. ``generators`` are the trainer's own numpy generators
    (the loop saves and restores them with the global ones)."""

    total: int
    done: int
    generators: Sequence[np.random.Generator]

    def step(self) -> Mapping[str, float]:
        """One iteration; returns the metrics to log at ``done`` (may be empty)."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...

    # Optional: ``close()``, called when training ends (or fails), releases what the trainer
    # holds open, such as a pool of rollout workers.


T = TypeVar("T", bound=Trainer)


def is_finished(checkpoint: Checkpoint) -> bool:
    """Whether a checkpoint written by :func:`fit` is the end of its training."""
    return bool(checkpoint.metadata.get("finished"))


def finished_step(run_dir: str | Path) -> int | None:
    """The step a run folder's training finished at, or None if it has not finished."""
    latest = CheckpointManager(Path(run_dir) / "checkpoints").load_latest()
    return latest.step if latest is not None and is_finished(latest) else None


def fit(
    build: Callable[[], T],
    run: Run | None,
    *,
    seed: int,
    description: str,
    checkpoint_every: int | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> T:
    """Seed everything with ``seed``, build the trainer, continue ``run``'s newest
    checkpoint if there is one, and step until ``done == total``.

    ``run=None`` trains without a run folder (nothing logged or checkpointed), e.g. the
    many short trainings inside a benchmark. ``checkpoint_every`` defaults to the run's
    ``experiment.checkpoint_every`` (in iterations). ``metadata`` (JSON) goes into every
    checkpoint beside the layout, the app, the config hash and the progress.
    """
    seed_everything(seed)
    trainer = build()
    try:
        _train(trainer, run, description, checkpoint_every, metadata or {})
    finally:
        if hasattr(trainer, "close"):
            trainer.close()
    return trainer


def _train(trainer: Trainer, run: Run | None, description: str, checkpoint_every: int | None,
           metadata: Mapping[str, Any]) -> None:  # fmt: skip
    iteration = 0
    latest = run.checkpoints.load_latest() if run is not None else None
    if latest is not None:
        check_layout(latest)
        trainer.load_state_dict(latest.state["trainer"])
        set_rng_state(latest.state["rng"], *trainer.generators)
        iteration = int(latest.state["iteration"])
        if is_finished(latest):
            return
    every = checkpoint_every or (run.config.experiment.checkpoint_every if run else 0)
    with progress(trainer.total, description) as advance:
        advance(trainer.done)
        while trainer.done < trainer.total:
            before = trainer.done
            metrics = trainer.step()
            if trainer.done <= before:  # a loop that can never end
                raise RuntimeError(f"{type(trainer).__name__}.step() did not advance done")
            iteration += 1
            advance(trainer.done - before)
            if run is None:
                continue
            if metrics:
                run.log(trainer.done, metrics)
            finished = trainer.done >= trainer.total
            if finished or iteration % every == 0:
                _save(run, trainer, iteration, finished, metadata)


def _save(run: Run, trainer: Trainer, iteration: int, finished: bool,
          metadata: Mapping[str, Any]) -> None:  # fmt: skip
    state = {
        "trainer": trainer.state_dict(),
        "rng": get_rng_state(*trainer.generators),
        "iteration": iteration,
    }
    meta = {
        "layout": LAYOUT,
        "app": run.app,
        "config_hash": config_hash(run.config),
        "done": trainer.done,
        "total": trainer.total,
        "finished": finished,
        **metadata,
    }
    run.checkpoints.save(trainer.done, state, meta)
