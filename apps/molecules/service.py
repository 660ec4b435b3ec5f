"""The molecule service: generate N molecules from a run's agent and score them with the run's
objective, and/or score posted SMILES with each component's value. Invalid SMILES are
reported per item, never an error for the request."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from fieldrl.apps.molecules.oracles import Objective, canonical, to_mol
from fieldrl.apps.molecules.pipeline import build_objective, load_agent
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["MAX_GENERATE", "MAX_SCORE", "example_request", "service"]

MAX_GENERATE, MAX_SCORE, MAX_SMILES_CHARS = 256, 2000, 500  # about a second of work at most


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


def _score(objective: Objective, smiles: list[str], source: str) -> list[Molecule]:
    mols = [to_mol(s) for s in smiles]
    valid = [m for m in mols if m is not None]
    scores = objective(valid) if valid else []
    parts = objective.breakdown(valid) if valid else {}
    out, k = [], 0
    for s, mol in zip(smiles, mols, strict=True):
        if mol is None:
            out.append(Molecule(smiles=s, canonical=None, valid=False, score=None,
                                components={}, source=source))  # fmt: skip
            continue
        out.append(Molecule(smiles=s, canonical=canonical(s), valid=True, score=float(scores[k]),
                            components={n: float(v[k]) for n, v in parts.items()},
                            source=source))  # fmt: skip
        k += 1
    return out


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's agent and the objective of its last stage."""
    cfg = run.config
    agent, vocab = load_agent(run)
    objective = build_objective(cfg.stages[-1])
    name = cfg.stages[-1].task or "own objective (" + ", ".join(
        c.kind for c in cfg.stages[-1].components) + ")"  # fmt: skip

    def act(request: MoleculeRequest) -> MoleculeResponse:
        if not request.generate and not request.score:
            raise InputError("generate", "ask for molecules (generate > 0) or send score")
        molecules = []
        if request.generate:
            generator = torch.Generator().manual_seed(request.seed or 0)
            drawn = agent.sample(request.generate, vocab, cfg.model.max_tokens, generator)
            molecules += _score(objective, [vocab.decode(t) for t in drawn.tokens], "generated")
        molecules += _score(objective, list(request.score), "posted")
        return MoleculeResponse(molecules=molecules, objective=name,
                                model_version=run.model_version)  # fmt: skip

    return ServiceSpec(cfg.app, MoleculeRequest, MoleculeResponse, act,
                       model_version=run.model_version, config_hash=run.config_hash,
                       info={"objective": name, "max_generate": MAX_GENERATE,
                             "max_score": MAX_SCORE})  # fmt: skip


def example_request(run: LoadedRun) -> dict[str, Any]:
    """Eight new molecules, and two posted ones (aspirin and a broken SMILES)."""
    return {"generate": 8, "seed": 0, "score": ["CC(=O)Oc1ccccc1C(=O)O", "C1CC"]}
