"""Extra verbs of ``fieldrl molecules``: ``train-prior`` (pretrain or transfer-learn the SMILES
prior on a SMILES file), ``optimize`` (``train`` by its domain name: staged RL on the
config's objectives) and ``tasks`` (the PMO tasks and their components)."""

from pathlib import Path
from typing import Annotated

import typer

from fieldrl.app import App
from fieldrl.cli_types import ConfigFile, Overrides, Preset, console, friendly


def add_commands(cli: typer.Typer, app: App) -> None:
    @cli.command(
        "train-prior",
        epilog="Example: fieldrl molecules train-prior --smiles series.smi --init "
        "data/molecules/prior --set prior.epochs=2",
    )  # fmt: skip
    @friendly
    def train_prior_command(
        smiles: Annotated[
            Path | None,
            typer.Option(help="SMILES file (.smi/.csv/.txt, gzip ok); default ZINC 250k."),
        ] = None,
        init: Annotated[
            Path | None, typer.Option(help="Transfer-learn from this prior folder or run.")
        ] = None,
        resume: Annotated[Path | None, typer.Option(help="Continue a train-prior run.")] = None,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Pretrain the SMILES prior (or fine-tune one on your series). Lines that are not
        kept are reported by number (data_report.json); the prior is written to
        <run>/prior, ready for agent.prior."""
        from fieldrl.apps.molecules.pipeline import ZINC, export_prior, train_prior
        from fieldrl.runs import Run
        from fieldrl.seeding import setup_process

        if resume is not None:
            run = Run.resume(resume, app.config_model)
        else:
            overrides = [*(set_ or [])]
            if smiles is not None:
                overrides.append(f'prior.smiles="{smiles.resolve()}"')
            if init is not None:
                overrides.append(f'prior.init="{init.resolve()}"')
            cfg = app.load_config(preset, config, overrides)
            cfg.experiment.name = "prior"
            run = Run.create(cfg)
        setup_process(run.config)
        with run:
            console.print(f"run folder: [bold]{run.dir}[/bold]")
            quality = train_prior(run.config, run=run)
        data = ZINC if run.config.prior.smiles is None else {"data": run.config.prior.smiles}
        folder = export_prior(run.dir, run.dir / "prior", {**data, **quality})
        console.print(" | ".join(f"{k} {v:.3f}" for k, v in quality.items()), highlight=False)
        typer.echo(folder)

    train = next(c for c in cli.registered_commands if c.callback.__name__ == "train")
    cli.command("optimize", help="Staged RL on the config's objectives (the same as train).",
                epilog="Example: fieldrl molecules optimize --config "
                "apps/molecules/configs/staged.toml")(
        train.callback)  # fmt: skip

    @cli.command(epilog="Example: fieldrl molecules tasks")
    def tasks() -> None:
        """The PMO tasks a stage can name, with their components."""
        from fieldrl.apps.molecules.oracles import TASKS

        for name, objective in TASKS.items():
            parts = ", ".join(c.kind + (f"({c.fp})" if c.kind == "similarity" else "")
                              for c in objective.components)  # fmt: skip
            typer.echo(f"{name:26} {objective.mean:10} {parts}")
