from __future__ import annotations

import pytest

from fieldrl.apps.rat.config import RatConfig


@pytest.fixture
def rat_config():
    """A config for one task, short episodes."""

    def make(task: str = "explore", **task_fields) -> RatConfig:
        return RatConfig.model_validate({"task": {"name": task, "duration": 2.0, **task_fields}})

    return make
