"""Kernel of fused query chains: a chain of SELECTs over one stream -- scalar expressions,
WHEREs, ``lag`` and RANGE-framed OVER windows ordered by event time -- evaluated in one numpy
pass over one range of event time (no Spark import).

This is TiLT's whole-query compilation on WaveSQL's terms. planner/physical/fused_compiler.py
compiles a chain such as TiLT's RSI (``d = v - lag(v)``, two sums of ``max(d, 0)``-like CASEs
over 14 ms, then ``100 - 100 / (1 + gain / loss)``) into a :class:`Program`; each Spark task
reads its range of the stream's Parquet files (sources/parquet_chunks.py) with enough rows
before it for every level's reach, runs the whole program over them here, and returns only its
own rows. No intermediate result crosses into the JVM, and no level runs in Spark's single
partition.

**Completeness.** A task reads every row from some time ``T0`` on (all row groups that reach
it); rows before ``T0`` may be missing. A level's value at a row is *complete* when it depends
only on complete values of the level below: a frame ``[t - a, t]`` is complete once ``t - a``
is at or after the lower level's complete-from time, ``lag(x, n)`` once the row ``n`` places
back is complete. :func:`run` carries that time through the levels and returns None when the
range's first own row is not complete at the top; the planner then reads further back. (A
read that starts at the stream's first row is complete throughout.)

**Semantics are Spark's** (tests/test_fused_chain.py compares every construct with Spark's own
plan): NULLs propagate, AND/OR are three-valued and short-circuit as Spark evaluates them (a
division by zero in a CASE branch not taken is no error); comparisons order NaN above every
number and equal to itself; ``/`` is in DOUBLE; integer ``+ - *`` raise on overflow and any
``/ 0`` raises when ANSI mode is on (as Spark: ``[DIVIDE_BY_ZERO]``, ``[ARITHMETIC_OVERFLOW]``)
and give NULL / wrap when it is off; integer literals are INT (BIGINT beyond), decimal
literals meet only FLOAT/DOUBLE (then DOUBLE). Types: ``boolean``, ``int``, ``bigint``,
``float``, ``double``, ``timestamp`` (microseconds), and ``null`` for a NULL literal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from wavesql.udfs import time_windows as windows

#: Numeric types, narrowest first (Spark widens along this order).
NUMERIC = ("int", "bigint", "float", "double")
#: Spark type name -> the numpy dtype values are held in.
DTYPES = {"boolean": np.bool_, "int": np.int32, "bigint": np.int64, "float": np.float32,
          "double": np.float64, "timestamp": np.int64}
ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "bigint": pa.int64(),
         "float": pa.float32(), "double": pa.float64(), "timestamp": pa.int64()}
_INF = np.iinfo(np.int64).max


@dataclass(frozen=True)
class Window:
    """A window of one level: ``lag`` (``n`` rows back, ``default`` a literal node or None)
    or a :data:`udfs.time_windows.FUNCTIONS` aggregate over ``[t - before, t + after]`` (us,
    ``after`` <= 0) among the rows of equal ``keys`` (PARTITION BY: expression nodes);
    ``arg`` an expression node (None: ``count(*)``) of type ``arg_type``."""

    func: str
    arg: tuple | None
    arg_type: str | None
    n: int = 1
    default: tuple | None = None
    before: int = 0
    after: int = 0
    keys: tuple = ()
    #: the whole partition (``OVER (PARTITION BY <tumbling window>, ...)``, no ORDER BY):
    #: one value per partition; its keys hold the window instant, so partitions lie within
    #: one tumbling window of width ``before``
    whole: bool = False


@dataclass(frozen=True)
class Lookup:
    """A join of a level's input rows with a small relation every task is handed whole
    (a per-window aggregate, planner/physical/fused_joins.py): a row joins the relation's rows whose
    column ``right_key`` equals the row's ``key`` (a node over the level's input; both of
    type ``key_type``, an integral or timestamp type: equality is exact). ``columns``:
    ``(relation column, its name in the level's scope, type)``. As a join does, a row
    matching several relation rows is repeated once per match (in the relation's order);
    a row matching none is dropped (``inner``) or kept with NULLs (LEFT JOIN); a NULL key
    matches nothing. ``table``: the relation's index among the tables :func:`run` is
    given."""

    table: int
    key: tuple
    key_type: str
    right_key: str
    columns: tuple[tuple[str, str, str], ...]
    inner: bool = False
    #: the level's WHERE conjuncts that read only its input: applied before the join
    where: tuple | None = None


@dataclass(frozen=True)
class Level:
    """One SELECT: ``where`` (node or None) filters its input, then ``windows`` are evaluated
    (nodes ``("win", i, type)`` read them), then ``outputs`` ``(name, node)`` are its rows.
    With ``group`` (GROUP BY key nodes, ``group[bucket]`` the tumbling window instant) its
    rows are the groups: ``windows`` are the aggregates (whole over the group), outputs read
    the keys as ``("col", "__g<i>")``, and ``having`` filters the groups. With ``total``
    (the top level only) its one row holds its windows over the range's own rows."""

    where: tuple | None
    windows: tuple[Window, ...]
    outputs: tuple[tuple[str, tuple], ...]
    group: tuple | None = None
    bucket: int = 0
    having: tuple | None = None
    #: the top level is an aggregate without GROUP BY: one row per range, its windows (whole,
    #: no keys) over the range's own rows -- partial aggregates Spark merges (the planner)
    total: bool = False
    #: the level's FROM joins a small relation (before its WHERE, as SQL's FROM does)
    lookup: Lookup | None = None


@dataclass(frozen=True)
class Program:
    """``inputs``: the stream's columns read, ``(name, type)``; ``time``: its event time;
    ``bucket``: ``(name, width)`` of the tumbling window instant the input carries (a CQL
    ``[RANGE w SLIDE w]``: ``ceil(t / w) * w``), or None."""

    inputs: tuple[tuple[str, str], ...]
    time: str
    levels: tuple[Level, ...]
    bucket: tuple[str, int] | None = None


def nodes(node):
    """``node`` and every expression node below it."""
    yield node
    op = node[0]
    if op in ("cast", "neg", "abs", "not", "sqrt", "pmod", "floordiv"):
        children = (node[1],)
    elif op in ("arith", "cmp", "nullsafe"):
        children = (node[2], node[3])
    elif op == "isnull":
        children = (node[2],)
    elif op in ("and", "or"):
        children = (node[1], node[2])
    elif op == "case":
        children = tuple(x for pair in node[1] for x in pair) + (
            () if node[2] is None else (node[2],))
    elif op == "coalesce":
        children = node[1]
    else:  # col, win, lit
        children = ()
    for child in children:
        yield from nodes(child)


class ChainError(ArithmeticError):
    """A row's arithmetic fails as Spark's would (ANSI mode): ``[CODE] message``."""


# ------------------------------------------------------------------------------- running
def run(table: pa.Table, program: Program, start: int, complete_from: int | None,
        ansi: bool, lookups=()) -> list | None:
    """The top level's columns, ``(values, valid)`` in order, for the rows of ``table`` at
    ``start`` or later, or None when they are not complete (read further back).
    ``complete_from``: every row of the stream from this time (us) on is in ``table``;
    None: ``table`` starts at the stream's first row. ``lookups``: the relations the
    levels' :class:`Lookup` joins read (Arrow tables, by index)."""
    us = table.column(program.time).cast(pa.timestamp("us")).cast(pa.int64()).to_numpy()
    order = None if len(us) < 2 or bool((us[1:] >= us[:-1]).all()) else \
        np.argsort(us, kind="stable")
    if order is not None:
        us = us[order]
    cols = {}
    for name, kind in program.inputs:
        values, valid = _vector(table.column(name), kind)
        cols[name.lower()] = (values, valid) if order is None else (values[order], valid[order])
    if program.bucket is not None:  # the window instant: the smallest multiple >= t
        name, width = program.bucket
        cols[name.lower()] = (us + (-us) % width, np.ones(len(us), dtype=bool))
    done = complete_from
    for level in program.levels:
        if level.lookup is not None:  # complete where its input is: a row-by-row join
            if level.lookup.where is not None:
                us, cols = _filter(level.lookup.where, cols, us, ansi)
            us, cols = _join(level.lookup, cols, us, lookups[level.lookup.table], ansi)
        if level.where is not None:  # (a column only the WHERE reads: not kept)
            us, cols = _filter(level.where, cols, us, ansi, _read_after_where(level))
        n = len(us)
        everywhere = np.ones(n, dtype=bool)
        if level.total:  # the top: the own rows' partial aggregates, or None (incomplete)
            if done is not None and done > start:
                return None
            own = us >= start
            if not own.all():
                cols = {k: (v[own], m[own]) for k, (v, m) in cols.items()}
            return _totals(level, cols, int(own.sum()), ansi)
        if level.group is not None:  # the top level, or the one below a total
            us, outputs, done = _grouped(level, cols, us, done, ansi, program.bucket[1])
            cols = {name.lower(): vec for (name, _), vec in zip(level.outputs, outputs)}
            continue
        results, reaches, shared = [], [done], {}
        for w in level.windows:  # all over the level's input, complete from ``done``
            if w is None:  # no output reads it
                results.append(None)
                continue
            if w not in shared:  # the same window twice (rms and crest's avg(v * v)): once
                shared[w] = _window(w, cols, us, done, ansi, shared)
            vec, reach = shared[w]
            results.append(vec)
            reaches.append(reach)
        done = None if done is None else max(reaches)
        outputs = [_eval(node, cols, results, everywhere, ansi) for _, node in level.outputs]
        cols = {name.lower(): vec for (name, _), vec in zip(level.outputs, outputs)}
    if done is not None and done > start:
        return None
    own = us >= start
    return [(v[own], m[own]) for v, m in outputs]


def _filter(condition, cols, us, ansi, read=None):
    """``(times, columns)`` of the rows where ``condition`` is true; ``read``: the columns
    to keep (all when None)."""
    values, valid = _eval(condition, cols, (), np.ones(len(us), dtype=bool), ansi)
    keep = values & valid
    if keep.all():
        return us, cols
    rows = np.flatnonzero(keep)  # one index for every column: cheaper than masks
    return us.take(rows), {k: (v.take(rows), m.take(rows)) for k, (v, m) in cols.items()
                           if read is None or k in read}


def _join(lookup: Lookup, cols, us, table: pa.Table, ansi):
    """``(times, columns)`` of a level's input joined with ``table`` (:class:`Lookup`)."""
    n = len(us)
    key, known = _eval(lookup.key, cols, (), np.ones(n, dtype=bool), ansi)
    right, right_known = _vector(table.column(lookup.right_key), lookup.key_type)
    if right_known.all() and bool((right[1:] >= right[:-1]).all()):
        order = None  # in key order already (an aggregate per window, in time order)
    else:
        present = np.flatnonzero(right_known)  # a NULL key matches nothing
        order = present[np.argsort(right[present], kind="stable")]
        right = right[order]
    at, counts = _matches(key, known, right)  # ``at`` len(right): no match
    if bool((right[1:] != right[:-1]).all()):  # distinct keys (the usual lookup): no copies
        if lookup.inner and not bool((counts == 1).all()):
            rows = np.flatnonzero(counts)
            us, at = us[rows], at[rows]
            cols = {k: (v[rows], valid[rows]) for k, (v, valid) in cols.items()}
    else:  # a row joins each of its matches, or (LEFT JOIN) once with none
        repeats = counts if lookup.inner else np.maximum(counts, 1)
        rows = np.repeat(np.arange(n), repeats)
        first = np.cumsum(repeats) - repeats  # each row's first copy
        at = np.repeat(at - first, repeats) + np.arange(len(rows))  # (none: stays past)
        us = us[rows]
        cols = {k: (v[rows], valid[rows]) for k, (v, valid) in cols.items()}
    if order is not None:
        at = np.append(order, table.num_rows)[at]  # (the sentinel: one past the end)
    cols = dict(cols)
    for column, name, kind in lookup.columns:
        values, valid = _vector(table.column(column), kind)
        # one more row, NULL, for the rows without a match
        cols[name] = (np.append(values, values.dtype.type(0))[at],
                      np.append(valid, False)[at])
    return us, cols


def _matches(key, known, right):
    """``(at, count)`` per row: the first of the ``right`` keys (sorted) equal to the row's
    ``key`` and how many there are; ``at`` is ``len(right)`` where there is none (and for
    a NULL key, ``known`` false)."""
    n, m = len(key), len(right)
    if n > 1 and m and known.all() and bool((key[1:] >= key[:-1]).all()):
        # keys in time order (a window instant, a bucket): each distinct right key's rows
        # are one run, found by two searches -- not two searches per row
        values, first, count = np.unique(right, return_index=True, return_counts=True)
        u = len(values)
        edges = np.empty(2 * u + 2, dtype=np.int64)
        edges[0], edges[-1] = 0, n
        edges[1:-1:2] = np.searchsorted(key, values, side="left")
        edges[2:-1:2] = np.searchsorted(key, values, side="right")
        which = np.full(2 * u + 1, u)  # between the runs: no match (index u: count 0)
        which[1::2] = np.arange(u)
        k = np.repeat(which, np.diff(edges))
        return np.append(first, m)[k], np.append(count, 0)[k]
    lo = np.searchsorted(right, key, side="left")
    counts = np.where(known, np.searchsorted(right, key, side="right") - lo, 0)
    return np.where(counts > 0, lo, m), counts


def _read_after_where(level: Level) -> set[str]:
    """The input columns (lower-case) a level reads after its WHERE: its windows', group
    keys' and (not grouped) outputs' (a grouped level's outputs read its groups)."""
    roots = [] if level.group is not None else [e for _, e in level.outputs]
    roots += list(level.group or ()) + [e for w in level.windows if w is not None
                                        for e in (w.arg, w.default, *w.keys)]
    return {node[1].lower() for root in roots if root is not None
            for node in nodes(root) if node[0] == "col"}


def to_arrow(values, valid, kind: str) -> pa.Array:
    if kind == "timestamp":
        return pa.array(values, mask=~valid, type=pa.int64()).cast(pa.timestamp("us", "UTC"))
    return pa.array(values, mask=~valid, type=ARROW[kind])


def _vector(column: pa.ChunkedArray, kind: str):
    """``(values, valid)`` of an Arrow column (NULLs as 0 / false, never read)."""
    if kind == "timestamp":
        column = column.cast(pa.timestamp("us")).cast(pa.int64())
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = column.fill_null(False if kind == "boolean" else 0).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=DTYPES[kind]), valid


def _window(w: Window, cols, us, done, ansi, shared: dict):
    """``((values, valid), complete-from time)`` of one window over a level's rows;
    ``shared``: what the level's windows share -- frames by ``("frames", before, after,
    keys)``, partitions by ``("partitions", keys)`` (and the windows themselves)."""
    n = len(us)
    everywhere = np.ones(n, dtype=bool)
    if w.func == "lag":
        values, valid = _eval(w.arg, cols, (), everywhere, ansi)
        k = min(w.n, n)  # the first k rows have no row n back: the default
        out_v, out_m = np.empty_like(values), np.zeros(n, dtype=bool)
        out_v[k:], out_m[k:] = values[:n - k], valid[:n - k]
        out_v[:k] = 0
        if w.default is not None and k:
            out_v[:k], out_m[:k] = _eval(w.default, cols, (), everywhere[:k], ansi)
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
        values, valid = _eval(w.arg, cols, (), everywhere, ansi)
        integral = w.arg_type in ("int", "bigint")
        # the window kernel reads NULLs as zeros (an expression's NULL rows hold anything)
        x = np.where(valid, values, 0).astype(np.int64 if integral else np.float64, copy=False)
        if order is not None:
            x, valid = x[order], valid[order]
        result = windows.aggregate_frames(w.func, (ARROW[w.arg_type], valid, x), lo, hi,
                                    shared.setdefault(("sums", shape, w.arg), {}))
    values, valid = _vector(pa.chunked_array([result]), result_type(w.func, w.arg_type))
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
    vectors = [_eval(key, cols, (), everywhere, ansi) for key in keys]
    if n and len(vectors) == 1:
        values, valid = vectors[0]
        if values.dtype.kind in "iub" and valid.all() and bool((values[1:] >= values[:-1]).all()):
            starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
            return None, starts, np.diff(np.r_[starts, n]), vectors
    codes = [windows._codes(pa.chunked_array([pa.array(values, mask=~valid)]))
             for values, valid in vectors]
    order = windows.group_order(codes, n)  # stable: time order holds within a group
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
    values, valid = _eval(w.arg, cols, (), np.ones(int(sizes.sum()), dtype=bool), ansi)
    if order is not None:
        values, valid = values[order], valid[order]
    return _group(w.func, w.arg_type, values, valid, starts, sizes, ansi)


def _grouped(level: Level, cols, us, done, ansi, width: int):
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
        values, valid = _eval(level.having, group_cols, results, everywhere, ansi)
        keep = values & valid
        instants = instants[keep]
        group_cols = {k: (v[keep], m[keep]) for k, (v, m) in group_cols.items()}
        results = [None if r is None else (r[0][keep], r[1][keep]) for r in results]
    everywhere = np.ones(len(instants), dtype=bool)
    outputs = [_eval(node, group_cols, results, everywhere, ansi) for _, node in level.outputs]
    return instants, outputs, _whole_windows_from(done, width)


def _totals(level: Level, cols, n: int, ansi):
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
    one = np.ones(1, dtype=bool)
    return [_eval(node, {}, results, one, ansi) for _, node in level.outputs]


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
            _overflow("bigint")
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
    lo, hi = windows._frames(us if order is None else us[order], np.ones(n, dtype=bool),
                             segment, w.before, w.after)
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


def result_type(func: str, arg_type: str | None) -> str:
    """Spark's result type of a window function or aggregate over ``arg_type``."""
    rule = windows.FUNCTIONS.get(func, "double")  # kurtosis, skewness
    if func == "lag" or rule == "arg":
        return arg_type
    if rule == "sum":
        return "bigint" if arg_type in ("int", "bigint") else "double"
    return rule


# ------------------------------------------------------------------------- expressions
def _eval(node: tuple, cols, wins, active, ansi):
    """``(values, valid)`` of an expression node over every row; ``active``: the rows Spark
    evaluates it for (a CASE branch only where it is taken), the only ones that may raise."""
    op = node[0]
    if op == "col":
        return cols[node[1]]
    if op == "win":
        return wins[node[1]]
    if op == "lit":
        _, value, kind = node
        n = len(active)
        if value is None:
            return np.zeros(n, dtype=DTYPES.get(kind, np.float64)), np.zeros(n, dtype=bool)
        return np.full(n, value, dtype=DTYPES[kind]), np.ones(n, dtype=bool)
    if op == "cast":  # (no copy between types held alike: unix_micros, timestamp_micros)
        values, valid = _eval(node[1], cols, wins, active, ansi)
        return values.astype(DTYPES[node[2]], copy=False), valid
    if op == "arith":
        return _arith(node, cols, wins, active, ansi)
    if op == "neg":
        values, valid = _eval(node[1], cols, wins, active, ansi)
        if node[2] in ("int", "bigint"):
            smallest = np.iinfo(DTYPES[node[2]]).min
            if ansi and (active & valid & (values == smallest)).any():
                _overflow(node[2])
        with np.errstate(over="ignore"):
            return -values, valid
    if op == "abs":  # of the smallest integer: an overflow (ANSI), else itself (wraps)
        values, valid = _eval(node[1], cols, wins, active, ansi)
        if node[2] in ("int", "bigint") and ansi:
            smallest = np.iinfo(DTYPES[node[2]]).min
            if (active & valid & (values == smallest)).any():
                _overflow(node[2])
        with np.errstate(over="ignore"):
            return np.abs(values), valid
    if op == "pmod":  # by a positive literal (the planner's rule): numpy's floor modulo is
        values, valid = _eval(node[1], cols, wins, active, ansi)  # Spark's pmod then
        return np.mod(values, DTYPES[node[3]](node[2])), valid
    if op == "floordiv":  # unix_millis / unix_seconds: Math.floorDiv by a positive literal
        values, valid = _eval(node[1], cols, wins, active, ansi)
        return np.floor_divide(values, node[2]), valid
    if op == "sqrt":  # of a negative number: NaN, as Spark
        values, valid = _eval(node[1], cols, wins, active, ansi)
        with np.errstate(invalid="ignore"):
            return np.sqrt(values), valid
    if op == "cmp":
        _, how, a, b = node
        av, am = _eval(a, cols, wins, active, ansi)
        bv, bm = _eval(b, cols, wins, active, ansi)
        return _compare(how, av, bv), am & bm
    if op == "nullsafe":  # <=>, IS [NOT] DISTINCT FROM: NULL equals NULL only
        _, negate, a, b = node
        av, am = _eval(a, cols, wins, active, ansi)
        bv, bm = _eval(b, cols, wins, active, ansi)
        same = (am & bm & _compare("eq", av, bv)) | (~am & ~bm)
        return (~same if negate else same), np.ones(len(same), dtype=bool)
    if op == "isnull":
        _, negate, a = node
        _, am = _eval(a, cols, wins, active, ansi)
        return (am if negate else ~am), np.ones(len(am), dtype=bool)
    if op == "not":
        values, valid = _eval(node[1], cols, wins, active, ansi)
        return ~values, valid
    if op in ("and", "or"):
        # Spark evaluates the right side only where the left does not decide
        lv, lm = _eval(node[1], cols, wins, active, ansi)
        decided = lm & (~lv if op == "and" else lv)
        rv, rm = _eval(node[2], cols, wins, active & ~decided, ansi)
        if op == "and":
            false = (lm & ~lv) | (rm & ~rv)
            return lv & rv & lm & rm, false | (lm & rm)
        true = (lm & lv) | (rm & rv)
        return true, true | (lm & rm)
    if op == "case":
        return _case(node, cols, wins, active, ansi)
    if op == "coalesce":
        _, args, kind = node
        values = np.zeros(len(active), dtype=DTYPES[kind])
        valid = np.zeros(len(active), dtype=bool)
        for arg in args:
            v, m = _eval(arg, cols, wins, active & ~valid, ansi)
            take = ~valid & m
            values[take], valid = v[take], valid | m
        return values, valid
    raise ValueError(f"unknown node {op}")


def _case(node, cols, wins, active, ansi):
    _, branches, otherwise, kind = node
    n = len(active)
    pending = np.ones(n, dtype=bool)  # rows no earlier WHEN took
    taken = []
    for cond, value in branches:
        cv, cm = _eval(cond, cols, wins, active & pending, ansi)
        take = pending & cv & cm
        taken.append((take, _branch(value, cols, wins, active & take, ansi, kind)))
        pending &= ~take
    if otherwise is None:
        values, valid = DTYPES[kind](0), np.False_
    else:
        values, valid = _branch(otherwise, cols, wins, active & pending, ansi, kind)
    for take, (v, m) in taken:  # the WHENs take disjoint rows
        values, valid = np.where(take, v, values), np.where(take, m, valid)
    return values.astype(DTYPES[kind], copy=False), valid


def _branch(node, cols, wins, active, ansi, kind):
    """A CASE branch's ``(values, valid)``; a literal as a scalar (no array to fill)."""
    if node[0] == "lit":
        return (DTYPES[kind](0), np.False_) if node[1] is None else \
            (DTYPES[kind](node[1]), np.True_)
    return _eval(node, cols, wins, active, ansi)


def _compare(how: str, a, b):
    """Spark's ordering: for floating values NaN equals NaN and is above every number."""
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[how](a, b)
    an, bn = np.isnan(a), np.isnan(b)
    if not (an.any() or bn.any()):  # no NaN (the usual case): numpy's own order is Spark's
        return {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
                "gt": np.greater, "ge": np.greater_equal}[how](a, b)
    if how in ("gt", "ge"):
        a, b, an, bn = b, a, bn, an
        how = "lt" if how == "gt" else "le"
    eq = (a == b) | (an & bn)
    if how == "eq":
        return eq
    if how == "ne":
        return ~eq
    lt = (a < b) | (~an & bn)
    return lt if how == "lt" else lt | eq


def _arith(node, cols, wins, active, ansi):
    _, how, a, b, kind = node
    av, am = _eval(a, cols, wins, active, ansi)
    bv, bm = _eval(b, cols, wins, active, ansi)
    valid = am & bm
    if how == "/":  # DOUBLE; Spark checks the divisor first: 0 raises (ANSI) or gives NULL
        zero = bm & (bv == 0)
        if ansi and (active & zero).any():
            raise ChainError("[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to "
                             "tolerate divisor being 0 and return NULL instead." + _ANSI_OFF)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return av / np.where(zero, 1.0, bv), valid & ~zero
    ufunc = {"+": np.add, "-": np.subtract, "*": np.multiply}[how]
    if kind not in ("int", "bigint"):
        with np.errstate(over="ignore", invalid="ignore"):
            return ufunc(av, bv), valid
    with np.errstate(over="ignore"):
        if kind == "int":
            wide = ufunc(av.astype(np.int64), bv.astype(np.int64))
            bad = (wide < -(1 << 31)) | (wide >= (1 << 31))
            result = wide.astype(np.int32)
        else:
            result = ufunc(av, bv)
            bad = _long_overflow(how, av, bv, result)
    if ansi and (active & valid & bad).any():
        _overflow(kind)
    return result, valid


def _long_overflow(how: str, a, b, r):
    """Where a wrapped int64 ``a (how) b = r`` overflowed."""
    if how == "+":
        return ((a ^ r) & (b ^ r)) < 0
    if how == "-":
        return ((a ^ b) & (a ^ r)) < 0
    suspect = np.abs(a.astype(np.float64) * b.astype(np.float64)) >= 2.0 ** 62
    bad = np.zeros(len(r), dtype=bool)
    for i in np.flatnonzero(suspect):  # rare: exact in Python integers
        exact = int(a[i]) * int(b[i])
        bad[i] = not (-(1 << 63) <= exact < (1 << 63))
    return bad


def _overflow(kind: str):
    raise ChainError(f"[ARITHMETIC_OVERFLOW] {'integer' if kind == 'int' else 'long'} "
                     "overflow. Use 'try_add', 'try_subtract' or 'try_multiply' to tolerate "
                     "overflow and return NULL instead." + _ANSI_OFF)


_ANSI_OFF = ' If necessary set "spark.sql.ansi.enabled" to "false" to bypass this error.'

