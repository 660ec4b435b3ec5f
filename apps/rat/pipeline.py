"""Config in, trained motor system out: the library, then the motion prior, the behaviour
prior, the adapter core, the multitask baseline and (optionally) a task agent on top, as
one resumable core trainer whose stages run in order; and a run's models loaded back."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources as package_files
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fieldrl.apps.rat.adapters import AdapterCore
from fieldrl.apps.rat.agents import agent_env, held_out_success, load_agent_policy, make_trainer
from fieldrl.apps.rat.body import RatBody
from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.imitation import ImitationTrainer, Reference, evaluate_tracking, window_size
from fieldrl.apps.rat.library import Behaviours, Library, generate, load_library
from fieldrl.apps.rat.npmp import BehaviourPrior, LatentWalker, MotionPrior
from fieldrl.errors import DataError
from fieldrl.files import expand_files
from fieldrl.runs import LoadedRun, Run
from fieldrl.seeding import derive_seed
from fieldrl.training import fit

__all__ = [
    "MotorSystem",
    "MotorTrainer",
    "build_library",
    "evaluate",
    "TrainedRat",
    "load",
    "motor_system",
    "shipped_behaviours",
    "train",
]

LIBRARY_FILE = "library.npz"


def shipped_behaviours(path: str | None = None) -> Behaviours:
    """The CPG tuned here and shipped with the app (``cpg.json``), or the file at ``path``."""
    if path is not None:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise DataError(f"{path}: cannot read the CPG parameters ({e.strerror})") from None
    else:
        text = package_files.files("fieldrl.apps.rat").joinpath("cpg.json").read_text()
    try:
        return Behaviours.from_json(json.loads(text))
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise DataError(f"{path or 'cpg.json'}: not CPG parameters from tune-cpg ({e})") from None


def build_library(cfg: RatConfig, body: RatBody, split: str = "train") -> Library:
    """The training library (or the held-out one): the user's files if ``library.files``,
    else clips generated from the CPG with the config's seed."""
    lc = cfg.library
    if lc.files and split == "train":
        libraries = [
            load_library(f, body.joint_names, body.model.qpos0, body.joint_ranges())
            for f in expand_files(lc.files)
        ]
        rates = {lib.fps for lib in libraries}
        if len(rates) > 1:
            raise DataError(f"library files run at different rates {sorted(rates)} fps")
        clips = [c for lib in libraries for c in lib.clips]
        return Library(clips, libraries[0].fps, libraries[0].joint_names, {"files": lc.files})
    clips = lc.clips if split == "train" else lc.heldout_clips
    seed = derive_seed(cfg.experiment.seed, "library", split)
    return generate(
        body,
        shipped_behaviours(lc.cpg),
        clips,
        lc.segments,
        lc.segment_seconds,
        lc.blend,
        lc.noisy_share,
        lc.noise,
        lc.heldout,
        seed,
        split,
        weights=lc.behaviour_weights,
    )


@dataclass
class MotorSystem:
    """A run's four networks (untrained where ``train.stages`` leaves one out)."""

    motion: MotionPrior
    behaviour: BehaviourPrior
    adapters: AdapterCore
    multitask: AdapterCore


NETWORKS = ("motion", "behaviour", "adapters", "multitask")


def motor_system(cfg: RatConfig, proprio: int, weights: dict[str, dict[str, Any]]) -> MotorSystem:
    """The four networks for ``cfg``, with the state dicts in ``weights`` (by network name;
    one left out stays untrained), in evaluation mode."""
    models = new_models(cfg, proprio)
    for name in NETWORKS:
        module = getattr(models, name)
        if name in weights:
            module.load_state_dict(weights[name])
        module.eval()
    return models


def new_models(cfg: RatConfig, proprio: int) -> MotorSystem:
    n, window = cfg.npmp, window_size(cfg.imitation.horizon)
    hidden = cfg.adapters.hidden
    return MotorSystem(
        MotionPrior(proprio, window, 38, n.latent, n.hidden, n.alpha, n.kl, n.temperature),
        BehaviourPrior(proprio, n.latent, n.behaviour_hidden, n.behaviour_components),
        AdapterCore(proprio, window, 38, hidden, cfg.adapters.count, cfg.adapters.tau),
        AdapterCore(proprio, window, 38, hidden, 0),
    )


class MotorTrainer:
    """The stages of ``train.stages`` in order, one iteration a step, so the core loop
    checkpoints and resumes anywhere inside them."""

    def __init__(self, cfg: RatConfig, run_dir: Path | None) -> None:
        self.cfg, self.run_dir = cfg, run_dir
        self.env = RatEnv(cfg)
        self.body = self.env.body
        self.models = new_models(cfg, self.body.proprio_size)
        self.library = self._library()
        self.refs = [Reference(c, self.body, self.library.fps) for c in self.library.clips]
        seed = cfg.experiment.seed
        self.stages: list[tuple[str, Any]] = []
        for stage in cfg.train.stages:
            if stage in ("motion", "adapters", "multitask"):
                model = {
                    "motion": self.models.motion,
                    "adapters": self.models.adapters,
                    "multitask": self.models.multitask,
                }[stage]
                trainer: Any = ImitationTrainer(model, self.body, self.refs, cfg.imitation, seed)
            elif stage == "behaviour":
                trainer = _BehaviourTrainer(self.models, self.body, self.refs, cfg, seed)
            else:
                trainer = make_trainer(
                    cfg.train.agent, cfg, seed, (self.models.motion, self.models.behaviour)
                )
            self.stages.append((stage, trainer))
        self.total = sum(t.total for _, t in self.stages)
        self.done = 0
        # every stage's generators, so that a resumed run draws what it would have drawn
        self.generators = [g for _, t in self.stages for g in t.generators]

    def _library(self) -> Library:
        cached = self.run_dir / LIBRARY_FILE if self.run_dir else None
        if cached is None:
            return build_library(self.cfg, self.body)
        if not cached.exists():
            build_library(self.cfg, self.body).save(cached)
        # read back even when just written: the file holds float32, and a resumed run must
        # train on exactly what the first one did
        return load_library(
            cached, self.body.joint_names, self.body.model.qpos0, self.body.joint_ranges()
        )

    def step(self) -> dict[str, float]:
        offset = 0
        for name, trainer in self.stages:
            if self.done < offset + trainer.total:
                metrics = trainer.step()
                self.done = offset + trainer.done
                return {f"{name}/{k}": v for k, v in metrics.items()}
            offset += trainer.total
        raise RuntimeError("training is already finished")

    def state_dict(self) -> dict[str, Any]:
        return {"done": self.done, **{name: t.state_dict() for name, t in self.stages}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, trainer in self.stages:
            trainer.load_state_dict(state[name])
        self.done = int(state["done"])


class _BehaviourTrainer:
    """Fit the behaviour prior to the frozen encoder, ``npmp.behaviour_updates`` gradient
    steps, on states collected at its first step (checkpointed with it): the motion
    prior's own rollouts, or the tracking expert's (``npmp.behaviour_data``); with
    ``"own"``, the motion prior's and then, before every chunk of updates, the behaviour
    prior's own rollouts (DAgger: the encoder labels the states the prior itself reaches)."""

    chunk = 100

    def __init__(
        self, models: MotorSystem, body: RatBody, refs: list[Reference], cfg: RatConfig, seed: int
    ) -> None:
        self.models, self.cfg = models, cfg
        self.collector = ImitationTrainer(models.motion, body, refs, cfg.imitation, seed)
        self.optimizer = torch.optim.Adam(models.behaviour.parameters(), lr=cfg.imitation.lr)
        self.total = -(-cfg.npmp.behaviour_updates // self.chunk)
        self.done = 0
        self.rng = self.collector.rng
        self.generators = self.collector.generators

    def step(self) -> dict[str, float]:
        n, collected = self.cfg.npmp, {}
        if len(self.collector.data) == 0:
            share = 1.0 if n.behaviour_data == "expert" else 0.0
            self.collector.collect(rollouts=4 * self.cfg.imitation.rollouts, expert_share=share)
        elif n.behaviour_data == "own":
            # at the fitted noise, not the exploration temperature: on training seed 7 this
            # fell in 1 of 8 10-s explorations at temperature 0.5, rollouts at 0.5 in 4
            walker = LatentWalker(self.models.motion, self.models.behaviour, self.rng, 1.0)
            collected = self.collector.collect(n.behaviour_rollouts, 0.0, student=walker)
        losses = []
        for _ in range(self.chunk):
            batch = self.collector.data.sample(
                self.cfg.imitation.batch, self.cfg.imitation.sequence, self.rng
            )
            loss = self.models.behaviour.loss(
                self.models.motion, {k: torch.as_tensor(v) for k, v in batch.items()}
            )
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(loss.item())
        self.done += 1
        return {"loss": float(np.mean(losses)), **collected}

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.models.behaviour.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "done": self.done,
            "data": self.collector.data.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.models.behaviour.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.done = int(state["done"])
        self.collector.data.load_state_dict(state["data"])


def train_motor(cfg: RatConfig, *, run: Run | None) -> MotorTrainer:
    run_dir = Path(run.dir) if run is not None else None
    return fit(
        lambda: MotorTrainer(cfg, run_dir),
        run,
        seed=cfg.experiment.seed,
        description=f"rat: {', '.join(cfg.train.stages)}",
    )


def train(cfg: RatConfig, *, run: Run, resources: object = None) -> dict[str, float]:
    """``fieldrl rat train``: the stages into ``run``; then tracking on the training clips
    (held-out clips are the benchmark's)."""
    trainer = train_motor(cfg, run=run)
    refs = trainer.refs[: min(8, len(trainer.refs))]
    out: dict[str, float] = {}
    for name in ("motion", "adapters", "multitask"):
        if name in cfg.train.stages:
            model = getattr(trainer.models, name)
            figures = evaluate_tracking(
                trainer.body,
                refs,
                model.controller(True),
                cfg.imitation.horizon,
                cfg.imitation.gain,
                150,
                np.random.default_rng(0),
            )
            out |= {f"{name}/{k}": v for k, v in figures.items()}
    return out


@dataclass
class TrainedRat:
    """A rat run, ready to act: its networks, its task agent's policy (None without the
    agent stage) and the sizes a request has; the training library is read on demand."""

    run_dir: Path
    config: RatConfig
    models: MotorSystem
    agent: Any | None
    proprio_size: int
    task_obs_size: int

    @property
    def library(self) -> Library:
        body = RatEnv(self.config).body
        return load_library(self.run_dir / LIBRARY_FILE, body.joint_names, body.model.qpos0,
                            body.joint_ranges())  # fmt: skip


def load(run: LoadedRun) -> TrainedRat:
    """``App.load``: the run's networks and agent from its final checkpoint (no trainer, no
    library, no SB3 algorithm), for ``run.config`` with its overrides."""
    cfg, state = run.config, run.state
    env = RatEnv(cfg)
    size = env.proprio_size
    weights = {name: state[name]["model"] for name in NETWORKS if name in state}
    models = motor_system(cfg, size, weights)
    agent = None
    if "agent" in state:
        kind = cfg.train.agent
        acting = agent_env(kind, cfg, (models.motion, models.behaviour))
        agent = load_agent_policy(kind, cfg, acting, state["agent"]["policy"])
    return TrainedRat(run.dir, cfg, models, agent, size, size + env.task.obs_size)


def evaluate(cfg: RatConfig, *, run: LoadedRun, resources: object, out: Path) -> dict[str, float]:
    """A trained run on held-out clips (tracking) and, if it has a task agent, held-out
    episodes of its task; writes ``eval.json`` in ``out``."""
    from fieldrl.atomic import atomic_write_json

    trained = run.trained
    body = RatEnv(cfg).body
    held = build_library(cfg, body, "heldout")
    refs = [Reference(c, body, held.fps) for c in held.clips]
    figures: dict[str, float] = {}
    for name in ("motion", "adapters", "multitask"):
        if name in cfg.train.stages:
            controller = getattr(trained.models, name).controller(True)
            result = evaluate_tracking(
                body,
                refs,
                controller,
                cfg.imitation.horizon,
                cfg.imitation.gain,
                200,
                np.random.default_rng(0),
            )
            figures |= {f"heldout/{name}/{k}": v for k, v in result.items()}
    if trained.agent is not None:
        env = agent_env(cfg.train.agent, cfg, (trained.models.motion, trained.models.behaviour))
        wins = held_out_success(trained.agent, env, cfg.agent.eval_episodes, 90_000)
        figures[f"{cfg.task.name}/success_rate"] = float(np.mean(wins))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(
        out / "eval.json", {"heldout_clips": [c.name for c in held.clips], "figures": figures}
    )
    return figures
