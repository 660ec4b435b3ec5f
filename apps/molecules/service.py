"""The molecule service: generate N molecules from a run's agent and score them with the run's
objective, and/or score posted SMILES with each component's value. Invalid SMILES are
reported per item, never an error for the request. The work a request may cost is bounded:
at most ``MAX_HEAVY_ATOMS`` heavy atoms a molecule, molecules scored one at a time, and
scoring stops with a 422 once it has used ``SCORE_CPU_SECONDS`` of CPU (a
pharmacophore-similarity objective costs ~100 times what QED does, so no count alone can
bound it)."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import torch
from pydantic import Field
from rdkit import Chem

from fieldrl.apps.molecules.oracles import Objective, canonical, to_mol
from fieldrl.apps.molecules.pipeline import build_objective
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = [
    "MAX_GENERATE",
    "MAX_HEAVY_ATOMS",
    "MAX_SCORE",
    "SCORE_CPU_SECONDS",
    "example_request",
    "service",
]

MAX_GENERATE, MAX_SCORE, MAX_SMILES_CHARS = 256, 2000, 500
# ZINC 250k's largest molecule has 38 heavy atoms; at 70 the slowest objective (scaffold_hop's
# pharmacophore fingerprint, cubic in atoms) takes about 0.7 s for one molecule.
MAX_HEAVY_ATOMS = 70
SCORE_CPU_SECONDS = 1.0


Smiles = Annotated[str, Field(min_length=1, max_length=MAX_SMILES_CHARS)]


class MoleculeRequest(RequestModel):
    generate: int = Field(0, ge=0, le=MAX_GENERATE, description="Molecules to sample.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="Seed of the samples.")
    score: list[Smiles] = Field(
        default_factory=list, max_length=MAX_SCORE, description="SMILES to score."
    )


class Molecule(ResponseModel):
    smiles: str = Field(description="As generated or posted.")
    canonical: str | None = Field(description="rdkit's canonical SMILES; null if invalid.")
    valid: bool
    score: float | None = Field(description="The objective, in [0, 1]; null if invalid.")
    components: dict[str, float] = Field(description="Each component's transformed score.")
    source: Literal["generated", "posted"]


class MoleculeResponse(ResponseModel):
    molecules: list[Molecule]
    objective: str
    model_version: str


def _parse(smiles: str, where: str) -> Chem.Mol | None:
    """The molecule as the objective reads it (None if rdkit cannot); a 422 naming ``where``
    for one over ``MAX_HEAVY_ATOMS``, counted on a quick unsanitized read first."""
    raw = Chem.MolFromSmiles(smiles, sanitize=False)
    if raw is None:
        return None
    heavy = sum(atom.GetAtomicNum() > 1 for atom in raw.GetAtoms())
    if heavy > MAX_HEAVY_ATOMS:
        raise InputError(where, f"{heavy} heavy atoms; the service scores molecules of at most "
                         f"{MAX_HEAVY_ATOMS}")  # fmt: skip
    return to_mol(smiles)


class _Budget:
    """The CPU time a request may spend scoring, shared by its generated and posted molecules."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.start = seconds, time.thread_time()

    def check(self, where: str, done: int, total: int) -> None:
        if time.thread_time() - self.start > self.seconds:
            raise InputError(where, f"scoring stopped at this request's {self.seconds:g} s of "
                             f"CPU after {done} of {total} molecules: send fewer or smaller "
                             "molecules per request")  # fmt: skip


def _score(objective: Objective, smiles: list[str], source: str, budget: _Budget) -> list[Molecule]:
    """Each SMILES parsed once and scored alone, so the budget is checked between molecules."""
    field, out = "score" if source == "posted" else "generate", []
    for i, s in enumerate(smiles):
        budget.check(field, i, len(smiles))
        # the agent's own samples (at most max_tokens long) are scored whatever their size
        mol = _parse(s, f"{field}.{i}") if source == "posted" else to_mol(s)
        if mol is None:
            out.append(Molecule(smiles=s, canonical=None, valid=False, score=None,
                                components={}, source=source))  # fmt: skip
            continue
        score, parts = objective.scored([mol])
        out.append(Molecule(smiles=s, canonical=canonical(mol), valid=True, score=float(score[0]),
                            components={n: float(v[0]) for n, v in parts.items()},
                            source=source))  # fmt: skip
    budget.check(field, len(smiles), len(smiles))
    return out


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's agent and the objective of its last stage."""
    cfg = run.config
    agent, vocab = run.trained
    objective = build_objective(cfg.stages[-1])
    name = cfg.stages[-1].task or "own objective (" + ", ".join(
        c.kind for c in cfg.stages[-1].components) + ")"  # fmt: skip

    def act(request: MoleculeRequest) -> MoleculeResponse:
        if not request.generate and not request.score:
            raise InputError("generate", "ask for molecules (generate > 0) or send score")
        molecules, budget = [], _Budget(SCORE_CPU_SECONDS)
        if request.generate:
            generator = torch.Generator().manual_seed(request.seed or 0)
            drawn = agent.sample(request.generate, vocab, cfg.model.max_tokens, generator)
            generated = [vocab.decode(t) for t in drawn.tokens]
            molecules += _score(objective, generated, "generated", budget)
        molecules += _score(objective, list(request.score), "posted", budget)
        return MoleculeResponse(molecules=molecules, objective=name,
                                model_version=run.model_version)  # fmt: skip

    return ServiceSpec.for_run(run, MoleculeRequest, MoleculeResponse, act,
                               info={"objective": name, "max_generate": MAX_GENERATE,
                                     "max_score": MAX_SCORE, "max_heavy_atoms": MAX_HEAVY_ATOMS,
                                     "score_cpu_seconds": SCORE_CPU_SECONDS})  # fmt: skip


def example_request(run: LoadedRun) -> dict[str, Any]:
    """Eight new molecules, and two posted ones (aspirin and a broken SMILES)."""
    return {"generate": 8, "seed": 0, "score": ["CC(=O)Oc1ccccc1C(=O)O", "C1CC"]}
