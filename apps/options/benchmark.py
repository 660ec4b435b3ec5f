"""``fieldrl options benchmark``: MaskablePPO, the rule baselines, a random valid strategy
and the hindsight oracle on the same held-out episodes of each suite and market; the
look-ahead test; the speed of the environment and of order validation.

Each (suite, market) job trains MaskablePPO on the training split (2023 January-June, or
the training seed stream) and plays every method on the evaluation split (2023
September-December, or the evaluation seed stream). Nothing is tuned on the evaluation
episodes.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fieldrl.app import Resources
from fieldrl.apps.options.baselines import (
    CLOSE,
    SUITE_BASELINES,
    Action,
    Policy,
    policy_for,
    random_valid,
    suite_policies,
)
from fieldrl.apps.options.config import SUITES, OptionsConfig, RandomizeConfig, SuiteConfig
from fieldrl.apps.options.engine import check_orders
from fieldrl.apps.options.env import AgentView, OptionsEnv
from fieldrl.apps.options.episodes import make_episodes
from fieldrl.apps.options.evaluate import oracle, run_episode, summary
from fieldrl.apps.options.metrics import EpisodeRecord, bootstrap_ci, episode_metrics
from fieldrl.apps.options.orders import Rejection
from fieldrl.apps.options.ppo import MaskablePPOTrainer, masked_policy
from fieldrl.apps.options.strategies import MenuItem
from fieldrl.benchmark import Benchmark, Target
from fieldrl.config import derive
from fieldrl.training import fit

__all__ = ["benchmark", "run_job", "suite_config"]

PREMIUM_NOTE = (
    "a variance premium makes selling options pay on average, so random trades "
    "need not lose exactly their costs"
)
BULL_NOTE = "overlay of 200 shares on $100,000, the whole year as one episode"
ORDER_BATCH = 1000  # orders checked at once in the speed figure
PEEKING = "peeking_control"  # the look-ahead test's positive control
# the learner before the options push (issue 43): 64 training paths in the fitted market,
# trained beside today's on synthetic markets so that the change is measured in one run
FIXED_LEARNER, FIXED_PATHS = "maskable_ppo_64_paths", 64
RULES = ("covered_call_30d", "buy_write_30d", "cash_secured_put_30d", "iron_condor_16d",
         "pre_earnings_straddle", "iron_condor_0dte")  # fmt: skip


def suite_config(cfg: OptionsConfig, suite: str, market: str, **market_extra: Any
                 ) -> OptionsConfig:  # fmt: skip
    """The benchmark's config for one suite and market: the suite's preset, the
    benchmark's symbols (real data), training budget and, for the replay suites chosen on
    validation, training on synthetic paths."""
    market_fields = {"kind": market, **market_extra}
    ppo = {"timesteps": cfg.benchmark.ppo_timesteps}
    if market == "replay":
        market_fields["symbols"] = list(cfg.benchmark.symbols)
        if suite in cfg.benchmark.synthetic_training:
            ppo["train_on"] = "synthetic"
    return derive(cfg, suite={**SuiteConfig().model_dump(), **SUITES[suite]},
                  market=market_fields, ppo=ppo)  # fmt: skip


def run_job(job: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    """One suite and market: train MaskablePPO, then play it, the suite's baselines,
    random valid and the oracle on the same evaluation episodes."""
    suite, market, seed, data = job
    cfg = OptionsConfig.model_validate(data)
    started = time.perf_counter()
    trainer = _train(cfg, seed, f"MaskablePPO {suite}/{market}")
    trained_s = time.perf_counter() - started
    episodes = make_episodes(cfg, "eval", cfg.benchmark.episodes, 0)
    env = OptionsEnv(cfg, episodes)
    policies = suite_policies(trainer.model, suite)
    if market == "synthetic" and cfg.market.randomize != RandomizeConfig():  # as it was
        paths = min(FIXED_PATHS, cfg.ppo.train_episodes)  # (fewer in the small presets)
        before = derive(cfg, ppo={"train_episodes": paths},
                        market={"randomize": RandomizeConfig().model_dump()})  # fmt: skip
        fixed = masked_policy(_train(before, seed, f"MaskablePPO on {paths} paths {suite}").model)
        policies = {"maskable_ppo": policies.pop("maskable_ppo"), FIXED_LEARNER: fixed,
                    **policies}  # fmt: skip
    if cfg.benchmark.llm_url:
        from fieldrl.apps.options.llm import LLMAgent

        policies["llm"] = LLMAgent(cfg.benchmark.llm_url, cfg.benchmark.llm_model)
    records: dict[str, list[EpisodeRecord]] = {}
    for name, policy in policies.items():
        records[name] = [run_episode(env, policy, e) for e in range(len(episodes))]
    best = [oracle(env, e, env.menu, {m: rs[e] for m, rs in records.items()})
            for e in range(len(episodes))]  # fmt: skip
    records["oracle"] = [r for r, _ in best]
    per = {m: [episode_metrics(r) for r in rs] for m, rs in records.items()}
    return {"suite": suite, "market": market, "seed": seed,
            "episodes": [e.key for e in episodes],
            "summaries": {m: summary(rs) for m, rs in records.items()},
            "per_episode": {m: [e["pnl_per_risk"] for e in es] for m, es in per.items()},
            "per_episode_pnl": {m: [e["pnl"] for e in es] for m, es in per.items()},
            "oracle_picks": [name for _, name in best],
            "paths": {m: {"nav": rs[0].nav, "greeks": rs[0].greeks} for m, rs in records.items()},
            "rejections": {m: dict(sum((r.rejections for r in rs), Counter()))
                           for m, rs in records.items()},
            "train_s": round(trained_s, 1),
            "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def _train(cfg: OptionsConfig, seed: int, description: str) -> MaskablePPOTrainer:
    train = make_episodes(cfg, "train", cfg.ppo.train_episodes, seed)
    return fit(lambda: MaskablePPOTrainer(cfg, train, seed), None, seed=seed,
               description=description)  # fmt: skip


def peeking_control(env: OptionsEnv) -> Policy:
    """The look-ahead test's positive control: a policy handed ``env`` itself (which no
    agent gets) that reads the next step's spot, buys a call before a rise and a put
    before a fall, and closes the step after. The test must catch it."""

    def policy(view: AgentView) -> Action:
        if view.open_item is not None:
            return CLOSE
        now, later = (env.market.chains[view.step + i][view.symbol].spot for i in (0, 1))
        return ("open", MenuItem("long_call" if later > now else "long_put", 0.5, 7))

    return policy


def lookahead_job(job: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    """The look-ahead test: in a fair (zero-premium, zero-cost) synthetic market no agent
    can expect to make or lose money, so each one's mean P&L must be 0 within its CI; the
    positive control, which peeks at the next step, must make money (CI above 0)."""
    _, _, seed, data = job
    cfg = OptionsConfig.model_validate(data)
    trainer = _train(cfg, seed, "MaskablePPO, fair market")
    episodes = make_episodes(cfg, "eval", cfg.benchmark.lookahead_episodes, 0)
    env = OptionsEnv(cfg, episodes)
    policies = {"maskable_ppo": masked_policy(trainer.model), "random_valid": random_valid(),
                "buy_write_30d": policy_for("buy_write_30d"),
                "cash_secured_put_30d": policy_for("cash_secured_put_30d"),
                "iron_condor_16d": policy_for("iron_condor_16d"),
                PEEKING: peeking_control(env)}  # fmt: skip
    out = {}
    for name, policy in policies.items():
        pnl = [episode_metrics(run_episode(env, policy, e))["return"] for e in range(len(episodes))]
        mean, low, high = bootstrap_ci(np.array(pnl))
        out[name] = {"mean_return": mean, "low": low, "high": high}
    return {"lookahead": out}


def bull_year(cfg: OptionsConfig, symbol: str = "AAPL") -> dict[str, float]:
    """The whole 2023 replay of a stock that rose strongly, as one overlay episode: the
    30-delta, 30-day covered call against holding the shares (returns on the NAV)."""
    from fieldrl.apps.options.data import replay_market
    from fieldrl.apps.options.episodes import Episode

    market = replay_market([symbol], "2023-01-03", "2023-12-29", cfg.market.spread)
    env = OptionsEnv(cfg, [Episode(market, symbol, f"{symbol} 2023")])
    out = {"symbol_return": market.chains[-1][symbol].spot / market.chains[0][symbol].spot - 1}
    for name in ("buy_and_hold", "covered_call_30d"):
        out[name] = episode_metrics(run_episode(env, policy_for(name), 0))["return"]
    return out


def speed(cfg: OptionsConfig) -> dict[str, float]:
    """Environment steps a second on one core and a chain of about 2,000 options (the
    SPX-like index's: European, so American pricing's cost is not in it), holding a
    four-leg position (the market's chains and their per-step features computed once,
    as in training, which replays its episodes; the first visit of each step is reported
    too); and orders validated and margined a second: :func:`check_orders` on a batch of
    the menu's orders, and the account one order at a time (validated, margined and filled)
    on the same orders, with the ratio of the two."""
    import datetime as dt

    from fieldrl.apps.options.account import Account
    from fieldrl.apps.options.config import SyntheticConfig
    from fieldrl.apps.options.episodes import SPX_LIKE, Episode
    from fieldrl.apps.options.sim import simulate, trading_times
    from fieldrl.apps.options.strategies import TEMPLATES, build_order

    spec = SyntheticConfig(**{**SPX_LIKE, "strike_range": 0.08, "max_expiry_days": 60,
                              "weeklies": 4})  # fmt: skip
    times = trading_times(dt.date(2025, 3, 3), 40)
    market = simulate(spec, "SPX", times, 0, cfg.market.spread, index=True)
    options = len(market.chains[0]["SPX"])
    big = derive(cfg, suite={"capital": 1e6})
    env = OptionsEnv(big, [Episode(market, "SPX", "speed")])  # an index condor needs ~$7k
    condor = MenuItem("iron_condor", 0.16, 30)

    def hold_a_condor(seconds: float) -> float:
        """Steps a second holding a four-leg position (reopened each episode)."""
        env.reset(seed=0)
        if env.open(condor) is None:
            raise RuntimeError("the speed test could not open its iron condor")
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            if env.step(0)[2]:
                env.reset(seed=0)
                env.open(condor)
            steps += 1
        return steps / (time.perf_counter() - start)

    first = time.perf_counter()
    env.reset(seed=0)
    while not env.step(0)[2]:
        pass
    cold = (len(market) - 1) / (time.perf_counter() - first)  # each step's features computed
    env_rate = hold_a_condor(cfg.benchmark.speed_seconds)
    view = market.now(0)
    chain = market.chains[0]["SPX"]
    menu = [build_order(MenuItem(t, d, e), chain, 1) for t in TEMPLATES
            for d in (0.16, 0.3, 0.5) for e in (7, 30, 45)]  # fmt: skip
    batch = ([o for o in menu if o is not None] * ORDER_BATCH)[:ORDER_BATCH]

    def one_at_a_time() -> None:
        for order in batch:
            try:
                Account(1e6).submit(order, view)
            except Rejection:
                pass

    scalar = _rate(one_at_a_time, cfg.benchmark.speed_seconds) * len(batch)
    vector = _rate(lambda: check_orders(Account(1e6), batch, view),
                   cfg.benchmark.speed_seconds) * len(batch)  # fmt: skip
    return {"chain_options": float(options), "env_steps_per_s": env_rate,
            "env_steps_per_s_first_visit": cold, "orders_per_s": vector,
            "orders_per_s_one_at_a_time": scalar, "orders_speedup": vector / scalar}  # fmt: skip


def _rate(work: Callable[[], object], seconds: float) -> float:
    """Calls of ``work`` a second, over at least ``seconds`` (after one warm-up call)."""
    work()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        work()
        calls += 1
    return calls / (time.perf_counter() - start)


def benchmark(cfg: OptionsConfig, *, out: Path, quick: bool, resources: Resources) -> Path:
    """Every suite x market job, the look-ahead test and the speeds; benchmark.json (the core
    writes report.md from it)."""
    b = cfg.benchmark
    bench = Benchmark(cfg, out, quick=quick, workers=resources.workers)
    jobs = [(s, m, seed, suite_config(cfg, s, m).model_dump(mode="json"))
            for s in b.suites for m in b.markets for seed in b.seeds
            if not (s == "zero_dte" and m == "replay")]  # fmt: skip
    fair = derive(suite_config(cfg, "strategy", "synthetic", costs=False),
                  market={"synthetic": {"zero_premium": True}})  # fmt: skip
    jobs.append(("lookahead", "synthetic", b.seeds[0], fair.model_dump(mode="json")))
    with bench.phase("runs"):
        name = lambda job: "|".join(map(str, job[:3]))  # noqa: E731 - suite|market|seed
        results = bench.run_jobs(_dispatch, jobs, name, address=resources.address,
                                 description="options suites")  # fmt: skip
    with bench.phase("speed"):
        speeds = speed(suite_config(cfg, "strategy", "synthetic"))
    with bench.phase("bull_year"):
        bull = bull_year(suite_config(cfg, "overlay", "replay"))
    lookahead = results.pop()["lookahead"]
    pooled = pool_seeds(results)
    path = bench.write(_rows(results), seeds=b.seeds,
                       targets=targets(results, pooled, lookahead, speeds, bull),
                       data={"lookahead": lookahead, "speed": speeds, "bull_year": bull,
                             "pooled": pooled,
                             "jobs": [{k: v for k, v in r.items() if k != "summaries"}
                                      for r in results]})  # fmt: skip
    return path


def _dispatch(job: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    return lookahead_job(job) if job[0] == "lookahead" else run_job(job)


def _rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per method, suite, market and seed, with the regret to the oracle."""
    rows = []
    for r in results:
        per = r["per_episode"]
        for method, s in r["summaries"].items():
            row = {"method": method, "suite": r["suite"], "market": r["market"],
                   "seed": r["seed"], **{k: v for k, v in s.items()
                                          if isinstance(v, float) and np.isfinite(v)}}  # fmt: skip
            regret = np.array(per["oracle"]) - np.array(per[method])
            row["regret"], row["regret_low"], row["regret_high"] = bootstrap_ci(regret)
            rows.append(row)
    return rows


def pool_seeds(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per suite and market with its training seeds pooled: each method's P&L per
    risk on each held-out episode averaged over the seeds (every seed plays the same
    episodes), each seed's mean, the best rule, and the paired differences (mean and 95%
    bootstrap CI over the episodes) to random valid and the best rule, and the regret.
    Random valid's dollars come from one seed: its play depends on the episode only.
    Results without ``summaries`` (the jobs as ``benchmark.json`` keeps them) get no
    ``random_valid`` entry."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["suite"], r["market"]), []).append(r)
    pooled = []
    for (suite, market), runs in groups.items():
        if any(r["episodes"] != runs[0]["episodes"] for r in runs):
            raise ValueError(f"{suite}/{market}: the seeds played different held-out episodes")
        if any(set(r["per_episode"]) != set(runs[0]["per_episode"]) for r in runs):
            raise ValueError(f"{suite}/{market}: the seeds played different methods "
                             f"{[sorted(r['per_episode']) for r in runs]}")  # fmt: skip
        per = {
            m: np.mean([r["per_episode"][m] for r in runs], axis=0) for m in runs[0]["per_episode"]
        }
        rules = [m for m in SUITE_BASELINES[suite] if m in RULES or m == "buy_and_hold"]
        best = max(rules, key=lambda m: per[m].mean())
        methods = {}
        for m, values in per.items():
            mean, low, high = bootstrap_ci(values)
            methods[m] = {"pnl_per_risk": mean, "pnl_per_risk_low": low, "pnl_per_risk_high": high,
                          "per_seed": [float(np.mean(r["per_episode"][m])) for r in runs],
                          "regret": float(np.mean(per["oracle"] - values)),
                          **{f"vs_{b}": list(bootstrap_ci(values - per[b]))
                             for b in ("random_valid", best)}}  # fmt: skip
        pooled.append({"suite": suite, "market": market, "seeds": [r["seed"] for r in runs],
                       "episodes": len(runs[0]["episodes"]), "best_rule": best,
                       "random_valid": _random_valid_pnl(
                           next((r for r in runs if "per_episode_pnl" in r), runs[0])),
                       "methods": methods})  # fmt: skip
    return pooled


def _random_valid_pnl(result: dict[str, Any]) -> dict[str, Any] | None:
    """Random valid's P&L (mean and 95% CI, dollars an episode) and costs; an overlay's
    against buy-and-hold on the same episodes, since both hold the shares (a result saved
    before the per-episode dollars were kept reads the whole P&L); costs net of
    buy-and-hold's."""
    if "summaries" not in result:
        return None
    s = result["summaries"]["random_valid"]
    dollars = result.get("per_episode_pnl")
    if result["suite"] != "overlay" or dollars is None:
        return {"pnl": s["pnl"], "pnl_low": s["pnl_low"], "pnl_high": s["pnl_high"],
                "costs": s["costs"], "against": "nothing"}  # fmt: skip
    mean, low, high = bootstrap_ci(np.subtract(dollars["random_valid"], dollars["buy_and_hold"]))
    costs = s["costs"] - result["summaries"]["buy_and_hold"]["costs"]
    return {"pnl": mean, "pnl_low": low, "pnl_high": high, "costs": costs,
            "against": "buy_and_hold"}  # fmt: skip


def targets(results: list[dict[str, Any]], pooled: list[dict[str, Any]],
            lookahead: dict[str, Any], speeds: dict[str, float], bull: dict[str, float]
            ) -> list[Target]:  # fmt: skip
    """The issue's targets: the learner's read on its seeds pooled (``pool_seeds``)."""
    out = []
    honest = {n: v for n, v in lookahead.items() if n != PEEKING}
    leaks = [n for n, v in honest.items() if not v["low"] <= 0 <= v["high"]]
    # a look-ahead job saved before the control existed has none: not run, so not caught
    control = lookahead.get(PEEKING)
    caught = control is not None and control["low"] > 0
    verdict = "not run" if control is None else (
        f"{control['mean_return']:+.2%} {'caught' if caught else 'not caught'}")  # fmt: skip
    out.append(Target("look-ahead test: mean P&L 0 within its CI in a fair market, and the "
                      "peeking control caught",
                      "every agent's CI contains 0; the control's CI is above 0",
                      f"{len(honest) - len(leaks)} of {len(honest)} agents"
                      + (f"; not: {leaks}" if leaks else "") + f"; control {verdict}",
                      not leaks and caught, "zero premium, zero costs, synthetic"))  # fmt: skip
    costs = []
    for p in pooled:
        s = p["random_valid"]
        where = f"{p['suite']}/{p['market']}" + (
            " (over buy-and-hold)" if s["against"] == "buy_and_hold" else "")  # fmt: skip
        costs.append((where, s["pnl"], s["costs"],
                      bool(s["pnl_low"] <= -s["costs"] <= s["pnl_high"])))  # fmt: skip
    out.append(
        Target(
            "random valid loses about its costs",
            "-costs within its P&L's CI (an overlay's over buy-and-hold, paired)",
            "; ".join(f"{k} P&L {p:+,.0f} vs costs {c:,.0f}" for k, p, c, _ in costs),
            all(ok for *_, ok in costs),
            PREMIUM_NOTE,
        )
    )
    out.append(
        Target(
            "the covered call lags buy-and-hold in a bull year (2023 replay)",
            "covered call return < buy-and-hold return",
            f"{bull['covered_call_30d']:+.1%} vs {bull['buy_and_hold']:+.1%} (stock "
            f"{bull['symbol_return']:+.1%})",
            bool(bull["covered_call_30d"] < bull["buy_and_hold"]),
            BULL_NOTE,
        )
    )
    rates = [r["summaries"]["maskable_ppo"].get("executable_rate") for r in results]
    sent = [x for x in rates if x is not None]  # a run where it sent no order has none
    lowest = min(sent) if sent else None
    out.append(Target("MaskablePPO sends 100% executable orders", "1.0",
                      f"{lowest:.3f} (lowest over runs; {len(sent)} of {len(rates)} runs (suite, "
                      "market, seed) with orders)" if sent else "it sent no order in any run",
                      bool(sent) and lowest >= 1.0, ""))  # fmt: skip
    seeds_note = ("P&L per risk on each held-out episode averaged over the training seeds, "
                  "paired with the baseline on the same episodes; 95% bootstrap CI over the "
                  "episodes")  # fmt: skip
    vs_random = [(f"{p['suite']}/{p['market']}", *p["methods"]["maskable_ppo"]["vs_random_valid"])
                 for p in pooled]  # fmt: skip
    out.append(Target("MaskablePPO beats random valid on every suite (P&L per risk, paired)",
                      "CI above 0 in every suite and market",
                      "; ".join(f"{k} {m:+.3f} [{lo:+.3f}, {hi:+.3f}]"
                                for k, m, lo, hi in vs_random),
                      all(lo > 0 for _, _, lo, _ in vs_random), seeds_note))  # fmt: skip
    won = sorted({p["suite"] for p in pooled
                  if p["methods"]["maskable_ppo"][f"vs_{p['best_rule']}"][1] > 0})  # fmt: skip
    out.append(Target("MaskablePPO beats the best rule baseline in at least 2 of 4 suites",
                      ">= 2 suites (paired CI above 0, held-out episodes)",
                      f"{len(won)} ({', '.join(won) or 'none'})", len(won) >= 2,
                      seeds_note))  # fmt: skip
    halved = [(p["suite"], p["methods"]["maskable_ppo"]["regret"],
               p["methods"][FIXED_LEARNER]["regret"])
              for p in pooled if FIXED_LEARNER in p["methods"]]  # fmt: skip
    if halved:
        out.append(Target("MaskablePPO's regret to the oracle at most half the 64-path "
                          "learner's (synthetic markets, the same run)",
                          "regret <= 0.5 x the 64-path learner's, every suite",
                          "; ".join(f"{k} {new:.3f} vs {old:.3f}" for k, new, old in halved),
                          all(new <= 0.5 * old for _, new, old in halved),
                          "mean over the held-out episodes and training seeds of oracle "
                          "minus agent P&L per risk; the replay suites have no 64-path "
                          "learner (the docs compare them with the run before)"))  # fmt: skip
    env_note = "one core, holding; European index options: no American pricing"
    out.append(Target("environment speed on a ~2,000-option chain", ">= 5,000 steps/s",
                      f"{speeds['env_steps_per_s']:,.0f} steps/s "
                      f"({speeds['chain_options']:.0f} options)",
                      bool(speeds["env_steps_per_s"] >= 5000), env_note))  # fmt: skip
    orders, ratio = speeds["orders_per_s"], speeds.get("orders_speedup")
    out.append(Target("order validation + margin speed (vectorised engine)",
                      ">= 20,000 orders/s and >= 1.25x the account one order at a time",
                      f"{orders:,.0f} orders/s" + (f", {ratio:.2f}x" if ratio else ""),
                      bool(orders >= 20000 and (ratio or 0) >= 1.25),
                      f"batches of {ORDER_BATCH:,} menu orders on one core, against "
                      "Account.submit on the same orders in the same run"))  # fmt: skip
    return out
