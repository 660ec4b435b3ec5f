"""The look-ahead test: in a fair market (zero variance premium, drift at the rate, no
costs, fills at mid) no honest agent expects to make or lose money, so each one's mean
return is 0 within its CI; an agent that peeks at the next step's price is caught."""

import numpy as np
import pytest

from fieldrl.apps.options.baselines import BASELINES, HOLD, random_valid
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import run_episode
from fieldrl.apps.options.metrics import bootstrap_ci, episode_metrics
from fieldrl.apps.options.strategies import MenuItem


def fair_env(episodes: int) -> OptionsEnv:
    cfg = OptionsConfig(market={"costs": False, "synthetic": {"zero_premium": True}},
                        suite={"episode_days": 10})  # fmt: skip
    return OptionsEnv(cfg, make_episodes(cfg, "eval", episodes))


def cheat(env: OptionsEnv):
    """Reads the next step's spot from the market (which no agent gets) and buys a call
    before a rise, a put before a fall."""
    if env.open_item is not None:
        return 1
    now, later = (env.market.chains[env.t + i][env.symbol].spot for i in (0, 1))
    return ("open", MenuItem("long_call" if later > now else "long_put", 0.5, 7))


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
    mean, low, _ = mean_ci(env, cheat)
    assert low > 0, ("the cheat", mean, low)


def test_holding_in_a_fair_market_makes_exactly_nothing():
    env = fair_env(3)
    for e in range(3):
        assert episode_metrics(run_episode(env, lambda _: HOLD, e))["pnl"] == 0.0
