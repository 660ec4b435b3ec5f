from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fieldrl.apps.warehouse.a2iql import NeuralLinear, adapt, conservative_bonus
from fieldrl.apps.warehouse.aiql import AIQLTrainer
from fieldrl.apps.warehouse.baselines import filter_like_target
from fieldrl.apps.warehouse.config import WarehouseConfig
from fieldrl.apps.warehouse.logs import load_logged_data, pool
from fieldrl.apps.warehouse.pipeline import generate_logs
from fieldrl.config import load_config
from fieldrl.training import fit

TINY = Path(__file__).parents[3] / "apps" / "warehouse" / "configs" / "tiny.toml"


def test_neural_linear_fits_and_knows_where_it_has_no_data():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (300, 3)).astype(np.float32)
    y = 2.0 * x[:, 0] - x[:, 1] + 0.05 * rng.normal(size=300)
    model = NeuralLinear(3, hidden=32).fit(x, y, epochs=400)
    mean, std = model.predict(x[:50])
    assert np.sqrt(np.mean((mean - y[:50]) ** 2)) < 0.15
    far = np.full((5, 3), 6.0, np.float32)  # far outside the training data
    _, far_std = model.predict(far)
    assert far_std.min() > 3 * std.mean()


def test_more_data_means_less_uncertainty():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1000, 2)).astype(np.float32)
    y = x.sum(1)
    probe = rng.uniform(-1, 1, (20, 2)).astype(np.float32)
    small = NeuralLinear(2, hidden=16).fit(x[:30], y[:30], epochs=200).predict(probe)[1]
    large = NeuralLinear(2, hidden=16).fit(x, y, epochs=200).predict(probe)[1]
    assert large.mean() < small.mean()


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    cfg = load_config(WarehouseConfig, TINY)
    folder = generate_logs(cfg, tmp_path_factory.mktemp("logs"), 2, 50, true_outcome=True)
    return cfg, load_logged_data(folder, cfg.aiql, "liters_freed"), folder


def test_subset_and_pool_keep_epochs_and_their_candidates_together(logged):
    _, data, _ = logged
    part = data.subset(np.array([3, 1]))
    assert part.n_epochs == 2
    lo, hi = data.offsets[3], data.offsets[4]
    np.testing.assert_array_equal(part.x[: hi - lo], data.x[lo:hi])
    both = pool(part, data)
    assert (
        both.n_epochs == 2 + data.n_epochs and both.x.shape[0] == part.x.shape[0] + data.x.shape[0]
    )
    np.testing.assert_array_equal(both.state[2:], data.state)


def test_off_dynamics_filter_keeps_the_source_epochs_nearest_the_target(logged):
    _, data, _ = logged
    target = data.subset(np.arange(3))
    far = data.subset(np.arange(3, data.n_epochs))
    far = replace(far, state=far.state + 100.0, next_state=far.next_state + 100.0)
    source = pool(far, target)  # the last 3 source epochs are copies of the target's
    kept = filter_like_target(source, target, keep=3 / source.n_epochs)
    assert kept.n_epochs == 6
    assert np.abs(kept.state[:3] - target.state).max() < 1e-5


def test_a2iql_moves_only_the_actor_and_penalises_unknown_epochs(logged):
    cfg, data, folder = logged
    cfg.aiql.steps, cfg.aiql.batch_epochs = 10, 4
    source_model = fit(lambda: AIQLTrainer(data, cfg.aiql), None, seed=0, description="AIQL").model
    target = load_logged_data(folder, cfg.aiql, "units_processed").subset(np.arange(4))
    bonus = conservative_bonus(target, cfg.a2iql)
    state, phi = torch.from_numpy(target.state), torch.from_numpy(target.phi)
    assert bonus(state * 50.0, phi).mean() < bonus(state, phi).mean()  # pessimistic off data
    adapted = adapt(source_model, data, target, cfg.aiql, cfg.a2iql)
    before, after = source_model.state_dict(), adapted.state_dict()
    for key in before:
        same = torch.equal(before[key], after[key])
        assert same != key.startswith("scorer."), key  # critic, V, transforms frozen
