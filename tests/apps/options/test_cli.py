"""`fieldrl options play` and `agents`: a baseline on held-out episodes without a run,
its figures as JSON, and clear errors for an unknown agent or an LLM without endpoint."""

import json

from typer.testing import CliRunner

from fieldrl.cli import build_root


def test_play_a_baseline_and_write_its_figures(tmp_path):
    out = tmp_path / "play.json"
    args = ["options", "play", "--agent", "random_valid", "-p", "tiny", "--episodes", "2",
            "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["agent"] == "random_valid" and len(data["episodes"]) == 2
    assert data["metrics"]["episodes"] == 2.0 and "pnl_per_risk" in data["metrics"]


def test_play_names_what_is_wrong():
    runner = CliRunner()
    unknown = runner.invoke(build_root(), ["options", "play", "--agent", "nope", "-p", "tiny"])
    assert unknown.exit_code == 2 and "no agent 'nope'; agents: ['buy_and_hold'" in unknown.output
    llm = runner.invoke(build_root(), ["options", "play", "--agent", "llm", "-p", "tiny"])
    assert llm.exit_code == 2 and "--llm-url" in llm.output
    listed = runner.invoke(build_root(), ["options", "agents"])
    assert listed.exit_code == 0 and "iron_condor_16d" in listed.output.split()


def test_a_train_refused_for_its_data_leaves_no_run_folder(tmp_path):
    bad = tmp_path / "chain.csv"
    bad.write_text("date,underlying,expiry,strike,right,bid,ask\n"
                   "2024-03-01,XYZ,2024-03-15,100,C,2.9,1e308\n")  # fmt: skip
    args = ["options", "train", "-p", "tiny", "--data", str(bad),
            "--set", f"experiment.runs_dir={tmp_path / 'runs'}"]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 2 and "chain.csv" in result.output
    assert not list((tmp_path / "runs").rglob("config.json"))
