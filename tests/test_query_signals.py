"""Signals defined by a query (``CREATE SIGNAL ... AS SELECT``, sources/query_signal.py):
each result row one sample, placed by its sample number or timestamp; checked against
numpy/scipy over the samples the test builds itself."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.signal

from wavesql.errors import WaveSQLError
from wavesql.spark_errors import runtime_errors

pytestmark = pytest.mark.spark

RATE = 64
N = 3000
GAP = (1200, 1330)  # samples missing from the readings of device 'a'


def _signal(seed=3):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((3, N)).astype(np.float32)


def _present():
    index = np.arange(N)
    return (index < GAP[0]) | (index >= GAP[1])


RUNS = [(0, GAP[0]), (GAP[1], N)]


def _windows(width):
    """``(start, end)`` of each window piece over the runs (partial beside the gap)."""
    return [(max(k * width, a), min(k * width + width, b)) for a, b in RUNS
            for k in range(a // width, (b - 1) // width + 1)]


def _rms(v):
    return float(np.sqrt(np.mean(v.astype(np.float64) ** 2)))


def _readings(folder, xyz, fmt="parquet"):
    """Device 'a''s samples (with the gap) and device 'b''s noise, rows shuffled, in two
    files: the query must pick 'a' and put its rows in order."""
    folder.mkdir()
    keep = _present()
    a = pd.DataFrame({"device": "a", "n": np.arange(N)[keep], "ax": xyz[0][keep],
                      "ay": xyz[1][keep], "az": xyz[2][keep]})
    b = pd.DataFrame({"device": "b", "n": np.arange(N), "ax": np.float32(9.0),
                      "ay": np.float32(9.0), "az": np.float32(9.0)})
    rows = pd.concat([a, b]).sample(frac=1.0, random_state=1).reset_index(drop=True)
    half = len(rows) // 2
    for i, part in enumerate((rows.iloc[:half], rows.iloc[half:])):
        if fmt == "parquet":
            pq.write_table(pa.Table.from_pandas(part, preserve_index=False),
                           folder / f"part-{i}.parquet", row_group_size=700)
        else:
            part.to_csv(folder / f"part-{i}.csv", index=False)
    return folder


def _stream(ws, folder, fmt):
    ws.sql(f"CREATE STREAM readings (device STRING, n BIGINT, ax FLOAT, ay FLOAT, az FLOAT) "
           f"FROM '{folder}' FORMAT {fmt}")


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_signal_over_a_stream_with_a_where_a_gap_and_rows_out_of_order(ws, tmp_path, fmt):
    xyz = _signal()
    _stream(ws, _readings(tmp_path / "r", xyz, fmt), fmt)
    ws.sql("CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT) RATE 64 HZ "
           "OPTIONS (sample_column = 'n') SEGMENT 256 "
           "AS SELECT n, ax AS x, ay AS y, az AS z FROM readings WHERE device = 'a'")
    got = ws.sql("SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS rx, "
                 "seg_rms(z) AS rz FROM acc [SAMPLES 500]").toPandas().sort_values("s")
    want = _windows(500)
    assert list(zip(got.s, got.s + got.w)) == want
    np.testing.assert_allclose(got.rx, [_rms(xyz[0][a:b]) for a, b in want], rtol=1e-6)
    np.testing.assert_allclose(got.rz, [_rms(xyz[2][a:b]) for a, b in want], rtol=1e-6)
    if fmt == "csv":
        return
    # a stateful filter: scipy over each gap-free run (the filter starts again after it)
    got = ws.sql("SELECT start_sample(y) AS s, lowpass(y, 8.0) AS f FROM acc [SAMPLES 400]"
                 ).toPandas().sort_values("s")
    out = np.concatenate([np.asarray(f["samples"], np.float32) for f in got.f])
    sos = scipy.signal.butter(4, 8.0, fs=RATE, output="sos")
    want = np.concatenate([scipy.signal.sosfilt(sos, xyz[1][a:b].astype(np.float64))
                           for a, b in RUNS]).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-6)
    # SYNC: each control range is the numpy slice of the same samples
    ranges = pd.DataFrame({"k": [1, 2, 3], "a": [10, 1190, 2990], "b": [74, 1210, 3000]})
    ws.spark.createDataFrame(ranges).createOrReplaceTempView("marks")
    rows = ws.sql("SELECT m.k, s.x, s.z FROM marks m SYNC JOIN acc s ON RANGE (m.a, m.b) "
                  "MISSING TRUNCATE").toPandas().sort_values("k")
    for k, a, b in ranges.itertuples(index=False):
        row = rows[rows.k == k].iloc[0]
        present = [i for i in range(a, b) if _present()[i]]
        xs = np.concatenate([np.asarray(p["samples"], np.float32) for p in _pieces(row.x)])
        assert xs.tolist() == xyz[0][present].tolist(), k


def test_small_partitions_stateful_filters_and_overlapping_windows(ws, tmp_path,
                                                                     monkeypatch):
    """Partitions of 256 samples (the planner's are >= 1 M): rows reach every partition
    whose windows or warm-up read them; the filters equal scipy over each gap-free run,
    overlapping windows cross the partitions' edges."""
    import dataclasses

    from wavesql.sources import placed as placed_module

    plan, parts = placed_module.placed_plan, []

    def small(*args, **kwargs):
        got = plan(*args, **kwargs)
        parts.append(got.plan.partitions(partition_samples=256))
        return dataclasses.replace(got, parts=parts[-1])

    monkeypatch.setattr(placed_module, "placed_plan", small)
    xyz = _signal(5)
    _stream(ws, _readings(tmp_path / "r", xyz), "parquet")
    ws.sql("CREATE SIGNAL acc (x FLOAT, y FLOAT) RATE 64 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, ax AS x, ay AS y FROM readings WHERE device = 'a'")
    got = ws.sql("SELECT start_sample(x) AS s, lowpass(x, 4.0) AS f, "
                 "fir(y, array(0.25, 0.5, 0.25)) AS g FROM acc [SAMPLES 128]"
                 ).toPandas().sort_values("s")
    sos = scipy.signal.butter(4, 4.0, fs=RATE, output="sos")
    for column, run in (("f", lambda v: scipy.signal.sosfilt(sos, v)),
                        ("g", lambda v: scipy.signal.lfilter([0.25, 0.5, 0.25], [1.0], v))):
        out = np.concatenate([np.asarray(f["samples"], np.float32) for f in got[column]])
        want = np.concatenate([run(xyz[0 if column == "f" else 1][a:b].astype(np.float64))
                               for a, b in RUNS]).astype(np.float32)
        np.testing.assert_allclose(out, want, rtol=0, atol=2e-6)
    assert len(parts[-1]) > 8  # the filters were warmed up at every partition's start
    got = ws.sql("SELECT start_sample(x) AS s, width(x) AS w, seg_avg(x) AS m "
                 "FROM acc [SAMPLES 100 SLIDE 30]").toPandas().sort_values(["s", "w"])
    # as over WAV files with this gap: a run's windows are those starting in it, from
    # the one holding its first sample (README: Windows)
    want = [(max(k * 30, a), min(k * 30 + 100, b)) for a, b in RUNS
            for k in range(a // 30, (b - 1) // 30 + 1)]
    assert list(zip(got.s, got.s + got.w)) == want
    np.testing.assert_allclose(
        got.m, [np.mean(xyz[0][a:b].astype(np.float64)) for a, b in want], rtol=1e-9,
        atol=1e-12)


def _pieces(value):
    return value if isinstance(value, (list, np.ndarray)) else [value]


def test_time_column_a_null_channel_and_describe(ws, tmp_path):
    """Timestamps to the microsecond (15,625 us apart at 64 Hz) from EPOCH; a NULL channel
    value is a NaN sample; the query reads a Spark table; DESCRIBE shows the query."""
    epoch = pd.Timestamp("2024-03-01 12:00:00", tz="UTC")
    z = np.round(np.sin(np.arange(640) / 7.0), 6).astype(np.float32)
    index = np.r_[0:300, 320:640][::-1]
    values = z[index].astype(object)
    values[5] = None  # sample 634
    frame = pd.DataFrame({"ts": [epoch + pd.Timedelta(microseconds=int(i) * 15_625)
                                 for i in index], "v": values})
    ws.spark.createDataFrame(frame, "ts TIMESTAMP, v DOUBLE").createOrReplaceTempView("imu_t")
    ws.sql("CREATE SIGNAL imu (z FLOAT) RATE 64 HZ OPTIONS (time_column = 'ts') SEGMENT 64 "
           "EPOCH '2024-03-01 12:00:00' AS SELECT ts, v AS z FROM imu_t")
    got = ws.sql("SELECT start_sample(z) AS s, z FROM imu").toPandas().sort_values("s")
    assert got.s.tolist() == [0, 64, 128, 192, 256, 320, 384, 448, 512, 576]
    samples = np.concatenate([np.asarray(seg["samples"], np.float32) for seg in got.z])
    want = np.r_[z[0:300], z[320:640]]
    want[-6] = np.nan
    np.testing.assert_array_equal(samples, want)
    rows = {r.col_name: r.data_type for r in ws.sql("DESCRIBE imu").collect()}
    assert rows["query"] == "SELECT ts, v AS z FROM imu_t" and rows["source"] == "query"
    assert rows["z"] == "FLOAT"


def test_a_signal_over_a_view_and_another_query_signal(ws, tmp_path):
    """The query may read views and other query signals' results; a DROP of what it reads
    behaves as for a view: allowed, then the signal fails where it is read."""
    xyz = _signal(4)
    _stream(ws, _readings(tmp_path / "r", xyz), "parquet")
    ws.sql("CREATE VIEW only_a AS SELECT n, ax, ay FROM readings WHERE device = 'a'")
    ws.sql("CREATE SIGNAL s1 (x FLOAT) RATE 64 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, ax AS x FROM only_a")
    # s2: s1 decimated by 10 (each window's mean, numbered by window): a gap where s1's is
    ws.sql("CREATE SIGNAL s2 (x FLOAT) RATE 6.4 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT start_sample(x) DIV 10 AS n, seg_avg(x) AS x FROM s1 [SAMPLES 10]")
    got = ws.sql("SELECT start_sample(x) AS s, width(x) AS w, seg_max(x) AS m "
                 "FROM s2 [SAMPLES 50]").toPandas().sort_values("s")
    means = np.full(N // 10, np.nan)
    for a, b in RUNS:
        for k in range(a // 10, b // 10):
            means[k] = np.mean(xyz[0][k * 10:k * 10 + 10].astype(np.float64))
    runs = [(a // 10, b // 10) for a, b in RUNS]
    want = [(max(k * 50, a), min(k * 50 + 50, b)) for a, b in runs
            for k in range(a // 50, (b - 1) // 50 + 1)]
    assert list(zip(got.s, got.s + got.w)) == want
    np.testing.assert_allclose(got.m, [means[a:b].max() for a, b in want], rtol=1e-6)
    ws.sql("DROP VIEW only_a")
    with pytest.raises(WaveSQLError) as info:
        ws.sql("SELECT seg_rms(x) FROM s1").collect()
    assert info.value.code == "UNKNOWN_STREAM" and "only_a" in info.value.message
    assert "signal `s1`" in info.value.message


def _bad(ws, create, query="SELECT seg_rms(x) AS r FROM bad"):
    with pytest.raises(WaveSQLError) as info, runtime_errors():
        ws.sql(create)
        ws.sql(query).collect()
    return info.value


def test_errors(ws, tmp_path):
    frame = pd.DataFrame({"n": [0, 1, 2, 2, 3], "v": [1.0, 2.0, 3.0, 4.0, 5.0],
                          "t": ["a"] * 5})
    ws.spark.createDataFrame(frame).createOrReplaceTempView("dup")
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') AS SELECT n, v AS x FROM dup")
    assert err.code == "OVERLAPPING_SAMPLES" and "sample 2" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') "
               "AS SELECT IF(n = 3, NULL, n) AS n, v AS x FROM dup WHERE v <> 4")
    assert err.code == "MALFORMED_ROW" and "NULL `n`" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') AS SELECT n / 2 AS n, v AS x FROM dup "
               "WHERE v <> 4")
    assert err.code == "MALFORMED_ROW" and "0.5" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "AS SELECT n, v AS x FROM dup")
    assert err.code == "INVALID_OPTION"
    assert "sample_column" in err.hint and "time_column" in err.hint
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT, y FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') AS SELECT n, v AS x FROM dup")
    assert err.code == "UNKNOWN_COLUMN" and "`y`" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'k') AS SELECT n, v AS x FROM dup")
    assert err.code == "UNKNOWN_COLUMN" and "`k`" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') AS SELECT n, t AS x FROM dup")
    assert err.code == "TYPE_ERROR"
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (time_column = 'n') AS SELECT n, v AS x FROM dup")
    assert err.code == "TYPE_ERROR" and "timestamp" in err.message
    err = _bad(ws, "CREATE OR REPLACE SIGNAL bad (x FLOAT) RATE 10 HZ "
               "OPTIONS (sample_column = 'n') AS SELECT n, v AS x FROM nosuch")
    assert err.code == "UNKNOWN_STREAM"
    # two signals reading each other: refused when read, naming the cycle
    one = ("CREATE OR REPLACE SIGNAL {} (x FLOAT) RATE 10 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT start_sample(x) AS n, seg_avg(x) AS x FROM {} [SAMPLES 1]")
    ws.sql("CREATE SIGNAL c1 (x FLOAT) RATE 10 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, v AS x FROM dup WHERE v <> 4")
    ws.sql(one.format("c2", "c1"))
    err = _bad(ws, one.format("c1", "c2"), "SELECT seg_avg(x) FROM c1")
    assert err.code == "INVALID_OPTION" and "c1 -> c2 -> c1" in err.hint


def test_a_continuous_query_is_refused(ws, tmp_path):
    ws.spark.createDataFrame(pd.DataFrame({"n": [0, 1], "v": [1.0, 2.0]})
                             ).createOrReplaceTempView("two")
    ws.sql("CREATE SIGNAL q (x FLOAT) RATE 10 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, v AS x FROM two")
    with pytest.raises(WaveSQLError) as info:
        ws.stream("SELECT seg_rms(x) AS r FROM q [SAMPLES 5]", str(tmp_path / "out"),
                  checkpoint=str(tmp_path / "ck"))
    assert info.value.code == "NOT_IMPLEMENTED" and "query" in info.value.message
    assert "batch query" in info.value.hint



def test_the_query_is_evaluated_once(ws, tmp_path):
    """The runs and the samples come from one evaluation of the query (a local checkpoint
    filled when the query is planned): a file of its stream replaced between planning and
    reading -- half its rows gone -- leaves the read consistent with what was planned
    (numpy: the values written first), where a second evaluation would find other rows
    (QUERY_CHANGED)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal(4000).astype(np.float32)
    folder = tmp_path / "r"
    folder.mkdir()
    pd.DataFrame({"n": np.arange(4000), "v": x}).to_parquet(folder / "a.parquet")
    ws.sql(f"CREATE STREAM r (n BIGINT, v FLOAT) FROM '{folder}' FORMAT parquet")
    ws.sql("CREATE SIGNAL s (x FLOAT) RATE 100 HZ OPTIONS (sample_column = 'n') "
           "AS SELECT n, v AS x FROM r WHERE n % 1000 < 900")
    df = ws.sql("SELECT x FROM s [SAMPLES 64]")  # planned: the runs job has read the rows
    pd.DataFrame({"n": np.arange(0, 4000, 2), "v": -x[::2]}).to_parquet(folder / "a.parquet")
    with runtime_errors():
        rows = df.collect()
    pieces = sorted((r.x.start, np.asarray(r.x.samples, np.float32)) for r in rows)
    kept = np.flatnonzero(np.arange(4000) % 1000 < 900)
    np.testing.assert_array_equal(np.concatenate([np.arange(s, s + len(v)) for s, v in pieces]),
                                  kept)
    np.testing.assert_array_equal(np.concatenate([v for _, v in pieces]), x[kept])
