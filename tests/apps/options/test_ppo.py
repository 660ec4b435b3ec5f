"""MaskablePPO through the core loop: a run trains, checkpoints, resumes to the same
weights, loads back, and its masked actions stay executable."""

import numpy as np
import pytest
import torch

from fieldrl.apps.options import APP
from fieldrl.apps.options.config import OptionsConfig
from fieldrl.apps.options.env import OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import run_episode
from fieldrl.apps.options.pipeline import train_agent as train
from fieldrl.apps.options.ppo import masked_policy
from fieldrl.runs import Run


def tiny(tmp_path, timesteps=64):
    return OptionsConfig(
        experiment={"loggers": ["jsonl"], "runs_dir": str(tmp_path), "checkpoint_every": 1},
        suite={"episode_days": 8, "templates": ["long_call", "bull_put_spread"],
               "deltas": [0.3], "dtes": [30]},
        ppo={"timesteps": timesteps, "n_steps": 32, "batch_size": 16, "epochs": 1,
             "hidden": [8], "train_episodes": 2},
    )  # fmt: skip


def test_a_killed_run_resumes_from_its_checkpoint(tmp_path, monkeypatch):
    import shutil

    from fieldrl.apps.options.ppo import MaskablePPOTrainer
    from fieldrl.checkpoint import CheckpointManager

    torch.set_num_threads(1)
    cfg = tiny(tmp_path)
    with Run.create(cfg, root=tmp_path) as run:
        train(cfg, run=run)
    folders = sorted((run.dir / "checkpoints").glob("step_*"))
    assert [f.name for f in folders] == ["step_0000000032", "step_0000000064"]
    shutil.rmtree(folders[-1])  # killed before the last checkpoint
    saved = CheckpointManager(run.dir / "checkpoints").load_latest().state["trainer"]
    loaded = []
    original = MaskablePPOTrainer.load_state_dict

    def spy(self, state):
        original(self, state)
        loaded.append({k: v.clone() for k, v in self.model.policy.state_dict().items()})

    monkeypatch.setattr(MaskablePPOTrainer, "load_state_dict", spy)
    with Run.resume(run.dir, OptionsConfig) as again:
        trainer = train(again.config, run=again)
    assert trainer.done == 64 and trainer.model.num_timesteps == 64
    assert (run.dir / "checkpoints" / "step_0000000064").is_dir()
    assert len(loaded) == 1
    for key, value in saved["policy"].items():
        assert torch.equal(loaded[0][key], value), key


@pytest.mark.parametrize("frame_stack", [1, 2])
def test_a_trained_agent_sends_only_executable_orders(tmp_path, frame_stack):
    cfg = tiny(tmp_path)
    cfg.ppo.frame_stack = frame_stack  # a stacked observation loads back at its width
    with Run.create(cfg, root=tmp_path) as run:
        train(cfg, run=run)
    loaded = APP.open_run(run.dir)
    model = loaded.trained
    env = OptionsEnv(loaded.config, make_episodes(loaded.config, "eval", 2))
    for episode in range(2):
        record = run_episode(env, masked_policy(model), episode)
        assert not record.rejections and np.isfinite(record.nav).all()


def test_training_on_thousands_of_paths_keeps_only_the_episode_in_play(tmp_path):
    """Drawn at random from thousands of paths, an episode rarely comes back: the training
    environment keeps the plans of the one in play; a small training set keeps them all."""
    from fieldrl.apps.options.env import KEPT
    from fieldrl.apps.options.ppo import MaskablePPOTrainer

    cfg = tiny(tmp_path)
    many = MaskablePPOTrainer(cfg, make_episodes(cfg, "train", 4 * KEPT, 0), seed=0).env
    few = MaskablePPOTrainer(cfg, make_episodes(cfg, "train", 3, 0), seed=0).env
    for env in (many, few):
        for episode in range(3):
            env.reset(options={"episode": episode})
            env.action_masks()  # plans the menu: the memo's work
    assert list(many._memo) == [2] and list(few._memo) == [0, 1, 2]
