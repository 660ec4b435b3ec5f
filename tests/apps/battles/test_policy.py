import numpy as np
import pytest
import torch

from fieldrl.apps.battles.battlefield import Battlefield
from fieldrl.apps.battles.games import GAMES, PopulationGame
from fieldrl.apps.battles.policy import (
    MapDirections,
    group_by_local_state,
    make_actor,
    sample_actions,
    sample_steering,
)
from fieldrl.errors import FieldrlError


@pytest.mark.parametrize("directions, steering", [(False, False), (True, False), (True, True)])
def test_per_cell_evaluation_equals_per_agent_evaluation(directions, steering):
    torch.manual_seed(0)
    env = Battlefield(8, 8, 500, copies=3, seed=0)
    state = env.reset()
    state.health[0, 0, :50] = 0  # some dead, some wounded
    state.health[1, 0, 50:80] = 1
    actor = make_actor(env, directions=directions, steering=steering)
    maps = torch.from_numpy(env.counts(state) / env.n).float()
    time_left = torch.tensor([1.0, 0.5, 0.2])
    steer, _ = sample_steering(actor, maps, time_left, np.random.default_rng(0))
    local = env.local_state(state)[:, 0]
    states = group_by_local_state(local, env.n_local)
    assert states.size < local.size / 5  # 1,500 agents, far fewer local states
    with torch.no_grad():
        per_state = actor.logits_per_state(maps, time_left, states, steer)
        per_agent = actor.logits_per_agent(maps, time_left, torch.from_numpy(local).long(), steer)
    gathered = per_state[torch.from_numpy(states.inverse)]
    torch.testing.assert_close(gathered, per_agent.reshape(-1, 5), rtol=0, atol=1e-6)


def test_sampled_actions_follow_the_local_state_distribution():
    probs = np.array([[1.0, 0, 0, 0, 0], [0.1, 0.2, 0.3, 0.2, 0.2]])
    inverse = np.repeat([0, 1], 50_000)
    actions = sample_actions(probs, inverse, np.random.default_rng(0))
    assert (actions[:50_000] == 0).all()
    freq = np.bincount(actions[50_000:], minlength=5) / 50_000
    np.testing.assert_allclose(freq, probs[1], atol=0.01)


def test_grouped_sampling_moves_each_local_state_as_one_block():
    probs = np.array([[0.5, 0.5, 0, 0, 0], [0.1, 0.2, 0.3, 0.2, 0.2]])
    inverse = np.tile([0, 1], 10)
    rng = np.random.default_rng(0)
    draws = np.stack([sample_actions(probs, inverse, rng, grouped=True) for _ in range(4_000)])
    assert (draws[:, 0::2] == draws[:, [0]]).all() and (draws[:, 1::2] == draws[:, [1]]).all()
    assert set(np.unique(draws[:, 0])) == {0, 1}  # the block still explores its distribution
    freq = np.bincount(draws[:, 1], minlength=5) / len(draws)
    np.testing.assert_allclose(freq, probs[1], atol=0.03)


def test_map_directions_point_each_agent_at_the_teams_masses():
    env = Battlefield(6, 6, 10, copies=1, seed=0)
    directions = MapDirections(*env.cell_positions())
    maps = torch.zeros(1, 2, env.cells)
    maps[0, 0, 2 * 6 + 4] = 0.7  # own team: 7 at (2, 4), 3 at (2, 0)
    maps[0, 0, 2 * 6 + 0] = 0.3
    maps[0, 1, 5 * 6 + 1] = 0.5  # opponent: half dead, all left at (5, 1)
    health = 2
    local = torch.tensor([(2 * 6 + 1) * (env.max_health + 1) + health])  # an agent at (2, 1)
    copy = torch.zeros(1, dtype=torch.long)
    out = directions.features(maps, copy, directions.offsets(maps, copy, local))[0]
    own_centre, opp_centre, own_densest, opp_densest = out[:8].reshape(4, 2)
    torch.testing.assert_close(own_centre, torch.tanh(torch.tensor([0.0, 0.7 * 4 - 1])))
    torch.testing.assert_close(own_densest, torch.tanh(torch.tensor([0.0, 3.0])))
    torch.testing.assert_close(opp_centre, torch.tanh(torch.tensor([3.0, 0.0])))
    torch.testing.assert_close(opp_densest, opp_centre)
    torch.testing.assert_close(out[8:], torch.tensor([0.7, 1.0]))  # densest cell's share


def test_map_directions_need_a_grid():
    with pytest.raises(FieldrlError, match="cell positions"):
        make_actor(PopulationGame(GAMES["rps"], 100), directions=True)


def test_steering_pushes_every_agent_of_a_copy_along_the_drawn_directions():
    torch.manual_seed(0)
    env = Battlefield(6, 6, 50, copies=4, seed=0)
    state = env.reset()
    maps = torch.from_numpy(env.maps(state)).float()
    time_left = torch.ones(4)
    states = group_by_local_state(env.local_state(state)[:, 0], env.n_local)
    rng = np.random.default_rng(0)
    assert sample_steering(make_actor(env), maps, time_left, rng)[0] is None
    assert rng.random() == np.random.default_rng(0).random()  # no steering: no draws
    actor = make_actor(env, steering=True)
    with torch.no_grad():
        dist = actor.steering_distribution(maps, time_left)
        steer, logp = sample_steering(actor, maps, time_left, rng)
        greedy, _ = sample_steering(actor, maps, time_left, rng, greedy=True)
        torch.testing.assert_close(logp, dist.log_prob(steer).sum(-1))
        assert torch.equal(greedy, dist.mean) and steer.shape == (4, 4)
        # a strong pull to the opponent's centre: every agent's likeliest move heads there
        pull = torch.zeros(4, 4)
        pull[:, 1] = 50.0
        moves = actor.logits_per_state(maps, time_left, states, pull).argmax(-1)
    offsets = actor.directions.offsets(maps, torch.from_numpy(states.copy),
                                       torch.from_numpy(states.local))[:, 1]  # fmt: skip
    best = (offsets @ actor.directions.moves.T).argmax(-1)
    assert (moves == best).float().mean() > 0.99
    with pytest.raises(ValueError, match="steering weights"):
        actor.logits_per_state(maps, time_left, states)
