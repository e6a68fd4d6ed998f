"""SLIDE windows in the window kernel: partial aggregates per pane.

``[RANGE r SLIDE s]`` keeps, per group key, the partial aggregates of each pane of
``gcd(r, s)`` of event time (``RANGE 1 HOUR SLIDE 1 MINUTE`` keeps 60 partials per key, not
an hour of rows); a window's aggregate combines its panes' partials, so a sum's rounding
can differ from a sum over the rows in the last bits (a different order of additions).

A pane's partial of an aggregate is its count of values ``c`` and a value ``v``: the sum
(a DOUBLE sum for avg), min or max; for a spread (variance, standard deviation) ``v`` is
the mean and ``m`` the sum of squared deviations from it, merged pairwise by Chan et al.'s
formula -- never ``E[x^2] - E[x]^2`` of large sums, which loses the digits a spread has;
for a holistic aggregate ``v`` is the list of the pane's values (:mod:`.window_holistic`).
"""

from __future__ import annotations

import numpy as np

from wavesql.udfs.time_windows import merged_moments

from . import window_holistic as holistic
from .window_columns import (concat_arrays, first_of_pairs, frame_values, key_codes,
                             key_columns, np_column, take_keys, to_table)
from .window_output import concat_results, emit, new_last
from .window_types import HOLISTIC, MOMENTS, Aggregate, Operator, Rows


def _partials(op: Operator, rows: Rows, codes: np.ndarray, pane: np.ndarray):
    """Per (key, pane) of ``rows``: the first row's index, the passing-row count ``n`` and
    per aggregate its partial (module docstring)."""
    order = np.lexsort((pane, codes))
    codes, pane = codes[order], pane[order]
    change = np.ones(len(order), bool)
    change[1:] = (codes[1:] != codes[:-1]) | (pane[1:] != pane[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(order))
    first = order[starts]
    passes = rows.passes[order]
    out = {"n": frame_values(Aggregate("count"), passes, passes.astype(np.int64),
                              starts, ends)[0]}
    for j, agg in enumerate(op.aggregates):
        if agg.arg is None:
            out[f"c{j}"] = out["n"]
            out[f"v{j}"] = np.zeros(len(starts), np.int64)
            continue
        x, null = rows.args[agg.arg]
        x, valid = x[order], ~null[order] & passes
        out.update(_merged(agg, j, _row_partials(agg, valid, x), starts, ends))
    return first, out


def _row_partials(agg: Aggregate, valid, x) -> dict:
    """Each row's partial by itself: count 1 (0 for a NULL or failing row), its value
    (a spread's M2 0); a holistic aggregate's values as they are (``x``, not lists)."""
    if agg.func in HOLISTIC:
        return {"c": valid.astype(np.int64), "x": x}
    if agg.func in MOMENTS:
        return {"c": valid.astype(np.int64), "v": np.where(valid, x, 0).astype(np.float64),
                "m": np.zeros(len(x))}
    return {"c": valid.astype(np.int64), "v": x}


def _parts_of(j: int, table: dict, idx=slice(None)) -> dict:
    """Aggregate ``j``'s partial columns (``c``, ``v``, ``m``) of a pane table."""
    return {name: table[f"{name}{j}"][idx] for name in "cvm" if f"{name}{j}" in table}


def _merged(agg: Aggregate, j: int, part: dict, lo, hi) -> dict:
    """Aggregate ``j``'s columns of the partials ``part`` merged over each range
    ``[lo, hi)`` (rows into panes, equal panes into one, panes into windows)."""
    c = part["c"]
    count = frame_values(Aggregate("sum"), np.ones(len(c), bool), c, lo, hi)[0]
    if agg.func in HOLISTIC:
        if "x" in part:  # rows
            valid, x = c > 0, part["x"]
        else:  # panes' lists
            x, lo, hi = holistic.flattened(part["v"], lo, hi)
            valid = np.ones(len(x), bool)
        lists = holistic.evaluate(holistic.kept(agg.func), (), False, valid, x, lo, hi)[0]
        return {f"c{j}": count, f"v{j}": lists}
    if agg.func in MOMENTS:
        _, mean, m2 = merged_moments(c, part["v"], part["m"], lo, hi)
        return {f"c{j}": count, f"v{j}": mean, f"m{j}": m2}
    return {f"c{j}": count, f"v{j}": _partial_value(agg, c > 0, part["v"], lo, hi)}


def _partial_value(agg: Aggregate, valid, x, lo, hi) -> np.ndarray:
    """The partial of one pane (or of several panes' partials): sum / DOUBLE sum / min /
    max of the values, 0 where there is none (a count keeps only its count)."""
    if agg.func == "count":
        return np.zeros(len(lo), np.int64)
    if agg.func == "avg":
        x = x.astype(np.float64)
    func = {"count": "sum", "avg": "sum"}.get(agg.func, agg.func)
    values, null = frame_values(Aggregate(func), valid, x, lo, hi)
    return np.where(null, 0, values).astype(x.dtype, copy=False)


def _final_values(op: Operator, parts: dict, j: int):
    """(values, NULL mask) of aggregate ``j`` from combined partials."""
    agg = op.aggregates[j]
    c, v = parts[f"c{j}"], parts[f"v{j}"]
    if agg.func == "count":
        return c.astype(np.int64), np.zeros(len(c), bool)
    if agg.func in HOLISTIC:
        x, lo, hi = holistic.flattened(v, np.arange(len(v)), np.arange(1, len(v) + 1))
        return holistic.evaluate(agg.func, agg.param, agg.many, np.ones(len(x), bool), x,
                                 lo, hi)
    empty = c == 0
    if agg.func == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            return v / np.maximum(c, 1), empty
    if agg.func in MOMENTS:
        sample = agg.func.endswith("_samp")
        with np.errstate(invalid="ignore", divide="ignore"):
            spread = np.maximum(parts[f"m{j}"], 0.0) / (c - 1 if sample else c)
        # an infinity or NaN among the values makes the spread NaN, as Spark's does
        spread = np.where(np.isfinite(v), spread, np.nan)
        if agg.func.startswith("stddev"):
            spread = np.sqrt(spread)
        return spread, empty | (sample & (c == 1))
    return v, empty


def slide_step(op: Operator, tables: dict, rows: Rows, bound, watermark):
    g, r, s = op.pane, op.size, op.slide
    panes = tables.get("kept")
    k = op.keys
    rows = rows.take(rows.passes)  # a slid window's rows are independent: drop failing ones
    # the state's panes and the new rows' partials, combined per (key, pane)
    new_keys = rows.keys
    new_codes = key_codes(new_keys, len(rows))
    pane = -((-rows.ts) // g)
    first, partial = _partials(op, rows, new_codes, pane)
    fresh = {**key_columns(take_keys(new_keys, first)), "p": pane[first], **partial}
    if panes is not None and panes.num_rows:
        old = {name: np_column(panes, name) for name in panes.column_names}
        both = {name: concat_arrays(old[name], fresh[name]) for name in old}
        both = _combine_panes(op, both)
    else:
        both = fresh
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(k)]
    codes = key_codes(keys, len(both["p"]))
    order = np.lexsort((both["p"], codes))
    both = {name: v[order] for name, v in both.items()}
    codes = codes[order]
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(k)]
    p = both["p"]
    # every window k*s holding a pane p: ceil(p*g/s) <= k <= floor(((p-1)*g + r)/s)
    k_lo = -((-p * g) // s)
    k_hi = ((p - 1) * g + r) // s
    final_hi = None if watermark is None else -((-watermark) // s) - 1  # k*s < W
    final_lo = None if bound is None else -((-bound) // s)  # k*s >= bound
    last = tables.get("last")
    results = []
    lo = k_lo if final_lo is None else np.maximum(k_lo, final_lo)
    if final_hi is not None:
        obs = _window_observations(op, both, codes, p, lo, np.minimum(k_hi, final_hi))
        results.append(emit(op, obs, keys, last, final_lo, final_hi, s, True))
        last = new_last(op, obs, keys, last, final_hi, s)
    if op.changes:
        start = np.maximum(k_lo, final_hi + 1) if final_hi is not None else k_lo
        early = _window_observations(op, both, codes, p, start, k_hi)
        results.append(emit(op, early, keys, None, None, None, s, False))
    # keep the panes of windows not final yet
    keep = (k_hi * s >= watermark) if watermark is not None else np.ones(len(p), bool)
    kept = to_table({name: v[keep] for name, v in both.items()})
    pending = np.maximum(k_lo, final_hi + 1 if final_hi is not None else k_lo)[keep]
    timer = int(pending.min()) * s if len(pending) else None
    if last is not None and op.output == "DSTREAM" and last.num_rows and final_hi is not None:
        # a key still present at the last final instant leaves at the next one
        timer = (final_hi + 1) * s if timer is None else min(timer, (final_hi + 1) * s)
    return concat_results(results, op), kept, last, timer


def _combine_panes(op: Operator, both: dict) -> dict:
    """One row per (key, pane): the partials of equal (key, pane) rows merged."""
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(op.keys)]
    codes = key_codes(keys, len(both["p"]))
    order = np.lexsort((both["p"], codes))
    codes, p = codes[order], both["p"][order]
    change = np.ones(len(order), bool)
    change[1:] = (codes[1:] != codes[:-1]) | (p[1:] != p[:-1])
    starts = np.flatnonzero(change)
    if len(starts) == len(order):
        return both
    ends = np.append(starts[1:], len(order))
    out = {name: v[order][starts] for name, v in both.items()}
    out["n"] = np.add.reduceat(both["n"][order], starts)
    for j, agg in enumerate(op.aggregates):
        out.update(_merged(agg, j, _parts_of(j, both, order), starts, ends))
    return out


def _window_observations(op: Operator, panes: dict, codes, p, k_from, k_to):
    """The present windows ``(code, k, values...)`` of every key, for the window numbers
    ``k_from[i]..k_to[i]`` that pane ``i`` belongs to (panes sorted by key, then pane)."""
    g, r, s = op.pane, op.size, op.slide
    count = np.maximum(k_to - k_from + 1, 0)
    total = int(count.sum())
    owner = np.repeat(np.arange(len(p)), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    ks = k_from[owner] + offset
    first = first_of_pairs(codes[owner], ks)
    code, ks, row = codes[owner][first], ks[first], owner[first]
    # a window's panes: p in [k*s/g - r/g + 1, k*s/g] within its key's run of panes
    ranks = np.unique(p)
    rank = np.searchsorted(ranks, p)
    width = len(ranks) + 1
    packed = codes * width + rank
    lo = np.searchsorted(packed, code * width + np.searchsorted(ranks, ks * s // g - r // g + 1))
    hi = np.searchsorted(packed, code * width + np.searchsorted(ranks, ks * s // g, "right"))
    total_n = np.concatenate([[0], np.cumsum(panes["n"])])
    n = total_n[hi] - total_n[lo]
    parts = {}
    for j, agg in enumerate(op.aggregates):
        parts.update(_merged(agg, j, _parts_of(j, panes), lo, hi))
    values = [_final_values(op, parts, j) for j in range(len(op.aggregates))]
    present = n > 0
    return {"code": code[present], "k": ks[present], "row": row[present],
            "values": [(v[present], m[present]) for v, m in values]}
