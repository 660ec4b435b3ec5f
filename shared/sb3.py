"""Convert a stable-baselines3 on-policy MLP policy into the core's :class:`ActorCritic`.

So an SB3 baseline (PPO or A2C with ``MlpPolicy`` on a flat Box observation, Discrete or
Box actions) is checkpointed, served and evaluated exactly like a fieldrl policy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from fieldrl.checkpoint import save_checkpoint
from fieldrl.policies import ActorCritic, module_state

__all__ = ["SB3Trainer", "from_sb3", "save_sb3_checkpoint"]

_ACTIVATION_NAMES = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.ELU: "elu", nn.GELU: "gelu"}


def _linears(seq: nn.Module) -> list[nn.Linear]:
    return [m for m in seq.modules() if isinstance(m, nn.Linear)]


def from_sb3(model: Any) -> ActorCritic:
    """An :class:`ActorCritic` with the same weights (and outputs) as ``model.policy``.

    Raises ``ValueError`` naming what is not supported (image or dict observations,
    shared layers, state-dependent exploration, squashed outputs).
    """
    from gymnasium import spaces

    policy = model.policy
    obs_space, act_space = policy.observation_space, policy.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"only flat Box observations convert, got {obs_space}")
    if getattr(policy, "use_sde", False) or getattr(policy, "squash_output", False):
        raise ValueError("policies with gSDE or squashed outputs do not convert")
    activation = _ACTIVATION_NAMES.get(policy.activation_fn)
    if activation is None:
        raise ValueError(f"unsupported activation {policy.activation_fn.__name__}")
    if isinstance(act_space, spaces.Discrete):
        action: dict[str, Any] = {"kind": "categorical", "n": int(act_space.n)}
    elif isinstance(act_space, spaces.Box) and len(act_space.shape) == 1:
        action = {"kind": "gaussian", "dim": int(act_space.shape[0])}
    else:
        raise ValueError(f"only Discrete or flat Box actions convert, got {act_space}")

    extractor = policy.mlp_extractor
    if _linears(getattr(extractor, "shared_net", nn.Sequential())):
        raise ValueError("policies with shared layers between actor and critic do not convert")
    pi_layers, vf_layers = _linears(extractor.policy_net), _linears(extractor.value_net)
    converted = ActorCritic(
        obs_dim=int(obs_space.shape[0]),
        action=action,
        actor_hidden=[layer.out_features for layer in pi_layers],
        critic_hidden=[layer.out_features for layer in vf_layers],
        activation=activation,
    )
    ours_actor, ours_critic = _linears(converted.actor), _linears(converted.critic)
    pairs = list(zip(ours_actor, pi_layers, strict=True))
    pairs += list(zip(ours_critic, [*vf_layers, policy.value_net], strict=True))
    head = converted.head
    pairs.append((head.linear if action["kind"] == "categorical" else head.mean, policy.action_net))
    with torch.no_grad():
        for ours, theirs in pairs:
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
        if action["kind"] == "gaussian":
            head.log_std.copy_(policy.log_std)
    return converted


def save_sb3_checkpoint(model: Any, directory: str | Path, step: int | None = None) -> Path:
    """Convert ``model`` and write it as a core checkpoint: ``state["policy"]`` is a
    :func:`~fieldrl.policies.module_state` (``module_from_state`` rebuilds it)."""
    policy = from_sb3(model)
    step = int(model.num_timesteps if step is None else step)
    metadata = {"source": f"stable-baselines3 {type(model).__name__}"}
    return save_checkpoint(directory, step, {"policy": module_state(policy)}, metadata)


class SB3Trainer:
    """Any stable-baselines3 algorithm as a core :class:`~fieldrl.training.Trainer`: each
    :meth:`step` learns ``chunk`` more environment steps, so :func:`~fieldrl.training.fit`
    logs, checkpoints and resumes it. The state holds the tensors SB3 itself saves (the
    policy, its optimizers, SAC's entropy coefficient) as state dicts, not a pickled zip;
    an off-policy algorithm's replay buffer is not kept, so a resumed SAC refills it. SB3
    draws from the global generators, which the core loop saves, so it has none of its own."""

    generators = ()

    def __init__(self, model: Any, total: int, chunk: int) -> None:
        self.model, self.total, self.chunk, self.done = model, total, chunk, 0

    def step(self) -> dict[str, float]:
        chunk = min(self.chunk, self.total - self.done)
        self.model.learn(chunk, reset_num_timesteps=False, progress_bar=False)
        self.done = min(int(self.model.num_timesteps), self.total)
        if self.done < self.total and self.done % self.chunk:
            self.done = self.total  # SB3 rounds a rollout up: the budget is spent
        logged = self.model.logger.name_to_value
        return {k.split("/")[-1]: float(v) for k, v in logged.items()}

    def _saved(self) -> list[tuple[str, Any]]:
        from operator import attrgetter

        modules, tensors = self.model._get_torch_save_params()
        return [(name, attrgetter(name)(self.model)) for name in [*modules, *tensors]]

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"timesteps": self.done}
        for name, obj in self._saved():
            state[name] = obj.detach().clone() if torch.is_tensor(obj) else obj.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, obj in self._saved():
            if torch.is_tensor(obj):
                with torch.no_grad():
                    obj.copy_(state[name])
            else:
                obj.load_state_dict(state[name])
        self.done = int(state["timesteps"])
        self.model.num_timesteps = self.done
