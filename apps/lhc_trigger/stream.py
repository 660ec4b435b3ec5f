"""A fill as the controllers see it: per-window score summaries, not raw events.

Scoring turns each window of events into what any threshold decision needs: the highest
``tail_fraction`` of background scores (sorted, so the rate at any threshold is a
``searchsorted``), the signal events' scores, and the streaming features an online system
has (NPV statistics, multi-jet fraction). A 200k-event window shrinks to about 6k floats
per trigger, so many fills fit in memory and controllers replay them quickly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from fieldrl.apps.lhc_trigger.data import BACKGROUND, HAA4B, TTBAR, Events
from fieldrl.errors import DataError

__all__ = ["Stream", "rewindow", "score_stream"]

Scorer = Callable[[Events], np.ndarray]
SIGNALS = (TTBAR, HAA4B)


@dataclass
class Stream:
    """Scored windows of one fill (or one stretch of real data), for each trigger."""

    tail: dict[str, np.ndarray]  # trigger -> [W, K] highest background scores, ascending
    n_background: np.ndarray  # [W] background events per window
    signal: dict[str, np.ndarray]  # trigger -> [W, S] signal scores, NaN-padded
    signal_kind: np.ndarray  # [W, S] TTBAR / HAA4B, 0 where padded
    npv_mean: np.ndarray
    npv_std: np.ndarray
    multijet_fraction: np.ndarray  # events with >= 4 jets above 30 GeV
    pileup_mean: np.ndarray  # NaN when the input has no truth pileup
    meta: dict[str, str] = field(default_factory=dict)

    @property
    def n_windows(self) -> int:
        return int(self.n_background.size)

    @property
    def triggers(self) -> list[str]:
        return list(self.tail)

    def rate(self, trigger: str, window: int, thresholds: np.ndarray | float) -> np.ndarray:
        """Background accept fraction at each threshold (events scoring strictly above).

        Below the kept tail the true rate is at least ``K / N``; that lower bound is returned.
        """
        tail = self.tail[trigger][window]
        above = tail.size - np.searchsorted(tail, thresholds, side="right")
        return above / self.n_background[window]

    def threshold_for_rate(self, trigger: str, window: int, rate: float) -> float:
        """The threshold that would have accepted ``rate`` of this window's background."""
        tail = self.tail[trigger][window]
        m = int(np.clip(round(rate * self.n_background[window]), 1, tail.size - 1))
        return float(0.5 * (tail[-m - 1] + tail[-m]))

    def efficiency(
        self, trigger: str, window: int, thresholds: np.ndarray | float
    ) -> dict[int, np.ndarray]:
        """Per signal kind, the fraction of this window's signal above each threshold."""
        scores, kinds = self.signal[trigger][window], self.signal_kind[window]
        h = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
        out = {}
        for kind in SIGNALS:
            mine = scores[kinds == kind]
            out[kind] = (
                (mine[None, :] > h[:, None]).mean(axis=1) if mine.size else np.full(h.size, np.nan)
            )
        return out


def rewindow(chunks: Iterable[Events], window_events: int) -> Iterator[Events]:
    """Regroup a stream of event chunks into windows of exactly ``window_events``.

    A last partial window is dropped (a rate from fewer events is not comparable). Input
    too short for two windows (a controller decides on one and is scored on the next) is
    an error that gives both counts.
    """
    pending: list[Events] = []
    have = windows = 0
    for chunk in chunks:
        pending.append(chunk)
        have += chunk.n
        while have >= window_events:
            merged = Events.concat(pending) if len(pending) > 1 else pending[0]
            yield merged.slice(0, window_events)
            windows += 1
            rest = merged.slice(window_events, merged.n)
            pending, have = ([rest] if rest.n else []), rest.n
    if windows < 2:
        raise DataError(
            f"the input holds {windows * window_events + have:,} events, fewer than two "
            f"windows of {window_events:,} (fill.window_events), one to decide on and one to "
            "score: give more events, or lower it with --set fill.window_events=N (at least "
            "1,000)"
        )


def score_stream(
    windows: Iterable[Events],
    scorers: Mapping[str, Scorer],
    tail_fraction: float,
    meta: Mapping[str, str] | None = None,
    advance: Callable[[], None] | None = None,
) -> Stream:
    """Score every window with every trigger and keep what control needs."""
    tails: dict[str, list[np.ndarray]] = {k: [] for k in scorers}
    sigs: dict[str, list[np.ndarray]] = {k: [] for k in scorers}
    kinds, n_bkg, npv_mean, npv_std, multijet, pileup = [], [], [], [], [], []
    for events in windows:
        background = events.label == BACKGROUND
        is_signal = ~background
        k = max(2, int(np.ceil(tail_fraction * background.sum())))
        for name, scorer in scorers.items():
            scores = scorer(events)
            bkg = scores[background]
            if bkg.size < k:
                raise DataError(f"a window has only {bkg.size} background events")
            tails[name].append(np.sort(np.partition(bkg, bkg.size - k)[-k:]))
            sigs[name].append(scores[is_signal])
        kinds.append(events.label[is_signal])
        n_bkg.append(background.sum())
        npv = events.npv[background]
        npv_mean.append(npv.mean())
        npv_std.append(npv.std())
        hard = np.bincount(events.jet_event()[events.jet_pt > 30.0], minlength=events.n)
        multijet.append((hard[background] >= 4).mean())
        pileup.append(
            np.nanmean(events.true_pileup) if np.isfinite(events.true_pileup).any() else np.nan
        )
        if advance is not None:
            advance()
    if not n_bkg:
        raise DataError("no complete window in the input (too few events for one window)")
    k_min = min(t.size for rows in tails.values() for t in rows)
    width = max((s.size for s in kinds), default=0)

    def pad(rows: list[np.ndarray], fill: float) -> np.ndarray:
        out = np.full((len(rows), max(width, 1)), fill, np.float32)
        for i, row in enumerate(rows):
            out[i, : row.size] = row
        return out

    return Stream(
        tail={n: np.stack([t[-k_min:] for t in rows]) for n, rows in tails.items()},
        n_background=np.asarray(n_bkg, np.int64),
        signal={n: pad(rows, np.nan) for n, rows in sigs.items()},
        signal_kind=pad(kinds, 0).astype(np.int8),
        npv_mean=np.asarray(npv_mean, np.float32),
        npv_std=np.asarray(npv_std, np.float32),
        multijet_fraction=np.asarray(multijet, np.float32),
        pileup_mean=np.asarray(pileup, np.float32),
        meta=dict(meta or {}),
    )
