"""Incremental RESAMPLE: one bucket of series, one micro-batch (numpy and pandas, no Spark).

A continuous ``RESAMPLE`` of one stream (``streaming/resample.py``: when its grid points
are final) puts each series -- the whole stream, or one per key with ``PARTITION BY`` --
on the grid ``k * P``. :func:`step` gets one bucket's state (its series' rows), the
bucket's new rows and the stream's progress ``W`` (Spark's watermark), and

1. sets aside the **late** rows (event time below ``W``);
2. adds the on-time rows, collapsing the rows of one series and instant to the one the
   batch RESAMPLE keeps (the greatest by the other columns, NULL lowest, NaN highest:
   ``planner/temporal.py``) -- so what is kept below is exactly what the batch plan would
   read there;
3. computes each series' **bound** -- the grid points below it are final -- as
   :class:`streaming.resample.ResampleProgress` does: per key ``min(W, last row + 1,
   ('linear') each interpolated column's last value below W + 1)``, a column without a
   value below ``W`` bounding nothing; un-keyed the same, but any such column (or no
   row) keeps the previous bound, and the bound never goes back;
4. hands back, for each series with grid points in ``[its previous bound, its bound)``,
   the series' rows (the **context**: the rows bracketing those points and every row
   after them, which generate the grid) and that **span**: the caller evaluates the batch
   plan over the context and keeps each series' points inside its span -- each grid point
   is emitted once, in the step that passes it; with ``EMIT CHANGES``
   (``ResampleOperator.changes``) also every series with points not final yet (from its
   bound, or its first row when it has none, up to its last row) and a **pending span**
   ``[bound, +inf)`` each: the caller emits those points with ``_final = false`` -- the
   state is the same either way;
5. prunes each series to what the points from its bound on need: every row from the
   bound on, the last row before it and ('linear') each interpolated column's last value
   before it -- so a stalled key keeps a row or two, and the state is bounded by keys and
   the watermark's delay, not by history;
6. names the next event time at which a point becomes final without new rows (the next
   grid point once every interpolated column it needs has a value after it) and, for
   'linear', the next row progress will pass (a column's last value below progress
   changes there), so the caller sets a timer, and reports the bucket's **cap**: the
   smallest bound its series would have with unbounded progress, constant until the
   bucket runs again -- the driver's ``_progress`` is ``min(W, every bucket's cap)``.

Rows travel encoded (``streaming/stateful/plan.py`` ``KEY_TYPES``): each column as value
plus NULL flag, the event time in microseconds, the series as two independent hashes of
its keys (``sk``, ``sh``). Each kept row carries its series' bound (``bound``, ``hb``), so
the state is one Arrow table (:mod:`.state`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from . import state as st
from .lookback import ARROW

MIN = np.iinfo(np.int64).min
MAX = np.iinfo(np.int64).max


@dataclass(frozen=True, repr=False)
class ResampleOperator:
    """A RESAMPLE's kernel: the encoded types of the stream's columns (``c0, cn0, ...``),
    the grid period, the method, whether it is per key, the columns it interpolates and
    the columns that break ties between rows of one instant (in the batch SQL's order)."""

    columns: tuple[str, ...]
    period_us: int
    method: str
    keyed: bool
    interp: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
    #: ``EMIT CHANGES``: the series with points not final yet are handed back too.
    changes: bool = False

    kind = "resample"

    def __repr__(self) -> str:
        # The plan's fingerprint (plan.py) is this text: an EMIT FINAL operator's stays what
        # it was before ``changes`` existed (its checkpoints run on), a CHANGES one's differs.
        text = (f"ResampleOperator(columns={self.columns!r}, period_us={self.period_us!r}, "
                f"method={self.method!r}, keyed={self.keyed!r}, interp={self.interp!r}, "
                f"order={self.order!r})")
        return text[:-1] + ", changes=True)" if self.changes else text

    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows handed in (and, with ``bound``/``hb``, kept)."""
        fields = [pa.field("ts", pa.int64()), pa.field("sk", pa.int64()),
                  pa.field("sh", pa.int64())]
        for i, t in enumerate(self.columns):
            fields += [pa.field(f"cn{i}", pa.bool_()), pa.field(f"c{i}", ARROW[t])]
        return pa.schema(fields)

    def kept_schema(self) -> pa.Schema:
        return self.schema().append(pa.field("bound", pa.int64())).append(
            pa.field("hb", pa.bool_()))


@dataclass
class ResampleStep:
    context: pd.DataFrame  # rows of the series with points due (their whole kept rows)
    spans: pd.DataFrame  # per due series: its last row, lo / has_lo / hi
    late: np.ndarray  # mask over the new rows
    state: bytes | None  # None: nothing to keep
    timer: int | None  # the next event time progress must pass for work to be due
    state_rows: int
    cap: int | None  # the smallest bound the bucket's series would reach (None: none)
    #: ``changes``: per series with points not final yet, its pending span (as ``spans``)
    pending: pd.DataFrame | None = None


def step(op: ResampleOperator, value: bytes | None, new: pd.DataFrame,
         watermark: int | None) -> ResampleStep:
    """One micro-batch of ``op`` over one bucket (module docstring). ``new``: the encoded
    rows (``op.schema()``'s columns); ``watermark`` None: no progress yet."""
    new_ts = new["ts"].to_numpy(np.int64) if len(new) else np.zeros(0, np.int64)
    _, tables, w, late = st.resume(op.kind, value, new_ts, watermark)
    fresh = new[~late].assign(bound=np.int64(0), hb=False)
    kept = tables["rows"].to_pandas() if "rows" in tables else None
    rows = pd.concat([kept, fresh], ignore_index=True) if kept is not None else fresh
    names = [f.name for f in op.kept_schema()]
    if not len(rows):
        return ResampleStep(rows[names], _spans(rows[names], []), late, None, None, 0, None)
    rows, lo, has_lo = _collapse(op, rows)
    ts = rows["ts"].to_numpy(np.int64)
    starts, sid = _series(rows)
    first, last = ts[starts], ts[np.r_[starts[1:], len(ts)] - 1]
    values = [~rows[f"cn{i}"].to_numpy(bool) for i in op.interp]  # has a value
    ends = []  # per interpolated column: (its last value below w, whether it has one)
    for has in values:
        m = has & (ts < w) if w is not None else np.zeros(len(ts), bool)
        ends.append((np.maximum.reduceat(np.where(m, ts, MIN), starts),
                     np.logical_or.reduceat(m, starts)))
    cap = last + 1
    defined = np.ones(len(starts), bool)
    if op.keyed:
        for e, has in ends:
            cap = np.where(has, np.minimum(cap, e + 1), cap)
    elif any(not has[0] for _, has in ends):
        cap, defined = lo.copy(), has_lo.copy()  # a column without a value: no further
    else:
        for e, _ in ends:
            cap = np.minimum(cap, e + 1)
    if w is None:
        hi, has_hi = lo.copy(), has_lo.copy()
    else:
        hi = np.where(defined, np.minimum(w, cap), lo)
        has_hi = defined | has_lo
        hi = np.where(has_lo, np.maximum(hi, lo), hi)
    P = op.period_us
    start = np.where(has_lo, np.maximum(lo, first), first)
    g0 = -((-start) // P) * P  # the first grid point not emitted yet
    due = has_hi & (g0 < hi) & (g0 <= last)
    if op.changes:  # points not final yet: from the bound (none: the first row) to the last
        nxt = np.where(has_hi, np.maximum(hi, first), first)
        early = -((-nxt) // P) * P <= last
    else:
        early = np.zeros(len(starts), bool)
    context = rows.loc[(due | early)[sid], names]
    ends_at = np.r_[starts[1:], len(ts)] - 1
    spans = _spans(rows.iloc[ends_at[due]][names], [lo[due], has_lo[due], hi[due]])
    pending = _spans(rows.iloc[ends_at[early]][names],
                     [hi[early], has_hi[early], np.full(int(early.sum()), MAX, np.int64)])
    # prune: each series from its bound on, plus the rows bracketing the next points
    cut = hi[sid]
    keep = ~has_hi[sid] | (ts >= cut)
    before = has_hi[sid] & (ts < cut)
    idx = np.arange(len(ts))
    for mask in [before] + [before & has for has in values]:
        at = np.maximum.reduceat(np.where(mask, idx, -1), starts)
        keep[at[at >= 0]] = True
    rows = rows.assign(bound=np.where(has_hi, hi, 0)[sid], hb=has_hi[sid])
    timer = _timer(op, ts, starts, sid, values, np.where(has_hi, np.maximum(hi, first),
                                                        first), last, w)
    after = rows.loc[keep, names]
    out = None
    if len(after):
        table = pa.Table.from_pandas(after, schema=op.kept_schema(), preserve_index=False)
        out = st.encode(op.kind, {"w": w}, {"rows": table})
    bucket_cap = int(cap[defined].min()) if defined.any() else None
    return ResampleStep(context, spans, late, out, timer, len(after), bucket_cap, pending)


def _collapse(op: ResampleOperator, rows: pd.DataFrame):
    """``rows`` sorted by series and time with one row per series and instant (the one
    the batch RESAMPLE keeps), and each series' previous bound ``(lo, has_lo)``."""
    by = ["sk", "sh", "ts"]
    rows = rows.sort_values(by, kind="stable", ignore_index=True)
    starts, _ = _series(rows)
    hb = rows["hb"].to_numpy(bool)
    lo = np.maximum.reduceat(np.where(hb, rows["bound"].to_numpy(np.int64), MIN), starts)
    has_lo = np.logical_or.reduceat(hb, starts)
    if rows.duplicated(by).any():
        # ties: ascending by each other column (NULL lowest, NaN highest), the last wins
        order = by.copy()
        for j in op.order:
            rows[f"__v{j}"] = ~rows[f"cn{j}"].to_numpy(bool)
            order += [f"__v{j}", f"c{j}"]
        rows = rows.sort_values(order, na_position="last", ignore_index=True)
        rows = rows[~rows.duplicated(by, keep="last")].reset_index(drop=True)
        rows = rows.drop(columns=[f"__v{j}" for j in op.order])
    return rows, lo, has_lo


def _series(rows: pd.DataFrame):
    """Where each series starts in ``rows`` (sorted by series) and each row's series."""
    sk, sh = rows["sk"].to_numpy(np.int64), rows["sh"].to_numpy(np.int64)
    head = np.ones(len(sk), bool)
    head[1:] = (sk[1:] != sk[:-1]) | (sh[1:] != sh[:-1])
    return np.nonzero(head)[0], np.cumsum(head) - 1


def _timer(op, ts, starts, sid, values, start, last, w) -> int | None:
    """The next event time progress must pass for a series' next grid point (the first at
    or after ``start``) to be final with the rows there are, and ('linear') the next row it
    must pass for an interpolated column's last value (hence the cap) to change."""
    P = op.period_us
    g = -((-start) // P) * P
    when = g.astype(np.int64).copy()
    ok = g <= last  # a point after the series' last row needs a row after it
    for has in values:
        after = has & (ts >= g[sid])
        first_after = np.minimum.reduceat(np.where(after, ts, MAX), starts)
        if op.keyed:  # a column without a value before the point bounds nothing yet
            needed = np.logical_or.reduceat(has & (ts < g[sid]), starts)
        else:
            needed = np.ones(len(starts), bool)
        ok &= ~needed | (first_after != MAX)
        when = np.where(needed, np.maximum(when, first_after), when)
    candidates = list(when[ok])
    if values:
        any_value = np.logical_or.reduce(values)
        passing = ts[any_value & (ts >= w)] if w is not None else ts[any_value]
        if len(passing):
            candidates.append(passing.min())
    return int(min(candidates)) if candidates else None


def _spans(rows: pd.DataFrame, bounds: list) -> pd.DataFrame:
    """The due series' spans: a row of each (its keys) with ``lo``, ``has_lo`` and ``hi``."""
    if not bounds:
        bounds = [np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64)]
    lo, has_lo, hi = bounds
    return rows.reset_index(drop=True).assign(
        lo=np.where(has_lo, lo, 0).astype(np.int64), has_lo=has_lo.astype(bool),
        hi=hi.astype(np.int64))
