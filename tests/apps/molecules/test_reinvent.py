"""The REINVENT agent: the diversity filter, the top-k replay memory, and a short run on
the core loop that resumes exactly."""

import numpy as np
import pytest
import torch

from fieldrl.apps.molecules.config import AgentConfig
from fieldrl.apps.molecules.metrics import OracleBudget
from fieldrl.apps.molecules.oracles import TASKS, canonical
from fieldrl.apps.molecules.prior import SmilesRNN
from fieldrl.apps.molecules.reinvent import (
    DiversityFilter,
    ReinventTrainer,
    Stage,
    TopMemory,
)
from fieldrl.apps.molecules.vocab import Vocabulary

SMILES = ["CCO", "CCN", "c1ccccc1O", "c1ccccc1N", "CC(=O)O", "CCCC", "C1CCCCC1", "OCC(O)CO"]


def test_identical_scaffolds_fill_their_bucket_then_score_zero():
    ring = ["c1ccccc1O", "c1ccccc1N", "c1ccccc1C", "c1ccccc1Cl"]  # one scaffold: benzene
    f = DiversityFilter("identical_murcko", bucket_size=2, min_score=0.4, min_similarity=0.6)
    out = f(ring, np.array([0.9, 0.8, 0.7, 0.3]))
    assert list(out) == [0.9, 0.8, 0.0, 0.3]  # the third is over the bucket; the last is low
    same = DiversityFilter("penalize_same_smiles", 25, 0.4, 0.6)
    assert list(same(["CCO", "CCO", None], np.array([1.0, 1.0, 0.0]))) == [1.0, 0.5, 0.0]
    none = DiversityFilter("none", 1, 0.0, 0.6)
    assert list(none(ring, np.ones(4))) == [1.0] * 4
    similar = DiversityFilter("scaffold_similarity", 1, 0.0, 0.3)
    assert list(similar(["c1ccccc1C", "c1ccc(cc1)-c1ccccc1"], np.ones(2))) == [1.0, 0.0]


def test_the_memory_keeps_the_best_and_replays_in_proportion_to_score():
    memory = TopMemory(3)
    memory.add(["A", "B", "C", "D", "E"], np.array([0.1, 0.9, 0.5, 0.0, 0.7]), np.zeros(5))
    assert [s for s, _, _ in memory.items] == ["B", "E", "C"]
    assert memory.sample(3, np.random.default_rng(0)) == []  # not more than it holds
    picks = [memory.sample(1, np.random.default_rng(i))[0][0] for i in range(300)]
    assert picks.count("B") > picks.count("C")


@pytest.fixture
def prior():
    vocab = Vocabulary.from_smiles(SMILES)
    torch.manual_seed(0)
    return SmilesRNN(len(vocab), 8, 16, 1), vocab


@pytest.mark.parametrize("rounds", [0, 2])
def test_a_short_run_spends_its_budget_and_resumes_exactly(prior, kill_and_resume, rounds):
    """Plain REINVENT, and Augmented Memory (its random SMILES drawn from the checkpointed
    generator, the purge on)."""
    model, vocab = prior
    cfg = AgentConfig(batch_size=16, replay=2, memory=10, patience=3,
                      diversity_filter="identical_murcko", augmentation_rounds=rounds,
                      memory_purge=bool(rounds))  # fmt: skip

    def build():
        stages = [Stage(OracleBudget(TASKS["qed"], budget=30)),
                  Stage(OracleBudget(TASKS["median1"], budget=20))]  # fmt: skip
        return ReinventTrainer(model, vocab, stages, cfg, max_tokens=20, seed=1)

    straight, resumed = kill_and_resume(build, nth=3)
    assert straight.done == straight.total == 50 and straight.stage == 1
    assert straight.stages[1].oracle.calls > 0  # the second objective was scored
    for name, weights in straight.agent.state_dict().items():
        assert torch.equal(weights, resumed.agent.state_dict()[name]), name
    for a, b in zip(straight.stages, resumed.stages, strict=True):
        assert a.oracle.scores == b.oracle.scores
    assert all(p.requires_grad is False for p in model.parameters())  # the prior stays frozen


@pytest.mark.parametrize("converge_after", [20, 0])
def test_pmo_early_stop_once_the_top_100_stops_changing(converge_after):
    """A constant objective: every new molecule scores 1, so past converge_after calls the
    top 100 are 1.0 each step and the run stops after ``patience`` steps, where without
    the rule it goes on to its budget."""
    vocab = Vocabulary.from_smiles(["CNO", "OCN"])  # any string of C, N and O is a molecule
    torch.manual_seed(0)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    cfg = AgentConfig(batch_size=16, replay=0, patience=2, converge_after=converge_after)
    oracle = OracleBudget(lambda mols: np.ones(len(mols)), budget=400)
    trainer = ReinventTrainer(model, vocab, [Stage(oracle)], cfg, max_tokens=20, seed=0)
    while trainer.done < trainer.total:
        trainer.step()
    if converge_after:
        assert 100 < oracle.calls < 400 and trainer.stalled >= 2
    else:
        assert oracle.calls == 400


def test_augmentation_rewrites_the_string_and_keeps_the_molecule():
    vocab = Vocabulary.from_smiles(["c1ccccc1CCN", "CC(=O)Oc1ccccc1C(=O)O", "OCC(O)CO"])
    originals = ["CC(=O)Oc1ccccc1C(=O)O", "c1ccccc1CCN", "OCC(O)CO", "not a molecule"]
    rewritten = vocab.randomize(originals, max_tokens=40, seed=3)
    assert [canonical(s) for s in rewritten] == [canonical(s) for s in originals]
    assert rewritten[-1] == "not a molecule" and rewritten[:3] != originals[:3]
    assert vocab.randomize(originals, 40, seed=3) == rewritten  # seeded
    assert all(not vocab.unknown(s) for s in rewritten[:3])
    assert vocab.randomize(originals, max_tokens=5, seed=3) == originals  # too long: kept


def test_the_purge_drops_the_penalized_scaffolds_from_the_memory():
    memory = TopMemory(10)
    benzenes, others = ["c1ccccc1O", "c1ccccc1N", "c1ccccc1C"], ["C1CCCCC1O", "CCO"]
    memory.add(benzenes + others, np.array([0.9, 0.8, 0.7, 0.6, 0.5]), np.zeros(5))
    f = DiversityFilter("identical_murcko", bucket_size=2, min_score=0.4, min_similarity=0.6)
    f(benzenes[:2], np.array([0.9, 0.8]))  # the benzene bucket is full
    f.purge(memory)
    assert len(memory.items) == 5  # nothing was penalized yet
    f(["c1ccccc1Cl"], np.array([0.9]))  # a third benzene: zeroed, its scaffold penalized
    f.purge(memory)
    assert [s for s, _, _ in memory.items] == others


def test_augmented_memory_updates_more_per_oracle_batch_at_the_same_oracle_cost():
    vocab = Vocabulary.from_smiles(["CNO", "OCN"])  # any string of C, N and O is a molecule
    torch.manual_seed(0)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    steps, calls = {}, {}
    for rounds in (0, 2):
        cfg = AgentConfig(batch_size=16, replay=0, memory=10, augmentation_rounds=rounds)
        oracle = OracleBudget(TASKS["qed"], budget=200)
        trainer = ReinventTrainer(model, vocab, [Stage(oracle)], cfg, max_tokens=20, seed=0)
        trainer._update()
        adam = trainer.optimizer.state_dict()["state"][0]  # Adam counts its own steps
        steps[rounds], calls[rounds] = int(adam["step"]), oracle.calls
    assert steps == {0: 1, 2: 3} and calls[0] == calls[2] > 0
