"""Episodes: a scorer ranks each epoch's candidates, selection makes them feasible, the
warehouse steps. Used to evaluate any policy on the true objective and to write logs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.logs import LogWriter
from fieldrl.apps.warehouse.selection import check_feasible, select_moves
from fieldrl.apps.warehouse.sim import Candidates, EpochResult, Warehouse

__all__ = ["EpisodeResult", "Scorer", "run_episode"]

Scorer = Callable[[Candidates, np.random.Generator], np.ndarray]


@dataclass
class EpisodeResult:
    epochs: list[EpochResult]
    labor_hours: float
    violations: int

    @property
    def throughput(self) -> float:
        """Units picked and put away per labor hour over the horizon."""
        return sum(e.throughput for e in self.epochs) / self.labor_hours

    @property
    def objective(self) -> float:
        """The evaluation objective (``objective`` config) per labor hour over the horizon;
        plain throughput by default."""
        return sum(e.objective for e in self.epochs) / self.labor_hours


def select(
    cfg: WarehouseConfig, cands: Candidates, scores: np.ndarray, hours: float | None = None
) -> tuple[np.ndarray, int]:
    """Feasible moves for these scores (``hours``: the epoch's labor, by default
    ``labor.hours_per_epoch``), and the violations a check finds (always 0)."""
    lab = cfg.labor
    budget = (lab.hours_per_epoch if hours is None else hours) * lab.consolidation_share
    args = (cands.source, cands.target, cands.zone, cands.labor_hours)
    chosen = select_moves(scores, *args, budget, lab.moves_per_zone)
    return chosen, check_feasible(chosen, *args, budget, lab.moves_per_zone)


def run_episode(
    cfg: WarehouseConfig,
    seed: int,
    scorer: Scorer,
    writer: LogWriter | None = None,
    episode: int = 0,
    warmup: Scorer | None = None,
) -> EpisodeResult:
    """One horizon on warehouse ``seed`` (common random numbers: same seed, same demand).

    The first ``sim.warmup_epochs`` are played by ``warmup`` (default: ``scorer``) and not
    counted, so every method starts from the same warmed-up state.
    """
    wh = Warehouse(cfg, seed)
    policy_rng = np.random.default_rng([seed, 7])
    results, violations = [], 0
    for epoch in range(cfg.sim.warmup_epochs + cfg.sim.horizon_epochs):
        cands = wh.candidates()
        warming = epoch < cfg.sim.warmup_epochs
        rule = (warmup or scorer) if warming else scorer
        hours = wh.labor_hours()
        chosen, bad = select(cfg, cands, rule(cands, policy_rng), hours)
        result = wh.step(cands, chosen)
        if warming:
            continue
        violations += bad
        results.append(result)
        if writer is not None:
            budget = hours * cfg.labor.consolidation_share
            writer.add(episode, epoch, cands, chosen, budget, result, wh.context())
    if writer is not None:
        writer.flush()
    return EpisodeResult(results, sum(r.labor_hours for r in results), violations)
