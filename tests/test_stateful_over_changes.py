"""``EMIT CHANGES`` over OVER windows on Spark's state store (streaming/stateful/: the
look-back kernel, StatefulOverQuery), micro-batch by micro-batch, against pandas.

What EMIT CHANGES means (README "Continuous queries"): each micro-batch emits the rows that
became final in it (``previous progress <= ts < progress``, ``_final = true``) and every
result row not final yet (``ts >= progress``, ``_final = false``), each with its value over
the rows received so far -- re-emitted in every batch until final. The oracle here
computes the OVER values in pandas / numpy over the on-time rows of the files read up to
each batch (a file is read by one batch, whose progress is the largest event time of the
files before it minus the WATERMARK; its rows below that are late) and compares each
batch's output folder with them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import fields

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from tests.test_stateful_streaming import _run, _stream
from wavesql.errors import WaveSQLError

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)
WATERMARK = 2 * SECOND
RANGE_AVG = ("SELECT ts, k, v, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL "
             "3 SECONDS PRECEDING AND CURRENT ROW) AS m, v - lag(v) OVER (PARTITION BY k "
             "ORDER BY ts) AS d FROM kv WHERE v IS NULL OR v >= 10")
FRAME = "PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 4 SECONDS PRECEDING AND CURRENT ROW"
KERNEL = (f"SELECT ts, k, count(*) OVER ({FRAME}) AS n, sum(v) OVER ({FRAME}) AS m, "
          f"max(v) OVER ({FRAME}) AS d FROM kv WHERE v IS NULL OR v >= 10")


def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _parts(seed: int, n_files: int, per_file: int, keys="abc") -> list[pd.DataFrame]:
    """Files of rows arriving up to 4 s out of order (so some may be late: the watermark is
    2 s), NULL values, a row in the second file far below the first file's progress (late
    for sure); the last file ends with a key ``z`` whose rows all stay at or after the
    final progress (never final)."""
    rng = np.random.default_rng(seed)
    n = n_files * per_file
    ts = np.sort(rng.integers(0, 60 * SECOND, n)) // 1000 * 1000 + np.arange(n)  # no ties
    ts = ts[np.argsort(ts + rng.integers(0, 4 * SECOND, n))]
    frame = pd.DataFrame({"k": rng.choice(list(keys), n), "v": rng.integers(0, 100, n) * 1.0,
                          "ts": ts})
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    parts = [frame.iloc[i * per_file:(i + 1) * per_file] for i in range(n_files)]
    if n_files > 1:
        late = pd.DataFrame({"k": ["q"], "v": [55.0], "ts": [int(parts[0].ts.min())]})
        parts[1] = pd.concat([parts[1], late], ignore_index=True)
    top = int(frame.ts.max())
    z = pd.DataFrame({"k": ["z"] * 3, "v": [20.0, np.nan, 40.0],
                      "ts": [top - 1_500_000, top - 700_000, top]})
    parts[-1] = pd.concat([parts[-1], z], ignore_index=True)
    assert not pd.concat(parts).duplicated(["k", "ts"]).any()  # lag is defined up to ties
    return parts


def _write(folder, parts, first: int = 0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts, start=first):
        path = folder / f"part-{i:03d}.parquet"
        part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]")).to_parquet(
            path)
        stamp = time.time() - 3600 + i * 0.01  # read in this order, one file a batch
        os.utime(path, (stamp, stamp))


def run_in_two_steps(ws, tmp_path, sql: str, engine: str) -> list:
    """The first staged file moved in and the query run to the end, then the others and
    the query again on the same checkpoint (a restart mid-run) on the runner ``engine``:
    every run's reports."""
    reports = []
    staged = sorted((tmp_path / "staging").iterdir())
    for files in (staged[:1], staged[1:]):
        for f in files:
            stamp = f.stat().st_mtime
            shutil.move(f, tmp_path / "in" / f.name)
            os.utime(tmp_path / "in" / f.name, (stamp, stamp))
        cq = _run(ws, tmp_path, sql)
        assert type(cq).__name__ == engine
        reports += cq.reports
    return reports


# -- the oracles: the queries' values over the rows so far, in numpy ---------------------
def _r(x):
    return None if x is None or (isinstance(x, float) and np.isnan(x)) else round(float(x), 9)


def _range_avg_lag(rows: pd.DataFrame) -> dict:
    """RANGE_AVG: avg(v) over the 3 s up to each row (peers included, NULLs skipped) and
    v - lag(v), per key, over the rows the WHERE keeps."""
    rows = rows[rows.v.isna() | (rows.v >= 10)]
    out = {}
    for k, g in rows.groupby("k"):
        g = g.sort_values("ts")
        ts, v = g.ts.to_numpy(), g.v.to_numpy()
        for i in range(len(g)):
            frame = v[(ts >= ts[i] - 3 * SECOND) & (ts <= ts[i])]
            frame = frame[~np.isnan(frame)]
            d = v[i] - v[i - 1] if i else None
            out[(int(ts[i]), k)] = (_r(v[i]), _r(frame.mean()) if len(frame) else None, _r(d))
    return out


def _count_sum_max(rows: pd.DataFrame) -> dict:
    """KERNEL: count(*), sum(v), max(v) over the 4 s up to each row, per key, WHERE'd."""
    rows = rows[rows.v.isna() | (rows.v >= 10)]
    out = {}
    for k, g in rows.groupby("k"):
        ts, v = g.ts.to_numpy(), g.v.to_numpy()
        for i in range(len(g)):
            inside = v[(ts >= ts[i] - 4 * SECOND) & (ts <= ts[i])]
            vals = inside[~np.isnan(inside)]
            out[(int(ts[i]), k)] = (len(inside), _r(vals.sum()) if len(vals) else None,
                                    _r(vals.max()) if len(vals) else None)
    return out


def _check_batches(spark, tmp_path, parts, reports, oracle, look_back: int | None = None,
                   late_rows: bool = True) -> tuple[int, int]:
    """Each micro-batch's output folder against ``oracle`` over the rows so far; returns
    (final rows, not-final rows) seen. Also checks each batch's progress and late rows,
    and (``look_back`` µs) that the state after it is at most the rows from progress -
    look_back on and one row per key before (``lag``)."""
    assert [r.batch for r in reports] == list(range(len(reports)))
    got: dict[int, Counter] = {}
    stamps: dict[int, set] = {}
    for row in spark.read.parquet(str(tmp_path / "out")).collect():
        first = _r(row["v"]) if "v" in row.asDict() else row["n"]  # (the kernel's query: n)
        key = (_micros(row["ts"]), row["k"], first, _r(row["m"]), _r(row["d"]), row["_final"])
        got.setdefault(row["batch"], Counter())[key] += 1
        stamps.setdefault(row["batch"], set()).add(row["_progress"])
    so_far, top, previous, late_n = [], None, None, 0
    seen = [0, 0]
    files = iter(parts)
    for r in reports:
        progress = None if top is None else top - WATERMARK
        assert r.progress_us == progress, r.batch
        if r.rows_in:  # a data batch reads the next file
            part = next(files)
            assert r.rows_in == len(part)
            late = (part.ts < progress) if progress is not None else np.zeros(len(part), bool)
            assert r.late == int(late.sum())
            late_n += int(late.sum())
            so_far.append(part[~late])
            top = max(int(part.ts.max()), top if top is not None else int(part.ts.max()))
        values = oracle(pd.concat(so_far)) if so_far else {}
        want = Counter()
        for (ts, k), vals in values.items():
            final = progress is not None and ts < progress
            if final and previous is not None and ts < previous:
                continue  # final in an earlier batch
            want[(ts, k, vals[0], vals[1], vals[2], final)] += 1
        assert got.get(r.batch, Counter()) == want, r.batch
        assert r.rows_out == sum(want.values())
        assert r.final_out == sum(n for key, n in want.items() if key[-1])
        if want:
            shown = None if progress is None else EPOCH + dt.timedelta(microseconds=progress)
            assert stamps[r.batch] == {shown}
        seen[0] += r.final_out
        seen[1] += r.rows_out - r.final_out
        if look_back is not None and so_far:
            rows = pd.concat(so_far)
            cut = progress - look_back if progress is not None else rows.ts.min()
            assert r.buffered <= (rows.ts >= cut).sum() + rows.k.nunique(), r.batch
        previous = progress
    assert next(files, None) is None  # every file was read
    assert (late_n > 0) == late_rows
    return seen[0], seen[1]


# -- end to end ---------------------------------------------------------------------------
@pytest.mark.slow
def test_changes_of_over_windows_batch_by_batch_across_a_restart(ws, spark, tmp_path):
    """The batch plan's path (a RANGE frame and lag, after a WHERE) over random rows, in
    two runs on one checkpoint: final rows once, rows not final yet re-emitted each batch
    with their value over the rows so far (the key ``z`` only ever so), late rows in the
    late sink. (Slow: CI runs the deterministic case below, which covers the same.)"""
    parts = _parts(seed=31, n_files=3, per_file=50)
    _write(tmp_path / "staging", parts)
    (tmp_path / "in").mkdir()
    _stream(ws, tmp_path / "in")
    sql = RANGE_AVG + " EMIT CHANGES"
    shown = ws.explain(sql, "STREAM")
    assert "stateful OVER windows on Spark's state store" in shown and "buckets of k" in shown
    assert "EMIT CHANGES" in shown and "re-evaluated" not in shown
    reports = run_in_two_steps(ws, tmp_path, sql, "StatefulOverQuery")
    final, early = _check_batches(spark, tmp_path, parts, reports, _range_avg_lag,
                                  look_back=3 * SECOND)
    assert final > 100 and early > 30
    on_time = pd.concat(parts)
    assert (on_time.k == "z").sum() == 3
    late_rows = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert len(late_rows) == sum(r.late for r in reports) > 0
    assert all(json.loads(r["_row"])["k"] != "z" for r in late_rows)
    # the state is the look-back and the rows not final yet (checked batch by batch above)
    assert max(r.buffered for r in reports) > 0
    # the same query without EMIT CHANGES is another plan: it refuses this checkpoint
    with pytest.raises(WaveSQLError) as err:
        ws.stream(RANGE_AVG, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "CHECKPOINT_MISMATCH"


def test_changes_of_windows_the_kernel_evaluates(ws, spark, tmp_path):
    """The kernel's own RANGE frames (count, sum, max in one SELECT): the rows not final
    yet are computed by the kernel too and emitted with _final = false. One file (CI
    cost): the first batch has no progress (every row not final yet), the next one closes
    most of them (the buckets whose timers fire) and carries the others'."""
    parts = _parts(seed=37, n_files=1, per_file=140)
    _write(tmp_path / "in", parts)
    _stream(ws, tmp_path / "in")
    sql = KERNEL + " EMIT CHANGES"
    assert "computes the frames of the rows that became final in the kernel" in ws.explain(
        sql, "STREAM")
    cq = _run(ws, tmp_path, sql)
    assert type(cq).__name__ == "StatefulOverQuery"
    final, early = _check_batches(spark, tmp_path, parts, cq.reports, _count_sum_max,
                                  late_rows=False)
    assert final > 100 and early > 100


def test_a_bucket_not_called_keeps_emitting_its_rows_across_a_restart(ws, spark, tmp_path):
    """Keys x and y in different buckets; a second file whose rows arrive out of order
    (y at 9.2 s and 9.6 s after its 10 s) with a late row (y at 1 s), read after a
    restart on the same checkpoint, and a third with y's and z's rows: neither raises
    progress (8 s), so x's bucket -- no row, none of its rows passed -- is not called in
    the last two batches, and its rows not final yet (8 s to 10 s) are emitted again all
    the same (carried from the batch before, across the restart too), with the values of
    the rows so far; z's only row stays not final. The late row is in the late sink."""
    n = max(2, min(2 * int(spark.conf.get("spark.sql.shuffle.partitions")), 1024))
    values = ", ".join(f"('{k}')" for k in "abcdefgh")
    buckets = {r["k"]: r["b"] for r in spark.sql(  # the plan's bucket of a key, by Spark
        f"SELECT k, pmod(xxhash64(k), {n}) AS b FROM VALUES {values} AS t(k)").collect()}
    x = "a"
    y = next(k for k in "bcdefgh" if buckets[k] != buckets[x])
    t = np.arange(0, 21) * 500_000  # 0 to 10 s
    parts = [pd.DataFrame({"k": [x] * len(t) + [y] * len(t), "v": np.r_[t, t] / 1e5 + 10,
                           "ts": np.r_[t, t]}),
             pd.DataFrame({"k": [y, y, y], "v": [11.0, 12.0, 14.0],
                           "ts": [9_200_000, 9_600_000, 1_000_000]}),
             pd.DataFrame({"k": [y, "z"], "v": [13.0, 20.0], "ts": [9_800_000, 9_900_000]})]
    _write(tmp_path / "staging", parts)
    (tmp_path / "in").mkdir()
    _stream(ws, tmp_path / "in")
    sql = RANGE_AVG + " EMIT CHANGES"
    shown = ws.explain(sql, "STREAM")
    assert "stateful OVER windows on Spark's state store" in shown
    assert f"{n} buckets of k" in shown and "EMIT CHANGES" in shown
    reports = run_in_two_steps(ws, tmp_path, sql, "StatefulOverQuery")
    assert [r.progress_us for r in reports] == [None, 8 * SECOND, 8 * SECOND, 8 * SECOND]
    assert [r.rows_in for r in reports] == [42, 0, 3, 2]
    _check_batches(spark, tmp_path, parts, reports, _range_avg_lag, look_back=3 * SECOND)
    out = spark.read.parquet(str(tmp_path / "out"))
    for batch in (2, 3):  # x's bucket not called: its rows carried
        assert out.where(f"batch = {batch} AND NOT _final AND k = '{x}'").count() == 5
    assert out.where("k = 'z'").select("_final").distinct().collect() == [(False,)]
    late_rows = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert [json.loads(r["_row"])["v"] for r in late_rows] == [14.0]
    # the same query without EMIT CHANGES is another plan: it refuses this checkpoint
    with pytest.raises(WaveSQLError) as err:
        ws.stream(RANGE_AVG, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "CHECKPOINT_MISMATCH"


def test_explain_names_the_buckets_a_changes_query_keeps(ws, tmp_path):
    """A result row's bucket must be told from the row: an output without the partition
    column keeps one bucket; FINAL keeps its buckets of k."""
    _write(tmp_path / "in", _parts(seed=1, n_files=1, per_file=10))
    _stream(ws, tmp_path / "in")
    no_k = ("SELECT ts, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL "
            "3 SECONDS PRECEDING AND CURRENT ROW) AS m FROM kv")
    assert "buckets of k" in ws.explain(no_k, "STREAM")
    changes = ws.explain(no_k + " EMIT CHANGES", "STREAM")
    assert "state store" in changes and "1 bucket" in changes
    shown = ws.sql(f"EXPLAIN STREAM {RANGE_AVG} EMIT CHANGES").collect()[0][0]
    assert "state store" in shown and "buckets of k" in shown


@pytest.mark.slow
@pytest.mark.parametrize("seed", [41, 43, 47])
@pytest.mark.parametrize("sql, oracle", [
    (RANGE_AVG, _range_avg_lag), (KERNEL, _count_sum_max)], ids=["batch-plan", "kernel"])
def test_changes_random_streams(ws, spark, tmp_path, seed, sql, oracle):
    parts = _parts(seed=seed, n_files=8, per_file=80, keys="abcdefg")
    _write(tmp_path / "in", parts)
    _stream(ws, tmp_path / "in")
    cq = _run(ws, tmp_path, sql + " EMIT CHANGES")
    _check_batches(spark, tmp_path, parts, cq.reports, oracle)


# -- the kernel alone (no Spark) ----------------------------------------------------------
def _op(changes: bool):
    from wavesql.streaming.stateful import lookback as lb

    return lb.LookbackOperator(("bigint",), (lb.KeepTime(3 * SECOND),), None, changes)


def _rows(ts, v) -> pa.Table:
    return pa.table({"ts": pa.array(ts, pa.int64()), "cn0": pa.array([False] * len(ts), pa.bool_()),
                     "c0": pa.array(v, pa.int64())})


def test_the_kernel_hands_back_the_rows_not_final_yet_with_their_look_back():
    from wavesql.streaming.stateful import lookback as lb

    first = _rows([1 * SECOND, 5 * SECOND, 9 * SECOND], [1, 2, 3])
    second = _rows([12 * SECOND, 7 * SECOND, 3 * SECOND], [4, 5, 6])  # 3 s: late at 6 s
    steps = {}
    for changes in (False, True):
        a = lb.step(_op(changes), None, first, None)  # no progress yet
        b = lb.step(_op(changes), a.state, second, 6 * SECOND)
        steps[changes] = (a, b)
    final_a, final_b = steps[False]
    changes_a, changes_b = steps[True]
    assert final_a.context.num_rows == 0  # FINAL: nothing is due without progress
    assert changes_a.context.column("ts").to_pylist() == [1 * SECOND, 5 * SECOND, 9 * SECOND]
    # progress 6 s: rows 1 s and 5 s due, 7 s, 9 s, 12 s not final yet; 3 s late
    assert final_b.late.tolist() == changes_b.late.tolist() == [False, False, True]
    assert final_b.context.column("ts").to_pylist() == [1 * SECOND, 5 * SECOND]
    assert changes_b.context.column("ts").to_pylist() == [
        1 * SECOND, 5 * SECOND, 7 * SECOND, 9 * SECOND, 12 * SECOND]
    # the same state either way: the look-back (3 s before 6 s) and the rows from 6 s on
    assert changes_b.state == final_b.state and changes_b.state_rows == 4
    assert changes_b.timer == final_b.timer == 7 * SECOND
    # nothing due, nothing pending: nothing handed back
    kept = lb.step(_op(True), lb.step(_op(True), None, _rows([4 * SECOND], [1]), None).state,
                   _rows([], []), 6 * SECOND)
    assert kept.context.column("ts").to_pylist() == [4 * SECOND]  # due
    idle = lb.step(_op(True), kept.state, _rows([], []), 6 * SECOND)
    assert idle.context.num_rows == 0 and idle.state_rows == 1  # the look-back only


def test_the_operator_names_changes_only_when_set():
    """The plan's fingerprint is the operator's repr: an EMIT FINAL operator's is the one
    it had before ``changes`` existed (its checkpoints keep running), a CHANGES one's not."""
    final, changes = _op(False), _op(True)
    before = "LookbackOperator(" + ", ".join(
        f"{f.name}={getattr(final, f.name)!r}" for f in fields(final)
        if f.name != "changes") + ")"
    assert repr(final) == before
    assert repr(changes) != repr(final) and "changes=True" in repr(changes)


def test_the_kernels_windows_batch_by_batch_with_buckets_carried():
    """The kernel's own RANGE frames (sum and count(*) per key over 3 s, a WHERE) through
    ``frames``, 4 buckets each called only with new rows or an expired timer (Spark's
    rule): each batch, the called buckets' rows not final yet and the uncalled buckets'
    from their last call (carried, as the driver does) are exactly the rows at or after
    progress with their values over the rows so far (numpy); final rows come once each."""
    from wavesql.streaming.stateful import lookback as lb
    from wavesql.udfs import time_windows as tw

    rng = np.random.default_rng(5)
    n = 600
    ts = np.sort(rng.integers(0, 60 * SECOND, n)) // 1000 * 1000
    ts = ts[np.argsort(ts + rng.integers(0, 4 * SECOND, n))]
    k = rng.choice(["a", "b", "c", "d", "e"], n)
    v = rng.integers(0, 10, n).astype(float)
    v[rng.random(n) < 0.1] = np.nan
    spec = (tw.Spec("sum", "a0", 3 * SECOND, 0), tw.Spec("count", None, 3 * SECOND, 0))
    op = lb.LookbackOperator(("string", "double"), (lb.KeepTime(3 * SECOND),),
                             lb.Windows(spec, ("string",), ("double",)), True)

    def encode(idx):
        passes = ~(v[idx] == 3)  # WHERE v IS NULL OR v <> 3
        return pa.table({
            "ts": pa.array(ts[idx], pa.int64()), "cn0": pa.array(np.zeros(len(idx), bool)),
            "c0": pa.array(k[idx], pa.string()), "cn1": pa.array(np.isnan(v[idx])),
            "c1": pa.array(np.nan_to_num(v[idx]), pa.float64()), "p": pa.array(passes),
            "kn0": pa.array(np.zeros(len(idx), bool)), "k0": pa.array(k[idx], pa.string()),
            "an0": pa.array(np.isnan(v[idx]) | ~passes),
            "a0": pa.array(np.where(passes, np.nan_to_num(v[idx]), 0.0), pa.float64())},
            schema=op.schema())

    def bucket(key):
        return "abcde".index(key) % 4

    def oracle(idx, progress):
        """{(ts, key): (sum, count)} of the rows so far at or after ``progress``."""
        idx = idx[~(v[idx] == 3)]
        out = {}
        for i in idx:
            if progress is not None and ts[i] < progress:
                continue
            mine = idx[(k[idx] == k[i]) & (ts[idx] >= ts[i] - 3 * SECOND) & (ts[idx] <= ts[i])]
            vals = v[mine][~np.isnan(v[mine])]
            out[(int(ts[i]), k[i])] = (float(vals.sum()) if len(vals) else None, len(mine))
        return out

    states, timers, carried, finals = {}, {}, {}, Counter()
    on_time, w, top, early_seen = np.zeros(0, int), None, None, 0
    batches = [np.arange(i, min(i + 50, n)) for i in range(0, n, 50)] + [np.zeros(0, int)]
    for idx in batches:
        called = {bucket(x) for x in k[idx]} | {b for b, t in timers.items()
                                                if t is not None and w is not None and w > t}
        for b in sorted(called):
            mine = idx[np.array([bucket(x) == b for x in k[idx]], bool)]
            step = lb.step(op, states.get(b), encode(mine), w)
            states[b], timers[b] = step.state, step.timer
            on_time = np.concatenate([on_time, mine[~step.late]])
            rows = lb.frames(op, step) if step.context.num_rows else None
            carried[b] = {}
            for r in (rows.to_pylist() if rows is not None else []):
                value = (None if r["wn0"] else r["w0"], r["w1"])
                if w is not None and r["ts"] < w:
                    finals[(r["ts"], r["c0"])] += 1
                else:
                    carried[b][(r["ts"], r["c0"])] = value
        got = {key: val for rows in carried.values() for key, val in rows.items()}
        assert got == oracle(on_time, w)
        early_seen += len(got)
        if len(idx):
            top = int(ts[idx].max()) if top is None else max(top, int(ts[idx].max()))
            w = top - WATERMARK
    assert set(finals.values()) == {1}
    everything = oracle(on_time, None)
    assert set(finals) == {key for key in everything if key[0] < w} and len(finals) > 300
    assert early_seen > 200
