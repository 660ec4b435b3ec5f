"""Black-Scholes prices, Greeks and implied volatilities against QuantLib's analytic
European engine on a grid."""

import numpy as np
import pytest

from fieldrl.apps.options.pricing import bs_greeks, bs_price, implied_vol

ql = pytest.importorskip("QuantLib")

GRID = [(s, k, days, vol, call) for s in (80.0, 100.0, 125.0) for k in (90.0, 100.0, 110.0)
        for days in (1, 30, 365) for vol in (0.1, 0.35, 0.9) for call in (True, False)]  # fmt: skip
R, Q = 0.045, 0.012


def quantlib(s, k, days, vol, call):
    today = ql.Date(3, 1, 2023)
    ql.Settings.instance().evaluationDate = today
    day_count = ql.Actual365Fixed()
    option = ql.EuropeanOption(
        ql.PlainVanillaPayoff(ql.Option.Call if call else ql.Option.Put, k),
        ql.EuropeanExercise(today + days),
    )
    process = ql.BlackScholesMertonProcess(
        ql.QuoteHandle(ql.SimpleQuote(s)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, Q, day_count)),
        ql.YieldTermStructureHandle(ql.FlatForward(today, R, day_count)),
        ql.BlackVolTermStructureHandle(ql.BlackConstantVol(today, ql.NullCalendar(), vol,
                                                           day_count)),
    )  # fmt: skip
    option.setPricingEngine(ql.AnalyticEuropeanEngine(process))
    return (option.NPV(), option.delta(), option.gamma(), option.vega(),
            option.thetaPerDay(), option.rho())  # fmt: skip


def test_prices_and_greeks_match_quantlib_on_a_grid():
    s, k, days, vol, call = map(np.array, zip(*GRID, strict=True))
    ours = bs_greeks(s, k, days / 365.0, vol, R, Q, call)
    theirs = np.array([quantlib(*row) for row in GRID])
    for i, name in enumerate(("price", "delta", "gamma", "vega", "theta", "rho")):
        np.testing.assert_allclose(getattr(ours, name), theirs[:, i], rtol=1e-6, atol=1e-8,
                                   err_msg=name)  # fmt: skip


def test_put_call_parity_and_expiry():
    s, k, t = np.array([90.0, 100.0, 110.0]), 100.0, 0.25
    call, put = bs_price(s, k, t, 0.3, R, Q, True), bs_price(s, k, t, 0.3, R, Q, False)
    np.testing.assert_allclose(call - put, s * np.exp(-Q * t) - k * np.exp(-R * t))
    expired = bs_greeks(s, k, 0.0, 0.3, R, Q, True)
    np.testing.assert_allclose(expired.price, [0.0, 0.0, 10.0])
    np.testing.assert_allclose(expired.delta, [0.0, 0.0, 1.0])
    assert not expired.gamma.any() and not expired.vega.any()


def test_implied_vol_inverts_the_price_and_flags_impossible_prices():
    s, k, days, vol, call = map(np.array, zip(*GRID, strict=True))
    price = bs_price(s, k, days / 365.0, vol, R, Q, call)
    vega = bs_greeks(s, k, days / 365.0, vol, R, Q, call).vega
    found = implied_vol(price, s, k, days / 365.0, R, Q, call)
    informative = vega > 1e-3  # deep in or out of the money a price pins no volatility
    np.testing.assert_allclose(found[informative], vol[informative], atol=1e-6)
    assert np.isnan(implied_vol([0.0, 200.0, np.nan], 100.0, 100.0, 0.5, R, Q, True)).all()


def test_synthetic_earnings_variance_is_priced_until_the_announcement_close():
    import datetime as dt

    from fieldrl.apps.options.config import SpreadConfig, SyntheticConfig
    from fieldrl.apps.options.sim import simulate, trading_times

    spec = SyntheticConfig(earnings_days=[4], vol_of_vol=0.0, jump_intensity=0.0)
    times = trading_times(dt.date(2025, 1, 6), 10)  # a Monday; the event: Friday 01-10
    market = simulate(spec, "SYN", times, 0, SpreadConfig())

    def atm_iv(step, expiry):
        c = market.chains[step]["SYN"]
        rows = np.flatnonzero((c.expiry == np.datetime64(expiry)) & c.call)
        return c.iv[rows[np.argmin(np.abs(c.strike[rows] - c.spot))]]

    friday = [t.date() for t in times].index(dt.date(2025, 1, 10))
    # at the announcement day's close the next weekly still carries the event...
    assert atm_iv(friday, "2025-01-17") > 1.3 * atm_iv(friday + 1, "2025-01-17")
    # ...and the expiry settling at that close does not
    assert atm_iv(friday - 1, "2025-01-10") < 1.5 * atm_iv(friday - 1, "2025-02-21")
