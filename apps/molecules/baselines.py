"""What the agent is compared with, through the same oracle budget: sampling the prior with
no learning at all, and a real peer, the graph GA of ``mol-ga`` (Tripp & Hernandez-Lobato;
PMO sum 14.708 over 23 tasks as published), started from random ZINC 250k molecules."""

from __future__ import annotations

import random

import torch

from fieldrl.apps.molecules.data import zinc250k_path
from fieldrl.apps.molecules.metrics import OracleBudget
from fieldrl.apps.molecules.prior import SmilesRNN
from fieldrl.apps.molecules.vocab import Vocabulary

__all__ = ["mol_ga", "prior_sampling"]


@torch.no_grad()
def prior_sampling(
    oracle: OracleBudget, prior: SmilesRNN, vocab: Vocabulary, max_tokens: int, seed: int,
    batch: int = 64, patience: int = 5,
) -> None:  # fmt: skip
    """Score fresh prior samples until the budget is spent (or ``patience`` batches in a row
    find nothing new)."""
    generator, stalled = torch.Generator().manual_seed(seed), 0
    while not oracle.exhausted and stalled < patience:
        before = oracle.calls
        drawn = prior.sample(batch, vocab, max_tokens, generator)
        oracle([vocab.decode(t) for t in drawn.tokens])
        stalled = stalled + 1 if oracle.calls == before else 0


class _BudgetSpent(Exception):
    pass


def mol_ga(oracle: OracleBudget, seed: int, start: int = 1000, offspring: int = 100) -> None:
    """mol-ga's default graph GA: ``start`` random ZINC molecules, then generations of
    ``offspring`` children until the budget is spent (the start population is scored too)."""
    from mol_ga import default_ga

    def score(smiles: list[str]) -> list[float]:
        """mol-ga hands over its population as a set, whose order follows python's salted
        string hash: score it sorted (the oracle's call order makes the AUC), so a seed
        gives one run whatever ``PYTHONHASHSEED``."""
        if oracle.exhausted:
            raise _BudgetSpent
        order = sorted(range(len(smiles)), key=smiles.__getitem__)
        scores = dict(zip(order, oracle([smiles[i] for i in order]), strict=True))
        return [float(scores[i]) for i in range(len(smiles))]

    zinc = zinc250k_path().read_text().split()
    rng = random.Random(seed)
    start = min(start, max(oracle.budget // 10, 10))  # a tenth of a small budget at most
    try:
        default_ga(starting_population_smiles=rng.sample(zinc, start), scoring_function=score,
                   max_generations=3 * oracle.budget // offspring + 10,
                   offspring_size=offspring, rng=rng, population_size=10_000)  # fmt: skip
    except _BudgetSpent:
        pass
