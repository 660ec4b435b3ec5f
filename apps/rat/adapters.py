"""The motor core of "motor primitives as low-rank adapters", reimplemented.

A shared recurrent core (a GRU over proprioception and the reference window) is modulated
by a bank of residual adapters: ``h' = h + A_c h`` with ``A_c`` a full ``hidden x hidden``
matrix chosen by a discrete code ``c``. The code comes from a selector over the same
inputs through a straight-through Gumbel-softmax. Nothing constrains the adapters' rank;
:func:`effective_rank` and :func:`subspace_overlap` measure what training made of them.

With no adapters the same network is the multitask baseline: one core trained on every
clip. An :class:`OptionPolicy` picks the codes while the network is frozen, to make new
sequences out of the primitives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fieldrl.apps.rat.imitation import Controller
from fieldrl.policies import RecurrentCore, mlp

__all__ = [
    "AdapterCore",
    "OptionPolicy",
    "effective_rank",
    "subspace_overlap",
    "train_option_policy",
]


class AdapterCore(nn.Module):
    def __init__(
        self,
        proprio: int,
        window: int,
        actions: int,
        hidden: int,
        adapters: int,
        tau: float = 1.0,
        init_scale: float = 0.01,
    ) -> None:
        super().__init__()
        self.adapters, self.tau = adapters, tau
        self.embed = mlp(proprio + window, [hidden], activation="elu")
        self.core = RecurrentCore(hidden, hidden)
        self.head = mlp(hidden, [hidden], actions, activation="elu")
        if adapters:
            self.bank = nn.Parameter(init_scale * torch.randn(adapters, hidden, hidden))
            self.selector = mlp(proprio + window, [128], adapters, activation="elu")

    def code_logits(self, proprio: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        return self.selector(torch.cat([proprio, window], -1))

    def run(
        self,
        proprio: torch.Tensor,
        window: torch.Tensor,
        h: torch.Tensor,
        codes: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Over (time, batch) inputs: actions, the code weights used, the last state.
        ``codes`` (time, batch, adapters) overrides the selector (the option policy's)."""
        x = self.embed(torch.cat([proprio, window], -1))
        out, h_last = self.core(x, h)
        if not self.adapters:
            return torch.tanh(self.head(out)), out.new_zeros(out.shape[:2] + (0,)), h_last
        if codes is None:
            logits = self.code_logits(proprio, window)
            codes = (
                F.gumbel_softmax(logits, tau=self.tau, hard=True)
                if self.training
                else F.one_hot(logits.argmax(-1), self.adapters).float()
            )
        hidden = self.bank.shape[-1]
        # every adapter applied to every state in one matmul: (t*b, h) x (h, m*h)
        per_adapter = out.reshape(-1, hidden) @ self.bank.permute(2, 0, 1).reshape(hidden, -1)
        per_adapter = per_adapter.reshape(*out.shape[:2], self.adapters, hidden)
        delta = (codes.unsqueeze(-1) * per_adapter).sum(-2)
        return torch.tanh(self.head(out + delta)), codes, h_last

    def loss(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
        h = self.core.initial_state(batch["proprio"].shape[1])
        action, codes, _ = self.run(batch["proprio"], batch["window"], h)
        mse = ((action - batch["label"]) ** 2).mean()
        parts = {"mse": mse.item()}
        loss = mse
        if self.adapters:
            # keep every adapter in use: maximise the entropy of the batch's mean code
            usage = codes.mean((0, 1))
            entropy = -(usage * (usage + 1e-8).log()).sum()
            loss = loss - 0.01 * entropy
            parts["code_entropy"] = entropy.item()
        return loss, parts

    def controller(self, deterministic: bool = False) -> Controller:
        return _CoreController(self)


class _CoreController(Controller):
    def __init__(self, model: AdapterCore, option: OptionPolicy | None = None) -> None:
        self.model, self.option = model, option
        self.codes_used: list[int] = []

    def reset(self) -> None:
        self.h = self.model.core.initial_state(1)
        self.codes_used = []

    @torch.no_grad()
    def __call__(self, proprio: np.ndarray, window: np.ndarray) -> np.ndarray:
        was = self.model.training
        self.model.eval()
        p, w = torch.as_tensor(proprio)[None, None], torch.as_tensor(window)[None, None]
        codes = None
        if self.option is not None:
            codes = F.one_hot(self.option.choose(p[0], w[0]), self.model.adapters).float()[None]
        action, used, self.h = self.model.run(p, w, self.h, codes)
        self.model.train(was)
        if used.shape[-1]:
            self.codes_used.append(int(used[0, 0].argmax()))
        return action[0, 0].numpy().astype(np.float64)


class OptionPolicy(nn.Module):
    """A high-level policy over the adapters' codes; the motor core stays frozen."""

    def __init__(self, proprio: int, window: int, adapters: int, hidden: Sequence[int]) -> None:
        super().__init__()
        self.net = mlp(proprio + window, hidden, adapters, activation="elu")
        self.greedy = True

    def logits(self, proprio: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([proprio, window], -1))

    def choose(self, proprio: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
        logits = self.logits(proprio, window)
        if self.greedy:
            return logits.argmax(-1)
        return torch.distributions.Categorical(logits=logits).sample()

    def controller(self, core: AdapterCore) -> Controller:
        return _CoreController(core, self)


def effective_rank(matrix: torch.Tensor | np.ndarray) -> float:
    """Roy & Vetterli's effective rank: exp of the entropy of the normalised singular values."""
    s = np.linalg.svd(np.asarray(matrix, dtype=np.float64), compute_uv=False)
    if s.sum() <= 0:
        return 0.0
    p = s / s.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def subspace_overlap(
    a: torch.Tensor | np.ndarray, b: torch.Tensor | np.ndarray, rank: int | None = None
) -> float:
    """Overlap of the leading output subspaces of two adapters, in [0, 1]:
    ``||U_a^T U_b||_F^2 / r`` over their top ``r`` left singular vectors (r defaults to the
    smaller effective rank, rounded). 1: the same subspace; about r/n: unrelated."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    r = rank or max(1, round(min(effective_rank(a), effective_rank(b))))
    ua = np.linalg.svd(a)[0][:, :r]
    ub = np.linalg.svd(b)[0][:, :r]
    return float(np.linalg.norm(ua.T @ ub) ** 2 / r)


def train_option_policy(
    core: AdapterCore,
    body: Any,
    refs: list[Any],
    horizon: int,
    hidden: Sequence[int],
    steps: int,
    seed: int,
    every: int = 5,
    abort_error: float = 0.6,
    lr: float = 3e-3,
) -> OptionPolicy:
    """REINFORCE over the codes, one choice every ``every`` steps, on tracking ``refs``
    (reward: minus the limb-joint error a step, the benchmark's tracking error) with
    ``core`` frozen, for ``steps`` simulator steps in all. Returns the policy in greedy
    mode."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    core.eval()
    option = OptionPolicy(
        body.proprio_size, refs[0].window(body, 0, horizon).size, core.adapters, hidden
    )
    optimizer = torch.optim.Adam(option.parameters(), lr=lr)
    used, baseline = 0, None
    while used < steps:
        ref = refs[int(rng.integers(len(refs)))]
        ref.start(body, 0)
        h = core.core.initial_state(1)
        log_probs: list[torch.Tensor] = []
        rewards: list[float] = []
        code = torch.zeros(1, core.adapters)
        for t in range(ref.frames - 1):
            p = torch.as_tensor(body.proprioception())[None]
            w = torch.as_tensor(ref.window(body, t, horizon))[None]
            if t % every == 0:
                dist = torch.distributions.Categorical(logits=option.logits(p, w))
                choice = dist.sample()
                log_probs.append(dist.log_prob(choice)[0])
                rewards.append(0.0)
                code = F.one_hot(choice, core.adapters).float()
            with torch.no_grad():
                out, _, h = core.run(p[None], w[None], h, code[None])
            body.step(out[0, 0].numpy().astype(np.float64))
            used += 1
            error = ref.joint_error(body, t + 1)
            rewards[-1] -= ref.joint_error(body, t + 1, body.actuated_qpos)
            if body.fallen or error > abort_error:
                rewards[-1] -= abort_error * (ref.frames - 2 - t)  # the frames it will miss
                break
            if used >= steps:
                break
        returns = np.cumsum(rewards[::-1])[::-1].copy()
        baseline = returns.mean() if baseline is None else 0.9 * baseline + 0.1 * returns.mean()
        advantage = torch.as_tensor(returns - baseline, dtype=torch.float32)
        loss = -(torch.stack(log_probs) * advantage / (advantage.abs().max() + 1e-6)).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    option.greedy = True
    return option
