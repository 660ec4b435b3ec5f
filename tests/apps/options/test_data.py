"""Real data: the 2023 surfaces as listed chains, your own chain files with every bad row
named, and the point-in-time guard, tested by trying to read the future."""

import dataclasses
import datetime as dt

import numpy as np
import pandas as pd
import pytest

from fieldrl.apps.options.config import SpreadConfig
from fieldrl.apps.options.data import EARNINGS_2023, read_chains, replay_market
from fieldrl.apps.options.market import LookAheadError, Market, MarketView
from fieldrl.errors import DataError


@pytest.fixture(scope="module")
def replay():
    return replay_market(["AAPL", "IBM"], "2023-01-03", "2023-02-28", SpreadConfig())


def test_replay_chains_are_listed_like_the_exchange(replay):
    assert len(replay) == 39  # trading days of January and February 2023
    c = replay.chains[0]["AAPL"]
    assert c.spot == pytest.approx(125.07)
    assert np.allclose(c.strike % 2.5, 0)  # AAPL's increment between $50 and $200
    assert {e.weekday() for e in c.expiries()} == {4}  # Fridays
    assert dt.date(2023, 2, 17) in c.expiries()  # the February monthly (third Friday)
    assert (c.bid < c.ask).all() and (c.bid >= 0).all()
    assert (np.diff(c.strike[(c.expiry == c.expiry[0]) & c.call]) > 0).all()


def test_replay_volatility_matches_the_surface_at_30_days(replay):
    from fieldrl.apps.options.data import _qmoms

    surface = _qmoms()[0]
    atm = surface[(surface.id == 14593) & (surface.date == "2023-01-03") & (surface.days == 30)
                  & (surface.delta.abs() == 50)].impl_volatility.mean()  # fmt: skip
    c = replay.chains[0]["AAPL"]
    near_30 = c.expiry == np.datetime64("2023-01-27")  # 24 days: flat at the 30-day smile
    row = np.flatnonzero(near_30 & c.call)[np.argmin(np.abs(c.strike[near_30 & c.call] - 126))]
    assert c.iv[row] == pytest.approx(atm, abs=0.01)


def test_dividends_are_read_off_the_data_and_earnings_crush_the_volatility(replay):
    assert replay.underlyings["IBM"].dividends[0] == (dt.date(2023, 2, 9), 1.65)
    assert replay.underlyings["AAPL"].dividends[0] == (dt.date(2023, 2, 10), 0.23)
    ibm = [m["IBM"] for m in replay.chains]
    event = [i for i, c in enumerate(ibm) if c.time.date() == dt.date(2023, 1, 25)][0]
    before, after = (np.nanmedian(ibm[i].iv[ibm[i].expiry == ibm[i].expiry[0]])
                     for i in (event, event + 1))  # fmt: skip
    assert after < 0.85 * before  # the 30-day volatility crushed after IBM's report
    assert EARNINGS_2023["IBM"][0] == "2023-01-25"


def test_the_view_cannot_reach_the_future(replay):
    view = replay.view(5)
    later = replay.times[6]
    with pytest.raises(LookAheadError):
        view.chain("AAPL", at=later)
    with pytest.raises(LookAheadError):
        view.spots("AAPL", until=later)
    # nothing inside the view refers to the market or to a later time
    assert all(not isinstance(v, Market) for v in vars(view).values())
    assert all(t <= view.time for t, _ in view.history["AAPL"])
    assert len(view.history["AAPL"]) == 6 and view.chains["AAPL"].time == view.time
    # editing the view's chain does not touch the market's
    view.chains["AAPL"].bid[:] = -1
    assert (replay.chains[5]["AAPL"].bid >= 0).all()
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.time = later  # type: ignore[misc]
    assert isinstance(view, MarketView)


def write(tmp_path, rows, name="chain.csv"):
    path = tmp_path / name
    frame = pd.DataFrame(rows)
    if name.endswith(".parquet"):
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path


ROWS = [
    {"date": "2024-03-01", "underlying": "XYZ", "expiry": "2024-03-15", "strike": 100,
     "right": "C", "bid": 2.9, "ask": 3.1},
    {"date": "2024-03-01", "underlying": "XYZ", "expiry": "2024-03-15", "strike": 100,
     "right": "P", "bid": 1.9, "ask": 2.1},
    {"date": "2024-03-01", "underlying": "XYZ", "expiry": "2024-03-15", "strike": 105,
     "right": "call", "bid": 0.9, "ask": 1.1},
    {"date": "2024-03-04", "underlying": "XYZ", "expiry": "2024-03-15", "strike": 100,
     "right": "C", "bid": 3.4, "ask": 3.6},
    {"date": "2024-03-04", "underlying": "XYZ", "expiry": "2024-03-15", "strike": 100,
     "right": "P", "bid": 1.4, "ask": 1.6},
]  # fmt: skip


@pytest.mark.parametrize("name", ["chain.csv", "chain.parquet"])
def test_a_users_chain_file_loads_with_spot_from_parity(tmp_path, name):
    market = read_chains(write(tmp_path, ROWS, name), rate=0.0)
    assert len(market) == 2 and list(market.underlyings) == ["XYZ"]
    first = market.chains[0]["XYZ"]
    assert first.spot == pytest.approx(101.0)  # 3.0 - 2.0 + 100
    assert first.time == dt.datetime(2024, 3, 1, 16, 0)
    assert np.isfinite(first.iv).all() and (first.iv > 0).all()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"bid": 5.0}, "row(s) [3] (1 in all), column 'bid/ask': bid above ask"),
     ({"right": "X"}, "row(s) [3] (1 in all), column 'right'"),
     ({"expiry": "soon"}, "row(s) [3] (1 in all), column 'expiry': not a date"),
     ({"strike": -1}, "column 'strike': must be within [0.01, 1e+07]"),
     ({"ask": "nan"}, "column 'ask': not a finite number"),
     ({"expiry": "2024-02-01"}, "column 'expiry': before the quote date")],
)  # fmt: skip
def test_bad_rows_are_named_by_file_row_and_column(tmp_path, change, message):
    rows = [dict(r) for r in ROWS]
    rows[1].update(change)
    with pytest.raises(DataError) as info:
        read_chains(write(tmp_path, rows))
    assert "chain.csv" in str(info.value) and message in str(info.value)


@pytest.mark.parametrize(
    ("column", "value"),
    [("iv", -0.5), ("iv", 0.0), ("iv", 1e308), ("underlying_price", -5.0),
     ("underlying_price", 0.0), ("bid", 1e308), ("strike", 1e308), ("volume", -1)],
)  # fmt: skip
def test_a_value_out_of_its_columns_range_is_named_by_row_and_column(tmp_path, column, value):
    """Values that trained with exit 0 (or, a strike of 1e308, ended in a traceback)."""
    good = {"iv": 0.3, "underlying_price": 101.0, "volume": 10}
    rows = [dict(r, **{column: good.get(column, r.get(column))}) for r in ROWS]
    rows[1].update({column: value, **({"ask": value} if column == "bid" else {})})
    with pytest.raises(DataError) as info:
        read_chains(write(tmp_path, rows))
    assert "chain.csv" in str(info.value) and "row(s) [3] (1 in all)" in str(info.value)
    assert f"column '{column}': must be" in str(info.value) or "negative" in str(info.value)


def test_missing_columns_and_unreadable_files(tmp_path):
    with pytest.raises(DataError, match=r"missing column\(s\) \['ask'\]"):
        read_chains(write(tmp_path, [{k: v for k, v in r.items() if k != "ask"} for r in ROWS]))
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(DataError, match="not a readable"):
        read_chains(tmp_path / "bad.parquet")
    with pytest.raises(DataError, match="no such file"):
        read_chains(tmp_path / "none.csv")
    duplicate = [*ROWS, ROWS[0]]
    with pytest.raises(DataError, match="quoted twice"):
        read_chains(write(tmp_path, duplicate))


def test_your_own_chains_train_an_agent_through_the_cli(tmp_path):
    """Chains written by write_chains (any market) are read back as the user's data, split
    by date, and `train --data` trains on the first 60% of them."""
    import datetime as dt

    from typer.testing import CliRunner

    from fieldrl.apps.options.config import SyntheticConfig
    from fieldrl.apps.options.data import write_chains
    from fieldrl.apps.options.sim import simulate, trading_times
    from fieldrl.cli import build_root

    market = simulate(SyntheticConfig(), "XYZ", trading_times(dt.date(2025, 1, 6), 60), 0,
                      SpreadConfig())  # fmt: skip
    path = write_chains(market, tmp_path / "chains.parquet")
    back = read_chains(path)
    assert len(back) == len(market) and back.chains[3]["XYZ"].spot == pytest.approx(
        market.chains[3]["XYZ"].spot)  # fmt: skip
    np.testing.assert_allclose(back.chains[3]["XYZ"].iv, market.chains[3]["XYZ"].iv)
    args = ["options", "train", "-p", "tiny", "--data", str(path),
            "--set", f"experiment.runs_dir={tmp_path / 'runs'}"]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    (run,) = (tmp_path / "runs" / "options").iterdir()
    assert '"kind": "chains"' in (run / "config.json").read_text()


def test_your_own_chains_split_by_date(tmp_path):
    import datetime as dt

    from fieldrl.apps.options.config import OptionsConfig, SyntheticConfig
    from fieldrl.apps.options.data import write_chains
    from fieldrl.apps.options.episodes import make_episodes
    from fieldrl.apps.options.sim import simulate, trading_times

    market = simulate(SyntheticConfig(), "XYZ", trading_times(dt.date(2025, 1, 6), 70), 0,
                      SpreadConfig())  # fmt: skip
    path = write_chains(market, tmp_path / "chains.csv")
    cfg = OptionsConfig(market={"data": [str(tmp_path / "*.csv")]}, suite={"episode_days": 5})
    assert cfg.market.kind == "chains"
    cut = market.times[int(round(0.8 * len(market)))]
    for episode in make_episodes(cfg, "eval", 4):
        assert episode.market.times[0] >= cut
    for episode in make_episodes(cfg, "train", 4):
        assert episode.market.times[-1] < market.times[int(round(0.6 * len(market)))]
    assert path.is_file()


def test_offsets_in_dates_and_unexplained_quotes(tmp_path):
    rows = [dict(r) for r in ROWS]
    for r in rows:
        r["date"] = r["date"] + "T15:30:00-05:00"
    rows[0]["bid"], rows[0]["ask"] = 0.01, 0.02  # a deep-ITM call quoted near zero
    market = read_chains(write(tmp_path, rows), rate=0.0)
    first = market.chains[0]["XYZ"]
    assert first.time == dt.datetime(2024, 3, 1, 15, 30)  # New York time, naive
    assert np.isfinite(first.iv).all()


def test_the_good_friday_weekly_is_not_listed(replay):
    april = [c["AAPL"] for c in replay_market(["AAPL"], "2023-04-03", "2023-04-06",
                                               SpreadConfig()).chains]  # fmt: skip
    for chain in april:
        assert dt.date(2023, 4, 7) not in chain.expiries()
    for chain in april[:-1]:  # on the Thursday itself it expires at that close
        assert dt.date(2023, 4, 6) in chain.expiries()  # moved to the Thursday


def _straddle(chain, expiry: str) -> tuple[float, float, float]:
    """(mid, strike, years) of the at-the-money straddle expiring on ``expiry``."""
    rows = np.flatnonzero((chain.expiry == np.datetime64(expiry)) & chain.call)
    call = rows[np.argmin(np.abs(chain.strike[rows] - chain.spot))]
    put = chain.find(False, chain.strike[call], dt.date.fromisoformat(expiry))
    return float(chain.mid[call] + chain.mid[put]), float(chain.strike[call]), chain.years[call]


def _straddle_at(chain, strike: float, years: float, total_variance: float) -> float:
    from fieldrl.apps.options.pricing import bs_price

    vol = np.sqrt(total_variance / years)
    return float(sum(bs_price(chain.spot, strike, years, vol, chain.rate, chain.dividend_yield,
                              call) for call in (True, False)))  # fmt: skip


def test_replay_puts_the_announcements_variance_on_the_expiries_after_it():
    """A surface of 30/60/91-day maturities whose total variance is sigma^2 T + move^2
    (the announcement six days out): a 9-day straddle across it is priced at that total
    variance, and one expiring before it at sigma^2 T alone."""
    from fieldrl.apps.options.data import _replay_chain
    from fieldrl.apps.options.market import Underlying

    sigma, move, spot = 0.25, 0.05, 100.0
    smile = [(days, spot * np.exp(x)) for days in (30.0, 60.0, 91.0)
             for x in np.linspace(-0.3, 0.3, 7)]  # fmt: skip
    rows = pd.DataFrame([{"s": spot, "days": days, "k": k, "f": spot,
                          "impl_volatility": np.sqrt(sigma**2 + move**2 / (days / 365))}
                         for days, k in smile])  # fmt: skip
    rates = pd.DataFrame({"date": ["2023-01-02"] * 2, "days": [10.0, 365.0], "rate": [0.0, 0.0]})
    underlying = Underlying("XYZ", earnings=(dt.date(2023, 1, 31),))  # a Tuesday
    chain = _replay_chain(underlying, rows, "2023-01-25", rates, SpreadConfig())  # fmt: skip
    across, strike, years = _straddle(chain, "2023-02-03")
    assert across == pytest.approx(_straddle_at(chain, strike, years, sigma**2 * years + move**2),
                                   rel=0.02)  # fmt: skip
    before, strike, years = _straddle(chain, "2023-01-27")
    assert before == pytest.approx(_straddle_at(chain, strike, years, sigma**2 * years), rel=0.02)


def test_a_replayed_straddle_across_earnings_carries_the_event_variance():
    """AAPL reported after the close of 2023-02-02; its 30-day volatility fell from 31.2%
    to 27.7% the next day, an implied move of 4.1%. Five trading days before, the straddle
    expiring the day after the report is priced near sigma_after^2 T + move^2 (flat
    30-day volatility made it ~18% too cheap), and the one expiring before the report
    near sigma_after^2 T."""
    from fieldrl.apps.options.data import _qmoms

    surface = _qmoms()[0]

    def atm_30(day: str) -> float:
        return surface[(surface.id == 14593) & (surface.date == day) & (surface.days == 30)
                       & (surface.delta.abs() == 50)].impl_volatility.mean()  # fmt: skip

    after = atm_30("2023-02-03")
    move2 = (atm_30("2023-02-02") ** 2 - after**2) * 30 / 365
    chain = replay_market(["AAPL"], "2023-01-25", "2023-01-25", SpreadConfig()).chains[0]["AAPL"]
    across, strike, years = _straddle(chain, "2023-02-03")
    assert across == pytest.approx(_straddle_at(chain, strike, years, after**2 * years + move2),
                                   rel=0.10)  # fmt: skip
    before, strike, years = _straddle(chain, "2023-01-27")
    assert before == pytest.approx(_straddle_at(chain, strike, years, after**2 * years), rel=0.05)


def test_the_parity_spot_comes_from_the_nearest_expiry(tmp_path):
    """A far expiry's stale pair with a smaller call-put gap (100.05) must not win over the
    nearest expiry's (101)."""
    far = [{**r, "expiry": "2024-06-21", "bid": bid, "ask": bid + 0.1}
           for r, bid in zip(ROWS[:2], (4.95, 4.9), strict=True)]  # fmt: skip
    market = read_chains(write(tmp_path, [*ROWS[:2], *far]), rate=0.0)
    assert market.chains[0]["XYZ"].spot == pytest.approx(101.0)


def test_rate_and_dividend_yield_come_from_the_file_or_the_arguments(tmp_path):
    years = (dt.datetime(2024, 3, 15, 16) - dt.datetime(2024, 3, 1, 16)).days / 365
    given = read_chains(write(tmp_path, ROWS[:3]), rate=0.03, dividend_yield=0.01)
    chain = given.chains[0]["XYZ"]
    assert (chain.rate, chain.dividend_yield) == (0.03, 0.01)
    assert chain.spot == pytest.approx((1.0 + 100 * np.exp(-0.03 * years)) * np.exp(0.01 * years))
    columns = [{**r, "rate": 0.05, "dividend_yield": 0.02} for r in ROWS[:3]]
    chain = read_chains(write(tmp_path, columns), rate=0.03, dividend_yield=0.01).chains[0]["XYZ"]
    assert (chain.rate, chain.dividend_yield) == (0.05, 0.02)
    assert chain.spot == pytest.approx((1.0 + 100 * np.exp(-0.05 * years)) * np.exp(0.02 * years))
    with pytest.raises(DataError, match=r"row\(s\) \[2\].*column 'rate': a decimal"):
        read_chains(write(tmp_path, [{**columns[0], "rate": 4.5}, *columns[1:]]))


def test_chain_files_without_a_yield_column_take_the_configs(tmp_path):
    from fieldrl.apps.options.config import OptionsConfig, SyntheticConfig
    from fieldrl.apps.options.data import write_chains
    from fieldrl.apps.options.episodes import make_episodes
    from fieldrl.apps.options.sim import simulate, trading_times

    market = simulate(SyntheticConfig(), "XYZ", trading_times(dt.date(2025, 1, 6), 20), 0,
                      SpreadConfig())  # fmt: skip
    path = write_chains(market, tmp_path / "chains.csv")
    cfg = OptionsConfig(market={"data": [str(path)], "chain_dividend_yield": 0.02},
                        suite={"episode_days": 2})  # fmt: skip
    (episode,) = make_episodes(cfg, "eval", 1)
    assert {c["XYZ"].dividend_yield for c in episode.market.chains} == {0.02}
    with pytest.raises(ValueError, match="chain_dividend_yield"):
        OptionsConfig(market={"data": [str(path)], "chain_dividend_yield": 2.0})  # percent
