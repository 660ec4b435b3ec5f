"""Representation alignment: atoms map to token positions, the encoders, the embedding-file
loader, and the loss's gradient reaching the policy."""

import numpy as np
import pytest
import torch
from rdkit import Chem

from fieldrl.apps.molecules.alignment import (
    Aligner,
    ChemNetEncoder,
    EmbeddingFile,
    FingerprintEncoder,
    atom_positions,
)
from fieldrl.apps.molecules.prior import SmilesRNN
from fieldrl.apps.molecules.vocab import Vocabulary, tokenize
from fieldrl.config import ConfigError
from fieldrl.errors import DataError

SMILES = ["CC(=O)Oc1ccccc1C(=O)O", "Clc1ccc(Br)cc1", "C[C@H](N)C(=O)O", "c1cc[nH]c1",
          "O=[N+]([O-])c1ccccc1", "C1CC2CCC1C2", "CCN(CC)CC"]  # fmt: skip


def test_atom_tokens_are_rdkit_atoms_in_order():
    for smiles in SMILES:
        tokens = tokenize(smiles)
        positions = atom_positions(tokens)
        mol = Chem.MolFromSmiles(smiles)
        assert len(positions) == mol.GetNumAtoms(), smiles
        symbols = [tokens[p].strip("[]").rstrip("H+-@0123456789").capitalize() for p in positions]
        assert symbols == [a.GetSymbol() for a in mol.GetAtoms()], smiles


def test_the_fingerprint_encoder_embeds_molecules_and_atoms():
    encoder = FingerprintEncoder.fit(SMILES * 3, dim=4)
    vectors, ok = encoder.molecules([*SMILES[:2], "C1CC"])
    assert vectors.shape == (3, 4) and list(ok) == [True, True, False]
    atoms = encoder.atoms(SMILES[0])
    assert atoms.shape == (Chem.MolFromSmiles(SMILES[0]).GetNumAtoms(), 4)
    assert not np.allclose(atoms[0], atoms[3])  # a methyl and an ester oxygen differ


def test_chemnet_embeds_at_molecule_level_only():
    encoder = ChemNetEncoder()
    vectors, ok = encoder.molecules(["CCO", "C1CC"])
    assert vectors.shape == (2, 512) and list(ok) == [True, False] and vectors[0].any()
    with pytest.raises(ConfigError, match="sequence"):
        encoder.atoms("CCO")


def test_an_embedding_file_keyed_by_inchikey(tmp_path):
    keys = [Chem.MolToInchiKey(Chem.MolFromSmiles(s)) for s in SMILES[:3]]
    path = tmp_path / "boltz2.npz"
    np.savez(path, inchikey=np.array(keys), embedding=np.eye(3, 5, dtype=np.float32))
    table = EmbeddingFile(path)
    vectors, ok = table.molecules(["OC(=O)c1ccccc1OC(C)=O", "CCCC"])  # aspirin, another way
    assert list(ok) == [True, False] and vectors[0, 0] == 1.0
    np.savez(tmp_path / "nan.npz", inchikey=np.array(keys), embedding=np.full((3, 2), np.nan))
    with pytest.raises(DataError, match="row 0"):
        EmbeddingFile(tmp_path / "nan.npz")
    np.savez(tmp_path / "twice.npz", inchikey=np.array(keys[:1] * 2), embedding=np.ones((2, 2)))
    with pytest.raises(DataError, match="more than once"):
        EmbeddingFile(tmp_path / "twice.npz")
    np.savez(tmp_path / "wrong.npz", keys=np.array(keys))
    with pytest.raises(DataError, match="missing array"):
        EmbeddingFile(tmp_path / "wrong.npz")
    with pytest.raises(DataError, match="no such file"):
        EmbeddingFile(tmp_path / "none.npz")


@pytest.mark.parametrize("level", ["sequence", "atom"])
def test_the_alignment_gradient_reaches_the_policy(level):
    vocab = Vocabulary.from_smiles(SMILES)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    aligner = Aligner(FingerprintEncoder.fit(SMILES, dim=4), 16, 0.5, level)
    tokens = torch.from_numpy(vocab.batch(SMILES))
    _, hidden = model.log_likelihood(tokens)
    loss = aligner.loss(hidden, tokens, SMILES)
    loss.backward()
    assert 0 < float(loss) <= 2
    assert model.gru.weight_hh_l0.grad.abs().sum() > 0 and model.embed.weight.grad.abs().sum() > 0
    assert aligner.proj[0].weight.grad.abs().sum() > 0


@pytest.mark.parametrize("level", ["sequence", "atom"])
def test_score_weights_too_small_for_float32_still_give_a_finite_loss(level):
    vocab = Vocabulary.from_smiles(SMILES)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    aligner = Aligner(FingerprintEncoder.fit(SMILES, dim=4), 16, 1.0, level, by_score=True)
    tokens = torch.from_numpy(vocab.batch(SMILES))
    _, hidden = model.log_likelihood(tokens)
    scores = np.zeros(len(SMILES))
    scores[0] = 1e-50  # a geometric mean with one component near 0; float32 has no such number
    loss = aligner.loss(hidden, tokens, SMILES, scores)
    loss.backward()
    assert torch.isfinite(loss) and 0 < float(loss) <= 2
    assert torch.isfinite(model.gru.weight_hh_l0.grad).all()


def test_an_annealed_lambda_falls_to_zero_over_the_budget():
    aligner = Aligner(FingerprintEncoder.fit(SMILES, dim=4), 16, 0.8, "sequence", anneal=True)
    assert [aligner.lam(s) for s in (0.0, 0.5, 1.0, 1.2)] == pytest.approx([0.8, 0.4, 0.0, 0.0])
    steady = Aligner(FingerprintEncoder.fit(SMILES, dim=4), 16, 0.8, "sequence")
    assert steady.lam(0.9) == 0.8


@pytest.mark.parametrize("on", ["batch", "replay"])
def test_alignment_reads_the_batch_or_only_the_replayed_molecules(on):
    """alignment.on = 'replay' aligns only what the memory replays (nothing before it
    fills); 'batch' aligns each update's fresh molecules."""
    from fieldrl.apps.molecules.config import AgentConfig
    from fieldrl.apps.molecules.metrics import OracleBudget
    from fieldrl.apps.molecules.reinvent import ReinventTrainer, Stage

    vocab = Vocabulary.from_smiles(["CNO", "OCN"])  # any string of C, N and O is a molecule
    torch.manual_seed(0)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    encoder = FingerprintEncoder.fit(["CCO", "CCN", "OCCO", "NCCN", "CCCO", "CNC"], dim=4)
    aligner = Aligner(encoder, 16, 0.5, "sequence", on=on)
    seen = []
    original = aligner.loss
    aligner.loss = lambda h, t, smiles, w=None: (
        seen.append(list(smiles)) or original(h, t, smiles, w)
    )
    cfg = AgentConfig(batch_size=16, replay=2, memory=10)
    oracle = OracleBudget(lambda mols: np.ones(len(mols)), budget=100)
    trainer = ReinventTrainer(model, vocab, [Stage(oracle)], cfg, 20, 0, aligner=aligner)
    for _ in range(3):
        trainer._update()
    if on == "batch":
        assert len(seen) == 3 and all(len(s) >= 2 for s in seen)
    else:  # the memory held nothing to replay at the first update
        assert len(seen) == 2 and all(len(s) == 2 for s in seen)
        remembered = {s for s, _, _ in trainer.memory.items}
        assert all(s in remembered for batch in seen for s in batch)
