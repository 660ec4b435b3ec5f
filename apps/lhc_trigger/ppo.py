"""PPO controllers: stable-baselines3 PPO on the reward, and a Lagrangian PPO that treats
the rate band as two constraints (reward = signal efficiency; costs = 1 above the band,
1 below it).

The Lagrangian version is CleanRL-style: rollouts on :class:`TriggerEnv`, GAE for reward
and each cost separately, advantage ``A_r - sum_i lambda_i * A_ci`` and dual ascent on each
lambda so that the over- and under-budget fractions of windows stay under their limits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from fieldrl.apps.lhc_trigger.config import LHCTriggerConfig
from fieldrl.apps.lhc_trigger.env import Calibration, TriggerEnv
from fieldrl.apps.lhc_trigger.gfpo import make_policy
from fieldrl.apps.lhc_trigger.stream import Stream
from fieldrl.policies import ActorCritic, mlp
from fieldrl.rl import gae, ppo_clip_loss
from fieldrl.sb3 import Replayable, SB3Trainer, from_sb3

__all__ = ["LagrangianPPOTrainer", "SB3PPOTrainer"]


class SB3PPOTrainer(SB3Trainer):
    """SB3 PPO on the environment's reward, one rollout a :meth:`step`, resumable exactly
    like every :class:`~fieldrl.sb3.SB3Trainer`; ``policy`` is the core ActorCritic."""

    def __init__(self, cfg: LHCTriggerConfig, streams: Sequence[Stream], calib: Calibration,
                 rng: np.random.Generator) -> None:  # fmt: skip
        from stable_baselines3 import PPO

        p = cfg.ppo
        model = PPO(
            "MlpPolicy",
            Replayable(TriggerEnv(streams, calib, cfg.control)),
            learning_rate=p.lr,
            n_steps=p.n_steps,
            batch_size=p.batch_size,
            n_epochs=p.epochs,
            gamma=p.gamma,
            gae_lambda=p.lam,
            clip_range=p.clip,
            ent_coef=p.ent_coef,
            policy_kwargs={
                "net_arch": list(cfg.policy.hidden),
                "log_std_init": cfg.policy.log_std_init,
            },
            seed=int(rng.integers(2**31)),
            device="cpu",
            verbose=0,
        )
        super().__init__(model, cfg.train.windows, p.n_steps)

    @property
    def policy(self) -> ActorCritic:
        return from_sb3(self.model)


class LagrangianPPOTrainer:
    """PPO maximising signal efficiency subject to E[over] <= over_limit and
    E[under] <= under_limit, one rollout of ``ppo.n_steps`` windows and its update per
    :meth:`step` (a :class:`fieldrl.training.Trainer`; the episode in progress is part of
    the state, so a resumed run continues exactly)."""

    def __init__(self, cfg: LHCTriggerConfig, streams: Sequence[Stream], calib: Calibration,
                 rng: np.random.Generator) -> None:  # fmt: skip
        self.cfg, self.calib, self.rng = cfg, calib, rng
        self.generators = (rng,)
        self.total, self.done = cfg.train.windows, 0
        self.env = TriggerEnv(streams, calib, cfg.control)
        self.policy = make_policy(cfg)
        width = self.env.observation_space.shape[0]
        self.cost_critic = mlp(width, cfg.policy.hidden, 2, cfg.policy.activation)
        self.params = [*self.policy.parameters(), *self.cost_critic.parameters()]
        self.optim = torch.optim.Adam(self.params, lr=cfg.ppo.lr)
        self.lagrange = torch.zeros(2)
        self.stream_index, self.applied = 0, []
        self.obs = self._new_episode()

    def _new_episode(self) -> np.ndarray:
        self.stream_index, self.applied = int(self.rng.integers(len(self.env.streams))), []
        return self.env.reset(options={"stream": self.stream_index})[0]

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "cost_critic": self.cost_critic.state_dict(),
                "optim": self.optim.state_dict(), "lagrange": self.lagrange.tolist(),
                "windows": self.done, "stream": self.stream_index,
                "applied": list(self.applied)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.cost_critic.load_state_dict(state["cost_critic"])
        self.optim.load_state_dict(state["optim"])
        self.lagrange = torch.as_tensor(state["lagrange"], dtype=torch.float32)
        self.done = int(state["windows"])
        self.stream_index, self.applied = int(state["stream"]), [float(h) for h in state["applied"]]
        self.env.reset(options={"stream": self.stream_index})
        self.env.last = self.env.replay.replay_to(self.applied)
        self.obs = self.env.last.vector(self.calib, self.cfg.control)

    def step(self) -> dict[str, float]:
        p, control, policy = self.cfg.ppo, self.cfg.control, self.policy
        limits = torch.tensor([p.over_limit, p.under_limit])
        buf = {k: [] for k in ("obs", "act", "logp", "rew", "cost", "done", "v", "vc")}
        for _ in range(p.n_steps):
            x = torch.as_tensor(self.obs)[None]
            with torch.no_grad():
                dist = policy.distribution(x)
                action = dist.sample()
                buf["logp"].append(dist.log_prob(action)[0])
                buf["v"].append(policy.value(x)[0])
                buf["vc"].append(self.cost_critic(x)[0])
            obs_next, _, terminated, _, info = self.env.step(action[0].numpy())
            self.applied.append(info["threshold"])
            eff = info["efficiency"]
            buf["obs"].append(x[0])
            buf["act"].append(action[0])
            buf["rew"].append(control.reward_efficiency * (0.0 if np.isnan(eff) else eff))
            error = info["rate"] / control.target_rate - 1.0
            buf["cost"].append([float(error > control.band), float(error < -control.band)])
            buf["done"].append(float(terminated))
            self.obs = self._new_episode() if terminated else obs_next
        x = torch.as_tensor(self.obs)[None]
        with torch.no_grad():
            last_v, last_vc = policy.value(x), self.cost_critic(x)[0]
        t = {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) if k in ("rew", "cost", "done")
             else torch.stack(v) for k, v in buf.items()}  # fmt: skip
        adv_r, ret_r = gae(
            t["rew"][:, None], t["v"][:, None], t["done"][:, None], last_v, p.gamma, p.lam
        )
        dones = t["done"][:, None].expand(-1, 2)  # the two costs as two "envs" for GAE
        adv_c, ret_c = gae(t["cost"], t["vc"], dones, last_vc, p.gamma, p.lam)
        mean_cost = t["cost"].mean(0)
        self.lagrange = (self.lagrange + p.lambda_lr * (mean_cost - limits)).clamp(min=0.0)
        adv = (adv_r[:, 0] - adv_c @ self.lagrange) / (1.0 + self.lagrange.sum())
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        for _ in range(p.epochs):
            for idx in torch.randperm(p.n_steps).split(p.batch_size):
                logp, entropy, value = policy.evaluate_actions(t["obs"][idx], t["act"][idx])
                pg_loss, stats = ppo_clip_loss(logp, t["logp"][idx], adv[idx], p.clip)
                v_loss = (value - ret_r[idx, 0]).pow(2).mean()
                vc_loss = (self.cost_critic(t["obs"][idx]) - ret_c[idx]).pow(2).mean()
                loss = pg_loss + 0.5 * (v_loss + vc_loss) - p.ent_coef * entropy.mean()
                self.optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.params, 0.5)
                self.optim.step()
        self.done += p.n_steps
        lam, cost = self.lagrange, mean_cost
        return {**stats, "lambda_over": float(lam[0]), "lambda_under": float(lam[1]),
                "over_budget": float(cost[0]), "under_budget": float(cost[1])}  # fmt: skip
