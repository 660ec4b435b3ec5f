"""Self-describing, atomic, never-unpickled checkpoints.

A checkpoint is a folder ``step_<N>/`` holding ``weights.safetensors`` (every tensor) and
``meta.json`` (step, the app's metadata, the state tree with tensors replaced by references,
package versions, and the sha256 of the weights file). It is written in a temp folder and
renamed into place, so a kill leaves either a whole checkpoint or none. Loading checks the
hash and refuses anything that is not safetensors + JSON: nothing is ever unpickled.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from fieldrl.atomic import fsync_dir
from fieldrl.errors import FieldrlError

__all__ = [
    "Checkpoint",
    "CheckpointError",
    "CheckpointManager",
    "load_checkpoint",
    "pack_state",
    "save_checkpoint",
    "unpack_state",
]

WEIGHTS = "weights.safetensors"
META = "meta.json"
FORMAT = "fieldrl-checkpoint/1"
_STEP_DIR = re.compile(r"^step_(\d+)$")
_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol 2+ and torch.save's zip


class CheckpointError(FieldrlError, RuntimeError):
    """A checkpoint that cannot be trusted or read; the message says which file and why."""


@dataclass(frozen=True)
class Checkpoint:
    """A loaded checkpoint: its step, the restored state tree and the app's metadata."""

    path: Path
    step: int
    state: dict[str, Any]
    metadata: dict[str, Any]


def pack_state(tree: Any) -> tuple[Any, dict[str, torch.Tensor]]:
    """Split a nested state (dicts, lists, tensors, JSON scalars) into JSON and a tensor dict.

    Tensors become ``{"__tensor__": key}``; dicts with non-string keys (an optimizer's
    state) become ``{"__items__": [[key, value], ...]}`` so their keys survive JSON.
    """
    tensors: dict[str, torch.Tensor] = {}

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, torch.Tensor):
            tensors[path] = node.detach().cpu().contiguous()
            return {"__tensor__": path}
        if isinstance(node, dict):
            if all(isinstance(k, str) for k in node):
                return {k: walk(v, f"{path}/{k}") for k, v in node.items()}
            return {"__items__": [[k, walk(v, f"{path}/{k}")] for k, v in node.items()]}
        if isinstance(node, list | tuple):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(node)]
        if node is None or isinstance(node, bool | int | float | str):
            return node
        raise TypeError(f"cannot checkpoint {type(node).__name__} at '{path or '/'}'")

    return walk(tree, ""), tensors


def unpack_state(tree: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """Inverse of :func:`pack_state`."""
    if isinstance(tree, dict):
        if set(tree) == {"__tensor__"}:
            return tensors[tree["__tensor__"]]
        if set(tree) == {"__items__"}:
            return {k: unpack_state(v, tensors) for k, v in tree["__items__"]}
        return {k: unpack_state(v, tensors) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unpack_state(v, tensors) for v in tree]
    return tree


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_checkpoint(
    directory: str | Path,
    step: int,
    state: dict[str, Any],
    metadata: dict[str, Any] | None = None,
) -> Path:
    """Atomically write ``state`` (module/optimizer state dicts, RNG states...) as ``step_<N>/``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tree, tensors = pack_state(state)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-step_", dir=directory))
    try:
        weights = tmp / WEIGHTS
        save_file(tensors, str(weights))
        meta = {
            "format": FORMAT,
            "step": int(step),
            "state": tree,
            "metadata": metadata or {},
            "weights_sha256": _sha256(weights),
        }
        (tmp / META).write_text(json.dumps(meta, indent=1, allow_nan=False))
        for name in (WEIGHTS, META):
            fd = os.open(tmp / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        final = directory / f"step_{int(step):010d}"
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(directory)
    return final


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> Checkpoint:
    """Load and verify a checkpoint folder; raise :class:`CheckpointError` on any doubt."""
    path = Path(path)
    weights, meta_path = path / WEIGHTS, path / META
    if path.is_file():
        raise CheckpointError(
            f"{path}: a checkpoint is a folder with {WEIGHTS} and {META}; "
            + (
                "this file looks like a pickle/torch.save file, which fieldrl refuses to unpickle"
                if _looks_pickled(path)
                else "got a single file"
            )
        )
    for required in (weights, meta_path):
        if not required.is_file():
            raise CheckpointError(f"{path}: missing {required.name} (incomplete checkpoint)")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{meta_path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CheckpointError(f"{meta_path}: not a {FORMAT} metadata file")
    if _looks_pickled(weights):
        raise CheckpointError(f"{weights}: is a pickle/torch.save file; refusing to unpickle it")
    if _sha256(weights) != meta.get("weights_sha256"):
        raise CheckpointError(f"{weights}: sha256 does not match {META} (truncated or tampered)")
    try:
        tensors = load_file(str(weights), device=map_location)
    except (SafetensorError, OSError) as exc:
        raise CheckpointError(f"{weights}: unreadable safetensors file ({exc})") from None
    try:
        state = unpack_state(meta["state"], tensors)
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{meta_path}: state refers to a missing tensor ({exc})") from None
    return Checkpoint(path=path, step=int(meta["step"]), state=state, metadata=meta["metadata"])


def _looks_pickled(path: Path) -> bool:
    """Whether a file starts like a pickle or a torch.save zip (and not like safetensors,
    whose little-endian header length can itself start with the pickle byte 0x80)."""
    with path.open("rb") as handle:
        head = handle.read(9)
    header = int.from_bytes(head[:8], "little") if len(head) == 9 else -1
    if head[8:9] == b"{" and 8 + header <= path.stat().st_size:
        return False
    return any(head.startswith(magic) for magic in _PICKLE_MAGIC)


class CheckpointManager:
    """Checkpoints of one run: save with retention of the last ``keep``, find the newest."""

    def __init__(self, directory: str | Path, keep: int = 3) -> None:
        self.directory = Path(directory)
        self.keep = keep

    def steps(self) -> list[int]:
        """Steps of the complete checkpoints, oldest first (temp folders are ignored)."""
        if not self.directory.is_dir():
            return []
        found = (_STEP_DIR.match(p.name) for p in self.directory.iterdir() if p.is_dir())
        return sorted(int(m.group(1)) for m in found if m)

    def path(self, step: int) -> Path:
        return self.directory / f"step_{step:010d}"

    def save(
        self, step: int, state: dict[str, Any], metadata: dict[str, Any] | None = None
    ) -> Path:
        """Save, then delete all but the ``keep`` newest checkpoints and any stale temp folder."""
        final = save_checkpoint(self.directory, step, state, metadata)
        for old in self.steps()[: -self.keep]:
            shutil.rmtree(self.path(old), ignore_errors=True)
        for stale in self.directory.glob(".tmp-step_*"):
            shutil.rmtree(stale, ignore_errors=True)
        return final

    def latest(self) -> Path | None:
        """The newest checkpoint folder, or ``None`` if there is none."""
        steps = self.steps()
        return self.path(steps[-1]) if steps else None

    def load_final(self, map_location: str = "cpu") -> Checkpoint | None:
        """The newest checkpoint that ended its training (metadata ``finished``), else the
        newest intact one. A newer unfinished checkpoint beside a finished one (left by a
        run stopped part-way through more training) is named on stderr and passed over."""
        steps = self.steps()
        for step in reversed(steps):
            try:
                meta = json.loads((self.path(step) / META).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError):
                continue
            if isinstance(meta, dict) and (meta.get("metadata") or {}).get("finished"):
                newer = [s for s in steps if s > step]
                if newer:
                    print(f"fieldrl: {self.directory}: using step {step}, where training "
                          f"finished; passing over the unfinished step(s) "
                          f"{', '.join(map(str, newer))}", file=sys.stderr)  # fmt: skip
                return load_checkpoint(self.path(step), map_location)
        return self.load_latest(map_location)

    def load_latest(
        self, map_location: str = "cpu", *, set_aside_corrupt: bool = False
    ) -> Checkpoint | None:
        """Load the newest intact checkpoint (``None`` if there is none). A newer corrupt one
        is skipped, saying so on stderr; with ``set_aside_corrupt`` (resuming training) it is
        renamed ``corrupt-step_N`` so training can pass its step again. When no checkpoint is
        intact the newest one's error is raised."""
        skipped: list[tuple[int, CheckpointError]] = []
        for step in reversed(self.steps()):
            try:
                checkpoint = load_checkpoint(self.path(step), map_location)
            except CheckpointError as exc:
                skipped.append((step, exc))
                continue
            for bad, exc in skipped:
                note = ""
                if set_aside_corrupt:
                    self.path(bad).rename(self.directory / f"corrupt-step_{bad:010d}")
                    note = f" (set aside as corrupt-step_{bad:010d})"
                print(f"fieldrl: {exc}; using the intact checkpoint at step {step} instead"
                      f"{note}", file=sys.stderr)  # fmt: skip
            return checkpoint
        if skipped:
            raise skipped[0][1]
        return None
