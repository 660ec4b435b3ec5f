"""Scoring components, transforms, aggregation and the PMO tasks, with rdkit only.

A component maps molecules to raw values (a descriptor, a similarity, a SMARTS match); a
transform maps raw values to [0, 1]; an :class:`Objective` combines transformed components
by a weighted geometric or arithmetic mean. The 20 rdkit-only tasks of the PMO benchmark
(Gao et al. 2022) are written as objectives here, following the definitions PMO scores with
(the TDC oracles, themselves GuacaMol's): same targets, fingerprints, modifiers and means.
PyTDC changed four of them after PMO's published table; the definitions PMO scored are here
too, as ``<task>_prev`` (PyTDC's own name for them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np
from rdkit import Chem, DataStructs, RDLogger
from rdkit.Chem import QED, Descriptors, rdMolDescriptors
from rdkit.Chem import rdFingerprintGenerator as fingerprints

RDLogger.DisableLog("rdApp.*")  # invalid SMILES are counted and reported, not printed

__all__ = [
    "CHANGED_SINCE_PMO",
    "COMPONENTS",
    "PMO_TASKS",
    "PREV_TASKS",
    "TASKS",
    "VALIDATION_TASKS",
    "Component",
    "Objective",
    "Transform",
    "canonical",
    "smiles_atom_tally",
    "to_mol",
]


def to_mol(smiles: str) -> Chem.Mol | None:
    """A sanitized molecule, or None for a SMILES rdkit cannot read or sanitize."""
    if not smiles:
        return None
    return Chem.MolFromSmiles(smiles)


def canonical(smiles: str | Chem.Mol) -> str | None:
    """rdkit's canonical isomeric SMILES of a SMILES or a parsed molecule, or None if the
    SMILES is invalid, or if its canonical form does not read back (a rare rdkit round-trip
    failure: such a molecule could not be scored)."""
    mol = to_mol(smiles) if isinstance(smiles, str) else smiles
    if mol is None:
        return None
    text = Chem.MolToSmiles(mol)
    return text if to_mol(text) is not None else None


# Transforms: raw value -> desirability in [0, 1].


@dataclass(frozen=True)
class Transform:
    """``kind`` is one of: identity, gaussian (peak at ``mu``), min_gaussian (1 at or below
    ``mu``), max_gaussian (1 at or above ``mu``), clipped (linear from ``low`` to ``high``),
    sigmoid (REINVENT's, base 10: 0.5 halfway between ``low`` and ``high``, steepness ``k``;
    ``low`` above ``high`` reverses it, as REINVENT's reverse_sigmoid),
    double_sigmoid (1 between ``low`` and ``high``, soft edges of width ``k``), step (1 inside
    [``low``, ``high``])."""

    kind: str = "identity"
    mu: float = 0.0
    sigma: float = 1.0
    low: float = 0.0
    high: float = 1.0
    k: float = 0.25

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if self.kind == "identity":
            return x
        if self.kind in ("gaussian", "min_gaussian", "max_gaussian"):
            if self.kind == "min_gaussian":
                x = np.maximum(x, self.mu)
            elif self.kind == "max_gaussian":
                x = np.minimum(x, self.mu)
            return np.exp(-0.5 * ((x - self.mu) / self.sigma) ** 2)
        if self.kind == "clipped":
            return np.clip((x - self.low) / (self.high - self.low), 0.0, 1.0)
        if self.kind == "sigmoid":
            # base 10, as REINVENT's: 1 / (1 + 10^(-10 k (x - middle) / (high - low)))
            middle = (self.low + self.high) / 2
            scale = 10 * self.k / (self.high - self.low)
            return 1 / (1 + 10.0 ** (-scale * (x - middle)))
        if self.kind == "double_sigmoid":
            width = self.k * (self.high - self.low)
            rise = 1 / (1 + np.exp(-(x - self.low) / width))
            fall = 1 / (1 + np.exp((x - self.high) / width))
            return rise * fall
        if self.kind == "step":
            return ((x >= self.low) & (x <= self.high)).astype(float)
        raise ValueError(f"unknown transform {self.kind!r}")


# Raw components: molecules -> values.

_MORGAN = {
    "ECFP4": fingerprints.GetMorganGenerator(radius=2),
    "ECFP6": fingerprints.GetMorganGenerator(radius=3),
    "FCFP4": fingerprints.GetMorganGenerator(
        radius=2, atomInvariantsGenerator=fingerprints.GetMorganFeatureAtomInvGen()
    ),
    "AP": fingerprints.GetAtomPairGenerator(maxDistance=10),
}


def fingerprint(mol: Chem.Mol, kind: str):
    """The count fingerprints GuacaMol's tasks use (unhashed Morgan, atom pairs) or PHCO."""
    if kind == "PHCO":
        from rdkit.Chem.Pharm2D import Generate, Gobbi_Pharm2D

        return Generate.Gen2DFingerprint(mol, Gobbi_Pharm2D.factory)
    return _MORGAN[kind].GetSparseCountFingerprint(mol)


def _sa(mol: Chem.Mol) -> float:
    from rdkit.Contrib.SA_Score import sascorer  # rdkit's Contrib, fragment scores included

    return sascorer.calculateScore(mol)


DESCRIPTORS: dict[str, Callable[[Chem.Mol], float]] = {
    "qed": QED.qed,
    "logp": Descriptors.MolLogP,
    "tpsa": Descriptors.TPSA,
    "mw": Descriptors.MolWt,
    "sa": _sa,
    "bertz": Descriptors.BertzCT,
    "rings": rdMolDescriptors.CalcNumRings,
    "aromatic_rings": rdMolDescriptors.CalcNumAromaticRings,
    "rotatable_bonds": rdMolDescriptors.CalcNumRotatableBonds,
    "heavy_atoms": lambda mol: mol.GetNumHeavyAtoms(),
}


@dataclass(frozen=True)
class Component:
    """One scored property. ``kind``: a descriptor name (``qed``, ``logp``, ``sa``...),
    ``similarity`` (Tanimoto to ``target`` with fingerprint ``fp``), ``smarts`` (1 if the
    pattern ``target`` matches; ``inverse`` flips it), ``isomer`` (closeness to the formula
    ``target``, GuacaMol's per-element Gaussians), ``isomer_prev`` (the same as PyTDC scored
    it until August 2022, PMO's version: see :func:`smiles_atom_tally`) or ``atoms`` (count of
    element ``target``)."""

    kind: str
    target: str = ""
    fp: str = "ECFP4"
    inverse: bool = False
    transform: Transform = field(default_factory=Transform)
    weight: float = 1.0

    def raw(self, mols: Sequence[Chem.Mol]) -> np.ndarray:
        if self.kind in DESCRIPTORS:
            return np.array([DESCRIPTORS[self.kind](m) for m in mols], float)
        if self.kind == "similarity":
            target = _target_fingerprint(self.target, self.fp)
            return np.array(DataStructs.BulkTanimotoSimilarity(
                target, [fingerprint(m, self.fp) for m in mols]), float)  # fmt: skip
        if self.kind == "smarts":
            pattern = _smarts(self.target)
            hit = np.array([m.HasSubstructMatch(pattern) for m in mols], float)
            return 1 - hit if self.inverse else hit
        if self.kind in ("isomer", "isomer_prev"):
            prev = self.kind == "isomer_prev"
            return np.array([_isomer_score(m, self.target, prev) for m in mols], float)
        if self.kind == "atoms":
            return np.array([_count(Chem.AddHs(m) if self.target == "H" else m, self.target)
                             for m in mols], float)  # fmt: skip
        raise ValueError(f"unknown component kind {self.kind!r}")

    def __call__(self, mols: Sequence[Chem.Mol]) -> np.ndarray:
        return self.transform(self.raw(mols))


@cache
def _target_fingerprint(smiles: str, kind: str):
    mol = to_mol(smiles)
    if mol is None:
        raise ValueError(f"target SMILES {smiles!r} is not valid")
    return fingerprint(mol, kind)


@cache
def _smarts(pattern: str) -> Chem.Mol:
    mol = Chem.MolFromSmarts(pattern)
    if mol is None:
        raise ValueError(f"SMARTS {pattern!r} is not valid")
    return mol


def _count(mol: Chem.Mol, element: str) -> int:
    return sum(atom.GetSymbol() == element for atom in mol.GetAtoms())


def _formula(text: str) -> list[tuple[str, int]]:
    return [(el, int(n or 1)) for el, n in re.findall(r"([A-Z][a-z]*)(\d*)", text)]


def smiles_atom_tally(smiles: str) -> int:
    """The total atom count of PyTDC's isomer score before PR 171 (2022-08-26), which PMO's
    published table used: its formula parser run on the SMILES text instead of a formula.
    Only capitalised symbols count (aromatic atoms do not), hydrogens only where written
    (``[nH]``, ``[C@@H]``), and the digits after a symbol are read as its count, ring
    closures included (``C12`` counts 12)."""
    return sum(n for _, n in _formula(smiles))


def _isomer_score(mol: Chem.Mol, formula: str, prev: bool = False) -> float:
    """Geometric mean of a Gaussian (sigma 1) per element count of ``formula`` and one
    (sigma 2) on the total atom count, hydrogens included; ``prev``: the total is PyTDC's old
    tally of the canonical SMILES text (:func:`smiles_atom_tally`)."""
    wanted = _formula(formula)
    with_h = Chem.AddHs(mol)
    scores = [np.exp(-0.5 * (_count(with_h, el) - n) ** 2) for el, n in wanted]
    if prev:
        total = smiles_atom_tally(Chem.MolToSmiles(mol))
    else:
        total = sum(n for _, n in _formula(rdMolDescriptors.CalcMolFormula(mol)))
    scores.append(np.exp(-0.5 * ((total - sum(n for _, n in wanted)) / 2.0) ** 2))
    return float(np.exp(np.mean(np.log(np.maximum(scores, 1e-300)))))


@dataclass(frozen=True)
class Objective:
    """Weighted geometric or arithmetic mean of transformed components, in [0, 1]."""

    components: tuple[Component, ...]
    mean: str = "geometric"

    def breakdown(self, mols: Sequence[Chem.Mol]) -> dict[str, np.ndarray]:
        """Each component's transformed score, keyed ``<index>:<kind>``."""
        return {f"{i}:{c.kind}": c(mols) for i, c in enumerate(self.components)}

    def scored(self, mols: Sequence[Chem.Mol]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The objective and its :meth:`breakdown`, each component computed once."""
        if not mols:
            return np.zeros(0), {
                f"{i}:{c.kind}": np.zeros(0) for i, c in enumerate(self.components)
            }
        parts = self.breakdown(mols)
        weights = np.array([c.weight for c in self.components])[:, None]
        stacked = np.stack(list(parts.values()))
        if self.mean == "geometric":
            logs = np.log(np.maximum(stacked, 1e-300))
            return np.exp((weights * logs).sum(0) / weights.sum()), parts
        return (weights * stacked).sum(0) / weights.sum(), parts

    def __call__(self, mols: Sequence[Chem.Mol]) -> np.ndarray:
        return self.scored(mols)[0]


def _sim(target: str, fp: str, transform: Transform | None = None) -> Component:
    return Component("similarity", target, fp, transform=transform or Transform())


def _descriptor(name: str, transform: Transform) -> Component:
    return Component(name, transform=transform)


def _g(kind: str, mu: float, sigma: float) -> Transform:
    return Transform(kind, mu=mu, sigma=sigma)


def _clip(upper: float) -> Transform:
    return Transform("clipped", low=0.0, high=upper)


def _single(component: Component) -> Objective:
    return Objective((component,))


_SITAGLIPTIN = "Fc1cc(c(F)cc1F)CC(N)CC(=O)N3Cc2nnc(n2CC3)C(F)(F)F"
_PHARMACOPHORE = "CCCOc1cc2ncnc(Nc3ccc4ncsc4c3)c2cc1S(=O)(=O)C(C)(C)C"
_HOP_SCAFFOLD = "[#7]-c1n[c;h1]nc2[c;h1]c(-[#8])[c;h0][c;h1]c12"


@cache
def _reference(smiles: str, name: str) -> float:
    return DESCRIPTORS[name](to_mol(smiles))


def _pmo_tasks() -> dict[str, Objective]:
    sita_logp, sita_tpsa = _reference(_SITAGLIPTIN, "logp"), _reference(_SITAGLIPTIN, "tpsa")
    other = "NC(CC(=O)N1CCn2c(nnc2C(F)(F)F)C1)Cc1cc(F)c(F)cc1F"  # sitagliptin, drawn again
    osimertinib = "COc1cc(N(C)CCN(C)C)c(NC(=O)C=C)cc1Nc2nccc(n2)c3cn(C)c4ccccc34"
    fexofenadine = "CC(C)(C(=O)O)c1ccc(cc1)C(O)CCCN2CCC(CC2)C(O)(c3ccccc3)c4ccccc4"
    ranolazine = "COc1ccccc1OCC(O)CN2CCN(CC(=O)Nc3c(C)cccc3C)CC2"
    return {
        "albuterol_similarity": _single(
            _sim("CC(C)(C)NCC(O)c1ccc(O)c(CO)c1", "FCFP4", _clip(0.75))
        ),  # fmt: skip
        "amlodipine_mpo": Objective(
            (
                _sim(r"Clc1ccccc1C2C(=C(/N/C(=C2/C(=O)OCC)COCCN)C)\C(=O)OC", "ECFP4"),
                _descriptor("rings", _g("gaussian", 3, 0.5)),
            )
        ),  # fmt: skip
        "celecoxib_rediscovery": _single(
            _sim("CC1=CC=C(C=C1)C1=CC(=NN1C1=CC=C(C=C1)S(N)(=O)=O)C(F)(F)F", "ECFP4")
        ),
        "deco_hop": Objective(
            (
                _sim(_PHARMACOPHORE, "PHCO", _clip(0.85)),
                Component("smarts", "CS([#6])(=O)=O", inverse=True),
                Component("smarts", "[#7]-c1ccc2ncsc2c1", inverse=True),
                Component("smarts", _HOP_SCAFFOLD),
            ),
            mean="arithmetic",
        ),  # fmt: skip
        "fexofenadine_mpo": Objective(
            (
                _sim(fexofenadine, "AP", _clip(0.8)),
                _descriptor("tpsa", _g("max_gaussian", 90, 10)),
                _descriptor("logp", _g("min_gaussian", 4, 1)),
            )
        ),  # fmt: skip
        "isomers_c7h8n2o2": _single(Component("isomer", "C7H8N2O2")),
        "isomers_c9h10n2o2pf2cl": _single(Component("isomer", "C9H10N2O2PF2Cl")),
        "median1": Objective(
            (_sim("CC1(C)C2CCC1(C)C(=O)C2", "ECFP4"), _sim("CC(C)C1CCC(C)CC1O", "ECFP4"))
        ),  # fmt: skip
        "median2": Objective(
            (
                _sim("O=C1N(CC(N2C1CC3=C(C2C4=CC5=C(OCO5)C=C4)NC6=C3C=CC=C6)=O)C", "ECFP6"),
                _sim("CCCC1=NN(C2=C1N=C(NC2=O)C3=C(C=CC(=C3)S(=O)(=O)N4CCN(CC4)C)OCC)C", "ECFP6"),
            )
        ),  # fmt: skip
        "mestranol_similarity": _single(
            _sim("COc1ccc2[C@H]3CC[C@@]4(C)[C@@H](CC[C@@]4(O)C#C)[C@@H]3CCc2c1", "AP", _clip(0.75))
        ),  # fmt: skip
        "osimertinib_mpo": Objective(
            (
                _descriptor("tpsa", _g("max_gaussian", 100, 10)),
                _descriptor("logp", _g("min_gaussian", 1, 1)),
                _sim(osimertinib, "FCFP4", _clip(0.8)),
                _sim(osimertinib, "ECFP6", _g("min_gaussian", 0.85, 0.1)),
            )
        ),  # fmt: skip
        "perindopril_mpo": Objective(
            (
                _sim("O=C(OCC)C(NC(C(=O)N1C(C(=O)O)CC2CCCCC12)C)CCC", "ECFP4"),
                _descriptor("aromatic_rings", _g("gaussian", 2, 0.5)),
            )
        ),  # fmt: skip
        "qed": _single(Component("qed")),
        "ranolazine_mpo": Objective(
            (
                _descriptor("tpsa", _g("max_gaussian", 95, 20)),
                _descriptor("logp", _g("max_gaussian", 7, 1)),
                _sim(ranolazine, "AP", _clip(0.7)),
                Component("atoms", "F", transform=_g("gaussian", 1, 1.0)),
            )
        ),  # fmt: skip
        "scaffold_hop": Objective(
            (
                _sim(_PHARMACOPHORE, "PHCO", _clip(0.75)),
                Component(
                    "smarts", "[#6]-[#6]-[#6]-[#8]-[#6]~[#6]~[#6]~[#6]~[#6]-[#7]-c1ccc2ncsc2c1"
                ),
                Component("smarts", _HOP_SCAFFOLD, inverse=True),
            ),
            mean="arithmetic",
        ),  # fmt: skip
        "sitagliptin_mpo": Objective(
            (
                _sim(_SITAGLIPTIN, "ECFP4", _g("gaussian", 0, 0.1)),
                _descriptor("logp", _g("gaussian", sita_logp, 0.2)),
                _descriptor("tpsa", _g("gaussian", sita_tpsa, 5)),
                Component("isomer", "C16H15F6N5O"),
            )
        ),  # fmt: skip
        "thiothixene_rediscovery": _single(
            _sim("CN(C)S(=O)(=O)c1ccc2Sc3ccccc3C(=CCCN4CCN(C)CC4)c2c1", "ECFP4")
        ),
        "troglitazone_rediscovery": _single(
            _sim("Cc1c(C)c2OC(C)(COc3ccc(CC4SC(=O)NC4=O)cc3)CCc2c(C)c1O", "ECFP4")
        ),
        "valsartan_smarts": Objective(
            (
                Component("smarts", "CN(C=O)Cc1ccc(c2ccccc2)cc1"),
                _descriptor("tpsa", _g("gaussian", _reference(other, "tpsa"), 5)),
                _descriptor("logp", _g("gaussian", _reference(other, "logp"), 0.2)),
                _descriptor("bertz", _g("gaussian", _reference(other, "bertz"), 30)),
            )
        ),  # fmt: skip
        "zaleplon_mpo": Objective(
            (
                _sim("O=C(C)N(CC)C1=CC=CC(C2=CC=NC3=C(C=NN23)C#N)=C1", "ECFP4"),
                Component("isomer", "C19H17N3O2"),
            )
        ),  # fmt: skip
    }


# PyTDC changed these after PMO's table (PR 171: the isomer score's total atom count), so
# today's definitions are not what PMO's REINVENT was scored on
CHANGED_SINCE_PMO: tuple[str, ...] = (
    "isomers_c7h8n2o2", "isomers_c9h10n2o2pf2cl", "sitagliptin_mpo", "zaleplon_mpo")  # fmt: skip


def _prev_tasks(pmo: dict[str, Objective]) -> dict[str, Objective]:
    """PyTDC's ``<task>_prev`` oracles: the changed tasks with PMO's isomer score."""
    return {
        f"{name}_prev": replace(pmo[name], components=tuple(
            replace(c, kind="isomer_prev") if c.kind == "isomer" else c
            for c in pmo[name].components))
        for name in CHANGED_SINCE_PMO
    }  # fmt: skip


def _validation_tasks() -> dict[str, Objective]:
    """GuacaMol tasks outside PMO's 20: where settings (alignment's lambda) are tuned, so
    that no choice is made on the tasks the benchmark reports."""
    pioglitazone = "O=C1NC(=O)SC1Cc3ccc(OCCc2ncc(cc2)CC)cc3"
    return {
        "aripiprazole_similarity": _single(_sim(
            "Clc4cccc(N3CCN(CCCCOc2ccc1c(NC(=O)CC1)c2)CC3)c4Cl", "FCFP4", _clip(0.75))),
        "pioglitazone_mpo": Objective((
            _sim(pioglitazone, "ECFP4", _g("gaussian", 0, 0.1)),
            _descriptor("mw", _g("gaussian", _reference(pioglitazone, "mw"), 10)),
            _descriptor("rotatable_bonds", _g("gaussian", 2, 0.5)))),
    }  # fmt: skip


_PMO = _pmo_tasks()
TASKS: dict[str, Objective] = {**_PMO, **_prev_tasks(_PMO), **_validation_tasks()}
PMO_TASKS: tuple[str, ...] = tuple(_PMO)  # today's definitions
PREV_TASKS: tuple[str, ...] = tuple(f"{t}_prev" for t in CHANGED_SINCE_PMO)
VALIDATION_TASKS: tuple[str, ...] = ("aripiprazole_similarity", "pioglitazone_mpo")
COMPONENTS = (*DESCRIPTORS, "similarity", "smarts", "isomer", "isomer_prev", "atoms")
