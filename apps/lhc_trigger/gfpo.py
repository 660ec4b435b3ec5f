"""GRPO, GFPO-F and GFPO-FR for streaming threshold control.

At each window the policy proposes G candidate threshold moves. Each is scored on the
latest *past* window (the one just observed: what that move would have given there). A filter
keeps k of them: GFPO-F the k whose rate is closest to target; GFPO-FR the in-band ones
ranked by signal efficiency, padded with the nearest out-of-band ones; GRPO keeps all G.
Advantages are group-relative over the kept set only, and the update is PPO-clip with a KL
penalty to a periodically refreshed reference policy and an entropy bonus.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.distributions import kl_divergence

from fieldrl.apps.lhc_trigger.config import ControlConfig, GroupConfig, LHCTriggerConfig
from fieldrl.apps.lhc_trigger.env import OBS_DIM, Calibration, Replay, reward, signal_efficiency
from fieldrl.apps.lhc_trigger.stream import Stream
from fieldrl.policies import ActorCritic
from fieldrl.rl import ppo_clip_loss
from fieldrl.seeding import get_rng_state, set_rng_state

__all__ = ["filter_group", "group_advantages", "make_policy", "train_group_policy"]

VARIANTS = ("grpo", "gfpo_f", "gfpo_fr")


def make_policy(cfg: LHCTriggerConfig) -> ActorCritic:
    """The controller network: an MLP over the window features, one Gaussian move."""
    action = {"kind": "gaussian", "dim": 1, "log_std_init": cfg.policy.log_std_init}
    hidden = cfg.policy.hidden
    return ActorCritic(OBS_DIM, action, hidden, hidden, cfg.policy.activation)


def filter_group(
    variant: str,
    rate: np.ndarray,
    efficiency: np.ndarray,
    keep: int,
    control: ControlConfig,
) -> np.ndarray:
    """Indices of the kept candidates (all of them for GRPO)."""
    error = np.abs(rate / control.target_rate - 1.0)
    if variant == "grpo":
        return np.arange(rate.size)
    if variant == "gfpo_f":
        return np.argsort(error, kind="stable")[:keep]
    if variant == "gfpo_fr":
        in_band = np.flatnonzero(error <= control.band)
        ranked = in_band[np.argsort(-np.nan_to_num(efficiency[in_band]), kind="stable")]
        outside = np.flatnonzero(error > control.band)
        nearest = outside[np.argsort(error[outside], kind="stable")]
        return np.concatenate([ranked, nearest])[:keep]
    raise ValueError(f"unknown group variant {variant!r}; expected one of {VARIANTS}")


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """(reward - mean) / std over the kept group; zero when the group is all equal."""
    std = rewards.std()
    return (rewards - rewards.mean()) / std if std > 1e-8 else np.zeros_like(rewards)


def _score(
    stream: Stream, calib: Calibration, control: ControlConfig, window: int,
    thresholds: np.ndarray, fr_mix: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    rate = stream.rate(calib.trigger, window, thresholds)
    eff = stream.efficiency(calib.trigger, window, thresholds)
    rewards = reward(rate, signal_efficiency(eff, control), control)
    return rate, signal_efficiency(eff, control, fr_mix), rewards


def train_group_policy(
    variant: str,
    cfg: LHCTriggerConfig,
    streams: Sequence[Stream],
    calib: Calibration,
    log: Callable[[int, dict[str, float]], None],
    advance: Callable[[int], None],
    seed: int = 0,
    checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> ActorCritic:
    """Train one trigger's controller for ``cfg.train.windows`` windows of replay.

    Every ``experiment.checkpoint_every`` updates, ``checkpoint(windows, state)`` is called;
    passing that state back as ``resume`` continues from there.
    """
    g: GroupConfig = cfg.gfpo
    control = cfg.control
    keep = g.group if variant == "grpo" else g.keep
    rng = np.random.default_rng(seed)
    policy = make_policy(cfg)
    reference = copy.deepcopy(policy).requires_grad_(False)
    optim = torch.optim.Adam(policy.parameters(), lr=g.lr)
    buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
    updates, windows = 0, 0
    if resume is not None:
        policy.load_state_dict(resume["policy"])
        reference.load_state_dict(resume["reference"])
        optim.load_state_dict(resume["optim"])
        set_rng_state(resume["rng"], rng)
        updates, windows = resume["updates"], resume["windows"]
        advance(windows)
    while windows < cfg.train.windows:
        replay = Replay(streams[rng.integers(len(streams))], calib, control)
        obs = replay.start()
        while not replay.done and windows < cfg.train.windows:
            x = torch.from_numpy(obs.vector(calib, control))
            with torch.no_grad():
                dist = policy.distribution(x[None])
                moves = dist.sample((g.group,))[:, 0]  # [G, 1]
                logp = dist.log_prob(moves[:, None])[:, 0]
            thresholds = obs.threshold + moves[:, 0].clamp(-1, 1).numpy() * (
                control.max_step * calib.menu
            )
            buffer.append(_kept(variant, keep, replay, obs.window, thresholds, x, moves, logp, cfg))
            _, obs = replay.advance(float(thresholds[0]))  # execute one sampled move
            windows += 1
            advance(1)
            if len(buffer) >= g.steps_per_update:
                stats = _update(policy, reference, optim, buffer, g)
                buffer, updates = [], updates + 1
                if updates % g.ref_update_every == 0:
                    reference.load_state_dict(policy.state_dict())
                log(windows, stats)
                if checkpoint is not None and updates % cfg.experiment.checkpoint_every == 0:
                    checkpoint(windows, {
                        "policy": policy.state_dict(), "reference": reference.state_dict(),
                        "optim": optim.state_dict(), "rng": get_rng_state(rng),
                        "updates": updates, "windows": windows,
                    })  # fmt: skip
    return policy


def _kept(
    variant: str, keep: int, replay: Replay, window: int, thresholds: np.ndarray,
    x: torch.Tensor, moves: torch.Tensor, logp: torch.Tensor, cfg: LHCTriggerConfig,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    rate, fr_eff, rewards = _score(
        replay.stream, replay.calib, cfg.control, window, thresholds, cfg.gfpo.efficiency_mix_fr
    )
    idx = filter_group(variant, rate, fr_eff, keep, cfg.control)
    adv = group_advantages(rewards[idx])
    obs = np.repeat(x.numpy()[None], idx.size, axis=0)
    return obs, moves.numpy()[idx], logp.numpy()[idx], np.stack([adv, rewards[idx]], 1)


def _update(
    policy: ActorCritic,
    reference: ActorCritic,
    optim: torch.optim.Optimizer,
    buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    g: GroupConfig,
) -> dict[str, float]:
    obs, moves, old_logp, adv_reward = (
        torch.as_tensor(np.concatenate(p)) for p in zip(*buffer, strict=True)
    )
    adv = adv_reward[:, 0].float()
    stats: dict[str, float] = {}
    for _ in range(g.epochs):
        dist = policy.distribution(obs)
        logp = dist.log_prob(moves)
        pg_loss, stats = ppo_clip_loss(logp, old_logp, adv, g.clip)
        with torch.no_grad():
            ref_dist = reference.distribution(obs)
        kl = kl_divergence(dist, ref_dist).mean()
        entropy = dist.entropy().mean()
        loss = pg_loss + g.kl_coef * kl - g.ent_coef * entropy
        optim.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 0.5)
        optim.step()
    return {
        **stats,
        "policy_loss": pg_loss.item(),
        "kl_ref": kl.item(),
        "entropy": entropy.item(),
        "group_reward": adv_reward[:, 1].mean().item(),
    }
