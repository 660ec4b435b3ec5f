from fieldrl.apps.battles.scaling import grid_for, measure, measure_in_subprocess


def test_measurements_report_rates_and_memory():
    for kind in ("env", "env_policy"):
        row = measure(kind, 200, 3)
        assert row["agent_steps_per_s"] > 0 and row["peak_mem_mb"] > 0
    assert grid_for(200) == 16 and grid_for(100_000) == 200
    assert "error" in measure_in_subprocess("nonsense", 10, 1)
