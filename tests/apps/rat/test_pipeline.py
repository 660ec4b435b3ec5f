from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.pipeline import LIBRARY_FILE, MotorTrainer, load, train, train_motor
from fieldrl.checkpoint import CheckpointManager
from fieldrl.config import load_config
from fieldrl.runs import Run, open_run

CONFIGS = Path(__file__).parents[3] / "apps" / "rat" / "configs"


def tiny(tmp_path, **train_section) -> RatConfig:
    cfg = load_config(RatConfig, CONFIGS / "tiny.toml", [f"experiment.runs_dir={tmp_path}"])
    if train_section:
        cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update=train_section)})
    return cfg


def test_a_killed_run_resumes_through_its_stages(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    cfg = tiny(tmp_path)
    with Run.create(cfg, root=tmp_path) as run:
        figures = train(cfg, run=run)
    assert {"motion/tracking_error", "adapters/tracking_error", "multitask/tracking_error"} <= set(
        figures
    )
    assert (run.dir / LIBRARY_FILE).exists()
    manager = CheckpointManager(run.dir / "checkpoints")
    uninterrupted = manager.load_latest().state["trainer"]["multitask"]["model"]
    # killed while the last stage (multitask) was on its first iteration: it goes on from
    # that stage's beginning
    first_of_last = cfg.imitation.iterations
    for folder in sorted((run.dir / "checkpoints").glob("step_*"))[-first_of_last:]:
        shutil.rmtree(folder)
    latest = manager.load_latest()
    saved = latest.state["trainer"]
    resumed_at = []
    original = MotorTrainer.load_state_dict

    def spy(self, state):
        original(self, state)
        resumed_at.append(self.done)

    monkeypatch.setattr(MotorTrainer, "load_state_dict", spy)
    with Run.resume(run.dir, RatConfig) as again:
        trainer = train_motor(again.config, run=again)
    assert resumed_at == [latest.step]
    assert trainer.done == trainer.total
    # the core saves and restores each stage's own generators with the run
    stage_rngs = [dict(trainer.stages)[s].rng for s in ("motion", "behaviour", "multitask")]
    assert all(any(g is r for g in trainer.generators) for r in stage_rngs)
    for key, value in saved["motion"]["model"].items():
        assert torch.equal(trainer.models.motion.state_dict()[key], value), key
    # the stage's own generators come back too: the same rollouts, batches and weights
    loaded = load(open_run(run.dir, RatConfig)).models.multitask.state_dict()
    for key, value in uninterrupted.items():
        assert torch.equal(trainer.models.multitask.state_dict()[key], value), key
        assert torch.equal(loaded[key], value), key


def test_a_run_killed_between_the_behaviour_priors_dagger_rounds_resumes_exactly(
    tmp_path, kill_and_resume
):
    """Killed after the behaviour stage's first round: the resumed run draws the same own
    rollouts (the walker's generator comes from the checkpointed one) and ends identical."""
    torch.set_num_threads(1)
    cfg = tiny(tmp_path, stages=["motion", "behaviour"])
    straight, resumed = kill_and_resume(lambda: MotorTrainer(cfg, None), kill_at=2 + 1)
    ours, theirs = resumed.models.behaviour.state_dict(), straight.models.behaviour.state_dict()
    assert resumed.done == straight.done == 4
    for key, value in theirs.items():
        assert torch.equal(ours[key], value), key


@pytest.mark.parametrize("agent", ["prior_ppo", "sac"])
def test_an_agent_killed_mid_episode_resumes_to_the_same_weights(tmp_path, kill_and_resume, agent):
    """Killed 64 steps into the agent stage (mid-episode: episodes last 50 steps at most): the
    resumed run replays the episode (the body, the latent and its generator, the target) and
    restores SB3's collection (SAC's replay buffer included), ending bit-identical."""
    torch.set_num_threads(1)
    cfg = tiny(tmp_path, stages=["motion", "behaviour", "agent"], agent=agent)
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"name": "go_to_target"})})
    straight, resumed = kill_and_resume(lambda: MotorTrainer(cfg, None), kill_at=2 + 2 + 64)
    ours, theirs = dict(resumed.stages)["agent"], dict(straight.stages)["agent"]
    assert ours.done == theirs.done == 128
    for key, value in theirs.model.policy.state_dict().items():
        assert torch.equal(ours.model.policy.state_dict()[key], value), key
    assert ours.log.episodes == theirs.log.episodes and len(theirs.log.episodes) >= 2


def test_an_agent_stage_trains_prior_ppo_on_the_priors(tmp_path):
    torch.set_num_threads(1)
    cfg = tiny(tmp_path, stages=["motion", "behaviour", "agent"])
    cfg = cfg.model_copy(update={"task": cfg.task.model_copy(update={"name": "go_to_target"})})
    with Run.create(cfg, root=tmp_path) as run:
        trainer = train_motor(cfg, run=run)
    agent = dict(trainer.stages)["agent"]
    assert agent.done == 128 and agent.model.num_timesteps == 128
    # App.load rebuilds the policy alone (no SB3 algorithm, no trainer): the same actions
    policy = load(open_run(run.dir, RatConfig)).agent
    obs = np.random.default_rng(0).normal(size=(16, *agent.model.observation_space.shape))
    for o in obs.astype(np.float32):
        ours, _ = policy.predict(o, deterministic=True)
        theirs, _ = agent.model.predict(o, deterministic=True)
        assert np.array_equal(ours, theirs)


def test_evaluate_scores_the_held_out_clips_the_user_asks_for(tmp_path):
    """``evaluate --set library.heldout_clips=3`` scores three held-out clips (the run's
    saved config, with two, once replaced the override)."""
    import json

    from typer.testing import CliRunner

    from fieldrl.cli import build_root

    cfg = tiny(tmp_path, stages=["motion"])
    with Run.create(cfg, root=tmp_path) as run:
        train(cfg, run=run)
    out = tmp_path / "eval"
    args = ["rat", "evaluate", "--run", str(run.dir), "--set", "library.heldout_clips=3",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    assert len(json.loads((out / "eval.json").read_text())["heldout_clips"]) == 3
