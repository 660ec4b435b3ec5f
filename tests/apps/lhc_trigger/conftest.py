from pathlib import Path

import pytest

from fieldrl.apps.lhc_trigger import APP
from fieldrl.apps.lhc_trigger.config import LHCTriggerConfig

SAMPLE = Path(__file__).parents[3] / "data" / "lhc_trigger" / "sample_nano.root"


@pytest.fixture
def tiny() -> LHCTriggerConfig:
    return APP.load_config("tiny")


@pytest.fixture
def sample() -> Path:
    assert SAMPLE.is_file(), "data/lhc_trigger/sample_nano.root is missing"
    return SAMPLE
