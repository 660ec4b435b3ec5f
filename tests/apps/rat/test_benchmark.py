"""The rat benchmark on the tiny preset: every part's rows and the issue's targets, saved
jobs reused by a rerun, and the agents' learning-curve helpers."""

import json
import math

import numpy as np
import pytest
import torch

from fieldrl.app import Resources
from fieldrl.apps.rat import APP
from fieldrl.apps.rat.agents import LATENT_BOUND, EpisodeLog, LatentEnv, learning_curve
from fieldrl.apps.rat.benchmark import benchmark
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.fidelity import COMPOSER_TASKS
from fieldrl.apps.rat.pipeline import new_models
from fieldrl.config import ConfigError


def test_the_tiny_benchmark_has_every_part_and_target_and_resumes(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    cfg = APP.load_config("tiny")
    path = APP.run_benchmark(cfg, out=tmp_path, quick=False, resources=Resources())
    data = json.loads(path.read_text())
    methods = {r["method"] for r in data["rows"]}
    assert {
        "behaviour_prior",
        "random_latent",
        "random_actions",
        "multitask",
        "adapters_options",
        "prior_ppo/go_to_target",
        "ppo/go_to_target",
        "sac/go_to_target",
        "adapter_bank",
    } <= methods
    names = {t["name"] for t in data["targets"]}
    assert {
        "go_to_target: priors above raw PPO and SAC",
        "exploration ordering (w1_library)",
        "exploration ordering (gait_gap_hz)",
        "a behaviour prior that walks",
        "an expert that keeps its balance",
        "adapters on held-out sequences",
        "speed",
        "cost",
    } == names
    tracked = [r for r in data["rows"] if r["part"] == "held-out tracking"]
    assert all(r["tracking_error_all_hinges"] >= 0 for r in tracked)
    speeds = data["data"]["speed"]  # dm_control's tasks timed like for like
    for task in COMPOSER_TASKS:
        assert speeds[f"dm_settings_{task}_steps_per_s"] > 0
        assert speeds[f"composer_{task}_steps_per_s"] > 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# ")
    paths = data["data"]["jobs"]["explore|0"]["paths"]  # top-down, every 5th frame
    assert set(paths) == {"library", "behaviour_prior", "random_latent", "random_actions"}
    assert len(paths["behaviour_prior"][0]) == math.ceil(0.5 * 50 / 5)
    images = [line for line in report.splitlines() if line.startswith("![")]
    assert "paths.png" in images[0] and (tmp_path / "figures" / "paths.png").stat().st_size
    saved = sorted(p.name for p in (tmp_path / "runs").glob("*.json"))
    assert "motor|0.json" in saved and "agent|0|go_to_target|sac.json" in saved
    (tmp_path / "runs" / "agent|0|go_to_target|sac.json").unlink()
    ran = []
    from fieldrl.apps.rat import benchmark as module

    original = module._dispatch
    monkeypatch.setattr(module, "_dispatch", lambda job: ran.append(job[0]) or original(job))
    benchmark(cfg, out=tmp_path, quick=False, resources=Resources())
    assert ran == ["agent"]


def test_no_tracking_arm_is_scored_on_a_clip_any_adaptation_saw(monkeypatch):
    from fieldrl.apps.rat import benchmark as module

    cfg = APP.load_config("tiny")
    cfg = cfg.model_copy(update={"library": cfg.library.model_copy(update={"heldout_clips": 4})})
    env = RatEnv(cfg)
    models = new_models(cfg, env.body.proprio_size)
    monkeypatch.setattr(module, "_motor", lambda cfg, seed, folder: (cfg, env, models))
    adapted, scored = set(), set()
    train = module.train_option_policy
    score = module.evaluate_tracking

    def adapt(core, body, refs, *args, **kwargs):
        adapted.update(r.name for r in refs)
        return train(core, body, refs, *args, **kwargs)

    def evaluate(body, refs, *args, **kwargs):
        scored.update(r.name for r in refs)
        return score(body, refs, *args, **kwargs)

    monkeypatch.setattr(module, "train_option_policy", adapt)
    monkeypatch.setattr(module, "evaluate_tracking", evaluate)
    result = module.tracking_job(("tracking", 0, cfg.model_dump(mode="json"), ""))
    assert len(adapted) == 2 and len(scored) == 2 and not adapted & scored
    assert set(result["adaptation_clips"]) == adapted and set(result["test_clips"]) == scored


def test_a_benchmark_with_one_held_out_clip_is_refused_before_any_work(tmp_path):
    cfg = APP.load_config("tiny")
    cfg = cfg.model_copy(update={"library": cfg.library.model_copy(update={"heldout_clips": 1})})
    with pytest.raises(ConfigError, match="library.heldout_clips is 1"):
        benchmark(cfg, out=tmp_path, quick=False, resources=Resources())
    assert not any(tmp_path.iterdir())


def test_the_latent_env_starts_as_the_behaviour_prior_and_stays_bounded(rat_config):
    cfg = rat_config("go_to_target")
    env = RatEnv(cfg)
    models = new_models(cfg, env.body.proprio_size)
    latent = LatentEnv(env, models.motion, models.behaviour)
    obs, _ = latent.reset(seed=0)
    assert obs.shape == latent.observation_space.shape
    assert latent.action_space.high[0] == LATENT_BOUND
    obs, *_ = latent.step(np.full(models.motion.latent, 100.0))  # clipped, not exploding
    assert np.isfinite(obs).all()
    logged = EpisodeLog(RatEnv(cfg))
    logged.reset(seed=0)
    done = False
    while not done:
        *_, terminated, truncated, _ = logged.step(np.zeros(38))
        done = terminated or truncated
    assert len(logged.episodes) == 1 and logged.episodes[0][0] == logged.steps


def test_the_learning_curve_bins_episode_ends_by_step():
    episodes = [(10, False, 0.0), (30, True, 1.0), (60, True, 1.0), (90, False, 0.0)]
    x, rate = learning_curve(episodes, 100, points=4)
    np.testing.assert_allclose(x, [12.5, 37.5, 62.5, 87.5])
    assert rate[0] == 0.0 and rate[1] == 1.0 and rate[2] == 1.0 and rate[3] == 0.0
    _, empty = learning_curve([], 100, points=2)
    assert np.isnan(empty).all()


@pytest.mark.parametrize("kind", ["ppo", "sac", "prior_ppo", "motion_ppo"])
def test_each_agent_trains_through_the_core_trainer(rat_config, kind):
    from fieldrl.apps.rat.agents import make_trainer

    cfg = rat_config("go_to_target")
    cfg = cfg.model_copy(
        update={
            "agent": cfg.agent.model_copy(
                update={
                    "steps": 64,
                    "n_steps": 32,
                    "batch": 16,
                    "hidden": [8],
                    "sac_learning_starts": 8,
                }
            )
        }
    )
    env = RatEnv(cfg)
    models = new_models(cfg, env.body.proprio_size)
    trainer = make_trainer(kind, cfg, 0, (models.motion, models.behaviour))
    while trainer.done < trainer.total:
        trainer.step()
    assert trainer.done == 64 and trainer.log.steps >= 64


def test_the_adaptation_share_rounds_half_up_and_leaves_a_clip_each_side():
    from fieldrl.apps.rat.benchmark import adaptation_count

    assert [adaptation_count(n, 0.5) for n in (2, 3, 5, 8)] == [1, 2, 3, 4]
    assert adaptation_count(4, 0.0) == 1 and adaptation_count(4, 1.0) == 3
    with pytest.raises(ConfigError, match="needs 2 or more"):
        adaptation_count(1, 0.5)


def test_the_prior_kl_pulls_prior_ppo_toward_the_prior(rat_config):
    """With agent.prior_kl, PPO's entropy term is minus the closed-form KL of its Gaussian to
    the prior's N(0, I), and its gradient reaches the policy: a policy started wide (std e)
    narrows to the prior's std within one update round (log std 1 -> 0.004); without it, it
    stays wide (0.94)."""
    from fieldrl.apps.rat.agents import make_trainer
    from fieldrl.config import derive

    torch.set_num_threads(1)
    widths = {}
    for weight in (0.0, 1.0):
        agent = {"steps": 32, "n_steps": 32, "batch": 16, "hidden": [8], "lr": 0.05,
                 "prior_kl": weight}  # fmt: skip
        cfg = derive(rat_config("go_to_target"), agent=agent)
        models = new_models(cfg, RatEnv(cfg).body.proprio_size)
        trainer = make_trainer("prior_ppo", cfg, 0, (models.motion, models.behaviour))
        policy = trainer.model.policy
        with torch.no_grad():
            policy.log_std.fill_(1.0)
        if weight:
            assert trainer.model.ent_coef == weight
            obs = torch.randn(5, *trainer.model.observation_space.shape)
            actions = torch.randn(5, models.motion.latent)
            _, _, entropy = policy.evaluate_actions(obs, actions)
            mean = policy.get_distribution(obs).distribution.loc
            kl = 0.5 * (mean**2 + np.e**2 - 1).sum(-1) - models.motion.latent * 1.0
            torch.testing.assert_close(entropy, -kl)
        trainer.step()
        widths[weight] = float(policy.log_std.detach().mean())
    assert widths[1.0] < 0.5 and widths[0.0] > 0.8
