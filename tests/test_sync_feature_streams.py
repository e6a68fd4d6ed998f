"""A continuous SYNC's ``_progress`` is honest (no row delivered later is below it), and a
SYNC CTE runs as a derived part with windows around it (streaming/derived.py): the rows
once the recording covers their ranges, the windows over them equal to pandas' over
numpy's RMS of each range."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

RATE = 1000  # 1 sample per millisecond: a time in ms is its sample number
SECOND = 1000


def _mic(tmp_path, files: int, seed: int = 21):
    """``files`` 2-second mono float32 WAV files (scipy's writer) under all/, and their
    samples."""
    from scipy.io import wavfile

    data = np.random.default_rng(seed).standard_normal(files * 2 * SECOND) \
        .astype(np.float32)
    for d in ("all", "sig", "ctl"):
        (tmp_path / d).mkdir()
    for i in range(files):
        wavfile.write(tmp_path / "all" / f"mic_{i:03d}.wav", RATE,
                      data[i * 2 * SECOND:(i + 1) * 2 * SECOND])
    return data


def _define(ws, tmp_path, watermark: str = "1 SECOND"):
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK {watermark}")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:{ms // 60_000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _control(tmp_path, name, rows):
    """rows: (id, start ms, end ms) -> a JSON-lines file of control rows."""
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "t0": _ts(a), "t1": _ts(b)}) + "\n" for i, a, b in rows))


def _arrive(tmp_path, *names):
    for name in names:
        shutil.copy(tmp_path / "all" / name, tmp_path / "sig" / name)


def _ms(value) -> int:
    """A timestamp Spark returned (naive, UTC session) in ms since 1970."""
    return int(round(pd.Timestamp(value).value / 1e6))


@pytest.mark.spark
def test_sync_progress_is_never_above_a_row_delivered_later(ws, spark, tmp_path):
    """A control row waiting for the recording holds ``_progress`` back to its time: the
    control's progress (max event time 3500 ms - 1 s = 2500 ms) would be above row 3's
    1800 ms, which is delivered in the next run. Oracle: the rows' own times against the
    progress each batch emitted (hand-computed: 1800 ms while row 3 waits)."""
    _mic(tmp_path, 2)
    query = ("SELECT c.id, c.t0, seg_rms(m.ch1) AS r FROM ctl c "
             "SYNC JOIN mic m ON RANGE (c.t0, c.t1)")

    def run():
        q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q.reports

    _arrive(tmp_path, "mic_000.wav")  # 0 .. 2000 ms
    _define(ws, tmp_path)
    _control(tmp_path, "c1", [(1, 300, 800), (3, 1800, 2300), (8, 3500, 3900)])
    first = run()
    assert _ms(pd.Timestamp(first[-1].progress_us, unit="us")) == 1800
    _arrive(tmp_path, "mic_001.wav")  # .. 4000 ms: rows 3 and 8 are synced now
    second = run()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.id for r in rows) == [1, 3, 8]
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r.batch, []).append(r)
    batches = sorted(by_batch)
    assert len(batches) == 2
    for i, b in enumerate(batches):
        promised = max(_ms(r._progress) for r in by_batch[b])
        for later in batches[i + 1:]:
            assert all(_ms(r.t0) >= promised for r in by_batch[later]), (b, later)
    emitted = [r.progress_us for r in first + second if r.progress_us is not None]
    assert emitted == sorted(emitted)  # never goes back


#: the brief's shape: a SYNC CTE, windows over its rows
WINDOWED = ("WITH s AS (SELECT c.id, c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c "
            "SYNC JOIN mic m ON RANGE (c.t0, c.t1)) "
            "SELECT count(*) AS n, avg(r) AS r FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]")

#: (id, start ms, end ms) per run; row 99's range is never recorded (6 s of audio)
FIRST = [(1, 300, 800), (2, 900, 1400), (3, 1500, 1700), (4, 2200, 2600), (5, 3100, 3500),
         (6, 3800, 4300), (7, 5200, 5500)]
SECOND_RUN = [(8, 5600, 5900), (99, 7500, 7900)]


def _want(data, rows, below_ms):
    """pandas' tumbling 2-second windows (instant i holds t in (i - 2 s, i]) over numpy's
    RMS of each row's range, the windows whose instant is below ``below_ms``."""
    frame = pd.DataFrame([{"t": a, "r": float(np.sqrt(np.mean(
        data[a:b].astype(np.float64) ** 2)))} for _, a, b in rows])
    frame["instant"] = np.ceil(frame["t"] / 2000.0).astype(int) * 2000
    want = frame.groupby("instant").agg(n=("r", "size"), r=("r", "mean")).reset_index()
    return want[want["instant"] < below_ms].reset_index(drop=True)


def _got(spark, tmp_path):
    got = spark.read.parquet(str(tmp_path / "out")).toPandas()
    got["instant"] = [_ms(v) for v in got["_time"]]
    return got.sort_values("instant").reset_index(drop=True)


def _first_files_and_rows(ws, tmp_path):
    """The recording's first two files (0 .. 4000 ms of three) and the FIRST control rows;
    the samples of all three."""
    data = _mic(tmp_path, 3)
    _arrive(tmp_path, "mic_000.wav", "mic_001.wav")
    _define(ws, tmp_path)
    _control(tmp_path, "c1", FIRST)
    return data


def _run_windowed(ws, tmp_path):
    q = ws.stream(WINDOWED, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return q


@pytest.mark.spark
def test_windows_over_a_sync_cte_across_runs(ws, spark, tmp_path):
    """The SYNC CTE runs as a derived part (its rows and punctuation under
    <checkpoint>/derived/s), the windows over them on the state store: each window once,
    final, equal to pandas over numpy's RMS per range -- across two runs (a restart), a
    window closing only once no waiting row can still fall in it (row 6, 3800 ms, waits
    for the third file: the first run's progress is 3800 ms, not the control's 4200 ms,
    which would close the 4 s window without it)."""
    data = _first_files_and_rows(ws, tmp_path)

    def run():
        return _run_windowed(ws, tmp_path)

    q = run()
    first = _got(spark, tmp_path)
    want = _want(data, FIRST, 3800)  # progress min(5200 - 1000, rows 6 and 7 waiting)
    assert first["instant"].tolist() == want["instant"].tolist() == [2000]
    assert first["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(first["r"], want["r"], rtol=1e-6)
    assert q.status()["derived"]["progress_us"] == 3800 * 1000
    assert (tmp_path / "ckpt" / "derived" / "s" / "rows").is_dir()

    _arrive(tmp_path, "mic_002.wav")  # .. 6000 ms; row 99 stays waiting: progress 6500 ms
    _control(tmp_path, "c2", SECOND_RUN)
    run()  # a restart on the same checkpoint
    got = _got(spark, tmp_path)
    want = _want(data, FIRST + SECOND_RUN[:1], 6500)
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000, 6000]
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    assert got["_final"].all()


@pytest.mark.spark
def test_explain_stream_shows_the_sync_part_and_the_rest(ws, tmp_path):
    """EXPLAIN STREAM of windows over a SYNC CTE: the SYNC part (its rows folder, event
    time t0) and the rest over its rows (progress from the punctuation); nothing runs.
    The event time under another name (``c.t0 AS t``: the whole statement does not bind,
    its parts do) too, by the API and by the statement; an unknown stream is still its
    binder's error."""
    from wavesql.errors import WaveSQLError

    _mic(tmp_path, 1)
    _arrive(tmp_path, "mic_000.wav")
    _define(ws, tmp_path)
    sql = WINDOWED.replace("c.t0 AS t,", "c.t0,")
    text = ws.explain(sql, "STREAM")
    assert "2 parts under one handle" in text, text
    assert "SYNC part `s`" in text and "derived/s/rows, event time t0" in text, text
    assert "rest: over `s`'s rows (columns id, t0, r)" in text, text
    assert "progress from the punctuation" in text and "watermark 0" not in text
    for renamed in (ws.explain(WINDOWED, "STREAM"),
                    ws.sql("EXPLAIN STREAM " + WINDOWED).collect()[0][0]):
        assert "SYNC part `s`" in renamed and "event time t" in renamed, renamed
        assert "rest: over `s`'s rows (columns id, t, r)" in renamed, renamed
    with pytest.raises(WaveSQLError) as err:
        ws.explain(WINDOWED.replace("FROM ctl c", "FROM ctlx c"), "STREAM")
    assert err.value.code == "UNKNOWN_STREAM"
    # a value that changes each evaluation: a re-run could not tell its rows from new ones
    with pytest.raises(WaveSQLError) as err:
        ws.explain(WINDOWED.replace("seg_rms(m.ch1) AS r", "seg_rms(m.ch1) * rand() AS r"),
                   "STREAM")
    assert err.value.code == "NOT_IMPLEMENTED" and "rand" in err.value.message.lower()
    assert not (tmp_path / "ckpt").exists()


class _Catalog(dict):
    def get(self, name):
        return super().get(name.lower())


@pytest.mark.parametrize("cte, rest, part", [
    ("SELECT c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c SYNC JOIN mic m ON RANGE "
     "(c.t0, c.t1)", "SELECT count(*) AS n FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]", "t"),
    ("SELECT id, t0, seg_rms(m.ch1) AS r FROM ctl SYNC JOIN mic m ON RANGE (t0, t1) "
     "WHERE id > 0", "SELECT count(*) AS n FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]", "t0"),
    # no column passing the control's event time: planned whole (the binder names it)
    ("SELECT c.id, c.t1, seg_rms(m.ch1) AS r FROM ctl c SYNC JOIN mic m ON RANGE "
     "(c.t0, c.t1)", "SELECT count(*) AS n FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]", None),
    # a computed column is not the event time passed through
    ("SELECT c.t0 + INTERVAL 1 SECOND AS t0, seg_rms(m.ch1) AS r FROM ctl c SYNC JOIN mic m "
     "ON RANGE (c.t0, c.t1)", "SELECT count(*) AS n FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]",
     None),
    # a SYNC of its rows with another signal in the rest: planned whole (test_sync_of_sync)
    ("SELECT c.id, c.t0, c.t1 FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)",
     "SELECT s.id, seg_rms(a.ch1) AS ra FROM s SYNC JOIN mic a ON RANGE (s.t0, s.t1)", None),
])
def test_which_sync_ctes_are_parts(cte, rest, part):
    """No Spark: a SYNC CTE is a part, its event time the column that is the control
    stream's EVENT TIME as it is (any name), only when it has one and the rest reads no
    signal; else find_split leaves it in the query."""
    from wavesql.catalog import SignalDef, StreamDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(
        mic=SignalDef("mic", [("ch1", "FLOAT")], 1000.0, "/nowhere"),
        ctl=StreamDef("ctl", [("id", "BIGINT"), ("t0", "TIMESTAMP"), ("t1", "TIMESTAMP")],
                      "/nowhere", "json", event_time="t0"))
    text = f"WITH s AS ({cte}) {rest}"
    (stmt,) = parse_statements(text)
    split = find_split(stmt, text, catalog)
    if part is None:
        assert split is None
        return
    assert [(p.name, p.time_column, p.sync) for p in split.parts] == [("s", part, True)]
    assert split.outer.index(rest) == text.index(rest) and "mic" not in split.outer


@pytest.mark.spark
@pytest.mark.slow
def test_a_sync_batch_rerun_adds_the_rows_a_file_completed_since_released(ws, spark, tmp_path):
    """A crash after the SYNC part committed its batch folder, before Spark committed the
    batch (simulated: the batch's entry in its commit log removed), and a recording file
    completed before the restart: the batch runs again and now releases row 6 (3800 ms),
    which the first attempt kept waiting. The folder keeps the first attempt's rows and
    gains row 6 -- not lost, not read twice: the 4 s window holds rows 4, 5 and 6, equal to
    pandas over numpy's RMS per range, and no row is late."""
    data = _first_files_and_rows(ws, tmp_path)

    def run():
        return _run_windowed(ws, tmp_path)

    run()
    assert _got(spark, tmp_path)["instant"].tolist() == [2000]
    commits = tmp_path / "ckpt" / "derived" / "s" / "offsets" / "commits"
    (last,) = [p for p in commits.iterdir() if p.name.isdigit()]
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    _arrive(tmp_path, "mic_002.wav")  # .. 6000 ms: rows 6 and 7 are covered now
    q = run()
    assert q.inners[0].reports[0].batch == int(last.name)  # the batch ran again
    got = _got(spark, tmp_path)
    want = _want(data, FIRST, 4200)  # the control's progress: 5200 ms - 1 s, none waiting
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000]
    assert got["n"].tolist() == want["n"].tolist() == [3, 3]
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    assert q.status()["late"] == 0
    assert not (tmp_path / "ckpt" / "late").exists() or \
        spark.read.parquet(str(tmp_path / "ckpt" / "late")).count() == 0


@pytest.mark.spark
def test_a_sync_cte_under_a_row_by_row_rest_runs_whole(ws, spark, tmp_path):
    """A SYNC CTE whose rest is row by row over its rows is not cut into parts: it runs as
    one continuous SYNC (no derived/ folder in its checkpoint; EXPLAIN STREAM names one
    query), its rows equal to numpy's RMS of each range the recording covers."""
    data = _mic(tmp_path, 2)
    _arrive(tmp_path, "mic_000.wav", "mic_001.wav")  # 0 .. 4000 ms
    _define(ws, tmp_path)
    _control(tmp_path, "c1", FIRST)
    sql = ("WITH s AS (SELECT c.id, c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c "
           "SYNC JOIN mic m ON RANGE (c.t0, c.t1)) SELECT id, r * 2 AS r2 FROM s WHERE id < 7")
    assert "parts under one handle" not in ws.explain(sql, "STREAM")
    q = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    assert not (tmp_path / "ckpt" / "derived").exists()
    got = spark.read.parquet(str(tmp_path / "out")).toPandas().sort_values("id")
    covered = [(i, a, b) for i, a, b in FIRST if b <= 4000 and i < 7]
    assert got["id"].tolist() == [i for i, _, _ in covered]
    want = [2 * np.sqrt(np.mean(data[a:b].astype(np.float64) ** 2)) for _, a, b in covered]
    np.testing.assert_allclose(got["r2"], want, rtol=1e-6)
