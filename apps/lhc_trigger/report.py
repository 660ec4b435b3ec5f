"""Plots of controller traces: rate with the band, threshold, pileup, efficiency."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fieldrl.apps.lhc_trigger.config import ControlConfig  # noqa: E402
from fieldrl.apps.lhc_trigger.controllers import Trace  # noqa: E402

__all__ = ["plot_efficiency", "plot_traces"]


def plot_traces(
    path: Path, traces: Mapping[str, Trace], control: ControlConfig, title: str
) -> Path:
    """Rate vs window with the tolerance band, threshold vs window, pileup vs window."""
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    khz = control.bunch_crossing_hz / 1e3
    target = control.target_rate * khz
    axes[0].axhspan(target * (1 - control.band), target * (1 + control.band), color="0.85")
    axes[0].axhline(target, color="0.4", lw=0.8)
    for name, trace in traces.items():
        x = np.arange(1, trace.rate.size + 1)
        axes[0].plot(x, trace.rate * khz, lw=1, label=name)
        axes[1].plot(x, trace.threshold / trace.menu, lw=1, label=name)
    first = next(iter(traces.values()))
    axes[2].plot(np.arange(1, first.pileup.size + 1), first.pileup, color="k")
    axes[0].set_ylabel("background rate (kHz)")
    axes[1].set_ylabel("threshold / menu")
    axes[2].set_ylabel("mean pileup")
    axes[2].set_xlabel("window")
    axes[0].legend(fontsize=7, ncol=4)
    axes[0].set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _num(x: object) -> float:
    return float("nan") if x is None else float(x)


def plot_efficiency(path: Path, rows: Sequence[Mapping[str, float | str]]) -> Path:
    """In-band fraction and signal efficiency per (trigger, controller), with 95% CIs."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    labels = [f"{r['trigger']}:{r['method']}" for r in rows]
    y = np.arange(len(rows))
    for ax, key in zip(axes, ("in_band_fraction", "signal_efficiency"), strict=True):
        mean = np.array([_num(r[key]) for r in rows])
        lo = np.array([_num(r[f"{key}_ci95"][0]) for r in rows])
        hi = np.array([_num(r[f"{key}_ci95"][1]) for r in rows])
        err = np.nan_to_num([mean - lo, hi - mean])
        ax.barh(y, np.nan_to_num(mean), xerr=err, color="tab:blue", alpha=0.7)
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_xlabel(key)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
