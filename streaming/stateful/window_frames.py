"""Unslid windows in the window kernel: ``[RANGE r]`` (``[NOW]`` is ``RANGE 1 µs``) and
``[ROWS n]`` / ``[PARTITION BY k ROWS n]`` over the rows they keep.

An unslid ``RANGE r`` keeps the rows of its last ``r``, a ROWS window the last ``n`` rows
per key; each instant that became final is evaluated as an aggregate over a frame of those
rows, sorted by key and time (and, for ROWS, by the row's values: the documented ties).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from .window_columns import (concat_columns, first_of_pairs, frame_values, key_codes,
                             key_columns, key_hash, keys_from, np_column, take_keys, to_table)
from .window_output import concat_results, emit, new_last
from . import window_holistic as holistic
from .window_types import HOLISTIC, Aggregate, Operator, Rows


def _rows_state(op: Operator, tables: dict, rows: Rows, keep_failing: bool) -> Rows:
    """The state's rows and the new on-time rows (only passing ones unless
    ``keep_failing``: a ROWS window counts every row, the WHERE filters after it)."""
    if not keep_failing:
        rows = rows.take(rows.passes)
    kept = tables.get("kept")
    if kept is None or kept.num_rows == 0:
        return rows
    old = Rows(np_column(kept, "ts"), np_column(kept, "pass"),
               keys_from(kept, op.keys),
               [(np_column(kept, f"a{j}"), np_column(kept, f"an{j}"))
                for j in range(len(rows.args))],
               [(np_column(kept, f"o{m}"), np_column(kept, f"on{m}"))
                for m in range(len(rows.order))])
    return Rows(np.concatenate([old.ts, rows.ts]), np.concatenate([old.passes, rows.passes]),
                concat_columns(old.keys, rows.keys), concat_columns(old.args, rows.args),
                concat_columns(old.order, rows.order))


def _rows_table(rows: Rows) -> pa.Table:
    cols = {"ts": rows.ts, "pass": rows.passes, "h": key_hash(rows.keys, len(rows)),
            **key_columns(rows.keys)}
    for j, (v, n) in enumerate(rows.args):
        cols[f"a{j}"], cols[f"an{j}"] = v, n
    for m, (v, n) in enumerate(rows.order):
        cols[f"o{m}"], cols[f"on{m}"] = v, n
    return to_table(cols)


def _frame_observations(op: Operator, rows: Rows, codes, t, code, lo, hi) -> dict:
    """Observations at instants ``t`` of keys ``code``: the aggregates over each frame
    ``[lo, hi)`` of the (sorted) ``rows``, present when a passing row is in it."""
    passes = rows.passes
    n = frame_values(Aggregate("count"), passes, passes.astype(np.int64), lo, hi)[0]
    values = []
    for agg in op.aggregates:
        if agg.arg is None:
            values.append((n.astype(np.int64), np.zeros(len(n), bool)))
            continue
        x, null = rows.args[agg.arg]
        if agg.func in HOLISTIC:
            values.append(holistic.evaluate(agg.func, agg.param, agg.many, ~null & passes, x,
                                            lo, hi))
        else:
            values.append(frame_values(agg, ~null & passes, x, lo, hi))
    return {"code": code, "k": t, "row": lo, "present": n > 0, "values": values}


def range_step(op: Operator, tables: dict, new: Rows, bound, watermark):
    r = op.size
    rows = _rows_state(op, tables, new, keep_failing=False)
    codes = key_codes(rows.keys, len(rows))
    order = np.lexsort((rows.ts, codes))
    rows, codes = rows.take(order), codes[order]
    last = tables.get("last")
    results = []
    if watermark is not None and len(rows):
        # each key's instants: where a row enters (ts) or leaves (ts + r)
        points = np.concatenate([rows.ts, rows.ts + r])
        owner = np.concatenate([codes, codes])
        row_of = np.concatenate([np.arange(len(rows))] * 2)
        due = points < watermark
        if bound is not None:
            due &= points >= bound
        first = first_of_pairs(owner[due], points[due])
        code, t, at = owner[due][first], points[due][first], row_of[due][first]
        order = np.lexsort((t, code))
        code, t, at = code[order], t[order], at[order]
        lo = _search(codes, rows.ts, code, t - r, "right")
        hi = _search(codes, rows.ts, code, t, "right")
        obs = _frame_observations(op, rows, codes, t, code, lo, hi)
        obs["row"] = at
        keys = take_keys(rows.keys, np.arange(len(rows)))
        results.append(emit(op, obs, keys, last, None, None, 1, True))
        last = new_last(op, obs, keys, last, None, 1)
    keep = (rows.ts + r >= watermark) if watermark is not None else np.ones(len(rows), bool)
    kept = rows.take(keep)
    pending = np.where(kept.ts >= (watermark if watermark is not None else kept.ts),
                       kept.ts, kept.ts + r)
    timer = int(pending.min()) if len(pending) else None
    return concat_results(results, op), _rows_table(kept), last, timer


def rows_step(op: Operator, tables: dict, new: Rows, bound, watermark):
    n = op.size
    rows = _rows_state(op, tables, new, keep_failing=True)
    codes = key_codes(rows.keys, len(rows))
    # partition, then time, then the row's values with NULLs first (the documented ties)
    sort_keys = [codes, rows.ts]
    for values, null in rows.order:
        sort_keys += [~null, np.where(null, -1, _ranks(values))]
    order = np.lexsort(tuple(reversed(sort_keys))) if len(rows) else np.zeros(0, np.int64)
    rows, codes = rows.take(order), codes[order]
    last = tables.get("last")
    results = []
    if watermark is not None and len(rows):
        due = rows.ts < watermark
        if bound is not None:
            due &= rows.ts >= bound
        first = first_of_pairs(codes[due], rows.ts[due])
        code, t = codes[due][first], rows.ts[due][first]
        order = np.lexsort((t, code))
        code, t = code[order], t[order]
        starts = np.searchsorted(codes, code)
        hi = _search(codes, rows.ts, code, t, "right")
        lo = np.maximum(hi - n, starts)
        obs = _frame_observations(op, rows, codes, t, code, lo, hi)
        obs["row"] = lo
        keys = take_keys(rows.keys, np.arange(len(rows)))
        results.append(emit(op, obs, keys, last, None, None, 1, True))
        last = new_last(op, obs, keys, last, None, 1)
    if watermark is None or not len(rows):
        keep = np.ones(len(rows), bool)
    else:
        # rows not final yet, and the last n rows before progress of each partition
        before = rows.ts < watermark
        rank_from_end = _rank_from_end(codes, before)
        keep = ~before | (rank_from_end < n)
    kept = rows.take(keep)
    future = kept.ts[kept.ts >= watermark] if watermark is not None else kept.ts
    timer = int(future.min()) if len(future) else None
    return concat_results(results, op), _rows_table(kept), last, timer


def _rank_from_end(codes: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For rows sorted by ``codes`` (then time): each ``mask`` row's position counted from
    the last ``mask`` row of its code (0 for the last); a large number elsewhere."""
    out = np.full(len(codes), np.iinfo(np.int64).max)
    idx = np.flatnonzero(mask)
    if len(idx):
        c = codes[idx]
        last_of_code = np.searchsorted(c, c, "right") - 1
        out[idx] = last_of_code - np.arange(len(idx))
    return out


def _ranks(values: np.ndarray) -> np.ndarray:
    """Dense ranks of ``values`` in Spark's order (a NaN above every number)."""
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        ranks = pd.factorize(np.where(nan, 0.0, values + 0.0), sort=True)[0]
        return np.where(nan, len(values) + 1, ranks)
    return pd.factorize(values, sort=True)[0]


def _search(codes, ts, code, t, side: str) -> np.ndarray:
    """For rows sorted by ``(codes, ts)``: the global index ``searchsorted`` would give for
    ``t`` within ``code``'s run of rows -- all queries at once, the runs told apart by
    packing ``(code, rank of the time)`` into one sorted integer."""
    if len(t) == 0:
        return np.zeros(0, np.int64)
    times = np.unique(ts)
    width = len(times) + 1
    packed = codes * width + np.searchsorted(times, ts) + 1
    return np.searchsorted(packed, code * width + np.searchsorted(times, t, side), "right")
