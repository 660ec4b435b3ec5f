"""What every app does the same way, through the core: a finished run is not retrained,
and a run folder given to the wrong app, or one that does not exist, is named as such."""

import json
import os
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
def test_a_run_killed_mid_training_resumes_to_the_same_checkpoint(runs, app, tmp_path, monkeypatch):
    """Killed right after its first checkpoint past half-way (checkpointing every iteration,
    which must not change what is learnt), then ``train --resume``: the
    final checkpoint holds the same tensors as the uninterrupted run's (weights, optimizer
    moments, generator states), bit for bit."""
    from safetensors.torch import load_file

    from fieldrl.checkpoint import CheckpointManager

    original, killed_at = CheckpointManager.save, []

    def save_then_die(self, step, state, metadata=None):
        path = original(self, step, state, metadata)
        if not metadata["finished"] and 2 * metadata["done"] >= metadata["total"]:
            killed_at.append(step)
            raise KeyboardInterrupt
        return path

    args = [app, "train", "-p", "tiny", "--set", f"experiment.runs_dir={tmp_path}",
            "--set", "experiment.checkpoint_every=1"]  # fmt: skip
    with monkeypatch.context() as patch:
        patch.setattr(CheckpointManager, "save", save_then_die)
        result = CliRunner().invoke(build_root(), args)
    assert killed_at and result.exit_code != 0, result.output
    (killed,) = (tmp_path / app).iterdir()
    result = CliRunner().invoke(build_root(), [app, "train", "--resume", str(killed)])
    assert result.exit_code == 0, result.output

    def final(run):
        manager = CheckpointManager(run / "checkpoints")
        return load_file(manager.path(manager.steps()[-1]) / "weights.safetensors")

    ours, theirs = final(killed), final(runs[app])
    assert ours.keys() == theirs.keys()
    differ = [name for name in theirs if not ours[name].equal(theirs[name])]
    assert not differ, f"{len(differ)} of {len(theirs)} tensors differ: {differ[:5]}"


@pytest.mark.parametrize("app", APPS)
def test_evaluate_honours_set_and_config(runs, app, tmp_path, monkeypatch):
    """``evaluate --config FILE --set K=V``: the run is opened once, by the CLI with both
    laid over its config, and that config is what evaluate and ``App.load`` get (opening
    the folder again would silently drop them)."""
    import fieldrl.runs

    reads, seen = [], {}
    read = fieldrl.runs.final_checkpoint

    def spy(directory):
        reads.append(directory)
        return read(directory)

    monkeypatch.setattr(fieldrl.runs, "final_checkpoint", spy)
    service = discover_apps()[0][app]
    evaluate, load = service.evaluate, service.load

    def evaluating(cfg, **kwargs):
        seen["evaluate"] = cfg
        return evaluate(cfg, **kwargs)

    def loading(run):
        seen["load"] = run.config
        return load(run)

    monkeypatch.setattr(service, "evaluate", evaluating)
    monkeypatch.setattr(service, "load", loading)
    layer = tmp_path / "layer.toml"
    layer.write_text('[experiment]\nname = "from-the-file"\n')
    args = [app, "evaluate", "--run", str(runs[app]), "--config", str(layer),
            "--set", "experiment.checkpoint_every=7", "--out", str(tmp_path / "eval")]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    assert len(reads) == 1, f"the run was opened {len(reads)} times"
    assert set(seen) == {"evaluate", "load"}, "evaluate must load the run through App.load"
    for cfg in seen.values():
        assert cfg.experiment.name == "from-the-file" and cfg.experiment.checkpoint_every == 7
    assert json.loads((tmp_path / "eval" / "eval.json").read_text())  # one name in every app


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


def fuzz(spec, cases: int, *, derandomize: bool) -> int:
    """Schemathesis against the service's own OpenAPI: ``cases`` generated requests split over
    its POST routes, valid by the schema and (for JSON) not. Every answer must be a
    documented status (never a 5xx) whose body matches the documented schema. Returns the
    number of requests sent."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    from fieldrl.serving import create_app

    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]  # fmt: skip
    for binary in spec.binary_inputs.values():  # sent as generated bytes: decoders must cope
        schemathesis.serializer(binary.media_type)(
            lambda ctx, value: value if isinstance(value, bytes) else str(value).encode()
        )
    api = create_app(spec, token="t0k")
    schema = schemathesis.openapi.from_asgi("/openapi.json", api)
    operations = [result.ok() for result in schema.get_all_operations()]
    posts = sum(op.method == "post" for op in operations)
    sent = 0
    for op in operations:
        modes = [GenerationMode.POSITIVE]
        if any(body.media_type == "application/json" for body in op.body):
            modes.append(GenerationMode.NEGATIVE)  # a binary body has no invalid form
        examples = -(-cases // (posts * len(modes))) if op.method == "post" else 1
        for mode in modes:

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=examples, deadline=None, database=None,
                      derandomize=derandomize, suppress_health_check=list(HealthCheck))  # fmt: skip
            def call(case):
                nonlocal sent
                sent += 1
                case.call_and_validate(headers={"Authorization": "Bearer t0k"}, checks=checks)

            call()
    return sent


@pytest.mark.parametrize("app", APPS)
def test_fuzzing_the_service_finds_no_5xx_and_no_answer_off_its_spec(runs, app):
    service = discover_apps()[0][app]
    assert fuzz(service.service(service.open_run(runs[app])), 100, derandomize=True) >= 100


EXTREMES = [1e308, -1e308, 5e-324, 0, -0.0, 2**63, 3e38, True, "1", None]


def _number_paths(value, path=()):
    """The path of every number in a JSON value (booleans are not numbers here)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _number_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _number_paths(v, (*path, i))]
    return [path] if isinstance(value, int | float) and not isinstance(value, bool) else []


@pytest.mark.parametrize("app", APPS)
def test_an_extreme_value_in_any_number_of_the_example_is_answered_never_a_5xx(runs, app):
    """Each number of the app's example request (at most 24 of them, spread over the body)
    replaced by an extreme (the largest and smallest floats, zeros, 2^63, a wrong type): a
    4xx naming what is wrong, or an answer, and the service goes on answering the example."""
    import copy

    from fastapi.testclient import TestClient

    from fieldrl.serving import create_app

    service = discover_apps()[0][app]
    loaded = service.open_run(runs[app])
    client = TestClient(create_app(service.service(loaded), token=""),
                        raise_server_exceptions=False)  # fmt: skip
    example = service.example_request(loaded)
    paths = _number_paths(example)
    assert paths, "the example request has no numbers to vary"
    for path in paths[:: max(1, len(paths) // 24)]:
        for extreme in EXTREMES:
            body = copy.deepcopy(example)
            node = body
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = extreme
            reply = client.post("/v1/act", json=body)
            assert reply.status_code < 500, (path, extreme, reply.text)
            if reply.status_code >= 400:
                assert reply.json()["error"], (path, extreme)
    vary = service.request_variant  # a stateful service: a request it has not seen yet
    again = example if vary is None else vary(example, 10**6)
    assert client.post("/v1/act", json=again).status_code == 200


def _longest_list(value, path=()):
    """(JSON size, path) of the list in a JSON value that takes the most bytes."""
    found = []
    if isinstance(value, dict):
        found = [_longest_list(v, (*path, k)) for k, v in value.items()]
    elif isinstance(value, list):
        found = [(len(json.dumps(value)), path)]
        found += [_longest_list(v, (*path, i)) for i, v in enumerate(value)]
    return max(found, default=(0, None))


@pytest.mark.parametrize("app", APPS)
def test_a_huge_request_is_refused_or_answered_never_a_5xx(runs, app):
    """The example's biggest list repeated until the body nearly fills the service's byte
    cap: a 4xx naming the bound it breaks, or an answer; past the cap, a 413. Either way
    the service goes on answering the example."""
    import copy

    from fastapi.testclient import TestClient

    from fieldrl.serving import create_app

    service = discover_apps()[0][app]
    loaded = service.open_run(runs[app])
    spec = service.service(loaded)
    client = TestClient(create_app(spec, token=""), raise_server_exceptions=False)
    example = service.example_request(loaded)
    size, path = _longest_list(example)
    assert path is not None, "the example request has no list to grow"
    body = copy.deepcopy(example)
    node = body
    for key in path[:-1]:
        node = node[key]
    items = node[path[-1]]
    room = spec.max_body_bytes - len(json.dumps(example)) - 1024
    node[path[-1]] = items * max(2, room // max(size, 1))
    text = json.dumps(body)
    assert spec.max_body_bytes // 2 < len(text) <= spec.max_body_bytes
    headers = {"content-type": "application/json"}
    reply = client.post("/v1/act", content=text, headers=headers)
    assert reply.status_code < 500, reply.text[:300]
    if reply.status_code >= 400:
        assert reply.json()["error"]
    node[path[-1]] = items * (2 * max(2, room // max(size, 1)))
    over = client.post("/v1/act", content=json.dumps(body), headers=headers)
    assert over.status_code == 413 and "limit" in over.json()["error"]
    vary = service.request_variant
    again = example if vary is None else vary(example, 10**6 + 1)
    assert client.post("/v1/act", json=again).status_code == 200


@pytest.mark.slow
@pytest.mark.parametrize("app", APPS)
def test_fuzzing_the_service_at_length(runs, app):
    service = discover_apps()[0][app]
    assert fuzz(service.service(service.open_run(runs[app])), 1000, derandomize=False) >= 1000


@pytest.mark.parametrize("app", ["battles", pytest.param("warehouse", marks=pytest.mark.slow),
                                 pytest.param("lhc-trigger", marks=pytest.mark.slow)])  # fmt: skip
def test_load_test_serves_the_run_in_its_own_process_and_measures_it(runs, app, tmp_path):
    args = [app, "load-test", "--run", str(runs[app]), "--seconds", "0.3", "--clients", "1",
            "--clients", "3", "--out", str(tmp_path)]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "load.json").read_text())
    assert [r["clients"] for r in record["rows"]] == [1, 3] and record["threads"] == 1
    for r in record["rows"]:
        assert r["errors"] == 0 and r["requests"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]
    assert record["machine"].endswith(f"{os.cpu_count()} cores, torch threads 1")


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
def test_the_demo_report_of_a_trained_run(runs, app, report_rebuilds):
    """What the core's demo does after training the demo preset, on the tiny run: the app's
    results in benchmark.json, the core's report.md from it, rebuilt the same from it alone."""
    from fieldrl.app import Resources

    apps, _ = discover_apps()
    headline = apps[app].run_demo_report(apps[app].open_run(runs[app]), resources=Resources())
    report = (runs[app] / "report.md").read_text()
    assert headline and "\n" not in headline and report.startswith("# ")
    for line in report.splitlines():
        if line.startswith("!["):
            assert (runs[app] / line.split("](")[1].rstrip(")")).is_file(), line
    report_rebuilds(app, runs[app])


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
        elif word.startswith(("apps/", "data/")):
            word = str(REPO / word)
        words.append(word)
    return words


@pytest.mark.parametrize(("where", "text"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_example_in_the_docs_and_help_runs(where, text, inputs, tmp_path, monkeypatch):
    """Each example runs through the real CLI: its flags, presets, config keys, run folders
    and data paths are checked by the code that uses them. The long work behind a verb
    (training, benchmarks, demos, sweeps, serving, log generation) is replaced by a stub
    that records the call; the short verbs (report, config, simulate, train-ad) run, and
    options' `play` builds its episodes and agent before the stub plays them."""
    from fieldrl.apps.molecules import pipeline as molecules_pipeline
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
    row = {"clients": 1, "requests_per_s": 1.0, "p50_ms": 1.0, "p99_ms": 1.0, "errors": 0,
           "body_bytes": 1}  # fmt: skip
    monkeypatch.setattr("fieldrl.loadtest.load_test", stub("load-test", [row]))
    monkeypatch.setattr("fieldrl.distributed.serve_with_ray", stub("serve --ray"))
    monkeypatch.setattr(
        "fieldrl.distributed.run_sweep",
        stub("sweep", lambda trial, space, **kw: [{"params": {}, "x": 1.0}]),
    )
    monkeypatch.setattr(warehouse_pipeline, "generate_logs", stub("generate-logs", "logs"))
    monkeypatch.setattr(molecules_pipeline, "train_prior", stub("train-prior", {}))
    monkeypatch.setattr(molecules_pipeline, "export_prior", stub("export-prior", "prior"))
    monkeypatch.setattr(warehouse_pipeline, "adapt_run", stub("adapt"))
    monkeypatch.setattr("fieldrl.apps.options.evaluate.run_episode", stub("play"))
    monkeypatch.setattr("fieldrl.apps.options.evaluate.summary", stub("play", {"pnl": 0.0}))
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
