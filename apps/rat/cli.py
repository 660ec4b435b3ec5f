"""Extra verbs of ``fieldrl rat``: ``library`` (write the motion library, or check yours),
``tune-cpg`` (retune the central pattern generator), ``export-activations`` (NWB) and
``speed``."""

from pathlib import Path
from typing import Annotated, Literal

import typer

from fieldrl.app import App
from fieldrl.cli_types import ConfigFile, Overrides, Preset, console, friendly


def add_commands(cli: typer.Typer, app: App) -> None:
    @cli.command(epilog="Example: fieldrl rat library --out library.npz -p tiny")
    @friendly
    def library(
        out: Annotated[Path, typer.Option(help="Write the library here (.npz).")],
        check: Annotated[
            Path | None, typer.Option(help="Instead, check your trajectory file (npz/HDF5).")
        ] = None,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Generate the CPG motion library (training clips) into --out, or check a file of
        your own trajectories and write it in the library's layout."""
        from fieldrl.apps.rat.env import RatEnv
        from fieldrl.apps.rat.library import load_library
        from fieldrl.apps.rat.pipeline import build_library

        cfg = app.load_config(preset, config, list(set_ or []))
        body = RatEnv(cfg).body
        if check is not None:
            lib = load_library(check, body.joint_names, body.model.qpos0, body.joint_ranges())
        else:
            lib = build_library(cfg, body)
        lib.save(out)
        frames = sum(c.frames for c in lib.clips)
        console.print(
            f"{len(lib.clips)} clips, {frames / lib.fps:.0f} s at {lib.fps:g} fps -> {out}",
            highlight=False,
        )

    @cli.command("tune-cpg", epilog="Example: fieldrl rat tune-cpg --out cpg.json --candidates 4")
    @friendly
    def tune_cpg(
        out: Annotated[Path, typer.Option(help="Write the tuned parameters here (JSON).")],
        candidates: Annotated[int, typer.Option(min=0, help="Random-search trials each.")] = 120,
        seed: Annotated[int, typer.Option(help="Search seed.")] = 0,
        preset: Preset = None,
        config: ConfigFile = None,
        set_: Overrides = None,
    ) -> None:
        """Retune the standing pose, the trot at each library frequency, rearing and
        grooming in the simulator (the app ships the result as cpg.json; point
        library.cpg at yours)."""
        from fieldrl.apps.rat.env import RatEnv
        from fieldrl.apps.rat.library import tune_behaviours
        from fieldrl.atomic import atomic_write_json

        cfg = app.load_config(preset, config, list(set_ or []))
        body = RatEnv(cfg).body
        found = tune_behaviours(
            body,
            cfg.library.frequencies,
            candidates,
            seed,
            lambda message, _: console.print(message, highlight=False),
        )
        atomic_write_json(
            out,
            {
                "tuned": f"fieldrl rat tune-cpg --candidates {candidates} --seed {seed}",
                **found.to_json(),
            },
        )

    @cli.command(
        "export-activations",
        epilog="Example: fieldrl rat export-activations --run RUN --out rat.nwb",
    )
    @friendly
    def export_activations(
        run: Annotated[Path, typer.Option(help="A trained run folder.")],
        out: Annotated[Path, typer.Option(help="The NWB file to write.")],
        mode: Annotated[
            str, typer.Option(help="track (adapter core) or explore (priors).")
        ] = "track",
        episodes: Annotated[int, typer.Option(min=1, help="Episodes (trials).")] = 4,
        seconds: Annotated[float, typer.Option(min=0.1, help="Seconds each.")] = 4.0,
    ) -> None:
        """The network's activity with the body's kinematics, as NWB (pynwb)."""
        from fieldrl.apps.rat.export import export_activations as export
        from fieldrl.config import ConfigError

        if mode not in ("track", "explore"):
            raise ConfigError(f"--mode must be track or explore, not {mode!r}")
        chosen: Literal["track", "explore"] = "track" if mode == "track" else "explore"
        path = export(run, out, chosen, episodes, seconds)
        console.print(f"wrote {path}", highlight=False)

    @cli.command(epilog="Example: fieldrl rat speed --seconds 1")
    def speed(
        seconds: Annotated[float, typer.Option(min=0.1, help="Seconds per measurement.")] = 2.0,
    ) -> None:
        """Control steps a second of each task on one core, raw mj_step, and like for like
        with dm_control's tasks (dm_settings_* beside composer_*)."""
        from fieldrl.apps.rat.benchmark import speed as measure
        from fieldrl.apps.rat.config import RatConfig

        cfg = RatConfig.model_validate({"benchmark": {"speed_seconds": seconds}})
        for key, value in measure(cfg).items():
            console.print(f"{key:34} {value:12,.0f}", highlight=False)
