"""What every app does the same way, through the core: a finished run is not retrained,
and a run folder given to the wrong app, or one that does not exist, is named as such."""

import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import click
import pytest
import typer
from typer.testing import CliRunner

from fieldrl.cli import build_root, discover_apps
from fieldrl.config import ConfigError, load_config
from fieldrl.runs import read_metrics

APPS = sorted(discover_apps()[0])  # every installed app, a scaffolded one included


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


def test_every_app_loads():
    _, broken = discover_apps()
    assert {"lhc-trigger", "warehouse", "battles"} <= set(APPS) and not broken


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
def test_serve_uses_the_runs_threads_and_warns_when_open(runs, app, monkeypatch):
    import torch

    served = []

    def run_server(api, **kwargs):
        served.append((api, torch.get_num_threads()))

    monkeypatch.setattr("fieldrl.serving.run_server", run_server)
    torch.set_num_threads(2)
    try:
        monkeypatch.delenv("FIELDRL_API_TOKEN", raising=False)
        result = CliRunner().invoke(build_root(), [app, "serve", "--run", str(runs[app])])
        assert result.exit_code == 0, result.output
        assert served[-1][1] == 1  # the run's experiment.threads, not torch's default
        assert "FIELDRL_API_TOKEN is not set" in result.output
        monkeypatch.setenv("FIELDRL_API_TOKEN", "t0k")
        result = CliRunner().invoke(build_root(), [app, "serve", "--run", str(runs[app])])
        assert result.exit_code == 0 and "not set" not in result.output and len(served) == 2
    finally:
        torch.set_num_threads(1)


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
    for app in APPS:  # the demo's run (battles trains a game run beside it)
        (report,) = [r for r in (tmp_path / "runs" / app).glob("*/report.md")
                     if f"({app}/{r.parent.name}/report.md)" in index]  # fmt: skip
        assert (report.parent / "checkpoints").is_dir()


REPO = Path(__file__).parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def _doc_examples() -> list[tuple[str, str]]:
    """(where, command line) for every `fieldrl` line in a bash block of the README and docs."""
    found = []
    for path in DOCS:
        in_block, pending = False, ""
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                in_block = not in_block and line.strip() in ("```bash", "```sh")
                continue
            text = pending + line.strip()
            if not in_block or not text:
                continue
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            words = shlex.split(text, comments=True)
            command = [w for w in words if not re.match(r"^[A-Z_]+=", w)]
            if command and command[0] == "fieldrl":
                found.append((f"{path.relative_to(REPO)}:{number}", text))
    return found


def _help_examples() -> list[tuple[str, str]]:
    """(where, command line) for the `Example:` of every command's --help."""
    found = []

    def walk(command: click.Command, path: str) -> None:
        for match in re.finditer(r"Example: (.+)", command.epilog or ""):
            found.append((f"{path} --help", match.group(1)))
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(build_root()), "fieldrl")
    return found


EXAMPLES = _doc_examples() + _help_examples()


def test_the_docs_and_help_have_examples_to_check():
    assert len(_doc_examples()) >= 35 and len(_help_examples()) >= 3 * 9


@pytest.fixture(scope="module")
def inputs(runs, tmp_path_factory):
    """What the examples' placeholders stand for: a run of each app, ROOT data, logs."""
    from fieldrl.apps.warehouse import APP as warehouse
    from fieldrl.apps.warehouse.pipeline import generate_logs, target_config

    root = tmp_path_factory.mktemp("inputs")
    tiny = warehouse.load_config("tiny")
    logs = generate_logs(tiny, root / "logs", 1, 100)
    target = generate_logs(target_config(tiny), root / "tlogs", 1, 200, true_outcome=True)
    return {"runs": runs, "logs": logs, "tlogs": target,
            "root": REPO / "data" / "lhc_trigger" / "sample_nano.root"}  # fmt: skip


def _substitute(text: str, app: str, inputs: dict) -> list[str]:
    run = str(inputs["runs"][app])
    words = []
    for word in shlex.split(text.replace("<app>", app), comments=True):
        if "<run>" in word or word in ("RUN", "OTHER_RUN"):
            word = run
        elif word.endswith(".root") and "*" in word:
            word = str(inputs["root"])
        elif word in ("logs/", "more_logs/"):
            word = str(inputs["logs"])
        elif word == "tlogs/":
            word = str(inputs["tlogs"])
        elif word.startswith("apps/"):
            word = str(REPO / word)
        words.append(word)
    return words


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_example_in_the_docs_and_help_runs(where, text, inputs, tmp_path, monkeypatch):
    """Each example runs through the real CLI: its flags, presets, config keys, run folders
    and data paths are checked by the code that uses them. The long work behind a verb
    (training, benchmarks, demos, sweeps, serving, log generation) is replaced by a stub
    that records the call; the short verbs (report, config, simulate, train-ad) run."""
    from fieldrl.apps.warehouse import pipeline as warehouse_pipeline

    calls = []

    def stub(name, result=None):
        def record(*args, **kwargs):
            calls.append(name)
            return result(*args, **kwargs) if callable(result) else result

        return record

    apps, _ = discover_apps()
    for app in apps.values():
        written = lambda config, out, **kwargs: out / "benchmark.json"  # noqa: E731
        for hook, result in (("train", {}), ("evaluate", {}), ("benchmark", written)):
            monkeypatch.setattr(app, hook, stub(f"{app.name} {hook}", result))
    monkeypatch.setattr("fieldrl.report.write_benchmark_report", stub("report", "report.md"))
    demo_run = SimpleNamespace(dir=Path("run"))  # what the CLI reads of the LoadedRun
    monkeypatch.setattr("fieldrl.mainjob.run_demo", stub("demo", (demo_run, "headline")))
    monkeypatch.setattr("fieldrl.serving.run_server", stub("serve"))
    monkeypatch.setattr("fieldrl.distributed.serve_with_ray", stub("serve --ray"))
    monkeypatch.setattr(
        "fieldrl.distributed.run_sweep",
        stub("sweep", lambda trial, space, **kw: [{"params": {}, "x": 1.0}]),
    )
    monkeypatch.setattr(warehouse_pipeline, "generate_logs", stub("generate-logs", "logs"))
    monkeypatch.setattr(warehouse_pipeline, "adapt_run", stub("adapt"))
    monkeypatch.chdir(tmp_path)
    env = dict(re.findall(r"(?:^|\s)([A-Z_]+)=(\S+)", text.split("fieldrl", 1)[0]))
    named = [w for w in shlex.split(text, comments=True) if w in APPS][:1]
    for app in APPS if "<app>" in text else named or [None]:
        words = _substitute(text, app, inputs) if app else shlex.split(text, comments=True)
        args = words[words.index("fieldrl") + 1 :]
        if args[:1] == ["run-all"]:
            monkeypatch.setattr("fieldrl.mainjob.run_all", stub("run-all", "index.md"))
        if args[1:2] == ["report"]:  # needs a benchmark folder: the stub writes none
            (tmp_path / args[2]).mkdir(parents=True, exist_ok=True)
        result = CliRunner(env=env).invoke(build_root(), args)
        assert result.exit_code == 0, f"{where}: {' '.join(args)}\n{result.output}"


def test_an_unknown_key_names_the_nearest_valid_ones(tmp_path):
    from fieldrl.apps.warehouse import APP

    with pytest.raises(ConfigError) as near:
        APP.load_config("tiny", overrides=["aiql.lrr=1e-3"])
    assert "unknown key 'aiql.lrr'; did you mean 'aiql.lr'?" in str(near.value)
    assert "(every key: `fieldrl warehouse config`)" in str(near.value)
    with pytest.raises(ConfigError) as far:
        APP.load_config("tiny", overrides=["algo.lr=3e-4"])
    assert "unknown key 'algo'; valid keys here: experiment, layout," in str(far.value)


def test_the_config_command_prints_every_key_as_toml_that_loads_back(tmp_path):
    """For every app and preset: each key with its type, default and description, the
    preset's own comments, and TOML that loads back to the same config."""
    import tomllib

    apps, _ = discover_apps()
    for app in apps.values():
        for preset in app.presets():
            result = CliRunner().invoke(build_root(), [app.name, "config", "--preset", preset])
            assert result.exit_code == 0, (app.name, preset, result.output)
            again = load_config(app.config_model, data=tomllib.loads(result.stdout))
            assert again == app.load_config(preset), (app.name, preset)
    text = CliRunner().invoke(build_root(), ["lhc-trigger", "config", "-p", "quick"]).stdout
    assert "n_windows = 32  # int; default 96; Control windows in the fill; preset: " in text
    assert "seed = 0  # int; default 0; Seed for python, numpy and torch" in text
    assert "# mlflow_uri unset  # str or unset; default unset" in text
