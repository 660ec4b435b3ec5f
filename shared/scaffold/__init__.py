"""``fieldrl new-app NAME``: a minimal working app to build a new domain on.

It writes ``apps/<package>/`` (config and presets, a toy environment, a REINFORCE trainer on
the core loop, baselines, evaluate, a benchmark with targets, its report, a service) and
``tests/apps/<package>/test_app.py``, and registers the app's entry point in
``pyproject.toml``; ``make test`` then installs and tests it. docs/adding-an-app.md walks
through the files.
"""

from __future__ import annotations

import re
from pathlib import Path

from fieldrl.config import ConfigError

__all__ = ["new_app"]

TEMPLATES = Path(__file__).parent
ENTRY_POINTS = '[project.entry-points."fieldrl.apps"]'


def new_app(name: str, root: Path) -> list[Path]:
    """Write the app ``name`` (its CLI name, e.g. ``molecules`` or ``rat-motor``) into the
    project at ``root``; returns the files written."""
    if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", name):
        raise ConfigError(f"app name {name!r}: lowercase letters and digits, words joined by -")
    package = name.replace("-", "_")
    app_dir, test_dir = root / "apps" / package, root / "tests" / "apps" / package
    for folder in (app_dir, test_dir):
        if folder.exists():
            raise ConfigError(f"{folder}: already exists; choose another name or remove it")
    words = {
        "__NAME__": name,
        "__PKG__": package,
        "__CLASS__": "".join(part.title() for part in package.split("_")),
        "__TITLE__": name.replace("-", " ").capitalize(),
    }
    written = []
    for template, target in [*_pairs(TEMPLATES / "app", app_dir),
                             *_pairs(TEMPLATES / "tests", test_dir)]:  # fmt: skip
        text = template.read_text(encoding="utf-8")
        for placeholder, value in words.items():
            text = text.replace(placeholder, value)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written.append(target)
    _register(root / "pyproject.toml", name, package)
    return written


def _pairs(source: Path, target: Path) -> list[tuple[Path, Path]]:
    return [(t, target / t.relative_to(source).with_suffix(""))
            for t in sorted(source.rglob("*.tmpl"))]  # fmt: skip


def _register(pyproject: Path, name: str, package: str) -> None:
    """Add the app's entry point (its extra is for the domain's own packages, when any)."""
    if not pyproject.is_file():
        return
    text = pyproject.read_text(encoding="utf-8")
    line = f'{name} = "fieldrl.apps.{package}:APP"'
    if line in text:
        return
    if ENTRY_POINTS not in text:
        text = text.rstrip() + f"\n\n{ENTRY_POINTS}\n"
    head, _, tail = text.partition(ENTRY_POINTS)
    pyproject.write_text(f"{head}{ENTRY_POINTS}\n{line}{tail}", encoding="utf-8")
