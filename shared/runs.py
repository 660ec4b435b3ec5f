"""Run folders and metric writers.

Each run is ``runs/<app>/<UTC time>-<name>/`` with ``config.json``, ``versions.json``,
``metrics.jsonl``, TensorBoard event files under ``tb/``, ``checkpoints/`` and, at the end,
``report.md`` with PNG plots. Writers are chosen by name in the experiment config.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fieldrl.atomic import atomic_write_json, atomic_write_text
from fieldrl.checkpoint import Checkpoint, CheckpointError, CheckpointManager
from fieldrl.config import ConfigError, FieldrlConfig, config_hash, load_config

__all__ = [
    "LAYOUT",
    "JsonlWriter",
    "LoadedRun",
    "MetricWriter",
    "Run",
    "StdoutWriter",
    "TensorBoardWriter",
    "check_layout",
    "final_checkpoint",
    "load_run_config",
    "open_run",
    "progress",
    "read_metrics",
    "saved_config_hash",
    "versions",
]

C = TypeVar("C", bound=FieldrlConfig)
LAYOUT = "fieldrl-run/2"  # what fieldrl.training.fit writes into every checkpoint


def _git_commit() -> str | None:
    """The commit of the fieldrl source tree (None for a wheel install or without git)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _requirements() -> list[str]:
    """fieldrl and the distributions it declares (core and every extra), from its metadata."""
    try:
        declared = metadata.requires("fieldrl") or []
    except metadata.PackageNotFoundError:  # a source tree that is not installed
        declared = []
    names = {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0] for r in declared}
    return ["fieldrl", *sorted(names - {"fieldrl"})]


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux), for the record of a measurement."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def versions(seed: int | None = None) -> dict[str, Any]:
    """Installed versions of fieldrl and what it declares, python, platform, CPU, host, git
    commit and seed: what a result depends on."""
    packages = {}
    for name in _requirements():
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "packages": packages,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpus": os.cpu_count(),
        "host": socket.gethostname(),
        "git_commit": _git_commit(),
        "seed": seed,
        "time_utc": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class MetricWriter(Protocol):
    """Anything that takes ``(step, metrics)``; chosen by name in ``experiment.loggers``."""

    def write(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def close(self) -> None: ...


class StdoutWriter:
    """A compact line per logged step, at most one every ``every_s`` seconds (and the last)."""

    def __init__(self, console: Console | None = None, every_s: float = 2.0) -> None:
        self.console = console or Console(stderr=True)
        self.every_s = every_s
        self.shown_at = float("-inf")
        self.pending: tuple[int, Mapping[str, float]] | None = None

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self.pending = (step, metrics)
        if time.monotonic() - self.shown_at >= self.every_s:
            self._show()

    def _show(self) -> None:
        if self.pending is None:
            return
        step, metrics = self.pending
        parts = " | ".join(f"{k} {v:.4g}" for k, v in metrics.items())
        self.console.print(f"[dim]step {step}[/dim] | {parts}", highlight=False)
        self.shown_at, self.pending = time.monotonic(), None

    def close(self) -> None:
        self._show()


class JsonlWriter:
    """Appends ``{"step": ..., "time": ..., **metrics}`` lines; flushed at every write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.handle = path.open("a", encoding="utf-8")

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        row = {"step": step, "time": round(time.time(), 3), **metrics}
        self.handle.write(json.dumps(row, allow_nan=True) + "\n")
        self.handle.flush()

    def close(self) -> None:
        self.handle.flush()
        os.fsync(self.handle.fileno())
        self.handle.close()


class TensorBoardWriter:
    """Scalars to TensorBoard event files; ``purge_step`` drops stale events after a resume."""

    def __init__(self, logdir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(logdir), purge_step=purge_step)

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)

    def close(self) -> None:
        self.writer.close()


class MLflowWriter:
    """Metrics and params to MLflow (the ``tracking`` extra), by default a local sqlite store."""

    def __init__(self, uri: str, experiment: str, run_name: str, params: Mapping[str, Any]) -> None:
        try:
            import mlflow
        except ImportError:
            raise ConfigError(
                "experiment.loggers: 'mlflow' needs the tracking extra: "
                "pip install 'fieldrl[tracking]'"
            ) from None
        self.mlflow = mlflow
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment(experiment)
        self.active = mlflow.start_run(run_name=run_name)
        mlflow.log_params({k: str(v)[:500] for k, v in params.items()})

    def write(self, step: int, metrics: Mapping[str, float]) -> None:
        self.mlflow.log_metrics(dict(metrics), step=step)

    def close(self) -> None:
        self.mlflow.end_run()


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``metrics.jsonl``; a half-written last line (after a kill) is skipped."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


class Run:
    """One run folder and its writers. Create with :meth:`create`, reopen with :meth:`resume`.
    Used as a context manager, a new run that fails before its first checkpoint removes its
    folder: a failed command leaves nothing behind."""

    def __init__(self, directory: Path, app: str, config: FieldrlConfig, resume_step: int | None):
        self.dir = directory
        self.app = app
        self.config = config
        self.new = resume_step is None
        self.checkpoints = CheckpointManager(
            directory / "checkpoints", keep=config.experiment.keep_checkpoints
        )
        self.writers: list[MetricWriter] = []
        for name in config.experiment.loggers:
            self.writers.append(self._make_writer(name, resume_step))

    def _make_writer(self, name: str, resume_step: int | None) -> MetricWriter:
        exp = self.config.experiment
        if name == "stdout":
            return StdoutWriter()
        if name == "jsonl":
            return JsonlWriter(self.dir / "metrics.jsonl")
        if name == "tensorboard":
            return TensorBoardWriter(self.dir / "tb", purge_step=resume_step)
        uri = exp.mlflow_uri or f"sqlite:///{Path(exp.runs_dir).resolve() / 'mlflow.db'}"
        params = _flatten(self.config.model_dump(mode="json"))
        return MLflowWriter(
            uri, experiment=f"fieldrl-{self.app}", run_name=self.dir.name, params=params
        )

    @classmethod
    def create(cls, config: FieldrlConfig, root: str | Path | None = None) -> Run:
        """Make ``<root>/<app>/<UTC time>-<name>/`` with ``config.json`` and ``versions.json``."""
        exp = config.experiment
        base = Path(root if root is not None else exp.runs_dir) / config.app
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        directory = base / f"{stamp}-{exp.name}"
        suffix = 1
        while directory.exists():
            suffix += 1
            directory = base / f"{stamp}-{exp.name}-{suffix}"
        return cls._make(directory, config)

    @classmethod
    def at(cls, directory: str | Path, config: FieldrlConfig) -> Run:
        """The run in ``directory`` for ``config``: resumed from its newest checkpoint when
        the folder holds a run of this very config (a killed benchmark job goes on where it
        stopped), else made there afresh (a run of another config there is replaced)."""
        directory = Path(directory)
        try:
            saved = json.loads((directory / "config.json").read_text()).get("config_hash")
        except (OSError, json.JSONDecodeError, AttributeError):
            saved = None
        if saved == config_hash(config):
            return cls.resume(directory, type(config))
        shutil.rmtree(directory, ignore_errors=True)
        return cls._make(directory, config)

    @classmethod
    def _make(cls, directory: Path, config: FieldrlConfig) -> Run:
        directory.mkdir(parents=True)
        (directory / "checkpoints").mkdir()
        payload = {"app": config.app, "config_hash": config_hash(config),
                   **config.model_dump(mode="json")}  # fmt: skip
        atomic_write_json(directory / "config.json", payload)
        atomic_write_json(directory / "versions.json", versions(config.experiment.seed))
        return cls(directory, config.app, config, resume_step=None)

    @classmethod
    def resume(cls, directory: str | Path, model: type[C]) -> Run:
        """Reopen a run folder; drop metrics logged after its newest intact checkpoint.

        Apps checkpoint at the same step they log metrics at, so the two line up.
        """
        directory = Path(directory)
        config = load_run_config(directory, model)
        latest = CheckpointManager(directory / "checkpoints").load_latest(set_aside_corrupt=True)
        step = latest.step if latest is not None else 0
        metrics = directory / "metrics.jsonl"
        if metrics.exists():
            kept = [r for r in read_metrics(metrics) if r.get("step", 0) <= step]
            atomic_write_text(metrics, "".join(json.dumps(r) + "\n" for r in kept))
        return cls(directory, model.app, config, resume_step=step + 1)

    def log(self, step: int, metrics: Mapping[str, float]) -> None:
        """Send scalar metrics to every writer."""
        clean = {k: float(v) for k, v in metrics.items()}
        for writer in self.writers:
            writer.write(step, clean)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()
        self.writers = []

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.close()
        if kind is not None and self.new and not self.checkpoints.steps():
            shutil.rmtree(self.dir, ignore_errors=True)


def load_run_config(
    directory: str | Path,
    model: type[C],
    overrides: Sequence[str] = (),
    layer: str | Path | None = None,
) -> C:
    """The validated config saved in a run folder of ``model``'s app, with the keys of the
    TOML file ``layer`` (``evaluate --config``; no ``base``: a preset laid over a trained
    run would change what it was trained with) and ``--set`` overrides on top. A folder that
    is missing, not a run, or another app's run is named as such."""
    data = _saved_config(directory, model.app)
    origin = str(Path(directory) / "config.json")
    if layer is not None:
        try:
            own = tomllib.loads(Path(layer).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{layer}: not a readable TOML file ({exc})") from None
        if "base" in own:
            raise ConfigError(
                f"{layer}: its keys are laid over the run's own config, so it cannot name a "
                f"base ({own['base']!r}); keep only the sections to change, such as [eval]"
            )
        origin += f" with {layer}"
        return load_config(model, layer, overrides, data=data, origin=origin)
    return load_config(model, data=data, overrides=overrides, origin=origin)


def saved_config_hash(directory: str | Path) -> str:
    """The hash of a run folder's config as it was saved: options added to the app since
    (which load with their defaults) do not change it, an edit to the file does."""
    return config_hash(_saved_config(directory))


def _saved_config(directory: str | Path, app: str | None = None) -> dict[str, Any]:
    """config.json without its ``app`` and ``config_hash`` entries (checked against ``app``)."""
    directory = Path(directory)
    if not directory.exists():
        raise ConfigError(f"{directory}: no such folder")
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(f"{directory}: not a run folder (no config.json)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
    owner = data.pop("app", None)
    data.pop("config_hash", None)
    if app is not None and owner != app:
        raise ConfigError(
            f"{directory}: this run belongs to {owner or 'an unknown app'}, not {app} "
            + (f"(use `fieldrl {owner} ...`)" if owner else "(no app in its config.json)")
        )
    return data


@dataclass(frozen=True)
class LoadedRun(Generic[C]):
    """A trained run folder, opened: its config (with any overrides), final checkpoint and
    identity (``model_version``, the ``config_hash`` it was trained with, the ``commit``),
    and ``trained_config``, the config as it trained (what its networks were built for)."""

    dir: Path
    config: C
    checkpoint: Checkpoint
    model_version: str
    config_hash: str
    commit: str | None
    trained_config: C
    loader: Callable[[LoadedRun[C]], Any] | None = field(default=None, repr=False, compare=False)

    @cached_property
    def trained(self) -> Any:
        """The app's trained thing, ``App.load(run)``, loaded on first use and kept: what
        evaluate, serve and the reports act with."""
        if self.loader is None:
            raise TypeError(f"{self.dir}: opened without its app's loader (use App.open_run)")
        return self.loader(self)

    @property
    def state(self) -> dict[str, Any]:
        """What the trainer saved (``Trainer.state_dict()``) at the final checkpoint."""
        return self.checkpoint.state["trainer"]

    @property
    def step(self) -> int:
        return self.checkpoint.step


def open_run(
    directory: str | Path,
    model: type[C],
    overrides: Sequence[str] = (),
    layer: str | Path | None = None,
    loader: Callable[[LoadedRun[C]], Any] | None = None,
) -> LoadedRun[C]:
    """Open a run folder of ``model``'s app for evaluation or serving: the config, the
    final checkpoint (:func:`final_checkpoint`; verified, of this fieldrl's layout) and the
    run's identity (and ``loader``, the app's ``load``, for ``run.trained``); ``layer`` and
    ``overrides`` as in :func:`load_run_config`. A checkpoint whose config hash does not
    match config.json is refused."""
    directory = Path(directory)
    config = load_run_config(directory, model, overrides, layer)
    trained = config if not overrides and layer is None else load_run_config(directory, model)
    checkpoint = final_checkpoint(directory)
    check_layout(checkpoint)
    saved, recorded = saved_config_hash(directory), checkpoint.metadata.get("config_hash")
    # as saved, or as loaded now (a run resumed after options were added saves that one)
    if recorded != saved and recorded != config_hash(trained):
        raise CheckpointError(f"{directory}: config.json does not match the checkpoint's config")
    commit = None
    if (directory / "versions.json").is_file():
        commit = json.loads((directory / "versions.json").read_text()).get("git_commit")
    return LoadedRun(directory, config, checkpoint, f"{directory.name}@step-{checkpoint.step}",
                     saved, commit, trained, loader)  # fmt: skip


def check_layout(checkpoint: Checkpoint) -> None:
    """Refuse a checkpoint from before the core training loop, with what to do."""
    if checkpoint.metadata.get("layout") != LAYOUT:
        raise CheckpointError(
            f"{checkpoint.path}: made by an older fieldrl (checkpoint layout "
            f"{checkpoint.metadata.get('layout', '1')!r}, this version reads {LAYOUT!r}); "
            "retrain the run"
        )


def final_checkpoint(run_dir: str | Path) -> Checkpoint:
    """The checkpoint a run is evaluated or served from, verified: the newest one that
    finished training, else the newest (a run still training); an error if it has none."""
    checkpoint = CheckpointManager(Path(run_dir) / "checkpoints").load_final()
    if checkpoint is None:
        raise CheckpointError(f"{run_dir}: no checkpoint in checkpoints/ (was it trained?)")
    return checkpoint


@contextmanager
def progress(total: int | None, description: str, log_every: float = 60.0) -> Iterator[Any]:
    """A rich progress bar on a terminal; yields ``advance(n=1)``. When stderr is not a
    terminal (a log file, ``nohup``) it writes a plain line at most every ``log_every``
    seconds instead, so short work stays silent and long work still shows it is alive."""
    console = Console(stderr=True)
    if console.is_terminal:
        bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        with bar:
            task = bar.add_task(description, total=total)

            def advance(n: float = 1) -> None:
                bar.advance(task, n)

            yield advance
        return
    start = last = time.monotonic()
    done = 0.0

    def advance_quietly(n: float = 1) -> None:
        nonlocal done, last
        done += n
        now = time.monotonic()
        if now - last >= log_every:
            last = now
            of = f"/{total} ({100 * done / total:.0f}%)" if total else ""
            print(f"{description}: {done:g}{of}, {now - start:.0f} s", file=sys.stderr, flush=True)

    yield advance_quietly
