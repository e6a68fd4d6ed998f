"""Continuous queries (streaming/runner.py): the same final results as batch, progress on
every row, late rows kept and counted, heartbeats, restarts, bounded state."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import os
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests import cql_reference as ref
from wavesql.errors import WaveSQLError

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)


def _micros(value: dt.datetime) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


_WRITTEN = itertools.count()


def _write(folder, name, frame):
    """Write a Parquet file whose modification time is later than every file written before:
    Spark's file source takes files in that order, and two files written within the same
    millisecond could otherwise come in either order (the later one making the other late)."""
    folder.mkdir(parents=True, exist_ok=True)
    frame = frame.copy()
    for col in ("ts", "punct"):
        if col in frame:
            frame[col] = pd.to_datetime(frame[col], unit="us").astype("datetime64[us]")
    frame.to_parquet(folder / name)
    stamp = time.time() - 3600 + next(_WRITTEN) * 0.01
    os.utime(folder / name, (stamp, stamp))


def _trades(n, seed, span_s=60, skew_s=2.0):
    """``n`` trades over ``span_s`` seconds, each up to ``skew_s`` late relative to order."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, span_s * SECOND, n))
    ts = np.maximum(ts - rng.integers(0, int(skew_s * SECOND), n), 0)
    return pd.DataFrame({"sym": rng.choice(list("abc"), n),
                         "px": rng.integers(0, 10, n).astype(float), "ts": ts})


def _split(frame, parts):
    edges = np.linspace(0, len(frame), parts + 1).astype(int)
    return [frame.iloc[a:b] for a, b in zip(edges[:-1], edges[1:])]


def _stream(ws, folder, name="trades", watermark="2 SECONDS", extra=""):
    ws.sql(f"CREATE STREAM {name} (sym STRING, px DOUBLE, ts TIMESTAMP{extra}) FROM '{folder}' "
           f"FORMAT parquet EVENT TIME ts WATERMARK {watermark}"
           + (" PROGRESS COLUMN punct" if "punct" in extra else ""))


def _rows(df, columns):
    out = Counter()
    for row in df.select(*columns).collect():
        values = [(_micros(v) if isinstance(v, dt.datetime) else v) for v in row]
        out[tuple(values)] += 1
    return out


def _run(ws, tmp_path, sql, **kw):
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1,
                   clock=lambda: 0.0, **kw)
    cq.await_termination()
    return cq


def _output(spark, tmp_path):
    return spark.read.parquet(str(tmp_path / "out"))


def _by_sym(rows):
    groups: dict = {}
    for r in rows:
        groups.setdefault(r["sym"], []).append(r)
    return groups


def _count_by_sym(rows):
    return [(k, len(g)) for k, g in _by_sym(rows).items()]


def _reference(data, window, fn, kind, progress):
    """The CQL reference evaluator's rows (tests/cql_reference.py, brute force over every
    instant of the rows the test wrote) at instants before ``progress``."""
    out = ref.evaluate(data.to_dict("records"), "ts", window, ("sym", "px", "ts"), fn, kind)
    return Counter({k: n for k, n in out.items() if k[0] < progress})


# each query with its meaning in the CQL reference evaluator (tests/cql_reference.py, which
# shares nothing with the planner): (window, the query over one instant's relation, operator)
QUERIES = {
    "SELECT sym, count(*) AS n, sum(px) AS total FROM trades [RANGE 10 SECONDS SLIDE 5 SECONDS] "
    "GROUP BY sym": (ref.Window("SLIDE", 10 * SECOND, 5 * SECOND),
                     lambda rows: [(k, len(g), sum(r["px"] for r in g))
                                   for k, g in _by_sym(rows).items()], "RSTREAM"),
    "SELECT sym, max(px) AS top FROM trades [RANGE 3 SECONDS] GROUP BY sym": (
        ref.Window("RANGE", 3 * SECOND),
        lambda rows: [(k, max(r["px"] for r in g)) for k, g in _by_sym(rows).items()],
        "RSTREAM"),
    "ISTREAM (SELECT sym, count(*) AS n FROM trades [RANGE 4 SECONDS] GROUP BY sym)": (
        ref.Window("RANGE", 4 * SECOND),
        lambda rows: [(k, len(g)) for k, g in _by_sym(rows).items()], "ISTREAM"),
    "DSTREAM (SELECT sym, px FROM trades [PARTITION BY sym ROWS 2])": (
        ref.Window("PARTITION_ROWS", 2, partition_by=("sym",)),
        lambda rows: [(r["sym"], r["px"]) for r in rows], "DSTREAM"),
    "SELECT count(*) AS n FROM trades [NOW]": (
        ref.Window("NOW"), lambda rows: [(len(rows),)], "RSTREAM"),
    "RSTREAM (SELECT sym, px FROM trades [ROWS 3] WHERE px > 4)": (
        ref.Window("ROWS", 3), lambda rows: [(r["sym"], r["px"]) for r in rows if r["px"] > 4],
        "RSTREAM"),
}


@pytest.mark.parametrize("sql", list(QUERIES))
def test_streaming_final_results_equal_batch(ws, spark, tmp_path, sql):
    """Oracle: the CQL reference evaluator (tests/cql_reference.py) over the rows written,
    plus agreement with the batch query."""
    data = _trades(240, seed=len(sql))
    for i, chunk in enumerate(_split(data, 4)):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    _stream(ws, tmp_path / "in")
    batch = ws.sql(sql)
    columns = batch.columns
    cq = _run(ws, tmp_path, sql)
    # one micro-batch per file; a windowed aggregate on Spark's state store also runs the
    # batch without new rows that closes the windows the last file made final
    assert [r.rows_in for r in cq.reports][:4] == [len(c) for c in _split(data, 4)]
    assert len(cq.reports) <= 5 and sum(r.rows_in for r in cq.reports[4:]) == 0
    progress = cq.progress_us
    assert progress == data["ts"].max() - 2 * SECOND  # max event time minus the watermark
    want = Counter({k: n for k, n in _rows(batch, columns).items() if k[0] < progress})
    out = _output(spark, tmp_path)
    assert _rows(out.where("_final"), columns) == want
    # ... and the reference evaluator's, computed from the 240 rows by brute force over
    # every instant (a planner bug shared by batch and continuous would not hide here)
    window, fn, kind = QUERIES[sql]
    reference = ref.evaluate(data.to_dict("records"), "ts", window, ("sym", "px", "ts"), fn,
                             kind)
    assert _rows(out.where("_final"), columns) == Counter(
        {k: n for k, n in reference.items() if k[0] < progress})
    # every output row carries the progress of the batch that emitted it, and no row was
    # emitted before it was final
    for row in out.select("_time", "_progress").collect():
        assert row["_time"] < row["_progress"]
    assert sum(r.late for r in cq.reports) == 0
    assert sum(r.rows_in for r in cq.reports) == len(data)
    # the reports count what each batch delivered (all final: no EMIT CHANGES)
    per_batch = Counter(r[0] for r in out.select("batch").collect())
    assert [(r.rows_out, r.final_out) for r in cq.reports] == [
        (per_batch.get(r.batch, 0),) * 2 for r in cq.reports]


def _inner_by_sym(A, B):
    pairs = [(a, b) for a in A for b in B if a["sym"] == b["sym"]]
    groups: dict = {}
    for a, b in pairs:
        groups.setdefault(a["sym"], []).append(b["px"])
    return [(k, len(v), max(v)) for k, v in groups.items()]


def _left_quotes(A, B):
    out = []
    for a in A:
        hits = [b["px"] for b in B if b["sym"] == a["sym"] and b["px"] >= a["px"]]
        out += [(a["sym"], a["px"], q) for q in hits] or [(a["sym"], a["px"], None)]
    return out


# each with its meaning in the reference evaluator: (trades' window, quotes', query, operator)
JOINED = {
    "SELECT t.sym, count(*) AS n, max(q.px) AS best FROM trades [RANGE 3 SECONDS] t "
    "JOIN quotes [PARTITION BY sym ROWS 2] q ON t.sym = q.sym GROUP BY t.sym": (
        ref.Window("RANGE", 3 * SECOND), ref.Window("PARTITION_ROWS", 2, partition_by=("sym",)),
        _inner_by_sym, "RSTREAM"),
    "DSTREAM (SELECT t.sym, t.px, q.px AS quote FROM trades [RANGE 4 SECONDS SLIDE 2 SECONDS] "
    "t LEFT JOIN quotes [NOW] q ON t.sym = q.sym AND q.px >= t.px)": (
        ref.Window("SLIDE", 4 * SECOND, 2 * SECOND), ref.Window("NOW"), _left_quotes,
        "DSTREAM"),
}


@pytest.mark.parametrize("sql", list(JOINED))
def test_joined_windows_stream_to_the_batch_results(ws, spark, tmp_path, sql):
    """Two windowed streams joined per instant, arriving file by file: the final rows are
    the batch query's, up to the slower input's progress.
    Oracle: the CQL reference evaluator's evaluate_join over the rows written."""
    trades, quotes = _trades(120, seed=3), _trades(90, seed=4)
    for i, (a, b) in enumerate(zip(_split(trades, 3), _split(quotes, 3))):
        _write(tmp_path / "trades", f"part-{i}.parquet", a)
        _write(tmp_path / "quotes", f"part-{i}.parquet", b)
    _stream(ws, tmp_path / "trades")
    _stream(ws, tmp_path / "quotes", name="quotes")
    batch = ws.sql(sql)
    columns = batch.columns
    cq = _run(ws, tmp_path, sql)
    progress = cq.progress_us
    assert progress == min(trades["ts"].max(), quotes["ts"].max()) - 2 * SECOND
    want = Counter({k: n for k, n in _rows(batch, columns).items() if k[0] < progress})
    assert sum(want.values()) > 20
    got = _rows(_output(spark, tmp_path).where("_final"), columns)
    assert got == want
    wa, wb, fn, kind = JOINED[sql]  # and the reference evaluator's, by brute force
    cols = ("sym", "px", "ts")
    reference = ref.evaluate_join([(trades.to_dict("records"), "ts", wa, cols),
                                   (quotes.to_dict("records"), "ts", wb, cols)], fn, kind)
    assert got == Counter({k: n for k, n in reference.items() if k[0] < progress})
    assert sum(r.rows_in for r in cq.reports) == len(trades) + len(quotes)


def test_shuffled_input_gives_the_results_of_sorted_input(ws, spark, tmp_path):
    """Rows out of order within the watermark, spread over files: the same final rows.
    Oracle: the CQL reference evaluator over the rows written (both orders)."""
    rng = np.random.default_rng(21)
    n = 300
    ts = np.sort(rng.choice(np.arange(0, 60 * SECOND, 1000), n, replace=False))
    data = pd.DataFrame({"sym": rng.choice(list("ab"), n), "px": rng.integers(0, 9, n) * 1.0,
                         "ts": ts})
    # Shuffle: each row moves at most 1.5 s (the watermark is 2 s) from its sorted place.
    shuffled = data.iloc[np.argsort(ts + rng.integers(0, int(1.5 * SECOND), n))]
    sql = ("ISTREAM (SELECT sym, count(*) AS n, sum(px) AS total FROM trades "
           "[RANGE 5 SECONDS SLIDE 1 SECONDS] GROUP BY sym)")
    results = []
    for label, frame in (("sorted", data), ("shuffled", shuffled)):
        folder = tmp_path / label
        for i, chunk in enumerate(_split(frame, 5)):
            _write(folder / "in", f"part-{i}.parquet", chunk)
        _stream(ws, folder / "in", name=f"trades_{label}")
        cq = ws.stream(sql.replace("trades", f"trades_{label}"), folder / "out", folder / "ck",
                       max_files_per_trigger=1, clock=lambda: 0.0)
        cq.await_termination()
        assert sum(r.late for r in cq.reports) == 0
        out = spark.read.parquet(str(folder / "out")).where("_final")
        results.append((cq.progress_us, _rows(out, ["_time", "sym", "n", "total"])))
    (p_sorted, sorted_rows), (p_shuffled, shuffled_rows) = results
    final = min(p_sorted, p_shuffled)
    assert {k: n for k, n in sorted_rows.items() if k[0] < final} == \
        {k: n for k, n in shuffled_rows.items() if k[0] < final}
    assert sum(n for k, n in sorted_rows.items() if k[0] < final) > 50
    window = ref.Window("SLIDE", 5 * SECOND, 1 * SECOND)
    count_total = lambda rows: [(k, len(g), sum(r["px"] for r in g))  # noqa: E731
                                for k, g in _by_sym(rows).items()]
    want = _reference(data, window, count_total, "ISTREAM", final)
    assert {k: n for k, n in shuffled_rows.items() if k[0] < final} == want


def test_csv_and_json_directories_stream_too(ws, spark, tmp_path):
    """Oracle: the CQL reference evaluator over the rows written, plus the batch query."""
    data = _trades(60, seed=23)
    for fmt in ("csv", "json"):
        folder = tmp_path / fmt
        folder.mkdir()
        for i, chunk in enumerate(_split(data, 2)):
            frame = chunk.assign(ts=pd.to_datetime(chunk.ts, unit="us").dt.strftime(
                "%Y-%m-%d %H:%M:%S.%f"))
            path = folder / f"part-{i}.{fmt}"
            if fmt == "csv":
                frame.to_csv(path, index=False)
            else:
                frame.to_json(path, orient="records", lines=True)
            # Spark takes files in modification-time order: written in the same millisecond,
            # part-1 could come first and make every row of part-0 late (it did, under load)
            stamp = time.time() - 3600 + next(_WRITTEN) * 0.01
            os.utime(path, (stamp, stamp))
        ws.sql(f"CREATE STREAM t_{fmt} (sym STRING, px DOUBLE, ts TIMESTAMP) FROM '{folder}' "
               f"FORMAT {fmt} EVENT TIME ts WATERMARK 2 SECONDS")
        sql = f"SELECT sym, count(*) AS n FROM t_{fmt} [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY sym"
        cq = ws.stream(sql, tmp_path / f"out_{fmt}", tmp_path / f"ck_{fmt}",
                       max_files_per_trigger=1, clock=lambda: 0.0)
        cq.await_termination()
        want = Counter({k: n for k, n in _rows(ws.sql(sql), ["_time", "sym", "n"]).items()
                        if k[0] < cq.progress_us})
        got = _rows(spark.read.parquet(str(tmp_path / f"out_{fmt}")).where("_final"),
                    ["_time", "sym", "n"])
        assert got == want and sum(want.values()) > 0
        assert got == _reference(data, ref.Window("SLIDE", 10 * SECOND, 10 * SECOND),
                                 _count_by_sym, "RSTREAM", cq.progress_us)


def test_punctuation_closes_the_stream(ws, spark, tmp_path):
    """Oracle: the CQL reference evaluator over the data rows written (every window final
    after the punctuation), plus the batch query."""
    data = _trades(120, seed=3)
    data["punct"] = pd.Series([None] * len(data), dtype="float64")
    _write(tmp_path / "in", "part-0.parquet", data)
    _write(tmp_path / "in", "part-1.parquet", pd.DataFrame(
        {"sym": ["-"], "px": [0.0], "ts": [data["ts"].max()], "punct": [10**15]}))
    _stream(ws, tmp_path / "in", extra=", punct TIMESTAMP")
    sql = "SELECT sym, count(*) AS n FROM trades [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY sym"
    batch = _rows(ws.sql(sql), ["_time", "sym", "n"])
    cq = _run(ws, tmp_path, sql)
    # (then, on Spark's state store, the batch without rows that closes the windows)
    assert [r.punctuation for r in cq.reports][:2] == [0, 1]
    assert sum(r.punctuation for r in cq.reports) == 1
    assert cq.progress_us == 10**15
    got = _rows(_output(spark, tmp_path).where("_final"), ["_time", "sym", "n"])
    assert got == batch
    # (the punctuation row is not data: README "Rows whose PROGRESS COLUMN is set")
    assert got == _reference(data, ref.Window("SLIDE", 10 * SECOND, 10 * SECOND),
                             _count_by_sym, "RSTREAM", 10**15) and sum(got.values()) > 10


@pytest.mark.parametrize("target", ["path", "sink"])
def test_late_rows_go_to_the_late_sink_counted(ws, spark, tmp_path, target):
    first = pd.DataFrame({"sym": ["a", "b", "a"], "px": [1.0, 2.0, 3.0],
                          "ts": [10 * SECOND, 11 * SECOND, 20 * SECOND]})
    # progress after the first file: 20 s - 2 s = 18 s; 17 s is late, 18 s is not
    second = pd.DataFrame({"sym": ["a", "b", "c"], "px": [4.0, 5.0, 6.0],
                           "ts": [17 * SECOND + 123_457, 18 * SECOND, None]})
    _write(tmp_path / "in", "part-0.parquet", first)
    _write(tmp_path / "in", "part-1.parquet", second)
    _stream(ws, tmp_path / "in")
    if target == "sink":
        ws.sql(f"CREATE SINK late_rows TO '{tmp_path / 'late'}' FORMAT parquet")
        into = "late_rows"
    else:
        into = f"'{tmp_path / 'late'}'"
    cq = _run(ws, tmp_path, f"SELECT sym, px FROM trades [NOW] LATE INTO {into}")
    totals = cq.status()
    assert (totals["rows_in"], totals["on_time"], totals["late"], totals["no_time"]) == (6, 4, 1, 1)
    late = spark.read.parquet(str(tmp_path / "late")).collect()
    reasons = sorted((json.loads(r["_row"])["px"], r["_reason"].split(" (")[0]) for r in late)
    assert reasons == [(4.0, "event time before the progress already promised"),
                       (6.0, "no event time")]
    # the late row as it was, to the microsecond (Spark's to_json would write milliseconds)
    (row,) = [json.loads(r["_row"]) for r in late if json.loads(r["_row"])["px"] == 4.0]
    assert row["ts"].endswith(":17.123457Z"), row
    out = _rows(_output(spark, tmp_path), ["_time", "sym", "px"])
    assert out == Counter({(10 * SECOND, "a", 1.0): 1, (11 * SECOND, "b", 2.0): 1})


def test_late_rows_of_a_windowed_query_on_the_state_store_keep_microseconds(ws, spark,
                                                                          tmp_path):
    """The state-store runner writes its late rows' JSON itself (streaming/stateful/plan.py
    ``__row``): to the microsecond too, as the row was."""
    _write(tmp_path / "in", "part-0.parquet", pd.DataFrame(
        {"sym": ["a", "b"], "px": [1.0, 2.0], "ts": [10 * SECOND, 20 * SECOND]}))
    _write(tmp_path / "in", "part-1.parquet", pd.DataFrame(
        {"sym": ["a"], "px": [4.0], "ts": [17 * SECOND + 123_457]}))  # < 18 s promised
    _stream(ws, tmp_path / "in")
    cq = _run(ws, tmp_path, "SELECT count(*) AS n FROM trades [RANGE 10 SECONDS SLIDE 10 "
                            f"SECONDS] LATE INTO '{tmp_path / 'late'}'")
    assert cq.status()["late"] == 1
    (late,) = spark.read.parquet(str(tmp_path / "late")).collect()
    assert json.loads(late["_row"]) == {"sym": "a", "px": 4.0,
                                        "ts": "1970-01-01T00:00:17.123457Z"}


@pytest.mark.parametrize("target", ["path", "sink"])
def test_an_insert_into_job_sends_late_rows_where_its_late_into_says(ws, spark, tmp_path,
                                                                    target):
    """``INSERT INTO sink SELECT ... LATE INTO <path or file sink>``, run once per arriving
    file: the row below the progress promised by the first run goes there, with its reason."""
    first = pd.DataFrame({"sym": ["a", "b"], "px": [1.0, 2.0], "ts": [10 * SECOND, 20 * SECOND]})
    second = pd.DataFrame({"sym": ["a", "b"], "px": [4.0, 5.0], "ts": [17 * SECOND, 19 * SECOND]})
    (tmp_path / "in").mkdir()
    _stream(ws, tmp_path / "in")
    ws.sql(f"CREATE SINK out TO '{tmp_path / 'out'}' FORMAT parquet")
    if target == "sink":
        ws.sql(f"CREATE SINK late_rows TO '{tmp_path / 'late'}' FORMAT json")
    into = "late_rows" if target == "sink" else f"'{tmp_path / 'late'}'"
    for i, frame in enumerate((first, second)):
        _write(tmp_path / "in", f"part-{i}.parquet", frame)
        ws.sql(f"INSERT INTO out SELECT sym, px, ts FROM trades LATE INTO {into}")
    reader = spark.read.json if target == "sink" else spark.read.parquet
    late = reader(str(tmp_path / "late")).collect()
    assert [json.loads(r["_row"])["px"] for r in late] == [4.0]  # 17 s < 20 s - 2 s
    assert late[0]["_reason"].startswith("event time before the progress")
    assert sorted(r.px for r in spark.read.parquet(str(tmp_path / "out")).collect()) == \
        [1.0, 2.0, 5.0]


def test_row_by_row_queries_emit_every_on_time_row(ws, spark, tmp_path):
    data = _trades(100, seed=5)
    for i, chunk in enumerate(_split(data, 2)):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    _stream(ws, tmp_path / "in")
    cq = _run(ws, tmp_path, "SELECT sym, px * 2 AS px2, ts FROM trades WHERE px > 3")
    out = _output(spark, tmp_path)
    late = sum(r.late for r in cq.reports)
    want = data[data.px > 3]
    # the oracle: the second file's rows before the progress the first promised (its
    # newest event time minus the 2 s watermark) are late, whatever their px; every other
    # row passing the WHERE is in the output, once
    first, second = _split(data, 2)
    late_rows = second[second.ts < first.ts.max() - 2 * SECOND]
    assert late == len(late_rows)
    kept = want.drop(late_rows.index, errors="ignore")
    assert _rows(out, ["sym", "px2", "ts"]) == Counter(
        zip(kept.sym, kept.px * 2, kept.ts.astype(int)))
    assert "_progress" in out.columns
    # rows in = rows out + late + filtered
    filtered = len(data) - len(want)
    assert sum(r.rows_in for r in cq.reports) == out.count() + late + filtered
    assert sum(r.rows_out for r in cq.reports) == sum(r.final_out for r in cq.reports) == (
        out.count())


def test_heartbeat_keeps_a_union_with_an_idle_input_progressing(ws, spark, tmp_path):
    """Oracle: the CQL reference evaluator over the busy input's rows, plus the batch."""
    busy = _trades(90, seed=7, span_s=30, skew_s=0.5)
    _write(tmp_path / "busy", "part-0.parquet", busy)
    _write(tmp_path / "idle", "part-0.parquet",
           pd.DataFrame({"sym": ["z"], "px": [0.0], "ts": [0]}))
    _stream(ws, tmp_path / "busy", name="busy")
    sql = ("SELECT _time, sym, count(*) AS n FROM busy [RANGE 5 SECONDS SLIDE 5 SECONDS] "
           "GROUP BY sym UNION ALL SELECT _time, sym, count(*) AS n FROM idle "
           "[RANGE 5 SECONDS SLIDE 5 SECONDS] GROUP BY sym")
    _stream(ws, tmp_path / "idle", name="idle")
    quiet = ws.stream(sql, tmp_path / "o1", tmp_path / "c1", clock=lambda: 1000.0)
    quiet.await_termination()
    assert quiet.progress_us == 0 - 2 * SECOND  # held back by the idle input
    ws.sql(f"CREATE OR REPLACE STREAM idle (sym STRING, px DOUBLE, ts TIMESTAMP) FROM "
           f"'{tmp_path / 'idle'}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS "
           "HEARTBEAT 100 SECONDS")
    alive = ws.stream(sql, tmp_path / "o2", tmp_path / "c2", clock=lambda: 1000.0)
    alive.await_termination()
    busy_progress = busy["ts"].max() - 2 * SECOND
    assert alive.progress_us == busy_progress  # min(busy, 1000 s - 100 s)
    out = spark.read.parquet(str(tmp_path / "o2")).where("_final and sym != 'z'")
    assert out.count() > 0
    batch = ws.sql(sql).where("sym != 'z'")
    want = Counter({k: n for k, n in _rows(batch, ["_time", "sym", "n"]).items()
                    if k[0] < busy_progress})
    assert _rows(out, ["_time", "sym", "n"]) == want
    assert _rows(out, ["_time", "sym", "n"]) == _reference(
        busy, ref.Window("SLIDE", 5 * SECOND, 5 * SECOND), _count_by_sym, "RSTREAM",
        busy_progress)


def test_emit_changes_gives_early_results_then_the_final_ones(ws, spark, tmp_path):
    """Oracle for the final rows: the CQL reference evaluator, plus the batch query."""
    data = _trades(150, seed=11)
    for i, chunk in enumerate(_split(data, 3)):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    _stream(ws, tmp_path / "in")
    sql = "SELECT sym, count(*) AS n FROM trades [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY sym"
    cq = _run(ws, tmp_path, sql + " EMIT CHANGES")
    out = _output(spark, tmp_path)
    early = out.where("NOT _final")
    assert early.count() > 0
    for row in early.select("_time", "_progress").collect():
        # not final yet: at or after the progress (none yet in the first micro-batch)
        assert row["_progress"] is None or row["_time"] >= row["_progress"]
    batch = ws.sql(sql)
    want = Counter({k: n for k, n in _rows(batch, ["_time", "sym", "n"]).items()
                    if k[0] < cq.progress_us})
    assert _rows(out.where("_final"), ["_time", "sym", "n"]) == want
    assert want == _reference(data, ref.Window("SLIDE", 10 * SECOND, 10 * SECOND),
                              _count_by_sym, "RSTREAM", cq.progress_us)
    assert sum(r.rows_out for r in cq.reports) == out.count()
    assert sum(r.final_out for r in cq.reports) == out.where("_final").count() < out.count()


def test_restart_continues_from_the_checkpoint(ws, spark, tmp_path):
    """Oracle: the CQL reference evaluator over the four files' rows, plus the batch."""
    data = _trades(200, seed=13)
    chunks = _split(data, 4)
    for i, chunk in enumerate(chunks[:2]):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    _stream(ws, tmp_path / "in")
    sql = "SELECT sym, sum(px) AS total FROM trades [RANGE 6 SECONDS SLIDE 3 SECONDS] GROUP BY sym"
    first = _run(ws, tmp_path, sql)
    for i, chunk in enumerate(chunks[2:], start=2):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    second = _run(ws, tmp_path, sql)
    # the second run goes on from the first one's batches (each file once)
    fed = [(r.batch, r.rows_in) for r in first.reports + second.reports if r.rows_in]
    assert [n for _, n in fed] == [len(c) for c in chunks]
    assert [b for b, _ in fed] == sorted(b for b, _ in fed)
    assert second.reports[0].batch > first.reports[-1].batch
    want = Counter({k: n for k, n in _rows(ws.sql(sql), ["_time", "sym", "total"]).items()
                    if k[0] < second.progress_us})
    got = _rows(_output(spark, tmp_path).where("_final"), ["_time", "sym", "total"])
    assert got == want
    total = lambda rows: [(k, sum(r["px"] for r in g))  # noqa: E731
                          for k, g in _by_sym(rows).items()]
    assert got == _reference(data, ref.Window("SLIDE", 6 * SECOND, 3 * SECOND), total,
                             "RSTREAM", second.progress_us) and sum(got.values()) > 20


@pytest.mark.parametrize("rate, files", [
    (2000, 6),                                          # 240 k rows
    pytest.param(10000, 20, marks=pytest.mark.slow),    # 4 M rows (make test-all)
])
def test_state_stays_bounded_by_the_window(ws, spark, tmp_path, rate, files):
    per_file_s = 20  # rate: rows per second of event time
    for i in range(files):
        n = rate * per_file_s
        rng = np.random.default_rng(i)
        ts = (i * per_file_s * SECOND + np.sort(rng.integers(0, per_file_s * SECOND, n))
              - rng.integers(0, 2 * SECOND, n))  # skew up to the watermark
        _write(tmp_path / "in", f"part-{i:02d}.parquet", pd.DataFrame(
            {"sym": rng.choice(list("abcd"), n), "px": rng.random(n), "ts": np.maximum(ts, 0)}))
    _stream(ws, tmp_path / "in")
    cq = _run(ws, tmp_path, "SELECT sym, avg(px) AS mean FROM trades "
                            "[RANGE 4 SECONDS SLIDE 2 SECONDS] GROUP BY sym")
    assert sum(r.rows_in for r in cq.reports) == rate * per_file_s * files
    assert sum(r.late for r in cq.reports) == 0
    # the buffer holds the look-back (4 s + 2 s) plus the watermark's 2 s, not the stream
    bound = rate * (4 + 2 + 2 + 1)
    assert max(r.buffered for r in cq.reports) <= bound
    assert cq.reports[-1].buffered <= bound


@pytest.mark.parametrize("sql, code", [
    ("SELECT sym, count(*) FROM trades GROUP BY sym", "STREAMING_RULE"),
    ("SELECT count(*) AS n FROM trades [RANGE UNBOUNDED]", "STREAMING_RULE"),
    ("SELECT sym FROM (SELECT sym FROM trades [RANGE 1 SECONDS] GROUP BY sym) x",
     "STREAMING_RULE"),
    ("SELECT ts, sum(px) OVER (ORDER BY ts) FROM trades", "STREAMING_RULE"),
    ("SELECT ts, lead(px) OVER (ORDER BY ts) FROM trades", "STREAMING_RULE"),
    ("SELECT ts, avg(px) OVER (ORDER BY px ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) "
     "FROM trades", "STREAMING_RULE"),
    ("SELECT sym, avg(px) OVER (ORDER BY ts ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) "
     "FROM trades", "STREAMING_RULE"),
])
def test_streaming_rules(ws, tmp_path, sql, code):
    _write(tmp_path / "in", "part-0.parquet", _trades(5, seed=1))
    _stream(ws, tmp_path / "in")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == code


def test_heartbeat_advances_progress_while_every_input_is_idle(ws, spark, tmp_path):
    """With a processing-time trigger, a ticker keeps micro-batches coming after the last
    file, so a HEARTBEAT input's progress follows the clock and the windows become final."""
    import time

    _write(tmp_path / "in", "part-0.parquet", pd.DataFrame(
        {"sym": ["a"] * 6, "px": [1.0] * 6, "ts": [i * SECOND for i in range(6)]}))
    ws.sql(f"CREATE STREAM quiet (sym STRING, px DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 HOUR HEARTBEAT 0 SECONDS")
    began = time.monotonic()
    clock = lambda: (time.monotonic() - began) * 2.0  # noqa: E731 - a clock from 1970, 2x
    final = []
    cq = ws.stream("SELECT count(*) AS n FROM quiet [RANGE 1 SECONDS SLIDE 1 SECONDS]",
                   lambda df, batch: final.extend(df.where("_final").collect()),
                   tmp_path / "ckpt", trigger="every 1 second", clock=clock)
    try:
        deadline = time.monotonic() + 240
        while len(final) < 6 and time.monotonic() < deadline and cq.error is None:
            time.sleep(0.5)
    finally:
        cq.stop()
    assert cq.error is None
    assert sorted(_micros(r["_time"]) for r in final) == [i * SECOND for i in range(6)]
    assert len(cq.reports) >= 2 and cq.reports[-1].rows_in == 0  # idle batches did it


def test_live_metrics_of_an_event_stream_query(ws, spark, tmp_path):
    """status(): rates, progress, state rows and bytes, result latency from each batch's
    files' arrival (Spark's file-source log); the same figures from `wavesql status`."""
    from wavesql.cli import main as cli

    frame = _trades(300, seed=9)
    for i, part in enumerate(_split(frame, 3)):
        _write(tmp_path / "in", f"part-{i}.parquet", part)
    _stream(ws, tmp_path / "in")
    cq = ws.stream("SELECT sym, count(*) AS n FROM trades [RANGE 10 SECONDS] GROUP BY sym",
                   tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
    cq.await_termination()
    st = cq.status()
    assert st["batches"] == 3 and st["rows_in"] == 300
    assert st["input_rows_per_second"] > 0 and st["processed_rows_per_second"] > 0
    assert st["buffered"] > 0 and st["state_bytes"] > 0
    # each file's modification time is an hour ago (_write): its rows' result latency is
    # that hour plus the time the run took
    assert all(3590 < r.latency_s < 3600 + 900 for r in cq.reports)
    assert 0 <= st["latency_p50_s"] <= st["latency_p99_s"] == st["latency_max_s"]
    assert cli(["status", str(tmp_path / "out"), "--json"]) == 0
