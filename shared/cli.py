"""The ``fieldrl`` command: ``fieldrl apps``, and ``fieldrl <app> <verb>`` for every installed app.

Apps register an :class:`~fieldrl.app.App` under the ``fieldrl.apps`` entry-point group;
:func:`build_app_cli` turns one into a typer sub-command with the standard verbs.
"""

import importlib
import itertools
import json
import os
from datetime import UTC, datetime
from importlib.metadata import entry_points
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

import fieldrl
from fieldrl.app import App, Resources
from fieldrl.cli_types import (
    Address,
    ConfigFile,
    Overrides,
    RunDir,
    Workers,
    console,
    friendly,
    out,
)
from fieldrl.config import ConfigError, parse_override
from fieldrl.errors import FieldrlError

__all__ = ["build_app_cli", "discover_apps", "main"]


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _print_metrics(title: str, metrics: dict[str, Any], units: dict[str, str]) -> None:
    """A metric / value / unit table; a metric's unit is that of the longest key in
    ``units`` it ends with."""
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("unit")
    for key, value in metrics.items():
        ends = [k for k in units if key.endswith(k)]
        unit = units[max(ends, key=len)] if ends else ""
        table.add_row(key, f"{value:.4g}" if isinstance(value, float) else str(value), unit)
    console.print(table)


def _parse_param(text: str) -> tuple[str, list[Any]]:
    key, sep, values = text.partition("=")
    if not sep or not values:
        raise ConfigError(f"--param {text!r}: expected KEY=V1,V2,... e.g. algo.lr=1e-3,3e-4")
    return key, [parse_override(f"{key}={v}")[1] for v in values.split(",")]


def _app_data(app: App) -> Any:
    """The ``--data`` option (or the app's own name for it, e.g. ``--logs``)."""
    return Annotated[
        list[str] | None,
        typer.Option(app.data_flag or "--data", metavar="PATH", help=app.data_help),
    ]


def _train_preset(app: App) -> Any:
    """``--preset`` naming the app's shipped presets."""
    choices = ", ".join(app.presets())
    return Annotated[
        str | None,
        typer.Option("--preset", "-p", help=f"Shipped preset: {choices} [default: default]."),
    ]


def add_train(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> train``: a new run folder (or one resumed), then its validation metrics."""
    ex = f"fieldrl {app.name}"
    AppData = _app_data(app)  # noqa: N806 (a type alias)
    TrainPreset = _train_preset(app)  # noqa: N806

    @cli.command(epilog=f"Example: {ex} train --preset quick --set experiment.seed=3")
    @friendly
    def train(
        preset: TrainPreset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
        name: Annotated[str | None, typer.Option(help="Run name (default from config).")] = None,
        resume: Annotated[
            Path | None, typer.Option(help="Continue a run folder from its newest checkpoint.")
        ] = None,
        data: AppData = None,
        workers: Workers = 1,
        address: Address = None,
    ) -> None:
        """Train into a new run folder (or resume one) and print its final metrics."""
        from fieldrl.runs import Run
        from fieldrl.seeding import setup_process
        from fieldrl.training import finished_step

        if resume is not None:
            if preset or config or set_ or name or data:
                raise ConfigError("--resume takes its config from the run folder; drop the others")
            step = finished_step(resume)
            if step is not None:
                console.print(
                    f"{resume}: already finished at step {step}; nothing to do", soft_wrap=True
                )
                typer.echo(resume)
                return
            run = Run.resume(resume, app.config_model)
            cfg = run.config
        else:
            cfg = app.load_config(preset, config, [*(set_ or []), *app.data_overrides(data)])
            if name:
                cfg.experiment.name = name
            run = Run.create(cfg)
        setup_process(cfg)
        with run:  # a new run that fails before its first checkpoint leaves no folder
            console.print(f"run folder: [bold]{run.dir}[/bold]")
            metrics = app.train(cfg, run=run, resources=Resources(workers, address))
        _print_metrics(f"{app.name} train: validation (held-out validation work, not the "
                       "evaluation seeds)", metrics, app.units)  # fmt: skip
        typer.echo(run.dir)


def add_evaluate(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> evaluate``: a trained run on held-out work, with --config and --set."""
    ex = f"fieldrl {app.name}"
    AppData = _app_data(app)  # noqa: N806 (a type alias)

    @cli.command(epilog=f"Example: {ex} evaluate --run runs/{app.name}/<run>")
    @friendly
    def evaluate(
        run: RunDir,
        config: Annotated[
            Path | None,
            typer.Option(
                "--config",
                "-c",
                metavar="<path>",
                help="A TOML file whose keys are laid over the run's config (e.g. an [eval] "
                "section with your fills; no base).",
            ),
        ] = None,
        set_: Overrides = None,
        out_dir: Annotated[
            Path | None, typer.Option("--out", help="Where to write (default RUN/eval).")
        ] = None,
        data: AppData = None,
        workers: Workers = 1,
        address: Address = None,
    ) -> None:
        """Evaluate a trained run (config from the run folder, plus --config and --set)."""
        from fieldrl.seeding import setup_process

        loaded = app.open_run(run, [*(set_ or []), *app.data_overrides(data)], config)
        setup_process(loaded.config)
        target = out_dir or run / "eval"
        console.print(f"evaluating {loaded.model_version} on the held-out evaluation work",
                      highlight=False, soft_wrap=True)  # fmt: skip
        metrics = app.evaluate(
            loaded.config, run=loaded, resources=Resources(workers, address), out=target
        )
        _print_metrics(f"{app.name} evaluate: held-out evaluation", metrics, app.units)
        typer.echo(target)


def add_benchmark(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> benchmark``: the app's methods and baselines, then the core's report.md."""
    ex = f"fieldrl {app.name}"

    @cli.command(epilog=f"Example: {ex} benchmark --quick --out bench/")
    @friendly
    def benchmark(
        quick: Annotated[bool, typer.Option(help="The small version (< 5 minutes).")] = False,
        config: ConfigFile = None,
        set_: Overrides = None,
        out_dir: Annotated[Path | None, typer.Option("--out", help="Output folder.")] = None,
        workers: Workers = 1,
        address: Address = None,
    ) -> None:
        """Run every method and baseline on the same held-out work -> benchmark.json, report.md."""
        from fieldrl.seeding import setup_process

        cfg = app.load_config(
            None if config else ("quick" if quick else "default"), config, set_ or []
        )
        setup_process(cfg)
        target = out_dir or Path(cfg.experiment.runs_dir) / app.name / f"benchmark-{_stamp()}"
        resources = Resources(workers, address)
        path = app.run_benchmark(cfg, out=target, quick=quick, resources=resources)
        typer.echo(path)
        typer.echo(path.parent / "report.md")


def add_report(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> report``: rebuild a benchmark's report.md from its benchmark.json."""
    ex = f"fieldrl {app.name}"

    @cli.command(epilog=f"Example: {ex} report bench/")
    @friendly
    def report(
        folder: Annotated[Path, typer.Argument(help="A benchmark folder (with benchmark.json).")],
    ) -> None:
        """Rebuild report.md (tables and plots) from a benchmark.json alone."""
        from fieldrl.report import write_benchmark_report

        typer.echo(write_benchmark_report(folder, app.report))


def add_serve(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> serve``: a trained run over HTTP (or Ray Serve)."""
    ex = f"fieldrl {app.name}"

    @cli.command(epilog=f"Example: FIELDRL_API_TOKEN=s3cret {ex} serve --run runs/{app.name}/<run>")
    @friendly
    def serve(
        run: RunDir,
        host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
        port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
        max_body_bytes: Annotated[
            int | None, typer.Option(help="Request-size cap in bytes (default: the app's).")
        ] = None,
        ray: Annotated[bool, typer.Option("--ray", help="Deploy on Ray Serve.")] = False,
        replicas: Annotated[int, typer.Option(min=1, help="Ray Serve replicas.")] = 1,
        address: Address = None,
    ) -> None:
        """Serve a trained run over HTTP (set FIELDRL_API_TOKEN to require a bearer token).
        Torch uses the run's experiment.threads (1 unless it was trained with more): one
        thread answers single requests fastest; give more only to large batches."""
        from fieldrl.serving import TOKEN_ENV, create_app, run_server

        run_dir = run.resolve()

        def build() -> Any:  # with --ray, runs on each replica, which loads the run itself
            import torch

            loaded = app.open_run(run_dir)
            torch.set_num_threads(loaded.config.experiment.threads)
            return create_app(app.service(loaded), max_body_bytes=max_body_bytes)

        # a bad run folder is refused before anything starts (with --ray, before Ray starts)
        if ray:
            app.open_run(run_dir)
        else:
            api = build()
        if not os.environ.get(TOKEN_ENV):
            typer.echo(f"warning: {TOKEN_ENV} is not set, so anyone who can reach "
                       f"{host}:{port} can call the service", err=True)  # fmt: skip
        if ray:
            from fieldrl.distributed import serve_with_ray

            serve_with_ray(build, replicas=replicas, host=host, port=port, address=address)
        else:
            run_server(api, host=host, port=port)


def add_load_test(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> load-test``: the run's service under loopback load."""
    ex = f"fieldrl {app.name}"

    @cli.command("load-test", epilog=f"Example: {ex} load-test --run runs/{app.name}/<run> "
                 "--seconds 5")  # fmt: skip
    @friendly
    def load_test(
        run: RunDir,
        clients: Annotated[
            list[int] | None,
            typer.Option(
                "--clients", min=1, help="Concurrent clients (repeatable; default 1 and 8)."
            ),
        ] = None,
        seconds: Annotated[float, typer.Option(min=0.1, help="Seconds per client count.")] = 10.0,
        out_dir: Annotated[Path | None, typer.Option("--out", help="Write load.json here.")] = None,
    ) -> None:
        """Measure the run's service under loopback load: it is served in its own process
        (with the run's experiment.threads) and each client POSTs the app's example request
        back to back. Prints requests/s and p50/p99 latency with the machine."""
        from fieldrl.atomic import atomic_write_json
        from fieldrl.loadtest import load_test as measure_service
        from fieldrl.runs import cpu_model

        loaded = app.open_run(run.resolve())
        threads = loaded.config.experiment.threads
        example = app.example_request(loaded)
        fixed, vary, sent = json.dumps(example).encode(), app.request_variant, itertools.count()

        def body() -> bytes:
            return fixed if vary is None else json.dumps(vary(example, next(sent))).encode()

        rows = measure_service(app.name, loaded.dir, body, clients=clients or [1, 8],
                               seconds=seconds)  # fmt: skip
        machine = f"{cpu_model()}, {os.cpu_count()} cores, torch threads {threads}"
        table = Table(title=f"{app.name} service under loopback load ({machine})")
        for column in ("clients", "requests/s", "p50 ms", "p99 ms", "errors", "body bytes"):
            table.add_column(column, justify="right")
        for r in rows:
            table.add_row(str(r["clients"]), f"{r['requests_per_s']:.1f}", f"{r['p50_ms']:.2f}",
                          f"{r['p99_ms']:.2f}", str(r["errors"]), str(r["body_bytes"]))  # fmt: skip
        console.print(table)
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            record = {"app": app.name, "run": loaded.model_version, "machine": machine,
                      "threads": threads, "seconds": seconds, "rows": rows}  # fmt: skip
            atomic_write_json(out_dir / "load.json", record)
            typer.echo(out_dir / "load.json")


def add_demo(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> demo``: the demo preset trained, evaluated and reported."""
    ex = f"fieldrl {app.name}"

    @cli.command(epilog=f"Example: {ex} demo --out demo/")
    @friendly
    def demo(
        out_dir: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("runs"),
        workers: Workers = 1,
        address: Address = None,
    ) -> None:
        """The end-to-end showcase in a few minutes: train the demo preset, evaluate it
        against the baselines, write report.md in the run folder."""
        from fieldrl.mainjob import run_demo

        loaded, headline = run_demo(app, out_dir, Resources(workers, address))
        console.print(headline, highlight=False, soft_wrap=True)
        typer.echo(loaded.dir / "report.md")


def add_config(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> config``: the resolved config as commented TOML."""
    ex = f"fieldrl {app.name}"
    TrainPreset = _train_preset(app)  # noqa: N806

    @cli.command(epilog=f"Example: {ex} config --preset quick")
    @friendly
    def config(
        preset: TrainPreset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Print the resolved config: every key with its value, type, default, description
        and the preset's own comment (valid TOML: save it to start your own config)."""
        from fieldrl.config import describe_config, preset_comments

        cfg = app.load_config(preset, config, set_ or [])
        source = config or app.presets_dir / f"{preset or 'default'}.toml"
        typer.echo(describe_config(cfg, preset_comments(source, app.presets_dir)), nl=False)


def add_sweep(cli: typer.Typer, app: App) -> None:
    """``fieldrl <app> sweep``: a grid of config values trained and ranked."""
    ex = f"fieldrl {app.name}"
    choices = ", ".join(app.presets())

    @cli.command(
        epilog=f"Example: {ex} sweep --preset quick --param experiment.seed=0,1 --workers 2"
    )
    @friendly
    def sweep(
        param: Annotated[
            list[str],
            typer.Option(metavar="KEY=V1,V2", help="Values to search over (repeatable; grid)."),
        ],
        preset: Annotated[
            str | None,
            typer.Option("--preset", "-p", help=f"Shipped preset: {choices} [default: quick]."),
        ] = None,
        config: ConfigFile = None,
        set_: Overrides = None,
        metric: Annotated[str | None, typer.Option(help="Metric to rank by.")] = None,
        mode: Annotated[str | None, typer.Option(help="'max' or 'min'.")] = None,
        out_dir: Annotated[Path | None, typer.Option("--out", help="Output folder.")] = None,
        workers: Workers = 1,
        address: Address = None,
    ) -> None:
        """Train over a grid of config values (Ray Tune when installed) and rank the trials;
        every combination is checked before anything starts."""
        from fieldrl.atomic import atomic_write_json
        from fieldrl.distributed import grid, run_sweep
        from fieldrl.runs import Run
        from fieldrl.seeding import setup_process

        if preset is None and config is None:
            preset = "quick"
            console.print("sweep: preset quick (--preset or --config to change)")
        space = dict(_parse_param(p) for p in param)
        base = [*(set_ or [])]

        def overrides(params: dict[str, Any]) -> list[str]:
            return [*base, *(f"{k}={json.dumps(v)}" for k, v in params.items())]

        for params in grid(space):  # a bad key or value fails here, before Ray starts
            app.load_config(preset, config, overrides(params))
        target = (out_dir or Path("runs") / app.name / f"sweep-{_stamp()}").resolve()

        def trial(params: dict[str, Any]) -> dict[str, float]:
            cfg = app.load_config(preset, config, overrides(params))
            setup_process(cfg)
            with Run.create(cfg, root=target / "trials") as run:
                return app.train(cfg, run=run, resources=Resources())

        rows = run_sweep(
            trial,
            space,
            metric=metric or app.sweep_metric,
            mode=mode or app.sweep_mode,
            workers=workers,
            address=address,
            storage=str(target / "tune"),
        )
        atomic_write_json(target / "sweep.json", rows)
        for row in rows:
            if "error" in row:
                console.print(f"trial {row['params']} failed: {row['error']}", highlight=False,
                              soft_wrap=True)  # fmt: skip
        best = rows[0]
        shown = {k: v for k, v in best.items() if k != "params"}
        _print_metrics("best trial", {**best["params"], **shown}, app.units)
        typer.echo(target / "sweep.json")


VERBS = (add_train, add_evaluate, add_benchmark, add_report, add_serve, add_load_test, add_demo,
         add_config, add_sweep)  # fmt: skip


def build_app_cli(app: App) -> typer.Typer:
    """The typer sub-command for ``app``: the core's verbs (:data:`VERBS`, each added by its
    own function), then the app's own (``App.add_commands``)."""
    presets = "\n".join(f"  {name:<12} {summary[:76] + '...' * (len(summary) > 76)}"
                        for name, summary in app.preset_summaries())  # fmt: skip
    cli = typer.Typer(
        name=app.name,
        help=f"{app.summary}\n\n\b\nPresets (see one with `fieldrl {app.name} config "
        f"--preset NAME`):\n{presets}",
        no_args_is_help=True,
        add_completion=False,
        rich_markup_mode=None,
    )
    for add in VERBS:
        add(cli, app)
    if app.add_commands is not None:
        app.add_commands(cli, app)
    return cli


def discover_apps() -> tuple[dict[str, App], dict[str, str]]:
    """Installed apps by CLI name, and the ones that failed to load with why.

    ``FIELDRL_EXTRA_APPS="module:ATTR,..."`` adds apps that are not installed as entry points.
    """
    found: dict[str, App] = {}
    broken: dict[str, str] = {}
    targets = [(ep.name, ep.value) for ep in entry_points(group="fieldrl.apps")]
    extra = os.environ.get("FIELDRL_EXTRA_APPS", "")
    targets += [(t.strip(), t.strip()) for t in extra.split(",") if t.strip()]
    for name, target in targets:
        module, _, attr = target.partition(":")
        try:
            app = getattr(importlib.import_module(module), attr or "APP")
        except ImportError as exc:
            broken[name] = f"not importable ({exc}); install its extra"
            continue
        found[app.name] = app
    return found, broken


def _version(value: bool) -> None:
    if value:
        out.print(f"fieldrl {fieldrl.__version__}")
        raise typer.Exit()


def build_root() -> typer.Typer:
    """The ``fieldrl`` command with every discovered app attached."""
    root = typer.Typer(
        rich_markup_mode=None,
        name="fieldrl",
        help="Reinforcement-learning apps for six real domains on one small core.\n\n"
        "Run 'fieldrl apps' to list the installed apps, then 'fieldrl <app> --help'.",
        no_args_is_help=True,
        add_completion=False,
    )
    apps, broken = discover_apps()

    @root.callback()
    def _root(
        version: Annotated[
            bool, typer.Option("--version", callback=_version, is_eager=True, help="Print version.")
        ] = False,
    ) -> None:
        """fieldrl."""

    @root.command("apps")
    def list_apps(
        names: Annotated[bool, typer.Option("--names", help="Only the names, one a line.")] = False,
    ) -> None:
        """List the installed apps, their status and presets."""
        if names:
            for name in sorted(apps):
                out.print(name)
            return
        table = Table(title="fieldrl apps")
        for column in ("app", "status", "presets", "summary"):
            table.add_column(column)
        for app in sorted(apps.values(), key=lambda a: a.name):
            table.add_row(app.name, app.status, ", ".join(app.presets()), app.summary)
        for name, why in sorted(broken.items()):
            table.add_row(name, "unavailable", "", why)
        if not apps and not broken:
            out.print("No apps installed yet.")
            return
        out.print(table)

    @root.command("run-all", epilog="Example: fieldrl run-all --out runs --app warehouse")
    @friendly
    def run_all_apps(
        out_dir: Annotated[Path, typer.Option("--out", help="Output folder.")] = Path("runs"),
        only: Annotated[
            list[str] | None, typer.Option("--app", help="Only these apps (repeatable).")
        ] = None,
    ) -> None:
        """The main job: every installed app's demo end to end (runs/<app>/<run>/), one query
        to its service, and runs/index.md linking every report with its headline figure."""
        from fieldrl.mainjob import run_all

        if not apps:
            raise FieldrlError("no apps installed: pip install 'fieldrl[all]'")
        unknown = sorted(set(only or ()) - set(apps))
        if unknown:
            known = ", ".join(sorted(apps))
            raise FieldrlError(f"--app {unknown[0]}: not installed; apps: {known}")
        chosen = sorted(only or apps)
        typer.echo(run_all([apps[name] for name in chosen], out_dir))

    @root.command("new-app", epilog="Example: fieldrl new-app molecules")
    @friendly
    def new_app_command(
        name: Annotated[str, typer.Argument(help="The app's CLI name, e.g. molecules.")],
        project: Annotated[
            Path, typer.Option("--project", help="The fieldrl checkout (with pyproject.toml).")
        ] = Path("."),
    ) -> None:
        """Write a minimal working app (config, presets, a trainer on the core loop,
        evaluate, a benchmark with targets, a service, tests) to build a domain on."""
        from fieldrl.scaffold import new_app

        for path in new_app(name, project):
            typer.echo(path)
        console.print(f"next: `make test` (installs and tests {name}), then "
                      "docs/adding-an-app.md", highlight=False, soft_wrap=True)  # fmt: skip

    for app in apps.values():
        root.add_typer(build_app_cli(app), name=app.name)
    return root


def main() -> None:
    """Entry point of the ``fieldrl`` script."""
    build_root()()


if __name__ == "__main__":  # python -m fieldrl.cli, as the load test serves a run
    main()
