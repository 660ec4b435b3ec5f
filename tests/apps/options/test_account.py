"""The account: every rejection code, fills and fees, margin as buying power, exercise,
assignment (early, before an ex-dividend date, and at expiry) and cash settlement."""

import datetime as dt

import numpy as np
import pytest

from fieldrl.apps.options.account import Account, AccountRules
from fieldrl.apps.options.config import SpreadConfig
from fieldrl.apps.options.market import CLOSE, Chain, MarketView, Underlying, quotes
from fieldrl.apps.options.orders import Reject, Rejection, parse_order
from fieldrl.apps.options.pricing import bs_price

TODAY = dt.date(2023, 3, 1)
NOON = dt.datetime.combine(TODAY, dt.time(12, 0))
E1, E2 = dt.date(2023, 3, 17), dt.date(2023, 4, 21)


def chain(spot=209.0, time=NOON, vol=0.3, expiries=(E1, E2)):
    strikes = np.arange(180.0, 241.0, 5.0)
    expiry = np.repeat(np.array(expiries, dtype="datetime64[D]"), 2 * len(strikes))
    strike = np.tile(np.concatenate([strikes, strikes]), len(expiries))
    call = np.tile(np.repeat([True, False], len(strikes)), len(expiries))
    c = Chain("XYZ", time, spot, 0.04, 0.0, expiry, strike, call, strike * 0, strike * 0,
              np.full(len(strike), vol))  # fmt: skip
    fair = bs_price(spot, strike, c.years, vol, 0.04, 0.0, call)
    intrinsic = np.where(call, np.maximum(spot - strike, 0), np.maximum(strike - spot, 0))
    c.bid, c.ask = quotes(SpreadConfig(), fair, intrinsic, c.years * 365)
    return c


STOCK = Underlying("XYZ")


def view(c=None, underlying=STOCK, open_=True):
    c = c or chain()
    return MarketView(c.time, {"XYZ": ((c.time, c.spot),)}, {"XYZ": c}, {"XYZ": underlying},
                      open_)  # fmt: skip


def order(*legs, **kw):
    return parse_order({"underlying": "XYZ", "legs": list(legs), **kw})


def opt(side, right, strike, expiry=E1, quantity=1, **kw):
    return {"side": side, "right": right, "strike": strike, "expiry": str(expiry),
            "quantity": quantity, **kw}  # fmt: skip


def rejected(account, o, v=None):
    with pytest.raises(Rejection) as info:
        account.submit(o, v or view())
    return info.value


def test_a_filled_order_moves_cash_by_price_and_fees():
    account = Account(10_000, AccountRules(fill="spread"))
    c = chain()
    row = c.find(True, 210, E1)
    fill = account.submit(order(opt("buy", "call", 210, quantity=2), order_type="market"), view(c))
    assert fill.price == pytest.approx(c.ask[row])
    assert fill.fees == pytest.approx(max(2 * 0.65, 1.0) + 2 * 0.05315)
    assert account.cash == pytest.approx(10_000 - 2 * 100 * c.ask[row] - fill.fees)
    assert account.positions["XYZ"] == {("option", "call", 210.0, E1): 2}
    # marked at mid, the position is worth less than was paid: the spread and fees
    assert account.nav(view(c)) < 10_000


def test_a_credit_spread_fills_at_mid_with_mid_fills_and_holds_its_width():
    account = Account(10_000, AccountRules(fill="mid"))
    c = chain()
    spread = order(opt("sell", "put", 200), opt("buy", "put", 195))
    fill = account.submit(spread, view(c))
    mids = c.mid
    expected = -mids[c.find(False, 200, E1)] + mids[c.find(False, 195, E1)]
    assert fill.price == pytest.approx(expected) and fill.price < 0  # a credit
    assert account.requirement(view(c))["requirement"] == pytest.approx(500.0)


def test_every_rejection_code():
    account = Account(5_000, AccountRules(margin_account=False, max_contracts=10))
    later = dt.date(2023, 2, 17)
    cases = {
        Reject.TOO_MANY_LEGS: order(*(opt("buy", "call", k) for k in (190, 195, 200, 205, 210))),
        Reject.UNKNOWN_UNDERLYING: parse_order({"underlying": "ABC",
                                                "legs": [opt("buy", "call", 200)]}),
        Reject.MIXED_UNDERLYINGS: order(opt("buy", "call", 200, underlying="ABC")),
        Reject.UNLISTED: order(opt("buy", "call", 201)),
        Reject.EXPIRED: order(opt("buy", "call", 200, expiry=later)),
        Reject.BAD_QUANTITY: order(opt("buy", "call", 200, quantity=1.5)),
        Reject.DUPLICATE_LEG: order(opt("buy", "call", 200), opt("sell", "call", 200)),
        Reject.PRICE_OUTSIDE_QUOTE: order(opt("buy", "call", 200), order_type="limit", limit=50.0),
        Reject.NAKED_CALL_CASH: order(opt("sell", "call", 230)),
        Reject.SHORT_STOCK: order({"instrument": "stock", "side": "sell", "quantity": 100}),
        Reject.INSUFFICIENT_BUYING_POWER: order(opt("sell", "put", 200)),  # cash-secured: $20,000
        Reject.POSITION_LIMIT: order(opt("buy", "call", 235, quantity=11)),
        Reject.NOTHING_TO_EXERCISE: order(opt("buy", "call", 200), action="exercise"),
    }  # fmt: skip
    for code, o in cases.items():
        assert rejected(account, o).code == code, code
    assert rejected(account, order(opt("buy", "call", 200, quantity=0))).code == Reject.BAD_QUANTITY
    no_bid = chain()
    no_bid.bid[no_bid.find(False, 180, E1)] = 0.0
    code = rejected(account, order(opt("sell", "put", 180)), view(no_bid)).code
    assert code == Reject.NO_QUOTE
    closed = view(open_=False)
    assert rejected(account, order(opt("buy", "call", 200)), closed).code == Reject.MARKET_CLOSED
    after = view(chain(time=dt.datetime.combine(TODAY, dt.time(16, 30))))
    assert rejected(account, order(opt("buy", "call", 200)), after).code == Reject.MARKET_CLOSED
    strict = Account(100_000, AccountRules(allow_naked=True, margin_account=True))
    strict.rules = AccountRules(allow_naked=False)
    assert rejected(strict, order(opt("sell", "call", 230))).code == Reject.NAKED_SHORT_NOT_ALLOWED
    strict.submit(order(opt("sell", "put", 200)), view())  # a put is cash-secured instead
    assert strict.requirement(view())["requirement"] == pytest.approx(200 * 100)
    index = Underlying("XYZ", style="european", settlement="cash_pm", index=True)
    euro = Account(10_000)
    euro.submit(order(opt("buy", "call", 200)), view(underlying=index))
    code = rejected(
        euro, order(opt("buy", "call", 200), action="exercise"), view(underlying=index)
    ).code
    assert code == Reject.EUROPEAN_EARLY_EXERCISE
    assert sum(account.rejections.values()) == len(cases) + 4 and account.cash == 5_000
    assert account.positions == {} and account.fills == []


def test_a_schema_error_names_the_leg_and_field():
    with pytest.raises(Rejection) as info:
        parse_order('{"underlying": "XYZ", "legs": [{"side": "buy", "quantity": 1}, '
                    '{"side": "buy", "quantity": 1, "strike": -5}]}')  # fmt: skip
    assert info.value.code == Reject.SCHEMA and info.value.leg == 1 and info.value.field == "strike"
    with pytest.raises(Rejection, match="schema_invalid"):
        parse_order("{not json")


def test_a_limit_below_the_modelled_fill_rests_unfilled():
    account = Account(10_000, AccountRules(fill="spread"))
    c = chain()
    row = c.find(True, 210, E1)
    assert account.submit(order(opt("buy", "call", 210), order_type="limit",
                                limit=float(c.bid[row])), view(c)) is None  # fmt: skip
    assert account.cash == 10_000 and not account.positions


def test_expiry_exercises_in_the_money_options_and_lets_the_rest_expire():
    account = Account(50_000)
    account.submit(order(opt("buy", "call", 200), opt("sell", "put", 190)), view())
    close = view(chain(spot=205.0, time=dt.datetime.combine(E1, CLOSE), expiries=(E2,)))
    cash = account.cash
    events = account.settle(close)
    assert {e["event"] for e in events} == {"expiry", "expired"}
    assert account.positions["XYZ"] == {("stock", None, None, None): 100}
    assert account.cash == pytest.approx(cash - 200 * 100)


def test_an_index_option_settles_in_cash():
    index = Underlying("XYZ", style="european", settlement="cash_pm", index=True)
    account = Account(50_000)
    account.submit(order(opt("buy", "call", 200)), view(underlying=index))
    cash = account.cash
    close = chain(spot=212.0, time=dt.datetime.combine(E1, CLOSE), expiries=(E2,))
    account.settle(view(close, underlying=index))
    assert account.positions["XYZ"] == {} and account.cash == pytest.approx(cash + 1200.0)


def test_a_short_itm_call_is_assigned_the_day_before_ex_dividend():
    ex_date = TODAY + dt.timedelta(days=1)
    stock = Underlying("XYZ", dividends=((ex_date, 3.0),))
    account = Account(100_000)
    v = view(underlying=stock)
    account.submit(order({"instrument": "stock", "side": "buy", "quantity": 100},
                         opt("sell", "call", 180)), v)  # fmt: skip
    assert account.positions["XYZ"][("option", "call", 180.0, E1)] == -1
    events = account.settle(v)
    assert [e["event"] for e in events] == ["early assignment"]
    assert account.positions["XYZ"] == {}  # the covering shares were delivered


def test_long_options_can_be_exercised_early_when_american():
    account = Account(50_000)
    account.submit(order(opt("buy", "call", 190)), view())
    cash = account.cash
    account.submit(order(opt("buy", "call", 190), action="exercise"), view())
    assert account.positions["XYZ"] == {("stock", None, None, None): 100}
    assert account.cash == pytest.approx(cash - 19_000)


def test_review_fixes_exercise_and_schema_and_stock_pricing():
    account = Account(50_000)
    account.submit(order(opt("buy", "call", 190)), view())
    cash, held = account.cash, dict(account.positions["XYZ"])
    for quantity in (-3, 0, 1.5):  # an exercise cannot create contracts or cash
        bad = order(opt("buy", "call", 190, quantity=quantity), action="exercise")
        assert rejected(account, bad).code == Reject.BAD_QUANTITY
    assert account.cash == cash and account.positions["XYZ"] == held
    poor = Account(1_000)
    poor.positions = {"XYZ": {("option", "call", 190.0, E1): 1.0}}
    exercise = order(opt("buy", "call", 190), action="exercise")
    assert rejected(poor, exercise).code == Reject.INSUFFICIENT_BUYING_POWER  # $19,000
    assert poor.positions["XYZ"] == {("option", "call", 190.0, E1): 1.0} and poor.cash == 1_000
    no_strike = order({"side": "buy", "right": "call", "expiry": str(E1), "quantity": 1})
    assert rejected(account, no_strike).code == Reject.SCHEMA
    shares = Account(100_000).submit(order({"instrument": "stock", "side": "buy",
                                            "quantity": 100}), view())  # fmt: skip
    assert shares.price == pytest.approx(209.0)  # a share, not a hundredth of one


def test_an_impact_fill_fills_market_orders_beyond_the_quote():
    account = Account(100_000, AccountRules(fill="impact"))
    c = chain()
    row = c.find(True, 210, E1)
    fill = account.submit(order(opt("buy", "call", 210, quantity=20)), view(c))
    assert fill is not None and fill.price > c.ask[row]  # 20 contracts move the price


def test_short_stock_needs_150_percent():
    from fieldrl.apps.options.costs import Position, margin_requirement

    m = margin_requirement([Position("stock", -100, price=50.0)], 50.0, margin_account=True)
    assert m["requirement"] == pytest.approx(7_500.0)
