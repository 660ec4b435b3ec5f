import pytest
import torch

from fieldrl.policies import ActorCritic, RecurrentCore, SetScorer, build_policy, mlp
from fieldrl.rl import explained_variance, gae, ppo_clip_loss


@pytest.mark.parametrize(
    "action",
    [
        {"kind": "categorical", "n": 3},
        {"kind": "gaussian", "dim": 2},
        {"kind": "beta", "dim": 2, "low": -1.0, "high": 3.0},
    ],
)
def test_actor_critic_heads(action):
    torch.manual_seed(0)
    policy = ActorCritic(5, action, [16], [16])
    obs = torch.randn(7, 5)
    actions = policy.act(obs)
    logp, entropy, value = policy.evaluate_actions(obs, actions)
    assert logp.shape == entropy.shape == value.shape == (7,)
    assert torch.isfinite(logp).all() and torch.isfinite(entropy).all()
    if action["kind"] == "beta":
        assert (actions >= -1).all() and (actions <= 3).all()
        mode = policy.act(obs, deterministic=True)
        assert (mode >= -1).all() and (mode <= 3).all()
    rebuilt = build_policy(policy.spec)
    rebuilt.load_state_dict(policy.state_dict())
    assert torch.equal(rebuilt.act(obs, deterministic=True), policy.act(obs, deterministic=True))


def test_beta_entropy_matches_monte_carlo():
    torch.manual_seed(0)
    policy = ActorCritic(2, {"kind": "beta", "dim": 1, "low": 0.0, "high": 4.0}, [8], [8])
    obs = torch.randn(1, 2)
    with torch.no_grad():
        dist = policy.distribution(obs)
    samples = dist.sample((20000,))
    mc = -dist.log_prob(samples).mean()
    assert float(dist.entropy()) == pytest.approx(float(mc), abs=0.03)


def test_unknown_head_and_class():
    with pytest.raises(ValueError, match="unknown action kind"):
        ActorCritic(2, {"kind": "poisson"})
    with pytest.raises(ValueError, match="unknown policy class"):
        build_policy({"class": "Nope", "kwargs": {}})


def test_set_scorer_any_cardinality_and_chunks():
    torch.manual_seed(0)
    scorer = SetScorer(candidate_dim=6, context_dim=3, hidden=[16])
    context = torch.randn(3)
    for m in (1, 17, 5000):
        cands = torch.randn(m, 6)
        full = scorer(cands, context)
        assert full.shape == (m,)
        assert torch.allclose(scorer.score_chunked(cands, context, chunk=1000), full, atol=1e-6)
    batched = scorer(torch.randn(2, 9, 6), torch.randn(2, 3))
    assert batched.shape == (2, 9)


def test_recurrent_core_resets_at_episode_start():
    torch.manual_seed(0)
    core = RecurrentCore(4, 8)
    x = torch.randn(3, 2, 4)
    h = torch.randn(2, 8)
    starts = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    out, _ = core(x, h, starts)
    fresh, _ = core(x[1:], core.initial_state(2))
    assert torch.allclose(out[1:, 0], fresh[:, 0], atol=1e-6)
    assert not torch.allclose(out[1:, 1], fresh[:, 1])


def test_mlp_shapes():
    assert mlp(3, [4, 5], 2)(torch.randn(6, 3)).shape == (6, 2)
    assert mlp(3, [4], None, layer_norm=True)(torch.randn(6, 3)).shape == (6, 4)


def test_gae_matches_hand_computation():
    rewards = torch.tensor([[1.0], [1.0], [1.0]])
    values = torch.tensor([[0.5], [0.5], [0.5]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])
    adv, ret = gae(rewards, values, dones, torch.tensor([2.0]), gamma=0.9, lam=0.8)
    d2 = 1 + 0.9 * 2.0 - 0.5
    d1 = 1 - 0.5  # episode ended at t=1: no bootstrap
    d0 = 1 + 0.9 * 0.5 - 0.5
    expected = torch.tensor([[d0 + 0.9 * 0.8 * d1], [d1], [d2]])
    assert torch.allclose(adv, expected)
    assert torch.allclose(ret, adv + values)


def test_ppo_clip_loss_clips():
    adv = torch.tensor([1.0, -1.0])
    old = torch.zeros(2)
    loss_same, stats = ppo_clip_loss(old, old, adv)
    assert float(loss_same) == pytest.approx(0.0) and stats["clip_fraction"] == 0.0
    big = torch.log(torch.tensor([2.0, 2.0]))
    loss, stats = ppo_clip_loss(big, old, adv, clip=0.2)
    # positive advantage capped at 1.2; negative takes the unclipped (worse) 2.0
    assert float(loss) == pytest.approx(-(1.2 - 2.0) / 2)
    assert stats["clip_fraction"] == 1.0 and stats["approx_kl"] > 0


def test_explained_variance():
    t = torch.tensor([1.0, 2.0, 3.0])
    assert explained_variance(t, t) == pytest.approx(1.0)
    assert explained_variance(t, torch.ones(3)) != explained_variance(t, torch.ones(3))  # NaN
