"""The windows and groups of a fused program's level, over one range's rows in time order.

udfs/fused/range_pass.py runs a level's windows (:class:`~.program.Window`) here: ``lag``;
RANGE-framed OVER windows (frames found by arithmetic when the times tick regularly, else
by binary search; the aggregates by udfs/time_windows.py's frame kernel); whole-partition
aggregates of a tumbling window; and the levels that are GROUP BY a tumbling window
(:func:`grouped`) or a total of the range's own rows (:func:`totals`). Each window also
says from which time on its values are *complete* (depend only on rows the range was
given: udfs/fused/__init__.py). Aggregates follow Spark: NULLs skipped, NaN greatest,
BIGINT sums raise on overflow in ANSI mode.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wavesql.udfs import time_windows

from .evaluate import Evaluator, evaluate, overflow
from .kinds import ARROW, DTYPES, result_type, vector
from .program import Level, Window

_INF = np.iinfo(np.int64).max


def window(w: Window, cols, us, done, ansi, shared: dict):
    """``((values, valid), complete-from time)`` of one window over a level's rows;
    ``shared``: what the level's windows share -- frames by ``("frames", before, after,
    keys)``, partitions by ``("partitions", keys)`` (and the windows themselves)."""
    n = len(us)
    everywhere = np.ones(n, dtype=bool)
    if w.func == "lag":
        values, valid = evaluate(w.arg, cols, (), everywhere, ansi)
        k = min(w.n, n)  # the first k rows have no row n back: the default
        out_v, out_m = np.empty_like(values), np.zeros(n, dtype=bool)
        out_v[k:], out_m[k:] = values[:n - k], valid[:n - k]
        out_v[:k] = 0
        if w.default is not None and k:
            out_v[:k], out_m[:k] = evaluate(w.default, cols, (), everywhere[:k], ansi)
        if done is None:
            return (out_v, out_m), None
        first = int(np.searchsorted(us, done, side="left")) + w.n - 1
        return (out_v, out_m), (int(us[first]) + 1 if first < n else _INF)
    if w.whole:
        return _whole(w, cols, us, done, ansi, shared)
    shape = ("frames", w.before, w.after, w.keys)
    if shape not in shared:
        shared[shape] = _frames(w, cols, us, ansi, shared)
    order, lo, hi = shared[shape]
    if w.arg is None:
        result = pa.array(hi - lo, pa.int64())
    else:
        values, valid = evaluate(w.arg, cols, (), everywhere, ansi)
        integral = w.arg_type in ("int", "bigint")
        # the window kernel reads NULLs as zeros (an expression's NULL rows hold anything)
        x = np.where(valid, values, 0).astype(np.int64 if integral else np.float64, copy=False)
        if order is not None:
            x, valid = x[order], valid[order]
        result = time_windows.aggregate_frames(
            w.func, (ARROW[w.arg_type], valid, x), lo, hi,
            shared.setdefault(("sums", shape, w.arg), {}))
    values, valid = vector(pa.chunked_array([result]), result_type(w.func, w.arg_type))
    if order is not None:  # back from partition order to the level's time order
        back_v, back_m = np.empty_like(values), np.empty_like(valid)
        back_v[order], back_m[order] = values, valid
        values, valid = back_v, back_m
    return (values, valid), (None if done is None else min(_INF, done + w.before))


def _whole(w: Window, cols, us, done, ansi, shared: dict):
    """A whole-partition window: each partition's aggregate, on every row of it. Complete
    from the first tumbling window starting at or after ``done`` (``w.before``: its width)."""
    order, starts, sizes, _ = _partitions_of(w.keys, cols, len(us), ansi, shared)
    values, valid = _aggregate_groups(w, cols, order, starts, sizes, ansi)
    values, valid = np.repeat(values, sizes), np.repeat(valid, sizes)
    if order is not None:  # back from partition order to time order
        back_v, back_m = np.empty_like(values), np.empty_like(valid)
        back_v[order], back_m[order] = values, valid
        values, valid = back_v, back_m
    return (values, valid), _whole_windows_from(done, w.before)


def _whole_windows_from(done, width: int):
    """The first boundary ``k * width + 1`` of a tumbling window at or after ``done``."""
    return None if done is None else min(_INF, done + (-(done - 1)) % width)


def _partitions_of(keys, cols, n: int, ansi, shared: dict):
    """:func:`_partitions`, once per level for the same keys."""
    if ("partitions", keys) not in shared:
        shared["partitions", keys] = _partitions(keys, cols, n, ansi)
    return shared["partitions", keys]


def _partitions(keys, cols, n: int, ansi):
    """``(order, starts, sizes, key vectors)``: the rows grouped by ``keys`` (Spark's
    grouping: NULL its own, -0.0 with 0.0, one NaN), stable within a group; ``order`` None
    when the rows are grouped already (one integral key that never decreases -- the
    tumbling window instant, in time order): nothing to sort or gather."""
    everywhere = np.ones(n, dtype=bool)
    vectors = [evaluate(key, cols, (), everywhere, ansi) for key in keys]
    if n and len(vectors) == 1:
        values, valid = vectors[0]
        if values.dtype.kind in "iub" and valid.all() and bool((values[1:] >= values[:-1]).all()):
            starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            return None, starts, np.diff(np.r_[starts, n]), vectors
    codes = [time_windows._codes(pa.chunked_array([pa.array(values, mask=~valid)]))
             for values, valid in vectors]
    order = time_windows.group_order(codes, n)  # stable: time order holds within a group
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
        for c in codes:
            c = c[order]
            change[1:] |= c[1:] != c[:-1]
    starts = np.flatnonzero(change)
    return order, starts, np.diff(np.r_[starts, n]), vectors


def _aggregate_groups(w: Window, cols, order, starts, sizes, ansi):
    if w.arg is None:
        return sizes.astype(np.int64), np.ones(len(starts), dtype=bool)
    values, valid = evaluate(w.arg, cols, (), np.ones(int(sizes.sum()), dtype=bool), ansi)
    if order is not None:
        values, valid = values[order], valid[order]
    return _group(w.func, w.arg_type, values, valid, starts, sizes, ansi)


def grouped(level: Level, cols, us, done, ansi, width: int):
    """A GROUP BY level: ``(instants, outputs, complete-from)`` of its groups, each group's
    time its tumbling window instant (of ``width``)."""
    order, starts, sizes, keys = _partitions(level.group, cols, len(us), ansi)
    first = starts if order is None else order[starts]
    group_cols = {f"__g{i}": (v[first], m[first]) for i, (v, m) in enumerate(keys)}
    shared = {}  # the same aggregate twice: once
    for w in level.windows:
        if w is not None and w not in shared:
            shared[w] = _aggregate_groups(w, cols, order, starts, sizes, ansi)
    results = [None if w is None else shared[w] for w in level.windows]
    instants = group_cols[f"__g{level.bucket}"][0].astype(np.int64)
    if level.having is not None:
        everywhere = np.ones(len(starts), dtype=bool)
        values, valid = Evaluator(group_cols, results, ansi)(level.having, everywhere)
        keep = values & valid
        instants = instants[keep]
        group_cols = {k: (v[keep], m[keep]) for k, (v, m) in group_cols.items()}
        results = [None if r is None else (r[0][keep], r[1][keep]) for r in results]
    everywhere = np.ones(len(instants), dtype=bool)
    evaluator = Evaluator(group_cols, results, ansi)
    outputs = [evaluator(node, everywhere) for _, node in level.outputs]
    return instants, outputs, _whole_windows_from(done, width)


def totals(level: Level, cols, n: int, ansi):
    """The one row of a total level: each window over all ``n`` rows (a count of none is
    0, any other aggregate of none NULL)."""
    results = []
    for w in level.windows:
        if w is None:
            results.append(None)
        elif n:
            results.append(_aggregate_groups(w, cols, None, np.zeros(1, dtype=np.intp),
                                             np.array([n]), ansi))
        else:
            results.append((np.zeros(1, dtype=DTYPES[result_type(w.func, w.arg_type)]),
                            np.array([w.func == "count"])))
    one, evaluator = np.ones(1, dtype=bool), Evaluator({}, results, ansi)
    return [evaluator(node, one) for _, node in level.outputs]


def _group(func: str, kind: str, x, valid, starts, sizes, ansi: bool):
    """``(values, valid)`` per group (rows ``starts[i]:starts[i + 1]``, ``sizes[i]`` of them)
    of an aggregate, NULLs skipped, as Spark: NULL for no value (count: 0); NaN greatest
    (max) and the minimum only of all-NaN groups; an infinity or NaN makes the spread NaN;
    one value's sample spread NULL. Sums of integers raise on BIGINT overflow in ANSI mode
    (else wrap)."""
    if len(starts) == 0:
        return np.zeros(0, DTYPES[result_type(func, kind)]), np.zeros(0, dtype=bool)
    every = bool(valid.all())  # no NULL: no masking, the counts are the sizes
    count = sizes.astype(np.int64) if every else np.add.reduceat(valid.astype(np.int64),
                                                                 starts)
    some = count > 0
    integral = kind in ("int", "bigint")
    if func == "count":
        return count, np.ones(len(starts), dtype=bool)
    if func in ("min", "max"):
        if integral:
            info = np.iinfo(np.int64)
            y = x.astype(np.int64, copy=False) if every else \
                np.where(valid, x.astype(np.int64), info.max if func == "min" else info.min)
            out = (np.minimum if func == "min" else np.maximum).reduceat(y, starts)
        else:
            y = x.astype(np.float64, copy=False) if every else \
                np.where(valid, x.astype(np.float64), np.inf if func == "min" else -np.inf)
            out = (np.fmin if func == "min" else np.maximum).reduceat(y, starts)
            if func == "min":
                nan = np.add.reduceat((valid & np.isnan(y)).astype(np.int64), starts)
                out = np.where(some & (nan == count), np.nan, out)
        return out.astype(DTYPES[kind]), some
    if func == "sum" and integral:
        y = x.astype(np.int64, copy=False) if every else np.where(valid, x.astype(np.int64), 0)
        with np.errstate(over="ignore"):
            total = np.add.reduceat(y, starts)
        estimate = np.add.reduceat(y.astype(np.float64), starts)
        if ansi and (np.abs(estimate - total.astype(np.float64)) > 2.0 ** 62).any():
            overflow("bigint")
        return total, some
    y = x.astype(np.float64, copy=False) if every else np.where(valid, x.astype(np.float64), 0.0)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        total = np.add.reduceat(y, starts)
        if func == "sum":
            return total, some
        mean = total / np.maximum(count, 1)
        if func == "avg":
            return mean, some
        # a finite sum has only finite terms (an infinity or NaN term makes it one): look
        # at the values only where a sum is not finite (or overflowed)
        finite = np.isfinite(total)
        if not finite.all():
            finite = np.add.reduceat((~np.isfinite(y)).astype(np.int64), starts) == 0
        dev = y - np.repeat(mean, sizes)
        if not every:
            dev = np.where(valid, dev, 0.0)
        square = dev * dev
        m2 = np.add.reduceat(square, starts)
        if func in ("kurtosis", "skewness"):  # Spark: NULL when the spread is 0
            if func == "kurtosis":
                out = count * np.add.reduceat(square * square, starts) / (m2 * m2) - 3.0
            else:
                out = np.sqrt(count) * np.add.reduceat(square * dev, starts) / np.sqrt(m2 ** 3)
            return np.where(finite, out, np.nan), some & ~(finite & (m2 == 0))
        sample = func.endswith("_samp")
        var = m2 / (count - 1 if sample else count)
        var = np.where(finite, var, np.nan)
        if func.startswith("stddev"):
            var = np.sqrt(var)
    return var, some & ~(sample & (count == 1))


def _frames(w: Window, cols, us, ansi, shared: dict):
    """``(order, lo, hi)``: the frames of a RANGE window, over the rows in ``order`` (None:
    as they are, in time order; with PARTITION BY keys: by partition, then time)."""
    n = len(us)
    if not w.keys:  # one partition, times sorted: a frame is a search away
        if "step" not in shared:
            shared["step"] = _step(us)
        step = shared["step"]
        if step:  # regular ticks: frames are arithmetic, no search (floor division
            index = np.arange(n)  # keeps both bounds right for either sign)
            lo = np.minimum(np.maximum(index - w.before // step, 0), n)
            hi = np.minimum(np.maximum(index + w.after // step + 1, 0), n)
            return None, lo, np.maximum(hi, lo)
        lo = np.searchsorted(us, us - w.before, side="left")
        if w.after == 0 and (n < 2 or bool((us[1:] > us[:-1]).all())):
            hi = np.arange(1, n + 1)  # distinct times: the frame ends at the row
        else:
            hi = np.searchsorted(us, us + w.after, side="right")
        return None, lo, np.maximum(hi, lo)
    order, starts, sizes, _ = _partitions_of(w.keys, cols, n, ansi, shared)
    segment = np.repeat(np.arange(len(starts)), sizes)
    lo, hi = time_windows._frames(us if order is None else us[order],
                                  np.ones(n, dtype=bool), segment, w.before, w.after)
    return order, lo, hi


def _step(us) -> int:
    """The common step of times that tick regularly (every one a fixed number of
    microseconds after the one before: sampled sensors, 1 ms price ticks), else 0. With
    ``t[i] = t[0] + i * d`` the rows within ``b`` before row ``i`` start at ``i - b // d``:
    a RANGE frame needs no binary search (two of them were a third of a fused pass)."""
    if len(us) < 2:
        return 0
    step = int(us[1] - us[0])
    if step <= 0 or int(us[-1] - us[0]) != step * (len(us) - 1):
        return 0
    return step if bool((np.diff(us) == step).all()) else 0
