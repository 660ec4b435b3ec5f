from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from fieldrl.apps.rat.config import LibraryConfig
from fieldrl.apps.rat.cpg import Gait, Pose, tune_gait
from fieldrl.apps.rat.env import RatEnv
from fieldrl.apps.rat.library import (
    ROOT,
    Behaviours,
    LibraryError,
    _sequence,
    generate,
    load_library,
)
from fieldrl.apps.rat.metrics import gait_peak
from fieldrl.errors import FieldrlError

HELDOUT = [("trot", "rear"), ("still", "groom")]


@pytest.fixture(scope="module")
def body():
    from fieldrl.apps.rat.config import RatConfig

    return RatEnv(RatConfig()).body


def _behaviours() -> Behaviours:
    gait = Gait.initial()
    return Behaviours(
        {3.0: gait, 4.0: gait},
        Pose({"lumbar_extend": 0.5}),
        Pose({"shoulder_{}": -0.5}, {"elbow_{}": 0.2}),
        Pose({}),
    )


def test_the_cpg_hip_spectrum_peaks_at_the_commanded_frequency(body):
    hip = body.joint_names.index("hip_L_extend") + 7
    for frequency in (2.0, 4.0):
        program = Gait.initial().program(body.actuator_names, frequency)
        body.reset(np.random.default_rng(0), yaw=0.0)
        angles = []
        for k in range(200):
            body.step(program(k * 0.02))
            angles.append(body.data.qpos[hip])
        assert gait_peak(np.array(angles), 50.0) == pytest.approx(frequency, abs=0.3)


def test_gait_tuning_never_returns_a_worse_gait(body):
    start = Gait.initial()
    _, start_score = tune_gait(body, 3.0, candidates=0, seconds=0.6, seed=0, start=start)
    tuned, score = tune_gait(body, 3.0, candidates=6, seconds=0.6, seed=0, start=start)
    assert score >= start_score
    assert score == start_score or not np.array_equal(tuned.params, start.params)


def test_generated_clips_stay_upright_and_respect_the_heldout_split(body, tmp_path: Path):
    train = generate(
        body,
        _behaviours(),
        clips=2,
        segments=3,
        segment_seconds=(0.3, 0.5),
        blend=0.1,
        noisy_share=0.5,
        noise=0.1,
        heldout=HELDOUT,
        seed=0,
    )
    held = generate(
        body,
        _behaviours(),
        clips=1,
        segments=3,
        segment_seconds=(0.3, 0.5),
        blend=0.1,
        noisy_share=0.0,
        noise=0.0,
        heldout=HELDOUT,
        seed=1,
        split="heldout",
    )
    for clip in train.clips:
        pairs = set(zip(_segments(clip.labels), _segments(clip.labels)[1:], strict=False))
        assert not pairs & set(HELDOUT)
        assert clip.action.shape == (clip.frames, 38) and clip.qpos.shape == (clip.frames, 74)
        body.set_state(clip.qpos[-1])
        assert not body.fallen
    held_pairs = set(
        zip(_segments(held.clips[0].labels), _segments(held.clips[0].labels)[1:], strict=False)
    )
    assert held_pairs & set(HELDOUT)
    path = tmp_path / "lib.npz"
    train.save(path)
    back = load_library(path, body.joint_names, body.model.qpos0)
    assert [c.name for c in back.clips] == [c.name for c in train.clips]
    np.testing.assert_allclose(back.clips[0].qpos, train.clips[0].qpos, atol=1e-6)
    np.testing.assert_allclose(back.clips[0].act, train.clips[0].act, atol=1e-6)
    assert back.clips[0].labels == train.clips[0].labels and back.fps == 50.0


def test_postures_reach_gaits_through_still_and_impossible_heldouts_are_refused():
    rng = np.random.default_rng(0)
    for _ in range(50):
        seq = _sequence(rng, 5, set(), None)
        for a, b in zip(seq, seq[1:], strict=False):
            assert not (a in ("rear", "groom") and b in ("trot", "turn")), seq
    with pytest.raises(FieldrlError, match="never occur"):
        _sequence(rng, 3, set(), {("rear", "trot")})


def test_behaviour_weights_shift_the_draws_and_bad_weights_are_refused():
    def gait_share(weights):
        rng = np.random.default_rng(0)
        seqs = [_sequence(rng, 4, set(), None, weights) for _ in range(300)]
        return np.mean([b in ("trot", "turn") for seq in seqs for b in seq])

    uniform = gait_share(None)
    assert gait_share({}) == uniform  # empty: the draws made before the weights existed
    assert gait_share({"trot": 4.0, "turn": 4.0}) > uniform + 0.2
    assert gait_share({"trot": 0.0, "turn": 0.0}) == 0
    only_still = {b: 0.0 for b in ("trot", "turn", "rear", "groom")}
    for weights, message in [({"rear": -1.0}, "finite and >= 0"),
                             (only_still, "two behaviours"),
                             ({"groom": 0.0}, "held-out transition")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            LibraryConfig(behaviour_weights=weights)


def _segments(labels: list[str]) -> list[str]:
    return [b for i, b in enumerate(labels) if i == 0 or labels[i - 1] != b]


def _user_file(tmp_path: Path, names, qpos, suffix=".npz") -> Path:
    path = tmp_path / f"user{suffix}"
    if suffix == ".npz":
        np.savez(path, fps=np.array(100.0), joint_names=np.array(names), **{"clip/walk/qpos": qpos})
    else:
        with h5py.File(path, "w") as f:
            f.attrs["fps"] = 100.0
            f.attrs["joint_names"] = names
            f.create_dataset("clip/walk/qpos", data=qpos)
    return path


@pytest.mark.parametrize("suffix", [".npz", ".h5"])
def test_a_users_partial_trajectory_loads_with_rest_angles_elsewhere(body, tmp_path, suffix):
    names = [*ROOT, "knee_L", "hip_L_extend"]
    qpos = np.zeros((5, 9))
    qpos[:, 3] = 1.0
    qpos[:, 7] = 0.4
    lib = load_library(
        _user_file(tmp_path, names, qpos, suffix), body.joint_names, body.model.qpos0
    )
    clip = lib.clips[0]
    assert clip.qpos.shape == (5, 74) and lib.fps == 100.0
    assert clip.qpos[0, 7 + body.joint_names.index("knee_L")] == 0.4
    ankle = 7 + body.joint_names.index("ankle_L")
    assert clip.qpos[0, ankle] == body.model.qpos0[ankle]


def test_unknown_joints_and_nan_frames_are_named(body, tmp_path):
    with pytest.raises(LibraryError, match="unknown joint names \\['tail_wag'\\]"):
        load_library(
            _user_file(tmp_path, [*ROOT, "tail_wag"], np.zeros((3, 8))),
            body.joint_names,
            body.model.qpos0,
        )
    qpos = np.zeros((30, 8))
    qpos[[4, 17], 7] = np.nan
    with pytest.raises(
        LibraryError, match="clip 'walk': NaN or infinite values in frames \\[4, 17\\]"
    ):
        load_library(
            _user_file(tmp_path, [*ROOT, "knee_L"], qpos), body.joint_names, body.model.qpos0
        )
    with pytest.raises(LibraryError, match="expected \\(frames, 8\\)"):
        load_library(
            _user_file(tmp_path, [*ROOT, "knee_L"], np.zeros((3, 5))),
            body.joint_names,
            body.model.qpos0,
        )
    state = {"clip/walk/qpos": np.tile([0, 0, 0.1, 1, 0, 0, 0], (3, 1)), "fps": 50.0}
    for extra, problem in (
        ({"clip/walk/act": np.zeros((3, 38))}, "act .* needs the action"),
        ({"clip/walk/act": np.zeros((3, 37)), "clip/walk/action": np.zeros((3, 38))}, "act must"),
    ):
        np.savez(tmp_path / "state.npz", joint_names=np.array(ROOT), **state, **extra)
        with pytest.raises(LibraryError, match=f"clip 'walk': {problem}"):
            load_library(tmp_path / "state.npz", body.joint_names, body.model.qpos0)
    bad = tmp_path / "bad.npz"
    for content in (b"not a zip", b"", b"PK\x03\x04 a torn zip"):  # b"": "Aborted!" before
        bad.write_bytes(content)
        with pytest.raises(LibraryError, match="bad.npz: not a readable npz"):
            load_library(bad, body.joint_names, body.model.qpos0)
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(LibraryError, match="unknown format"):
        load_library(tmp_path / "x.csv", body.joint_names, body.model.qpos0)


def test_angles_outside_the_joints_ranges_are_named_by_joint_and_frame(body, tmp_path):
    names = [*ROOT, "knee_L", "hip_L_extend"]
    qpos = np.zeros((6, 9))
    qpos[:, 3] = 1.0  # the identity quaternion
    ranges = body.joint_ranges()
    path = _user_file(tmp_path, names, qpos)
    assert load_library(path, body.joint_names, body.model.qpos0, ranges).clips  # in range
    qpos[:, 7:] *= 1e30
    qpos[4, 7] = 1e30  # knee_L, frame 4: a file scaled by mistake
    with pytest.raises(LibraryError, match=r"frame 4, joint 'knee_L': 1e\+30 rad is outside"):
        load_library(_user_file(tmp_path, names, qpos), body.joint_names, body.model.qpos0, ranges)
    qpos[4, 7] = 0.0
    qpos[2, 8] = 90.0  # degrees, not radians
    with pytest.raises(LibraryError, match=r"frame 2, joint 'hip_L_extend': 90 rad"):
        load_library(_user_file(tmp_path, names, qpos), body.joint_names, body.model.qpos0, ranges)
    qpos[2, 8], qpos[1, 0] = 0.0, 1e30
    with pytest.raises(LibraryError, match="frame 1: the root is"):
        load_library(_user_file(tmp_path, names, qpos), body.joint_names, body.model.qpos0, ranges)


def test_library_check_refuses_a_scaled_file(tmp_path):
    from typer.testing import CliRunner

    from fieldrl.cli import build_root

    names = [*ROOT, "knee_L"]
    qpos = np.zeros((6, 8))
    qpos[:, 3] = 1.0
    qpos[:, 7] = 1e30
    path = _user_file(tmp_path, names, qpos)
    args = ["rat", "library", "-p", "tiny", "--check", str(path), "--out", str(tmp_path / "o.npz")]
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 2 and "knee_L" in result.output
    assert not (tmp_path / "o.npz").exists()
