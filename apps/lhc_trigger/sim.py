"""An event-stream emulator of one LHC fill, window by window.

Each window is a sample of ``window_events`` bunch crossings at one time in the fill:
luminosity decays exponentially, each crossing's pileup is Poisson around its bunch's mean
(lognormal bunch-to-bunch spread, first-in-train bunches tagged and dimmer), NPV is a
binomial thinning of the interactions, and the jets are pileup jets (exponential pT) plus
hard-scatter dijets (power law) from any interaction, smeared by the jet resolution and a
drifting jet-energy scale. Rare fake jets (hot towers, beam halo) come at a drifting rate,
and two multi-jet signals are overlaid on a small fraction of crossings. Everything is
vectorised numpy: generation plus H_T runs at several million events per second.
"""

from __future__ import annotations

import glob
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from fieldrl.apps.lhc_trigger.config import FillConfig, SignalShape
from fieldrl.apps.lhc_trigger.data import BACKGROUND, HAA4B, TTBAR, Events, read_events
from fieldrl.errors import DataError

__all__ = ["FillSimulator", "FillState", "signal_jets"]


@dataclass(frozen=True)
class FillState:
    """Conditions of one window (what the emulator knows, not what a controller sees)."""

    index: int
    time_h: float
    lumi: float
    mean_pileup: float
    jes: float
    spike_rate: float


class FillSimulator:
    """Windows of one fill for one seed; the same seed gives the same fill."""

    def __init__(self, fill: FillConfig, seed: int) -> None:
        self.cfg = fill
        self.seed = seed
        rng = np.random.default_rng([seed, 0])
        bunch = rng.lognormal(-0.5 * fill.bunch_spread**2, fill.bunch_spread, fill.n_bunches)
        self.first_in_train = (np.arange(fill.n_bunches) % fill.train_length) == 0
        bunch[self.first_in_train] *= fill.first_in_train_factor
        self.bunch_factor = bunch / bunch.mean()
        self.oot_factor = self._out_of_time(fill)
        self.states = self._conditions(rng)

    def _out_of_time(self, fill: FillConfig) -> np.ndarray:
        """Per bunch, the pileup the calorimeter still sees from the ``oot_slots`` slots
        before it (relative to a bunch's mean; the weight halves each slot back): bunches
        after a gap shorter than that see part of the train before."""
        orbit = np.zeros(fill.orbit_slots)
        slots = fill.slots()
        orbit[slots] = self.bunch_factor
        weights = 0.5 ** np.arange(fill.oot_slots)
        back = (slots[:, None] - 1 - np.arange(fill.oot_slots)[None, :]) % fill.orbit_slots
        return (orbit[back] * weights).sum(axis=1)

    def _conditions(self, rng: np.random.Generator) -> list[FillState]:
        cfg = self.cfg
        t = (np.arange(cfg.n_windows) + 0.5) * cfg.window_s / 3600.0
        lumi = cfg.lumi0 * np.exp(-t / cfg.lumi_tau_h)
        # mu = L_bunch * sigma_inel / f_rev, with L_bunch = L / n_bunches (1 mb = 1e-27 cm^2)
        mu = lumi / cfg.n_bunches * cfg.sigma_inel_mb * 1e-27 / cfg.f_rev_hz
        walk = np.clip(
            np.cumsum(rng.normal(0.0, cfg.jes_walk_sigma, cfg.n_windows)),
            -cfg.jes_walk_max,
            cfg.jes_walk_max,
        )
        jes = 1.0 + walk + np.where(t >= cfg.jes_step_at * cfg.duration_h, cfg.jes_step, 0.0)
        for at, change in cfg.jes_schedule:
            jes += np.where(t >= at * cfg.duration_h, change, 0.0)
        spikes = cfg.spike_rate * np.exp(
            np.cumsum(rng.normal(0.0, cfg.spike_rate_drift / np.sqrt(cfg.n_windows), cfg.n_windows))
        )
        return [
            FillState(i, float(t[i]), float(lumi[i]), float(mu[i]), float(jes[i]), float(spikes[i]))
            for i in range(cfg.n_windows)
        ]

    def windows(self, start: int = 0, stop: int | None = None) -> Iterator[Events]:
        """The events of windows ``start..stop`` in time order."""
        for state in self.states[start:stop]:
            yield self.window(state.index)

    def window(self, index: int) -> Events:
        """All events of one window (deterministic in seed and index)."""
        cfg, state = self.cfg, self.states[index]
        rng = np.random.default_rng([self.seed, 1, index])
        n = cfg.window_events
        bunch = rng.integers(0, cfg.n_bunches, n)
        n_pu = rng.poisson(state.mean_pileup * self.bunch_factor[bunch])
        interactions = n_pu + 1
        npv = rng.binomial(interactions, cfg.npv_efficiency)
        blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        p_store = np.exp(-cfg.jet_store_min_pt / cfg.pu_jet_pt_scale)
        counts = rng.poisson(cfg.pu_jets_per_interaction * p_store * interactions)
        pt = cfg.jet_store_min_pt + rng.exponential(cfg.pu_jet_pt_scale, counts.sum())
        blocks.append((counts, pt, *_eta_phi(rng, pt.size, 2.5)))
        blocks.append(self._hard_dijets(rng, rng.poisson(cfg.hard_prob * interactions)))
        if cfg.oot_pileup_jets > 0:  # drawn only when asked, so other fills stay as they were
            oot = state.mean_pileup * self.oot_factor[bunch]
            counts = rng.poisson(cfg.oot_pileup_jets * p_store * oot)
            pt = cfg.jet_store_min_pt + rng.exponential(cfg.pu_jet_pt_scale, counts.sum())
            blocks.append((counts, pt, *_eta_phi(rng, pt.size, 2.5)))
        spike = (rng.random(n) < state.spike_rate).astype(np.int64)
        lo, hi = cfg.spike_pt_range
        pt = rng.uniform(lo, hi, spike.sum())
        eta = rng.choice([-1.0, 1.0], pt.size) * rng.uniform(0.0, 3.0, pt.size)
        blocks.append((spike, pt, eta, np.full(pt.size, 0.3)))  # hot tower / halo sits at one phi
        label = np.zeros(n, np.int8)
        blocks += signal_blocks(rng, label, cfg)
        counts, pt, eta, phi = _interleave(blocks, n)
        pt = measure_pt(rng, pt, state.jes, cfg)
        lumi_block = (index * n + np.arange(n)) // cfg.events_per_lumiblock + 1
        events = Events(
            counts=counts,
            jet_pt=pt,
            jet_eta=eta,
            jet_phi=phi,
            npv=npv,
            run=np.full(n, cfg.run),
            lumi_block=lumi_block,
            true_pileup=state.mean_pileup * self.bunch_factor[bunch],
            label=label,
        )
        return events

    def _hard_dijets(
        self, rng: np.random.Generator, n_scatters: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        cfg = self.cfg
        k = int(n_scatters.sum())
        lead = cfg.hard_pt_min * rng.random(k) ** (-1.0 / (cfg.hard_index - 1.0))
        sub = lead * rng.uniform(0.55, 1.0, k)
        y = rng.normal(0.0, 1.6, k)
        dy = rng.normal(0.0, 1.0, k)
        phi = rng.uniform(-np.pi, np.pi, k)
        pt = np.stack([lead, sub], 1).ravel()
        eta = np.clip(
            np.stack([y + dy / 2, y - dy / 2], 1).ravel(), -cfg.jet_eta_max, cfg.jet_eta_max
        )
        phi2 = np.stack([phi, _wrap(phi + np.pi + rng.normal(0, 0.2, k))], 1).ravel()
        return 2 * n_scatters, pt, eta, phi2


def measure_pt(rng: np.random.Generator, pt: np.ndarray, jes: float, cfg: FillConfig) -> np.ndarray:
    """Detector-level pT: jet-energy scale times a Gaussian resolution a/sqrt(pT) (+) c."""
    sigma = np.hypot(cfg.resolution_stochastic / np.sqrt(pt), cfg.resolution_constant)
    return np.maximum(pt * jes * (1.0 + sigma * rng.standard_normal(pt.size)), 1.0)


def signal_blocks(
    rng: np.random.Generator, label: np.ndarray, cfg: FillConfig
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Generator-level jets of the two signals on a random few background crossings.

    Marks the chosen crossings in ``label`` (TTBAR / HAA4B) and returns their jet blocks.
    """
    blocks = []
    shapes = cfg.signals
    for kind, frac, shape in (
        (TTBAR, cfg.ttbar_fraction, shapes[0]),
        (HAA4B, cfg.haa4b_fraction, shapes[1]),
    ):
        chosen = np.flatnonzero((rng.random(label.size) < frac) & (label == BACKGROUND))
        label[chosen] = kind
        per_event, pt, eta, phi = signal_jets(rng, chosen.size, shape)
        counts = np.zeros(label.size, np.int64)
        counts[chosen] = per_event
        blocks.append((counts, pt, eta, phi))
    return blocks


def signal_jets(rng: np.random.Generator, n: int, shape: SignalShape) -> tuple[np.ndarray, ...]:
    """Jets an event and generator-level (pT, eta, phi) of ``n`` events of ``shape``, event
    after event."""
    if shape.events:
        counts, pt, eta, phi = _signal_events(shape.events)
        pick = rng.integers(0, counts.size, n)
        per_event = counts[pick]
        first_in_file = (np.cumsum(counts) - counts)[pick]
        first_out = np.cumsum(per_event) - per_event
        # output jet j of picked event k is jet (j - first_out[k]) of that event in the file
        jets = np.repeat(first_in_file - first_out, per_event) + np.arange(per_event.sum())
        return per_event, pt[jets], eta[jets], phi[jets]
    if shape.mass > 0:
        cos = rng.uniform(-1.0, 1.0, (n * shape.jets) // 2)
        half = 0.5 * shape.mass * np.sqrt(1.0 - cos**2)
        pt = shape.pt_min + np.repeat(half, 2) * rng.uniform(0.9, 1.0, n * shape.jets)
    else:
        scales = np.tile(np.resize(shape.pt_scales, shape.jets), n)
        pt = shape.pt_min + rng.gamma(2.0, scales)
    return shape.jets, pt, *_eta_phi(rng, pt.size, shape.eta_sigma)


@lru_cache(maxsize=4)
def _signal_events(pattern: str) -> tuple[np.ndarray, ...]:
    """Jet counts and (pT, eta, phi) of every event in the files ``pattern`` matches."""
    events = Events.concat(list(read_events(sorted(glob.glob(pattern)))))
    if not events.n or not events.counts.sum():
        raise DataError(f"signal events {pattern!r}: no events with jets")
    counts = events.counts.astype(np.int64)
    return counts, events.jet_pt.astype(np.float64), events.jet_eta, events.jet_phi


def overlay_signal(events: Events, cfg: FillConfig, rng: np.random.Generator) -> Events:
    """Add signal jets (resolution-smeared) to a random few crossings of any events.

    The signal shares the crossing's pileup jets and NPV, so this works on real data too.
    """
    label = events.label.copy()
    blocks = [
        (counts, measure_pt(rng, pt, 1.0, cfg), eta, phi)
        for counts, pt, eta, phi in signal_blocks(rng, label, cfg)
    ]
    own = (events.counts.astype(np.int64), events.jet_pt, events.jet_eta, events.jet_phi)
    counts, pt, eta, phi = _interleave([own, *blocks], events.n)
    return events.replace(counts=counts, jet_pt=pt, jet_eta=eta, jet_phi=phi, label=label)


def _wrap(phi: np.ndarray) -> np.ndarray:
    return (phi + np.pi) % (2 * np.pi) - np.pi


def _eta_phi(rng: np.random.Generator, n: int, eta_sigma: float) -> tuple[np.ndarray, np.ndarray]:
    return rng.normal(0.0, eta_sigma, n), rng.uniform(-np.pi, np.pi, n)


def _interleave(
    blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Merge per-source jet blocks (each in event order) into one event-ordered jagged array."""
    counts = np.zeros(n, np.int64)
    for block_counts, *_ in blocks:
        counts += block_counts
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    total = int(counts.sum())
    out = [np.empty(total, np.float64) for _ in range(3)]
    filled = np.zeros(n, np.int64)
    for block_counts, *values in blocks:
        block_counts = np.broadcast_to(block_counts, (n,))
        m = int(block_counts.sum())
        if m == 0:
            continue
        first = np.cumsum(block_counts) - block_counts
        within = np.arange(m) - np.repeat(first, block_counts)
        pos = np.repeat(starts + filled, block_counts) + within
        for dst, src in zip(out, values, strict=True):
            dst[pos] = src
        filled += block_counts
    return counts, *out
