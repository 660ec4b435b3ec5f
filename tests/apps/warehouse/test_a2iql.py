import numpy as np
import torch

from fieldrl.apps.warehouse.a2iql import NeuralLinear


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
    assert (model.conservative(far, kappa=1.0) < model.predict(far)[0]).all()


def test_more_data_means_less_uncertainty():
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (1000, 2)).astype(np.float32)
    y = x.sum(1)
    probe = rng.uniform(-1, 1, (20, 2)).astype(np.float32)
    small = NeuralLinear(2, hidden=16).fit(x[:30], y[:30], epochs=200).predict(probe)[1]
    large = NeuralLinear(2, hidden=16).fit(x, y, epochs=200).predict(probe)[1]
    assert large.mean() < small.mean()
