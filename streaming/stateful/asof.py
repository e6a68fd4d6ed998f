"""Incremental ASOF JOIN: one bucket of keys, one micro-batch (numpy and pandas, no Spark).

A continuous ``ASOF [LEFT] JOIN`` of two streams (``streaming/joins.py`` :func:`plan_asof`:
which rows wait, which are kept) matches each left row with the right row of its keys
nearest in time -- at or before it (``backward``) or at or after it (``forward``),
strictly when not ``inclusive``. Each stream has its own progress, as on the
re-evaluating runner: ``L`` the left stream's, ``R`` the right stream's (each its largest
event time minus its WATERMARK, its punctuation, its HEARTBEAT; the query's progress is
the smaller). :func:`step` gets one bucket's state (its waiting left rows and the right
rows they or later left rows can still match), the bucket's new rows of both streams and
the two progresses the micro-batch runs with, and

1. sets aside the **late** rows: a left row below ``L``, a right row below ``R``; a right
   row with a NULL key matches nothing, ever, and is not kept;
2. picks the left rows whose match is **final** -- ``plan_asof``'s rules, by the right
   stream's progress: backward, ``left time < R`` (no right row at or before it can
   still come); forward, a right row of its keys at (strict: after) its time is below
   ``R`` (every right row that could come before that one has arrived), or its key is
   NULL (it matches nothing: final once there is progress);
3. hands back those left rows and the right rows of their keys (the **context**): the
   caller evaluates the batch plan over them, so ties, the SELECT around the join and
   ``ASOF LEFT JOIN``'s NULL matches mean what they mean in a batch query; each left row
   is handed back once, in the step that makes it final;
4. keeps the left rows still waiting and, of the right rows, those a waiting or future
   left row can still match. A future left row is at or after ``L`` (one below is late);
   a waiting backward row at or after ``R`` (one below would be final), a waiting forward
   row's match at or after both its time and ``R``. So with ``m`` the earliest time such
   a match can have -- ``L`` or a waiting row's time (forward: ``max(time, R)``), the
   smallest -- backward keeps the right rows from ``m`` on plus, per key, the last ones
   before ``m`` (ties kept: the batch rule breaks them), forward the right rows from
   ``m`` on; no ``L`` yet, every right row. State is bounded by the watermarks' delay and
   the number of keys;
5. names the next event time ``R`` must pass for a waiting row to become final with the
   rows there are (backward: the oldest waiting left row; forward: the earliest right
   row that is some waiting row's match), so the caller sets a timer on Spark's
   watermark, which is ``R``: a row becomes final without new rows of its bucket when
   the right stream's rows move it.

Rows travel encoded (``asof_plan.py``): each column of either stream as value plus NULL
flag (``l0, ln0, ...`` left, ``r0, rn0, ...`` right; the other stream's all NULL), the
event time in microseconds, ``right`` (which stream), the keys as two independent hashes
(``sk``, ``sh``) and ``nk`` (a key is NULL). The state is one Arrow table of the kept rows
of both streams and the two progresses it last saw (:mod:`.state`; neither goes back).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from . import state as st
from .lookback import ARROW

MAX = np.iinfo(np.int64).max


@dataclass(frozen=True)
class AsofOperator:
    """An ASOF JOIN's kernel: the encoded types of the left and right streams' columns,
    the direction, whether an exact time matches and whether it has keys."""

    left: tuple[str, ...]
    right: tuple[str, ...]
    direction: str  # "backward" | "forward"
    inclusive: bool
    keyed: bool

    kind = "asof"

    def schema(self) -> pa.Schema:
        """The Arrow schema of the rows handed in, kept and handed back."""
        return two_stream_schema(self.left, self.right)


def two_stream_schema(left: tuple[str, ...], right: tuple[str, ...],
                      extra: tuple = ()) -> pa.Schema:
    """The encoded rows of a join of two streams (module docstring): time, stream, key
    hashes, then each stream's columns as NULL flag plus value; ``extra`` fields last."""
    fields = [pa.field("ts", pa.int64()), pa.field("right", pa.bool_()),
              pa.field("sk", pa.int64()), pa.field("sh", pa.int64()),
              pa.field("nk", pa.bool_())]
    for side, types in (("l", left), ("r", right)):
        for i, t in enumerate(types):
            fields += [pa.field(f"{side}n{i}", pa.bool_()), pa.field(f"{side}{i}", ARROW[t])]
    return pa.schema(fields + list(extra))


@dataclass
class AsofStep:
    context: pd.DataFrame  # the left rows made final and the right rows of their keys
    ready: int  # how many left rows the context holds
    late: np.ndarray  # mask over the new rows
    state: bytes | None  # None: nothing to keep
    timer: int | None  # the next event time R must pass for a waiting row to be final
    state_rows: int


def step(op: AsofOperator, value: bytes | None, new: pd.DataFrame,
         left_progress: int | None, right_progress: int | None) -> AsofStep:
    """One micro-batch of ``op`` over one bucket (module docstring). ``new``: the encoded
    rows of both streams (``op.schema()``'s columns); ``left_progress`` / ``right_progress``:
    each stream's progress the micro-batch runs with (None: none yet)."""
    names = [f.name for f in op.schema()]
    kept, wl, wr, late = resume(op.kind, value, new, left_progress, right_progress)
    fresh = new.loc[~late, names]
    rows = pd.concat([kept, fresh], ignore_index=True) if kept is not None else \
        fresh.reset_index(drop=True)
    is_right = rows["right"].to_numpy(bool)
    if op.keyed:  # a right row with a NULL key matches nothing: never kept
        keep = ~(is_right & rows["nk"].to_numpy(bool))
        rows, is_right = rows[keep].reset_index(drop=True), is_right[keep]
    left, right = rows[~is_right], rows[is_right]
    lt = left["ts"].to_numpy(np.int64)
    rt = right["ts"].to_numpy(np.int64)
    lid, rid = series(left, right)
    nk = left["nk"].to_numpy(bool) & op.keyed
    if op.direction == "backward":
        match = None
        ready = lt < wr if wr is not None else np.zeros(len(left), bool)
    else:
        match = _forward_match(lt, lid, rt, rid, op.inclusive)
        ready = ((match < wr) | nk) if wr is not None else np.zeros(len(left), bool)
    # the context: the ready left rows and the right rows of their keys (a NULL key's
    # left row needs none)
    wanted = np.unique(lid[ready & ~nk])
    context = pd.concat([left[ready], right[np.isin(rid, wanted)]], ignore_index=True)
    keep_r = _kept_right(op, lt[~ready & ~nk], rt, rid, wl, wr)
    waiting = ~ready
    if not waiting.any():
        timer = None
    elif op.direction == "backward":
        timer = int(lt[waiting].min())
    else:
        # (a NULL key's row, waiting only for a first progress: at the latest once
        # progress passes it)
        pending = np.where(nk, lt, match)[waiting]
        pending = pending[pending != MAX]
        timer = int(pending.min()) if len(pending) else None
    after = pd.concat([left[waiting], right[keep_r]], ignore_index=True)[names]
    out = None
    if len(after):
        table = pa.Table.from_pandas(after, schema=op.schema(), preserve_index=False)
        out = st.encode(op.kind, {"wl": wl, "wr": wr}, {"rows": table})
    return AsofStep(context[names], int(ready.sum()), late, out, timer, len(after))


def resume(kind: str, value: bytes | None, new: pd.DataFrame, left_progress: int | None,
           right_progress: int | None):
    """A two-stream bucket picked up where its last call left it: ``(kept, wl, wr, late)``
    -- its kept rows (a frame; None: none), each stream's progress for this call (never
    going back: the one the bucket last saw when later) and which of the ``new`` rows are
    late, each below its own stream's progress."""
    meta, tables = st.decode(kind, value) if value is not None else ({}, {})
    wl = _never_back(meta.get("wl"), left_progress)
    wr = _never_back(meta.get("wr"), right_progress)
    new_ts = new["ts"].to_numpy(np.int64) if len(new) else np.zeros(0, np.int64)
    new_right = new["right"].to_numpy(bool) if len(new) else np.zeros(0, bool)
    late = np.where(new_right, new_ts < wr if wr is not None else False,
                    new_ts < wl if wl is not None else False)
    kept = tables["rows"].to_pandas() if "rows" in tables else None
    return kept, wl, wr, np.asarray(late, bool)


def _never_back(seen: int | None, given: int | None) -> int | None:
    """A stream's progress for this step: the one given, or the one the bucket last saw
    when that is later (a progress never goes back; None: none yet)."""
    if given is None:
        return seen
    return int(given) if seen is None else max(int(given), int(seen))


def _kept_right(op: AsofOperator, waiting_lt: np.ndarray, rt: np.ndarray, rid: np.ndarray,
                wl: int | None, wr: int | None) -> np.ndarray:
    """Which right rows a waiting or future left row can still match (module docstring,
    4.); ``waiting_lt``: the times of the waiting left rows that have keys."""
    if wl is None:  # a future left row may be at any time
        return np.ones(len(rt), bool)
    if op.direction == "forward" and wr is not None:
        waiting_lt = np.maximum(waiting_lt, wr)  # (a waiting row's match is not below R)
    m = min(wl, int(waiting_lt.min())) if len(waiting_lt) else wl
    keep = rt >= m
    if op.direction == "backward" and len(rt):
        before = rt < m
        last = pd.Series(np.where(before, rt, np.iinfo(np.int64).min)).groupby(
            rid).transform("max").to_numpy(np.int64)
        keep |= before & (rt == last)  # per key, the last rows before m (ties kept)
    return keep


def series(left: pd.DataFrame, right: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each left and right row's series number (equal keys: equal numbers)."""
    sk = np.concatenate([left["sk"].to_numpy(np.int64), right["sk"].to_numpy(np.int64)])
    sh = np.concatenate([left["sh"].to_numpy(np.int64), right["sh"].to_numpy(np.int64)])
    if not len(sk):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    codes, _ = pd.factorize(pd.MultiIndex.from_arrays([sk, sh]))
    codes = codes.astype(np.int64)
    return codes[:len(left)], codes[len(left):]


def _forward_match(lt, lid, rt, rid, inclusive: bool) -> np.ndarray:
    """Per left row, the time of the earliest right row of its series at (``inclusive``)
    or after its time; ``MAX`` where there is none. One sort of both streams' rows by
    series and time -- at equal times the right row after the left one when it matches
    (inclusive), before it when not -- then, per series, the next right time from the end."""
    n = len(lt)
    if not n:
        return np.zeros(0, np.int64)
    ids = np.concatenate([lid, rid])
    ts = np.concatenate([lt, rt])
    is_right = np.r_[np.zeros(n, bool), np.ones(len(rt), bool)]
    tie = is_right if inclusive else ~is_right  # sorts last at equal times
    order = np.lexsort((tie, ts, ids))
    nxt = pd.Series(np.where(is_right, ts, MAX)[order][::-1]).groupby(
        ids[order][::-1]).cummin().to_numpy(np.int64)[::-1]
    out = np.empty(len(ts), np.int64)
    out[order] = nxt
    return out[:n]
