"""The rat service (observation in, action out, per-session state, activations on request,
bad observations answered 4xx) and the NWB export of a run's activity."""

import json

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from fieldrl.apps.rat import APP
from fieldrl.apps.rat.export import export_activations
from fieldrl.apps.rat.pipeline import train
from fieldrl.apps.rat.service import example_request
from fieldrl.runs import Run
from fieldrl.serving import create_app


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    cfg = APP.load_config("tiny", overrides=[f"experiment.runs_dir={root}"])
    with Run.create(cfg, root=root) as run:
        train(cfg, run=run)
    return run.dir


@pytest.fixture(scope="module")
def client(run_dir):
    loaded = APP.open_run(run_dir)
    return TestClient(create_app(APP.service(loaded))), example_request(loaded)


def test_explore_returns_38_targets_and_keeps_the_sessions_latent(client):
    api, body = client
    first = api.post("/v1/act", json=body)
    assert first.status_code == 200, first.text
    out = first.json()
    assert len(out["action"]) == 38 and max(map(abs, out["action"])) <= 1
    assert out["step"] == 1 and len(out["activations"]["latent"]) == 4
    second = api.post("/v1/act", json=body).json()
    assert second["step"] == 2 and second["activations"]["latent"] != out["activations"]["latent"]
    other = api.post("/v1/act", json=dict(body, session="other")).json()
    assert other["step"] == 1
    again = api.post("/v1/act", json=dict(body, reset=True)).json()
    assert again["step"] == 1 and again["activations"]["latent"] == out["activations"]["latent"]


def test_track_needs_a_reference_and_reports_the_core(client):
    api, body = client
    info = api.get("/v1/info").json()
    window = info["reference_window"]
    reply = api.post("/v1/act", json=dict(body, mode="track", reference=[0.0] * window))
    assert reply.status_code == 200, reply.text
    acts = reply.json()["activations"]
    assert len(acts["core_hidden"]) == 16 and sum(acts["adapter_code"]) == pytest.approx(1.0)
    missing = api.post("/v1/act", json=dict(body, mode="track"))
    assert missing.status_code == 422 and "reference" in missing.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda b: b["observation"].pop(), "observation"),
        (lambda b: b["observation"].__setitem__(3, float("nan")), "observation"),
        (lambda b: b.__setitem__("mode", "dance"), "mode"),
        (lambda b: b.__setitem__("session", "a b"), "session"),
        (lambda b: b.__setitem__("mode", "task"), "mode"),
    ],
)
def test_bad_requests_are_4xx_naming_the_field(client, change, field):
    api, body = client
    bad = {**body, "observation": list(body["observation"])}
    change(bad)
    # json.dumps writes NaN as the bare token NaN, which the service must refuse by name
    reply = api.post(
        "/v1/act", content=json.dumps(bad), headers={"content-type": "application/json"}
    )
    assert 400 <= reply.status_code < 500 and field in reply.text, reply.text


@pytest.mark.parametrize("mode", ["track", "explore"])
def test_the_nwb_export_reads_back(run_dir, tmp_path, mode):
    from pynwb import NWBHDF5IO

    path = export_activations(run_dir, tmp_path / "rat.nwb", mode, episodes=1, seconds=0.3)
    with NWBHDF5IO(str(path), "r") as io:
        nwb = io.read()
        angles = nwb.acquisition["joint_angles"].data[:]
        network = nwb.processing["network"]
        name = "core_hidden" if mode == "track" else "latent"
        activity = network[name].data[:]
        assert angles.shape[1] == 67 and len(activity) == len(angles) > 0
        assert np.isfinite(activity).all()
        assert "hip_L_extend" in nwb.acquisition["joint_angles"].description
        assert len(nwb.trials) == 1
    assert not list(tmp_path.glob("*.partial*"))


@pytest.mark.parametrize("value", [3e38, 1e30, -1001.0])
def test_an_input_beyond_the_bound_is_a_422_and_leaves_the_session_as_it_was(client, value):
    api, body = client
    window = api.get("/v1/info").json()["reference_window"]
    for session in ("poisoned", "clean"):
        assert api.post("/v1/act", json=dict(body, session=session, reset=True)).status_code == 200
    bad = list(body["observation"])
    bad[7] = value
    reply = api.post("/v1/act", json=dict(body, session="poisoned", observation=bad))
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "observation.7"
    track = dict(body, session="poisoned", mode="track", reference=[value] * window)
    reply = api.post("/v1/act", json=track)
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "reference.0"
    after = [api.post("/v1/act", json=dict(body, session=s)).json() for s in ("poisoned", "clean")]
    assert after[0]["step"] == after[1]["step"] == 2
    assert after[0]["action"] == after[1]["action"]


def test_a_failed_request_stores_no_session_so_it_evicts_none(client, monkeypatch):
    from fieldrl.apps.rat import service as rat_service

    api, body = client
    monkeypatch.setattr(rat_service, "MAX_SESSIONS", 2)
    assert api.post("/v1/act", json=dict(body, session="kept", reset=True)).json()["step"] == 1
    for i in range(3):  # track mode without its reference: refused after the session lookup
        reply = api.post("/v1/act", json=dict(body, session=f"failed-{i}", mode="track"))
        assert reply.status_code == 422
    assert api.post("/v1/act", json=dict(body, session="kept")).json()["step"] == 2


def test_the_schema_states_the_lengths_the_run_needs(client):
    api, body = client
    info = api.get("/v1/info").json()
    schema = api.get("/openapi.json").json()["components"]["schemas"]["RatRequest"]
    observation = schema["properties"]["observation"]
    assert observation["minItems"] == info["proprioception"] == len(body["observation"])
    reference = next(s for s in schema["properties"]["reference"]["anyOf"] if s["type"] == "array")
    assert reference["minItems"] == reference["maxItems"] == info["reference_window"]
