"""Extra verbs of ``fieldrl warehouse``: ``generate-logs`` (behavior-policy logs in the
documented Parquet format) and ``adapt`` (A²IQL: adapt a trained run to a target objective
with scarce target logs)."""

from pathlib import Path
from typing import Annotated

import typer

from fieldrl.app import App
from fieldrl.cli_types import ConfigFile, Overrides, Preset, friendly


def add_commands(cli: typer.Typer, app: App) -> None:
    @cli.command(
        "generate-logs",
        epilog="Example: fieldrl warehouse generate-logs --out logs/ --episodes 20 --preset quick",
    )
    @friendly
    def generate_logs(
        out: Annotated[Path, typer.Option(help="Log folder to write (Parquet parts).")],
        episodes: Annotated[int, typer.Option(min=1, help="Days (episodes) to log.")] = 4,
        first_seed: Annotated[int, typer.Option(help="Warehouse seed of the first day.")] = 100,
        true_outcome: Annotated[
            bool,
            typer.Option(help="Also log units_processed and objective (a target-domain reward)."),
        ] = False,
        target_domain: Annotated[
            bool,
            typer.Option(help="Log the target domain (transfer.target_objective and _overrides)."),
        ] = False,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Run the behavior policy (noisy heuristic) and log each epoch's candidates."""
        from fieldrl.apps.warehouse import pipeline
        from fieldrl.seeding import setup_process

        cfg = app.load_config(preset, config, set_ or [])
        setup_process(cfg)
        if target_domain:
            cfg = pipeline.target_config(cfg)
        folder = pipeline.generate_logs(cfg, out, episodes, first_seed, true_outcome)
        typer.echo(str(folder))

    @cli.command(
        epilog="Example: fieldrl warehouse adapt --run runs/warehouse/<run> --target-logs tlogs/"
    )
    @friendly
    def adapt(
        run: Annotated[Path, typer.Option(help="The source run (trained AIQL).")],
        target_logs: Annotated[
            list[Path], typer.Option(help="Target-domain log folder(s), with the target reward.")
        ],
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """A²IQL: adapt the run's scorer to transfer.target_reward in the target logs."""
        from fieldrl.apps.warehouse import pipeline
        from fieldrl.runs import Run, load_run_config
        from fieldrl.seeding import setup_process

        if preset or config:
            cfg = app.load_config(preset, config, set_ or [])
        else:
            cfg = load_run_config(run, app.config_model, set_ or [])
        setup_process(cfg)
        with Run.create(cfg) as new_run:
            pipeline.adapt_run(cfg, new_run, run, target_logs)
        typer.echo(str(new_run.dir))
