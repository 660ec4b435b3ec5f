"""The app end to end on the tiny preset: train, resume, evaluate on ROOT data, serve."""

import json
import re

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from fieldrl.app import Resources
from fieldrl.apps.lhc_trigger import APP
from fieldrl.apps.lhc_trigger.pipeline import open_trained
from fieldrl.apps.lhc_trigger.service import example_request
from fieldrl.cli import build_root
from fieldrl.runs import read_metrics
from fieldrl.serving import create_app


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}"],
    )
    assert result.exit_code == 0, result.output
    (run,) = (root / "lhc-trigger").iterdir()
    return run


def test_train_writes_a_loadable_run(run_dir):
    trained = open_trained(run_dir).trained
    assert set(trained.policies) == {"ht", "ad"} and trained.controller == "gfpo_f"
    assert trained.calibrations["ht"].menu > 50  # GeV
    steps = [row["step"] for row in read_metrics(run_dir / "metrics.jsonl")]
    assert steps == sorted(steps) and len(steps) > 2


@pytest.mark.parametrize("option", ["--data", "--config"])
def test_evaluate_on_root_files_or_the_shipped_example_fills(run_dir, sample, tmp_path, option):
    given = sample if option == "--data" else sample.parent / "my_fills.toml"
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "evaluate", "--run", str(run_dir), option, str(given),
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval.json").read_text())
    assert 0 <= metrics["ht_in_band_fraction"] <= 1 and "ad_rate_rmse_khz" in metrics
    assert 0 <= metrics["ad_signal_efficiency"] <= 1


def test_evaluate_reports_a_bad_file_clearly(run_dir, tmp_path):
    bad = tmp_path / "bad.root"
    bad.write_text("not root")
    result = CliRunner().invoke(
        build_root(), ["lhc-trigger", "evaluate", "--run", str(run_dir), "--data", str(bad)]
    )
    assert result.exit_code == 2
    assert "bad.root: not a ROOT file" in result.output


def test_service_round_trip_and_bad_input(run_dir):
    client = TestClient(create_app(APP.service(APP.open_run(run_dir))))
    body = example_request(APP.open_run(run_dir))
    first = client.post("/v1/act", json=body)
    assert first.status_code == 200, first.text
    reply = first.json()
    menu = body["windows"][0]["threshold"]
    assert reply["next_window"] == 1 and abs(reply["next_threshold"] / menu - 1) <= 0.08 + 1e-9
    # the next window of the same stream is accepted; a repeat or a gap is not
    nxt = dict(body["windows"][0], index=1, rate=0.0035)
    ok = client.post("/v1/act", json=dict(body, windows=[nxt]))
    assert ok.status_code == 200
    assert ok.json()["next_threshold"] > reply["next_threshold"] - 1e-9  # rate high -> tighten
    again = client.post("/v1/act", json=dict(body, windows=[nxt]))
    assert again.status_code == 422 and "expected window 2" in again.text
    other = client.post("/v1/act", json=dict(body, stream_id="fill-2", windows=[nxt]))
    assert other.status_code == 200  # streams are independent
    bad = dict(body["windows"][0], index=0, rate=float("nan"))
    for payload in (
        dict(body, stream_id="s3", windows=[dict(body["windows"][0], rate=1.5)]),
        dict(body, stream_id="s3", trigger="met"),
        dict(body, stream_id="s3", windows=[]),
        dict(body, stream_id="bad id!"),
        # unbounded before: huge values reached the controller
        dict(body, stream_id="s4", windows=[dict(body["windows"][0], index=2**40)]),
        dict(body, stream_id="s4", windows=[dict(body["windows"][0], threshold=1e300)]),
        dict(body, stream_id="s4", windows=[dict(body["windows"][0], target_threshold=-1e300)]),
    ):
        response = client.post("/v1/act", json=payload)
        assert response.status_code == 422, payload
    nan = client.post(
        "/v1/act",
        content=json.dumps(dict(body, windows=[bad]), allow_nan=True),
        headers={"content-type": "application/json"},
    )
    assert nan.status_code in (400, 422)
    assert client.get("/healthz").status_code == 200
    # a batch with a gap anywhere is refused whole; the stream still expects window 2
    w2, w4 = dict(nxt, index=2), dict(nxt, index=4)
    gap = client.post("/v1/act", json=dict(body, windows=[w2, w4]))
    assert gap.status_code == 422 and "windows.1.index" in gap.text
    batch = client.post("/v1/act", json=dict(body, windows=[w2, dict(nxt, index=3)]))
    assert batch.status_code == 200 and len(batch.json()["thresholds"]) == 2


def test_train_resumes_after_a_finished_trigger(run_dir, tmp_path):
    import shutil

    from fieldrl.checkpoint import CheckpointManager

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    manager = CheckpointManager(copy / "checkpoints")
    for step in manager.steps()[1:]:  # keep only the checkpoint after the first trigger
        shutil.rmtree(manager.path(step))
    result = CliRunner().invoke(build_root(), ["lhc-trigger", "train", "--resume", str(copy)])
    assert result.exit_code == 0, result.output
    trained = open_trained(copy).trained
    assert set(trained.policies) == {"ht", "ad"}
    assert trained.step == open_trained(run_dir).trained.step


def test_simulate_then_train_ad_on_the_written_file(tmp_path):
    from fieldrl.apps.lhc_trigger.data import read_events
    from fieldrl.apps.lhc_trigger.pipeline import prepare

    root = tmp_path / "fill.root"
    runner = CliRunner()
    sim = runner.invoke(
        build_root(),
        ["lhc-trigger", "simulate", "-p", "tiny", "--out", str(root), "--windows", "0:2"],
    )
    assert sim.exit_code == 0, sim.output
    assert sum(e.n for e in read_events([root])) == 2 * 8000
    bad = runner.invoke(build_root(), ["lhc-trigger", "simulate", "-p", "tiny", "--out",
                                       str(root), "--windows", "5:99"])  # fmt: skip
    assert bad.exit_code == 2 and "--windows" in bad.output
    ad = runner.invoke(
        build_root(),
        [
            "lhc-trigger",
            "train-ad",
            "-p",
            "tiny",
            "--data",
            str(root),
            "--out",
            str(tmp_path / "ad"),
        ],
    )
    assert ad.exit_code == 0, ad.output
    cfg = APP.load_config("tiny", overrides=[f'trigger.ad_model="{tmp_path / "ad"}"'])
    ae, _, stats = prepare(cfg, Resources())
    assert stats == {}  # loaded, not retrained
    assert ae.spec["latent"] == cfg.trigger.ad_latent


def test_data_option_needs_a_data_app(monkeypatch):
    monkeypatch.setenv("FIELDRL_EXTRA_APPS", "ppo_cartpole:APP")
    result = CliRunner().invoke(build_root(), ["cartpole", "train", "--data", "x.root"])
    assert result.exit_code == 2 and "reads no data files" in result.output


@pytest.mark.parametrize("controller", ["gfpo_f", "lagrangian_ppo"])
def test_training_killed_mid_trigger_resumes_from_its_checkpoint(tmp_path, monkeypatch, controller):
    from fieldrl.apps.lhc_trigger import pipeline
    from fieldrl.checkpoint import CheckpointManager
    from fieldrl.runs import Run

    cfg = APP.load_config("tiny", overrides=[f'train.controller="{controller}"',
                                              "train.windows=256", "experiment.checkpoint_every=2",
                                              f'experiment.runs_dir="{tmp_path}"'])  # fmt: skip
    original, ad_saves = CheckpointManager.save, []

    def save_then_die(self, step, *args, **kwargs):
        path = original(self, step, *args, **kwargs)
        if step > 256:  # the ad trigger's checkpoints
            ad_saves.append(step)
            if len(ad_saves) == 2:  # the ht trigger is done; the ad trigger is part-way
                raise KeyboardInterrupt
        return path

    monkeypatch.setattr(CheckpointManager, "save", save_then_die)
    run = Run.create(cfg)
    with pytest.raises(KeyboardInterrupt), run:
        pipeline.train(cfg, run=run, resources=Resources())
    killed = open_trained(run.dir).trained
    assert set(killed.policies) == {"ht"} and killed.in_progress == "ad"
    resumed_from = killed.step - 256
    assert 0 < resumed_from < 256

    monkeypatch.setattr(CheckpointManager, "save", original)
    again = Run.resume(run.dir, type(cfg))
    with again:
        metrics = pipeline.train(again.config, run=again, resources=Resources())
    final = open_trained(run.dir).trained
    assert set(final.policies) == {"ht", "ad"} and final.in_progress is None
    assert final.step == 512 and 0 <= metrics["validation_in_band_fraction"] <= 1
    steps = [row["step"] for row in read_metrics(run.dir / "metrics.jsonl")]
    assert len(steps) == len(set(steps)) and steps == sorted(steps)


def test_benchmark_on_root_files_with_a_config(tmp_path, sample):
    config = tmp_path / "mine.toml"
    base = APP.presets_dir / "tiny.toml"
    config.write_text(
        f'base = "{base}"\n[data]\nfiles = ["{sample}"]\n[eval]\ncontrollers = ["static", "pd"]\n'
    )
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        build_root(), ["lhc-trigger", "benchmark", "--config", str(config), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "benchmark.json").read_text())["rows"]
    assert {(r["trigger"], r["method"]) for r in rows} >= {("ht", "pd"), ("ad", "static")}
    assert all(r["streams"] == 1 for r in rows) and (out / "report.md").is_file()


def test_benchmark_on_simulated_fills_writes_every_row_target_and_plot(tmp_path, report_rebuilds):
    out = tmp_path / "bench"
    result = CliRunner().invoke(
        build_root(), ["lhc-trigger", "benchmark", "-c", str(APP.presets_dir / "tiny.toml"),
                       "--out", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.split() == [str(out / "benchmark.json"), str(out / "report.md")]
    bench = json.loads((out / "benchmark.json").read_text())
    methods = {(r["trigger"], r["method"]) for r in bench["rows"]}
    for trigger in ("ht", "ad"):
        assert {(trigger, m) for m in ("static", "pd", "quantile", "gfpo_f")} <= methods
    for row in bench["rows"]:
        assert row["in_band_fraction_ci95_low"] <= row["in_band_fraction"]
        assert row["in_band_fraction"] <= row["in_band_fraction_ci95_high"]
    names = {t["name"] for t in bench["targets"]}  # vs the static menu: when it is ever in band
    wanted = ("in band", "vs PD", "runaway guard", "fills outside the training ranges")
    assert {f"{t}: {k}" for t in ("ht", "ad") for k in wanted} <= names
    fills = ("smooth", "short_lifetime", "high_peak", "big_jes_step", "all_three")
    assert set(bench["data"]["traces"]) == {f"{t}/{f}" for t in ("ht", "ad") for f in fills}
    assert (out / "summary.png").is_file() and (out / "trace_ad_smooth.png").is_file()
    robust = [r for r in bench["rows"] if r["fill"] == "high_peak" and r["trigger"] == "ad"]
    assert {r["method"] for r in robust} == {"static", "pd", "quantile", "gfpo_f",
                                             "gfpo_f (no guard)"}  # fmt: skip
    assert all(r["longest_over_budget_streak_max"] >= 0 for r in robust)
    assert "## Robustness" in (out / "report.md").read_text()
    from fieldrl.apps.lhc_trigger.benchmark import targets

    unguarded = APP.load_config("tiny", overrides=["guard.enabled=false"])
    names = {t.name for t in targets(unguarded, bench["rows"])}
    assert "ad: fills outside the training ranges" in names and "ad: runaway guard" not in names
    report_rebuilds("lhc-trigger", out)


def test_every_preset_loads_and_every_fill_number_has_a_source():
    for preset in APP.presets():
        cfg = APP.load_config(preset)
        assert set(cfg.eval.seeds).isdisjoint([*cfg.train.fill_seeds, cfg.train.validation_seed])
    text = (APP.presets_dir / "default.toml").read_text()
    fill = text.split("[fill]")[1].split("[trigger]")[0]
    bare = [line for line in fill.splitlines() if "=" in line and "#" not in line]
    assert bare == []


@pytest.mark.parametrize(
    ("events", "error"),
    [
        (200, "the autoencoder needs 256+ background events to train, got 200"),
        (8000, "the input holds 8,000 events, fewer than two windows of 8,000"),  # was a traceback
    ],
)
def test_training_on_too_few_events_leaves_no_run_folder(tmp_path, tiny, events, error):
    from fieldrl.apps.lhc_trigger.data import write_events
    from fieldrl.apps.lhc_trigger.sim import FillSimulator

    assert tiny.fill.window_events == 8000
    small = write_events(
        tmp_path / "small.root", FillSimulator(tiny.fill, 3).window(0).slice(0, events)
    )
    runs = tmp_path / "runs"
    args = ["train", "-p", "tiny", "--data", str(small), "--set", f"experiment.runs_dir={runs}"]
    result = CliRunner().invoke(build_root(), ["lhc-trigger", *args])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith(f"error: {error}"), result.output
    assert list(runs.glob("lhc-trigger/*")) == []


def test_a_run_given_as_the_autoencoder_is_refused_and_leaves_no_run_folder(run_dir, tmp_path):
    runs = tmp_path / "runs"
    args = ["train", "-p", "tiny", "--set", f"experiment.runs_dir={runs}",
            "--set", f'trigger.ad_model="{run_dir / "checkpoints"}"']  # fmt: skip
    result = CliRunner().invoke(build_root(), ["lhc-trigger", *args])
    assert result.exit_code == 2, result.output
    error = result.output.strip().splitlines()[-1]
    assert error.startswith(f"error: {run_dir / 'checkpoints'}/step_"), error
    assert "not an autoencoder from `fieldrl lhc-trigger train-ad`" in error, error
    assert list(runs.glob("lhc-trigger/*")) == []


def test_training_on_a_truncated_file_says_so_and_leaves_no_run_folder(sample, tmp_path):
    cut = tmp_path / "cut.root"
    cut.write_bytes(sample.read_bytes()[: sample.stat().st_size // 2])
    runs = tmp_path / "runs"
    args = ["train", "-p", "tiny", "--data", str(cut), "--set", f"experiment.runs_dir={runs}"]
    result = CliRunner().invoke(build_root(), ["lhc-trigger", *args])
    assert result.exit_code == 2 and "cut.root" in result.output, result.output
    assert not list((runs / "lhc-trigger").iterdir())


def test_an_overshooting_rollout_does_not_leave_a_checkpoint_past_the_final_one(tmp_path):
    """Lagrangian PPO learns in rollouts of ``ppo.n_steps`` windows, which overshoot a
    ``train.windows`` that is not a multiple of it: the run's steps stay on the triggers'
    boundaries, so the last checkpoint is the finished one, with both triggers."""
    from fieldrl.apps.lhc_trigger import pipeline
    from fieldrl.checkpoint import CheckpointManager
    from fieldrl.runs import Run

    cfg = APP.load_config("tiny", overrides=['train.controller="lagrangian_ppo"',
                                              "train.windows=50", "ppo.n_steps=32",
                                              f'experiment.runs_dir="{tmp_path}"'])  # fmt: skip
    run = Run.create(cfg)
    with run:
        pipeline.train(cfg, run=run, resources=Resources())
    steps = CheckpointManager(run.dir / "checkpoints").steps()
    assert max(steps) == 100 and all(s <= 100 for s in steps)
    final = open_trained(run.dir).trained
    assert final.step == 100 and set(final.policies) == {"ht", "ad"}


def test_evaluating_a_run_without_one_of_the_triggers_is_an_error(tmp_path):
    root = tmp_path / "runs"
    train = ["lhc-trigger", "train", "-p", "tiny", "--set", f"experiment.runs_dir={root}",
             "--set", 'train.triggers=["ht"]', "--set", "train.windows=32"]  # fmt: skip
    result = CliRunner().invoke(build_root(), train)
    assert result.exit_code == 0, result.output
    (run,) = (root / "lhc-trigger").iterdir()
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "evaluate", "--run", str(run), "--set", 'train.triggers=["ht","ad"]',
         "--out", str(tmp_path / "eval")],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "no trained controller for trigger(s) ad" in result.output
    assert not (tmp_path / "eval" / "eval.json").exists()


def test_evaluate_takes_a_config_file_laid_over_the_run(run_dir, tmp_path):
    fills = tmp_path / "fills.toml"
    fills.write_text('[eval]\nseeds = [2002]\nscenarios = [{ name = "short_lifetime", '
                     'overrides = { lumi_tau_h = 6.0 } }]\n')  # fmt: skip
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "evaluate", "--run", str(run_dir), "--config", str(fills),
         "--out", str(tmp_path / "eval")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "eval" / "eval.json").read_text())
    assert 0 <= metrics["ad_in_band_fraction"] <= 1
    based = tmp_path / "based.toml"
    based.write_text('base = "quick.toml"\n')
    result = CliRunner().invoke(
        build_root(), ["lhc-trigger", "evaluate", "--run", str(run_dir), "--config", str(based)]
    )
    assert result.exit_code == 2 and "cannot name a base ('quick.toml')" in result.output


def test_a_bad_scenario_override_fails_at_load_in_one_line(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "tiny.toml"\n[[eval.scenarios]]\nname = "bright"\n'
                   "overrides = { lumi_lifetim_h = 6.0 }\n")  # fmt: skip
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "benchmark", "--config", str(bad), "--out", str(tmp_path / "b")],
    )
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {bad}: eval.scenarios[0] ('bright').overrides: unknown fill key "
        "'lumi_lifetim_h' (did you mean 'lumi_tau_h'?)"
    )


def test_data_shorter_than_two_windows_gives_both_counts_and_the_key(run_dir, sample):
    result = CliRunner().invoke(
        build_root(),
        ["lhc-trigger", "evaluate", "--run", str(run_dir), "--data", str(sample),
         "--set", "fill.window_events=50000000"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert re.search(r"the input holds [\d,]+ events, fewer than two windows of 50,000,000 "
                     r"\(fill.window_events\)", result.output), result.output  # fmt: skip


def test_the_service_guards_each_stream_on_its_own(run_dir):
    client = TestClient(create_app(APP.service(APP.open_run(run_dir))))
    body = example_request(APP.open_run(run_dir))
    first = dict(body["windows"][0])
    hot = [dict(first, index=i, rate=0.01) for i in range(3)]  # four times the target
    reply = client.post("/v1/act", json=dict(body, stream_id="hot", windows=hot)).json()
    assert reply["guarded"] == [True, True, True] and reply["guard_interventions"] == 1
    calm = client.post("/v1/act", json=dict(body, stream_id="calm")).json()
    assert calm["guarded"] == [False] and calm["guard_interventions"] == 0
    # back on target with the learned proposal inside the band: control goes back
    back = [dict(first, index=3, rate=0.0025, threshold=first["target_threshold"])]
    again = client.post("/v1/act", json=dict(body, stream_id="hot", windows=back)).json()
    assert again["guard_interventions"] == 1


def test_training_fills_are_drawn_from_the_randomization_ranges(tiny):
    from fieldrl.apps.lhc_trigger.pipeline import training_fills

    cfg = tiny.model_copy(deep=True)
    cfg.train.fill_seeds = [11, 12, 13]
    fills = training_fills(cfg)
    assert [seed for _, seed in fills] == [11, 12, 13]
    for key, (low, high) in cfg.train.randomize.items():
        values = [getattr(fill, key) for fill, _ in fills]
        assert all(low <= v <= high for v in values) and len(set(values)) == 3, key
    assert all(isinstance(fill.train_length, int) for fill, _ in fills)
    assert training_fills(cfg) == fills  # drawn from the seeds: the same every time
    # config.json sorts the keys: a resumed run must draw the same fills
    cfg.train.randomize = dict(sorted(cfg.train.randomize.items(), reverse=True))
    assert training_fills(cfg) == fills
    cfg.train.randomize = {}
    assert {fill.lumi0 for fill, _ in training_fills(cfg)} == {cfg.fill.lumi0}


def test_a_bad_randomization_range_fails_at_load():
    from fieldrl.config import ConfigError

    with pytest.raises(ConfigError, match=r"train.randomize.lumi_tau_h: low 16.0 is above"):
        APP.load_config("tiny", overrides=["train.randomize.lumi_tau_h=[16.0, 10.0]"])
    with pytest.raises(ConfigError, match=r"train.randomize \(low ends\).*lumi_tau_h"):
        APP.load_config("tiny", overrides=["train.randomize.lumi_tau_h=[-1.0, 10.0]"])
    with pytest.raises(ConfigError, match=r"train.randomize: 'jes_schedule' is not a numeric"):
        APP.load_config("tiny", overrides=["train.randomize.jes_schedule=[0.0, 1.0]"])


@pytest.mark.parametrize("spoil", ["truncated", "damaged"])
def test_a_truncated_or_damaged_root_file_is_one_line_naming_it(tmp_path, tiny, spoil):
    import uproot

    from fieldrl.apps.lhc_trigger.data import write_events
    from fieldrl.apps.lhc_trigger.sim import FillSimulator

    whole = write_events(tmp_path / "whole.root", FillSimulator(tiny.fill, 3).window(0))
    data = bytearray(whole.read_bytes())
    if spoil == "truncated":
        data = data[: len(data) // 2]
    else:  # overwrite the tree's own record: uproot fails as it opens the tree
        with uproot.open(whole) as f:
            start = f.key("Events").data_cursor.index
        data[start : start + 50] = b"\xff" * 50
    bad = tmp_path / "bad.root"
    bad.write_bytes(data)
    args = ["train-ad", "-p", "tiny", "--data", str(bad), "--out", str(tmp_path)]
    result = CliRunner().invoke(build_root(), ["lhc-trigger", *args])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    expected = "truncated: the file has" if spoil == "truncated" else "cannot read tree 'Events'"
    assert line.startswith(f"error: {bad}: {expected}"), line
