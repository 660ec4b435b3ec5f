import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fieldrl.benchmark import mean_ci95
from fieldrl.config import ConfigError, FieldrlConfig, config_hash, load_config
from fieldrl.report import Report, line_plot, plot_metrics
from fieldrl.runs import Run, load_run_config, read_metrics, saved_config_hash


def make_config(tmp_path, loggers):
    return load_config(
        FieldrlConfig,
        None,
        [
            f"experiment.runs_dir={str(tmp_path)!r}",
            f"experiment.loggers={loggers!r}",
            "experiment.name=t",
        ],
    )


def test_a_new_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path):
    import torch

    cfg = make_config(tmp_path, ["jsonl"])
    with pytest.raises(ValueError), Run.create(cfg) as failed:
        failed.log(1, {"loss": 1.0})
        raise ValueError("bad input found after the folder was made")
    assert not failed.dir.exists()
    with pytest.raises(ValueError), Run.create(cfg) as kept:
        kept.checkpoints.save(1, {"w": torch.zeros(1)}, {"finished": False})
        raise ValueError("a crash after a checkpoint: the run can resume")
    assert (kept.dir / "config.json").exists()
    with pytest.raises(ValueError), Run.resume(kept.dir, FieldrlConfig):
        raise ValueError("a resumed run keeps its folder whatever happens")
    assert (kept.dir / "config.json").exists()


def test_run_folder_and_writers(tmp_path):
    cfg = make_config(tmp_path, ["stdout", "jsonl", "tensorboard"])
    with Run.create(cfg) as run:
        for step in range(1, 1001):
            run.log(step, {"loss": 1.0 / step})
    assert run.dir.parent == tmp_path / "fieldrl" and run.dir.name.endswith("-t")
    rows = read_metrics(run.dir / "metrics.jsonl")
    assert len(rows) == 1000 and rows[9]["loss"] == pytest.approx(0.1)
    events = EventAccumulator(str(run.dir / "tb"))
    events.Reload()
    scalars = events.Scalars("loss")
    assert len(scalars) == 1000 and scalars[-1].step == 1000
    saved = json.loads((run.dir / "config.json").read_text())
    assert saved["app"] == "fieldrl" and len(saved["config_hash"]) == 12
    assert load_run_config(run.dir, FieldrlConfig) == cfg
    assert saved_config_hash(run.dir) == saved["config_hash"] == config_hash(cfg)
    (run.dir / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="config.json: expected a JSON object, got list"):
        saved_config_hash(run.dir)
    again = Run.create(cfg)  # same second, same name: a fresh folder
    assert again.dir != run.dir
    again.close()


def test_resume_drops_metrics_after_last_checkpoint(tmp_path):
    cfg = make_config(tmp_path, ["jsonl"])
    with Run.create(cfg) as run:
        for step in range(1, 8):
            run.log(step, {"x": step})
            if step % 3 == 0:
                run.checkpoints.save(step, {"step": step})
    with (run.dir / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 8, "x"')  # a write cut by a kill
    with Run.resume(run.dir, FieldrlConfig) as resumed:
        assert [r["step"] for r in read_metrics(run.dir / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
        resumed.log(7, {"x": 7})
    assert [r["step"] for r in read_metrics(run.dir / "metrics.jsonl")][-2:] == [6, 7]


def test_resume_refuses_non_run(tmp_path):
    with pytest.raises(ConfigError, match="not a run folder"):
        Run.resume(tmp_path, FieldrlConfig)


def test_mlflow_writer_sqlite(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    cfg = make_config(tmp_path, ["mlflow"])
    with Run.create(cfg) as run:
        run.log(1, {"reward": 1.5})
        run.log(2, {"reward": 2.5})
    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("fieldrl-fieldrl")
    [found] = client.search_runs([experiment.experiment_id])
    history = client.get_metric_history(found.info.run_id, "reward")
    assert [m.value for m in history] == [1.5, 2.5]
    assert found.info.run_name == run.dir.name
    assert found.data.params["experiment.name"] == "t"


def test_mean_ci95():
    mean, low, high = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and high - mean == pytest.approx(4.303 * 1.0 / 3**0.5, rel=1e-3)
    assert mean_ci95([5.0]) == (5.0, 5.0, 5.0)
    with pytest.raises(ValueError):
        mean_ci95([1.0, float("nan")])


def test_metric_plots_and_report(tmp_path):
    cfg = make_config(tmp_path, ["jsonl"])
    with Run.create(cfg) as run:
        run.log(1, {"a": 1})
        run.log(2, {"a": 3})
    [png] = plot_metrics(run.dir / "metrics.jsonl", ["a", "missing"], tmp_path / "plots")
    assert png.read_bytes()[:4] == b"\x89PNG"
    band = line_plot(
        tmp_path / "band.png",
        {"x": ([0, 1], [2, 3])},
        title="t",
        xlabel="x",
        ylabel="y",
        band=(1.5, 2.5),
    )
    report = Report("R").table([{"m": "a", "v": 0.123456, "per_seed": [1.0, 1 / 3]}])
    report.figure(band, "cap", tmp_path)
    text = report.write(tmp_path / "report.md").read_text()
    assert "| a | 0.1235 | 1, 0.3333 |" in text and "![cap](band.png)" in text


def test_progress_bar_is_silent_when_not_a_terminal(capsys):
    from fieldrl.runs import progress

    with progress(3, "work") as advance:
        for _ in range(3):
            advance()
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_logs_plain_lines_when_not_a_terminal(capsys):
    from fieldrl.runs import progress

    with progress(4, "work", log_every=0.0) as advance:
        for _ in range(4):
            advance()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4
    assert lines[1].startswith("work: 2/4 (50%), ") and lines[-1].endswith(" s")
