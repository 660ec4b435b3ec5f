import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, PPO, SAC

from fieldrl.checkpoint import load_checkpoint
from fieldrl.policies import module_from_state
from fieldrl.sb3 import Replayable, SB3Trainer, from_sb3, save_sb3_checkpoint


@pytest.mark.parametrize(("algo", "env_id"), [(PPO, "CartPole-v1"), (A2C, "Pendulum-v1")])
def test_converted_policy_matches_sb3(algo, env_id):
    model = algo(
        "MlpPolicy",
        gym.make(env_id),
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [32, 16], "vf": [24]}},
    )
    with torch.no_grad():  # perturb every weight so that a mapping mistake shows
        for param in model.policy.parameters():
            param.add_(torch.randn_like(param) * 0.3)
    ours = from_sb3(model)
    obs = np.random.default_rng(0).normal(size=(16, model.observation_space.shape[0]))
    obs_t = torch.as_tensor(obs, dtype=torch.float32)
    with torch.no_grad():
        theirs_dist = model.policy.get_distribution(obs_t).distribution
        theirs_value = model.policy.predict_values(obs_t).squeeze(-1)
        sample = theirs_dist.sample()
        ours_dist = ours.distribution(obs_t)
        assert torch.allclose(ours.value(obs_t), theirs_value, atol=1e-5)
        theirs_logp = theirs_dist.log_prob(sample)
        if theirs_logp.dim() == 2:
            theirs_logp = theirs_logp.sum(-1)
        assert torch.allclose(ours_dist.log_prob(sample), theirs_logp, atol=1e-5)
    expected, _ = model.predict(obs, deterministic=True)
    if isinstance(model.action_space, gym.spaces.Box):
        unclipped = ours.act(obs_t, deterministic=True).numpy()
        low, high = model.action_space.low, model.action_space.high
        assert np.allclose(np.clip(unclipped, low, high), expected, atol=1e-5)
    else:
        assert np.array_equal(ours.act(obs_t, deterministic=True).numpy(), expected)


def test_shared_layers_are_refused():
    model = PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu")
    model.policy.mlp_extractor.shared_net = torch.nn.Sequential(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="shared layers"):
        from_sb3(model)


def test_sb3_policy_saved_as_core_checkpoint(tmp_path):
    model = PPO("MlpPolicy", gym.make("CartPole-v1"), seed=1, device="cpu")
    path = save_sb3_checkpoint(model, tmp_path, step=42)
    checkpoint = load_checkpoint(path)
    assert checkpoint.step == 42 and checkpoint.metadata["source"] == "stable-baselines3 PPO"
    policy = module_from_state(checkpoint.state["policy"])
    obs = np.random.default_rng(1).normal(size=(8, 4)).astype(np.float32)
    expected, _ = model.predict(obs, deterministic=True)
    assert np.array_equal(policy.act(torch.as_tensor(obs), deterministic=True).numpy(), expected)


def test_an_sb3_trainer_resumes_sac_with_its_entropy_coefficient(tmp_path, monkeypatch):
    """SAC keeps tensors outside its policy (the entropy coefficient) and three optimizers:
    all of them come back in a rebuilt trainer. Training reports SB3's losses and leaves
    nothing in the temp directory (SB3's default logger makes a folder there)."""
    import tempfile

    scratch = tmp_path / "temp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def build(seed: int) -> SB3Trainer:
        model = SAC(
            "MlpPolicy",
            Replayable(gym.make("Pendulum-v1")),
            learning_starts=10,
            batch_size=8,
            policy_kwargs={"net_arch": [8]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
        return SB3Trainer(model, total=60, chunk=30)

    trainer = build(0)
    assert "actor_loss" in trainer.step()
    assert trainer.done == 30 and [p for p in scratch.iterdir() if p.name.startswith("SB3-")] == []
    saved = trainer.state_dict()
    clone = build(1)
    clone.load_state_dict(saved)
    assert clone.done == 30 and clone.model.num_timesteps == 30
    assert torch.equal(clone.model.log_ent_coef, trainer.model.log_ent_coef)
    assert not torch.equal(trainer.model.log_ent_coef, build(2).model.log_ent_coef)
    for ours, theirs in zip(
        clone.model.policy.parameters(), trainer.model.policy.parameters(), strict=True
    ):
        assert torch.equal(ours, theirs)
    assert clone.model.critic.optimizer.state_dict()["state"]
    clone.step()
    assert clone.done == 60


class _Drifting(gym.Env):
    """A mid-episode state the trainer cannot see: a hidden drift drawn from the
    environment's own generator at each reset, and a torch generator of its own."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self) -> None:
        self.noise = torch.Generator().manual_seed(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t, self.drift = 0.0, 0, float(self.np_random.normal())
        return np.array([self.x, 0.0], np.float32), {}

    def step(self, action):
        kick = float(torch.randn(1, generator=self.noise)) * 0.1
        self.x += float(action[0]) + self.drift * 0.1 + kick
        self.t += 1
        obs = np.array([self.x, self.t / 50], np.float32)
        return obs, -abs(self.x), False, self.t >= 37, {}


@pytest.mark.parametrize("algo", [PPO, SAC])
def test_a_killed_sb3_run_resumes_to_the_same_weights(kill_and_resume, algo):
    """Killed mid-episode (37-step episodes, 24-step chunks), the resumed run replays the
    episode, restores the collection in progress and ends bit-exactly where an
    uninterrupted run does."""
    torch.set_num_threads(1)
    extra = (
        {"n_steps": 24, "batch_size": 12}
        if algo is PPO
        else {"learning_starts": 10, "batch_size": 8}
    )

    def build() -> SB3Trainer:
        model = algo("MlpPolicy", Replayable(_Drifting()), policy_kwargs={"net_arch": [8]},
                     seed=0, device="cpu", verbose=0, **extra)  # fmt: skip
        return SB3Trainer(model, total=24 * 5, chunk=24)

    straight, resumed = kill_and_resume(build, kill_at=48)
    assert resumed.done == straight.done == 120
    ours, theirs = resumed.model.policy.state_dict(), straight.model.policy.state_dict()
    for name, value in theirs.items():
        assert torch.equal(ours[name], value), name
    assert resumed.model._episode_num == straight.model._episode_num
    monitor = resumed.model.get_env().envs[0]
    assert monitor.episode_returns == straight.model.get_env().envs[0].episode_returns


def test_an_environment_sb3_could_not_rebuild_is_refused():
    with pytest.raises(TypeError, match="Replayable"):
        SB3Trainer(PPO("MlpPolicy", gym.make("CartPole-v1"), device="cpu"), 64, 32)
