"""The Ray backend's local fallbacks (fast) and real Ray with 2 workers (slow)."""

import sys

import pytest

from fieldrl.distributed import WorkerPool, grid, parallel_map, run_sweep
from fieldrl.errors import FieldrlError


class Counter:
    def __init__(self, index):
        self.index, self.calls = index, 0

    def bump(self, by):
        self.calls += by
        return (self.index, self.calls)


def square(x):
    return x * x


def test_local_pool_keeps_state():
    with WorkerPool(Counter, workers=1) as pool:
        assert pool.broadcast("bump", 2) == [(0, 2)]
        assert pool.broadcast("bump", 3) == [(0, 5)]


def test_parallel_map_local_and_grid():
    seen = []
    assert parallel_map(square, [1, 2, 3], on_result=lambda i, r: seen.append((i, r))) == [1, 4, 9]
    assert seen == [(0, 1), (1, 4), (2, 9)]
    assert grid({"a": [1, 2], "b": ["x"]}) == [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}]


def test_parallel_map_reports_progress(monkeypatch, capsys):
    import fieldrl.distributed as distributed
    from fieldrl.runs import progress

    monkeypatch.setattr(distributed, "progress", lambda n, what: progress(n, what, log_every=0))
    assert parallel_map(square, [1, 2, 3], description="squares") == [1, 4, 9]
    assert capsys.readouterr().err.splitlines()[-1].startswith("squares: 3/3 (100%)")


def test_sweep_without_ray_ranks_trials():
    rows = run_sweep(
        lambda p: {"score": -abs(p["x"] - 2.2)}, {"x": [0, 1, 2, 3]}, metric="score", mode="max"
    )
    assert [r["params"]["x"] for r in rows] == [2, 3, 1, 0]
    rows = run_sweep(
        lambda p: {"score": -abs(p["x"] - 2.2)}, {"x": [0, 1, 2, 3]}, metric="score", mode="min"
    )
    assert [r["params"]["x"] for r in rows] == [0, 1, 3, 2]
    with pytest.raises(ValueError, match="not reported"):
        run_sweep(lambda p: {"other": 1.0}, {"x": [0]}, metric="score")
    with pytest.raises(ValueError):
        WorkerPool(Counter, workers=0)


def test_a_failed_trial_is_one_line_and_the_sweep_goes_on():
    def trial(params):
        if params["x"] == 1:
            raise RuntimeError("out of memory\nTraceback (most recent call last): ...")
        return {"score": float(params["x"])}

    rows = run_sweep(trial, {"x": [0, 1, 2]}, metric="score")
    assert [r["params"]["x"] for r in rows] == [2, 0, 1]
    assert rows[-1]["error"] == "RuntimeError: out of memory"
    with pytest.raises(FieldrlError, match="every sweep trial failed; the first, {'x': 1}"):
        run_sweep(trial, {"x": [1]}, metric="score")


@pytest.mark.slow
def test_ray_pool_and_map_with_two_workers():
    pytest.importorskip("ray")
    with WorkerPool(Counter, workers=2) as pool:
        assert pool.broadcast("bump", 1) == [(0, 1), (1, 1)]
        assert pool.broadcast("bump", 1) == [(0, 2), (1, 2)]
    assert parallel_map(square, list(range(6)), workers=2) == [0, 1, 4, 9, 16, 25]
    assert parallel_map(square, [3, 1], workers=2, description="squares") == [9, 1]


@pytest.mark.slow
def test_ray_tune_sweep(tmp_path):
    pytest.importorskip("ray")
    rows = run_sweep(
        lambda p: {"score": float(p["x"])},
        {"x": [1, 3, 2]},
        metric="score",
        workers=2,
        storage=str(tmp_path),
    )
    assert [r["params"]["x"] for r in rows] == [3, 2, 1]


def test_without_ray_installed(monkeypatch):
    """With Ray missing: one worker and sweeps still work; asking for more is a clear error."""
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    from fieldrl.distributed import has_ray

    assert not has_ray()
    with WorkerPool(Counter, workers=1) as pool:
        assert pool.broadcast("bump", 1) == [(0, 1)]
    rows = run_sweep(lambda p: {"score": float(p["x"])}, {"x": [1, 2]}, metric="score", workers=2)
    assert [r["params"]["x"] for r in rows] == [2, 1]
    with pytest.raises(RuntimeError, match=r"--workers 2 needs the distributed extra"):
        WorkerPool(Counter, workers=2)
    with pytest.raises(RuntimeError, match="pip install 'fieldrl\\[distributed\\]'"):
        parallel_map(square, [1, 2], workers=2)
