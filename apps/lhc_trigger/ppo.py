"""PPO controllers: stable-baselines3 PPO on the reward, and a Lagrangian PPO that treats
the rate band as two constraints (reward = signal efficiency; costs = 1 above the band,
1 below it).

The Lagrangian version is CleanRL-style: rollouts on :class:`TriggerEnv`, GAE for reward
and each cost separately, advantage ``A_r - sum_i lambda_i * A_ci`` and dual ascent on each
lambda so that the over- and under-budget fractions of windows stay under their limits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from fieldrl.apps.lhc_trigger.config import LHCTriggerConfig
from fieldrl.apps.lhc_trigger.env import Calibration, TriggerEnv
from fieldrl.apps.lhc_trigger.gfpo import make_policy
from fieldrl.apps.lhc_trigger.stream import Stream
from fieldrl.policies import ActorCritic, mlp
from fieldrl.rl import gae, ppo_clip_loss
from fieldrl.seeding import get_rng_state, set_rng_state

__all__ = ["train_lagrangian_ppo", "train_sb3_ppo"]

Log = Callable[[int, dict[str, float]], None]


def train_sb3_ppo(
    cfg: LHCTriggerConfig,
    streams: Sequence[Stream],
    calib: Calibration,
    log: Log,
    advance: Callable[[int], None],
    seed: int = 0,
) -> ActorCritic:
    """SB3 PPO on the environment's reward, converted to a core ActorCritic."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    from fieldrl.sb3 import from_sb3

    class Progress(BaseCallback):
        def _on_step(self) -> bool:
            advance(1)
            return True

        def _on_rollout_end(self) -> None:
            values = self.model.logger.name_to_value
            log(self.num_timesteps, {k.split("/")[-1]: float(v) for k, v in values.items()})

    p = cfg.ppo
    model = PPO(
        "MlpPolicy",
        TriggerEnv(streams, calib, cfg.control),
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
        seed=seed,
        device="cpu",
        verbose=0,
    )
    model.learn(cfg.train.windows, callback=Progress())
    return from_sb3(model)


def train_lagrangian_ppo(
    cfg: LHCTriggerConfig,
    streams: Sequence[Stream],
    calib: Calibration,
    log: Log,
    advance: Callable[[int], None],
    seed: int = 0,
    checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> ActorCritic:
    """PPO maximising signal efficiency subject to E[over] <= over_limit, E[under] <= under_limit.

    Checkpoints every ``experiment.checkpoint_every`` rollouts; ``resume`` continues.
    """
    p, control = cfg.ppo, cfg.control
    env = TriggerEnv(streams, calib, control)
    policy = make_policy(cfg)
    cost_critic = mlp(env.observation_space.shape[0], cfg.policy.hidden, 2, cfg.policy.activation)
    limits = torch.tensor([p.over_limit, p.under_limit])
    params = [*policy.parameters(), *cost_critic.parameters()]
    optim = torch.optim.Adam(params, lr=p.lr)
    lagrange = torch.zeros(2)
    obs, _ = env.reset(seed=seed)
    done_steps = rollouts = 0
    if resume is not None:
        policy.load_state_dict(resume["policy"])
        cost_critic.load_state_dict(resume["cost_critic"])
        optim.load_state_dict(resume["optim"])
        set_rng_state(resume["rng"])
        lagrange, done_steps, rollouts = resume["lagrange"], resume["windows"], resume["rollouts"]
        lagrange = torch.as_tensor(lagrange)
        obs, _ = env.reset(seed=seed + rollouts)
        advance(done_steps)
    while done_steps < cfg.train.windows:
        buf = {k: [] for k in ("obs", "act", "logp", "rew", "cost", "done", "v", "vc")}
        for _ in range(p.n_steps):
            x = torch.as_tensor(obs)[None]
            with torch.no_grad():
                dist = policy.distribution(x)
                action = dist.sample()
                buf["logp"].append(dist.log_prob(action)[0])
                buf["v"].append(policy.value(x)[0])
                buf["vc"].append(cost_critic(x)[0])
            obs_next, _, terminated, _, info = env.step(action[0].numpy())
            eff = info["efficiency"]
            buf["obs"].append(x[0])
            buf["act"].append(action[0])
            buf["rew"].append(control.reward_efficiency * (0.0 if np.isnan(eff) else eff))
            error = info["rate"] / control.target_rate - 1.0
            buf["cost"].append([float(error > control.band), float(error < -control.band)])
            buf["done"].append(float(terminated))
            obs = env.reset()[0] if terminated else obs_next
        x = torch.as_tensor(obs)[None]
        with torch.no_grad():
            last_v, last_vc = policy.value(x), cost_critic(x)[0]
        t = {k: torch.as_tensor(np.asarray(v, dtype=np.float32)) if k in ("rew", "cost", "done")
             else torch.stack(v) for k, v in buf.items()}  # fmt: skip
        adv_r, ret_r = gae(
            t["rew"][:, None], t["v"][:, None], t["done"][:, None], last_v, p.gamma, p.lam
        )
        dones = t["done"][:, None].expand(-1, 2)  # the two costs as two "envs" for GAE
        adv_c, ret_c = gae(t["cost"], t["vc"], dones, last_vc, p.gamma, p.lam)
        mean_cost = t["cost"].mean(0)
        lagrange = (lagrange + p.lambda_lr * (mean_cost - limits)).clamp(min=0.0)
        adv = (adv_r[:, 0] - adv_c @ lagrange) / (1.0 + lagrange.sum())
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        for _ in range(p.epochs):
            for idx in torch.randperm(p.n_steps).split(p.batch_size):
                logp, entropy, value = policy.evaluate_actions(t["obs"][idx], t["act"][idx])
                pg_loss, stats = ppo_clip_loss(logp, t["logp"][idx], adv[idx], p.clip)
                v_loss = (value - ret_r[idx, 0]).pow(2).mean()
                vc_loss = (cost_critic(t["obs"][idx]) - ret_c[idx]).pow(2).mean()
                loss = pg_loss + 0.5 * (v_loss + vc_loss) - p.ent_coef * entropy.mean()
                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 0.5)
                optim.step()
        done_steps += p.n_steps
        advance(p.n_steps)
        rollouts += 1
        log(done_steps, {
            **stats, "lambda_over": float(lagrange[0]), "lambda_under": float(lagrange[1]),
            "over_budget": float(mean_cost[0]), "under_budget": float(mean_cost[1]),
        })  # fmt: skip
        if checkpoint is not None and rollouts % cfg.experiment.checkpoint_every == 0:
            checkpoint(done_steps, {
                "policy": policy.state_dict(), "cost_critic": cost_critic.state_dict(),
                "optim": optim.state_dict(), "rng": get_rng_state(), "lagrange": lagrange.tolist(),
                "windows": done_steps, "rollouts": rollouts,
            })  # fmt: skip
    return policy
