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


def test_the_main_job_writes_one_layout_and_an_index(monkeypatch, tmp_path):
    """``run-all``: runs/<app>/<run>/report.md, and index.md linking it with its headline."""
    monkeypatch.setenv("FIELDRL_EXTRA_APPS", "ppo_cartpole:APP")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(build_root(), ["run-all", "--app", "cartpole"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "runs/index.md"
    (run,) = (tmp_path / "runs" / "cartpole").iterdir()
    assert (run / "report.md").is_file() and (run / "checkpoints").is_dir()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["cartpole", "index.md"]
    index = (tmp_path / "runs" / "index.md").read_text()
    assert f"[cartpole/{run.name}/report.md](cartpole/{run.name}/report.md)" in index
    assert "| cartpole | PPO held-out return" in index
    bad = CliRunner().invoke(build_root(), ["run-all", "--app", "nope"])
    assert bad.exit_code == 2 and "--app nope: not installed" in bad.output


def test_help_imports_no_heavy_library():
    """``fieldrl --help`` and every app's ``--help`` stay fast (measured 0.3-0.5 s): building
    the command tree imports no torch, matplotlib, scipy or app code beyond configs."""
    code = (
        "import sys; from fieldrl.cli import build_root; build_root()\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'scipy', 'ray', 'pyarrow', 'uproot')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_a_verb_is_added_and_run_on_its_own():
    """Each core verb is one top-level function: a typer app with only ``config`` added
    prints the preset's keys as TOML that loads back."""
    import tomllib

    import typer

    from fieldrl.cli import VERBS, add_config
    from fieldrl.cli import discover_apps as apps

    assert add_config in VERBS and len({v.__name__ for v in VERBS}) == len(VERBS)
    app = apps()[0]["warehouse"]
    cli = typer.Typer()
    add_config(cli, app)
    cli.command("noop", hidden=True)(lambda: None)  # typer runs a lone command without its name
    result = CliRunner().invoke(cli, ["config", "--preset", "tiny"])
    assert result.exit_code == 0, result.output
    assert (
        tomllib.loads(result.output)["experiment"]["seed"]
        == app.load_config("tiny").experiment.seed
    )
