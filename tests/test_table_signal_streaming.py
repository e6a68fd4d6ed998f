"""Continuous queries over signals stored as tables (sources/table_stream.py): CSV, Parquet or
JSON files arriving in a folder over several rounds (one availableNow run of the query on
the same checkpoint each), checked against numpy/scipy over the samples written."""

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

RATE = 100


def _settled(path):
    """Back-date a file past the settle time (a CSV/JSON file is read once left alone)."""
    old = time.time() - 5
    os.utime(path, (old, old))


def _stream(ws, tmp_path, sql):
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    return cq


def _out(spark, tmp_path):
    return spark.read.parquet(str(tmp_path / "out")).toPandas().sort_values("s").reset_index(
        drop=True)


def _rms(v) -> float:
    return float(np.sqrt(np.mean(np.asarray(v, np.float64) ** 2)))


def _pieces(runs, n):
    """``(start, end)`` of each window piece of ``[SAMPLES n]`` over gap-free ``runs``."""
    return [(max(k * n, a), min(k * n + n, b)) for a, b in runs
            for k in range(a // n, (b - 1) // n + 1)]


PARQUET = ("SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS r, "
           "seg_rms(lowpass(x, 10.0)) AS lp, seg_rms(iir(x, array(1.0), array(1.0, -1.0))) AS c "
           "FROM vib [SAMPLES 256]")


def test_parquet_in_file_order_over_rounds_equals_numpy_and_scipy(ws, spark, tmp_path):
    """Rows in file order, files in name order back to back (row counts from the footers):
    the tail window waits for the next file or the ``*.eof`` marker; a lowpass (finite
    look-back: warmed up on the files before) and a running sum (a pole on the unit circle:
    state kept in the checkpoint) equal scipy over the concatenated samples."""
    x = np.random.default_rng(1).standard_normal(3000).astype(np.float32)
    folder = tmp_path / "vib"
    folder.mkdir()

    def write(name, a, b):
        pq.write_table(pa.table({"x": x[a:b]}), folder / name, row_group_size=400)

    write("f000.parquet", 0, 700)
    write("f001.parquet", 700, 1300)
    ws.sql(f"CREATE SIGNAL vib (x FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT parquet")
    _stream(ws, tmp_path, PARQUET)
    first = _out(spark, tmp_path)
    # windows ending by sample 1300 only: [1280, 1536) waits for more samples
    assert first.s.tolist() == list(range(0, 1280, 256))
    assert first._final.all() and max(first._progress) == pd.Timestamp(1280 / RATE, unit="s")

    write("f002.parquet", 1300, 3000)
    (folder / "done.eof").write_text("")  # the recording ends: the partial tail is flushed
    cq = _stream(ws, tmp_path, PARQUET)  # a restart on the same checkpoint
    got = _out(spark, tmp_path)
    pieces = _pieces([(0, 3000)], 256)
    assert got.s.tolist() == [a for a, _ in pieces] and got.w.tolist()[-1] == 3000 - 2816
    assert (got._time == pd.to_datetime(got.s * (1_000_000 // RATE), unit="us")).all()
    xd = x.astype(np.float64)
    lowpassed = sps.sosfilt(sps.butter(4, 10.0, fs=RATE, output="sos"), xd)
    summed = np.cumsum(xd)
    np.testing.assert_allclose(got.r, [_rms(x[a:b]) for a, b in pieces], rtol=1e-6)
    np.testing.assert_allclose(got.lp, [_rms(lowpassed[a:b]) for a, b in pieces], rtol=1e-4)
    np.testing.assert_allclose(got.c, [_rms(summed[a:b]) for a, b in pieces], rtol=1e-4)
    assert cq.progress_us == 3072 * 1_000_000 // RATE  # the tail window's grid end


@pytest.mark.slow
def test_csv_by_sample_numbers_gaps_out_of_order_and_malformed_rows(ws, spark, tmp_path):
    """``sample_column``: rows shuffled inside files, a gap inside a file and one between
    files; a file whose samples lie before what was read is OUT_OF_ORDER_FILE, a NULL
    sample number MALFORMED_ROW, each naming the file, and nothing of it is emitted."""
    x = np.random.default_rng(2).standard_normal(2000).astype(np.float32)
    folder = tmp_path / "acc"
    folder.mkdir()

    def write(name, numbers):
        frame = pd.DataFrame({"n": numbers, "x": x[numbers]}).sample(frac=1.0, random_state=0)
        frame.to_csv(folder / name, index=False)
        _settled(folder / name)

    gap_in, gap_between = (300, 350), (1100, 1234)
    write("a.csv", np.r_[0:gap_in[0], gap_in[1]:700])
    write("b.csv", np.r_[700:gap_between[0]])
    ws.sql(f"CREATE SIGNAL acc (x FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT csv "
           "OPTIONS (sample_column = 'n')")
    query = "SELECT start_sample(x) AS s, width(x) AS w, seg_rms(x) AS r FROM acc [SAMPLES 128]"
    _stream(ws, tmp_path, query)
    write("c.csv", np.r_[gap_between[1]:2000])
    _stream(ws, tmp_path, query)
    # samples in the gap between b.csv and c.csv, already emitted as a gap
    write("d.csv", np.r_[1150:1200])
    with pytest.raises(WaveSQLError) as err:
        _stream(ws, tmp_path, query)
    assert err.value.code == "OUT_OF_ORDER_FILE" and "d.csv" in err.value.message
    os.remove(folder / "d.csv")
    bad = pd.DataFrame({"n": np.arange(2000, 2100, dtype=float), "x": 0.5})
    bad.loc[5, "n"] = np.nan  # the 6th row: no sample number
    bad.to_csv(folder / "e.csv", index=False)
    _settled(folder / "e.csv")
    with pytest.raises(WaveSQLError) as err:
        _stream(ws, tmp_path, query)
    assert err.value.code == "MALFORMED_ROW" and "e.csv: row 6" in err.value.message
    os.remove(folder / "e.csv")
    (folder / "end.eof").write_text("")
    _stream(ws, tmp_path, query)
    got = _out(spark, tmp_path)
    runs = [(0, gap_in[0]), (gap_in[1], gap_between[0]), (gap_between[1], 2000)]
    pieces = _pieces(runs, 128)
    assert list(zip(got.s, got.s + got.w)) == pieces
    np.testing.assert_allclose(got.r, [_rms(x[a:b]) for a, b in pieces], rtol=1e-6)


@pytest.mark.slow
def test_csv_in_file_order_refuses_an_earlier_name_and_reports_a_bad_value(ws, spark,
                                                                           tmp_path):
    x = np.random.default_rng(3).standard_normal(900).astype(np.float32)
    folder = tmp_path / "mic"
    folder.mkdir()

    def write(name, a, b, value=None):
        frame = pd.DataFrame({"v": x[a:b]})
        if value is not None:
            frame = frame.astype({"v": object})
            frame.iloc[3, 0] = value
        frame.to_csv(folder / name, index=False)
        _settled(folder / name)

    write("r_10.csv", 0, 300)
    ws.sql(f"CREATE SIGNAL mic (v FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT csv")
    query = "SELECT start_sample(v) AS s, seg_max(v) AS hi FROM mic [SAMPLES 100]"
    _stream(ws, tmp_path, query)
    write("r_05.csv", 300, 600)  # sorts before r_10.csv: it would go before its rows
    with pytest.raises(WaveSQLError) as err:
        _stream(ws, tmp_path, query)
    assert err.value.code == "OUT_OF_ORDER_FILE" and "r_05.csv" in err.value.message
    os.remove(folder / "r_05.csv")
    write("r_20.csv", 300, 600, value="oops")
    with pytest.raises(WaveSQLError) as err:
        _stream(ws, tmp_path, query)
    assert err.value.code == "MALFORMED_ROW" and "r_20.csv" in err.value.message
    write("r_20.csv", 300, 600)
    write("r_30.csv", 600, 900)
    (folder / "end.eof").write_text("")
    _stream(ws, tmp_path, query)
    got = _out(spark, tmp_path)
    assert got.s.tolist() == list(range(0, 900, 100))
    assert got.hi.tolist() == [float(x[s:s + 100].max()) for s in range(0, 900, 100)]


def _reader(folder, fmt, reader_options=(), **options):
    """The stream reader as Spark drives it (no Spark): offsets, partitions, rows."""
    from types import SimpleNamespace

    from pyspark.sql.pandas.types import from_arrow_schema

    from wavesql.sources.table_stream import TableStreamReader, layout_option
    from wavesql.udfs.program import Output, Program

    signal = SimpleNamespace(name="s", channels=[SimpleNamespace(name="x")], format=fmt,
                             options=tuple(options.items()), rate_hz=float(RATE), epoch_us=0)
    prog = Program(("x",), (
        Output("s", {"call": "start_sample", "args": [{"col": "x"}]}, "bigint"),
        Output("r", {"call": "seg_rms", "args": [{"col": "x"}]}, "double")))
    opts = {"path": str(folder), "window": "50", "rate": str(RATE), "channels": '["x"]',
            "program": prog.to_json(), "layout": layout_option(signal), **dict(reader_options)}
    return TableStreamReader(opts, from_arrow_schema(prog.arrow_schema()))


def _rows(reader, start, end):
    out = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return pa.Table.from_batches(out).to_pandas() if out else pd.DataFrame({"s": []})


def test_files_still_being_written_are_deferred(tmp_path):
    """A fresh CSV waits for the settle time; a Parquet file without its footer yet waits,
    and is read as soon as the footer is there; a time column places rows by timestamp."""
    x = np.random.default_rng(4).standard_normal(400).astype(np.float32)
    folder = tmp_path / "t"
    folder.mkdir()
    ts = pd.to_datetime(np.arange(400) / RATE, unit="s")
    pd.DataFrame({"ts": ts[:200], "x": x[:200]}).to_csv(folder / "a.csv", index=False)
    reader = _reader(folder, "csv", time_column="ts")
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["files"] == []  # written just now
    _settled(folder / "a.csv")
    end = reader.latestOffset(start, None)
    assert end["end"] == 200 and len(end["files"]) == 1
    got = _rows(reader, start, end)
    assert got.s.tolist() == [0, 50, 100, 150]
    np.testing.assert_allclose(got.r, [_rms(x[s:s + 50]) for s in range(0, 200, 50)], rtol=1e-6)

    # a last line without its end (a writer stalled mid-value, "7.2" of "7.25") waits ten
    # times the settle time, then is taken as it is (a file may end without a newline)
    folder = tmp_path / "u"
    folder.mkdir()
    text = pd.DataFrame({"x": x[:100]}).to_csv(index=False)
    (folder / "a.csv").write_text(text.rstrip("\n"))
    _settled(folder / "a.csv")  # 5 s quiet: past the settle time, within the grace
    reader = _reader(folder, "csv")
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["files"] == []
    old = time.time() - 60
    os.utime(folder / "a.csv", (old, old))
    end = reader.latestOffset(start, None)
    assert end["end"] == 100 and len(end["files"]) == 1

    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": x}), buffer)
    data = buffer.getvalue().to_pybytes()
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(data[:len(data) // 2])  # being copied in
    reader = _reader(folder, "parquet")
    start = reader.initialOffset()
    assert reader.latestOffset(start, None)["files"] == []
    (folder / "a.parquet").write_bytes(data)
    end = reader.latestOffset(start, None)
    assert end["end"] == 400 and len(end["files"]) == 1  # no settle time: the footer says
    assert _rows(reader, start, end).s.tolist() == list(range(0, 400, 50))


def test_a_file_sorting_before_only_empty_read_files_is_taken(tmp_path):
    """Rows in file order: a known file without rows (a CSV's header alone) holds no sample,
    so a new file sorting before it lands where the batch read puts it (after the last file
    with rows) and is read, not refused as OUT_OF_ORDER_FILE."""
    x = np.random.default_rng(6).standard_normal(200).astype(np.float32)
    folder = tmp_path / "e"
    folder.mkdir()
    pd.DataFrame({"x": x[:100]}).to_csv(folder / "a.csv", index=False)
    (folder / "c.csv").write_text("x\n")
    _settled(folder / "a.csv")
    _settled(folder / "c.csv")
    reader = _reader(folder, "csv")
    offsets = [reader.initialOffset()]
    offsets.append(reader.latestOffset(offsets[-1], None))
    pd.DataFrame({"x": x[100:]}).to_csv(folder / "b.csv", index=False)
    _settled(folder / "b.csv")
    offsets.append(reader.latestOffset(offsets[-1], None))
    assert offsets[-1]["end"] == 200
    got = pd.concat([_rows(reader, a, b) for a, b in zip(offsets, offsets[1:])])
    assert got.s.tolist() == [0, 50, 100, 150]
    np.testing.assert_allclose(got.r, [_rms(x[s:s + 50]) for s in range(0, 200, 50)],
                               rtol=1e-6)
    # a new file sorting before a read file with rows is still refused
    pd.DataFrame({"x": x[:10]}).to_csv(folder / "a0.csv", index=False)
    _settled(folder / "a0.csv")
    from wavesql.udfs.wav import WavError

    with pytest.raises(WavError, match="OUT_OF_ORDER_FILE"):
        reader.latestOffset(offsets[-1], None)


def test_files_by_sample_number_are_taken_in_sample_order(tmp_path):
    """JSON by ``sample_column``: files named against their samples are taken in sample
    order (one per micro-batch here); a file still being written holds back every new file
    (its place is only known once read), even one sorting before it by name."""
    x = np.random.default_rng(5).standard_normal(300).astype(np.float32)
    folder = tmp_path / "j"
    folder.mkdir()

    def write(name, a, b, settled=True):
        with open(folder / name, "w") as f:
            for i in reversed(range(a, b)):
                f.write(json.dumps({"n": i, "x": float(x[i])}) + "\n")
        if settled:
            _settled(folder / name)

    write("b.json", 0, 100)
    write("a.json", 100, 200)
    reader = _reader(folder, "json", {"max_files_per_trigger": "1"}, sample_column="n")
    offsets = [reader.initialOffset()]
    offsets.append(reader.latestOffset(offsets[-1], None))
    assert [os.path.basename(f) for f in offsets[-1]["files"]] == ["b.json"]
    offsets.append(reader.latestOffset(offsets[-1], None))
    assert [os.path.basename(f) for f in offsets[-1]["files"]] == ["b.json", "a.json"]
    write("x.json", 250, 300)
    write("y.json", 200, 250, settled=False)  # still being written: x.json waits too
    assert reader.latestOffset(offsets[-1], None)["files"] == offsets[-1]["files"]
    _settled(folder / "y.json")
    (folder / "end.eof").write_text("")
    for _ in range(2):
        offsets.append(reader.latestOffset(offsets[-1], None))
    assert [os.path.basename(f) for f in offsets[-1]["files"]] == ["b.json", "a.json", "y.json",
                                                                  "x.json"]
    assert offsets[-1]["final"] and offsets[-1]["end"] == 300
    got = pd.concat([_rows(reader, a, b) for a, b in zip(offsets, offsets[1:])])
    assert got.s.tolist() == list(range(0, 300, 50))
    np.testing.assert_allclose(got.r, [_rms(x[s:s + 50]) for s in range(0, 300, 50)],
                               rtol=1e-6)


@pytest.mark.slow
def test_json_by_time_column_with_an_epoch_and_a_gap_between_files(ws, spark, tmp_path):
    """``time_column``: each row at the nearest sample to ``(ts - EPOCH) * RATE``; a gap
    between two rounds' files stays a gap (the window before it partial, emitted once the
    later file shows the gap); ``_time`` is the window's start after the epoch."""
    epoch = pd.Timestamp("2024-03-01 12:00:00")
    z = np.random.default_rng(6).standard_normal(1000).astype(np.float32)
    folder = tmp_path / "imu"
    folder.mkdir()

    def write(name, samples):
        with open(folder / name, "w") as f:
            for i in samples:
                ts = epoch + pd.Timedelta(microseconds=int(i) * 10_000)
                f.write(json.dumps({"ts": ts.isoformat(sep=" "), "z": float(z[i])}) + "\n")
        _settled(folder / name)

    write("2024-03-01T12-00-00.jsonl", range(0, 430))
    ws.sql(f"CREATE SIGNAL imu (z FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT json "
           "OPTIONS (time_column = 'ts') EPOCH '2024-03-01 12:00:00'")
    query = "SELECT start_sample(z) AS s, width(z) AS w, seg_avg(z) AS a FROM imu [SAMPLES 100]"
    _stream(ws, tmp_path, query)
    assert _out(spark, tmp_path).s.tolist() == [0, 100, 200, 300]  # [400, 430) waits
    write("2024-03-01T12-00-05.jsonl", range(500, 1000))  # samples 430..499 never come
    (folder / "end.eof").write_text("")
    _stream(ws, tmp_path, query)
    got = _out(spark, tmp_path)
    pieces = _pieces([(0, 430), (500, 1000)], 100)
    assert list(zip(got.s, got.s + got.w)) == pieces
    np.testing.assert_allclose(got.a, [np.mean(z[a:b].astype(np.float64)) for a, b in pieces],
                               rtol=1e-9, atol=1e-12)
    assert got._time.tolist() == [epoch + pd.Timedelta(microseconds=int(s) * 10_000)
                                  for s in got.s]
