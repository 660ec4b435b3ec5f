"""Consolidation logs on disk: Parquet, two tables per part, streamed and schema-checked.

A log folder holds ``epochs-NNNNN.parquet`` and ``candidates-NNNNN.parquet`` pairs:

- epochs: one row per planning epoch: ``episode``, ``epoch``, the context features
  (``ctx_<name>``), ``labor_budget``, ``n_candidates``, the proxy rewards
  ``containers_freed`` and ``liters_freed``, the true outcome ``units_processed``
  (picks + put-aways) and the evaluation ``objective`` (both absent from logs that only
  know the proxy), ``refill_units`` (what the epoch's moves' containers took in, below),
  and next-state aggregates (``next_utilization``, ``next_empty_share``,
  ``next_backlog_share``).
- candidates: every selected candidate and a uniform sample of the unselected ones:
  ``episode``, ``epoch``, ``selected``, ``sample_weight`` (1 / sampling rate), the
  per-candidate features (``f_<name>``), ``labor_hours``, ``zone``, and the delayed
  per-candidate outcome ``refill_units``: units put away into the candidate's source
  container within ``outcome_epochs`` epochs of the decision (emptied by the move when
  selected, by picks if ever when not), with ``outcome_epochs`` the epochs observed
  (fewer when the day ended first).

``units_processed``, ``objective``, ``refill_units`` and ``outcome_epochs`` are optional:
logs written before they existed still load, and learning from one they lack is an error
naming it. :func:`load_logged_data` reads a folder into :class:`LoggedData`, the per-epoch
arrays the algorithms learn from.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from fieldrl.apps.warehouse.config import AIQLConfig
from fieldrl.apps.warehouse.sim import CONTEXT, FEATURES, Candidates, EpochResult
from fieldrl.errors import DataError

__all__ = [
    "CANDIDATE_COLUMNS",
    "EPOCH_COLUMNS",
    "LogWriter",
    "LoggedData",
    "aggregate",
    "has_candidate_outcomes",
    "iter_log_batches",
    "load_logged_data",
    "pool",
    "read_epochs",
    "state_vector",
    "validate_logs",
]

EPOCH_COLUMNS: dict[str, str] = {
    "episode": "int32",
    "epoch": "int32",
    **{f"ctx_{name}": "float" for name in CONTEXT},
    "labor_budget": "float",
    "n_candidates": "int32",
    "containers_freed": "int32",
    "liters_freed": "float",
    "next_utilization": "float",
    "next_empty_share": "float",
    "next_backlog_share": "float",
}
OPTIONAL_EPOCH_COLUMNS = {"units_processed": "float", "objective": "float",
                          "refill_units": "float"}  # fmt: skip
OPTIONAL_CANDIDATE_COLUMNS = {"refill_units": "float", "outcome_epochs": "int16"}
CANDIDATE_COLUMNS: dict[str, str] = {
    "episode": "int32",
    "epoch": "int32",
    "selected": "bool",
    "sample_weight": "float",
    **{f"f_{name}": "float" for name in FEATURES},
    "labor_hours": "float",
    "zone": "int16",
}


@dataclass
class LogWriter:
    """Writes one part (a pair of Parquet files) per ``flush``; files appear atomically."""

    folder: Path
    unselected_rate: float = 0.15
    log_true_outcome: bool = False
    seed: int = 0
    outcome_epochs: int = 8

    def __post_init__(self) -> None:
        self.folder = Path(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._epochs: list[dict] = []
        self._cands: list[dict[str, np.ndarray]] = []
        # each block's (episode, epoch, source containers): what refills are credited by
        self._sources: list[tuple[int, int, np.ndarray]] = []
        self.start_part(len(list(self.folder.glob("epochs-*.parquet"))))

    def start_part(self, part: int) -> None:
        """Write the next part as number ``part``; its sampling depends only on (seed, part),
        so a part written again after an interruption is the same part."""
        self.part = part
        self.rng = np.random.default_rng([self.seed, part])

    def has_part(self, part: int) -> bool:
        return all(
            (self.folder / f"{kind}-{part:05d}.parquet").is_file()
            for kind in ("epochs", "candidates")
        )

    def add(
        self,
        episode: int,
        epoch: int,
        cands: Candidates,
        chosen: np.ndarray,
        labor_budget: float,
        result: EpochResult,
        next_context: np.ndarray,
    ) -> None:
        selected = np.zeros(cands.n, bool)
        selected[chosen] = True
        keep = selected | (self.rng.random(cands.n) < self.unselected_rate)
        row = {
            "episode": episode,
            "epoch": epoch,
            **{f"ctx_{n}": float(v) for n, v in zip(CONTEXT, cands.context, strict=True)},
            "labor_budget": labor_budget,
            "n_candidates": cands.n,
            "containers_freed": result.containers_freed,
            "liters_freed": result.liters_freed,
            "next_utilization": float(next_context[CONTEXT.index("utilization")]),
            "next_empty_share": float(next_context[CONTEXT.index("empty_share")]),
            "next_backlog_share": float(next_context[CONTEXT.index("backlog_share")]),
        }
        if self.log_true_outcome:
            row["units_processed"] = result.throughput
            row["objective"] = result.objective
        self._epochs.append(row)
        block = {
            "episode": np.full(keep.sum(), episode, np.int32),
            "epoch": np.full(keep.sum(), epoch, np.int32),
            "selected": selected[keep],
            "sample_weight": np.where(selected[keep], 1.0, 1.0 / self.unselected_rate),
            **{f"f_{n}": cands.features[keep, i] for i, n in enumerate(FEATURES)},
            "labor_hours": cands.labor_hours[keep],
            "zone": cands.zone[keep].astype(np.int16),
            "refill_units": np.zeros(keep.sum()),
            "outcome_epochs": np.zeros(keep.sum(), np.int16),
        }
        self._cands.append(block)
        self._sources.append((episode, epoch, cands.source[keep]))
        self._credit_refills(episode, epoch, result.put_away_into)

    def _credit_refills(self, episode: int, epoch: int, put_away_into: np.ndarray) -> None:
        """This epoch's put-aways, credited to the logged candidates of the last
        ``outcome_epochs`` epochs whose source container they went into (the first fill
        only: a row already credited keeps its outcome)."""
        if put_away_into.size == 0:
            return
        filled = dict(zip(put_away_into[:, 0].tolist(), put_away_into[:, 1].tolist(), strict=True))
        for block, (logged_episode, logged_epoch, sources) in zip(
            self._cands, self._sources, strict=True
        ):
            if logged_episode != episode or not 0 <= epoch - logged_epoch < self.outcome_epochs:
                continue
            open_ = block["refill_units"] == 0
            hit = open_ & np.isin(sources, put_away_into[:, 0])
            block["refill_units"][hit] = [filled[c] for c in sources[hit].tolist()]

    def flush(self) -> None:
        """Write what was added since the last flush as the next part."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self._epochs:
            return
        last = {}
        for row in self._epochs:
            last[row["episode"]] = max(last.get(row["episode"], -1), row["epoch"])
        for row, block in zip(self._epochs, self._cands, strict=True):
            seen = last[row["episode"]] - row["epoch"] + 1
            block["outcome_epochs"][:] = min(self.outcome_epochs, seen)
            row["refill_units"] = float(block["refill_units"][block["selected"]].sum())
        epochs = pa.Table.from_pylist(self._epochs)
        cands = pa.Table.from_pydict(
            {k: np.concatenate([b[k] for b in self._cands]) for k in self._cands[0]}
        )
        for name, table in (("epochs", epochs), ("candidates", cands)):
            final = self.folder / f"{name}-{self.part:05d}.parquet"
            tmp = final.with_name(final.name + ".tmp")
            pq.write_table(table, tmp, compression="zstd")
            tmp.replace(final)
        self.start_part(self.part + 1)
        self._epochs, self._cands, self._sources = [], [], []


def _parts(folder: Path, kind: str) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"{folder}: no such log folder")
    files = sorted(folder.glob(f"{kind}-*.parquet"))
    if not files:
        raise DataError(f"{folder}: no {kind}-*.parquet files (is this a warehouse log folder?)")
    return files


def _check_schema(path: Path, expected: dict[str, str], optional: dict[str, str]) -> None:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
    kinds = {"int32": "int", "int16": "int", "float": "float", "bool": "bool"}
    for column, want in {
        **expected,
        **{k: v for k, v in optional.items() if k in schema.names},
    }.items():
        if column not in schema.names:
            raise DataError(f"{path}: missing column {column!r}")
        got = schema.field(column).type
        ok = {
            "int": str(got).startswith(("int", "uint")),
            "float": str(got) in ("float", "double", "halffloat"),
            "bool": str(got) == "bool",
        }[kinds[want]]
        if not ok:
            raise DataError(f"{path}: column {column!r} has type {got}, expected {want}")


def validate_logs(folder: str | Path) -> tuple[list[Path], list[Path]]:
    """Check every part's schema; return the epoch and candidate files."""
    epochs, cands = _parts(Path(folder), "epochs"), _parts(Path(folder), "candidates")
    if len(epochs) != len(cands):
        raise DataError(f"{folder}: {len(epochs)} epoch files but {len(cands)} candidate files")
    for path in epochs:
        _check_schema(path, EPOCH_COLUMNS, OPTIONAL_EPOCH_COLUMNS)
    for path in cands:
        _check_schema(path, CANDIDATE_COLUMNS, OPTIONAL_CANDIDATE_COLUMNS)
    return epochs, cands


def has_candidate_outcomes(folder: str | Path) -> bool:
    """Whether every candidate file carries the per-candidate outcome columns."""
    import pyarrow.parquet as pq

    _, files = validate_logs(folder)
    return all(set(OPTIONAL_CANDIDATE_COLUMNS) <= set(pq.read_schema(f).names) for f in files)


def read_epochs(folder: str | Path) -> dict[str, np.ndarray]:
    """The (small) epochs table of all parts, as numpy columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files, _ = validate_logs(folder)
    tables = []
    for path in files:
        with _naming_bad_rows(path):
            tables.append(pq.read_table(path))
    table = pa.concat_tables(tables, promote_options="default")
    return {name: table[name].to_numpy() for name in table.column_names}


@contextmanager
def _naming_bad_rows(path: Path) -> Iterator[None]:
    """A damaged data page (pyarrow raises several types) as one DataError naming the file."""
    try:
        yield
    except DataError:
        raise
    except Exception as exc:
        raise DataError(f"{path}: unreadable rows ({type(exc).__name__}: {exc})") from None


def iter_log_batches(
    folder: str | Path, batch_rows: int = 65_536, columns: Sequence[str] | None = None
) -> Iterator[dict[str, np.ndarray]]:
    """Candidate rows in batches, file by file: logs larger than memory stream through."""
    import pyarrow.parquet as pq

    _, files = validate_logs(folder)
    for path in files:
        with _naming_bad_rows(path):
            for batch in pq.ParquetFile(path).iter_batches(batch_rows, columns=columns):
                yield {name: batch.column(name).to_numpy(zero_copy_only=False)
                       for name in batch.schema.names}  # fmt: skip


F, C = len(FEATURES), len(CONTEXT)
STATE_DIM = C + F
PHI_DIM = 2 + 2 * F
LABOR = FEATURES.index("labor_min")


def aggregate(features: np.ndarray, labor: np.ndarray) -> np.ndarray:
    """phi(A): [count, total labor, feature sums / 100, feature means] of a chosen set."""
    n = features.shape[0]
    if n == 0:
        return np.zeros(PHI_DIM, np.float32)
    return np.concatenate(
        [[n / 100.0, labor.sum()], features.sum(0) / 100.0, features.mean(0)]
    ).astype(np.float32)


def state_vector(context: np.ndarray, pool_mean: np.ndarray) -> np.ndarray:
    return np.concatenate([context, pool_mean]).astype(np.float32)


@dataclass
class LoggedData:
    """Logged epochs, with candidates regrouped per epoch (capped, reweighted)."""

    state: np.ndarray  # [E, STATE_DIM]
    next_state: np.ndarray
    done: np.ndarray  # [E] no next epoch logged
    reward: np.ndarray  # [E]
    phi: np.ndarray  # [E, PHI_DIM]
    x: np.ndarray  # [N, F] candidate rows (selected first within each epoch)
    selected: np.ndarray  # [N] bool
    weight: np.ndarray  # [N] how many pool candidates each row stands for
    offsets: np.ndarray  # [E + 1] rows of epoch e: offsets[e]:offsets[e+1]
    # [N] the delayed per-candidate outcome (refill units of its source container), NaN
    # where unknown (old logs) or cut short by the end of the day
    outcome: np.ndarray | None = None

    @property
    def n_epochs(self) -> int:
        return int(self.state.shape[0])

    def subset(self, epochs: np.ndarray) -> LoggedData:
        """These epochs only (a next state outside the subset stays as it was logged)."""
        epochs = np.asarray(epochs, dtype=np.int64)
        rows = [np.arange(self.offsets[e], self.offsets[e + 1]) for e in epochs]
        sizes = [r.size for r in rows]
        rows_all = np.concatenate(rows) if rows else np.zeros(0, np.int64)
        return replace(
            self,
            state=self.state[epochs], next_state=self.next_state[epochs],
            done=self.done[epochs], reward=self.reward[epochs], phi=self.phi[epochs],
            x=self.x[rows_all], selected=self.selected[rows_all], weight=self.weight[rows_all],
            outcome=None if self.outcome is None else self.outcome[rows_all],
            offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        )  # fmt: skip

    def with_reward(self, reward: np.ndarray) -> LoggedData:
        return replace(self, reward=np.asarray(reward, np.float32))


def pool(*parts: LoggedData) -> LoggedData:
    """Logged data sets side by side."""
    sizes = np.concatenate([np.diff(p.offsets) for p in parts])
    known = all(p.outcome is not None for p in parts)
    return LoggedData(
        outcome=np.concatenate([p.outcome for p in parts]) if known else None,  # type: ignore[misc]
        **{k: np.concatenate([getattr(p, k) for p in parts])
           for k in ("state", "next_state", "done", "reward", "phi", "selected", "weight")},
        x=np.concatenate([p.x for p in parts]),
        offsets=np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
    )  # fmt: skip


def load_logged_data(
    folder: str | Path, cfg: AIQLConfig, reward: str = "containers_freed", seed: int = 0
) -> LoggedData:
    """Read a log folder into per-epoch arrays (streaming the candidate files)."""
    epochs = read_epochs(folder)
    if reward not in epochs:
        old = " (logs without per-candidate outcomes: aiql.reward=liters_freed and "
        old += "aiql.outcome_weight=0)" if reward == "refill_units" else ""
        raise DataError(
            f"{folder}: the logs have no {reward!r} column to learn from (epoch columns: "
            f"{', '.join(sorted(epochs))}); choose one with aiql.reward=COLUMN{old}"
        )
    key = epochs["episode"].astype(np.int64) * 1_000_000 + epochs["epoch"]
    index = {int(k): i for i, k in enumerate(key)}
    rng = np.random.default_rng(seed)
    cols = ["episode", "epoch", "selected", "sample_weight"] + [f"f_{n}" for n in FEATURES]
    outcomes = has_candidate_outcomes(folder)
    if outcomes:
        cols += ["refill_units", "outcome_epochs"]
    per_epoch: dict[int, list[tuple[np.ndarray, ...]]] = {}
    window = 0
    for batch in iter_log_batches(folder, columns=[*cols, "labor_hours"]):
        rows = batch["episode"].astype(np.int64) * 1_000_000 + batch["epoch"]
        x = np.stack([batch[f"f_{n}"] for n in FEATURES], 1).astype(np.float32)
        if outcomes:
            window = max(window, int(batch["outcome_epochs"].max(initial=0)))
            outcome = np.stack([batch["refill_units"], batch["outcome_epochs"]], 1)
        else:
            outcome = np.full((rows.size, 2), np.nan)
        for k in np.unique(rows):
            m = rows == k
            per_epoch.setdefault(int(k), []).append((
                x[m], batch["selected"][m], batch["sample_weight"][m].astype(np.float32),
                outcome[m].astype(np.float32),
            ))  # fmt: skip
    n = len(key)
    phi = np.zeros((n, PHI_DIM), np.float32)
    pool = np.zeros((n, F), np.float32)
    xs, sels, ws, outs, sizes = [], [], [], [], []
    for k, i in index.items():
        parts = per_epoch.get(k, [])
        if not parts:
            raise DataError(
                f"{folder}: epoch {k % 1_000_000} of episode {k // 1_000_000} has no candidates"
            )
        x = np.concatenate([p[0] for p in parts])
        sel = np.concatenate([p[1] for p in parts]).astype(bool)
        w = np.concatenate([p[2] for p in parts])
        out = np.concatenate([p[3] for p in parts])
        pool[i] = (x * w[:, None]).sum(0) / w.sum()
        labor = x[sel, LABOR] / 60.0
        phi[i] = aggregate(x[sel], labor)
        unsel = np.flatnonzero(~sel)
        if unsel.size > cfg.max_unselected:
            keep = rng.choice(unsel, cfg.max_unselected, replace=False)
            w = w.copy()
            w[keep] *= unsel.size / cfg.max_unselected
            unsel = keep
        order = np.concatenate([np.flatnonzero(sel), unsel])
        xs.append(x[order]), sels.append(sel[order]), ws.append(w[order]), sizes.append(order.size)
        complete = out[order, 1] >= window  # the day ended before the window did: unknown
        outs.append(np.where(complete, out[order, 0], np.nan))
    context = np.stack([epochs[f"ctx_{c}"] for c in CONTEXT], 1).astype(np.float32)
    state = np.concatenate([context, pool], 1)
    nxt = np.array([index.get(int(k) + 1, -1) for k in key])
    x_all = np.concatenate(xs)
    return LoggedData(
        state=state,
        next_state=state[np.maximum(nxt, 0)],
        done=(nxt < 0).astype(np.float32),
        reward=epochs[reward].astype(np.float32),
        phi=phi,
        x=x_all,
        selected=np.concatenate(sels),
        weight=np.concatenate(ws),
        offsets=np.concatenate([[0], np.cumsum(sizes)]),
        outcome=np.concatenate(outs).astype(np.float32) if outcomes else None,
    )
