from fieldrl.apps.battles.scaling import grid_for, measure, measure_in_subprocess


def test_measurements_report_rates_and_memory():
    for kind, directions in (("env", False), ("env_policy", False), ("env_policy", True)):
        row = measure(kind, 200, 3, directions)
        assert row["agent_steps_per_s"] > 0 and row["peak_mem_mb"] > 0
    assert measure_in_subprocess("env_policy", 200, 2, directions=True)["agent_steps_per_s"] > 0
    assert grid_for(200) == 16 and grid_for(100_000) == 200
    assert "error" in measure_in_subprocess("nonsense", 10, 1)
