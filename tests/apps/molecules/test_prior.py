"""Tokens, SMILES files with a report of every line not kept, and the prior: its likelihood,
sampler, exact resume and the exported folder."""

import json

import pytest
import torch

from fieldrl.apps.molecules.config import PriorConfig
from fieldrl.apps.molecules.data import read_smiles
from fieldrl.apps.molecules.prior import PriorTrainer, SmilesRNN
from fieldrl.apps.molecules.vocab import Vocabulary, tokenize
from fieldrl.errors import DataError

SMILES = [
    "CC(=O)Oc1ccccc1C(=O)O",
    "Clc1ccc(Br)cc1",
    "C[C@H](N)C(=O)O",
    "CCN(CC)CC",
    "O=[N+]([O-])c1ccccc1",
    "CC1=CC(=O)CCC1",
    "OCC1OC(O)C(O)C(O)C1O",
]  # canonical


def test_tokens_round_trip():
    assert tokenize("C[C@H](Cl)Br%12") == ["C", "[C@H]", "(", "Cl", ")", "Br", "%12"]
    assert Vocabulary.from_smiles(["C%10CC%10"]).encode("C%10CC%10")[2] > 2
    vocab = Vocabulary.from_smiles(SMILES)
    for smiles in SMILES:
        assert vocab.decode(vocab.encode(smiles)) == smiles
    assert vocab.unknown("C[Si](C)C") == ["[Si]"]
    batch = vocab.batch(SMILES[:2])
    assert batch.shape[0] == 2 and batch[0, 0] == vocab.bos and (batch[1] == 0).any()


def test_a_smiles_file_reports_every_line_it_does_not_keep(tmp_path):
    path = tmp_path / "series.csv"
    path.write_text("smiles,name\nCCO,ethanol\nnot_a_smiles,x\nOCC,again\n"
                    "CC(=O)[O-].[Na+],salt\n# a comment\n\nc1ccccc1 benzene\n"
                    + "C" * 120 + "\n")  # fmt: skip
    data = read_smiles(path, max_tokens=100)
    assert data.smiles == ["CCO", "CC(=O)[O-]", "c1ccccc1"]
    assert data.invalid == [(3, "not_a_smiles")] and data.duplicates == [(4, "OCC")]
    assert data.desalted == [(5, "CC(=O)[O-].[Na+]")] and data.too_long[0][0] == 9
    assert "1 invalid (line 3)" in data.summary() and "1 duplicate (line 4)" in data.summary()
    vocab = Vocabulary.from_smiles(["CCO"])
    fixed = read_smiles(path, vocab=vocab)
    assert fixed.smiles == ["CCO"] and fixed.unknown_tokens[0][2] == ["(", ")", "=", "[O-]"]
    (tmp_path / "empty.smi").write_text("xx\n")
    with pytest.raises(DataError, match="no valid SMILES"):
        read_smiles(tmp_path / "empty.smi")
    with pytest.raises(DataError, match="no such file"):
        read_smiles(tmp_path / "missing.smi")


def test_a_line_too_long_to_be_a_molecule_is_never_parsed(tmp_path):
    path = tmp_path / "one-line.smi"
    path.write_text("CCO\n" + "C" * 200_000 + "\n")  # rdkit would build a 200,000-atom chain
    data = read_smiles(path, max_tokens=100)
    assert data.smiles == ["CCO"] and data.too_long[0][0] == 2
    assert len(data.too_long[0][1]) < 100  # the report keeps the line's start, not all of it


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_a_damaged_gzip_file_is_one_error_naming_it(tmp_path, damage):
    import gzip

    packed = gzip.compress(("CCO\n" * 5000).encode())
    packed = packed[:10] + b"\xff" * 50 + packed[60:] if damage == "corrupt" else packed[:-30]
    (tmp_path / "set.smi.gz").write_bytes(packed)
    with pytest.raises(DataError, match=r"set\.smi\.gz: not a readable text file"):
        read_smiles(tmp_path / "set.smi.gz")


def test_likelihood_ignores_padding_and_sampling_follows_its_generator():
    vocab = Vocabulary.from_smiles(SMILES)
    model = SmilesRNN(len(vocab), 8, 16, 1)
    one = torch.from_numpy(vocab.batch(["CCO"]))
    padded = torch.from_numpy(vocab.batch(["CCO", SMILES[0]]))
    alone, _ = model.log_likelihood(one)
    together, hidden = model.log_likelihood(padded)
    assert torch.allclose(alone[0], together[0]) and hidden.shape[:2] == (2, padded.shape[1] - 1)
    a = model.sample(5, vocab, 30, torch.Generator().manual_seed(3))
    b = model.sample(5, vocab, 30, torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)
    rescored, _ = model.log_likelihood(a.tokens)
    assert torch.allclose(rescored, a.log_likelihood, atol=1e-4)  # the sampler's own ll


def test_likelihood_in_length_groups_equals_one_pass():
    vocab = Vocabulary.from_smiles(SMILES)
    model = SmilesRNN(len(vocab), 8, 16, 2)
    tokens = torch.from_numpy(vocab.batch(SMILES * 3))  # lengths differ: groups differ
    one_ll, one_hidden = model.log_likelihood(tokens, rows_per_pass=len(tokens))
    ll, hidden = model.log_likelihood(tokens, rows_per_pass=4)
    assert torch.allclose(ll, one_ll, atol=1e-5)
    real = (tokens[:, 1:] != 0).unsqueeze(-1)  # hidden states that predicted a token
    assert torch.allclose(hidden * real, one_hidden * real, atol=1e-5)
    assert hidden.shape == one_hidden.shape
    ll.sum().backward()  # the gradient reaches the model through every group
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.gru.parameters())


@pytest.mark.parametrize("randomize", [False, True])
def test_pretraining_lowers_the_loss_and_resumes_exactly(kill_and_resume, randomize):
    vocab = Vocabulary.from_smiles(SMILES)
    cfg = PriorConfig(epochs=6, batch_size=4, lr=1e-2, randomize=randomize)

    def build():
        return PriorTrainer(SmilesRNN(len(vocab), 8, 16, 1), vocab, SMILES, SMILES[:2], cfg, 0)

    straight, resumed = kill_and_resume(build, kill_at=5)
    for name, weights in straight.model.state_dict().items():
        assert torch.equal(weights, resumed.model.state_dict()[name]), name
    fresh = build()
    tokens = torch.from_numpy(vocab.batch(SMILES))
    assert (
        straight.model.log_likelihood(tokens)[0].mean()
        > fresh.model.log_likelihood(tokens)[0].mean()
    )


def test_an_exported_prior_loads_back(tmp_path):
    from fieldrl.apps.molecules.config import MoleculesConfig
    from fieldrl.apps.molecules.pipeline import export_prior, load_prior, train_prior
    from fieldrl.runs import Run

    data = tmp_path / "set.smi"
    data.write_text("\n".join(SMILES * 3) + "\n")
    cfg = MoleculesConfig(experiment={"loggers": ["jsonl"]}, model={"embedding": 8, "hidden": 16,
                          "layers": 1}, prior={"smiles": str(data), "epochs": 2,
                          "batch_size": 4, "validation_samples": 10})  # fmt: skip
    with Run.create(cfg, root=tmp_path) as run:
        quality = train_prior(cfg, run=run)
    assert set(quality) == {"validity", "uniqueness", "novelty", "internal_diversity", "fcd"}
    report = json.loads((run.dir / "data_report.json").read_text())
    assert report["kept"] == len(SMILES) and len(report["duplicates"]) == 2 * len(SMILES)
    out = export_prior(run.dir, tmp_path / "prior", {"licence": "x"})
    model, vocab, meta = load_prior(out)
    again, _, _ = load_prior(run.dir)
    assert meta["licence"] == "x" and meta["spec"]["hidden"] == 16
    tokens = torch.from_numpy(vocab.batch(SMILES))
    assert torch.allclose(model.log_likelihood(tokens)[0], again.log_likelihood(tokens)[0],
                          atol=0.05)  # fp16 weights  # fmt: skip


@pytest.mark.parametrize("smiles", ["missing.smi", "empty.smi"])
def test_a_failed_train_prior_leaves_no_run_folder(tmp_path, smiles):
    from typer.testing import CliRunner

    from fieldrl.cli import build_root

    (tmp_path / "empty.smi").write_text("not a molecule\n")
    args = ["molecules", "train-prior", "-p", "tiny", "--smiles", str(tmp_path / smiles),
            "--set", f"experiment.runs_dir={tmp_path / 'runs'}"]  # fmt: skip
    result = CliRunner().invoke(build_root(), args)
    assert result.exit_code == 2 and smiles in result.output
    assert not list((tmp_path / "runs").rglob("config.json"))


def test_a_randomized_prior_trains_on_other_strings_of_the_same_molecules():
    from fieldrl.apps.molecules.oracles import canonical

    vocab = Vocabulary.from_smiles(SMILES)
    cfg = PriorConfig(epochs=2, batch_size=4, randomize=True)
    trainer = PriorTrainer(SmilesRNN(len(vocab), 8, 16, 1), vocab, SMILES, [], cfg, 0)
    plain = PriorTrainer(SmilesRNN(len(vocab), 8, 16, 1), vocab, SMILES,
                         [], PriorConfig(epochs=2, batch_size=4), 0)  # fmt: skip
    written = [vocab.decode(t) for t in trainer._batch(0)]
    canonical_rows = [vocab.decode(t) for t in plain._batch(0)]  # the same molecules, in order
    assert [canonical(s) for s in written] == [canonical(s) for s in canonical_rows]
    assert written != canonical_rows
    assert [vocab.decode(t) for t in trainer._batch(0)] == written  # a step's strings are fixed
