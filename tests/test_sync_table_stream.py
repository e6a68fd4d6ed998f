"""A continuous SYNC JOIN over signals stored as tables (issue 21): CSV, Parquet or JSON
files of an accelerometer arriving in a folder -- rows in file order, by ``sample_column`` or
by ``time_column`` --, alone or synced in one SELECT with a WAV signal, while a control
stream of ranges arrives over several micro-batches. A control row is emitted once, final,
when every signal's complete files cover its range, across restarts from the checkpoint;
each row's segments equal numpy's slices of the samples written (values, start, rate); a
file landing before samples already used fails the query, naming it."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_continuous_multi_sync import control_rows
from wavesql.errors import WaveSQLError

RATE = 100  # the accelerometer: 100 Hz, 1 s files (100 rows)
MIC_RATE = 1000  # the WAV signal: 1000 Hz, 1 s files
FILES = 4
EPOCH = dt.datetime(1970, 1, 1)
QUERY = ("SELECT c.id, a.x, a.y FROM marks c SYNC JOIN acc a ON RANGE (c.t0, c.t1)")
BOTH = ("SELECT c.id, a.x, a.y, m.ch1 FROM marks c SYNC JOIN acc a ON RANGE (c.t0, c.t1) "
        "SYNC JOIN mic m ON RANGE (c.t0 - INTERVAL 50 MILLISECONDS, c.t1)")


@pytest.fixture
def samples():
    rng = np.random.default_rng(7)
    return (rng.standard_normal((FILES * RATE, 2)).astype(np.float32),
            rng.standard_normal(FILES * MIC_RATE).astype(np.float32))


def first_sample(ms: int, rate: int) -> int:
    """The oracle's time-to-sample rule (README: the first sample at or after the time)."""
    return -((-ms * rate) // 1000)


def _settled(path):
    """Back-date a file past the settle time (a CSV/JSON file is read once left alone)."""
    old = time.time() - 5
    os.utime(path, (old, old))


def _write(folder, fmt: str, placement: str, name: str, acc, a: int, b: int):
    """Samples ``a .. b - 1`` of ``acc`` as one file ``name`` + the format's suffix: rows in
    sample order (file order), or shuffled with their sample number / timestamp."""
    n = np.arange(a, b)
    if placement != "file":
        n = np.random.default_rng(a).permutation(n)  # any order inside a file
    cols = {"x": acc[n, 0], "y": acc[n, 1]}
    if placement == "sample":
        cols = {"n": n, **cols}
    elif placement == "time":
        stamps = [EPOCH + dt.timedelta(milliseconds=int(i) * 1000 // RATE) for i in n]
        cols = {"ts": stamps if fmt == "parquet" else [s.isoformat(sep=" ") for s in stamps],
                **cols}
    path = folder / f"{name}.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.table(cols), path, row_group_size=64)
    elif fmt == "csv":
        pd.DataFrame(cols).to_csv(path, index=False)
    else:
        with open(path, "w") as f:
            for row in pd.DataFrame(cols).to_dict("records"):
                f.write(json.dumps({k: (float(v) if k in "xy" else v if isinstance(v, str)
                                        else int(v)) for k, v in row.items()}) + "\n")
    _settled(path)
    return path


def _define_acc(ws, tmp_path, fmt: str, placement: str):
    options = {"file": "", "sample": " OPTIONS (sample_column = 'n')",
               "time": " OPTIONS (time_column = 'ts')"}[placement]
    ws.sql(f"CREATE SIGNAL acc (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'acc'}' "
           f"FORMAT {fmt}{options}")


def _folders(tmp_path):
    for d in ("acc", "mic", "ctl"):
        (tmp_path / d).mkdir()


def _define(ws, tmp_path, fmt="csv", placement="file", mic=False):
    """The signals (over the files written so far: CREATE SIGNAL checks them) and the
    control stream."""
    _define_acc(ws, tmp_path, fmt, placement)
    if mic:
        ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {MIC_RATE} HZ FROM '{tmp_path / 'mic'}' "
               "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")


def _mic(tmp_path, mic, i: int):
    from scipy.io import wavfile

    wavfile.write(tmp_path / "mic" / f"mic_{i:03d}.wav", MIC_RATE,
                  mic[i * MIC_RATE:(i + 1) * MIC_RATE])


def _stamp(ms: int) -> str:
    return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def _marks(tmp_path, name, ranges, ids):
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "t0": _stamp(ranges[i][0]), "t1": _stamp(ranges[i][1])}) + "\n"
        for i in ids))


def _run(ws, tmp_path, query):
    q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return q.reports[-1]


def _rows(spark, tmp_path):
    return spark.read.parquet(str(tmp_path / "out")).collect()


def _check(rows, ranges, acc, mic=None):
    """Each row's segments against numpy's slices of the samples written: the
    accelerometer's over [t0, t1), the mic's over [t0 - 50 ms, t1) at its own rate; a
    reversed range: NULL segments. Every row with the progress it was final at."""
    for r in rows:
        assert r._progress is not None
        t0, t1 = ranges[r.id]
        if t1 < t0:
            assert r.x is None and r.y is None
            continue
        lo, hi = first_sample(t0, RATE), first_sample(t1, RATE)
        for c, seg in enumerate((r.x, r.y)):
            assert (seg.start, seg.rate) == (lo, RATE)
            np.testing.assert_array_equal(np.asarray(seg.samples, np.float32), acc[lo:hi, c])
        if mic is not None:
            lo, hi = first_sample(t0 - 50, MIC_RATE), first_sample(t1, MIC_RATE)
            assert (r.ch1.start, r.ch1.rate) == (lo, MIC_RATE)
            np.testing.assert_array_equal(np.asarray(r.ch1.samples, np.float32), mic[lo:hi])


def _synced_across_a_restart(ws, spark, tmp_path, samples):
    """A CSV accelerometer (rows in file order) and a WAV mic in one SELECT, two runs on
    one checkpoint. Run 1: the accelerometer's first second, the mic's first two -- the
    rows both cover go, the others wait. Run 2: both signals to 3 s and more control rows
    -- the waiting rows go, with new ones, each once, equal to numpy's slices. (A file still
    being written is the split test's case: a run takes longer than the settle time.)"""
    acc, mic = samples
    ranges = {1: (100, 600), 2: (800, 1500), 3: (1200, 2900), 4: (300, 900),
              5: (2500, 3600), 7: (700, 500)}
    _folders(tmp_path)
    _write(tmp_path / "acc", "csv", "file", "acc_000", acc, 0, 100)
    for i in range(2):
        _mic(tmp_path, mic, i)
    _define(ws, tmp_path, mic=True)
    _marks(tmp_path, "c1", ranges, (1, 2, 3, 7))
    assert _run(ws, tmp_path, BOTH).buffered == 2  # rows 2 and 3 wait for the accelerometer
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 7]

    _write(tmp_path / "acc", "csv", "file", "acc_001", acc, 100, 200)
    _write(tmp_path / "acc", "csv", "file", "acc_002", acc, 200, 300)
    _mic(tmp_path, mic, 2)
    _marks(tmp_path, "c2", ranges, (4, 5))
    assert _run(ws, tmp_path, BOTH).buffered == 1  # row 5 waits for both
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 7]  # once each
    _check(rows, ranges, acc, mic)


def test_a_table_signal_and_a_wav_signal_synced_across_a_restart(ws, spark, tmp_path,
                                                                samples):
    """CI's end-to-end case (:func:`_synced_across_a_restart`)."""
    _synced_across_a_restart(ws, spark, tmp_path, samples)


@pytest.mark.slow  # three continuous runs: 90 s at load ~9
def test_a_file_out_of_order_fails_the_continuous_query(ws, spark, tmp_path, samples):
    """After the two runs, a CSV file sorting before one already read fails the query
    naming the signal; nothing more is emitted."""
    _synced_across_a_restart(ws, spark, tmp_path, samples)
    shutil.copy(tmp_path / "acc" / "acc_000.csv", tmp_path / "acc" / "acc_000a.csv")
    q = ws.stream(BOTH, tmp_path / "out", tmp_path / "ckpt")
    with pytest.raises(WaveSQLError) as err:
        q.await_termination()
    assert err.value.code == "OUT_OF_ORDER_FILE" and "`acc`" in err.value.message
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 2, 3, 4, 7]


PLACEMENTS = [(fmt, placement) for fmt in ("csv", "parquet", "json")
              for placement in ("file", "sample", "time")]
#: CI's cases: every format and every placement once
QUICK = {("csv", "file"), ("parquet", "sample"), ("json", "time")}


@pytest.mark.parametrize("fmt,placement", [
    p if p in QUICK else pytest.param(*p, marks=pytest.mark.slow) for p in PLACEMENTS])
def test_the_split_over_a_table_signal(ws, spark, tmp_path, samples, fmt, placement):
    """The split each micro-batch makes (no continuous run, so every format and placement
    stays cheap), its state carried from one call to the next as the runner carries it:
    a control row goes once the complete files cover it; a file still being written is
    not read (where its place is only known once read, no row past the samples already
    used goes while it is pending); a file landing before the samples already used is
    refused, naming the signal."""
    from wavesql import planner
    from wavesql.dialect import parse_statements
    from wavesql.streaming.planning import plan_continuous
    from wavesql.streaming.sync import sync_split

    acc, _ = samples
    ranges = {1: (100, 600), 2: (800, 1500), 3: (1200, 2900), 4: (3100, 3500)}
    _folders(tmp_path)
    folder = tmp_path / "acc"
    _write(folder, fmt, placement, "acc_000", acc, 0, 100)
    _define(ws, tmp_path, fmt, placement)
    stmt = parse_statements(QUERY)[0]
    plan = plan_continuous(planner.optimize(planner.bind(stmt, ws.catalog,
                                                         ws.env.for_text(QUERY))).relation,
                           stmt)

    def control(*ids):
        return control_rows(spark, ranges, ids)

    def split(rows, state):
        now, waiting, after, placements = sync_split(plan, rows, state, time.time())
        return (sorted(r.id for r in now.collect()), waiting.cache(), {"signal": after},
                after["signals"]["acc"]["end"])

    now, waiting, state, end = split(control(1, 2, 3), {})
    assert now == [1] and end == RATE
    # the next second, still being written (a Parquet file without its footer yet, a
    # text file modified just now); the one after it complete
    pending = _write(folder, fmt, placement, "acc_001", acc, 100, 200)
    if fmt == "parquet":
        pending.write_bytes(pending.read_bytes()[:-20])
    os.utime(pending)
    _write(folder, fmt, placement, "acc_002", acc, 200, 300)
    now, waiting, state, end = split(waiting, state)
    assert now == [] and end == RATE  # acc_001 holds back acc_002 (or the end)
    _write(folder, fmt, placement, "acc_001", acc, 100, 200)
    now, waiting, state, end = split(waiting.unionByName(control(4)), state)
    assert now == [2, 3] and end == 3 * RATE
    # a file landing before samples already used: in file order, one sorting before a
    # read file; by sample numbers or times, one filling a gap the end has passed
    if placement == "file":
        _write(folder, fmt, placement, "acc_000a", acc, 0, 10)
    else:
        _write(folder, fmt, placement, "acc_004", acc, 350, 400)  # 300-350 missing
        now, waiting, state, end = split(waiting, state)
        assert now == [4] and end == 4 * RATE
        _write(folder, fmt, placement, "acc_005", acc, 300, 350)
    with pytest.raises(WaveSQLError) as err:
        split(waiting, state)
    assert err.value.code == "OUT_OF_ORDER_FILE" and "`acc`" in err.value.message


@pytest.mark.parametrize("placement", ["file", "sample"])
def test_a_malformed_row_fails_as_in_the_continuous_reader(ws, spark, tmp_path, samples,
                                                           placement):
    """A new CSV file with a row whose channel is not a number (rows in file order) or
    without its sample number fails the split with the continuous table reader's error
    (``MALFORMED_ROW`` naming the file), before anything is synced."""
    from wavesql import planner
    from wavesql.dialect import parse_statements
    from wavesql.streaming.planning import plan_continuous
    from wavesql.streaming.sync import sync_split

    acc, _ = samples
    _folders(tmp_path)
    _write(tmp_path / "acc", "csv", placement, "acc_000", acc, 0, 100)
    _define(ws, tmp_path, "csv", placement)
    path = _write(tmp_path / "acc", "csv", placement, "acc_001", acc, 100, 200)
    lines = path.read_text().splitlines()
    lines[5] = ("abc," if placement == "file" else ",") + lines[5].split(",", 1)[1]
    path.write_text("\n".join(lines) + "\n")
    _settled(path)
    stmt = parse_statements(QUERY)[0]
    plan = plan_continuous(planner.optimize(planner.bind(stmt, ws.catalog,
                                                         ws.env.for_text(QUERY))).relation,
                           stmt)
    rows = spark.createDataFrame([(1, EPOCH, EPOCH + dt.timedelta(milliseconds=300))],
                                 "id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP")
    with pytest.raises(WaveSQLError) as err:
        sync_split(plan, rows, {}, time.time())
    assert err.value.code == "MALFORMED_ROW" and "acc_001.csv" in err.value.message


def test_a_signal_defined_by_a_query_is_refused(ws, spark, tmp_path):
    """A continuous SYNC over a signal a continuous SYNC cannot watch (one defined by a
    query over a Spark table, not row by row over a catalog stream of files:
    tests/test_sync_query_signal_stream.py has the signals it watches) is refused before
    anything runs, saying why, in the signal's query, and what to do."""
    spark.createDataFrame(pd.DataFrame({"n": [0, 1], "v": [1.0, 2.0]})
                          ).createOrReplaceTempView("two")
    ws.sql("CREATE SIGNAL q (x FLOAT) RATE 10 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, v AS x FROM two")
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT c.id, s.x FROM marks c SYNC JOIN q s ON RANGE (c.t0, c.t1)",
                  tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "NOT_IMPLEMENTED"
    assert "in the query of signal `q`" in err.value.message
    assert "one catalog stream" in err.value.message and err.value.source == "signal q"
    assert "batch query" in err.value.hint


@pytest.mark.slow  # two continuous runs per format and placement: ~20 s each at load ~2
@pytest.mark.parametrize("fmt,placement", PLACEMENTS)
def test_a_continuous_sync_over_a_table_signal(ws, spark, tmp_path, samples, fmt,
                                               placement):
    """Each format and placement, alone: control rows arriving in two runs (a restart)
    while the signal's files arrive; each row emitted once, final, when covered, equal to
    numpy's slices."""
    acc, _ = samples
    ranges = {1: (100, 600), 2: (800, 1500), 3: (1200, 2900), 4: (2500, 3600), 7: (700, 500)}
    _folders(tmp_path)
    _write(tmp_path / "acc", fmt, placement, "acc_000", acc, 0, 100)
    _define(ws, tmp_path, fmt, placement)
    _marks(tmp_path, "c1", ranges, (1, 2, 3, 7))
    assert _run(ws, tmp_path, QUERY).buffered == 2
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1, 7]
    for i in (1, 2):
        _write(tmp_path / "acc", fmt, placement, f"acc_{i:03d}", acc, i * RATE,
               (i + 1) * RATE)
    _marks(tmp_path, "c2", ranges, (4,))
    assert _run(ws, tmp_path, QUERY).buffered == 1
    rows = _rows(spark, tmp_path)
    assert sorted(r.id for r in rows) == [1, 2, 3, 7]
    _check(rows, ranges, acc)


@pytest.mark.slow  # two continuous runs, the second failing
def test_a_sample_held_twice_that_only_a_read_sees_fails_the_query(ws, spark, tmp_path,
                                                                   samples):
    """A Parquet row group whose statistics place it (sample numbers 100 .. 199 in 100
    rows) but that holds one sample twice (and so misses one): the SYNC reading it fails
    the query with ``OVERLAPPING_SAMPLES`` naming the file, as the continuous table reader
    does when its task reads the group; the row over the first file alone was delivered
    before."""
    acc, _ = samples
    ranges = {1: (100, 600), 2: (1200, 1800)}
    _folders(tmp_path)
    _write(tmp_path / "acc", "parquet", "sample", "acc_000", acc, 0, 100)
    _define(ws, tmp_path, "parquet", "sample")
    _marks(tmp_path, "c1", ranges, (1,))
    _run(ws, tmp_path, QUERY)
    n = np.arange(100, 200)
    n[7] = n[6]  # 106 twice, 107 missing: min, max and count still say 100 .. 199
    pq.write_table(pa.table({"n": n, "x": acc[100:200, 0], "y": acc[100:200, 1]}),
                   tmp_path / "acc" / "acc_001.parquet")
    _marks(tmp_path, "c2", ranges, (2,))
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt")
    with pytest.raises(WaveSQLError) as err:
        q.await_termination()
    assert err.value.code == "OVERLAPPING_SAMPLES" and "acc_001.parquet" in err.value.message
    assert sorted(r.id for r in _rows(spark, tmp_path)) == [1]
