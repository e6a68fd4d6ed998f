"""Signals stored as tables (sources/table_signal.py): one row per sample in CSV, Parquet or
JSON files, checked against numpy/scipy over the same samples."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.signal

from wavesql.errors import WaveSQLError
from wavesql.spark_errors import runtime_errors

RATE = 100
N = 5000
GAP = (2000, 2100)  # samples missing from the tables: a gap in the signal


def _samples(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(N).astype(np.float32),
            rng.standard_normal(N).astype(np.float32))


def _present():
    index = np.arange(N)
    return (index < GAP[0]) | (index >= GAP[1])


def _runs():
    return [(0, GAP[0]), (GAP[1], N)]


def _windows(width):
    """``(start, end)`` of each window piece of width ``width`` over the runs, as a WAV
    signal with the same gap is cut (a window next to the gap is partial)."""
    out = []
    for a, b in _runs():
        for k in range(a // width, (b - 1) // width + 1):
            out.append((max(k * width, a), min(k * width + width, b)))
    return out


def _rms(v):
    return float(np.sqrt(np.mean(v.astype(np.float64) ** 2)))


def _write_csv_shuffled(folder, x, y):
    """Two CSV files, each holding half of the present rows in random order."""
    folder.mkdir()
    keep = _present()
    frame = pd.DataFrame({"n": np.arange(N)[keep], "x": x[keep], "y": y[keep]})
    frame = frame.sample(frac=1.0, random_state=0)
    half = len(frame) // 2
    frame.iloc[:half].to_csv(folder / "a.csv", index=False)
    frame.iloc[half:].to_csv(folder / "b.CSV", index=False)  # any case of the suffix


def test_csv_signal_with_sample_numbers_gaps_and_a_stateful_filter(ws, tmp_path):
    x, y = _samples()
    _write_csv_shuffled(tmp_path / "acc", x, y)
    ws.sql(f"CREATE SIGNAL acc (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT csv OPTIONS (sample_column = 'n') SEGMENT 250")
    got = ws.sql("SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS r, "
                 "seg_max(lowpass(y, 10.0)) AS m FROM acc [SAMPLES 500]").toPandas()
    got = got.sort_values("s").reset_index(drop=True)
    sos = scipy.signal.butter(4, 10.0, fs=RATE, output="sos")
    filtered = {a: scipy.signal.sosfilt(sos, y[a:b].astype(np.float64)).astype(np.float32)
                for a, b in _runs()}  # the filter starts again after the gap
    want = []
    for lo, hi in _windows(500):
        a = max(r[0] for r in _runs() if r[0] <= lo)
        want.append((lo, hi - lo, _rms(x[lo:hi]), float(filtered[a][lo - a:hi - a].max())))
    want = pd.DataFrame(want, columns=["s", "w", "r", "m"])
    assert got.s.tolist() == want.s.tolist()
    assert got.w.tolist() == want.w.tolist()
    np.testing.assert_allclose(got.r, want.r, rtol=1e-6)
    np.testing.assert_allclose(got.m, want.m, rtol=0, atol=1e-6)


def test_parquet_signal_in_file_order_across_files_and_row_groups(ws, tmp_path):
    """No position column: the rows in file order, the files in name order, from sample 0;
    several row groups per file (a task reads only the row groups its windows need)."""
    folder = tmp_path / "vib"
    folder.mkdir()
    x, _ = _samples(2)
    cuts = [0, 1700, 1701, 5000]  # one file of a single row
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        pq.write_table(pa.table({"X": x[a:b]}), folder / f"part-{i}.parquet",
                       row_group_size=300)
    ws.sql(f"CREATE SIGNAL vib (x FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT parquet "
           "SEGMENT 128")
    got = ws.sql("SELECT start_sample(x) AS s, seg_avg(x) AS a, seg_min(x) AS lo "
                 "FROM vib [SAMPLES 300 SLIDE 200]").toPandas().sort_values("s")
    starts = list(range(0, N, 200))
    assert got.s.tolist() == starts
    for (s, a, lo) in got.itertuples(index=False):
        window = x[s:s + 300]
        assert a == pytest.approx(float(np.mean(window.astype(np.float64))), rel=1e-9, abs=1e-12)
        assert lo == float(window.min())
    # the whole signal through one stateful filter equals scipy over all of it
    fir = [0.25, 0.5, 0.25]
    got = ws.sql("SELECT start_sample(x) AS s, fir(x, array(0.25, 0.5, 0.25)) AS f "
                 "FROM vib [SAMPLES 1000]").toPandas().sort_values("s")
    out = np.concatenate([np.asarray(f["samples"], dtype=np.float32) for f in got.f])
    want = scipy.signal.lfilter(fir, [1.0], x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-6)


def test_json_signal_with_a_time_column_and_an_epoch(ws, tmp_path):
    """64 Hz: a sample every 15,625 us; a row's sample is its time's offset from EPOCH."""
    folder = tmp_path / "imu"
    folder.mkdir()
    rate, epoch = 64, pd.Timestamp("2024-03-01 12:00:00")
    z = np.round(np.sin(np.arange(640) / 7.0), 6).astype(np.float32)
    with open(folder / "imu.jsonl", "w") as f:
        for i in np.r_[0:300, 320:640][::-1]:  # newest first, samples 300..319 missing
            ts = epoch + pd.Timedelta(microseconds=int(i) * 15_625)
            f.write(json.dumps({"ts": ts.isoformat(sep=" "), "z": float(z[i])}) + "\n")
    ws.sql(f"CREATE SIGNAL imu (z FLOAT) RATE {rate} HZ FROM '{folder}' FORMAT json "
           "OPTIONS (time_column = 'ts') SEGMENT 64 EPOCH '2024-03-01 12:00:00'")
    got = ws.sql("SELECT start_sample(z) AS s, start_time(z) AS t, z FROM imu").toPandas()
    got = got.sort_values("s")
    assert got.s.tolist() == [0, 64, 128, 192, 256, 320, 384, 448, 512, 576]
    assert got.t.tolist() == [epoch + pd.Timedelta(microseconds=int(s) * 15_625)
                              for s in got.s]
    samples = np.concatenate([np.asarray(seg["samples"], dtype=np.float32) for seg in got.z])
    np.testing.assert_array_equal(samples, np.r_[z[0:300], z[320:640]])


def test_sync_over_a_table_signal_is_sample_exact(ws, tmp_path):
    x, y = _samples(3)
    _write_csv_shuffled(tmp_path / "acc", x, y)
    ws.sql(f"CREATE SIGNAL acc (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT csv OPTIONS (sample_column = 'n') SEGMENT 256")
    ranges = [(0, 10), (10, 1999), (1234, 1900), (2100, 2101), (2500, 5000), (4000, 4999)]
    ctl = tmp_path / "ctl"
    ctl.mkdir()
    pd.DataFrame({"id": np.arange(len(ranges)), "a": [r[0] for r in ranges],
                  "b": [r[1] for r in ranges]}).to_parquet(ctl / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, a BIGINT, b BIGINT) FROM '{ctl}' FORMAT parquet")
    rows = ws.sql("SELECT c.id, s.x, s.y FROM ctl c SYNC JOIN acc s ON RANGE (c.a, c.b)"
                  ).collect()
    assert sorted(r.id for r in rows) == list(range(len(ranges)))
    for row in rows:
        lo, hi = ranges[row.id]
        assert row.x.start == lo
        np.testing.assert_array_equal(np.asarray(row.x.samples, dtype=np.float32), x[lo:hi])
        np.testing.assert_array_equal(np.asarray(row.y.samples, dtype=np.float32), y[lo:hi])


def _error(ws, sql) -> WaveSQLError:
    """The error of running ``sql`` to its rows, as the CLI and the REPL report it."""
    with pytest.raises(WaveSQLError) as info, runtime_errors():
        ws.sql(sql).collect() if sql.lstrip().upper().startswith("SELECT") else ws.sql(sql)
    return info.value


def test_bad_tables_are_refused_with_the_file_and_the_reason(ws, tmp_path):
    folder = tmp_path / "dup"
    folder.mkdir()
    pd.DataFrame({"n": [0, 1, 2, 3], "x": [1.0, 2, 3, 4]}).to_csv(folder / "a.csv", index=False)
    pd.DataFrame({"n": [3, 4], "x": [5.0, 6]}).to_csv(folder / "b.csv", index=False)
    ws.sql(f"CREATE SIGNAL dup (x FLOAT) RATE 10 HZ FROM '{folder}' FORMAT csv "
           "OPTIONS (sample_column = 'n')")
    err = _error(ws, "SELECT seg_max(x) FROM dup")
    assert err.code == "OVERLAPPING_SAMPLES"
    assert "b.csv" in err.message and "a.csv" in err.message

    # a missing channel column is a DDL error at the path, with the file's columns
    err = _error(ws, f"CREATE SIGNAL nope (x FLOAT, w FLOAT) RATE 10 HZ FROM '{folder}' "
                     "FORMAT csv OPTIONS (sample_column = 'n')")
    assert err.code == "UNKNOWN_COLUMN" and "`w`" in err.message
    err = _error(ws, f"CREATE SIGNAL nope (x FLOAT) RATE 10 HZ FROM '{folder}' FORMAT csv "
                     "OPTIONS (sample_col = 'n')")
    assert err.code == "INVALID_OPTION" and "sample_col" in err.message
    err = _error(ws, f"CREATE SIGNAL nope (x FLOAT) RATE 10 HZ FROM '{folder}' FORMAT csv "
                     "OPTIONS (sample_column = 'n', time_column = 'n')")
    assert err.code == "INVALID_OPTION"

    err = _error(ws, f"CREATE SIGNAL nope (x FLOAT, n FLOAT) RATE 10 HZ FROM '{folder}' "
                     "FORMAT csv OPTIONS (sample_column = 'n')")
    assert err.code == "INVALID_OPTION" and "`n` is a channel" in err.message

    holes = tmp_path / "holes"
    holes.mkdir()
    (holes / "a.csv").write_text("n,x\n0,1.0\n,2.0\n2,3.0\n")
    ws.sql(f"CREATE SIGNAL holes (x FLOAT) RATE 10 HZ FROM '{holes}' FORMAT csv "
           "OPTIONS (sample_column = 'n')")
    err = _error(ws, "SELECT seg_max(x) FROM holes")
    assert err.code == "MALFORMED_ROW" and "row 2" in err.message and "a.csv" in err.message


def test_a_null_channel_value_is_a_nan_sample(ws, tmp_path):
    folder = tmp_path / "n"
    folder.mkdir()
    (folder / "a.csv").write_text("x,y\n1.0,1\n,2\n3.0,3\n4.0,4\n")
    ws.sql(f"CREATE SIGNAL n (x FLOAT, y FLOAT) RATE 10 HZ FROM '{folder}' FORMAT csv")
    row = ws.sql("SELECT x, seg_max(y) AS m FROM n").collect()[0]
    samples = np.asarray(row.x.samples, dtype=np.float64)
    assert samples[0] == 1.0 and np.isnan(samples[1]) and samples[2:].tolist() == [3.0, 4.0]
    assert row.m == 4.0


def test_parquet_row_groups_placed_from_their_statistics_or_read(ws, tmp_path):
    """Row groups out of order in the file; one shuffled inside (its statistics place it,
    the task that reads it sorts it), one with a gap inside (read when planning)."""
    folder = tmp_path / "groups"
    folder.mkdir()
    x, _ = _samples(4)
    groups = [np.arange(3000, 4000), np.random.default_rng(5).permutation(np.arange(0, 1000)),
              np.r_[1000:1500, 1600:2000], np.arange(2000, 3000)]
    writer = pq.ParquetWriter(folder / "a.parquet", pa.schema([("n", pa.int64()),
                                                               ("x", pa.float32())]))
    for n in groups:
        writer.write_table(pa.table({"n": n, "x": x[n]}))
    writer.close()
    assert pq.ParquetFile(folder / "a.parquet").metadata.num_row_groups == 4
    ws.sql(f"CREATE SIGNAL g (x FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT parquet "
           "OPTIONS (sample_column = 'n') SEGMENT 250")
    got = ws.sql("SELECT start_sample(x) AS s, x FROM g [SAMPLES 700]").collect()
    present = np.sort(np.concatenate(groups))
    want = [(max(k * 700, a), min(k * 700 + 700, b)) for a, b in [(0, 1500), (1600, 4000)]
            for k in range(a // 700, (b - 1) // 700 + 1)]
    assert sorted(r.s for r in got) == [w[0] for w in want]
    for row in got:
        lo, hi = next(w for w in want if w[0] == row.s)
        np.testing.assert_array_equal(np.asarray(row.x.samples, dtype=np.float32), x[lo:hi])
    assert present.size == sum(len(np.asarray(r.x.samples)) for r in got)

    # a row group whose statistics look whole but that holds a sample twice: the task
    # reading it says so
    dup = tmp_path / "dup"
    dup.mkdir()
    pq.write_table(pa.table({"n": np.array([0, 1, 1, 3]), "x": np.zeros(4, np.float32)}),
                   dup / "a.parquet")
    ws.sql(f"CREATE SIGNAL d (x FLOAT) RATE 10 HZ FROM '{dup}' FORMAT parquet "
           "OPTIONS (sample_column = 'n')")
    err = _error(ws, "SELECT seg_max(x) FROM d")
    assert err.code == "OVERLAPPING_SAMPLES" and "sample 1" in err.message


def test_csv_without_a_header_and_another_delimiter(ws, tmp_path):
    """``header = 'false'``: the columns are the position column, then the channels."""
    folder = tmp_path / "raw"
    folder.mkdir()
    x = np.arange(20, dtype=np.float32) / 4
    lines = [f"{n};{x[n]!s};{-x[n]!s}" for n in np.r_[10:20, 0:8]]  # 8, 9 missing
    (folder / "log.csv").write_text("\n".join(lines) + "\n")
    ws.sql(f"CREATE SIGNAL raw (a FLOAT, b FLOAT) RATE 10 HZ FROM '{folder}' FORMAT csv "
           "OPTIONS (sample_column = 'n', header = 'false', delimiter = ';') SEGMENT 5")
    got = sorted(ws.sql("SELECT start_sample(a) AS s, a, b FROM raw").collect())
    assert [r.s for r in got] == [0, 5, 10, 15]
    assert [list(r.a.samples) for r in got] == [list(x[0:5]), list(x[5:8]), list(x[10:15]),
                                               list(x[15:20])]
    assert list(got[0].b.samples) == list(-x[0:5])
