"""AIQL: implicit Q-learning for set actions, learned from consolidation logs.

- The **actor** is one scoring network over (candidate features, state): it scores any
  number of candidates. It is extracted by advantage-weighted listwise likelihood: the
  logged set's sampled-softmax log-likelihood (unselected candidates are a weighted
  sample of the pool), weighted by exp(beta * (Q - V)), clipped.
- The **critic** is Q(s, phi(A)): phi summarises the chosen set (size, labor, sums and
  means of its features), so its size does not depend on the number of candidates.
- **V(s)** is fitted by expectile regression on the target Q; Q by r + gamma V(s').

The state is the epoch's context plus the weighted mean features of its candidate pool.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from fieldrl.apps.warehouse.config import AIQLConfig
from fieldrl.apps.warehouse.logs import LABOR, PHI_DIM, STATE_DIM, F, LoggedData, state_vector
from fieldrl.apps.warehouse.sim import Candidates
from fieldrl.errors import DataError
from fieldrl.policies import SetScorer, mlp

__all__ = ["AIQL", "AIQLTrainer"]


class AIQL(nn.Module):
    """The scorer, the twin aggregate critics, their target copies, and V."""

    def __init__(self, cfg: AIQLConfig) -> None:
        super().__init__()
        self.scorer = SetScorer(F, STATE_DIM, cfg.scorer_hidden, "relu")
        # "state_linear": Q = a(s) + b(s) . phi, smooth in the chosen set (one candidate's
        # marginal value is b(s) . its share of phi); "mlp": one network over (s, phi)
        self.linear_in_phi = cfg.critic_form == "state_linear"
        q_in, q_out = (STATE_DIM, 1 + PHI_DIM) if self.linear_in_phi else (STATE_DIM + PHI_DIM, 1)
        self.q1 = mlp(q_in, cfg.critic_hidden, q_out, "relu")
        self.q2 = mlp(q_in, cfg.critic_hidden, q_out, "relu")
        self.v = mlp(STATE_DIM, cfg.critic_hidden, 1, "relu")
        # a candidate's delayed outcome if chosen and if not (a T-learner): the uplift is
        # what choosing it adds; the logger's randomness gives both arms support
        self.outcome = mlp(F + STATE_DIM, cfg.scorer_hidden, 2, "relu")
        self.register_buffer("outcome_scale", torch.ones(()))
        # the pooled-critic baseline sees only the chosen set's mean features
        mask = torch.ones(PHI_DIM)
        if cfg.critic_input == "mean_pool":
            mask[: 2 + F] = 0.0
        self.register_buffer("phi_mask", mask)
        for name, dim in (("x", F), ("s", STATE_DIM)):
            self.register_buffer(f"{name}_scale", torch.ones(dim))
            self.register_buffer(f"{name}_mean", torch.zeros(dim))
            self.register_buffer(f"{name}_std", torch.ones(dim))
        self.register_buffer("phi_mean", torch.zeros(PHI_DIM))
        self.register_buffer("phi_std", torch.ones(PHI_DIM))

    def normalise(self, data: LoggedData) -> None:
        """Fit the input transform to the logs: asinh(x / median|x|) tames heavy tails
        (space-per-labor ratios span decades), then standardise; near-constant columns are
        centred but not blown up."""
        for name, values in (("x", data.x), ("s", data.state)):
            scale = np.maximum(np.median(np.abs(values), 0), 1e-6)
            z = np.arcsinh(values / scale)
            getattr(self, f"{name}_scale").copy_(torch.as_tensor(scale))
            getattr(self, f"{name}_mean").copy_(torch.as_tensor(z.mean(0)))
            getattr(self, f"{name}_std").copy_(torch.as_tensor(np.maximum(z.std(0), 1e-2)))
        # phi stays affine in the set's sums (marginal values rely on it): standardise only
        self.phi_mean.copy_(torch.as_tensor(data.phi.mean(0)))
        self.phi_std.copy_(torch.as_tensor(np.maximum(data.phi.std(0), 1e-3)))
        if data.outcome is not None:  # outcomes in units of an epoch's mean chosen total
            chosen = np.nan_to_num(np.where(data.selected, data.outcome, 0.0))
            per_epoch = np.add.reduceat(chosen, data.offsets[:-1]) if chosen.size else chosen
            self.outcome_scale.fill_(max(float(np.mean(per_epoch)), 1e-6))

    def _x(self, x: torch.Tensor) -> torch.Tensor:
        return x.div(self.x_scale).asinh_().sub_(self.x_mean).div_(self.x_std)

    def _s(self, state: torch.Tensor) -> torch.Tensor:
        return (torch.asinh(state / self.s_scale) - self.s_mean) / self.s_std

    def scores(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.scorer(self._x(x), self._s(state))

    def q(self, state: torch.Tensor, phi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s, phi = self._s(state), (phi - self.phi_mean) / self.phi_std * self.phi_mask
        if self.linear_in_phi:
            heads = (self.q1(s), self.q2(s))
            return tuple((h[..., 0] + (h[..., 1:] * phi).sum(-1)) for h in heads)  # type: ignore[return-value]
        z = torch.cat([s, phi], -1)
        return self.q1(z).squeeze(-1), self.q2(z).squeeze(-1)

    def value(self, state: torch.Tensor) -> torch.Tensor:
        return self.v(self._s(state)).squeeze(-1)

    def outcomes(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        """[n, 2]: each candidate's predicted outcome if not chosen, if chosen (scaled)."""
        z = torch.cat([self._x(x), self._s(state).expand(x.shape[0], -1)], -1)
        return self.outcome(z)

    def uplift(self, x: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        pred = self.outcomes(x, state)
        return pred[:, 1] - pred[:, 0]

    @torch.inference_mode()
    def score_candidates(self, cands: Candidates) -> np.ndarray:
        """Scores for a live epoch's candidates (the pool mean is taken over all of them)."""
        x = torch.from_numpy(cands.features)
        state = torch.from_numpy(state_vector(cands.context, cands.features.mean(0)))
        return self.scorer.score_chunked(self._x(x), self._s(state)).numpy().astype(np.float64)


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    weight = torch.where(diff < 0, 1 - tau, tau)
    return (weight * diff.pow(2)).mean()


def listwise_log_likelihood(
    model: AIQL, data: LoggedData, epochs: np.ndarray, state: torch.Tensor
) -> torch.Tensor:
    """Per epoch: sum over chosen a of [f(a) - log sum_j w_j exp f(j)] (sampled softmax)."""
    out = []
    for row, e in enumerate(epochs):
        lo, hi = data.offsets[e], data.offsets[e + 1]
        x = torch.from_numpy(data.x[lo:hi])
        f = model.scores(x, state[row])
        log_norm = torch.logsumexp(f + torch.log(torch.from_numpy(data.weight[lo:hi])), 0)
        chosen = torch.from_numpy(data.selected[lo:hi])
        out.append((f[chosen] - log_norm).mean() if chosen.any() else f.sum() * 0.0)
    return torch.stack(out)


SetValue = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def marginal_values(
    value: SetValue, x: torch.Tensor, chosen: torch.Tensor, state: torch.Tensor
) -> torch.Tensor:
    """Each candidate's marginal set value (``value(s, phi)``, e.g. the critic's min Q):
    value(phi(A + j)) - value(phi(A)) for one left out, value(phi(A)) - value(phi(A - j))
    for one taken. phi is linear in the set's sums: one batched call covers every one."""
    labor = x[:, LABOR] / 60.0
    n = chosen.sum().float()
    sums, lab = x[chosen].sum(0), labor[chosen].sum()
    sign = torch.where(chosen, -1.0, 1.0)[:, None]
    n_j = (n + sign[:, 0]).clamp(min=1.0)
    sums_j = sums + sign * x
    phi_j = torch.cat(
        [(n_j / 100.0)[:, None], (lab + sign[:, 0] * labor)[:, None], sums_j / 100.0,
         sums_j / n_j[:, None]], dim=1,
    )  # fmt: skip
    phi = torch.cat([(n / 100.0)[None], lab[None], sums / 100.0, sums / n.clamp(min=1.0)])
    q_j = value(state.expand(x.shape[0], -1), phi_j)
    q = value(state[None], phi[None])
    return torch.where(chosen, q - q_j, q_j - q)


def critic_guided_loss(
    model: AIQL,
    data: LoggedData,
    epochs: np.ndarray,
    state: torch.Tensor,
    beta: float,
    value: SetValue,
    uplift_weight: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy from the pool distribution prop. to w_j exp(beta * value density) to
    the actor's w_j exp(f_j): the actor learns which candidates the critic values. The
    density is the marginal value per labor hour (selection fills a labor budget, where
    value per hour is what a greedy ranking must order by), plus ``uplift_weight`` times
    the candidate's predicted uplift of its delayed outcome."""
    out = []
    for row, e in enumerate(epochs):
        lo, hi = data.offsets[e], data.offsets[e + 1]
        x = torch.from_numpy(data.x[lo:hi])
        log_w = torch.log(torch.from_numpy(data.weight[lo:hi]))
        with torch.no_grad():
            chosen = torch.from_numpy(data.selected[lo:hi])
            marginal = marginal_values(value, x, chosen, state[row])
            if uplift_weight:
                marginal = marginal + uplift_weight * model.uplift(x, state[row])
            density = marginal / (x[:, LABOR] / 60.0)
            logits = beta * density / density.std().clamp(min=1e-6)
            target = torch.softmax(logits + log_w, 0)
        log_pred = torch.log_softmax(model.scores(x, state[row]) + log_w, 0)
        out.append(-(target * log_pred).sum())
    return torch.stack(out).mean()


STEPS_PER_ITERATION = 10  # gradient steps per logged (and checkpointable) iteration


class AIQLTrainer:
    """IQL value/critic updates and advantage-weighted listwise actor extraction, as a
    :class:`fieldrl.training.Trainer` (one iteration = ten gradient steps).

    With ``init`` (a trained model) and ``bonus`` (a function of (state, phi)), only the
    actor moves: the frozen critic's Q plus the bonus is the set value behind both the
    epoch weights and the per-candidate marginal values (A²IQL).
    """

    def __init__(
        self,
        data: LoggedData,
        cfg: AIQLConfig,
        seed: int = 0,
        init: AIQL | None = None,
        bonus: SetValue | None = None,
    ) -> None:
        self.data, self.cfg, self.bonus = data, cfg, bonus
        self.total, self.done = cfg.steps, 0
        self.rng = np.random.default_rng(seed)
        self.generators = (self.rng,)
        if init is None:
            self.model = AIQL(cfg)
            self.model.normalise(data)
        else:
            self.model = copy.deepcopy(init).train()
        self.frozen = bonus is not None
        self.target = copy.deepcopy(self.model).requires_grad_(False)
        m = self.model
        self.critic_opt = torch.optim.Adam([*m.q1.parameters(), *m.q2.parameters()], lr=cfg.lr)
        self.value_opt = torch.optim.Adam(m.v.parameters(), lr=cfg.lr)
        self.actor_opt = torch.optim.Adam(m.scorer.parameters(), lr=cfg.lr)
        self.outcome_opt = torch.optim.Adam(m.outcome.parameters(), lr=cfg.lr)
        if cfg.outcome_weight > 0 and (data.outcome is None or not np.isfinite(data.outcome).any()):
            raise DataError(
                "aiql.outcome_weight > 0 needs the per-candidate outcome columns "
                "(candidates: refill_units, outcome_epochs), which these logs lack (written "
                "before they existed, or by a system that does not track refills): log them, "
                "or set aiql.outcome_weight=0"
            )
        self.t = {
            k: torch.from_numpy(getattr(data, k))
            for k in ("state", "next_state", "done", "reward", "phi")
        }
        # rewards in units of their mean size, so Q stays O(1 / (1 - gamma)) whatever the proxy
        self.t["reward"] = self.t["reward"] / max(float(self.t["reward"].abs().mean()), 1e-8)

    def _parts(self) -> dict[str, Any]:
        return {"model": self.model, "target": self.target, "critic_opt": self.critic_opt,
                "value_opt": self.value_opt, "actor_opt": self.actor_opt,
                "outcome_opt": self.outcome_opt}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"done": self.done, **{k: p.state_dict() for k, p in self._parts().items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, part in self._parts().items():
            part.load_state_dict(state[name])
        self.done = int(state["done"])

    def set_value(self, state: torch.Tensor, phi: torch.Tensor) -> torch.Tensor:
        q = torch.min(*self.model.q(state, phi))
        return q + self.bonus(state, phi) if self.bonus is not None else q

    def step(self) -> dict[str, float]:
        for _ in range(min(STEPS_PER_ITERATION, self.total - self.done)):
            stats = self._gradient_step()
            self.done += 1
        return stats

    def _gradient_step(self) -> dict[str, float]:
        cfg, data, model, bonus = self.cfg, self.data, self.model, self.bonus
        idx = self.rng.integers(0, data.n_epochs, min(cfg.batch_epochs, data.n_epochs))
        keys = ("state", "next_state", "done", "reward", "phi")
        s, s2, d, r, phi = (self.t[k][idx] for k in keys)
        with torch.no_grad():
            q_target = torch.min(*self.target.q(s, phi))
            next_v = model.value(s2)
        v_loss = expectile_loss(q_target - model.value(s), cfg.expectile)
        q1, q2 = model.q(s, phi)
        backup = r + cfg.gamma * (1 - d) * next_v
        q_loss = (q1 - backup).pow(2).mean() + (q2 - backup).pow(2).mean()
        if not self.frozen:
            self.value_opt.zero_grad()
            v_loss.backward()
            self.value_opt.step()
            self.critic_opt.zero_grad()
            q_loss.backward()
            self.critic_opt.step()
            if cfg.outcome_weight > 0:
                self._outcome_step(idx, s)
        with torch.no_grad():
            extra = bonus(s, phi) if bonus is not None else 0.0
            adv = q_target + extra - model.value(s)
            weight = torch.exp(cfg.beta * adv).clamp(max=cfg.weight_clip)
        loglik = listwise_log_likelihood(model, data, idx, s)
        actor_loss = -(weight * loglik).mean()
        if cfg.candidate_advantage > 0:
            guided = critic_guided_loss(
                model, data, idx, s, cfg.beta, self.set_value, cfg.outcome_weight
            )
            actor_loss = actor_loss + cfg.candidate_advantage * guided
        self.actor_opt.zero_grad()
        actor_loss.backward()
        self.actor_opt.step()
        if not self.frozen:
            with torch.no_grad():
                for p, tp in zip(model.parameters(), self.target.parameters(), strict=True):
                    tp.lerp_(p, cfg.target_tau)
        stats = {"v_loss": v_loss, "q_loss": q_loss, "actor_loss": actor_loss}
        return {**{k: v.item() for k, v in stats.items()}, "weight": weight.mean().item()}

    def _outcome_step(self, epochs: np.ndarray, state: torch.Tensor) -> None:
        """Regress each known candidate outcome on (features, state), in its arm."""
        data, model = self.data, self.model
        assert data.outcome is not None
        losses = []
        for row, e in enumerate(epochs):
            lo, hi = data.offsets[e], data.offsets[e + 1]
            y = torch.from_numpy(data.outcome[lo:hi])
            known = torch.isfinite(y)
            if not known.any():
                continue
            pred = model.outcomes(torch.from_numpy(data.x[lo:hi]), state[row])
            arm = torch.from_numpy(data.selected[lo:hi]).long()
            got = pred.gather(1, arm[:, None])[:, 0]
            losses.append((got - y / model.outcome_scale)[known].pow(2).mean())
        if losses:
            loss = torch.stack(losses).mean()
            self.outcome_opt.zero_grad()
            loss.backward()
            self.outcome_opt.step()
