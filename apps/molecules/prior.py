"""The SMILES prior: a token-level GRU language model, its likelihood and its sampler.

REINVENT's prior is the same model at 3 x 512; the default here is smaller (see the
``model`` section of the presets) so that sampling and the RL updates fit two CPU cores.
``hidden_states`` returns the last GRU layer's output at every position: what the
representation-alignment loss projects.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fieldrl.apps.molecules.config import PriorConfig
from fieldrl.apps.molecules.vocab import Vocabulary
from fieldrl.seeding import derive_seed

__all__ = ["PriorTrainer", "Sample", "SmilesRNN"]


@dataclass
class Sample:
    """Sampled sequences (begin token first, padding after the end token) and their
    log-likelihood under the model that sampled them."""

    tokens: torch.Tensor  # (batch, length) int64
    log_likelihood: torch.Tensor  # (batch,)


class SmilesRNN(nn.Module):
    def __init__(self, vocab_size: int, embedding: int = 128, hidden: int = 256,
                 layers: int = 3, dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.spec = {"vocab_size": vocab_size, "embedding": embedding, "hidden": hidden,
                     "layers": layers, "dropout": dropout}  # fmt: skip
        self.embed = nn.Embedding(vocab_size, embedding, padding_idx=0)
        self.gru = nn.GRU(embedding, hidden, layers, batch_first=True, dropout=dropout)
        self.head = nn.Linear(hidden, vocab_size)
        self.register_buffer("never", torch.arange(vocab_size) < 2, persistent=False)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """(logits, last-layer outputs, final state) for input ``tokens`` (batch, length).
        Padding and the begin token (indices 0 and 1) are never predicted."""
        outputs, state = self.gru(self.embed(tokens), state)
        logits = self.head(outputs)
        return logits.masked_fill(self.never, -torch.inf), outputs, state

    def log_likelihood(self, tokens: torch.Tensor, rows_per_pass: int = 32
                       ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Per-sequence log-likelihood of ``tokens`` (begin token first, zero padding after
        the end) and the hidden states that predicted each token (batch, length - 1, hidden;
        those past a sequence's end mean nothing). The rows run in groups of about
        ``rows_per_pass`` of similar length, each cut to its longest, so that short
        sequences do not pay for the longest one's padding (packed sequences are slower
        on CPU); the results come back in the input's order."""
        lengths = (tokens != 0).sum(1)
        order = torch.argsort(lengths, stable=True)
        groups = max(1, round(len(tokens) / rows_per_pass))
        logps, outputs = [], []
        for rows in torch.tensor_split(order, groups):
            part = tokens[rows, : max(int(lengths[rows].max()), 2)]
            logits, out, _ = self(part[:, :-1])
            logp = -F.cross_entropy(logits.transpose(1, 2), part[:, 1:], ignore_index=0,
                                    reduction="none")  # fmt: skip
            logps.append(logp.sum(1))
            outputs.append(F.pad(out, (0, 0, 0, tokens.shape[1] - part.shape[1])))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(len(order))
        return torch.cat(logps)[inverse], torch.cat(outputs)[inverse]

    @torch.no_grad()
    def sample(self, n: int, vocab: Vocabulary, max_length: int,
               generator: torch.Generator | None = None) -> Sample:  # fmt: skip
        """``n`` sequences drawn token by token until each ends or reaches ``max_length``."""
        token = torch.full((n, 1), vocab.bos, dtype=torch.long)
        tokens, state = [token], None
        logp = torch.zeros(n)
        done = torch.zeros(n, dtype=torch.bool)
        for _ in range(max_length):
            logits, _, state = self(token, state)
            probs = torch.softmax(logits[:, -1], -1)
            token = torch.multinomial(probs, 1, generator=generator)
            token[done] = 0
            logp += torch.log(probs.gather(1, token).squeeze(1).clamp_min(1e-30)) * ~done
            tokens.append(token)
            done |= token.squeeze(1) == vocab.eos
            if done.all():
                break
        return Sample(torch.cat(tokens, 1), logp)


class PriorTrainer:
    """Maximum likelihood on a SMILES set, one minibatch per step, on the core loop. Each
    epoch's order comes from the seed and the epoch number, so a resumed run sees the same
    batches; the learning rate decays by ``lr_decay`` per epoch."""

    def __init__(self, model: SmilesRNN, vocab: Vocabulary, smiles: list[str],
                 holdout: list[str], cfg: PriorConfig, seed: int) -> None:  # fmt: skip
        self.model, self.vocab, self.cfg, self.seed = model, vocab, cfg, seed
        self.smiles = list(smiles)
        self.encoded = [np.asarray(vocab.encode(s), np.int64) for s in smiles]
        self.longest = max(len(e) for e in self.encoded)
        self.holdout = holdout
        self.per_epoch = max(1, len(self.encoded) // cfg.batch_size)
        self.total = max(1, round(cfg.epochs * self.per_epoch))
        self.done = 0
        self.optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
        self.generators: tuple = ()
        self.sample_generator = torch.Generator().manual_seed(seed)

    def _batch(self, step: int) -> torch.Tensor:
        epoch, index = divmod(step, self.per_epoch)
        order = np.random.default_rng(derive_seed(self.seed, 1, epoch))  # key 1: epoch order
        rows = order.permutation(len(self.encoded))[index * self.cfg.batch_size :]
        rows = rows[: self.cfg.batch_size]
        if self.cfg.randomize:  # key 2: the step's random strings
            written = self.vocab.randomize([self.smiles[i] for i in rows], self.longest,
                                           derive_seed(self.seed, 2, step))  # fmt: skip
            picked = [np.asarray(self.vocab.encode(s), np.int64) for s in written]
        else:
            picked = [self.encoded[i] for i in rows]
        out = np.zeros((len(picked), max(len(p) for p in picked)), np.int64)
        for row, tokens in zip(out, picked, strict=True):
            row[: len(tokens)] = tokens
        return torch.from_numpy(out)

    def step(self) -> dict[str, float]:
        epoch = self.done / self.per_epoch
        for group in self.optimizer.param_groups:
            group["lr"] = self.cfg.lr * (1 - self.cfg.lr_decay) ** int(epoch)
        tokens = self._batch(self.done)
        self.model.train()
        logp, _ = self.model.log_likelihood(tokens)
        loss = -(logp / (tokens[:, 1:] != 0).sum(1)).mean()  # per token
        self.optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(self.model.parameters(), 5.0)
        self.optimizer.step()
        self.done += 1
        if self.done % 200 and self.done < self.total:
            return {}
        return {"prior/nll_per_token": loss.item(), "prior/epoch": epoch,
                **self.validate(256)}  # fmt: skip

    @torch.no_grad()
    def validate(self, samples: int) -> dict[str, float]:
        """Held-out NLL per token and the validity of fresh samples."""
        from fieldrl.apps.molecules.metrics import validity

        self.model.eval()
        metrics = {}
        if self.holdout:
            tokens = torch.from_numpy(self.vocab.batch(self.holdout[:512]))
            logp, _ = self.model.log_likelihood(tokens)
            metrics["prior/holdout_nll_per_token"] = float(
                -(logp / (tokens[:, 1:] != 0).sum(1)).mean()
            )
        sample = self.model.sample(samples, self.vocab, 128, self.sample_generator)
        metrics["prior/validity"] = validity([self.vocab.decode(t) for t in sample.tokens])
        return metrics

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "done": self.done, "vocab": self.vocab.tokens,
                "spec": self.model.spec, "sampler": self.sample_generator.get_state()}  # fmt: skip

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.done = int(state["done"])
        self.sample_generator.set_state(state["sampler"])
