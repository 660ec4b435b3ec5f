"""The vectorised order engine against the account it mirrors: the same rejection code and
leg, fill price, cash, fees and margin over randomized orders and accounts, and the array
margin against ``costs.margin_requirement`` over randomized portfolios."""

import copy
import datetime as dt

import numpy as np
import pytest

from fieldrl.apps.options.account import Account, AccountRules
from fieldrl.apps.options.config import SpreadConfig
from fieldrl.apps.options.costs import MarginRules, Position, margin_requirement
from fieldrl.apps.options.engine import check_orders, strategy_margin
from fieldrl.apps.options.market import Chain, MarketView, Underlying, quotes
from fieldrl.apps.options.orders import Reject, Rejection, parse_order
from fieldrl.apps.options.pricing import bs_price

TODAY = dt.date(2023, 3, 1)
NOON = dt.datetime.combine(TODAY, dt.time(12, 0))
E1, E2 = dt.date(2023, 3, 17), dt.date(2024, 4, 19)  # E2 is LEAPS-dated: loan value
STRIKES = np.arange(180.0, 241.0, 5.0)


def make_chain(spot: float = 209.0) -> Chain:
    expiry = np.repeat(np.array((E1, E2), dtype="datetime64[D]"), 2 * len(STRIKES))
    strike = np.tile(np.concatenate([STRIKES, STRIKES]), 2)
    call = np.tile(np.repeat([True, False], len(STRIKES)), 2)
    c = Chain("XYZ", NOON, spot, 0.04, 0.0, expiry, strike, call, strike * 0, strike * 0,
              np.full(len(strike), 0.3))  # fmt: skip
    fair = bs_price(spot, strike, c.years, 0.3, 0.04, 0.0, call)
    intrinsic = np.where(call, np.maximum(spot - strike, 0), np.maximum(strike - spot, 0))
    c.bid, c.ask = quotes(SpreadConfig(), fair, intrinsic, c.years * 365)
    c.bid[c.find(False, 180.0, E1)] = 0.0  # no bid: selling it is refused
    return c


def make_view(chain: Chain, open_: bool = True) -> MarketView:
    return MarketView(chain.time, {"XYZ": ((chain.time, chain.spot),)}, {"XYZ": chain},
                      {"XYZ": Underlying("XYZ")}, open_)  # fmt: skip


def random_leg(rng: np.random.Generator) -> dict:
    if rng.random() < 0.12:
        return {"instrument": "stock", "side": rng.choice(["buy", "sell"]),
                "quantity": float(rng.choice([100, 200, 300, 50.5]))}  # fmt: skip
    odd = rng.random(3) < 0.04  # an unlisted strike, an expired or unlisted date, a bad size
    leg = {"side": str(rng.choice(["buy", "sell"])), "right": str(rng.choice(["call", "put"])),
           "strike": float(rng.choice([201.0, 207.0] if odd[0] else STRIKES)),
           "expiry": str(rng.choice([dt.date(2023, 2, 17), dt.date(2023, 3, 24)] if odd[1]
                                    else [E1, E1, E2])),
           "quantity": float(rng.choice([0, 1.5] if odd[2] else [1, 1, 1, 2, 3, 12]))}  # fmt: skip
    if rng.random() < 0.03:
        del leg["right"]
    if rng.random() < 0.03:
        leg["underlying"] = "ABC"
    return leg


def random_order(rng: np.random.Generator) -> object:
    legs = [
        random_leg(rng) for _ in range(int(rng.choice([1, 1, 2, 2, 2, 3, 4, 4, 4, 4] * 3 + [5])))
    ]
    data = {"underlying": "XYZ" if rng.random() > 0.02 else "ABC", "legs": legs,
            "order_type": str(rng.choice(["market", "market", "limit", "mid_offset"]))}  # fmt: skip
    if data["order_type"] == "limit" and rng.random() > 0.05:
        data["limit"] = float(rng.normal(0, 4))
    if data["order_type"] == "mid_offset":
        data["mid_offset"] = float(rng.normal(0, 0.5))
    return parse_order(data)


def random_account(rng: np.random.Generator) -> Account:
    rules = AccountRules(margin_account=bool(rng.random() < 0.7),
                         allow_naked=bool(rng.random() < 0.5),
                         max_contracts=int(rng.choice([6, 20, 50])),
                         fill=str(rng.choice(["mid", "spread", "impact"])))  # fmt: skip
    account = Account(float(rng.choice([1_500.0, 8_000.0, 40_000.0, 300_000.0])), rules)
    held = {}
    for _ in range(int(rng.integers(0, 4))):  # 207 is not listed: closing it is quoted
        key = ("option", str(rng.choice(["call", "put"])), float(rng.choice([200.0, 207.0, 215.0])),
               E1 if rng.random() < 0.7 else E2)  # fmt: skip
        held[key] = float(rng.choice([-2, -1, 1, 2, 3]))
    stock = float(rng.choice([0, 0, 100, 200, -100]))
    if stock:
        held[("stock", None, None, None)] = stock
    if held:
        account.positions["XYZ"] = held
    return account


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_engine_agrees_with_the_account_on_randomized_orders(seed):
    rng = np.random.default_rng(seed)
    chain = make_chain()
    seen: set[str] = set()
    for round_ in range(12):
        account = random_account(rng)
        view = make_view(chain, open_=round_ != 0)
        orders = [random_order(rng) for _ in range(40)]
        checks = check_orders(account, orders, view)
        for i, order in enumerate(orders):
            trial = copy.deepcopy(account)
            try:
                fill = trial.submit(order, view)
                code, leg = "", -1
            except Rejection as exc:
                fill, code, leg = None, exc.code.value, -1 if exc.leg is None else exc.leg
            where = f"seed {seed} round {round_} order {i}: {order.model_dump_json()}"
            assert (checks.code[i], checks.leg[i]) == (code, leg), where
            seen.add(code)
            assert bool(checks.rests[i]) == (not code and fill is None), where
            if fill is not None:
                assert checks.price[i] == pytest.approx(fill.price, abs=1e-9), where
                assert checks.cash[i] == pytest.approx(fill.cash, abs=1e-6), where
                assert checks.fees[i] == pytest.approx(fill.fees, abs=1e-9), where
                after = trial.requirement(view)
                for key in ("requirement", "loan_value", "naked", "naked_calls"):
                    assert getattr(checks, key)[i] == pytest.approx(after[key], abs=1e-6), where
        assert account.rejections == {}  # a check counts nothing
    # the draws reach every code a trade order can get, and acceptance
    trade_codes = {r.value for r in Reject} - {
            Reject.EUROPEAN_EARLY_EXERCISE.value, Reject.NOTHING_TO_EXERCISE.value,
        Reject.RETRIES_EXHAUSTED.value, Reject.STRATEGY_OPEN.value}  # fmt: skip
    assert seen >= trade_codes | {""}, sorted((trade_codes | {""}) - seen)


def random_portfolio(rng: np.random.Generator, width: int) -> list[Position]:
    out = []
    for _ in range(width):
        q = float(rng.choice([0, -3, -2, -1, 1, 2, 3]))
        out.append(Position("option", q, str(rng.choice(["call", "put"])),
                            float(rng.choice([90.0, 95.0, 100.0, 105.0, 110.0])),
                            float(rng.choice([5.5, 30.5, 30.5, 400.5])),
                            float(rng.uniform(0.1, 12.0))))  # fmt: skip
    return out


@pytest.mark.parametrize("margin_account", [True, False])
def test_the_array_margin_is_margin_requirement(margin_account):
    rng = np.random.default_rng(int(margin_account))
    for index in (False, True):
        for secure_puts in (False, True):
            books = [random_portfolio(rng, 6) for _ in range(150)]
            stock = rng.choice([0.0, 100.0, 300.0, -100.0], size=len(books))

            def column(name, books=books):
                return np.array([[getattr(p, name) for p in book] for book in books])

            got = strategy_margin(column("quantity"), column("right") == "call",
                                  column("strike"), column("expiry_days"), column("price"),
                                  stock, 101.0, margin_account=margin_account, index=index,
                                  rules=MarginRules(), secure_puts=secure_puts)  # fmt: skip
            for i, book in enumerate(books):
                shares = [Position("stock", stock[i], price=101.0)] if stock[i] else []
                want = margin_requirement(book + shares, 101.0, margin_account=margin_account,
                                          index=index, secure_puts=secure_puts)  # fmt: skip
                for key, value in want.items():
                    assert got[key][i] == pytest.approx(value, abs=1e-6), (i, key, book)


def test_closing_a_contract_no_longer_listed_is_quoted_as_the_account_quotes_it():
    account = Account(50_000)
    account.positions["XYZ"] = {("option", "put", 207.0, E1): -2.0}
    close = parse_order({"underlying": "XYZ", "legs": [{"side": "buy", "right": "put",
                         "strike": 207.0, "expiry": str(E1), "quantity": 2}]})  # fmt: skip
    view = make_view(make_chain())
    checks = check_orders(account, [close], view)
    fill = account.submit(close, view)
    assert checks.code[0] == "" and checks.price[0] == pytest.approx(fill.price, abs=1e-12)
    assert account.positions["XYZ"] == {} and checks.requirement[0] == pytest.approx(0.0)


def test_exercise_orders_are_left_to_the_account():
    order = parse_order({"underlying": "XYZ", "action": "exercise",
                         "legs": [{"side": "buy", "right": "call", "strike": 200.0,
                                   "expiry": str(E1), "quantity": 1}]})  # fmt: skip
    with pytest.raises(ValueError, match="exercise"):
        check_orders(Account(10_000), [order], make_view(make_chain()))
