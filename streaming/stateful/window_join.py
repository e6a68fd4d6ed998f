"""Incremental per-instant join of two windowed streams: one bucket of keys, one micro-batch
(numpy and pandas, no Spark).

CQL joins windowed streams per instant (``planner/windows.py``): every row holds a
validity interval ``[from, to)`` under its stream's window, the relation at ``t`` is the
rows valid at ``t``, the query runs on ``R_a(t) JOIN R_b(t)`` at every instant where a
relation changes, and ``ISTREAM`` emits what the result gained since the instant before
(bags), ``DSTREAM`` what it lost. Between two change instants nothing changes, so an
instant where no row enters or leaves contributes nothing to ``ISTREAM`` / ``DSTREAM``.

When the query is additive over buckets of the join keys -- its rows at ``t`` are the
union of the rows each bucket's relations give (row-by-row SQL around an equi-join on the
keys: rows of different keys never meet) -- the multiset difference at ``t`` over the
buckets that change at ``t`` equals the one over every bucket: the buckets that do not
change add the same rows to both sides of it. So a micro-batch that makes the instants
``[P0, P1)`` final needs exactly the buckets with a change instant there, each with every
row valid at or after its previous change instant -- the rows whose ``to`` is at or after
``P0`` (a row that left earlier is in no relation the evaluation looks at). The batch
plan, run over those buckets' rows and kept to ``_time`` in ``[P0, P1)``, gives exactly
the rows the whole history gives there. Otherwise (aggregates across keys, no keys, a
``[ROWS n]`` window of the whole stream, whose rows leave as other keys' rows come) the
query has one bucket holding every stream row still valid at progress.

:func:`step` gets one bucket's state (its rows valid at or after the progress it last
saw, of both streams), its new rows, each stream's progress (``L``, ``R``: a row below
its own stream's is late, as on the re-evaluating runner) and the query's progress ``P``
(Spark's watermark, the smaller of the two), and

1. sets aside the **late** rows;
2. if one of the bucket's rows enters or leaves at an instant in ``[P_seen, P)`` -- the
   instants this micro-batch makes final, ``P_seen`` the progress the bucket last saw --
   hands back its rows that entered before ``P`` (the **context**): of the keys with such
   a change when the query is additive over keys (``op.keyed``: a bucket holds many keys,
   and the others' rows add the same to both sides of the difference), else all of them;
   a row entering at or
   after ``P`` changes no relation before ``P`` (a ``[ROWS n]`` row's ``to`` is then
   read as "later than ``P``", which it is);
   with ``op.pairs`` (an inner join of that shape) it hands back instead the pairs of
   those keys entering and leaving at instants in ``[P_seen, P)``, signed
   (:mod:`.window_join_pairs`: ``ISTREAM``/``DSTREAM`` as sums of signs, no per-instant
   relation);
3. keeps the rows whose ``to`` is at or after ``P`` (their relations are still to be
   evaluated, at ``P``'s previous change instant or later);
4. names the bucket's next change instant at or after ``P`` -- its timer on Spark's
   watermark -- so a bucket whose rows only leave (a ``DSTREAM`` at an expiry, an outer
   join's row left alone) is called in the micro-batch that makes that instant final.

Validity intervals: ``[RANGE r]`` ``[ts, ts + r)``, ``[NOW]`` ``[ts, ts + 1)``,
``[RANGE r SLIDE s]`` held from the first multiple of ``s`` at or after ``ts`` to the first
at or after ``ts + r``; ``[ROWS n]`` / ``[PARTITION BY p ROWS n]`` until the ``n``-th later
row of its partition (``pk``/``ph``: two hashes of ``p``). Rows at one instant are ordered
by their values there; the kernel does not order ties, it takes the earliest and the
latest ``to`` a row of a tie group can have -- the earliest for "a change may happen here"
(an extra call evaluates nothing new), the latest for "still needed" (a kept row too many
is valid at no instant looked at).

Rows travel in the ASOF join's encoding (:mod:`.asof`: ``l*`` stream ``a``, ``r*``
stream ``b``, ``right`` which stream, ``sk``/``sh`` key hashes, ``nk``) plus ``pk``/``ph``;
the state is one Arrow table of the kept rows and the progresses the bucket last saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from . import state as st
from .asof import two_stream_schema

#: "Never leaves" (a ``[ROWS n]`` row with fewer than ``n`` later rows yet).
FOREVER = np.iinfo(np.int64).max
#: The ROWS partition hashes a row carries (0 for the other windows).
PARTITION = ("pk", "ph")


@dataclass(frozen=True)
class JoinWindow:
    """One stream's window: kind (``RANGE``, ``NOW``, ``SLIDE``, ``ROWS``), size (µs or
    rows) and slide (µs)."""

    kind: str
    size: int
    slide: int = 0


@dataclass(frozen=True)
class WindowJoinOperator:
    """A per-instant join's kernel: the encoded types of stream ``a``'s (left) and ``b``'s
    (right) columns and each stream's window."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    left_window: JoinWindow
    right_window: JoinWindow
    #: the query is additive over the join keys (module docstring): only the keys with a
    #: change made final are handed back, not the whole bucket
    keyed: bool = False
    #: an inner join of ``keyed`` shape: a call hands back the pairs entering and leaving
    #: (:mod:`.window_join_pairs`), not rows to evaluate per instant. Not in the repr (the
    #: fingerprint): the state is the same either way.
    pairs: bool = field(default=False, repr=False)
    #: with ``pairs``: the left / right stream's rows NULL-padded where they have no pair
    #: (an outer join on key equalities only)
    preserve: tuple[bool, bool] = field(default=(False, False), repr=False)
    #: with ``pairs``: the join keys, ``(left column, right column)`` positions among each
    #: stream's columns (the rows carry their values): a pair is of rows whose key values
    #: are equal, not only their hashes (:mod:`.window_join_pairs`). Not in the repr: the
    #: state is the same rows.
    keys: tuple[tuple[int, int], ...] = field(default=(), repr=False)

    kind = "window-join"

    def schema(self) -> pa.Schema:
        return two_stream_schema(self.left, self.right,
                                 tuple(pa.field(n, pa.int64()) for n in PARTITION))


@dataclass
class WindowJoinStep:
    context: pd.DataFrame  # the bucket's rows to evaluate (empty: no change made final)
    late: np.ndarray  # mask over the new rows
    state: bytes | None  # None: nothing to keep
    timer: int | None  # the next change instant P must pass
    state_rows: int


def validity(window: JoinWindow, ts: np.ndarray, part: np.ndarray | None = None):
    """``(from, to_lo, to_hi)`` per row (µs): when it enters its stream's relation and the
    earliest and the latest instant it can leave it (equal except for ROWS ties; a row no
    slid window covers has ``from == to``). ``part``: the ROWS partition number per row."""
    ts = np.asarray(ts, np.int64)
    if window.kind == "RANGE":
        return ts, ts + window.size, ts + window.size
    if window.kind == "NOW":
        return ts, ts + 1, ts + 1
    if window.kind == "SLIDE":
        s = window.slide
        held_from = ts + np.mod(-ts, s)
        end = ts + window.size
        held_to = end + np.mod(-end, s)
        return held_from, held_to, held_to
    if window.kind != "ROWS":
        raise ValueError(window.kind)
    n = window.size
    part = np.zeros(len(ts), np.int64) if part is None else np.asarray(part, np.int64)
    lo = np.full(len(ts), FOREVER, np.int64)
    hi = np.full(len(ts), FOREVER, np.int64)
    if not len(ts):
        return ts, lo, hi
    order = np.lexsort((ts, part))
    p, t = part[order], ts[order]
    idx = np.arange(len(t))
    # a tie group: equal (partition, ts); its first and last positions
    new_group = np.r_[True, (p[1:] != p[:-1]) | (t[1:] != t[:-1])]
    first = np.maximum.accumulate(np.where(new_group, idx, 0))
    end_group = np.r_[new_group[1:], True]
    last = np.minimum.accumulate(np.where(end_group, idx, len(t))[::-1])[::-1]
    part_end = np.searchsorted(p, p, "right")  # one past the partition's last row
    for pos, out in ((first + n, lo), (last + n, hi)):
        inside = pos < part_end
        got = np.full(len(t), FOREVER, np.int64)
        got[inside] = t[pos[inside]]
        out[order] = got
    return ts, lo, hi


def _partitions(rows: pd.DataFrame) -> np.ndarray:
    """A number per ROWS partition (equal hashes, same number)."""
    if not len(rows):
        return np.zeros(0, np.int64)
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays(
        [rows[c].to_numpy(np.int64) for c in PARTITION]))
    return codes.astype(np.int64)


def _intervals(op: WindowJoinOperator, rows: pd.DataFrame):
    """``(from, to_lo, to_hi)`` of every row, each by its own stream's window."""
    frm = np.zeros(len(rows), np.int64)
    lo, hi = frm.copy(), frm.copy()
    right = rows["right"].to_numpy(bool)
    ts = rows["ts"].to_numpy(np.int64)
    for mask, window in ((~right, op.left_window), (right, op.right_window)):
        if mask.any():
            f, a, b = validity(window, ts[mask], _partitions(rows[mask]))
            frm[mask], lo[mask], hi[mask] = f, a, b
    return frm, lo, hi


def _later(a: int | None, b: int | None) -> int | None:
    """The later of two progresses (None: none yet)."""
    if a is None:
        return b
    return a if b is None else max(int(a), int(b))


def _pairs(op: WindowJoinOperator, rows: pd.DataFrame, frm, to_lo, to_hi, among, start: int,
           p: int, names: list[str]) -> pd.DataFrame:
    """The pair events of ``rows`` at instants in ``[start, p)`` (:mod:`.window_join_pairs`),
    with the exact ends of ``[ROWS n]`` rows (the others' are exact already)."""
    from .window_join_pairs import rows_ends, signed_pairs

    to = to_hi.copy()
    right = rows["right"].to_numpy(bool)
    for mask, window, side, width in ((~right, op.left_window, "l", len(op.left)),
                                      (right, op.right_window, "r", len(op.right))):
        ties = mask & (to_lo != to_hi)
        if window.kind == "ROWS" and ties.any():
            to[mask] = rows_ends(rows[mask], side, width, window.size, _partitions(rows[mask]))
    return signed_pairs(rows, frm, to, among, start, p, names, op.preserve, op.keys)


def step(op: WindowJoinOperator, value: bytes | None, new: pd.DataFrame,
         left_progress: int | None, right_progress: int | None,
         progress: int | None) -> WindowJoinStep:
    """One micro-batch of ``op`` over one bucket (module docstring). ``new``: the encoded
    rows of both streams (``op.schema()``'s columns); ``left_progress`` /
    ``right_progress``: each stream's progress the micro-batch runs with; ``progress``: the
    query's (the instants below it are final after this micro-batch; None: none yet)."""
    names = [f.name for f in op.schema()]
    meta, tables = st.decode(op.kind, value) if value is not None else ({}, {})
    seen = meta.get("p")  # the query's progress the bucket last saw
    wl = _later(meta.get("wl"), left_progress)
    wr = _later(meta.get("wr"), right_progress)
    p = _later(seen, progress)
    ts = new["ts"].to_numpy(np.int64) if len(new) else np.zeros(0, np.int64)
    is_right = new["right"].to_numpy(bool) if len(new) else np.zeros(0, bool)
    # a row below its own stream's progress is late (below the query's too: never in an
    # instant made final already)
    bound_l, bound_r = _later(wl, p), _later(wr, p)
    late = np.where(is_right, ts < bound_r if bound_r is not None else False,
                    ts < bound_l if bound_l is not None else False).astype(bool)
    fresh = new.loc[~late, names]
    kept = tables["rows"].to_pandas() if "rows" in tables else None
    rows = (pd.concat([kept, fresh], ignore_index=True) if kept is not None
            else fresh.reset_index(drop=True))
    frm, to_lo, to_hi = _intervals(op, rows)
    entered = frm < to_hi  # (a row no slid window covers enters no relation)
    if p is None:  # nothing final yet: keep everything that enters a relation
        context = rows.iloc[:0]
        keep = entered
    else:
        start = seen if seen is not None else np.iinfo(np.int64).min
        changes = entered & (((frm >= start) & (frm < p))
                             | ((to_hi >= start) & (to_lo < p)))
        due = entered & (frm < p)
        if op.keyed and changes.any():  # the keys with a change, whole
            codes, _ = pd.factorize(pd.MultiIndex.from_arrays(
                [rows["sk"].to_numpy(np.int64), rows["sh"].to_numpy(np.int64)]))
            due &= np.isin(codes, codes[changes])
        if not changes.any():
            context = rows.iloc[:0]
        elif op.pairs:  # the pairs entering and leaving, not the rows
            context = _pairs(op, rows, frm, to_lo, to_hi, due, start, p, names)
        else:
            context = rows[due]
        keep = entered & (to_hi >= p)
    after = rows[keep].reset_index(drop=True)
    timer = None
    if len(after):
        f, lo = frm[keep], to_lo[keep]
        floor = p if p is not None else np.iinfo(np.int64).min
        # the next instant at or after P where a kept row may enter or leave
        candidates = np.concatenate([f[f >= floor], np.maximum(lo[lo != FOREVER], floor)])
        timer = int(candidates.min()) if len(candidates) else None
    out = None
    if len(after):
        table = pa.Table.from_pandas(after[names], schema=op.schema(), preserve_index=False)
        out = st.encode(op.kind, {"p": p, "wl": wl, "wr": wr}, {"rows": table})
    return WindowJoinStep(context[names].reset_index(drop=True), late, out, timer, len(after))
