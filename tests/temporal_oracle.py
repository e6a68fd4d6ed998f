"""Test oracles for RESAMPLE and ASOF JOIN: numpy and pandas straight from the rules in
``planner/temporal.py``'s docstring (the user documentation), sharing no code with WaveSQL.

Times are integer microseconds since 1970; a NaN or None value is a NULL.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def _nan(x) -> float:
    return np.nan if x is None or pd.isna(x) else float(x)


def _series(frame: pd.DataFrame, key):
    if key is None:
        return [(None, frame)]
    return [(None if pd.isna(k) else k, g) for k, g in frame.groupby(key, dropna=False)]


def resample(frame: pd.DataFrame, period: int, method: str, columns, key=None) -> dict:
    """``{(key, grid time): (value per column)}`` of ``RESAMPLE(frame, ts, period, method
    [PARTITION BY key])``; the key is None without one. Rows sharing a time in a series
    collapse first to the one greatest by its other columns left to right, NULL lowest."""
    out = {}
    for k, g in _series(frame, key):
        g = g[g.ts.notna()]
        if not len(g):
            continue
        others = [c for c in g.columns if c not in ("ts", key)]
        g = g.sort_values(["ts"] + others, na_position="first", kind="stable")
        g = g.drop_duplicates("ts", keep="last")
        ts = g.ts.to_numpy(np.int64)
        grid = np.arange(-(-ts[0] // period) * period, ts[-1] + 1, period)
        i = np.searchsorted(ts, grid, side="right") - 1  # the latest row at or before t
        values = []
        for c in columns:
            v = np.array([_nan(x) for x in g[c]], float)
            if method == "prev":
                y = v[i]
            elif method in ("null", "zero"):
                inside = ts[i] > grid - period  # a row in (t - P, t]
                y = np.where(inside, v[i], np.nan if method == "null" else 0.0)
            elif method == "linear":
                has = ~np.isnan(v)
                y = np.full(len(grid), np.nan)
                if has.any():
                    tv, vv = ts[has], v[has]
                    inner = (grid >= tv[0]) & (grid <= tv[-1])
                    y[inner] = np.interp(grid[inner], tv, vv)
            else:
                raise ValueError(method)
            values.append(y)
        for j, t in enumerate(grid):
            out[(k, int(t))] = tuple(float(col[j]) for col in values)
    return out


def bucket(t, width: int = 10**7):
    """The instant of the tumbling window ``(T - width, T]`` a time falls in."""
    return -(-t // width) * width


def impute(frame: pd.DataFrame, period: int, method: str, columns, key) -> dict:
    """``{(bucket, key, grid time): values}``: each key's RESAMPLE, a NULL filled from the
    mean of that key's rows in the grid point's 10 s bucket (NULLs skipped), or left NULL
    when the bucket has no value."""
    means = frame.assign(_b=bucket(frame.ts)).groupby([key, "_b"])[list(columns)].mean()
    out = {}
    for (k, t), values in resample(frame, period, method, columns, key=key).items():
        b = bucket(t)
        fill = tuple(means.loc[(k, b)]) if (k, b) in means.index else (np.nan,) * len(values)
        out[(b, k, t)] = tuple(f if np.isnan(x) else x for x, f in zip(values, fill))
    return out


def assert_same_points(got: dict, want: dict) -> None:
    """Equal keys; values equal to 1e-12, NaN (NULL) where the other has NaN."""
    assert set(got) == set(want), sorted(set(got) ^ set(want), key=str)[:6]
    for p, w in want.items():
        g = got[p]
        assert len(g) == len(w), p
        for a, b in zip(g, w):
            a, b = _nan(a), _nan(b)
            assert (np.isnan(a) and np.isnan(b)) or np.isclose(a, b, rtol=1e-12,
                                                               atol=1e-12), (p, g, w)


def asof(left: pd.DataFrame, right: pd.DataFrame, by: str, direction: str,
         inclusive: bool) -> pd.DataFrame:
    """``left ASOF LEFT JOIN right`` by pandas.merge_asof: each left row with the latest
    (backward) or earliest (forward) right row of its ``by`` key; a NULL key matches
    nothing. The right row's time is the column ``rts``."""
    lk = left.assign(_k=left[by].fillna("\0null-left"))
    rk = right.dropna(subset=[by]).rename(columns={"ts": "rts", by: "_k"})
    lk = lk.assign(_o=np.arange(len(lk))).sort_values("ts")
    got = pd.merge_asof(lk, rk.sort_values("rts"), left_on="ts", right_on="rts", by="_k",
                        direction=direction, allow_exact_matches=inclusive)
    return got.sort_values("_o").drop(columns=["_k", "_o"]).reset_index(drop=True)
