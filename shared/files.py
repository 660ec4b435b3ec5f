"""The user's input files, named by paths or glob patterns (``train --data``)."""

from __future__ import annotations

import glob
from collections.abc import Sequence
from pathlib import Path

from fieldrl.errors import DataError

__all__ = ["expand_files"]


def expand_files(patterns: Sequence[str | Path]) -> list[Path]:
    """Files matching the given paths or glob patterns, in sorted order; none is an error."""
    files: list[Path] = []
    for pattern in patterns:
        matched = sorted(glob.glob(str(pattern)))
        if not matched:
            raise DataError(f"no file matches {str(pattern)!r}")
        files.extend(Path(m) for m in matched)
    return files
