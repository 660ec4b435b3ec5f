"""The app end to end on the tiny preset: train from logs, evaluate, adapt, serve."""

import io
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fieldrl.apps.warehouse import APP
from fieldrl.apps.warehouse.service import ARROW_MEDIA_TYPE, example_request
from fieldrl.apps.warehouse.sim import CONTEXT, FEATURES
from fieldrl.cli import build_root
from fieldrl.serving import create_app

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(
        build_root(), ["warehouse", "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}"]
    )
    assert result.exit_code == 0, result.output
    (run,) = (root / "warehouse").iterdir()
    return root, run


def test_train_generates_logs_and_retrains_on_them(runs, tmp_path):
    root, run = runs
    assert (run / "logs").is_dir() and list((run / "logs").glob("candidates-*.parquet"))
    cli = build_root()
    again = CliRunner().invoke(
        cli, ["warehouse", "train", "-p", "tiny", "--logs", str(run / "logs"),
              "--set", f"experiment.runs_dir={tmp_path}"],
    )  # fmt: skip
    assert again.exit_code == 0, again.output
    (new,) = (tmp_path / "warehouse").iterdir()
    assert not (new / "logs").exists()  # trained on the given logs, generated none
    out = tmp_path / "eval"
    evaluated = CliRunner().invoke(cli, ["warehouse", "evaluate", "--run", str(new),
                                         "--out", str(out)])  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    metrics = json.loads((out / "eval.json").read_text())
    assert "heuristic_throughput_gain_vs_heuristic" not in metrics  # 0 by definition
    assert metrics["heuristic_throughput"] > 0 and "aiql_throughput_gain_vs_heuristic" in metrics
    assert metrics["aiql_constraint_violations"] == 0 and metrics["aiql_throughput"] > 0
    assert "held-out evaluation" in evaluated.output and "units / labor h" in evaluated.output


def test_generate_target_logs_then_adapt(runs, tmp_path):
    _, run = runs
    cli = build_root()
    logs = tmp_path / "target"
    args = ["--episodes", "1", "--true-outcome", "--target-domain"]
    made = CliRunner().invoke(
        cli, ["warehouse", "generate-logs", "-p", "tiny", "--out", str(logs), *args]
    )
    assert made.exit_code == 0, made.output
    adapted = CliRunner().invoke(
        cli, ["warehouse", "adapt", "--run", str(run), "--target-logs", str(logs),
              "--set", f"experiment.runs_dir={tmp_path}"],
    )  # fmt: skip
    assert adapted.exit_code == 0, adapted.output
    (new,) = (tmp_path / "warehouse").iterdir()
    meta = json.loads(next(new.glob("checkpoints/*/meta.json")).read_text())
    assert meta["metadata"]["source_run"] == str(run)
    # target logs without the target reward are named, not a traceback
    plain = tmp_path / "plain"
    CliRunner().invoke(cli, ["warehouse", "generate-logs", "-p", "tiny", "--out", str(plain)])
    bad = CliRunner().invoke(cli, ["warehouse", "adapt", "--run", str(run), "--target-logs",
                                   str(plain)])  # fmt: skip
    assert bad.exit_code != 0 and "'objective' column" in bad.output


def _arrow(rows, meta):
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    table = table.replace_schema_metadata({"fieldrl": json.dumps(meta)})
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def test_service_ranks_50k_candidates_and_names_bad_rows(runs):
    _, run = runs
    client = TestClient(create_app(APP.service(APP.open_run(run))))
    body = example_request(APP.open_run(run))
    base = body["candidates"]
    rows = [dict(base[i % len(base)], source=2 * i, target=2 * i + 1) for i in range(50_000)]
    reply = client.post("/v1/act", json=dict(body, candidates=rows))
    assert reply.status_code == 200, reply.text[:300]
    out = reply.json()
    assert len(out["scores"]) == 50_000 and out["labor_hours"] <= body["labor_budget"] + 1e-9
    assert len(set(out["selected"])) == len(out["selected"]) > 0
    meta = {k: v for k, v in body.items() if k != "candidates"}
    arrow = client.post("/v1/act/arrow", content=_arrow(rows, meta),
                        headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert arrow.status_code == 200, arrow.text[:300]
    assert arrow.json()["selected"] == out["selected"]
    np.testing.assert_allclose(arrow.json()["scores"], out["scores"], rtol=1e-5)
    # bad rows: named by index and field
    broken = [dict(r) for r in base]
    broken[3]["labor_hours"] = -1.0
    r = client.post("/v1/act", json=dict(body, candidates=broken))
    assert r.status_code == 422 and "candidates.3.labor_hours" in r.text
    missing = [dict(r) for r in base]
    del missing[5][FEATURES[2]]
    r = client.post("/v1/act", json=dict(body, candidates=missing))
    assert r.status_code == 422 and f"candidates.5.{FEATURES[2]}" in r.text
    same = [dict(r) for r in base]
    same[7]["target"] = same[7]["source"]
    r = client.post("/v1/act", json=dict(body, candidates=same))
    assert r.status_code == 422 and "candidates.7.target" in r.text
    nan_rows = [dict(r) for r in base[:10]]
    nan_rows[4][FEATURES[0]] = float("nan")
    r = client.post("/v1/act/arrow", content=_arrow(nan_rows, meta),
                    headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert r.status_code == 422 and f"candidates.4.{FEATURES[0]}" in r.text
    no_col = [{k: v for k, v in r.items() if k != "zone"} for r in base[:10]]
    r = client.post("/v1/act/arrow", content=_arrow(no_col, meta),
                    headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert r.status_code == 422 and "candidates.zone" in r.text
    no_ctx = dict(meta, context={k: 0.5 for k in CONTEXT[1:]})
    r = client.post("/v1/act/arrow", content=_arrow(base[:10], no_ctx),
                    headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert r.status_code == 422 and "metadata.fieldrl" in r.text
    r = client.post(
        "/v1/act/arrow", content=b"not arrow", headers={"content-type": ARROW_MEDIA_TYPE}
    )
    assert r.status_code == 422
    r = client.post("/v1/act/arrow", content=b"x", headers={"content-type": "text/csv"})
    assert r.status_code == 415
    small = TestClient(create_app(APP.service(APP.open_run(run)), max_body_bytes=10_000))
    assert small.post("/v1/act", json=body).status_code == 413
    assert client.get("/v1/info").json()["binary_inputs"] == {"/v1/act/arrow": ARROW_MEDIA_TYPE}


def test_benchmark_writes_every_row_and_key(tmp_path, report_rebuilds):
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        build_root(), ["warehouse", "benchmark", "-c", str(TINY), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    bench = json.loads((out / "benchmark.json").read_text())
    methods = {r["method"] for r in bench["rows"]}
    expected = {"heuristic", "behavior_policy", "random", "aiql", "behavior_cloning"}
    expected |= {"iql_pooled_critic"}
    expected |= {"a2iql", "source_only", "target_only", "pooling", "off_dynamics_filter"}
    expected |= {"best_rule", "policy_search", "source_best_rule"}
    assert expected <= methods
    sens = [r for r in bench["rows"] if r["section"] == "sensitivity"]
    assert {r["setting"] for r in sens} == {"half_consolidation_labor"}
    assert {r["method"] for r in sens} == {"heuristic", "random", "best_rule", "policy_search"}
    assert len(list((out / "headroom").glob("search-*.json"))) == 2  # one per setting
    for row in bench["rows"]:
        for key in ("throughput", "throughput_gain_vs_heuristic", "ci95_low", "ci95_high",
                    "constraint_violations", "std_across_seeds"):  # fmt: skip
            assert key in row, (row["method"], key)
        assert row["constraint_violations"] == 0
    ratios = {r.get("ratio") for r in bench["rows"] if r["method"] == "a2iql"}
    assert ratios == {"4:1", "2:1"}
    p50, p99 = (bench["data"]["latency"][f"rank_50k_{q}_ms"] for q in ("p50", "p99"))
    assert p50 > 0 and p99 >= p50
    names = [t["name"] for t in bench["targets"]]
    assert len(names) == 12 and {t["met"] for t in bench["targets"]} <= {True, False}
    assert {"A²IQL at 4:1", "A²IQL spread at 2:1"} <= set(names)
    shift = next(t for t in bench["targets"] if t["name"].startswith("the target objective"))
    assert "of the others" in shift["note"]
    shifted = [r for r in bench["rows"] if r["method"] == "source_best_rule"]
    assert len(shifted) == 1 and shifted[0]["uses_simulator"]
    report = (out / "report.md").read_text()
    assert "## Transfer" in report and "## Headroom sensitivity" in report
    assert (out / "figures" / "day.png").is_file()
    report_rebuilds("warehouse", out)


def test_a_bad_sensitivity_setting_stops_the_benchmark_before_anything_runs(tmp_path):
    out = tmp_path / "bench"
    args = ["warehouse", "benchmark", "-c", str(TINY), "--out", str(out),
            "--set", 'headroom.sensitivity={thin = ["labor.hours_per_epok=3"]}']  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code != 0
    assert "headroom.sensitivity.thin" in result.output and "hours_per_epok" in result.output
    assert "Traceback" not in result.output and not (out / "logs").exists()


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("zone", 50_000_000, "1000"),  # cost +430 MiB on the Arrow route
        ("zone", 10**12, "1000"),  # a MemoryError (500)
        ("labor_hours", 1e6, "24"),  # accepted by the Arrow route
        ("source", 2**53, "9007199254740991"),  # above it, ids would round
        ("log_demand", 3.5e38, "4028"),  # past float32 max 3.4028e38: every score was null
    ],
)
def test_both_routes_refuse_the_same_bad_values(runs, field, value, words):
    _, run = runs
    client = TestClient(create_app(APP.service(APP.open_run(run))))
    body = example_request(APP.open_run(run))
    rows = [dict(r) for r in body["candidates"][:10]]
    rows[4][field] = value
    meta = {k: v for k, v in body.items() if k != "candidates"}
    replies = [client.post("/v1/act", json=dict(body, candidates=rows)),
               client.post("/v1/act/arrow", content=_arrow(rows, meta),
                           headers={"content-type": ARROW_MEDIA_TYPE})]  # fmt: skip
    for reply in replies:
        assert reply.status_code == 422, reply.text[:300]
        assert reply.json()["detail"][0]["field"] == f"candidates.4.{field}", reply.text[:300]
        assert words in reply.json()["detail"][0]["message"]


def test_overflowing_integers_a_duplicated_column_and_overflowing_scores_are_422(runs):
    _, run = runs
    client = TestClient(create_app(APP.service(APP.open_run(run))))
    body = example_request(APP.open_run(run))
    huge = json.dumps(dict(body, candidates=body["candidates"][:3])).replace(
        f'"source": {body["candidates"][1]["source"]},', f'"source": {10**400},', 1
    )
    reply = client.post("/v1/act", content=huge, headers={"content-type": "application/json"})
    assert reply.status_code == 422 and "candidates." in reply.json()["detail"][0]["field"]
    rows = body["candidates"][:5]
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    twice = pa.Table.from_arrays([*table.columns, table.column("zone")],
                                 [*table.column_names, "zone"])  # fmt: skip
    meta = {k: v for k, v in body.items() if k != "candidates"}
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, twice.schema.with_metadata({"fieldrl": json.dumps(meta)})) as w:
        w.write_table(twice.replace_schema_metadata({"fieldrl": json.dumps(meta)}))
    reply = client.post("/v1/act/arrow", content=sink.getvalue(),
                        headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "candidates.zone"
    # within float32, but far outside training: the score is never sent as null
    loud = [dict(r, **{f: 3e38 for f in FEATURES}) for r in rows]
    reply = client.post("/v1/act", json=dict(body, candidates=loud))
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "candidates.0"
    reply = client.post("/v1/act", json=dict(body, labor_budget=-1))
    assert reply.json()["detail"][0]["field"] == "labor_budget"
    bad_meta = dict(meta, labor_budget="lots")
    reply = client.post("/v1/act/arrow", content=_arrow(rows, bad_meta),
                        headers={"content-type": ARROW_MEDIA_TYPE})  # fmt: skip
    assert reply.json()["detail"][0] == {
        "field": "metadata.fieldrl.labor_budget",
        "message": "Input should be a valid number",
    }


def test_a_damaged_data_page_is_one_error_line_and_leaves_no_run_folder(runs, tmp_path):
    import shutil

    _, run = runs
    logs = tmp_path / "logs"
    shutil.copytree(run / "logs", logs)
    epochs = sorted(logs.glob("epochs-*.parquet"))[0]
    data = bytearray(epochs.read_bytes())
    data[4:40] = b"\xff" * 36  # the first data page's header; the footer stays readable
    epochs.write_bytes(bytes(data))
    args = ["train", "-p", "tiny", "--logs", str(logs), "--set",
            f"experiment.runs_dir={tmp_path / 'runs'}"]  # fmt: skip
    result = CliRunner().invoke(build_root(), ["warehouse", *args])
    assert result.exit_code == 2, result.output
    assert f"{epochs.name}: unreadable rows" in result.output and "Traceback" not in result.output
    assert not list((tmp_path / "runs" / "warehouse").iterdir())
