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


def test_continuous_sync_equals_the_batch_sync(ws, spark, tmp_path, recording):
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
    for event, (start, ch1, ch4) in _answer(rows).items():  # and numpy
        s = truth.event_starts[event]
        assert start == s
        np.testing.assert_array_equal(ch1, truth.samples[s:s + n, 0])
        np.testing.assert_array_equal(ch4, truth.samples[s:s + n, 3])


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
    ws.sql("CREATE VIEW some_events AS SELECT * FROM events WHERE event > 2")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT e.event, a.ch1 FROM some_events e SYNC JOIN array4 a "
                  "ON RANGE (e.t_from, e.t_to)", tmp_path / "o", tmp_path / "c")
    assert err.value.code == "NOT_IMPLEMENTED"
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT count(*) FROM events e SYNC JOIN array4 a "
                  "ON RANGE (e.t_from, e.t_to)", tmp_path / "o", tmp_path / "c")
    assert err.value.code == "STREAMING_RULE"


def test_wavesql_run_syncs_each_event_once_across_runs(ws, spark, tmp_path, recording):
    """A query file with INSERT INTO ... SYNC JOIN, run after each arrival (as `wavesql
    run` does): the sink ends with every event once, equal to the batch SYNC."""
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
