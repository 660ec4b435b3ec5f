"""Extra verbs of ``fieldrl lhc-trigger``: ``simulate`` (write NanoAOD-like ROOT files) and
``train-ad`` (retrain the anomaly-detection autoencoder on new data)."""

from pathlib import Path
from typing import Annotated

import typer

from fieldrl.app import App
from fieldrl.cli_types import ConfigFile, DataFiles, Overrides, Preset, friendly


def add_commands(cli: typer.Typer, app: App) -> None:
    @cli.command(
        epilog="Example: fieldrl lhc-trigger simulate --out fill.root --windows 0:4 --seed 7"
    )
    @friendly
    def simulate(
        out: Annotated[Path, typer.Option(help="ROOT file to write (NanoAOD branch names).")],
        seed: Annotated[int, typer.Option(help="Fill seed.")] = 1,
        windows: Annotated[str, typer.Option(help="Window range START:STOP of the fill.")] = "0:2",
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Simulate part of a fill and write it as NanoAOD-like ROOT (nJet, Jet_pt, ...)."""
        from fieldrl.apps.lhc_trigger.data import write_events
        from fieldrl.apps.lhc_trigger.sim import FillSimulator
        from fieldrl.config import ConfigError

        cfg = app.load_config(preset, config, set_ or [])
        try:
            start, stop = (int(x) for x in windows.split(":"))
        except ValueError:
            raise ConfigError(f"--windows {windows!r}: expected START:STOP, e.g. 0:4") from None
        if not 0 <= start < stop <= cfg.fill.n_windows:
            raise ConfigError(
                f"--windows {windows!r}: the fill has windows 0..{cfg.fill.n_windows}"
            )
        sim = FillSimulator(cfg.fill, seed)
        write_events(out, list(sim.windows(start, stop)))
        typer.echo(str(out))

    @cli.command(
        "train-ad", epilog="Example: fieldrl lhc-trigger train-ad --data 'nano/*.root' --out ad/"
    )
    @friendly
    def train_ad(
        out: Annotated[Path, typer.Option(help="Folder for the autoencoder checkpoint.")],
        data: DataFiles = None,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Train the anomaly-detection autoencoder on early-fill background (sim or --data)."""
        from fieldrl.apps.lhc_trigger.pipeline import autoencoder_events
        from fieldrl.apps.lhc_trigger.triggers import train_autoencoder
        from fieldrl.checkpoint import CheckpointManager
        from fieldrl.seeding import setup_process

        overrides = [*(set_ or []), *app.data_overrides(data)]
        cfg = app.load_config(preset, config, overrides)
        setup_process(cfg)
        events = autoencoder_events(cfg, cfg.train.fill_seeds[0])
        ae, stats = train_autoencoder(events, cfg.trigger, cfg.experiment.seed)
        saved = {"ad_model": ae.state_dict()}
        path = CheckpointManager(out).save(0, saved, {"ad_model": ae.spec, **stats})
        mse, n = stats["ad_train_mse"], stats["ad_train_events"]
        typer.echo(f"{path}  (train MSE {mse:.4f} on {n:.0f} events)")
