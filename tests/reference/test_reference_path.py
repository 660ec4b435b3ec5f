"""The reference path: config -> run folder -> checkpoint -> evaluate -> serve -> HTTP."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import ppo_cartpole
from fieldrl.cli import build_app_cli
from fieldrl.mainjob import query_once
from fieldrl.runs import read_metrics
from fieldrl.serving import create_app

REFERENCE = Path(__file__).parent
# 2 envs x 64 steps = 128 env steps per iteration, 8 iterations.
TINY = [
    "algo.total_steps=1024",
    "algo.rollout_steps=64",
    "env.num_envs=2",
    "eval.episodes=2",
    "experiment.loggers=['jsonl']",
]


def sets(*overrides):
    return [arg for o in overrides for arg in ("--set", o)]


def invoke(args, cwd):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(build_app_cli(ppo_cartpole.APP), args, catch_exceptions=False)
    finally:
        os.chdir(old)


def train_run(cwd, *overrides, extra=()):
    """Train the quick preset shrunk by TINY (later overrides win); return the run folder."""
    result = invoke(["train", "--preset", "quick", *sets(*TINY, *overrides), *extra], cwd)
    assert result.exit_code == 0, result.output
    return cwd / result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    return train_run(
        tmp_path_factory.mktemp("ref"),
        "experiment.checkpoint_every=2",
        "experiment.loggers=['jsonl','tensorboard']",
    )


def test_run_folder_layout(trained_run):
    for name in ("config.json", "versions.json", "metrics.jsonl"):
        assert (trained_run / name).is_file(), name
    assert list((trained_run / "tb").glob("events.out.tfevents.*"))
    steps = sorted(p.name for p in (trained_run / "checkpoints").iterdir())
    assert steps == ["step_0000000512", "step_0000000768", "step_0000001024"]  # keep 3
    config = json.loads((trained_run / "config.json").read_text())
    assert config["app"] == "cartpole" and config["algo"]["total_steps"] == 1024
    versions = json.loads((trained_run / "versions.json").read_text())
    assert versions["seed"] == 1 and "torch" in versions["packages"]
    rows = read_metrics(trained_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [128 * i for i in range(1, 9)]


def test_the_demo_report_is_written_by_the_core_from_the_results(trained_run):
    from fieldrl.app import Resources

    app = ppo_cartpole.APP
    headline = app.run_demo_report(app.open_run(trained_run), resources=Resources())
    assert headline.startswith("PPO held-out return")
    report = (trained_run / "report.md").read_text()
    assert report.startswith("# CartPole PPO (reference path)") and "![episode_return]" in report


def test_evaluate_writes_metrics(trained_run):
    result = invoke(
        ["evaluate", "--run", str(trained_run), *sets("eval.episodes=3")], trained_run.parent
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((trained_run / "eval" / "eval.json").read_text())
    assert metrics["checkpoint_step"] == 1024
    assert metrics["ci95_low"] <= metrics["eval_return_mean"] <= metrics["ci95_high"]


def test_service_round_trip_over_http(trained_run):
    spec = ppo_cartpole.service(ppo_cartpole.APP.open_run(trained_run))
    reply = query_once(create_app(spec), {"observations": [[0.0, 0.0, 0.05, 0.0]] * 3})
    assert reply["actions"] == [reply["actions"][0]] * 3 and reply["actions"][0] in (0, 1)
    client = TestClient(create_app(spec))
    info = client.get("/v1/info").json()
    assert info["model_version"] == f"{trained_run.name}@step-1024" and info["obs_dim"] == 4
    bad = client.post("/v1/act", json={"observations": [[0.0, 0.0]]})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "observations.0"


def test_serve_command_with_token(trained_run):
    import httpx

    from fieldrl.mainjob import free_port

    port = free_port()
    env = {**os.environ, "FIELDRL_EXTRA_APPS": "ppo_cartpole:APP", "FIELDRL_API_TOKEN": "t0k"}
    command = [str(Path(sys.executable).parent / "fieldrl"), "cartpole", "serve"]
    server = subprocess.Popen(
        [*command, "--run", str(trained_run), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    try:
        assert _wait_for(up, 60), "server did not start"
        body = {"observations": [[0.0, 0.0, 0.05, 0.0]]}
        assert httpx.post(f"{base}/v1/act", json=body).status_code == 401
        auth = {"Authorization": "Bearer t0k"}
        reply = httpx.post(f"{base}/v1/act", json=body, headers=auth)
        assert reply.status_code == 200 and reply.json()["actions"][0] in (0, 1)
        nan = httpx.post(
            f"{base}/v1/act",
            content='{"observations": [[NaN, 0, 0, 0]]}',
            headers={**auth, "content-type": "application/json"},
        )
        assert nan.status_code == 422
        assert httpx.post(f"{base}/v1/act", json=body, headers=auth).status_code == 200
    finally:
        server.terminate()
        server.wait(10)


def test_learns_to_balance(tmp_path):
    """The quick preset (20k steps) must beat random play (about 20) by far."""
    result = invoke(["train", "--preset", "quick", *sets("experiment.loggers=['jsonl']")], tmp_path)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / result.stdout.strip().splitlines()[-1]
    result = invoke(["evaluate", "--run", str(run_dir)], tmp_path)
    assert result.exit_code == 0, result.output
    score = json.loads((run_dir / "eval" / "eval.json").read_text())["eval_return_mean"]
    assert score >= 200, score


def test_same_seed_same_run(tmp_path):
    """Two runs with one seed log identical learning curves; another seed does not."""

    def curve(seed, folder):
        (tmp_path / folder).mkdir()
        run_dir = train_run(tmp_path / folder, "algo.total_steps=512", f"experiment.seed={seed}")
        rows = read_metrics(run_dir / "metrics.jsonl")
        return [(r["step"], r["policy_loss"], r["value_loss"]) for r in rows]

    first = curve(5, "a")
    assert first == curve(5, "b")
    assert first != curve(6, "c")


def test_bad_config_is_one_line(tmp_path):
    result = invoke(["train", "--preset", "quick", *sets("algo.lrr=1")], tmp_path)
    assert result.exit_code == 2
    assert "unknown key 'algo.lrr'" in result.output
    assert "Traceback" not in result.output


def _wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_sigkill_then_resume_loses_at_most_one_interval(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REFERENCE), "FIELDRL_EXTRA_APPS": "ppo_cartpole:APP"}
    fieldrl = [str(Path(sys.executable).parent / "fieldrl"), "cartpole", "train"]
    overrides = sets(*TINY, "algo.total_steps=16384", "experiment.checkpoint_every=3")
    proc = subprocess.Popen(
        [*fieldrl, "--preset", "quick", *overrides],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    runs = tmp_path / "runs" / "cartpole"

    def checkpoints():
        return sorted(runs.glob("*/checkpoints/step_*"))

    try:
        assert _wait_for(lambda: len(checkpoints()) >= 2, 120), "no checkpoints appeared"
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    run_dir = next(runs.iterdir())
    last = int(checkpoints()[-1].name.split("_")[1])
    logged = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert logged and logged[-1] < 16384  # killed before the end
    lost_iterations = (logged[-1] - last) // 128
    # metrics are logged before the checkpoint is saved, so a kill between the two loses the
    # whole interval: at most one checkpoint interval of work is lost
    assert 0 <= lost_iterations <= 3

    done = subprocess.run(
        [*fieldrl, "--resume", str(run_dir)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    steps = [r["step"] for r in read_metrics(run_dir / "metrics.jsonl")]
    assert steps == [128 * i for i in range(1, 129)]  # no gap, no duplicate after the resume
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1] == "step_0000016384"


@pytest.mark.slow
def test_reference_path_under_ray_with_two_workers(tmp_path):
    pytest.importorskip("ray")
    run_dir = train_run(tmp_path, "eval.episodes=4", extra=["--workers", "2"])
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [256 * i for i in range(1, 5)]  # 2 workers x 2 x 64
    result = invoke(["evaluate", "--run", str(run_dir), "--workers", "2"], tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads((run_dir / "eval" / "eval.json").read_text())["checkpoint_step"] == 1024
    sweep = tmp_path / "sweep"
    args = ["sweep", "--preset", "quick", *sets(*TINY), "--param", "experiment.seed=1,2"]
    result = invoke([*args, "--workers", "2", "--out", str(sweep)], tmp_path)
    assert result.exit_code == 0, result.output
    rows = json.loads((sweep / "sweep.json").read_text())
    assert sorted(r["params"]["experiment.seed"] for r in rows) == [1, 2]
    assert rows[0]["eval_return_mean"] >= rows[1]["eval_return_mean"]
    assert len(list((sweep / "trials" / "cartpole").iterdir())) == 2


@pytest.mark.slow
def test_ray_serve_deployment(trained_run):
    pytest.importorskip("ray")
    import httpx
    import ray
    from ray import serve

    from fieldrl.distributed import serve_with_ray
    from fieldrl.mainjob import free_port

    port = free_port()
    run_dir = trained_run.resolve()
    try:
        serve_with_ray(
            lambda: create_app(ppo_cartpole.service(ppo_cartpole.APP.open_run(run_dir))),
            replicas=2,
            port=port,
            block=False,
        )
        body = {"observations": [[0.0, 0.0, 0.05, 0.0]]}
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/act", json=body, timeout=60)
        assert reply.status_code == 200 and reply.json()["actions"][0] in (0, 1)
        bad = httpx.post(f"http://127.0.0.1:{port}/v1/act", json={"observations": [[1.0]]})
        assert bad.status_code == 422
    finally:
        serve.shutdown()
        ray.shutdown()
