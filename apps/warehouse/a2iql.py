"""A²IQL's Bayesian reward predictor: NeuralLinear (Riquelme et al., arXiv 1802.09127).

A small network learns features of (state, phi(A)) by regressing the scarce target-domain
reward; Bayesian linear regression on its last hidden layer then gives a closed-form
predictive mean and an epistemic standard deviation. The conservative reward
``mean - kappa * std`` enters only the actor's advantage during adaptation; the source
critic stays frozen.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fieldrl.policies import mlp

__all__ = ["NeuralLinear"]


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
        self, x: np.ndarray, y: np.ndarray, epochs: int = 300, lr: float = 1e-3, seed: int = 0
    ) -> NeuralLinear:
        """Learn the features by least squares, then the Bayesian last layer in closed form."""
        torch.manual_seed(seed)
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
    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Predictive mean and epistemic std of the reward, in the reward's own units."""
        phi = self._features(torch.as_tensor(x, dtype=torch.float32))
        mean = phi @ self.w_mean
        var = ((phi @ self.w_cov) * phi).sum(-1).clamp(min=0.0)
        return (
            (mean * self.y_std + self.y_mean).numpy(),
            (var.sqrt() * self.y_std).numpy(),
        )

    def conservative(self, x: np.ndarray, kappa: float) -> np.ndarray:
        """The pessimistic reward ``mean - kappa * std`` A²IQL's actor advantage uses."""
        mean, std = self.predict(x)
        return mean - kappa * std
