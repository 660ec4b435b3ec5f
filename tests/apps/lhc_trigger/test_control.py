import dataclasses

import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from fieldrl.apps.lhc_trigger.config import ControlConfig
from fieldrl.apps.lhc_trigger.controllers import (
    Controller,
    PDController,
    QuantileTracker,
    run_controller,
)
from fieldrl.apps.lhc_trigger.env import Calibration, Replay, TriggerEnv, reward
from fieldrl.apps.lhc_trigger.gfpo import filter_group, group_advantages
from fieldrl.apps.lhc_trigger.metrics import noise_ceiling_in_band, trace_metrics
from fieldrl.apps.lhc_trigger.stream import Stream

CONTROL = ControlConfig()


def synthetic_stream(n_windows=40, n=200_000, scale=None, seed=0) -> Stream:
    """Exponential background scores whose scale follows ``scale`` (a drift we control)."""
    rng = np.random.default_rng(seed)
    scale = np.full(n_windows, 50.0) if scale is None else np.asarray(scale, float)
    k = int(0.03 * n)
    tails, sig = [], []
    for s in scale:
        scores = rng.exponential(s, n)
        tails.append(np.sort(np.partition(scores, n - k)[-k:]))
        sig.append(rng.exponential(2 * s, 100))
    kinds = np.tile(np.array([1] * 80 + [2] * 20, np.int8), (n_windows, 1))
    zeros = np.zeros(n_windows, np.float32)
    return Stream(
        tail={"ht": np.stack(tails)}, n_background=np.full(n_windows, n),
        signal={"ht": np.stack(sig).astype(np.float32)}, signal_kind=kinds,
        npv_mean=zeros + 20, npv_std=zeros + 4, multijet_fraction=zeros + 0.01,
        pileup_mean=zeros + 30,
    )  # fmt: skip


def calib_for(stream: Stream) -> Calibration:
    return Calibration.fit([stream], "ht", CONTROL)


def test_env_passes_gymnasium_checker():
    stream = synthetic_stream(12)
    env = TriggerEnv([stream], calib_for(stream), CONTROL)
    check_env(env, skip_render_check=True)
    obs, _ = env.reset(seed=0)
    steps = 0
    done = False
    while not done:
        obs, r, done, trunc, info = env.step(env.action_space.sample())
        steps += 1
        assert env.observation_space.contains(obs) and np.isfinite(r)
    assert steps == 11


def test_reward_penalises_leaving_target_in_both_directions():
    on, above, below = reward(np.array([0.0025, 0.0035, 0.0015]), 0.5, CONTROL)
    assert on > above and on > below
    assert reward(0.0025, 0.6, CONTROL) > reward(0.0025, 0.5, CONTROL)


class Peeker(Controller):
    """A controller that records the windows its observations came from."""

    name = "peeker"

    def __init__(self):
        self.seen = []

    def decide(self, obs):
        self.seen.append(obs)
        return obs.target_threshold


def test_causality_decision_for_next_window_ignores_its_events():
    base = synthetic_stream(20, seed=1)
    future_changed = dataclasses.replace(
        base, tail={"ht": base.tail["ht"].copy()}, signal={"ht": base.signal["ht"].copy()}
    )
    future_changed.tail["ht"][10:] *= 3.0  # windows >= 10 differ
    a, b = Peeker(), Peeker()
    trace_a = run_controller(base, calib_for(base), CONTROL, a)
    trace_b = run_controller(future_changed, calib_for(base), CONTROL, b)
    # thresholds applied to windows 1..10 were decided from windows 0..9: identical
    np.testing.assert_array_equal(trace_a.threshold[:10], trace_b.threshold[:10])
    assert trace_a.rate[9] != trace_b.rate[9]  # ... but window 10 itself is scored differently
    assert all(obs.window == i for i, obs in enumerate(a.seen))


def test_look_ahead_controller_is_impossible_through_replay():
    stream = synthetic_stream(5)
    replay = Replay(stream, calib_for(stream), CONTROL)
    obs = replay.start()
    assert obs.window == 0 and replay.t == 0
    result, obs = replay.advance(obs.target_threshold)
    assert result.window == 1 and obs.window == 1  # scored window = the one after the decision


def test_pd_converges_on_a_stationary_stream():
    stream = synthetic_stream(60)
    calib = dataclasses.replace(calib_for(stream), menu=calib_for(stream).menu * 0.85)
    trace = run_controller(stream, calib, CONTROL, PDController(0.13, 0.0065, 0.0025))
    per_window = [f.name for f in dataclasses.fields(trace) if f.name != "menu"]
    settled = dataclasses.replace(trace, **{f: getattr(trace, f)[30:] for f in per_window})
    settled = trace_metrics(settled, CONTROL)
    assert settled["in_band_fraction"] >= 0.85
    assert abs(trace.threshold[-1] / calib_for(stream).menu - 1) < 0.03


def test_quantile_tracker_follows_a_drift_the_static_menu_misses():
    stream = synthetic_stream(40, scale=np.linspace(50, 35, 40))
    calib = calib_for(stream)
    tracked = trace_metrics(run_controller(stream, calib, CONTROL, QuantileTracker(1.0)), CONTROL)
    assert tracked["in_band_fraction"] > 0.7 and tracked["rate_rmse_khz"] < 10


def test_noise_ceiling_matches_the_reference_table():
    assert noise_ceiling_in_band(20_000, 0.0025, 0.1) == pytest.approx(0.56, abs=0.01)
    assert noise_ceiling_in_band(50_000, 0.0025, 0.1) == pytest.approx(0.74, abs=0.01)
    assert noise_ceiling_in_band(200_000, 0.0025, 0.1) == pytest.approx(0.98, abs=0.01)


def test_gfpo_filters():
    rate = 0.0025 * np.array([1.0, 1.05, 0.93, 1.3, 0.5, 1.12, 0.97, 1.5])
    eff = np.array([0.50, 0.55, 0.45, 0.70, 0.20, 0.60, 0.48, 0.80])
    f = filter_group("gfpo_f", rate, eff, 4, CONTROL)
    assert list(f) == [0, 6, 1, 2]  # closest to target first
    fr = filter_group("gfpo_fr", rate, eff, 6, CONTROL)
    assert list(fr[:4]) == [1, 0, 6, 2]  # in band, by efficiency
    assert list(fr[4:]) == [5, 3]  # padded with the nearest out-of-band
    assert len(filter_group("grpo", rate, eff, 4, CONTROL)) == 8


def test_group_advantages_are_relative_to_the_kept_set():
    adv = group_advantages(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(adv, [-1.2247, 0.0, 1.2247], atol=1e-4)
    assert not group_advantages(np.array([2.0, 2.0])).any()


def test_gfpo_learns_to_track_on_a_drifting_stream(tiny):
    from fieldrl.apps.lhc_trigger.controllers import PolicyController
    from fieldrl.apps.lhc_trigger.gfpo import GroupPolicyTrainer
    from fieldrl.training import fit

    torch.manual_seed(0)
    streams = [synthetic_stream(30, scale=np.linspace(50, 40, 30), seed=s) for s in range(2)]
    calib = calib_for(streams[0])
    tiny.train.windows = 1500
    tiny.gfpo.steps_per_update = 16
    rng = np.random.default_rng(0)
    policy = fit(lambda: GroupPolicyTrainer("gfpo_f", tiny, streams, calib, rng), None,
                 seed=0, description="GFPO-F").policy  # fmt: skip
    test = synthetic_stream(30, scale=np.linspace(50, 40, 30), seed=9)
    m = trace_metrics(
        run_controller(test, calib, CONTROL, PolicyController("g", policy, CONTROL)), CONTROL
    )
    static = trace_metrics(run_controller(test, calib, CONTROL, QuantileTracker(1e-9)), CONTROL)
    assert m["in_band_fraction"] > static["in_band_fraction"] + 0.2


@pytest.mark.parametrize("name", ["gfpo_f", "lagrangian_ppo", "ppo"])
def test_a_controller_killed_mid_fill_resumes_to_the_same_weights(tiny, kill_and_resume, name):
    """The replay position is part of the checkpoint: killed part-way through a fill (the
    streams are 12 windows long, the checkpoints every 8 or 32), the resumed training
    ends bit-identical to the uninterrupted one."""
    from fieldrl.apps.lhc_trigger.gfpo import GroupPolicyTrainer
    from fieldrl.apps.lhc_trigger.ppo import LagrangianPPOTrainer, SB3PPOTrainer

    streams = [synthetic_stream(12, n=20_000, seed=s) for s in range(2)]
    calib = calib_for(streams[0])
    tiny.train.windows = 96
    kinds = {
        "gfpo_f": lambda rng: GroupPolicyTrainer("gfpo_f", tiny, streams, calib, rng),
        "lagrangian_ppo": lambda rng: LagrangianPPOTrainer(tiny, streams, calib, rng),
        "ppo": lambda rng: SB3PPOTrainer(tiny, streams, calib, rng),
    }
    straight, resumed = kill_and_resume(lambda: kinds[name](np.random.default_rng(0)),
                                        kill_at=40 if name == "gfpo_f" else 64)  # fmt: skip
    assert resumed.done == straight.done == 96
    for (key, a), b in zip(straight.policy.state_dict().items(),
                           resumed.policy.state_dict().values(), strict=True):  # fmt: skip
        assert torch.equal(a, b), key


class Runaway(Controller):
    """A learned controller gone wrong for windows 10-24: it lowers the threshold 10% each
    window; otherwise it moves to the threshold the last window asked for."""

    name = "runaway"

    def decide(self, obs):
        if 10 <= obs.window < 25:
            return 0.9 * obs.threshold
        return obs.target_threshold


def test_the_runaway_guard_caps_over_budget_streaks_and_hands_control_back():
    from fieldrl.apps.lhc_trigger.config import GuardConfig
    from fieldrl.apps.lhc_trigger.controllers import RunawayGuard
    from fieldrl.apps.lhc_trigger.metrics import longest_run

    stream = synthetic_stream(60, scale=np.linspace(50, 65, 60))
    calib = calib_for(stream)
    alone = run_controller(stream, calib, CONTROL, Runaway())
    over = alone.rate / CONTROL.target_rate - 1 > CONTROL.band
    assert longest_run(over) >= 14  # unguarded: over budget until it recovers

    guard = RunawayGuard(Runaway(), QuantileTracker(1.0), CONTROL, GuardConfig())
    guarded = run_controller(stream, calib, CONTROL, guard)
    metrics = trace_metrics(guarded, CONTROL)
    assert metrics["longest_over_budget_streak"] <= 3
    assert guard.state.interventions == metrics["guard_interventions"] == 1
    assert guarded.guarded[12:24].all() and not guarded.guarded[30:].any()  # handed back
    assert metrics["in_band_fraction"] > trace_metrics(alone, CONTROL)["in_band_fraction"]
    assert not guarded.guarded[:9].any()  # on target before window 10: never touched
