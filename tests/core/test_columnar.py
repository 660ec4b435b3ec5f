"""Arrow bodies read under caps that hold before decompression; one row model bounds both
the JSON rows and the Arrow columns."""

import io

import numpy as np
import pyarrow as pa
import pytest
from pydantic import Field

from fieldrl.columnar import read_arrow, row_columns
from fieldrl.serving import InputError, RequestModel


class Row(RequestModel):
    id: int = Field(..., ge=0, le=2**53 - 1)
    zone: int = Field(..., ge=0, le=1000)
    hours: float = Field(..., gt=0, le=24)


def arrow(table: pa.Table, compression: str | None = None, chunk: int | None = None) -> bytes:
    sink = io.BytesIO()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table, max_chunksize=chunk)
    return sink.getvalue()


def table(n: int = 3, **columns) -> pa.Table:
    data = {"id": np.arange(n), "zone": np.ones(n, np.int32), "hours": np.full(n, 2.0)}
    return pa.table({**data, **columns})


def refused(body: bytes, field: str, words: str, max_rows: int = 100) -> None:
    with pytest.raises(InputError) as caught:
        read_arrow(body, Row, max_rows=max_rows, prefix="rows")
    assert caught.value.field == field and words in caught.value.message, caught.value


def test_round_trip_keeps_types_and_the_schema_metadata():
    t = table(5).replace_schema_metadata({"k": "v"})
    for compression in (None, "zstd", "lz4"):
        columns, meta = read_arrow(arrow(t, compression, 2), Row, max_rows=5, prefix="rows")
        assert columns["id"].dtype == np.int64 and columns["hours"].dtype == np.float64
        assert columns["id"].tolist() == [0, 1, 2, 3, 4] and meta == {b"k": b"v"}


def test_a_compression_bomb_is_refused_from_its_metadata_before_anything_is_decoded(
    monkeypatch,
):
    n = 5_000_000
    bomb = arrow(table(n, id=np.zeros(n, np.int64)), "zstd")  # 100 MB from a few hundred KB
    assert len(bomb) < 2_000_000
    monkeypatch.setattr(pa.ipc, "read_record_batch", lambda *a: pytest.fail("decoded"))
    refused(bomb, "rows", "over 100 rows", max_rows=100)
    # rows within the cap, but buffers claiming more than those rows can take
    few = arrow(table(10), "zstd")
    forged = few.replace(np.int64(80).tobytes(), np.int64(10**9).tobytes())
    assert forged != few
    refused(forged, "rows", "bytes decoded", max_rows=10)


def test_rows_over_the_cap_are_counted_across_batches():
    refused(arrow(table(30), chunk=7), "rows", "over 20 rows", max_rows=20)
    refused(arrow(table(0)), "rows", "no rows")


@pytest.mark.parametrize(
    ("columns", "field", "words"),
    [
        ({"zone": np.array([1, 5e7, 1])}, "rows.1.zone", "<= 1000"),
        ({"zone": np.array([1, 1e12, 1])}, "rows.1.zone", "<= 1000"),
        ({"hours": np.array([1.0, 1.0, 1e6])}, "rows.2.hours", "<= 24"),
        ({"hours": np.array([1.0, np.nan, 1.0])}, "rows.1.hours", "not a finite number"),
        ({"id": np.array([0, 2**64 - 1, 3], np.uint64)}, "rows.1.id", "64-bit"),
        ({"id": np.array([0, 2**53, 3])}, "rows.1.id", "<= 9007199254740991"),
        ({"id": np.array([0.0, 1.5, 3.0])}, "rows.1.id", "not an integer"),
        ({"zone": pa.array(["a", "b", "c"])}, "rows.zone", "numeric"),
        ({"zone": pa.array([1, None, 2])}, "rows.zone", "1 null"),
        ({"extra": np.zeros(3)}, "rows.extra", "unknown column"),
    ],
)
def test_bad_columns_are_named(columns, field, words):
    refused(arrow(table(3, **columns)), field, words)


def test_a_duplicated_or_missing_column_is_named():
    t = table(3)
    twice = pa.Table.from_arrays([*t.columns, t.column("zone")], [*t.column_names, "zone"])
    refused(arrow(twice), "rows.zone", "more than once")
    refused(arrow(t.drop(["hours"])), "rows.hours", "missing column")
    refused(b"not arrow at all", "body", "not an Arrow IPC stream")
    refused(arrow(t)[:-40], "body", "malformed")


def test_json_rows_become_the_same_typed_columns():
    rows = [Row(id=2**53 - 1, zone=3, hours=1.5)]
    columns = row_columns(rows, Row)
    assert columns["id"].dtype == np.int64 and int(columns["id"][0]) == 2**53 - 1
