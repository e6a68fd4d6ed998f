"""Incremental OVER windows: one bucket of keys, one micro-batch (numpy and Arrow, no Spark).

A continuous query whose windows are OVER windows with bounded PRECEDING frames (TiLT's
trend, RSI, fraud; ``lag``) gives each input row one output row, final once progress
passes the row's event time; the row's value depends on the rows of its frame, all at or
before it. What a later row can still need of the past is the query's **look-back**
(``streaming/lookback.py``: ``RANGE r`` keeps ``r`` of event time, ``ROWS n`` / ``lag(n)``
the last ``n`` rows per partition, summed along nested windows). :func:`step` gets the
state of one bucket of partition keys (those rows), the bucket's new rows and the query's
progress ``W``, and

1. sets aside the **late** rows (event time below ``W``: their results are final already);
2. adds the on-time rows to the bucket's rows (kept sorted by event time, arrival order
   among equal times);
3. when some rows became final (``bound <= t < W``, ``bound`` the progress of the bucket's
   previous step), hands back the bucket's rows below ``W`` -- those rows plus exactly the
   look-back they need (the state was pruned at ``bound``) -- as the **context** over
   which the caller evaluates the user's query with Spark, keeping the results with
   ``bound <= t < W``; with ``EMIT CHANGES`` (``LookbackOperator.changes``) the context
   is every row the bucket holds whenever some are due or not final yet (``t >= W``), so
   the caller also evaluates the rows not final yet over the rows so far (``_final =
   false``, refined by later batches) -- the state is the same either way: those rows
   are kept until final anyway;
4. prunes the rows to what results at or after ``W`` can need (the look-back before ``W``
   and every row from ``W`` on), and names the next event time that will need work, so
   the caller sets a timer there (a key that gets no new rows is still emitted when
   progress passes its rows).

So a micro-batch reads the rows that arrived and, for the buckets that have results due,
their look-back -- never the other keys' rows. The windows themselves are Spark's (the
batch plan, evaluated over the context): any aggregate, nesting, ``lag``, expressions over
window values -- the same results as the batch query by construction.

Rows travel encoded (``streaming/stateful/plan.py`` ``KEY_TYPES``): each of the stream's
columns as values plus a NULL mask, the event time as integer microseconds, and per ROWS
rule the partition's two hashes and whether the row counts (it passes the WHERE the frame
counts after).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from . import state as st

#: Arrow type of each encoded column type.
ARROW = {"bigint": pa.int64(), "double": pa.float64(), "string": pa.string(),
         "boolean": pa.bool_()}


@dataclass(frozen=True)
class KeepTime:
    """Keep the rows whose event time is at least the cut - ``us``."""

    us: int


@dataclass(frozen=True)
class KeepRows:
    """Keep the last ``n`` counted rows per partition before the cut - ``within_us``, and
    every row from there on (``streaming/plan.py`` ``KeepRows``, with its partition and
    predicate evaluated by Spark into the rule's columns)."""

    n: int
    within_us: int = 0


@dataclass(frozen=True, repr=False)
class LookbackOperator:
    """The encoded types of the stream's columns (``c0, cn0, c1, ...``) and the look-back
    rules (rule ``j``'s partition hashes ``rk{j}``/``rh{j}``, counted flag ``rp{j}``)."""

    columns: tuple[str, ...]
    rules: tuple  # KeepTime | KeepRows
    #: Set when the kernel evaluates the windows itself (:func:`frames`): RANGE frames of
    #: ``count / sum / avg / min / max / stddev / variance``, one partition for all.
    windows: "Windows | None" = None
    #: ``EMIT CHANGES``: the context holds the rows not final yet too (module docstring).
    changes: bool = False

    kind = "over-lookback"

    def __repr__(self) -> str:
        # The plan's fingerprint (plan.py) is this text: an EMIT FINAL operator's stays what
        # it was before ``changes`` existed (its checkpoints run on), a CHANGES one's differs
        # (a FINAL checkpoint is refused by the CHANGES query and the reverse).
        text = (f"LookbackOperator(columns={self.columns!r}, rules={self.rules!r}, "
                f"windows={self.windows!r})")
        return text[:-1] + ", changes=True)" if self.changes else text

    def schema(self) -> pa.Schema:
        """The Arrow schema of a bucket's rows."""
        fields = [pa.field("ts", pa.int64())]
        for i, t in enumerate(self.columns):
            fields += [pa.field(f"cn{i}", pa.bool_()), pa.field(f"c{i}", ARROW[t])]
        for j, rule in enumerate(self.rules):
            if isinstance(rule, KeepRows):
                fields += [pa.field(f"rk{j}", pa.int64()), pa.field(f"rh{j}", pa.int64()),
                           pa.field(f"rp{j}", pa.bool_())]
        if self.windows is not None:
            fields.append(pa.field("p", pa.bool_()))
            for i, t in enumerate(self.windows.keys):
                fields += [pa.field(f"kn{i}", pa.bool_()), pa.field(f"k{i}", ARROW[t])]
            for j, t in enumerate(self.windows.args):
                fields += [pa.field(f"an{j}", pa.bool_()), pa.field(f"a{j}", ARROW[t])]
        return pa.schema(fields)


@dataclass(frozen=True)
class Windows:
    """OVER windows the kernel evaluates: ``specs`` (``udfs.time_windows.Spec``, their
    ``arg`` the name ``a{j}`` of an argument column), the encoded types of the partition
    keys (``k{i}``) and arguments (``a{j}``); rows count where ``p`` (the WHERE) holds."""

    specs: tuple
    keys: tuple[str, ...]
    args: tuple[str, ...]


@dataclass
class LookbackStep:
    context: pa.Table  # the rows to evaluate the query over now (empty: nothing is due)
    #: the rows of the context from this event time on are due (or, ``changes``, at or
    #: after the progress: not final yet)
    due_from: int | None
    late: np.ndarray  # mask over the new rows: event time below the progress
    state: bytes | None  # None: nothing left to keep
    timer: int | None  # the next event time that becomes due once progress passes it
    state_rows: int


def step(op: LookbackOperator, value: bytes | None, new: pa.Table,
         watermark: int | None) -> LookbackStep:
    """One micro-batch of ``op`` over one bucket (module docstring). ``watermark`` None: no
    progress yet (nothing late, nothing due)."""
    meta, tables = st.decode(op.kind, value) if value is not None else ({}, {})
    bound = meta.get("bound")
    new_ts = _ts(new)
    late = new_ts < watermark if watermark is not None else np.zeros(len(new_ts), bool)
    if watermark is not None and bound is not None and watermark < bound:
        watermark = bound  # progress never goes back
    fresh = new.filter(pa.array(~late)) if late.any() else new
    kept = tables.get("rows")
    rows = pa.concat_tables([kept, fresh]) if kept is not None and kept.num_rows else fresh
    ts = _ts(rows)
    if len(ts) > 1 and (np.diff(ts) < 0).any():
        order = np.argsort(ts, kind="stable")  # the kept rows first among equal times
        rows, ts = rows.take(pa.array(order)), ts[order]
    empty = rows.slice(0, 0)
    if watermark is None:
        context, after = (rows if op.changes else empty), rows
        pending = ts
    else:
        due = (ts < watermark) & ((ts >= bound) if bound is not None else True)
        pending = ts[ts >= watermark]
        if op.changes:  # the rows not final yet and their look-back too
            context = rows if due.any() or len(pending) else empty
        else:
            context = rows.filter(pa.array(ts < watermark)) if due.any() else empty
        after = rows.filter(pa.array(_keep(op, rows, ts, watermark)))
    timer = int(pending.min()) if len(pending) else None
    new_bound = watermark if watermark is not None else bound
    out = (st.encode(op.kind, {"bound": new_bound}, {"rows": after}) if after.num_rows
           else None)
    return LookbackStep(context, bound, late, out, timer, after.num_rows)


def frames(op: LookbackOperator, step_: LookbackStep) -> pa.Table:
    """The due rows of ``step_``'s context that pass the WHERE (``changes``: and those not
    final yet), each with its windows' values (``w{j}``), computed over the context: a
    RANGE frame needs only the rows of its interval, all of which the context holds
    (``udfs.time_windows``: Spark's semantics and arithmetic)."""
    from wavesql.udfs import time_windows as tw

    w = op.windows
    table = step_.context
    table = table.filter(pa.array(_np(table, "p").astype(bool))) if table.num_rows else table
    ts = _ts(table)
    own = (ts >= step_.due_from) if step_.due_from is not None else np.ones(len(ts), bool)
    cols = {"ts": table.column("ts"), tw.CONTEXT: pa.array(~own)}
    for i in range(len(w.keys)):
        cols[tw.key_column(i)] = pa.array(_np(table, f"k{i}"), mask=_np(table, f"kn{i}"))
    for j in range(len(w.args)):
        cols[f"a{j}"] = pa.array(_np(table, f"a{j}"), mask=_np(table, f"an{j}"))
    passthrough = tuple(n for n in table.column_names if n == "ts" or n.startswith("c"))
    for name in passthrough:
        cols[name] = table.column(name)
    out = tw.evaluate(pa.table(cols), w.specs, "ts", len(w.keys), passthrough)
    for j in range(len(w.specs)):
        result = out.column(tw.result_column(j))
        out = out.append_column(f"wn{j}", result.is_null()).append_column(
            f"w{j}", result.fill_null(0))
    return out


def _keep(op: LookbackOperator, rows: pa.Table, ts: np.ndarray, cut: int) -> np.ndarray:
    """Which of ``rows`` (sorted by event time) results at or after ``cut`` can need."""
    keep = ts >= cut
    for j, rule in enumerate(op.rules):
        if isinstance(rule, KeepTime):
            keep |= ts >= cut - rule.us
            continue
        keep |= ts >= cut - rule.within_us
        counted = (ts < cut - rule.within_us) & _np(rows, f"rp{j}")
        idx = np.nonzero(counted)[0]
        if not len(idx):
            continue
        k1, k2 = _np(rows, f"rk{j}")[idx], _np(rows, f"rh{j}")[idx]
        order = np.lexsort((idx, k2, k1))  # by partition, then time (= position)
        a, b = k1[order], k2[order]
        last = np.ones(len(order), bool)  # the last row of its partition
        last[:-1] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
        ends = np.nonzero(last)[0]
        from_end = ends[np.searchsorted(ends, np.arange(len(order)))] - np.arange(len(order))
        keep[idx[order[from_end < rule.n]]] = True
    return keep


def _ts(table: pa.Table) -> np.ndarray:
    return _np(table, "ts").astype(np.int64, copy=False)


def _np(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False)
