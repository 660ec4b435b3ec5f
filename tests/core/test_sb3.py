import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import A2C, PPO, SAC

from fieldrl.checkpoint import load_checkpoint
from fieldrl.policies import module_from_state
from fieldrl.sb3 import SB3Trainer, from_sb3, save_sb3_checkpoint


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


def test_an_sb3_trainer_resumes_sac_with_its_entropy_coefficient(tmp_path):
    """SAC keeps tensors outside its policy (the entropy coefficient) and three optimizers:
    all of them come back in a rebuilt trainer."""

    def build(seed: int) -> SB3Trainer:
        model = SAC(
            "MlpPolicy",
            gym.make("Pendulum-v1"),
            learning_starts=10,
            batch_size=8,
            policy_kwargs={"net_arch": [8]},
            seed=seed,
            device="cpu",
            verbose=0,
        )
        return SB3Trainer(model, total=60, chunk=30)

    trainer = build(0)
    trainer.step()
    assert trainer.done == 30
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
