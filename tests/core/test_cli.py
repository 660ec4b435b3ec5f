import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import fieldrl
from fieldrl.cli import build_root

REFERENCE = Path(__file__).parents[1] / "reference"


def test_help_and_version():
    runner = CliRunner()
    result = runner.invoke(build_root(), ["--help"])
    assert result.exit_code == 0 and "fieldrl apps" in result.output
    result = runner.invoke(build_root(), ["--version"])
    assert result.exit_code == 0 and fieldrl.__version__ in result.output


def test_apps_lists_extra_and_broken(monkeypatch):
    monkeypatch.setenv("FIELDRL_EXTRA_APPS", "ppo_cartpole:APP,no_such_module:APP")
    runner = CliRunner()
    result = runner.invoke(build_root(), ["apps"])
    assert result.exit_code == 0
    assert "cartpole" in result.output and "unavailable" in result.output
    names = runner.invoke(build_root(), ["apps", "--names"])
    assert "cartpole" in names.output.split() and "no_such_module" not in names.output


def test_app_verbs_have_help_with_examples(monkeypatch):
    monkeypatch.setenv("FIELDRL_EXTRA_APPS", "ppo_cartpole:APP")
    runner = CliRunner(env={"COLUMNS": "200"})
    for verb in ("train", "evaluate", "benchmark", "serve", "demo", "sweep"):
        result = runner.invoke(build_root(), ["cartpole", verb, "--help"])
        assert result.exit_code == 0, verb
        assert "Example:" in result.output and f"fieldrl cartpole {verb}" in result.output, verb


def test_missing_run_folder_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("FIELDRL_EXTRA_APPS", "ppo_cartpole:APP")
    result = CliRunner().invoke(build_root(), ["cartpole", "evaluate", "--run", str(tmp_path)])
    assert result.exit_code == 2 and "not a run folder" in result.output


def test_console_script_runs():
    fieldrl_bin = Path(sys.executable).parent / "fieldrl"
    done = subprocess.run(
        [str(fieldrl_bin), "--version"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == f"fieldrl {fieldrl.__version__}"
