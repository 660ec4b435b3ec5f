"""The app contract: what an app hands the core so the CLI, runs and service work for it.

An app module exposes one :class:`App` object and registers it under the ``fieldrl.apps``
entry-point group; the core builds ``fieldrl <app> train|evaluate|benchmark|serve|demo|sweep``
from it.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fieldrl.config import ConfigError, FieldrlConfig, load_config, preset_summary

if TYPE_CHECKING:
    from fieldrl.runs import LoadedRun

__all__ = ["App", "Resources"]


@dataclass(frozen=True)
class Resources:
    """Where work runs: ``workers`` processes (Ray when > 1) and an optional cluster address."""

    workers: int = 1
    address: str | None = None


class _Hook:
    """An :class:`App` field holding a function, or ``"module:function"`` in the app's package
    (resolved on first use, so ``fieldrl --help`` imports no app code). Its default is where
    the app anatomy puts it (``pipeline:train``, ``service:service``...)."""

    def __init__(self, default: str | None) -> None:
        self.default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = f"_{name}"

    def __get__(self, app: App | None, owner: type | None = None) -> Any:
        if app is None:
            return self.default  # what dataclass takes as the field's default
        target = getattr(app, self.slot)
        if isinstance(target, str):
            module, _, name = target.partition(":")
            package = app.config_model.__module__.rpartition(".")[0]
            target = getattr(importlib.import_module(f"{package}.{module}"), name)
            setattr(app, self.slot, target)
        return target

    def __set__(self, app: App, value: Callable[..., Any] | str) -> None:
        setattr(app, self.slot, value)


@dataclass
class App:
    """One fieldrl app; its CLI name is its config model's ``app``. Every hook is a function
    or ``"module:function"`` in the app's package (by default the module the app anatomy
    names, as below), and takes the config (or the run) first and the rest by keyword:

    - ``train(config, *, run, resources) -> final metrics``: trains into ``run`` through
      :func:`fieldrl.training.fit`, which continues the run's checkpoint (``--resume``).
    - ``load(run) -> the trained thing``: a :class:`~fieldrl.runs.LoadedRun`'s networks,
      ready to act, from its checkpoint and ``run.config`` (with the user's overrides) alone:
      no trainer, no second read of the folder. Evaluate, serve, report and export use it.
    - ``evaluate(config, *, run, resources, out) -> metrics``: scores a trained run (a
      :class:`~fieldrl.runs.LoadedRun`: config plus overrides, checkpoint, identity).
    - ``benchmark(config, *, out, quick, resources) -> benchmark.json path``, written with
      :class:`fieldrl.benchmark.Benchmark`; ``report(data, folder, report)`` adds the app's
      tables and plots to the ``report.md`` the core writes from that file alone.
    - ``demo_report(run, *, resources) -> headline``: the core's demo trains the ``demo``
      preset, then this writes its results as ``benchmark.json`` in the run folder (through
      :class:`fieldrl.benchmark.Benchmark`) and returns the one-line result the main job's
      index shows; the core writes ``report.md`` from that file with the app's ``report``
      sections (so ``fieldrl <app> report RUN`` rebuilds it), see :meth:`run_demo_report`.
    - ``service(run) -> ServiceSpec``: what ``serve`` exposes for a loaded run, and
      ``example_request(run)``: one valid ``/v1/act`` body (the main job sends it). A
      stateful service also names ``request_variant(body, n)``: the n-th distinct valid
      request made from it (``load-test`` sends one per request; lhc-trigger: a new stream).
    - ``sweep_metric``: the final metric a sweep ranks trials by (and ``sweep_mode``).
    - ``units``: the unit of each metric the CLI prints, by the end of its name.
    - ``add_commands(cli, app)``: optional extra verbs (``generate-logs``, ``adapt``...),
      usually ``"cli:add_commands"`` (their option types from :mod:`fieldrl.cli_types`).
    - ``data_key``: the config key (a list of paths or globs) that ``train --data`` and
      ``evaluate --data`` set, for apps that read the user's own files (or, with
      ``data_flag`` and ``data_help``, any list the user names: battles' ``--opponent``).
    """

    summary: str
    config_model: type[FieldrlConfig]
    presets_dir: Path
    sweep_metric: str
    train: _Hook = _Hook("pipeline:train")
    load: _Hook = _Hook("pipeline:load")
    evaluate: _Hook = _Hook("pipeline:evaluate")
    benchmark: _Hook = _Hook("benchmark:benchmark")
    report: _Hook = _Hook("report:sections")
    demo_report: _Hook = _Hook("report:demo_report")
    service: _Hook = _Hook("service:service")
    example_request: _Hook = _Hook("service:example_request")
    request_variant: _Hook = _Hook(None)  # type: ignore[arg-type]
    sweep_mode: str = "max"
    status: str = "in development"
    units: dict[str, str] = field(default_factory=dict)  # metric-name ending -> its unit
    add_commands: _Hook = _Hook(None)  # type: ignore[arg-type]
    data_key: str | None = None
    data_flag: str | None = None  # a domain name for --data on train/evaluate, e.g. "--logs"
    data_help: str = "Your own input files, folders or glob patterns (repeatable; quote globs)."

    @property
    def name(self) -> str:
        return self.config_model.app

    def open_run(
        self, run_dir: Path, overrides: Sequence[str] = (), layer: Path | None = None
    ) -> LoadedRun:
        """This app's run folder, opened (see :func:`fieldrl.runs.open_run`); ``run.trained``
        is this app's :attr:`load` of it."""
        from fieldrl.runs import open_run

        return open_run(run_dir, self.config_model, overrides, layer, lambda run: self.load(run))

    def run_benchmark(self, config: Any, *, out: Path, quick: bool, resources: Resources) -> Path:
        """The app's :attr:`benchmark`, then ``report.md`` written by the core from its
        ``benchmark.json`` alone (with the app's :attr:`report` sections): the only
        writer of a benchmark's report."""
        from fieldrl.report import write_benchmark_report

        path = self.benchmark(config, out=out, quick=quick, resources=resources)
        write_benchmark_report(path.parent, self.report)
        return path

    def run_demo_report(self, run: LoadedRun, *, resources: Resources) -> str:
        """The app's :attr:`demo_report` (its results into the run folder's
        ``benchmark.json``), then ``report.md`` written by the core from that file alone with
        the app's :attr:`report` sections; returns the headline."""
        from fieldrl.report import write_benchmark_report

        headline = self.demo_report(run, resources=resources)
        write_benchmark_report(run.dir, self.report)
        return headline

    def data_overrides(self, data: Sequence[str] | None) -> list[str]:
        """``--data`` patterns as a ``--set`` override of ``data_key``."""
        if not data:
            return []
        if self.data_key is None:
            raise ConfigError(f"{self.name} reads no data files; drop --data")
        return [f"{self.data_key}={json.dumps(list(data))}"]

    def presets(self) -> list[str]:
        """Names of the shipped TOML presets (``default``, ``quick``...)."""
        return sorted(p.stem for p in self.presets_dir.glob("*.toml"))

    def preset_summaries(self) -> list[tuple[str, str]]:
        """Each shipped preset with the first sentence of its leading comment."""
        return [(name, preset_summary(self.presets_dir / f"{name}.toml"))
                for name in self.presets()]  # fmt: skip

    def load_config(
        self,
        preset: str | None = None,
        config_file: Path | None = None,
        overrides: Sequence[str] = (),
    ) -> Any:
        """The validated config from a preset name or a file, with ``--set`` overrides."""
        if preset and config_file:
            raise ConfigError("give either --preset or --config, not both")
        if config_file is None:
            name = preset or "default"
            config_file = self.presets_dir / f"{name}.toml"
            if not config_file.is_file():
                raise ConfigError(f"no preset {name!r} for {self.name}; presets: {self.presets()}")
        return load_config(
            self.config_model, config_file, list(overrides), presets=self.presets_dir
        )
