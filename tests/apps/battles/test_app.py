"""The app end to end on the tiny preset: train, resume, evaluate against opponents, serve,
benchmark."""

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fieldrl.apps.battles import APP
from fieldrl.apps.battles.benchmark import method_jobs
from fieldrl.apps.battles.config import BattlesConfig
from fieldrl.apps.battles.pipeline import (
    RolloutWorker,
    SidedPolicy,
    game_jobs,
    make_env,
    matrix_game,
    new_team,
    opponent_policy,
)
from fieldrl.apps.battles.rollout import merge_steps
from fieldrl.apps.battles.service import example_request
from fieldrl.checkpoint import CheckpointError
from fieldrl.cli import build_root
from fieldrl.config import ConfigError, load_config
from fieldrl.errors import FieldrlError
from fieldrl.runs import saved_config_hash
from fieldrl.serving import create_app

TINY = Path(__file__).parents[3] / "apps" / "battles" / "configs" / "tiny.toml"


def _teams(path):
    """A run's config as trained and its two teams, through App.load."""
    opened = APP.open_run(path)
    return opened.trained_config, opened.trained


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(
        build_root(), ["battles", "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}"]
    )
    assert result.exit_code == 0, result.output
    (run_dir,) = (root / "battles").iterdir()
    return run_dir


def test_a_killed_run_resumes_to_the_same_weights(run, tmp_path):
    """Drop the last checkpoint (as if killed after iteration 2 of 4), resume: same teams."""
    _, finished = _teams(run)
    copy = tmp_path / "copy"
    shutil.copytree(run, copy)
    steps = sorted((copy / "checkpoints").iterdir())
    assert [p.name for p in steps][-2:] == ["step_0000000002", "step_0000000004"]
    shutil.rmtree(steps[-1])
    result = CliRunner().invoke(build_root(), ["battles", "train", "--resume", str(copy)])
    assert result.exit_code == 0, result.output
    _, resumed = _teams(copy)
    for a, b in zip(finished, resumed, strict=True):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)


def test_a_run_from_before_an_option_existed_still_loads_and_an_edit_is_caught(run, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(run, old)
    saved = json.loads((old / "config.json").read_text())
    del saved["train"]["sampling"]  # as written before train.sampling was added
    (old / "config.json").write_text(json.dumps(saved))
    for meta_path in (old / "checkpoints").glob("*/meta.json"):
        meta = json.loads(meta_path.read_text())
        meta["metadata"]["config_hash"] = saved_config_hash(old)
        meta_path.write_text(json.dumps(meta))
    cfg, _ = _teams(old)
    assert cfg.train.sampling == "agent"
    saved["train"]["hidden"] *= 2
    (old / "config.json").write_text(json.dumps(saved))
    with pytest.raises(CheckpointError, match="does not match the checkpoint"):
        _teams(old)


def test_evaluate_against_named_opponents_and_a_run(run, tmp_path):
    cli = build_root()
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        cli,
        [
            "battles",
            "evaluate",
            "--run",
            str(run),
            "--opponent",
            "rush",
            "--opponent",
            str(run),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "eval.json").read_text())["rows"]
    assert [r["opponent"] for r in rows] == ["rush", f"mf_mappo:{run.name}"]
    for r in rows:
        assert r["episodes"] == 2 * 4  # both sides x eval.episodes x one seed
        assert 0 <= r["ci95_low"] <= r["win_rate"] <= r["ci95_high"] <= 1
        for outcome, prefix in (("draw", "draw_"), ("loss", "loss_")):
            assert r[f"{prefix}ci95_low"] <= r[f"{outcome}_rate"] <= r[f"{prefix}ci95_high"]
        # equal battles per side, so the pooled rate is the mean of the two sides'
        assert r["win_rate"] == pytest.approx((r["win_rate_as_blue"] + r["win_rate_as_red"]) / 2)
    bad = CliRunner().invoke(
        cli, ["battles", "evaluate", "--run", str(run), "--opponent", "nobody"]
    )
    assert bad.exit_code != 0 and "nobody" in bad.output and "Traceback" not in bad.output


def test_evaluate_refuses_a_scenario_the_run_was_not_trained_on(run, tmp_path):
    cli = build_root()
    bad = CliRunner().invoke(cli, ["battles", "evaluate", "--run", str(run),
                                   "--set", "scenario.width=8"])  # fmt: skip
    assert bad.exit_code != 0 and "Traceback" not in bad.output
    assert "trained on a 6x6 battlefield" in bad.output and "6x8" in bad.output
    arena = load_config(BattlesConfig, TINY, ["scenario.max_health=5"])
    with pytest.raises(FieldrlError, match=f"opponent {run}.*max_health 5"):
        opponent_policy(str(run), arena)
    at_60 = ["battles", "evaluate", "--run", str(run), "--out", str(tmp_path),
             "--set", "eval.agents_per_team=60"]  # fmt: skip
    bigger = CliRunner().invoke(cli, at_60)
    assert bigger.exit_code == 0, bigger.output  # another N is the same scenario


@pytest.mark.parametrize("change, named", [
    ("eval.seeds=[]", "eval.seeds"),
    ("eval.opponents=[]", "eval.opponents"),
    ("benchmark.train_seeds=[]", "benchmark.train_seeds"),
    ("benchmark.po_noise=[]", "benchmark.po_noise"),
    ("scenario.game=chess", "one of rps, weighted_rps"),
    ("benchmark.games=[\"rps\",\"go\"]", "unknown game 'go'"),
    ("benchmark.games=[\"custom\"]", "set scenario.payoff"),
    ("scenario.payoff=[[0,1],[1,0]]", "need game = 'custom'"),
    ("scenario.game=custom", "needs payoff"),
])  # fmt: skip
def test_bad_settings_are_named(change, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(BattlesConfig, TINY, [change])


@pytest.mark.parametrize("payoff, caps, named", [
    ("[[0,1],[1]]", [], "square matrix"),
    ("[[0,1],[1,nan]]", [], "NaN"),
    ("[[0,1],[1,0]]", ["scenario.blue_cap=[0.2,0.2]"], "blue_cap must be 2 shares"),
])  # fmt: skip
def test_bad_custom_games_are_named(payoff, caps, named):
    custom = ["scenario.kind=game", "scenario.game=custom", f"scenario.payoff={payoff}", *caps]
    with pytest.raises(ConfigError, match=re.escape(named)):
        load_config(BattlesConfig, TINY, custom)


def test_a_benchmark_that_cannot_play_its_battles_stops_before_training(tmp_path):
    out = tmp_path / "bench"
    for change in ("scenario.kind=game", 'benchmark.methods=["mappo"]'):
        result = CliRunner().invoke(build_root(), ["battles", "benchmark", "-c", str(TINY),
                                                   "--set", change, "--out", str(out)])  # fmt: skip
        assert result.exit_code != 0 and "Traceback" not in result.output
        assert "benchmark.po_lambdas=[]" in result.output and not out.exists()


def test_service_acts_for_10k_agents_and_rejects_bad_states(run):
    client = TestClient(create_app(APP.service(APP.open_run(run))))
    body = example_request(APP.open_run(run), agents=10_000)
    reply = client.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text[:300]
    out = reply.json()
    assert len(out["actions"]) == 10_000 and set(out["actions"]) <= set(range(5))
    assert out["local_states"] < 10_000  # evaluated per occupied local state
    again = client.post("/v1/act", json=body).json()
    assert again["actions"] == out["actions"]  # same seed, same sample
    greedy = client.post("/v1/act", json=dict(body, greedy=True)).json()["actions"]
    other_seed = client.post("/v1/act", json=dict(body, greedy=True, seed=1)).json()["actions"]
    assert greedy == other_seed  # greedy ignores the sampling seed
    sampled = client.post("/v1/act", json=dict(body, seed=1)).json()["actions"]
    assert sampled != out["actions"]  # sampling follows it
    agents = body["agents"]

    def rejected(change: dict, where: str) -> None:
        raw = json.dumps(dict(body, **change))  # allows NaN, as a careless client would
        r = client.post("/v1/act", content=raw, headers={"content-type": "application/json"})
        assert r.status_code == 422 and where in r.text, (where, r.text[:300])

    rejected({"agents": dict(agents, row=agents["row"][:-1])}, "lengths differ")
    rejected({"agents": dict(agents, col=[99] + agents["col"][1:])}, "agents.col.0")
    rejected({"agents": dict(agents, health=[0] + agents["health"][1:])}, "agents.health.0")
    rejected({"agents": {k: v for k, v in agents.items() if k != "health"}}, "agents.health")
    rejected({"opponent_map": body["opponent_map"][:-1]}, "opponent_map")
    rejected({"opponent_map": [1.0] * len(body["opponent_map"])}, "sum to")
    rejected({"team_size": 10}, "team_size")
    rejected({"own_map": [0.0] * len(body["opponent_map"])}, "own_map.")
    rejected({"time_left": float("nan")}, "time_left")
    rejected({"team": "green"}, "team")
    # integers past int64 were a 500; maps had no length limit (14 MiB cost +441 MiB)
    rejected({"agents": dict(agents, row=[10**30] + agents["row"][1:])}, "agents.row.0")
    rejected({"seed": 10**30}, "seed")
    rejected({"opponent_map": [0.0] * 70_000}, "opponent_map")
    rejected({"opponent_map": [2.0] + body["opponent_map"][1:]}, "opponent_map.0")
    small = TestClient(create_app(APP.service(APP.open_run(run)), max_body_bytes=10_000))
    assert small.post("/v1/act", json=body).status_code == 413


def test_a_custom_game_from_the_config_trains_evaluates_and_serves(tmp_path):
    """Matching pennies defined in the config: two strategies, equilibrium (1/2, 1/2)."""
    cli = build_root()
    game = ["scenario.kind=game", "scenario.game=custom", "scenario.payoff=[[1,-1],[-1,1]]"]
    args = ["battles", "train", "-p", "tiny", *[a for c in game for a in ("--set", c)],
            "--set", f"experiment.runs_dir={tmp_path}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "battles").iterdir()
    run_cfg, _ = _teams(run_dir)
    mu, nu, value = matrix_game(run_cfg.scenario).equilibrium()
    np.testing.assert_allclose([mu, nu], [[0.5, 0.5], [0.5, 0.5]], atol=1e-9)
    assert value == pytest.approx(0.0, abs=1e-9)
    out = tmp_path / "eval"
    evaluated = CliRunner().invoke(
        cli, ["battles", "evaluate", "--run", str(run_dir), "--out", str(out)]
    )
    assert evaluated.exit_code == 0, evaluated.output
    written = json.loads((out / "eval.json").read_text())
    rows, metrics = written["rows"], written["metrics"]
    assert [(r["game"], r["n_agents"], r["seed"]) for r in rows] == [("custom", 40, 1000)]
    # matching pennies' gap is 2 |mu_0 - 1/2| + 2 |nu_0 - 1/2|: four times the mean TV
    assert metrics["exploitability"] == pytest.approx(4 * metrics["tv_distance"])
    assert metrics["noise_floor"] == matrix_game(run_cfg.scenario).noise_floor(40, seed=1000)
    client = TestClient(create_app(APP.service(APP.open_run(run_dir))))
    body = example_request(APP.open_run(run_dir))
    reply = client.post("/v1/act", json=body)
    assert reply.status_code == 200 and set(reply.json()["actions"]) <= {0, 1}
    bad = dict(body, agents={"strategy": [2] * 20})
    assert "agents.strategy.0" in client.post("/v1/act", json=bad).text


def test_benchmark_writes_every_section_and_key(tmp_path, report_rebuilds):
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        build_root(), ["battles", "benchmark", "-c", str(TINY), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    bench = json.loads((out / "benchmark.json").read_text())
    sections = {r["section"] for r in bench["rows"]}
    assert sections == {"scaling", "game", "crossplay", "partial_observability"}
    keys = {
        "scaling": (
            "n_agents",
            "env_agent_steps_per_s",
            "env_policy_agent_steps_per_s",
            "peak_mem_mb",
            "magent2_agent_steps_per_s",
        ),
        "game": ("game", "n_agents", "exploitability", "noise_floor", "tv_distance"),
        "crossplay": ("method", "opponent", "win_rate", "draw_rate", "ci95_low", "ci95_high"),
    }
    for row in bench["rows"]:
        for key in keys.get(row["section"], ()):
            assert key in row, (row["section"], key)
    scaling = next(r for r in bench["rows"] if r["section"] == "scaling")
    assert scaling["env_agent_steps_per_s"] > 0 and scaling["peak_mem_mb"] > 0
    matchups = {(r["method"], r["opponent"]) for r in bench["rows"] if r["section"] == "crossplay"}
    assert {("mf_mappo", "random"), ("mf_mappo", "rush"), ("mf_mappo", "focus"),
            ("mf_mappo", "mappo")} <= matchups  # fmt: skip
    assert bench["cost"]["seconds"] > 0 and bench["data"]["exploitability_curves"]
    report = (out / "report.md").read_text()
    assert "MF-MAPPO vs focus | wins >= 70%" in report and (out / "crossplay.png").is_file()
    for method, opponent in matchups:  # every cross-play row is in the report's table
        assert f"| {method} | {opponent} | 40 |" in report, (method, opponent)
    assert np.isfinite([r["win_rate"] for r in bench["rows"] if "win_rate" in r]).all()
    report_rebuilds("battles", out)


SHARED = ["train.shared_sides=true"]
VARIANTS = {"shared": SHARED, "grouped": ["train.sampling=state"],
            "coordinated": [*SHARED, "train.steering=true",
                            "train.past_opponents=0.5", "train.snapshot_every=2"]}  # fmt: skip


@pytest.mark.parametrize("method", ["mappo", "ippo", "mfq", *VARIANTS])
def test_every_baseline_trains_resumes_and_plays(method, tmp_path):
    """Each baseline, and MF-MAPPO with one network for both sides (``shared``), with one
    action draw per local state (``grouped``), or with team steering (and so map
    directions) and past opponents (``coordinated``)."""
    cli = build_root()
    chosen = VARIANTS.get(method, [f"train.method={method}"])
    args = ["battles", "train", "-p", "tiny", *[a for c in chosen for a in ("--set", c)],
            "--set", f"experiment.runs_dir={tmp_path}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "battles").iterdir()
    run_cfg, finished = _teams(run_dir)
    shutil.rmtree(sorted((run_dir / "checkpoints").iterdir())[-1])
    resumed = CliRunner().invoke(cli, ["battles", "train", "--resume", str(run_dir)])
    assert resumed.exit_code == 0, resumed.output
    _, again = _teams(run_dir)
    for a, b in zip(finished, again, strict=True):
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
            torch.testing.assert_close(x, y, rtol=0, atol=0)
    out = tmp_path / "eval"
    evaluated = CliRunner().invoke(cli, ["battles", "evaluate", "--run", str(run_dir),
                                         "--opponent", "random", "--out", str(out)])  # fmt: skip
    assert evaluated.exit_code == 0, evaluated.output
    (row,) = json.loads((out / "eval.json").read_text())["rows"]
    assert row["method"] == ("mf_mappo" if method in VARIANTS else method)
    if method == "grouped":  # it plays as it was trained: each local state moves as one
        env = make_env(run_cfg, 4, 200)
        state = env.reset()
        moves = SidedPolicy(run_cfg, finished)(env, state, 0, np.random.default_rng(0))
        local = env.local_state(state)[:, 0]
        pairs = np.unique(np.stack([local.ravel() + env.n_local * np.arange(4).repeat(200),
                                    moves.ravel()]), axis=1)  # fmt: skip
        assert np.unique(pairs[0]).size == pairs.shape[1]
    assert row["episodes"] == 8
    if method in ("shared", "coordinated"):  # red is served through the mirror
        client = TestClient(create_app(APP.service(APP.open_run(run_dir))))
        for greedy in (False, True):
            request = dict(example_request(APP.open_run(run_dir)), team="red", greedy=greedy)
            reply = client.post("/v1/act", json=request)
            assert reply.status_code == 200, reply.text[:300]


def test_game_jobs_scale_the_magnet_pull_with_the_population():
    """The recipe's magnet (set at 1,000 per team) is scaled by sqrt(1,000 / N)."""
    cfg = load_config(BattlesConfig, TINY)
    cfg.benchmark.games, cfg.benchmark.game_agents = ["rps"], [1_000, 10_000]
    cfg.benchmark.train_seeds = [0]
    magnets = {job.scenario.agents_per_team: job.train.magnet for job, _ in game_jobs(cfg, "x")}
    assert magnets[1_000] == pytest.approx(0.1)
    assert magnets[10_000] == pytest.approx(0.1 / 10**0.5)


def test_each_method_trains_with_its_own_benchmark_settings():
    own = ["benchmark.method_train.ippo.entropy=0.05", "benchmark.method_train.mfq.temperature=0.1"]
    cfg = load_config(BattlesConfig, TINY, own)
    cfg.benchmark.train_seeds = [0]
    jobs = {job.train.method: job.train for job, _ in method_jobs(cfg, "x")}
    assert jobs["ippo"].entropy == 0.05 and jobs["mfq"].temperature == 0.1
    assert jobs["mf_mappo"].entropy == cfg.train.entropy == jobs["mappo"].entropy != 0.05
    with pytest.raises(ConfigError, match="ippo.entropi"):
        load_config(BattlesConfig, TINY, ["benchmark.method_train.ippo.entropi=0.05"])


def test_rollouts_from_two_workers_merge_into_one_batch():
    """What ``--workers 2`` does each iteration, without Ray: each worker plays its own
    copies with the same weights; the merged steps index every part's copies and rows."""
    cfg = load_config(BattlesConfig, TINY)
    workers = [RolloutWorker(cfg, 2, seed) for seed in (1, 2)]
    teams = [new_team(cfg, workers[0].env) for _ in range(2)]
    parts = [w.collect([t.state_dict() for t in teams]) for w in workers]
    merged = merge_steps([steps[0] for steps, _ in parts])
    assert len(merged) == cfg.scenario.horizon
    for t, step in enumerate(merged):
        first, second = (steps[0][t] for steps, _ in parts)
        assert step.maps.shape[0] == 4 and step.critic_input.shape[0] == 4
        torch.testing.assert_close(step.counts, torch.cat([first.counts, second.counts]))
        np.testing.assert_array_equal(
            step.states.copy, np.concatenate([first.states.copy, second.states.copy + 2])
        )
        np.testing.assert_array_equal(  # every agent keeps its local state row
            step.states.local[step.states.inverse],
            np.concatenate([s.states.local[s.states.inverse] for s in (first, second)]),
        )
    assert merged[0].counts.sum() == 4 * cfg.scenario.agents_per_team


@pytest.mark.slow
def test_training_with_two_ray_workers(tmp_path):
    pytest.importorskip("ray")
    args = ["battles", "train", "-p", "tiny", "--workers", "2",
            "--set", f"experiment.runs_dir={tmp_path}"]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "battles").iterdir()
    run_cfg, teams = _teams(run_dir)
    assert len(teams) == 2 and run_cfg.train.iterations == 4
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir())[-1] == "step_0000000004"
