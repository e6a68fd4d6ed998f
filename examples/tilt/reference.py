"""numpy/pandas reference of the TiLT applications, written from TILT_APPS.md (not from SQL).

This is the oracle the examples, the tests and the benchmark are checked against, and the
"numpy, one thread" system of the benchmark. Inputs are the frames of
:mod:`examples.tilt.generate`: ``ts`` in integer microseconds, sorted by time.

Conventions (TILT_APPS.md): a value at ``ts`` is valid over ``(ts - P, ts]``; a sliding
window at ``t`` covers ``(t - w, t]`` and includes the current value; tumbling bucket ``k``
covers ``(k*w, (k+1)*w]`` and is reported at its end ``(k+1)*w`` (``_time``, as WaveSQL
reports the window at instant ``t``); population statistics. Windows are **by time**, not by
row count, so a tick missing from the input makes a window hold fewer values.

Where the table leaves a case open, it is pinned here (and the SQL follows):

1. trend: a window near the start holds the ticks there are; ``up`` is ``avg20 > avg50``;
   a row is output when its ``up`` differs from the previous tick's, and the first tick is
   output too (it starts the series).
2. RSI: ``d`` of the first tick is NULL (no previous value) and sums skip it; the first
   tick's RSI is NULL; ``loss = 0`` gives 100 when ``gain > 0`` and NULL when the window
   saw no move at all (0/0).
3. normalisation: ``z`` is NULL when the bucket's ``std_pop`` is 0.
4. imputation: the grid is the multiples of P from the first input time to the last; a
   grid point holds the input in ``(t - P, t]`` if any, else the mean of the input values
   in its bucket (NULL if the bucket has none); ``imputed`` says which.
5. resampling: the output grid is the multiples of the new period within
   ``[first input time, last input time]``; ``t0``/``t1`` are the inputs just at-or-before
   and at-or-after ``t`` (an input exactly at ``t`` gives its own value).
6. Pan-Tompkins: causal filters with zero initial conditions (``x[n] = 0`` for ``n < 0``),
   one output per input sample: ``mwi[n] = avg(d[n-29..n]**2)``.
7. vibration: buckets with at least one value; kurtosis is NULL if the bucket is constant.
8. fraud: ``flag = v > mean + 3 * std_pop`` over the customer's values in ``(t - 10, t]``.
   NB: with at most 10 values in the window *including* ``v``, Samuelson's inequality gives
   ``v - mean <= 3 * std_pop`` always (equality only when the other nine are equal), so
   the pinned flag can never be true; the outputs ``mean`` and ``std`` are what is checked.
Y. YSB: one row per (window, campaign) with at least one ``event_type = 1`` event.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import signal as sps

MS = 1_000  # microseconds


# ---------------------------------------------------------------------------- helpers
def window_first(ts: np.ndarray, width_us: int, group: np.ndarray | None = None) -> np.ndarray:
    """For each row ``i``, the index of the first row of its window ``(ts[i] - w, ts[i]]``
    (rows sorted by ``(group, ts)``; a window never crosses into another group)."""
    ts = np.asarray(ts, dtype=np.int64)
    if group is None:
        return np.searchsorted(ts, ts - width_us, side="right")
    # one sorted key: group in the high bits, time since the earliest row in the low 40
    # bits (12 days of microseconds)
    rel = ts - ts.min()
    assert rel.max() < (1 << 40), "more than 12 days of data"
    key = (np.asarray(group, dtype=np.int64) << 40) | rel
    return np.searchsorted(key, key - width_us, side="right")


def window_stats(values: np.ndarray, first: np.ndarray, variance: bool = True):
    """Per row ``i``: count, sum and (if asked) population variance of
    ``values[first[i]..i]``, skipping NaN (as SQL skips NULL); the variance is two-pass.
    Cost O(rows x longest window): offset ``j`` adds row ``i - j`` to every row ``i`` whose
    window reaches back that far (adding 0.0 elsewhere leaves a sum unchanged)."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    back = np.arange(n) - first  # how many earlier rows each window holds
    valid = ~np.isnan(values)
    x0 = np.where(valid, values, 0.0)
    count, total = np.zeros(n), np.zeros(n)
    longest = int(back.max()) + 1 if n else 0
    for j in range(longest):
        reach = back[j:] >= j
        count[j:] += reach & valid[:n - j]
        total[j:] += np.where(reach, x0[:n - j], 0.0)
    if not variance:
        return count, total, None
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = total / count
    sq = np.zeros(n)
    for j in range(longest):
        take = (back[j:] >= j) & valid[:n - j]
        sq[j:] += np.where(take, (x0[:n - j] - mean[j:]) ** 2, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return count, total, sq / count


def bucket_end(ts: np.ndarray, width_us: int) -> np.ndarray:
    """The end ``(k+1)*w`` of the tumbling bucket ``(k*w, (k+1)*w]`` holding each time."""
    ts = np.asarray(ts, dtype=np.int64)
    return ts + (-ts) % width_us


def _nullable(x: np.ndarray) -> np.ndarray:
    """float array with NaN standing for SQL NULL (object dtype would slow comparisons)."""
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------- 1. trend
def trend(frame: pd.DataFrame, fast_ms: int = 20, slow_ms: int = 50) -> pd.DataFrame:
    """Rows ``(ts, v, up)`` where ``up = avg(v over (t-20, t]) > avg(v over (t-50, t])``
    changes (and the first row)."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    nf, sf, _ = window_stats(v, window_first(ts, fast_ms * MS), variance=False)
    ns, ss, _ = window_stats(v, window_first(ts, slow_ms * MS), variance=False)
    up = sf / nf > ss / ns
    change = np.r_[True, up[1:] != up[:-1]] if len(up) else up
    return pd.DataFrame({"ts": ts[change], "v": v[change], "up": up[change]})


# ---------------------------------------------------------------------------- 2. RSI
def rsi(frame: pd.DataFrame, n: int = 14) -> pd.DataFrame:
    """``(ts, v, rsi)`` for every row: ``d = v - lag(v)``; over ``(t - n, t]``,
    ``RSI = 100 - 100 / (1 + sum(max(d, 0)) / sum(max(-d, 0)))``."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    d = np.r_[np.nan, np.diff(v)]
    first = window_first(ts, n * MS)
    cnt, gain, _ = window_stats(np.where(np.isnan(d), np.nan, np.maximum(d, 0.0)), first,
                                variance=False)
    _, loss, _ = window_stats(np.where(np.isnan(d), np.nan, np.maximum(-d, 0.0)), first,
                              variance=False)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = 100.0 - 100.0 / (1.0 + gain / loss)
    out = np.where(loss == 0, np.where(gain > 0, 100.0, np.nan), out)
    out[cnt == 0] = np.nan  # only the NULL d of the first tick in the window
    return pd.DataFrame({"ts": ts, "v": v, "rsi": _nullable(out)})


# ---------------------------------------------------------------------------- 3. normalisation
def normalize(frame: pd.DataFrame, bucket_ms: int = 10_000) -> pd.DataFrame:
    """``(_time, ts, v, z)``: ``z = (v - mean_b) / std_pop_b`` over v's tumbling bucket."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    end = bucket_end(ts, bucket_ms * MS)
    g = pd.Series(v).groupby(end)
    mean = g.transform("mean").to_numpy()
    std = np.sqrt(pd.Series((v - mean) ** 2).groupby(end).transform("mean").to_numpy())
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(std == 0, np.nan, (v - mean) / std)
    return pd.DataFrame({"_time": end, "ts": ts, "v": v, "z": z})


# ---------------------------------------------------------------------------- 4. imputation
def impute(frame: pd.DataFrame, period_ms: int = 1, bucket_ms: int = 10_000) -> pd.DataFrame:
    """``(ts, v, imputed)`` on the grid of period P from the first input to the last; a
    missing value is the mean of the input values in its tumbling bucket."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    p = period_ms * MS
    grid = np.arange(-(-ts.min() // p) * p, ts.max() // p * p + 1, p, dtype=np.int64)
    # the input in (t - P, t]: the latest input at or before t, if it is after t - P
    at = np.searchsorted(ts, grid, side="right") - 1
    present = (at >= 0) & (ts[np.maximum(at, 0)] > grid - p)
    means = pd.Series(v).groupby(bucket_end(ts, bucket_ms * MS)).mean()
    fill = means.reindex(bucket_end(grid, bucket_ms * MS)).to_numpy()
    out = np.where(present, v[np.maximum(at, 0)], fill)
    return pd.DataFrame({"ts": grid, "v": out, "imputed": ~present})


# ---------------------------------------------------------------------------- 5. resampling
def resample(frame: pd.DataFrame, period_ms: int = 5) -> pd.DataFrame:
    """``(ts, v)`` on the multiples of the new period, linearly interpolated between the
    inputs around each point: ``y(t) = v0 + (v1 - v0)(t - t0)/(t1 - t0)``."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    p = period_ms * MS
    grid = np.arange(-(-ts.min() // p) * p, ts.max() // p * p + 1, p, dtype=np.int64)
    i0 = np.searchsorted(ts, grid, side="right") - 1  # t0 <= t
    i1 = np.searchsorted(ts, grid, side="left")       # t1 >= t
    t0, t1, v0, v1 = ts[i0], ts[i1], v[i0], v[i1]
    with np.errstate(invalid="ignore", divide="ignore"):
        y = v0 + (v1 - v0) * (grid - t0).astype(np.float64) / (t1 - t0).astype(np.float64)
    return pd.DataFrame({"ts": grid, "v": np.where(t0 == grid, v0, y)})


# ---------------------------------------------------------------------------- 6. Pan-Tompkins
# The four difference equations of TILT_APPS.md as lfilter(b, a) coefficients: for
# a[0] y[n] + a[1] y[n-1] + ... = b[0] x[n] + b[1] x[n-1] + ...
#   lp[n] = 2 lp[n-1] - lp[n-2] + x[n] - 2 x[n-6] + x[n-12]
LP_B = np.zeros(13); LP_B[[0, 6, 12]] = [1.0, -2.0, 1.0]  # noqa: E702
LP_A = np.array([1.0, -2.0, 1.0])
#   hp[n] = 32 lp[n-16] - (hp[n-1] + lp[n] - lp[n-32])  ->  hp[n] + hp[n-1] = -lp[n] + 32 lp[n-16] + lp[n-32]
HP_B = np.zeros(33); HP_B[[0, 16, 32]] = [-1.0, 32.0, 1.0]  # noqa: E702
HP_A = np.array([1.0, 1.0])
#   d[n] = (2 hp[n] + hp[n-1] - hp[n-3] - 2 hp[n-4]) / 8
D_B = np.array([2.0, 1.0, 0.0, -1.0, -2.0]) / 8.0
#   moving average of d^2 over the integration window
MWI = 30


def pan_tompkins(x: np.ndarray, window: int = MWI) -> np.ndarray:
    """The integrated signal ``mwi[n] = mean(d[n-window+1..n]**2)`` of an ECG (float64)."""
    x = np.asarray(x, dtype=np.float64)
    lp = sps.lfilter(LP_B, LP_A, x)
    hp = sps.lfilter(HP_B, HP_A, lp)
    d = sps.lfilter(D_B, [1.0], hp)
    return sps.lfilter(np.full(window, 1.0 / window), [1.0], d * d)


def pan_tompkins_loop(x: np.ndarray, window: int = MWI) -> np.ndarray:
    """The same, as the literal recurrences (slow: a check of the coefficients above)."""
    x = [float(s) for s in x]
    n = len(x)

    def at(seq, i):
        return seq[i] if i >= 0 else 0.0

    lp, hp, d, out = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * n
    for i in range(n):
        lp[i] = 2 * at(lp, i - 1) - at(lp, i - 2) + x[i] - 2 * at(x, i - 6) + at(x, i - 12)
        hp[i] = 32 * at(lp, i - 16) - (at(hp, i - 1) + lp[i] - at(lp, i - 32))
        d[i] = (2 * hp[i] + at(hp, i - 1) - at(hp, i - 3) - 2 * at(hp, i - 4)) / 8
        out[i] = sum(at(d, k) ** 2 for k in range(i - window + 1, i + 1)) / window
    return np.array(out)


# ---------------------------------------------------------------------------- 7. vibration
def vibration(frame: pd.DataFrame, bucket_ms: int = 100) -> pd.DataFrame:
    """``(_time, rms, kurtosis, crest)`` per tumbling bucket: ``rms = sqrt(avg(v^2))``,
    ``kurtosis = avg((v - mu)^4) / var_pop^2``, ``crest = max(|v|) / rms``."""
    ts, v = frame["ts"].to_numpy(np.int64), frame["v"].to_numpy(np.float64)
    end = bucket_end(ts, bucket_ms * MS)
    keys, start = np.unique(end, return_index=True)  # ts sorted: buckets are runs
    n = np.diff(np.r_[start, len(v)])
    mean = np.add.reduceat(v, start) / n
    dev = v - np.repeat(mean, n)
    var = np.add.reduceat(dev ** 2, start) / n
    m4 = np.add.reduceat(dev ** 4, start) / n
    rms = np.sqrt(np.add.reduceat(v * v, start) / n)
    with np.errstate(invalid="ignore", divide="ignore"):
        kurt = np.where(var == 0, np.nan, m4 / var ** 2)
    crest = np.maximum.reduceat(np.abs(v), start) / rms
    return pd.DataFrame({"_time": keys, "rms": rms, "kurtosis": kurt, "crest": crest})


# ---------------------------------------------------------------------------- 8. fraud
def fraud(frame: pd.DataFrame, window_ms: int = 10) -> pd.DataFrame:
    """``(ts, customer, v, mean, std, flag)`` for every transaction: over the customer's
    values in ``(t - 10, t]``, ``flag = v > mean + 3 * std_pop``. Sorted by (customer, ts)."""
    f = frame.sort_values(["customer", "ts"], kind="stable")
    ts, cust = f["ts"].to_numpy(np.int64), f["customer"].to_numpy(np.int64)
    v = f["v"].to_numpy(np.float64)
    count, total, var = window_stats(v, window_first(ts, window_ms * MS, cust))
    mean, std = total / count, np.sqrt(var)
    return pd.DataFrame({"ts": ts, "customer": cust, "v": v, "mean": mean, "std": std,
                         "flag": v > mean + 3 * std})


# ---------------------------------------------------------------------------- Y. YSB
def ysb(frame: pd.DataFrame, window_ms: int = 100) -> pd.DataFrame:
    """``(_time, campaign, n)``: events with ``event_type = 1`` per tumbling window and
    campaign (pairs without such an event have no row)."""
    hits = frame[frame["event_type"] == 1]
    end = bucket_end(hits["ts"].to_numpy(np.int64), window_ms * MS)
    out = (pd.DataFrame({"_time": end, "campaign": hits["campaign"].to_numpy(np.int64)})
           .groupby(["_time", "campaign"]).size().rename("n").reset_index())
    return out
