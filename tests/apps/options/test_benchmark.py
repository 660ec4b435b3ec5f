"""The benchmark on the tiny preset: every method on the same held-out episodes, the
targets, the look-ahead test's table, an LLM agent graded beside them when an endpoint is
set (the stand-in server here), the report rebuilt from benchmark.json alone, and the
episodes setting saying how many held-out replay windows there are."""

import json

import pytest

from fieldrl.app import Resources
from fieldrl.apps.options import APP
from fieldrl.apps.options.baselines import SUITE_BASELINES
from fieldrl.apps.options.benchmark import FIXED_LEARNER, PEEKING, benchmark
from fieldrl.apps.options.llm import ScriptedServer
from fieldrl.apps.options.report import sections
from fieldrl.report import write_benchmark_report


def test_the_tiny_benchmark_grades_every_method_and_rebuilds_its_report(tmp_path):
    with ScriptedServer([]) as url:  # an LLM that always holds
        cfg = APP.load_config("tiny", overrides=[f"benchmark.llm_url={url}"])
        path = APP.run_benchmark(cfg, out=tmp_path, quick=True, resources=Resources())
    data = json.loads(path.read_text())
    methods = [r["method"] for r in data["rows"]]
    expected = ["maskable_ppo", FIXED_LEARNER, *SUITE_BASELINES["strategy"], "random_valid",
                "llm", "oracle"]  # fmt: skip
    assert methods == expected
    llm = data["rows"][methods.index("llm")]
    # it held: no trade, no cost, and only the interest on its cash (4.5% a year)
    assert llm["costs"] == 0.0 and 0 < llm["return"] < 0.045 * 60 / 365
    oracle = data["rows"][-1]
    assert oracle["regret"] == 0.0 and all("regret" in r for r in data["rows"])
    assert all(r["regret_low"] >= 0 for r in data["rows"])  # an upper bound on every method
    assert all(r["episodes"] == 2 for r in data["rows"])
    names = [t["name"] for t in data["targets"]]
    assert any(n.startswith("look-ahead") for n in names) and len(names) == 9
    assert any("64-path" in n for n in names)
    assert set(data["data"]["lookahead"]) >= {"maskable_ppo", "random_valid", PEEKING}
    speed = data["data"]["speed"]
    assert speed["chain_options"] > 2000
    ratio = speed["orders_per_s"] / speed["orders_per_s_one_at_a_time"]
    assert speed["orders_speedup"] == ratio and speed["orders_per_s"] > 0
    first = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    write_benchmark_report(tmp_path, sections)
    assert (tmp_path / "report.md").read_text() == first
    pooled = first[first.index("| method | pnl_per_risk | per seed") :]
    assert pooled.splitlines()[2].startswith("| maskable_ppo |")  # in the order they played
    del data["data"]["pooled"]  # a file from before the seeds were pooled: pooled from its jobs
    path.write_text(json.dumps(data))
    assert write_benchmark_report(tmp_path, sections).read_text() == first


def test_a_killed_benchmark_reruns_only_its_missing_jobs_and_pools_its_seeds(tmp_path, monkeypatch):
    import fieldrl.apps.options.benchmark as module

    cfg = APP.load_config("tiny", overrides=["benchmark.lookahead_episodes=2",
                                             "benchmark.seeds=[0,1]"])  # fmt: skip
    benchmark(cfg, out=tmp_path, quick=True, resources=Resources())
    saved = sorted(p.stem for p in (tmp_path / "runs").glob("*.json"))
    assert saved == ["lookahead|synthetic|0", "strategy|synthetic|0", "strategy|synthetic|1"]
    data = json.loads((tmp_path / "benchmark.json").read_text())
    assert [(p["suite"], p["seeds"]) for p in data["data"]["pooled"]] == [("strategy", [0, 1])]
    assert sorted({r["seed"] for r in data["rows"]}) == [0, 1]
    report = write_benchmark_report(tmp_path, sections).read_text()
    assert report.count("## strategy / synthetic") == 1 and "training seeds 0, 1" in report
    (tmp_path / "runs" / "lookahead|synthetic|0.json").unlink()
    ran = []
    real = module._dispatch
    monkeypatch.setattr(module, "_dispatch", lambda job: ran.append(job[0]) or real(job))
    benchmark(cfg, out=tmp_path, quick=True, resources=Resources())
    assert ran == ["lookahead"]


def test_a_replay_split_holds_only_the_non_overlapping_windows_that_fit():
    from fieldrl.apps.options.config import OptionsConfig
    from fieldrl.apps.options.episodes import make_episodes

    cfg = OptionsConfig(market={"kind": "replay", "symbols": ["IBM"]})
    assert len(make_episodes(cfg, "eval", cfg.benchmark.episodes)) == 2  # 40 days each


def test_a_randomised_benchmark_plays_the_fixed_path_learner_beside_todays():
    from fieldrl.apps.options.benchmark import FIXED_LEARNER, run_job, suite_config
    from fieldrl.apps.options.config import RandomizeConfig
    from fieldrl.config import derive

    cfg = suite_config(APP.load_config("tiny"), "strategy", "synthetic")
    assert cfg.market.randomize != RandomizeConfig()  # the presets randomise
    result = run_job(("strategy", "synthetic", 0, cfg.model_dump(mode="json")))
    assert list(result["summaries"])[:2] == ["maskable_ppo", FIXED_LEARNER]
    assert len(result["per_episode"][FIXED_LEARNER]) == len(result["episodes"])
    plain = derive(cfg, market={"randomize": RandomizeConfig().model_dump()})
    unrandomised = run_job(("strategy", "synthetic", 0, plain.model_dump(mode="json")))
    assert FIXED_LEARNER not in unrandomised["summaries"]


def test_the_replay_suites_chosen_on_validation_train_on_synthetic_paths():
    from fieldrl.apps.options.benchmark import suite_config

    cfg = APP.load_config("default")
    assert suite_config(cfg, "earnings", "replay").ppo.train_on == "synthetic"
    assert suite_config(cfg, "overlay", "replay").ppo.train_on == "market"
    assert suite_config(cfg, "earnings", "synthetic").ppo.train_on == "market"


def test_the_targets_read_the_learner_on_its_seeds_pooled_episode_by_episode():
    from fieldrl.apps.options.benchmark import pool_seeds

    def job(seed, ppo, episodes=("a", "b", "c", "d")):
        per = {"maskable_ppo": ppo, "buy_and_hold": [0.1, 0.0, 0.2, 0.1],
               "covered_call_30d": [0.0, 0.0, 0.0, 0.0], "random_valid": [-0.1, 0.0, 0.1, 0.0],
               "oracle": [1.0, 1.0, 1.0, 1.0]}  # fmt: skip
        random = {"pnl": -10.0, "pnl_low": -20.0, "pnl_high": 5.0, "costs": 8.0, "sharpe": 0.1}
        return {"suite": "overlay", "market": "replay", "seed": seed, "episodes": list(episodes),
                "per_episode": per,
                "summaries": {"random_valid": random, "buy_and_hold": {"costs": 3.0}}}  # fmt: skip

    (pool,) = pool_seeds([job(0, [0.3, 0.2, 0.5, 0.4]), job(1, [0.5, 0.4, 0.3, 0.2])])
    assert pool["seeds"] == [0, 1] and pool["episodes"] == 4
    assert pool["best_rule"] == "buy_and_hold"
    ppo = pool["methods"]["maskable_ppo"]
    assert ppo["per_seed"] == [0.35, 0.35]
    assert abs(ppo["pnl_per_risk"] - 0.35) < 1e-12 and abs(ppo["regret"] - 0.65) < 1e-12
    mean, low, high = ppo["vs_random_valid"]  # seed means 0.4, 0.3, 0.4, 0.3 minus random's
    assert abs(mean - 0.35) < 1e-12 and 0.3 <= low <= mean <= high <= 0.5
    assert pool["random_valid"] == {"pnl": -10.0, "pnl_low": -20.0, "pnl_high": 5.0,
                                    "costs": 8.0, "against": "nothing"}  # fmt: skip
    # with each episode's dollars kept, the overlay's random valid reads against
    # buy-and-hold, costs too: both hold the shares
    kept = job(0, [0.0] * 4)
    kept["per_episode_pnl"] = {"random_valid": [100.0, -50.0, 0.0, -50.0],
                               "buy_and_hold": [200.0, 0.0, 50.0, 0.0]}  # fmt: skip
    random = pool_seeds([kept])[0]["random_valid"]
    assert random["against"] == "buy_and_hold" and random["pnl"] == -62.5
    assert random["costs"] == 5.0
    assert -100.0 <= random["pnl_low"] <= -62.5 <= random["pnl_high"] <= -50.0
    with pytest.raises(ValueError, match="overlay/replay: the seeds played different"):
        pool_seeds([job(0, [0.0] * 4), job(1, [0.0] * 4, episodes=("a", "b", "c", "e"))])
    other = job(1, [0.0] * 4)
    del other["per_episode"]["covered_call_30d"]
    with pytest.raises(ValueError, match="overlay/replay: the seeds played different methods"):
        pool_seeds([job(0, [0.0] * 4), other])
