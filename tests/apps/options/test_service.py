"""The options service: an order checked against a posted portfolio (accepted with its
price, or refused with its code, leg and field), margin, Greeks and stress of the result,
the agent's proposal, bad chains and orders answered 4xx naming the field, and a posted
chain's implied volatilities and Greeks in its exercise style (a stock's American unless
told, an index's European)."""

import pytest
from fastapi.testclient import TestClient

from fieldrl.apps.options import APP
from fieldrl.apps.options.service import example_request
from fieldrl.runs import Run
from fieldrl.serving import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    cfg = APP.load_config("tiny", overrides=[f"experiment.runs_dir={root}"])
    from fieldrl.apps.options.pipeline import train_agent

    with Run.create(cfg, root=root) as run:
        train_agent(cfg, run=run)
    loaded = APP.open_run(run.dir)
    return TestClient(create_app(APP.service(loaded))), example_request(loaded)


def test_a_credit_spread_is_accepted_and_margined(client):
    api, body = client
    reply = api.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text
    out = reply.json()
    assert out["check"]["accepted"] and out["check"]["price"] < 0  # a credit
    assert out["margin"]["requirement"] == pytest.approx(500.0)
    assert out["stress"]["gap_down_20"] > 0 and out["proposal"]["action"] in ("hold", "close")


def test_a_refused_order_names_its_code_leg_and_field(client):
    api, body = client
    naked = dict(body, order={"underlying": "XYZ", "legs": [
        {"right": "call", "strike": 110, "expiry": "2025-02-21", "side": "sell", "quantity": 1}]},
        portfolio={"cash": 25_000.0, "margin_account": False}, propose=False)  # fmt: skip
    out = api.post("/v1/act", json=naked).json()
    assert out["check"] == {**out["check"], "accepted": False,
                            "code": "naked_call_in_cash_account"}  # fmt: skip
    leg = {"right": "put", "strike": 97, "expiry": "2025-02-21", "side": "buy", "quantity": 1}
    unlisted = dict(body, order={"underlying": "XYZ", "legs": [leg]})
    out = api.post("/v1/act", json=unlisted).json()["check"]
    assert (out["code"], out["leg"], out["field"]) == ("unlisted_contract", 0, "strike")


@pytest.mark.parametrize(
    ("change", "field"),
    [(lambda b: b["chain"]["options"][3].update(bid=9.0, ask=1.0), "chain.options.3.bid"),
     (lambda b: b["chain"]["options"][0].update(strike=-5), "strike"),
     (lambda b: b["order"]["legs"][1].update(quantity="two"), "quantity"),
     (lambda b: b["order"].update(underlying="ABC"), "order.underlying"),
     (lambda b: b["chain"]["options"].append(dict(b["chain"]["options"][0])), "chain.options"),
     (lambda b: b["portfolio"].update(cash=0.0), "portfolio.cash"),
     (lambda b: b["portfolio"].update(cash=-0.0), "portfolio.cash"),
     (lambda b: b["portfolio"].update(cash=1e-400), "portfolio.cash"),  # reads as 0
     (lambda b: b["chain"].update(spot=5e-324), "chain.spot"),
     (lambda b: b["portfolio"].update(positions=[{"underlying": "ABC", "instrument": "stock",
                                                  "side": "buy", "quantity": 100}]),
      "portfolio.positions.0.underlying"),
     (lambda b: b["portfolio"].update(positions=[{"right": "put", "strike": 95, "side": "sell",
                                                  "expiry": "2025-01-17", "quantity": 1}]),
      "portfolio.positions.0.expiry"),
     (lambda b: b.update(propose=1), "propose")],
    ids=["bid-above-ask", "negative-strike", "quantity-not-a-number", "other-underlying",
         "quoted-twice", "zero-cash", "negative-zero-cash", "underflowing-cash", "denormal-spot",
         "position-on-another-underlying", "expired-position", "propose-not-a-boolean"],
)  # fmt: skip
def test_bad_chains_and_orders_are_4xx_naming_the_field(client, change, field):
    import copy

    api, body = client
    bad = copy.deepcopy(body)
    change(bad)
    reply = api.post("/v1/act", json=bad)
    assert reply.status_code in (400, 422), reply.text
    assert any(field in d["field"] for d in reply.json()["detail"]), reply.text


def test_the_proposal_and_figures_read_the_posted_portfolio(client):
    api, body = client
    held = [{"right": "put", "strike": 95, "expiry": "2025-02-21", "side": "sell", "quantity": 2}]
    reply = api.post("/v1/act", json=dict(body, order=None, portfolio={
        "cash": 40_000.0, "positions": held}))  # fmt: skip
    out = reply.json()
    assert reply.status_code == 200 and out["check"] is None
    assert out["greeks"]["delta"] > 0  # two short puts: long delta
    assert out["proposal"]["action"] in ("hold", "close")  # it holds a strategy: no open
    bad = dict(body, portfolio={"cash": 1.0, "positions": [dict(held[0], quantity=-1)]})
    reply = api.post("/v1/act", json=bad)
    assert reply.status_code == 422 and "portfolio.positions.0.quantity" in reply.text


@pytest.mark.parametrize(
    ("fields", "american"),
    [({}, True), ({"style": "european"}, False), ({"index": True}, False),
     ({"index": True, "style": "american"}, True)],
    ids=["stock", "european-stock", "index", "american-index"],
)  # fmt: skip
def test_a_posted_chain_is_priced_in_its_exercise_style(client, fields, american):
    """A put 10% in the money, quoted at its American value at 30% volatility: read
    American, its implied volatility is 30% and its delta -0.6765; read European, 31.2% and
    -0.6462 (the Greeks were European whatever the chain)."""
    import datetime as dt

    from fieldrl.apps.options.pricing import american_price

    api, _ = client
    now, expiry = dt.datetime(2025, 1, 21, 15), dt.date(2025, 5, 16)
    years = (dt.datetime.combine(expiry, dt.time(16)) - now).total_seconds() / (365 * 86400)
    mid = round(float(american_price(100.0, 110.0, years, 0.3, 0.045, 0.0, False)), 2)
    put = {"expiry": str(expiry), "strike": 110.0, "right": "put"}
    chain = {"underlying": "XYZ", "time": now.isoformat(), "spot": 100.0, "rate": 0.045,
             "options": [{**put, "bid": mid, "ask": mid}], **fields}  # fmt: skip
    held = {**put, "side": "buy", "quantity": 1}
    reply = api.post("/v1/act", json={"chain": chain, "portfolio": {
        "cash": 10_000.0, "positions": [held]}})  # fmt: skip
    assert reply.status_code == 200, reply.text
    delta = -0.6765 if american else -0.6462  # at the volatility each style implies
    assert reply.json()["greeks"]["delta"] == pytest.approx(100 * 100 * delta, rel=1e-3)
