"""One call to seed python, numpy and torch."""

from __future__ import annotations

import random
import zlib
from typing import Any

import numpy as np
import torch

from fieldrl.errors import FieldrlError

__all__ = ["derive_seed", "get_rng_state", "seed_everything", "set_rng_state", "setup_process"]


def seed_everything(seed: int, *, deterministic: bool = False) -> int:
    """Seed ``random``, numpy's global generator and torch; return the seed for the run record.

    ``deterministic=True`` also asks torch for deterministic kernels (slower on some ops).
    """
    if not 0 <= seed < 2**32:
        raise ValueError(f"seed must be in [0, 2**32), got {seed}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return seed


def derive_seed(seed: int, *keys: int | str) -> int:
    """A seed for a part of a run (a worker, a copy of an environment, the held-out clips)
    from the run's seed and the part's keys, indices or names: independent streams for
    different keys, the same for the same ones, on any machine (a name keys by its CRC-32,
    not by python's salted ``hash``)."""
    ints = [zlib.crc32(k.encode()) if isinstance(k, str) else k for k in keys]
    return int(np.random.SeedSequence([seed, *ints]).generate_state(1)[0])


def get_rng_state(*generators: np.random.Generator) -> dict[str, Any]:
    """The python, numpy and torch global generator states, plus those of ``generators``
    (a trainer's own numpy generators), in a checkpoint-friendly form."""
    version, state, gauss = random.getstate()
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"]["key"] = numpy_state["state"]["key"].tolist()
    return {
        "python": [version, list(state), gauss],
        "numpy": numpy_state,
        "torch": torch.get_rng_state(),
        "generators": [g.bit_generator.state for g in generators],
    }


def set_rng_state(state: dict[str, Any], *generators: np.random.Generator) -> None:
    """Restore what :func:`get_rng_state` captured, ``generators`` in the same order."""
    saved = state.get("generators", [])
    if len(saved) != len(generators):
        raise FieldrlError(
            f"the checkpoint holds {len(saved)} generator states where this trainer keeps "
            f"{len(generators)}: it was written by another version of fieldrl, so the run "
            "cannot resume exactly; start it afresh"
        )
    version, inner, gauss = state["python"]
    random.setstate((version, tuple(inner), gauss))
    numpy_state = dict(state["numpy"])
    numpy_state["state"] = dict(numpy_state["state"])
    numpy_state["state"]["key"] = np.asarray(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state(numpy_state)
    torch.set_rng_state(state["torch"])
    for generator, generator_state in zip(generators, saved, strict=True):
        generator.bit_generator.state = generator_state


def setup_process(config: Any) -> None:
    """Apply a config's ``experiment`` part to this process: torch threads, then the seed."""
    torch.set_num_threads(config.experiment.threads)
    seed_everything(config.experiment.seed)
