"""The environment: masked actions are always executable, retries are counted and capped,
overlays keep their shares, the splits and held-out windows never overlap, a seed fixes
an episode, one-day daily episodes are refused, and a strategy's stated risk bounds what it
loses."""

from itertools import pairwise

import numpy as np
import pytest

from fieldrl.apps.options.baselines import rule
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import FEATURES, OptionsEnv
from fieldrl.apps.options.episodes import REPLAY_SPLITS, make_episodes
from fieldrl.apps.options.orders import Reject, Rejection, parse_order
from fieldrl.apps.options.strategies import MenuItem
from fieldrl.errors import FieldrlError


def config(**suite):
    return OptionsConfig(suite={"episode_days": 12, **suite})


def play(env, seed, rng):
    obs, _ = env.reset(seed=seed)
    navs, done = [], False
    while not done:
        action = rng.choice(np.flatnonzero(env.action_masks()))
        obs, reward, done, _, info = env.step(action)
        assert obs.shape == (len(FEATURES),) and np.isfinite(obs).all() and np.isfinite(reward)
        navs.append(info["nav"])
    return navs


@pytest.mark.parametrize("kind", ["synthetic", "replay"])
def test_a_masked_random_agent_sends_only_executable_orders(kind):
    cfg = config()
    cfg.market.kind = kind
    if kind == "replay":
        cfg.market.symbols = ["AAPL"]
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 3))
    rng = np.random.default_rng(0)
    for seed in range(6):
        play(env, seed, rng)
    assert env.attempts > 0 and not env.rejections


def test_retries_are_counted_and_capped():
    cfg = config(max_retries=2)
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    bad = parse_order({"underlying": "SYN", "legs": [{"side": "buy", "right": "call",
                                                      "strike": 1.0, "expiry": "2030-01-01",
                                                      "quantity": 1}]})  # fmt: skip
    for _ in range(3):
        with pytest.raises(Rejection) as info:
            env.submit(bad)
        assert info.value.code == Reject.UNLISTED
    with pytest.raises(Rejection) as info:
        env.submit(bad)
    assert info.value.code == Reject.RETRIES_EXHAUSTED
    assert env.rejections == {"unlisted_contract": 3, "retries_exhausted": 1}
    env.advance()  # a new step: tries again
    chain = env.view().chain("SYN")
    row = int(np.argmin(np.abs(chain.strike - chain.spot)))
    leg = {
        "side": "buy",
        "right": "call" if chain.call[row] else "put",
        "strike": float(chain.strike[row]),
        "expiry": str(chain.expiry[row]),
        "quantity": 1,
    }
    good = parse_order({"underlying": "SYN", "legs": [leg]})
    with pytest.raises(Rejection):
        env.submit(bad)
    assert env.submit(good) is not None and env.retries_to_valid == [1]


def test_an_overlay_keeps_its_shares_when_it_closes_its_options():
    cfg = config(name="overlay", shares=300, capital=60_000.0, templates=["covered_call"],
                 deltas=[0.3], dtes=[30])  # fmt: skip
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    stock = ("stock", None, None, None)
    assert env.account.positions["SYN"] == {stock: 300.0}
    assert env.action_masks().tolist() == [True, False, True]
    env.step(2)
    calls = [q for k, q in env.account.positions["SYN"].items() if k[0] == "option"]
    assert calls == [-3.0]
    env.step(1)
    assert env.account.positions["SYN"] == {stock: 300.0}


def test_the_splits_never_overlap():
    cfg = config()
    cfg.market.kind = "replay"
    cfg.market.symbols = ["IBM"]
    for split, (start, end) in REPLAY_SPLITS.items():
        for episode in make_episodes(cfg, split, 5):
            days = [t.date().isoformat() for t in episode.market.times]
            assert start <= days[0] and days[-1] <= end, (split, episode.key)
    synthetic = config()
    keys = {s: {e.key for e in make_episodes(synthetic, s, 5)} for s in REPLAY_SPLITS}
    assert not keys["train"] & keys["eval"] and not keys["validation"] & keys["eval"]


def test_a_seed_fixes_the_episode_and_the_trajectory():
    cfg = config()
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 3))
    first = play(env, 4, np.random.default_rng(1))
    again = play(env, 4, np.random.default_rng(1))
    assert first == again


def test_close_is_offered_only_after_the_minimum_hold():
    cfg = config(min_hold=3, templates=["long_call"], deltas=[0.5], dtes=[30])
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    env.step(2)  # open the call
    offered = []
    for _ in range(4):
        offered.append(bool(env.action_masks()[1]))
        env.step(0)
    assert offered == [False, False, True, True]


def test_rewards_count_the_costs_of_each_trade():
    cfg = config(templates=["long_call"], deltas=[0.5], dtes=[30])
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    start = env.log.nav[-1]
    total = env.step(2)[1] + env.step(1)[1]  # open, then close at once
    assert total == pytest.approx(100 * (env.log.nav[-1] - start) / cfg.suite.capital)
    assert env.account.costs + env.account.slippage > 0


def test_a_covered_calls_risk_is_its_shares():
    cfg = config(name="overlay", shares=200, templates=["covered_call"], deltas=[0.3], dtes=[30])
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    risk = env.plan(MenuItem("covered_call", 0.3, 30)).risk
    spot = env.market.chains[0]["SYN"].spot
    assert 0.15 * 200 * spot < risk < 0.25 * 200 * spot  # the 20% gap, less the call's gain
    assert env.base_risk == pytest.approx(0.2 * 200 * spot)


@pytest.mark.parametrize("suite", ["strategy", "overlay"])
def test_planning_the_whole_menu_at_once_plans_each_item_as_alone(suite):
    from fieldrl.apps.options.config import SUITES
    from fieldrl.apps.options.strategies import build_order

    cfg = config(**{**SUITES[suite], "episode_days": 12})
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    env.step(0)
    planned = [env.plan(item) for item in env.menu]  # one batch for the step
    assert sum(p.order is not None for p in planned) >= len(env.menu) // 2
    for item, plan in zip(env.menu, planned, strict=True):
        order = build_order(item, env.market.chains[1]["SYN"], 1)
        if order is None:
            assert plan.order is None
            continue
        alone = env.assess(order)
        assert (plan.order is None) == (alone.order is None), item
        for key in ("risk", "cash", "naked", "naked_calls"):
            assert getattr(plan, key) == pytest.approx(getattr(alone, key), rel=1e-8), (item, key)


def test_an_agent_ignoring_the_mask_is_refused_and_counted():
    cfg = config(templates=["long_call", "long_put"], deltas=[0.5], dtes=[30])
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    env.step(2)  # opens the call
    assert not env.action_masks()[3]
    attempts = env.attempts
    env.step(3)  # the put, while the call is open
    assert env.attempts == attempts + 1 and env.rejections == {"strategy_already_open": 1}


def test_held_out_replay_windows_never_overlap():
    cfg = config()
    cfg.market.kind = "replay"
    cfg.market.symbols = ["IBM"]
    for split in ("validation", "eval"):
        episodes = make_episodes(cfg, split, 100)
        spans = sorted((e.market.times[0], e.market.times[-1]) for e in episodes)
        assert len(spans) >= 2
        assert all(end < start for (_, end), (start, _) in pairwise(spans)), split


@pytest.mark.parametrize(
    "suite, kind",
    [({"episode_days": 1}, "replay"), ({"episode_days": 1}, "synthetic"),
     ({"name": "zero_dte", "episode_days": 1, "intraday_minutes": 30}, "replay")],
)  # fmt: skip
def test_a_one_day_daily_episode_is_a_clear_config_error(suite, kind):
    cfg = OptionsConfig(suite=suite, market={"kind": kind, "symbols": ["IBM"]})
    with pytest.raises(FieldrlError, match=r"suite.episode_days = 1: .* at least 2 days"):
        make_episodes(cfg, "eval", 2)


def test_a_long_options_stated_risk_is_at_least_its_premium():
    cfg = config(templates=["long_straddle"], deltas=[0.5], dtes=[7])
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    fill = env.open(MenuItem("long_straddle", 0.5, 7))
    assert fill is not None and env.entries[-1]["risk"] >= -fill.cash > 0
    assert env.entries[-1]["risk"] <= cfg.suite.risk_budget * cfg.suite.capital


def entry_losses(env: OptionsEnv, policy, episode: int) -> list[float]:
    """Dollars each strategy lost, from the NAV before it opened to the NAV once flat."""
    env.reset(seed=episode, options={"episode": episode})
    losses, start, done = [], None, False
    while not done:
        if env.open_item is None and start is not None:
            losses.append(start - env.log.nav[-1])
            start = None
        action = policy(env.agent_view())
        if isinstance(action, tuple):
            start = env.log.nav[-1]
            env.open(action[1])
            done = env.advance()[2]
        else:
            done = env.step(action)[2]
    return losses + ([start - env.log.nav[-1]] if start is not None else [])


def test_no_defined_risk_entry_loses_more_than_the_budget_on_a_volatile_market():
    cfg = OptionsConfig(market={"synthetic": {"v0": 0.5, "theta": 0.5, "jump_intensity": 5.0}},
                        suite={"episode_days": 12})  # fmt: skip
    env = OptionsEnv(cfg, make_episodes(cfg, "eval", 4))
    budget = cfg.suite.risk_budget * cfg.suite.capital
    items = [MenuItem("long_straddle", 0.5, 7), MenuItem("long_strangle", 0.16, 7),
             MenuItem("long_call", 0.16, 7), MenuItem("iron_condor", 0.16, 7),
             MenuItem("bull_put_spread", 0.3, 7)]  # fmt: skip
    losses = [loss for item in items for e in range(4)
              for loss in entry_losses(env, rule(item), e)]  # fmt: skip
    assert len(losses) >= 20 and max(losses) <= budget
    assert max(losses) > 0.5 * budget  # the budget is used, not hoarded


def test_training_paths_are_made_when_played_each_in_its_own_drawn_market():
    from fieldrl.apps.options.episodes import SyntheticPaths

    ranges = {"vol_scale": [0.5, 1.5], "variance_premium": [0.0, 0.3], "skew": [-0.8, -0.3]}
    cfg = OptionsConfig(suite={"episode_days": 8}, market={"randomize": ranges})
    fixed = OptionsConfig(suite={"episode_days": 8})
    train = make_episodes(cfg, "train", 5000, 0)
    assert len(train) == 5000 and train[4321] is train[4321]
    remade = make_episodes(cfg, "train", 5000, 0)[4321]  # a resumed run replays the same path
    assert [c["SYN"].spot for c in remade.market.chains] == [
        c["SYN"].spot for c in train[4321].market.chains
    ]

    def premiums(episodes):  # the variance premium each path's market was drawn with
        return {round(1 / episodes[i].fair_vol_scale ** 2 - 1, 9) for i in range(8)}

    assert len(premiums(train)) == 8 and all(0 <= p <= 0.3 for p in premiums(train))
    assert premiums(make_episodes(fixed, "train", 8, 0)) == {0.15}
    for i in range(SyntheticPaths.KEPT + 10):
        train[i]
    assert len(train._kept) == SyntheticPaths.KEPT
    # held-out paths keep the fitted market
    held_out = [make_episodes(c, "eval", 2, 0) for c in (cfg, fixed)]
    assert [e.market.chains[-1]["SYN"].spot for e in held_out[0]] == [
        e.market.chains[-1]["SYN"].spot for e in held_out[1]
    ]


def test_a_randomisation_range_must_be_low_then_high():
    with pytest.raises(ValueError, match="vol_scale"):
        OptionsConfig(market={"randomize": {"vol_scale": [1.5, 0.5]}})
    with pytest.raises(ValueError, match="skew"):
        OptionsConfig(market={"randomize": {"skew": [-1.5, 0.0]}})


def test_a_stacked_observation_is_the_last_steps_features_oldest_first():
    cfg = OptionsConfig(suite={"episode_days": 8}, ppo={"frame_stack": 3})
    env = OptionsEnv(cfg, make_episodes(cfg, "eval", 1))
    width = len(FEATURES)
    first, _ = env.reset(seed=0)
    assert first.shape == (3 * width,) == env.observation_space.shape
    blocks = first.reshape(3, width)
    assert (blocks == blocks[-1]).all()  # the first step, repeated
    seen = [env.features()]
    for _ in range(3):
        obs = env.step(0)[0]
        seen.append(env.features())
    assert np.array_equal(obs.reshape(3, width), np.stack(seen[-3:]))
    assert np.array_equal(env.observation(), obs)  # asking again changes nothing


def test_a_real_market_can_train_on_synthetic_paths_and_still_hold_out_its_months():
    from fieldrl.apps.options.episodes import SyntheticPaths

    cfg = OptionsConfig(market={"kind": "replay", "symbols": ["AAPL"]},
                        suite={"episode_days": 10}, ppo={"train_on": "synthetic"})  # fmt: skip
    train = make_episodes(cfg, "train", 500, 0)
    assert isinstance(train, SyntheticPaths) and train[7].symbol == "SYN"
    held_out = make_episodes(cfg, "eval", 2, 0)
    assert all(e.symbol == "AAPL" and e.key.startswith("AAPL 2023-") for e in held_out)
    env = OptionsEnv(cfg, train)  # the same menu and observation either way
    assert env.reset(seed=0)[0].shape == OptionsEnv(cfg, held_out).reset(seed=0)[0].shape
