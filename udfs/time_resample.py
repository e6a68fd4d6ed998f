"""Kernel of ``RESAMPLE`` over one range of event time, in numpy (no Spark import).

planner/physical/direct_resample.py cuts an un-keyed stream read straight from its Parquet
files into ranges of event time; each range gets its own rows plus the rows at the latest time
before it and the earliest after it (its neighbours across a gap, however long), and this
module puts the range's share of the grid on it. The semantics are planner/temporal.py's (its
module doc), which the Spark SQL lowering implements and tests/test_resample_direct.py compares
against: grid points ``k * P`` between the series' first and last time; rows sharing a time
collapsed to the greatest by their other columns (left to right, NULL lowest, NaN greatest);
``'linear'`` interpolates numeric columns (as DOUBLE, with exactly the SQL lowering's
arithmetic) and holds the others, ``'prev'`` holds every column, ``'null'`` / ``'zero'`` take
the row in ``(t - P, t]`` or NULL / 0.

The planner only sends columns whose values numpy orders as Spark does (numbers, booleans,
timestamps), and for ``'linear'`` only columns without NULLs (a NULL is a hole whose
neighbours may lie outside the range).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .time_windows import CONTEXT

METHODS = ("linear", "prev", "zero", "null")


def resample_range(table: pa.Table, time_col: str, period: int, method: str,
                   start: int, end: int, interpolate: tuple[str, ...] = ()) -> pa.Table:
    """The grid points ``start <= t < end`` of the rows of ``table`` (``CONTEXT`` marks
    rows outside the range: the neighbours), columns in ``table``'s order (without
    ``CONTEXT``); ``interpolate``: the numeric columns ``'linear'`` interpolates."""
    names = [n for n in table.column_names if n != CONTEXT]
    us = _micros(table.column(time_col))
    rows = _latest_per_time(table, names, time_col, us)
    if rows is not None:
        us = us[rows]
    if len(us) == 0:
        return _empty(table, names, time_col, method, interpolate)
    first, last = int(us[0]), int(us[-1])
    lo, hi = max(start, first), min(end - 1, last)
    k0, k1 = -(-lo // period), hi // period
    grid = np.arange(k0, k1 + 1, dtype=np.int64) * period if k0 <= k1 else np.zeros(0, np.int64)
    prev = _latest_at(us, k0, len(grid), period)  # latest row at or before each point
    out = {}
    for name in names:
        if name == time_col:
            out[name] = pa.array(grid, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
            continue
        column = table.column(name)
        if rows is not None:
            column = column.take(pa.array(rows))
        if method == "prev" or (method == "linear" and name not in interpolate):
            out[name] = column.take(pa.array(prev))
        elif method == "linear":
            out[name] = pa.array(_linear(column, us, prev, grid), pa.float64())
        else:  # 'null' / 'zero': the row in (t - P, t], if any
            hit = us[prev] > grid - period
            taken = column.take(pa.array(prev))
            fill = _zero(column.type) if method == "zero" else None
            out[name] = _where(hit, taken, fill, column.type)
    return pa.table([out[n] for n in names], names=names)


def _micros(column: pa.ChunkedArray) -> np.ndarray:
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", tz=column.type.tz))
    return column.cast(pa.int64()).to_numpy()


def _latest_at(us: np.ndarray, k0: int, points: int, period: int) -> np.ndarray:
    """For each grid point ``(k0 + i) * period``, the index of the latest of the sorted
    times ``us`` at or before it (-1: none). A row at ``t`` is at or before the points from
    ``ceil(t / period)`` on, so the answer is a running count of the rows per point: one
    pass, where a binary search per point (both sorted, millions each) missed the cache."""
    if points == 0:
        return np.zeros(0, np.int64)
    first_point = -(-us // period) - k0  # the first point each row is at or before
    np.clip(first_point, 0, points, out=first_point)
    return np.cumsum(np.bincount(first_point, minlength=points + 1)[:points]) - 1


def _latest_per_time(table: pa.Table, names, time_col: str, us: np.ndarray):
    """Row indices sorted by time, one per time: of rows sharing a time, the greatest by
    the other columns left to right (NULL lowest, NaN greatest, as Spark sorts); None when
    that is every row as it is (distinct times in order)."""
    n = len(us)
    if n == 0:
        return np.zeros(0, np.int64)
    if bool((us[1:] > us[:-1]).all()):
        return None
    order = np.argsort(us, kind="stable")
    s = us[order]
    if not (s[1:] == s[:-1]).any():
        return order
    keys = [us]  # lexsort: the last key is the primary one
    for name in names:
        if name == time_col:
            continue
        col = table.column(name)
        valid = ~np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        values = col.fill_null(False if pa.types.is_boolean(col.type) else 0)
        if pa.types.is_timestamp(values.type):
            values = values.cast(pa.int64())
        keys.append((valid, values.to_numpy(zero_copy_only=False)))
    flat = []
    for key in reversed(keys[1:]):  # the last column is the least significant
        flat += [key[1], key[0]]
    order = np.lexsort(tuple(flat) + (us,))
    s = us[order]
    last = np.ones(n, dtype=bool)
    last[:-1] = s[1:] != s[:-1]
    return order[last]


def _linear(column: pa.ChunkedArray, us, prev, grid) -> np.ndarray:
    """planner/temporal.py's interpolation, operation for operation: an exact hit is the
    row's value, else ``v0 + (v1 - v0) * double(t - t0) / double(t1 - t0)``."""
    v = column.cast(pa.float64()).to_numpy()
    exact = us[prev] == grid
    nxt = np.minimum(prev + 1, len(us) - 1)
    t0, t1 = us[prev], us[nxt]
    v0, v1 = v[prev], v[nxt]
    with np.errstate(invalid="ignore", divide="ignore"):
        inner = v0 + (v1 - v0) * (grid - t0).astype(np.float64) / (t1 - t0).astype(np.float64)
    return np.where(exact, v0, inner)


def _zero(arrow_type: pa.DataType):
    if pa.types.is_integer(arrow_type) or pa.types.is_floating(arrow_type) \
            or pa.types.is_decimal(arrow_type):
        return 0
    return None


def _where(hit: np.ndarray, taken: pa.ChunkedArray, fill, arrow_type) -> pa.Array:
    import pyarrow.compute as pc

    fallback = pa.scalar(fill, arrow_type) if fill is not None else pa.scalar(None, arrow_type)
    return pc.if_else(pa.array(hit), taken, fallback)


def _empty(table, names, time_col, method, interpolate) -> pa.Table:
    fields = []
    for name in names:
        t = table.schema.field(name).type
        if name == time_col:
            t = pa.timestamp("us", tz="UTC")
        elif method == "linear" and name in interpolate:
            t = pa.float64()
        fields.append(pa.field(name, t))
    return pa.schema(fields).empty_table()
