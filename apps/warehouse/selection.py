"""Scores to a feasible set of moves: best-first under the labor budget and the zone rule,
a container in at most one move. Feasible whatever the scores (NaN, ties, adversarial)."""

from __future__ import annotations

import numpy as np

from fieldrl.errors import FieldrlError

__all__ = ["check_feasible", "select_moves"]


def select_moves(
    scores: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
    zone: np.ndarray,
    labor_hours: np.ndarray,
    labor_budget: float,
    moves_per_zone: int,
    max_rounds: int = 50,
) -> np.ndarray:
    """Indices of the chosen candidates, in the order they were accepted.

    Rounds of: among the still-open candidates, take every one that is the best-scored
    candidate of both its containers, then accept those in score order while the labor
    budget and each zone's move cap allow; close whatever now conflicts.
    """
    n = scores.size
    if not (source.size == target.size == zone.size == labor_hours.size == n):
        raise FieldrlError("select_moves: scores and candidate arrays differ in length")
    if (labor_hours <= 0).any() or not np.isfinite(labor_hours).all():
        raise FieldrlError("select_moves: labor hours must be positive and finite")
    key = np.nan_to_num(np.asarray(scores, dtype=np.float64), nan=-np.inf)
    order = np.lexsort((np.arange(n), -key))  # best first; ties by index, so deterministic
    open_ = np.ones(n, bool)
    used_containers: set[int] = set()
    zone_moves = np.zeros(int(zone.max(initial=0)) + 1, np.int64)
    budget = float(labor_budget)
    accepted: list[np.ndarray] = []
    for _ in range(max_rounds):
        live = order[open_[order]]
        if live.size == 0:
            break
        # interleaved so that position order is rank order: the first occurrence of a
        # container is its best-ranked candidate, as source or as target
        touched = np.stack([source[live], target[live]], 1).ravel()
        rank = np.repeat(np.arange(live.size), 2)
        _, first = np.unique(touched, return_index=True)
        best_rank = np.full(live.size, 0)
        np.add.at(best_rank, rank[first], 1)
        winners = live[best_rank == 2]  # best for both of its containers
        if winners.size == 0:
            break
        labor = labor_hours[winners].astype(np.float64)
        fits = np.cumsum(labor) <= budget
        zones = zone[winners]
        seen = np.zeros(winners.size, np.int64)
        for z in np.unique(zones):
            mask = zones == z
            seen[mask] = zone_moves[z] + np.arange(1, mask.sum() + 1)
        fits &= seen <= moves_per_zone
        take = winners[fits]
        if take.size:
            accepted.append(take)
            budget -= float(labor_hours[take].sum())
            zone_moves += np.bincount(zone[take], minlength=zone_moves.size)
            used_containers.update(source[take].tolist())
            used_containers.update(target[take].tolist())
        open_[winners] = False  # taken, or they did not fit this round's budget order
        if used_containers:
            used = np.fromiter(used_containers, dtype=np.int64)
            open_ &= ~(np.isin(source, used) | np.isin(target, used))
        open_ &= labor_hours <= budget
        full = np.flatnonzero(zone_moves >= moves_per_zone)
        if full.size:
            open_ &= ~np.isin(zone, full)
    return np.concatenate(accepted) if accepted else np.zeros(0, np.int64)


def check_feasible(
    chosen: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
    zone: np.ndarray,
    labor_hours: np.ndarray,
    labor_budget: float,
    moves_per_zone: int,
) -> int:
    """The number of violated constraints (0 for a feasible selection)."""
    chosen = np.asarray(chosen, dtype=np.int64)
    containers = np.concatenate([source[chosen], target[chosen]])
    violations = containers.size - np.unique(containers).size
    violations += int(np.unique(chosen).size != chosen.size)
    violations += int(labor_hours[chosen].sum() > labor_budget + 1e-6)
    violations += int((np.bincount(zone[chosen]) > moves_per_zone).sum()) if chosen.size else 0
    return int(violations)
