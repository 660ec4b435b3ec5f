"""The two trigger scores: H_T and an autoencoder anomaly score, log(1 + MSE).

H_T is the scalar sum of jet pT over jets above a pT cut inside an |eta| cut. The anomaly
detector is a small dense autoencoder over the leading jets' (pt, eta, phi) and the NPV,
trained on early-fill background, so that what it reconstructs badly is what the early fill
did not look like.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.lhc_trigger.config import TriggerConfig
from fieldrl.apps.lhc_trigger.data import BACKGROUND, Events
from fieldrl.errors import DataError
from fieldrl.training import fit

__all__ = [
    "Autoencoder",
    "AutoencoderTrainer",
    "ad_features",
    "ad_scores",
    "ht_scores",
    "train_autoencoder",
]


def ht_scores(events: Events, cfg: TriggerConfig) -> np.ndarray:
    """H_T per event, GeV."""
    mask = (events.jet_pt > cfg.ht_jet_pt_min) & (np.abs(events.jet_eta) < cfg.ht_jet_eta_max)
    return np.bincount(
        events.jet_event()[mask], weights=events.jet_pt[mask], minlength=events.n
    ).astype(np.float32)


def ad_features(events: Events, cfg: TriggerConfig) -> np.ndarray:
    """``[n, 3 * ad_jets + 1]``: leading jets' pt/scale, eta/2.5, weighted phi/pi; NPV/40."""
    jets = events.leading_jets(cfg.ad_jets)
    present = jets[..., 0] > 0
    jets[..., 0] /= cfg.ad_pt_scale
    jets[..., 1] /= 2.5
    jets[..., 2] *= cfg.ad_phi_weight / np.pi
    jets[~present] = 0.0
    npv = (events.npv.astype(np.float32) / 40.0)[:, None]
    return np.concatenate([jets.reshape(events.n, -1), npv], axis=1)


class Autoencoder(nn.Module):
    """Dense autoencoder with a narrow latent; ``score`` is log(1 + per-event MSE)."""

    def __init__(self, n_inputs: int, hidden: int, latent: int) -> None:
        super().__init__()
        self.spec = {"n_inputs": n_inputs, "hidden": hidden, "latent": latent}
        self.encoder = nn.Sequential(
            nn.Linear(n_inputs, hidden), nn.ReLU(), nn.Linear(hidden, latent)
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, n_inputs)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))

    @torch.no_grad()
    def score(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log1p((self(x) - x).pow(2).mean(dim=1))


class AutoencoderTrainer:
    """Fits the autoencoder to background features ``x``, one epoch per :meth:`step` (a
    :class:`fieldrl.training.Trainer`)."""

    def __init__(self, x: torch.Tensor, cfg: TriggerConfig, seed: int = 0) -> None:
        self.x, self.cfg = x, cfg
        self.model = Autoencoder(x.shape[1], cfg.ad_hidden, cfg.ad_latent)
        self.optim = torch.optim.Adam(self.model.parameters(), lr=cfg.ad_lr)
        self.batches = torch.Generator().manual_seed(seed)
        self.generators = ()
        self.total, self.done = cfg.ad_epochs, 0

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optim": self.optim.state_dict(),
                "epochs": self.done, "batches": self.batches.get_state()}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optim.load_state_dict(state["optim"])
        self.batches.set_state(state["batches"])
        self.done = int(state["epochs"])

    def step(self) -> dict[str, float]:
        size = self.cfg.ad_batch
        batches = self.x.shape[0] // size
        order = torch.randperm(self.x.shape[0], generator=self.batches)[: batches * size]
        for idx in order.view(batches, -1):
            loss = (self.model(self.x[idx]) - self.x[idx]).pow(2).mean()
            self.optim.zero_grad()
            loss.backward()
            self.optim.step()
        self.done += 1
        return {"ad_train_mse": loss.item()}


def train_autoencoder(
    events: Events, cfg: TriggerConfig, seed: int = 0
) -> tuple[Autoencoder, dict[str, float]]:
    """Fit the autoencoder on the background events given (call it with early-fill data)."""
    background = events.label == BACKGROUND
    x = torch.as_tensor(ad_features(events, cfg)[background])
    if x.shape[0] < cfg.ad_batch:
        raise DataError(
            f"the autoencoder needs {cfg.ad_batch}+ background events to train, got {x.shape[0]}"
        )
    trainer = fit(lambda: AutoencoderTrainer(x, cfg, seed), None, seed=seed,
                  description="autoencoder")  # fmt: skip
    model = trainer.model.eval()
    with torch.no_grad():
        mse = (model(x) - x).pow(2).mean().item()
    return model, {"ad_train_mse": mse, "ad_train_events": float(x.shape[0])}


def ad_scores(
    model: Autoencoder, events: Events, cfg: TriggerConfig, batch: int = 65_536
) -> np.ndarray:
    """Anomaly score per event."""
    x = torch.as_tensor(ad_features(events, cfg))
    return torch.cat([model.score(chunk) for chunk in x.split(batch)]).numpy()
