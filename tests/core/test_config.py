from pathlib import Path

import pytest
from pydantic import Field

from fieldrl.config import (
    ConfigError,
    FieldrlConfig,
    Section,
    config_hash,
    derive,
    describe_config,
    load_config,
    parse_override,
)


class Algo(Section):
    lr: float = Field(1e-3, gt=0)
    layers: list[int] = Field(default_factory=lambda: [64])


class Cfg(FieldrlConfig):
    algo: Algo = Field(default_factory=Algo)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_loads_toml_and_overrides(tmp_path):
    path = write(tmp_path, "a.toml", "[algo]\nlr = 0.01\n[experiment]\nseed = 4\n")
    cfg = load_config(Cfg, path, ["algo.layers=[8, 8]", "experiment.name=abc"])
    assert cfg.algo.lr == 0.01 and cfg.algo.layers == [8, 8]
    assert cfg.experiment.seed == 4 and cfg.experiment.name == "abc"


def test_unknown_key_names_key_and_file(tmp_path):
    path = write(tmp_path, "bad.toml", "[algo]\nlrr = 0.01\n")
    with pytest.raises(ConfigError) as err:
        load_config(Cfg, path)
    message = str(err.value)
    assert "unknown key 'algo.lrr'" in message and "bad.toml" in message
    assert "\n" not in message


def test_wrong_type_names_key_and_value(tmp_path):
    path = write(tmp_path, "bad.toml", '[algo]\nlr = "fast"\n')
    with pytest.raises(ConfigError, match=r"bad\.toml.*'algo\.lr'.*'fast'"):
        load_config(Cfg, path)


def test_constraint_violation_via_override():
    with pytest.raises(ConfigError, match=r"--set algo.lr=-1.*'algo\.lr'"):
        load_config(Cfg, None, ["algo.lr=-1"])


def test_unknown_override_key():
    with pytest.raises(ConfigError, match="unknown key 'algo.nope'"):
        load_config(Cfg, None, ["algo.nope=1"])


def test_override_into_a_scalar_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="'algo.lr': Input should be a valid number"):
        load_config(Cfg, None, ["algo.lr.x=1"])
    path = write(tmp_path, "a.toml", "[algo]\nlr = 0.1\n")
    with pytest.raises(ConfigError, match="'algo.lr' is not a section"):
        load_config(Cfg, path, ["algo.lr.x=1"])


def test_bad_toml_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(Cfg, write(tmp_path, "x.toml", "[algo\n"))
    with pytest.raises(ConfigError, match="not found"):
        load_config(Cfg, tmp_path / "missing.toml")


def test_base_preset_chain(tmp_path):
    write(tmp_path, "default.toml", "[algo]\nlr = 0.5\nlayers = [3]\n")
    quick = write(tmp_path, "quick.toml", 'base = "default.toml"\n[algo]\nlayers = [1]\n')
    cfg = load_config(Cfg, quick)
    assert cfg.algo.lr == 0.5 and cfg.algo.layers == [1]
    loop = write(tmp_path, "loop.toml", 'base = "loop.toml"\n')
    with pytest.raises(ConfigError, match="loops"):
        load_config(Cfg, loop)


def test_a_users_file_builds_on_a_shipped_preset(tmp_path):
    presets = tmp_path / "presets"
    presets.mkdir()
    write(presets, "default.toml", "[algo]\nlr = 0.5\nlayers = [3]\n")
    write(presets, "quick.toml", 'base = "default.toml"\n[algo]\nlayers = [2]\n')
    mine = write(tmp_path, "mine.toml", 'base = "quick.toml"\n[algo]\nlr = 0.1\n')
    cfg = load_config(Cfg, mine, presets=presets)
    assert cfg.algo.lr == 0.1 and cfg.algo.layers == [2]
    write(tmp_path, "quick.toml", "[algo]\nlayers = [7]\n")  # a file beside it comes first
    assert load_config(Cfg, mine, presets=presets).algo.layers == [7]
    with pytest.raises(ConfigError, match="not found"):
        load_config(Cfg, write(tmp_path, "x.toml", 'base = "nope.toml"\n'), presets=presets)


@pytest.mark.parametrize(
    ("text", "value"),
    [("a=3", 3), ("a=3e-4", 3e-4), ("a=true", True), ("a=[1,2]", [1, 2]), ("a=hello", "hello")],
)
def test_parse_override_values(text, value):
    assert parse_override(text) == (["a"], value)


def test_parse_override_rejects_garbage():
    with pytest.raises(ConfigError):
        parse_override("novalue")
    with pytest.raises(ConfigError):
        parse_override("a..b=1")


def test_config_hash_is_stable_and_sensitive():
    a, b = load_config(Cfg), load_config(Cfg)
    assert config_hash(a) == config_hash(b)
    assert config_hash(a) != config_hash(load_config(Cfg, None, ["algo.lr=0.5"]))


def test_the_described_default_of_a_section_used_twice_is_its_parents():
    class Twice(FieldrlConfig):
        algo: Algo = Field(default_factory=Algo)
        slow: Algo = Field(default_factory=lambda: Algo(lr=1e-5))

    text = describe_config(load_config(Twice, None, ["slow.lr=0.5"]))
    slow = text[text.index("[slow]") :]
    assert "lr = 0.5  # float; default 1e-05" in slow
    assert "lr = 0.001  # float; default 0.001" in text[text.index("[algo]") :]


def test_a_derived_config_merges_sections_and_is_validated():
    cfg = Cfg(algo={"lr": 0.5, "layers": [4]})
    derived = derive(cfg, algo={"lr": 0.25}, experiment={"seed": 9})
    assert derived.algo.lr == 0.25 and derived.algo.layers == [4] and derived.experiment.seed == 9
    assert cfg.algo.lr == 0.5  # the original is untouched
    with pytest.raises(ConfigError, match="algo.lr"):
        derive(cfg, algo={"lr": -1.0})  # model_copy(update=...) would have kept it
    with pytest.raises(ConfigError, match="unknown key 'algo.lrr'"):
        derive(cfg, algo={"lrr": 1.0})


def test_a_derived_dict_field_is_replaced_not_merged():
    class Mixed(FieldrlConfig):
        weights: dict[str, float] = Field(default_factory=lambda: {"a": 1.0, "b": 2.0})

    assert derive(Mixed(), weights={}).weights == {}  # merging would have kept a and b
