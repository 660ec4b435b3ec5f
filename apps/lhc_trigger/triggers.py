"""The two trigger scores: H_T and an autoencoder anomaly score, log(1 + MSE).

H_T is the scalar sum of jet pT over jets above a pT cut inside an |eta| cut. The anomaly
detector is a small dense autoencoder over the leading jets' (pt, eta, phi) and the NPV,
trained on early-fill background, so that what it reconstructs badly is what the early fill
did not look like.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fieldrl.apps.lhc_trigger.config import TriggerConfig
from fieldrl.apps.lhc_trigger.data import BACKGROUND, Events
from fieldrl.errors import DataError
from fieldrl.runs import progress

__all__ = ["Autoencoder", "ad_features", "ad_scores", "ht_scores", "train_autoencoder"]


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
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = Autoencoder(x.shape[1], cfg.ad_hidden, cfg.ad_latent)
    optim = torch.optim.Adam(model.parameters(), lr=cfg.ad_lr)
    batches = x.shape[0] // cfg.ad_batch
    loss = torch.tensor(0.0)
    with progress(cfg.ad_epochs * batches, "autoencoder") as advance:
        for _ in range(cfg.ad_epochs):
            for idx in torch.randperm(x.shape[0], generator=gen)[: batches * cfg.ad_batch].view(
                batches, -1
            ):
                loss = (model(x[idx]) - x[idx]).pow(2).mean()
                optim.zero_grad()
                loss.backward()
                optim.step()
                advance()
    model.eval()
    return model, {"ad_train_mse": loss.item(), "ad_train_events": float(x.shape[0])}


def ad_scores(
    model: Autoencoder, events: Events, cfg: TriggerConfig, batch: int = 65_536
) -> np.ndarray:
    """Anomaly score per event."""
    x = torch.as_tensor(ad_features(events, cfg))
    return torch.cat([model.score(chunk) for chunk in x.split(batch)]).numpy()
