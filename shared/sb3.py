"""Convert a stable-baselines3 on-policy MLP policy into the core's :class:`ActorCritic`.

So an SB3 baseline (PPO or A2C with ``MlpPolicy`` on a flat Box observation, Discrete or
Box actions) is checkpointed, served and evaluated exactly like a fieldrl policy.
"""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from fieldrl.checkpoint import save_checkpoint
from fieldrl.policies import ActorCritic, module_state

__all__ = ["Replayable", "SB3Trainer", "from_sb3", "load_sb3_policy", "save_sb3_checkpoint"]

_ACTIVATION_NAMES = {nn.Tanh: "tanh", nn.ReLU: "relu", nn.ELU: "elu", nn.GELU: "gelu"}


def _linears(seq: nn.Module) -> list[nn.Linear]:
    return [m for m in seq.modules() if isinstance(m, nn.Linear)]


def from_sb3(model: Any) -> ActorCritic:
    """An :class:`ActorCritic` with the same weights (and outputs) as ``model.policy``.

    Raises ``ValueError`` naming what is not supported (image or dict observations,
    shared layers, state-dependent exploration, squashed outputs).
    """
    from gymnasium import spaces

    policy = model.policy
    obs_space, act_space = policy.observation_space, policy.action_space
    if not isinstance(obs_space, spaces.Box) or len(obs_space.shape) != 1:
        raise ValueError(f"only flat Box observations convert, got {obs_space}")
    if getattr(policy, "use_sde", False) or getattr(policy, "squash_output", False):
        raise ValueError("policies with gSDE or squashed outputs do not convert")
    activation = _ACTIVATION_NAMES.get(policy.activation_fn)
    if activation is None:
        raise ValueError(f"unsupported activation {policy.activation_fn.__name__}")
    if isinstance(act_space, spaces.Discrete):
        action: dict[str, Any] = {"kind": "categorical", "n": int(act_space.n)}
    elif isinstance(act_space, spaces.Box) and len(act_space.shape) == 1:
        action = {"kind": "gaussian", "dim": int(act_space.shape[0])}
    else:
        raise ValueError(f"only Discrete or flat Box actions convert, got {act_space}")

    extractor = policy.mlp_extractor
    if _linears(getattr(extractor, "shared_net", nn.Sequential())):
        raise ValueError("policies with shared layers between actor and critic do not convert")
    pi_layers, vf_layers = _linears(extractor.policy_net), _linears(extractor.value_net)
    converted = ActorCritic(
        obs_dim=int(obs_space.shape[0]),
        action=action,
        actor_hidden=[layer.out_features for layer in pi_layers],
        critic_hidden=[layer.out_features for layer in vf_layers],
        activation=activation,
    )
    ours_actor, ours_critic = _linears(converted.actor), _linears(converted.critic)
    pairs = list(zip(ours_actor, pi_layers, strict=True))
    pairs += list(zip(ours_critic, [*vf_layers, policy.value_net], strict=True))
    head = converted.head
    pairs.append((head.linear if action["kind"] == "categorical" else head.mean, policy.action_net))
    with torch.no_grad():
        for ours, theirs in pairs:
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
        if action["kind"] == "gaussian":
            head.log_std.copy_(policy.log_std)
    return converted


def save_sb3_checkpoint(model: Any, directory: str | Path, step: int | None = None) -> Path:
    """Convert ``model`` and write it as a core checkpoint: ``state["policy"]`` is a
    :func:`~fieldrl.policies.module_state` (``module_from_state`` rebuilds it)."""
    policy = from_sb3(model)
    step = int(model.num_timesteps if step is None else step)
    metadata = {"source": f"stable-baselines3 {type(model).__name__}"}
    return save_checkpoint(directory, step, {"policy": module_state(policy)}, metadata)


def load_sb3_policy(
    algorithm: type,
    observation_space: Any,
    action_space: Any,
    weights: dict[str, torch.Tensor],
    **policy_kwargs: Any,
) -> Any:
    """The ``MlpPolicy`` an :class:`SB3Trainer` of ``algorithm`` saved (``state["policy"]``),
    rebuilt without an algorithm, an environment or an optimizer, in evaluation mode: what a
    service or an evaluation needs (``policy.predict(obs, deterministic=...)``, as
    ``model.predict``). ``policy_kwargs`` as given to the algorithm."""
    policy_class = algorithm.policy_aliases["MlpPolicy"]
    policy = policy_class(observation_space, action_space, lambda _: 0.0, **policy_kwargs)
    policy.load_state_dict(weights)
    policy.set_training_mode(False)
    return policy


def _generator_states(env: Any) -> list[dict[str, Any]]:
    """The states of every numpy or torch generator held as an attribute by ``env`` and the
    environments it wraps (through ``.env``), one ``{name: state}`` per layer."""
    layers = []
    while env is not None:
        found: dict[str, Any] = {}
        for name, value in vars(env).items():
            if isinstance(value, np.random.Generator):
                found[name] = value.bit_generator.state
            elif isinstance(value, torch.Generator):
                found[name] = value.get_state()
        layers.append(found)
        env = vars(env).get("env")
    return layers


def _set_generator_states(env: Any, layers: list[dict[str, Any]]) -> None:
    for found in layers:
        for name, state in found.items():
            generator = vars(env).get(name)
            if generator is None and name == "_np_random":
                generator = env.np_random  # gymnasium makes it on first use
            if isinstance(generator, torch.Generator):
                generator.set_state(state)
            else:
                generator.bit_generator.state = state
        env = vars(env).get("env")


class Replayable(gym.Wrapper):
    """Remembers how the episode in progress began (its reset's arguments and the states of
    the generators of every environment below, taken just before it) and each action since.
    :class:`SB3Trainer` checkpoints that, and a resume replays the episode, so any
    deterministic environment continues exactly where it was killed without having to
    serialise itself (a MuJoCo body, an account's positions)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._start: dict[str, Any] | None = None
        self._actions: list[np.ndarray] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        start = {"seed": seed, "options": options, "generators": _generator_states(self.env)}
        self._start, self._actions = start, []
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any) -> Any:
        self._actions.append(np.array(action, copy=True))
        return self.env.step(action)

    def state_dict(self) -> dict[str, Any]:
        actions = torch.from_numpy(np.stack(self._actions)) if self._actions else None
        return {"start": self._start, "actions": actions}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        start = state["start"]
        if start is None:  # saved before the first reset
            return
        _set_generator_states(self.env, start["generators"])
        self.reset(seed=start["seed"], options=start["options"])
        actions = state["actions"]
        for action in actions.numpy() if actions is not None else ():
            self.step(action)


_MONITOR_FIELDS = ("rewards", "needs_reset", "episode_returns", "episode_lengths",
                   "episode_times", "total_steps")  # fmt: skip
_BUFFER_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _monitor_state(monitor: Any) -> dict[str, Any]:
    return {name: getattr(monitor, name) for name in _MONITOR_FIELDS}


class SB3Trainer:
    """Any stable-baselines3 algorithm as a core :class:`~fieldrl.training.Trainer`: each
    :meth:`step` learns ``chunk`` more environment steps, so :func:`~fieldrl.training.fit`
    logs, checkpoints and resumes it, exactly: a resumed run ends with the same weights as
    an uninterrupted one. The state holds, as tensors and JSON (never a pickled zip), what
    SB3 itself saves (the policy, its optimizers, SAC's entropy coefficient), the collection
    in progress (the last observation, the counters, the episode statistics, the action
    space's generator, an off-policy algorithm's filled replay buffer) and each
    environment's episode: the environment must be wrapped in :class:`Replayable` (anything
    between SB3's ``Monitor`` and it needs ``state_dict``/``load_state_dict``). SB3 draws from
    the global generators, which the core loop saves, so it has none of its own."""

    generators = ()

    def __init__(self, model: Any, total: int, chunk: int) -> None:
        from stable_baselines3.common.logger import Logger

        self.model, self.total, self.chunk, self.done = model, total, chunk, 0
        self._layers()  # fails now, not at the first checkpoint
        # records for step() to return, written nowhere: SB3's own default makes a folder in
        # the temp directory at every learn()
        model.set_logger(Logger(folder=None, output_formats=[]))

    def _layers(self) -> list[list[Any]]:
        """Per environment, the wrappers from SB3's down to the :class:`Replayable`."""
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv

        venv = self.model.get_env()
        if type(venv) is not DummyVecEnv:
            raise TypeError(f"SB3Trainer resumes a DummyVecEnv only, not {type(venv).__name__}")
        chains = []
        for env in venv.envs:
            chain, layer = [], env
            while not isinstance(layer, Replayable):
                if layer is None:
                    names = " -> ".join(type(e).__name__ for e in chain)
                    raise TypeError(
                        f"wrap the environment in fieldrl.sb3.Replayable before SB3 sees it, "
                        f"so that a checkpoint can rebuild its episode (found {names})"
                    )
                if not isinstance(layer, Monitor) and not hasattr(layer, "state_dict"):
                    raise TypeError(
                        f"{type(layer).__name__} sits above Replayable without state_dict / "
                        "load_state_dict: a resume could not restore it"
                    )
                chain.append(layer)
                layer = vars(layer).get("env")
            chains.append([*chain, layer])
        return chains

    def step(self) -> dict[str, float]:
        chunk = min(self.chunk, self.total - self.done)
        self.model.learn(chunk, reset_num_timesteps=False, progress_bar=False)
        self.done = min(int(self.model.num_timesteps), self.total)
        if self.done < self.total and self.done % self.chunk:
            self.done = self.total  # SB3 rounds a rollout up: the budget is spent
        logged = self.model.logger.name_to_value
        return {k.split("/")[-1]: float(v) for k, v in logged.items()}

    def _saved(self) -> list[tuple[str, Any]]:
        from operator import attrgetter

        modules, tensors = self.model._get_torch_save_params()
        return [(name, attrgetter(name)(self.model)) for name in [*modules, *tensors]]

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"timesteps": self.done}
        for name, obj in self._saved():
            state[name] = obj.detach().clone() if torch.is_tensor(obj) else obj.state_dict()
        state["collection"] = self._collection_state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, obj in self._saved():
            if torch.is_tensor(obj):
                with torch.no_grad():
                    obj.copy_(state[name])
            else:
                obj.load_state_dict(state[name])
        self.done = int(state["timesteps"])
        self.model.num_timesteps = self.done
        self._load_collection(state["collection"])

    def _collection_state(self) -> dict[str, Any]:
        m = self.model
        venv = m.get_env()
        return {
            "last_obs": None if m._last_obs is None else torch.from_numpy(m._last_obs.copy()),
            "last_episode_starts": None
            if m._last_episode_starts is None
            else torch.from_numpy(m._last_episode_starts.copy()),
            "counters": {"n_updates": m._n_updates, "episode_num": m._episode_num},
            "episode_info": list(m.ep_info_buffer or ()),
            "episode_success": [bool(s) for s in m.ep_success_buffer or ()],
            "action_space": m.action_space.np_random.bit_generator.state,
            "seeds": list(venv._seeds),
            "options": list(venv._options),
            "envs": [
                [
                    _monitor_state(layer)
                    if not hasattr(layer, "state_dict")
                    else layer.state_dict()
                    for layer in chain
                ]
                for chain in self._layers()
            ],  # fmt: skip
            "replay_buffer": self._buffer_state(),
        }

    def _load_collection(self, saved: dict[str, Any]) -> None:
        m = self.model
        venv = m.get_env()
        for chain, states in zip(self._layers(), saved["envs"], strict=True):
            # the innermost (the Replayable) first: replaying the episode steps the layers above
            for layer, layer_state in reversed(list(zip(chain, states, strict=True))):
                if hasattr(layer, "load_state_dict"):
                    layer.load_state_dict(layer_state)
                else:
                    for name in _MONITOR_FIELDS:
                        setattr(layer, name, layer_state[name])
        venv._seeds, venv._options = list(saved["seeds"]), list(saved["options"])
        m.action_space.np_random.bit_generator.state = saved["action_space"]
        m._last_obs = None if saved["last_obs"] is None else saved["last_obs"].numpy().copy()
        starts = saved["last_episode_starts"]
        m._last_episode_starts = None if starts is None else starts.numpy().copy()
        m._n_updates = int(saved["counters"]["n_updates"])
        m._episode_num = int(saved["counters"]["episode_num"])
        window = m._stats_window_size
        m.ep_info_buffer = deque(saved["episode_info"], maxlen=window)
        m.ep_success_buffer = deque(saved["episode_success"], maxlen=window)
        self._load_buffer(saved["replay_buffer"])

    def _buffer_state(self) -> dict[str, Any] | None:
        buffer = getattr(self.model, "replay_buffer", None)
        if buffer is None:
            return None
        filled = buffer.buffer_size if buffer.full else buffer.pos
        state: dict[str, Any] = {"pos": int(buffer.pos), "full": bool(buffer.full)}
        for name in _BUFFER_FIELDS:
            array = getattr(buffer, name, None)
            if array is not None:
                state[name] = torch.from_numpy(array[:filled].copy())
        return state

    def _load_buffer(self, saved: dict[str, Any] | None) -> None:
        if saved is None:
            return
        buffer = self.model.replay_buffer
        buffer.pos, buffer.full = int(saved["pos"]), bool(saved["full"])
        for name in _BUFFER_FIELDS:
            if name in saved:
                array = saved[name].numpy()
                getattr(buffer, name)[: len(array)] = array
