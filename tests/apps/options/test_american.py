"""American exercise: Barone-Adesi-Whaley prices and Greeks against published and
hand-computed values (and QuantLib where it is installed), and the riskless profit that a
European price of a listed stock option would leave to anyone who exercises early; the
environment's entry edge, stated risk and stress losses price American options American."""

import datetime as dt
import importlib.util

import numpy as np
import pytest

from fieldrl.apps.options.account import Account
from fieldrl.apps.options.config import OptionsConfig, SpreadConfig, SyntheticConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.metrics import stress_losses
from fieldrl.apps.options.orders import parse_order
from fieldrl.apps.options.pricing import (
    american_greeks,
    american_price,
    bs_price,
    implied_vol,
)
from fieldrl.apps.options.sim import simulate, trading_times


def test_american_prices_match_the_published_table_and_hand_values():
    # Barone-Adesi & Whaley (1987), Table I: calls, X = 100, T = 0.25, r = 0.08, cost of
    # carry b = r - q = -0.04, vol 0.20, at S = 80...120 (European: 0.03 0.57 3.42 9.85 18.62)
    spots = np.array([80.0, 90.0, 100.0, 110.0, 120.0])
    calls = american_price(spots, 100.0, 0.25, 0.2, 0.08, 0.12, True)
    np.testing.assert_allclose(calls, [0.03, 0.59, 3.52, 10.31, 20.00], atol=0.005)
    # deep in the money, exercising now is best: the put is its intrinsic value, where the
    # European price (42.99) is below it
    assert american_price(150.0, 195.0, 100 / 365, 0.3, 0.05, 0.0, False) == pytest.approx(45.0)
    assert bs_price(150.0, 195.0, 100 / 365, 0.3, 0.05, 0.0, False) < 43.0
    # early exercise never pays for a call without dividends or a put without interest
    k, t, vol = np.array([80.0, 100.0, 130.0]), 0.3, 0.4
    np.testing.assert_allclose(american_price(100.0, k, t, vol, 0.05, 0.0, True),
                               bs_price(100.0, k, t, vol, 0.05, 0.0, True))  # fmt: skip
    np.testing.assert_allclose(american_price(100.0, k, t, vol, 0.0, 0.02, False),
                               bs_price(100.0, k, t, vol, 0.0, 0.02, False))  # fmt: skip


def test_american_greeks_are_the_prices_derivatives_and_the_vol_inverts():
    s, k = 100.0, np.array([80.0, 95.0, 100.0, 110.0, 125.0])
    t, vol, r, q = 0.2, 0.35, 0.05, 0.02
    for call in (True, False):
        g = american_greeks(s, k, t, vol, r, q, call)

        def price(ds=0.0, dv=0.0, dt_=0.0, dr=0.0, call=call):
            return american_price(s + ds, k, t + dt_, vol + dv, r + dr, q, call)

        h = 0.01
        np.testing.assert_allclose(g.price, price(), rtol=1e-12)
        np.testing.assert_allclose(g.delta, (price(h) - price(-h)) / (2 * h), atol=1e-4)
        np.testing.assert_allclose(g.gamma, (price(h) - 2 * price() + price(-h)) / h**2,
                                   atol=1e-3)  # fmt: skip
        np.testing.assert_allclose(g.vega, (price(dv=1e-4) - price(dv=-1e-4)) / 2e-4, rtol=1e-2)
        np.testing.assert_allclose(g.rho, (price(dr=1e-5) - price(dr=-1e-5)) / 2e-5, rtol=1e-2,
                                   atol=1e-3)  # fmt: skip
        theta = (price(dt_=-1 / 365) - price()) * 1.0  # a day closer to expiry
        np.testing.assert_allclose(g.theta, theta, rtol=5e-2, atol=1e-3)
        found = implied_vol(g.price, s, k, t, r, q, call, american=True)
        np.testing.assert_allclose(found, vol, atol=1e-4)
    deep = american_greeks(150.0, 195.0, 100 / 365, 0.3, 0.05, 0.0, False)
    assert (deep.delta, deep.gamma, deep.vega, deep.theta) == (-1.0, 0.0, 0.0, 0.0)


@pytest.mark.skipif(importlib.util.find_spec("QuantLib") is None, reason="QuantLib absent")
def test_american_prices_match_quantlib():
    import QuantLib as ql

    r, q = 0.045, 0.012
    grid = [(s, k, days, vol, call) for s in (80.0, 100.0, 125.0) for k in (90.0, 100.0, 110.0)
            for days in (1, 7, 30, 120) for vol in (0.1, 0.35, 0.9)
            for call in (True, False)]  # fmt: skip

    def quantlib(s, k, days, vol, call, engine):
        today = ql.Date(3, 1, 2023)
        ql.Settings.instance().evaluationDate = today
        day_count = ql.Actual365Fixed()
        option = ql.VanillaOption(
            ql.PlainVanillaPayoff(ql.Option.Call if call else ql.Option.Put, k),
            ql.AmericanExercise(today, today + days),
        )
        curve = ql.YieldTermStructureHandle
        process = ql.BlackScholesMertonProcess(
            ql.QuoteHandle(ql.SimpleQuote(s)), curve(ql.FlatForward(today, q, day_count)),
            curve(ql.FlatForward(today, r, day_count)),
            ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), vol,
                                                               day_count)),
        )  # fmt: skip
        option.setPricingEngine(engine(process))
        return option.NPV()

    s, k, days, vol, call = map(np.array, zip(*grid, strict=True))
    ours = american_price(s, k, days / 365, vol, r, q, call)
    baw = [quantlib(*row, ql.BaroneAdesiWhaleyApproximationEngine) for row in grid]
    np.testing.assert_allclose(ours, baw, rtol=1e-4, atol=1e-4)  # the same approximation
    tree = [quantlib(*row, lambda p: ql.BinomialVanillaEngine(p, "crr", 1000)) for row in grid]
    np.testing.assert_allclose(ours, tree, atol=0.07)  # its error against the lattice


def test_buying_a_deep_in_the_money_option_and_exercising_it_makes_no_riskless_profit():
    """In a synthetic stock market (rate 4.5%, yield 0.5%), buy each in-the-money option
    at the ask with the shares that flatten its exercise, exercise at once, and count the
    cash: priced European, the deep puts quoted below intrinsic and this paid."""
    spec = SyntheticConfig()
    market = simulate(spec, "SYN", trading_times(dt.date(2025, 1, 6), 5), 0, SpreadConfig())
    view = market.view(0)
    chain = view.chain("SYN")
    assert chain.style == "american"
    intrinsic = np.where(chain.call, chain.spot - chain.strike, chain.strike - chain.spot)
    assert (chain.greeks.price >= np.maximum(intrinsic, 0.0) - 1e-9).all()
    deep = np.flatnonzero(intrinsic > 0.15 * chain.spot)
    assert len(deep) > 10
    profits = []
    for row in deep:
        call = bool(chain.call[row])
        option = {"right": "call" if call else "put", "strike": float(chain.strike[row]),
                  "expiry": str(chain.expiry[row]), "side": "buy", "quantity": 1}  # fmt: skip
        shares = {"instrument": "stock", "side": "buy", "quantity": 100}
        account = Account(100_000)
        # a put delivers shares bought with it; a call's shares are sold after
        orders = [{"legs": [option] if call else [option, shares]},
                  {"legs": [option], "action": "exercise"},
                  *([{"legs": [{**shares, "side": "sell"}]}] if call else [])]  # fmt: skip
        for order in orders:
            account.submit(parse_order({"underlying": "SYN", **order}), view)
        assert account.positions["SYN"] == {}
        profits.append(account.cash - 100_000)
    assert max(profits) < 0


def test_index_options_stay_european():
    spec = SyntheticConfig(spot=5000.0, strike_range=0.1, max_expiry_days=30)
    market = simulate(spec, "SPX", trading_times(dt.date(2025, 1, 6), 1), 0, SpreadConfig(),
                      index=True)  # fmt: skip
    chain = market.chains[0]["SPX"]
    assert chain.style == "european"
    np.testing.assert_allclose(chain.greeks.price, bs_price(
        chain.spot, chain.strike, chain.years, chain.iv, chain.rate, chain.dividend_yield,
        chain.call))  # fmt: skip


def test_the_env_values_a_deep_in_the_money_american_put_at_least_at_intrinsic():
    """Buy the deepest put of the furthest expiry (strike 1.3 x spot) on a synthetic stock:
    its fair value in the entry edge, and its value in every stress scenario of the stated
    risk and of the stress losses, is never below what exercising it pays (priced
    European, the edge was -$218 where it is -$26 and the stated risk $241 where it is $30)."""
    cfg = OptionsConfig(suite={"episode_days": 10})
    env = OptionsEnv(cfg, make_episodes(cfg, "validation", 1))
    env.reset(seed=0)
    chain = env.market.chains[0][env.symbol]
    assert chain.american
    puts = np.flatnonzero(~chain.call & (chain.expiry == chain.expiry.max()))
    row = puts[np.argmax(chain.strike[puts])]
    strike, ask, spot = float(chain.strike[row]), float(chain.ask[row]), chain.spot
    intrinsic = strike - spot
    assert intrinsic > 0.25 * spot
    put = {"right": "put", "strike": strike, "expiry": str(chain.expiry[row]), "side": "buy",
           "quantity": 1}  # fmt: skip
    # with 100 shares the put pays at least its strike: the most lost is its time value paid
    married = parse_order({"underlying": env.symbol, "legs": [
        put, {"instrument": "stock", "side": "buy", "quantity": 100}]})  # fmt: skip
    assert env.assess(married).risk < 100 * (ask - intrinsic) + 10  # fees: a few dollars
    env.submit(parse_order({"underlying": env.symbol, "legs": [put]}))
    entry = env.entries[-1]
    assert entry["edge"] * entry["risk"] >= 100 * (intrinsic - ask) - 1e-6
    # spot down 20%: the put is worth at least its new intrinsic value
    mark = 100 * float(chain.mid[row])
    assert stress_losses(env)["gap_down_20"] <= mark - 100 * (strike - 0.8 * spot) + 1e-6
