import asyncio
import datetime
import http.client
import json
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn
from fastapi.testclient import TestClient
from pydantic import BaseModel, field_validator

from fieldrl.serving import (
    BinaryInput,
    InputError,
    RequestModel,
    ResponseModel,
    ServiceSpec,
    create_app,
)


class Req(RequestModel):
    observations: list[list[float]]


class Resp(ResponseModel):
    actions: list[float]


def act(request: Req) -> Resp:
    for i, row in enumerate(request.observations):
        if len(row) != 2:
            raise InputError(f"observations.{i}", f"expected 2 values, got {len(row)}")
        if row[0] == 999:
            raise RuntimeError("bug")
    return Resp(actions=[sum(row) for row in request.observations])


SPEC = ServiceSpec("toy", Req, Resp, act, model_version="v1", config_hash="abc", info={"k": 1})


@pytest.fixture
def client():
    return TestClient(
        create_app(SPEC, token="", max_body_bytes=2000), raise_server_exceptions=False
    )


def assert_still_serving(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.post("/v1/act", json={"observations": [[1, 2]]}).json() == {"actions": [3.0]}


def test_round_trip_and_info(client):
    assert_still_serving(client)
    info = client.get("/v1/info").json()
    assert info["app"] == "toy" and info["model_version"] == "v1" and info["config_hash"] == "abc"
    assert "observations" in info["input_schema"]["properties"] and info["k"] == 1
    assert client.get("/openapi.json").status_code == 200


def test_malformed_json(client):
    reply = client.post(
        "/v1/act", content=b'{"observations": [[1,', headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400 and "malformed JSON" in reply.json()["error"]
    assert_still_serving(client)


def test_wrong_shape_names_the_row(client):
    reply = client.post("/v1/act", json={"observations": [[1, 2], [1, 2, 3]]})
    assert reply.status_code == 422
    assert reply.json()["detail"] == [
        {"field": "observations.1", "message": "expected 2 values, got 3"}
    ]
    assert_still_serving(client)


def test_wrong_type_and_unknown_field(client):
    reply = client.post("/v1/act", json={"observations": [["a", 2]]})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "observations.0.0"
    reply = client.post("/v1/act", json={"observations": [[1, 2]], "extra": 1})
    assert reply.status_code == 422 and "extra" in reply.json()["error"]
    reply = client.post("/v1/act", json={})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "observations"


class Nested(BaseModel):  # a plain model inside a request is held to the same types
    size: float = 0.0


class Typed(RequestModel):
    inner: Nested = Nested()
    count: int = 1
    flag: bool = False
    day: datetime.date | None = None
    rate: float = 0.0


@pytest.mark.parametrize(
    "field, value",
    [("count", True), ("count", "1"), ("count", 1.5), ("flag", 0), ("flag", "true"),
     ("day", 0), ("rate", False), ("rate", "1"), ("inner", {"size": True})],
)  # fmt: skip
def test_a_value_of_the_wrong_json_type_is_a_422_naming_the_field(field, value):
    typed = ServiceSpec("typed", Typed, Resp, lambda r: Resp(actions=[r.rate]), "v1", "abc")
    client = TestClient(create_app(typed, token=""), raise_server_exceptions=False)
    reply = client.post("/v1/act", json={field: value})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"].startswith(field)
    good = {"count": 2, "flag": True, "day": "2024-01-02", "rate": 1}  # an integer is a number
    assert client.post("/v1/act", json=good).json() == {"actions": [1.0]}


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_rejected(client, literal):
    body = f'{{"observations": [[1, {literal}]]}}'
    reply = client.post("/v1/act", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "observations.0.1"
    assert_still_serving(client)


def test_oversized_body(client):
    body = json.dumps({"observations": [[1.0, 2.0]] * 500})
    reply = client.post("/v1/act", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 413 and "limit" in reply.json()["error"]

    def chunks():  # no Content-Length: the streamed size is counted
        for _ in range(10):
            yield b" " * 500

    reply = client.post("/v1/act", content=chunks(), headers={"content-type": "application/json"})
    assert reply.status_code == 413
    assert_still_serving(client)


def test_internal_error_is_json_and_server_survives(client):
    reply = client.post("/v1/act", json={"observations": [[999, 1]]})
    assert reply.status_code == 500 and reply.json() == {"error": "internal error: RuntimeError"}
    assert_still_serving(client)


def test_token_required_when_set(monkeypatch):
    monkeypatch.setenv("FIELDRL_API_TOKEN", "s3cret")
    client = TestClient(create_app(SPEC))
    body = {"observations": [[1, 2]]}
    assert client.post("/v1/act", json=body).status_code == 401
    wrong = client.post("/v1/act", json=body, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"].startswith("missing or wrong")
    assert client.get("/v1/info").status_code == 401
    assert client.get("/healthz").status_code == 200
    good = client.post("/v1/act", json=body, headers={"Authorization": "Bearer s3cret"})
    assert good.status_code == 200 and good.json() == {"actions": [3.0]}


def test_binary_input_route_and_the_apps_own_body_cap():
    def decode(body: bytes) -> Req:
        try:
            values = [float(v) for v in body.decode().split(",")]
        except ValueError:
            raise InputError("body", "expected comma-separated numbers") from None
        return Req(observations=[values])

    csv = BinaryInput("text/csv", decode)
    spec = ServiceSpec("toy", Req, Resp, act, "v1", "abc", max_body_bytes=300,
                       binary_inputs={"csv": csv})  # fmt: skip
    client = TestClient(create_app(spec, token=""))
    ok = client.post("/v1/act/csv", content=b"1,2", headers={"content-type": "text/csv"})
    assert ok.json() == {"actions": [3.0]}
    bad = client.post("/v1/act/csv", content=b"1,x", headers={"content-type": "text/csv"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "body"
    wrong_type = client.post("/v1/act/csv", content=b"1,2", headers={"content-type": "text/plain"})
    assert wrong_type.status_code == 415
    big = client.post("/v1/act/csv", content=b"1," * 200, headers={"content-type": "text/csv"})
    assert big.status_code == 413  # the spec's cap, not the 8 MiB default
    assert client.get("/v1/info").json()["binary_inputs"] == {"/v1/act/csv": "text/csv"}


def _asgi_post(api, headers, receive):
    """One POST /v1/act straight through the ASGI app; the messages it sent."""
    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "http", "path": "/v1/act", "raw_path": b"/v1/act",
             "root_path": "", "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}  # fmt: skip
    asyncio.run(api(scope, receive, send))
    return sent


def test_a_request_without_the_token_costs_nothing_its_body_is_never_read():
    async def receive():
        raise AssertionError("the body was read before the token was checked")

    api = create_app(SPEC, token="s3cret")
    for auth in ([], [(b"authorization", b"Bearer nope")], [(b"authorization", b"s3cret")]):
        headers = [(b"content-type", b"application/json"), (b"content-length", b"90000000")]
        start = _asgi_post(api, headers + auth, receive)[0]
        assert start["status"] == 401
        assert (b"connection", b"close") in start["headers"]
    client = TestClient(create_app(SPEC, token="s3cret"))
    malformed = client.post(
        "/v1/act", content=b'{"obs', headers={"content-type": "application/json"}
    )
    assert malformed.status_code == 401  # not 400: nothing is parsed without the token


def test_deep_nesting_and_wrong_content_type_get_the_documented_error_body(client):
    deep = b'{"observations": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    big = TestClient(create_app(SPEC, token="", max_body_bytes=300_000))
    reply = big.post("/v1/act", content=deep, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and "recursion" in reply.json()["error"]
    reply = client.post(
        "/v1/act", content=b"observations=1", headers={"content-type": "text/plain"}
    )
    assert reply.status_code == 415 and set(reply.json()) == {"error"}
    assert_still_serving(client)


def test_openapi_lists_every_error_with_its_body_and_the_request_schema():
    spec = TestClient(create_app(SPEC, token="s3cret")).get("/openapi.json").json()
    act = spec["paths"]["/v1/act"]["post"]
    assert {"400", "401", "413", "415", "422", "500"} <= set(act["responses"])
    for code in ("400", "401", "413", "415", "422", "500"):
        schema = act["responses"][code]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/ErrorBody"}
    ref = act["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert spec["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]["observations"]
    opened = TestClient(create_app(SPEC, token="")).get("/openapi.json").json()
    assert "401" not in opened["paths"]["/v1/act"]["post"]["responses"]


def test_a_non_finite_value_never_reaches_a_response(client):
    reply = client.post("/v1/act", json={"observations": [[1e308, 1e308]]})  # sums to inf
    assert reply.status_code == 500 and "null" not in reply.text
    assert_still_serving(client)


@contextmanager
def live(api):
    """``api`` on a real uvicorn server on a free loopback port (for connection behaviour)."""
    server = uvicorn.Server(uvicorn.Config(api, host="127.0.0.1", port=0, log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)


def _post(connection, body):
    connection.request("POST", "/v1/act", json.dumps(body), {"content-type": "application/json"})
    reply = connection.getresponse()
    return reply.status, reply.read()


def test_an_error_keeps_the_keep_alive_connection_usable():
    with live(create_app(SPEC, token="")) as port:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        assert _post(connection, {"observations": [[999, 1]]})[0] == 500
        assert _post(connection, {"observations": [[1, 2]]}) == (200, b'{"actions":[3.0]}')
        assert _post(connection, {"observations": [[1, 2, 3]]})[0] == 422
        assert _post(connection, {"observations": [[1, 2]]})[0] == 200


def test_parsing_a_large_request_does_not_block_health_checks():
    parsing, release = threading.Event(), threading.Event()

    class Slow(RequestModel):
        observations: list[list[float]]

        @field_validator("observations")
        @classmethod
        def stall(cls, value):  # stands in for parsing a 30 MiB body
            parsing.set()
            release.wait(5)
            return value

    spec = ServiceSpec("toy", Slow, Resp, act, model_version="v1", config_hash="abc")
    with live(create_app(spec, token="")) as port:
        result = []
        slow = threading.Thread(target=lambda: result.append(_post(
            http.client.HTTPConnection("127.0.0.1", port, timeout=10), {"observations": [[1, 2]]}
        )))  # fmt: skip
        slow.start()
        assert parsing.wait(5)
        health = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        health.request("GET", "/healthz")
        assert health.getresponse().status == 200  # answered while the request is parsed
        release.set()
        slow.join(10)
        assert result == [(200, b'{"actions":[3.0]}')]
