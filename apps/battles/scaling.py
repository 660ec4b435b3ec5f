"""Scaling measurements: agent-steps per second and peak memory of the battlefield alone,
of the battlefield with both teams' actors (per-cell evaluation + sampling), and of
MAgent2's battle_v4 with random actions as the reference point.

Each measurement runs in a fresh subprocess, so its peak resident memory is its own.
"""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time

import numpy as np

__all__ = ["grid_for", "measure", "measure_in_subprocess"]


def grid_for(n_agents: int, agents_per_cell: float = 2.5) -> int:
    """A square grid side that gives about ``agents_per_cell`` agents per cell (>= 16)."""
    return max(16, int(math.ceil(math.sqrt(n_agents / agents_per_cell))))


def _env_only(n_agents: int, steps: int) -> float:
    from fieldrl.apps.battles.battlefield import Battlefield

    side = grid_for(n_agents)
    env = Battlefield(side, side, n_agents // 2, horizon=10**9, seed=0)
    state = env.reset()
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 5, (8, *state.cell.shape)).astype(np.int8)
    start = time.perf_counter()
    for i in range(steps):
        state, _ = env.step(state, actions[i % 8])
    return n_agents * steps / (time.perf_counter() - start)


def _env_and_policies(n_agents: int, steps: int, directions: bool) -> float:
    import torch

    from fieldrl.apps.battles.battlefield import Battlefield
    from fieldrl.apps.battles.policy import group_by_local_state, make_actor, sample_actions

    torch.set_num_threads(1)
    side = grid_for(n_agents)
    env = Battlefield(side, side, n_agents // 2, horizon=10**9, seed=0)
    actors = [make_actor(env, directions=directions) for _ in range(2)]
    state, rng = env.reset(), np.random.default_rng(0)
    start = time.perf_counter()
    with torch.inference_mode():
        for t in range(steps):
            counts = torch.from_numpy(env.counts(state) / env.n).float()
            time_left = torch.full((env.copies,), 1.0 - t / steps)
            actions = np.empty_like(state.cell, dtype=np.int8)
            local = env.local_state(state)
            for team, actor in enumerate(actors):
                maps = counts if team == 0 else counts.flip(1)
                batch = group_by_local_state(local[:, team], env.n_local)
                probs = torch.softmax(actor.logits_per_state(maps, time_left, batch), -1)
                actions[:, team] = sample_actions(probs.numpy(), batch.inverse, rng).reshape(
                    env.copies, env.n
                )
            state, _ = env.step(state, actions)
    return n_agents * steps / (time.perf_counter() - start)


def _magent2(n_agents: int, steps: int) -> tuple[float, int]:
    """battle_v4 through its PettingZoo parallel API with random actions; its map size
    gives 2 * floor(sqrt(0.04 * map^2))^2 agents, so the nearest count is used."""
    from magent2.environments import battle_v4

    side = max(int(round(math.sqrt(n_agents / 2) / 0.2)), 12)
    env = battle_v4.parallel_env(map_size=side, max_cycles=10**9)
    env.reset(seed=0)
    spaces = {a: env.action_space(a) for a in env.agents}
    rng = np.random.default_rng(0)
    done_steps, agent_steps = 0, 0
    start = time.perf_counter()
    while done_steps < steps and env.agents:
        acts = {a: int(rng.integers(spaces[a].n)) for a in env.agents}
        agent_steps += len(acts)
        env.step(acts)
        done_steps += 1
    return agent_steps / (time.perf_counter() - start), len(spaces)


def measure(kind: str, n_agents: int, steps: int, directions: bool = False) -> dict[str, float]:
    """One measurement in this process: agent-steps/s and the process's peak RSS (MB);
    ``directions``: the policies read the map directions (as the presets train them)."""
    extra: dict[str, float] = {}
    if kind == "env":
        rate = _env_only(n_agents, steps)
    elif kind == "env_policy":
        rate = _env_and_policies(n_agents, steps, directions)
    elif kind == "magent2":
        rate, actual = _magent2(n_agents, steps)
        extra["magent2_agents"] = actual
    else:
        raise ValueError(f"unknown measurement {kind!r}")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"agent_steps_per_s": rate, "peak_mem_mb": peak_mb, **extra}


def measure_in_subprocess(
    kind: str, n_agents: int, steps: int, timeout: float = 600, directions: bool = False
) -> dict:
    """``measure`` in a fresh interpreter (peak memory of that measurement alone)."""
    code = (
        "import json, sys; from fieldrl.apps.battles.scaling import measure; "
        f"print(json.dumps(measure({kind!r}, {n_agents}, {steps}, {directions!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout, check=False)  # fmt: skip
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])
