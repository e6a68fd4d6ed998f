"""Kernel of time-chunked OVER windows: ``agg(x) OVER ([PARTITION BY k] ORDER BY ts RANGE
BETWEEN a PRECEDING AND b FOLLOWING)`` over one time chunk, in numpy (no Spark import).

``planner/physical/chunked_windows.py`` cuts a stream into chunks of event time and sends every
row to its own chunk and, as *context*, to the chunks whose frames reach it; this module
evaluates the frames of one chunk's own rows from the rows it was given (own + context) and
returns the own rows with the window results. That is TiLT's boundary resolution: a RANGE frame
needs only the rows within its interval, so each chunk is independent and they run in parallel,
instead of the single Spark partition an un-partitioned ``OVER (ORDER BY ts)`` forces.

Semantics are Spark's (tests/test_time_windows.py compares with Spark's own windows):
the frame of a row at ``t`` is every row of its partition with ``t - a <= ts <= t + b``
(equal times are peers); NULL arguments are skipped; ``sum``/``min``/``max``/``avg`` of no
value are NULL; ``count`` of none is 0; ``stddev_samp``/``var_samp`` of one value are NULL,
``_pop`` of one value 0; ``NaN`` is a value (``max`` sees it as greatest, as Spark orders
it); an infinity makes ``sum``/``avg`` infinite (both signs: NaN) and the spread NaN. Rows
whose time is NULL are peers of each other only: their frame is the NULL-time rows of their
partition.

Arithmetic, so results match Spark's to the last bits where it matters: a frame of up to
:data:`NARROW` rows is summed directly, in row order (:func:`_row_order_sum`), as Spark's
sliding frame recomputes it; wider frames use prefix sums in extended precision
(``np.longdouble``) with the non-finite values counted apart, and the spread of a frame is
computed about the frame's own mean (two passes), never as ``E[x^2] - E[x]^2`` of large
sums.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

#: Mean frame width (rows) up to which frames are summed directly.
NARROW = 64
#: Functions and what they return: ``"arg"`` the argument's type, else a fixed one.
FUNCTIONS = {
    "sum": "sum", "avg": "double", "count": "bigint", "min": "arg", "max": "arg",
    "stddev_pop": "double", "stddev_samp": "double", "var_pop": "double", "var_samp": "double",
}

#: Column names of the arrays the planner adds (``__wavesql_`` keeps them off user names).
CONTEXT = "__wavesql_ctx"


def arg_column(i: int) -> str:
    return f"__wavesql_a{i}"


def key_column(i: int) -> str:
    return f"__wavesql_k{i}"


def result_column(i: int) -> str:
    return f"__wavesql_w{i}"


@dataclass(frozen=True)
class Spec:
    """One window: ``func`` over the column named ``arg`` (None: ``count(*)``), frame
    ``[t - before, t + after]`` in microseconds (``after`` < 0: ends before the row)."""

    func: str
    arg: str | None
    before: int
    after: int


def evaluate(table: pa.Table, specs: tuple[Spec, ...], time: str, keys: int,
             passthrough: tuple[str, ...]) -> pa.Table:
    """The own rows of ``table`` (``CONTEXT`` false) with the columns ``passthrough`` and
    one result column per spec (:func:`result_column`); ``time`` names the TIMESTAMP (or
    integer microseconds) column the frames are measured on."""
    n = table.num_rows
    us_col = table.column(time)
    if pa.types.is_timestamp(us_col.type):
        us_col = us_col.cast(pa.timestamp("us", tz=us_col.type.tz)).cast(pa.int64())
    has_time = ~np.asarray(us_col.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    us = us_col.fill_null(0).to_numpy().astype(np.int64, copy=False)
    codes = [_codes(table.column(key_column(i))) for i in range(keys)]
    order = _order(us, has_time, codes)
    us, has_time = us[order], has_time[order]
    segment = _segments([c[order] for c in codes] + [has_time], n)
    own = ~np.asarray(table.column(CONTEXT).to_numpy(zero_copy_only=False), dtype=bool)[order]
    out = {name: table.column(name).take(pa.array(order[own])) for name in passthrough}
    frames: dict = {}   # (before, after) -> own rows' frames: windows sharing a frame
    columns: dict = {}  # argument -> its values in order: windows sharing an argument
    sums: dict = {}     # (argument, before, after) -> what avg and the spreads share
    for i, spec in enumerate(specs):
        if (spec.before, spec.after) not in frames:
            lo, hi = _frames(us, has_time, segment, spec.before, spec.after)
            frames[spec.before, spec.after] = lo[own], hi[own]
        lo, hi = frames[spec.before, spec.after]
        if spec.arg is None:
            out[result_column(i)] = pa.array(hi - lo, pa.int64())
            continue
        if spec.arg not in columns:
            columns[spec.arg] = _ordered(table.column(spec.arg), order)
        shared = sums.setdefault((spec.arg, spec.before, spec.after), {})
        out[result_column(i)] = aggregate_frames(spec.func, columns[spec.arg], lo, hi, shared)
    return pa.table(out)


def _order(us, has_time, codes) -> np.ndarray:
    """Row order: partitions, then NULL times first (one peer group per partition), then
    time. Rows already in time order (a chunk read straight from time-ordered files) need
    only a stable sort by partition (:func:`group_order`)."""
    n = len(us)
    if n == 0:
        return np.zeros(0, np.int64)
    if has_time.all() and bool((us[1:] >= us[:-1]).all()):
        return group_order(codes, n) if codes else np.arange(n)
    key = combined_codes(codes)
    return np.lexsort((us, has_time, *([key] if key is not None else reversed(codes))))


def combined_codes(codes: list[np.ndarray]) -> np.ndarray | None:
    """One code per row that orders as ``codes`` do together (the first the primary): the
    dense codes as digits of one mixed-radix number; None when it would not fit in int64.
    One key sorts 2-3.5x faster than numpy's ``lexsort`` over several (measured on 2 M rows
    with 50 x 100 up to 2 M x 100 distinct keys)."""
    if not codes:
        return None
    key, top = codes[0].astype(np.int64, copy=False), int(codes[0].max(initial=0))
    for c in codes[1:]:
        radix = int(c.max(initial=0)) + 1
        top = top * radix + radix - 1
        if top >= 1 << 62:
            return None
        key = key * radix + c
    return key


def group_order(codes: list[np.ndarray], n: int) -> np.ndarray:
    """The stable order of ``n`` rows by their key ``codes`` (dense, from :func:`_codes`),
    the first the primary: a radix sort when the combined key fits in 16 bits."""
    if not n:
        return np.zeros(0, np.int64)
    key = combined_codes(codes)
    if key is None:
        return np.lexsort(tuple(reversed(codes)))
    small = key.astype(np.int16) if int(key.max()) < (1 << 15) else key
    return np.argsort(small, kind="stable")


def _ordered(column: pa.ChunkedArray, order):
    """``(arrow type, valid, values)`` of an argument in row order (NULLs as 0, skipped)."""
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)[order]
    dtype = np.int64 if pa.types.is_integer(column.type) else np.float64
    x = column.fill_null(0).to_numpy().astype(dtype, copy=False)[order]
    return column.type, valid, x


def _codes(column: pa.ChunkedArray) -> np.ndarray:
    """Dense integer codes of a key column, NULL its own code (Spark groups NULLs). Spark
    normalises floating keys: ``-0.0`` groups with ``0.0`` and every NaN with every other."""
    column = column.combine_chunks()
    if pa.types.is_floating(column.type):
        x = column.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
        x = np.where(np.isnan(x), np.nan, x + 0.0)  # -0.0 + 0.0 is 0.0; one NaN
        column = pa.array(x, mask=np.asarray(column.is_null().to_numpy(
            zero_copy_only=False), dtype=bool))
    encoded = column.dictionary_encode(null_encoding="encode")
    return np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)


def _segments(sorted_codes: list[np.ndarray], n: int) -> np.ndarray:
    """Segment number of each sorted row: a new segment wherever any code changes."""
    change = np.zeros(n, dtype=bool)
    for c in sorted_codes:
        change[1:] |= c[1:] != c[:-1]
    return np.cumsum(change)


#: Width of the packed (segment, time) keys one search handles (int64 with room to spare).
_KEY_SPACE = 1 << 61


def _frames(us, has_time, segment, before: int, after: int):
    """Row ranges ``[lo, hi)`` of every row's frame (rows sorted by segment, then NULL times
    first, then time).

    Each row gets one sortable key, its segment's offset plus its time relative to the
    segment's first, so one ``searchsorted`` finds every frame; segments whose keys would
    not fit in int64 together (many keys over a long span) are searched in batches."""
    n = len(us)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, segment[1:] != segment[:-1]])
    sizes = np.diff(np.r_[starts, n])
    big = np.iinfo(np.int64).max
    first = np.minimum.reduceat(np.where(has_time, us, big), starts)
    last = np.maximum.reduceat(np.where(has_time, us, -big), starts)
    span = np.where(first <= last, last - np.minimum(first, last), 0)
    width = span + (before + max(after, 0) + abs(min(after, 0)) + 4)
    if (width >= _KEY_SPACE).any():
        raise ValueError("time window partition spans too long to index")
    batch = (np.cumsum(width.astype(np.float64)) // float(_KEY_SPACE)).astype(np.int64)
    lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
    for b in np.unique(batch):
        segs = np.flatnonzero(batch == b)
        r0, r1 = int(starts[segs[0]]), int(starts[segs[-1]] + sizes[segs[-1]])
        w = width[segs]
        base = np.repeat(np.cumsum(w) - w + 1, sizes[segs])
        t0 = np.repeat(np.where(first[segs] <= last[segs], first[segs], 0), sizes[segs])
        lo[r0:r1], hi[r0:r1] = _search(us[r0:r1], has_time[r0:r1], base, t0, before, after)
        lo[r0:r1] += r0
        hi[r0:r1] += r0
    return lo, np.maximum(hi, lo)


def _search(us, has_time, base, t0, before: int, after: int):
    """``_frames`` over rows whose packed keys fit: ``base`` the row's segment offset, ``t0``
    its segment's first time."""
    if has_time.all():  # no NULL times (the usual case): no peer groups of them to find
        key = base + (us - t0 + before + 1)
        lo = np.searchsorted(key, key - before, side="left")
        if after == 0 and bool((key[1:] > key[:-1]).all()):
            return lo, np.arange(1, len(key) + 1)  # distinct times: a frame ends at its row
        return lo, np.searchsorted(key, key + after, side="right")
    key = base + np.where(has_time, us - t0 + before + 1, 0)
    lo = np.searchsorted(key, np.where(has_time, key - before, base), side="left")
    hi = np.searchsorted(key, np.where(has_time, key + after, base), side="right")
    # NULL-time rows (key = base) are peers of each other only: the rows at their base
    return lo, hi


def aggregate_frames(func: str, ordered: tuple, lo, hi, sums: dict | None = None) -> pa.Array:
    """``func`` of ``ordered`` (``(arrow type, valid, values)``) over the frames ``[lo,
    hi)``; ``sums``: a dict kept by the caller for one argument and frame, where ``avg`` and
    the spreads share the frames' DOUBLE sums (fraud's mean and standard deviation)."""
    arrow_type, valid, x = ordered
    integral = pa.types.is_integer(arrow_type)
    count = _prefix_count(valid, lo, hi)
    empty = count == 0
    if func == "count":
        return pa.array(count, pa.int64())
    if func in ("min", "max"):
        result = _extreme(func, x, valid, lo, hi, integral)
        return pa.array(result, mask=empty).cast(arrow_type)
    if func == "sum":
        total = _sum(x, lo, hi, integral)
        if integral:
            _check_long_sum(x, lo, hi, total)
        return pa.array(total, mask=empty, type=pa.int64() if integral else pa.float64())
    sums = {} if sums is None else sums
    if func == "avg":  # Spark sums an average in DOUBLE, integral arguments too
        if "sum" not in sums:
            sums["sum"] = _sum(x.astype(np.float64, copy=False), lo, hi, False)
        with np.errstate(invalid="ignore", divide="ignore"):
            return pa.array(sums["sum"] / np.maximum(count, 1), mask=empty, type=pa.float64())
    # spread
    sample = func.endswith("_samp")
    var = _variance(x.astype(np.float64, copy=False), valid, lo, hi, count, sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = var / (count - 1 if sample else count)
    if func.startswith("stddev"):
        var = np.sqrt(var)
    return pa.array(var, mask=empty | (sample & (count == 1)), type=pa.float64())


def _merge_moments(a: tuple, b: tuple) -> tuple:
    """Chan et al.'s pairwise update of (count, mean, sum of squared deviations)."""
    na, ma, sa = a
    nb, mb, sb = b
    n = na + nb
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(n > 0, nb / n, 0.0)
        delta = mb - ma
        mean = ma + delta * share
        m2 = sa + sb + delta * delta * na * share
    return n, mean, m2


def merged_moments(count, mean, m2, lo, hi) -> tuple:
    """(count, mean, sum of squared deviations) of the partials ``[lo, hi)`` merged by
    :func:`_merge_moments` pairwise (a segment tree): the partials of rows (count 1 or 0,
    the value, 0) or of groups of rows (a pane's) alike."""
    return _tree_query((count.astype(np.float64), mean, m2), lo, hi, _merge_moments)


def _check_long_sum(x, lo, hi, total) -> None:
    """Raise as Spark (ANSI mode) does when a BIGINT sum overflows. The int64 prefix sums
    give every frame's sum exactly modulo 2^64; a float sum, good to far better than 2^63,
    tells which multiple of 2^64 away the true sum is."""
    if len(x) == 0 or float(np.abs(x).max()) * float(np.max(hi - lo, initial=0)) < 2.0 ** 62:
        return
    estimate = _sum(x.astype(np.float64), lo, hi, False)
    wraps = np.round((estimate - total.astype(np.float64)) / 2.0 ** 64)
    if (wraps != 0).any():
        raise ArithmeticError("[ARITHMETIC_OVERFLOW] long overflow: a window's sum() exceeds "
                              "BIGINT; cast its argument to DOUBLE or DECIMAL")


def _prefix_count(valid, lo, hi) -> np.ndarray:
    if valid.all():  # no NULLs (the usual case): a frame counts its rows
        return (hi - lo).astype(np.int64, copy=False)
    c = np.concatenate([[0], np.cumsum(valid, dtype=np.int64)])
    return c[hi] - c[lo]


def _narrow(lo, hi) -> bool:
    return len(lo) == 0 or float(np.mean(hi - lo)) <= NARROW


def _sum(x, lo, hi, integral: bool) -> np.ndarray:
    """Sum of ``x[lo:hi]`` per row (0 for an empty range)."""
    if integral:
        c = np.concatenate([[0], np.cumsum(x, dtype=np.int64)])
        return c[hi] - c[lo]
    if _narrow(lo, hi):
        return _row_order_sum(x, lo, hi)
    finite = np.isfinite(x)
    (total,) = _tree_query((np.where(finite, x, 0.0),), lo, hi, lambda a, b: (a[0] + b[0],))
    if not finite.all():
        for bad in (np.nan, np.inf, -np.inf):
            hit = np.isnan(x) if bad != bad else x == bad
            k = np.concatenate([[0], np.cumsum(hit, dtype=np.int64)])
            # nan + anything = nan, inf + -inf = nan: numpy's own addition decides
            with np.errstate(invalid="ignore"):
                total = np.where(k[hi] > k[lo], total + bad, total)
    return total


def _row_order_sum(x, lo, hi) -> np.ndarray:
    """``0.0 + x[lo] + x[lo + 1] + ... + x[hi - 1]`` per row, added in that order, as Spark
    re-aggregates a sliding frame (``np.add.reduceat`` adds in blocks of eight, which differs
    in the last bits). NULLs are 0.0 here, which leaves a sum as it is (it starts at +0.0,
    so it is never -0.0). One vector addition per frame position, over blocks of rows small
    enough to stay in cache: O(rows x widest frame of the block)."""
    n = len(lo)
    total = np.zeros(n)
    width = hi - lo
    last = max(len(x) - 1, 0)
    with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf is NaN, as in Spark
        for s in range(0, n, _SUM_BLOCK):
            start, wide = lo[s:s + _SUM_BLOCK], width[s:s + _SUM_BLOCK]
            acc = total[s:s + _SUM_BLOCK]
            at = start.copy()
            full, widest = int(wide.min()), int(wide.max())
            if len(start) > 1 and bool((np.diff(start) == 1).all()):
                # each row's frame starts one row after the previous one's (regular ticks):
                # the values at a position are a slice, no gather
                first, rows = int(start[0]), len(start)
                for k in range(full):
                    acc += x[first + k:first + k + rows]
                at += full
            else:
                for _ in range(full):  # every frame of the block has a value here
                    acc += x[at]
                    at += 1
            for k in range(full, widest):
                np.minimum(at, last, out=at)
                acc += np.where(wide > k, x[at], 0.0)
                at += 1
    return total


#: Rows summed together by :func:`_row_order_sum` (its arrays stay in the CPU's cache).
_SUM_BLOCK = 1 << 14


def _tree_query(leaves: tuple, lo, hi, merge, identity: float = 0.0) -> tuple:
    """Merge of ``leaves[lo:hi]`` per row, by a bottom-up segment tree, vectorised over the
    rows: O(n log n), and every value is combined with others of its own magnitude
    (pairwise), so a wide frame's sum or spread is as accurate as summing it directly --
    unlike differences of running totals, which inherit the error of the whole prefix.
    ``identity`` is ``merge``'s neutral value (0 for sums and moments, the fill for min/max);
    each leaf keeps its dtype (int64 min/max stay exact)."""
    n = len(leaves[0])
    size = 1
    while size < max(n, 1):
        size *= 2
    tree = []
    for leaf in leaves:
        # one slot past the tree: a range ending at the last leaf of a full tree (``hi`` =
        # ``size``) reads it, unused, while its other end is still climbing
        t = np.full(2 * size + 1, identity, dtype=leaf.dtype)
        t[size:size + n] = leaf
        tree.append(t)
    for level_start in _levels(size):
        idx = np.arange(level_start, 2 * level_start)
        merged = merge(tuple(t[2 * idx] for t in tree), tuple(t[2 * idx + 1] for t in tree))
        for t, m in zip(tree, merged):
            t[idx] = m
    left, right = lo + size, hi + size
    acc_l = tuple(np.full(len(lo), identity, dtype=leaf.dtype) for leaf in leaves)
    acc_r = tuple(np.full(len(lo), identity, dtype=leaf.dtype) for leaf in leaves)
    while True:
        active = left < right
        if not active.any():
            break
        take = active & (left % 2 == 1)
        acc_l = _merge_where(take, merge(acc_l, tuple(t[left] for t in tree)), acc_l)
        left = left + take
        take = active & (right % 2 == 1)
        right = right - take
        acc_r = _merge_where(take, merge(tuple(t[right] for t in tree), acc_r), acc_r)
        left, right = left // 2, right // 2
    return merge(acc_l, acc_r)


def _merge_where(mask, merged: tuple, old: tuple) -> tuple:
    return tuple(np.where(mask, m, o) for m, o in zip(merged, old))


def _levels(size: int):
    level = size // 2
    while level >= 1:
        yield level
        level //= 2


def _reduce(ufunc, x, lo, hi, identity) -> np.ndarray:
    """``ufunc.reduce(x[lo:hi])`` per row, in row order, ``identity`` for empty ranges."""
    if len(lo) == 0:
        return np.zeros(0, dtype=x.dtype)
    padded = np.append(x, np.asarray([identity], dtype=x.dtype))
    idx = np.empty(2 * len(lo), dtype=np.int64)
    idx[0::2], idx[1::2] = lo, hi
    out = ufunc.reduceat(padded, idx)[0::2]
    return np.where(hi > lo, out, identity)


def _extreme(func: str, x, valid, lo, hi, integral: bool) -> np.ndarray:
    """min / max over each range, NULLs skipped (their rows answer NULL elsewhere)."""
    if integral:
        info = np.iinfo(np.int64)
        fill = info.max if func == "min" else info.min
    else:
        fill = np.inf if func == "min" else -np.inf
    y = np.where(valid, x, fill)
    # max: NaN is the greatest value (np.maximum propagates it); min: NaN only if all are
    # (np.fmin skips it) -- Spark's ordering of NaN.
    ufunc = np.fmin if func == "min" else np.maximum
    if _narrow(lo, hi):
        out = _reduce(ufunc, y, lo, hi, fill)
    else:
        (out,) = _tree_query((y,), lo, hi, lambda a, b: (ufunc(a[0], b[0]),), identity=fill)
        out = np.where(hi > lo, out, fill)
    if func == "min" and not integral:
        nan = valid & np.isnan(x)
        if nan.any():  # frames whose values are all NaN: their minimum is NaN
            every = _prefix_count(nan, lo, hi) == _prefix_count(valid, lo, hi)
            out = np.where(every & (hi > lo), np.nan, out)
    return out


def _variance(x, valid, lo, hi, count, sums: dict | None = None) -> np.ndarray:
    """Sum of squared deviations from the frame's mean, per row (two passes); ``sums`` as
    :func:`_aggregate`'s (narrow frames of finite values: the frames' sums are avg's)."""
    n = len(lo)
    out = np.zeros(n)
    if n == 0:
        return out
    y = np.where(valid, x, 0.0)
    finite = np.isfinite(y)
    if finite.all():  # the usual case: no frame is made NaN by an infinity or NaN
        nonfinite = np.zeros(n, dtype=bool)
    else:
        bad = np.concatenate([[0], np.cumsum(~finite, dtype=np.int64)])
        nonfinite = bad[hi] > bad[lo]
        y = np.where(finite, y, 0.0)
    width = hi - lo
    if _narrow(lo, hi) and int(width.max()) <= 8 * NARROW:
        # about each frame's own mean: one vector step per frame position, over blocks of
        # rows that stay in cache (as _row_order_sum)
        # NULLs are 0.0 in ``x`` already: with every value finite, ``y`` is ``x`` and its
        # row-order sums are the ones avg takes (``_sum`` of narrow frames)
        shared = sums is not None and finite.all()
        if not shared or "sum" not in sums:
            total = _row_order_sum(y, lo, hi)
            if shared:
                sums["sum"] = total
        mean = (sums["sum"] if shared else total) / np.maximum(count, 1)
        last = max(len(y) - 1, 0)
        every = bool(valid.all())
        for s in range(0, n, _SUM_BLOCK):
            start, wide = lo[s:s + _SUM_BLOCK], width[s:s + _SUM_BLOCK]
            centre, acc = mean[s:s + _SUM_BLOCK], out[s:s + _SUM_BLOCK]
            at = start.copy()
            full = int(wide.min(initial=0))  # positions every frame of the block has
            for k in range(int(wide.max(initial=0))):
                if k >= full:
                    np.minimum(at, last, out=at)
                d = y[at] - centre
                if not every:
                    d = np.where(valid[at], d, 0.0)
                if k >= full:
                    d = np.where(wide > k, d, 0.0)
                acc += d * d
                at += 1
    else:
        ones = valid.astype(np.float64)
        _, _, m2 = _tree_query((ones, y, np.zeros(len(y))), lo, hi, _merge_moments)
        out = np.maximum(m2, 0.0)
    return np.where(nonfinite, np.nan, out)
