"""Holistic aggregates in the window kernel: the values a window needs, kept whole.

``percentile`` (and ``median``), ``collect_list``, ``collect_set``, ``count(DISTINCT x)``
and ``sum(DISTINCT x)`` have no small partial: a SLIDE window's pane keeps the values of
its rows (NULLs and rows the WHERE drops left out) -- every value for ``percentile`` and
``collect_list``, each distinct value once for the others -- and an unslid window its rows,
as for every aggregate. The state is bounded by the window's rows, not the stream's.

Semantics are Spark's batch ones: ``percentile`` interpolates linearly between the two
nearest ranks (``lower_value + (position - lower) * (higher_value - lower_value)``, Spark
4's formula, to the last bit; NaN between -inf and a number), NaN the greatest value; ``percentile_approx`` is the value of rank
``ceil(p * n)`` exactly -- Spark's own answer while a window holds fewer values than its
``accuracy`` (measured: every fraction equal up to 5,000 values, off by up to 6 ranks of
100,000 at accuracy 10,000), and beyond within the rank error ``n / accuracy`` Spark
documents (NaN ranks greatest, as for ``percentile``; Spark's summary compares NaN as
unordered, so over NaN values its answer depends on their order -- ``[NaN, NaN, NaN, 1.0]``
gives NaN at every fraction in Spark 4.3, 1.0 here at 0 -- and is not followed); no
value: NULL (``collect_*``: an empty array,
``count(DISTINCT)``: 0). Distinct values are Spark's grouping's: ``-0.0`` is ``0.0`` and
every NaN one value. ``collect_list`` keeps its rows' order of arrival per pane, panes in
time order (Spark's order is its partitions', undefined too).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: The holistic aggregates (``window_types.HOLISTIC``) of distinct values: a pane keeps
#: each value once.
DISTINCT = ("collect_set", "count_distinct", "sum_distinct")


def kept(func: str) -> str:
    """What a pane keeps of ``func``'s values: all of them or the distinct ones."""
    return "collect_set" if func in DISTINCT else "collect_list"


def flattened(lists: np.ndarray, lo, hi):
    """``(values, lo, hi)``: the lists (an object array of arrays) end to end, and the
    ranges of values that the ranges ``[lo, hi)`` of lists cover."""
    sizes = np.fromiter((len(a) for a in lists), np.int64, len(lists))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    values = np.concatenate(list(lists)) if len(lists) else np.zeros(0)
    return values, offsets[lo], offsets[hi]


def evaluate(func: str, param: tuple, many: bool, valid, x, lo, hi):
    """``(values, NULL mask)`` of ``func`` over each range ``[lo, hi)`` of the values ``x``
    (``valid``: not NULL, the row passes). ``param``: percentile's fractions (an array of
    them when ``many``)."""
    sizes = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(len(lo)), sizes)
    at = np.arange(len(owner)) - np.repeat(np.cumsum(sizes) - sizes, sizes) + np.repeat(lo, sizes)
    keep = valid[at]
    owner, x = owner[keep], x[at[keep]]
    if func == "collect_list":
        return _lists(x, owner, len(lo)), np.zeros(len(lo), bool)
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), np.nan, x + 0.0)  # one NaN, -0.0 is 0.0 (Spark's grouping)
    rank = pd.factorize(x, sort=True, use_na_sentinel=False)[0]  # NaN last, as Spark sorts
    order = np.lexsort((rank, owner))
    owner, x, rank = owner[order], x[order], rank[order]
    if func in DISTINCT:
        first = np.ones(len(owner), bool)
        first[1:] = (owner[1:] != owner[:-1]) | (rank[1:] != rank[:-1])
        owner, x = owner[first], x[first]
    counts = np.bincount(owner, minlength=len(lo))
    if func == "collect_set":
        return _lists(x, owner, len(lo)), np.zeros(len(lo), bool)
    if func == "count_distinct":
        return counts.astype(np.int64), np.zeros(len(lo), bool)
    if func == "sum_distinct":
        sums = np.zeros(len(lo), x.dtype if len(x) else np.float64)
        np.add.at(sums, owner, x)
        if sums.dtype.kind == "i":  # a BIGINT sum that wrapped is Spark's overflow error
            estimate = np.zeros(len(lo))
            np.add.at(estimate, owner, x.astype(np.float64))
            if (np.abs(estimate - sums) > 2.0 ** 62).any():
                raise ArithmeticError("[ARITHMETIC_OVERFLOW] long overflow: a window's "
                                      "sum(DISTINCT) exceeds BIGINT; cast its argument to "
                                      "DOUBLE or DECIMAL")
        return sums, counts == 0
    if func == "percentile_approx":
        return _ranked(x, counts, param, many)
    return _percentiles(x, counts, param, many)


def _lists(x, owner, n: int) -> np.ndarray:
    """The values of each owner ``0..n-1`` (``owner`` sorted) as an object array of
    arrays."""
    out = np.empty(n, object)
    bounds = np.searchsorted(owner, np.arange(n + 1))
    for i in range(n):
        out[i] = x[bounds[i]:bounds[i + 1]]
    return out


def _ranked(x, counts, fractions: tuple, many: bool):
    """The value of rank ``ceil(p * n)`` (the first for p = 0) of each owner's sorted
    values, in their own type."""
    start = np.cumsum(counts) - counts
    last = np.maximum(counts - 1, 0)
    columns = [x[np.minimum(start + np.clip(np.ceil(p * counts).astype(np.int64) - 1, 0, last),
                            max(len(x) - 1, 0))] if len(x) else np.zeros(len(counts), x.dtype)
               for p in fractions]
    return _shaped(columns, counts == 0, many, x.dtype)


def _shaped(columns: list, empty, many: bool, dtype):
    """One result per owner: the first column, or (``many``) an array of all of them."""
    if not many:
        return columns[0], empty
    out = np.empty(len(empty), object)
    for i in range(len(empty)):
        out[i] = np.array([c[i] for c in columns], dtype)
    return out, empty


def _percentiles(x, counts, fractions: tuple, many: bool):
    """Spark's ``percentile`` of each owner's sorted values (DOUBLE), one per fraction."""
    x = x.astype(np.float64, copy=False)
    start = np.cumsum(counts) - counts
    empty = counts == 0
    columns = []
    for p in fractions:
        position = (np.maximum(counts, 1) - 1) * p
        lower, higher = np.floor(position), np.ceil(position)
        lo_v = x[np.minimum(start + lower.astype(np.int64), max(len(x) - 1, 0))] if len(x) \
            else np.zeros(len(counts))
        hi_v = x[np.minimum(start + higher.astype(np.int64), max(len(x) - 1, 0))] if len(x) \
            else np.zeros(len(counts))
        with np.errstate(invalid="ignore"):
            between = lo_v + (position - lower) * (hi_v - lo_v)
        columns.append(np.where((lower == higher) | (lo_v == hi_v), lo_v, between))
    return _shaped(columns, empty, many, np.float64)
