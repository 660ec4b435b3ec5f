"""What an app's own commands share with the core's verbs: the option types (``--preset``,
``--config``, ``--set``, ``--workers``...), the stderr console and :func:`friendly`, which
turns a user error into one red line. An app's ``cli.py`` imports these, never
:mod:`fieldrl.cli` (which builds the whole command tree)."""

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fieldrl.errors import FieldrlError

__all__ = ["Address", "ConfigFile", "DataFiles", "Overrides", "Preset", "RunDir", "Workers",
           "console", "friendly", "out"]  # fmt: skip

console = Console(stderr=True)
out = Console()

Preset = Annotated[str | None, typer.Option("--preset", "-p", help="Shipped preset name.")]
ConfigFile = Annotated[
    Path | None, typer.Option("--config", "-c", help="A TOML config file instead of a preset.")
]
Overrides = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        "-s",
        metavar="KEY=VALUE",
        help="Override a config key (repeatable): --set experiment.seed=3.",
    ),
]
Workers = Annotated[int, typer.Option(min=1, help="Parallel workers (Ray when > 1).")]
Address = Annotated[str | None, typer.Option(help="Join a Ray cluster (e.g. 'auto').")]
RunDir = Annotated[Path, typer.Option("--run", help="A run folder made by train.")]
DataFiles = Annotated[
    list[str] | None,
    typer.Option("--data", help="Your own input files or glob patterns (repeatable; quote globs)."),
]


def friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """User errors become one red line and exit status 2, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except FieldrlError as exc:
            console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None

    return wrapper
