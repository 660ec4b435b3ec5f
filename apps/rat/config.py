"""Config of the rat app: the body and its control rate, the tasks and their arenas.

Every task parameter carries its source in its description, or the word "assumption".
Sizes are in metres and seconds; the rat is the dm_control rodent (0.338 kg).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fieldrl.config import FieldrlConfig, Section

__all__ = [
    "BodyConfig",
    "ImitationConfig",
    "LibraryConfig",
    "NPMPConfig",
    "RatConfig",
    "TaskConfig",
    "TaskName",
]

TaskName = Literal["explore", "go_to_target", "two_tap", "bowl", "gaps"]
Behaviour = Literal["trot", "turn", "rear", "groom", "still"]
BEHAVIOURS: tuple[Behaviour, ...] = ("trot", "turn", "rear", "groom", "still")


class BodyConfig(Section):
    """The dm_control rat stepped with mujoco directly."""

    physics_dt: float = Field(
        0.002,
        gt=0,
        le=0.005,
        description="Physics step, s (the rat's MJCF default; the 2020 composer tasks use 0.001).",
    )
    control_dt: float = Field(0.02, gt=0, description="Control step, s (Merel et al. 2020).")
    dm_control_solver: bool = Field(
        False,
        description="Elliptic friction cones and 5 no-slip iterations, as dm_control's "
        "arenas set them (same trajectories as its tasks; 1.4x slower on flat ground, 6x in "
        "the bowl, measured here). Off: MuJoCo's default pyramidal cone, no no-slip pass.",
    )
    spawn_height: float = Field(
        0.0, ge=0, description="Root height at reset (the MJCF's upright pose stands at 0)."
    )
    joint_noise: float = Field(
        0.02, ge=0, description="Std of the joint angles at reset, rad (assumption)."
    )
    fall_upright: float = Field(
        -0.2,
        ge=-1,
        lt=1,
        description="A fall: the torso's up axis has a vertical component "
        "below this (on its side or back; a rearing rat stays above 0) (assumption).",
    )

    @model_validator(mode="after")
    def _whole_substeps(self) -> BodyConfig:
        ratio = self.control_dt / self.physics_dt
        if abs(ratio - round(ratio)) > 1e-6 or round(ratio) < 1:
            raise ValueError(
                f"control_dt ({self.control_dt}) must be a whole multiple of physics_dt "
                f"({self.physics_dt})"
            )
        return self


class TaskConfig(Section):
    """The task and its arena. Sparse tasks pay 1 on success and nothing else."""

    name: TaskName = Field("explore", description="explore | go_to_target | two_tap | bowl | gaps")
    duration: float = Field(10.0, gt=0, description="Episode length, s (assumption).")
    arena_size: float = Field(
        1.0,
        gt=0.2,
        description="explore/go_to_target/two_tap: half-width of the walled "
        "square arena, m (assumption; a rat open field is 0.5-1 m across).",
    )
    target_distance: tuple[float, float] = Field(
        (0.3, 0.8), description="go_to_target: spawn-to-target distance range, m (assumption)."
    )
    target_radius: float = Field(
        0.1, gt=0, description="go_to_target: success radius, m (assumption)."
    )
    orb_radius: float = Field(
        0.025, gt=0, description="two_tap: orb radius, m (dm_control rodent_two_touch)."
    )
    orb_height: float = Field(
        0.05,
        gt=0,
        description="two_tap: orb centre height, m (dm_control uses 0.14, a "
        "rearing touch; lower here so that a paw can reach it on all fours: assumption).",
    )
    orb_distance: tuple[float, float] = Field(
        (0.1, 0.3), description="two_tap: spawn-to-orb distance range, m (assumption)."
    )
    tap_interval: float = Field(
        0.8, gt=0, description="two_tap: seconds between the taps (dm_control reach.TwoTouch)."
    )
    tap_tolerance: float = Field(
        0.1, ge=0, description="two_tap: +- seconds accepted (dm_control reach.TwoTouch)."
    )
    bowl_radius: float = Field(
        0.5,
        gt=0.1,
        description="bowl: rim radius, m; escape is the root beyond it (assumption, rat-scaled).",
    )
    bowl_depth: float = Field(0.12, gt=0, description="bowl: depth at the centre, m (assumption).")
    bowl_bumps: float = Field(
        0.01,
        ge=0,
        description="bowl: height of random bumps, m "
        "(dm_control's bowl adds bumps; size an assumption).",
    )
    platform_length: tuple[float, float] = Field(
        (0.4, 0.8), description="gaps: platform length range, m (dm_control rodent_run_gaps)."
    )
    gap_length: tuple[float, float] = Field(
        (0.05, 0.2), description="gaps: gap length range, m (dm_control rodent_run_gaps)."
    )
    platforms: int = Field(12, ge=2, description="gaps: platforms in the corridor.")
    target_speed: float = Field(
        0.5, gt=0, description="gaps: forward speed paid in full, m/s (assumption)."
    )

    @model_validator(mode="after")
    def _ranges(self) -> TaskConfig:
        for key in ("target_distance", "orb_distance", "platform_length", "gap_length"):
            low, high = getattr(self, key)
            if not 0 <= low <= high:
                raise ValueError(f"{key} must be a range [low, high] with 0 <= low <= high")
        if self.target_distance[1] > self.arena_size * 0.9:
            raise ValueError("target_distance reaches past the arena: lower it or widen arena_size")
        return self


class LibraryConfig(Section):
    """The CPG motion library (see ``library.py``)."""

    clips: int = Field(40, ge=1, description="Training clips.")
    heldout_clips: int = Field(8, ge=1, description="Clips with held-out transitions.")
    segments: int = Field(4, ge=2, description="Behaviour segments a clip.")
    segment_seconds: tuple[float, float] = Field((1.0, 2.0), description="Segment length range.")
    blend: float = Field(
        0.5,
        ge=0,
        description="Seconds over which segments cross-fade "
        "(0.2 s toppled every groom-to-stand transition tried; 0.5 none).",
    )
    behaviour_weights: dict[Behaviour, float] = Field(
        default_factory=dict,
        description="Relative weight of each behaviour when a segment is drawn (a missing one "
        "weighs 1; empty: uniform, the libraries made before this field). More trot and turn "
        "make a library, and the priors fitted to it, travel more.",
    )
    noisy_share: float = Field(0.3, ge=0, le=1, description="Share of clips with action noise.")
    noise: float = Field(0.15, ge=0, description="Std of the OU action noise.")
    heldout: list[tuple[str, str]] = Field(
        default_factory=lambda: [("trot", "rear"), ("still", "groom")],
        description="Transitions never shown in training clips (a posture to a gait always "
        "passes through still).",
    )
    frequencies: list[float] = Field(
        default_factory=lambda: [2.0, 3.0, 4.0, 5.0],
        description="Trot frequencies, Hz (rat trot: 2-5 Hz).",
    )
    tune_candidates: int = Field(120, ge=0, description="Random-search trials per gait.")
    files: list[str] = Field(
        default_factory=list,
        description="Your trajectory files (npz or HDF5, the library "
        "layout) or globs: train on them instead of generated clips (train --library).",
    )
    cpg: str | None = Field(
        None, description="CPG parameters (JSON from `tune-cpg`) instead of the shipped ones."
    )

    @model_validator(mode="after")
    def _weights(self) -> LibraryConfig:
        weights = self.behaviour_weights
        bad = {k: w for k, w in weights.items() if not 0 <= w < float("inf")}
        if bad:
            raise ValueError(f"behaviour_weights must be finite and >= 0, got {bad}")
        if sum(weights.get(b, 1.0) > 0 for b in BEHAVIOURS) < 2:
            raise ValueError("behaviour_weights: at least two behaviours need a weight above 0")
        unreachable = {b for pair in self.heldout for b in pair if weights.get(b, 1.0) == 0}
        if unreachable:
            raise ValueError(f"behaviour_weights: {sorted(unreachable)} weigh 0 but a held-out "
                             "transition needs them")  # fmt: skip
        return self


class ImitationConfig(Section):
    """Closed-loop imitation (DAgger) shared by the motion prior, the adapter core and the
    multitask baseline."""

    iterations: int = Field(40, ge=1, description="Collect-then-train iterations.")
    rollouts: int = Field(16, ge=1, description="Rollouts an iteration.")
    rollout_steps: int = Field(64, ge=2, description="Steps a rollout at most.")
    horizon: int = Field(5, ge=1, description="Future reference frames the models read.")
    gain: float = Field(
        1.0,
        ge=0,
        description="Expert's pose correction (chosen on the "
        "training clips: 0.04 rad error at 1.0 vs 0.07 at 0).",
    )
    expert_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of expert actions at the start, decaying to 0 by half-way.",
    )
    action_noise: float = Field(
        0.2,
        ge=0,
        description="Std of noise on rollout actions (0.2: the decoder learns to recover; on "
        "training seed 7 the behaviour prior then went 0.091 m/s at temperature 0.5, 0.049 "
        "m/s at 0.05).",
    )
    abort_error: float = Field(0.6, gt=0, description="Joint RMS error (rad) ending a rollout.")
    updates: int = Field(
        120,
        ge=1,
        description="Gradient steps an iteration (120: the motion prior travelled 0.41-0.42 m "
        "on the KL weight's trot clips at 40).",
    )
    batch: int = Field(64, ge=1)
    sequence: int = Field(16, ge=2, description="Steps in a training sequence.")
    lr: float = Field(3e-4, gt=0)
    capacity: int = Field(100_000, ge=100, description="Visited states kept.")


class NPMPConfig(Section):
    """The motion prior: encoder over the reference window, AR(1) latent prior, decoder."""

    latent: int = Field(
        16,
        ge=1,
        description="Latent size (MoCapAct and track-mjx use 60; smaller here for CPU budgets).",
    )
    hidden: list[int] = Field(default_factory=lambda: [256, 256], min_length=1)
    kl: float = Field(
        0.001,
        ge=0,
        description="KL weight (MoCapAct 0.1, track-mjx 1e-4). 0.001 chosen on three 4-s trot "
        "clips outside the benchmark: tracking them, the prior travelled 0.58-0.76 m of the "
        "reference's 0.83-1.13 m at 0.001, 0.46-0.52 m with a fall at 0.01.",
    )
    alpha: float = Field(0.95, gt=0, lt=1, description="AR(1) prior coefficient (MoCapAct).")
    behaviour_hidden: list[int] = Field(default_factory=lambda: [256, 256], min_length=1)
    behaviour_components: int = Field(
        1,
        ge=1,
        le=16,
        description="Gaussians in the behaviour prior (1: a Gaussian fitted "
        "by KL, as track-mjx; more: a mixture fitted by likelihood).",
    )
    behaviour_data: Literal["student", "expert", "own"] = Field(
        "own",
        description="States the behaviour prior learns on: the motion prior's own "
        "rollouts, the tracking expert's (closer to the library), or, DAgger-style, those "
        "and then its own: before each 100 updates, behaviour_rollouts rollouts of the "
        "behaviour prior itself from library frames, labelled by the encoder reading the "
        "clip (so its errors do not compound into standing still).",
    )
    behaviour_rollouts: int = Field(
        16, ge=1, description="With behaviour_data = 'own': its own rollouts per 100 updates."
    )
    temperature: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Scale of the latent noise, and of the first latent, when the priors move "
        "without a reference (exploration by either latent arm; under a task agent it scales "
        "the agent's latent action, so it reaches temperature x the action bound); the "
        "behaviour prior's own DAgger rollouts stay at 1. 1 samples the priors as fitted (and "
        "keeps runs saved before this setting as they were); the presets use 0.5, chosen on "
        "training seed 7, outside the benchmark's: 1 fell in 6 of 8 10-s rollouts, 0.5 in 1 "
        "at 51% of the library's speed, 0 stood still.",
    )
    behaviour_updates: int = Field(
        2000,
        ge=1,
        description="Gradient steps of the behaviour prior on the final student's rollouts.",
    )


class AdaptersConfig(Section):
    """The adapter-bank motor core and, with ``count = 0``, the multitask baseline."""

    count: int = Field(6, ge=1, description="Adapters in the bank.")
    hidden: int = Field(128, ge=8, description="Core (GRU) width; adapters are hidden x hidden.")
    tau: float = Field(1.0, gt=0, description="Gumbel-softmax temperature.")
    option_hidden: list[int] = Field(default_factory=lambda: [64], min_length=1)
    option_steps: int = Field(
        20_000,
        ge=1,
        description="Simulator steps the option policy "
        "may use to learn a held-out sequence (network frozen).",
    )


Stage = Literal["motion", "behaviour", "adapters", "multitask", "agent"]


class TrainConfig(Section):
    stages: list[Stage] = Field(
        default_factory=lambda: ["motion", "behaviour", "adapters", "multitask"],
        min_length=1,
        description="What `train` trains, in order; `agent` is a task agent (train.agent) on "
        "task.name over the priors trained before it.",
    )
    agent: Literal["prior_ppo", "motion_ppo", "ppo", "sac"] = Field(
        "prior_ppo",
        description="prior_ppo: PPO over the latent through the behaviour prior; "
        "motion_ppo: the same through the AR(1) prior (no behaviour prior); ppo, sac: raw "
        "actions.",
    )

    @model_validator(mode="after")
    def _order(self) -> TrainConfig:
        if self.agent == "prior_ppo" and "agent" in self.stages:
            before = self.stages[: self.stages.index("agent")]
            if not {"motion", "behaviour"} <= set(before):
                raise ValueError(
                    "train.agent prior_ppo needs the motion and behaviour stages "
                    "before the agent stage"
                )
        if (
            "behaviour" in self.stages
            and "motion" not in self.stages[: self.stages.index("behaviour")]
        ):
            raise ValueError("the behaviour stage needs the motion stage before it")
        return self


class AgentConfig(Section):
    """Task agents: PPO over the priors' latent (prior_ppo) and the raw-action PPO and SAC
    baselines, at the same step budget."""

    steps: int = Field(50_000, ge=1, description="Environment steps of training.")
    n_steps: int = Field(
        1024, ge=8, description="PPO rollout length; also the chunk a trainer step learns."
    )
    batch: int = Field(256, ge=2)
    epochs: int = Field(10, ge=1)
    lr: float = Field(3e-4, gt=0)
    gamma: float = Field(0.99, gt=0, le=1)
    ent_coef: float = Field(0.0, ge=0)
    prior_kl: float = Field(
        0.0,
        ge=0,
        description="prior_ppo, motion_ppo: weight of KL(policy || prior) in PPO's loss, in "
        "place of the entropy bonus (0: off, plain PPO from the prior's exploration).",
    )
    hidden: list[int] = Field(default_factory=lambda: [256, 256], min_length=1)
    sac_buffer: int = Field(100_000, ge=100)
    sac_learning_starts: int = Field(1000, ge=0)
    sac_train_freq: int = Field(
        4,
        ge=1,
        description="Environment steps per SAC gradient "
        "step (1 in the SAC paper; 4 to fit the CPU budget).",
    )
    eval_episodes: int = Field(20, ge=1, description="Held-out episodes for success rates.")


class BenchmarkConfig(Section):
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1, 2],
        min_length=1,
        description="Training seeds: motor system and task agents.",
    )
    tasks: list[Literal["go_to_target", "two_tap", "bowl", "gaps"]] = Field(
        default_factory=lambda: ["go_to_target", "two_tap"],
        min_length=1,
        description="Sparse tasks the agents are compared on.",
    )
    agents: list[Literal["prior_ppo", "motion_ppo", "ppo", "sac"]] = Field(
        default_factory=lambda: ["prior_ppo", "motion_ppo", "ppo", "sac"], min_length=1
    )
    agent_steps: int = Field(100_000, ge=1, description="Environment steps per agent run.")
    explore_episodes: int = Field(8, ge=1, description="Exploration episodes per arm and seed.")
    explore_seconds: float = Field(10.0, gt=0, description="Length of an exploration episode.")
    tracking_seconds: float = Field(4.0, gt=0, description="Seconds of each held-out clip tracked.")
    adaptation_share: float = Field(
        0.5,
        gt=0,
        lt=1,
        description="Share of the held-out clips the option policy adapts on (at least one); "
        "the other held-out clips score every tracking arm, so no arm is scored on a clip any "
        "adaptation saw.",
    )
    speed_seconds: float = Field(2.0, gt=0, description="Seconds each speed measurement runs.")


class RatConfig(FieldrlConfig):
    app: ClassVar[str] = "rat"
    body: BodyConfig = Field(default_factory=BodyConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    library: LibraryConfig = Field(default_factory=LibraryConfig)
    imitation: ImitationConfig = Field(default_factory=ImitationConfig)
    npmp: NPMPConfig = Field(default_factory=NPMPConfig)
    adapters: AdaptersConfig = Field(default_factory=AdaptersConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
