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
