"""Naturalness and exploration metrics: pure functions of recorded trajectories.

Without motion capture, "natural" is judged against the reference library and against
what rat locomotion is known to look like: a clear stride frequency, feet on the ground
about half a stride in a trot, left and right half a cycle apart, smooth low-energy
control, no falls; exploration is judged by coverage, wall-hugging, pause and move bouts
and rearing.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "bouts",
    "control_change",
    "coverage",
    "duty_factor",
    "energy",
    "gait_peak",
    "jerk",
    "left_right_phase",
    "rearing_rate",
    "wall_time",
    "wasserstein_1d",
    "wasserstein_per_joint",
]


def gait_peak(signal: np.ndarray, fps: float, band: tuple[float, float] = (0.5, 12.0)) -> float:
    """Frequency (Hz) of the largest spectral peak of a joint angle within ``band``
    (mean removed, Hann window); nan if the signal is too short or flat."""
    x = np.asarray(signal, dtype=np.float64)
    if x.size < 8 or np.ptp(x) < 1e-9:
        return float("nan")
    x = (x - x.mean()) * np.hanning(x.size)
    power = np.abs(np.fft.rfft(x)) ** 2
    freqs = np.fft.rfftfreq(x.size, 1.0 / fps)
    inside = (freqs >= band[0]) & (freqs <= band[1])
    if not inside.any():
        return float("nan")
    return float(freqs[inside][np.argmax(power[inside])])


def duty_factor(contact: np.ndarray) -> float:
    """Share of frames a foot is on the ground (``contact`` boolean per frame)."""
    contact = np.asarray(contact, dtype=bool)
    return float(contact.mean()) if contact.size else float("nan")


def left_right_phase(left: np.ndarray, right: np.ndarray) -> float:
    """Phase of ``right`` relative to ``left`` as a fraction of a cycle in [0, 1) from the
    cross-spectrum at the dominant frequency: 0.5 is a trot's alternation, 0 a bound."""
    a = np.asarray(left, np.float64) - np.mean(left)
    b = np.asarray(right, np.float64) - np.mean(right)
    fa, fb = np.fft.rfft(a), np.fft.rfft(b)
    k = 1 + int(np.argmax(np.abs(fa[1:]) * np.abs(fb[1:])))
    lag = np.angle(fa[k] * np.conj(fb[k]))  # how far right lags left, rad
    return float((lag / (2 * np.pi)) % 1.0)


def wasserstein_1d(x: np.ndarray, y: np.ndarray) -> float:
    """W1 distance between two samples (equal-quantile matching)."""
    x, y = np.sort(np.ravel(x)), np.sort(np.ravel(y))
    if not x.size or not y.size:
        return float("nan")
    q = np.linspace(0, 1, max(x.size, y.size))
    return float(np.mean(np.abs(np.quantile(x, q) - np.quantile(y, q))))


def wasserstein_per_joint(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """W1 between the angle distributions of each joint (columns), rad."""
    return np.array([wasserstein_1d(a[:, j], b[:, j]) for j in range(a.shape[1])])


def jerk(positions: np.ndarray, fps: float) -> float:
    """Mean squared third derivative of joint angles (rad/s^3)^2 -- smoothness."""
    if len(positions) < 4:
        return float("nan")
    d3 = np.diff(positions, n=3, axis=0) * fps**3
    return float(np.mean(d3**2))


def energy(actions: np.ndarray) -> float:
    """Mean squared control: effort."""
    return float(np.mean(np.square(actions)))


def control_change(actions: np.ndarray) -> float:
    """Mean squared change of the control a step: chatter."""
    return float(np.mean(np.square(np.diff(actions, axis=0)))) if len(actions) > 1 else 0.0


def coverage(xy: np.ndarray, half: float, cells: int = 10) -> float:
    """Share of a ``cells`` x ``cells`` grid over the square arena [-half, half]^2 visited."""
    idx = np.clip(((np.asarray(xy) + half) / (2 * half) * cells).astype(int), 0, cells - 1)
    return float(len({(i, j) for i, j in idx}) / cells**2)


def wall_time(xy: np.ndarray, half: float, margin: float = 0.1) -> float:
    """Share of frames within ``margin`` of a wall (thigmotaxis)."""
    xy = np.asarray(xy)
    return float((np.abs(xy).max(axis=1) > half - margin).mean()) if len(xy) else float("nan")


def bouts(speed: np.ndarray, fps: float, threshold: float = 0.03) -> tuple[float, float]:
    """Mean length (s) of pause bouts (speed below ``threshold`` m/s) and of move bouts."""
    moving = np.asarray(speed) >= threshold
    if not moving.size:
        return float("nan"), float("nan")
    edges = np.flatnonzero(np.diff(moving.astype(int))) + 1
    runs = np.split(moving, edges)
    pause = [len(r) for r in runs if not r[0]]
    move = [len(r) for r in runs if r[0]]
    mean = lambda v: float(np.mean(v)) / fps if v else 0.0  # noqa: E731
    return mean(pause), mean(move)


def rearing_rate(head_height: np.ndarray, fps: float, threshold: float = 0.11) -> float:
    """Rears a minute: upward crossings of ``threshold`` (m) by the head."""
    above = np.asarray(head_height) > threshold
    onsets = int(np.count_nonzero(above[1:] & ~above[:-1]))
    minutes = len(above) / fps / 60
    return onsets / minutes if minutes > 0 else float("nan")
