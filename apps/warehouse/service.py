"""The ranking service: POST one planning window's candidate moves (JSON rows, or an Arrow
IPC table for large sets) with the context and the labor budget; get back the selected
moves and every candidate's score. The selection is feasible by construction."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, create_model

from fieldrl.apps.warehouse.pipeline import load_aiql
from fieldrl.apps.warehouse.selection import select_moves
from fieldrl.apps.warehouse.sim import CONTEXT, FEATURES, Candidates
from fieldrl.runs import LoadedRun
from fieldrl.serving import BinaryInput, InputError, RequestModel, ServiceSpec

__all__ = ["ARROW_MEDIA_TYPE", "MAX_CANDIDATES", "arrow_request", "example_request", "service"]

MAX_CANDIDATES = 200_000
MAX_BODY_BYTES = 96 * 1024 * 1024  # 50k JSON rows are ~12 MB; 200k Arrow rows ~30 MB
ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
INDEX_COLUMNS = ("source", "target", "zone")

CandidateRow = create_model(
    "CandidateRow",
    __base__=RequestModel,
    source=(int, Field(..., ge=0, description="Source container id (emptied by the move).")),
    target=(int, Field(..., ge=0, description="Target container id (same item).")),
    zone=(int, Field(..., ge=0, le=1000, description="The source's zone (zone move cap).")),
    labor_hours=(float, Field(..., gt=0, le=24, description="Labor the move takes.")),
    **{name: (float, Field(...)) for name in FEATURES},
)
Context = create_model(
    "Context", __base__=RequestModel, **{name: (float, Field(...)) for name in CONTEXT}
)


class RankHeader(RequestModel):
    """Everything but the candidates (in an Arrow request: the schema metadata)."""

    context: Context  # type: ignore[valid-type]
    labor_budget: float = Field(..., gt=0, le=10_000, description="Labor hours for moves.")
    moves_per_zone: int | None = Field(
        None, ge=1, description="Zone rule: moves per zone (default: the run's config)."
    )
    return_scores: bool = Field(True, description="Include every candidate's score.")


class RankRequest(RankHeader):
    candidates: list[CandidateRow] = Field(  # type: ignore[valid-type]
        ..., min_length=1, max_length=MAX_CANDIDATES
    )


class ColumnarRequest(BaseModel):
    """A decoded Arrow request: the same content as RankRequest, held as arrays."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    context: np.ndarray
    labor_budget: float
    moves_per_zone: int | None
    return_scores: bool
    columns: dict[str, np.ndarray]


class RankResponse(BaseModel):
    selected: list[int] = Field(description="Indices of the chosen moves, best first.")
    labor_hours: float = Field(description="Labor the chosen moves take.")
    scores: list[float] | None = Field(None, description="Every candidate's score.")
    n_candidates: int
    model_version: str


def _bad_column(column: np.ndarray, name: str) -> None:
    finite = np.isfinite(column)
    if not finite.all():
        raise InputError(f"candidates.{int(np.argmin(finite))}.{name}", "not a finite number")


def _columns_from_rows(rows: list[Any]) -> dict[str, np.ndarray]:
    names = (*INDEX_COLUMNS, "labor_hours", *FEATURES)
    table = np.array([[getattr(r, n) for n in names] for r in rows], np.float64)
    return {n: table[:, i] for i, n in enumerate(names)}


def arrow_request(body: bytes) -> ColumnarRequest:
    """Decode an Arrow IPC stream: one row per candidate (columns ``source``, ``target``,
    ``zone``, ``labor_hours`` and every feature), the rest in the schema metadata key
    ``fieldrl`` as JSON: ``{"context": {...}, "labor_budget": h, "moves_per_zone": n}``."""
    import pyarrow as pa

    try:
        table = pa.ipc.open_stream(io.BytesIO(body)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError("body", f"not an Arrow IPC stream ({exc})") from None
    meta = (table.schema.metadata or {}).get(b"fieldrl")
    if meta is None:
        raise InputError("metadata.fieldrl", "missing: context and labor_budget go here")
    try:
        head = RankHeader.model_validate_json(meta)
    except (ValueError, TypeError) as exc:
        raise InputError("metadata.fieldrl", str(exc).splitlines()[-1].strip()) from None
    if not 1 <= table.num_rows <= MAX_CANDIDATES:
        raise InputError("candidates", f"{table.num_rows} rows; send 1 to {MAX_CANDIDATES}")
    columns = {}
    for name in (*INDEX_COLUMNS, "labor_hours", *FEATURES):
        if name not in table.column_names:
            raise InputError(f"candidates.{name}", "missing column")
        column = table.column(name)
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise InputError(f"candidates.{name}", f"must be numeric, not {column.type}")
        if column.null_count:
            raise InputError(f"candidates.{name}", f"{column.null_count} null values")
        columns[name] = column.to_numpy().astype(np.float64)
        _bad_column(columns[name], name)
    for name in INDEX_COLUMNS:
        if (columns[name] < 0).any() or (columns[name] != np.round(columns[name])).any():
            bad = int(np.argmax((columns[name] < 0) | (columns[name] != np.round(columns[name]))))
            raise InputError(f"candidates.{bad}.{name}", "must be a non-negative integer")
    bad = columns["labor_hours"] <= 0
    if bad.any():
        raise InputError(f"candidates.{int(np.argmax(bad))}.labor_hours", "must be > 0")
    return ColumnarRequest(
        context=np.array([getattr(head.context, c) for c in CONTEXT], np.float32),
        labor_budget=head.labor_budget,
        moves_per_zone=head.moves_per_zone,
        return_scores=head.return_scores,
        columns=columns,
    )


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's AIQL scorer followed by the feasible selection."""
    cfg, version = run.config, run.model_version
    model, _ = load_aiql(run)

    def act(request: RankRequest | ColumnarRequest) -> RankResponse:
        if isinstance(request, RankRequest):
            columns = _columns_from_rows(request.candidates)
            context = np.array([getattr(request.context, c) for c in CONTEXT], np.float32)
        else:
            columns, context = request.columns, request.context
        src, tgt = columns["source"].astype(np.int64), columns["target"].astype(np.int64)
        same = np.flatnonzero(src == tgt)
        if same.size:
            raise InputError(f"candidates.{int(same[0])}.target", "equals the source")
        cands = Candidates(
            source=src,
            target=tgt,
            item=np.zeros(src.size, np.int64),
            zone=columns["zone"].astype(np.int64),
            labor_hours=columns["labor_hours"],
            features=np.stack([columns[n] for n in FEATURES], 1).astype(np.float32),
            context=context,
        )
        scores = model.score_candidates(cands)
        cap = request.moves_per_zone or cfg.labor.moves_per_zone
        chosen = select_moves(
            scores, src, tgt, cands.zone, cands.labor_hours, request.labor_budget, cap
        )
        return RankResponse(
            selected=chosen.tolist(),
            labor_hours=float(cands.labor_hours[chosen].sum()),
            scores=scores.tolist() if request.return_scores else None,
            n_candidates=cands.n,
            model_version=version,
        )

    return ServiceSpec(
        app=cfg.app,
        request_model=RankRequest,
        response_model=RankResponse,
        act=act,
        model_version=version,
        config_hash=run.config_hash,
        info={
            "features": list(FEATURES),
            "context": list(CONTEXT),
            "max_candidates": MAX_CANDIDATES,
        },  # fmt: skip
        max_body_bytes=MAX_BODY_BYTES,
        binary_inputs={"arrow": BinaryInput(ARROW_MEDIA_TYPE, arrow_request)},
    )


def example_request(run: LoadedRun) -> dict[str, Any]:
    """A real planning window of the run's warehouse, as JSON (the first 200 candidates)."""
    from fieldrl.apps.warehouse.sim import Warehouse

    cfg = run.config
    cands = Warehouse(cfg, cfg.experiment.seed).candidates()
    rows = [
        {"source": int(cands.source[i]), "target": int(cands.target[i]),
         "zone": int(cands.zone[i]), "labor_hours": float(cands.labor_hours[i]),
         **{n: float(cands.features[i, j]) for j, n in enumerate(FEATURES)}}
        for i in range(min(cands.n, 200))
    ]  # fmt: skip
    return {
        "context": {n: float(v) for n, v in zip(CONTEXT, cands.context, strict=True)},
        "labor_budget": cfg.labor.hours_per_epoch * cfg.labor.consolidation_share,
        "candidates": rows,
    }
