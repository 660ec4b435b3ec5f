"""REINVENT-style RL on a SMILES prior (Olivecrona et al. 2017; PMO's tuned version).

Each step samples a batch from the agent, scores the new molecules through the oracle
budget, and pulls the agent's log-likelihood towards the augmented likelihood
``prior_ll + sigma * score`` (the DAP loss, squared), on the batch and on a few molecules
replayed from a top-k memory. A small regularizer keeps sequence likelihoods from
collapsing, an optional diversity filter zeroes the score of molecules whose scaffold is
already well covered, and an optional aligner adds the representation-alignment loss
(``alignment.py``). With ``augmentation_rounds`` it is Augmented Memory (Guo & Schwaller,
JACS Au 2024): each oracle batch then buys that many more updates, on other SMILES strings
of the same molecules (the batch and the whole memory, randomly re-written), optionally
after purging the memory of the scaffolds the diversity filter has just penalized. The
alignment term, if any, applies to the first update of a batch. The run ends when the
budget is spent, or when ``patience`` steps in a row find no new molecule or, past
``converge_after`` calls, leave the top 100 unchanged (PMO's early stop for REINVENT; the
AUC keeps the last value to the end).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fieldrl.apps.molecules.config import AgentConfig
from fieldrl.apps.molecules.metrics import OracleBudget
from fieldrl.apps.molecules.oracles import canonical, to_mol
from fieldrl.apps.molecules.prior import SmilesRNN
from fieldrl.apps.molecules.vocab import Vocabulary

__all__ = ["DiversityFilter", "ReinventTrainer", "Stage", "TopMemory"]


class DiversityFilter:
    """REINVENT's memory of scaffolds: a molecule scoring at least ``min_score`` enters the
    bucket of its Murcko scaffold (``identical_murcko``), or of the first scaffold at least
    ``min_similarity`` alike (``scaffold_similarity``); once a bucket holds ``bucket_size``
    molecules, later ones score 0. ``penalize_same_smiles`` halves a molecule's score each
    time it is generated again; ``none`` changes nothing."""

    def __init__(self, kind: str, bucket_size: int, min_score: float, min_similarity: float):
        self.kind, self.size = kind, bucket_size
        self.min_score, self.min_similarity = min_score, min_similarity
        self.buckets: dict[str, int] = {}
        self.seen: dict[str, int] = {}
        self.penalized: set[str] = set()  # the buckets the last call found full

    def __call__(self, smiles: list[str | None], scores: np.ndarray) -> np.ndarray:
        out = scores.copy()
        self.penalized = set()
        for i, key in enumerate(smiles):
            if key is None or self.kind == "none":
                continue
            if self.kind == "penalize_same_smiles":
                out[i] *= 0.5 ** self.seen.get(key, 0)
                self.seen[key] = self.seen.get(key, 0) + 1
                continue
            if scores[i] < self.min_score:
                continue
            bucket = self._bucket(key)
            if self.buckets.get(bucket, 0) >= self.size:
                out[i] = 0.0
                self.penalized.add(bucket)
            else:
                self.buckets[bucket] = self.buckets.get(bucket, 0) + 1
        return out

    def _bucket(self, smiles: str) -> str:
        from rdkit import Chem, DataStructs
        from rdkit.Chem import rdFingerprintGenerator
        from rdkit.Chem.Scaffolds import MurckoScaffold

        scaffold = Chem.MolToSmiles(MurckoScaffold.GetScaffoldForMol(to_mol(smiles)))
        if self.kind != "scaffold_similarity" or scaffold in self.buckets or not self.buckets:
            return scaffold
        generator = rdFingerprintGenerator.GetMorganGenerator(radius=2)
        fp = generator.GetCountFingerprint(to_mol(scaffold) or to_mol("C"))
        known = list(self.buckets)
        others = [generator.GetCountFingerprint(to_mol(s) or to_mol("C")) for s in known]
        similarity = DataStructs.BulkTanimotoSimilarity(fp, others)
        best = int(np.argmax(similarity))
        return known[best] if similarity[best] >= self.min_similarity else scaffold

    def purge(self, memory: TopMemory) -> None:
        """Augmented Memory's selective purge: drop from ``memory`` every molecule in a
        bucket the last call penalized."""
        if self.penalized:
            keep = [
                self._bucket(canonical(s) or s) not in self.penalized for s, _, _ in memory.items
            ]
            memory.items = [item for item, kept in zip(memory.items, keep, strict=True) if kept]

    def state_dict(self) -> dict:
        return {"buckets": dict(self.buckets), "seen": dict(self.seen)}

    def load_state_dict(self, state: dict) -> None:
        self.buckets, self.seen = dict(state["buckets"]), dict(state["seen"])


class TopMemory:
    """The best ``size`` (SMILES as sampled, score, prior log-likelihood) seen; replay draws
    from them in proportion to their scores, as REINVENT's experience replay does."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: list[tuple[str, float, float]] = []

    def add(self, smiles: list[str], scores: np.ndarray, prior_ll: np.ndarray) -> None:
        known = {s for s, _, _ in self.items}
        for s, score, ll in zip(smiles, scores, prior_ll, strict=True):
            if s not in known and score > 0:
                self.items.append((s, float(score), float(ll)))
                known.add(s)
        self.items = sorted(self.items, key=lambda item: -item[1])[: self.size]

    def sample(self, n: int, rng: np.random.Generator) -> list[tuple[str, float, float]]:
        if len(self.items) <= n:
            return []
        scores = np.array([score for _, score, _ in self.items])
        picks = rng.choice(len(self.items), n, replace=False, p=scores / scores.sum())
        return [self.items[i] for i in picks]


@dataclass
class Stage:
    """One objective of a staged run: its oracle budget, and a top-10 mean that ends the
    stage early (None: spend the budget)."""

    oracle: OracleBudget
    stop_at: float | None = None


class ReinventTrainer:
    """The agent (a copy of the prior) trained on one objective after another, on the core
    loop: ``done`` counts oracle calls over the stages, ``total`` is their summed budget.
    A stage ends when its budget is spent, its ``stop_at`` is reached or ``patience``
    updates in a row find no new molecule (or leave the top 100 unchanged, past
    ``converge_after`` calls); the next starts from the agent as it is, with an
    empty replay memory and diversity filter."""

    def __init__(self, prior: SmilesRNN, vocab: Vocabulary, stages: list[Stage],
                 cfg: AgentConfig, max_tokens: int, seed: int,
                 aligner: Any | None = None) -> None:  # fmt: skip
        self.prior, self.vocab, self.stages, self.cfg = prior, vocab, stages, cfg
        self.max_tokens, self.aligner = max_tokens, aligner
        for p in prior.parameters():
            p.requires_grad_(False)
        self.agent = copy.deepcopy(prior).train()
        for p in self.agent.parameters():
            p.requires_grad_(True)
        params = list(self.agent.parameters())
        if aligner is not None:
            params += list(aligner.parameters())
        self.optimizer = torch.optim.Adam(params, lr=cfg.lr)
        self._fresh_memory()
        self.sampler = torch.Generator().manual_seed(seed)
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng,)
        self.total = sum(stage.oracle.budget for stage in stages)
        self.stage = self.stalled = self.steps = 0

    def _fresh_memory(self) -> None:
        c = self.cfg
        self.filter = DiversityFilter(c.diversity_filter, c.bucket_size, c.min_score,
                                      c.min_similarity)  # fmt: skip
        self.memory = TopMemory(c.memory)

    @property
    def oracle(self) -> OracleBudget:
        return self.stages[self.stage].oracle

    def _stage_over(self) -> bool:
        if self.oracle.exhausted or self.stalled >= self.cfg.patience:
            return True
        stop_at = self.stages[self.stage].stop_at  # ranking every score: only when asked for
        best = [score for _, score in self.oracle.best(10)] if stop_at is not None else []
        return len(best) == 10 and np.mean(best) >= stop_at

    @property
    def done(self) -> int:
        spent = sum(stage.oracle.budget for stage in self.stages[: self.stage])
        return spent + (self.oracle.budget if self._stage_over() else self.oracle.calls)

    def step(self) -> dict[str, float]:
        """Updates until one finds a new molecule or the stage ends; then the next stage."""
        before = self.done
        while True:
            metrics = self._update()
            if self.done > before or self.done >= self.total:
                break
        if self._stage_over() and self.stage + 1 < len(self.stages):
            self.stage, self.stalled = self.stage + 1, 0
            self._fresh_memory()
        return {**metrics, "stage": self.stage}

    def _top100(self) -> list[float]:
        converging = self.cfg.converge_after and self.oracle.calls > self.cfg.converge_after
        return [score for _, score in self.oracle.best(100)] if converging else []

    def _update(self) -> dict[str, float]:
        before, top_before = self.oracle.calls, self._top100()
        sample = self.agent.sample(self.cfg.batch_size, self.vocab, self.max_tokens, self.sampler)
        tokens = torch.unique(sample.tokens, dim=0)  # each sequence once, as PMO's REINVENT
        smiles = [self.vocab.decode(t) for t in tokens]
        scores = self.oracle(smiles)
        keys = [canonical(s) for s in smiles]
        rewards = self.filter(keys, scores)
        # PMO's early stop: nothing new, or (past converge_after calls) the top 100 unchanged
        unchanged = self.oracle.calls == before or (top_before and self._top100() == top_before)
        self.stalled = self.stalled + 1 if unchanged else 0
        loss, agent_ll, prior_ll, hidden = self._dap(tokens, rewards)
        replayed = self.memory.sample(self.cfg.replay, self.rng) if self.cfg.replay else []
        aligned = (hidden, tokens, smiles, rewards)  # what the alignment reads (alignment.on)
        if replayed:
            r_smiles = [s for s, _, _ in replayed]
            again = torch.from_numpy(self.vocab.batch(r_smiles))
            r_scores = np.array([score for _, score, _ in replayed])
            r_prior = torch.tensor([ll for _, _, ll in replayed])  # kept by the memory
            r_loss, r_ll, _, r_hidden = self._dap(again, r_scores, r_prior)
            loss, agent_ll = torch.cat([loss, r_loss]), torch.cat([agent_ll, r_ll])
            if self.aligner is not None and self.aligner.on == "replay":
                aligned = (r_hidden, again, r_smiles, r_scores)
        self.memory.add(smiles, rewards, prior_ll.numpy())
        total = loss.mean() + self.cfg.likelihood_penalty * -(1 / agent_ll).mean()
        metrics = {"dap_loss": float(loss.mean().detach())}
        if self.aligner is not None and (self.aligner.on == "batch" or replayed):
            h, t, s, scores_of = aligned
            align = self.aligner.loss(h, t, s, scores_of if self.aligner.by_score else None)
            lam = self.aligner.lam(self.oracle.calls / self.oracle.budget)
            # lambda is relative to the DAP loss, whose scale grows with sigma squared
            # (~1e4 at PMO's sigma 500): an absolute 0.5 would not move the agent at all
            total = total + lam * loss.mean().detach() * align
            metrics["alignment_loss"] = float(align.detach())
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()
        if self.cfg.augmentation_rounds and self.cfg.memory_purge:
            self.filter.purge(self.memory)
        for _ in range(self.cfg.augmentation_rounds):
            self._augmented_update(smiles, rewards)
        self.steps += 1
        valid = [k for k in keys if k is not None]
        return {**metrics, "calls": self.oracle.calls, "score_mean": float(scores.mean()),
                "top10_mean": float(np.mean([s for _, s in self.oracle.best(10)] or [0])),
                "validity": len(valid) / len(keys)}  # fmt: skip

    def _augmented_update(self, smiles: list[str], rewards: np.ndarray) -> None:
        """One Augmented Memory update: the batch and every remembered molecule, each as a
        random other SMILES string, against the prior's likelihood of that string."""
        remembered = self.memory.items
        strings = smiles + [s for s, _, _ in remembered]
        scores = np.concatenate([rewards, [score for _, score, _ in remembered]])
        seed = int(self.rng.integers(2**31))
        rewritten = self.vocab.randomize(strings, self.max_tokens, seed)
        tokens = torch.from_numpy(self.vocab.batch(rewritten))
        loss, agent_ll, _, _ = self._dap(tokens, scores)
        total = loss.mean() + self.cfg.likelihood_penalty * -(1 / agent_ll).mean()
        self.optimizer.zero_grad()
        total.backward()
        self.optimizer.step()

    def _dap(self, tokens: torch.Tensor, rewards: np.ndarray,
             prior_ll: torch.Tensor | None = None):  # fmt: skip
        agent_ll, hidden = self.agent.log_likelihood(tokens)
        if prior_ll is None:
            with torch.no_grad():
                prior_ll, _ = self.prior.log_likelihood(tokens)
        augmented = prior_ll + self.cfg.sigma * torch.as_tensor(rewards, dtype=torch.float32)
        return (augmented - agent_ll) ** 2, agent_ll, prior_ll, hidden

    def state_dict(self) -> dict:
        state = {"agent": self.agent.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "oracles": [stage.oracle.state_dict() for stage in self.stages],
                 "filter": self.filter.state_dict(), "memory": [list(i) for i in self.memory.items],
                 "sampler": self.sampler.get_state(), "stalled": self.stalled,
                 "steps": self.steps, "stage": self.stage}  # fmt: skip
        if self.aligner is not None:
            state["aligner"] = self.aligner.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])
        self.optimizer.load_state_dict(state["optimizer"])
        for stage, oracle in zip(self.stages, state["oracles"], strict=True):
            stage.oracle.load_state_dict(oracle)
        self.filter.load_state_dict(state["filter"])
        self.memory.items = [(s, float(a), float(b)) for s, a, b in state["memory"]]
        self.sampler.set_state(state["sampler"])
        self.stalled, self.steps = int(state["stalled"]), int(state["steps"])
        self.stage = int(state["stage"])
        if self.aligner is not None:
            self.aligner.load_state_dict(state["aligner"])
