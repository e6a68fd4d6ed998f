"""Incremental CQL window aggregation: one bucket of keys, one micro-batch (numpy, no Spark).

The semantics are the batch ones (``planner/windows.py``: a window gives each row a
validity interval of instants, the query runs on the relation at each instant, RSTREAM /
ISTREAM / DSTREAM turn the per-instant results into a stream). What is incremental is the
work: :func:`step` gets the state of one bucket of group keys, the bucket's new rows and the
query's progress ``W`` (no row with event time below ``W`` will come), and

1. sets aside the **late** rows (event time below ``W``: their instants are final already);
2. folds the on-time rows into the state -- a SLIDE window keeps **partial aggregates per
   pane** (``gcd(range, slide)`` of event time) and key, so ``RANGE 1 HOUR SLIDE 1 MINUTE``
   keeps 60 partials per key, not an hour of rows (a holistic aggregate's partial is the
   pane's values, :mod:`.window_holistic`); an unslid ``RANGE r`` keeps the rows of its
   last ``r``, ``[PARTITION BY k ROWS n]`` the last ``n`` rows per key;
3. evaluates only the instants that became final (``bound <= t < W``, ``bound`` the
   progress of the bucket's previous step) for the keys that have any: a window's aggregate
   combines its panes' partials, or the rows of its frame;
4. turns them into the output stream: RSTREAM every result row, ISTREAM/DSTREAM what changed
   from the key's previous instant (kept in the state as ``last``);
5. prunes what no later instant can need, and names the next instant that will need work,
   so the caller sets a timer there (a key that gets no new rows is still emitted when its
   windows close).

One function per window kind keeps the arithmetic of the batch plan (``udfs.time_windows``:
NULLs skipped, NaN the greatest value, BIGINT sums exact or an overflow error); a window's
aggregate over panes is the aggregate of the panes' aggregates, so a sum's rounding can
differ from a sum over the rows in the last bits (a different order of additions).

Rows arrive encoded (``Rows``): keys and arguments as values plus NULL masks (no pandas
NULL ambiguity: a NULL and a NaN double are different keys), timestamps as integer
microseconds.

The kinds of window are :mod:`.window_panes` (SLIDE) and :mod:`.window_frames` (RANGE,
ROWS), the holistic aggregates :mod:`.window_holistic`, the output streams
:mod:`.window_output`, the column arrays they share
:mod:`.window_columns`, and the operator and its data :mod:`.window_types` (re-exported
here: this module is the kernel's interface).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import state as st
from .window_columns import key_hash, np_column
from .window_frames import range_step, rows_step
from .window_output import present_only
from .window_panes import slide_step
from .window_types import (FUNCTIONS, MOMENTS, OUTPUTS, WINDOWS, Aggregate, Operator, Results,
                           Rows, Step)

__all__ = ["step", "SPLIT_ROWS", "FUNCTIONS", "MOMENTS", "WINDOWS", "OUTPUTS", "Aggregate",
           "Operator", "Rows", "Results", "Step"]


def step(op: Operator, value: bytes | None, new: Rows, watermark: int | None) -> Step:
    """One micro-batch of ``op`` over one bucket (module docstring). ``watermark`` None: no
    progress yet (nothing late, nothing final)."""
    meta, tables = (st.decode(op.kind, value) if value is not None else ({}, {}))
    bound = meta.get("bound")
    late = (new.ts < watermark) if watermark is not None else np.zeros(len(new), bool)
    fresh = new.take(~late)
    if watermark is not None and bound is not None and watermark < bound:
        watermark = bound  # progress never goes back
    run = {"SLIDE": slide_step, "RANGE": range_step, "ROWS": rows_step}[op.window]
    if op.window == "SLIDE":
        results, kept, last, timer = run(op, tables, fresh, bound, watermark)
    else:
        results, kept, last, timer = _touched_only(op, run, tables, fresh, bound, watermark)
    last = present_only(last)
    out_tables = {"kept": kept}
    if last is not None:
        out_tables["last"] = last
    rows = kept.num_rows
    empty = rows == 0 and (last is None or last.num_rows == 0)
    if empty:
        value = None
    else:
        new_bound = watermark if watermark is not None else bound
        value = st.encode(op.kind, {"bound": new_bound}, out_tables)
    return Step(results, late, value, timer, rows)


# -- unslid windows: only the keys something happens to ---------------------------------
#: Below this many kept rows a bucket is evaluated whole (splitting it costs more).
SPLIT_ROWS = 4096


def _touched_only(op: Operator, run, tables: dict, new: Rows, bound, watermark):
    """``run`` over the keys that get new rows or reach an instant now; the other keys'
    rows and previous results are carried over as they are (their relation does not
    change). Keys are told apart by a hash kept with each row (``h``): a collision only
    makes an untouched key evaluated too, never the reverse."""
    kept, last = tables.get("kept"), tables.get("last")
    if kept is None or kept.num_rows < SPLIT_ROWS or "h" not in kept.column_names:
        return run(op, tables, new, bound, watermark)
    h = np_column(kept, "h")
    ts = np_column(kept, "ts")
    due = np.zeros(len(ts), bool)
    if watermark is not None:
        points = [ts] if op.window == "ROWS" else [ts, ts + op.size]
        for t in points:
            due |= (t < watermark) & ((t >= bound) if bound is not None else True)
    touched = np.unique(np.concatenate([key_hash(new.keys, len(new)), h[due]]))
    mine = np.isin(h, touched)
    sub = {"kept": kept.filter(pa.array(mine))}
    carried_last = None
    if last is not None and last.num_rows:
        in_last = np.isin(np_column(last, "h"), touched)
        sub["last"] = last.filter(pa.array(in_last))
        carried_last = last.filter(pa.array(~in_last))
    results, new_kept, new_last, timer = run(op, sub, new, bound, watermark)
    rest = kept.filter(pa.array(~mine))
    rest_ts = ts[~mine]
    if len(rest_ts):  # the carried keys' next instants (none is due now)
        future = rest_ts if op.window == "ROWS" else np.where(
            rest_ts >= (watermark if watermark is not None else rest_ts), rest_ts,
            rest_ts + op.size)
        if watermark is not None:
            future = future[future >= watermark]
        if len(future):
            timer = int(future.min()) if timer is None else min(timer, int(future.min()))
    kept_out = pa.concat_tables([rest, new_kept], promote_options="default")
    lasts = [t for t in (carried_last, new_last) if t is not None and t.num_rows]
    last_out = (pa.concat_tables(lasts, promote_options="default") if lasts
                else new_last if new_last is not None else carried_last)
    return results, kept_out, last_out, timer
