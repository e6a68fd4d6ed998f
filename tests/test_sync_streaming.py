"""SYNC JOIN as a continuous query: control rows and the signal's WAV files arrive in
steps; every control row is synced exactly once, as soon as the recording covers its range,
and the union of the results equals the batch SYNC over all the data (and numpy)."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from wavesql.datasets import array_recording
from wavesql.errors import WaveSQLError

RATE = 48_000
QUERY = ("SELECT e.event, a.ch1, a.ch4 FROM events e "
         "SYNC JOIN array4 a ON RANGE (e.t_from, e.t_to)")


def _events(folder, name, rows):
    """rows: (event, first sample, last sample + 1) -> a Parquet file of time ranges."""
    frame = pd.DataFrame({
        "event": np.array([r[0] for r in rows], dtype=np.int64),
        "t_from": pd.to_datetime([r[1] * 1_000_000 // RATE for r in rows], unit="us"),
        "t_to": pd.to_datetime([-(-r[2] * 1_000_000 // RATE) for r in rows], unit="us")})
    for col in ("t_from", "t_to"):
        frame[col] = frame[col].astype("datetime64[us]")
    frame.to_parquet(folder / f"{name}.parquet")


@pytest.fixture
def recording(tmp_path):
    truth = array_recording(tmp_path / "all", seconds=8.0, events=6, file_seconds=2.0)
    for d in ("sig", "ctl"):
        (tmp_path / d).mkdir()
    return truth


def _define(ws, tmp_path):
    ws.sql(f"CREATE SIGNAL array4 (ch1 FLOAT, ch2 FLOAT, ch3 FLOAT, ch4 FLOAT) RATE {RATE} HZ "
           f"FROM '{tmp_path / 'sig'}' FORMAT wav SEGMENT 4096")
    ws.sql(f"CREATE STREAM events (event BIGINT, t_from TIMESTAMP, t_to TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet EVENT TIME t_from WATERMARK 1 SECOND")


def _answer(rows):
    return {r.event: None if r.ch1 is None else (
        r.ch1.start, tuple(np.asarray(r.ch1.samples, np.float32)),
        tuple(np.asarray(r.ch4.samples, np.float32))) for r in rows}


def _numpy_slices(truth, rows):
    """Each synced event's start and channels 1 and 4 are numpy's slice of the recording
    written (the oracle)."""
    n = truth.event_length
    for event, (start, ch1, ch4) in _answer(rows).items():
        s = truth.event_starts[event]
        assert start == s
        np.testing.assert_array_equal(ch1, truth.samples[s:s + n, 0])
        np.testing.assert_array_equal(ch4, truth.samples[s:s + n, 3])


def test_continuous_sync_equals_the_batch_sync(ws, spark, tmp_path, recording):
    """Oracle: numpy slices of the recording written (and the event never fully recorded
    is not delivered), plus the batch SYNC."""
    truth = recording
    n = truth.event_length
    ranges = [(i, s, s + n) for i, s in enumerate(truth.event_starts)]
    ranges.append((99, truth.frames - 100, truth.frames + 4800))  # never fully recorded

    def run():
        q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q.reports

    def arrive_signal(*names):
        for name in names:
            shutil.copy(tmp_path / "all" / name, tmp_path / "sig" / name)

    def waiting(end):  # control rows sent so far whose range the recording does not cover
        return sorted(e for e, _, hi in sent if hi > end)

    # 1. the first 4 s of audio and the events that start in it
    arrive_signal("array_000.wav", "array_001.wav")
    _define(ws, tmp_path)
    sent = [r for r in ranges if r[1] < 4 * RATE]
    _events(tmp_path / "ctl", "c1", sent)
    reports = run()
    assert reports[-1].buffered == len(waiting(4 * RATE))
    # 2. the other events: all but those inside the first 4 s wait for the signal
    rest = [r for r in ranges if r[1] >= 4 * RATE]
    sent += rest
    _events(tmp_path / "ctl", "c2", rest)
    reports = run()
    assert reports[-1].buffered == len(waiting(4 * RATE)) > 0
    # 3. the rest of the audio, no new control row: the new files alone run a batch
    arrive_signal("array_002.wav", "array_003.wav")
    reports = run()
    assert reports and reports[-1].buffered == len(waiting(truth.frames)) == 1
    got = spark.read.parquet(str(tmp_path / "out"))
    rows = got.collect()
    assert len(rows) == len({r.event for r in rows}) == len(truth.event_starts)  # once each
    assert all(r._progress is not None for r in rows)
    batch = ws.sql(QUERY).collect()
    want = _answer(batch)
    assert want.pop(99) is None  # the batch query gives NULL: the range is not all recorded
    assert _answer(rows) == want
    _numpy_slices(truth, rows)


def test_a_file_out_of_timeline_order_is_refused(ws, tmp_path, recording):
    shutil.copy(tmp_path / "all" / "array_001.wav", tmp_path / "sig" / "array_001.wav")
    _define(ws, tmp_path)
    _events(tmp_path / "ctl", "c1", [(0, 10, 20)])
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None
    # array_000 sorts before array_001: it would move samples already synced
    shutil.copy(tmp_path / "all" / "array_000.wav", tmp_path / "sig" / "array_000.wav")
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt")
    with pytest.raises(WaveSQLError) as err:
        q.await_termination()
    assert err.value.code == "OUT_OF_ORDER_FILE"


def test_continuous_sync_rules(ws, tmp_path, recording):
    shutil.copy(tmp_path / "all" / "array_000.wav", tmp_path / "sig" / "array_000.wav")
    _define(ws, tmp_path)
    # a view filtering the control stream is row by row (accepted); one that numbers its
    # rows is not: a row's number depends on the rows before it
    ws.sql("CREATE VIEW numbered AS SELECT *, row_number() OVER (ORDER BY t_from) AS n "
           "FROM events")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT e.event, a.ch1 FROM numbered e SYNC JOIN array4 a "
                  "ON RANGE (e.t_from, e.t_to)", tmp_path / "o", tmp_path / "c")
    assert err.value.code == "NOT_IMPLEMENTED"
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT count(*) FROM events e SYNC JOIN array4 a "
                  "ON RANGE (e.t_from, e.t_to)", tmp_path / "o", tmp_path / "c")
    assert err.value.code == "STREAMING_RULE"


def test_wavesql_run_syncs_each_event_once_across_runs(ws, spark, tmp_path, recording):
    """A query file with INSERT INTO ... SYNC JOIN, run after each arrival (as `wavesql
    run` does): the sink ends with every event once, equal to the batch SYNC.
    Oracle: numpy slices of the recording written, plus the batch SYNC."""
    from wavesql.jobs import run_file

    truth = recording
    n = truth.event_length
    shutil.copy(tmp_path / "all" / "array_000.wav", tmp_path / "sig" / "array_000.wav")
    _define(ws, tmp_path)
    ws.sql(f"CREATE SINK audio TO '{tmp_path / 'audio'}' FORMAT parquet")
    job = tmp_path / "job.wsql"
    job.write_text(f"INSERT INTO audio {QUERY};\n")
    _events(tmp_path / "ctl", "c1", [(i, s, s + n) for i, s in enumerate(truth.event_starts)])
    first = run_file(ws, str(job))
    assert first.status == "ok", first.error
    for name in ("array_001.wav", "array_002.wav", "array_003.wav"):
        shutil.copy(tmp_path / "all" / name, tmp_path / "sig" / name)
    second = run_file(ws, str(job))
    assert second.status == "ok", second.error
    rows = spark.read.parquet(str(tmp_path / "audio")).collect()
    assert sorted(r.event for r in rows) == list(range(len(truth.event_starts)))
    assert _answer(rows) == _answer(ws.sql(QUERY).collect())
    _numpy_slices(truth, rows)


def test_signal_placements_read_a_header_again_only_when_the_file_changed(tmp_path,
                                                                         monkeypatch):
    """A continuous SYNC places its signal's files at every micro-batch: headers come from
    a cache keyed by size and modification time."""
    import importlib
    import os

    from wavesql.udfs import wav

    lower = importlib.import_module("wavesql.planner.lower")  # the module, not lower()

    path = tmp_path / "a.wav"
    wav.write_wav(path, np.zeros(100, np.float32), 1000, "float32")
    reads = []
    real = wav.read_info
    monkeypatch.setattr(wav, "read_info", lambda p, **kw: reads.append(p) or real(p, **kw))
    monkeypatch.setattr(lower, "_HEADERS", {})
    assert lower._cached_header(str(path)).frames == 100
    assert lower._cached_header(str(path)).frames == 100
    assert len(reads) == 1
    wav.write_wav(path, np.zeros(300, np.float32), 1000, "float32")  # rewritten: new size
    os.utime(path, ns=(1, 1))
    assert lower._cached_header(str(path)).frames == 300 and len(reads) == 2
    with pytest.raises(OSError):  # a missing file: read_info's own error, as without a cache
        lower._cached_header(str(tmp_path / "gone.wav"))


# -- a control that is not the bare stream (issue 21: closure) ---------------------------
MIC_RATE = 1000  # 1 sample per millisecond: a time in ms is its sample number
#: a CTE over the marks stream, row by row: a filter and a computed range end
BEATS = ("WITH r AS (SELECT id, t0, t0 + INTERVAL 500 MILLISECONDS AS t1 FROM marks "
         "WHERE kind = 'beat') ")


def _mic(tmp_path):
    """Two 2-second mono float32 WAV files (scipy's writer) under all/, and their samples."""
    from scipy.io import wavfile

    data = np.random.default_rng(21).standard_normal(4000).astype(np.float32)
    (tmp_path / "all").mkdir()
    for d in ("sig", "ctl"):
        (tmp_path / d).mkdir()
    for i in range(2):
        wavfile.write(tmp_path / "all" / f"mic_{i:03d}.wav", MIC_RATE,
                      data[i * 2000:(i + 1) * 2000])
    return data


def _define_mic(ws, tmp_path):
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {MIC_RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM marks (id BIGINT, kind STRING, t0 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")


def _marks(tmp_path, name, rows):
    """rows: (id, kind, ms since the recording's start) -> a JSON-lines file."""
    import json

    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "kind": k, "t0": f"1970-01-01T00:00:{ms // 1000:02d}."
                    f"{ms % 1000:03d}Z"}) + "\n" for i, k, ms in rows))


def test_continuous_sync_over_a_cte_of_the_control_stream(ws, spark, tmp_path):
    """The control is a CTE filtering the stream and computing each range's end: a stream
    row the CTE drops is released at once (it makes no control row), a beat waits until
    the recording covers its range; each beat's samples are numpy's slice of the data
    written, and signal functions in the same SELECT apply to them (numpy's RMS, scipy's
    lfilter from rest: a SYNC row's segment is a signal of its own)."""
    from scipy.signal import lfilter

    data = _mic(tmp_path)
    query = BEATS + ("SELECT r.id, s.ch1, seg_rms(s.ch1) AS rms, "
                     "iir(s.ch1, ARRAY(0.5D, 0.5D), ARRAY(1.0D)) AS smooth "
                     "FROM r SYNC JOIN mic s ON RANGE (r.t0, r.t1)")

    def run():
        q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q.reports[-1]

    shutil.copy(tmp_path / "all" / "mic_000.wav", tmp_path / "sig")
    _define_mic(ws, tmp_path)
    _marks(tmp_path, "c1", [(1, "beat", 300), (2, "noise", 500), (3, "beat", 1800)])
    assert run().buffered == 1  # beat 3 ends at 2300 ms, after the first file
    first = {r.id for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert first == {1}
    shutil.copy(tmp_path / "all" / "mic_001.wav", tmp_path / "sig")
    _marks(tmp_path, "c2", [(4, "beat", 2900), (5, "noise", 3000), (6, "beat", 3800)])
    assert run().buffered == 1  # beat 6 ends at 4300 ms, past the recording
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.id for r in rows) == [1, 3, 4]  # once each
    starts = {1: 300, 3: 1800, 4: 2900}
    for r in rows:
        a = starts[r.id]
        assert r.ch1.start == a
        x = data[a:a + 500]
        np.testing.assert_array_equal(np.asarray(r.ch1.samples, np.float32), x)
        assert r.rms == pytest.approx(np.sqrt(np.mean(x.astype(np.float64) ** 2)), rel=1e-6)
        assert r.smooth.start == a
        np.testing.assert_allclose(r.smooth.samples, lfilter([0.5, 0.5], [1.0], x),
                                   rtol=1e-5, atol=1e-6)


def test_a_continuous_sync_control_that_keeps_state_is_refused(ws, tmp_path):
    """A control view that is not row by row, or not deterministic (it is evaluated at the
    split and again at the sync), is refused before anything runs, saying what it is."""
    _mic(tmp_path)
    shutil.copy(tmp_path / "all" / "mic_000.wav", tmp_path / "sig")
    _define_mic(ws, tmp_path)
    sync = " SYNC JOIN mic s ON RANGE (r.t0, r.t1)"
    for control, why in [
            ("(SELECT kind, min(t0) AS t0, max(t0) AS t1 FROM marks GROUP BY kind)",
             "GROUP BY (`GROUP BY kind`) keeps state across rows"),
            ("(SELECT t0, lead(t0) OVER (ORDER BY t0) AS t1 FROM marks)",
             "an OVER window"),
            ("(SELECT DISTINCT t0, t0 AS t1 FROM marks)", "DISTINCT"),
            ("(SELECT t0, t0 AS t1 FROM marks WHERE rand() < 0.5)", "gives another value")]:
        with pytest.raises(WaveSQLError) as err:
            ws.stream(f"SELECT r.t0, s.ch1 FROM {control} r" + sync, tmp_path / "o",
                      tmp_path / "c")
        assert err.value.code == "NOT_IMPLEMENTED", err.value
        assert why in err.value.message, err.value


def test_a_view_or_subquery_control_splits_the_stream_rows(ws, spark, tmp_path):
    """The split of one micro-batch (no continuous run): over a catalog view and over a
    subquery chain (SELECT * of a subquery of a CTE), the stream rows whose control row the
    recording (0-2000 ms) covers, or that make no control row, go now; the others wait."""
    import datetime as dt
    import time

    from pyspark.sql import functions as F

    from wavesql import planner
    from wavesql.dialect import parse_statements
    from wavesql.streaming.planning import plan_continuous
    from wavesql.streaming.sync import sync_split

    _mic(tmp_path)
    shutil.copy(tmp_path / "all" / "mic_000.wav", tmp_path / "sig")
    _define_mic(ws, tmp_path)
    ws.sql("CREATE VIEW beats AS SELECT id AS n, t0 AS a, t0 + INTERVAL 500 MILLISECONDS AS b "
           "FROM marks WHERE kind = 'beat'")
    epoch = dt.datetime(1970, 1, 1)
    rows = spark.createDataFrame(
        [(i, k, epoch + dt.timedelta(milliseconds=ms)) for i, k, ms in
         [(1, "beat", 300), (2, "noise", 1900), (3, "beat", 1800), (4, "beat", 1400),
          (4, "beat", 1400)]],  # a duplicate row: both go together
        "id BIGINT, kind STRING, t0 TIMESTAMP")
    for query in [
            "SELECT v.n, s.ch1 FROM beats v SYNC JOIN mic s ON RANGE (v.a, v.b)",
            "WITH c AS (SELECT id, t0, kind FROM marks WHERE id > 0) "
            "SELECT v.id, s.ch1 FROM (SELECT * FROM (SELECT id, t0 AS a, t0 + INTERVAL 500 "
            "MILLISECONDS AS b FROM c WHERE kind = 'beat') x) v "
            "SYNC JOIN mic s ON RANGE (v.a, v.b)"]:
        stmt = parse_statements(query)[0]
        bound = planner.optimize(planner.bind(stmt, ws.catalog, ws.env.for_text(query)))
        plan = plan_continuous(bound.relation, stmt)
        now, waiting, _, _ = sync_split(plan, rows, {}, time.time())
        split = now.withColumn("waits", F.lit(False)).unionByName(
            waiting.withColumn("waits", F.lit(True))).collect()  # one Spark job
        assert sorted(r.id for r in split if not r.waits) == [1, 2, 4, 4], query
        assert [tuple(r)[:3] for r in split if r.waits] == [
            (3, "beat", epoch + dt.timedelta(milliseconds=1800))], query
