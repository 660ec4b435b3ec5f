from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from fieldrl.apps.rat.adapters import AdapterCore, OptionPolicy, effective_rank, subspace_overlap
from fieldrl.apps.rat.config import RatConfig
from fieldrl.apps.rat.cpg import Gait, Pose
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.imitation import (
    ImitationTrainer,
    Reference,
    evaluate_tracking,
    track,
    window_size,
)
from fieldrl.apps.rat.library import Behaviours, Clip, generate
from fieldrl.apps.rat.npmp import BehaviourPrior, LatentWalker, MotionPrior, gaussian_kl

HORIZON = 3


@pytest.fixture(scope="module")
def setup():
    torch.set_num_threads(1)
    cfg = RatConfig.model_validate(
        {
            "imitation": {
                "iterations": 4,
                "rollouts": 3,
                "rollout_steps": 24,
                "updates": 15,
                "batch": 16,
                "sequence": 8,
                "horizon": HORIZON,
            }
        }
    )
    body = RatEnv(cfg).body
    gait = Gait.initial()
    behaviours = Behaviours(
        {3.0: gait}, Pose({"lumbar_extend": 0.5}), Pose({"shoulder_{}": -0.5}), Pose({})
    )
    library = generate(
        body,
        behaviours,
        clips=3,
        segments=2,
        segment_seconds=(0.4, 0.6),
        blend=0.1,
        noisy_share=0.0,
        noise=0.0,
        heldout=[],
        seed=0,
    )
    refs = [Reference(c, body, library.fps) for c in library.clips]
    return cfg, body, refs


def test_the_expert_tracks_its_own_clip(setup):
    cfg, body, refs = setup
    rollout = track(body, refs[0], 0, 20, None, HORIZON, 1.0, 1.0, np.random.default_rng(0))
    assert not rollout.stopped and not rollout.fell and rollout.error.max() < 0.1
    assert rollout.window.shape == (20, window_size(HORIZON))


def test_a_clip_frame_is_a_whole_state_and_replays_exactly(setup):
    """The servos' activations are part of a frame's state: from (qpos, qvel, act) the
    clip's own action reproduces the next frame; the previous action in act's place (what
    tracking used to start from) does not. A clip without act gets it by filtering its
    actions, exactly where the first frame's act is known."""
    _, body, refs = setup
    ref = refs[0]
    t = 1 + int(np.abs(ref.act[1:-1] - ref.action[:-2]).max(axis=1).argmax())  # mid-stride
    ref.start(body, t)
    body.step(ref.action[t])
    assert np.abs(body.data.qpos - ref.qpos[t + 1]).max() < 1e-8
    body.set_state(ref.qpos[t], ref.qvel[t], ref.action[t - 1])
    body.step(ref.action[t])
    assert np.abs(body.data.qpos - ref.qpos[t + 1]).max() > 1e-4
    rebuilt = body.filter_activations(ref.action, ref.act[0])
    np.testing.assert_allclose(rebuilt, ref.act, atol=1e-12)
    bare = Reference(Clip("no_act", ref.qpos, ref.action, ref.qvel), body, 50.0)
    assert np.abs(bare.act[-1] - ref.act[-1]).max() < 1e-3  # the guess at frame 0 decays


def test_the_tracking_error_grades_the_actuated_limb_joints(setup):
    """The reference's spine and tail hinges (moved through tendons, a few degrees of range)
    moved 0.2 rad from where the expert takes the body: the headline error, over the
    actuated limb joints, does not see it; the all-hinge one does."""
    _, body, refs = setup
    ref = copy.copy(refs[0])
    ref.qpos = ref.qpos.copy()
    others = np.setdiff1d(np.arange(7, body.model.nq), body.actuated_qpos)
    ref.qpos[1:, others] += 0.2  # the expert's actions are the clip's: the same rollout
    result = evaluate_tracking(body, [ref], None, HORIZON, 1.0, 10, np.random.default_rng(0))
    assert result["tracking_error"] < 0.01
    assert result["tracking_error_all_hinges"] > 0.1


def test_a_joint_angle_only_clip_gets_pose_targets_as_actions(setup):
    _, body, refs = setup
    bare = Reference(Clip("bare", refs[0].qpos), body, 50.0, lead=2)
    np.testing.assert_allclose(bare.action[0], bare.ctrl[2])
    assert np.abs(bare.qvel).max() > 0  # velocities from finite differences
    with pytest.raises(ValueError, match="resample"):
        Reference(Clip("bare", refs[0].qpos), body, 100.0)


@pytest.mark.parametrize("kind", ["npmp", "adapters", "multitask"])
def test_imitation_lowers_the_loss_and_resumes(setup, kind):
    cfg, body, refs = setup
    torch.manual_seed(0)
    model = _model(kind, body)
    trainer = ImitationTrainer(model, body, refs, cfg.imitation, seed=0)
    trainer.collect()
    fixed = {
        k: torch.as_tensor(v)
        for k, v in trainer.data.sample(32, 8, np.random.default_rng(5)).items()
    }
    torch.manual_seed(1)
    before = model.loss(fixed)[1]["mse"]
    for _ in range(cfg.imitation.iterations):
        trainer.step()
    torch.manual_seed(1)
    assert model.loss(fixed)[1]["mse"] < 0.7 * before  # 0.61 for multitask at action_noise 0.2
    clone = ImitationTrainer(_model(kind, body), body, refs, cfg.imitation, seed=1)
    clone.load_state_dict(trainer.state_dict())
    assert clone.done == trainer.done
    result = evaluate_tracking(
        body, refs, clone.model.controller(True), HORIZON, 1.0, 10, np.random.default_rng(0)
    )
    assert 0 <= result["tracking_error"] < 0.6


def _model(kind: str, body):
    if kind == "npmp":
        return MotionPrior(body.proprio_size, window_size(HORIZON), 38, 8, [64], 0.95, 0.01)
    return AdapterCore(
        body.proprio_size, window_size(HORIZON), 38, 32, 3 if kind == "adapters" else 0
    )


@pytest.mark.parametrize("components", [1, 3])
def test_the_behaviour_prior_learns_the_encoders_posterior(setup, components):
    cfg, body, refs = setup
    torch.manual_seed(0)
    motion = MotionPrior(body.proprio_size, window_size(HORIZON), 38, 8, [64], 0.95, 0.01)
    trainer = ImitationTrainer(motion, body, refs, cfg.imitation, seed=0)
    trainer.step()
    prior = BehaviourPrior(body.proprio_size, 8, [64], components)
    opt = torch.optim.Adam(prior.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(60):
        batch = {k: torch.as_tensor(v) for k, v in trainer.data.sample(16, 8, rng).items()}
        loss = prior.loss(motion, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    first, last = np.mean(losses[:10]), np.mean(losses[-10:])
    if components == 1:  # a KL: it falls toward 0
        assert last < 0.5 * first
    else:  # a cross-entropy: it falls toward the posterior's entropy, not 0
        assert last < first - 0.1
    walker = LatentWalker(motion, prior, np.random.default_rng(0))
    body.reset(np.random.default_rng(0))
    action = walker(body.proprioception())
    assert action.shape == (38,) and np.abs(action).max() <= 1


def test_the_behaviour_prior_learns_on_its_own_rollouts(setup, monkeypatch):
    """DAgger for the behaviour prior: after the motion prior's rollouts, each chunk of
    updates starts with rollouts of the behaviour prior itself (the decoder driven by its
    own latents), labelled by the encoder reading the clip; the loss falls."""
    from fieldrl.apps.rat import pipeline
    from fieldrl.config import derive

    cfg, body, refs = setup
    cfg = derive(cfg, npmp={"latent": 8, "hidden": [64], "behaviour_hidden": [64],
                            "behaviour_updates": 300, "behaviour_rollouts": 2})  # fmt: skip
    torch.manual_seed(0)
    models = pipeline.new_models(cfg, body.proprio_size)
    ImitationTrainer(models.motion, body, refs, cfg.imitation, seed=0).step()
    actors = []
    original = ImitationTrainer.collect

    def spy(self, rollouts=None, expert_share=None, student=None):
        actors.append(type(student).__name__)
        if student is not None:  # the prior as fitted, not the exploration temperature
            assert student.temperature == 1.0 and student.behaviour is models.behaviour
        return original(self, rollouts, expert_share, student)

    monkeypatch.setattr(ImitationTrainer, "collect", spy)
    trainer = pipeline._BehaviourTrainer(models, body, refs, cfg, seed=0)
    losses = [trainer.step()["loss"] for _ in range(trainer.total)]
    assert actors == ["NoneType", "LatentWalker", "LatentWalker"]
    assert losses[-1] < losses[0]


def test_a_behaviour_prior_rollout_is_deterministic_for_a_seed(setup):
    cfg, body, _ = setup
    torch.manual_seed(0)
    motion = MotionPrior(body.proprio_size, window_size(HORIZON), 38, 8, [64], 0.95, 0.01)
    prior = BehaviourPrior(body.proprio_size, 8, [64], components=3)

    def rollout(seed: int) -> np.ndarray:
        walker = LatentWalker(motion, prior, np.random.default_rng(seed))
        body.reset(np.random.default_rng(0))
        actions = []
        for _ in range(10):
            actions.append(walker(body.proprioception()))
            body.step(actions[-1])
        return np.array(actions)

    assert np.array_equal(rollout(1), rollout(1))
    assert not np.allclose(rollout(1), rollout(2))


def test_gaussian_kl_matches_the_closed_form():
    zero = torch.zeros(1, 1)
    assert gaussian_kl(zero, zero, zero, zero).item() == pytest.approx(0.0)
    # KL(N(1, 1) || N(0, 1)) = 0.5
    assert gaussian_kl(zero + 1, zero, zero, zero).item() == pytest.approx(0.5)


def test_effective_rank_and_overlap_on_known_matrices():
    assert effective_rank(np.eye(8)) == pytest.approx(8.0)
    u = np.random.default_rng(0).normal(size=(8, 1))
    assert effective_rank(u @ u.T) == pytest.approx(1.0)
    a = np.diag([1.0, 1.0, 0, 0, 0, 0])
    b = np.diag([0, 0, 1.0, 1.0, 0, 0])
    assert subspace_overlap(a, a, rank=2) == pytest.approx(1.0)
    assert subspace_overlap(a, b, rank=2) == pytest.approx(0.0, abs=1e-9)


def test_an_option_policy_drives_the_frozen_core(setup):
    _, body, refs = setup
    core = AdapterCore(body.proprio_size, window_size(HORIZON), 38, 32, 3)
    option = OptionPolicy(body.proprio_size, window_size(HORIZON), 3, [16])
    with torch.no_grad():
        option.net[-1].bias.copy_(torch.tensor([0.0, 0.0, 100.0]))
    controller = option.controller(core)
    track(body, refs[0], 0, 5, controller, HORIZON, 1.0, 0.0, np.random.default_rng(0))
    assert controller.codes_used == [2] * 5


def test_a_mixture_prior_proposes_its_likeliest_component_when_deterministic():
    prior = BehaviourPrior(4, 2, [8], components=3)
    with torch.no_grad():
        last = prior.net[-1]
        last.weight.zero_()
        last.bias.zero_()
        last.bias[:12].copy_(torch.tensor([0.0, 0, -1, -1, 5, 5, -1, -1, -5, -5, -1, -1]))
        last.bias[12:].copy_(torch.tensor([0.0, 3.0, 0.0]))  # component 1 is likeliest
    mu, log_std = prior.propose(torch.zeros(1, 2), torch.zeros(1, 4))
    assert mu.tolist() == [[5.0, 5.0]] and log_std.tolist() == [[-1.0, -1.0]]
    draws = {
        tuple(
            prior.propose(torch.zeros(1, 2), torch.zeros(1, 4), torch.Generator().manual_seed(s))[
                0
            ][0].tolist()
        )
        for s in range(40)
    }
    assert len(draws) == 3  # every component is drawn sometimes
