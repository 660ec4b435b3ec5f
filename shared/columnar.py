"""Columnar requests: a batch of rows as numpy columns, from JSON rows or an Arrow IPC body.

One row model declares every column's type and bounds. The JSON route validates each row
with it (pydantic); :func:`read_arrow` applies the same declaration to whole columns, so both
routes accept and refuse the same values. Arrow bodies are read under caps that hold before
anything is decompressed: each record batch's row count and decoded size are read from its
metadata first, so a small compressed body cannot expand into a large allocation.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Sequence

import annotated_types as at
import numpy as np
from pydantic import BaseModel

from fieldrl.serving import InputError

__all__ = ["check_columns", "read_arrow", "row_columns"]

_RECORD_BATCH = 3  # MessageHeader union tag in Arrow's Message.fbs
_BOUNDS = (
    (at.Ge, "ge", np.less, ">="),
    (at.Gt, "gt", np.less_equal, ">"),
    (at.Le, "le", np.greater, "<="),
    (at.Lt, "lt", np.greater_equal, "<"),
)


def _dtype(model: type[BaseModel], name: str) -> type:
    return np.int64 if model.model_fields[name].annotation is int else np.float64


def row_columns(rows: Sequence[BaseModel], model: type[BaseModel]) -> dict[str, np.ndarray]:
    """Validated rows of ``model`` as one typed column per field (ints stay exact)."""
    return {name: np.array([getattr(r, name) for r in rows], _dtype(model, name))
            for name in model.model_fields}  # fmt: skip


def check_columns(columns: dict[str, np.ndarray], model: type[BaseModel], prefix: str) -> None:
    """Apply ``model``'s per-field bounds (ge, gt, le, lt) to whole columns; the first bad
    value is named ``<prefix>.<row>.<field>``, as pydantic names it on the JSON route."""
    for name, column in columns.items():
        if column.dtype.kind == "f" and not np.isfinite(column).all():
            row = int(np.argmin(np.isfinite(column)))
            raise InputError(f"{prefix}.{row}.{name}", f"{column[row]} is not a finite number")
        for rule in model.model_fields[name].metadata:
            for kind, attr, outside, word in _BOUNDS:
                bound = getattr(rule, attr, None) if isinstance(rule, kind) else None
                if bound is not None and (bad := outside(column, bound)).any():
                    row = int(np.argmax(bad))
                    message = f"{column[row]!r} is not {word} {bound}"
                    raise InputError(f"{prefix}.{row}.{name}", message)


def _record_batch_size(metadata: bytes, body: bytes) -> tuple[int, int, int]:
    """(rows, decoded bytes, buffers) of one record batch message, read from its flatbuffer metadata
    (Message.header: RecordBatch {length, nodes, buffers, compression}) without decoding."""

    def deref(at: int) -> int:
        return at + struct.unpack_from("<I", metadata, at)[0]

    def field(table: int, index: int) -> int | None:
        vtable = table - struct.unpack_from("<i", metadata, table)[0]
        if 4 + 2 * index >= struct.unpack_from("<H", metadata, vtable)[0]:
            return None
        offset = struct.unpack_from("<H", metadata, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    message = deref(0)
    kind, header = field(message, 1), field(message, 2)
    if kind is None or metadata[kind] != _RECORD_BATCH or header is None:
        raise InputError("body", "expected Arrow record batches after the schema")
    batch = deref(header)
    length = field(batch, 0)
    rows = struct.unpack_from("<q", metadata, length)[0] if length is not None else 0
    buffers = field(batch, 2)
    compressed = field(batch, 3) is not None
    decoded = count = 0
    if buffers is not None:
        vector = deref(buffers)
        count = struct.unpack_from("<I", metadata, vector)[0]
        for i in range(count):
            offset, size = struct.unpack_from("<qq", metadata, vector + 4 + 16 * i)
            if offset < 0 or size < 0 or offset + size > len(body):
                raise InputError("body", "an Arrow buffer lies outside the message body")
            if compressed and size >= 8:
                prefix = struct.unpack_from("<q", body, offset)[0]  # -1: stored uncompressed
                decoded += size - 8 if prefix < 0 else prefix
            else:
                decoded += size
    return rows, decoded, count


def read_arrow(
    body: bytes, model: type[BaseModel], *, max_rows: int, prefix: str
) -> tuple[dict[str, np.ndarray], dict[bytes, bytes]]:
    """An Arrow IPC stream of one row per item with exactly ``model``'s fields as numeric
    columns: (typed columns checked like the JSON rows, the schema's metadata). Refused with
    an :class:`InputError` naming what is wrong: not Arrow, a duplicated, missing, unknown,
    non-numeric or null column, a dictionary batch, more than ``max_rows`` rows, a decoded
    size over what ``max_rows`` numeric rows take, a value out of bounds."""
    import pyarrow as pa

    names = list(model.model_fields)
    try:
        reader = pa.ipc.MessageReader.open_stream(io.BytesIO(body))
        schema = pa.ipc.read_schema(reader.read_next_message())
    except (pa.ArrowException, OSError, StopIteration, ValueError) as exc:
        raise InputError("body", f"not an Arrow IPC stream ({exc})") from None
    seen = schema.names
    for name in seen:
        if seen.count(name) > 1:
            raise InputError(f"{prefix}.{name}", "column sent more than once")
        if name not in names:
            raise InputError(f"{prefix}.{name}", f"unknown column; the columns are {names}")
    for name in names:
        if name not in seen:
            raise InputError(f"{prefix}.{name}", "missing column")
        kind = schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
            raise InputError(f"{prefix}.{name}", f"must be numeric, not {kind}")
    row_bytes = len(names) * 9  # 8-byte values and a validity bitmap, at most
    batches, rows, decoded, buffers = [], 0, 0, 0
    while True:
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as exc:
            raise InputError("body", f"malformed Arrow message ({exc})") from None
        if message.type != "record batch":
            raise InputError("body", f"unexpected Arrow {message.type} message (send plain "
                             "numeric record batches)")  # fmt: skip
        try:
            more_rows, more_bytes, more_buffers = _record_batch_size(
                message.metadata.to_pybytes(), message.body.to_pybytes() if message.body else b""
            )
        except (struct.error, IndexError):
            raise InputError("body", "malformed Arrow record batch metadata") from None
        rows, decoded, buffers = rows + more_rows, decoded + more_bytes, buffers + more_buffers
        if rows > max_rows or decoded > max_rows * row_bytes + 64 * buffers:  # 64: padding
            raise InputError(prefix, f"over {max_rows} rows ({rows}+ rows, {decoded}+ bytes "
                             f"decoded); send 1 to {max_rows}")  # fmt: skip
        try:
            batches.append(pa.ipc.read_record_batch(message, schema))
        except (pa.ArrowException, OSError) as exc:
            raise InputError("body", f"malformed Arrow record batch ({exc})") from None
    if rows < 1:
        raise InputError(prefix, f"no rows; send 1 to {max_rows}")
    table = pa.Table.from_batches(batches, schema)
    columns: dict[str, np.ndarray] = {}
    for name in names:
        column = table.column(name)
        if column.null_count:
            raise InputError(f"{prefix}.{name}", f"{column.null_count} null values")
        values = column.to_numpy()
        columns[name] = _typed(values, _dtype(model, name), f"{prefix}.{{}}.{name}")
    check_columns(columns, model, prefix)
    return columns, dict(schema.metadata or {})


def _typed(values: np.ndarray, dtype: type, where: str) -> np.ndarray:
    """``values`` as ``dtype``; integers must be whole and fit int64 (no silent rounding)."""
    if dtype is np.float64 or values.dtype.kind in "iu" and values.dtype.itemsize < 8:
        return values.astype(dtype)
    if values.dtype.kind in "iu":
        big = values > np.iinfo(np.int64).max if values.dtype.kind == "u" else np.zeros(0, bool)
        if big.any():
            raise InputError(where.format(int(np.argmax(big))), "does not fit a 64-bit integer")
        return values.astype(np.int64)
    whole = np.isfinite(values) & (values == np.round(values)) & (np.abs(values) < 2.0**63)
    if not whole.all():
        raise InputError(where.format(int(np.argmin(whole))), f"{values[np.argmin(whole)]!r} "
                         "is not an integer")  # fmt: skip
    return values.astype(np.int64)
