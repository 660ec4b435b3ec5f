"""The benchmark's metrics: pure functions of controller traces."""

from __future__ import annotations

import math

import numpy as np

from fieldrl.apps.lhc_trigger.config import ControlConfig
from fieldrl.apps.lhc_trigger.controllers import Trace

__all__ = ["longest_run", "noise_ceiling_in_band", "trace_metrics"]


def noise_ceiling_in_band(window_events: int, target_rate: float, band: float) -> float:
    """P(a window's measured rate is in the band) when the true rate is exactly on target.

    Binomial counting noise alone: no causal controller can beat this on average.
    """
    n, p = window_events, target_rate
    lo, hi = math.ceil(n * p * (1 - band)), math.floor(n * p * (1 + band))
    k = np.arange(lo, hi + 1)
    log_pmf = (
        math.lgamma(n + 1)
        - np.vectorize(math.lgamma)(k + 1)
        - np.vectorize(math.lgamma)(n - k + 1)
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    return float(np.exp(log_pmf).sum())


def longest_run(flags: np.ndarray) -> int:
    """The most consecutive True values."""
    best = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        best = max(best, run)
    return best


def _pooled(eff: np.ndarray, weight: np.ndarray, mask: np.ndarray) -> float:
    w = weight * mask * np.isfinite(eff)
    return float(np.nansum(eff * w) / w.sum()) if w.sum() > 0 else float("nan")


def trace_metrics(trace: Trace, control: ControlConfig) -> dict[str, float]:
    """Rate tracking, signal efficiency and smoothness of one replayed stream."""
    target = control.target_rate
    rel = trace.rate / target - 1.0
    in_band = np.abs(rel) <= control.band
    err_khz = (trace.rate - target) * control.bunch_crossing_hz / 1e3
    w_tt, w_haa = control.signal_mix

    def efficiency(mask: np.ndarray) -> float:
        return w_tt * _pooled(trace.efficiency_tt, trace.signal_tt, mask) + w_haa * _pooled(
            trace.efficiency_haa, trace.signal_haa, mask
        )

    steps = np.diff(np.concatenate([[trace.menu], trace.threshold])) / trace.menu
    guarded = np.zeros(len(rel), bool) if trace.guarded is None else trace.guarded
    return {
        "in_band_fraction": float(in_band.mean()),
        "over_budget_fraction": float((rel > control.band).mean()),
        "under_budget_fraction": float((rel < -control.band).mean()),
        "longest_over_budget_streak": float(longest_run(rel > control.band)),
        "guard_fraction": float(guarded.mean()),
        "guard_interventions": float(np.count_nonzero(np.diff(guarded.astype(int), prepend=0) > 0)),
        "rate_rmse_khz": float(np.sqrt(np.mean(err_khz**2))),
        "rate_p95_abs_err_khz": float(np.quantile(np.abs(err_khz), 0.95)),
        "signal_efficiency": efficiency(np.ones_like(in_band)),
        "signal_efficiency_in_band": efficiency(in_band),
        "threshold_step_rms": float(np.sqrt(np.mean(steps**2))),
        "latency_p50_ms": float(np.quantile(trace.latency_s, 0.5) * 1e3),
        "latency_p99_ms": float(np.quantile(trace.latency_s, 0.99) * 1e3),
    }
