"""Fees and strategy-based margin on worked examples (Cboe Rule 10.3, FINRA 4210, the
IBKR tiered schedule)."""

import pytest

from fieldrl.apps.options.costs import Position, margin_requirement, order_fees


def put(quantity, strike, price=1.0, days=30):
    return Position("option", quantity, "put", strike, days, price)


def call(quantity, strike, price=1.0, days=30):
    return Position("option", quantity, "call", strike, days, price)


def test_a_naked_short_put_needs_premium_plus_20_percent_less_the_otm_amount():
    # short one 200 put at $1.20 with the stock at $209: 120 + (41.80 - 9) x 100 = $3,400
    m = margin_requirement([put(-1, 200, 1.20)], 209.0, margin_account=True)
    assert m["requirement"] == pytest.approx(3400.0)
    # far out of the money the floor (10% of the strike) binds: 5 + 0.10 x 100 x 100
    far = margin_requirement([put(-1, 100, 0.05)], 150.0, margin_account=True)
    assert far["requirement"] == pytest.approx(5 + 1000.0)
    index = margin_requirement([put(-1, 200, 1.20)], 209.0, margin_account=True, index=True)
    assert index["requirement"] == pytest.approx(120 + (0.15 * 209 - 9) * 100)


def test_a_credit_spread_needs_its_width_and_a_debit_spread_nothing():
    credit = margin_requirement([put(-1, 100, 2.0), put(1, 95, 0.8)], 103.0, margin_account=True)
    assert credit["requirement"] == pytest.approx(500.0)
    three = margin_requirement([put(-3, 100), put(3, 95)], 103.0, margin_account=False)
    assert three["requirement"] == pytest.approx(1500.0)  # allowed in a cash account too
    debit = margin_requirement([call(1, 100), call(-1, 105)], 103.0, margin_account=True)
    assert debit["requirement"] == 0.0 and debit["naked_calls"] == 0
    # a long leg expiring before the short one does not cover it
    early = margin_requirement([put(-1, 100, 2.0, 60), put(1, 95, 0.5, 30)], 103.0,
                               margin_account=True)  # fmt: skip
    assert early["requirement"] > 500.0


def test_an_iron_condor_needs_only_its_wider_side():
    legs = [put(1, 90), put(-1, 95), call(-1, 105), call(1, 112)]
    assert margin_requirement(legs, 100.0, margin_account=True)["requirement"] == 700.0


def test_covered_calls_and_cash_secured_puts():
    covered = [Position("stock", 200, price=100.0), call(-2, 110, 1.5)]
    cash = margin_requirement(covered, 100.0, margin_account=False)
    assert cash["requirement"] == 0.0 and cash["naked_calls"] == 0 and cash["loan_value"] == 0
    margin = margin_requirement(covered, 100.0, margin_account=True)
    assert margin["loan_value"] == pytest.approx(0.5 * 200 * 100.0)
    uncovered = margin_requirement([Position("stock", 100), call(-2, 110)], 100.0,
                                   margin_account=False)  # fmt: skip
    assert uncovered["naked_calls"] == 1
    csp = margin_requirement([put(-1, 50, 1.1)], 52.0, margin_account=False)
    assert csp["requirement"] == 5000.0  # the strike, held in cash (net of the $110 received)


def test_long_dated_long_options_have_loan_value_in_margin_accounts():
    leaps = margin_requirement([call(2, 100, 10.0, 400)], 100.0, margin_account=True)
    assert leaps["loan_value"] == pytest.approx(0.25 * 10.0 * 100 * 2)
    assert margin_requirement([call(2, 100, 10.0, 200)], 100.0,
                              margin_account=True)["loan_value"] == 0  # fmt: skip


def test_fees_follow_the_tiered_schedule():
    one = order_fees([("option", 1, 1.20)])
    assert one == pytest.approx(1.00 + 0.02815 + 0.025)  # the $1 order minimum binds
    ten = order_fees([("option", -10, 1.20)])
    assert ten == pytest.approx(6.50 + 10 * 0.05315)
    cheap = order_fees([("option", 10, 0.07), ("option", -10, 0.03)])
    assert cheap == pytest.approx(5.00 + 2.50 + 20 * 0.05315)
    assert order_fees([("stock", 100, 150.0), ("option", -1, 2.0)]) == pytest.approx(
        1.0 + 1.0 + 0.05315
    )


def test_verticals_pair_before_calendars():
    # a December put spread left open, and a January put spread: each short pairs with the
    # long of its own expiry (not the December short with the January long), so the
    # requirement is the two widths, not a naked January put
    legs = [put(-6, 155, 0.1, 16), put(6, 140, 0.05, 16), put(-6, 175, 1.0, 51),
            put(6, 165, 0.5, 51)]  # fmt: skip
    m = margin_requirement(legs, 190.0, margin_account=True)
    assert m["requirement"] == pytest.approx(6 * 100 * (15 + 10)) and m["naked"] == 0
