"""An RL run end to end on a tiny prior: staged objectives (a PMO task and the user's own),
each alignment encoder, the run's outputs, and bad objectives named before training."""

import typing

import numpy as np
import pytest
import torch
from rdkit import Chem

from fieldrl.apps.molecules.config import MoleculesConfig, TaskName
from fieldrl.apps.molecules.oracles import TASKS
from fieldrl.apps.molecules.pipeline import export_prior, train, train_prior
from fieldrl.config import ConfigError
from fieldrl.runs import Run

SMILES = ["CC(=O)Oc1ccccc1C(=O)O", "Clc1ccc(Br)cc1", "CC(N)C(=O)O", "CCN(CC)CC", "CCO",
          "c1ccccc1O", "CC1=CC(=O)CCC1", "OCC1OC(O)C(O)C(O)C1O", "CCCCO", "CCOC(=O)C"]  # fmt: skip


@pytest.fixture(scope="module")
def prior(tmp_path_factory):
    root = tmp_path_factory.mktemp("prior")
    data = root / "set.smi"
    data.write_text("\n".join(SMILES) + "\n")
    cfg = MoleculesConfig(experiment={"loggers": ["jsonl"]},
                          model={"embedding": 8, "hidden": 16, "layers": 1, "max_tokens": 30},
                          prior={"smiles": str(data), "epochs": 30, "batch_size": 5,
                                 "holdout": 0, "validation_samples": 10})  # fmt: skip
    with Run.create(cfg, root=root) as run:
        train_prior(cfg, run=run)
    return export_prior(run.dir, root / "exported", {})


def config(prior, **sections):
    base = {"experiment": {"loggers": ["jsonl"], "checkpoint_every": 2},
            "model": {"embedding": 8, "hidden": 16, "layers": 1, "max_tokens": 30},
            "agent": {"prior": str(prior), "batch_size": 16, "patience": 2}}  # fmt: skip
    return MoleculesConfig(**{**base, **sections})


def test_the_task_names_are_the_oracles():
    from fieldrl.apps.molecules.config import PMOTask, PrevTask
    from fieldrl.apps.molecules.oracles import PMO_TASKS, PREV_TASKS, VALIDATION_TASKS

    names = {a for t in typing.get_args(TaskName) for a in (typing.get_args(t) or [t])}
    assert names == set(TASKS) and set(typing.get_args(PMOTask)) == set(PMO_TASKS)
    assert set(typing.get_args(PrevTask)) == set(PREV_TASKS)
    assert not set(VALIDATION_TASKS) & set(PMO_TASKS)


@pytest.mark.parametrize(
    "alignment",
    [{"encoder": "none"}, {"encoder": "fingerprint", "level": "sequence", "fit_molecules": 30},
     {"encoder": "fingerprint", "level": "atom", "fit_molecules": 30}, {"encoder": "chemnet"}],
    ids=["reinvent", "fingerprint", "fingerprint-atoms", "chemnet"],
)  # fmt: skip
def test_a_staged_run_writes_its_best_molecules(prior, tmp_path, alignment):
    own = {"components": [{"kind": "logp", "transform": {"kind": "gaussian", "mu": 1,
                                                          "sigma": 1}},
                          {"kind": "smarts", "target": "c1ccccc1"}], "budget": 20}  # fmt: skip
    cfg = config(prior, alignment=alignment, stages=[{"task": "qed", "budget": 25}, own])
    with Run.create(cfg, root=tmp_path) as run:
        metrics = train(cfg, run=run, resources=None)
    assert metrics["oracle_calls"] > 0 and 0 < metrics["top1"] <= 1
    assert 0 < metrics["top10_auc"] <= metrics["top1"]
    lines = (run.dir / "top_molecules.csv").read_text().splitlines()
    assert lines[0] == "smiles,score,0:logp,1:smarts"
    best = lines[1].split(",")
    assert Chem.MolFromSmiles(best[0]) is not None
    assert float(best[1]) == pytest.approx(metrics["top1"], abs=1e-4)
    if alignment["encoder"] != "none":
        rows = [line for line in (run.dir / "metrics.jsonl").read_text().splitlines()]
        assert any("alignment_loss" in r for r in rows)


def test_a_file_encoder_run(prior, tmp_path):
    keys = [Chem.MolToInchiKey(Chem.MolFromSmiles(s)) for s in SMILES]
    path = tmp_path / "emb.npz"
    np.savez(path, inchikey=np.array(keys), embedding=np.random.default_rng(0).normal(
        size=(len(keys), 6)).astype(np.float32))  # fmt: skip
    cfg = config(prior, alignment={"encoder": "file", "file": str(path)},
                 stages=[{"task": "qed", "budget": 15}])  # fmt: skip
    with Run.create(cfg, root=tmp_path) as run:
        assert train(cfg, run=run, resources=None)["oracle_calls"] > 0


@pytest.mark.parametrize(
    ("stage", "words"),
    [({"components": [{"kind": "similarity", "target": "C1CC"}]}, "not valid"),
     ({"components": [{"kind": "smarts", "target": "[[["}]}, "SMARTS"),
     ({"components": [{"kind": "colour"}]}, "unknown kind 'colour'")],
)  # fmt: skip
def test_a_bad_objective_is_named_before_training(prior, tmp_path, stage, words):
    cfg = config(prior, stages=[stage])
    with Run.create(cfg, root=tmp_path) as run, pytest.raises(ConfigError, match=words):
        train(cfg, run=run, resources=None)
    with pytest.raises(ValueError, match="either task or components"):
        config(prior, stages=[{"task": "qed", "components": [{"kind": "qed"}]}])
    with pytest.raises(ConfigError, match="atom"):
        bad = config(prior, alignment={"encoder": "chemnet", "level": "atom"},
                     stages=[{"task": "qed", "budget": 5}])  # fmt: skip
        with Run.create(bad, root=tmp_path) as run:
            train(bad, run=run, resources=None)


@pytest.mark.slow
def test_a_short_run_from_the_shipped_prior_raises_the_score(tmp_path):
    """QED with 1,000 oracle calls: the agent's fresh samples score above the prior's."""
    from fieldrl.apps.molecules import APP
    from fieldrl.apps.molecules.pipeline import evaluate

    cfg = APP.load_config("default", overrides=["stages=[{task='qed', budget=1000}]",
                                                "eval.samples=300"])  # fmt: skip
    with Run.create(cfg, root=tmp_path) as run:
        train(cfg, run=run, resources=None)
    metrics = evaluate(cfg, run=APP.open_run(run.dir), resources=None, out=tmp_path / "eval")
    assert metrics["agent_score_mean"] > metrics["prior_score_mean"] + 0.05
    assert metrics["agent_validity"] > 0.8


def test_the_fingerprint_encoder_is_fitted_once_per_prior_and_seed(prior):
    from fieldrl.apps.molecules.pipeline import load_prior, make_aligner

    cfg = config(prior, alignment={"encoder": "fingerprint", "fit_molecules": 30})
    network, vocab, _ = load_prior(prior)
    first = make_aligner(cfg, network, vocab)
    reloaded = make_aligner(cfg, *load_prior(prior)[:2])
    assert reloaded.encoder is first.encoder and reloaded.proj is not first.proj
    other_seed = cfg.model_copy(
        update={"experiment": cfg.experiment.model_copy(update={"seed": 9})}
    )
    assert make_aligner(other_seed, network, vocab).encoder is not first.encoder
    with torch.no_grad():
        next(network.parameters()).add_(1.0)
    assert make_aligner(cfg, network, vocab).encoder is not first.encoder
