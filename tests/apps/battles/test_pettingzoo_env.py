from pettingzoo.test import parallel_api_test

from fieldrl.apps.battles.pettingzoo_env import BattleParallelEnv


def test_passes_the_pettingzoo_parallel_api_test():
    parallel_api_test(BattleParallelEnv(6, 6, 5, attrition=1.0, horizon=40), num_cycles=60)


def test_team_rewards_are_zero_sum_and_the_dead_leave():
    env = BattleParallelEnv(4, 4, 8, attrition=1.0, horizon=50)
    env.reset(seed=1)
    deaths = 0
    while env.agents:
        before = list(env.agents)
        actions = {a: env.action_space(a).sample() for a in before}
        _, rewards, terms, truncs, _ = env.step(actions)
        blue = [r for a, r in rewards.items() if a.startswith("blue")]
        red = [r for a, r in rewards.items() if a.startswith("red")]
        if blue and red:
            assert blue[0] == -red[0]
        alive = env.state_.alive[0]
        for agent in before:
            team, i = int(agent.startswith("red")), int(agent.split("_")[1])
            if not alive[team, i]:
                deaths += 1
                assert terms[agent], agent  # a dead agent is terminated...
            assert (agent in env.agents) == (not terms[agent] and not truncs[agent])
        assert set(env.agents) <= set(before)  # ...and nobody comes back
    assert deaths > 0
