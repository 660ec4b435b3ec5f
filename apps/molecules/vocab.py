"""SMILES tokens: bracket atoms, two-letter halogens and ``%nn`` ring bonds are one token
each (REINVENT's split), with begin, end and padding tokens around them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["PAD", "Vocabulary", "tokenize"]

PAD, BOS, EOS = "<pad>", "^", "$"
_TOKEN = re.compile(r"(\[[^\]]+\]|Br|Cl|%\d{2}|.)")


def tokenize(smiles: str) -> list[str]:
    """The tokens of ``smiles`` (no begin or end token)."""
    return _TOKEN.findall(smiles)


class Vocabulary:
    """Token <-> index; index 0 is padding, 1 the begin and 2 the end token."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens = [PAD, BOS, EOS, *sorted(set(tokens) - {PAD, BOS, EOS})]
        self.index = {t: i for i, t in enumerate(self.tokens)}

    @classmethod
    def from_smiles(cls, smiles: Iterable[str]) -> Vocabulary:
        return cls(t for s in smiles for t in tokenize(s))

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def bos(self) -> int:
        return 1

    @property
    def eos(self) -> int:
        return 2

    def unknown(self, smiles: str) -> list[str]:
        """Tokens of ``smiles`` this vocabulary lacks."""
        return sorted({t for t in tokenize(smiles) if t not in self.index})

    def encode(self, smiles: str) -> list[int]:
        """Begin token, the tokens, end token (a KeyError for an unknown token)."""
        return [self.bos, *(self.index[t] for t in tokenize(smiles)), self.eos]

    def decode(self, indices: Sequence[int]) -> str:
        """Tokens up to the first end token (begin and padding skipped)."""
        out = []
        for i in indices:
            i = int(i)
            if i == self.eos:
                break
            if i > self.eos:
                out.append(self.tokens[i])
        return "".join(out)

    def randomize(self, smiles: Sequence[str], max_tokens: int, seed: int) -> list[str]:
        """Another SMILES string of each molecule, its atoms in a random order (rdkit,
        seeded): the data augmentation of randomized-SMILES priors and Augmented Memory. A
        string rdkit cannot read, or whose random form this vocabulary cannot write in
        ``max_tokens`` tokens, stays as it is."""
        from rdkit import Chem

        out = []
        for k, original in enumerate(smiles):
            mol = Chem.MolFromSmiles(original) if original else None
            if mol is None:
                out.append(original)
                continue
            [other] = Chem.MolToRandomSmilesVect(mol, 1, randomSeed=(seed + k) % 2**31)
            fits = not self.unknown(other) and len(self.encode(other)) - 1 <= max_tokens
            out.append(other if fits else original)
        return out

    def batch(self, smiles: Sequence[str]) -> np.ndarray:
        """Encoded SMILES padded to the longest: an int64 array (batch, length)."""
        encoded = [self.encode(s) for s in smiles]
        out = np.zeros((len(encoded), max(len(e) for e in encoded)), np.int64)
        for row, e in zip(out, encoded, strict=True):
            row[: len(e)] = e
        return out
