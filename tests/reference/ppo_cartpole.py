"""The reference path: PPO on gymnasium's CartPole through the fieldrl core.

Not an app (it lives under ``tests/``), but built exactly like one, so it is the pattern
the apps follow: config -> run folder -> checkpoints -> evaluate -> benchmark -> serve.
``make run`` runs it (through ``fieldrl run-all``) until the first app exists.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from pydantic import Field

from fieldrl.app import App, Resources
from fieldrl.atomic import atomic_write_json
from fieldrl.benchmark import Benchmark, Target, mean_ci95
from fieldrl.config import FieldrlConfig, Section
from fieldrl.distributed import WorkerPool, parallel_map
from fieldrl.policies import ActorCritic, module_from_state, module_state
from fieldrl.report import Report, line_plot, plot_metrics
from fieldrl.rl import explained_variance, gae, ppo_clip_loss
from fieldrl.runs import LoadedRun, Run, open_run
from fieldrl.seeding import derive_seed
from fieldrl.serving import InputError, RequestModel, ResponseModel, ServiceSpec
from fieldrl.training import fit

PRESETS = Path(__file__).parent / "configs"


class EnvConfig(Section):
    id: str = "CartPole-v1"
    num_envs: int = Field(4, ge=1, description="Vectorised envs per worker.")


class PPOConfig(Section):
    total_steps: int = Field(60_000, ge=1)
    rollout_steps: int = Field(128, ge=1, description="Steps per env per iteration.")
    lr: float = Field(2.5e-3, gt=0)
    gamma: float = Field(0.99, gt=0, le=1)
    lam: float = Field(0.95, ge=0, le=1)
    epochs: int = Field(4, ge=1)
    minibatches: int = Field(4, ge=1)
    clip: float = Field(0.2, gt=0)
    ent_coef: float = 0.0
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


class ModelConfig(Section):
    hidden: list[int] = Field(default_factory=lambda: [64, 64])


class EvalConfig(Section):
    episodes: int = Field(10, ge=1)
    seed: int = Field(100_000, description="First held-out seed; never used in training.")


class CartPoleConfig(FieldrlConfig):
    app: ClassVar[str] = "cartpole"
    env: EnvConfig = Field(default_factory=EnvConfig)
    algo: PPOConfig = Field(default_factory=PPOConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)


def make_policy(cfg: CartPoleConfig) -> ActorCritic:
    env = gym.make(cfg.env.id)
    obs_dim = int(np.prod(env.observation_space.shape))
    action = {"kind": "categorical", "n": int(env.action_space.n)}
    return ActorCritic(obs_dim, action, cfg.model.hidden, cfg.model.hidden)


class RolloutWorker:
    """Collects fixed-length rollouts on its own envs with the weights it is sent."""

    def __init__(self, cfg: CartPoleConfig, index: int) -> None:
        self.cfg = cfg
        self.envs = gym.vector.SyncVectorEnv(
            [lambda: gym.make(cfg.env.id) for _ in range(cfg.env.num_envs)],
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        self.obs, _ = self.envs.reset(seed=derive_seed(cfg.experiment.seed, index))
        self.policy = make_policy(cfg)
        self.episode_return = np.zeros(cfg.env.num_envs)

    def collect(self, weights: dict[str, torch.Tensor]) -> dict[str, Any]:
        self.policy.load_state_dict(weights)
        steps, n = self.cfg.algo.rollout_steps, self.cfg.env.num_envs
        obs = torch.zeros(steps, n, self.obs.shape[-1])
        actions, logps, rewards, dones, values = (torch.zeros(steps, n) for _ in range(5))
        finished: list[float] = []
        for t in range(steps):
            obs[t] = torch.as_tensor(self.obs, dtype=torch.float32)
            with torch.no_grad():
                dist = self.policy.distribution(obs[t])
                action = dist.sample()
                logps[t], values[t] = dist.log_prob(action), self.policy.value(obs[t])
            self.obs, reward, terminated, truncated, info = self.envs.step(action.numpy())
            actions[t], rewards[t] = action, torch.as_tensor(reward)
            done = terminated | truncated
            dones[t] = torch.as_tensor(done, dtype=torch.float32)
            if truncated.any():  # bootstrap through time limits from the true final observation
                final = torch.as_tensor(np.stack(info["final_obs"][truncated]), dtype=torch.float32)
                with torch.no_grad():
                    rewards[t, truncated] += self.cfg.algo.gamma * self.policy.value(final)
            self.episode_return += reward
            finished.extend(self.episode_return[done].tolist())
            self.episode_return[done] = 0.0
        with torch.no_grad():
            last_value = self.policy.value(torch.as_tensor(self.obs, dtype=torch.float32))
        return {
            "obs": obs,
            "actions": actions,
            "logps": logps,
            "rewards": rewards,
            "dones": dones,
            "values": values,
            "last_value": last_value,
            "finished": finished,
        }


def ppo_update(
    policy: ActorCritic,
    optim: torch.optim.Optimizer,
    batch: dict[str, torch.Tensor],
    cfg: PPOConfig,
) -> dict[str, float]:
    """Clipped-PPO epochs over one rollout batch (flattened over time and envs)."""
    size = batch["obs"].shape[0]
    stats: dict[str, float] = {}
    for _ in range(cfg.epochs):
        for idx in torch.randperm(size).chunk(cfg.minibatches):
            logp, entropy, value = policy.evaluate_actions(batch["obs"][idx], batch["actions"][idx])
            adv = batch["advantages"][idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss, stats = ppo_clip_loss(logp, batch["logps"][idx], adv, cfg.clip)
            v_loss = 0.5 * (value - batch["returns"][idx]).pow(2).mean()
            loss = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy.mean()
            optim.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.parameters(), cfg.max_grad_norm)
            optim.step()
    stats["policy_loss"], stats["value_loss"] = pg_loss.item(), v_loss.item()
    stats["entropy"] = entropy.mean().item()
    return stats


class PPOTrainer:
    """PPO on rollouts from its pool of workers, one rollout batch and its update per
    :meth:`step` (a :class:`fieldrl.training.Trainer`; ``done`` counts env steps)."""

    def __init__(self, cfg: CartPoleConfig, resources: Resources) -> None:
        self.cfg = cfg
        self.policy = make_policy(cfg)
        self.optim = torch.optim.Adam(self.policy.parameters(), lr=cfg.algo.lr, eps=1e-5)
        workers = resources.workers
        self.pool = WorkerPool(lambda i: RolloutWorker(cfg, i), workers, resources.address)
        self.per_iter = cfg.algo.rollout_steps * cfg.env.num_envs * workers
        self.iterations = max(1, cfg.algo.total_steps // self.per_iter)
        self.total, self.done = self.iterations * self.per_iter, 0
        self.generators = ()
        self.recent: list[float] = []

    def close(self) -> None:
        self.pool.close()

    def state_dict(self) -> dict[str, Any]:
        return {"policy": module_state(self.policy), "optim": self.optim.state_dict(),
                "steps": self.done}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.policy.load_state_dict(state["policy"]["weights"])
        self.optim.load_state_dict(state["optim"])
        self.done = int(state["steps"])

    def step(self) -> dict[str, float]:
        cfg, it = self.cfg, self.done // self.per_iter + 1
        tick = time.perf_counter()
        rollouts = self.pool.broadcast("collect", self.policy.state_dict())
        batch: dict[str, torch.Tensor] = {}
        for key in ("obs", "actions", "logps", "rewards", "dones", "values"):
            batch[key] = torch.cat([r[key] for r in rollouts], dim=1)
        last_value = torch.cat([r["last_value"] for r in rollouts])
        adv, ret = gae(batch["rewards"], batch["values"], batch["dones"], last_value,
                       cfg.algo.gamma, cfg.algo.lam)  # fmt: skip
        flat = {k: v.flatten(0, 1) for k, v in {**batch, "advantages": adv, "returns": ret}.items()}
        for group in self.optim.param_groups:  # linear learning-rate annealing
            group["lr"] = cfg.algo.lr * (1 - (it - 1) / self.iterations)
        stats = ppo_update(self.policy, self.optim, flat, cfg.algo)
        self.recent = ([x for r in rollouts for x in r["finished"]] or self.recent)[-20:]
        stats["explained_variance"] = explained_variance(flat["values"], flat["returns"])
        stats["episode_return"] = float(np.mean(self.recent)) if self.recent else 0.0
        stats["steps_per_s"] = self.per_iter / (time.perf_counter() - tick)
        self.done += self.per_iter
        return stats


def train(cfg: CartPoleConfig, *, run: Run, resources: Resources) -> dict[str, float]:
    """PPO through the core loop (resumable), then the held-out evaluation."""
    trainer = fit(lambda: PPOTrainer(cfg, resources), run, seed=cfg.experiment.seed,
                  description="PPO CartPole")  # fmt: skip
    return evaluate_policy(trainer.policy, cfg, resources)


def run_episode(policy: torch.nn.Module | None, env_id: str, seed: int) -> float:
    """One episode's return; ``policy=None`` acts uniformly at random."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    total, done = 0.0, False
    while not done:
        if policy is None:
            action = env.action_space.sample()
        else:
            action = int(policy.act(torch.as_tensor(obs, dtype=torch.float32), deterministic=True))
        obs, reward, terminated, truncated, _ = env.step(action)
        total += float(reward)
        done = terminated or truncated
    return total


def _episode_job(job: tuple[ActorCritic | None, str, int]) -> float:
    return run_episode(*job)


def evaluate_policy(
    policy: ActorCritic | None, cfg: CartPoleConfig, resources: Resources
) -> dict[str, float]:
    """Mean return and 95% CI over the held-out evaluation seeds."""
    seeds = range(cfg.eval.seed, cfg.eval.seed + cfg.eval.episodes)
    returns = parallel_map(
        _episode_job, [(policy, cfg.env.id, s) for s in seeds], resources.workers, resources.address
    )
    mean, low, high = mean_ci95(returns)
    return {"eval_return_mean": mean, "ci95_low": low, "ci95_high": high}


def evaluate(
    cfg: CartPoleConfig, *, run: LoadedRun, resources: Resources, out: Path
) -> dict[str, float]:
    policy = module_from_state(run.state["policy"])
    metrics = {**evaluate_policy(policy, cfg, resources), "checkpoint_step": run.step}
    atomic_write_json(out / "eval.json", metrics)
    return metrics


def benchmark(cfg: CartPoleConfig, *, out: Path, quick: bool, resources: Resources) -> Path:
    """PPO (trained here) against a random policy on the same held-out seeds."""
    bench = Benchmark(cfg, out, quick=quick, workers=resources.workers)
    with Run.create(cfg, root=out / "runs") as run:
        train(cfg, run=run, resources=resources)
    trained = module_from_state(open_run(run.dir, CartPoleConfig).state["policy"])
    rows = [
        {"method": name, **evaluate_policy(policy, cfg, resources)}
        for name, policy in (("ppo", trained), ("random", None))
    ]
    score = rows[0]["eval_return_mean"]
    target = Target("PPO held-out return", ">= 200", f"{score:.1f}", score >= 200)
    seeds = list(range(cfg.eval.seed, cfg.eval.seed + cfg.eval.episodes))
    return bench.write(rows, seeds=seeds, targets=[target])


def report_sections(data: dict[str, Any], out: Path, rep: Report) -> None:
    rows = data["rows"]
    rep.table(rows)
    if data["data"].get("demo"):  # a run folder: its training curves too
        for plot in plot_metrics(out / "metrics.jsonl", ["episode_return", "value_loss"],
                                 out / "plots"):  # fmt: skip
            rep.figure(plot, plot.stem, out)
    plot = line_plot(
        out / "returns.png",
        {"eval return": (range(len(rows)), [r["eval_return_mean"] for r in rows])},
        title=f"held-out return ({', '.join(r['method'] for r in rows)})",
        xlabel="method",
        ylabel="return",
    )
    rep.figure(plot, "mean return", out)


def demo_report(run: LoadedRun, *, resources: Resources) -> str:
    """The held-out return into the run folder's benchmark.json (the core writes the report
    from it); the headline is that return."""
    cfg = run.config
    result = evaluate_policy(module_from_state(run.state["policy"]), cfg, resources)
    seeds = list(range(cfg.eval.seed, cfg.eval.seed + cfg.eval.episodes))
    data = {"title": "CartPole PPO (reference path)", "demo": True}
    Benchmark(cfg, run.dir, quick=True).write([{"method": "ppo", **result}], seeds=seeds, data=data)
    return f"PPO held-out return {result['eval_return_mean']:.1f} (random play: about 20)"


class ActRequest(RequestModel):
    observations: list[list[float]] = Field(
        ..., min_length=1, max_length=4096, description="A batch of CartPole observations."
    )
    deterministic: bool = True


class ActResponse(ResponseModel):
    actions: list[int]


def service(run: LoadedRun) -> ServiceSpec:
    policy = module_from_state(run.state["policy"])
    obs_dim = policy.spec["kwargs"]["obs_dim"]

    def act(request: ActRequest) -> ActResponse:
        for i, row in enumerate(request.observations):
            if len(row) != obs_dim:
                raise InputError(f"observations.{i}", f"expected {obs_dim} values, got {len(row)}")
        obs = torch.as_tensor(request.observations, dtype=torch.float32)
        actions = policy.act(obs, deterministic=request.deterministic)
        return ActResponse(actions=actions.tolist())

    return ServiceSpec(
        run.config.app,
        ActRequest,
        ActResponse,
        act,
        model_version=run.model_version,
        config_hash=run.config_hash,
        info={"obs_dim": obs_dim},
    )


APP = App(
    summary="Reference path: PPO on CartPole through the core (test-only).",
    config_model=CartPoleConfig,
    presets_dir=PRESETS,
    train=train,
    evaluate=evaluate,
    benchmark=benchmark,
    demo_report=demo_report,
    service=service,
    example_request=lambda run: {"observations": [[0.0, 0.0, 0.0, 0.0]]},
    report=report_sections,
    sweep_metric="eval_return_mean",
    status="reference (tests only)",
)
