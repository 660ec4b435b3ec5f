"""From config to trained controllers: streams (simulated or NanoAOD), the autoencoder,
training per trigger, the run's checkpoint, and loading it back."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.app import Resources
from fieldrl.apps.lhc_trigger.config import LEARNED, FillConfig, LHCTriggerConfig
from fieldrl.apps.lhc_trigger.controllers import (
    Controller,
    PolicyController,
    baseline,
    run_controller,
)
from fieldrl.apps.lhc_trigger.data import Events, expand_files, read_events
from fieldrl.apps.lhc_trigger.env import Calibration
from fieldrl.apps.lhc_trigger.gfpo import VARIANTS, train_group_policy
from fieldrl.apps.lhc_trigger.metrics import trace_metrics
from fieldrl.apps.lhc_trigger.ppo import train_lagrangian_ppo, train_sb3_ppo
from fieldrl.apps.lhc_trigger.sim import FillSimulator, overlay_signal
from fieldrl.apps.lhc_trigger.stream import Stream, rewindow, score_stream
from fieldrl.apps.lhc_trigger.triggers import Autoencoder, ad_scores, ht_scores, train_autoencoder
from fieldrl.atomic import atomic_write_json
from fieldrl.checkpoint import load_checkpoint
from fieldrl.config import config_hash
from fieldrl.distributed import parallel_map
from fieldrl.errors import DataError
from fieldrl.policies import ActorCritic, policy_from_checkpoint
from fieldrl.runs import Run, latest_checkpoint, progress

__all__ = ["Trained", "evaluate", "load_trained", "make_streams", "train"]

TRIGGERS = ("ht", "ad")


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
    steps = cfg.train.jes_steps or [0.0]
    fills = [
        (fill_for(cfg, steps[i % len(steps)]), seed) for i, seed in enumerate(cfg.train.fill_seeds)
    ]
    return make_streams(cfg, ae, fills, resources)


def train_controller(
    name: str,
    cfg: LHCTriggerConfig,
    streams: Sequence[Stream],
    calib: Calibration,
    run: Run,
    offset: int,
    checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
    resume: dict[str, Any] | None = None,
) -> ActorCritic:
    """Train one learned controller for one trigger, logging under ``<trigger>/``.

    GRPO/GFPO and the Lagrangian PPO checkpoint mid-way and resume from ``resume``; SB3
    PPO restarts the trigger.
    """
    seed = cfg.experiment.seed

    def log(step: int, stats: dict[str, float]) -> None:
        run.log(offset + step, {f"{calib.trigger}/{k}": v for k, v in stats.items()})

    with progress(cfg.train.windows, f"{name} on {calib.trigger}") as advance:
        if name in VARIANTS:
            return train_group_policy(
                name, cfg, streams, calib, log, advance, seed, checkpoint, resume
            )
        if name == "lagrangian_ppo":
            return train_lagrangian_ppo(cfg, streams, calib, log, advance, seed, checkpoint, resume)
        return train_sb3_ppo(cfg, streams, calib, log, advance, seed)


@dataclass
class Trained:
    """What a run folder holds: the autoencoder, and per trigger a calibration and policy."""

    controller: str
    ae: Autoencoder
    calibrations: dict[str, Calibration]
    policies: dict[str, ActorCritic]
    step: int
    in_progress: dict[str, Any] | None = None  # an unfinished trigger's training state

    def controller_for(self, trigger: str, cfg: LHCTriggerConfig) -> Controller:
        if trigger in self.policies:
            return PolicyController(self.controller, self.policies[trigger], cfg.control)
        return baseline(self.controller, cfg, trigger)


def _save(
    run: Run,
    step: int,
    cfg: LHCTriggerConfig,
    trained: Trained,
    in_progress: dict[str, Any] | None = None,
) -> None:
    """Checkpoint the finished triggers, and the unfinished one's training state if any."""
    state: dict[str, Any] = {"ad_model": trained.ae.state_dict()}
    if in_progress is not None:
        state["in_progress"] = in_progress
    specs: dict[str, Any] = {}
    for trigger, policy in trained.policies.items():
        state[f"policy_{trigger}"] = policy.state_dict()
        specs[f"policy_{trigger}"] = policy.spec
    meta = {
        "specs": specs,
        "ad_model": trained.ae.spec,
        "controller": trained.controller,
        "calibrations": {t: vars(c) for t, c in trained.calibrations.items()},
        "config_hash": config_hash(cfg),
    }
    run.checkpoints.save(step, state, meta)


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
        ckpt = load_checkpoint(
            max(Path(cfg.trigger.ad_model).glob("step_*"), default=Path(cfg.trigger.ad_model))
        )
        ae = Autoencoder(**ckpt.metadata["ad_model"])
        ae.load_state_dict(ckpt.state["ad_model"])
    if ae is None:
        events = autoencoder_events(cfg, cfg.train.fill_seeds[0])
        ae, stats = train_autoencoder(events, cfg.trigger, cfg.experiment.seed)
    return ae, training_streams(cfg, ae, resources, train_on_data), stats


def fit_controllers(
    cfg: LHCTriggerConfig,
    run: Run,
    ae: Autoencoder,
    streams: Sequence[Stream],
    done: Trained | None = None,
) -> Trained:
    """Calibrate and train ``train.controller`` per trigger; checkpoint after each trigger."""
    name = cfg.train.controller
    trained = done or Trained(name, ae, {}, {}, 0)
    for i, trigger in enumerate(cfg.train.triggers):
        if trigger in trained.calibrations:
            continue
        calib = Calibration.fit(streams, trigger, cfg.control)
        offset = i * cfg.train.windows
        if name in LEARNED:
            resume = trained.in_progress
            if resume is not None and resume["trigger"] != trigger:
                resume = None

            def checkpoint(
                step: int, algo: dict[str, Any], trigger: str = trigger, offset: int = offset
            ) -> None:
                _save(run, offset + step, cfg, trained, {"trigger": trigger, **algo})

            trained.policies[trigger] = train_controller(
                name, cfg, streams, calib, run, offset, checkpoint, resume
            )
        trained.calibrations[trigger] = calib
        trained.in_progress = None
        trained.step = offset + cfg.train.windows
        _save(run, trained.step, cfg, trained)
    return trained


def train(cfg: LHCTriggerConfig, run: Run, resources: Resources) -> dict[str, float]:
    """Train the autoencoder, then ``train.controller`` for each trigger; report validation.

    Resumable per trigger: a run killed mid-way keeps its autoencoder and finished triggers
    and retrains the unfinished one.
    """
    done = load_trained(run.dir) if run.checkpoints.latest() is not None else None
    ae, streams, ad_stats = prepare(cfg, resources, done.ae if done else None)
    if ad_stats:
        run.log(0, ad_stats)
    trained = fit_controllers(cfg, run, ae, streams, done)
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
    runs = [(sc, seed) for sc in cfg.eval.scenarios for seed in cfg.eval.seeds]
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


def load_trained(run_dir: str | Path) -> Trained:
    """The run's newest checkpoint as controllers ready to act."""
    ckpt = latest_checkpoint(run_dir)
    meta = ckpt.metadata
    try:
        ae = Autoencoder(**meta["ad_model"])
        ae.load_state_dict(ckpt.state["ad_model"])
        calibs = {t: Calibration(**c) for t, c in meta["calibrations"].items()}
        policies = {
            key.removeprefix("policy_"): policy_from_checkpoint(ckpt, key) for key in meta["specs"]
        }
    except (KeyError, TypeError, RuntimeError) as exc:
        raise DataError(f"{ckpt.path}: not an lhc-trigger checkpoint ({exc})") from None
    ae.eval()
    in_progress = ckpt.state.get("in_progress")
    return Trained(meta["controller"], ae, calibs, policies, ckpt.step, in_progress)


def evaluate(
    run_dir: Path, cfg: LHCTriggerConfig, resources: Resources, out: Path
) -> dict[str, float]:
    """The run's controller on the eval fills (or on ``data.files``), per trigger."""
    trained = load_trained(run_dir)
    streams = evaluation_streams(cfg, trained.ae, resources)
    metrics: dict[str, float] = {"checkpoint_step": trained.step}
    for trigger in trained.calibrations:
        m = evaluate_on(trained, cfg, trigger, streams)
        metrics |= {f"{trigger}_{k}": v for k, v in m.items()}
    atomic_write_json(out / "eval.json", metrics)
    return metrics
