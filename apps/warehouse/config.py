"""Config of the warehouse consolidation app: the warehouse, its logs, the algorithms.

Every simulator number carries its source or "assumption" in ``configs/default.toml``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fieldrl.config import FieldrlConfig, Section


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


class LoggingConfig(Section):
    """The behavior policy that writes logs, and how much of each epoch is logged."""

    gumbel_scale: float = Field(0.5, ge=0, description="Noise on the heuristic's log score.")
    epsilon: float = Field(0.1, ge=0, le=1, description="Share of candidates scored at random.")
    unselected_rate: float = Field(
        0.15, gt=0, le=1, description="Share of unselected candidates written to the logs."
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
    reward: str = Field("liters_freed", description="The logged reward column to learn from.")
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
    """The target domain: another objective (the logged true throughput) and, by these
    overrides of the source warehouse, other dynamics."""

    target_reward: str = Field(
        "units_processed", description="The target logs' reward column (the new objective)."
    )
    target_overrides: list[str] = Field(
        default_factory=list, description="--set style overrides that make the target domain."
    )
    source_episodes: int = Field(20, ge=1, description="Source log episodes.")
    ratios: list[int] = Field(
        default_factory=lambda: [30, 10, 100], description="Source:target epochs ratios."
    )
    filter_keep: float = Field(
        0.3, gt=0, le=1, description="Off-dynamics filter: share of source epochs kept."
    )


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
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    aiql: AIQLConfig = Field(default_factory=AIQLConfig)
    a2iql: A2IQLConfig = Field(default_factory=A2IQLConfig)
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
