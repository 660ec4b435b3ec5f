"""The demo's pictures of a battle: population heatmaps, survival curves, the replay."""

import numpy as np
from PIL import Image

from fieldrl.apps.battles import report
from fieldrl.apps.battles.baselines import SCRIPTED
from fieldrl.apps.battles.battlefield import Battlefield


def test_a_recorded_battle_becomes_heatmaps_survival_curves_and_a_replay(tmp_path):
    env = Battlefield(6, 6, 50, copies=2, attrition=1.0, horizon=8, seed=0)
    record = report.record_battle(env, SCRIPTED["rush"], SCRIPTED["random"], seed=0)
    steps = len(record.counts)
    assert record.counts.shape == (steps, 2, 6, 6) and steps == 9  # the start and 8 steps
    np.testing.assert_array_equal(record.alive, record.counts.sum((2, 3)))
    assert (record.alive[0] == 50).all() and (np.diff(record.alive, axis=0) <= 0).all()
    assert record.alive[-1, 1] < 50  # the rush wins fights against a scattered team
    heatmaps = report.plot_heatmaps(tmp_path / "heatmaps.png", record)
    survival = report.plot_survival(tmp_path / "survival.png", {"rush vs random": record})
    replay = report.write_replay(tmp_path / "replay.gif", record)
    for png in (heatmaps, survival):
        with Image.open(png) as image:
            assert image.format == "PNG" and image.width > 200
    with Image.open(replay) as gif:
        assert gif.format == "GIF" and gif.n_frames == steps
