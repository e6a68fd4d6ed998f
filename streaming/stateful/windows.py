"""Incremental CQL window aggregation: one bucket of keys, one micro-batch (numpy, no Spark).

The semantics are the batch ones (``planner/windows.py``: a window gives each row a
validity interval of instants, the query runs on the relation at each instant, RSTREAM /
ISTREAM / DSTREAM turn the per-instant results into a stream). What is incremental is the
work: :func:`step` gets the state of one bucket of group keys, the bucket's new rows and the
query's progress ``W`` (no row with event time below ``W`` will come), and

1. sets aside the **late** rows (event time below ``W``: their instants are final already);
2. folds the on-time rows into the state -- a SLIDE window keeps **partial aggregates per
   pane** (``gcd(range, slide)`` of event time) and key, so ``RANGE 1 HOUR SLIDE 1 MINUTE``
   keeps 60 partials per key, not an hour of rows; an unslid ``RANGE r`` keeps the rows of
   its last ``r``, ``[PARTITION BY k ROWS n]`` the last ``n`` rows per key;
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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pyarrow as pa

from wavesql.udfs.time_windows import aggregate_frames, combined_codes

from . import state as st

FUNCTIONS = ("count", "sum", "avg", "min", "max")
WINDOWS = ("SLIDE", "RANGE", "ROWS")
OUTPUTS = ("RSTREAM", "ISTREAM", "DSTREAM")


@dataclass(frozen=True)
class Aggregate:
    """``func(argument arg)``; ``arg`` None is ``count(*)``. ``integral``: the argument is
    an integer type (its sum is a BIGINT, exact, an overflow an error)."""

    func: str
    arg: int | None = None
    integral: bool = False


@dataclass(frozen=True)
class Operator:
    """What one incremental windowed aggregate computes.

    ``window``: ``SLIDE`` (``[RANGE size SLIDE slide]``, tumbling when equal), ``RANGE``
    (unslid, ``[NOW]`` is ``RANGE 1 µs``) or ``ROWS`` (``[ROWS n]`` or ``[PARTITION BY k
    ROWS n]``, the partition being the group keys). ``keys``: number of group-key columns;
    ``order``: number of tie-order columns (``ROWS``: the stream's columns in declared
    order); ``changes``: ``EMIT CHANGES`` (SLIDE RSTREAM: windows not final yet too)."""

    window: str
    size: int
    slide: int = 0
    output: str = "RSTREAM"
    keys: int = 0
    aggregates: tuple[Aggregate, ...] = ()
    order: int = 0
    changes: bool = False

    def __post_init__(self):
        if self.window not in WINDOWS or self.output not in OUTPUTS or self.size <= 0:
            raise ValueError(f"bad operator {self}")
        if self.window != "SLIDE" and self.output == "RSTREAM":
            raise ValueError("RSTREAM of an unslid window emits every key at every instant "
                             "of any key: not incremental")
        if any(a.func not in FUNCTIONS for a in self.aggregates):
            raise ValueError(f"unknown aggregate in {self.aggregates}")

    @property
    def kind(self) -> str:
        return f"windowed-{self.window.lower()}"

    @property
    def pane(self) -> int:
        return math.gcd(self.size, self.slide)


@dataclass
class Rows:
    """A bucket's rows: ``ts`` (µs), ``passes`` (the WHERE holds), per key / argument /
    order column its values and its NULL mask."""

    ts: np.ndarray
    passes: np.ndarray
    keys: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    args: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)
    order: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ts)

    def take(self, idx) -> "Rows":
        pick = (lambda cols: [(v[idx], n[idx]) for v, n in cols])
        return Rows(self.ts[idx], self.passes[idx], pick(self.keys), pick(self.args),
                    pick(self.order))


@dataclass
class Results:
    """Output rows: instant (µs), final or not, key columns and aggregate values (each
    values + NULL mask)."""

    time: np.ndarray
    final: np.ndarray
    keys: list[tuple[np.ndarray, np.ndarray]]
    values: list[tuple[np.ndarray, np.ndarray]]

    def __len__(self) -> int:
        return len(self.time)


@dataclass
class Step:
    results: Results
    late: np.ndarray  # mask over the new rows: event time below the progress
    state: bytes | None  # None: nothing left to keep
    timer: int | None  # the next instant (µs) that becomes final work once progress passes it
    state_rows: int  # panes or rows kept


def step(op: Operator, value: bytes | None, new: Rows, watermark: int | None) -> Step:
    """One micro-batch of ``op`` over one bucket (module docstring). ``watermark`` None: no
    progress yet (nothing late, nothing final)."""
    meta, tables = (st.decode(op.kind, value) if value is not None else ({}, {}))
    bound = meta.get("bound")
    late = (new.ts < watermark) if watermark is not None else np.zeros(len(new), bool)
    fresh = new.take(~late)
    if watermark is not None and bound is not None and watermark < bound:
        watermark = bound  # progress never goes back
    run = {"SLIDE": _slide, "RANGE": _range, "ROWS": _rows}[op.window]
    if op.window == "SLIDE":
        results, kept, last, timer = run(op, tables, fresh, bound, watermark)
    else:
        results, kept, last, timer = _touched_only(op, run, tables, fresh, bound, watermark)
    last = _present_only(last)
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
    h = _np(kept, "h")
    ts = _np(kept, "ts")
    due = np.zeros(len(ts), bool)
    if watermark is not None:
        points = [ts] if op.window == "ROWS" else [ts, ts + op.size]
        for t in points:
            due |= (t < watermark) & ((t >= bound) if bound is not None else True)
    touched = np.unique(np.concatenate([_key_hash(new.keys, len(new)), h[due]]))
    mine = np.isin(h, touched)
    sub = {"kept": kept.filter(pa.array(mine))}
    carried_last = None
    if last is not None and last.num_rows:
        in_last = np.isin(_np(last, "h"), touched)
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


def _key_hash(keys: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """A 64-bit hash of each row's group keys (NULL, ``-0.0`` and NaN as grouping sees
    them)."""
    out = np.zeros(n, np.uint64)
    for i, (values, null) in enumerate(keys):
        if values.dtype.kind == "f":
            values = np.where(np.isnan(values), np.nan, values + 0.0)
        hashed = pd.util.hash_array(np.asarray(values), categorize=False)
        out = out * np.uint64(1_000_003) + np.where(null, np.uint64(i + 1), hashed)
    return out.view(np.int64)


# -- group keys ----------------------------------------------------------------------
def _key_codes(keys: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Dense codes of the rows' group keys (all columns together); NULL is a value of its
    own, ``-0.0`` groups with ``0.0`` and every NaN with every NaN (Spark's grouping)."""
    if not keys:
        return np.zeros(n, np.int64)
    codes = []
    for values, null in keys:
        if values.dtype.kind == "f":
            values = np.where(np.isnan(values), np.nan, values + 0.0)
        c, uniques = pd.factorize(values, use_na_sentinel=False)
        c = np.where(null, len(uniques), c).astype(np.int64)
        codes.append(c)
    combined = combined_codes(codes)
    if combined is None:  # too many distinct values to pack: factorize the tuples
        combined = pd.factorize(pd.MultiIndex.from_arrays(codes))[0].astype(np.int64)
    return pd.factorize(combined)[0].astype(np.int64)


def _first_of_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of one occurrence of each distinct ``(a, b)`` pair, ordered by ``(a, b)``."""
    if len(a) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    new = np.ones(len(order), bool)
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return order[new]


def _table(columns: dict) -> pa.Table:
    return pa.table({name: pa.array(v) for name, v in columns.items()})


def _keys_from(table: pa.Table | None, k: int) -> list:
    if table is None:
        return []
    return [(_np(table, f"k{i}"), _np(table, f"kn{i}")) for i in range(k)]


def _np(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False)


def _key_columns(keys: list) -> dict:
    out = {}
    for i, (values, null) in enumerate(keys):
        out[f"k{i}"], out[f"kn{i}"] = values, null
    return out


def _concat_columns(a: list, b: list) -> list:
    """Columns of (values, NULL mask) pairs, ``a``'s rows then ``b``'s."""
    return [(_cat(av, bv), np.concatenate([an, bn])) for (av, an), (bv, bn) in zip(a, b)]


def _cat(*arrays: np.ndarray) -> np.ndarray:
    """``np.concatenate``, as objects if any is (strings: pyarrow hands them so)."""
    if any(a.dtype == object for a in arrays):
        return np.concatenate([a.astype(object) for a in arrays])
    return np.concatenate(arrays)


def _take_keys(keys: list, idx) -> list:
    return [(v[idx], n[idx]) for v, n in keys]


# -- aggregates over frames ------------------------------------------------------------
def _arrow_type(values: np.ndarray):
    return pa.int64() if values.dtype.kind in "iub" else pa.float64()


def _frame_values(agg: Aggregate, valid: np.ndarray, x: np.ndarray, lo, hi):
    """(values, NULL mask) of ``agg`` over the frames ``[lo, hi)`` of ``(valid, x)``."""
    x = np.where(valid, x, 0).astype(x.dtype, copy=False)  # the frames skip NULLs as zeros
    arr = aggregate_frames(agg.func, (_arrow_type(x), valid, x), lo, hi)
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    return values, null


# -- SLIDE: partial aggregates per pane --------------------------------------------------
def _partials(op: Operator, rows: Rows, codes: np.ndarray, pane: np.ndarray):
    """Per (key, pane) of ``rows``: the first row's index, the passing-row count ``n`` and
    per aggregate its count of values ``c`` and value ``v`` (sum, DOUBLE sum for avg,
    min, max)."""
    order = np.lexsort((pane, codes))
    codes, pane = codes[order], pane[order]
    change = np.ones(len(order), bool)
    change[1:] = (codes[1:] != codes[:-1]) | (pane[1:] != pane[:-1])
    starts = np.flatnonzero(change)
    ends = np.append(starts[1:], len(order))
    first = order[starts]
    passes = rows.passes[order]
    out = {"n": _frame_values(Aggregate("count"), passes, passes.astype(np.int64),
                              starts, ends)[0]}
    for j, agg in enumerate(op.aggregates):
        if agg.arg is None:
            out[f"c{j}"] = out["n"]
            out[f"v{j}"] = np.zeros(len(starts), np.int64)
            continue
        x, null = rows.args[agg.arg]
        x, valid = x[order], ~null[order] & passes
        out[f"c{j}"] = _frame_values(Aggregate("count"), valid, valid.astype(np.int64),
                                     starts, ends)[0]
        out[f"v{j}"] = _partial_value(agg, valid, x, starts, ends)
    return first, out


def _partial_value(agg: Aggregate, valid, x, lo, hi) -> np.ndarray:
    """The partial of one pane (or of several panes' partials): sum / DOUBLE sum / min /
    max of the values, 0 where there is none (a count keeps only its count)."""
    if agg.func == "count":
        return np.zeros(len(lo), np.int64)
    if agg.func == "avg":
        x = x.astype(np.float64)
    func = {"count": "sum", "avg": "sum"}.get(agg.func, agg.func)
    values, null = _frame_values(Aggregate(func), valid, x, lo, hi)
    return np.where(null, 0, values).astype(x.dtype, copy=False)


def _final_values(op: Operator, parts: dict, j: int):
    """(values, NULL mask) of aggregate ``j`` from combined partials."""
    agg = op.aggregates[j]
    c, v = parts[f"c{j}"], parts[f"v{j}"]
    if agg.func == "count":
        return c.astype(np.int64), np.zeros(len(c), bool)
    empty = c == 0
    if agg.func == "avg":
        with np.errstate(invalid="ignore", divide="ignore"):
            return v / np.maximum(c, 1), empty
    return v, empty


def _slide(op: Operator, tables: dict, rows: Rows, bound, watermark):
    g, r, s = op.pane, op.size, op.slide
    panes = tables.get("kept")
    k = op.keys
    rows = rows.take(rows.passes)  # a slid window's rows are independent: drop failing ones
    # the state's panes and the new rows' partials, combined per (key, pane)
    new_keys = rows.keys
    new_codes = _key_codes(new_keys, len(rows))
    pane = -((-rows.ts) // g)
    first, partial = _partials(op, rows, new_codes, pane)
    fresh = {**_key_columns(_take_keys(new_keys, first)), "p": pane[first], **partial}
    if panes is not None and panes.num_rows:
        old = {name: _np(panes, name) for name in panes.column_names}
        both = {name: _cat(old[name], fresh[name]) for name in old}
        both = _combine_panes(op, both)
    else:
        both = fresh
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(k)]
    codes = _key_codes(keys, len(both["p"]))
    order = np.lexsort((both["p"], codes))
    both = {name: v[order] for name, v in both.items()}
    codes = codes[order]
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(k)]
    p = both["p"]
    # every window k*s holding a pane p: ceil(p*g/s) <= k <= floor(((p-1)*g + r)/s)
    k_lo = -((-p * g) // s)
    k_hi = ((p - 1) * g + r) // s
    final_hi = None if watermark is None else -((-watermark) // s) - 1  # k*s < W
    final_lo = None if bound is None else -((-bound) // s)  # k*s >= bound
    last = tables.get("last")
    results = []
    lo = k_lo if final_lo is None else np.maximum(k_lo, final_lo)
    if final_hi is not None:
        obs = _window_observations(op, both, codes, p, lo, np.minimum(k_hi, final_hi))
        results.append(_emit(op, obs, keys, last, final_lo, final_hi, s, True))
        last = _new_last(op, obs, keys, last, final_hi, s)
    if op.changes:
        start = np.maximum(k_lo, final_hi + 1) if final_hi is not None else k_lo
        early = _window_observations(op, both, codes, p, start, k_hi)
        results.append(_emit(op, early, keys, None, None, None, s, False))
    # keep the panes of windows not final yet
    keep = (k_hi * s >= watermark) if watermark is not None else np.ones(len(p), bool)
    kept = _table({name: v[keep] for name, v in both.items()})
    pending = np.maximum(k_lo, final_hi + 1 if final_hi is not None else k_lo)[keep]
    timer = int(pending.min()) * s if len(pending) else None
    if last is not None and op.output == "DSTREAM" and last.num_rows and final_hi is not None:
        # a key still present at the last final instant leaves at the next one
        timer = (final_hi + 1) * s if timer is None else min(timer, (final_hi + 1) * s)
    return _concat_results(results, op), kept, last, timer


def _combine_panes(op: Operator, both: dict) -> dict:
    """One row per (key, pane): the partials of equal (key, pane) rows merged."""
    keys = [(both[f"k{i}"], both[f"kn{i}"]) for i in range(op.keys)]
    codes = _key_codes(keys, len(both["p"]))
    order = np.lexsort((both["p"], codes))
    codes, p = codes[order], both["p"][order]
    change = np.ones(len(order), bool)
    change[1:] = (codes[1:] != codes[:-1]) | (p[1:] != p[:-1])
    starts = np.flatnonzero(change)
    if len(starts) == len(order):
        return both
    ends = np.append(starts[1:], len(order))
    out = {name: v[order][starts] for name, v in both.items()}
    out["n"] = np.add.reduceat(both["n"][order], starts)
    for j, agg in enumerate(op.aggregates):
        c, v = both[f"c{j}"][order], both[f"v{j}"][order]
        out[f"c{j}"] = np.add.reduceat(c, starts)
        out[f"v{j}"] = _partial_value(agg, c > 0, v, starts, ends)
    return out


def _window_observations(op: Operator, panes: dict, codes, p, k_from, k_to):
    """The present windows ``(code, k, values...)`` of every key, for the window numbers
    ``k_from[i]..k_to[i]`` that pane ``i`` belongs to (panes sorted by key, then pane)."""
    g, r, s = op.pane, op.size, op.slide
    count = np.maximum(k_to - k_from + 1, 0)
    total = int(count.sum())
    if total == 0:
        return {"code": np.zeros(0, np.int64), "k": np.zeros(0, np.int64), "values": [],
                "row": np.zeros(0, np.int64)}
    owner = np.repeat(np.arange(len(p)), count)
    offset = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
    ks = k_from[owner] + offset
    first = _first_of_pairs(codes[owner], ks)
    code, ks, row = codes[owner][first], ks[first], owner[first]
    # a window's panes: p in [k*s/g - r/g + 1, k*s/g] within its key's run of panes
    ranks = np.unique(p)
    rank = np.searchsorted(ranks, p)
    width = len(ranks) + 1
    packed = codes * width + rank
    lo = np.searchsorted(packed, code * width + np.searchsorted(ranks, ks * s // g - r // g + 1))
    hi = np.searchsorted(packed, code * width + np.searchsorted(ranks, ks * s // g, "right"))
    total_n = np.concatenate([[0], np.cumsum(panes["n"])])
    n = total_n[hi] - total_n[lo]
    parts = {}
    for j, agg in enumerate(op.aggregates):
        c, v = panes[f"c{j}"], panes[f"v{j}"]
        parts[f"c{j}"] = _frame_values(Aggregate("sum"), np.ones(len(c), bool), c, lo, hi)[0]
        parts[f"v{j}"] = _partial_value(agg, c > 0, v, lo, hi)
    values = [_final_values(op, parts, j) for j in range(len(op.aggregates))]
    present = n > 0
    return {"code": code[present], "k": ks[present], "row": row[present],
            "values": [(v[present], m[present]) for v, m in values]}


# -- unslid windows: rows ------------------------------------------------------------------
def _rows_state(op: Operator, tables: dict, rows: Rows, keep_failing: bool) -> Rows:
    """The state's rows and the new on-time rows (only passing ones unless
    ``keep_failing``: a ROWS window counts every row, the WHERE filters after it)."""
    if not keep_failing:
        rows = rows.take(rows.passes)
    kept = tables.get("kept")
    if kept is None or kept.num_rows == 0:
        return rows
    old = Rows(_np(kept, "ts"), _np(kept, "pass"),
               _keys_from(kept, op.keys),
               [(_np(kept, f"a{j}"), _np(kept, f"an{j}")) for j in range(len(rows.args))],
               [(_np(kept, f"o{m}"), _np(kept, f"on{m}")) for m in range(len(rows.order))])
    return Rows(np.concatenate([old.ts, rows.ts]), np.concatenate([old.passes, rows.passes]),
                _concat_columns(old.keys, rows.keys), _concat_columns(old.args, rows.args),
                _concat_columns(old.order, rows.order))


def _rows_table(rows: Rows) -> pa.Table:
    cols = {"ts": rows.ts, "pass": rows.passes, "h": _key_hash(rows.keys, len(rows)),
            **_key_columns(rows.keys)}
    for j, (v, n) in enumerate(rows.args):
        cols[f"a{j}"], cols[f"an{j}"] = v, n
    for m, (v, n) in enumerate(rows.order):
        cols[f"o{m}"], cols[f"on{m}"] = v, n
    return _table(cols)


def _frame_observations(op: Operator, rows: Rows, codes, t, code, lo, hi) -> dict:
    """Observations at instants ``t`` of keys ``code``: the aggregates over each frame
    ``[lo, hi)`` of the (sorted) ``rows``, present when a passing row is in it."""
    passes = rows.passes
    n = _frame_values(Aggregate("count"), passes, passes.astype(np.int64), lo, hi)[0]
    values = []
    for agg in op.aggregates:
        if agg.arg is None:
            values.append((n.astype(np.int64), np.zeros(len(n), bool)))
            continue
        x, null = rows.args[agg.arg]
        values.append(_frame_values(agg, ~null & passes, x, lo, hi))
    return {"code": code, "k": t, "row": lo, "present": n > 0, "values": values}


def _range(op: Operator, tables: dict, new: Rows, bound, watermark):
    r = op.size
    rows = _rows_state(op, tables, new, keep_failing=False)
    codes = _key_codes(rows.keys, len(rows))
    order = np.lexsort((rows.ts, codes))
    rows, codes = rows.take(order), codes[order]
    last = tables.get("last")
    results = []
    if watermark is not None and len(rows):
        # each key's instants: where a row enters (ts) or leaves (ts + r)
        points = np.concatenate([rows.ts, rows.ts + r])
        owner = np.concatenate([codes, codes])
        row_of = np.concatenate([np.arange(len(rows))] * 2)
        due = points < watermark
        if bound is not None:
            due &= points >= bound
        first = _first_of_pairs(owner[due], points[due])
        code, t, at = owner[due][first], points[due][first], row_of[due][first]
        order = np.lexsort((t, code))
        code, t, at = code[order], t[order], at[order]
        lo = _search(codes, rows.ts, code, t - r, "right")
        hi = _search(codes, rows.ts, code, t, "right")
        obs = _frame_observations(op, rows, codes, t, code, lo, hi)
        obs["row"] = at
        keys = _take_keys(rows.keys, np.arange(len(rows)))
        results.append(_emit(op, obs, keys, last, None, None, 1, True))
        last = _new_last(op, obs, keys, last, None, 1)
    keep = (rows.ts + r >= watermark) if watermark is not None else np.ones(len(rows), bool)
    kept = rows.take(keep)
    pending = np.where(kept.ts >= (watermark if watermark is not None else kept.ts),
                       kept.ts, kept.ts + r)
    timer = int(pending.min()) if len(pending) else None
    return _concat_results(results, op), _rows_table(kept), last, timer


def _rows(op: Operator, tables: dict, new: Rows, bound, watermark):
    n = op.size
    rows = _rows_state(op, tables, new, keep_failing=True)
    codes = _key_codes(rows.keys, len(rows))
    # partition, then time, then the row's values with NULLs first (the documented ties)
    sort_keys = [codes, rows.ts]
    for values, null in rows.order:
        sort_keys += [~null, np.where(null, -1, _ranks(values))]
    order = np.lexsort(tuple(reversed(sort_keys))) if len(rows) else np.zeros(0, np.int64)
    rows, codes = rows.take(order), codes[order]
    last = tables.get("last")
    results = []
    if watermark is not None and len(rows):
        due = rows.ts < watermark
        if bound is not None:
            due &= rows.ts >= bound
        first = _first_of_pairs(codes[due], rows.ts[due])
        code, t = codes[due][first], rows.ts[due][first]
        order = np.lexsort((t, code))
        code, t = code[order], t[order]
        starts = np.searchsorted(codes, code)
        hi = _search(codes, rows.ts, code, t, "right")
        lo = np.maximum(hi - n, starts)
        obs = _frame_observations(op, rows, codes, t, code, lo, hi)
        obs["row"] = lo
        keys = _take_keys(rows.keys, np.arange(len(rows)))
        results.append(_emit(op, obs, keys, last, None, None, 1, True))
        last = _new_last(op, obs, keys, last, None, 1)
    if watermark is None or not len(rows):
        keep = np.ones(len(rows), bool)
    else:
        # rows not final yet, and the last n rows before progress of each partition
        before = rows.ts < watermark
        rank_from_end = _rank_from_end(codes, before)
        keep = ~before | (rank_from_end < n)
    kept = rows.take(keep)
    future = kept.ts[kept.ts >= watermark] if watermark is not None else kept.ts
    timer = int(future.min()) if len(future) else None
    return _concat_results(results, op), _rows_table(kept), last, timer


def _rank_from_end(codes: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For rows sorted by ``codes`` (then time): each ``mask`` row's position counted from
    the last ``mask`` row of its code (0 for the last); a large number elsewhere."""
    out = np.full(len(codes), np.iinfo(np.int64).max)
    idx = np.flatnonzero(mask)
    if len(idx):
        c = codes[idx]
        last_of_code = np.searchsorted(c, c, "right") - 1
        out[idx] = last_of_code - np.arange(len(idx))
    return out


def _ranks(values: np.ndarray) -> np.ndarray:
    """Dense ranks of ``values`` in Spark's order (a NaN above every number)."""
    if values.dtype.kind == "f":
        nan = np.isnan(values)
        ranks = pd.factorize(np.where(nan, 0.0, values + 0.0), sort=True)[0]
        return np.where(nan, len(values) + 1, ranks)
    return pd.factorize(values, sort=True)[0]


def _search(codes, ts, code, t, side: str) -> np.ndarray:
    """For rows sorted by ``(codes, ts)``: the global index ``searchsorted`` would give for
    ``t`` within ``code``'s run of rows -- all queries at once, the runs told apart by
    packing ``(code, rank of the time)`` into one sorted integer."""
    if len(t) == 0:
        return np.zeros(0, np.int64)
    times = np.unique(ts)
    width = len(times) + 1
    packed = codes * width + np.searchsorted(times, ts) + 1
    return np.searchsorted(packed, code * width + np.searchsorted(times, t, side), "right")


# -- output streams --------------------------------------------------------------------
def _present_only(last: pa.Table | None) -> pa.Table | None:
    if last is None or last.num_rows == 0:
        return last
    return last.filter(pa.array(_np(last, "present")))


def _emit(op: Operator, obs: dict, keys: list, last: pa.Table | None, final_lo, final_hi,
          s: int, final: bool) -> Results:
    """The rows ``op.output`` makes of the observations (present windows, or every
    observation with ``present``), given each key's previous result ``last``."""
    code, k, row = obs["code"], obs["k"], obs["row"]
    present = obs.get("present", np.ones(len(code), bool))
    values = obs["values"]
    out_keys = _take_keys(keys, row)
    if op.output == "RSTREAM":
        idx = np.flatnonzero(present)
        return Results(k[idx] * s, np.full(len(idx), final),
                       _take_keys(out_keys, idx), [(v[idx], m[idx]) for v, m in values])
    seq = _sequence(op, code, k, present, values, out_keys, last, final_lo, final_hi)
    code, k, present, values, out_keys, virtual = seq
    same_key = np.zeros(len(code), bool)
    same_key[1:] = code[1:] == code[:-1]
    prev_present = np.zeros(len(code), bool)
    prev_present[1:] = present[:-1] & same_key[1:]
    differs = np.zeros(len(code), bool)
    for v, m in values:
        d = np.zeros(len(code), bool)
        d[1:] = ~_equal(v[1:], m[1:], v[:-1], m[:-1])
        differs |= d
    real = ~virtual
    if op.output == "ISTREAM":
        emit = real & present & (~prev_present | differs)
        idx = np.flatnonzero(emit)
        src = idx
    else:  # DSTREAM: the previous result, at the instant it stopped holding
        emit = real & prev_present & (~present | differs)
        idx = np.flatnonzero(emit)
        src = idx - 1
    return Results(k[idx] * s, np.full(len(idx), final), _take_keys(out_keys, src),
                   [(v[src], m[src]) for v, m in values])


def _equal(a, am, b, bm) -> np.ndarray:
    """Row values equal as a multiset difference sees them: NULL = NULL, NaN = NaN."""
    both_null = am & bm
    if a.dtype.kind == "f":
        same = (a == b) | (np.isnan(a) & np.isnan(b))
    else:
        same = a == b
    return both_null | (~am & ~bm & same)


def _sequence(op: Operator, code, k, present, values, keys, last, final_lo, final_hi):
    """Each key's observations in instant order, after its previous result (``virtual``
    rows from ``last``), with the absences a slid window implies: a key present at ``k``
    and not at ``k + 1`` is observed absent there."""
    n_real = len(code)
    parts_code, parts_k, parts_present = [code], [k], [present]
    parts_values = [list(values)]
    parts_keys = [keys]
    parts_virtual = [np.zeros(n_real, bool)]
    if last is not None and last.num_rows:
        lk = _keys_from(last, op.keys)
        both = _concat_columns(keys, lk) if keys else []
        all_codes = _key_codes(both, n_real + last.num_rows)
        # codes of the real observations must be comparable with the last rows' codes
        code = all_codes[:n_real]
        parts_code[0] = code
        parts_code.append(all_codes[n_real:])
        parts_k.append(_np(last, "t"))
        parts_present.append(_np(last, "present"))
        parts_values.append([(_np(last, f"g{j}"), _np(last, f"gn{j}"))
                             for j in range(len(op.aggregates))])
        parts_keys.append(lk)
        parts_virtual.append(np.ones(last.num_rows, bool))
    elif keys:
        code = _key_codes(keys, n_real)
        parts_code[0] = code
    code = np.concatenate(parts_code)
    k = np.concatenate(parts_k)
    present = np.concatenate(parts_present)
    virtual = np.concatenate(parts_virtual)
    values = [(_cat(*[p[j][0] for p in parts_values]),
               np.concatenate([p[j][1] for p in parts_values]))
              for j in range(len(op.aggregates))]
    keys = parts_keys[0]
    for extra in parts_keys[1:]:
        keys = _concat_columns(keys, extra)
    if op.window == "SLIDE" and final_hi is not None:
        # absences: after each present observation whose next instant is not observed
        order = np.lexsort((k, code))
        code, k, present, virtual = code[order], k[order], present[order], virtual[order]
        values = [(v[order], m[order]) for v, m in values]
        keys = _take_keys(keys, order)
        nxt_same = np.zeros(len(code), bool)
        nxt_same[:-1] = (code[1:] == code[:-1]) & (k[1:] == k[:-1] + 1)
        gap = present & ~nxt_same & (k + 1 <= final_hi)
        if final_lo is not None:
            gap &= k + 1 >= final_lo
        idx = np.flatnonzero(gap)
        if len(idx):
            code = np.concatenate([code, code[idx]])
            k = np.concatenate([k, k[idx] + 1])
            present = np.concatenate([present, np.zeros(len(idx), bool)])
            virtual = np.concatenate([virtual, np.zeros(len(idx), bool)])
            values = [(np.concatenate([v, v[idx]]), np.concatenate([m, m[idx]]))
                      for v, m in values]
            keys = _concat_columns(keys, _take_keys(keys, idx))
    # a key's previous result (virtual) first, then its observations in instant order
    order = np.lexsort((k, ~virtual, code)) if len(code) else np.zeros(0, np.int64)
    return (code[order], k[order], present[order], [(v[order], m[order]) for v, m in values],
            _take_keys(keys, order), virtual[order])


def _new_last(op: Operator, obs: dict, keys: list, last: pa.Table | None, final_hi,
              s: int) -> pa.Table | None:
    """Each key's result at its latest final observation (ISTREAM/DSTREAM diff against it
    in the next step); keys without a new observation keep theirs."""
    if op.output == "RSTREAM":
        return None
    code, k, row = obs["code"], obs["k"], obs["row"]
    present = obs.get("present", np.ones(len(code), bool))
    values = obs["values"]
    out_keys = _take_keys(keys, row)
    seq = _sequence(op, code, k, present, values, out_keys, last, None, final_hi)
    code, k, present, values, out_keys, _ = seq
    if not len(code):
        return last
    is_last = np.ones(len(code), bool)
    is_last[:-1] = code[1:] != code[:-1]
    idx = np.flatnonzero(is_last)
    chosen = _take_keys(out_keys, idx)
    cols = {**_key_columns(chosen), "h": _key_hash(chosen, len(idx)), "t": k[idx],
            "present": present[idx]}
    for j, (v, m) in enumerate(values):
        cols[f"g{j}"], cols[f"gn{j}"] = v[idx], m[idx]
    return _table(cols)


def _concat_results(parts: list[Results], op: Operator) -> Results:
    parts = [p for p in parts if len(p)]
    if not parts:
        return Results(np.zeros(0, np.int64), np.zeros(0, bool), [], [])
    if len(parts) == 1:
        return parts[0]
    keys = parts[0].keys
    for p in parts[1:]:
        keys = _concat_columns(keys, p.keys)
    values = [(_cat(*[p.values[j][0] for p in parts]),
               np.concatenate([p.values[j][1] for p in parts]))
              for j in range(len(op.aggregates))]
    return Results(np.concatenate([p.time for p in parts]),
                   np.concatenate([p.final for p in parts]), keys, values)
