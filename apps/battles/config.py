"""Config of the battles app: the scenario (an analytic population game or a battlefield),
the learner, partial observability, evaluation and the benchmark's grid."""

from __future__ import annotations

import math
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator

from fieldrl.apps.battles.games import GAMES
from fieldrl.config import FieldrlConfig, Section

CUSTOM_GAME = "custom"


def _known_game(name: str) -> str:
    if name != CUSTOM_GAME and name not in GAMES:
        raise ValueError(f"unknown game {name!r}: one of {', '.join([*GAMES, CUSTOM_GAME])}")
    return name


GameName = Annotated[str, AfterValidator(_known_game)]

MethodName = Literal["mf_mappo", "mappo", "ippo", "mfq"]


class ScenarioConfig(Section):
    """What the two teams play: a population game with a known equilibrium, or a battle."""

    kind: Literal["battlefield", "game"] = "battlefield"
    game: GameName = Field(
        "weighted_rps",
        description=f"The population game (kind = game): {', '.join(GAMES)}, or custom "
        "(scenario.payoff).",
    )
    payoff: list[list[float]] | None = Field(
        None, description="A custom game's payoff to blue, a square matrix (game = custom)."
    )
    blue_cap: list[float] | None = Field(
        None, description="Custom game: at most this share of blue on each strategy."
    )
    red_cap: list[float] | None = Field(None, description="Custom game: red's caps.")
    agents_per_team: int = Field(1_000, ge=1, description="N per team.")
    horizon: int = Field(40, ge=1, description="Steps per episode.")
    height: int = Field(16, ge=2, le=256, description="Battlefield rows.")
    width: int = Field(16, ge=3, le=256, description="Battlefield columns.")
    max_health: int = Field(3, ge=1, le=100, description="Hits an agent survives.")
    attrition: float = Field(
        0.5, ge=0, description="Hit probability per unit of local (enemies - friends) density."
    )
    objective: list[int] | None = Field(
        None, description="[top, left, height, width] of the objective; default the centre 2x2."
    )
    objective_weight: float = Field(1.0, ge=0, description="Reward per share of team held.")
    kill_weight: float = Field(1.0, ge=0, description="Reward per share of enemy team killed.")

    @model_validator(mode="after")
    def _objective_shape(self) -> ScenarioConfig:
        if self.objective is not None and len(self.objective) != 4:
            raise ValueError("objective must be [top, left, height, width]")
        return self

    @model_validator(mode="after")
    def _custom_game(self) -> ScenarioConfig:
        if self.game != CUSTOM_GAME:
            if self.payoff is not None or self.blue_cap is not None or self.red_cap is not None:
                raise ValueError("payoff, blue_cap and red_cap need game = 'custom'")
            return self
        if self.payoff is None:
            raise ValueError("game = 'custom' needs payoff, a square matrix of blue's payoffs")
        k = len(self.payoff)
        if k < 2 or any(len(row) != k for row in self.payoff):
            raise ValueError(f"payoff must be a square matrix with >= 2 rows, got {k} rows "
                             f"of lengths {[len(row) for row in self.payoff]}")  # fmt: skip
        if not all(math.isfinite(x) for row in self.payoff for x in row):
            raise ValueError("payoff has a NaN or infinite entry")
        for name in ("blue_cap", "red_cap"):
            cap = getattr(self, name)
            if cap is not None and (len(cap) != k or min(cap) < 0 or sum(cap) < 1):
                raise ValueError(f"{name} must be {k} shares >= 0 summing to >= 1, got {cap}")
        return self


class TrainConfig(Section):
    """The learner (both teams train at once, in self-play)."""

    method: MethodName = Field(
        "mf_mappo",
        description="mf_mappo; baselines: mappo (full-state critic), ippo, mfq.",
    )
    iterations: int = Field(200, ge=1, description="Rollout + update rounds.")
    copies: int = Field(16, ge=1, description="Parallel copies of the scenario per rollout.")
    lr: float = Field(1e-3, gt=0)
    gamma: float = Field(0.99, ge=0, le=1)
    gae_lambda: float = Field(0.95, ge=0, le=1)
    clip: float = Field(0.2, gt=0)
    epochs: int = Field(4, ge=1, description="PPO epochs per rollout.")
    entropy: float = Field(0.01, ge=0, description="Entropy bonus.")
    value_coef: float = Field(0.5, ge=0)
    hidden: int = Field(64, ge=4)
    temperature: float = Field(0.02, gt=0, description="MF-Q's Boltzmann temperature on Q.")
    magnet: float = Field(
        0.0, ge=0, description="KL pull towards a periodically refreshed copy of the actor."
    )
    magnet_every: int = Field(20, ge=1, description="Iterations between magnet refreshes.")
    anneal_lr: bool = Field(False, description="Decay the learning rate linearly to zero.")
    center_advantages: bool = Field(
        False,
        description="Subtract the other copies' mean team advantage at the same step (a "
        "baseline independent of this copy's actions).",
    )
    average_tail: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Return the uniform average of the actor's weights over this last "
        "fraction of the iterations (0: the last actor). Policy-gradient methods only.",
    )
    shared_sides: bool = Field(
        False,
        description="One network plays both sides, red through the left-right mirror "
        "(policy-gradient methods on a battlefield; ignored for games and mfq).",
    )
    sampling: Literal["agent", "state"] = Field(
        "agent",
        description="agent: every agent draws its own action; state: one draw per occupied "
        "(cell, health) state, so the agents sharing it move as one block, in training and "
        "when the policy plays (policy-gradient methods).",
    )
    directions: bool = Field(
        False,
        description="The actor also reads off the maps the direction from an agent's cell to "
        "each team's centre of mass and densest cell (mf_mappo and mappo on a battlefield; "
        "ignored for games).",
    )
    past_opponents: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Share of iterations in which the learner plays a frozen snapshot of its "
        "own past actor (fictitious self-play; needs shared_sides on a battlefield).",
    )
    snapshot_every: int = Field(10, ge=1, description="Iterations between kept snapshots.")
    steering: bool = Field(
        False,
        description="Team-level steering: each step a team head draws one weight per map "
        "direction (own/opponent centre and densest cell) per battle, and every agent's moves "
        "are pushed along those directions by those weights, so a whole team can turn at once "
        "(mf_mappo and mappo on a battlefield; implies directions).",
    )
    steer_entropy: float = Field(0.01, ge=0, description="Entropy bonus of the steering head.")


class ObservationConfig(Section):
    """Partial observability of the opponent's distribution (the robustness study)."""

    opponent: Literal["full", "estimated"] = Field(
        "full", description="full: the true opponent map; estimated: a noisy, delayed one."
    )
    noise: float = Field(
        0.0, ge=0, description="Std of the noise per cell, in units of the mean share per cell."
    )
    delay: int = Field(0, ge=0, description="Steps the opponent map lags behind.")
    smoothing: float = Field(
        0.0, ge=0, lt=1, description="Estimator: share of the previous estimate kept each step."
    )
    gradient_penalty: float = Field(
        0.0, ge=0, description="lambda: penalty on the policy's gradient w.r.t. its map inputs."
    )


class EvalConfig(Section):
    """Cross-play on held-out battles (seeds never used in training)."""

    episodes: int = Field(100, ge=1, description="Battles per (method, opponent, side, seed).")
    seeds: list[int] = Field(default_factory=lambda: [1000, 1001, 1002, 1003, 1004], min_length=1)
    validation_seed: int = Field(900, description="Seed of the end-of-training check.")
    agents_per_team: int | None = Field(
        None, ge=1, description="Evaluate at this N per team (default: the training N)."
    )
    copies: int = Field(20, ge=1, description="Battles played at once.")
    opponents: list[str] = Field(
        default_factory=lambda: ["random", "rush"],
        min_length=1,
        description="Baseline names (random, rush, focus) or trained run folders.",
    )
    draw_margin: float = Field(0.05, ge=0, description="|mean reward per step| under this: draw.")


class BenchmarkConfig(Section):
    """The benchmark's grid (``fieldrl battles benchmark``)."""

    scaling_agents: list[int] = Field(
        default_factory=lambda: [200, 2_000, 10_000, 100_000], description="Total agents."
    )
    scaling_steps: int = Field(50, ge=1, description="Timed steps per scaling point.")
    magent2: bool = Field(True, description="Time MAgent2 battle_v4 as the reference point.")
    games: list[GameName] = Field(
        default_factory=lambda: ["weighted_rps", "constrained_rps"],
        description="Games to train on (custom: the [scenario] payoff); [] skips the section.",
    )
    game_agents: list[int] = Field(default_factory=lambda: [1_000, 10_000], description="N/team.")
    game_iterations: int = Field(400, ge=1)
    methods: list[MethodName] = Field(default_factory=lambda: ["mf_mappo", "mappo", "ippo", "mfq"])
    method_train: dict[MethodName, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per method, [train] settings that replace the shared ones in the "
        "benchmark (each baseline at settings chosen for it): "
        "[benchmark.method_train.ippo] entropy = 0.01.",
    )
    train_seeds: list[int] = Field(default_factory=lambda: [0, 1, 2, 3, 4], min_length=1)
    po_lambdas: list[float] = Field(
        default_factory=lambda: [0.0, 0.005, 0.01],
        description="Gradient-penalty weights of the partial-observability sweep; [] skips it.",
    )
    po_noise: list[float] = Field(default_factory=lambda: [0.0, 0.02, 0.05], min_length=1)
    po_delay: list[int] = Field(default_factory=lambda: [0, 3], min_length=1)

    @field_validator("method_train")
    @classmethod
    def _valid_train_settings(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for method, settings in value.items():
            try:
                TrainConfig.model_validate({**settings, "method": method})
            except ValidationError as error:
                first = error.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(f"{method}.{where}: {first['msg']}") from None
        return value


class BattlesConfig(FieldrlConfig):
    app: ClassVar[str] = "battles"
    scenario: ScenarioConfig = Field(default_factory=ScenarioConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    observation: ObservationConfig = Field(default_factory=ObservationConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)

    @model_validator(mode="after")
    def _custom_game_defined(self) -> BattlesConfig:
        if CUSTOM_GAME in self.benchmark.games and self.scenario.payoff is None:
            raise ValueError("benchmark.games lists custom: set scenario.payoff (and "
                             "scenario.game = 'custom') to define it")  # fmt: skip
        return self
