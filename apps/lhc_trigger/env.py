"""The control problem: replay scored windows, one threshold decision per window.

Causality: the threshold applied to window t+1 is decided from an :class:`Observation`
built from windows <= t only; :class:`Replay` reads window t+1 after the decision. The
gymnasium :class:`TriggerEnv` and the benchmark's controller loop both step a Replay, so
training and evaluation obey the same rule.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from numpy.typing import ArrayLike

from fieldrl.apps.lhc_trigger.config import ControlConfig
from fieldrl.apps.lhc_trigger.data import HAA4B, TTBAR
from fieldrl.apps.lhc_trigger.stream import Stream

__all__ = [
    "OBS_DIM",
    "Calibration",
    "History",
    "Measured",
    "Observation",
    "OutOfOrder",
    "Replay",
    "TriggerEnv",
    "WindowResult",
]

HISTORY = 4  # windows of history a decision sees
OBS_DIM = 1 + 2 * HISTORY + 4


@dataclass(frozen=True)
class Calibration:
    """What a run learns about its trigger before control: the menu value and references.

    ``menu`` is the threshold that meets the target at the start of the training fills (the
    static menu); thresholds and moves are expressed in units of it.
    """

    trigger: str
    menu: float
    npv_ref: float
    multijet_ref: float

    @classmethod
    def fit(cls, streams: Sequence[Stream], trigger: str, control: ControlConfig) -> Calibration:
        menu = np.mean([s.threshold_for_rate(trigger, 0, control.target_rate) for s in streams])
        return cls(
            trigger=trigger,
            menu=float(menu),
            npv_ref=float(np.mean([s.npv_mean[0] for s in streams])),
            multijet_ref=float(np.mean([max(s.multijet_fraction[0], 1e-6) for s in streams])),
        )


@dataclass(frozen=True)
class Measured:
    """What an online system knows about one finished window."""

    index: int
    threshold: float  # applied to this window
    rate: float  # background accept fraction measured at ``threshold``
    target_threshold: float  # would have accepted exactly the target rate
    band_width: float  # threshold distance between the band edges
    npv_mean: float
    multijet_fraction: float  # events with >= 4 jets above 30 GeV


@dataclass(frozen=True)
class Observation:
    """The last ``HISTORY`` finished windows, newest first: all a decision may use."""

    recent: tuple[Measured, ...]

    @property
    def window(self) -> int:
        return self.recent[0].index

    @property
    def threshold(self) -> float:
        return self.recent[0].threshold

    @property
    def rate(self) -> float:
        return self.recent[0].rate

    @property
    def previous_rate(self) -> float:
        return self.recent[1].rate

    @property
    def target_threshold(self) -> float:
        return self.recent[0].target_threshold

    def vector(self, calib: Calibration, control: ControlConfig) -> np.ndarray:
        """The normalised features a learned controller sees (``OBS_DIM`` floats)."""
        m, target, now = calib.menu, control.target_rate, self.recent[0]
        rates = [5 * np.clip(w.rate / target - 1, -1, 3) for w in self.recent]
        moves = [10 * (w.target_threshold - now.threshold) / m for w in self.recent]
        v = np.array(
            [
                10 * (now.threshold / m - 1),
                *rates,
                *moves,
                10 * now.band_width / m,
                5 * (now.npv_mean / calib.npv_ref - 1),
                5 * (now.npv_mean - self.recent[1].npv_mean) / calib.npv_ref,
                5 * (now.multijet_fraction / calib.multijet_ref - 1),
            ],
            dtype=np.float32,
        )
        return np.clip(v, -10.0, 10.0)


class History:
    """Keeps the recent windows of one stream and refuses gaps or repeats."""

    def __init__(self, size: int = HISTORY) -> None:
        self.items: deque[Measured] = deque(maxlen=size)

    def push(self, measured: Measured) -> Observation:
        if self.items and measured.index != self.items[0].index + 1:
            raise OutOfOrder(self.items[0].index + 1, measured.index)
        self.items.appendleft(measured)
        pad = (self.items[-1],) * (self.items.maxlen - len(self.items))
        return Observation((*self.items, *pad))


class OutOfOrder(ValueError):
    def __init__(self, expected: int, got: int) -> None:
        super().__init__(f"expected window {expected}, got {got}")
        self.expected, self.got = expected, got


@dataclass(frozen=True)
class WindowResult:
    window: int
    threshold: float
    rate: float
    efficiency: dict[int, float]  # per signal kind; NaN without signal
    reward: float


def signal_efficiency(
    eff: dict[int, Any], control: ControlConfig, mix: tuple[float, float] | None = None
) -> Any:
    """The efficiency mix the controller is rewarded for (NaN where there is no signal)."""
    w_tt, w_haa = mix or control.signal_mix
    return w_tt * eff[TTBAR] + w_haa * eff[HAA4B]


def reward(rate: ArrayLike, efficiency: ArrayLike, control: ControlConfig) -> np.ndarray:
    """Signal efficiency, minus the relative rate error, plus a bonus inside the band.

    The rate term is a penalty that grows as the rate leaves the target (in either way).
    Works elementwise on arrays (GFPO scores 64 candidates at once).
    """
    relative = np.asarray(rate) / control.target_rate - 1.0
    error = np.abs(relative)
    eff = np.nan_to_num(np.asarray(efficiency, dtype=np.float64), nan=0.0)
    return (
        control.reward_efficiency * eff
        - control.reward_rate * error
        + control.reward_in_band * (error <= control.band)
        - control.reward_over_budget * (relative > control.band)
    )


class Replay:
    """Steps one stream for one trigger: decide window t+1 from windows <= t, then score it."""

    def __init__(self, stream: Stream, calib: Calibration, control: ControlConfig) -> None:
        self.stream, self.calib, self.control = stream, calib, control
        self.trigger = calib.trigger
        self.t = 0
        self.threshold = calib.menu
        self.history = History()

    @property
    def done(self) -> bool:
        return self.t >= self.stream.n_windows - 1

    def start(self) -> Observation:
        """Apply the menu to window 0 and observe it."""
        self.t, self.threshold, self.history = 0, self.calib.menu, History()
        return self.history.push(self._measure())

    def replay_to(self, thresholds: Sequence[float]) -> Observation:
        """Start again and apply ``thresholds`` (as a checkpoint recorded them): the same
        position, threshold and history as when they were first applied."""
        obs = self.start()
        for threshold in thresholds:
            _, obs = self.advance(threshold)
        return obs

    def clip(self, threshold: float) -> float:
        """The allowed threshold nearest ``threshold`` (moves are bounded per window)."""
        step = self.control.max_step * self.calib.menu
        return float(np.clip(threshold, self.threshold - step, self.threshold + step))

    def advance(self, threshold: float) -> tuple[WindowResult, Observation]:
        """Apply ``threshold`` (clipped to the allowed move) to the next window and score it."""
        if self.done:
            raise RuntimeError("the stream has no next window")
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold}")
        self.threshold = self.clip(threshold)
        self.t += 1
        measured = self._measure()
        eff = {
            k: float(v[0])
            for k, v in self.stream.efficiency(self.trigger, self.t, self.threshold).items()
        }
        mix = signal_efficiency(eff, self.control)
        rate = measured.rate
        result = WindowResult(
            self.t, self.threshold, rate, eff, float(reward(rate, mix, self.control))
        )
        return result, self.history.push(measured)

    def _measure(self) -> Measured:
        s, t, c = self.stream, self.t, self.control
        low = s.threshold_for_rate(self.trigger, t, c.target_rate * (1 + c.band))
        high = s.threshold_for_rate(self.trigger, t, c.target_rate * (1 - c.band))
        return Measured(
            index=t,
            threshold=self.threshold,
            rate=float(s.rate(self.trigger, t, self.threshold)),
            target_threshold=s.threshold_for_rate(self.trigger, t, c.target_rate),
            band_width=high - low,
            npv_mean=float(s.npv_mean[t]),
            multijet_fraction=float(s.multijet_fraction[t]),
        )


class TriggerEnv(gym.Env):
    """One episode = one fill for one trigger; action in [-1, 1] = threshold move / max move.

    ``reset`` picks one of ``streams`` at random (or ``options={"stream": i}``).
    """

    metadata = {"render_modes": []}

    def __init__(
        self, streams: Sequence[Stream], calib: Calibration, control: ControlConfig
    ) -> None:
        if not streams:
            raise ValueError("TriggerEnv needs at least one stream")
        self.streams, self.calib, self.control = list(streams), calib, control
        self.observation_space = gym.spaces.Box(-10.0, 10.0, (OBS_DIM,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.replay: Replay | None = None
        self.last: Observation | None = None

    def reset(
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        index = (options or {}).get("stream", int(self.np_random.integers(len(self.streams))))
        self.replay = Replay(self.streams[index], self.calib, self.control)
        self.last = self.replay.start()
        return self.last.vector(self.calib, self.control), {"window": 0}

    def move_to_threshold(self, action: np.ndarray | float) -> float:
        """The threshold an action asks for (the move is relative to the menu value)."""
        a = float(np.clip(np.asarray(action, dtype=np.float64).reshape(-1)[0], -1.0, 1.0))
        return self.replay.threshold + a * self.control.max_step * self.calib.menu

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.replay is None:
            raise RuntimeError("call reset() first")
        result, self.last = self.replay.advance(self.move_to_threshold(action))
        info = {
            "window": result.window,
            "rate": result.rate,
            "threshold": result.threshold,
            "in_band": abs(result.rate / self.control.target_rate - 1) <= self.control.band,
            "efficiency": signal_efficiency(result.efficiency, self.control),
        }
        obs = self.last.vector(self.calib, self.control)
        return obs, result.reward, self.replay.done, False, info
