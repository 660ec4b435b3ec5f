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
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.distributions import kl_divergence

from fieldrl.apps.lhc_trigger.config import ControlConfig, GroupConfig, LHCTriggerConfig
from fieldrl.apps.lhc_trigger.env import OBS_DIM, Calibration, Replay, reward, signal_efficiency
from fieldrl.apps.lhc_trigger.stream import Stream
from fieldrl.policies import ActorCritic
from fieldrl.rl import ppo_clip_loss

__all__ = ["GroupPolicyTrainer", "filter_group", "group_advantages", "make_policy"]

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


class GroupPolicyTrainer:
    """One trigger's controller trained for ``cfg.train.windows`` windows of replay, one
    update (``gfpo.steps_per_update`` windows) per :meth:`step`; a
    :class:`fieldrl.training.Trainer` whose state includes the replay position, so a
    resumed run continues exactly."""

    def __init__(self, variant: str, cfg: LHCTriggerConfig, streams: Sequence[Stream],
                 calib: Calibration, rng: np.random.Generator) -> None:  # fmt: skip
        if variant not in VARIANTS:
            raise ValueError(f"unknown group variant {variant!r}; expected one of {VARIANTS}")
        self.variant, self.cfg, self.streams, self.calib = variant, cfg, streams, calib
        self.rng, self.generators = rng, (rng,)
        self.total, self.done, self.updates = cfg.train.windows, 0, 0
        self.policy = make_policy(cfg)
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)
        self.optim = torch.optim.Adam(self.policy.parameters(), lr=cfg.gfpo.lr)
        self.replay: Replay | None = None  # the fill being replayed, and where it is
        self.stream_index, self.applied, self.obs = 0, [], None

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.policy.state_dict(), "reference": self.reference.state_dict(),
                "optim": self.optim.state_dict(), "updates": self.updates, "windows": self.done,
                "stream": self.stream_index if self.replay else -1,
                "applied": list(self.applied)}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"])
        self.reference.load_state_dict(state["reference"])
        self.optim.load_state_dict(state["optim"])
        self.updates, self.done = int(state["updates"]), int(state["windows"])
        self.replay = None
        if int(state["stream"]) >= 0:
            self._start(int(state["stream"]), [float(h) for h in state["applied"]])

    def _start(self, index: int, applied: list[float]) -> None:
        self.stream_index, self.applied = index, applied
        self.replay = Replay(self.streams[index], self.calib, self.cfg.control)
        self.obs = self.replay.replay_to(applied)

    def step(self) -> dict[str, float]:
        g, control, calib = self.cfg.gfpo, self.cfg.control, self.calib
        keep = g.group if self.variant == "grpo" else g.keep
        buffer = []
        while len(buffer) < g.steps_per_update and self.done < self.total:
            if self.replay is None or self.replay.done:
                self._start(int(self.rng.integers(len(self.streams))), [])
            obs = self.obs
            x = torch.from_numpy(obs.vector(calib, control))
            with torch.no_grad():
                dist = self.policy.distribution(x[None])
                moves = dist.sample((g.group,))[:, 0]  # [G, 1]
                logp = dist.log_prob(moves[:, None])[:, 0]
            thresholds = obs.threshold + moves[:, 0].clamp(-1, 1).numpy() * (
                control.max_step * calib.menu
            )
            buffer.append(_kept(self.variant, keep, self.replay, obs.window, thresholds, x,
                                moves, logp, self.cfg))  # fmt: skip
            _, self.obs = self.replay.advance(float(thresholds[0]))  # execute one sampled move
            self.applied.append(self.replay.threshold)
            self.done += 1
        stats = _update(self.policy, self.reference, self.optim, buffer, g)
        self.updates += 1
        if self.updates % g.ref_update_every == 0:
            self.reference.load_state_dict(self.policy.state_dict())
        return stats


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
