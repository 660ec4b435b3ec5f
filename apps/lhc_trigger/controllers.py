"""Controllers: each decides the next window's threshold from an :class:`Observation`.

The baselines (static menu, PD, quantile tracker) and the learned policies share one
interface, and :func:`run_controller` replays a stream through any of them, timing every
decision.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from fieldrl.apps.lhc_trigger.config import ControlConfig, GuardConfig, LHCTriggerConfig
from fieldrl.apps.lhc_trigger.data import HAA4B, TTBAR
from fieldrl.apps.lhc_trigger.env import Calibration, Observation, Replay
from fieldrl.apps.lhc_trigger.stream import Stream
from fieldrl.policies import ActorCritic

__all__ = [
    "Controller",
    "GuardState",
    "PDController",
    "PolicyController",
    "QuantileTracker",
    "RunawayGuard",
    "StaticMenu",
    "Trace",
    "run_controller",
]


class Controller:
    """Decides thresholds for one trigger; ``reset`` before each stream."""

    name = "controller"

    def reset(self, calib: Calibration) -> None:
        self.calib = calib

    def decide(self, obs: Observation) -> float:
        raise NotImplementedError


class StaticMenu(Controller):
    """The menu threshold, never changed (today's practice within one prescale column)."""

    name = "static"

    def decide(self, obs: Observation) -> float:
        return self.calib.menu


class PDController(Controller):
    """Threshold += menu * (kp * e + kd * (e - e_prev)), e the last window's relative rate error.

    The reference code's gains act on the rate in percent of events (target 0.25) in GeV;
    our gains are in units of the menu threshold per unit relative error (docs: conversion).
    """

    name = "pd"

    def __init__(self, kp: float, kd: float, target_rate: float) -> None:
        self.kp, self.kd, self.target = kp, kd, target_rate

    def decide(self, obs: Observation) -> float:
        error = obs.rate / self.target - 1.0
        previous = obs.previous_rate / self.target - 1.0
        return obs.threshold + self.calib.menu * (self.kp * error + self.kd * (error - previous))


class QuantileTracker(Controller):
    """Moves to the threshold that would have met the target in the last window (smoothed)."""

    name = "quantile"

    def __init__(self, smoothing: float) -> None:
        self.smoothing = smoothing

    def decide(self, obs: Observation) -> float:
        return self.smoothing * obs.target_threshold + (1 - self.smoothing) * obs.threshold


class PolicyController(Controller):
    """A learned policy: its deterministic action in [-1, 1] scales the largest allowed move."""

    def __init__(self, name: str, policy: ActorCritic, control: ControlConfig) -> None:
        self.name, self.policy, self.control = name, policy.eval(), control

    def decide(self, obs: Observation) -> float:
        x = torch.from_numpy(obs.vector(self.calib, self.control))[None]
        action = float(self.policy.act(x, deterministic=True)[0, 0].clamp(-1.0, 1.0))
        return obs.threshold + action * self.control.max_step * self.calib.menu


@dataclass
class GuardState:
    """What the runaway guard remembers of one stream."""

    guarding: bool = False  # the fallback decided the last threshold
    streak: int = 0  # consecutive over-budget windows seen
    interventions: int = 0  # take-overs so far


class RunawayGuard(Controller):
    """A learned controller under supervision. From what the last window measured (causal),
    the fallback takes over when the rate has been over budget for ``over_windows``
    consecutive windows or is outside ``hard_band``; control goes back when the rate is no
    longer over budget and the learned proposal lies within the band as the last window
    measured it (``target_threshold ± band_width / 2``). ``state`` is the stream's
    :class:`GuardState` (the service keeps one per stream)."""

    def __init__(self, inner: Controller, fallback: Controller, control: ControlConfig,
                 guard: GuardConfig) -> None:  # fmt: skip
        self.inner, self.fallback, self.control, self.guard = inner, fallback, control, guard
        self.name = inner.name
        self.state = GuardState()

    @property
    def guarding(self) -> bool:
        return self.state.guarding

    def reset(self, calib: Calibration) -> None:
        super().reset(calib)
        self.inner.reset(calib)
        self.fallback.reset(calib)
        self.state = GuardState()

    def decide(self, obs: Observation) -> float:
        s, relative = self.state, obs.rate / self.control.target_rate - 1.0
        over = relative > self.control.band
        s.streak = s.streak + 1 if over else 0
        wild = abs(relative) > self.guard.hard_band
        proposal, safe = self.inner.decide(obs), self.fallback.decide(obs)
        if not s.guarding and (s.streak >= self.guard.over_windows or wild):
            s.guarding, s.interventions = True, s.interventions + 1
        elif s.guarding and not (over or wild):
            s.guarding = abs(proposal - obs.target_threshold) > obs.recent[0].band_width / 2
        return safe if s.guarding else proposal


def baseline(name: str, cfg: LHCTriggerConfig, trigger: str) -> Controller:
    """A baseline controller by name: ``static``, ``pd`` or ``quantile``."""
    if name == "static":
        return StaticMenu()
    if name == "pd":
        return PDController(cfg.pd.kp[trigger], cfg.pd.kd[trigger], cfg.control.target_rate)
    if name == "quantile":
        return QuantileTracker(cfg.quantile.smoothing)
    raise ValueError(f"{name!r} is not a baseline (static, pd, quantile)")


@dataclass
class Trace:
    """Per scored window (1..W-1) of one replay."""

    threshold: np.ndarray
    rate: np.ndarray
    efficiency_tt: np.ndarray
    efficiency_haa: np.ndarray
    signal_tt: np.ndarray  # signal events of each kind per window (efficiency weights)
    signal_haa: np.ndarray
    latency_s: np.ndarray
    pileup: np.ndarray
    menu: float
    guarded: np.ndarray | None = None  # the runaway guard's fallback decided this window


def run_controller(
    stream: Stream, calib: Calibration, control: ControlConfig, controller: Controller
) -> Trace:
    """Replay the stream; the controller decides window t+1 after seeing window t."""
    replay = Replay(stream, calib, control)
    controller.reset(calib)
    obs = replay.start()
    rows = []
    while not replay.done:
        tick = time.perf_counter()
        threshold = controller.decide(obs)
        latency = time.perf_counter() - tick
        result, obs = replay.advance(threshold)
        rows.append(
            (
                result.threshold,
                result.rate,
                result.efficiency[TTBAR],
                result.efficiency[HAA4B],
                latency,
                getattr(controller, "guarding", False),
            )
        )
    data = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
    kinds = stream.signal_kind[1:]
    return Trace(
        threshold=data[:, 0],
        rate=data[:, 1],
        efficiency_tt=data[:, 2],
        efficiency_haa=data[:, 3],
        signal_tt=(kinds == TTBAR).sum(axis=1).astype(float),
        signal_haa=(kinds == HAA4B).sum(axis=1).astype(float),
        latency_s=data[:, 4],
        pileup=stream.pileup_mean[1:].astype(float),
        menu=calib.menu,
        guarded=data[:, 5] > 0,
    )
