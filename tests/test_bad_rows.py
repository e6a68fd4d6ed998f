"""Malformed CSV/JSON rows in batch queries: a clear MALFORMED_ROW naming the file and
quoting the row, whatever columns the query reads -- never a silent row of NULLs."""

from __future__ import annotations

import json

import pytest
from pyspark.errors import PySparkException

from wavesql.spark_errors import translate_runtime_error

pytestmark = pytest.mark.spark

GOOD_CSV = "sym,px,ts\na,1.0,2024-01-01 00:00:00\nc,3.0,2024-01-01 00:00:02\n"
BAD_CSV = ("sym,px,ts\na,1.0,2024-01-01 00:00:00\nb,notanumber,2024-01-01 00:00:01\n"
           "c,3.0,2024-01-01 00:00:02\n")


def _stream(ws, folder, fmt, name="ticks", options=""):
    ws.sql(f"CREATE STREAM {name} (sym STRING, px DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           f"FORMAT {fmt} {options} EVENT TIME ts")


def _runtime_error(df):
    with pytest.raises(PySparkException) as caught:
        df.collect()
    return translate_runtime_error(caught.value)


@pytest.mark.parametrize("query", [
    "SELECT * FROM ticks",
    "SELECT sym FROM ticks",            # px is not read: Spark would prune it unparsed
    "SELECT count(*) AS n FROM ticks",  # no column at all
])
def test_a_malformed_csv_row_fails_the_query_naming_file_and_row(ws, tmp_path, query):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.csv").write_text(GOOD_CSV)
    (tmp_path / "in" / "part-1.csv").write_text(BAD_CSV)
    _stream(ws, tmp_path / "in", "csv")
    err = _runtime_error(ws.sql(query))
    assert err.code == "MALFORMED_ROW"
    assert "part-1.csv" in err.message and "b,notanumber,2024-01-01 00:00:01" in err.message
    assert err.hint and "quarantine" in err.hint


def test_a_malformed_json_row_fails_even_when_its_column_is_not_read(ws, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.json").write_text(
        '{"sym": "a", "px": 1.0, "ts": "2024-01-01 00:00:00"}\n'
        '{"sym": "b", "px": "high", "ts": "2024-01-01 00:00:01"}\n')
    _stream(ws, tmp_path / "in", "json")
    err = _runtime_error(ws.sql("SELECT sym FROM ticks"))
    assert err.code == "MALFORMED_ROW" and "a.json" in err.message and '"high"' in err.message


def test_clean_files_read_exactly_as_before(ws, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.csv").write_text(GOOD_CSV)
    _stream(ws, tmp_path / "in", "csv")
    rows = ws.sql("SELECT sym, px FROM ticks ORDER BY sym").collect()
    assert [(r.sym, r.px) for r in rows] == [("a", 1.0), ("c", 3.0)]
    assert ws.sql("SELECT * FROM ticks").columns == ["sym", "px", "ts"]


def test_an_explicit_spark_mode_is_honoured(ws, tmp_path):
    # OPTIONS ('mode' = 'DROPMALFORMED') is the user's explicit choice: Spark's behaviour
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.csv").write_text(BAD_CSV)
    _stream(ws, tmp_path / "in", "csv", options="OPTIONS ('mode' = 'DROPMALFORMED')")
    rows = ws.sql("SELECT sym, px FROM ticks ORDER BY sym").collect()
    assert [(r.sym, r.px) for r in rows] == [("a", 1.0), ("c", 3.0)]


# -- continuous queries: malformed rows are quarantined with the reason, and counted ------
def test_a_continuous_query_quarantines_malformed_rows_and_counts_reconcile(ws, spark,
                                                                            tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-0.csv").write_text(GOOD_CSV)
    (tmp_path / "in" / "part-1.csv").write_text(
        BAD_CSV + "d,4.0\n"                      # a missing field
        + "e,5.0,2024-01-01 00:00:04\n"          # fine
        + "f,6.0,not a time\n")                  # a bad timestamp
    ws.sql(f"CREATE STREAM ticks (sym STRING, px DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT csv EVENT TIME ts WATERMARK 1 HOUR")  # no row is late here
    cq = ws.stream("SELECT sym, px FROM ticks", tmp_path / "out", tmp_path / "ckpt",
                   max_files_per_trigger=1, clock=lambda: 0.0)
    cq.await_termination()
    totals = cq.status()
    # 2 + 6 data rows: 5 parse, 3 do not; nothing else happens to them
    assert totals["rows_in"] == 8 and totals["quarantined"] == 3
    assert totals["rows_in"] == (totals["on_time"] + totals["late"] + totals["no_time"]
                                 + totals["punctuation"] + totals["quarantined"])
    # ... and per micro-batch, in each batch's _progress/ record: one file each, 2 rows and
    # 6 (3 bad), in either order (both files were written in the same moment)
    records = [json.loads(f.read_text())
               for f in sorted((tmp_path / "out" / "_progress").glob("*.json"))]
    assert sorted((r["rows_in"], r["on_time"], r["quarantined"]) for r in records) == [
        (2, 2, 0), (6, 3, 3)]
    assert all(r["rows_in"] == r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
               + r["quarantined"] for r in records)
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted((r.sym, r.px) for r in out) == [
        ("a", 1.0), ("a", 1.0), ("c", 3.0), ("c", 3.0), ("e", 5.0)]
    bad = spark.read.parquet(str(tmp_path / "ckpt" / "quarantine")).collect()
    assert sorted(r._record for r in bad) == [
        "b,notanumber,2024-01-01 00:00:01", "d,4.0", "f,6.0,not a time"]
    assert all(r._file.endswith("part-1.csv") and r._stream == "ticks" for r in bad)
    assert all(r._reason.startswith("malformed: read as {") for r in bad)


@pytest.mark.parametrize("fmt, empty", [
    ("csv", ""), ("csv", "sym,px,ts\n"), ("json", ""), ("json", "\n\n")])
def test_empty_files_are_no_rows_batch_and_continuous(ws, spark, tmp_path, fmt, empty):
    """A zero-byte file, or one with only a header or blank lines, holds no rows: no error,
    nothing quarantined, the counts reconcile."""
    folder = tmp_path / "in"
    folder.mkdir()
    good = GOOD_CSV if fmt == "csv" else (
        '{"sym": "a", "px": 1.0, "ts": "2024-01-01 00:00:00"}\n'
        '{"sym": "c", "px": 3.0, "ts": "2024-01-01 00:00:02"}\n')
    (folder / f"part-0.{fmt}").write_text(good)
    (folder / f"part-1.{fmt}").write_text(empty)
    _stream(ws, folder, fmt, options="")
    assert sorted(r.sym for r in ws.sql("SELECT sym FROM ticks").collect()) == ["a", "c"]
    cq = ws.stream("SELECT sym, px FROM ticks", tmp_path / "out", tmp_path / "ckpt",
                   max_files_per_trigger=1, clock=lambda: 0.0)
    cq.await_termination()
    totals = cq.status()
    assert totals["rows_in"] == totals["on_time"] == 2 and totals["quarantined"] == 0
    assert sorted(r.sym for r in spark.read.parquet(str(tmp_path / "out")).collect()) == [
        "a", "c"]


def test_an_empty_wav_file_is_a_clear_error_naming_it(ws, tmp_path):
    from wavesql.errors import WaveSQLError

    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "a.wav").write_bytes(b"")
    with pytest.raises(WaveSQLError) as err:
        ws.sql(f"CREATE SIGNAL mic (x FLOAT) RATE 8000 HZ FROM '{tmp_path / 'rec'}' "
               "FORMAT wav SEGMENT 512")
        ws.sql("SELECT * FROM mic").collect()
    assert err.value.code == "CORRUPT_FILE" and "a.wav" in err.value.message


def test_a_malformed_row_under_a_chunkable_window_is_reported_as_without_it(ws, tmp_path):
    """The chunked OVER window (planner/physical/chunked_windows.py) counts a CSV stream's
    rows while planning; that job failing on the bad row must leave the query as written, so the row
    is reported where it always is, as MALFORMED_ROW -- not as a raw error from planning."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "part-1.csv").write_text(BAD_CSV)
    _stream(ws, tmp_path / "in", "csv")
    query = ("SELECT ts, avg(px) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 1 SECOND PRECEDING "
             "AND CURRENT ROW) AS a FROM ticks")
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    try:
        err = _runtime_error(ws.sql(query))
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
    assert err.code == "MALFORMED_ROW" and "part-1.csv" in err.message
