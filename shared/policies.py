"""Policy building blocks the apps share.

An MLP trunk, action heads (categorical, Gaussian, Beta), a recurrent core, a per-candidate
set scorer, and an actor-critic assembled from them. Every buildable module carries a
JSON ``spec`` so that a checkpoint can rebuild it without pickling (:func:`module_state`,
:func:`module_from_state`); apps add their own classes with :func:`register_policy`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import torch
from torch import nn
from torch.distributions import (
    AffineTransform,
    Beta,
    Categorical,
    Distribution,
    Independent,
    Normal,
    TransformedDistribution,
)

__all__ = [
    "ActorCritic",
    "BetaHead",
    "CategoricalHead",
    "GaussianHead",
    "RecurrentCore",
    "SetScorer",
    "build_policy",
    "mlp",
    "module_from_state",
    "module_state",
    "register_policy",
]

Activation = Literal["tanh", "relu", "elu", "gelu"]
_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
}


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int | None = None,
    activation: Activation = "tanh",
    layer_norm: bool = False,
) -> nn.Sequential:
    """Linear layers with ``activation`` between them; ``out_dim=None`` ends on the last hidden."""
    layers: list[nn.Module] = []
    width = in_dim
    for size in hidden:
        layers.append(nn.Linear(width, size))
        if layer_norm:
            layers.append(nn.LayerNorm(size))
        layers.append(_ACTIVATIONS[activation]())
        width = size
    if out_dim is not None:
        layers.append(nn.Linear(width, out_dim))
    return nn.Sequential(*layers)


def _orthogonal_init(linear: nn.Linear, gain: float) -> None:
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)


class CategoricalHead(nn.Module):
    """Logits over ``n`` discrete actions."""

    def __init__(self, in_dim: int, n: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, n)
        _orthogonal_init(self.linear, 0.01)

    def forward(self, features: torch.Tensor) -> Distribution:
        return Categorical(logits=self.linear(features))

    def mode(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).argmax(-1)


class GaussianHead(nn.Module):
    """Diagonal Gaussian with a state-independent log standard deviation."""

    def __init__(self, in_dim: int, dim: int, log_std_init: float = 0.0) -> None:
        super().__init__()
        self.mean = nn.Linear(in_dim, dim)
        _orthogonal_init(self.mean, 0.01)
        self.log_std = nn.Parameter(torch.full((dim,), float(log_std_init)))

    def forward(self, features: torch.Tensor) -> Distribution:
        mean = self.mean(features)
        return Independent(Normal(mean, self.log_std.exp().expand_as(mean)), 1)

    def mode(self, features: torch.Tensor) -> torch.Tensor:
        return self.mean(features)


class _ScaledBeta(TransformedDistribution):
    """Beta on ``[low, low + scale]``; its entropy is the Beta's plus ``log(scale)``."""

    def __init__(
        self, alpha: torch.Tensor, beta: torch.Tensor, low: torch.Tensor, scale: torch.Tensor
    ):
        super().__init__(Beta(alpha, beta), [AffineTransform(low, scale)])
        self.scale = scale

    def entropy(self) -> torch.Tensor:
        return self.base_dist.entropy() + self.scale.log()


class BetaHead(nn.Module):
    """Beta distribution rescaled to ``[low, high]``: bounded actions without clipping bias."""

    def __init__(
        self, in_dim: int, dim: int, low: float | Sequence[float], high: float | Sequence[float]
    ) -> None:
        super().__init__()
        self.linear = nn.Linear(in_dim, 2 * dim)
        _orthogonal_init(self.linear, 0.01)
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32).expand(dim).clone())
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32).expand(dim).clone())
        if not torch.all(self.high > self.low):
            raise ValueError(f"BetaHead needs high > low, got low={low}, high={high}")

    def _concentrations(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        alpha, beta = nn.functional.softplus(self.linear(features)).add(1.0).chunk(2, dim=-1)
        return alpha, beta

    def forward(self, features: torch.Tensor) -> Distribution:
        alpha, beta = self._concentrations(features)
        return Independent(_ScaledBeta(alpha, beta, self.low, self.high - self.low), 1)

    def mode(self, features: torch.Tensor) -> torch.Tensor:
        alpha, beta = self._concentrations(features)
        unit = (alpha - 1) / (alpha + beta - 2).clamp_min(1e-6)
        return self.low + (self.high - self.low) * unit


class RecurrentCore(nn.Module):
    """A GRU over time that resets its state where an episode ended.

    ``forward(x, h, starts)`` takes ``x`` of shape ``[T, B, F]``, the state ``[B, H]`` and
    ``starts`` ``[T, B]`` (1 where a new episode begins at that step) and returns
    ``(outputs [T, B, H], last_state [B, H])``.
    """

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.cell = nn.GRUCell(in_dim, hidden)

    def initial_state(self, batch: int) -> torch.Tensor:
        return torch.zeros(batch, self.hidden)

    def forward(
        self, x: torch.Tensor, h: torch.Tensor, starts: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = []
        for t in range(x.shape[0]):
            if starts is not None:
                h = h * (1.0 - starts[t].unsqueeze(-1))
            h = self.cell(x[t], h)
            outputs.append(h)
        return torch.stack(outputs), h


class SetScorer(nn.Module):
    """Scores every candidate of a variable-size set from its features and a shared context.

    ``forward(candidates [..., M, Fc], context [..., Fx]) -> scores [..., M]``; the same
    weights serve any M. :meth:`score_chunked` scores huge sets in cache-sized chunks.
    """

    def __init__(
        self,
        candidate_dim: int,
        context_dim: int,
        hidden: Sequence[int] = (256, 256),
        activation: Activation = "relu",
    ) -> None:
        super().__init__()
        self.spec = {
            "class": "SetScorer",
            "kwargs": {
                "candidate_dim": candidate_dim,
                "context_dim": context_dim,
                "hidden": list(hidden),
                "activation": activation,
            },
        }
        self.net = mlp(candidate_dim + context_dim, hidden, 1, activation)

    def forward(self, candidates: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        ctx = context.unsqueeze(-2).expand(*candidates.shape[:-1], context.shape[-1])
        return self.net(torch.cat([candidates, ctx], dim=-1)).squeeze(-1)

    @torch.inference_mode()
    def score_chunked(
        self, candidates: torch.Tensor, context: torch.Tensor, chunk: int = 2048
    ) -> torch.Tensor:
        """Scores for ``candidates [M, Fc]`` with one ``context [Fx]``, in chunks of ``chunk``.

        The context's share of the first layer is computed once and folded into its bias.
        """
        first, rest = self.net[0], self.net[1:]
        fc = candidates.shape[-1]
        bias = torch.addmv(first.bias, first.weight[:, fc:], context)
        weight = first.weight[:, :fc].T.contiguous()
        return torch.cat(
            [rest(torch.addmm(bias, part, weight)) for part in torch.split(candidates, chunk)]
        ).squeeze(-1)


ActionKind = Literal["categorical", "gaussian", "beta"]


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs over a flat observation, with a chosen action head.

    ``action`` is ``{"kind": "categorical", "n": 2}``, ``{"kind": "gaussian", "dim": 3}``
    or ``{"kind": "beta", "dim": 1, "low": -1.0, "high": 1.0}``.
    """

    def __init__(
        self,
        obs_dim: int,
        action: dict[str, Any],
        actor_hidden: Sequence[int] = (64, 64),
        critic_hidden: Sequence[int] = (64, 64),
        activation: Activation = "tanh",
    ) -> None:
        super().__init__()
        self.spec = {
            "class": "ActorCritic",
            "kwargs": {
                "obs_dim": obs_dim,
                "action": dict(action),
                "actor_hidden": list(actor_hidden),
                "critic_hidden": list(critic_hidden),
                "activation": activation,
            },
        }
        self.actor = mlp(obs_dim, actor_hidden, None, activation)
        self.critic = mlp(obs_dim, critic_hidden, 1, activation)
        width = actor_hidden[-1] if actor_hidden else obs_dim
        self.head = _make_head(width, action)
        for module in [*self.actor, *self.critic]:
            if isinstance(module, nn.Linear):
                _orthogonal_init(module, 2**0.5)
        _orthogonal_init(self.critic[-1], 1.0)

    def distribution(self, obs: torch.Tensor) -> Distribution:
        return self.head(self.actor(obs))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        return self.critic(obs).squeeze(-1)

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """Actions for a batch of observations (the mode when ``deterministic``)."""
        features = self.actor(obs)
        return self.head.mode(features) if deterministic else self.head(features).sample()

    def evaluate_actions(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(log_prob, entropy, value)`` of given actions, for the PPO update."""
        dist = self.distribution(obs)
        return dist.log_prob(actions), dist.entropy(), self.value(obs)


def _make_head(width: int, action: dict[str, Any]) -> nn.Module:
    kind = action.get("kind")
    if kind == "categorical":
        return CategoricalHead(width, int(action["n"]))
    if kind == "gaussian":
        return GaussianHead(width, int(action["dim"]), float(action.get("log_std_init", 0.0)))
    if kind == "beta":
        return BetaHead(width, int(action["dim"]), action["low"], action["high"])
    raise ValueError(f"unknown action kind {kind!r}; expected categorical, gaussian or beta")


_BUILDABLE: dict[str, type[nn.Module]] = {"ActorCritic": ActorCritic, "SetScorer": SetScorer}


def register_policy(cls: type[nn.Module]) -> type[nn.Module]:
    """Make an app's module class rebuildable from its ``spec`` (usable as a decorator);
    its ``spec`` is ``{"class": cls.__name__, "kwargs": {...}}``."""
    _BUILDABLE[cls.__name__] = cls
    return cls


def build_policy(spec: dict[str, Any]) -> nn.Module:
    """Rebuild a module from its JSON ``spec`` (as stored in a checkpoint)."""
    cls = _BUILDABLE.get(spec.get("class", ""))
    if cls is None:
        raise ValueError(f"unknown policy class {spec.get('class')!r}; known: {sorted(_BUILDABLE)}")
    return cls(**spec["kwargs"])


def module_state(module: nn.Module) -> dict[str, Any]:
    """A buildable module as checkpoint state: ``{"spec": ..., "weights": ...}``."""
    return {"spec": module.spec, "weights": module.state_dict()}


def module_from_state(saved: dict[str, Any]) -> nn.Module:
    """Inverse of :func:`module_state`: the rebuilt module, weights loaded, in eval mode."""
    try:
        module = build_policy(saved["spec"])
        module.load_state_dict(saved["weights"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"not a saved module ({exc})") from None
    return module.eval()
