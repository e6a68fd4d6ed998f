"""Continuous windowed aggregates on Spark's state store (streaming/stateful/), end to end,
against oracles written here in pandas / plain Python -- not against WaveSQL's batch mode.

The input arrives file by file, out of order, with late rows; a micro-batch reads one file
and sees the progress the files before it promised (largest event time minus the
WATERMARK), which is how the oracle decides which rows are late.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)
WATERMARK = 2 * SECOND


def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _files(folder, seed: int, n_files: int, per_file: int, keys="abcd"):
    """Files of rows arriving up to 4 s out of order (so some are late), modification times
    in order; returns the list of per-file frames (ts in microseconds)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    n = n_files * per_file
    ts = np.sort(rng.integers(0, 120 * SECOND, n)) // 1000 * 1000
    ts = ts[np.argsort(ts + rng.integers(0, 4 * SECOND, n))]
    frame = pd.DataFrame({"k": rng.choice(list(keys), n), "v": rng.integers(0, 100, n) * 1.0,
                          "ts": ts})
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan
    parts = [frame.iloc[i * per_file:(i + 1) * per_file] for i in range(n_files)]
    for i, part in enumerate(parts):
        out = part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]"))
        path = folder / f"part-{i:03d}.parquet"
        out.to_parquet(path)
        stamp = time.time() - 3600 + i * 0.01
        os.utime(path, (stamp, stamp))
    return parts


def _late_split(parts):
    """(on-time rows, late rows, final progress): a file's rows are late below the progress
    the files before it promised."""
    on_time, late, top = [], [], None
    for part in parts:
        progress = None if top is None else top - WATERMARK
        is_late = (part.ts < progress) if progress is not None else np.zeros(len(part), bool)
        on_time.append(part[~is_late])
        late.append(part[is_late])
        top = part.ts.max() if top is None else max(top, part.ts.max())
    return pd.concat(on_time), pd.concat(late), top - WATERMARK


def _stream(ws, folder, name="kv"):
    ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")


def _run(ws, tmp_path, sql):
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
    cq.await_termination()
    return cq


def _out(spark, tmp_path, columns):
    got = Counter()
    for row in spark.read.parquet(str(tmp_path / "out")).select(*columns).collect():
        got[tuple(_micros(x) if isinstance(x, dt.datetime) else
                  (None if x is None or (isinstance(x, float) and np.isnan(x)) else x)
                  for x in row)] += 1
    return got


def test_sliding_window_against_pandas(ws, spark, tmp_path):
    parts = _files(tmp_path / "in", seed=5, n_files=6, per_file=80)
    _stream(ws, tmp_path / "in")
    sql = ("SELECT k, count(*) AS n, sum(v) AS total, max(v) AS top, avg(v) * 2 AS twice "
           "FROM kv [RANGE 6 SECONDS SLIDE 2 SECONDS] WHERE v IS NULL OR v >= 10 GROUP BY k "
           "HAVING count(*) > 1")
    assert "state store" in ws.explain(sql, "STREAM")
    cq = _run(ws, tmp_path, sql)
    on_time, late, progress = _late_split(parts)
    assert cq.progress_us == progress
    # the oracle: every row in each window k*2 s covering it, (k*2 s - 6 s, k*2 s]
    rows = on_time[on_time.v.isna() | (on_time.v >= 10)]
    first = -(-rows.ts // (2 * SECOND))
    expanded = rows.loc[rows.index.repeat(3)].assign(
        t=np.concatenate([(first + i).to_numpy() for i in range(3)]).reshape(3, -1).T.ravel()
        * 2 * SECOND)
    expanded = expanded[(expanded.t - 6 * SECOND < expanded.ts) & (expanded.ts <= expanded.t)]
    want = Counter()
    for (t, k), g in expanded.groupby(["t", "k"]):
        vals = g.v.dropna()
        if len(g) > 1 and t < progress:
            want[(t, k, len(g), vals.sum() if len(vals) else None,
                  vals.max() if len(vals) else None,
                  vals.mean() * 2 if len(vals) else None)] += 1
    got = _out(spark, tmp_path, ["_time", "k", "n", "total", "top", "twice"])
    assert sum(want.values()) > 50
    assert got == want
    # late rows: exactly the oracle's, in the late sink, counted
    late_rows = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert sorted(json.loads(r["_row"])["v"] or -1 for r in late_rows) == sorted(
        late.v.fillna(-1)) and len(late) > 0
    assert sum(r.late for r in cq.reports) == len(late)


def test_every_micro_batch_accounts_for_its_rows(ws, spark, tmp_path):
    """The _progress/ record of each micro-batch: rows in = on time + late + no time +
    punctuation + quarantined, and the totals are the input's."""
    parts = _files(tmp_path / "in", seed=8, n_files=5, per_file=60)
    _stream(ws, tmp_path / "in")
    _run(ws, tmp_path, "SELECT k, count(*) AS n FROM kv [RANGE 4 SECONDS SLIDE 4 SECONDS] "
                       "GROUP BY k")
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "_progress")
                                                         .glob("*.json"))]
    assert len(records) >= 5
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"])
    on_time, late, _ = _late_split(parts)
    assert sum(r["rows_in"] for r in records) == sum(len(p) for p in parts)
    assert sum(r["late"] for r in records) == len(late)
    assert [r["rows_in"] for r in records][:5] == [len(p) for p in parts]


@pytest.mark.parametrize("named", [False, True])
def test_each_batch_stamps_its_progress_on_its_rows(ws, spark, tmp_path, named):
    """Every row of batch folder N has _progress = batch N's progress (its _progress/
    record) and _final; a SELECT item the user named _progress is replaced by it."""
    _files(tmp_path / "in", seed=9, n_files=4, per_file=40)
    _stream(ws, tmp_path / "in")
    extra = ", max(v) AS _progress" if named else ""
    cq = _run(ws, tmp_path, f"SELECT k, count(*) AS n{extra} FROM kv "
                            "[RANGE 4 SECONDS SLIDE 2 SECONDS] GROUP BY k")
    progress = {r.batch: r.progress_us for r in cq.reports}
    seen = 0
    for folder in sorted((tmp_path / "out").glob("batch=*")):
        batch = int(folder.name.split("=")[1])
        frame = spark.read.parquet(str(folder))
        assert frame.columns.count("_progress") == 1
        for row in frame.select("_progress", "_final").collect():
            stamp = None if row["_progress"] is None else _micros(row["_progress"])
            assert stamp == progress[batch] and row["_final"] is True
            seen += 1
    assert seen > 10


def _rows_window_oracle(on_time: pd.DataFrame, n: int, progress: int) -> Counter:
    """ISTREAM of (k, count, avg(v)) over [PARTITION BY k ROWS n], by brute force: at each
    instant of a key (its distinct event times below progress), its last n rows -- ties in
    one instant ordered by the row's values, NULLs first -- and a row out when the result
    changed since the key's previous instant."""
    out = Counter()
    for k, g in on_time.groupby("k"):
        rows = sorted(zip(g.ts, g.v), key=lambda r: (r[0], not np.isnan(r[1]),
                                                     0 if np.isnan(r[1]) else r[1]))
        previous = None
        for t in sorted({r[0] for r in rows if r[0] < progress}):
            window = [r for r in rows if r[0] <= t][-n:]
            vals = [v for _, v in window if not np.isnan(v)]
            result = (len(window), sum(vals) / len(vals) if vals else None)
            if result != previous:
                out[(t, k) + result] += 1
            previous = result
    return out


def test_istream_rows_window_against_python(ws, spark, tmp_path):
    parts = _files(tmp_path / "in", seed=11, n_files=5, per_file=70, keys="abcdefg")
    _stream(ws, tmp_path / "in")
    sql = "ISTREAM (SELECT k, count(*) AS n, avg(v) AS a FROM kv [PARTITION BY k ROWS 3] GROUP BY k)"
    assert "state store" in ws.explain(sql, "STREAM")
    _run(ws, tmp_path, sql)
    on_time, _, progress = _late_split(parts)
    want = _rows_window_oracle(on_time, 3, progress)
    got = _out(spark, tmp_path, ["_time", "k", "n", "a"])
    assert sum(want.values()) > 100
    assert {k: v for k, v in got.items()} == {k: v for k, v in want.items()}


def test_explain_stream_names_the_runner_and_why(ws, tmp_path):
    _files(tmp_path / "in", seed=1, n_files=1, per_file=10)
    _stream(ws, tmp_path / "in")
    text = ws.explain("SELECT k, sum(v) AS s FROM kv [RANGE 1 MINUTE SLIDE 10 SECONDS] "
                      "GROUP BY k", "STREAM")
    assert "stateful slide window on Spark's state store" in text
    assert "panes of 10000000 us" in text
    other = ws.explain("SELECT k, max(v) AS m FROM kv [RANGE 3 SECONDS] GROUP BY k", "STREAM")
    assert "re-evaluated" in other and "RSTREAM of an unslid window" in other
    assert "keeps 3000000 us of event time before progress" in other
    for sql, why in [
            # (FILTER on an aggregate the kernel runs is on the state store:
            # test_stateful_window_aggregates.py; on another one, it says so)
            ("SELECT k, first(v) FILTER (WHERE v > 1) AS s FROM kv [RANGE 5 SECONDS SLIDE 5 "
             "SECONDS] GROUP BY k", "an aggregate with FILTER"),
            ("SELECT upper(k) AS u, count(*) AS n FROM kv [RANGE 5 SECONDS SLIDE 5 SECONDS] "
             "GROUP BY u", "position or an alias")]:
        assert why in ws.explain(sql, "STREAM"), sql
    # in SQL too
    shown = ws.sql("EXPLAIN STREAM SELECT count(*) AS n FROM kv [RANGE 5 SECONDS SLIDE 5 SECONDS]")
    assert "state store" in shown.collect()[0][0]


def test_a_changed_query_refuses_the_old_checkpoint(ws, spark, tmp_path):
    _files(tmp_path / "in", seed=2, n_files=2, per_file=20)
    _stream(ws, tmp_path / "in")
    _run(ws, tmp_path, "SELECT k, count(*) AS n FROM kv [RANGE 4 SECONDS SLIDE 2 SECONDS] "
                       "GROUP BY k")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT k, sum(v) AS n FROM kv [RANGE 4 SECONDS SLIDE 2 SECONDS] GROUP BY k",
                  tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "CHECKPOINT_MISMATCH"
    assert "new checkpoint" in err.value.hint
    # the same query again is fine: nothing new to read
    again = _run(ws, tmp_path, "SELECT k, count(*) AS n FROM kv "
                               "[RANGE 4 SECONDS SLIDE 2 SECONDS] GROUP BY k")
    assert sum(r.rows_in for r in again.reports) == 0


def test_a_wait_without_timeout_is_bounded(ws, tmp_path, monkeypatch):
    """await_termination() on a query that never ends by itself stops it after
    WAVESQL_AWAIT_TIMEOUT_SECONDS with STREAM_TIMEOUT (a hang fails, not the whole run)."""
    _files(tmp_path / "in", seed=3, n_files=1, per_file=10)
    _stream(ws, tmp_path / "in")
    monkeypatch.setenv("WAVESQL_AWAIT_TIMEOUT_SECONDS", "3")
    cq = ws.stream("SELECT k, count(*) AS n FROM kv [RANGE 4 SECONDS SLIDE 4 SECONDS] "
                   "GROUP BY k", tmp_path / "out", tmp_path / "ckpt", trigger="every 1 second")
    began = time.monotonic()
    with pytest.raises(WaveSQLError) as err:
        cq.await_termination()
    assert err.value.code == "STREAM_TIMEOUT" and time.monotonic() - began < 60
    assert not cq.is_active
    assert cq.await_termination(timeout=1) is True  # an explicit timeout: Spark's answer


def test_a_file_changed_after_it_was_listed_fails_the_batch(tmp_path):
    from wavesql.streaming.stateful.query import _unchanged_since_listed

    path = tmp_path / "part-0.csv"
    path.write_text("k,v,ts\n")
    listed_ms = os.stat(path).st_mtime_ns // 1_000_000
    _unchanged_since_listed([(f"file://{path}", listed_ms)])  # unchanged: fine
    os.utime(path, ns=(os.stat(path).st_atime_ns, (listed_ms + 5000) * 1_000_000))
    with pytest.raises(WaveSQLError) as err:
        _unchanged_since_listed([(f"file://{path}", listed_ms)])
    assert err.value.code == "INCOMPLETE_FILE" and "run the query again" in err.value.hint


def _over_oracle(on_time: pd.DataFrame, progress: int) -> Counter:
    """avg(v) over the 3 s before each row (RANGE, peers included) and v - lag(v) per key,
    over the rows with v NULL or >= 10 (the WHERE filters before the windows), for the rows
    below ``progress``."""
    rows = on_time[on_time.v.isna() | (on_time.v >= 10)]
    out = Counter()
    for k, g in rows.groupby("k"):
        g = g.sort_values("ts")
        ts, v = g.ts.to_numpy(), g.v.to_numpy()
        for i in range(len(g)):
            if ts[i] >= progress:
                continue
            frame = v[(ts >= ts[i] - 3 * SECOND) & (ts <= ts[i])]
            frame = frame[~np.isnan(frame)]
            mean = round(float(frame.mean()), 9) if len(frame) else None
            d = v[i] - v[i - 1] if i and not np.isnan(v[i]) and not np.isnan(v[i - 1]) else None
            out[(int(ts[i]), k, None if np.isnan(v[i]) else v[i], mean, d)] += 1
    return out


def test_over_windows_on_the_state_store_against_pandas(ws, spark, tmp_path):
    """OVER windows per key (a RANGE frame and lag, after a WHERE) on Spark's state store,
    run in two rounds on one checkpoint (the second restores the state), late rows in the
    late sink, every micro-batch's rows accounted for."""
    import shutil

    parts = _files(tmp_path / "staging", seed=21, n_files=6, per_file=80)
    on_time, late, progress = _late_split(parts)
    assert not on_time.duplicated(["k", "ts"]).any()  # lag is defined up to ties only
    (tmp_path / "in").mkdir()
    _stream(ws, tmp_path / "in")
    sql = ("SELECT ts, k, v, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL "
           "3 SECONDS PRECEDING AND CURRENT ROW) AS m, v - lag(v) OVER (PARTITION BY k "
           "ORDER BY ts) AS d FROM kv WHERE v IS NULL OR v >= 10")
    shown = ws.explain(sql, "STREAM")
    assert "stateful OVER windows on Spark's state store" in shown and "buckets of k" in shown
    reports = []
    for files in (sorted(tmp_path.joinpath("staging").iterdir())[:3],
                  sorted(tmp_path.joinpath("staging").iterdir())[3:]):
        for f in files:
            stamp = f.stat().st_mtime
            shutil.move(f, tmp_path / "in" / f.name)
            os.utime(tmp_path / "in" / f.name, (stamp, stamp))
        cq = _run(ws, tmp_path, sql)
        assert type(cq).__name__ == "StatefulOverQuery"
        reports += cq.reports
    got = Counter()
    for row in spark.read.parquet(str(tmp_path / "out")).collect():
        assert row["_final"]
        m = None if row["m"] is None or np.isnan(row["m"]) else round(row["m"], 9)
        v = None if row["v"] is None or np.isnan(row["v"]) else row["v"]
        d = None if row["d"] is None or np.isnan(row["d"]) else row["d"]
        got[(_micros(row["ts"]), row["k"], v, m, d)] += 1
    want = _over_oracle(on_time, progress)
    assert sum(want.values()) > 300 and len(late) > 0
    assert got == want
    late_rows = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert sorted(json.loads(r["_row"])["ts"] for r in late_rows) == sorted(
        pd.to_datetime(late.ts, unit="us").dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z")
    for r in reports:
        assert r.rows_in == r.on_time + r.late + r.no_time + r.punctuation + r.quarantined
    assert sum(r.rows_in for r in reports) == sum(len(p) for p in parts)
    # the state is the look-back and the rows not final yet, not the stream
    assert 0 < max(r.buffered for r in reports) < len(on_time) // 3


def test_over_windows_the_kernel_evaluates_against_pandas(ws, spark, tmp_path):
    """RANGE-frame aggregates per key in one SELECT: the kernel computes the frames of the
    rows that became final itself (numpy prefix sums over the look-back) -- count, avg, max,
    stddev_pop, an expression over them and the row, after a WHERE, with NULL values."""
    parts = _files(tmp_path / "in", seed=23, n_files=5, per_file=90)
    on_time, late, progress = _late_split(parts)
    _stream(ws, tmp_path / "in")
    frame = "PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 4 SECONDS PRECEDING AND CURRENT ROW"
    sql = (f"SELECT ts, k, count(*) OVER ({frame}) AS n, avg(v) OVER ({frame}) AS m, "
           f"v - max(v) OVER ({frame}) AS below, stddev_pop(v) OVER ({frame}) AS sd "
           "FROM kv WHERE v IS NULL OR v >= 10")
    assert "computes the frames of the rows that became final in the kernel" in ws.explain(
        sql, "STREAM")
    cq = _run(ws, tmp_path, sql)
    assert type(cq).__name__ == "StatefulOverQuery" and cq.progress_us == progress
    rows = on_time[on_time.v.isna() | (on_time.v >= 10)]
    want = Counter()
    for k, g in rows.groupby("k"):
        ts, v = g.ts.to_numpy(), g.v.to_numpy()
        for i in range(len(g)):
            if ts[i] >= progress:
                continue
            inside = v[(ts >= ts[i] - 4 * SECOND) & (ts <= ts[i])]  # peers included
            vals = inside[~np.isnan(inside)]
            r = lambda x: round(float(x), 9)  # noqa: E731
            want[(int(ts[i]), k, len(inside), r(vals.mean()) if len(vals) else None,
                  r(v[i] - vals.max()) if len(vals) and not np.isnan(v[i]) else None,
                  r(vals.std()) if len(vals) else None)] += 1
    got = Counter()
    for row in spark.read.parquet(str(tmp_path / "out")).collect():
        assert row["_final"]
        r = lambda x: None if x is None or np.isnan(x) else round(x, 9)  # noqa: E731
        got[(_micros(row["ts"]), row["k"], row["n"], r(row["m"]), r(row["below"]),
             r(row["sd"]))] += 1
    assert sum(want.values()) > 200 and len(late) > 0
    assert got == want
    assert sum(r.late for r in cq.reports) == len(late)


def test_a_state_store_checkpoint_is_refused_by_the_re_evaluating_runner(ws, tmp_path,
                                                                          monkeypatch):
    """The same query forced onto the re-evaluating runner (WAVESQL_STATEFUL=0; adding EMIT
    CHANGES does the same) must not resume a state-store checkpoint with empty state."""
    _files(tmp_path / "in", seed=3, n_files=2, per_file=20)
    _stream(ws, tmp_path / "in")
    sql = "SELECT k, count(*) AS n FROM kv [RANGE 4 SECONDS SLIDE 4 SECONDS] GROUP BY k"
    _run(ws, tmp_path, sql)
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    with pytest.raises(WaveSQLError) as caught:
        _run(ws, tmp_path, sql)
    assert caught.value.code == "CHECKPOINT_MISMATCH"
    assert "state-store runner" in caught.value.message
