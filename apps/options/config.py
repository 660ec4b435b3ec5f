"""Config of the options app: the market (synthetic model or real chains), quotes and
costs, the account and its constraints, the task suites, the agents and the benchmark.

Every market parameter carries its source in its description, or the word "assumption".
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from fieldrl.config import FieldrlConfig, Section

__all__ = ["MarketConfig", "OptionsConfig", "PPOConfig", "RandomizeConfig", "SpreadConfig",
           "SuiteConfig", "SyntheticConfig"]  # fmt: skip


class SyntheticConfig(Section):
    """Heston + Bates jumps + scheduled earnings jumps, and the SSVI surface over it.
    Defaults: the AAPL-like Heston fit to the 2023 surfaces in the reference (v0, kappa,
    theta, xi, rho), with Bates jumps from Bakshi-Cao-Chen's SVJ fit."""

    spot: float = Field(150.0, gt=0, description="Initial price (assumption).")
    rate: float = Field(0.045, description="Risk-free rate, continuous (2023 T-bills, ~4.5%).")
    dividend_yield: float = Field(0.005, ge=0, description="Continuous yield (AAPL ~0.5%).")
    drift: float = Field(0.045, description="Real-world drift of the path; = rate: no premium.")
    v0: float = Field(0.078, gt=0, description="Initial variance (AAPL-like fit, reference).")
    kappa: float = Field(8.5, gt=0, description="Mean reversion (AAPL-like fit, reference).")
    theta: float = Field(0.077, gt=0, description="Long-run variance (AAPL-like fit).")
    vol_of_vol: float = Field(1.77, ge=0, description="xi (AAPL-like fit, reference).")
    rho: float = Field(-0.49, ge=-1, le=1, description="Spot-variance correlation (fit).")
    jump_intensity: float = Field(0.59, ge=0, description="Jumps a year (Bakshi-Cao-Chen SVJ).")
    jump_mean: float = Field(-0.05, description="Mean log jump (Bakshi-Cao-Chen SVJ).")
    jump_std: float = Field(0.07, ge=0, description="Std of the log jump (Bakshi-Cao-Chen).")
    earnings_move: float = Field(
        0.05, ge=0, description="Std of the log earnings jump: 4-6% implied by the 2023 "
        "AAPL/IBM IV crush (reference)."
    )  # fmt: skip
    earnings_days: list[int] = Field(
        default_factory=lambda: [25, 116], description="Announcements, days after the start "
        "(quarterly; assumption)."
    )  # fmt: skip
    variance_premium: float = Field(
        0.15, ge=-0.5, description="Implied over expected variance minus 1 (assumption: "
        "implied exceeds realized variance by ~15-20% on average)."
    )  # fmt: skip
    surface_rho: float = Field(-0.6, ge=-1, le=1, description="SSVI skew (assumption).")
    surface_eta: float = Field(0.8, ge=0, description="SSVI curvature (assumption).")
    strike_range: float = Field(0.3, gt=0, lt=1, description="Listed strikes: spot x (1 +- this).")
    max_expiry_days: int = Field(120, ge=1, description="Furthest monthly expiry listed.")
    weeklies: int = Field(4, ge=0, description="Weekly expiries listed (assumption).")
    zero_premium: bool = Field(
        False, description="The fair market of the look-ahead test: no rates, dividends or "
        "drift (cash earns nothing, so NAV is a martingale), no vol of vol, jumps or "
        "earnings, a flat surface at sqrt(v0), no variance premium."
    )  # fmt: skip

    @model_validator(mode="after")
    def _fair(self) -> SyntheticConfig:
        if self.surface_eta * (1 + abs(self.surface_rho)) > 2:
            raise ValueError("surface_eta x (1 + |surface_rho|) must be <= 2 (SSVI no-arbitrage)")
        if self.zero_premium:
            for key, value in (("rate", 0.0), ("dividend_yield", 0.0), ("drift", 0.0),
                               ("vol_of_vol", 0.0), ("theta", self.v0),
                               ("jump_intensity", 0.0), ("earnings_move", 0.0),
                               ("variance_premium", 0.0), ("surface_eta", 0.0)):  # fmt: skip
                object.__setattr__(self, key, value)
        return self


class SpreadConfig(Section):
    """The quoted half-spread (market.half_spread): ``base + pct x time value +
    pct_intrinsic x intrinsic value``, widened near expiry, at the open and before
    earnings: wider in dollars in the money, wider in percent out of it. The shapes follow
    the reference; the sizes are assumptions, set so that the half-spread of near-the-money
    stock options is near the 8.6% of the price Muravyev & Pearson (RFS 2020) measured."""

    tick: float = Field(0.01, ge=0, description="Smallest half-spread, dollars.")
    base: float = Field(0.03, ge=0, description="Dollars a share.")
    pct: float = Field(0.05, ge=0, description="Share of the option's time value.")
    pct_intrinsic: float = Field(0.005, ge=0, description="Share of its intrinsic value.")
    near_expiry: float = Field(0.5, ge=0, description="+50% on the last days...")
    expiry_days: float = Field(5.0, gt=0, description="...fading over these days.")
    at_open: float = Field(1.0, ge=0, description="+100% at the open...")
    open_minutes: float = Field(30.0, gt=0, description="...fading over these minutes.")
    before_earnings: float = Field(0.5, ge=0, description="+50% just before earnings...")
    earnings_days: float = Field(3.0, ge=0, description="...in these days before them.")


class RandomizeConfig(Section):
    """Domain randomisation of the synthetic *training* paths: each draws its market's
    parameters uniformly from these [low, high] ranges, so a policy meets a new market
    every episode and has no path to memorise; validation and evaluation paths keep the
    fitted market. A scale multiplies the suite's own value (the AAPL-like fit, or the
    SPX-like index of the 0DTE suite); unset: that parameter is not randomised."""

    vol_scale: list[float] | None = Field(
        None, description="Volatility level: sqrt(v0) and sqrt(theta) times this."
    )
    vol_of_vol_scale: list[float] | None = Field(None, description="xi times this.")
    skew: list[float] | None = Field(
        None, description="surface_rho, the SSVI skew (kept within the no-arbitrage bound)."
    )
    jump_intensity_scale: list[float] | None = Field(None, description="Jumps a year, times.")
    earnings_move_scale: list[float] | None = Field(None, description="Earnings move, times.")
    variance_premium: list[float] | None = Field(
        None, description="Implied over expected variance minus 1."
    )

    @model_validator(mode="after")
    def _ranges(self) -> RandomizeConfig:
        for name, value in self:
            if value is None:
                continue
            if len(value) != 2 or not value[0] <= value[1]:
                raise ValueError(f"{name}: a range [low, high] with low <= high, got {value}")
            low = {"skew": -1.0, "variance_premium": -0.5}.get(name, 0.0)
            high = 1.0 if name == "skew" else np.inf
            if not low <= value[0] <= value[1] <= high:
                raise ValueError(f"{name}: {value} is outside [{low}, {high}]")
        return self

    def draw(self, spec: SyntheticConfig, rng: np.random.Generator) -> SyntheticConfig:
        """``spec`` with each randomised parameter drawn from its range."""

        def uniform(value: list[float] | None) -> float | None:
            return None if value is None else float(rng.uniform(*value))

        fields = spec.model_dump()
        if (scale := uniform(self.vol_scale)) is not None:
            fields["v0"], fields["theta"] = spec.v0 * scale**2, spec.theta * scale**2
        for name, key in (("vol_of_vol_scale", "vol_of_vol"),
                          ("jump_intensity_scale", "jump_intensity"),
                          ("earnings_move_scale", "earnings_move")):  # fmt: skip
            if (scale := uniform(getattr(self, name))) is not None:
                fields[key] = getattr(spec, key) * scale
        if (skew := uniform(self.skew)) is not None:
            bound = 2 / spec.surface_eta - 1 if spec.surface_eta else 1.0
            fields["surface_rho"] = float(np.clip(skew, -bound, bound))
        if (premium := uniform(self.variance_premium)) is not None:
            fields["variance_premium"] = premium
        return SyntheticConfig(**fields)


class MarketConfig(Section):
    kind: Literal["synthetic", "replay", "chains"] = Field(
        "synthetic", description="synthetic (the model below), replay (the 2023 qmoms "
        "surfaces as listed chains), or chains (your CSV/Parquet file in `data`)."
    )  # fmt: skip
    symbols: list[str] = Field(default_factory=lambda: ["SYN"], min_length=1)
    data: list[str] = Field(
        default_factory=list, description="Your option-chain files or globs (CSV or Parquet); "
        "setting them (train --data) makes kind = chains."
    )  # fmt: skip
    chain_dividend_yield: float = Field(
        0.0, ge=0, le=0.5, description="kind = chains: the continuous dividend yield, a "
        "decimal (0.005 for 0.5%), of files without a dividend_yield column (their rate "
        "without a rate column: synthetic.rate). Assumption: 0, no dividend."
    )  # fmt: skip
    synthetic: SyntheticConfig = Field(default_factory=SyntheticConfig)
    randomize: RandomizeConfig = Field(default_factory=RandomizeConfig)
    spread: SpreadConfig = Field(default_factory=SpreadConfig)
    costs: bool = Field(
        True, description="false: no fees and fills at mid (the look-ahead test's market)."
    )

    @model_validator(mode="after")
    def _data_means_chains(self) -> MarketConfig:
        if self.data and self.kind == "synthetic":
            object.__setattr__(self, "kind", "chains")
        return self

    fill: Literal["mid", "spread", "impact"] = Field(
        "spread", description="Fills at mid, at the far side of the quote, or the far side "
        "plus impact growing with size."
    )  # fmt: skip


SuiteName = Literal["overlay", "strategy", "earnings", "zero_dte"]
TemplateName = Literal[
    "long_call", "long_put", "cash_secured_put", "buy_write", "covered_call",
    "protective_put", "collar", "bull_put_spread", "bear_call_spread", "bull_call_spread",
    "bear_put_spread", "iron_condor", "long_straddle", "long_strangle", "short_strangle",
    "buy_shares",
]  # fmt: skip


class SuiteConfig(Section):
    """A task suite: its episodes, capital, account and menu. ``templates`` x ``deltas`` x
    ``dtes`` is the menu of strategies an agent may open (one at a time)."""

    name: SuiteName = "strategy"
    capital: float = Field(100_000.0, gt=0, description="Starting cash, dollars.")
    shares: int = Field(0, ge=0, description="overlay: shares held at the start.")
    margin_account: bool = Field(True, description="Reg-T margin account (else cash).")
    allow_naked: bool = Field(False, description="Allow uncovered short options.")
    risk_budget: float = Field(
        0.05, gt=0, le=1, description="Largest loss one strategy may risk, share of capital."
    )  # fmt: skip
    max_contracts: int = Field(50, ge=1, description="Contracts per underlying.")
    templates: list[TemplateName] = Field(
        default_factory=lambda: ["long_call", "long_put", "cash_secured_put", "buy_write",
                                 "bull_put_spread", "bear_call_spread", "bull_call_spread",
                                 "bear_put_spread", "iron_condor", "long_straddle",
                                 "long_strangle"], min_length=1,
    )  # fmt: skip
    deltas: list[float] = Field(default_factory=lambda: [0.16, 0.30, 0.50], min_length=1)
    dtes: list[int] = Field(default_factory=lambda: [7, 30, 45], min_length=1)
    episode_days: int = Field(40, ge=1, description="Trading days an episode lasts.")
    intraday_minutes: int | None = Field(None, ge=5, description="zero_dte: minutes a step.")
    max_retries: int = Field(2, ge=0, description="Rejected orders an agent may retry a step.")
    min_hold: int = Field(
        0, ge=0, description="Steps a strategy is held before the close action is offered."
    )


class PPOConfig(Section):
    """MaskablePPO (sb3-contrib) on the menu, trained through the core loop: one
    iteration is one rollout of ``n_steps`` and its update."""

    timesteps: int = Field(20_000, ge=1, description="Environment steps of training.")
    n_steps: int = Field(512, ge=8, description="Steps a rollout.")
    batch_size: int = Field(64, ge=2)
    epochs: int = Field(10, ge=1)
    lr: float = Field(3e-4, gt=0)
    gamma: float = Field(0.99, gt=0, le=1)
    gae_lambda: float = Field(0.95, gt=0, le=1)
    clip: float = Field(0.2, gt=0)
    ent_coef: float = Field(0.01, ge=0)
    hidden: list[int] = Field(default_factory=lambda: [64, 64], min_length=1)
    train_on: Literal["market", "synthetic"] = Field(
        "market", description="Train on the config's market, or on synthetic paths (drawn "
        "from market.randomize) whatever the market: a real market's training months hold "
        "a few dozen windows, few enough to memorise. Held-out episodes keep the market."
    )  # fmt: skip
    frame_stack: int = Field(
        1, ge=1, le=20, description="Feature vectors of the last steps in an observation "
        "(1: the present only): a memory of the episode."
    )  # fmt: skip
    train_episodes: int = Field(64, ge=1, description="Training episodes (paths or windows).")


# Each suite's settings (the suite presets and the benchmark use them; `--set suite.x=...`
# overrides any). Overlay: 200 shares held, options written on them in a cash account.
SUITES: dict[str, dict] = {
    "overlay": {"name": "overlay", "shares": 200, "margin_account": False,
                "templates": ["covered_call", "protective_put", "collar"],
                "deltas": [0.16, 0.30], "dtes": [30, 45]},
    "strategy": {"name": "strategy"},
    "earnings": {"name": "earnings", "episode_days": 9,
                 "templates": ["long_straddle", "long_strangle", "iron_condor",
                               "bull_put_spread", "bear_call_spread"],
                 "deltas": [0.16, 0.30], "dtes": [7, 30]},
    "zero_dte": {"name": "zero_dte", "episode_days": 1, "intraday_minutes": 30,
                 "templates": ["iron_condor", "bull_put_spread", "bear_call_spread",
                               "long_straddle", "long_strangle"],
                 "deltas": [0.10, 0.20, 0.30], "dtes": [0]},
}  # fmt: skip


class BenchmarkConfig(Section):
    """``fieldrl options benchmark``: every agent and baseline on the same held-out
    episodes of each suite and market, plus the look-ahead test and the speed figures."""

    suites: list[SuiteName] = Field(default_factory=lambda: list(SUITES), min_length=1)
    markets: list[Literal["replay", "synthetic"]] = Field(
        default_factory=lambda: ["replay", "synthetic"], min_length=1,
        description="zero_dte runs on the synthetic index only (no intraday data here).",
    )  # fmt: skip
    symbols: list[str] = Field(default_factory=lambda: ["AAPL", "TSLA", "IBM", "CVX", "CAT"])
    episodes: int = Field(
        30, ge=2, description="Held-out episodes per suite and market: synthetic paths, or "
        "at most the non-overlapping replay windows that fit in the held-out months (two "
        "40-day windows a symbol; the earnings suite's one a report); each benchmark.json "
        "row gives its true count."
    )  # fmt: skip
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, description="PPO seeds.")
    ppo_timesteps: int = Field(20_000, ge=1, description="Training steps per suite/market.")
    synthetic_training: list[SuiteName] = Field(
        default_factory=lambda: ["earnings"], description="Suites whose replay agent trains "
        "on randomised synthetic paths (ppo.train_on), chosen on the July-August validation "
        "windows (3 seeds): earnings +0.041 against -0.134 P&L per risk trained on its own "
        "months; overlay 0.056 against 0.102 and strategy 0.060 against 0.052 kept theirs."
    )  # fmt: skip
    lookahead_episodes: int = Field(60, ge=2, description="Zero-premium test episodes.")
    speed_seconds: float = Field(2.0, gt=0, description="Seconds each speed measurement runs.")
    llm_url: str | None = Field(None, description="Also grade an LLM agent at this endpoint.")
    llm_model: str = "local"


class OptionsConfig(FieldrlConfig):
    app: ClassVar[str] = "options"
    market: MarketConfig = Field(default_factory=MarketConfig)
    suite: SuiteConfig = Field(default_factory=SuiteConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    benchmark: BenchmarkConfig = Field(default_factory=BenchmarkConfig)
