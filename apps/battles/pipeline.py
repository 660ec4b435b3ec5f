"""The battles app's steps: build a scenario, train both teams (resumable), load a run,
measure a trained team (exploitability on a game, cross-play on a battlefield)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.app import Resources
from fieldrl.apps.battles.baselines import (
    SCRIPTED,
    TeamPolicy,
    play,
    run_episode,
)
from fieldrl.apps.battles.battlefield import Battlefield
from fieldrl.apps.battles.config import CUSTOM_GAME, BattlesConfig, ScenarioConfig, TrainConfig
from fieldrl.apps.battles.games import GAMES, MatrixGame, PopulationGame, tv_distance
from fieldrl.apps.battles.mf_mappo import CRITICS, MFMAPPOTrainer
from fieldrl.apps.battles.mfq import MFQConfig, MFQTeam, MFQTrainer, mfq_policy
from fieldrl.apps.battles.rollout import (
    Observation,
    Step,
    Team,
    merge_steps,
    rollout,
    team_mirrors,
    team_policy,
)
from fieldrl.atomic import atomic_write_json
from fieldrl.benchmark import wilson_interval
from fieldrl.config import derive, load_config
from fieldrl.distributed import WorkerPool
from fieldrl.errors import FieldrlError
from fieldrl.runs import LoadedRun, Run, open_run, read_metrics
from fieldrl.seeding import derive_seed
from fieldrl.training import fit

__all__ = [
    "SidedPolicy",
    "battles",
    "check_fits",
    "crossplay",
    "evaluate",
    "exploitability_curve",
    "game_metrics",
    "load",
    "open_teams",
    "make_env",
    "matrix_game",
    "opponent_policy",
    "pool",
    "train",
]

Env = Battlefield | PopulationGame


def make_env(
    cfg: BattlesConfig, copies: int, agents_per_team: int | None = None, seed: int = 0
) -> Env:
    """The configured scenario with ``copies`` parallel copies."""
    sc = cfg.scenario
    n = agents_per_team or sc.agents_per_team
    if sc.kind == "game":
        return PopulationGame(matrix_game(sc), n, copies, sc.horizon, seed)
    objective = tuple(sc.objective) if sc.objective else None
    return Battlefield(sc.height, sc.width, n, copies, max_health=sc.max_health,
                       attrition=sc.attrition, horizon=sc.horizon, objective=objective,
                       objective_weight=sc.objective_weight, kill_weight=sc.kill_weight,
                       seed=seed)  # fmt: skip


def matrix_game(sc: ScenarioConfig) -> MatrixGame:
    """The scenario's population game: a named one, or the custom ``payoff``."""
    if sc.game != CUSTOM_GAME:
        return GAMES[sc.game]
    caps = [None if c is None else np.asarray(c, float) for c in (sc.blue_cap, sc.red_cap)]
    return MatrixGame(CUSTOM_GAME, np.asarray(sc.payoff, float), *caps)


def describe_scenario(cfg: BattlesConfig) -> str:
    """What a policy's networks are shaped by, in words."""
    sc = cfg.scenario
    if sc.kind == "game":
        return f"the population game {sc.game} ({matrix_game(sc).payoff.shape[0]} strategies)"
    return f"a {sc.height}x{sc.width} battlefield with max_health {sc.max_health}"


def check_fits(policy_cfg: BattlesConfig, arena_cfg: BattlesConfig, who: str) -> None:
    """Refuse to play a trained team on a scenario its networks were not built for."""
    if describe_scenario(policy_cfg) != describe_scenario(arena_cfg):
        raise FieldrlError(
            f"{who} was trained on {describe_scenario(policy_cfg)}, but this scenario is "
            f"{describe_scenario(arena_cfg)}: a trained team plays only the grid or game it "
            "was trained on (check scenario.* in --set or the config)"
        )


def shares_sides(cfg: BattlesConfig) -> bool:
    """Whether one network plays both sides (only on a battlefield, for policy gradients)."""
    return cfg.train.shared_sides and cfg.scenario.kind == "battlefield"


def draws_per_state(cfg: BattlesConfig) -> bool:
    """Whether a policy draws one action per occupied local state (``train.sampling``)."""
    return cfg.train.sampling == "state"


def algo_config(cfg: BattlesConfig) -> TrainConfig:
    """``[train]`` as MF-MAPPO runs it on this scenario: one network for both sides only on a
    battlefield, directions and steering only where cells have positions."""
    t = cfg.train
    grid = cfg.scenario.kind == "battlefield"
    run_as = {"shared_sides": shares_sides(cfg), "directions": t.directions and grid,
              "steering": t.steering and grid}  # fmt: skip
    return derive(cfg, train=run_as).train


def mfq_config(cfg: BattlesConfig) -> MFQConfig:
    t = cfg.train
    return MFQConfig(iterations=t.iterations, lr=t.lr, gamma=t.gamma, hidden=t.hidden,
                     temperature=t.temperature)  # fmt: skip


def observation(cfg: BattlesConfig) -> Observation:
    o = cfg.observation
    if o.opponent == "full":
        return Observation()
    return Observation(o.noise, o.delay, o.smoothing)


class RolloutWorker:
    """Collects rollouts on its own copies of the scenario (one per Ray worker)."""

    def __init__(self, cfg: BattlesConfig, copies: int, index: int) -> None:
        self.env = make_env(cfg, copies, seed=derive_seed(cfg.experiment.seed, index, 0))
        self.teams = [new_team(cfg, self.env) for _ in "br"]
        self.obs = observation(cfg)
        self.mirrors = team_mirrors(self.env, shares_sides(cfg))
        self.rng = np.random.default_rng(derive_seed(cfg.experiment.seed, index, 1))
        self.grouped = draws_per_state(cfg)

    def collect(self, team_states: list[dict[str, Any]]) -> tuple[list[list[Step]], np.ndarray]:
        for team, weights in zip(self.teams, team_states, strict=True):
            team.load_state_dict(weights)
        steps, rewards, _ = rollout(
            self.env, self.teams, self.rng, self.obs, self.mirrors, self.grouped
        )
        return steps, rewards


def _parallel_rollouts(cfg: BattlesConfig, resources: Resources) -> Callable[..., Any] | None:
    """With ``workers > 1``: a rollout function that splits the copies over Ray workers."""
    if resources.workers <= 1:
        return None
    per_worker = max(1, cfg.train.copies // resources.workers)
    pool = WorkerPool(lambda i: RolloutWorker(cfg, per_worker, i), resources.workers,
                      resources.address)  # fmt: skip

    def collect(teams: list[Team]) -> tuple[list[list[Step]], np.ndarray]:
        parts = pool.broadcast("collect", [t.state_dict() for t in teams])
        steps = [merge_steps([p[0][team] for p in parts]) for team in range(2)]
        return steps, np.concatenate([p[1] for p in parts], axis=1)

    collect.close = pool.close  # type: ignore[attr-defined]
    return collect


def game_metrics(cfg: BattlesConfig, teams: list[Team], agents_per_team: int,
                 seed: int, copies: int = 32) -> dict[str, float]:  # fmt: skip
    """Exploitability (duality gap) and TV distance to the exact equilibrium of the teams'
    empirical distributions at the last step, averaged over ``copies`` episodes of N agents;
    and the noise floor: the same gap for N agents drawn from the exact equilibrium."""
    game = matrix_game(cfg.scenario)
    env = PopulationGame(game, agents_per_team, copies, cfg.scenario.horizon, seed)
    policy = SidedPolicy(cfg, teams)
    end, _ = run_episode(env, policy, policy, np.random.default_rng(seed))
    mu_star, nu_star, _ = game.equilibrium()
    maps = env.maps(end)
    return {
        "exploitability": float(np.mean([game.exploitability(m[0], m[1]) for m in maps])),
        "tv_distance": float(
            np.mean([0.5 * (tv_distance(m[0], mu_star) + tv_distance(m[1], nu_star)) for m in maps])
        ),  # fmt: skip
        "noise_floor": game.noise_floor(agents_per_team, seed=seed),
    }


def exploitability_curve(run_dir: str | Path) -> list[tuple[int, float, float, float | None]]:
    """(iteration, exploitability, TV distance, the averaged actors' exploitability or None
    before averaging begins) as logged during a game run's training."""
    return [(r["step"], r["train/exploitability"], r["train/tv_distance"],
             r.get("train/average_exploitability"))
            for r in read_metrics(Path(run_dir) / "metrics.jsonl")
            if "train/exploitability" in r]  # fmt: skip


def opponent_policy(name: str, arena: BattlesConfig | None = None) -> tuple[TeamPolicy, str]:
    """A baseline by name, or a trained run folder's teams (it plays blue with its blue
    team and red with its red), checked against the ``arena`` it will play on."""
    if name in SCRIPTED:
        return SCRIPTED[name], name
    path = Path(name)
    if not path.is_dir():
        raise FieldrlError(
            f"opponent {name!r}: not a baseline ({', '.join(SCRIPTED)}) nor a run folder"
        )
    run = open_teams(path)
    run_cfg = run.trained_config
    if arena is not None:
        check_fits(run_cfg, arena, f"opponent {name}")
    label = f"{run_cfg.train.method}:{path.name}"
    return SidedPolicy(run_cfg, run.trained), label


class SidedPolicy:
    """A trained run's two teams: it plays blue with its blue team and red with its red.
    ``obs`` overrides how its actors see the opponent (default: as the run was trained)."""

    def __init__(self, cfg: BattlesConfig, teams: list[Any], obs: Observation | None = None):
        seen = observation(cfg) if obs is None else obs
        self.sides = [mfq_policy(t, cfg.train.temperature) if isinstance(t, MFQTeam)
                      else team_policy(t, seen, shares_sides(cfg), draws_per_state(cfg))
                      for t in teams]  # fmt: skip

    def __call__(self, env: Any, state: Any, team: int, rng: np.random.Generator) -> np.ndarray:
        return self.sides[team](env, state, team, rng)


def battles(
    cfg: BattlesConfig, mine: TeamPolicy, opponent: TeamPolicy, seeds: list[int],
    agents_per_team: int,
) -> list[dict[str, Any]]:  # fmt: skip
    """``mine`` against ``opponent`` from both sides, ``eval.episodes`` battles per side and
    seed: one record per (side, seed) with ``mine``'s wins and the draws."""
    if cfg.scenario.kind != "battlefield":
        raise FieldrlError("cross-play needs scenario.kind = 'battlefield'")
    records = []
    for side in ("blue", "red"):
        for seed in seeds:
            arena = make_env(cfg, cfg.eval.copies, agents_per_team, seed)
            blue, red = (mine, opponent) if side == "blue" else (opponent, mine)
            result = play(arena, blue, red, cfg.eval.episodes, seed, cfg.eval.draw_margin)
            won = result["win_rate"] if side == "blue" else result["loss_rate"]
            records.append({"side": side, "seed": seed, "episodes": result["episodes"],
                            "wins": won * result["episodes"],
                            "draws": result["draw_rate"] * result["episodes"]})  # fmt: skip
    return records


def pool(method: str, opponent: str, agents_per_team: int,
         records: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    """One cross-play row from (side, seed) records: win/draw/loss rates with their Wilson
    95% intervals (``ci95_*`` for the win rate, ``draw_ci95_*``, ``loss_ci95_*``), and the
    win rate from each side."""
    episodes = sum(r["episodes"] for r in records)
    wins = sum(r["wins"] for r in records)
    draws = sum(r["draws"] for r in records)
    row = {"method": method, "opponent": opponent, "agents_per_team": agents_per_team,
           "episodes": episodes}  # fmt: skip
    for outcome, count, prefix in (("win", wins, ""), ("draw", draws, "draw_"),
                                   ("loss", episodes - wins - draws, "loss_")):  # fmt: skip
        row[f"{outcome}_rate"] = count / episodes
        row[f"{prefix}ci95_low"], row[f"{prefix}ci95_high"] = wilson_interval(count, episodes)
    for side in ("blue", "red"):
        mine = [r for r in records if r["side"] == side]
        row[f"win_rate_as_{side}"] = sum(r["wins"] for r in mine) / max(
            sum(r["episodes"] for r in mine), 1
        )
    return row


def crossplay(
    cfg: BattlesConfig, method: str, mine: TeamPolicy, opponent: TeamPolicy, opponent_name: str,
    seeds: list[int], agents_per_team: int,
) -> dict[str, Any]:  # fmt: skip
    """``mine`` against ``opponent`` from both sides: one pooled row (see :func:`pool`)."""
    records = battles(cfg, mine, opponent, seeds, agents_per_team)
    return pool(method, opponent_name, agents_per_team, records)


def train(cfg: BattlesConfig, *, run: Run, resources: Resources) -> dict[str, float]:
    """Self-play training of ``train.method`` for both teams; resumes from the run's latest
    checkpoint. Final metrics: exploitability on a game, cross-play on a battlefield (on the
    validation seed, never an evaluation seed)."""
    env = make_env(cfg, cfg.train.copies, seed=cfg.experiment.seed)
    collect = _parallel_rollouts(cfg, resources)
    every = max(1, cfg.train.iterations // 20)

    def evaluate_game(teams: list[Team], iteration: int,
                      averaged: list[Team] | None) -> dict[str, float]:  # fmt: skip
        if iteration % every:
            return {}
        metrics = {f"train/{k}": v for k, v in game_metrics(cfg, teams, env.n, 99, 8).items()}
        if averaged is not None:
            metrics |= {f"train/average_{k}": v
                        for k, v in game_metrics(cfg, averaged, env.n, 99, 8).items()
                        if k != "noise_floor"}  # fmt: skip
        return metrics

    def build() -> MFMAPPOTrainer | MFQTrainer:
        seed = cfg.experiment.seed
        if cfg.train.method == "mfq":
            return MFQTrainer(env, mfq_config(cfg), seed)
        game = evaluate_game if cfg.scenario.kind == "game" else None
        return MFMAPPOTrainer(env, algo_config(cfg), seed, game, observation(cfg), collect,
                              cfg.observation.gradient_penalty)  # fmt: skip

    try:
        trainer = fit(build, run, seed=cfg.experiment.seed,
                      description=f"{cfg.train.method} self-play")  # fmt: skip
    finally:
        if collect is not None:
            collect.close()  # type: ignore[attr-defined]
    return validate(cfg, trainer.teams)


def validate(cfg: BattlesConfig, teams: list[Team]) -> dict[str, float]:
    """End-of-training check on the validation seed."""
    seed = cfg.eval.validation_seed
    if cfg.scenario.kind == "game":
        m = game_metrics(cfg, teams, cfg.scenario.agents_per_team, seed)
        return {f"validation_{k}": v for k, v in m.items()}
    mine = SidedPolicy(cfg, teams)
    short = derive(cfg, eval={"episodes": 20})
    metrics = {}
    for name in cfg.eval.opponents:
        policy, label = opponent_policy(name, cfg)
        row = crossplay(short, cfg.train.method, mine, policy, label, [seed],
                        cfg.scenario.agents_per_team)  # fmt: skip
        metrics[f"validation_win_rate_vs_{label}"] = row["win_rate"]
    metrics["validation_win_rate"] = min(metrics.values())
    return metrics


def new_team(cfg: BattlesConfig, env: Env) -> Team | MFQTeam:
    """An untrained team of ``train.method`` for ``env``."""
    if cfg.train.method == "mfq":
        return MFQTeam(env, cfg.train.hidden)
    algo = algo_config(cfg)
    return Team(env, algo.hidden, CRITICS[algo.method], algo.directions, algo.steering)


def open_teams(path: str | Path) -> LoadedRun[BattlesConfig]:
    """A battles run folder opened with :func:`load` as its loader (``run.trained``)."""
    return open_run(path, BattlesConfig, loader=load)


def load(run: LoadedRun) -> list[Any]:
    """``App.load``: the run's two trained teams from its final checkpoint, built for the
    config it trained with (``run.trained_config``: the networks' shapes)."""
    cfg = run.trained_config
    teams = [new_team(cfg, make_env(cfg, 1, seed=0)) for _ in range(2)]
    for i, team in enumerate(teams):
        # a shared_sides run has one network (team_0) for both sides
        state = run.state
        team.load_state_dict(state.get(f"team_{i}", state["team_0"]))
        team.eval()
    return teams


def evaluate(
    cfg: BattlesConfig, *, run: LoadedRun, resources: Resources, out: Path
) -> dict[str, float]:
    """Exploitability at N (a game) or cross-play against ``eval.opponents`` on the
    evaluation seeds at ``eval.agents_per_team`` (a battlefield); writes ``eval.json``."""
    teams = run.trained
    check_fits(run.trained_config, cfg, f"run {run.dir}")
    n = cfg.eval.agents_per_team or cfg.scenario.agents_per_team
    if cfg.scenario.kind == "game":
        rows = [{"game": cfg.scenario.game, "n_agents": n, "seed": s,
                 **game_metrics(cfg, teams, n, s)} for s in cfg.eval.seeds]  # fmt: skip
        metrics = {k: float(np.mean([r[k] for r in rows]))
                   for k in ("exploitability", "tv_distance", "noise_floor")}  # fmt: skip
    else:
        mine = SidedPolicy(cfg, teams)
        rows = []
        opponents = [opponent_policy(name, cfg) for name in cfg.eval.opponents]
        for policy, label in opponents:
            rows.append(crossplay(cfg, cfg.train.method, mine, policy, label, cfg.eval.seeds, n))
        metrics = {f"win_rate_vs_{r['opponent']}": r["win_rate"] for r in rows}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "eval.json", {"rows": rows, "metrics": metrics})
    return metrics


PRESETS = Path(__file__).parent / "configs"


def game_jobs(cfg: BattlesConfig, root: str) -> list[tuple[BattlesConfig, str]]:
    """The game recipe (game.toml) per (game, N, training seed). Its magnet KL is averaged
    over agents while an agent's share of the team advantage shrinks with N, so the pull is
    scaled by sqrt(N_recipe / N): at 10,000 per team the recipe's 0.1 held weighted RPS at
    an exploitability of 0.78 (16x the floor), 0.03 reached 0.19 (training seed 0)."""
    recipe = load_config(BattlesConfig, PRESETS / "game.toml")
    b = cfg.benchmark
    sc = cfg.scenario
    jobs = []
    for game in b.games:
        custom = ({"payoff": sc.payoff, "blue_cap": sc.blue_cap, "red_cap": sc.red_cap}
                  if game == CUSTOM_GAME else {})  # fmt: skip
        for n in b.game_agents:
            magnet = recipe.train.magnet * math.sqrt(recipe.scenario.agents_per_team / n)
            for seed in b.train_seeds:
                job = derive(
                    recipe,
                    scenario={"game": game, "agents_per_team": n, **custom},
                    train={"iterations": b.game_iterations, "magnet": magnet},
                    experiment={
                        "seed": seed,
                        "name": f"{game}-n{n}-s{seed}",
                    },
                )
                jobs.append((job, root))
    return jobs
