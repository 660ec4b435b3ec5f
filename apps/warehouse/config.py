"""Config of the warehouse consolidation app: the warehouse, its logs, the algorithms.

Every simulator number carries its source or "assumption" in ``configs/default.toml``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fieldrl.config import FieldrlConfig, Section


class EpochWindow(Section):
    """A stretch of the day's counted epochs (0 = the first epoch after warm-up) during
    which a quantity is multiplied by ``factor``."""

    start_epoch: int = Field(..., ge=0, description="First epoch of the window.")
    epochs: int = Field(..., ge=1, description="Length of the window, epochs.")
    factor: float = Field(..., ge=0, description="Multiplier during the window.")

    def covers(self, epoch: int) -> bool:
        return self.start_epoch <= epoch < self.start_epoch + self.epochs


class DemandShock(EpochWindow):
    """A seasonal demand shock: a share of the items (drawn per warehouse) sells
    ``factor`` times its usual rate during the window; replenishment still plans on the
    usual rate, so the shock drains stock."""

    items_share: float = Field(1.0, gt=0, le=1, description="Share of items the shock hits.")


class LayoutConfig(Section):
    """Storage: zones x aisles x levels of single-item containers."""

    zones: int = Field(8, ge=2, description="Storage zones; zone 0 is the hazmat zone.")
    hazmat_share: float = Field(
        0.04, gt=0, lt=1, description="Share of containers in the hazmat zone (zone 0)."
    )
    aisles_per_zone: int = Field(50, ge=1)
    levels: int = Field(6, ge=1)
    containers: int = Field(300_000, ge=100)
    capacity_liters: list[float] = Field(
        default_factory=lambda: [20.0, 40.0, 80.0], description="Container size classes."
    )
    capacity_mix: list[float] = Field(
        default_factory=lambda: [0.5, 0.35, 0.15], description="Share of each size class."
    )
    zone_load_spread: float = Field(
        0.15, ge=0, lt=1, description="Items are slotted to zones with +-this load imbalance."
    )
    aisle_step_m: float = Field(3.0, gt=0, description="Walk from one aisle to the next.")
    level_height_m: float = Field(0.5, ge=0, description="Extra travel per level, meters.")
    zone_gap_m: float = Field(20.0, ge=0, description="Travel between neighbouring zones.")


class ItemsConfig(Section):
    items: int = Field(60_000, ge=10)
    zipf_alpha: float = Field(0.8, gt=0, description="Demand popularity exponent.")
    demand_units_per_epoch: float = Field(
        29_000.0, gt=0, description="Mean units ordered per epoch over all items."
    )
    drift_sigma: float = Field(0.05, ge=0, description="Log-demand random walk per epoch.")
    unit_liters_median: float = Field(0.8, gt=0)
    unit_liters_sigma: float = Field(0.9, ge=0, description="Lognormal sigma of unit size.")
    hazmat_fraction: float = Field(0.02, ge=0, le=1, description="Items stored in zone 0 only.")
    demand_shock: list[DemandShock] = Field(
        default_factory=list, description="Seasonal demand shocks (none by default)."
    )


class InventoryConfig(Section):
    occupancy: float = Field(
        0.97, gt=0, le=1, description="Largest share of containers the initial stock may use."
    )
    containers_per_item_mean: float = Field(
        3.0, ge=1, description="Mean initial spread of an item over containers."
    )
    reorder_days: float = Field(2.0, gt=0, description="Reorder point, days of demand.")
    lot_days: float = Field(2.5, gt=0, description="Replenishment lot, days of demand.")
    lead_epochs: int = Field(8, ge=1, description="Replenishment lead time, epochs.")


class LaborConfig(Section):
    hours_per_epoch: float = Field(190.0, gt=0, description="Labor available per epoch.")
    consolidation_share: float = Field(
        0.03, ge=0, le=1, description="Consolidation budget, as a share of the epoch's labor."
    )
    consolidation_from_pickers: bool = Field(
        False, description="Consolidation hours come out of picking (else dedicated stations)."
    )
    putaway_share: float = Field(
        0.3, gt=0, le=1, description="Largest share of labor put-away may use."
    )
    pick_seconds_per_unit: float = Field(4.0, gt=0, description="Handling per unit picked.")
    pick_seconds_per_visit: float = Field(
        25.0, ge=0, description="Walk to and open one container during picking."
    )
    putaway_seconds_per_container: float = Field(30.0, gt=0)
    move_fixed_seconds: float = Field(30.0, ge=0, description="Handle two bins at a station.")
    moves_at_station: bool = Field(
        True, description="Robots bring bins to a workstation (no walking for moves)."
    )
    move_seconds_per_unit: float = Field(2.0, ge=0)
    walk_m_per_s: float = Field(1.2, gt=0)
    moves_per_zone: int = Field(250, ge=1, description="Zone rule: move cap per zone, epoch.")
    calendar: list[EpochWindow] = Field(
        default_factory=list,
        description="Labor calendar: windows where hours_per_epoch is scaled (a thin night "
        "shift, a break); the consolidation budget and put-away cap scale with it.",
    )

    def hours(self, epoch: int) -> float:
        """Labor hours of counted epoch ``epoch`` (warm-up epochs are negative: no window)."""
        factor = 1.0
        for window in self.calendar:
            if window.covers(epoch):
                factor *= window.factor
        return self.hours_per_epoch * factor


class SimConfig(Section):
    """Time, and the rules of the floor."""

    epoch_minutes: float = Field(30.0, gt=0, description="Planning window.")
    horizon_epochs: int = Field(48, ge=1, description="Epochs per episode (one day).")
    warmup_epochs: int = Field(4, ge=0, description="Epochs run by the heuristic first.")
    partial_fill: float = Field(0.5, gt=0, le=1, description="Sources fill below this.")
    pick_rule: Literal["random", "least_full"] = Field(
        "random",
        description="Which container a pick drains first: the one the picker meets (random), "
        "or the least full (a discipline that defragments by itself).",
    )
    targets_per_source: int = Field(
        2, ge=1, description="Candidate targets per source: the next fuller containers."
    )


class ObjectiveConfig(Section):
    """What evaluation counts: units picked plus (``putaway_weight`` x) units put away per
    labor hour, each unit weighted by its item's velocity class, less a penalty per
    kilometre pickers walk. The default (weights 1, no penalty) is plain
    throughput."""

    class_shares: list[float] = Field(
        default_factory=lambda: [0.2, 0.3, 0.5],
        description="Share of items in each velocity class, fastest first (ABC by demand).",
    )
    class_weights: list[float] = Field(
        default_factory=lambda: [1.0, 1.0, 1.0], description="Value of a unit of each class."
    )
    travel_penalty: float = Field(
        0.0, ge=0, description="Units of value lost per kilometre pickers walk."
    )
    putaway_weight: float = Field(
        1.0, ge=0, description="Value of a unit put away, relative to a unit picked."
    )

    @model_validator(mode="after")
    def _classes(self) -> ObjectiveConfig:
        if len(self.class_shares) != len(self.class_weights):
            raise ValueError(
                f"class_shares has {len(self.class_shares)} entries but class_weights "
                f"{len(self.class_weights)}: give one weight per velocity class"
            )
        if any(s <= 0 for s in self.class_shares) or abs(sum(self.class_shares) - 1) > 1e-6:
            raise ValueError(f"class_shares must be positive and sum to 1, got {self.class_shares}")
        if any(w < 0 for w in self.class_weights):
            raise ValueError(f"class_weights must be >= 0, got {self.class_weights}")
        return self

    @property
    def is_throughput(self) -> bool:
        unweighted = all(w == 1 for w in self.class_weights) and self.putaway_weight == 1
        return self.travel_penalty == 0 and unweighted

    def describe(self) -> str:
        if self.is_throughput:
            return "units picked + put away per labor hour"
        weights = "/".join(f"{w:g}" for w in self.class_weights)
        return (f"units picked + {self.putaway_weight:g} x units put away (weighted {weights} "
                f"by velocity class) less {self.travel_penalty:g} per km walked, per labor "
                "hour")  # fmt: skip


class LoggingConfig(Section):
    """The behavior policy that writes logs, and how much of each epoch is logged."""

    gumbel_scale: float = Field(0.5, ge=0, description="Noise on the heuristic's log score.")
    epsilon: float = Field(0.1, ge=0, le=1, description="Share of candidates scored at random.")
    unselected_rate: float = Field(
        0.15, gt=0, le=1, description="Share of unselected candidates written to the logs."
    )
    outcome_epochs: int = Field(
        8, ge=1, description="Window of the per-candidate refill outcome, epochs (8 = 4 h)."
    )


class AIQLConfig(Section):
    """AIQL (IQL with a per-candidate actor and an aggregate-statistic critic)."""

    scorer_hidden: list[int] = Field(default_factory=lambda: [128, 128])
    critic_hidden: list[int] = Field(default_factory=lambda: [256, 256])
    lr: float = Field(3e-4, gt=0)
    gamma: float = Field(0.9, gt=0, le=1, description="Discount per epoch (30 min).")
    expectile: float = Field(0.7, gt=0, lt=1, description="IQL tau.")
    beta: float = Field(3.0, ge=0, description="Advantage temperature (0 = behavior cloning).")
    weight_clip: float = Field(100.0, gt=0)
    candidate_advantage: float = Field(
        5.0,
        ge=0,
        description="Weight of the critic-guided per-candidate actor loss (marginal value "
        "per labor hour); 0 = the listwise advantage-weighted likelihood alone.",
    )
    critic_input: Literal["aggregate", "mean_pool"] = Field(
        "aggregate",
        description="What the critic sees of the chosen set: its aggregate statistics, or "
        "only the mean of its features (the pooled-critic IQL baseline).",
    )
    critic_form: Literal["mlp", "state_linear"] = Field(
        "state_linear",
        description="Q over (s, phi(A)): one MLP, or a(s) + b(s).phi (linear in the set's "
        "statistics, with state-dependent weights).",
    )
    target_tau: float = Field(0.005, gt=0, le=1, description="Polyak rate of the target Q.")
    outcome_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of each candidate's uplift (the logged refill units of its source "
        "container, chosen vs not) beside the critic's marginal value in the per-candidate "
        "actor loss; 0 for logs without the per-candidate outcome columns.",
    )
    reward: str = Field(
        "refill_units",
        description="The logged reward column to learn from (refill_units: units put away "
        "into the containers the epoch's moves freed, in the outcome head's units).",
    )
    steps: int = Field(3000, ge=1, description="Gradient steps.")
    batch_epochs: int = Field(16, ge=1, description="Logged epochs per gradient step.")
    max_unselected: int = Field(
        512, ge=1, description="Unselected candidates kept per logged epoch (reweighted)."
    )


class A2IQLConfig(Section):
    """A²IQL: adapt a source-trained AIQL to a target objective with scarce target data."""

    kappa: float = Field(1.0, ge=0, description="Pessimism: reward mean - kappa * std.")
    bonus_weight: float = Field(1.0, ge=0, description="Weight of the conservative bonus.")
    hidden: int = Field(64, ge=4, description="NeuralLinear feature width.")
    prior_precision: float = Field(1.0, gt=0, description="Bayesian last-layer prior.")
    fit_epochs: int = Field(300, ge=1, description="Feature-network training passes.")
    steps: int = Field(500, ge=1, description="Actor re-extraction steps.")


class TransferConfig(Section):
    """The target domain: the user's warehouse with another evaluation objective, logged
    as the target reward, and optionally other dynamics (overrides of that warehouse)."""

    target_objective: ObjectiveConfig = Field(
        default_factory=lambda: ObjectiveConfig(putaway_weight=0.0),
        description="The target domain's evaluation objective (default: units picked per "
        "labor hour; put-away counts for nothing of itself).",
    )
    target_reward: str = Field(
        "objective", description="The target logs' reward column (the target objective)."
    )
    target_overrides: list[str] = Field(
        default_factory=list,
        description="--set style overrides of the user's warehouse for the target domain.",
    )
    source_episodes: int = Field(20, ge=1, description="Source log episodes.")
    ratios: list[int] = Field(
        default_factory=lambda: [30, 10, 100], description="Source:target epochs ratios."
    )
    filter_keep: float = Field(
        0.3, gt=0, le=1, description="Off-dynamics filter: share of source epochs kept."
    )


# what a headroom rule may weigh (``headroom.RULE_TERMS`` computes each from the features)
RULE_TERMS = ("liters_per_labor_minute", "slow_mover", "zone_backlog", "stale",
              "fragmented_item")  # fmt: skip


class HeadroomConfig(Section):
    """The upper references: the best interpretable rule of a grid, and the cross-entropy
    policy search over a linear scorer, both chosen on the validation days with the
    simulator in the loop (cached per simulator setting)."""

    rule_grid: dict[str, list[float]] = Field(
        default_factory=lambda: {
            "liters_per_labor_minute": [0.0, 1.0],
            "slow_mover": [0.0, 0.5, 1.0],
            "zone_backlog": [0.0, 1.0],
            "stale": [0.0, 1.0],
            "fragmented_item": [0.0, 1.0],
        },
        description="Weights tried per rule term (every combination but all-zero).",
    )
    population: int = Field(16, ge=2, description="Policy search: weight vectors per generation.")
    elite: int = Field(4, ge=1, description="Policy search: the best vectors refitted to.")
    generations: int = Field(8, ge=1, description="Policy search: generations.")
    init_std: float = Field(
        0.3, gt=0, description="Policy search: initial spread of the rule-term weights."
    )
    linear_std: float = Field(
        0.02, gt=0, description="Policy search: initial spread of the linear feature weights."
    )
    min_std: float = Field(0.005, gt=0, description="Policy search: floor of the spread.")
    seed: int = Field(0, ge=0, description="Policy search: sampling seed.")
    sensitivity_generations: int = Field(
        3, ge=1, description="Policy search generations per sensitivity setting."
    )
    sensitivity: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Settings of the sensitivity table: label -> --set overrides of the "
        "benchmarked warehouse (each gets its own rules and policy search).",
    )

    @model_validator(mode="after")
    def _terms(self) -> HeadroomConfig:
        unknown = sorted(set(self.rule_grid) - set(RULE_TERMS))
        if unknown:
            raise ValueError(
                f"rule_grid: unknown term {unknown[0]!r} (terms: {', '.join(RULE_TERMS)})"
            )
        if self.elite > self.population:
            raise ValueError(f"elite ({self.elite}) exceeds population ({self.population})")
        return self


class DataConfig(Section):
    logs: list[str] = Field(
        default_factory=list,
        description="Log folders to train on (empty: generate logs with the behavior policy).",
    )
    episodes: int = Field(20, ge=1, description="Episodes to log when generating logs.")
    first_seed: int = Field(100, ge=0, description="Warehouse seed of the first logged episode.")


class EvalConfig(Section):
    seeds: list[int] = Field(
        default_factory=lambda: list(range(5000, 5010)), description="Held-out warehouses."
    )
    train_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2])
    validation_seeds: list[int] = Field(
        default_factory=lambda: [900, 901, 902],
        description="Days train reports on (and sweeps select by); never the eval seeds.",
    )


class WarehouseConfig(FieldrlConfig):
    app: ClassVar[str] = "warehouse"
    layout: LayoutConfig = Field(default_factory=LayoutConfig)
    items: ItemsConfig = Field(default_factory=ItemsConfig)
    inventory: InventoryConfig = Field(default_factory=InventoryConfig)
    labor: LaborConfig = Field(default_factory=LaborConfig)
    sim: SimConfig = Field(default_factory=SimConfig)
    objective: ObjectiveConfig = Field(default_factory=ObjectiveConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    aiql: AIQLConfig = Field(default_factory=AIQLConfig)
    a2iql: A2IQLConfig = Field(default_factory=A2IQLConfig)
    headroom: HeadroomConfig = Field(default_factory=HeadroomConfig)
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
