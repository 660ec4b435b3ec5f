"""The ranking service: POST one planning window's candidate moves (JSON rows, or an Arrow
IPC table for large sets) with the context and the labor budget; get back the selected
moves and every candidate's score. The selection is feasible by construction."""

from __future__ import annotations

from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from fieldrl.apps.warehouse.selection import select_moves
from fieldrl.apps.warehouse.sim import CONTEXT, FEATURES, Candidates
from fieldrl.columnar import read_arrow, row_columns
from fieldrl.runs import LoadedRun
from fieldrl.serving import BinaryInput, InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["ARROW_MEDIA_TYPE", "MAX_CANDIDATES", "arrow_request", "example_request", "service"]

MAX_CANDIDATES = 200_000
MAX_BODY_BYTES = 96 * 1024 * 1024  # 50k JSON rows are ~29 MiB; 200k Arrow rows ~30 MiB
ARROW_MEDIA_TYPE = "application/vnd.apache.arrow.stream"
MAX_ID = 2**53 - 1  # the largest integer every JSON client reads exactly
F32 = float(np.finfo(np.float32).max)  # the scorer computes in float32


def _feature(description: str | None = None) -> Any:
    return (float, Field(..., ge=-F32, le=F32, description=description))


CandidateRow = create_model(
    "CandidateRow",
    __base__=RequestModel,
    source=(int, Field(..., ge=0, le=MAX_ID, description="Source container id (emptied).")),
    target=(int, Field(..., ge=0, le=MAX_ID, description="Target container id (same item).")),
    zone=(int, Field(..., ge=0, le=1000, description="The source's zone (zone move cap).")),
    labor_hours=(float, Field(..., gt=0, le=24, description="Labor the move takes.")),
    **{name: _feature() for name in FEATURES},
)
Context = create_model("Context", __base__=RequestModel, **{n: _feature() for n in CONTEXT})


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


class RankResponse(ResponseModel):
    selected: list[int] = Field(description="Indices of the chosen moves, best first.")
    labor_hours: float = Field(description="Labor the chosen moves take.")
    scores: list[float] | None = Field(None, description="Every candidate's score.")
    n_candidates: int
    model_version: str


def arrow_request(body: bytes) -> ColumnarRequest:
    """Decode an Arrow IPC stream: one row per candidate (columns ``source``, ``target``,
    ``zone``, ``labor_hours`` and every feature, bounded as on the JSON route), the rest in
    the schema metadata key ``fieldrl`` as JSON: ``{"context": {...}, "labor_budget": h,
    "moves_per_zone": n}``."""
    columns, metadata = read_arrow(body, CandidateRow, max_rows=MAX_CANDIDATES, prefix="candidates")
    if b"fieldrl" not in metadata:
        raise InputError("metadata.fieldrl", "missing: context and labor_budget go here")
    try:
        head = RankHeader.model_validate_json(metadata[b"fieldrl"])
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(["metadata.fieldrl", *(str(p) for p in error["loc"])])
        raise InputError(where, error["msg"]) from None
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
    model = run.trained

    def act(request: RankRequest | ColumnarRequest) -> RankResponse:
        if isinstance(request, RankRequest):
            columns = row_columns(request.candidates, CandidateRow)
            context = np.array([getattr(request.context, c) for c in CONTEXT], np.float32)
        else:
            columns, context = request.columns, request.context
        src, tgt = columns["source"], columns["target"]
        same = np.flatnonzero(src == tgt)
        if same.size:
            raise InputError(f"candidates.{int(same[0])}.target", "equals the source")
        cands = Candidates(
            source=src,
            target=tgt,
            item=np.zeros(src.size, np.int64),
            zone=columns["zone"],
            labor_hours=columns["labor_hours"],
            features=np.stack([columns[n] for n in FEATURES], 1).astype(np.float32),
            context=context,
        )
        scores = model.score_candidates(cands)
        if not np.isfinite(scores).all():
            bad = int(np.argmin(np.isfinite(scores)))
            raise InputError(f"candidates.{bad}", "the model's score overflows for this "
                             "candidate (features far outside what it was trained on)")  # fmt: skip
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

    return ServiceSpec.for_run(
        run,
        RankRequest,
        RankResponse,
        act,
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
