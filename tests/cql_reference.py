"""A small, obviously-correct evaluator of WaveSQL's CQL window semantics (the test oracle).

It works on tiny inputs by brute force, straight from the definitions in
``planner/windows.py`` (which is the user documentation of these semantics):

* every row of a stream gets a validity interval ``[from, to)`` of instants (integer
  microseconds) from its window;
* the relation at instant ``t`` is ``R(t) = {rows with from <= t < to}``;
* a query ``Q`` is evaluated on each ``R(t)``; an empty relation gives no rows;
* RSTREAM emits ``Q(R(t))`` at every observed instant, ISTREAM what ``Q(R(t))`` has more of
  than ``Q(R(previous instant))``, DSTREAM what it has less of.

Nothing here is shared with the code under test: no Spark, no planner imports.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

INF = math.inf


@dataclass(frozen=True)
class Window:
    kind: str  # RANGE | SLIDE | NOW | UNBOUNDED | ROWS | PARTITION_ROWS
    size: int = 0  # microseconds (RANGE, SLIDE) or rows (ROWS, PARTITION_ROWS)
    slide: int = 0  # microseconds (SLIDE)
    partition_by: tuple[str, ...] = ()


def _order_key(row: dict, ts: str, columns: Sequence[str]):
    """Rows at the same instant are ordered by their values, NULLs first (the documented
    tie-break for ROWS windows)."""
    return (row[ts],) + tuple((row[c] is not None, row[c]) for c in columns)


def intervals(rows: list[dict], ts: str, window: Window, columns: Sequence[str]):
    """``[(row, from, to)]``: each row's validity interval under ``window``."""
    out = []
    if window.kind in ("ROWS", "PARTITION_ROWS"):
        groups: dict[tuple, list[dict]] = {}
        for row in rows:
            key = tuple(row[k] for k in window.partition_by)
            groups.setdefault(key, []).append(row)
        for members in groups.values():
            members = sorted(members, key=lambda r: _order_key(r, ts, columns))
            for i, row in enumerate(members):
                later = i + window.size
                to = members[later][ts] if later < len(members) else INF
                out.append((row, row[ts], to))
        return out
    for row in rows:
        t = row[ts]
        if window.kind in ("RANGE", "SLIDE"):
            out.append((row, t, t + window.size))
        elif window.kind == "NOW":
            out.append((row, t, t + 1))
        elif window.kind == "UNBOUNDED":
            out.append((row, t, INF))
        else:
            raise ValueError(window.kind)
    return out


def _ceil_to(x, step: int):
    return x if x == INF else -((-x) // step) * step


def instants(spans, window: Window) -> list[int]:
    """The instants at which the relation is observed, in order.

    Unslid windows: every instant where some row enters or leaves (the relation is constant
    in between). Slid windows: every multiple of the slide from the first at which some row
    is visible to the last at which some row leaves.
    """
    if window.kind == "SLIDE":
        s = window.slide
        starts = [_ceil_to(f, s) for _, f, _ in spans]
        ends = [_ceil_to(t, s) for _, _, t in spans]
        if not spans:
            return []
        return list(range(min(starts), max(ends) + 1, s))
    points = {f for _, f, _ in spans} | {t for _, _, t in spans if t != INF}
    return sorted(points)


def relation_at(spans, t) -> list[dict]:
    return [row for row, f, to in spans if f <= t < to]


Query = Callable[[list[dict]], list[tuple]]


def evaluate(rows: list[dict], ts: str, window: Window, columns: Sequence[str], query: Query,
             kind: str = "RSTREAM") -> Counter:
    """The multiset ``{(instant, result row): count}`` of ``kind(query(rows [window]))``."""
    spans = intervals(rows, ts, window, columns)
    results = []
    for t in instants(spans, window):
        present = relation_at(spans, t)
        results.append((t, Counter(query(present)) if present else Counter()))
    return _to_stream(results, kind)


def _to_stream(results, kind: str) -> Counter:
    """``kind`` of the per-instant results ``[(instant, Counter of rows)]`` in instant order:
    RSTREAM each result, ISTREAM what it has more of than the one before, DSTREAM less."""
    out: Counter = Counter()
    previous: Counter = Counter()
    for t, current in results:
        if kind == "RSTREAM":
            emitted = current
        elif kind == "ISTREAM":
            emitted = current - previous
        elif kind == "DSTREAM":
            emitted = previous - current
        else:
            raise ValueError(kind)
        for row, n in emitted.items():
            out[(t,) + row] += n
        previous = current
    return out


# -- several windowed streams joined in one query ---------------------------------------
def _slid_present(spans, window: Window, t) -> list[dict]:
    """A slid window's relation at any instant ``t``: the window at the last multiple of the
    slide, as CQL defines a relation at every instant."""
    k = (t // window.slide) * window.slide
    return relation_at(spans, k)


def evaluate_join(streams: Sequence[tuple[list[dict], str, Window, Sequence[str]]],
                  query: Callable[..., list[tuple]], kind: str = "RSTREAM") -> Counter:
    """``kind(query(R1(t), R2(t), ...))`` for windowed streams joined in one query.

    ``streams``: ``(rows, event time column, window, columns)`` each. The instants observed are
    those of every stream on its own (unslid: where its relation changes; slid: each multiple
    of its slide at which it holds rows or has just emptied); at each, ``query`` gets every
    stream's relation at that instant (a list of rows each) -- it decides what an empty one
    means (an inner join gives nothing, an outer join keeps the other side).
    """
    spanned = [(intervals(rows, ts, w, cols), w) for rows, ts, w, cols in streams]
    points: set = set()
    for spans, w in spanned:
        if w.kind != "SLIDE":
            points |= set(instants(spans, w))
            continue
        for k in instants(spans, w):  # every multiple from first to last, by brute force
            if relation_at(spans, k) or relation_at(spans, k - w.slide):
                points.add(k)
    results = []
    for t in sorted(points):
        present = [(_slid_present(spans, w, t) if w.kind == "SLIDE" else relation_at(spans, t))
                   for spans, w in spanned]
        results.append((t, Counter(query(*present))))
    return _to_stream(results, kind)
