"""Real option data: the 2023 implied-volatility surfaces of the ``qmoms`` wheel turned into
daily listed chains, and a loader for your own chains (CSV or Parquet).

The ``qmoms`` surfaces (MIT licence) give, for 250 trading days of 2023 and five US stocks
(CRSP PERMNOs, named here by their 2023 prices, dividends and earnings), implied
volatilities at 30, 60 and 91 days and deltas of +-10 to +-50, with spot and forward. A
day's chain lists the exchange's expiries (monthly third Fridays and four weeklies, out to
120 days) and strikes (on the stock's increment, over the surface's range); each option's
volatility is interpolated in total variance (linear in log-moneyness, then in time, flat
volatility beyond the data), and its quotes come from the spread model (the data has no
bid or ask). Dividends are read off the data (total return against price change) and the
earnings dates are the companies' 2023 announcements.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from fieldrl.apps.options.config import SpreadConfig
from fieldrl.apps.options.market import (
    CLOSE,
    Chain,
    Market,
    Underlying,
    earnings_ahead,
    earnings_variance,
    listed_expiries,
    listed_strikes,
    quotes,
)
from fieldrl.apps.options.pricing import implied_vol, option_price
from fieldrl.errors import DataError

__all__ = ["EARNINGS_2023", "PERMNO", "REPLAY_SYMBOLS", "atm_vol_history", "read_chains",
           "replay_market", "write_chains"]  # fmt: skip

PERMNO = {"IBM": 12490, "CVX": 14541, "AAPL": 14593, "CAT": 18542, "TSLA": 93436}
REPLAY_SYMBOLS = tuple(PERMNO)
# The last close before each 2023 announcement moved the stock (after-close reports: the
# report's day; before-open reports: the trading day before). The surfaces' 30-day
# at-the-money volatility drops by 15-37% on the next day for most of them.
EARNINGS_2023 = {
    "AAPL": ("2023-02-02", "2023-05-04", "2023-08-03", "2023-11-02"),
    "IBM": ("2023-01-25", "2023-04-19", "2023-07-19", "2023-10-25"),
    "TSLA": ("2023-01-25", "2023-04-19", "2023-07-19", "2023-10-18"),
    "CVX": ("2023-01-26", "2023-04-27", "2023-07-27", "2023-10-26"),
    "CAT": ("2023-01-30", "2023-04-26", "2023-07-31", "2023-10-30"),
}
MATURITIES = (30.0, 60.0, 91.0)
# NYSE holidays of 2023 (an expiry on one moves to the trading day before: Good Friday)
NYSE_HOLIDAYS_2023 = frozenset(dt.date.fromisoformat(d) for d in (
    "2023-01-02", "2023-01-16", "2023-02-20", "2023-04-07", "2023-05-29", "2023-06-19",
    "2023-07-04", "2023-09-04", "2023-11-23", "2023-12-25"))  # fmt: skip


@functools.cache
def _qmoms() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    from importlib.resources import files

    root = files("qmoms") / "data"
    with (root / "surface.csv").open("rb") as f:
        surface = pd.read_csv(f)
    with (root / "zerocd.csv").open("rb") as f:
        rates = pd.read_csv(f)
    with (root / "returns.csv").open("rb") as f:
        returns = pd.read_csv(f)
    return surface, rates, returns


def _dividends(symbol: str) -> tuple[tuple[dt.date, float], ...]:
    """Ex-dates and amounts: where the total return beats the price change by over $0.10."""
    surface, _, returns = _qmoms()
    spot = surface[surface.id == PERMNO[symbol]].groupby("date").s.first()
    total = returns.set_index("date")[str(PERMNO[symbol])].reindex(spot.index)
    paid = spot.shift(1) * (1 + total) - spot
    return tuple((dt.date.fromisoformat(d), round(float(v), 2)) for d, v in paid.items()
                 if v > 0.10)  # fmt: skip


@functools.cache
def atm_vol_history(symbol: str) -> tuple[tuple[dt.date, ...], np.ndarray]:
    """The 2023 surfaces' 30-day volatility at the forward, each trading day of ``symbol``:
    (dates, volatilities), oldest first."""
    surface, _, _ = _qmoms()
    rows = surface[(surface.id == PERMNO[symbol]) & (surface.days == 30)]
    dates, vols = [], []
    for day, m in rows.groupby("date"):
        m = m.sort_values("k")
        dates.append(dt.date.fromisoformat(day))
        vols.append(np.interp(0.0, np.log(m.k.to_numpy() / m.f.to_numpy()), m.impl_volatility))
    return tuple(dates), np.array(vols)


def _rate(rates: pd.DataFrame, date: str, days: float) -> float:
    """The zero rate (continuous, decimal) for ``days``, from the latest curve on or before
    ``date`` (the file's rates are in percent)."""
    curve = rates[rates.date <= date]
    curve = curve[curve.date == curve.date.max()]
    return float(np.interp(days, curve.days, curve.rate)) / 100


def replay_market(symbols: list[str], start: str, end: str, cfg: SpreadConfig) -> Market:
    """Daily chains (at the close) of ``symbols`` from ``start`` to ``end`` (ISO dates,
    inclusive) built from the 2023 surfaces."""
    unknown = sorted(set(symbols) - set(PERMNO))
    if unknown:
        raise DataError(f"no 2023 surfaces for {unknown}; replay symbols: {list(PERMNO)}")
    surface, rates, _ = _qmoms()
    days = sorted(d for d in surface.date.unique() if start <= d <= end)
    if not days:
        raise DataError(f"no trading days between {start} and {end} (data: 2023-01-03 to "
                        "2023-12-29)")  # fmt: skip
    underlyings = {s: Underlying(s, dividends=_dividends(s),
                                 earnings=tuple(dt.date.fromisoformat(d)
                                                for d in EARNINGS_2023[s]))
                   for s in symbols}  # fmt: skip
    by_key = {k: g for k, g in surface[surface.date.isin(days)].groupby(["id", "date"])}
    chains = []
    for day in days:
        chains.append({s: _replay_chain(underlyings[s], by_key[(PERMNO[s], day)], day, rates,
                                        cfg) for s in symbols})  # fmt: skip
    times = [dt.datetime.combine(dt.date.fromisoformat(d), CLOSE) for d in days]
    return Market(underlyings, times, chains)


def _replay_chain(underlying: Underlying, rows: pd.DataFrame, day: str, rates: pd.DataFrame,
                  cfg: SpreadConfig) -> Chain:  # fmt: skip
    spot = float(rows.s.iloc[0])
    today = dt.date.fromisoformat(day)
    now = dt.datetime.combine(today, CLOSE)
    smiles = []
    for tau in MATURITIES:
        m = rows[rows.days == tau].sort_values("k")
        years = tau / 365
        forward = float(m.f.iloc[0])
        smiles.append((years, np.log(m.k.to_numpy() / forward),
                       m.impl_volatility.to_numpy() ** 2 * years, forward))  # fmt: skip
    expiries = listed_expiries(today, 120, holidays=NYSE_HOLIDAYS_2023)
    low, high = rows.k.min(), rows.k.max()
    strikes = listed_strikes(spot, low, high)
    expiry = np.repeat(np.array(expiries, dtype="datetime64[D]"), 2 * len(strikes))
    strike = np.tile(np.concatenate([strikes, strikes]), len(expiries))
    call = np.tile(np.repeat([True, False], len(strikes)), len(expiries))
    close = expiry.astype("datetime64[m]") + np.timedelta64(16 * 60, "m")
    years = np.maximum((close - np.datetime64(now, "m")).astype(float), 0.0) / (365 * 24 * 60)
    rate = _rate(rates, day, 30.0)
    # the forwards' carry over the rate is the dividend yield the surfaces imply
    q = float(np.mean([rate - np.log(f / spot) / y for y, _, _, f in smiles]))
    # the next announcement's variance is taken out of the maturities after it, the rest
    # interpolated, and the announcement's variance put back on the expiries after it only
    event = earnings_ahead(now, underlying.earnings)[:1]
    event_years = (event[0] - today).days / 365 if event else np.inf
    move = _event_variance(smiles, event_years) if event else 0.0
    base = [(y, ks, np.maximum(w - move * (y > event_years), 0.0), f) for y, ks, w, f in smiles]
    base_vol = _interpolate(base, np.log(strike / (spot * np.exp((rate - q) * years))), years)
    total = base_vol**2 * years + earnings_variance(expiry, now, event, move)
    iv = np.sqrt(total / np.maximum(years, 1e-9))
    fair = option_price(spot, strike, years, iv, rate, q, call,
                        american=underlying.style == "american")  # fmt: skip
    intrinsic = np.where(call, np.maximum(spot - strike, 0), np.maximum(strike - spot, 0))
    upcoming = [(e - today).days for e in underlying.earnings if e >= today]
    bid, ask = quotes(cfg, fair, intrinsic, years * 365, 390.0, min(upcoming) if upcoming else None)
    keep = years > 0
    return Chain(underlying.symbol, now, spot, rate, q, expiry[keep], strike[keep], call[keep],
                 bid[keep], ask[keep], iv[keep], underlying.style)  # fmt: skip


def _event_variance(smiles: list, event_years: float) -> float:
    """The total variance an announcement ``event_years`` away adds, read off today's
    at-the-money term structure: the first maturity after it holds it, and the forward
    variance from that maturity to the next is taken as the variance of ordinary days
    before it. 0 unless two maturities follow the announcement; never more than the
    variance the first of them adds to the one before (ordinary variance stays >= 0)."""
    taus = [tau for tau, _, _, _ in smiles]
    atm = [float(np.interp(0.0, ks, w)) for _, ks, w, _ in smiles]
    after = [i for i, tau in enumerate(taus) if tau > event_years]
    if len(after) < 2:
        return 0.0
    i, j = after[:2]
    forward = (atm[j] - atm[i]) / (taus[j] - taus[i])
    tau_before, w_before = (taus[i - 1], atm[i - 1]) if i else (0.0, 0.0)
    segment = atm[i] - w_before
    return float(np.clip(segment - forward * (taus[i] - tau_before), 0.0, segment))


def _interpolate(smiles: list, k: np.ndarray, years: np.ndarray) -> np.ndarray:
    """Volatility at log-moneyness ``k`` and ``years``: each maturity's total variance
    linear in k (flat volatility beyond its range), then linear in time between the
    maturities, flat volatility before the first and after the last."""
    taus = np.array([s[0] for s in smiles])
    total = np.array([np.interp(k, ks, w / tau) * tau for tau, ks, w, _ in smiles])  # (m, n)
    t = np.clip(years, taus[0], taus[-1])
    j = np.clip(np.searchsorted(taus, t), 1, len(taus) - 1)
    a = (t - taus[j - 1]) / (taus[j] - taus[j - 1])
    cols = np.arange(len(k))
    variance = ((1 - a) * total[j - 1, cols] + a * total[j, cols]) / t
    return np.sqrt(variance)


# ------------------------------------------------------------------ your own chains

# a chain file's (and the service's) bounds: prices and strikes in dollars a share, at most
# $10M (Berkshire A's options would not reach it); implied volatility at most 1000%
MAX_PRICE, MIN_STRIKE, MAX_IV = 1e7, 0.01, 10.0
REQUIRED = ("date", "underlying", "expiry", "strike", "right", "bid", "ask")
OPTIONAL = ("iv", "volume", "open_interest", "underlying_price", "rate", "dividend_yield")


def read_chains(paths: str | Path | Sequence[str | Path], rate: float = 0.045,
                dividend_yield: float = 0.0) -> Market:  # fmt: skip
    """A :class:`Market` from option-chain files (CSV or Parquet) with columns ``date``
    (a day, or a time for intraday quotes), ``underlying``, ``expiry``, ``strike``, ``right``
    (C/P/call/put), ``bid``, ``ask`` and optionally ``iv``, ``volume``, ``open_interest``,
    ``underlying_price`` (else inferred by put-call parity on the nearest expiry), and
    ``rate`` and ``dividend_yield`` (continuous, decimal; else ``rate`` and
    ``dividend_yield`` here). Every bad row is named by file, row (the file's line, the
    header being line 1) and column."""
    paths = [paths] if isinstance(paths, str | Path) else list(paths)
    frames = []
    for path in map(Path, paths):
        frame = _read_frame(path)
        missing = [c for c in REQUIRED if c not in frame.columns]
        if missing:
            raise DataError(f"{path}: missing column(s) {missing}; required: "
                            f"{list(REQUIRED)}, optional: {list(OPTIONAL)}")  # fmt: skip
        frames.append(_checked(path, frame))
    frame = pd.concat(frames, ignore_index=True)
    if frame.duplicated(["date", "underlying", "expiry", "strike", "call"]).any():
        raise DataError(f"{[str(p) for p in paths]}: the same contract is quoted at one time "
                        "in two files")  # fmt: skip
    path = Path(paths[0])
    times = sorted(frame.date.unique())
    chains = []
    for t in times:
        day = frame[frame.date == t]
        chains.append({s: _user_chain(g, rate, dividend_yield)
                       for s, g in day.groupby("underlying")})  # fmt: skip
    symbols = sorted(frame.underlying.unique())
    for step, c in enumerate(chains):
        absent = [s for s in symbols if s not in c]
        if absent:
            raise DataError(f"{path}: no quotes for {absent} at {times[step]} (every time "
                            "needs every underlying)")  # fmt: skip
    market = Market({s: Underlying(s) for s in symbols},
                    [pd.Timestamp(t).to_pydatetime() for t in times], chains)  # fmt: skip
    return market


def write_chains(market: Market, path: str | Path) -> Path:
    """A market's chains as one file in the format :func:`read_chains` reads (Parquet for
    ``.parquet``, else CSV), with ``iv`` and ``underlying_price``; written atomically."""
    from fieldrl.atomic import atomic_write_bytes

    rows = []
    for chains in market.chains:
        for symbol, c in chains.items():
            rows.append(pd.DataFrame({
                "date": c.time, "underlying": symbol, "expiry": c.expiry.astype(str),
                "strike": c.strike, "right": np.where(c.call, "C", "P"), "bid": c.bid,
                "ask": c.ask, "iv": c.iv, "underlying_price": c.spot}))  # fmt: skip
    frame = pd.concat(rows, ignore_index=True)
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        import io

        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        atomic_write_bytes(path, buffer.getvalue())
    else:
        atomic_write_bytes(path, frame.to_csv(index=False).encode())
    return path


def _read_frame(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            frame = pd.read_parquet(path)
        else:
            frame = pd.read_csv(path)
    except Exception as exc:  # noqa: BLE001 - any reader failure is the file's fault
        raise DataError(f"{path}: not a readable CSV or Parquet file ({exc})") from None
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    return frame


def _checked(path: Path, frame: pd.DataFrame) -> pd.DataFrame:
    def bad(mask: pd.Series, column: str, why: str) -> None:
        if mask.any():
            rows = [int(i) + 2 for i in np.flatnonzero(mask.to_numpy())[:5]]
            raise DataError(f"{path}: row(s) {rows} ({int(mask.sum())} in all), column "
                            f"{column!r}: {why}")  # fmt: skip

    out = frame.copy()
    for column in ("date", "expiry"):
        out[column] = _dates(out[column])
        bad(out[column].isna(), column, "not a date")
    for column in ("strike", "bid", "ask", *(c for c in OPTIONAL if c in out.columns)):
        out[column] = pd.to_numeric(out[column], errors="coerce")
        required = column in REQUIRED or column in ("iv", "underlying_price", "rate",
                                                    "dividend_yield")  # fmt: skip
        if required:
            bad(~np.isfinite(out[column]), column, "not a finite number")
    for column in ("rate", "dividend_yield"):
        if column in out.columns:
            bad(out[column].abs() >= 1, column, "a decimal (0.045 for 4.5%), not percent")
    bad((out.strike < MIN_STRIKE) | (out.strike > MAX_PRICE), "strike",
        f"must be within [{MIN_STRIKE}, {MAX_PRICE:g}]")  # fmt: skip
    for column in ("bid", "ask"):
        bad((out[column] < 0) | (out[column] > MAX_PRICE), column,
            f"must be within [0, {MAX_PRICE:g}]")  # fmt: skip
    bad(out.bid > out.ask, "bid/ask", "bid above ask")
    if "iv" in out.columns:
        bad((out.iv <= 0) | (out.iv > MAX_IV), "iv", f"must be within (0, {MAX_IV:g}] (a "
            "decimal: 0.25 for 25%)")  # fmt: skip
    if "underlying_price" in out.columns:
        price = out.underlying_price
        bad((price < MIN_STRIKE) | (price > MAX_PRICE), "underlying_price",
            f"must be within [{MIN_STRIKE}, {MAX_PRICE:g}]")  # fmt: skip
    for column in ("volume", "open_interest"):
        if column in out.columns:
            bad(out[column] < 0, column, "negative")
    right = out["right"].astype(str).str.strip().str.lower()
    bad(~right.isin(["c", "p", "call", "put"]), "right", "must be C, P, call or put")
    out["call"] = right.str.startswith("c")
    bad(out.expiry.dt.normalize() < out.date.dt.normalize(), "expiry", "before the quote date")
    out["underlying"] = out["underlying"].astype(str).str.strip()
    bad(out.duplicated(["date", "underlying", "expiry", "strike", "call"]), "strike",
        "the same contract quoted twice at one time")  # fmt: skip
    return out


def _dates(column: pd.Series) -> pd.Series:
    """Dates or times, naive in exchange time: times with an offset are converted to New
    York time and the offset dropped; what does not parse is NaT."""
    try:
        parsed = pd.to_datetime(column, errors="coerce")
    except (TypeError, ValueError):  # a mix of naive times and times with offsets
        parsed = pd.to_datetime(column, errors="coerce", utc=True, format="mixed")
    if getattr(parsed.dtype, "tz", None) is not None:
        parsed = parsed.dt.tz_convert("America/New_York").dt.tz_localize(None)
    return parsed


def _user_chain(rows: pd.DataFrame, rate: float, dividend_yield: float) -> Chain:
    now = pd.Timestamp(rows.date.iloc[0]).to_pydatetime()
    if now.time() == dt.time(0, 0):
        now = dt.datetime.combine(now.date(), CLOSE)  # a daily file: quotes at the close
    expiry = rows.expiry.dt.date.to_numpy().astype("datetime64[D]")
    strike, call = rows.strike.to_numpy(float), rows.call.to_numpy(bool)
    bid, ask = rows.bid.to_numpy(float), rows.ask.to_numpy(float)
    # a chain has one rate and one yield: the nearest expiry's, where the file gives them
    nearest = expiry == expiry.min()
    if "rate" in rows:
        rate = float(rows.rate.to_numpy()[nearest][0])
    if "dividend_yield" in rows:
        dividend_yield = float(rows.dividend_yield.to_numpy()[nearest][0])
    # listed stock options, American (the style read_chains' underlyings have)
    c = Chain(str(rows.underlying.iloc[0]), now, 0.0, rate, dividend_yield, expiry, strike, call,
              bid, ask, np.full(len(rows), np.nan), style="american")  # fmt: skip
    if "underlying_price" in rows:
        c.spot = float(rows.underlying_price.iloc[0])
    else:
        c.spot = _parity_spot(c)
    if "iv" in rows:
        c.iv = rows.iv.to_numpy(float)
    else:
        c.iv = implied_vol(c.mid, c.spot, strike, c.years, rate, dividend_yield, call,
                           american=True)  # fmt: skip
    # a quote no volatility explains (a mid outside the no-arbitrage bounds) takes its
    # expiry's median volatility, so its Greeks stay finite
    for day in np.unique(expiry):
        same = c.expiry == day
        missing = same & ~np.isfinite(c.iv)
        if missing.any():
            known = c.iv[same & np.isfinite(c.iv)]
            c.iv[missing] = np.median(known) if len(known) else 0.3
    return c


def _parity_spot(c: Chain) -> float:
    """Spot from put-call parity, S = (C - P + K exp(-r t)) exp(q t), on the nearest
    unexpired expiry with a call and a put at one strike, at the strike where their mids
    are closest (the most liquid, least early-exercise-prone pair)."""
    pairs = [(c.years[i], abs(c.mid[i] - c.mid[j]), i, j) for i in np.flatnonzero(c.call)
             for j in np.flatnonzero(~c.call & (c.strike == c.strike[i])
                                     & (c.expiry == c.expiry[i]))
             if c.years[i] > 0]  # fmt: skip
    if not pairs:
        raise DataError(f"{c.symbol} at {c.time}: no strike with both a call and a put to infer "
                        "the spot; add an underlying_price column")  # fmt: skip
    years, _, i, j = min(pairs)
    forward_value = c.mid[i] - c.mid[j] + c.strike[i] * np.exp(-c.rate * years)
    return float(forward_value * np.exp(c.dividend_yield * years))
