"""Molecular design: a REINVENT-class agent on a SMILES prior, with representation alignment
of its hidden states to frozen molecular encoders, graded on the PMO protocol against
mol-ga's graph GA."""

from __future__ import annotations

from pathlib import Path

from fieldrl.app import App
from fieldrl.apps.molecules.config import MoleculesConfig

APP = App(
    summary="Molecule generation by RL on a SMILES prior, with representation alignment.",
    config_model=MoleculesConfig,
    presets_dir=Path(__file__).parent / "configs",
    sweep_metric="top10_auc",
    status="ready (issue 25; alignment does not beat REINVENT, validity and cost targets missed)",
    units={
        "auc": "score x calls / budget",
        "_mean": "score",
        "top1": "score",
        "oracle_calls": "molecules",
        "validity": "share",
        "uniqueness": "share",
        "novelty": "share",
        "diversity": "1 - Tanimoto",
    },  # fmt: skip
    add_commands="cli:add_commands",
)
