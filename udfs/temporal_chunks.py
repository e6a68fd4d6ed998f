"""Kernels of un-keyed ``RESAMPLE`` and ``ASOF JOIN`` over one chunk of event time (no Spark
import).

planner/physical/chunked_temporal.py cuts the input of an un-keyed RESAMPLE, or the left side
of an un-keyed ASOF JOIN, into chunks of event time that Spark groups and hands to these
kernels in parallel. Each chunk gets its own rows plus, flagged as ``CONTEXT``, the few rows
from outside that its results depend on however far away they are (TiLT's boundary
resolution): for RESAMPLE the row at the latest time before the chunk, the one at the
earliest time after it and, for ``'linear'``, each interpolated column's last non-NULL value
before and first after; for an ASOF JOIN the right row nearest before (backward) or after
(forward) the chunk. The planner finds those from per-chunk summaries (one aggregation),
propagated across chunks on the driver.

Semantics are planner/temporal.py's (its module doc), as the Spark SQL lowering implements
them; tests/test_temporal_parallel.py checks both against pandas and numpy:

- rows sharing a time collapse to the greatest by their other columns, left to right, NULL
  lowest, NaN greatest (Arrow's sort with nulls first orders as Spark does for the types the
  planner sends: numbers, booleans, strings compared by their UTF-8 bytes, dates,
  timestamps);
- RESAMPLE's grid and its methods are udfs/time_resample.py's :func:`resample_range`; only
  ``'linear'`` columns are interpolated here, per column among its non-NULL values (a NULL is
  a hole interpolated across), with the SQL lowering's arithmetic operation for operation;
- an ASOF match is the nearest right time on the allowed side (``<=``/``<`` backward,
  ``>=``/``>`` forward) by binary search; a NULL left time never matches.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .time_resample import resample_range
from .time_windows import CONTEXT

__all__ = ["CONTEXT", "latest_per_time", "resample_chunk", "asof_chunk", "micros", "conform"]


def micros(column) -> np.ndarray:
    """A time column (timestamp or integer, no NULLs) as int64: microseconds since the epoch
    for timestamps, the value for integers."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_timestamp(column.type):
        column = column.cast(pa.timestamp("us", tz=column.type.tz))
    return column.cast(pa.int64()).to_numpy(zero_copy_only=False)


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly the Arrow types of ``schema`` (applyInArrow checks them). Here,
    not in the planner, so that the pass's Python workers import only this module."""
    arrays = []
    for field in schema:
        col = table.column(field.name)
        arrays.append(col if col.type.equals(field.type) else col.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def latest_per_time(table: pa.Table, time_col: str) -> pa.Table:
    """``table`` sorted by ``time_col`` (no NULLs), one row per time: of rows sharing a time,
    the greatest by the other columns compared left to right (NULL lowest, NaN greatest)."""
    if table.num_rows <= 1:
        return table
    us = micros(table.column(time_col))
    if bool((us[1:] > us[:-1]).all()):
        return table
    keys = [(time_col, "ascending")] + [(n, "ascending") for n in table.column_names
                                        if n != time_col]
    order = pc.sort_indices(table, sort_keys=keys, null_placement="at_start").to_numpy()
    s = us[order]
    last = np.ones(len(order), dtype=bool)
    last[:-1] = s[1:] != s[:-1]
    return table.take(pa.array(order[last]))


# ------------------------------------------------------------------------------ RESAMPLE
def resample_chunk(table: pa.Table, time_col: str, period: int, method: str, start: int,
                   end: int, interpolate: tuple[str, ...] = (),
                   drop: tuple[str, ...] = ()) -> pa.Table:
    """The grid points ``start <= t < end`` of one chunk: ``table`` holds the chunk's rows
    and its context rows (``CONTEXT`` true; none of them inside ``[start, end)``), in any
    order, times not NULL; ``drop``: helper columns (the chunk id) left out of the result.
    Columns in ``table``'s order; ``interpolate``: the numeric columns ``'linear'``
    interpolates (as DOUBLE), which may hold NULLs."""
    names = [n for n in table.column_names if n != CONTEXT and n not in drop]
    table = latest_per_time(table.select(names), time_col)
    held = "prev" if method == "linear" else method
    out = resample_range(table, time_col, period, held, start, end)
    if method != "linear" or not interpolate or out.num_rows == 0:
        if method == "linear" and interpolate:
            return out.cast(pa.schema([pa.field(n, pa.float64()) if n in interpolate
                                       else out.schema.field(n) for n in names]))
        return out
    grid = micros(out.column(time_col))
    us = micros(table.column(time_col))
    for name in interpolate:
        values = _linear_with_holes(table.column(name), us, grid)
        out = out.set_column(names.index(name), name, values)
    return out


def _linear_with_holes(column, us: np.ndarray, grid: np.ndarray) -> pa.Array:
    """planner/temporal.py's interpolation of one column at the points ``grid`` from the rows
    at the sorted distinct times ``us``, among the column's non-NULL values: an exact hit is
    the value itself, else ``v0 + (v1 - v0) * double(t - t0) / double(t1 - t0)`` between the
    latest non-NULL at or before ``t`` and the earliest after; NULL without both."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    v = column.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)[valid]
    t = us[valid]
    if len(t) == 0:
        return pa.nulls(len(grid), pa.float64())
    i = np.searchsorted(t, grid, side="right") - 1  # latest at or before
    have = i >= 0
    i0 = np.clip(i, 0, len(t) - 1)
    exact = have & (t[i0] == grid)
    j = np.minimum(i0 + 1, len(t) - 1)
    inside = have & (i0 + 1 < len(t))
    t0, t1, v0, v1 = t[i0], t[j], v[i0], v[j]
    with np.errstate(invalid="ignore", divide="ignore"):
        inner = v0 + (v1 - v0) * (grid - t0).astype(np.float64) / (t1 - t0).astype(np.float64)
    values = np.where(exact, v0, inner)
    return pa.array(values, pa.float64(), mask=~(exact | inside))


# ------------------------------------------------------------------------------ ASOF JOIN
def asof_chunk(left: pa.Table, right: pa.Table, left_time: str, right_time: str,
               direction: str, inclusive: bool, outer: bool, matched: str,
               drop: tuple[str, ...] = ()) -> pa.Table:
    """The left rows of one chunk with their matches: the left columns, then the right
    columns (NULL without a match), then the boolean column ``matched``. ``right`` holds
    the chunk's right rows and its context (``CONTEXT``), times not NULL; ``drop``: helper
    columns of either side (the chunk id) left out. Inner (``outer`` false): only the left
    rows with a match."""
    lnames = [n for n in left.column_names if n not in drop]
    rnames = [n for n in right.column_names if n != CONTEXT and n not in drop]
    left = left.select(lnames)
    right = latest_per_time(right.select(rnames), right_time)
    lcol = left.column(left_time)
    has_time = ~np.asarray(lcol.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    lt = np.zeros(left.num_rows, np.int64)
    if has_time.any():
        lt[has_time] = micros(lcol.filter(pa.array(has_time)))
    rt = micros(right.column(right_time)) if right.num_rows else np.zeros(0, np.int64)
    if direction == "backward":
        idx = np.searchsorted(rt, lt, side="right" if inclusive else "left") - 1
        valid = idx >= 0
    else:
        idx = np.searchsorted(rt, lt, side="left" if inclusive else "right")
        valid = idx < len(rt)
    valid &= has_time
    if not outer:
        keep = np.flatnonzero(valid)
        left = left.take(pa.array(keep))
        idx, valid = idx[keep], valid[keep]
    take = pa.array(np.where(valid, idx, 0), pa.int64(), mask=~valid)
    columns = list(left.columns) + [right.column(n).take(take) for n in rnames]
    return pa.table(columns + [pa.array(valid)], names=lnames + rnames + [matched])
