"""Agents for the rat's tasks: PPO over the priors' latent space, and the raw-action PPO and
SAC baselines (stable-baselines3), each a core trainer with the same step budget.

With priors, the policy's action ``a`` moves the latent: ``z_t = mu_b + sigma_b x a`` with
``(mu_b, sigma_b)`` the behaviour prior's ``p(z_t | z_{t-1}, proprio)``, and the frozen
decoder turns ``z_t`` into the 38 targets. PPO's initial policy, ``a ~ N(0, 1)``, is then
exactly a random rollout of the behaviour prior: the agent starts from natural exploration
(SCAMPER's claim is that raw-action agents barely find a sparse reward).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from fieldrl.apps.rat.config import AgentConfig, RatConfig
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.npmp import BehaviourPrior, MotionPrior, next_latent
from fieldrl.sb3 import Replayable, SB3Trainer, load_sb3_policy

__all__ = [
    "AGENTS",
    "EpisodeLog",
    "LatentEnv",
    "agent_env",
    "held_out_success",
    "learning_curve",
    "load_agent_policy",
    "make_trainer",
]

AGENTS = ("prior_ppo", "motion_ppo", "ppo", "sac")
LATENT_BOUND = 3.0


class EpisodeLog(gym.Wrapper):
    """Records (environment steps so far, success, return) at the end of every episode."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps, self.episode_return = 0, 0.0
        self.episodes: list[tuple[int, bool, float]] = []

    def reset(self, **kwargs: Any) -> tuple[np.ndarray, dict[str, Any]]:
        self.episode_return = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        self.episode_return += float(reward)
        if terminated or truncated:
            self.episodes.append((self.steps, bool(info.get("success")), self.episode_return))
        return obs, reward, terminated, truncated, info

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "return": self.episode_return, "episodes": self.episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.episode_return = int(state["steps"]), float(state["return"])
        self.episodes = [(int(n), bool(won), float(r)) for n, won, r in state["episodes"]]


class LatentEnv(gym.Env):
    """The task seen through the priors: actions move the latent, the decoder acts. With
    ``behaviour=None`` the latent follows the motion prior's AR(1) prior instead
    (``z_t = alpha z_{t-1} + sqrt(1 - alpha^2) a``): the motion prior without the
    behaviour prior."""

    def __init__(self, env: RatEnv, motion: MotionPrior, behaviour: BehaviourPrior | None) -> None:
        self.env, self.motion = env, motion.eval()
        self.behaviour = behaviour.eval() if behaviour is not None else None
        latent = motion.latent
        size = env.observation_space.shape[0] + latent
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.action_space = gym.spaces.Box(-LATENT_BOUND, LATENT_BOUND, (latent,), np.float32)
        self.z = torch.zeros(1, latent)
        self.generator = torch.Generator().manual_seed(0)  # the mixture's component draws

    def _obs(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, self.z[0].numpy()]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self.z = torch.zeros(1, self.motion.latent)
        if seed is not None:
            self.generator.manual_seed(seed)
        return self._obs(obs), info

    @torch.no_grad()
    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        proprio = torch.as_tensor(self.env.body.proprioception())[None]
        a = torch.as_tensor(np.clip(action, -LATENT_BOUND, LATENT_BOUND), dtype=torch.float32)
        self.z = next_latent(self.motion, self.behaviour, self.z, proprio, a[None], self.generator)
        motor = self.motion.decode(proprio, self.z)[0].numpy().astype(np.float64)
        obs, reward, terminated, truncated, info = self.env.step(motor)
        return self._obs(obs), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        return self.env.render()


def agent_env(
    kind: str, cfg: RatConfig, priors: tuple[MotionPrior, BehaviourPrior] | None = None
) -> gym.Env:
    """The environment ``kind`` acts in: the task itself (``ppo``, ``sac``) or the task
    through the priors' latent space."""
    env: gym.Env = RatEnv(cfg)
    if kind in ("prior_ppo", "motion_ppo"):
        if priors is None:
            raise ValueError(f"{kind} needs the trained motion and behaviour priors")
        return LatentEnv(env, priors[0], priors[1] if kind == "prior_ppo" else None)
    if kind not in AGENTS:
        raise ValueError(f"unknown agent {kind!r}; choose from {', '.join(AGENTS)}")
    return env


def prior_kl_policy() -> type:
    """SB3's ``MlpPolicy`` for PPO over the latent, whose "entropy" is minus its KL to the
    prior: the agent's action is in units of the prior's std, so the prior is N(0, I), and
    PPO's entropy bonus (``ent_coef`` x entropy) becomes a KL penalty (``ent_coef`` x
    KL(pi || prior)) that keeps the agent's movement near the prior's (SCAMPER's
    regulariser). Acting is unchanged: a saved policy loads as a plain ``MlpPolicy``."""
    from stable_baselines3.common.policies import ActorCriticPolicy

    class PriorKLPolicy(ActorCriticPolicy):
        def evaluate_actions(self, obs: Any, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
            values, log_prob, _ = super().evaluate_actions(obs, actions)
            gaussian = self._evaluated.distribution  # the distribution just evaluated
            prior = torch.distributions.Normal(torch.zeros_like(gaussian.loc), 1.0)
            kl = torch.distributions.kl_divergence(gaussian, prior).sum(-1)
            return values, log_prob, -kl

        def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Any:
            self._evaluated = super()._get_action_dist_from_latent(latent_pi)
            return self._evaluated

    return PriorKLPolicy


def _algorithm(kind: str) -> type:
    from stable_baselines3 import PPO, SAC

    return SAC if kind == "sac" else PPO


def make_trainer(
    kind: str, cfg: RatConfig, seed: int, priors: tuple[MotionPrior, BehaviourPrior] | None = None
) -> SB3Trainer:
    """A trainer for ``kind`` on ``cfg.task``; its env is an :class:`EpisodeLog`
    (``trainer.log``) for the learning curve."""
    a: AgentConfig = cfg.agent
    log = EpisodeLog(Replayable(agent_env(kind, cfg, priors)))
    common = {
        "seed": seed,
        "device": "cpu",
        "verbose": 0,
        "gamma": a.gamma,
        "policy_kwargs": {"net_arch": list(a.hidden)},
    }
    if kind == "sac":
        extra = {"learning_rate": a.lr, "buffer_size": a.sac_buffer,
                 "learning_starts": a.sac_learning_starts, "batch_size": a.batch,
                 "train_freq": a.sac_train_freq, "gradient_steps": 1}  # fmt: skip
    else:
        extra = {"learning_rate": a.lr, "n_steps": a.n_steps, "batch_size": a.batch,
                 "n_epochs": a.epochs, "ent_coef": a.ent_coef}  # fmt: skip
    policy: Any = "MlpPolicy"
    if kind in ("prior_ppo", "motion_ppo") and a.prior_kl > 0:
        policy, extra["ent_coef"] = prior_kl_policy(), a.prior_kl
    model = _algorithm(kind)(policy, log, **common, **extra)
    trainer = SB3Trainer(model, a.steps, a.n_steps)
    trainer.log = log  # type: ignore[attr-defined]
    return trainer


def load_agent_policy(kind: str, cfg: RatConfig, env: gym.Env, weights: dict[str, Any]) -> Any:
    """The policy a :func:`make_trainer` of ``kind`` saved, for ``env`` (from
    :func:`agent_env`), without SB3's algorithm or a replay buffer."""
    return load_sb3_policy(_algorithm(kind), env.observation_space, env.action_space, weights,
                           net_arch=list(cfg.agent.hidden))  # fmt: skip


def learning_curve(
    episodes: list[tuple[int, bool, float]], total: int, points: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Success rate of the training episodes that ended in each of ``points`` equal slices
    of the step budget (nan where none ended), and its x positions (steps)."""
    edges = np.linspace(0, total, points + 1)
    steps = np.array([e[0] for e in episodes])
    success = np.array([e[1] for e in episodes], dtype=float)
    rates = np.full(points, np.nan)
    for k in range(points):
        inside = (steps > edges[k]) & (steps <= edges[k + 1])
        if inside.any():
            rates[k] = success[inside].mean()
    return (edges[:-1] + edges[1:]) / 2, rates


def held_out_success(policy: Any, env: gym.Env, episodes: int, first_seed: int) -> list[bool]:
    """``policy`` (anything with SB3's ``predict``), deterministic, on episodes of ``env``
    seeded ``first_seed, first_seed + 1, ...`` (disjoint from training): whether each
    succeeded."""
    wins = []
    for e in range(episodes):
        obs, _ = env.reset(seed=first_seed + e)
        done, info = False, {}
        while not done:
            action, _ = policy.predict(obs, deterministic=True)
            obs, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        wins.append(bool(info.get("success")))
    return wins
