"""Representation alignment for a SMILES policy (the contribution reimplemented here).

Besides the scalar reward, the agent gets a dense target: a frozen molecular encoder's
embedding of each molecule it generated. A small projection head maps the policy's hidden
states into the encoder's space, and the loss is ``1 - cos(proj(h), y(x))``, weighted by
lambda times the (detached) DAP loss, so that lambda is its share whatever sigma is:

- ``sequence`` level: ``h`` is the mean of the last GRU layer over the sequence, ``y`` the
  molecule's embedding;
- ``atom`` level: ``h`` is the hidden state right after each atom's token (rdkit numbers
  atoms in the order the SMILES writes them), ``y`` that atom's embedding (an encoder that
  has atom embeddings: the fingerprint encoder).

Encoders: ChemNet (the ``fcd`` wheel, 512 dimensions, molecule level); a fingerprint encoder
fitted here (PCA of Morgan count fingerprints of the prior's molecules, molecule and atom
level); and embeddings precomputed elsewhere (Boltz2's, say) in a file keyed by InChIKey.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fieldrl.apps.molecules.oracles import to_mol
from fieldrl.apps.molecules.vocab import tokenize
from fieldrl.config import ConfigError
from fieldrl.errors import DataError

__all__ = ["Aligner", "ChemNetEncoder", "EmbeddingFile", "FingerprintEncoder", "atom_positions"]

_ORGANIC = {"B", "C", "N", "O", "P", "S", "F", "Cl", "Br", "I", "b", "c", "n", "o", "p", "s"}


def atom_positions(tokens: Sequence[str]) -> list[int]:
    """Indices of the atom tokens (organic-subset atoms and bracket atoms) of a SMILES, in
    the order rdkit numbers the atoms when it parses that SMILES."""
    return [i for i, t in enumerate(tokens) if t in _ORGANIC or t.startswith("[")]


class FingerprintEncoder:
    """PCA of folded Morgan (radius 2) count fingerprints, fitted on a sample of molecules.
    Atom embeddings project the bits of the environments centred on each atom."""

    bits = 2048

    def __init__(self, mean: np.ndarray, components: np.ndarray) -> None:
        self.mean, self.components = mean.astype(np.float32), components.astype(np.float32)
        self.dim = components.shape[0]

    @classmethod
    def fit(cls, smiles: Sequence[str], dim: int = 128) -> FingerprintEncoder:
        counts = np.stack([cls._counts(to_mol(s)) for s in smiles])
        mean = counts.mean(0)
        _, _, vt = np.linalg.svd(counts - mean, full_matrices=False)
        return cls(mean, vt[:dim])

    @staticmethod
    @functools.cache
    def _generator():
        from rdkit.Chem import rdFingerprintGenerator

        return rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=FingerprintEncoder.bits)

    @classmethod
    def _counts(cls, mol) -> np.ndarray:
        return cls._generator().GetCountFingerprintAsNumPy(mol).astype(np.float32)

    @classmethod
    def _atom_counts(cls, mol) -> np.ndarray:
        """(atoms, bits): the count of each bit's environments centred on each atom."""
        from rdkit.Chem import rdFingerprintGenerator

        extra = rdFingerprintGenerator.AdditionalOutput()
        extra.AllocateBitInfoMap()
        cls._generator().GetCountFingerprintAsNumPy(mol, additionalOutput=extra)
        atoms = np.zeros((mol.GetNumAtoms(), cls.bits), np.float32)
        for bit, where in extra.GetBitInfoMap().items():
            for atom, _radius in where:
                atoms[atom, bit] += 1
        return atoms

    def molecules(self, smiles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(embeddings (n, dim), available (n,)): invalid molecules are not available."""
        mols = [to_mol(s) for s in smiles]
        ok = np.array([m is not None for m in mols])
        out = np.zeros((len(smiles), self.dim), np.float32)
        if ok.any():
            counts = np.stack([self._counts(m) for m in mols if m is not None])
            out[ok] = (counts - self.mean) @ self.components.T
        return out, ok

    def atoms(self, smiles: str) -> np.ndarray | None:
        mol = to_mol(smiles)
        return None if mol is None else self._atom_counts(mol) @ self.components.T

    def state_dict(self) -> dict:
        return {"kind": "fingerprint", "mean": torch.from_numpy(self.mean),
                "components": torch.from_numpy(self.components)}  # fmt: skip


class ChemNetEncoder:
    """ChemNet's penultimate layer (the network FCD uses), 512 dimensions, molecule level."""

    dim = 512

    def __init__(self) -> None:
        import fcd

        self.fcd, self.model = fcd, fcd.load_ref_model()

    def molecules(self, smiles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        ok = np.array([to_mol(s) is not None for s in smiles])
        out = np.zeros((len(smiles), self.dim), np.float32)
        if ok.any():
            out[ok] = self.fcd.get_predictions(
                self.model, [s for s, k in zip(smiles, ok, strict=True) if k]
            )
        return out, ok

    def atoms(self, smiles: str) -> np.ndarray | None:
        raise ConfigError("ChemNet has molecule embeddings only: use alignment.level = 'sequence'")

    def state_dict(self) -> dict:
        return {"kind": "chemnet"}


class EmbeddingFile:
    """Embeddings computed elsewhere (e.g. Boltz2's), one per molecule, keyed by InChIKey:
    an ``.npz`` with arrays ``inchikey`` (n,) and ``embedding`` (n, d). Molecules without a
    row are left out of the alignment loss."""

    def __init__(self, path: str | Path) -> None:
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                keys, vectors = data["inchikey"], data["embedding"]
        except FileNotFoundError:
            raise DataError(f"{path}: no such file") from None
        except KeyError as exc:
            raise DataError(f"{path}: missing array {exc} (needs inchikey and embedding)") from None
        except (OSError, ValueError) as exc:
            raise DataError(f"{path}: not a readable .npz file ({exc})") from None
        if vectors.ndim != 2 or keys.shape != (vectors.shape[0],):
            raise DataError(f"{path}: embedding must be (n, d) with one inchikey per row, got "
                            f"{vectors.shape} and {keys.shape}")  # fmt: skip
        if not np.isfinite(vectors).all():
            row = int(np.argwhere(~np.isfinite(vectors))[0, 0])
            raise DataError(f"{path}: row {row} ({keys[row]}) has a NaN or infinite value")
        self.path, self.dim = path, vectors.shape[1]
        self.rows = {str(k): i for i, k in enumerate(keys)}
        if len(self.rows) != len(keys):
            raise DataError(f"{path}: an inchikey appears more than once")
        self.vectors = vectors.astype(np.float32)

    def molecules(self, smiles: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        from rdkit import Chem

        out, ok = np.zeros((len(smiles), self.dim), np.float32), np.zeros(len(smiles), bool)
        for i, s in enumerate(smiles):
            mol = to_mol(s)
            row = self.rows.get(Chem.MolToInchiKey(mol)) if mol is not None else None
            if row is not None:
                out[i], ok[i] = self.vectors[row], True
        return out, ok

    def atoms(self, smiles: str) -> np.ndarray | None:
        raise ConfigError("an embedding file has molecule embeddings only: use level 'sequence'")

    def state_dict(self) -> dict:
        return {"kind": "file", "path": str(self.path)}


class Aligner(nn.Module):
    """The projection head and the alignment loss for one encoder."""

    def __init__(self, encoder, hidden: int, weight: float, level: str, by_score: bool = False,
                 on: str = "batch", anneal: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.encoder, self.weight, self.level, self.by_score = encoder, weight, level, by_score
        self.on, self.anneal = on, anneal
        self.proj = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.SiLU(),
                                  nn.Linear(2 * hidden, encoder.dim))  # fmt: skip

    def lam(self, spent: float) -> float:
        """Lambda when ``spent`` (0 to 1) of the stage's oracle budget is used."""
        return self.weight * (max(0.0, 1.0 - spent) if self.anneal else 1.0)

    def loss(self, hidden: torch.Tensor, tokens: torch.Tensor, smiles: list[str],
             weights: np.ndarray | None = None) -> torch.Tensor:  # fmt: skip
        """Mean ``1 - cos`` over the molecules (or atoms) the encoder has targets for,
        weighted per molecule by ``weights`` (e.g. the scores; None: uniform); ``hidden``
        (batch, length - 1, h) from ``SmilesRNN.log_likelihood(tokens)``."""
        weights = np.ones(len(smiles)) if weights is None else np.asarray(weights, float)
        if self.level == "atom":
            return self._atom_loss(hidden, smiles, weights)
        targets, ok = self.encoder.molecules(smiles)
        ok &= weights > 0
        if not ok.any():
            return hidden.sum() * 0.0
        mask = (tokens[:, 1:] != 0).float().unsqueeze(-1)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp_min(1)
        keep = torch.from_numpy(ok)
        cos = F.cosine_similarity(self.proj(pooled[keep]), torch.from_numpy(targets[ok]), dim=-1)
        return ((1 - cos) * _normalised(weights[ok])).sum()

    def _atom_loss(self, hidden: torch.Tensor, smiles: list[str], weights: np.ndarray
                   ) -> torch.Tensor:  # fmt: skip
        states, targets, per_atom = [], [], []
        for row, s in enumerate(smiles):
            atoms = self.encoder.atoms(s)
            # the token at SMILES index p is input p + 1 (after the begin token)
            steps = [p + 1 for p in atom_positions(tokenize(s))]
            if atoms is None or len(steps) != len(atoms) or steps[-1] >= hidden.shape[1]:
                continue  # invalid, cut at max_tokens, or atoms rdkit drops ([H])
            if weights[row] <= 0:
                continue
            states.append(hidden[row, steps])
            targets.append(torch.from_numpy(atoms))
            per_atom.append(np.full(len(steps), weights[row]))
        if not states:
            return hidden.sum() * 0.0
        cos = F.cosine_similarity(self.proj(torch.cat(states)), torch.cat(targets), dim=-1)
        return ((1 - cos) * _normalised(np.concatenate(per_atom))).sum()


def _normalised(weights: np.ndarray) -> torch.Tensor:
    """Weights summing to 1, normalised in float64: scores can be so small (a geometric
    mean near 0) that their float32 sum is 0."""
    return torch.as_tensor(weights / weights.sum(), dtype=torch.float32)
