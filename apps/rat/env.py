"""The rat as a gymnasium environment: 38 position targets in [-1, 1] in, proprioception
plus the task's observation out, 20 ms a step."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from fieldrl.apps.rat.body import RatBody
from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.tasks import make_task

__all__ = ["RatEnv"]


class RatEnv(gym.Env):
    """One rat, one task. ``info`` carries ``success`` and the task's progress figures;
    ``render()`` (``render_mode="rgb_array"``) draws with offscreen EGL."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self, cfg: RatConfig, render_mode: str | None = None, size: tuple[int, int] = (240, 320)
    ) -> None:
        self.cfg = cfg
        self.task = make_task(cfg.task)
        self.body = RatBody(cfg.body, self.task.build)
        self.max_steps = round(cfg.task.duration / cfg.body.control_dt)
        self.proprio_size = self.body.proprio_size
        size_obs = self.proprio_size + self.task.obs_size
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size_obs,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.body.n_actions,), np.float32)
        self.render_mode = render_mode
        self._size = size
        self._renderer: Any = None
        self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.concatenate([self.body.proprioception(), self.task.observe(self.body)])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.task.reset(self.body, self.np_random)
        self.steps = 0
        return self._obs(), {"success": False, **self.task.info(self.body)}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.body.step(np.asarray(action, dtype=np.float64))
        self.steps += 1
        outcome = self.task.outcome(self.body)
        truncated = self.steps >= self.max_steps and not outcome.terminated
        info = {"success": outcome.success, "fallen": self.body.fallen, **self.task.info(self.body)}
        return self._obs(), outcome.reward, outcome.terminated, truncated, info

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        import mujoco

        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.body.model, *self._size)
            self._camera = mujoco.MjvCamera()
            self._camera.type = mujoco.mjtCamera.mjCAMERA_TRACKING
            self._camera.trackbodyid = self.body.layout.torso
            self._camera.distance, self._camera.elevation, self._camera.azimuth = 0.6, -25, 135
        self._renderer.update_scene(self.body.data, self._camera)
        return self._renderer.render()

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
