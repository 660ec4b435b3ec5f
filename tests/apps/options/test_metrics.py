"""The metrics on a hand-made record, stress losses of known positions, an episode's risk
(every entry counts), and the oracle being at least as good as every item it chooses from
and every baseline."""

from collections import Counter

import numpy as np
import pytest

from fieldrl.apps.options.baselines import BASELINES, rule
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import oracle, run_episode, summary
from fieldrl.apps.options.metrics import (
    EpisodeRecord,
    bootstrap_ci,
    cvar,
    episode_metrics,
    episode_risk,
    stress_losses,
)
from fieldrl.apps.options.strategies import MenuItem


def test_episode_metrics_on_a_known_path():
    greeks = [{"delta": 10.0, "gamma": 1.0, "vega": 2.0, "theta": -1.0}] * 4
    r = EpisodeRecord(100.0, [100.0, 110.0, 99.0, 121.0], greeks, [0.0, 50.0, 120.0, 0.0],
                      attempts=4, fills=2, rejections=Counter({"unlisted_contract": 1,
                                                               "schema_invalid": 1}),
                      retries_to_valid=[0, 1], costs=3.0, events=[{"kind": "assignment"}],
                      risk=42.0)  # fmt: skip
    m = episode_metrics(r)
    assert m["return"] == pytest.approx(0.21) and m["pnl_per_risk"] == pytest.approx(0.5)
    assert m["max_drawdown"] == pytest.approx(0.1)
    assert m["executable_rate"] == 0.5 and m["schema_valid_rate"] == 0.75
    assert m["retries_to_valid"] == 0.5 and m["assignments"] == 1 and m["limit_breaches"] == 1
    assert m["costs"] == 3.0 and m["sharpe"] > 0 and m["calmar"] > 0
    assert cvar(np.array([-0.1, 0.0, 0.1, 0.2])) == pytest.approx(0.1)
    returns = np.diff(r.nav) / np.array(r.nav[:-1])
    shortfall = np.sqrt(np.mean(np.minimum(returns, 0) ** 2))
    assert m["sortino"] == pytest.approx(returns.mean() / shortfall * np.sqrt(252))
    losing = EpisodeRecord(100.0, [100.0, 101.0, 100.0, 99.0], greeks, [0.0] * 4, 0, 0,
                           Counter(), [], 0.0, [], risk=1.0)  # fmt: skip
    assert episode_metrics(losing)["sortino"] < 0  # one gain, two losses


def test_bootstrap_ci_brackets_the_mean_and_skips_nan():
    mean, low, high = bootstrap_ci(np.array([1.0, 2.0, 3.0, np.nan, 4.0]))
    assert mean == 2.5 and low < mean < high
    assert np.isnan(bootstrap_ci(np.array([np.nan]))[0])


@pytest.fixture(scope="module")
def env():
    cfg = OptionsConfig(suite={"episode_days": 10})
    return OptionsEnv(cfg, make_episodes(cfg, "validation", 2))


def test_stress_losses_of_known_positions(env):
    env.reset(seed=0, options={"episode": 0})
    assert stress_losses(env) == {"gap_down_20": 0.0, "vol_up_20": 0.0, "earnings_2x": 0.0}
    env.open(MenuItem("cash_secured_put", 0.3, 30))
    short_put = stress_losses(env)
    assert short_put["gap_down_20"] > 0 and short_put["vol_up_20"] > 0
    env.close()
    env.open(MenuItem("long_straddle", 0.5, 30))
    straddle = stress_losses(env)
    assert straddle["vol_up_20"] < 0 and straddle["earnings_2x"] < 0  # gains


def test_the_oracle_is_at_least_as_good_as_each_item_and_every_baseline(env):
    items = [MenuItem("long_call", 0.3, 30), MenuItem("long_put", 0.3, 30),
             MenuItem("iron_condor", 0.16, 45)]  # fmt: skip
    for e in range(len(env.episodes)):
        played = {name: run_episode(env, make(), e) for name, make in BASELINES.items()}
        scores = {name: episode_metrics(r)["pnl_per_risk"] for name, r in played.items()}
        best, name = oracle(env, e, items, played)
        chosen = episode_metrics(best)["pnl_per_risk"]
        for item in items:
            scores[item.name] = episode_metrics(run_episode(env, rule(item), e))["pnl_per_risk"]
        assert all(chosen >= score - 1e-12 for score in scores.values()), (chosen, scores)
        assert name in scores
    s = summary([best, run_episode(env, rule(items[0]), 0)])
    assert (
        s["episodes"] == 2 and s["pnl_per_risk_low"] <= s["pnl_per_risk"] <= s["pnl_per_risk_high"]
    )


def test_episode_risk_sums_the_entries_beyond_the_overlays_shares():
    assert episode_risk(0.0, []) == 0.0
    assert episode_risk(0.0, [300.0, 500.0]) == 800.0  # re-opening takes new risk
    assert episode_risk(1000.0, [900.0, 1200.0]) == 1200.0  # a covered call adds none


def test_an_episodes_risk_counts_every_strategy_it_opened():
    cfg = OptionsConfig(suite={"episode_days": 12})
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    r = run_episode(env, rule(MenuItem("long_call", 0.5, 7)), 0)  # re-opened after expiry
    risks = [entry["risk"] for entry in env.entries]
    assert len(risks) >= 2 and r.risk == pytest.approx(sum(risks))
