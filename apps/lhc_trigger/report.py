"""The benchmark report: the table of every controller, plots of in-band fraction and
signal efficiency, and rate / threshold / pileup traces, all drawn from ``benchmark.json``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fieldrl.apps.lhc_trigger.benchmark import HELD_OUT, UNGUARDED  # noqa: E402
from fieldrl.benchmark import Benchmark, load_benchmark  # noqa: E402
from fieldrl.report import Report, save_figure  # noqa: E402

if TYPE_CHECKING:
    from fieldrl.app import Resources
    from fieldrl.runs import LoadedRun

__all__ = ["COLUMNS", "demo_report", "plot_efficiency", "plot_traces", "sections"]

COLUMNS = ["trigger", "method", "in_band_fraction", "over_budget_fraction",
           "under_budget_fraction", "rate_rmse_khz", "signal_efficiency",
           "signal_efficiency_in_band", "threshold_step_rms", "latency_p99_ms",
           "longest_over_budget_streak_max", "guard_fraction"]  # fmt: skip
ROBUSTNESS = ["trigger", "fill", "method", "in_band_fraction", "over_budget_fraction",
              "longest_over_budget_streak_max", "guard_fraction", "guard_interventions",
              "noise_ceiling_in_band"]  # fmt: skip


def plot_traces(
    path: Path, traces: Mapping[str, Mapping[str, Sequence[float]]], control: Mapping[str, Any],
    title: str,
) -> Path:  # fmt: skip
    """Rate vs window with the tolerance band, threshold vs window, pileup vs window."""
    fig, axes = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    khz = control["bunch_crossing_hz"] / 1e3
    target, band = control["target_rate"] * khz, control["band"]
    axes[0].axhspan(target * (1 - band), target * (1 + band), color="0.85", label="target band")
    axes[0].axhline(target, color="0.4", lw=0.8)
    for name, trace in traces.items():
        if name.endswith(UNGUARDED):
            continue
        x = np.arange(1, len(trace["rate"]) + 1)
        axes[0].plot(x, np.asarray(trace["rate"]) * khz, lw=1, label=name)
        axes[1].plot(x, trace["threshold_over_menu"], lw=1, label=name)
    pileup = next(iter(traces.values()))["pileup"]
    axes[2].plot(np.arange(1, len(pileup) + 1), pileup, color="k")
    axes[0].set_ylabel("background rate (kHz)")
    axes[1].set_ylabel("threshold / static menu")
    axes[2].set_ylabel("mean pileup")
    axes[2].set_xlabel("window of the fill")
    axes[0].legend(fontsize=7, ncol=4)
    axes[0].set_title(title)
    return save_figure(fig, path, dpi=90)


def plot_guard(path: Path, guarded: Mapping[str, Sequence], bare: Mapping[str, Sequence],
               control: Mapping[str, Any], title: str) -> Path:  # fmt: skip
    """A learned controller's rate with and without the runaway guard, the windows where
    the guard's fallback decided shaded."""
    fig, ax = plt.subplots(figsize=(9, 3.6))
    khz = control["bunch_crossing_hz"] / 1e3
    target, band = control["target_rate"] * khz, control["band"]
    ax.axhspan(target * (1 - band), target * (1 + band), color="0.85", label="target band")
    x = np.arange(1, len(guarded["rate"]) + 1)
    for i in np.flatnonzero(guarded["guarded"]):
        ax.axvspan(x[i] - 0.5, x[i] + 0.5, color="tab:orange", alpha=0.25, lw=0)
    ax.plot(x, np.asarray(bare["rate"]) * khz, lw=1, color="tab:red", label="without the guard")
    ax.plot(x, np.asarray(guarded["rate"]) * khz, lw=1.2, color="tab:blue", label="with it")
    ax.plot([], [], color="tab:orange", alpha=0.4, lw=6, label="fallback in control")
    ax.set(xlabel="window of the fill", ylabel="background rate (kHz)", title=title)
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=4)
    return save_figure(fig, path, dpi=90)


def _num(x: object) -> float:
    return float("nan") if x is None else float(x)


LABELS = {"in_band_fraction": "in-band fraction (share of windows)",
          "signal_efficiency": "signal efficiency"}  # fmt: skip


def plot_efficiency(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """In-band fraction and signal efficiency per (trigger, controller), with 95% CIs."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.9 + 0.32 * len(rows)))
    labels = [f"{r['trigger']}: {r['method']}" for r in rows]
    y = np.arange(len(rows))
    for ax, key in zip(axes, LABELS, strict=True):
        mean = np.array([_num(r[key]) for r in rows])
        lo = np.array([_num(r[f"{key}_ci95_low"]) for r in rows])
        hi = np.array([_num(r[f"{key}_ci95_high"]) for r in rows])
        err = np.nan_to_num([mean - lo, hi - mean])
        ax.barh(y, np.nan_to_num(mean), xerr=err, color="tab:blue", alpha=0.7)
        ax.set_yticks(y, labels, fontsize=7)
        ax.invert_yaxis()
        ax.set(xlabel=LABELS[key], title=f"{LABELS[key].split(' (')[0]}, mean and 95% CI")
        ax.grid(alpha=0.3, axis="x")
    return save_figure(fig, path, dpi=90)


def sections(data: Mapping[str, Any], out: Path, rep: Report) -> None:
    """The benchmark report's table and plots, from ``benchmark.json``'s rows and data."""
    cfg = data["config"]
    fill, control = cfg["fill"], cfg["control"]
    scenarios = {s["name"] for s in cfg["eval"]["scenarios"]}
    rep.text(
        f"{len(scenarios)} scenario(s) x {len(data['seeds'])} held-out fill seeds "
        f"({fill['n_windows']} windows of {fill['window_events']:,} events); target "
        f"{control['target_rate']:.2%} of events +-{control['band']:.0%}; every decision "
        f"for window t+1 uses windows <= t only. Counting-noise ceiling on in-band: "
        f"{data['data']['noise_ceiling_in_band']:.3f}."
    )
    held = [r for r in data["rows"] if r.get("fill", HELD_OUT) == HELD_OUT]
    rep.text("## Controllers").table(held, COLUMNS)
    rep.figure(plot_efficiency(out / "summary.png", held),
               "In-band fraction and signal efficiency", out)  # fmt: skip
    outside = [r for r in data["rows"] if r.get("fill", HELD_OUT) != HELD_OUT]
    if outside:
        rep.text(
            "## Robustness: fills outside the training ranges\n\nLearned controllers run "
            f"under the runaway guard (after {cfg['guard']['over_windows']} over-budget "
            f"windows or {cfg['guard']['hard_band']:.0%} off target, {cfg['guard']['fallback']}"
            " decides until the learned proposal is back inside the band) and again without"
            " it. `longest_over_budget_streak_max` is the worst fill of each row."
        ).table(outside, ROBUSTNESS)
    traces = data["data"]["traces"]
    for key, by_method in traces.items():
        trigger, scenario = key.split("/")
        path = plot_traces(out / f"trace_{trigger}_{scenario}.png", by_method, control,
                           f"{trigger}, {scenario} (first fill)")  # fmt: skip
        rep.figure(path, f"{trigger} / {scenario}: rate, threshold, pileup", out)
    shown = _busiest_guard(traces)
    if shown:
        key, name = shown
        path = plot_guard(
            out / "guard.png",
            traces[key][name],
            traces[key][name + UNGUARDED],
            control,
            f"{name}, {key}: the guard takes over and gives back",
        )
        rep.figure(path, "The runaway guard at work", out)


def _busiest_guard(traces: Mapping[str, Mapping[str, Any]]) -> tuple[str, str] | None:
    """The (fill, controller) trace where the guard took over most often."""
    found = [
        (int(np.count_nonzero(np.diff(np.asarray(t["guarded"], int), prepend=0) > 0)), key, name)
        for key, by_method in traces.items()
        for name, t in by_method.items()
        if t.get("guarded") and name + UNGUARDED in by_method
    ]
    best = max(found, default=None)
    return (best[1], best[2]) if best and best[0] > 0 else None


def demo_report(run: LoadedRun, *, resources: Resources) -> str:
    """The demo's report: the trained controller against the baselines and the look-ahead
    oracle on the held-out fills, written into the run folder as ``benchmark.json`` (the core
    writes ``report.md`` from it); returns the in-band fractions beside PD's."""
    from fieldrl.apps.lhc_trigger.benchmark import write_comparison
    from fieldrl.apps.lhc_trigger.pipeline import (
        evaluation_streams,
        training_streams,
    )

    cfg, trained = run.config, run.trained
    bench = Benchmark(cfg, run.dir, quick=True, workers=resources.workers)
    with bench.phase("streams"):
        train_streams = training_streams(cfg, trained.ae, resources, use_data=False)
        eval_streams = evaluation_streams(cfg, trained.ae, resources)
    path = write_comparison(bench, cfg, {cfg.train.controller: trained}, train_streams,
                            eval_streams)  # fmt: skip
    in_band = {(r["trigger"], r["method"]): r["in_band_fraction"]
               for r in load_benchmark(path)["rows"]}  # fmt: skip
    name = cfg.train.controller
    shown = [f"{t} {in_band[t, name]:.2f} (PD {in_band.get((t, 'pd'), float('nan')):.2f})"
             for t in cfg.train.triggers]  # fmt: skip
    return f"{name} in band {', '.join(shown)} on {len(eval_streams)} held-out fills"
