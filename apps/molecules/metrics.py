"""The PMO oracle budget and the metrics of a generated set, pure functions over SMILES.

The budget follows PMO (Gao et al. 2022, ``mol_opt``'s Oracle): a call is a new valid
molecule (canonical SMILES); an invalid SMILES scores 0 and a repeat returns its first
score, both for free; scoring stops at the budget. ``top_auc`` is PMO's area under the
mean-of-top-n curve, sampled every ``every`` calls and normalized by the budget (a run that
stops early keeps its last value to the end).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from fieldrl.apps.molecules.oracles import canonical, to_mol

__all__ = ["OracleBudget", "internal_diversity", "novelty", "top_auc", "uniqueness", "validity"]


class OracleBudget:
    """Counts oracle calls for one task and remembers every scored molecule in order."""

    def __init__(self, objective: Callable[[list], np.ndarray], budget: int) -> None:
        self.objective, self.budget = objective, budget
        self.scores: dict[str, float] = {}  # canonical SMILES -> score, in call order
        self.proposed = self.valid = 0  # every SMILES sent, and the valid ones

    @property
    def calls(self) -> int:
        return len(self.scores)

    @property
    def exhausted(self) -> bool:
        return self.calls >= self.budget

    def __call__(self, smiles: Sequence[str]) -> np.ndarray:
        """Scores of ``smiles`` (0 for invalid ones, and for new ones past the budget)."""
        keys = [canonical(s) for s in smiles]
        self.proposed += len(keys)
        self.valid += sum(k is not None for k in keys)
        new = []
        for key in keys:
            if key is not None and key not in self.scores and key not in new:
                if self.calls + len(new) < self.budget:
                    new.append(key)
        if new:
            values = self.objective([to_mol(k) for k in new])
            self.scores.update(zip(new, (float(v) for v in values), strict=True))
        return np.array([self.scores.get(k, 0.0) if k is not None else 0.0 for k in keys])

    def best(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` best (SMILES, score) so far."""
        return sorted(self.scores.items(), key=lambda kv: -kv[1])[:n]

    def curve(self, top_n: int = 10, every: int = 100) -> list[tuple[int, float]]:
        """(calls, mean of the top ``top_n`` scores so far) every ``every`` calls."""
        values = np.array(list(self.scores.values()))
        points = [*range(every, values.size, every), values.size]
        return [(int(c), float(np.sort(values[:c])[::-1][:top_n].mean())) for c in points if c]

    def top_auc(self, top_n: int, every: int = 100) -> float:
        return top_auc(list(self.scores.values()), top_n, self.budget, every)

    def summary(self, training: set[str] | None = None) -> dict[str, float]:
        """PMO's figures of this run: top-1/10/100 AUC and means, then the validity and
        uniqueness of everything proposed, and the diversity and novelty (against
        ``training``) of the top 100."""
        best = self.best(100)
        scores = [v for _, v in best] or [0.0]
        top = [s for s, _ in best]
        return {"top10_auc": self.top_auc(10), "top1_auc": self.top_auc(1),
                "top100_auc": self.top_auc(100), "top1": scores[0],
                "top10_mean": float(np.mean(scores[:10])), "top100_mean": float(np.mean(scores)),
                "validity": self.valid / max(self.proposed, 1),
                "uniqueness": self.calls / max(self.valid, 1),
                "internal_diversity": internal_diversity(top),
                "novelty": novelty(top, training) if training is not None else float("nan"),
                "oracle_calls": self.calls}  # fmt: skip

    def state_dict(self) -> list:
        return [[[k, v] for k, v in self.scores.items()], self.proposed, self.valid]

    def load_state_dict(self, state: list) -> None:
        self.scores = {k: float(v) for k, v in state[0]}
        self.proposed, self.valid = int(state[1]), int(state[2])


def top_auc(scores: Sequence[float], top_n: int, budget: int, every: int = 100) -> float:
    """PMO's AUC of the mean of the top ``top_n`` scores against oracle calls, in [0, 1]."""
    values = np.asarray(scores, float)[:budget]
    if values.size == 0:
        return 0.0
    total, prev, called = 0.0, 0.0, 0
    for idx in range(every, min(values.size, budget), every):
        now = np.sort(values[:idx])[::-1][:top_n].mean()
        total += every * (now + prev) / 2
        prev, called = now, idx
    now = np.sort(values)[::-1][:top_n].mean()
    total += (values.size - called) * (now + prev) / 2
    total += (budget - values.size) * now  # stopped early: the last value to the end
    return float(total / budget)


def validity(smiles: Sequence[str]) -> float:
    """Share of SMILES rdkit reads."""
    return float(np.mean([to_mol(s) is not None for s in smiles])) if smiles else 0.0


def uniqueness(smiles: Sequence[str]) -> float:
    """Unique canonical molecules over valid ones."""
    valid = [c for c in (canonical(s) for s in smiles) if c is not None]
    return len(set(valid)) / len(valid) if valid else 0.0


def novelty(smiles: Sequence[str], training: set[str]) -> float:
    """Share of unique valid molecules not in the (canonical) ``training`` set."""
    unique = {c for c in (canonical(s) for s in smiles) if c is not None}
    return len(unique - training) / len(unique) if unique else 0.0


def internal_diversity(smiles: Sequence[str], sample: int = 1000, seed: int = 0) -> float:
    """MOSES IntDiv1: 1 - mean pairwise Tanimoto of Morgan (radius 2, 1024 bits)
    fingerprints of the unique valid molecules (at most ``sample`` of them)."""
    from rdkit import DataStructs
    from rdkit.Chem import rdFingerprintGenerator

    unique = sorted({c for c in (canonical(s) for s in smiles) if c is not None})
    if len(unique) < 2:
        return 0.0
    if len(unique) > sample:
        picks = np.random.default_rng(seed).choice(len(unique), sample, replace=False)
        unique = [unique[i] for i in sorted(picks)]
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    fps = [generator.GetFingerprint(to_mol(s)) for s in unique]
    sims = [DataStructs.BulkTanimotoSimilarity(fp, fps) for fp in fps]
    return float(1 - np.mean(sims))
