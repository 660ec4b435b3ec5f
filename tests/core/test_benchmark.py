"""The benchmark schema: what Benchmark writes, what load_benchmark refuses, and the report
rebuilt from benchmark.json alone."""

import json

import pytest

from fieldrl.benchmark import (
    Benchmark,
    Target,
    load_benchmark,
    sum_of_means_ci95,
    wilson_interval,
)
from fieldrl.config import FieldrlConfig
from fieldrl.errors import DataError
from fieldrl.report import write_benchmark_report
from fieldrl.runs import versions


def _write(out, **kwargs):
    bench = Benchmark(FieldrlConfig(), out, quick=True, workers=2)
    with bench.phase("training"):
        pass
    rows = [{"method": "a", "score": 1.0, "ci95_low": 0.5, "ci95_high": 1.5, "per_seed": [1, 2]},
            {"method": "b", "score": None}]  # fmt: skip
    targets = [Target("score of a", ">= 0.9", "1.0", True), Target("b", "any", "none", False,
                                                                        "no data")]  # fmt: skip
    return bench, bench.write(rows, seeds=[7, 8], targets=targets, train_seeds=[0],
                              data={"curve": [1, 2, 3]}, **kwargs)  # fmt: skip


def test_a_benchmark_file_has_every_part_and_validates(tmp_path):
    _, path = _write(tmp_path)
    data = load_benchmark(tmp_path)
    assert data == json.loads(path.read_text())
    assert data["schema"] == "fieldrl-benchmark/1" and data["app"] == "fieldrl"
    assert data["seeds"] == [7, 8] and data["train_seeds"] == [0]
    assert data["cost"]["workers"] == 2 and data["cost"]["quick"] is True
    assert data["cost"]["training_s"] >= 0 and data["cost"]["seconds"] >= 0
    assert data["versions"]["cpu_model"] and data["versions"]["packages"]["fieldrl"]
    assert data["targets"][1] == {"name": "b", "goal": "any", "measured": "none", "met": False,
                                  "note": "no data"}  # fmt: skip


def test_the_commit_a_run_started_from_is_kept(tmp_path):
    bench = Benchmark(FieldrlConfig(), tmp_path, quick=False)
    bench.at_start = {**bench.at_start, "git_commit": "0" * 40}
    recorded = load_benchmark(bench.write([{"method": "a"}], seeds=[0]))["versions"]
    assert recorded["git_commit"] == "0" * 40
    assert recorded["git_commit_at_finish"] == versions()["git_commit"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda d: d.pop("targets"), "'targets' is a required property"),
        (lambda d: d["cost"].update(seconds="3"), "at 'cost/seconds'"),
        (lambda d: d["targets"][0].update(met="yes"), "at 'targets/0/met'"),
        (lambda d: d["rows"][0].update(nested={"a": 1}), "at 'rows/0/nested'"),
        (lambda d: d.update(extra=1), "'extra' was unexpected"),
    ],
)
def test_a_file_off_the_schema_is_named_with_the_failing_key(tmp_path, change, named):
    _, path = _write(tmp_path)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(DataError, match="does not match the benchmark schema") as err:
        load_benchmark(path)
    assert named in str(err.value) and str(path) in str(err.value)


def test_missing_or_broken_files_are_named(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        load_benchmark(tmp_path)
    (tmp_path / "benchmark.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        load_benchmark(tmp_path)


def test_the_report_is_rebuilt_from_the_file_alone(tmp_path):
    _, path = _write(tmp_path)

    def sections(data, out, rep):
        rep.text("## Rows").table(data["rows"], ["method", "score", "per_seed"])
        rep.text(f"curve {data['data']['curve']}")

    first = write_benchmark_report(tmp_path, sections).read_text()
    assert "| score of a | >= 0.9 | 1.0 | MET |  |" in first
    assert "| b | any | none | MISSED | no data |" in first
    assert "| a | 1 | 1, 2 |" in first and "curve [1, 2, 3]" in first
    assert "2 worker(s), quick" in first and "training 0 s" in first
    (tmp_path / "report.md").unlink()
    assert write_benchmark_report(path.parent, sections).read_text() == first


def test_wilson_interval():
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_a_sum_of_means_varies_only_with_the_draws_inside_each_group():
    # means 2 and 3; variance 1/3 + 2/2 on 2 + 1 degrees of freedom (t = 3.182)
    total, low, high = sum_of_means_ci95([[1, 2, 3], [2, 4]])
    half = 3.182 * (1 / 3 + 1) ** 0.5
    assert (total, low, high) == pytest.approx((5, 5 - half, 5 + half), abs=1e-3)
    # groups far apart but each alike inside: the total is known exactly
    assert sum_of_means_ci95([[0.1, 0.1], [0.9, 0.9]]) == pytest.approx((1.0, 1.0, 1.0))
    assert sum_of_means_ci95([[0.5], [0.25]]) == (0.75, 0.75, 0.75)  # one draw: no spread
    with pytest.raises(ValueError, match="finite"):
        sum_of_means_ci95([[1.0], [float("nan")]])


def test_run_jobs_saves_each_result_and_skips_it_when_run_again(tmp_path, capsys):
    from fieldrl.benchmark import Benchmark, config_hash
    from fieldrl.config import ExperimentConfig, FieldrlConfig

    calls = []

    def square(x):
        calls.append(x)
        return {"x": x, "y": x * x, "missing": float("nan")}

    bench = Benchmark(FieldrlConfig(), tmp_path, quick=True)
    first = bench.run_jobs(square, [1, 2, 3], key=str)
    assert [r["y"] for r in first] == [1, 4, 9] and calls == [1, 2, 3]
    (tmp_path / "runs" / "2.json").unlink()
    again = Benchmark(FieldrlConfig(), tmp_path, quick=True).run_jobs(square, [1, 2, 3], key=str)
    assert calls == [1, 2, 3, 2] and [r["y"] for r in again] == [1, 4, 9]
    assert "another config" not in capsys.readouterr().err
    other = FieldrlConfig(experiment=ExperimentConfig(seed=7))  # another config: all again
    Benchmark(other, tmp_path, quick=True).run_jobs(square, [1, 2, 3], key=str)
    assert calls == [1, 2, 3, 2, 1, 2, 3]
    said = capsys.readouterr().err  # and it says so, with both hashes
    assert "3 saved result(s) come from another config" in said
    assert config_hash(FieldrlConfig()) in said and config_hash(other) in said
