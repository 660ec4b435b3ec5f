"""SCAMPER's two priors, NPMP-style (Merel et al. 2019; track-mjx for the learned prior).

Motion ("control") prior: an encoder reads a short window of future reference states and
the body's proprioception and proposes a latent ``z_t``; an AR(1) prior
``N(alpha z_{t-1}, 1 - alpha^2)`` regularises it through a KL term; a decoder maps
proprioception and ``z_t`` to the 38 position targets. Trained by closed-loop imitation of
the library (:class:`~fieldrl.apps.rat.imitation.ImitationTrainer`).

Behaviour ("exploration") prior: ``p(z_t | z_{t-1}, proprioception)``, trained to match the
frozen encoder's posterior on the motion prior's own rollouts. Sampling it and decoding
gives movement without a reference: the rat's random exploration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from fieldrl.apps.rat.imitation import Controller
from fieldrl.policies import mlp

__all__ = ["BehaviourPrior", "LatentWalker", "MotionPrior", "gaussian_kl", "next_latent"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0


def gaussian_kl(
    mu_q: torch.Tensor, log_std_q: torch.Tensor, mu_p: torch.Tensor, log_std_p: torch.Tensor
) -> torch.Tensor:
    """KL(q || p) of diagonal Gaussians, summed over the last axis."""
    var_q, var_p = (2 * log_std_q).exp(), (2 * log_std_p).exp()
    return (log_std_p - log_std_q + (var_q + (mu_q - mu_p) ** 2) / (2 * var_p) - 0.5).sum(-1)


class MotionPrior(nn.Module):
    def __init__(
        self,
        proprio: int,
        window: int,
        actions: int,
        latent: int,
        hidden: Sequence[int],
        alpha: float,
        kl: float,
        temperature: float = 1.0,
    ) -> None:
        super().__init__()
        self.latent, self.alpha, self.kl, self.temperature = latent, alpha, kl, temperature
        self.encoder = mlp(proprio + window, hidden, 2 * latent, activation="elu")
        self.decoder = mlp(proprio + latent, hidden, actions, activation="elu")

    def encode(self, proprio: torch.Tensor, window: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mu, log_std = self.encoder(torch.cat([proprio, window], -1)).chunk(2, -1)
        return mu, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def decode(self, proprio: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.decoder(torch.cat([proprio, z], -1)))

    def prior_std(self) -> float:
        return math.sqrt(1 - self.alpha**2)

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        """Imitation MSE plus ``kl`` x KL to the AR(1) prior, over (time, batch) sequences."""
        mu, log_std = self.encode(batch["proprio"], batch["window"])
        z = mu + log_std.exp() * torch.randn_like(mu)
        # the prior of step 0 is the stationary N(0, 1); later steps follow alpha z_{t-1}
        prior_mu = torch.cat([torch.zeros_like(z[:1]), self.alpha * z[:-1]])
        prior_log_std = torch.full_like(z, math.log(self.prior_std()))
        prior_log_std[0] = 0.0
        kl = gaussian_kl(mu, log_std, prior_mu, prior_log_std).mean()
        mse = ((self.decode(batch["proprio"], z) - batch["label"]) ** 2).mean()
        return mse + self.kl * kl, {"mse": mse.item(), "kl": kl.item()}

    def controller(self, deterministic: bool = False) -> Controller:
        return _Tracker(self, deterministic)


class _Tracker(Controller):
    """The motion prior following a reference: encode, sample z, decode."""

    def __init__(self, model: MotionPrior, deterministic: bool) -> None:
        self.model, self.deterministic = model, deterministic

    def reset(self) -> None:
        pass

    @torch.no_grad()
    def __call__(self, proprio: np.ndarray, window: np.ndarray) -> np.ndarray:
        p, w = torch.as_tensor(proprio)[None], torch.as_tensor(window)[None]
        mu, log_std = self.model.encode(p, w)
        z = mu if self.deterministic else mu + log_std.exp() * torch.randn_like(mu)
        return self.model.decode(p, z)[0].numpy().astype(np.float64)


class BehaviourPrior(nn.Module):
    """``p(z_t | z_{t-1}, proprio)``: what the encoder would have said, without a reference.
    One Gaussian (fitted by KL to the encoder's posterior) or a mixture of ``components``
    (fitted by the likelihood of the posterior's samples: the cross-entropy, which is the KL
    up to the posterior's own entropy), so that distinct behaviours can stay distinct
    instead of averaging into one."""

    def __init__(
        self, proprio: int, latent: int, hidden: Sequence[int], components: int = 1
    ) -> None:
        super().__init__()
        self.latent, self.components = latent, components
        extra = components if components > 1 else 0  # the mixture's logits
        self.net = mlp(proprio + latent, hidden, 2 * latent * components + extra, activation="elu")

    def forward(self, z_prev: torch.Tensor, proprio: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(mu, log_std) of shape (..., components, latent) and the mixture logits."""
        out = self.net(torch.cat([proprio, z_prev], -1))
        k, d = self.components, self.latent
        params = out[..., : 2 * k * d].reshape(*out.shape[:-1], k, 2, d)
        logits = out[..., 2 * k * d :] if k > 1 else out.new_zeros(*out.shape[:-1], 1)
        mu, log_std = params[..., 0, :], params[..., 1, :]
        return mu, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX), logits

    def propose(
        self, z_prev: torch.Tensor, proprio: torch.Tensor, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The (mu, log_std) to draw ``z_t`` from: one component, sampled by its weight
        (``generator``) or the most likely one (``generator=None``: deterministic)."""
        mu, log_std, logits = self(z_prev, proprio)
        if generator is None:
            pick = logits.argmax(-1)
        else:
            pick = torch.multinomial(logits.softmax(-1), 1, generator=generator)[..., 0]
        index = pick[..., None, None].expand(*pick.shape, 1, self.latent)
        return mu.gather(-2, index)[..., 0, :], log_std.gather(-2, index)[..., 0, :]

    def loss(self, motion: MotionPrior, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """With the motion prior's encoder frozen, along sampled latent paths: KL(q || p)
        for one Gaussian, the negative log-likelihood of the samples for a mixture."""
        with torch.no_grad():
            mu_q, log_std_q = motion.encode(batch["proprio"], batch["window"])
            z = mu_q + log_std_q.exp() * torch.randn_like(mu_q)
        z_prev = torch.cat([torch.zeros_like(z[:1]), z[:-1]])
        mu_p, log_std_p, logits = self(z_prev, batch["proprio"])
        if self.components == 1:
            return gaussian_kl(mu_q, log_std_q, mu_p[..., 0, :], log_std_p[..., 0, :]).mean()
        normal = torch.distributions.Normal(mu_p, log_std_p.exp())
        per_component = normal.log_prob(z.unsqueeze(-2)).sum(-1)  # (..., components)
        return -torch.logsumexp(logits.log_softmax(-1) + per_component, -1).mean()


def next_latent(
    motion: MotionPrior,
    behaviour: BehaviourPrior | None,
    z: torch.Tensor,
    proprio: torch.Tensor,
    a: torch.Tensor,
    generator: torch.Generator | None,
    temperature: float | None = None,
) -> torch.Tensor:
    """``z_t`` from ``z_{t-1}``: the behaviour prior's proposal moved by ``a`` (in units of
    its std; ``generator`` picks a mixture component, None the likeliest), or with
    ``behaviour=None`` the AR(1) prior's, ``alpha z + sqrt(1 - alpha^2) a``; ``a`` is scaled
    by ``temperature`` first (default: the motion prior's; 1: the priors as fitted)."""
    a = (motion.temperature if temperature is None else temperature) * a
    if behaviour is None:
        return motion.alpha * z + motion.prior_std() * a
    mu, log_std = behaviour.propose(z, proprio, generator)
    return mu + log_std.exp() * a


class LatentWalker(Controller):
    """Movement without a reference: latents from the behaviour prior (or, with
    ``behaviour=None``, from the AR(1) prior) through the decoder. As a tracking
    :class:`Controller` it ignores the reference window."""

    def __init__(
        self,
        motion: MotionPrior,
        behaviour: BehaviourPrior | None,
        rng: np.random.Generator,
        temperature: float | None = None,
    ) -> None:
        self.motion, self.behaviour, self.temperature = motion, behaviour, temperature
        self.generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        self.reset()

    def reset(self) -> None:
        scale = self.motion.temperature if self.temperature is None else self.temperature
        self.z = scale * torch.randn(1, self.motion.latent, generator=self.generator)

    @torch.no_grad()
    def __call__(self, proprio: np.ndarray, window: np.ndarray | None = None) -> np.ndarray:
        p = torch.as_tensor(proprio)[None]
        noise = torch.randn(1, self.motion.latent, generator=self.generator)
        self.z = next_latent(
            self.motion, self.behaviour, self.z, p, noise, self.generator, self.temperature
        )
        return self.motion.decode(p, self.z)[0].numpy().astype(np.float64)
