"""What every app's ``benchmark`` writes, in one schema.

A :class:`Benchmark` times the run and its phases, records provenance (the commit it started
from and, if different, the one it finished at; machine, CPU model, cores, workers) and
writes ``benchmark.json``: one row per method, the seeds, the config and its hash, the
cost, the targets (:class:`Target`, each met or missed) and the app's plot data. The
schema ships as ``benchmark.schema.json``; :func:`load_benchmark` checks a file against it
and names the failing key. ``mean_ci95`` and ``wilson_interval`` are the two intervals the
rows carry (``ci95_low`` / ``ci95_high``, or ``<metric>_ci95_low`` / ``_high``);
``sum_of_means_ci95`` is the interval of a total over fixed groups (PMO's summed score).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.atomic import atomic_write_json, atomic_write_text
from fieldrl.config import FieldrlConfig, config_hash
from fieldrl.errors import DataError
from fieldrl.runs import versions

__all__ = [
    "SCHEMA",
    "SCHEMA_PATH",
    "Benchmark",
    "Target",
    "load_benchmark",
    "mean_ci95",
    "sum_of_means_ci95",
    "wilson_interval",
]

SCHEMA = "fieldrl-benchmark/1"
SCHEMA_PATH = Path(__file__).with_name("benchmark.schema.json")

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
    half = _t95(dof) * float(x.std(ddof=1)) / math.sqrt(x.size)
    return mean, mean - half, mean + half


def _t95(dof: int) -> float:
    return _T95[dof - 1] if dof <= len(_T95) else 1.96


def sum_of_means_ci95(groups: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """The sum over ``groups`` of each group's mean, with its Student-t 95% interval
    ``(sum, low, high)``: the groups are fixed (say, a benchmark's tasks) and only the
    draws inside each vary (its seeds), so the variance is the sum of each mean's
    ``s^2 / n`` on ``sum(n - 1)`` degrees of freedom. Groups of one draw add no spread;
    with none of more than one, the interval has zero width."""
    arrays = [np.asarray(g, dtype=float) for g in groups]
    if not arrays or any(a.size == 0 or np.isnan(a).any() for a in arrays):
        raise ValueError(f"sum_of_means_ci95 needs non-empty finite groups, got {groups}")
    total = float(sum(a.mean() for a in arrays))
    spread = [a for a in arrays if a.size > 1]
    if not spread:
        return total, total, total
    dof = sum(a.size - 1 for a in spread)
    half = _t95(dof) * math.sqrt(sum(float(a.var(ddof=1)) / a.size for a in spread))
    return total, total - half, total + half


def wilson_interval(successes: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (``(0, 1)`` with no trials)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Target:
    """One of an issue's targets: what is wanted (``goal``), what was ``measured``, and
    whether it was ``met``; ``note`` says why, where a figure needs context."""

    name: str
    goal: str
    measured: str
    met: bool
    note: str = ""


class Benchmark:
    """One benchmark run of ``config``'s app into ``out``: use :meth:`phase` to time its
    parts and :meth:`write` for ``benchmark.json``."""

    def __init__(self, config: FieldrlConfig, out: str | Path, *, quick: bool, workers: int = 1):
        self.config, self.out, self.quick, self.workers = config, Path(out), quick, workers
        self.out.mkdir(parents=True, exist_ok=True)
        self.started = time.perf_counter()
        self.at_start = versions()
        self.phases: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time a part of the run; its seconds go to ``cost["<name>_s"]``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[f"{name}_s"] = round(time.perf_counter() - start, 1)

    def run_jobs(
        self,
        fn: Callable[[Any], Any],
        jobs: Sequence[Any],
        key: Callable[[Any], str],
        *,
        address: str | None = None,
        description: str | None = None,
    ) -> list[Any]:
        """``[fn(job) for job in jobs]`` over the run's workers, each result saved as it
        finishes in ``<out>/runs/<key(job)>.json`` (atomic, tagged with the config hash). A
        benchmark killed halfway and run again with the same config skips what it saved."""
        from fieldrl.distributed import parallel_map

        folder = self.out / "runs"
        folder.mkdir(parents=True, exist_ok=True)
        tag = config_hash(self.config)

        def stored(job: Any) -> dict[str, Any]:
            try:
                return json.loads((folder / f"{key(job)}.json").read_text())
            except (OSError, json.JSONDecodeError):
                return {}

        def saved(job: Any) -> Any:
            data = stored(job)
            return data.get("row") if data.get("config_hash") == tag else None

        todo = [job for job in jobs if saved(job) is None]
        stale = [h for h in (stored(job).get("config_hash") for job in todo) if h]
        if stale:  # silently redoing hours of work would be worse than a word about it
            print(f"{folder}: {len(stale)} saved result(s) come from another config (hash "
                  f"{', '.join(sorted(set(stale)))}; this one is {tag}): they run "
                  "again. A new config field or default changes the hash: to finish that "
                  "benchmark, run the version that started it; --out a new folder keeps both.",
                  file=sys.stderr)  # fmt: skip
        if description and len(todo) < len(jobs):
            description += f" ({len(jobs) - len(todo)} of {len(jobs)} saved before)"

        def keep(i: int, result: Any) -> None:  # NaN allowed: a run may lack a figure
            text = json.dumps({"config_hash": tag, "row": result})
            atomic_write_text(folder / f"{key(todo[i])}.json", text)

        parallel_map(fn, todo, self.workers, address, description, on_result=keep)
        return [saved(job) for job in jobs]

    def write(
        self,
        rows: Sequence[Mapping[str, Any]],
        *,
        seeds: Sequence[int],
        targets: Sequence[Target] = (),
        train_seeds: Sequence[int] = (),
        data: Mapping[str, Any] | None = None,
    ) -> Path:
        """Write ``benchmark.json`` (validated against the schema) and return its path."""
        provenance = dict(self.at_start)
        finish = versions().get("git_commit")
        if finish != provenance.get("git_commit"):
            provenance["git_commit_at_finish"] = finish
        payload = {
            "schema": SCHEMA,
            "app": self.config.app,
            "date_utc": datetime.now(UTC).isoformat(timespec="seconds"),
            "config_hash": config_hash(self.config),
            "config": self.config.model_dump(mode="json"),
            "seeds": [int(s) for s in seeds],
            "train_seeds": [int(s) for s in train_seeds],
            "versions": provenance,
            "cost": {
                "seconds": round(time.perf_counter() - self.started, 1),
                "workers": self.workers,
                "quick": self.quick,
                **self.phases,
            },
            "rows": [dict(r) for r in rows],
            "targets": [asdict(t) for t in targets],
            "data": dict(data or {}),
        }
        path = self.out / "benchmark.json"
        _validate(json.loads(json.dumps(payload, allow_nan=False)), str(path))
        atomic_write_json(path, payload)
        return path


def load_benchmark(path: str | Path) -> dict[str, Any]:
    """A ``benchmark.json`` (or the folder holding one), checked against the schema."""
    path = Path(path)
    if path.is_dir():
        path = path / "benchmark.json"
    if not path.is_file():
        raise DataError(f"{path}: no such file (run `fieldrl <app> benchmark` first)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not valid JSON ({exc})") from None
    _validate(data, str(path))
    return data


def _validate(data: Any, origin: str) -> None:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    errors = jsonschema.Draft202012Validator(schema).iter_errors(data)
    error = jsonschema.exceptions.best_match(errors)
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "<top level>"
        raise DataError(
            f"{origin}: does not match the benchmark schema at '{where}': {error.message}"
        )
