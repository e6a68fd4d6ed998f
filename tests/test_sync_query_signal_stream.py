"""A continuous SYNC JOIN over a signal defined by a query (issue 21): ``acc`` is ``AS SELECT
n, x FROM readings WHERE dev = 'a'`` over a stream of Parquet files, each file holding
device 'a''s samples mixed with device 'b''s rows at the same sample numbers (values that a
query letting them through would show). Control rows arrive before and after the samples
cover them, over runs on one checkpoint, alone or synced with a WAV signal in one SELECT.

Oracle: the signal's query applied by pandas to the rows the test wrote, then numpy slices
per control row (a range with a sample missing: NULL, as the batch SYNC's default MISSING
NULL gives). Nothing here is computed by WaveSQL's own code."""

from __future__ import annotations

import datetime as dt
import json
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

RATE = 100  # the accelerometer: 100 Hz, 1 s files
MIC_RATE = 1000  # the WAV signal: 1000 Hz, 1 s files
SIGNAL = ("CREATE SIGNAL acc (x FLOAT) RATE 100 HZ OPTIONS (sample_column = 'n') "
          "AS SELECT n, x FROM readings WHERE dev = 'a'")
QUERY = "SELECT c.id, a.x FROM marks c SYNC JOIN acc a ON RANGE (c.t0, c.t1)"
BOTH = ("SELECT c.id, a.x, m.ch1 FROM marks c SYNC JOIN acc a ON RANGE (c.t0, c.t1) "
        "SYNC JOIN mic m ON RANGE (c.t0 - INTERVAL 50 MILLISECONDS, c.t1)")
EPOCH = dt.datetime(1970, 1, 1)


@pytest.fixture
def samples():
    rng = np.random.default_rng(11)
    return (rng.standard_normal(600).astype(np.float32),
            rng.standard_normal(6 * MIC_RATE).astype(np.float32))


class Readings:
    """The stream's files as the test writes them, and every row written (the oracle's
    input)."""

    def __init__(self, folder, acc):
        self.folder, self.acc, self.rows = folder, acc, {}
        folder.mkdir()

    def write(self, name: str, numbers, *, other=(), fmt="parquet", settled=True):
        """Device 'a''s samples ``numbers`` (those in ``other`` written as device 'c''s:
        rows the signal's query drops), device 'b''s rows at the same numbers, shuffled, as
        a file of format ``fmt`` (a CSV/JSON file back-dated past the settle time unless
        not ``settled``)."""
        numbers = np.asarray(numbers, np.int64)
        dev = np.where(np.isin(numbers, other), "c", "a")
        a = pd.DataFrame({"dev": dev, "n": numbers, "x": self.acc[numbers]})
        b = pd.DataFrame({"dev": "b", "n": numbers, "x": np.float32(9)})
        rows = pd.concat([a, b]).sample(frac=1.0, random_state=len(numbers))
        rows.insert(0, "ts", pd.to_datetime(rows.n * (1_000_000 // RATE), unit="us")
                    .astype("datetime64[us]"))
        path = self.folder / f"{name}.{fmt}"
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path)
        elif fmt == "csv":
            rows.to_csv(path, index=False)
        else:
            rows.assign(ts=rows.ts.astype(str)).to_json(path, orient="records", lines=True)
        if fmt != "parquet" and settled:
            old = time.time() - 5
            os.utime(path, (old, old))
        self.rows[name] = rows
        return path

    def signal(self, late=None) -> pd.Series:
        """The signal's samples: its query by pandas over the rows written (but the sample
        numbers ``late[file]`` of each file, which arrived after they were used), x by n."""
        late = late or {}
        rows = pd.concat([r[~r.n.isin(late.get(name, ()))] for name, r in self.rows.items()])
        a = rows[rows.dev == "a"]
        assert a.n.is_unique
        return a.set_index("n").x.sort_index()


def first_sample(ms: int, rate: int) -> int:
    """The oracle's time-to-sample rule (README: the first sample at or after the time)."""
    return -((-ms * rate) // 1000)


def _stamp(ms: int) -> str:
    return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def _marks(tmp_path, name, ranges, ids, at=None):
    """Control rows: their range, and their event time ``at`` (default: the range's
    start)."""
    at = at or {}
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "at": _stamp(at.get(i, ranges[i][0])),
                    "t0": _stamp(ranges[i][0]), "t1": _stamp(ranges[i][1])}) + "\n"
        for i in ids))


def _define(ws, tmp_path, acc, mic=False, fmt="parquet") -> Readings:
    readings = Readings(tmp_path / "readings", acc)
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM readings (ts TIMESTAMP, dev STRING, n BIGINT, x FLOAT) FROM "
           f"'{readings.folder}' FORMAT {fmt} EVENT TIME ts")
    ws.sql(SIGNAL)
    if mic:  # (its first files written: CREATE SIGNAL checks them)
        ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {MIC_RATE} HZ FROM '{tmp_path / 'mic'}' "
               "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM marks (id BIGINT, at TIMESTAMP, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME at WATERMARK 1 SECOND")
    return readings


def _mic(tmp_path, mic, i: int):
    from scipy.io import wavfile

    wavfile.write(tmp_path / "mic" / f"mic_{i:03d}.wav", MIC_RATE,
                  mic[i * MIC_RATE:(i + 1) * MIC_RATE])


def _run(ws, tmp_path, query):
    q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return q


def _rows(spark, tmp_path):
    return spark.read.parquet(str(tmp_path / "out")).collect()


def _check(rows, ranges, signal: pd.Series, mic=None):
    """Each row's segment against the oracle: the signal's samples over [t0, t1) when every
    one is there (else NULL: a gap); the mic's over [t0 - 50 ms, t1); reversed: NULL."""
    for r in rows:
        t0, t1 = ranges[r.id]
        assert r._progress is not None
        if t1 < t0:
            assert r.x is None
            continue
        lo, hi = first_sample(t0, RATE), first_sample(t1, RATE)
        want = np.arange(lo, hi)
        if not np.isin(want, signal.index).all():
            assert r.x is None, r.id
        else:
            assert (r.x.start, r.x.rate) == (lo, RATE), r.id
            np.testing.assert_array_equal(np.asarray(r.x.samples, np.float32),
                                          signal.loc[want].to_numpy(np.float32))
        if mic is not None:
            lo, hi = first_sample(t0 - 50, MIC_RATE), first_sample(t1, MIC_RATE)
            assert (r.ch1.start, r.ch1.rate) == (lo, MIC_RATE)
            np.testing.assert_array_equal(np.asarray(r.ch1.samples, np.float32), mic[lo:hi])


def test_a_query_signal_and_a_wav_signal_synced_across_a_restart(ws, spark, tmp_path,
                                                                 samples):
    """CI's end-to-end case. Run 1: the query signal's first second, the mic's first two --
    the rows both cover go, the others wait (row 2 on the query signal). Run 2 on the same
    checkpoint: the query signal to 3 s (its second file with a hole the query drops:
    device 'c' at samples 150-159), the mic to 3 s, new control rows -- the waiting rows go,
    each once; one over the hole is NULL; row 5 waits for both signals."""
    acc, mic = samples
    ranges = {1: (100, 600), 2: (800, 1400), 3: (1200, 1700), 4: (2000, 2900),
              5: (2500, 3600), 7: (700, 500)}
    (tmp_path / "mic").mkdir()
    for i in range(2):
        _mic(tmp_path, mic, i)
    readings = _define(ws, tmp_path, acc, mic=True)
    readings.write("r_000", range(0, 100))
    _marks(tmp_path, "c1", ranges, (1, 2, 3, 7))
    assert _run(ws, tmp_path, BOTH).reports[-1].buffered == 2  # 2 and 3 wait for acc
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 7]

    readings.write("r_001", range(100, 200), other=range(150, 160))
    readings.write("r_002", range(200, 300))
    _mic(tmp_path, mic, 2)
    _marks(tmp_path, "c2", ranges, (4, 5))
    assert _run(ws, tmp_path, BOTH).reports[-1].buffered == 1  # row 5 waits for both
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 7]  # once each
    assert next(r for r in rows if r.id == 3).x is None  # over the hole: NULL
    assert next(r for r in rows if r.id == 2).x is not None
    _check(rows, ranges, readings.signal(), mic)
    state = json.loads(max((tmp_path / "ckpt" / "state").glob("*/state.json")).read_text())
    record = state["signal"]["signals"]["acc"]
    assert record["kind"] == "query" and record["end"] == 300


@pytest.mark.slow  # three continuous runs: minutes on a loaded machine
def test_alone_rows_waiting_a_late_sample_and_a_gap_across_runs(ws, spark, tmp_path,
                                                                  samples):
    """The query signal alone, four runs on one checkpoint. Rows arrive before the samples
    cover them (they wait) and after (they go at once). A range over samples never
    written (300-349) is NULL, one beside it is the samples. Rows arriving below the
    samples already used (40-49 again, as device 'a'; then 300-349, in a file whose other
    rows are on time) are late: to the late sink, counted, never read -- the gap they
    would fill stays a gap."""
    acc, _ = samples
    # (each row after the control stream's progress: at >= its latest at - 1 s)
    ranges = {1: (0, 500), 2: (900, 1500), 3: (1600, 2000), 4: (2800, 3100),
              5: (3500, 4000), 6: (1700, 2450), 8: (3400, 3600), 9: (2000, 2500),
              10: (300, 600), 11: (2900, 4550)}
    readings = _define(ws, tmp_path, acc)
    readings.write("r_000", range(0, 100))
    _marks(tmp_path, "c1", ranges, (1, 2, 3))
    assert _run(ws, tmp_path, QUERY).reports[-1].buffered == 2
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1]

    readings.write("r_001", range(100, 200))
    readings.write("r_002", range(200, 300))
    _marks(tmp_path, "c2", ranges, (4, 6))
    assert _run(ws, tmp_path, QUERY).reports[-1].buffered == 1  # row 4 waits
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 2, 3, 6]

    readings.write("r_003", range(350, 450))  # 300-349 never written: a gap
    readings.write("r_003a", range(40, 50))  # already used: late
    # 9 and 10: covered since runs 2 and 1, go at once; 10 over the late samples 40-49
    _marks(tmp_path, "c3", ranges, (5, 8, 9, 10), at={10: 3500})
    q = _run(ws, tmp_path, QUERY)
    assert q.reports[-1].buffered == 0
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 5, 6, 8, 9, 10]
    assert sorted(r.id for r in rows if r.x is None) == [4, 8]  # over the gap
    _check(rows, ranges, readings.signal(late={"r_003a": range(40, 50)}))
    assert sum(r.late for r in q.reports) == 10

    readings.write("r_004", [*range(300, 350), *range(450, 460)])  # 300-349 late
    _marks(tmp_path, "c4", ranges, (11,), at={11: 4000})
    q = _run(ws, tmp_path, QUERY)
    assert sum(r.late for r in q.reports) == 50
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    assert next(r for r in rows if r.id == 11).x is None  # 300-349 still a gap
    _check(rows, ranges, readings.signal(late={"r_003a": range(40, 50),
                                               "r_004": range(300, 350)}))
    late = spark.read.parquet(str(tmp_path / "ckpt" / "late")).toPandas()
    assert len(late) == 60 and set(late._stream) == {"acc"}
    assert all("already covered" in r for r in late._reason)
    assert sorted(json.loads(r)["n"] for r in late._row) == [*range(40, 50),
                                                             *range(300, 350)]


def _records(tmp_path) -> list[dict]:
    """The signal's records the checkpoint still holds (the last batches'), in batch
    order."""
    dirs = sorted((d for d in (tmp_path / "ckpt" / "state").iterdir() if d.name.isdigit()),
                  key=lambda d: int(d.name))
    return [json.loads((d / "state.json").read_text())["signal"]["signals"]["acc"]
            for d in dirs if (d / "state.json").exists()]


def test_many_small_files_in_bounded_batches_and_a_bounded_record(ws, spark, tmp_path,
                                                                  samples, monkeypatch):
    """Twelve files of 0.2 s, at most three a micro-batch: four micro-batches index them,
    three each (the rows each batch's coverage reaches go, the others wait); a restart
    with six more files and rows over the oldest samples (read back through the merged
    entries). Every row equals the pandas/numpy oracle, once; the record keeps at most
    two files' entries and one merged entry (the others merged: adjacent, no late
    rows) while it indexes eighteen files."""
    from wavesql.streaming import query_sync

    monkeypatch.setattr(query_sync, "MAX_FILES", 2)
    monkeypatch.setattr(query_sync, "MAX_MERGED", 2)
    acc, _ = samples
    ranges = {1: (0, 150), 2: (500, 900), 3: (1500, 2350), 4: (2300, 2500),
              5: (100, 700), 6: (3000, 3450), 7: (20, 1990), 8: (3500, 3700)}
    readings = _define(ws, tmp_path, acc)
    for i in range(12):
        readings.write(f"r_{i:03d}", range(20 * i, 20 * i + 20))
    _marks(tmp_path, "c1", ranges, (1, 2, 3, 4))
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=3)
    q.await_termination()
    assert q.error is None, q.error
    # each micro-batch: its control rows and the query's rows of at most 3 files (20 each)
    rows_in = [r.rows_in for r in q.reports]
    assert sum(rows_in) == 4 + 12 * 20 and len(rows_in) >= 4, rows_in
    assert max(rows_in) <= 4 + 3 * 20, rows_in
    record = _records(tmp_path)[-1]
    assert len(record["files"]) + sum(m["n"] for m in record["merged"]) == 12
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 2, 3]  # 4 waits for 2.5 s

    for i in range(12, 18):
        readings.write(f"r_{i:03d}", range(20 * i, 20 * i + 20))
    # (their event time past the control stream's progress: not late)
    _marks(tmp_path, "c2", ranges, (5, 6, 7, 8), at={i: 2400 for i in (5, 6, 7, 8)})
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=3)
    q.await_termination()
    assert q.error is None, q.error
    rows_in = [r.rows_in for r in q.reports]
    assert sum(rows_in) == 4 + 6 * 20 and max(rows_in) <= 4 + 3 * 20, rows_in
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 5, 6, 7]  # 8 waits for 3.7 s
    _check(rows, ranges, readings.signal())
    record = _records(tmp_path)[-1]
    assert record["end"] == 360
    assert len(record["files"]) <= 2 and len(record["merged"]) <= 1
    assert len(record["files"]) + sum(m["n"] for m in record["merged"]) == 18


def test_the_split_indexes_files_waits_for_one_being_written_and_places_late_rows_apart(
        ws, spark, tmp_path, samples):
    """The split each micro-batch makes, state carried as the runner carries it (no
    continuous run): a row goes once the complete files cover it; a Parquet file without
    its footer yet holds every row past the samples already used; two new files holding
    one sample are OVERLAPPING_SAMPLES; the state records kind "query"."""
    from tests.test_continuous_multi_sync import control_rows

    acc, _ = samples
    ranges = {1: (100, 600), 2: (800, 1500), 3: (1200, 2900), 4: (2950, 3000)}
    readings = _define(ws, tmp_path, acc)
    readings.write("r_000", range(0, 100))
    split = _split_of(ws, QUERY)

    now, waiting, state, record = split(control_rows(spark, ranges, (1, 2, 3)), {})
    assert now == [1] and record["kind"] == "query" and record["end"] == RATE
    readings.write("r_001", range(100, 200))
    path = readings.folder / "r_001.parquet"
    whole = path.read_bytes()
    path.write_bytes(whole[:-20])  # no footer yet: being written
    os.utime(path)
    readings.write("r_002", range(200, 300))
    now, waiting, state, record = split(waiting, state)
    assert now == [] and record["end"] == RATE  # r_001 may land anywhere: nothing moves
    path.write_bytes(whole)
    now, waiting, state, record = split(waiting.unionByName(
        control_rows(spark, ranges, (4,))), state)
    assert now == [2, 3, 4] and record["end"] == 3 * RATE
    assert [f[3] for f in record["files"]] == [[[0, 100]], [[100, 100]], [[200, 100]]]
    readings.write("r_003", range(300, 320))
    readings.write("r_004", range(310, 330))  # 310-319 twice
    with pytest.raises(WaveSQLError) as err:
        split(waiting, state)
    assert err.value.code == "OVERLAPPING_SAMPLES" and "`acc`" in err.value.message
    # a checkpoint whose record of `acc` is of another kind (files: formats 1, 2, 3) is
    # refused, saying which; the query's own record loads as written
    from wavesql.streaming import sync_state

    acc_def, files = ws.catalog.get("acc"), {"end": 100, "files": "0" * 64}
    for kept, why in [
            (files, "one-signal SYNC (format 1"),
            ({"version": 2, "kind": "wav", "signals": {"acc": files}},
             "records signal acc as read from files; it is now read from its query's stream"),
            ({"version": 3, "signals": {"acc": {"kind": "files", **files}}},
             "records signal acc as read from files; it is now read from its query's stream")]:
        with pytest.raises(WaveSQLError) as err:
            sync_state.records({"signal": kept}, [acc_def])
        assert err.value.code == "CHECKPOINT_MISMATCH" and why in err.value.message
    assert sync_state.records(state, [acc_def]) == {"acc": record}


def _split_of(ws, query):
    """The split a micro-batch makes, as a function of (control rows, state)."""
    from wavesql.streaming.sync import sync_split

    plan = _plan(ws, query)

    def split(rows, state):
        now, waiting, after, _ = sync_split(plan, rows, state, time.time(), ws.catalog)
        return (sorted(r.id for r in now.collect()), waiting.cache(), {"signal": after},
                after["signals"]["acc"])

    return split


@pytest.mark.slow  # the CSV and JSON variants of the split's file readiness
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_the_split_over_a_stream_of_text_files(ws, spark, tmp_path, samples, fmt):
    """A CSV or JSON stream: a file modified just now may still be being written (nothing
    moves); once left alone for the settle time it is read; the rows covered go, and the
    segments they read are the oracle's samples. A malformed CSV row (a channel that is
    not a number) fails the split with MALFORMED_ROW naming the file."""
    from tests.test_continuous_multi_sync import control_rows
    from wavesql.streaming.sync import split_signals

    acc, _ = samples
    ranges = {1: (100, 600), 2: (800, 1500), 3: (1500, 1990)}
    readings = _define(ws, tmp_path, acc, fmt=fmt)
    readings.write("r_000", range(0, 100), fmt=fmt)
    split = _split_of(ws, QUERY)
    now, waiting, state, record = split(control_rows(spark, ranges, (1, 2, 3)), {})
    assert now == [1] and record["end"] == RATE
    path = readings.write("r_001", range(100, 200), fmt=fmt, settled=False)
    now, waiting, state, record = split(waiting, state)
    assert now == [] and record["end"] == RATE
    old = time.time() - 5
    os.utime(path, (old, old))
    got = split_signals(spark, _plan(ws, QUERY), waiting, state, time.time(),
                        catalog=ws.catalog)
    assert sorted(r.id for r in got.ready.collect()) == [2, 3]
    # what the rows synced now read: the segments of the files their ranges touch
    signal, seen = readings.signal(), {}
    for r in got.inputs[("signal", "acc")].collect():
        assert r.x.rate == RATE
        seen.update(zip(range(r.x.start, r.x.start + len(r.x.samples)), r.x.samples))
    want = np.arange(first_sample(800, RATE), first_sample(1990, RATE))
    assert set(want) <= set(seen)
    np.testing.assert_array_equal(np.asarray([seen[n] for n in sorted(seen)], np.float32),
                                  signal.loc[sorted(seen)].to_numpy(np.float32))
    if fmt == "csv":
        bad = readings.write("r_002", range(200, 300), fmt=fmt)
        lines = bad.read_text().splitlines()
        lines[3] = ",".join(lines[3].split(",")[:-1] + ["abc"])
        bad.write_text("\n".join(lines) + "\n")
        os.utime(bad, (old, old))
        with pytest.raises(WaveSQLError) as err:
            split(got.waiting, {"signal": got.state})
        assert err.value.code == "MALFORMED_ROW" and "r_002.csv" in err.value.message


def _plan(ws, query):
    from wavesql import planner
    from wavesql.dialect import parse_statements
    from wavesql.streaming.planning import plan_continuous

    stmt = parse_statements(query)[0]
    return plan_continuous(planner.optimize(planner.bind(stmt, ws.catalog,
                                                         ws.env.for_text(query))).relation,
                           stmt)


def test_refused_when_the_signal_query_is_not_row_by_row(ws, tmp_path):
    """An aggregate in the signal's query: NOT_IMPLEMENTED before anything runs, placed at
    the aggregate in the signal's query; nothing written."""
    (tmp_path / "readings").mkdir()
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM readings (ts TIMESTAMP, dev STRING, n BIGINT, x FLOAT) FROM "
           f"'{tmp_path / 'readings'}' FORMAT parquet EVENT TIME ts")
    ws.sql("CREATE SIGNAL avg_acc (x FLOAT) RATE 100 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, AVG(x) AS x FROM readings GROUP BY n")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT c.id, a.x FROM marks c SYNC JOIN avg_acc a ON RANGE (c.t0, c.t1)",
                  tmp_path / "out", tmp_path / "ckpt")
    e = err.value
    assert e.code == "NOT_IMPLEMENTED" and "avg_acc" in e.message
    assert "not row by row" in e.message and e.hint
    at = e.query.upper().index("AVG(")
    assert at <= e.span.start < e.query.index(")", at), (e.query, e.span)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # starts the Kafka broker
def test_refused_when_the_signal_reads_a_kafka_stream(ws, tmp_path, kafka):
    """A signal whose query reads a Kafka stream: NOT_IMPLEMENTED before anything runs,
    saying why (Kafka partitions deliver rows out of sample order) and what to do."""
    topic = kafka.create_topic("qsync_refused", 1)
    ws.sql(f"CREATE STREAM kr (dev STRING, n BIGINT, x FLOAT, ts TIMESTAMP) FROM KAFKA "
           f"'{topic}' OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json")
    ws.sql("CREATE SIGNAL kacc (x FLOAT) RATE 100 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, x FROM kr WHERE dev = 'a'")
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT c.id, a.x FROM marks c SYNC JOIN kacc a ON RANGE (c.t0, c.t1)",
                  tmp_path / "out", tmp_path / "ckpt")
    e = err.value
    assert e.code == "NOT_IMPLEMENTED" and "kacc" in e.message and "Kafka" in e.message
    assert "FORMAT samples" in e.hint and e.source == "signal kacc"
    assert not (tmp_path / "out").exists()
