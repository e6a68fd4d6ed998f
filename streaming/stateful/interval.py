"""Incremental interval (band) join: one bucket of keys, one micro-batch (numpy and pandas,
no Spark).

A continuous interval join of two streams (``streaming/joins.py`` :func:`plan_band`)
pairs rows whose event times lie within a band of each other: ``a.t`` in
``[b.t + lo, b.t + hi]``, with equal keys where the ON clause equates columns of the two
streams. Each stream has its own progress, as on the re-evaluating runner: ``L`` stream
``a``'s (the "left" one, whose progress the driver keeps), ``R`` stream ``b``'s (Spark's
watermark). :func:`step` gets one bucket's state (the rows of either stream a future row
of the other can still match), the bucket's new rows of both streams and the two
progresses the micro-batch runs with, and

1. sets aside the **late** rows, each below its own stream's progress; with keys, a row
   whose key is NULL matches nothing, ever (SQL's ``=``): neither handed back nor kept;
2. hands back the **context** -- the new rows with a partner (same key, inside the band)
   among the other stream's kept or new rows, marked ``new``, and the kept rows with a
   partner among the other stream's new rows. The caller evaluates the batch plan twice,
   over (new ``a``, every ``b`` handed back) and (kept ``a`` handed back, new ``b``): every
   pair with a new row in it, once -- the re-evaluating runner's pairing, restricted to
   rows that can pair. The ON clause (its other conditions, strict bounds) and the SELECT
   around the join are the batch plan's, so they mean what they mean in a batch query;
3. keeps what a future row of the other stream can still match: a future ``b`` row is at
   or after ``R`` (one below is late), so the ``a`` rows from ``R + lo`` on; a future
   ``a`` row at or after ``L``, so the ``b`` rows from ``L - hi`` on (no progress yet:
   all). State is bounded by the band and the watermarks' delay;
4. names the next event time ``R`` must pass for a kept row to go (an ``a`` row at
   ``t - lo``, a ``b`` row -- which goes by ``L`` -- at ``t + hi``, a call then being the
   chance to drop it), so the caller sets a timer on Spark's watermark and a bucket
   without new rows still sheds its rows.

**Outer joins** (``op.outer``: stream ``a`` is the preserved side; streams/joins.py turns
the band so that it is, and admits only an ON clause of the band and key equalities, so
that a partner here is exactly a match of the SQL's ON): each kept ``a`` row carries
whether it has been paired (``matched``), and an ``a`` row that goes -- the other stream's
progress has passed its band, or its key is NULL -- without ever having been paired is
handed back ``alone``: the caller evaluates the batch plan over it and no ``b`` row, which
gives it its NULL-extended row, final. A late ``a`` row is set aside as late, not extended.

**FULL joins** (``op.full``) preserve both streams. A ``b`` row goes by ``L`` (a future
``a`` row pairs it only from ``L``'s side), so the same rule hands it back ``alone`` when
``L`` has passed its band unpaired (or its key is NULL). ``L`` reaches a bucket only in a
call, and Spark calls a bucket for new rows or a timer on ``R``: an unpaired ``b`` row
whose band ``R`` has passed already sets its timer at ``R`` itself, so the bucket is
called again each time ``R`` moves, until ``L`` passes too (a ``b`` row whose band ``R``
has not passed yet waits for ``R`` anyway: the query's progress is the smaller of the
two). So an unpaired ``b`` row is emitted at the first call after both progresses passed
its band, at the latest when ``R`` next moves. A FULL join's batch plan would
NULL-extend a row of either side that has no partner among the rows it is given, so the
rows go to the two passes (module docstring, 2.) by flags, each row only to a pass where
it has a partner: ``first`` -- the new ``a`` rows and the ``b`` rows pairing one of them
--, ``second`` -- the kept ``a`` rows pairing a new ``b`` row and the new ``b`` rows
pairing a kept ``a`` row; the ``alone`` rows of both sides go to a third pass (two of them
never pair: a row of either stream stays kept while a row of the other that pairs it can
still come).

Rows travel in the ASOF join's encoding (:mod:`.asof`: ``l*`` columns stream ``a``, ``r*``
stream ``b``, ``right`` which stream, ``sk``/``sh`` key hashes, ``nk`` a NULL key) plus
``new`` (and ``alone`` for an outer join); the state is one Arrow table of the kept rows
(outer: with ``matched``) and the two progresses it last saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from . import state as st
from .asof import resume, series, two_stream_schema

#: The flag of a handed-back row that arrived in this micro-batch.
NEW = "new"
#: Outer joins: the flag of a handed-back ``a`` row that goes unpaired (its NULL-extended
#: row), and the kept ``a`` rows' flag of having been paired.
ALONE, MATCHED = "alone", "matched"
#: FULL joins: the flags of the passes a handed-back row goes to (module docstring).
FIRST, SECOND = "first", "second"


@dataclass(frozen=True)
class IntervalOperator:
    """An interval join's kernel: the encoded types of stream ``a``'s (left) and ``b``'s
    (right) columns, the band (``a.t - b.t`` in ``[lo, hi]``, µs) and whether it has
    keys."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    lo: int
    hi: int
    keyed: bool
    #: stream ``a`` preserved (``a LEFT JOIN b``; module docstring). Out of ``repr`` -- part
    #: of the checkpoint's fingerprint -- so that inner joins' checkpoints keep theirs; an
    #: outer join's rows (``alone``) and output schema differ anyway.
    outer: bool = field(default=False, repr=False)
    #: stream ``b`` preserved too (``FULL JOIN``; ``outer`` set). Out of ``repr`` as
    #: ``outer``: the output schema (the pass flags) tells it apart in the fingerprint.
    full: bool = field(default=False, repr=False)

    kind = "interval"

    def schema(self) -> pa.Schema:
        names = [NEW] + ([ALONE] if self.outer else []) + ([FIRST, SECOND] if self.full
                                                           else [])
        return two_stream_schema(self.left, self.right,
                                 tuple(pa.field(n, pa.bool_()) for n in names))


@dataclass
class IntervalStep:
    context: pd.DataFrame  # the rows to pair (module docstring, 2.), ``new`` marking new ones
    late: np.ndarray  # mask over the new rows
    state: bytes | None  # None: nothing to keep
    timer: int | None  # the next event time R must pass for a kept row to go
    state_rows: int


def step(op: IntervalOperator, value: bytes | None, new: pd.DataFrame,
         left_progress: int | None, right_progress: int | None) -> IntervalStep:
    """One micro-batch of ``op`` over one bucket (module docstring). ``new``: the encoded
    rows of both streams (``op.schema()``'s columns); ``left_progress`` /
    ``right_progress``: stream ``a``'s and ``b``'s progress the micro-batch runs with
    (None: none yet)."""
    names = [f.name for f in op.schema()]
    plain = [n for n in names if n not in (NEW, ALONE, FIRST, SECOND)]  # the encoded ones
    kept, wl, wr, late = resume(op.kind, value, new, left_progress, right_progress)
    fresh = new.loc[~late, plain].assign(**{NEW: True, MATCHED: False})
    old = (kept.assign(**{NEW: False}) if kept is not None else fresh.iloc[:0])
    if MATCHED not in old:  # an inner join keeps no flag
        old = old.assign(**{MATCHED: False})
    rows = pd.concat([old, fresh], ignore_index=True)
    alone = rows.iloc[:0]
    if op.keyed:  # a NULL key matches nothing: never handed back, never kept
        nk = rows["nk"].to_numpy(bool)
        if op.outer:  # ... but a preserved row's NULL-extended row is final at once
            alone = rows[nk & (op.full | ~rows["right"].to_numpy(bool))]
        rows = rows[~nk].reset_index(drop=True)
    is_b = rows["right"].to_numpy(bool)
    a, b = rows[~is_b], rows[is_b]
    at, bt = a["ts"].to_numpy(np.int64), b["ts"].to_numpy(np.int64)
    aid, bid = series(a, b)
    a_new, b_new = a[NEW].to_numpy(bool), b[NEW].to_numpy(bool)
    # a partner of an a row at t: a b row of its key in [t - hi, t - lo]; of a b row at t:
    # an a row in [t + lo, t + hi]
    a_any = _any_within(aid, at - op.hi, at - op.lo, bid, bt)
    b_any = _any_within(bid, bt + op.lo, bt + op.hi, aid, at)
    a_by_new = _any_within(aid, at - op.hi, at - op.lo, bid[b_new], bt[b_new])
    b_by_new = _any_within(bid, bt + op.lo, bt + op.hi, aid[a_new], at[a_new])
    a_paired = np.where(a_new, a_any, a_by_new)
    b_paired = np.where(b_new, b_any, b_by_new)
    a_hand, b_hand = a[a_paired], b[b_paired]
    if op.full:  # the passes each handed-back row has a partner in (module docstring)
        b_second = b_new & _any_within(bid, bt + op.lo, bt + op.hi, aid[~a_new], at[~a_new])
        a_hand = a_hand.assign(**{FIRST: a_new[a_paired], SECOND: ~a_new[a_paired]})
        b_hand = b_hand.assign(**{FIRST: b_by_new[b_paired], SECOND: b_second[b_paired]})
    context = pd.concat([a_hand, b_hand], ignore_index=True)
    keep_a = at >= wr + op.lo if wr is not None else np.ones(len(a), bool)
    keep_b = bt >= wl - op.hi if wl is not None else np.ones(len(b), bool)
    matched = a[MATCHED].to_numpy(bool) | a_paired
    b_matched = b[MATCHED].to_numpy(bool) | b_paired
    if op.outer:
        gone = a[~keep_a & ~matched]  # no b row can pair it any more: final, unpaired
        alone = pd.concat([alone, gone] + ([b[~keep_b & ~b_matched]] if op.full else []),
                          ignore_index=True)
        flags = {ALONE: False} | ({FIRST: False, SECOND: False} if op.full else {})
        context = pd.concat([context.assign(**{ALONE: False}),
                             alone.assign(**{n: n == ALONE for n in flags})],
                            ignore_index=True)
    after = pd.concat([a[keep_a].assign(**{MATCHED: matched[keep_a]}),
                       b[keep_b].assign(**{MATCHED: b_matched[keep_b]}) if op.full
                       else b[keep_b]], ignore_index=True)
    b_goes = bt[keep_b] + op.hi
    if op.full and wr is not None:  # an unpaired b row R has passed: called as R moves
        b_goes = np.where(b_matched[keep_b], b_goes, np.maximum(b_goes, wr))
    goes = np.concatenate([at[keep_a] - op.lo, b_goes])
    if wr is not None:  # (a time R has passed already: the row waits for L, or a call)
        goes = goes[goes >= wr]
    timer = int(goes.min()) if len(goes) else None
    out = None
    if len(after):
        schema = _kept_schema(op)
        table = pa.Table.from_pandas(after[schema.names], schema=schema, preserve_index=False)
        out = st.encode(op.kind, {"wl": wl, "wr": wr}, {"rows": table})
    return IntervalStep(context[names], late, out, timer, len(after))


def _kept_schema(op: IntervalOperator) -> pa.Schema:
    """The state's rows: the encoded columns without ``new`` (every kept row is old), and
    for an outer join whether each was paired (a ``b`` row's flag used by FULL joins
    only)."""
    return two_stream_schema(op.left, op.right,
                             (pa.field(MATCHED, pa.bool_()),) if op.outer else ())


def _any_within(ids: np.ndarray, lo: np.ndarray, hi: np.ndarray, other_ids: np.ndarray,
                other_t: np.ndarray) -> np.ndarray:
    """Per row, whether some row of ``other`` with the same series number has a time in
    ``[lo, hi]``: one sort of the other rows by (series, time) and two binary searches,
    series and time packed into one int64 when they fit (else series by series)."""
    out = np.zeros(len(ids), bool)
    if not len(ids) or not len(other_ids):
        return out
    base = int(min(lo.min(), other_t.min()))
    span = int(max(hi.max(), other_t.max())) - base + 1
    count = int(max(ids.max(), other_ids.max())) + 1
    if span * count < (1 << 62):
        packed = np.sort(other_ids * span + (other_t - base))
        first = np.searchsorted(packed, ids * span + (lo - base), "left")
        last = np.searchsorted(packed, ids * span + (hi - base), "right")
        return last > first
    for sid in np.unique(ids):
        mine = ids == sid
        times = np.sort(other_t[other_ids == sid])
        out[mine] = (np.searchsorted(times, hi[mine], "right")
                     > np.searchsorted(times, lo[mine], "left"))
    return out
