"""MaskablePPO (sb3-contrib) on the options environment, as a core
:class:`~fieldrl.sb3.SB3Trainer`: each step collects one rollout and updates. A resumed run
rebuilds the model and goes on exactly where it stopped: the core trainer restores the
collection in progress and replays the environment's episode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import KEPT, AgentView, OptionsEnv
from fieldrl.apps.options.episodes import Episode
from fieldrl.sb3 import Replayable, SB3Trainer

__all__ = ["MaskablePPOTrainer", "masked_policy"]


class MaskablePPOTrainer(SB3Trainer):
    def __init__(self, cfg: OptionsConfig, episodes: Sequence[Episode], seed: int) -> None:
        from sb3_contrib import MaskablePPO

        p = cfg.ppo
        # drawn at random from thousands of paths, an episode rarely comes back: keeping
        # KEPT episodes' plans would hold ~1 GB for a hit rate of a few percent
        keep = KEPT if len(episodes) <= KEPT else 1
        self.cfg, self.env = cfg, OptionsEnv(cfg, episodes, keep)
        model = MaskablePPO(
            "MlpPolicy", Replayable(self.env), learning_rate=p.lr, n_steps=p.n_steps,
            batch_size=p.batch_size, n_epochs=p.epochs, gamma=p.gamma,
            gae_lambda=p.gae_lambda, clip_range=p.clip, ent_coef=p.ent_coef,
            policy_kwargs={"net_arch": list(p.hidden)}, seed=seed, device="cpu", verbose=0,
        )  # fmt: skip
        super().__init__(model, p.timesteps, p.n_steps)


def masked_policy(model: Any, deterministic: bool = True):
    """A policy for :func:`~fieldrl.apps.options.evaluate.run_episode` from a trained
    MaskablePPO: its action among those the mask allows."""

    def policy(view: AgentView) -> int:
        action, _ = model.predict(view.observation, action_masks=view.mask,
                                  deterministic=deterministic)  # fmt: skip
        return int(action)

    return policy
