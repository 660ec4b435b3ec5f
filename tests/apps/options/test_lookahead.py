"""Look-ahead: a policy's view holds nothing later than its step (changing every later
price changes nothing it sees), and in a fair market (zero variance premium, drift at the
rate, no costs, fills at mid) no honest agent expects to make or lose money, so each one's
mean return is 0 within its CI; the peeking control is caught."""

import dataclasses
import datetime as dt

import numpy as np
import pytest

from fieldrl.apps.options.baselines import BASELINES, CLOSE, HOLD, random_valid
from fieldrl.apps.options.benchmark import PEEKING, peeking_control, targets
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import AgentView, OptionsEnv, OrderDesk
from fieldrl.apps.options.episodes import Episode, make_episodes
from fieldrl.apps.options.evaluate import run_episode
from fieldrl.apps.options.market import Chain, LookAheadError, Market
from fieldrl.apps.options.metrics import bootstrap_ci, episode_metrics


def fair_env(episodes: int) -> OptionsEnv:
    cfg = OptionsConfig(market={"costs": False, "synthetic": {"zero_premium": True}},
                        suite={"episode_days": 10})  # fmt: skip
    return OptionsEnv(cfg, make_episodes(cfg, "eval", episodes))


def mean_ci(env: OptionsEnv, policy) -> tuple[float, float, float]:
    returns = [episode_metrics(run_episode(env, policy, e))["return"]
               for e in range(len(env.episodes))]  # fmt: skip
    return bootstrap_ci(np.array(returns))


@pytest.mark.slow
def test_honest_agents_break_even_in_a_fair_market_and_a_peeking_one_does_not():
    env = fair_env(60)
    for name in ("buy_write_30d", "cash_secured_put_30d", "iron_condor_16d"):
        mean, low, high = mean_ci(env, BASELINES[name]())
        assert low <= 0 <= high, (name, mean, low, high)
    mean, low, high = mean_ci(env, random_valid())
    assert low <= 0 <= high, ("random_valid", mean, low, high)
    mean, low, _ = mean_ci(env, peeking_control(env))
    assert low > 0, ("the peeking control", mean, low)


def test_the_peeking_control_makes_money_in_a_fair_market():
    """The fast suite's check of the positive control (the slow test above plays 60
    episodes beside the honest agents)."""
    env = fair_env(6)
    mean, low, _ = mean_ci(env, peeking_control(env))
    assert low > 0, (mean, low)


def test_holding_in_a_fair_market_makes_exactly_nothing():
    env = fair_env(3)
    for e in range(3):
        assert episode_metrics(run_episode(env, lambda _: HOLD, e))["pnl"] == 0.0


def changed_after(market: Market, symbol: str, t: int) -> Market:
    """``market`` with every price after step ``t`` changed (spot, quotes, volatility)."""
    chains = [dict(c) for c in market.chains]
    for step in range(t + 1, len(market)):
        c = chains[step][symbol]
        later = {"spot": c.spot * 1.3, "bid": c.bid * 1.5, "ask": c.ask * 1.5 + 0.05,
                 "iv": c.iv * 1.2}  # fmt: skip
        chains[step][symbol] = dataclasses.replace(c, **later)
    return Market(market.underlyings, market.times, chains, market.open_, market.iv_history)


def seen_until(env: OptionsEnv, t: int) -> list[AgentView]:
    """The views of steps 0..t under a fixed play: open the first allowed item at step 1,
    close at step 3."""
    env.reset(seed=0, options={"episode": 0})
    views = []
    for step in range(t + 1):
        view = env.agent_view()
        views.append(view)
        opens = np.flatnonzero(view.mask[2:])
        action = 2 + int(opens[0]) if step == 1 and len(opens) else CLOSE if step == 3 else HOLD
        env.step(action)
    return views


@pytest.mark.parametrize("frame_stack", [1, 3])
def test_changing_every_later_price_changes_nothing_a_policy_sees_until_then(frame_stack):
    cfg = OptionsConfig(suite={"episode_days": 10}, ppo={"frame_stack": frame_stack})
    episode = make_episodes(cfg, "train", 1)[0]
    t = 5
    changed = dataclasses.replace(episode, market=changed_after(episode.market, "SYN", t))
    before = seen_until(OptionsEnv(cfg, [episode]), t)
    after = seen_until(OptionsEnv(cfg, [changed]), t)
    for a, b in zip(before, after, strict=True):
        assert np.array_equal(a.observation, b.observation) and np.array_equal(a.mask, b.mask)
        assert np.array_equal(a.market.spots("SYN"), b.market.spots("SYN"))
        assert a.open_item == b.open_item and a.strategy_pnl == b.strategy_pnl
    assert before[1].mask[2:].any() and before[2].open_item is not None  # it traded
    changed_next = seen_until(OptionsEnv(cfg, [changed]), t + 1)[-1].observation
    assert not np.array_equal(
        changed_next, seen_until(OptionsEnv(cfg, [episode]), t + 1)[-1].observation
    )


def changed_at(market: Market, symbol: str, t: int) -> Market:
    """``market`` with the volatility of step ``t`` alone raised by a third."""
    chains = [dict(c) for c in market.chains]
    c = chains[t][symbol]
    chains[t][symbol] = dataclasses.replace(c, iv=c.iv * 4 / 3)
    return Market(market.underlyings, market.times, chains, market.open_, market.iv_history)


@pytest.mark.parametrize("feature", ["iv_rank", "iv_percentile", "iv_minus_rv", "atm_iv"])
def test_each_volatility_feature_reads_the_present_and_the_past_only(feature):
    from fieldrl.apps.options.env import FEATURES

    cfg = OptionsConfig(suite={"episode_days": 10})
    episode = make_episodes(cfg, "eval", 1)[0]
    i, t = FEATURES.index(feature), 5

    def at_t(market: Market) -> float:
        env = OptionsEnv(cfg, [dataclasses.replace(episode, market=market)])
        env.reset(seed=0, options={"episode": 0})
        for _ in range(t):
            env.step(HOLD)
        return float(env.observation()[i])

    now = at_t(episode.market)
    assert at_t(changed_after(episode.market, "SYN", t)) == now  # the future: nothing
    assert at_t(changed_at(episode.market, "SYN", t)) != now  # the present: it moves
    # the year before the episode is the market's own past: the path ran into the start
    assert len(episode.market.iv_history["SYN"]) == 252


def test_a_replay_windows_volatility_history_ends_before_it_starts():
    from fieldrl.apps.options.data import atm_vol_history
    from fieldrl.apps.options.episodes import HISTORY_DAYS

    cfg = OptionsConfig(market={"kind": "replay", "symbols": ["AAPL"]}, suite={"episode_days": 10})
    dates, vols = atm_vol_history("AAPL")
    for episode in make_episodes(cfg, "eval", 3, 0):
        start = episode.market.times[0].date()
        past = episode.market.iv_history["AAPL"]
        before = [v for d, v in zip(dates, vols, strict=True) if d < start][-HISTORY_DAYS:]
        assert 0 < len(past) <= HISTORY_DAYS and np.array_equal(past, before)


def test_a_policys_view_holds_nothing_later():
    cfg = OptionsConfig(suite={"episode_days": 10})
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    env.reset(seed=0)
    env.step(HOLD)
    view = env.agent_view()
    assert len(view.market.spots("SYN")) == 2  # the spots up to now
    later = env.market.times[2]
    with pytest.raises(LookAheadError, match="later"):
        view.market.chain("SYN", at=later)
    with pytest.raises(LookAheadError):
        view.market.spots("SYN", until=later)
    reachable = [getattr(view, f.name) for f in dataclasses.fields(view)]
    assert not any(isinstance(x, OptionsEnv | Market | Episode) for x in reachable)


def lookahead_verdict(returns: dict[str, tuple[float, float, float]]) -> bool:
    """Whether the benchmark's look-ahead target is met for these (mean, low, high)."""
    look = {n: {"mean_return": m, "low": lo, "high": hi} for n, (m, lo, hi) in returns.items()}
    speeds = {"env_steps_per_s": 1.0, "chain_options": 1.0, "orders_per_s": 1.0}
    bull = {"covered_call_30d": 0.0, "buy_and_hold": 0.0, "symbol_return": 0.0}
    target = targets([], [], look, speeds, bull)[0]
    assert target.name.startswith("look-ahead")
    return target.met


def test_the_lookahead_target_needs_its_peeking_control_caught():
    honest = {"random_valid": (0.0, -0.01, 0.01)}
    assert lookahead_verdict({**honest, PEEKING: (0.05, 0.02, 0.08)})
    assert not lookahead_verdict({**honest, PEEKING: (0.01, -0.01, 0.03)})  # not caught
    assert not lookahead_verdict({"random_valid": (0.02, 0.01, 0.03),
                                  PEEKING: (0.05, 0.02, 0.08)})  # fmt: skip


def test_a_lookahead_record_without_the_control_misses_the_target():
    # a look-ahead job saved before the control existed (a resumed benchmark) has none
    assert not lookahead_verdict({"random_valid": (0.0, -0.01, 0.01)})


def attributes(obj: object) -> list[object]:
    """What ``obj`` holds: a container's items, else its instance attributes."""
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, list | tuple):
        return list(obj)
    return list(vars(obj).values()) if hasattr(obj, "__dict__") else []


def reachable(root: object, depth: int = 5) -> list[object]:
    """Every object reachable from ``root`` through attributes and container items."""
    seen, frontier, found = {id(root)}, [root], []
    for _ in range(depth):
        frontier = [x for obj in frontier for x in attributes(obj) if id(x) not in seen]
        seen.update(id(x) for x in frontier)
        found += frontier
    return found


def test_an_order_writing_policy_gets_a_desk_that_cannot_reach_the_env_or_later_chains():
    cfg = OptionsConfig(suite={"episode_days": 5})
    env = OptionsEnv(cfg, make_episodes(cfg, "train", 1))
    got = []

    def peeking(desk):
        got.append(desk)
        return HOLD

    peeking.writes_orders = True
    run_episode(env, peeking, 0)
    desk = got[1]  # step 1 of 5
    assert isinstance(desk, OrderDesk)
    everything = reachable(desk)
    assert not any(isinstance(x, OptionsEnv | Market | Episode) for x in everything)
    now, later = env.market.times[1], env.market.times[2]
    assert all(x.time == now for x in everything if isinstance(x, Chain))
    assert not any(isinstance(x, dt.datetime) and x > now for x in everything)
    with pytest.raises(LookAheadError, match="later"):
        desk.view.market.chain("SYN", at=later)
    with pytest.raises(LookAheadError):
        desk.view.market.spots("SYN", until=later)
    assert desk.symbol == "SYN" and desk.account() == env.account_state()
