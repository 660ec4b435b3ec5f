"""``fieldrl new-app``: the app it writes is registered, lints clean and passes its tests."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fieldrl.cli import build_root

REPO = Path(__file__).parents[2]


@pytest.fixture
def project(tmp_path):
    """A stand-in checkout: the project's pyproject.toml and test fixtures."""
    shutil.copy(REPO / "pyproject.toml", tmp_path)
    (tmp_path / "tests").mkdir()
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "tests")
    return tmp_path


def _new_app(project: Path, name: str) -> None:
    result = CliRunner().invoke(build_root(), ["new-app", name, "--project", str(project)])
    assert result.exit_code == 0, result.output


def _pytest(project: Path, package: str, *args: str) -> subprocess.CompletedProcess:
    """pytest with ``fieldrl.apps.<package>`` importable from the stand-in checkout (as an
    install would make it) and registered as an app."""
    site = project / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(
        f"import fieldrl.apps\nfieldrl.apps.__path__.append({str(project / 'apps')!r})\n"
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    env["FIELDRL_EXTRA_APPS"] = f"fieldrl.apps.{package}:APP"
    pytest_bin = str(Path(sys.executable).parent / "pytest")
    command = [pytest_bin, "-q", "-p", "no:cacheprovider", "-c", str(REPO / "pyproject.toml")]
    return subprocess.run([*command, *args], cwd=project, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def test_a_new_app_is_registered_lints_clean_and_passes_its_tests(project):
    _new_app(project, "rat-motor")
    assert 'rat-motor = "fieldrl.apps.rat_motor:APP"' in (project / "pyproject.toml").read_text()
    app, tests = project / "apps" / "rat_motor", project / "tests" / "apps" / "rat_motor"
    written = {p.name for p in app.iterdir()}
    assert {"pipeline.py", "reinforce.py", "service.py", "configs"} <= written
    ruff = [str(Path(sys.executable).parent / "ruff"), "--config", str(REPO / "pyproject.toml")]
    for args in (["check", "apps", "tests"], ["format", "--check", "apps", "tests"]):
        done = subprocess.run([*ruff, *args], cwd=project, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    done = _pytest(project, "rat_motor", "--rootdir", str(project), str(tests))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "5 passed" in done.stdout


def test_a_bad_or_taken_name_is_refused(project):
    runner = CliRunner()
    bad = runner.invoke(build_root(), ["new-app", "Rat_Motor", "--project", str(project)])
    assert bad.exit_code == 2 and "lowercase letters and digits" in bad.output
    _new_app(project, "rat")
    again = runner.invoke(build_root(), ["new-app", "rat", "--project", str(project)])
    assert again.exit_code == 2 and "already exists" in again.output


@pytest.mark.slow
def test_a_new_app_passes_every_contract_test_beside_the_others(project):
    """What `make test` does after `fieldrl new-app`: the cross-app contract (resume, wrong
    app, missing folder, demo report, every --help example) includes the new app."""
    _new_app(project, "rat")
    contract = str(REPO / "tests" / "apps" / "test_contract.py")
    done = _pytest(project, "rat", "--rootdir", str(REPO), contract, "-k", "rat")
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-3000:]
