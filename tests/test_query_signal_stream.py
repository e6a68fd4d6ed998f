"""Continuous queries over a signal defined by a query (streaming/query_signals.py): the
signal's query filters a stream of files; the files arrive over several rounds, each round
one availableNow run of the continuous query on the same checkpoint. Checked against
numpy/scipy over the samples the test writes itself."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from scipy import signal as sps

from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

RATE = 64
WIDTH = 256
SIGNAL = ("CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT) RATE 64 HZ "
          "OPTIONS (sample_column = 'n') "
          "AS SELECT n, ax AS x, ay AS y, az AS z FROM readings WHERE device = 'a'")


def _samples(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((3, n)).astype(np.float32)


def _write(folder, name: str, xyz, numbers, *, fmt="parquet", null_x=(), extra=None):
    """Device 'a''s samples ``numbers`` (x NULL at ``null_x``) mixed with device 'b''s rows
    holding the same sample numbers (values 9: a query that let them through would show),
    shuffled, as one file."""
    numbers = np.asarray(numbers, np.int64)
    ax = pd.array(xyz[0][numbers], dtype="Float32")
    ax[np.isin(numbers, null_x)] = pd.NA
    a = pd.DataFrame({"device": "a", "n": numbers, "ax": ax, "ay": xyz[1][numbers],
                      "az": xyz[2][numbers]})
    b = pd.DataFrame({"device": "b", "n": numbers, "ax": np.float32(9), "ay": np.float32(9),
                      "az": np.float32(9)})
    rows = pd.concat([a, b] + ([extra] if extra is not None else []))
    rows = rows.sample(frac=1.0, random_state=len(numbers)).reset_index(drop=True)
    rows.insert(0, "ts", pd.to_datetime(rows.n.astype("float64") * (1_000_000 / RATE),
                                        unit="us").astype("datetime64[us]"))
    path = folder / name
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path)
    else:
        rows.to_csv(path, index=False)
        old = time.time() - 5  # a CSV file is read once left alone (streaming/files.py)
        os.utime(path, (old, old))


def _setup(ws, tmp_path, fmt="parquet"):
    folder = tmp_path / "readings"
    folder.mkdir()
    ws.sql(f"CREATE STREAM readings (ts TIMESTAMP, device STRING, n BIGINT, ax FLOAT, "
           f"ay FLOAT, az FLOAT) FROM '{folder}' FORMAT {fmt} EVENT TIME ts")
    return folder


def _run(ws, tmp_path, query):
    cq = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    return cq


def _out(spark, tmp_path) -> pd.DataFrame:
    return spark.read.parquet(str(tmp_path / "out")).toPandas().sort_values("s").reset_index(
        drop=True)


def _pieces(runs, below: int):
    """``(start, end)`` of the ``[SAMPLES WIDTH]`` window pieces over gap-free ``runs`` (a
    window across a gap is cut to each run), those starting below ``below``."""
    return [(max(k * WIDTH, a), min(k * WIDTH + WIDTH, b)) for a, b in runs
            for k in range(a // WIDTH, (b - 1) // WIDTH + 1) if max(k * WIDTH, a) < below]


def _rms(v) -> float:
    return float(np.sqrt(np.mean(np.asarray(v, np.float64) ** 2)))


LOWPASS = ("SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS rx, "
           "lowpass(y, 8.0) AS ly FROM acc [SAMPLES 256]")


def test_rounds_of_files_a_filter_gaps_a_late_sample_and_lowpass_equal_scipy(
        ws, spark, tmp_path):
    """Two rounds: each emits the windows its samples complete (the open last window
    waits); gaps are cut as in batch; a NULL x is NaN; a sample arriving in a window already
    emitted goes to the late sink with its reason; ``lowpass`` (finite look-back, warmed up
    on the kept samples) equals scipy's sosfilt over each gap-free run."""
    xyz = _samples(1, 2100)
    folder = _setup(ws, tmp_path)
    ws.sql(SIGNAL)
    _write(folder, "r1.parquet", xyz, list(range(0, 100)) + list(range(180, 700)))
    _run(ws, tmp_path, LOWPASS)
    got = _out(spark, tmp_path)
    assert got.s.tolist() == [0, 180, 256]  # [512, 768) waits for sample 767
    assert got._final.all() and max(got._progress) == pd.Timestamp(512 / RATE, unit="s")

    # the late sample 150 (its window [0, 256) was emitted, cut at the gap), the rest of
    # the recording with samples 1200..1329 missing, and a NULL x at 1900
    _write(folder, "r2a.parquet", xyz, list(range(700, 1200)) + [150])
    _write(folder, "r2b.parquet", xyz, range(1330, 2100), null_x=[1900])
    cq = _run(ws, tmp_path, LOWPASS)

    got = _out(spark, tmp_path)
    runs = [(0, 100), (180, 1200), (1330, 2100)]
    want = _pieces(runs, 2048)  # [2048, 2100) waits for the next sample
    assert list(zip(got.s, got.s + got.w)) == want
    assert (got._time == pd.to_datetime(got.s * (1_000_000 // RATE), unit="us")).all()
    x = xyz[0].astype(np.float64)
    x[1900] = np.nan
    np.testing.assert_allclose(got.rx, [_rms(x[a:b]) for a, b in want], rtol=1e-6)
    assert np.isnan(got.rx[got.s == 1792]).all() and not np.isnan(got.rx[got.s != 1792]).any()
    sos = sps.butter(4, 8.0, fs=RATE, output="sos")
    filtered = np.full(2100, np.nan)
    for a, b in runs:
        filtered[a:b] = sps.sosfilt(sos, xyz[1][a:b].astype(np.float64))
    for (a, b), seg in zip(want, got.ly):
        np.testing.assert_allclose(np.asarray(seg["samples"], np.float64), filtered[a:b],
                                   rtol=0, atol=1e-5)
    assert cq.progress_us == 2048 * 1_000_000 // RATE

    late = spark.read.parquet(str(tmp_path / "ckpt" / "late")).toPandas()
    assert len(late) == 1 and late._stream[0] == "acc"
    assert "sample 150 is in a window of signal `acc` already emitted" in late._reason[0]
    row = json.loads(late._row[0])
    assert row["n"] == 150 and row["x"] == pytest.approx(float(xyz[0][150]))
    assert sum(r.late for r in cq.reports) == 1


RUNNING_SUM = ("SELECT start_sample(z) AS s, width(z) AS w, "
               "seg_rms(iir(z, array(1.0), array(1.0, -1.0))) AS cz FROM acc [SAMPLES 256]")


def test_state_in_the_checkpoint_and_a_batch_redone_after_a_failure(ws, spark, tmp_path,
                                                                    monkeypatch):
    """A signal over a view of the stream; a running sum (a pole on the unit circle:
    unbounded look-back, its state carried in the checkpoint) over two rounds; the second round's batch fails after delivering its
    output, before committing its state, and is redone by the next run: each window once,
    equal to numpy's cumulative sum."""
    from wavesql.streaming.query_signals import QuerySignalQuery

    xyz = _samples(2, 1500)
    folder = _setup(ws, tmp_path)
    # here the signal's query reads a view of the stream (row by row over it too)
    ws.sql("CREATE VIEW only_a AS SELECT * FROM readings WHERE device = 'a'")
    ws.sql("CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT) RATE 64 HZ "
           "OPTIONS (sample_column = 'n') AS SELECT n, ax AS x, ay AS y, az AS z FROM only_a")
    _write(folder, "r1.parquet", xyz, range(0, 600))
    _run(ws, tmp_path, RUNNING_SUM)
    _write(folder, "r2.parquet", xyz, range(600, 1500))
    commit = QuerySignalQuery._commit_state
    failed = []

    def crash_once(self, batch_id, state):
        if batch_id == 1 and not failed:
            failed.append(batch_id)
            raise RuntimeError("injected: the process died before committing batch 1")
        commit(self, batch_id, state)

    monkeypatch.setattr(QuerySignalQuery, "_commit_state", crash_once)
    with pytest.raises(Exception, match="injected"):
        _run(ws, tmp_path, RUNNING_SUM)
    _run(ws, tmp_path, RUNNING_SUM)
    got = _out(spark, tmp_path)
    want = _pieces([(0, 1500)], 1280)
    assert list(zip(got.s, got.s + got.w)) == want
    summed = np.cumsum(xyz[2].astype(np.float64))
    np.testing.assert_allclose(got.cz, [_rms(summed[a:b]) for a, b in want], rtol=1e-4)


def test_a_signal_query_that_is_not_row_by_row_is_refused_where_it_is(ws, tmp_path):
    """An aggregate in the signal's query: NOT_IMPLEMENTED before anything runs, placed in
    the signal's query; a signal over a table (not a stream) likewise."""
    _setup(ws, tmp_path)
    ws.sql("CREATE SIGNAL avg_acc (x FLOAT) RATE 64 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, AVG(ax) AS x FROM readings GROUP BY n")
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT seg_rms(x) AS r FROM avg_acc [SAMPLES 256]", tmp_path / "out",
                  tmp_path / "ckpt")
    e = err.value
    assert e.code == "NOT_IMPLEMENTED" and "avg_acc" in e.message
    assert "not row by row" in e.message and e.line == 1
    at = e.query.upper().index("AVG(")
    assert at <= e.span.start < e.query.index(")", at), (e.query, e.span)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_csv_time_column_malformed_and_overlapping_rows(ws, spark, tmp_path):
    """``time_column`` over CSV files: rows placed by rounding their times as in batch; a
    NULL time is MALFORMED_ROW and a sample held twice (again in a later file, its window
    not yet emitted) OVERLAPPING_SAMPLES, each failing the batch, nothing committed; once
    the files are removed the query goes on."""
    xyz = _samples(3, 1100)
    folder = _setup(ws, tmp_path, fmt="csv")
    ws.sql("CREATE SIGNAL acc (x FLOAT) RATE 64 HZ OPTIONS (time_column = 't') "
           "AS SELECT ts AS t, ax AS x FROM readings WHERE device = 'a'")
    query = "SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS r FROM acc [SAMPLES 256]"
    _write(folder, "r1.csv", xyz, range(0, 600), fmt="csv")
    _run(ws, tmp_path, query)
    null_time = pd.DataFrame({"ts": [pd.NaT], "device": ["a"], "n": [700], "ax": [1.0],
                              "ay": [1.0], "az": [1.0]})
    _write(folder, "r2.csv", xyz, range(600, 700), fmt="csv")
    bad = folder / "r2.csv"
    frame = pd.read_csv(bad)
    pd.concat([frame, null_time]).to_csv(bad, index=False)
    os.utime(bad, (time.time() - 5, time.time() - 5))
    with pytest.raises(WaveSQLError) as err:
        _run(ws, tmp_path, query)
    assert err.value.code == "MALFORMED_ROW" and "NULL `t`" in err.value.message
    os.remove(bad)
    _write(folder, "r3.csv", xyz, range(590, 700), fmt="csv")  # 590..599 again
    with pytest.raises(WaveSQLError) as err:
        _run(ws, tmp_path, query)
    assert err.value.code == "OVERLAPPING_SAMPLES" and "sample 590" in err.value.message
    os.remove(folder / "r3.csv")
    _write(folder, "r4.csv", xyz, range(600, 1100), fmt="csv")
    _run(ws, tmp_path, query)
    got = _out(spark, tmp_path)
    want = _pieces([(0, 1100)], 1024)  # [1024, 1100) waits for the next sample
    assert list(zip(got.s, got.s + got.w)) == want
    np.testing.assert_allclose(got.r, [_rms(xyz[0][a:b]) for a, b in want], rtol=1e-6)
    # and each emitted row is the batch query's over the same files (which also has the
    # partial tail window: a batch read ends with its data)
    batch = ws.sql(query).toPandas().sort_values("s").reset_index(drop=True)
    assert list(zip(batch.s, batch.s + batch.w)) == want + [(1024, 1100)]
    np.testing.assert_array_equal(got.r, batch.r[:len(want)])
