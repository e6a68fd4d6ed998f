"""One pass of a fused program over one range of event time: :func:`run`.

The rows are the range's own and, before them, as many as the levels reach (a Spark task
reads them from the stream's Parquet files, sources/parquet_chunks.py, or makes them: a
RESAMPLE's grid points). :func:`run` puts them in time order, then runs the levels bottom
up -- each level's join (:class:`~.program.Lookup`, :func:`_join`), WHERE, windows
(udfs/fused/windows.py) and outputs (udfs/fused/evaluate.py) -- and returns the top
level's columns for the range's own rows, or None when those are not *complete*
(udfs/fused/__init__.py): the caller then reads further back.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .evaluate import Evaluator, evaluate
from .expr import columns_read
from .kinds import vector
from .program import Level, Lookup, Program
from .windows import grouped, totals, window


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
        values, valid = vector(table.column(name), kind)
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
            return totals(level, cols, int(own.sum()), ansi)
        if level.group is not None:  # the top level, or the one below a total
            us, outputs, done = grouped(level, cols, us, done, ansi, program.bucket[1])
            cols = {name.lower(): vec for (name, _), vec in zip(level.outputs, outputs)}
            continue
        results, reaches, shared = [], [done], {}
        for w in level.windows:  # all over the level's input, complete from ``done``
            if w is None:  # no output reads it
                results.append(None)
                continue
            if w not in shared:  # the same window twice (rms and crest's avg(v * v)): once
                shared[w] = window(w, cols, us, done, ansi, shared)
            vec, reach = shared[w]
            results.append(vec)
            reaches.append(reach)
        done = None if done is None else max(reaches)
        evaluator = Evaluator(cols, results, ansi)
        outputs = [evaluator(node, everywhere) for _, node in level.outputs]
        cols = {name.lower(): vec for (name, _), vec in zip(level.outputs, outputs)}
    if done is not None and done > start:
        return None
    own = us >= start
    return [(v[own], m[own]) for v, m in outputs]


def _filter(condition, cols, us, ansi, read=None):
    """``(times, columns)`` of the rows where ``condition`` is true; ``read``: the columns
    to keep (all when None)."""
    values, valid = evaluate(condition, cols, (), np.ones(len(us), dtype=bool), ansi)
    keep = values & valid
    if keep.all():
        return us, cols
    rows = np.flatnonzero(keep)  # one index for every column: cheaper than masks
    return us.take(rows), {k: (v.take(rows), m.take(rows)) for k, (v, m) in cols.items()
                           if read is None or k in read}


def _join(lookup: Lookup, cols, us, table: pa.Table, ansi):
    """``(times, columns)`` of a level's input joined with ``table`` (:class:`Lookup`)."""
    n = len(us)
    key, known = evaluate(lookup.key, cols, (), np.ones(n, dtype=bool), ansi)
    right, right_known = vector(table.column(lookup.right_key), lookup.key_type)
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
        values, valid = vector(table.column(column), kind)
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
    return {name.lower() for name in columns_read(roots)}
