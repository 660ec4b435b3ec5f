"""The rat service: observation in, 38 position targets out, with per-session recurrent
state and, on request, the network's activations (to compare with neural recordings).

Modes:
- ``explore``: the behaviour prior samples the latent, the decoder acts (no reference);
- ``track``: the adapter core follows a reference window (``reference``);
- ``task``: the run's task agent (a run trained with the ``agent`` stage).

A session's state (latent, core state) lives in the server until ``reset`` or until
``MAX_SESSIONS`` newer sessions push it out; a request changes it only when its reply is
good. Sessions are shared by every client of a server (one tenant: see docs/serving.md).
Wrong lengths, numbers beyond ``MAX_ABS`` (the observation is scaled to units of order 1)
and non-finite numbers are 4xx naming the field.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field, create_model

from fieldrl.apps.rat.agents import LATENT_BOUND
from fieldrl.apps.rat.imitation import window_size
from fieldrl.apps.rat.npmp import next_latent
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["MAX_ABS", "MAX_SESSIONS", "example_request", "service"]

MAX_SESSIONS = 1000
MAX_FLOATS = 4096
# about 200x the largest scaled sense in 3,000 random-action steps, falls included (5.1):
# beyond it an input can only saturate the recurrent state (1e30 did, for 10-50 replies)
MAX_ABS = 1000.0
Number = Annotated[float, Field(ge=-MAX_ABS, le=MAX_ABS)]


class RatRequest(RequestModel):
    session: str = Field("default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")
    mode: Literal["explore", "track", "task"] = "explore"
    observation: list[Number] = Field(
        min_length=1,
        max_length=MAX_FLOATS,
        description="Proprioception (explore, track) or the task's observation (task).",
    )
    reference: list[Number] | None = Field(
        None, max_length=MAX_FLOATS, description="track: the reference window."
    )
    deterministic: bool = Field(True, description="Mean latents and actions, no sampling.")
    reset: bool = Field(False, description="Start the session's state afresh first.")
    activations: bool = Field(False, description="Return the network's activity too.")


class RatResponse(ResponseModel):
    action: list[float]
    session: str
    step: int
    activations: dict[str, list[float]] | None = None
    model_version: str


class _Session:
    def __init__(self, latent: int, hidden: int) -> None:
        self.z = torch.zeros(1, latent)
        self.h = torch.zeros(1, hidden)
        self.step = 0


def _run_model(proprio: int, window: int, task: int) -> type[RatRequest]:
    """The request model with the run's own lengths (``task`` 0: no task agent), so its
    OpenAPI schema states them."""
    lengths = f"{proprio} numbers (explore, track)" + (f" or {task} (task)" if task else "")
    return create_model(
        "RatRequest",
        __base__=RatRequest,
        observation=(list[Number], Field(
            min_length=min(proprio, task or proprio), max_length=max(proprio, task or proprio),
            description=f"Proprioception (explore, track) or the task's observation (task): "
            f"{lengths}, each within +-{MAX_ABS:g}.")),
        reference=(list[Number] | None, Field(
            None, min_length=window, max_length=window,
            description=f"track: the reference window, {window} numbers.")),
    )  # fmt: skip


def _vector(values: list[float], size: int, field: str) -> torch.Tensor:
    if len(values) != size:
        raise InputError(field, f"expected {size} numbers, got {len(values)}")
    return torch.as_tensor(np.asarray(values, dtype=np.float32))[None]  # bounded by the model


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's priors, adapter core and (if trained) task agent."""
    trained = run.trained
    cfg, models, agent = run.config, trained.models, trained.agent
    proprio = trained.proprio_size
    window = window_size(cfg.imitation.horizon)
    task_obs = trained.task_obs_size
    sessions: OrderedDict[str, _Session] = OrderedDict()
    generator = torch.Generator().manual_seed(cfg.experiment.seed)

    def session_for(request: RatRequest) -> _Session:
        """The session's state to start from; stored by :func:`keep` only after a good reply."""
        state = sessions.get(request.session)
        if state is None or request.reset:
            return _Session(models.motion.latent, cfg.adapters.hidden)
        return state

    def keep(request: RatRequest, state: _Session, action: torch.Tensor, z: torch.Tensor,
             h: torch.Tensor) -> None:  # fmt: skip
        """Store the new latent and core state only if they and the action are finite."""
        if not all(torch.isfinite(t).all() for t in (action, z, h)):
            cause = "reference" if request.mode == "track" else "observation"
            raise InputError(cause, "the network's output is not finite for this input; the "
                             "session is unchanged")  # fmt: skip
        name = request.session
        state.z, state.h, state.step = z, h, state.step + 1
        sessions[name] = state
        sessions.move_to_end(name)
        while len(sessions) > MAX_SESSIONS:
            sessions.popitem(last=False)

    @torch.no_grad()
    def act(request: RatRequest) -> RatResponse:
        if request.mode == "task" and agent is None:
            raise InputError("mode", "this run has no task agent (train it with the agent stage)")
        size = task_obs if request.mode == "task" else proprio
        obs = _vector(request.observation, size, "observation")
        state = session_for(request)
        z, h = state.z, state.h
        extra: dict[str, list[float]] = {}
        if request.mode == "task" and cfg.train.agent in ("ppo", "sac"):  # raw actions
            raw, _ = agent.predict(obs[0].numpy(), deterministic=request.deterministic)
            action = torch.as_tensor(np.clip(raw, -1.0, 1.0))
        elif request.mode == "track":
            if request.reference is None:
                raise InputError("reference", "track mode needs the reference window")
            ref = _vector(request.reference, window, "reference")
            out, codes, h = models.adapters.run(obs[None], ref[None], h)
            action = out[0, 0]
            extra = {"core_hidden": h[0].tolist(), "adapter_code": codes[0, 0].tolist()}
        else:
            p = obs[:, :proprio]
            sample = None if request.deterministic else generator
            behaviour = models.behaviour
            if request.mode == "task":  # the agent steers the latent, as in training
                steer, _ = agent.predict(
                    np.concatenate([obs[0].numpy(), z[0].numpy()]),
                    deterministic=request.deterministic,
                )
                a = torch.as_tensor(np.clip(steer, -LATENT_BOUND, LATENT_BOUND))[None]
                if cfg.train.agent == "motion_ppo":
                    behaviour = None  # its latent follows the AR(1) prior
            elif sample is None:
                a = torch.zeros(1, models.motion.latent)
            else:
                a = torch.randn(1, models.motion.latent, generator=sample)
            z = next_latent(models.motion, behaviour, z, p, a.float(), sample)
            action = models.motion.decode(p, z)[0]
            extra = {"latent": z[0].tolist()}
        keep(request, state, action, z, h)
        return RatResponse(
            action=action.tolist(),
            session=request.session,
            step=state.step,
            activations=extra if request.activations else None,
            model_version=run.model_version,
        )

    info: dict[str, Any] = {
        "proprioception": proprio,
        "reference_window": window,
        "task_observation": task_obs if agent else None,
        "task": cfg.task.name,
        "max_sessions": MAX_SESSIONS,
    }
    request = _run_model(proprio, window, task_obs if agent else 0)
    return ServiceSpec.for_run(run, request, RatResponse, act, info=info)


def example_request(run: LoadedRun) -> dict[str, Any]:
    """The rat standing at rest, exploring, with its activations."""
    from fieldrl.apps.rat.env import RatEnv

    env = RatEnv(run.config)
    env.reset(seed=0)
    return {
        "session": "demo",
        "mode": "explore",
        "observation": env.body.proprioception().round(5).tolist(),
        "activations": True,
    }
