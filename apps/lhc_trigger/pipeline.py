"""From config to trained controllers: streams (simulated or NanoAOD), the autoencoder,
training per trigger, the run's checkpoint, and loading it back."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.app import Resources
from fieldrl.apps.lhc_trigger.config import (
    LEARNED,
    EvalScenario,
    FillConfig,
    LHCTriggerConfig,
    TrainConfig,
)
from fieldrl.apps.lhc_trigger.controllers import (
    Controller,
    PolicyController,
    RunawayGuard,
    baseline,
    run_controller,
)
from fieldrl.apps.lhc_trigger.data import Events, read_events
from fieldrl.apps.lhc_trigger.env import Calibration
from fieldrl.apps.lhc_trigger.gfpo import VARIANTS, GroupPolicyTrainer
from fieldrl.apps.lhc_trigger.metrics import trace_metrics
from fieldrl.apps.lhc_trigger.ppo import LagrangianPPOTrainer, SB3PPOTrainer
from fieldrl.apps.lhc_trigger.sim import FillSimulator, overlay_signal
from fieldrl.apps.lhc_trigger.stream import Stream, rewindow, score_stream
from fieldrl.apps.lhc_trigger.triggers import Autoencoder, ad_scores, ht_scores, train_autoencoder
from fieldrl.atomic import atomic_write_json
from fieldrl.checkpoint import CheckpointManager, load_checkpoint
from fieldrl.distributed import parallel_map
from fieldrl.errors import DataError
from fieldrl.files import expand_files
from fieldrl.policies import ActorCritic, module_from_state, module_state
from fieldrl.runs import LoadedRun, Run, open_run, progress
from fieldrl.training import fit

__all__ = ["Trained", "evaluate", "load", "make_streams", "open_trained", "train"]


def fill_for(cfg: LHCTriggerConfig, jes_step: float = 0.0, **overrides: float) -> FillConfig:
    """The configured fill with a scenario's JES step and other changes (validated)."""
    return FillConfig(**{**cfg.fill.model_dump(), "jes_step": jes_step, **overrides})


def scorers(cfg: LHCTriggerConfig, ae: Autoencoder) -> dict[str, Any]:
    return {
        "ht": lambda ev: ht_scores(ev, cfg.trigger),
        "ad": lambda ev: ad_scores(ae, ev, cfg.trigger),
    }


def autoencoder_events(cfg: LHCTriggerConfig, seed: int) -> Events:
    """Early-fill background to train the autoencoder on: from the data files, or simulated."""
    want = cfg.trigger.ad_train_events
    if cfg.data.files:
        chunks, have = [], 0
        for chunk in _data_chunks(cfg):
            chunks.append(chunk)
            have += chunk.n
            if have >= want:
                break
        return Events.concat(chunks).slice(0, min(have, want))
    sim = FillSimulator(cfg.fill, seed)
    early = max(1, int(cfg.trigger.ad_train_fraction * cfg.fill.n_windows))
    windows = []
    for events in sim.windows(0, early):
        windows.append(events)
        if sum(w.n for w in windows) >= want:
            break
    events = Events.concat(windows)
    return events.slice(0, min(events.n, want))


def _data_chunks(cfg: LHCTriggerConfig) -> Iterator[Events]:
    d = cfg.data
    return read_events(expand_files(d.files), d.branches, d.chunk_events, d.tree, d.min_jet_id)


def _simulated_stream(job: tuple[LHCTriggerConfig, FillConfig, int, dict, dict]) -> Stream:
    cfg, fill, seed, ae_spec, ae_state = job
    torch.set_num_threads(1)
    ae = Autoencoder(**ae_spec)
    ae.load_state_dict(ae_state)
    windows = FillSimulator(fill, seed).windows()
    meta = {"source": "simulation", "seed": str(seed), "jes_step": str(fill.jes_step)}
    return score_stream(windows, scorers(cfg, ae), cfg.trigger.tail_fraction, meta)


def make_streams(
    cfg: LHCTriggerConfig,
    ae: Autoencoder,
    fills: Sequence[tuple[FillConfig, int]],
    resources: Resources | None = None,
) -> list[Stream]:
    """Scored streams of simulated fills ((fill, seed) pairs), in parallel when workers > 1."""
    resources = resources or Resources()
    state = {k: v.clone() for k, v in ae.state_dict().items()}
    jobs = [(cfg, fill, seed, ae.spec, state) for fill, seed in fills]
    with progress(len(jobs), "simulating + scoring fills") as advance:
        streams = []
        for chunk in _batches(jobs, max(1, resources.workers)):
            streams += parallel_map(_simulated_stream, chunk, resources.workers, resources.address)
            advance(len(chunk))
    return streams


def _batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def data_stream(cfg: LHCTriggerConfig, ae: Autoencoder, seed: int) -> Stream:
    """The configured NanoAOD files as one stream of ``window_events`` windows."""
    rng = np.random.default_rng(seed)
    chunks = _data_chunks(cfg)
    if cfg.data.inject_signal:
        chunks = (overlay_signal(c, cfg.fill, rng) for c in chunks)
    windows = rewindow(chunks, cfg.fill.window_events)
    with progress(None, "reading + scoring windows") as advance:
        meta = {"source": "data", "files": ",".join(cfg.data.files)}
        return score_stream(windows, scorers(cfg, ae), cfg.trigger.tail_fraction, meta, advance)


def training_streams(
    cfg: LHCTriggerConfig, ae: Autoencoder, resources: Resources, use_data: bool = True
) -> list[Stream]:
    """``data.files`` as one stream (if set and ``use_data``), else the training fills."""
    if cfg.data.files and use_data:
        return [data_stream(cfg, ae, cfg.experiment.seed)]
    return make_streams(cfg, ae, training_fills(cfg), resources)


def randomized_keys(cfg: LHCTriggerConfig) -> list[str]:
    """``train.randomize``'s keys in the order they are drawn: the default's order, then any
    others alphabetically. Never the config's own order, which config.json sorts: a resumed
    run must train on the same fills."""
    default = list(TrainConfig.model_fields["randomize"].default_factory())
    keys = cfg.train.randomize
    return [k for k in default if k in keys] + sorted(k for k in keys if k not in default)


def training_fills(cfg: LHCTriggerConfig) -> list[tuple[FillConfig, int]]:
    """(fill, seed) per training seed: the configured fill with the seed's JES step
    (``train.jes_steps``, cycled) and ``train.randomize``'s keys drawn from the seed."""
    steps = cfg.train.jes_steps or [0.0]
    fills = []
    for i, seed in enumerate(cfg.train.fill_seeds):
        rng = np.random.default_rng([seed, 7])  # not the simulator's own stream of the seed
        drawn = {}
        for key in randomized_keys(cfg):
            low, high = cfg.train.randomize[key]
            value = rng.uniform(low, high)
            drawn[key] = round(value) if FillConfig.model_fields[key].annotation is int else value
        drawn.setdefault("jes_step", steps[i % len(steps)])
        fills.append((fill_for(cfg, **drawn), seed))
    return fills


@dataclass
class Trained:
    """What a run folder holds: the autoencoder, and per trigger a calibration and policy."""

    controller: str
    ae: Autoencoder
    calibrations: dict[str, Calibration]
    policies: dict[str, ActorCritic]
    step: int
    in_progress: str | None = None  # the trigger whose training a checkpoint interrupted

    def controller_for(self, trigger: str, cfg: LHCTriggerConfig) -> Controller:
        """The run's controller for ``trigger``; a learned one under the runaway guard
        unless ``guard.enabled`` is off."""
        if trigger not in self.policies:
            return baseline(self.controller, cfg, trigger)
        policy = PolicyController(self.controller, self.policies[trigger], cfg.control)
        if not cfg.guard.enabled:
            return policy
        return RunawayGuard(policy, baseline(cfg.guard.fallback, cfg, trigger), cfg.control,
                            cfg.guard)  # fmt: skip


Algorithm = GroupPolicyTrainer | LagrangianPPOTrainer | SB3PPOTrainer


def _algorithm(cfg: LHCTriggerConfig, streams: Sequence[Stream], calib: Calibration,
               rng: np.random.Generator) -> Algorithm:  # fmt: skip
    name = cfg.train.controller
    if name in VARIANTS:
        return GroupPolicyTrainer(name, cfg, streams, calib, rng)
    if name == "lagrangian_ppo":
        return LagrangianPPOTrainer(cfg, streams, calib, rng)
    return SB3PPOTrainer(cfg, streams, calib, rng)


class ControllerTrainer:
    """``train.controller`` for each trigger in turn: calibrate on the training streams,
    then (a learned controller) train it. One :class:`fieldrl.training.Trainer` for the
    whole run, ``done`` counting windows over the triggers, so a killed run keeps its
    finished triggers and continues the unfinished one where it stopped."""

    def __init__(self, cfg: LHCTriggerConfig, ae: Autoencoder, streams: Sequence[Stream],
                 seed: int, first_metrics: dict[str, float] | None = None) -> None:  # fmt: skip
        self.cfg, self.ae, self.streams = cfg, ae, streams
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng,)
        self.windows = cfg.train.windows
        self.total, self.done = len(cfg.train.triggers) * self.windows, 0
        self.calibrations: dict[str, Calibration] = {}
        self.policies: dict[str, ActorCritic] = {}
        self.current: Algorithm | None = None  # the unfinished trigger's training
        self.pending = dict(first_metrics or {})  # logged with the first step

    @property
    def trigger(self) -> str:
        """The trigger being trained now."""
        return self.cfg.train.triggers[self.done // self.windows]

    def step(self) -> dict[str, float]:
        trigger, offset = self.trigger, self.done - self.done % self.windows
        if trigger not in self.calibrations:
            self.calibrations[trigger] = Calibration.fit(self.streams, trigger, self.cfg.control)
        metrics, self.pending = self.pending, {}
        if self.cfg.train.controller not in LEARNED:  # a baseline only calibrates
            self.done = offset + self.windows
            return metrics
        if self.current is None:
            calib = self.calibrations[trigger]
            self.current = _algorithm(self.cfg, self.streams, calib, self.rng)
        stats = self.current.step()
        # a rollout may overshoot the trigger's windows; the run's step stays on the
        # trigger's boundary so checkpoint steps never pass the final one
        self.done = offset + min(self.current.done, self.windows)
        if self.current.done >= self.current.total:
            self.policies[trigger], self.current = self.current.policy, None
        return metrics | {f"{trigger}/{k}": v for k, v in stats.items()}

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "windows": self.done,
            "controller": self.cfg.train.controller,
            "ae": {"spec": self.ae.spec, "weights": self.ae.state_dict()},
            "calibrations": {t: vars(c) for t, c in self.calibrations.items()},
            "policies": {t: module_state(p) for t, p in self.policies.items()},
        }  # fmt: skip
        if self.current is not None:
            state["current"] = self.current.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        trained = trained_from_state(state, 0)
        self.calibrations, self.policies = trained.calibrations, trained.policies
        self.done, self.current, self.pending = int(state["windows"]), None, {}
        if "current" in state:
            calib = self.calibrations[self.trigger]
            self.current = _algorithm(self.cfg, self.streams, calib, self.rng)
            self.current.load_state_dict(state["current"])

    def trained(self) -> Trained:
        return Trained(self.cfg.train.controller, self.ae, self.calibrations, self.policies,
                       self.done)  # fmt: skip


def trained_from_state(state: dict[str, Any], step: int) -> Trained:
    """A :class:`ControllerTrainer` state as controllers ready to act."""
    ae = Autoencoder(**state["ae"]["spec"])
    ae.load_state_dict(state["ae"]["weights"])
    policies = {t: module_from_state(saved) for t, saved in state["policies"].items()}
    calibrations = {t: Calibration(**c) for t, c in state["calibrations"].items()}
    in_progress = None
    if "current" in state:
        in_progress = next(t for t in calibrations if t not in policies)
    return Trained(state["controller"], ae.eval(), calibrations, policies, step, in_progress)


def train_controllers(
    cfg: LHCTriggerConfig,
    run: Run,
    ae: Autoencoder,
    streams: Sequence[Stream],
    first_metrics: dict[str, float] | None = None,
) -> Trained:
    """Calibrate and train ``train.controller`` per trigger through the core loop."""
    seed = cfg.experiment.seed
    trainer = fit(lambda: ControllerTrainer(cfg, ae, streams, seed, first_metrics), run,
                  seed=seed, description=cfg.train.controller)  # fmt: skip
    return trainer.trained()


def load_autoencoder(folder: str | Path) -> Autoencoder:
    """The autoencoder ``train-ad`` saved in ``folder`` (a checkpoint folder's newest
    checkpoint, or one checkpoint); any other checkpoint, such as a run's, is refused in one
    line."""
    folder = Path(folder)
    ckpt = CheckpointManager(folder).load_latest() if folder.is_dir() else None
    ckpt = ckpt or load_checkpoint(folder)
    try:
        ae = Autoencoder(**ckpt.metadata["ad_model"])
        ae.load_state_dict(ckpt.state["ad_model"])
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DataError(
            f"{ckpt.path}: not an autoencoder from `fieldrl lhc-trigger train-ad` "
            f"(trigger.ad_model; {type(exc).__name__}: {exc})"
        ) from None
    return ae


def prepare(
    cfg: LHCTriggerConfig,
    resources: Resources,
    ae: Autoencoder | None = None,
    train_on_data: bool = True,
) -> tuple[Autoencoder, list[Stream], dict[str, float]]:
    """The autoencoder (loaded, given, or trained on early-fill background) and the scored
    training streams (the data files, or simulated fills when ``train_on_data`` is off)."""
    stats: dict[str, float] = {}
    if ae is None and cfg.trigger.ad_model:
        ae = load_autoencoder(cfg.trigger.ad_model)
    if ae is None:
        events = autoencoder_events(cfg, cfg.train.fill_seeds[0])
        ae, stats = train_autoencoder(events, cfg.trigger, cfg.experiment.seed)
    return ae, training_streams(cfg, ae, resources, train_on_data), stats


def train(cfg: LHCTriggerConfig, *, run: Run, resources: Resources) -> dict[str, float]:
    """Train the autoencoder, then ``train.controller`` for each trigger; report validation.

    Resumable: the autoencoder retrains to the same weights (it is seeded), and a run
    killed mid-way keeps its finished triggers and continues the unfinished one exactly.
    """
    ae, streams, ad_stats = prepare(cfg, resources)
    trained = train_controllers(cfg, run, ae, streams, ad_stats)
    validation = make_streams(cfg, ae, [(fill_for(cfg), cfg.train.validation_seed)], resources)
    metrics = {}
    for trigger in cfg.train.triggers:
        m = evaluate_on(trained, cfg, trigger, validation)
        metrics |= {f"validation_{trigger}_{k}": v for k, v in m.items()}
    metrics["validation_in_band_fraction"] = float(
        np.mean([metrics[f"validation_{t}_in_band_fraction"] for t in cfg.train.triggers])
    )
    return metrics


def evaluation_streams(
    cfg: LHCTriggerConfig, ae: Autoencoder, resources: Resources
) -> list[Stream]:
    """``data.files`` as one stream, else every eval scenario x eval seed."""
    if cfg.data.files:
        return [data_stream(cfg, ae, cfg.experiment.seed)]
    return scenario_streams(cfg, ae, cfg.eval.scenarios, resources)


def scenario_streams(
    cfg: LHCTriggerConfig,
    ae: Autoencoder,
    scenarios: Sequence[EvalScenario],
    resources: Resources,
) -> list[Stream]:
    """Every scenario x eval seed, each stream's ``meta["scenario"]`` naming its scenario."""
    runs = [(sc, seed) for sc in scenarios for seed in cfg.eval.seeds]
    fills = [(fill_for(cfg, sc.jes_step, **sc.overrides), seed) for sc, seed in runs]
    streams = make_streams(cfg, ae, fills, resources)
    for stream, (sc, _) in zip(streams, runs, strict=True):
        stream.meta["scenario"] = sc.name
    return streams


def evaluate_on(
    trained: Trained, cfg: LHCTriggerConfig, trigger: str, streams: Sequence[Stream]
) -> dict[str, float]:
    """Mean metrics of the run's controller for one trigger over the given streams."""
    calib = trained.calibrations[trigger]
    rows = [
        trace_metrics(
            run_controller(s, calib, cfg.control, trained.controller_for(trigger, cfg)), cfg.control
        )
        for s in streams
    ]
    means = {k: np.nanmean([r[k] for r in rows]) if any(np.isfinite(r[k]) for r in rows)
             else None for k in rows[0]}  # fmt: skip
    return {k: None if v is None else float(v) for k, v in means.items()}


def open_trained(path: str | Path) -> LoadedRun[LHCTriggerConfig]:
    """An lhc-trigger run folder opened with :func:`load` as its loader (``run.trained``)."""
    return open_run(path, LHCTriggerConfig, loader=load)


def load(run: LoadedRun) -> Trained:
    """``App.load``: the run's final checkpoint as controllers ready to act."""
    try:
        return trained_from_state(run.state, run.step)
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise DataError(f"{run.checkpoint.path}: not an lhc-trigger checkpoint ({exc})") from None


def evaluate(
    cfg: LHCTriggerConfig, *, run: LoadedRun, resources: Resources, out: Path
) -> dict[str, float]:
    """The run's controller on the eval fills (or on ``data.files``), per trigger."""
    trained = run.trained
    unfinished = [t for t in cfg.train.triggers if t not in trained.calibrations
                  or trained.in_progress == t]  # fmt: skip
    if unfinished:
        raise DataError(
            f"{run.checkpoint.path}: no trained controller for trigger(s) "
            f"{', '.join(unfinished)} (training stopped at step {trained.step}); finish it "
            f"with `fieldrl lhc-trigger train --resume {run.dir}`"
        )
    streams = evaluation_streams(cfg, trained.ae, resources)
    metrics: dict[str, float] = {"checkpoint_step": trained.step}
    for trigger in cfg.train.triggers:
        m = evaluate_on(trained, cfg, trigger, streams)
        metrics |= {f"{trigger}_{k}": v for k, v in m.items()}
    atomic_write_json(out / "eval.json", metrics)
    return metrics
