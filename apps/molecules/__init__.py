"""Molecular design: a REINVENT-class agent on a SMILES prior, with representation alignment
of its hidden states to frozen molecular encoders, graded on the PMO protocol against
mol-ga's graph GA.

Where things are (the core finds the hooks by these names, ``App`` lists them):
- ``config``; ``vocab``, ``prior`` (the SMILES GRU), ``data`` (SMILES files);
- ``oracles`` (objectives, PMO tasks), ``metrics`` (the oracle budget, set metrics);
- ``reinvent``, ``alignment``: the agent; ``baselines``: prior sampling and mol-ga;
- ``pipeline``: ``train``, ``load``, ``evaluate`` (and the prior); ``cli``: ``train-prior``,
  ``optimize``, ``tasks``;
- ``service``: ``service``, ``example_request``; ``benchmark``: PMO-style; ``report``: its
  sections and the demo.
"""

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
