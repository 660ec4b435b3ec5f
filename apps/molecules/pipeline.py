"""From config to a trained prior and back: pretrain (or transfer-learn) the SMILES prior
through the core loop, judge it with MOSES-style metrics, and export or load it as a small
self-describing folder (fp16 safetensors + JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.apps.molecules.config import MoleculesConfig
from fieldrl.apps.molecules.data import ZINC_PROVENANCE, read_smiles, zinc250k_path
from fieldrl.apps.molecules.metrics import internal_diversity, novelty, uniqueness, validity
from fieldrl.apps.molecules.prior import PriorTrainer, SmilesRNN
from fieldrl.apps.molecules.vocab import Vocabulary
from fieldrl.atomic import atomic_write_json, atomic_write_text
from fieldrl.errors import DataError
from fieldrl.runs import LoadedRun, Run, open_run
from fieldrl.training import fit

__all__ = ["export_prior", "load_prior", "prior_quality", "train_prior"]

PRIOR_WEIGHTS, PRIOR_META = "prior.safetensors", "prior.json"


def train_prior(cfg: MoleculesConfig, *, run: Run) -> dict[str, float]:
    """Pretrain the prior on ``prior.smiles`` (or ZINC 250k), or fine-tune ``prior.init`` on
    it, into ``run`` (resumable); writes ``data_report.json`` (every line not kept, and why)
    and returns the prior's quality on fresh samples."""
    p = cfg.prior
    start = load_prior(p.init) if p.init else None
    source = Path(p.smiles) if p.smiles else zinc250k_path()
    data = read_smiles(source, max_tokens=cfg.model.max_tokens, limit=p.limit,
                       vocab=start[1] if start else None)  # fmt: skip
    atomic_write_json(run.dir / "data_report.json", data.report())
    print(data.summary())
    order = np.random.default_rng(cfg.experiment.seed).permutation(len(data.smiles))
    held = int(len(order) * p.holdout)
    holdout = [data.smiles[i] for i in order[:held]]
    train = [data.smiles[i] for i in order[held:]]
    if not train:
        raise DataError(f"{source}: nothing left to train on after the holdout")

    def build() -> PriorTrainer:
        if start is not None:
            model, vocab = start[0], start[1]
        else:
            vocab = Vocabulary.from_smiles(train)
            m = cfg.model
            model = SmilesRNN(len(vocab), m.embedding, m.hidden, m.layers, m.dropout)
        return PriorTrainer(model, vocab, train, holdout, p, cfg.experiment.seed)

    trainer = fit(build, run, seed=cfg.experiment.seed, description="prior")
    return prior_quality(trainer.model, trainer.vocab, set(train), p.validation_samples,
                         cfg.model.max_tokens, cfg.experiment.seed)  # fmt: skip


@torch.no_grad()
def prior_quality(model: SmilesRNN, vocab: Vocabulary, training: set[str], samples: int,
                  max_tokens: int, seed: int) -> dict[str, float]:  # fmt: skip
    """MOSES-style metrics of ``samples`` fresh samples: validity, uniqueness, novelty
    against ``training`` (canonical SMILES) and internal diversity."""
    model.eval()
    drawn = model.sample(samples, vocab, max_tokens, torch.Generator().manual_seed(seed))
    smiles = [vocab.decode(t) for t in drawn.tokens]
    return {"validity": validity(smiles), "uniqueness": uniqueness(smiles),
            "novelty": novelty(smiles, training), "internal_diversity":
            internal_diversity(smiles)}  # fmt: skip


def export_prior(run: LoadedRun, out: Path, extra: dict[str, Any]) -> Path:
    """The run's prior as ``out/prior.safetensors`` (fp16) and ``out/prior.json`` (network
    spec, vocabulary, training config, the run's identity and ``extra``: data provenance,
    licence, quality metrics)."""
    from safetensors.torch import save_file

    state = run.state
    weights = {k: v.to(torch.float16).contiguous() for k, v in state["model"].items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(out / PRIOR_WEIGHTS))
    meta = {"spec": state["spec"], "vocab": state["vocab"], "trained_by": run.model_version,
            "config_hash": run.config_hash, "commit": run.commit,
            "prior_config": run.config.prior.model_dump(mode="json"),
            "model_config": run.config.model.model_dump(mode="json"), **extra}  # fmt: skip
    atomic_write_text(out / PRIOR_META, json.dumps(meta, indent=1) + "\n")
    return out


def load_prior(path: str | Path) -> tuple[SmilesRNN, Vocabulary, dict[str, Any]]:
    """A prior from an exported folder (``prior.json`` + ``prior.safetensors``) or from a
    ``train-prior`` run folder: the network (float32, eval mode), its vocabulary, its record."""
    path = Path(path)
    if (path / PRIOR_META).is_file():
        from safetensors.torch import load_file

        meta = json.loads((path / PRIOR_META).read_text())
        weights = {k: v.float() for k, v in load_file(str(path / PRIOR_WEIGHTS)).items()}
    else:
        run = open_run(path, MoleculesConfig)
        meta = {"spec": run.state["spec"], "vocab": run.state["vocab"],
                "trained_by": run.model_version}  # fmt: skip
        weights = run.state["model"]
    vocab = Vocabulary(meta["vocab"])
    if list(vocab.tokens) != list(meta["vocab"]):
        raise DataError(f"{path}: the vocabulary is not in the saved order")
    model = SmilesRNN(**meta["spec"])
    model.load_state_dict(weights)
    model.eval()
    return model, vocab, meta


ZINC = {"data": ZINC_PROVENANCE, "licence": "weights: MIT (fieldrl); data: ZINC, free to use"}
