"""Config in, trained agent out: train MaskablePPO on a suite's training episodes into a
run folder (resumable), and load a run's agent back for evaluation and serving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fieldrl.apps.options.baselines import suite_policies
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv, menu_for, observation_space
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import run_episode, summary
from fieldrl.apps.options.ppo import MaskablePPOTrainer, masked_policy
from fieldrl.atomic import atomic_write_json
from fieldrl.runs import LoadedRun, Run
from fieldrl.sb3 import load_sb3_policy
from fieldrl.training import fit

__all__ = ["evaluate", "load", "train"]


def train_agent(cfg: OptionsConfig, *, run: Run | None) -> MaskablePPOTrainer:
    """MaskablePPO on ``cfg.ppo.train_episodes`` training episodes of the config's suite."""
    seed = cfg.experiment.seed
    episodes = make_episodes(cfg, "train", cfg.ppo.train_episodes, seed)
    return fit(lambda: MaskablePPOTrainer(cfg, episodes, seed), run, seed=seed,
               description=f"MaskablePPO on {cfg.suite.name}")  # fmt: skip


def train(cfg: OptionsConfig, *, run: Run, resources: object = None) -> dict[str, float]:
    """``fieldrl options train``: the agent into ``run``, then its figures on validation
    episodes (never the evaluation split)."""
    trainer = train_agent(cfg, run=run)
    episodes = make_episodes(cfg, "validation", 8, cfg.experiment.seed)
    env = OptionsEnv(cfg, episodes)
    records = [run_episode(env, masked_policy(trainer.model), e) for e in range(len(episodes))]
    return _headline(summary(records))


def evaluate(cfg: OptionsConfig, *, run: LoadedRun, resources: object, out: Path
             ) -> dict[str, float]:  # fmt: skip
    """A trained run on held-out episodes of its suite against the suite's baselines and
    random valid; writes ``eval.json`` in ``out``."""

    episodes = make_episodes(cfg, "eval", cfg.benchmark.episodes, 0)
    env = OptionsEnv(cfg, episodes)
    policies = suite_policies(run.trained, cfg.suite.name)
    table = {name: summary([run_episode(env, p, e) for e in range(len(episodes))])
             for name, p in policies.items()}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "eval.json", {"episodes": [e.key for e in episodes],
                                                "methods": table})  # fmt: skip
    return {f"{name}/{k}": v for name, s in table.items() for k, v in _headline(s).items()}


def _headline(s: dict[str, float]) -> dict[str, float]:
    keys = ("pnl_per_risk", "return", "sharpe", "max_drawdown", "executable_rate", "costs")
    return {k: float(s[k]) for k in keys if k in s}


def load(run: LoadedRun) -> Any:
    """``App.load``: the run's MaskablePPO policy alone (no episodes, no algorithm), with
    SB3's ``predict(observation, action_masks=..., deterministic=...)``."""
    import gymnasium as gym
    from sb3_contrib import MaskablePPO

    cfg = run.config
    observations = observation_space(cfg)
    actions = gym.spaces.Discrete(2 + len(menu_for(cfg)))
    return load_sb3_policy(MaskablePPO, observations, actions, run.state["policy"],
                           net_arch=list(cfg.ppo.hidden))  # fmt: skip
