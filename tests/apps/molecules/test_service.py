"""The molecule service: posted SMILES scored as the objective scores them, invalid ones
reported per item, and the work of one request bounded (heavy atoms a molecule, CPU seconds
of scoring), each bound a 422 naming the field."""

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fieldrl.apps.molecules import APP
from fieldrl.apps.molecules import service as molecules_service
from fieldrl.apps.molecules.oracles import TASKS, to_mol
from fieldrl.apps.molecules.service import MAX_HEAVY_ATOMS, example_request
from fieldrl.cli import build_root
from fieldrl.serving import create_app


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    args = ["molecules", "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}"]
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    (run,) = (root / "molecules").iterdir()
    loaded = APP.open_run(run)
    return TestClient(create_app(APP.service(loaded))), example_request(loaded)


def test_posted_smiles_are_scored_as_the_objective_scores_them(served):
    api, body = served
    reply = api.post("/v1/act", json=body)
    assert reply.status_code == 200, reply.text
    posted = [m for m in reply.json()["molecules"] if m["source"] == "posted"]
    aspirin, broken = posted
    assert aspirin["score"] == pytest.approx(float(TASKS["qed"]([to_mol(aspirin["smiles"])])[0]))
    assert aspirin["canonical"] == "CC(=O)Oc1ccccc1C(=O)O" and aspirin["components"]
    assert broken == {**broken, "valid": False, "score": None, "canonical": None}


def test_a_molecule_over_the_heavy_atom_bound_is_a_422_naming_it(served):
    api, _ = served
    big = "C1" + "C" * 496 + "C1"  # a 498-atom macrocycle
    reply = api.post("/v1/act", json={"score": ["CCO", big] * 1000})
    assert reply.status_code == 422
    (detail,) = reply.json()["detail"]
    assert detail["field"] == "score.1" and str(MAX_HEAVY_ATOMS) in detail["message"]
    edge = "C" * MAX_HEAVY_ATOMS  # at the bound: scored
    assert api.post("/v1/act", json={"score": [edge]}).json()["molecules"][0]["valid"]


def test_scoring_stops_at_the_requests_cpu_budget(served, monkeypatch):
    api, _ = served
    monkeypatch.setattr(molecules_service, "SCORE_CPU_SECONDS", 0.01)
    reply = api.post("/v1/act", json={"score": ["C" * 60] * 2000})  # seconds of QED
    assert reply.status_code == 422
    (detail,) = reply.json()["detail"]
    assert detail["field"] == "score" and "of 2000 molecules" in detail["message"]
    reply = api.post("/v1/act", json={"generate": 256, "seed": 1})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "generate"


def test_a_count_of_the_wrong_json_type_is_refused(served):
    api, _ = served
    reply = api.post("/v1/act", json={"generate": True})
    assert reply.status_code == 422 and reply.json()["detail"][0]["field"] == "generate"


def test_the_objective_and_its_breakdown_come_from_one_pass():
    mols = [to_mol(s) for s in ("CCO", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O")]
    for task in ("zaleplon_mpo", "deco_hop", "qed"):
        score, parts = TASKS[task].scored(mols)
        assert score.tolist() == TASKS[task](mols).tolist()
        assert {k: v.tolist() for k, v in parts.items()} == {
            k: v.tolist() for k, v in TASKS[task].breakdown(mols).items()
        }
