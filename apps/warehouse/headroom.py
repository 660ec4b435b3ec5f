"""The headroom: how much a consolidation policy could gain in this simulator at all.

Two upper references, both allowed to run the simulator (which a user with only logs
cannot do, so neither is a method):

- **interpretable rules**: score = a weighted sum of a few terms computed from logged
  features (liters freed per labor minute, slow movers first, zone backlog first, ...),
  each term in units of its spread; the weights come from a small grid, chosen on the
  validation days;
- **policy search**: the cross-entropy method over a linear scorer of the standardised
  features (the AIQL scorer's input transform), fitted to the evaluation objective on the
  validation days with common random numbers (every candidate policy meets the same
  days), episodes spread over workers.

Both are chosen on ``eval.validation_seeds`` only; the benchmark reports them on the
held-out days. :func:`search` caches its result per simulator setting.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.apps.warehouse.baselines import heuristic_scores
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.pipeline import episode_throughputs
from fieldrl.apps.warehouse.sim import FEATURES, Candidates, Warehouse
from fieldrl.atomic import atomic_write_json
from fieldrl.config import config_hash
from fieldrl.distributed import ray_session
from fieldrl.runs import progress

__all__ = [
    "RULE_TERMS",
    "LinearScorer",
    "Rule",
    "SIM_SECTIONS",
    "reference_sample",
    "search",
    "validation_objective",
]

_F = {name: i for i, name in enumerate(FEATURES)}

# what a rule may weigh (the names config.RULE_TERMS), each computed from logged features
RULE_TERMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    # log of liters freed per labor minute (f_liters_freed is capacity / 40)
    "liters_per_labor_minute": lambda f: np.log(
        np.maximum(f[:, _F["liters_freed"]], 1e-6) / np.maximum(f[:, _F["labor_min"]], 1e-6)
    ),
    "slow_mover": lambda f: -f[:, _F["log_demand"]],
    "zone_backlog": lambda f: f[:, _F["zone_backlog"]],
    "stale": lambda f: f[:, _F["epochs_since_pick"]],
    "fragmented_item": lambda f: f[:, _F["log_item_containers"]],
}

# the config sections a policy's worth depends on (the cache key of a search)
SIM_SECTIONS = ("layout", "items", "inventory", "labor", "sim", "objective")


def reference_sample(cfg: WarehouseConfig, seed: int) -> np.ndarray:
    """Candidate features of a validation warehouse's first epoch: what the scorers'
    standardisation is fitted to."""
    return Warehouse(cfg, seed).candidates().features.astype(np.float64)


@dataclass
class Rule:
    """score = sum of weight x term / the term's spread on the reference sample."""

    weights: dict[str, float]
    spread: dict[str, float]

    @classmethod
    def fit(cls, weights: dict[str, float], sample: np.ndarray) -> Rule:
        spread = {k: float(max(np.std(RULE_TERMS[k](sample)), 1e-9)) for k in weights}
        return cls(dict(weights), spread)

    def __call__(self, cands: Candidates, rng: np.random.Generator | None = None) -> np.ndarray:
        return self.score_features(cands.features.astype(np.float64))

    def score_features(self, features: np.ndarray) -> np.ndarray:
        score = np.zeros(features.shape[0])
        for name, w in self.weights.items():
            if w:
                score += w * RULE_TERMS[name](features) / self.spread[name]
        return score

    def describe(self) -> str:
        terms = [f"{w:+g} {name}" for name, w in self.weights.items() if w]
        return " ".join(terms).lstrip("+") if terms else "(no term)"


@dataclass
class LinearScorer:
    """w . z(x) (+ a rule's score), z = standardised asinh(x / median|x|) of the candidate
    features (the AIQL scorer's input transform)."""

    weights: np.ndarray
    scale: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    base: Rule | None = None

    @classmethod
    def fit(cls, weights: np.ndarray, sample: np.ndarray, base: Rule | None = None) -> LinearScorer:
        scale = np.maximum(np.median(np.abs(sample), 0), 1e-6)
        z = np.arcsinh(sample / scale)
        std = np.maximum(z.std(0), 1e-2)
        return cls(np.asarray(weights, np.float64), scale, z.mean(0), std, base)

    def __call__(self, cands: Candidates, rng: np.random.Generator | None = None) -> np.ndarray:
        score = self.standardise(cands.features) @ self.weights
        return score + self.base(cands) if self.base is not None else score

    def standardise(self, features: np.ndarray) -> np.ndarray:
        return (np.arcsinh(features / self.scale) - self.mean) / self.std


def validation_objective(
    cfg: WarehouseConfig,
    scorers: Sequence[Any],
    seeds: Sequence[int],
    workers: int = 1,
    address: str | None = None,
    description: str | None = None,
) -> np.ndarray:
    """The objective of every scorer on every seed, [scorers, seeds] (common random
    numbers), the episodes spread over workers (shown as progress under ``description``)."""
    named = {str(i): scorer for i, scorer in enumerate(scorers)}
    values = episode_throughputs(cfg, named, seeds, workers, address, description)
    return np.stack([values[name][0] for name in named]).astype(np.float64)


def _rule_grid(grid: dict[str, list[float]]) -> list[dict[str, float]]:
    names = list(grid)
    out = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grid.values())]
    return [w for w in out if any(w.values())]


def search(
    cfg: WarehouseConfig,
    cache: Path | None = None,
    workers: int = 1,
    address: str | None = None,
) -> dict[str, Any]:
    """The best rule of ``headroom.rule_grid`` and the cross-entropy policy search, both
    chosen on the validation days; cached in ``cache`` under the hash of the simulator
    setting and the search settings (a second call with the same setting reads it)."""
    hcfg, seeds = cfg.headroom, list(cfg.eval.validation_seeds)
    key = {s: getattr(cfg, s).model_dump(mode="json") for s in SIM_SECTIONS}
    key |= {"headroom": hcfg.model_dump(mode="json"), "seeds": seeds}
    tag = config_hash(key)
    path = cache / f"search-{tag}.json" if cache is not None else None
    if path is not None and path.is_file():
        return json.loads(path.read_text())
    sample = reference_sample(cfg, seeds[0])
    session = ray_session(workers, address) if workers > 1 or address else nullcontext()
    with session:
        rules = [Rule.fit(w, sample) for w in _rule_grid(hcfg.rule_grid)]
        heuristic = validation_objective(cfg, [heuristic_scores], seeds, workers, address)[0]
        rule_values = validation_objective(
            cfg, rules, seeds, workers, address, f"headroom: {len(rules)} rules"
        ).mean(1)
        best_rule = rules[int(np.argmax(rule_values))]
        linear, history = _cross_entropy(cfg, sample, seeds, best_rule, workers, address)
    result = {
        "tag": tag,
        "validation_seeds": seeds,
        "validation_heuristic": float(heuristic.mean()),
        "rule": {"weights": best_rule.weights, "spread": best_rule.spread,
                 "validation": float(rule_values.max()), "describe": best_rule.describe()},
        "rules_tried": len(rules),
        "linear": {"weights": linear.weights.tolist(), "scale": linear.scale.tolist(),
                   "mean": linear.mean.tolist(), "std": linear.std.tolist(),
                   "rule_weights": linear.base.weights, "rule_spread": linear.base.spread,
                   "validation": float(history[-1]["best"])},
        "history": history,
        "episodes": int(len(seeds) * (1 + len(rules) + hcfg.population * hcfg.generations)),
    }  # fmt: skip
    if path is not None:
        atomic_write_json(path, result)
    return result


def _cross_entropy(
    cfg: WarehouseConfig,
    sample: np.ndarray,
    seeds: Sequence[int],
    start: Rule,
    workers: int,
    address: str | None,
) -> tuple[LinearScorer, list[dict[str, float]]]:
    """CEM over a rule's continuous term weights and a linear term over every
    standardised feature: each generation samples ``population`` vectors around the
    mean, scores them on the validation days, and refits the mean and spread to the
    ``elite`` best; the best vector ever seen is returned. It starts at the ``start`` rule
    (linear term zero), so it refines the best rule (it cannot end below it on the
    validation days) rather than rediscovering it; perturbing the linear term is costly
    (small weights reorder near-ties), hence its own, smaller spread."""
    hcfg = cfg.headroom
    rng = np.random.default_rng(hcfg.seed)
    terms = list(RULE_TERMS)
    rule_spread = Rule.fit(dict.fromkeys(terms, 1.0), sample).spread
    split = len(terms)
    mean = np.concatenate([[start.weights.get(t, 0.0) for t in terms], np.zeros(len(FEATURES))])
    std = np.concatenate([np.full(split, hcfg.init_std), np.full(len(FEATURES), hcfg.linear_std)])

    def scorer(w: np.ndarray) -> LinearScorer:
        rule = Rule(dict(zip(terms, w[:split].tolist(), strict=True)), rule_spread)
        return LinearScorer.fit(w[split:], sample, rule)

    best, best_value, history = mean.copy(), -np.inf, []
    with progress(hcfg.generations, "headroom: policy search") as advance:
        for generation in range(hcfg.generations):
            pop = mean + std * rng.standard_normal((hcfg.population, mean.size))
            pop[0] = best  # the incumbent is re-scored on the same days: nothing is lost
            scorers = [scorer(w) for w in pop]
            values = validation_objective(cfg, scorers, seeds, workers, address).mean(1)
            elite = pop[np.argsort(-values)[: hcfg.elite]]
            mean, std = elite.mean(0), np.maximum(elite.std(0), hcfg.min_std)
            if values.max() > best_value:
                best_value, best = float(values.max()), pop[int(np.argmax(values))].copy()
            history.append({"generation": generation, "best": best_value,
                            "mean": float(values.mean())})  # fmt: skip
            advance()
    return scorer(best), history


def scorers_from(result: dict[str, Any]) -> dict[str, Any]:
    """The cached search's rule and linear scorer, ready to evaluate."""
    rule = Rule(result["rule"]["weights"], result["rule"]["spread"])
    lin = result["linear"]
    arrays = (np.asarray(lin[k], np.float64) for k in ("weights", "scale", "mean", "std"))
    linear = LinearScorer(*arrays, base=Rule(lin["rule_weights"], lin["rule_spread"]))
    return {"best_rule": rule, "policy_search": linear}
