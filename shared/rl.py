"""RL functions shared by the apps' algorithms: GAE and the clipped PPO surrogate."""

from __future__ import annotations

import torch

__all__ = ["explained_variance", "gae", "ppo_clip_loss"]


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float = 0.99,
    lam: float = 0.95,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over a ``[T, ...]`` rollout.

    ``dones[t]`` is 1 when the episode ended at step t (so step t+1 starts a new one);
    ``last_value`` is V(s_T) for bootstrapping. Returns ``(advantages, returns)``.
    """
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(last_value)
    next_value = last_value
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        running = delta + gamma * lam * not_done * running
        advantages[t] = running
        next_value = values[t]
    return advantages, advantages + values


def ppo_clip_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped surrogate loss (to minimise) and its diagnostics (approx. KL, clip fraction)."""
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip, 1.0 + clip) * advantages
    loss = -torch.min(unclipped, clipped).mean()
    with torch.no_grad():
        stats = {
            "approx_kl": float(((ratio - 1) - log_ratio).mean()),
            "clip_fraction": float(((ratio - 1).abs() > clip).float().mean()),
        }
    return loss, stats


def explained_variance(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var(target - predicted) / Var(target); NaN when the target is constant."""
    var = target.var()
    return float("nan") if var == 0 else float(1 - (target - predicted).var() / var)
