import numpy as np
import pytest
import torch

from fieldrl.apps.battles.battlefield import Battlefield
from fieldrl.apps.battles.config import TrainConfig
from fieldrl.apps.battles.games import GAMES, PopulationGame
from fieldrl.apps.battles.mf_mappo import (
    MFMAPPOTrainer,
    _agent_targets,
    _map_gradient_penalty,
)
from fieldrl.apps.battles.rollout import Observation, OpponentEstimator, Team, rollout
from fieldrl.config import derive
from fieldrl.errors import FieldrlError
from fieldrl.training import fit


def algo(**train) -> TrainConfig:
    """A [train] section with these tests' defaults (100 iterations at lr 3e-3)."""
    return TrainConfig(**{"iterations": 100, "lr": 3e-3, **train})


METHOD = {"mean_field": "mf_mappo", "full_state": "mappo", "local": "ippo"}


def _train(env, cfg, seed=0, **kwargs):
    return fit(lambda: MFMAPPOTrainer(env, cfg, seed, **kwargs), None, seed=seed,
               description="MF-MAPPO").teams  # fmt: skip


def _logged(trainer):
    return [trainer.step() for _ in range(trainer.total)]


def test_rollout_counts_every_alive_agent_once_per_step():
    torch.manual_seed(0)
    env = Battlefield(5, 5, 40, copies=3, attrition=1.0, horizon=6, seed=0)
    teams = [Team(env, 16) for _ in range(2)]
    steps, rewards, _ = rollout(env, teams, np.random.default_rng(0))
    assert rewards.shape == (6, 3)
    first = steps[0][0]
    assert first.counts.sum() == 3 * 40  # everyone alive at the start
    assert (first.counts.sum() >= steps[0][-1].counts.sum()).item()  # the dead drop out


def test_grouped_rollouts_give_one_action_per_occupied_local_state():
    torch.manual_seed(0)
    env = Battlefield(5, 5, 40, copies=3, attrition=1.0, horizon=6, seed=0)
    teams = [Team(env, 16) for _ in range(2)]
    for grouped in (False, True):
        steps, _, _ = rollout(env, teams, np.random.default_rng(0), grouped=grouped)
        actions_per_state = [(s.counts > 0).sum(1).max().item() for s in steps[0]]
        assert (max(actions_per_state) == 1) == grouped


@pytest.mark.parametrize("critic", ["mean_field", "full_state", "local"])
def test_training_runs_on_both_kinds_of_environment_and_logs_finite_losses(critic):
    for env in (PopulationGame(GAMES["rps"], 50, copies=4, horizon=3),
                Battlefield(5, 5, 20, copies=2, horizon=5)):  # fmt: skip
        logged = _logged(MFMAPPOTrainer(env, algo(iterations=3, hidden=16,
                                                  method=METHOD[critic])))  # fmt: skip
        assert len(logged) == 3
        assert all(np.isfinite(v) for s in logged for v in s.values())


def test_per_agent_targets_equal_a_loop_over_agents():
    """IPPO's advantages: GAE along each agent's own life, normalised, then summed per
    (local state, action) by sign; checked against a plain loop over agents."""
    torch.manual_seed(0)
    env = Battlefield(3, 3, 30, copies=2, max_health=1, attrition=2.0, horizon=8, seed=0)
    teams = [Team(env, 16, "local") for _ in range(2)]
    steps, rewards, _ = rollout(env, teams, np.random.default_rng(0))
    cfg = algo(gamma=0.9, gae_lambda=0.8)
    targets = _agent_targets(steps[0], rewards, cfg, 5)
    horizon, agents = len(steps[0]), 60
    live = np.array([s.live for s in steps[0]])
    assert not live[-1].all()  # some agents die, so episodes end early
    value = [s.value.numpy()[s.states.inverse] for s in steps[0]]
    adv = np.zeros((horizon, agents))
    for j in range(agents):
        gae = 0.0
        for t in reversed(range(horizon)):
            if not live[t, j]:
                continue
            alive_next = t + 1 < horizon and live[t + 1, j]
            next_value = value[t + 1][j] if alive_next else 0.0
            delta = rewards[t, j // 30] + cfg.gamma * next_value - value[t][j]
            gae = delta + (cfg.gamma * cfg.gae_lambda * gae if alive_next else 0.0)
            adv[t, j] = gae
    norm = (adv - adv[live].mean()) / (adv[live].std() + 1e-8)
    for t, (s, target) in enumerate(zip(steps[0], targets, strict=True)):
        expected = np.zeros(target.positive.shape)
        for j in np.flatnonzero(live[t]):
            expected[s.states.inverse[j], s.chosen[j]] += norm[t, j]
        np.testing.assert_allclose(target.positive + target.negative, expected, atol=1e-4)
        assert (target.positive >= 0).all() and (target.negative <= 0).all()


def _weighted_rps() -> PopulationGame:
    return PopulationGame(GAMES["weighted_rps"], 50, copies=2, horizon=2, seed=0)


def test_average_tail_returns_the_mean_of_the_last_actors():
    """Averaging leaves training as it was and returns the mean of the last half's actors;
    ``evaluate`` sees the running average once averaging has begun."""
    seen, averaged_given = [], []

    def record(teams, iteration, averaged):
        seen.append([p.detach().clone() for p in teams[0].actor.parameters()])
        return {}

    def note(teams, iteration, averaged):
        averaged_given.append(averaged is not None)
        return {}

    cfg = algo(iterations=6, hidden=8, gamma=0.0, lr=1e-2)
    _train(_weighted_rps(), cfg, evaluate=record)
    blue, _ = _train(_weighted_rps(), derive(cfg, average_tail=0.5), evaluate=note)
    assert averaged_given == [False] * 3 + [True] * 3
    expected = [torch.stack(p).mean(0) for p in zip(*seen[3:], strict=True)]
    for param, mean, last in zip(blue.actor.parameters(), expected, seen[-1], strict=True):
        torch.testing.assert_close(param.detach(), mean)
        assert not torch.allclose(param, last)


def test_a_run_resumed_while_averaging_returns_the_same_actors(kill_and_resume):
    cfg = algo(iterations=6, hidden=8, gamma=0.0, lr=1e-2, magnet=0.1,
                        magnet_every=2, average_tail=0.5)  # fmt: skip
    trainer = MFMAPPOTrainer(_weighted_rps(), cfg)
    _ = [trainer.step() for _ in range(4)]
    assert trainer.state_dict()["average_count"] == 1
    full, resumed = kill_and_resume(lambda: MFMAPPOTrainer(_weighted_rps(), cfg), kill_at=4)
    for a, b in zip(full.teams, resumed.teams, strict=True):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(x, y), name


def test_self_play_lowers_exploitability_on_weighted_rps_and_averaging_lowers_it_more():
    game = GAMES["weighted_rps"]
    probe = PopulationGame(game, 10_000, copies=4, horizon=4, seed=99)

    def exploitability(teams):
        _, _, end = rollout(probe, teams, np.random.default_rng(5))
        return float(np.mean([game.exploitability(m[0], m[1]) for m in probe.maps(end)]))

    def train(average_tail):
        env = PopulationGame(game, 300, copies=8, horizon=4, seed=0)
        # the game preset's recipe
        cfg = algo(iterations=150, lr=1e-3, gamma=0.0, entropy=0.0, magnet=0.1,
                            anneal_lr=True, average_tail=average_tail)  # fmt: skip
        return _train(env, cfg)

    torch.manual_seed(0)
    before = exploitability([Team(PopulationGame(game, 300), 64) for _ in range(2)])
    last, averaged = exploitability(train(0.0)), exploitability(train(0.5))
    assert last < 0.8 * before
    assert averaged < 0.6 * last  # measured: before 1.04, last 0.48, averaged 0.22


@pytest.mark.slow
def test_mf_mappo_learns_to_beat_the_scripted_rush_from_both_sides():
    from fieldrl.apps.battles.baselines import play, rush_policy
    from fieldrl.apps.battles.rollout import team_policy

    env = Battlefield(8, 8, 50, copies=16, horizon=30, attrition=0.5, seed=0)
    cfg = algo(iterations=150, lr=1e-3, entropy=0.01)
    blue, red = _train(env, cfg)
    arena = Battlefield(8, 8, 50, copies=20, horizon=30, attrition=0.5, seed=7)
    assert play(arena, team_policy(blue), rush_policy, 60)["win_rate"] >= 0.7
    assert play(arena, rush_policy, team_policy(red), 60)["loss_rate"] >= 0.7  # red wins


def _fictitious(**overrides):
    cfg = algo(iterations=8, hidden=8, shared_sides=True, directions=True,
                        past_opponents=0.5, snapshot_every=3, **overrides)  # fmt: skip
    return Battlefield(6, 6, 20, copies=2, horizon=4, seed=0), cfg


def test_past_opponents_train_on_the_learners_side_only(monkeypatch):
    from fieldrl.apps.battles import mf_mappo

    trained_copies = []
    update = mf_mappo._update

    def spy(model, opt, steps, *args):
        trained_copies.append(steps[0].maps.shape[0])
        return update(model, opt, steps, *args)

    monkeypatch.setattr(mf_mappo, "_update", spy)
    env, cfg = _fictitious()
    logged = [s["against_past"] for s in _logged(MFMAPPOTrainer(env, cfg))]
    assert set(logged) == {0.0, 1.0}  # both kinds of iteration happen at 0.5
    # against a snapshot only blue's copies train; in self-play both sides' do
    assert trained_copies == [2 if past else 4 for past in logged]


def test_a_run_with_past_opponents_resumes_exactly(kill_and_resume):
    env, cfg = _fictitious()
    trainer = MFMAPPOTrainer(env, cfg)
    snapshots = []
    for _ in range(8):
        trainer.step()
        snapshots.append(trainer.state_dict()["snapshots"])
    assert [snapshots[i - 1] for i in (1, 3, 4, 8)] == [1, 1, 2, 3]
    full, resumed = kill_and_resume(lambda: MFMAPPOTrainer(_fictitious()[0], cfg), kill_at=5)
    for a, b in zip(full.teams, resumed.teams, strict=True):
        for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
            assert torch.equal(x, y), name


def test_the_steering_head_learns_from_the_team_advantage():
    env = Battlefield(6, 6, 20, copies=4, horizon=4, seed=0)
    cfg = algo(iterations=3, hidden=8, steering=True, lr=1e-2)
    torch.manual_seed(0)
    before = Team(env, 8, steering=True).actor.steer_mean.weight.detach().clone()
    torch.manual_seed(0)  # the trainer starts from ``before``
    trainer = MFMAPPOTrainer(env, cfg)
    logged = _logged(trainer)
    blue = trainer.teams[0]
    assert not torch.allclose(blue.actor.steer_mean.weight, before)
    assert all(s["blue/steer_loss"] != 0 and np.isfinite(s["blue/steer_entropy"])
               for s in logged)  # fmt: skip


def test_past_opponents_need_one_network_for_both_sides():
    env, cfg = _fictitious()
    with pytest.raises(FieldrlError, match="shared_sides"):
        MFMAPPOTrainer(env, derive(cfg, shared_sides=False))


def test_the_mean_field_critic_does_not_grow_with_the_population():
    def critic_size(n: int, critic: str) -> int:
        team = Team(Battlefield(6, 6, n, horizon=3), 16, critic)
        return sum(p.numel() for p in team.critic.parameters())

    assert critic_size(50, "mean_field") == critic_size(5_000, "mean_field")
    assert critic_size(5_000, "full_state") > 10 * critic_size(50, "full_state")


def test_the_opponent_estimator_delays_adds_noise_and_smooths():
    maps = [np.arange(4.0)[None] + 10 * t for t in range(5)]  # [copies=1, cells=4]
    rng = np.random.default_rng(0)
    assert OpponentEstimator(Observation(), rng)(maps[0]) is maps[0]
    delayed = OpponentEstimator(Observation(delay=2), rng)
    seen = [delayed(m) for m in maps]
    for t, lag in enumerate([0, 0, 0, 1, 2]):  # the first map until the delay has passed
        np.testing.assert_array_equal(seen[t], maps[lag])
    smoothed = OpponentEstimator(Observation(smoothing=0.25), rng)
    smoothed(maps[0])
    np.testing.assert_allclose(smoothed(maps[1]), 0.25 * maps[0] + 0.75 * maps[1])
    big = np.full((1, 10_000), 100.0)  # noise in units of the mean share per cell: 100
    noisy = OpponentEstimator(Observation(noise=0.05), rng)(big)
    assert np.std(noisy - big) == pytest.approx(5.0, rel=0.05)


def _one_step(seed: int = 0):
    torch.manual_seed(seed)
    env = Battlefield(4, 4, 30, copies=2, horizon=3, seed=seed)
    team = Team(env, 8)
    steps, _, _ = rollout(env, [team, team], np.random.default_rng(seed))
    return team, steps[0][1]


def _exact_map_gradient(actor, step) -> float:
    """Mean over local states of the squared Frobenius norm of d logits / d maps."""

    def logits(maps):
        return actor.logits_per_state(maps, step.time_left, step.states)

    jacobian = torch.autograd.functional.jacobian(logits, step.maps)  # [K, A, B, 2, D]
    return float(jacobian.pow(2).sum() / step.states.size)


def test_the_map_gradient_penalty_estimates_the_jacobian_norm():
    team, step = _one_step()
    torch.manual_seed(1)
    estimates = [_map_gradient_penalty(team.actor, step).item() for _ in range(400)]
    assert np.mean(estimates) == pytest.approx(_exact_map_gradient(team.actor, step), rel=0.1)


def test_the_gradient_penalty_makes_the_policy_less_sensitive_to_the_maps():
    def trained(penalty: float) -> Team:
        env = Battlefield(4, 4, 30, copies=2, horizon=3, seed=0)
        blue, _ = _train(env, algo(iterations=8, hidden=8), map_penalty=penalty)
        return blue

    _, step = _one_step(seed=3)
    free, penalised = trained(0.0), trained(10.0)
    assert _exact_map_gradient(penalised.actor, step) < 0.5 * _exact_map_gradient(free.actor, step)
