"""Typed configs: pydantic models loaded from TOML presets, with ``--set a.b=value`` overrides.

Every app describes its config as a tree of :class:`Section` models (unknown keys are
errors). A preset is a TOML file; it may name another preset with ``base = "other.toml"``
(next to it, or one of the app's shipped presets) and then lists only what differs.
Errors are one line and name the key and the file.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import UnionType
from typing import Any, ClassVar, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fieldrl.errors import FieldrlError

__all__ = [
    "ConfigError",
    "ExperimentConfig",
    "FieldrlConfig",
    "Section",
    "config_hash",
    "derive",
    "describe_config",
    "load_config",
    "parse_override",
    "preset_comments",
    "preset_summary",
]

C = TypeVar("C", bound=BaseModel)


class ConfigError(FieldrlError, ValueError):
    """A config that cannot be loaded: the message names the key and where it came from."""


class Section(BaseModel):
    """Base of every config part: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


LoggerName = Literal["stdout", "jsonl", "tensorboard", "mlflow"]


class ExperimentConfig(Section):
    """What every run has, whatever the app: its name, seed, folders, logging, checkpoints."""

    name: str = Field("run", description="Run name, appended to the UTC time in the run folder.")
    seed: int = Field(0, ge=0, description="Seed for python, numpy and torch.")
    runs_dir: str = Field("runs", description="Root of the run folders.")
    loggers: list[LoggerName] = Field(
        default_factory=lambda: ["stdout", "jsonl", "tensorboard"],
        description="Metric writers; 'mlflow' needs the tracking extra.",
    )
    mlflow_uri: str | None = Field(
        None, description="MLflow tracking URI; default sqlite:///<runs_dir>/mlflow.db."
    )
    checkpoint_every: int = Field(10, ge=1, description="Checkpoint interval, in app units.")
    keep_checkpoints: int = Field(3, ge=1, description="How many recent checkpoints to keep.")
    threads: int = Field(1, ge=1, description="torch intra-op threads.")


class FieldrlConfig(Section):
    """Root of an app's config: the experiment part plus the app's own sections. ``app``
    is the app's CLI name, said once here: run folders, run loading and the CLI take it
    from the config model."""

    app: ClassVar[str] = "fieldrl"
    experiment: ExperimentConfig = Field(default_factory=ExperimentConfig)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``a.b=value``; the value is TOML (``3``, ``true``, ``[1, 2]``) or else a string."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")):
        raise ConfigError(
            f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. algo.lr=3e-4"
        )
    raw = raw.strip()
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key.split("."), value


def _read_toml(
    path: Path, seen: tuple[Path, ...] = (), presets: Path | None = None
) -> dict[str, Any]:
    path = path.resolve()
    if path in seen:
        raise ConfigError(f"{path}: 'base' chain loops back to itself")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    base = data.pop("base", None)
    if base is None:
        return data
    if not isinstance(base, str):
        raise ConfigError(f"{path}: 'base' must be a file name, got {base!r}")
    base_path = path.parent / base
    if not base_path.is_file() and presets is not None and (presets / base).is_file():
        base_path = presets / base  # a user's file building on a shipped preset
    return _deep_merge(_read_toml(base_path, (*seen, path), presets), data)


def _deep_merge(base: dict[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in update.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(dict(merged[key]), value)
        else:
            merged[key] = value
    return merged


def _set_path(data: dict[str, Any], path: list[str], value: Any, origin: str) -> None:
    node = data
    for depth, part in enumerate(path[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{origin}: '{'.'.join(path[: depth + 1])}' is not a section")
        node = child
    node[path[-1]] = value


def _section_at(model: type[BaseModel], path: Sequence[Any]) -> type[BaseModel] | None:
    """The config section model at a dotted path (None past a leaf or a list)."""
    for part in path:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _suggest(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """Where a key is unknown: the nearest valid keys beside it, or every one."""
    section = _section_at(model, loc[:-1])
    if section is None:
        return ""
    valid = list(section.model_fields)
    prefix = ".".join(str(p) for p in loc[:-1])
    dotted = [f"{prefix}.{k}" if prefix else k for k in valid]
    close = difflib.get_close_matches(str(loc[-1]), valid, n=3, cutoff=0.6)
    every = ""
    if issubclass(model, FieldrlConfig):
        every = f" (every key: `fieldrl {model.app} config`)"
    if close:
        near = " or ".join(f"'{d}'" for d in dotted if d.split(".")[-1] in close)
        return f"; did you mean {near}?{every}"
    return f"; valid keys here: {', '.join(dotted)}{every}"


def _describe(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    key = ".".join(str(p) for p in error["loc"]) or "<root>"
    if error["type"] == "extra_forbidden":
        return f"unknown key '{key}'{_suggest(model, error['loc'])}"
    if error["type"] == "missing":
        return f"missing key '{key}'"
    if error["type"] == "value_error" and not error["loc"]:  # a check across sections
        return str(error["ctx"]["error"]) if "error" in error.get("ctx", {}) else error["msg"]
    return f"'{key}': {error['msg']} (got {error.get('input')!r})"


def load_config(
    model: type[C],
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
    data: Mapping[str, Any] | None = None,
    origin: str | None = None,
    presets: Path | None = None,
) -> C:
    """Build ``model`` from a TOML file (or a dict), then apply ``--set`` overrides. A
    ``base`` is looked up next to the file that names it, then in ``presets``.

    Raises :class:`ConfigError` with one line naming the offending key and its source.
    """
    raw: dict[str, Any] = dict(data) if data is not None else {}
    if path is not None:
        origin = origin or str(path)
        raw = _deep_merge(raw, _read_toml(Path(path), presets=presets))
    origin = origin or ("<defaults>" if data is None else "<data>")
    for text in overrides:
        keys, value = parse_override(text)
        _set_path(raw, keys, value, f"--set {text}")
    if overrides:
        origin += " with --set " + " ".join(overrides)
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors()
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ConfigError(f"{origin}: {_describe(errors[0], model)}{more}") from None


def derive(config: C, **sections: Any) -> C:
    """``config`` with some fields replaced, section by section (a section given as a dict
    merges into the section; any other value, a dict-valued field included, replaces), and
    validated like a loaded config, unlike ``model_copy(update=...)``:
    ``derive(cfg, task={"name": "explore"}, experiment={"seed": 3})``. A wrong key or value
    is a :class:`ConfigError` naming it."""
    return load_config(type(config), data=_merged(config, sections), origin="a derived config")


def _merged(model: BaseModel, updates: Mapping[str, Any]) -> dict[str, Any]:
    data = {name: getattr(model, name) for name in type(model).model_fields}
    for key, value in updates.items():
        current = data.get(key)
        if isinstance(current, BaseModel) and isinstance(value, Mapping):
            data[key] = _merged(current, value)
        else:
            data[key] = value
    return {k: v.model_dump() if isinstance(v, BaseModel) else v for k, v in data.items()}


def config_hash(config: BaseModel | Mapping[str, Any]) -> str:
    """A short, stable hash of a resolved config, or of its JSON form (canonical JSON,
    sha256)."""
    data = config.model_dump(mode="json") if isinstance(config, BaseModel) else config
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


_KEY_LINE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*=\s*[^#]*#\s*(.+?)\s*$")
_SECTION_LINE = re.compile(r"^\s*\[([A-Za-z0-9_.]+)\]")


def preset_comments(path: str | Path, presets: Path | None = None) -> dict[str, str]:
    """``{dotted key: comment}`` from the end-of-line comments of a TOML preset and the
    presets it builds on (a file's own comment wins over its base's)."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    comments: dict[str, str] = {}
    base = tomllib.loads(text).get("base")
    if isinstance(base, str):
        base_path = path.parent / base
        if not base_path.is_file() and presets is not None:
            base_path = presets / base
        if base_path.is_file():
            comments = preset_comments(base_path, presets)
    section = ""
    for line in text.splitlines():
        if match := _SECTION_LINE.match(line):
            section = match.group(1) + "."
        elif match := _KEY_LINE.match(line):
            comments[section + match.group(1)] = match.group(2)
    return comments


def preset_summary(path: str | Path) -> str:
    """The first sentence of a preset's leading comment block (what the preset is for)."""
    lines = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    end = re.search(r"\.(\s|$)", text)
    return text[: end.start()] if end else text


def describe_config(config: BaseModel, comments: Mapping[str, str] | None = None) -> str:
    """The resolved config as commented TOML: every key with its value, and after it the
    key's type, its default, its description and the preset's own comment."""
    comments = comments or {}
    lines: list[str] = []

    def walk(model: BaseModel, prefix: str, defaults: BaseModel | None = None) -> None:
        """``defaults``: the section's default as its parent declares it (a section used
        twice may default differently in each place), else its own fields' defaults."""

        def default_of(name: str, field: Any) -> Any:
            if defaults is not None:
                return getattr(defaults, name)
            return field.get_default(call_default_factory=True)

        leaves, sections = [], []
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            (sections if isinstance(value, BaseModel) else leaves).append((name, field, value))
        if leaves:
            if prefix:
                lines.append(f"\n[{prefix.rstrip('.')}]")
            for name, field, value in leaves:
                notes = [_type_name(field.annotation)]
                default = default_of(name, field)
                notes.append(f"default {_toml(default)}")
                if field.description:
                    notes.append(field.description.rstrip("."))
                if prefix + name in comments:
                    notes.append(f"preset: {comments[prefix + name]}")
                setting = f"{name} = {_toml(value)}" if value is not None else f"# {name} unset"
                lines.append(f"{setting}  # {'; '.join(notes)}")
        for name, field, value in sections:
            default = default_of(name, field)
            walk(value, f"{prefix}{name}.", default if type(default) is type(value) else None)

    walk(config, "")
    return "\n".join(lines).strip() + "\n"


def _toml(value: Any) -> str:
    """A value as TOML (inline tables for mappings); None, which TOML lacks, as ``unset``."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)  # TOML writes inf and nan as Python does
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{json.dumps(str(k))} = {_toml(v)}" for k, v in value.items()
                                if v is not None) + " }"  # fmt: skip
    return json.dumps(str(value))


def _type_name(annotation: Any) -> str:
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (Union, UnionType):
        return " or ".join(_type_name(a) for a in args if a is not type(None)) + (
            " or unset" if type(None) in args else ""
        )
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))
