"""MaskablePPO (sb3-contrib) on the options environment, as a core :class:`Trainer`: each
:meth:`step` collects one rollout and updates, so the core loop logs, checkpoints and
resumes it. The checkpoint holds the policy's and the optimizer's tensors (no pickled SB3
zip); a resumed run rebuilds the model, loads them and goes on from the same step count
(the rollout in progress and the environment's episode restart)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import Episode

__all__ = ["MaskablePPOTrainer", "masked_policy"]


class MaskablePPOTrainer:
    def __init__(self, cfg: OptionsConfig, episodes: list[Episode], seed: int) -> None:
        from sb3_contrib import MaskablePPO

        p = cfg.ppo
        self.cfg, self.env = cfg, OptionsEnv(cfg, episodes)
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng,)
        self.total, self.done = p.timesteps, 0
        self.model = MaskablePPO(
            "MlpPolicy", self.env, learning_rate=p.lr, n_steps=p.n_steps,
            batch_size=p.batch_size, n_epochs=p.epochs, gamma=p.gamma,
            gae_lambda=p.gae_lambda, clip_range=p.clip, ent_coef=p.ent_coef,
            policy_kwargs={"net_arch": list(p.hidden)}, seed=seed, device="cpu", verbose=0,
        )  # fmt: skip

    def step(self) -> dict[str, float]:
        chunk = min(self.cfg.ppo.n_steps, self.total - self.done)
        self.model.learn(chunk, reset_num_timesteps=False, progress_bar=False)
        self.done = min(int(self.model.num_timesteps), self.total)
        if self.done < self.total and self.done % self.cfg.ppo.n_steps:
            self.done = self.total  # SB3 rounds a rollout up: the budget is spent
        logged = self.model.logger.name_to_value
        return {k.split("/")[-1]: float(v) for k, v in logged.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.model.policy.state_dict(),
                "optimizer": self.model.policy.optimizer.state_dict(),
                "timesteps": self.done}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.policy.load_state_dict(state["policy"])
        self.model.policy.optimizer.load_state_dict(state["optimizer"])
        self.done = int(state["timesteps"])
        self.model.num_timesteps = self.done


def masked_policy(model: Any, deterministic: bool = True):
    """A policy for :func:`~fieldrl.apps.options.evaluate.run_episode` from a trained
    MaskablePPO: its action among those the mask allows."""

    def policy(env: OptionsEnv) -> int:
        obs = env.observation()
        action, _ = model.predict(obs, action_masks=env.action_masks(),
                                  deterministic=deterministic)  # fmt: skip
        return int(action)

    return policy
