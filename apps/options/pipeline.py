"""Config in, trained agent out: train MaskablePPO on a suite's training episodes into a
run folder (resumable), and load a run's agent back for evaluation and serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.ppo import MaskablePPOTrainer
from fieldrl.runs import Run, open_run
from fieldrl.training import fit

__all__ = ["load_agent", "train"]


def train(cfg: OptionsConfig, *, run: Run | None) -> MaskablePPOTrainer:
    """MaskablePPO on ``cfg.ppo.train_episodes`` training episodes of the config's suite."""
    seed = cfg.experiment.seed
    episodes = make_episodes(cfg, "train", cfg.ppo.train_episodes, seed)
    return fit(lambda: MaskablePPOTrainer(cfg, episodes, seed), run, seed=seed,
               description=f"MaskablePPO on {cfg.suite.name}")  # fmt: skip


def load_agent(run_dir: str | Path) -> tuple[Any, OptionsConfig]:
    """A trained run's MaskablePPO model (its policy and optimizer from the checkpoint)
    and its config."""
    loaded = open_run(run_dir, OptionsConfig)
    cfg = loaded.config
    trainer = MaskablePPOTrainer(cfg, make_episodes(cfg, "validation", 1), cfg.experiment.seed)
    trainer.load_state_dict(loaded.state)
    return trainer.model, cfg
