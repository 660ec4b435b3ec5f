"""What every app's ``benchmark`` writes: ``benchmark.json`` rows plus provenance, and CIs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from fieldrl.atomic import atomic_write_json
from fieldrl.config import config_hash
from fieldrl.runs import versions

__all__ = ["mean_ci95", "write_benchmark"]

# Two-sided 95% Student-t quantiles for 1..30 degrees of freedom; 1.96 beyond.
_T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]  # fmt: skip


def mean_ci95(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and the Student-t 95% confidence interval ``(mean, low, high)``.

    One value gives a zero-width interval; NaNs are an error, not silently dropped.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0 or np.isnan(x).any():
        raise ValueError(f"mean_ci95 needs finite values, got {list(values)}")
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    dof = x.size - 1
    t = _T95[dof - 1] if dof <= len(_T95) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def write_benchmark(
    out_dir: str | Path,
    app: str,
    rows: Sequence[Mapping[str, Any]],
    *,
    config: BaseModel,
    seeds: Sequence[int],
    cost: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
    versions_at_start: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``benchmark.json``: one row per method, with seeds, config hash, versions, date.

    Pass ``versions_at_start`` (``versions()`` taken when the run began): the git commit of
    a long run is the one it started from; a different one at the end is recorded too."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = {
        "app": app,
        "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "config_hash": config_hash(config),
        "config": config.model_dump(mode="json"),
        "seeds": list(seeds),
        "versions": _provenance(versions_at_start),
        "cost": dict(cost or {}),
        "rows": [dict(r) for r in rows],
        **dict(extra or {}),
    }
    path = out / "benchmark.json"
    atomic_write_json(path, payload)
    return path


def _provenance(at_start: Mapping[str, Any] | None) -> dict[str, Any]:
    now = versions()
    if at_start is None:
        return now
    found = dict(at_start)
    if now.get("git_commit") != found.get("git_commit"):
        found["git_commit_at_finish"] = now.get("git_commit")
    return found
