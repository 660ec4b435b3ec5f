"""A²IQL's Bayesian reward predictor: NeuralLinear (Riquelme et al., arXiv 1802.09127).

A small network learns features of (state, phi(A)) by regressing the scarce target-domain
reward; Bayesian linear regression on its last hidden layer then gives a closed-form
predictive mean and an epistemic standard deviation. The conservative reward
``mean - kappa * std`` enters only the actor's advantage during adaptation; the source
critic stays frozen.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.warehouse.aiql import AIQL, AIQLTrainer, SetValue
from fieldrl.apps.warehouse.config import A2IQLConfig, AIQLConfig
from fieldrl.apps.warehouse.logs import LoggedData, pool
from fieldrl.config import derive
from fieldrl.policies import mlp
from fieldrl.runs import Run
from fieldrl.training import fit

__all__ = ["NeuralLinear", "adapt", "conservative_bonus"]


class NeuralLinear(nn.Module):
    """``fit(x, y)`` then ``predict(x) -> (mean, epistemic std)``; inputs are standardised."""

    def __init__(self, in_dim: int, hidden: int = 64, prior_precision: float = 1.0) -> None:
        super().__init__()
        self.body = mlp(in_dim, [hidden, hidden], None, "relu")
        self.head = nn.Linear(hidden, 1)
        self.prior_precision = prior_precision
        self.register_buffer("x_mean", torch.zeros(in_dim))
        self.register_buffer("x_std", torch.ones(in_dim))
        self.register_buffer("y_mean", torch.zeros(()))
        self.register_buffer("y_std", torch.ones(()))
        self.register_buffer("w_mean", torch.zeros(hidden + 1))
        self.register_buffer("w_cov", torch.eye(hidden + 1))
        self.register_buffer("noise_var", torch.ones(()))

    def _features(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body((x - self.x_mean) / self.x_std)
        return torch.cat([h, torch.ones(h.shape[0], 1)], dim=1)  # with a bias column

    def fit(
        self, x: np.ndarray, y: np.ndarray, epochs: int = 300, lr: float = 1e-3
    ) -> NeuralLinear:
        """Learn the features by least squares (full batch), then the Bayesian last layer in
        closed form."""
        xt, yt = torch.as_tensor(x, dtype=torch.float32), torch.as_tensor(y, dtype=torch.float32)
        self.x_mean.copy_(xt.mean(0))
        self.x_std.copy_(xt.std(0).clamp(min=1e-3))
        self.y_mean.copy_(yt.mean())
        self.y_std.copy_(yt.std().clamp(min=1e-6))
        target = (yt - self.y_mean) / self.y_std
        opt = torch.optim.Adam([*self.body.parameters(), *self.head.parameters()], lr=lr)
        for _ in range(epochs):
            h = self.body((xt - self.x_mean) / self.x_std)
            loss = (self.head(h).squeeze(-1) - target).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            phi = self._features(xt)
            # noise from the network's own residuals; then the conjugate Gaussian posterior
            residual = self.head(phi[:, :-1]).squeeze(-1) - target
            self.noise_var.copy_(residual.pow(2).mean().clamp(min=1e-4))
            precision = (
                self.prior_precision * torch.eye(phi.shape[1]) + phi.T @ phi / self.noise_var
            )
            self.w_cov.copy_(torch.linalg.inv(precision))
            self.w_mean.copy_(self.w_cov @ phi.T @ target / self.noise_var)
        return self

    @torch.no_grad()
    def predict_tensor(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive mean and epistemic std of the reward, in the reward's own units."""
        phi = self._features(x)
        var = ((phi @ self.w_cov) * phi).sum(-1).clamp(min=0.0)
        return phi @ self.w_mean * self.y_std + self.y_mean, var.sqrt() * self.y_std

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        mean, std = self.predict_tensor(torch.as_tensor(x, dtype=torch.float32))
        return mean.numpy(), std.numpy()


def conservative_bonus(target: LoggedData, cfg: A2IQLConfig) -> SetValue:
    """Fit NeuralLinear to the target reward of ``target``'s (state, phi); return the
    bonus bonus_weight * (mean - kappa * std - target mean) / target std as a function of
    (state, phi): it adds to the critic's value of a chosen set."""
    inputs = np.concatenate([target.state, target.phi], 1)
    reward = target.reward.astype(np.float64)
    predictor = NeuralLinear(inputs.shape[1], cfg.hidden, cfg.prior_precision)
    predictor.fit(inputs, reward, epochs=cfg.fit_epochs)
    centre, spread = float(reward.mean()), max(float(reward.std()), 1e-8)

    def bonus(state: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        mean, std = predictor.predict_tensor(torch.cat([state, phi], -1))
        return cfg.bonus_weight * (mean - cfg.kappa * std - centre) / spread

    return bonus


def adapt(
    source_model: AIQL,
    source: LoggedData,
    target: LoggedData,
    aiql_cfg: AIQLConfig,
    cfg: A2IQLConfig,
    seed: int = 0,
    run: Run | None = None,
    metadata: dict[str, Any] | None = None,
) -> AIQL:
    """A²IQL: the source actor re-extracted on source + target epochs, the frozen source
    critic's set value plus the conservative target-reward bonus behind its advantages.
    Sets unlike any target epoch get a large sigma and so a pessimistic bonus. With a
    ``run`` the adaptation is logged and checkpointed there (with ``metadata``), and
    resumes (the bonus is refitted, from the same seed, to the same weights)."""
    steps_cfg = derive(aiql_cfg, steps=cfg.steps)
    both = pool(source, target)

    def build() -> AIQLTrainer:
        bonus = conservative_bonus(target, cfg)
        return AIQLTrainer(both, steps_cfg, seed, init=source_model, bonus=bonus)

    trainer = fit(build, run, seed=seed, description="A²IQL", metadata=metadata)
    return trainer.model.eval()
