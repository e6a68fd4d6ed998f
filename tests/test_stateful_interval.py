"""Continuous interval (band) join on Spark's state store (streaming/stateful/interval*.py),
against pandas -- a cross join of the rows that are not late, filtered by the band and the
keys, computed here -- not against WaveSQL's batch mode, nor with any helper of the code
under test.

The oracle, the re-evaluating runner's definition: each stream has its own progress (its
largest event time seen minus the WATERMARK), and a row is late below its own stream's
progress of the micro-batch it arrives in (one batch behind the rows that raise it, as
Spark's watermark is). Every pair of rows that are not late, with equal non-NULL keys and
``lo <= a.ts - b.ts <= hi``, is emitted once; ``_progress`` is the smaller of the two
progresses; a kept row goes once the other stream's progress has passed its band.

Two levels: the kernel alone, batch by batch with buckets called only for new rows or an
expired timer (as Spark calls them, its watermark being stream ``b``'s progress) -- fast,
many seeds, bands on either side, one stream far ahead of the other; and end to end on
Spark over files arriving into both streams in rounds on one checkpoint (each round a
restart). The stream/row helpers are the ASOF join's tests' (tests/test_stateful_asof.py).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_stateful_asof import KILL_JOB as ASOF_JOB
from tests.test_stateful_asof import (SECOND, _arrive, _draw, _encode, _files, _in_files,
                                      _micros, _rounds, _streams, late_by_own_progress_only,
                                      oracle_late, oracle_progress)


# -- the oracle ----------------------------------------------------------------------------
def oracle_pairs(a: pd.DataFrame, b: pd.DataFrame, lo: int, hi: int, keyed: bool) -> Counter:
    """``(a id, b id)`` of every pair: the cross join of ``a`` and ``b`` (with keys, on
    equal keys -- a NULL key equals nothing) filtered by ``lo <= a.ts - b.ts <= hi``."""
    if keyed:
        m = a.dropna(subset=["k"]).merge(b.dropna(subset=["k"]), on="k", suffixes=("_a", "_b"))
    else:
        m = a.merge(b, how="cross", suffixes=("_a", "_b"))
    d = m.ts_a - m.ts_b
    m = m[(d >= lo) & (d <= hi)]
    return Counter(zip(m.id_a.astype(int), m.id_b.astype(int)))


def pairs_of(context: pd.DataFrame, lo: int, hi: int, keyed: bool) -> list:
    """What the micro-batch's batch plan makes of a bucket's handed-back rows, written
    here with pandas: (new a x every b) and (kept a x new b), by key and band."""
    is_b = context.right.to_numpy(bool)
    a = pd.DataFrame({"id": context.l1[~is_b], "ts": context.ts[~is_b],
                      "k": np.where(context.ln0[~is_b], None, context.l0[~is_b]),
                      "new": context.new[~is_b]})
    b = pd.DataFrame({"id": context.r1[is_b], "ts": context.ts[is_b],
                      "k": np.where(context.rn0[is_b], None, context.r0[is_b]),
                      "new": context.new[is_b]})
    out = []
    for left, right in ((a[a.new], b), (a[~a.new], b[b.new])):
        out += list(oracle_pairs(left, right, lo, hi, keyed).elements())
    return out


# -- the kernel, batch by batch ------------------------------------------------------------
def drive_kernel(op, parts, progress, keyed, buckets, seen, extra=None):
    """Run ``op`` over the stream parts batch by batch as Spark would call it -- each
    bucket with new rows, or whose timer ``b``'s progress (Spark's watermark) passed --
    with each stream's progress from the oracle; ``seen(result, wl, wr)`` gets
    every call, ``extra`` columns are added to the new rows (the planner's). Returns
    (late ids, state rows after each step)."""
    from streaming.stateful import interval
    from streaming.stateful import state as st

    batches = len(parts["l"])
    empty = parts["l"][0].iloc[:0]
    states, timers = {}, {}
    late, sizes = set(), []
    step = 0
    while True:
        data = step < batches
        p = progress[min(step, batches)]
        wl, wr = p["l"], p["r"]
        new = pd.concat([_encode(parts["l"][step], False), _encode(parts["r"][step], True)],
                        ignore_index=True) if data else _encode(empty, False)
        new = new.assign(**(extra or {}))
        code = np.where(new.nk.to_numpy(bool) & keyed, 0, new.sk.to_numpy() // 7)
        bucket = code % buckets if keyed else np.zeros(len(new), int)
        called = set(np.unique(bucket)) | {k for k, t in timers.items()
                                           if t is not None and wr is not None and wr > t}
        for bk in sorted(called):
            mine = new[bucket == bk].reset_index(drop=True)
            result = interval.step(op, states.get(bk), mine, wl, wr)
            states[bk], timers[bk] = result.state, result.timer
            late |= set(int(x) for x in np.where(mine.right, mine.r1, mine.l1)[result.late])
            seen(result, wl, wr)
        sizes.append(sum(st.decode("interval", s)[1]["rows"].num_rows
                         for s in states.values() if s is not None))
        step += 1
        # a batch without new rows runs while b's progress (Spark's watermark) moved
        if not data and progress[min(step, batches)]["r"] == wr:
            break
    return late, sizes


def run_kernel(a, b, lo, hi, keyed, rng, batches=8, buckets=2):
    """Both streams through the kernel (``a`` as the left stream, ``b`` the right one),
    batch by batch (:func:`drive_kernel`): returns (the pairs emitted, late ids, each
    step's progress, state rows per step, the parts each batch read)."""
    from streaming.stateful import interval
    from streaming.stateful import state as st

    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), lo, hi, keyed)
    parts = {"l": _arrive(rng, a, batches, 3 * SECOND),
             "r": _arrive(rng, b, batches, 3 * SECOND)}
    progress = oracle_progress(parts)
    emitted = []

    def seen(result, wl, wr):
        emitted.extend(pairs_of(result.context, lo, hi, keyed))
        if result.state is not None:  # what a called bucket keeps, future rows can match
            rows = st.decode("interval", result.state)[1]["rows"].to_pandas()
            ts, right = rows.ts.to_numpy(), rows.right.to_numpy(bool)
            assert wr is None or (ts[~right] >= wr + lo).all()
            assert wl is None or (ts[right] >= wl - hi).all()

    late, sizes = drive_kernel(op, parts, progress, keyed, buckets, seen)
    return Counter(emitted), late, progress, sizes, parts


BANDS = {"around": (-2 * SECOND, 3 * SECOND), "after": (SECOND, 4 * SECOND),
         "before": (-5 * SECOND, -SECOND)}
AHEAD = {"aligned": None, "b-ahead": ("r", 20 * SECOND), "a-ahead": ("l", 20 * SECOND)}
CASES = [pytest.param(seed, BANDS[band], keyed, AHEAD[ahead],
                      id=f"{seed}-{band}-{'keyed' if keyed else 'no-keys'}-{ahead}")
         for seed, (band, keyed, ahead) in enumerate(
             [(band, k, ahead) for ahead in AHEAD for band in BANDS for k in (True, False)])]


@pytest.mark.parametrize("seed, band, keyed, ahead", CASES)
def test_kernel_batch_by_batch_equals_a_cross_join_filtered_by_the_band(seed, band, keyed,
                                                                        ahead):
    """Random batch splits, rows out of order (some far: late on either side), one stream
    20 s ahead of the other or neither, bands around, after and before the other stream's
    time, buckets called only with new rows or an expired timer: late rows are exactly
    those below their own stream's progress of their batch; the pairs emitted are the
    cross join of the rows not late filtered by keys and band, each once; no kept row is
    one the other stream's progress has passed by its band."""
    rng = np.random.default_rng(200 + seed)
    lo, hi = band
    a, b = _draw(rng, int(rng.integers(60, 160)), int(rng.integers(60, 160)), keyed,
                 ahead=ahead)
    emitted, late, progress, _, parts = run_kernel(a, b, lo, hi, keyed, rng,
                                                   batches=int(rng.integers(5, 12)))
    assert late == oracle_late(parts, progress)
    want = oracle_pairs(a[~a.id.isin(late)], b[~b.id.isin(late)], lo, hi, keyed)
    assert sum(want.values()) > 20
    assert emitted == want  # every pair, once


@pytest.mark.parametrize("ahead", ["r", "l"])
def test_kernel_a_stream_far_ahead_keeps_its_own_progress(ahead):
    """One stream 30 s ahead: its rows between the other stream's progress and its own
    are late (one progress for both, the smaller, would have joined them), and the pairs
    are the cross join of the rows not late, filtered by the band."""
    rng = np.random.default_rng(50 if ahead == "r" else 51)
    a, b = _draw(rng, 300, 300, True, ahead=(ahead, 30 * SECOND))
    lo, hi = -35 * SECOND, 35 * SECOND  # (wide enough to pair across the lead)
    emitted, late, progress, _, parts = run_kernel(a, b, lo, hi, True, rng, batches=8)
    assert late == oracle_late(parts, progress)
    only_own = late_by_own_progress_only(parts, progress, ahead)
    assert len(only_own) >= 3 and only_own <= late
    want = oracle_pairs(a[~a.id.isin(late)], b[~b.id.isin(late)], lo, hi, True)
    assert emitted == want and sum(want.values()) > 1000


def test_kernel_state_is_arrow_bytes_and_rows_go_by_the_other_streams_progress():
    """A bucket's state is WaveSQL's Arrow IPC value, never a pickle; an ``a`` row goes
    once b's progress passes its time - lo, a ``b`` row once a's passes its time + hi; the
    timer is when b's progress next lets a row go; late rows are below their own
    stream's progress; the progresses kept never go back."""
    from streaming.stateful import interval
    from streaming.stateful import state as st

    lo, hi = -2 * SECOND, 3 * SECOND
    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), lo, hi, True)
    a = pd.DataFrame({"id": [1, 2], "k": ["a", "b"], "ts": [10 * SECOND, 20 * SECOND]})
    b = pd.DataFrame({"id": [10, 11], "k": ["a", "b"], "ts": [9 * SECOND, 30 * SECOND]})
    new = pd.concat([_encode(a, False), _encode(b, True)], ignore_index=True)
    first = interval.step(op, None, new, None, None)  # no progress: everything is kept
    assert first.state_rows == 4 and first.timer == 10 * SECOND - lo
    assert sorted(zip(first.context.right, first.context.l1 + first.context.r1)) == [
        (False, 1), (True, 10)]  # a1 (10 s) pairs b10 (9 s); a2, b11 have no partner
    # a's progress 12 s, b's 25 s: a rows from 23 s on stay (none), b rows from 9 s on (both)
    later = pd.DataFrame({"id": [3, 4], "k": ["b", "b"], "ts": [11 * SECOND, 29 * SECOND]})
    result = interval.step(op, first.state, _encode(later, False), 12 * SECOND, 25 * SECOND)
    assert result.late.tolist() == [True, False]  # a3 at 11 s is below a's 12 s
    assert result.state.startswith(b"WSQLSTATE") and b"pickle" not in result.state
    meta, tables = st.decode("interval", result.state)
    assert meta == {"wl": 12 * SECOND, "wr": 25 * SECOND}
    rows = tables["rows"].to_pandas()
    assert sorted(zip(rows.right, rows.l1 + rows.r1)) == [(False, 4), (True, 10), (True, 11)]
    ctx = result.context  # a4 (new) pairs the kept b11 (29 - 30 = -1 s)
    assert sorted(zip(ctx.right, ctx.l1 + ctx.r1, ctx.new)) == [(False, 4, True),
                                                                 (True, 11, False)]
    assert result.timer == 29 * SECOND - lo  # a4's; b10 (9 + 3 s) goes by a's progress
    again = interval.step(op, result.state, _encode(a.iloc[:0], False), 30 * SECOND, None)
    meta, tables = st.decode("interval", again.state)
    assert meta == {"wl": 30 * SECOND, "wr": 25 * SECOND}
    # a's progress 30 s: b rows before 27 s go (b10); b11 at 30 s stays
    assert sorted(tables["rows"].column("r1").to_pylist()) == [0, 11]
    with pytest.raises(st.StateError):
        st.decode("asof", again.state)


def test_kernel_keeps_a_row_while_the_other_streams_next_row_can_still_pair_it():
    """The edges, band [-2 s, 3 s]: with a's progress 12 s and b's 25 s, the ``a`` row at
    23 s (= 25 s + lo) and the ``b`` row at 9 s (= 12 s - hi) are kept; the next batch's
    ``b`` row at 25 s and ``a`` row at 12 s -- at their own stream's progress, not late --
    pair them at the band's ends."""
    from streaming.stateful import interval

    op = interval.IntervalOperator(("string", "bigint"), ("string", "bigint"), -2 * SECOND,
                                   3 * SECOND, True)

    def rows(a_rows, b_rows):
        a = pd.DataFrame(a_rows, columns=["id", "k", "ts"])
        b = pd.DataFrame(b_rows, columns=["id", "k", "ts"])
        return pd.concat([_encode(a, False), _encode(b, True)], ignore_index=True)

    first = interval.step(op, None, rows([(1, "a", 23 * SECOND)], [(10, "a", 9 * SECOND)]),
                          None, None)
    kept = interval.step(op, first.state, rows([], []), 12 * SECOND, 25 * SECOND)
    assert kept.state_rows == 2 and not len(kept.context)
    last = interval.step(op, kept.state, rows([(2, "a", 12 * SECOND)],
                                              [(11, "a", 25 * SECOND)]), 12 * SECOND,
                         25 * SECOND)
    assert not last.late.any()
    assert sorted(pairs_of(last.context, op.lo, op.hi, True)) == [(1, 11), (2, 10)]


def test_kernel_state_stays_bounded_over_a_long_history():
    """A long history, the same band and keys: the state the buckets keep does not grow
    with it (each stream's rows within the band of the other's progress)."""
    rng = np.random.default_rng(12)
    a, b = _draw(rng, 1200, 1200, True, span_s=240)
    _, _, _, sizes, _ = run_kernel(a, b, -2 * SECOND, 3 * SECOND, True, rng, batches=24)
    early, late_ = max(sizes[:12]), max(sizes[12:])
    assert late_ <= 2 * early, (early, late_)
    assert max(sizes) < 0.25 * (len(a) + len(b))


# -- end to end on Spark -------------------------------------------------------------------
JOIN = ("SELECT t.k, t.v AS tid, q.v AS qid, t.ts AS tts, q.ts AS qts FROM trades t "
        "JOIN quotes q ON t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 2 SECONDS "
        "AND t.ts + INTERVAL 3 SECONDS")


@pytest.mark.slow  # (150 s at load ~10 on 2 cores; the test below runs the join in CI)
def test_continuous_interval_join_on_the_state_store(ws, spark, tmp_path):
    """Files arrive into both streams in two rounds on one checkpoint (state and the
    driver's progress record restored at the restart), out of order, quotes 10 s ahead of
    trades, late rows on each side and a row without event time: the sink holds every
    pair of rows not late with equal keys and ``-2 s <= q.ts - t.ts <= 3 s`` once (the
    pandas cross join); the rows below their own stream's progress -- computed here per
    micro-batch from the files -- are in the late sink, and nothing else is; each
    micro-batch reports each stream's progress and the smaller as ``_progress``, and
    accounts for its rows five ways; the state stays bounded."""
    rng = np.random.default_rng(61)
    trades, quotes = _draw(rng, 240, 300, True, span_s=60, ahead=("r", 10 * SECOND))
    parts = {"l": _in_files(rng, trades, 4), "r": _in_files(rng, quotes, 4)}
    # in the last quotes file, rows below the quotes' progress but above the trades': late
    # all the same (one progress for both, the smaller, would have paired them)
    extra = parts["r"][1].head(4)
    parts["r"][3] = pd.concat([parts["r"][3], extra.assign(
        id=extra.id + 60_000, ts=oracle_progress(parts)[3]["r"] - 3 * SECOND
        - np.arange(4) * 1000)])
    _files(tmp_path / "staging" / "trades", parts["l"])
    _files(tmp_path / "staging" / "quotes", parts["r"], timeless=True)
    _streams(ws, tmp_path)
    assert "stateful interval join on Spark's state store" in ws.explain(JOIN, "STREAM")
    reports = _rounds(ws, tmp_path, JOIN, [2, 2], engine="StatefulIntervalQuery")
    # the oracle: file i of each stream is read in the i-th micro-batch with rows
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    every_t, every_q = pd.concat(parts["l"]), pd.concat(parts["r"])
    want = oracle_pairs(every_q[~every_q.id.isin(late)], every_t[~every_t.id.isin(late)],
                        -2 * SECOND, 3 * SECOND, True)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((int(r["qid"]), int(r["tid"])) for r in rows)
    assert got == want and sum(want.values()) > 150
    names = {"l": "trades", "r": "quotes"}
    with_rows = [r for r in reports if r.rows_in]
    assert [r.inputs for r in with_rows] == [{names[k]: v for k, v in p.items()}
                                             for p in progress[:4]]
    assert reports[-1].progress_us == min(progress[-1].values())
    # (a pair is final as it comes: before both streams have progress, with none)
    shown = {None if r["_progress"] is None else _micros(r["_progress"]) for r in rows}
    assert shown - {None} <= {min(p.values()) for p in progress if None not in p.values()}
    assert "_final" not in rows[0]
    only_own = late_by_own_progress_only(parts, progress, "r")
    assert len(only_own) >= 3 and only_own <= late
    sink = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert len(late) >= 8 and sum(r.late for r in reports) == len(late)
    timed = [r for r in sink if json.loads(r["_row"]).get("ts") is not None]
    assert len(sink) - len(timed) == 1  # the row without event time
    assert {int(json.loads(r["_row"])["v"]) for r in timed} == late
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").glob(
        "*.json")]
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"])
    assert sum(r["rows_in"] for r in records) == len(every_t) + len(every_q) + 1
    # bounded: the rows within the band of the other stream's progress (and the lead of
    # the stream ahead, 10 s of its 60), not the history
    buffered = [r.buffered for r in reports if r.rows_in]
    assert 0 < max(buffered) < (len(trades) + len(quotes)) // 3 + len(quotes) // 6


def test_one_run_equals_pandas_and_what_stays_re_evaluated_says_why(ws, spark, tmp_path,
                                                                    monkeypatch):
    """One micro-batch of each stream on the state store: every pair of equal keys within
    the band, once (the pandas cross join); keys of different kinds stay on the
    re-evaluating runner and EXPLAIN STREAM names the reason, and a FULL interval join
    over them is refused (NOT_IMPLEMENTED: outer joins run on the state store only;
    test_stateful_interval_outer.py); a changed band on a state-store checkpoint,
    or the re-evaluating runner on it, is CHECKPOINT_MISMATCH, never results from another
    state."""
    from wavesql.errors import WaveSQLError

    rng = np.random.default_rng(4)
    trades, quotes = _draw(rng, 60, 60, True, span_s=20)
    _files(tmp_path / "staging" / "trades", [trades])
    _files(tmp_path / "staging" / "quotes", [quotes])
    _streams(ws, tmp_path)
    for name in ("trades", "quotes"):
        (tmp_path / "staging" / name / "part-000.parquet").rename(
            tmp_path / "in" / name / "part-000.parquet")
    (tmp_path / "ints").mkdir()
    ws.sql(f"CREATE STREAM ints (k INT, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'ints'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    shown = ws.explain(JOIN.replace("quotes q", "ints q"), "STREAM")
    assert "continuous band query" in shown and "not on the state store" in shown
    assert "hold different kinds of values" in shown
    with pytest.raises(WaveSQLError) as err:  # outer joins run on the state store only
        ws.explain(JOIN.replace("quotes q", "ints q").replace(" JOIN ", " FULL JOIN "),
                   "STREAM")
    assert err.value.code == "NOT_IMPLEMENTED" and "state store only" in str(err.value)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    cq = ws.stream(JOIN, out, ckpt)
    cq.await_termination()
    assert type(cq).__name__ == "StatefulIntervalQuery"
    rows = spark.read.parquet(str(out)).collect()
    want = oracle_pairs(quotes, trades, -2 * SECOND, 3 * SECOND, True)
    assert Counter((int(r["qid"]), int(r["tid"])) for r in rows) == want
    assert sum(want.values()) > 20
    with pytest.raises(WaveSQLError) as err:
        ws.stream(JOIN.replace("3 SECONDS", "4 SECONDS"), out, ckpt)
    assert err.value.code == "CHECKPOINT_MISMATCH" and "[-2000000, 4000000]" in str(err.value)
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(JOIN, out, ckpt).await_termination()
    assert err.value.code == "CHECKPOINT_MISMATCH"


#: the ASOF job's streams and sink, this join into it
KILL_JOB = ASOF_JOB.split("INSERT INTO")[0] + """INSERT INTO joined
  SELECT q.v AS qid, t.v AS tid FROM trades t JOIN quotes q
  ON t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 2 SECONDS AND t.ts + INTERVAL 3 SECONDS;
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_job_killed_after_its_batch_wrote_the_progress_record_is_exactly_once(ws, tmp_path):
    """``wavesql run`` of a continuous interval join (quotes 10 s ahead, three files a
    stream, one per micro-batch) is SIGKILLed the second time a batch is done -- its
    pairs, late rows and progress record written, Spark's commit not -- and run again to
    its end: the sink holds every pair of rows not late once (the pandas cross join), and
    the late sink the rows below their own stream's progress."""
    from tests.test_run_files import run_in_process, run_killed_at

    rng = np.random.default_rng(32)
    trades, quotes = _draw(rng, 120, 140, True, span_s=45, ahead=("r", 10 * SECOND))
    parts = {"l": _in_files(rng, trades, 3), "r": _in_files(rng, quotes, 3)}
    _files(tmp_path / "in" / "trades", parts["l"])
    _files(tmp_path / "in" / "quotes", parts["r"])
    (tmp_path / "job.wsql").write_text(KILL_JOB)
    run_killed_at(tmp_path, "batch-done")
    assert (tmp_path / "out" / "joined").exists()
    run_in_process(ws, tmp_path)
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    every_t, every_q = pd.concat(parts["l"]), pd.concat(parts["r"])
    want = oracle_pairs(every_q[~every_q.id.isin(late)], every_t[~every_t.id.isin(late)],
                        -2 * SECOND, 3 * SECOND, True)
    rows = pd.concat([pd.read_parquet(f) for f in
                      (tmp_path / "out" / "joined").glob("job=*/batch=*/*.parquet")])
    assert Counter(zip(rows.qid.astype(int), rows.tid.astype(int))) == want
    assert sum(want.values()) > 60 and len(late) >= 4
    sink = pd.concat([pd.read_parquet(f) for f in
                      (tmp_path / "out" / "joined").glob("_wavesql/*/late/**/*.parquet")])
    assert {int(json.loads(r)["v"]) for r in sink._row} == late
