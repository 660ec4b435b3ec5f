"""The team-policy service: POST one team's agent states (columnar arrays) and the observed
distributions, get an action for every agent in one call (10k agents in a few ms: the
actor runs once per occupied local state)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
import torch
from pydantic import Field

from fieldrl.apps.battles.battlefield import MOVES
from fieldrl.apps.battles.pipeline import draws_per_state, make_env, shares_sides
from fieldrl.apps.battles.policy import group_by_local_state, sample_actions, sample_steering
from fieldrl.apps.battles.rollout import team_mirrors
from fieldrl.errors import FieldrlError
from fieldrl.runs import LoadedRun
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec

__all__ = ["MAX_AGENTS", "example_request", "service"]

MAX_AGENTS = 100_000
MAX_CELLS = 256 * 256  # the largest battlefield (scenario.height and width <= 256)
MAX_BODY_BYTES = 16 * 1024 * 1024  # 100k agents as three JSON integer lists is ~2 MB
MOVE_NAMES = ["stay", "up", "down", "left", "right"]
assert len(MOVE_NAMES) == len(MOVES)

Position = Annotated[int, Field(ge=0, le=MAX_CELLS)]
Share = Annotated[float, Field(ge=0, le=1)]


def _agent_column(description: str) -> Any:
    return Field(None, max_length=MAX_AGENTS, description=description)


class Agents(RequestModel):
    """One entry per alive agent: battlefield agents give ``row``, ``col``, ``health``;
    population-game agents give ``strategy`` (the strategy they played last)."""

    row: list[Position] | None = _agent_column("Battlefield row of each agent.")
    col: list[Position] | None = _agent_column("Battlefield column of each agent.")
    health: list[Position] | None = _agent_column("Hits each agent still survives.")
    strategy: list[Position] | None = _agent_column("Population game: last strategy played.")


class ActRequest(RequestModel):
    team: Literal["blue", "red"] = Field(..., description="Which trained team acts.")
    agents: Agents
    team_size: int = Field(..., ge=1, le=10_000_000, description="N: the team's initial size.")
    own_map: list[Share] | None = Field(
        None,
        max_length=MAX_CELLS,
        description="The team's alive share per cell/strategy (default: from agents).",
    )
    opponent_map: list[Share] = Field(
        ..., max_length=MAX_CELLS, description="The opponent's observed share per cell."
    )
    time_left: float = Field(..., ge=0, le=1, description="1 at the start, 0 at the end.")
    greedy: bool = Field(False, description="Most likely action instead of a sample.")
    seed: int | None = Field(None, ge=0, le=2**63 - 1, description="Seed of sampled actions.")


class ActResponse(ResponseModel):
    actions: list[int] = Field(description="One action per agent, in request order.")
    action_names: list[str]
    local_states: int = Field(description="Distinct local states the actor evaluated.")
    model_version: str


def _column(values: list[int] | None, name: str, low: int, high: int) -> np.ndarray:
    field = f"agents.{name}"
    if values is None:
        raise InputError(field, "missing")
    arr = np.asarray(values, dtype=np.int64)
    bad = np.flatnonzero((arr < low) | (arr > high))
    if bad.size:
        raise InputError(f"{field}.{int(bad[0])}", f"{int(arr[bad[0]])} is outside [{low}, {high}]")
    return arr


def _share_map(values: list[float], name: str, size: int) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (size,):
        raise InputError(name, f"expected {size} entries (one per cell/strategy), got {arr.size}")
    if (arr < 0).any():
        raise InputError(f"{name}.{int(np.flatnonzero(arr < 0)[0])}", "negative share")
    if arr.sum() > 1 + 1e-6:
        raise InputError(name, f"shares sum to {arr.sum():.4f} > 1 (normalise by team_size)")
    return arr


def service(run: LoadedRun) -> ServiceSpec:
    """Serve the run's two trained teams."""
    cfg, teams = run.trained_config, run.trained
    version = run.model_version
    if cfg.train.method == "mfq":
        raise FieldrlError(f"{run.dir}: an MF-Q run (a baseline) is not served; serve a "
                           "policy-gradient run (mf_mappo, mappo, ippo)")  # fmt: skip
    env = make_env(cfg, 1, seed=0)
    battlefield = cfg.scenario.kind == "battlefield"
    mirrors = team_mirrors(env, shares_sides(cfg))
    names = MOVE_NAMES if battlefield else [f"strategy_{i}" for i in range(env.n_actions)]

    def local_states(request: ActRequest) -> tuple[np.ndarray, np.ndarray]:
        """Local-state ids and the cell/strategy index of every agent."""
        a = request.agents
        if battlefield:
            rows = _column(a.row, "row", 0, env.height - 1)
            cols = _column(a.col, "col", 0, env.width - 1)
            health = _column(a.health, "health", 1, env.max_health)
            if not rows.size == cols.size == health.size:
                raise InputError("agents", f"row/col/health lengths differ: "
                                 f"{rows.size}/{cols.size}/{health.size}")  # fmt: skip
            cells = rows * env.width + cols
            return cells * (env.max_health + 1) + health, cells
        strategy = _column(a.strategy, "strategy", 0, env.k - 1)
        return strategy, strategy

    def act(request: ActRequest) -> ActResponse:
        local, where = local_states(request)
        if local.size == 0:
            raise InputError("agents", "no agents")
        if local.size > request.team_size:
            raise InputError("team_size", f"{local.size} agents sent but team_size is "
                             f"{request.team_size}")  # fmt: skip
        counts = np.bincount(where, minlength=env.map_dim) / request.team_size
        if request.own_map is None:
            own = counts
        else:
            own = _share_map(request.own_map, "own_map", env.map_dim)
            short = np.flatnonzero(own + 1e-6 < counts)
            if short.size:
                raise InputError(f"own_map.{int(short[0])}", f"{own[short[0]]:.6f} is less than "
                                 f"the agents sent for it ({counts[short[0]]:.6f})")  # fmt: skip
        opponent = _share_map(request.opponent_map, "opponent_map", env.map_dim)
        maps = torch.tensor(np.stack([own, opponent])[None], dtype=torch.float32)
        mirror = mirrors[0 if request.team == "blue" else 1]
        if mirror is not None:  # one network for both sides: red plays through the mirror
            maps, local = maps[:, :, torch.from_numpy(mirror.cells)], mirror.local[local]
        states = group_by_local_state(local[None], env.n_local)
        model = teams[0 if request.team == "blue" else 1]
        rng = np.random.default_rng(request.seed)
        time_left = torch.tensor([request.time_left])
        with torch.no_grad():
            steer, _ = sample_steering(model.actor, maps, time_left, rng, request.greedy)
            logits = model.actor.logits_per_state(maps, time_left, states, steer)
        if request.greedy:
            actions = logits.argmax(-1).numpy()[states.inverse]
        else:
            probs = torch.softmax(logits, -1).numpy()
            actions = sample_actions(probs, states.inverse, rng, draws_per_state(cfg))
        if mirror is not None:
            actions = mirror.actions[actions]
        return ActResponse(actions=actions.tolist(), action_names=names,
                           local_states=states.size, model_version=version)  # fmt: skip

    return ServiceSpec.for_run(
        run,
        ActRequest,
        ActResponse,
        act,
        info={
            "scenario": cfg.scenario.model_dump(),
            "actions": names,
            "max_agents": MAX_AGENTS,
            "method": cfg.train.method,
        },  # fmt: skip
        max_body_bytes=MAX_BODY_BYTES,
    )


def example_request(run: LoadedRun, agents: int | None = None) -> dict[str, Any]:
    """Blue's agents at the start of a battle of the run's scenario (or ``agents`` of them)."""
    cfg = run.config
    env = make_env(cfg, 1, agents, seed=cfg.experiment.seed)
    state = env.reset()
    maps = env.maps(state)[0]
    request: dict[str, Any] = {"team": "blue", "team_size": env.n, "time_left": 1.0,
                               "opponent_map": maps[1].tolist(), "seed": 0}  # fmt: skip
    if cfg.scenario.kind == "battlefield":
        rows, cols = np.divmod(state.cell[0, 0], env.width)
        request["agents"] = {"row": rows.tolist(), "col": cols.tolist(),
                             "health": state.health[0, 0].tolist()}  # fmt: skip
    else:
        request["agents"] = {"strategy": state.strategy[0, 0].tolist()}
    return request
