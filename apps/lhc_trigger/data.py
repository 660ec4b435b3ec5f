"""Events in NanoAOD's columnar shape, read from ROOT files (a TTree or, as newer CMS open
data ships, an RNTuple) and written to them (a TTree) with uproot.

:class:`Events` is the one event format of the app: the simulator makes it, the reader
yields it chunk by chunk (never a whole file), the triggers score it. Files are checked as
they are opened: a missing branch, a file that is not ROOT, or a truncated one raises
:class:`DataError` naming the file and the branch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.errors import DataError

__all__ = [
    "BACKGROUND",
    "HAA4B",
    "TTBAR",
    "Events",
    "read_events",
    "write_events",
]

BACKGROUND, TTBAR, HAA4B = 0, 1, 2
REQUIRED = ("nJet", "Jet_pt", "Jet_eta", "Jet_phi")
NPV_ROLES = ("PV_npvsGood", "PV_npvs")
LABEL_BRANCH = "fieldrl_label"  # truth label in simulator-written files; absent in real data
_LARGE_FILE_VERSION = 1_000_000  # fVersion from which fEND is 64-bit


@dataclass(frozen=True)
class Events:
    """A chunk of events: per-event arrays and jagged jets (flat values + per-event counts).

    ``label`` is BACKGROUND, TTBAR or HAA4B (real data is all background unless signal was
    overlaid); ``true_pileup`` is NaN where unknown (data without ``Pileup_nTrueInt``).
    """

    counts: np.ndarray
    jet_pt: np.ndarray
    jet_eta: np.ndarray
    jet_phi: np.ndarray
    npv: np.ndarray
    run: np.ndarray
    lumi_block: np.ndarray
    true_pileup: np.ndarray
    label: np.ndarray

    def __post_init__(self) -> None:
        dtypes = {
            "counts": np.int32,
            "jet_pt": np.float32,
            "jet_eta": np.float32,
            "jet_phi": np.float32,
            "npv": np.int32,
            "run": np.int32,
            "lumi_block": np.int32,
            "true_pileup": np.float32,
            "label": np.int8,
        }
        for name, dtype in dtypes.items():
            object.__setattr__(self, name, np.asarray(getattr(self, name), dtype=dtype))
        n = self.counts.size
        for name in ("npv", "run", "lumi_block", "true_pileup", "label"):
            if getattr(self, name).shape != (n,):
                raise DataError(f"events: {name} has shape {getattr(self, name).shape}, not ({n},)")
        jets = int(self.counts.sum())
        for name in ("jet_pt", "jet_eta", "jet_phi"):
            if getattr(self, name).shape != (jets,):
                raise DataError(
                    f"events: {name} has {getattr(self, name).size} jets, nJet sums to {jets}"
                )

    @property
    def n(self) -> int:
        return int(self.counts.size)

    def replace(self, **changes: np.ndarray) -> Events:
        return dataclasses.replace(self, **changes)

    def jet_event(self) -> np.ndarray:
        """For each jet, the index of its event."""
        return np.repeat(np.arange(self.n), self.counts)

    def slice(self, start: int, stop: int) -> Events:
        """Events ``start:stop`` as a new chunk."""
        offsets = np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)])
        lo, hi = offsets[start], offsets[stop]
        per_event = {f: getattr(self, f)[start:stop] for f in _EVENT_FIELDS}
        return Events(
            **per_event,
            jet_pt=self.jet_pt[lo:hi],
            jet_eta=self.jet_eta[lo:hi],
            jet_phi=self.jet_phi[lo:hi],
        )

    @staticmethod
    def concat(chunks: Sequence[Events]) -> Events:
        fields = {f.name: np.concatenate([getattr(c, f.name) for c in chunks]) for f in _FIELDS}
        return Events(**fields)

    def leading_jets(self, k: int) -> np.ndarray:
        """``[n, k, 3]`` (pt, eta, phi) of each event's k highest-pT jets, zero-padded."""
        event = self.jet_event()
        order = np.lexsort((-self.jet_pt, event))
        starts = np.concatenate([[0], np.cumsum(self.counts, dtype=np.int64)[:-1]])
        rank = np.arange(order.size) - np.repeat(starts, self.counts)
        keep = rank < k
        out = np.zeros((self.n, k, 3), np.float32)
        src = order[keep]
        ev, rk = event[src], rank[keep]
        out[ev, rk, 0] = self.jet_pt[src]
        out[ev, rk, 1] = self.jet_eta[src]
        out[ev, rk, 2] = self.jet_phi[src]
        return out


_FIELDS = dataclasses.fields(Events)
_EVENT_FIELDS = ("counts", "npv", "run", "lumi_block", "true_pileup", "label")


def write_events(path: str | Path, events: Events | Sequence[Events], tree: str = "Events") -> Path:
    """Write NanoAOD-like ROOT (``nJet``, ``Jet_pt``..., ``PV_npvs``, ``run``...); atomic."""
    import awkward as ak
    import uproot

    chunks = [events] if isinstance(events, Events) else list(events)
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with uproot.recreate(tmp, compression=uproot.LZ4(1)) as f:
        for i, ev in enumerate(chunks):
            jets = ak.zip(
                {
                    "pt": ak.unflatten(ev.jet_pt, ev.counts),
                    "eta": ak.unflatten(ev.jet_eta, ev.counts),
                    "phi": ak.unflatten(ev.jet_phi, ev.counts),
                }
            )
            branches = {
                "Jet": jets,
                "PV_npvs": ev.npv,
                "PV_npvsGood": ev.npv,
                "run": ev.run.astype(np.uint32),
                "luminosityBlock": ev.lumi_block.astype(np.uint32),
                "Pileup_nTrueInt": ev.true_pileup,
                LABEL_BRANCH: ev.label,
            }
            if i == 0:
                f.mktree(
                    tree,
                    {k: v.type if k == "Jet" else v.dtype for k, v in branches.items()},
                    field_name=lambda outer, inner: f"{outer}_{inner}",
                    counter_name=lambda counted: f"n{counted}",
                )
            f[tree].extend(branches)
    tmp.replace(path)
    return path


def read_events(
    files: Sequence[str | Path],
    branches: dict[str, str] | None = None,
    chunk_events: int = 200_000,
    tree: str = "Events",
    min_jet_id: int = 0,
) -> Iterator[Events]:
    """Stream :class:`Events` from NanoAOD files in chunks of about ``chunk_events``.

    ``branches`` maps our names (``Jet_pt``...) to the names in the files. ``nJet`` and the
    jet kinematics are required, and one of ``PV_npvsGood`` / ``PV_npvs``; ``run``,
    ``luminosityBlock``, ``Jet_jetId`` and ``Pileup_nTrueInt`` are used when present.
    """
    names = {role: role for role in (*REQUIRED, "Jet_jetId", *NPV_ROLES)}
    names |= {"run": "run", "luminosityBlock": "luminosityBlock"}
    names |= {"Pileup_nTrueInt": "Pileup_nTrueInt", LABEL_BRANCH: LABEL_BRANCH}
    names |= dict(branches or {})
    for path in files:
        yield from _read_file(Path(path), names, chunk_events, tree, min_jet_id)


def _open_tree(path: Path, tree: str) -> tuple[Any, Any]:
    """The open uproot file and its tree or RNTuple (close the file when done)."""
    import uproot

    if not path.is_file():
        raise DataError(f"{path}: no such file")
    _check_header(path)
    try:
        f = uproot.open(path)
    except Exception as exc:  # uproot raises many types on a damaged header
        raise _unreadable(path, "cannot open as ROOT", exc) from None
    if tree not in f:
        f.close()
        raise DataError(f"{path}: no tree {tree!r} (has {sorted(set(f.keys(cycle=False)))})")
    try:
        return f, f[tree]
    except Exception as exc:
        f.close()
        raise _unreadable(path, f"cannot read tree {tree!r}", exc) from None


def _check_header(path: Path) -> None:
    """A ROOT file starts with ``root`` and records its own length (fEND): a file shorter
    than that was cut off, which is said plainly rather than as uproot's missing chunk."""
    with path.open("rb") as fh:
        header = fh.read(20)
    if header[:4] != b"root":
        raise DataError(f"{path}: not a ROOT file (no 'root' magic bytes)")
    size = path.stat().st_size
    # fVersion, fBEGIN, then fEND: 64-bit in files written for over 2 GB, else 32-bit
    width = 8 if int.from_bytes(header[4:8], "big") >= _LARGE_FILE_VERSION else 4
    if len(header) < 12 + width:
        raise DataError(f"{path}: truncated: {size} bytes, shorter than a ROOT file header")
    declared = int.from_bytes(header[12 : 12 + width], "big")
    if size < declared:
        raise DataError(
            f"{path}: truncated: the file has {size:,} bytes, its ROOT header says "
            f"{declared:,} (an interrupted copy or download?)"
        )


def _unreadable(path: Path, what: str, exc: Exception) -> DataError:
    """uproot's failure as one line naming the file (its messages span several lines)."""
    detail = " ".join(str(exc).split())
    return DataError(f"{path}: {what} ({type(exc).__name__}: {detail})")


def _read_file(
    path: Path, names: dict[str, str], chunk_events: int, tree: str, min_jet_id: int
) -> Iterator[Events]:
    f, t = _open_tree(path, tree)
    with f:
        present = set(t.keys())
        for role in REQUIRED:
            if names[role] not in present:
                raise DataError(f"{path}: missing branch {names[role]!r} (needed as {role})")
        npv_role = next((r for r in NPV_ROLES if names[r] in present), None)
        if npv_role is None:
            wanted = " or ".join(repr(names[r]) for r in NPV_ROLES)
            raise DataError(f"{path}: missing branch {wanted} (the primary-vertex count)")
        optional = ("run", "luminosityBlock", "Jet_jetId", "Pileup_nTrueInt", LABEL_BRANCH)
        roles = [*REQUIRED, npv_role, *(r for r in optional if names[r] in present)]
        columns = sorted({names[r] for r in roles})
        try:
            for arrays in t.iterate(columns, step_size=chunk_events, library="ak", how=dict):
                by_role = {role: _field(arrays, names[role]) for role in roles}
                yield _to_events(path, by_role, npv_role, min_jet_id)
        except DataError:
            raise
        except Exception as exc:  # damaged baskets, decompression errors...
            raise _unreadable(path, "unreadable data", exc) from None


def _field(arrays: dict[str, Any], name: str) -> Any:
    """Field ``name`` of what uproot read. RNTuple reads return more than was asked for
    (CMS NanoAOD's ``Jet_pt`` comes with the ``_collectionN`` it projects from) and a
    collection's field ``Jet.pt`` inside its collection ``Jet``."""
    if name in arrays:
        return arrays[name]
    collection, *path = name.split(".")
    value = arrays[collection]
    for part in path:
        value = value[part]
    return value


def _to_events(path: Path, arrays: dict[str, np.ndarray], npv_role: str, min_jet_id: int) -> Events:
    import awkward as ak

    counts = ak.to_numpy(arrays["nJet"]).astype(np.int64)
    n = counts.size

    def flat(role: str) -> np.ndarray:
        jagged = arrays[role]
        if not np.array_equal(ak.to_numpy(ak.num(jagged)), counts):
            raise DataError(f"{path}: branch {role!r} does not match nJet jet counts")
        values = ak.to_numpy(ak.flatten(jagged))
        if values.size != counts.sum():
            raise DataError(
                f"{path}: branch {role!r} has {values.size} jets, nJet sums to {counts.sum()}"
            )
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            raise DataError(f"{path}: branch {role!r} has NaN or infinite values")
        return values

    pt, eta, phi = flat("Jet_pt"), flat("Jet_eta"), flat("Jet_phi")
    if "Jet_jetId" in arrays and min_jet_id > 0:
        good = flat("Jet_jetId") >= min_jet_id
        counts = np.bincount(np.repeat(np.arange(n), counts)[good], minlength=n)
        pt, eta, phi = pt[good], eta[good], phi[good]

    def column(role: str, default: np.ndarray) -> np.ndarray:
        return ak.to_numpy(arrays[role]) if role in arrays else default

    zeros = np.zeros(n, np.int32)
    return Events(
        counts=counts,
        jet_pt=pt,
        jet_eta=eta,
        jet_phi=phi,
        npv=column(npv_role, zeros),
        run=column("run", zeros),
        lumi_block=column("luminosityBlock", zeros),
        true_pileup=column("Pileup_nTrueInt", np.full(n, np.nan)),
        label=column(LABEL_BRANCH, zeros),
    )
