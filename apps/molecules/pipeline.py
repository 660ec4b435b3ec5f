"""From config to a trained prior and back: pretrain (or transfer-learn) the SMILES prior
through the core loop, judge it with MOSES-style metrics, and export or load it as a small
self-describing folder (fp16 safetensors + JSON)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.apps.molecules.alignment import (
    Aligner,
    ChemNetEncoder,
    EmbeddingFile,
    FingerprintEncoder,
)
from fieldrl.apps.molecules.config import SHIPPED_PRIOR, MoleculesConfig, StageConfig
from fieldrl.apps.molecules.data import (
    ZINC_PROVENANCE,
    known_molecules,
    read_smiles,
    zinc250k_path,
)
from fieldrl.apps.molecules.metrics import (
    OracleBudget,
    internal_diversity,
    novelty,
    uniqueness,
    validity,
)
from fieldrl.apps.molecules.oracles import (
    COMPONENTS,
    TASKS,
    Component,
    Objective,
    Transform,
    to_mol,
)
from fieldrl.apps.molecules.prior import PriorTrainer, SmilesRNN
from fieldrl.apps.molecules.reinvent import ReinventTrainer, Stage
from fieldrl.apps.molecules.vocab import Vocabulary
from fieldrl.atomic import atomic_write_json, atomic_write_text
from fieldrl.config import ConfigError
from fieldrl.errors import DataError
from fieldrl.runs import LoadedRun, Run, open_run
from fieldrl.training import fit

__all__ = [
    "build_objective",
    "export_prior",
    "evaluate",
    "load",
    "prior_training_set",
    "sample_report",
    "load_prior",
    "make_aligner",
    "optimize",
    "prior_quality",
    "train_prior",
]

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
    return prior_quality(trainer.model, trainer.vocab, train, holdout, p.validation_samples,
                         cfg.model.max_tokens, cfg.experiment.seed)  # fmt: skip


@torch.no_grad()
def prior_quality(model: SmilesRNN, vocab: Vocabulary, training: list[str], holdout: list[str],
                  samples: int, max_tokens: int, seed: int) -> dict[str, float]:  # fmt: skip
    """MOSES-style metrics of ``samples`` fresh samples: validity, uniqueness, novelty
    against ``training``, internal diversity, and the Frechet ChemNet distance to the held-out
    molecules (to as many training molecules without a holdout)."""
    import fcd

    model.eval()
    drawn = model.sample(samples, vocab, max_tokens, torch.Generator().manual_seed(seed))
    smiles = [vocab.decode(t) for t in drawn.tokens]
    valid = [s for s in smiles if to_mol(s) is not None]
    reference = (holdout or training)[:samples]
    distance = fcd.get_fcd(valid, reference) if len(valid) > 1 and len(reference) > 1 else None
    return {"validity": validity(smiles), "uniqueness": uniqueness(smiles),
            "novelty": novelty(smiles, set(training)), "internal_diversity":
            internal_diversity(smiles), "fcd": float("nan") if distance is None
            else float(distance)}  # fmt: skip


def export_prior(run_dir: Path, out: Path, extra: dict[str, Any]) -> Path:
    """A ``train-prior`` run's prior as ``out/prior.safetensors`` (fp16) and
    ``out/prior.json`` (network spec, vocabulary, training config, the run's identity and
    ``extra``: data provenance, licence, quality metrics)."""
    from safetensors.torch import save_file

    run = open_run(run_dir, MoleculesConfig)
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


def build_objective(stage: StageConfig) -> Objective:
    """A stage's objective: the named PMO task, or its components (checked here: a bad
    SMILES target or SMARTS is named before any training)."""
    if stage.task is not None:
        return TASKS[stage.task]
    parts = []
    for i, c in enumerate(stage.components):
        if c.kind not in COMPONENTS:
            raise ConfigError(f"stages: component {i}: unknown kind {c.kind!r}; one of "
                              f"{', '.join(COMPONENTS)}")  # fmt: skip
        component = Component(c.kind, c.target, c.fp, c.inverse,
                              Transform(**c.transform.model_dump()), c.weight)  # fmt: skip
        try:
            component([to_mol("CCO")])
        except ValueError as exc:
            raise ConfigError(f"stages: component {i} ({c.kind}): {exc}") from None
        parts.append(component)
    return Objective(tuple(parts), stage.mean)


@functools.cache
def _chemnet() -> ChemNetEncoder:
    return ChemNetEncoder()


def _fitted_fingerprints(prior: SmilesRNN, vocab: Vocabulary, dim: int, molecules: int,
                         max_tokens: int, seed: int) -> FingerprintEncoder:  # fmt: skip
    """The fingerprint encoder fitted on valid molecules sampled from the prior, kept per
    process: the benchmark's many runs in one worker fit it once (a fit costs ~18 s)."""
    weights = hashlib.sha1()
    for tensor in prior.state_dict().values():
        weights.update(tensor.numpy().tobytes())
    key = (weights.hexdigest(), tuple(vocab.tokens), dim, molecules, max_tokens, seed)
    if key not in _FINGERPRINTS:
        drawn = prior.sample(molecules, vocab, max_tokens, torch.Generator().manual_seed(seed))
        smiles = [s for s in (vocab.decode(t) for t in drawn.tokens) if to_mol(s) is not None]
        _FINGERPRINTS.clear()
        _FINGERPRINTS[key] = FingerprintEncoder.fit(smiles, dim)
    return _FINGERPRINTS[key]


_FINGERPRINTS: dict[tuple, FingerprintEncoder] = {}


def make_aligner(cfg: MoleculesConfig, prior: SmilesRNN, vocab: Vocabulary) -> Aligner | None:
    """The configured encoder and a fresh projection head (None without alignment). The
    fingerprint encoder is fitted on valid molecules sampled from the prior itself."""
    a = cfg.alignment
    if a.encoder == "none":
        return None
    if a.encoder == "chemnet":
        encoder = _chemnet()
    elif a.encoder == "file":
        if not a.file:
            raise ConfigError("alignment.encoder = 'file' needs alignment.file")
        encoder = EmbeddingFile(a.file)
    else:
        encoder = _fitted_fingerprints(prior, vocab, a.dim, a.fit_molecules,
                                       cfg.model.max_tokens, cfg.experiment.seed)  # fmt: skip
    if a.level == "atom" and a.encoder != "fingerprint":
        raise ConfigError("alignment.level = 'atom' needs alignment.encoder = 'fingerprint'")
    return Aligner(encoder, prior.spec["hidden"], a.weight, a.level, a.by_score, a.on, a.anneal)


def optimize(cfg: MoleculesConfig, *, run: Run | None) -> ReinventTrainer:
    """REINVENT (with alignment if configured) on the config's stages, from its prior, into
    ``run`` (resumable); ``run=None`` for the benchmark's many short runs."""
    prior, vocab, _ = load_prior(cfg.agent.prior or SHIPPED_PRIOR)
    stages = [Stage(OracleBudget(build_objective(s), s.budget), s.stop_at) for s in cfg.stages]
    seed = cfg.experiment.seed

    def build() -> ReinventTrainer:
        aligner = make_aligner(cfg, prior, vocab)
        return ReinventTrainer(prior, vocab, stages, cfg.agent, cfg.model.max_tokens, seed,
                               aligner)  # fmt: skip

    return fit(build, run, seed=seed, description="REINVENT")


def prior_training_set(prior: str | None) -> set[str]:
    """The canonical SMILES a prior (None: the shipped one) was trained on, from its record."""
    _, _, meta = load_prior(prior or SHIPPED_PRIOR)
    source = meta.get("prior_config", {}).get("smiles") or zinc250k_path()
    return known_molecules(source)


@torch.no_grad()
def sample_report(
    model: SmilesRNN, vocab: Vocabulary, objective: Objective, n: int, max_tokens: int,
    seed: int, training: set[str],
) -> tuple[dict, list[str]]:  # fmt: skip
    """``n`` fresh samples of ``model`` scored by ``objective``: the figures, and the SMILES."""
    drawn = model.sample(n, vocab, max_tokens, torch.Generator().manual_seed(seed))
    smiles = [vocab.decode(t) for t in drawn.tokens]
    valid = [s for s in smiles if to_mol(s) is not None]
    scores = np.sort(objective([to_mol(s) for s in valid]))[::-1] if valid else np.zeros(1)
    return {"score_mean": float(scores.mean()), "top10_mean": float(scores[:10].mean()),
            "validity": validity(smiles), "uniqueness": uniqueness(smiles),
            "novelty": novelty(smiles, training),
            "internal_diversity": internal_diversity(smiles)}, valid  # fmt: skip


def evaluate(cfg: MoleculesConfig, *, run: LoadedRun, resources: object, out: Path
             ) -> dict[str, float]:  # fmt: skip
    """The run's agent against its prior: ``eval.samples`` fresh molecules each (seed
    ``eval.seed``), scored by the run's last objective; writes ``eval.json``."""
    agent, vocab = run.trained
    prior, _, _ = load_prior(cfg.agent.prior or SHIPPED_PRIOR)
    objective = build_objective(cfg.stages[-1])
    training = prior_training_set(cfg.agent.prior)
    rows = []
    for name, model in (("agent", agent), ("prior", prior)):
        figures, _ = sample_report(model, vocab, objective, cfg.eval.samples,
                                   cfg.model.max_tokens, cfg.eval.seed, training)  # fmt: skip
        rows.append({"model": name, **figures})
    metrics = {f"{r['model']}_{k}": v for r in rows for k, v in r.items() if k != "model"}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "eval.json", {"rows": rows, "metrics": metrics})
    return metrics


def load(run: LoadedRun) -> tuple[SmilesRNN, Vocabulary]:
    """``App.load``: the run's agent (eval mode) and its vocabulary."""
    prior, vocab, _ = load_prior(run.config.agent.prior or SHIPPED_PRIOR)
    prior.load_state_dict(run.state["agent"])
    return prior.eval(), vocab


def train(cfg: MoleculesConfig, *, run: Run, resources: object) -> dict[str, float]:
    """Optimize the config's stages into ``run``; the last stage's top-1/10/100 and AUC, and
    ``top_molecules.csv`` (the 100 best, with each component's score)."""
    trainer = optimize(cfg, run=run)
    oracle = trainer.stages[-1].oracle
    best = oracle.best(100)
    objective = build_objective(cfg.stages[-1])
    parts = objective.breakdown([to_mol(s) for s, _ in best]) if best else {}
    header = ["smiles", "score", *parts]
    rows = [",".join([s, f"{v:.4f}", *(f"{parts[k][i]:.4f}" for k in parts)])
            for i, (s, v) in enumerate(best)]  # fmt: skip
    atomic_write_text(run.dir / "top_molecules.csv", "\n".join([",".join(header), *rows]) + "\n")
    summary = oracle.summary()
    return {k: summary[k] for k in ("top1", "top10_mean", "top100_mean", "top10_auc",
                                    "validity", "oracle_calls")}  # fmt: skip
