import json

import pytest
from fastapi.testclient import TestClient
from pydantic import BaseModel

from fieldrl.serving import BinaryInput, InputError, RequestModel, ServiceSpec, create_app


class Req(RequestModel):
    observations: list[list[float]]


class Resp(BaseModel):
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
