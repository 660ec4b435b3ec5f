"""What every app does the same way, through the core: a finished run is not retrained,
and a run folder given to the wrong app, or one that does not exist, is named as such."""

import pytest
from typer.testing import CliRunner

from fieldrl.cli import build_root, discover_apps
from fieldrl.runs import read_metrics

APPS = ["lhc-trigger", "warehouse", "battles"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One finished run of each app's tiny preset."""
    root = tmp_path_factory.mktemp("runs")
    found = {}
    for app in APPS:
        args = [app, "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}"]
        result = CliRunner().invoke(build_root(), args)
        assert result.exit_code == 0, result.output
        (found[app],) = (root / app).iterdir()
    return found


def test_every_app_is_checked_here():
    apps, broken = discover_apps()
    assert sorted(apps) == sorted(APPS) and not broken


@pytest.mark.parametrize("app", APPS)
def test_resuming_a_finished_run_does_nothing(runs, app):
    run = runs[app]
    rows = (run / "metrics.jsonl").read_text()
    checkpoints = sorted(p.name for p in (run / "checkpoints").iterdir())
    result = CliRunner().invoke(build_root(), [app, "train", "--resume", str(run)])
    assert result.exit_code == 0, result.output
    assert "already finished at step" in result.output and "nothing to do" in result.output
    assert (run / "metrics.jsonl").read_text() == rows and read_metrics(run / "metrics.jsonl")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == checkpoints


@pytest.mark.parametrize("app", APPS)
@pytest.mark.parametrize("verb", ["evaluate", "serve"])
def test_another_apps_run_is_named_as_such(runs, app, verb):
    other = APPS[(APPS.index(app) + 1) % len(APPS)]
    result = CliRunner().invoke(build_root(), [app, verb, "--run", str(runs[other])])
    assert result.exit_code == 2
    assert f"this run belongs to {other}, not {app}" in result.output
    assert f"fieldrl {other}" in result.output


@pytest.mark.parametrize("app", APPS)
def test_a_missing_run_folder_is_named_as_such(tmp_path, app):
    for args in (["evaluate", "--run"], ["train", "--resume"]):
        result = CliRunner().invoke(build_root(), [app, *args, str(tmp_path / "nope")])
        assert result.exit_code == 2 and "nope: no such folder" in result.output, result.output


@pytest.mark.slow
@pytest.mark.parametrize("app", APPS)
def test_the_quick_benchmark_validates_and_its_report_rebuilds(tmp_path, app, report_rebuilds):
    out = tmp_path / "bench"
    result = CliRunner().invoke(build_root(), [app, "benchmark", "--quick", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report_rebuilds(app, out)


@pytest.mark.parametrize("app", APPS)
def test_the_demo_report_of_a_trained_run(runs, app):
    """What the core's demo does after training the demo preset, on the tiny run."""
    from fieldrl.app import Resources

    apps, _ = discover_apps()
    headline = apps[app].demo_report(apps[app].open_run(runs[app]), resources=Resources())
    report = (runs[app] / "report.md").read_text()
    assert headline and "\n" not in headline and report.startswith("# ")
    for line in report.splitlines():
        if line.startswith("!["):
            assert (runs[app] / line.split("](")[1].rstrip(")")).is_file(), line


@pytest.mark.slow
def test_make_runs_main_job_writes_every_app_and_the_index(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(build_root(), ["run-all"])
    assert result.exit_code == 0, result.output
    index = (tmp_path / "runs" / "index.md").read_text()
    for app in APPS:
        (run,) = (tmp_path / "runs" / app).iterdir()
        assert (run / "report.md").is_file() and f"({app}/{run.name}/report.md)" in index
