"""Config of the LHC trigger app: the fill, the triggers, the control problem, the controllers.

Every physics number carries its source or the word "assumption" in ``configs/default.toml``;
the models here give the types, the ranges and what each key means.
"""

from __future__ import annotations

import glob
from difflib import get_close_matches
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, ValidationError, model_validator

from fieldrl.config import FieldrlConfig, Section

TriggerName = Literal["ht", "ad"]
ControllerName = Literal[
    "static", "pd", "quantile", "ppo", "grpo", "gfpo_f", "gfpo_fr", "lagrangian_ppo"
]
LEARNED: tuple[ControllerName, ...] = ("ppo", "grpo", "gfpo_f", "gfpo_fr", "lagrangian_ppo")


class SignalShape(Section):
    """A multi-jet signal the emulator overlays: ``jets`` generator-level jets an event,
    each pT = ``pt_min`` + Gamma(2, scale) with the scales of ``pt_scales`` in turn, or,
    with a resonance ``mass``, jet pairs from two-body decays (pT = mass/2 · sin θ*, θ*
    isotropic) on top of ``pt_min``; η Gaussian with ``eta_sigma``, φ uniform. Or the jets
    of events read from your NanoAOD (``events``)."""

    name: str = Field(..., min_length=1, max_length=40, description="Its name in reports.")
    jets: int = Field(4, ge=1, le=16, description="Jets an event.")
    pt_min: float = Field(20.0, ge=0, le=5000, description="pT floor, GeV.")
    pt_scales: list[float] = Field(
        default_factory=lambda: [30.0], min_length=1, description="Gamma(2) scales, GeV."
    )
    eta_sigma: float = Field(1.2, gt=0, le=5, description="Spread of the jets' eta.")
    mass: float = Field(0.0, ge=0, le=10_000, description="Resonance mass, GeV (0: none).")
    events: str = Field(
        "",
        max_length=4096,
        description="NanoAOD file or glob whose events' jets are this signal: each signal "
        "crossing gets a random event's jets, taken as generator level (the fill's "
        "resolution and JES apply); '' generates them from the shape above.",
    )

    @model_validator(mode="after")
    def _pairs(self) -> SignalShape:
        if self.events and not glob.glob(self.events):
            raise ValueError(f"signal {self.name!r}: no file matches events = {self.events!r}")
        if self.mass > 0 and self.jets % 2:
            raise ValueError(f"signal {self.name!r}: a resonance decays to jet pairs; "
                             f"jets = {self.jets} is odd")  # fmt: skip
        if any(x <= 0 for x in self.pt_scales):
            raise ValueError(f"signal {self.name!r}: pt_scales must be positive")
        return self


def _default_signals() -> tuple[SignalShape, SignalShape]:
    return (
        # lepton+jets tt: two b jets (~80 GeV) and two from the W (~55 GeV), central
        SignalShape(name="ttbar", jets=4, pt_min=20.0, pt_scales=[30.0, 30.0, 17.5, 17.5],
                    eta_sigma=1.2),
        # four soft b jets from two light pseudoscalars: many fall near the H_T jet cut
        SignalShape(name="haa4b", jets=4, pt_min=12.0, pt_scales=[12.0], eta_sigma=1.3),
    )  # fmt: skip


class FillConfig(Section):
    """One LHC fill as the event-stream emulator sees it."""

    duration_h: float = Field(12.0, gt=0, description="Fill length in hours.")
    n_windows: int = Field(96, ge=4, description="Control windows in the fill.")
    window_events: int = Field(200_000, ge=1000, description="Events per window (N).")
    lumi0: float = Field(1.3e34, gt=0, description="Peak luminosity, cm^-2 s^-1.")
    lumi_tau_h: float = Field(13.0, gt=0, description="Luminosity decay time, hours.")
    sigma_inel_mb: float = Field(69.0, gt=0, description="Inelastic pp cross-section, mb.")
    f_rev_hz: float = Field(11245.0, gt=0, description="LHC revolution frequency.")
    n_bunches: int = Field(2544, ge=1, description="Colliding bunch pairs.")
    bunch_spread: float = Field(0.10, ge=0, description="Lognormal sigma of bunch luminosity.")
    train_length: int = Field(48, ge=1, description="Bunches per train.")
    train_gap: int = Field(7, ge=1, description="Empty 25-ns slots between trains.")
    abort_gap: int = Field(119, ge=0, description="Empty slots before the orbit ends (abort gap).")
    orbit_slots: int = Field(3564, ge=1, description="25-ns bunch slots in one orbit.")
    first_in_train_factor: float = Field(0.9, gt=0, description="Luminosity factor, 1st bunch.")
    oot_pileup_jets: float = Field(
        0.0,
        ge=0,
        description="Out-of-time pileup jets per interaction of the slot before (0: jets are "
        "in-time only); the calorimeter pulse reaches oot_slots back, so short gaps matter.",
    )
    oot_slots: int = Field(
        3, ge=1, le=10, description="Slots back that out-of-time pileup reaches."
    )
    npv_efficiency: float = Field(0.7, gt=0, le=1, description="P(vertex reconstructed).")
    pu_jets_per_interaction: float = Field(0.08, ge=0, description="Pileup jets per interaction.")
    pu_jet_pt_scale: float = Field(8.0, gt=0, description="Exponential pT scale of PU jets, GeV.")
    hard_prob: float = Field(0.02, ge=0, le=1, description="P(interaction makes a hard dijet).")
    hard_pt_min: float = Field(20.0, gt=0, description="Hard-scatter leading-jet pT floor, GeV.")
    hard_index: float = Field(5.0, gt=1, description="Power-law index of the hard pT spectrum.")
    jet_store_min_pt: float = Field(15.0, ge=0, description="Jets below this are not stored.")
    jet_eta_max: float = Field(4.7, gt=0, description="Detector jet acceptance |eta|.")
    resolution_stochastic: float = Field(1.0, ge=0, description="a in a/sqrt(pT) (GeV^0.5).")
    resolution_constant: float = Field(0.05, ge=0, description="Constant resolution term.")
    jes_walk_sigma: float = Field(0.002, ge=0, description="JES random-walk step per window.")
    jes_walk_max: float = Field(0.02, ge=0, description="JES random walk is held within +-this.")
    jes_step: float = Field(0.0, description="A sudden JES change (e.g. 0.04 = +4%).")
    jes_step_at: float = Field(
        0.5, ge=0, le=1, description="When the JES step happens (fill frac)."
    )
    jes_schedule: list[tuple[float, float]] = Field(
        default_factory=list,
        description="More JES changes: (fill fraction, change) pairs, each held from its "
        "time on and added to the walk and jes_step, e.g. [[0.3, 0.02], [0.7, -0.05]].",
    )
    spike_rate: float = Field(2e-4, ge=0, description="Hot-tower/halo fake-jet rate per event.")
    spike_rate_drift: float = Field(0.5, ge=0, description="Log-normal walk sigma of that rate.")
    spike_pt_range: tuple[float, float] = Field((60.0, 400.0), description="Fake jet pT, GeV.")
    ttbar_fraction: float = Field(5e-4, ge=0, le=0.01, description="tt-like signal fraction.")
    haa4b_fraction: float = Field(5e-4, ge=0, le=0.01, description="h->aa->4b signal fraction.")
    signals: tuple[SignalShape, SignalShape] = Field(
        default_factory=_default_signals,
        description="The two signals' shapes (fractions: ttbar_fraction, haa4b_fraction); "
        "replace them to test a controller on the signal you care about.",
    )
    run: int = Field(1, ge=0, description="Run number written to files.")
    events_per_lumiblock: int = Field(20_000, ge=1, description="Events per luminosity block.")

    @property
    def window_s(self) -> float:
        return self.duration_h * 3600.0 / self.n_windows

    @model_validator(mode="after")
    def _pattern_fits(self) -> FillConfig:
        trains = -(-self.n_bunches // self.train_length)
        needed = self.n_bunches + (trains - 1) * self.train_gap + self.abort_gap
        if needed > self.orbit_slots:
            raise ValueError(
                f"{self.n_bunches} bunches in trains of {self.train_length} with "
                f"{self.train_gap}-slot gaps and a {self.abort_gap}-slot abort gap need "
                f"{needed} slots; an orbit has {self.orbit_slots}"
            )
        for at, _ in self.jes_schedule:
            if not 0 <= at <= 1:
                raise ValueError(f"jes_schedule: time {at} is not a fill fraction in [0, 1]")
        return self

    def slots(self) -> np.ndarray:
        """The orbit slot of each colliding bunch: trains of ``train_length`` separated by
        ``train_gap`` empty slots, from slot 0."""
        index = np.arange(self.n_bunches)
        return index + (index // self.train_length) * self.train_gap


class TriggerConfig(Section):
    """How the two trigger scores are computed."""

    ht_jet_pt_min: float = Field(20.0, ge=0, description="H_T jet pT cut, GeV.")
    ht_jet_eta_max: float = Field(2.5, gt=0, description="H_T jet |eta| cut.")
    ad_jets: int = Field(8, ge=1, description="Leading jets fed to the autoencoder.")
    ad_latent: int = Field(2, ge=1, description="Autoencoder latent size.")
    ad_model: str | None = Field(
        None, description="A `train-ad` checkpoint folder to use instead of training one."
    )
    ad_pt_scale: float = Field(50.0, gt=0, description="Jet pT is divided by this, GeV.")
    ad_phi_weight: float = Field(
        0.3, ge=0, description="Weight of phi in the input (phi is uniform: little to learn)."
    )
    ad_hidden: int = Field(32, ge=2, description="Autoencoder hidden width.")
    ad_train_events: int = Field(400_000, ge=1000, description="Background events to train on.")
    ad_train_fraction: float = Field(
        0.15, gt=0, le=1, description="Train the AD on the first this-fraction of the fill."
    )
    ad_epochs: int = Field(4, ge=1)
    ad_batch: int = Field(1024, ge=16)
    ad_lr: float = Field(2e-3, gt=0)
    tail_fraction: float = Field(
        0.03, gt=0, le=1, description="Highest-scoring fraction of each window kept for rates."
    )


class ControlConfig(Section):
    """The control problem: target, band, actions, reward."""

    target_rate: float = Field(0.0025, gt=0, lt=1, description="Target accept fraction.")
    band: float = Field(0.10, gt=0, lt=1, description="Relative tolerance band around target.")
    bunch_crossing_hz: float = Field(40e6, gt=0, description="Input rate (for kHz figures).")
    max_step: float = Field(
        0.08, gt=0, description="Largest threshold move per window, in units of the menu value."
    )
    signal_mix: tuple[float, float] = Field(
        (0.8, 0.2), description="Weights of (tt, h->aa->4b) in the signal efficiency."
    )
    reward_efficiency: float = Field(1.0, ge=0, description="Weight of signal efficiency.")
    reward_rate: float = Field(2.0, ge=0, description="Penalty per unit relative rate error.")
    reward_in_band: float = Field(1.0, ge=0, description="Bonus for a window in the band.")
    reward_over_budget: float = Field(
        0.0, ge=0, description="Extra penalty for a window above the band (lost bandwidth)."
    )


class PDConfig(Section):
    """Gains in units of the menu threshold per unit relative rate error (see the docs)."""

    kp: dict[str, float] = Field(
        default_factory=lambda: {"ht": 0.13, "ad": 0.105}, description="Proportional gain."
    )
    kd: dict[str, float] = Field(
        default_factory=lambda: {"ht": 0.0065, "ad": 0.0}, description="Derivative gain."
    )


class QuantileConfig(Section):
    smoothing: float = Field(
        1.0, gt=0, le=1, description="Weight of the newest window's quantile (1 = no smoothing)."
    )


class GuardConfig(Section):
    """The runaway guard around every learned controller (evaluate, benchmark, service): a
    causal supervisor that hands the threshold to a baseline when the rate runs away, and
    back when the learned controller's proposal is inside the band again."""

    enabled: bool = Field(True, description="Guard learned controllers (off: they act alone).")
    over_windows: int = Field(
        2, ge=1, description="Consecutive over-budget windows that hand control to the fallback."
    )
    hard_band: float = Field(
        0.5,
        gt=0,
        description="Relative rate error (either way) that hands control over at once.",
    )
    fallback: Literal["pd", "quantile"] = Field(
        "quantile", description="The baseline that holds the rate while the guard has control."
    )


class PolicyConfig(Section):
    hidden: list[int] = Field(default_factory=lambda: [64, 64])
    activation: Literal["tanh", "relu"] = "tanh"
    log_std_init: float = Field(-1.0, description="Initial log std of the move (exploration).")


class GroupConfig(Section):
    """GRPO / GFPO: per step, G candidate moves scored on the latest past window."""

    group: int = Field(64, ge=2, description="Candidates sampled per step (G).")
    keep: int = Field(16, ge=1, description="Candidates kept by the filter (k); GRPO keeps G.")
    clip: float = Field(0.2, gt=0)
    kl_coef: float = Field(0.02, ge=0, description="KL penalty to the reference policy.")
    ent_coef: float = Field(0.01, ge=0)
    lr: float = Field(3e-3, gt=0)
    epochs: int = Field(4, ge=1, description="Gradient passes over each batch of steps.")
    steps_per_update: int = Field(32, ge=1, description="Windows per policy update.")
    ref_update_every: int = Field(5, ge=1, description="Updates between reference refreshes.")
    efficiency_mix_fr: tuple[float, float] = Field(
        (0.8, 0.2), description="FR ranking: weights of (tt, h->aa->4b) efficiency."
    )


class PPOConfig(Section):
    """Used by SB3 PPO and by the Lagrangian PPO."""

    lr: float = Field(3e-4, gt=0)
    n_steps: int = Field(256, ge=8)
    batch_size: int = Field(64, ge=8)
    epochs: int = Field(10, ge=1)
    gamma: float = Field(0.9, gt=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    clip: float = Field(0.2, gt=0)
    ent_coef: float = Field(0.0, ge=0)
    over_limit: float = Field(
        0.015, ge=0, le=1, description="Lagrangian: allowed over-budget fraction of windows."
    )
    under_limit: float = Field(
        0.04, ge=0, le=1, description="Lagrangian: allowed under-budget fraction of windows."
    )
    lambda_lr: float = Field(0.05, gt=0, description="Lagrangian: dual ascent step.")


class TrainConfig(Section):
    controller: ControllerName = Field("gfpo_fr", description="What `train` trains.")
    triggers: list[TriggerName] = Field(default_factory=lambda: ["ht", "ad"])
    fill_seeds: list[int] = Field(
        default_factory=lambda: [11, 12, 13, 14], description="Training fills (never evaluated)."
    )
    jes_steps: list[float] = Field(
        default_factory=lambda: [0.0, 0.0, 0.03, -0.03],
        description="JES step of each training fill (cycled), so the policy sees steps.",
    )
    windows: int = Field(20_000, ge=1, description="Environment steps (windows) to train for.")
    randomize: dict[str, tuple[float, float]] = Field(
        default_factory=lambda: {
            "lumi0": (1.0e34, 1.6e34),
            "lumi_tau_h": (10.0, 16.0),
            "jes_step": (-0.03, 0.03),
            "jes_walk_sigma": (0.001, 0.003),
            "train_length": (36, 72),
            "pu_jets_per_interaction": (0.06, 0.10),
        },
        description="Domain randomization: fill keys drawn uniformly from [low, high] for "
        "each training fill, from its seed (assumption: the spread between fills of one "
        "year; not tuned). A drawn jes_step replaces train.jes_steps; {} trains on the "
        "configured fill.",
    )
    validation_seed: int = Field(
        500, description="Fill that train reports on (and sweeps rank by); not an eval seed."
    )


class EvalScenario(Section):
    name: str
    jes_step: float = 0.0
    overrides: dict[str, float] = Field(
        default_factory=dict, description="Other fill keys to change in this scenario."
    )


def _outside_training() -> list[EvalScenario]:
    return [
        EvalScenario(name="short_lifetime", overrides={"lumi_tau_h": 6.0}),
        EvalScenario(name="high_peak", overrides={"lumi0": 2.0e34}),
        EvalScenario(name="big_jes_step", jes_step=0.08),
        EvalScenario(
            name="all_three", jes_step=0.08, overrides={"lumi_tau_h": 6.0, "lumi0": 2.0e34}
        ),
    ]


class EvalConfig(Section):
    seeds: list[int] = Field(
        default_factory=lambda: [2001, 2002, 2003, 2004, 2005],
        description="Evaluation fill seeds: never used in training or tuning.",
    )
    scenarios: list[EvalScenario] = Field(
        default_factory=lambda: [
            EvalScenario(name="smooth"),
            EvalScenario(name="jes_step", jes_step=0.04),
        ]
    )
    controllers: list[ControllerName] = Field(
        default_factory=lambda: [
            "static",
            "pd",
            "quantile",
            "ppo",
            "grpo",
            "gfpo_f",
            "gfpo_fr",
            "lagrangian_ppo",
        ]
    )
    robustness: list[EvalScenario] = Field(
        default_factory=_outside_training,
        description="Fills outside train.randomize's ranges, each x eval.seeds: the "
        "benchmark's robustness section ([] leaves it out).",
    )


class DataConfig(Section):
    """Real NanoAOD input: file patterns and branch names (map them if yours differ)."""

    files: list[str] = Field(default_factory=list, description="ROOT files or glob patterns.")
    tree: str = "Events"
    chunk_events: int = Field(200_000, ge=1000, description="Events read per chunk.")
    branches: dict[str, str] = Field(
        default_factory=lambda: {
            "nJet": "nJet",
            "Jet_pt": "Jet_pt",
            "Jet_eta": "Jet_eta",
            "Jet_phi": "Jet_phi",
            "Jet_jetId": "Jet_jetId",
            "PV_npvs": "PV_npvs",
            "PV_npvsGood": "PV_npvsGood",
            "run": "run",
            "luminosityBlock": "luminosityBlock",
            "Pileup_nTrueInt": "Pileup_nTrueInt",
        },
        description="Our name -> the branch name in your files.",
    )
    min_jet_id: int = Field(0, ge=0, description="Keep jets with Jet_jetId >= this (if present).")
    inject_signal: bool = Field(
        True, description="Overlay simulated signal on real events to measure efficiency."
    )

    @model_validator(mode="after")
    def _known_branches(self) -> DataConfig:
        known = {
            "nJet", "Jet_pt", "Jet_eta", "Jet_phi", "Jet_jetId", "PV_npvs",
            "PV_npvsGood", "run", "luminosityBlock", "Pileup_nTrueInt",
        }  # fmt: skip
        unknown = set(self.branches) - known
        if unknown:
            raise ValueError(f"unknown branch roles {sorted(unknown)}; known: {sorted(known)}")
        return self


class LHCTriggerConfig(FieldrlConfig):
    app: ClassVar[str] = "lhc-trigger"
    fill: FillConfig = Field(default_factory=FillConfig)
    trigger: TriggerConfig = Field(default_factory=TriggerConfig)
    control: ControlConfig = Field(default_factory=ControlConfig)
    pd: PDConfig = Field(default_factory=PDConfig)
    quantile: QuantileConfig = Field(default_factory=QuantileConfig)
    guard: GuardConfig = Field(default_factory=GuardConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    gfpo: GroupConfig = Field(default_factory=GroupConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    data: DataConfig = Field(default_factory=DataConfig)

    @model_validator(mode="after")
    def _fills_are_valid(self) -> LHCTriggerConfig:
        """Every scenario's fill, and a fill at each end of the randomization ranges, is
        built at load, so a bad key fails here in one line, not after training started."""
        for key, (low, high) in self.train.randomize.items():
            field = FillConfig.model_fields.get(key)
            if field is None or field.annotation not in (int, float) or key == "run":
                raise ValueError(f"train.randomize: {key!r} is not a numeric fill key")
            if not low <= high:
                raise ValueError(f"train.randomize.{key}: low {low} is above high {high}")
        named = [(f"eval.scenarios[{i}] ({s.name!r}).overrides", s)
                 for i, s in enumerate(self.eval.scenarios)]  # fmt: skip
        named += [(f"eval.robustness[{i}] ({s.name!r}).overrides", s)
                  for i, s in enumerate(self.eval.robustness)]  # fmt: skip
        for i, edge in enumerate(("low", "high")):  # a fill at each end of the ranges
            ends = {k: v[i] for k, v in self.train.randomize.items()}
            named.append(
                (f"train.randomize ({edge} ends)", EvalScenario(name=edge, overrides=ends))
            )
        for where, scenario in named:
            unknown = set(scenario.overrides) - set(FillConfig.model_fields) - {"jes_step"}
            if unknown:
                hints = [
                    f"{key!r} (did you mean {close[0]!r}?)" if close else repr(key)
                    for key in sorted(unknown)
                    for close in [get_close_matches(key, FillConfig.model_fields, 1)]
                ]
                raise ValueError(f"{where}: unknown fill key {', '.join(hints)}")
            try:
                FillConfig(**{**self.fill.model_dump(), "jes_step": scenario.jes_step,
                              **scenario.overrides})  # fmt: skip
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()
                )
                raise ValueError(f"{where}: {problems}") from None
        return self
