"""Plots (matplotlib PNG) and markdown reports: :func:`save_figure` for every figure,
a markdown :class:`Report`, and :func:`write_benchmark_report`, the one ``report.md`` writer
for a benchmark, which reads ``benchmark.json`` alone (provenance, targets, then the app's
own tables and plots)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fieldrl.atomic import atomic_write_text  # noqa: E402
from fieldrl.benchmark import load_benchmark  # noqa: E402
from fieldrl.runs import read_metrics  # noqa: E402

__all__ = ["Report", "Sections", "line_plot", "plot_metrics", "save_figure",
           "write_benchmark_report"]  # fmt: skip


def save_figure(fig: Any, path: str | Path, *, dpi: int = 110) -> Path:
    """Lay out, write (creating the folder) and close a matplotlib figure; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def line_plot(
    path: str | Path,
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    band: tuple[float, float] | None = None,
    band_label: str = "target band",
) -> Path:
    """One PNG with a line per ``{label: (x, y)}``; ``band`` shades a horizontal target band."""
    fig, ax = plt.subplots(figsize=(7, 3.6))
    if band is not None:
        ax.axhspan(*band, color="tab:green", alpha=0.15, label=band_label)
    for label, (x, y) in series.items():
        ax.plot(np.asarray(x), np.asarray(y), label=label, linewidth=1.4)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1 or band is not None:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_metrics(metrics_path: str | Path, keys: Sequence[str], out_dir: str | Path) -> list[Path]:
    """A PNG per metric key found in a ``metrics.jsonl``, plotted against the step."""
    rows = read_metrics(metrics_path)
    paths = []
    for key in keys:
        points = [(r["step"], r[key]) for r in rows if key in r]
        if not points:
            continue
        steps, values = zip(*points, strict=True)
        name = key.replace("/", "_")
        paths.append(
            line_plot(
                Path(out_dir) / f"{name}.png",
                {key: (steps, values)},
                title=key,
                xlabel="step",
                ylabel=key,
            )
        )
    return paths


class Report:
    """A markdown report assembled from text, tables and figures, written atomically."""

    def __init__(self, title: str) -> None:
        self.parts: list[str] = [f"# {title}\n"]

    def text(self, markdown: str) -> Report:
        self.parts.append(markdown.strip() + "\n")
        return self

    def table(
        self, rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None
    ) -> Report:
        """A markdown table; floats are shown with 4 significant digits, lists as their
        items separated by commas."""
        if not rows:
            return self.text("_(no rows)_")
        columns = list(columns or rows[0].keys())
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for row in rows:
            cells = [_cell(row.get(c)) for c in columns]
            lines.append("| " + " | ".join(cells) + " |")
        return self.text("\n".join(lines))

    def figure(self, path: str | Path, caption: str, relative_to: str | Path) -> Report:
        rel = Path(path).resolve().relative_to(Path(relative_to).resolve())
        return self.text(f"![{caption}]({rel.as_posix()})\n\n*{caption}*")

    def write(self, path: str | Path) -> Path:
        atomic_write_text(path, "\n".join(self.parts))
        return Path(path)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list | tuple):  # e.g. one figure per training seed
        return ", ".join(_cell(v) for v in value)
    return "" if value is None else str(value)


Sections = Callable[[Mapping[str, Any], Path, Report], None]


def write_benchmark_report(folder: str | Path, sections: Sections | None = None) -> Path:
    """``report.md`` beside a ``benchmark.json``, from that file alone: the provenance, the
    targets, then whatever the app's ``sections(data, folder, report)`` adds (its tables and
    plots). Rerunning it rebuilds the same report. A demo's results (written into its run
    folder the same way) name their own title, ``data["title"]``."""
    folder = Path(folder)
    data = load_benchmark(folder)
    rep = Report(data["data"].get("title") or f"{data['app']} benchmark")
    rep.text(_provenance(data))
    if data["targets"]:
        rows = [{"target": t["name"], "goal": t["goal"], "measured": t["measured"],
                 "status": "MET" if t["met"] else "MISSED", "note": t["note"]}
                for t in data["targets"]]  # fmt: skip
        rep.text("## Targets").table(rows)
    if sections is not None:
        sections(data, folder, rep)
    return rep.write(folder / "report.md")


def _provenance(data: Mapping[str, Any]) -> str:
    v, cost = data["versions"], data["cost"]
    commit = (v.get("git_commit") or "unknown")[:10]
    if v.get("git_commit_at_finish"):
        commit += f" (finished at {v['git_commit_at_finish'][:10]})"
    phases = ", ".join(f"{k[:-2]} {s:.0f} s" for k, s in cost.items() if k.endswith("_s"))
    return (
        f"Run {data['date_utc']} at commit {commit} on {v['cpu_model']} ({v['cpus']} cores), "
        f"{cost['workers']} worker(s){', quick' if cost['quick'] else ''}: "
        f"{cost['seconds']:.0f} s" + (f" ({phases})" if phases else "") + ". "
        f"Config hash `{data['config_hash']}`; held-out seeds {_seeds(data['seeds'])}"
        + (f"; training seeds {_seeds(data['train_seeds'])}" if data["train_seeds"] else "")
        + "."
    )


def _seeds(seeds: Sequence[int]) -> str:
    shown = ", ".join(str(s) for s in seeds[:8])
    return shown + (f", ... ({len(seeds)} in all)" if len(seeds) > 8 else "")
