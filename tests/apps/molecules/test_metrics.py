"""PMO's oracle budget and AUC, and the MOSES-style set metrics."""

import numpy as np
import pytest

from fieldrl.apps.molecules.metrics import (
    OracleBudget,
    internal_diversity,
    novelty,
    top_auc,
    uniqueness,
    validity,
)
from fieldrl.apps.molecules.oracles import TASKS


def test_repeats_and_invalid_smiles_are_free_and_the_budget_is_enforced():
    calls = []

    def objective(mols):
        calls.append(len(mols))
        return TASKS["qed"](mols)

    budget = OracleBudget(objective, budget=3)
    first = budget(["CCO", "OCC", "C1CC", "c1ccccc1"])  # OCC is CCO again; C1CC is invalid
    assert budget.calls == 2 and calls == [2] and first[2] == 0.0 and first[0] == first[1]
    budget(["CCO", "CCN", "CCC", "CCCl"])  # one call left: CCN only
    assert budget.calls == 3 and budget.exhausted
    assert set(budget.scores) == {"CCO", "c1ccccc1", "CCN"}
    assert budget(["CCC"])[0] == 0.0 and budget.calls == 3


def test_top_auc_matches_pmo():
    # PMO's curve starts from 0 at no calls: a constant 0.5 loses half of the first step
    assert top_auc([0.5] * 1000, 10, 1000) == pytest.approx(0.5 - 0.5 * 100 / 2 / 1000)
    # stopping early keeps the last value to the end of the budget
    assert top_auc([0.5] * 500, 10, 1000) == pytest.approx(0.475)
    # a jump to 1.0 halfway: the trapezoid rises over one logging step
    rising = [0.0] * 500 + [1.0] * 500
    assert top_auc(rising, 1, 1000, every=100) == pytest.approx(0.45)
    assert top_auc([], 10, 100) == 0.0


def test_set_metrics():
    smiles = ["CCO", "OCC", "c1ccccc1", "C1CC", "CCN"]
    assert validity(smiles) == pytest.approx(0.8)
    assert uniqueness(smiles) == pytest.approx(3 / 4)
    assert novelty(smiles, {"CCO"}) == pytest.approx(2 / 3)
    same = internal_diversity(["CCO", "CCO"])
    assert same == 0.0  # one unique molecule
    assert 0.3 < internal_diversity(["CCO", "c1ccccc1", "CC(=O)Oc1ccccc1C(=O)O"]) < 1
    assert np.isclose(internal_diversity(["CCO", "CCN"]), internal_diversity(["CCN", "CCO"]))


def test_a_molecule_whose_canonical_smiles_does_not_read_back_is_invalid(monkeypatch):
    """rdkit occasionally writes a canonical SMILES it cannot read back; such a molecule
    cannot be scored, so the budget counts it as invalid instead of crashing the oracle."""
    import fieldrl.apps.molecules.oracles as oracles
    from fieldrl.apps.molecules.metrics import OracleBudget

    monkeypatch.setattr(oracles.Chem, "MolToSmiles", lambda mol: "C1CC")  # an open ring
    seen = []
    budget = OracleBudget(lambda mols: seen.extend(mols) or np.ones(len(mols)), 10)
    assert list(budget(["CCO"])) == [0.0] and budget.calls == 0 and not seen
