"""Chunked OVER windows reading a stream's Parquet files themselves (sources/parquet_chunks.py,
planner/physical/chunked_windows.py: the direct pass).

The range planning is checked on its own (every row is own in exactly one range, every
frame's reach is read); the Spark path against Spark's own windows over the same files
(``SET wavesql.windows.chunked = false``), on streams in time order across several files
and row groups, with punctuation rows, NULL values, equal times and gaps; and the inputs it
must leave to Spark's shuffled pass (NULL times, files out of order, another stored type, a
WHERE, partition folders) against the same oracle.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wavesql.sources import parquet_chunks as pc_
from tests.test_time_windows import assert_same_frames

T0_US = 1_700_000_000_000_000


# ---------------------------------------------------------------------------- ranges
@pytest.mark.parametrize("seed", range(8))
def test_ranges_own_every_row_once_and_read_every_reach(seed):
    rng = np.random.default_rng(seed)
    times = np.sort(rng.integers(0, 10_000_000, rng.integers(50, 3000)))
    if seed % 2:  # bursts of equal times and a long gap
        times[len(times) // 3:len(times) // 2] = times[len(times) // 3]
        times[len(times) // 2:] += 50_000_000
    size = int(rng.integers(7, 400))
    groups = [pc_.RowGroup("f", i, len(chunk), int(chunk.min()), int(chunk.max()))
              for i, chunk in enumerate(np.split(times, range(size, len(times), size)))]
    before, after = int(rng.integers(0, 200_000)), int(rng.integers(0, 50_000))
    ranges = pc_.ranges(groups, int(rng.integers(1, 9)), before, after,
                        16 * (before + after) or 1)
    owners = np.zeros(len(times), int)
    for r in ranges:
        owners += (times >= r.start) & (times < r.end)
        # every row a frame of an own row can reach lies in a row group the range reads
        own = times[(times >= r.start) & (times < r.end)]
        if len(own):
            reach = (times >= own.min() - before) & (times <= own.max() + after)
            held = np.zeros(len(times), bool)
            starts = np.cumsum([0] + [g.rows for g in groups])
            for g in r.groups:
                held[starts[g.index]:starts[g.index + 1]] = True
            assert held[reach].all()
            assert r.need_lo <= own.min() - before and r.need_hi >= own.max() + after
    assert (owners == 1).all()
    assert all(r.end - r.start >= 1 for r in ranges)


def test_index_refuses_what_pyarrow_would_read_differently(tmp_path):
    ts = pa.array(np.arange(10) * 1000, pa.timestamp("us", tz="UTC"))
    wanted = {"ts": pa.timestamp("us", tz="UTC"), "v": pa.float64()}
    ok = tmp_path / "ok.parquet"
    pq.write_table(pa.table({"ts": ts, "v": np.arange(10.0)}), ok, row_group_size=4)
    groups = pc_.index([str(ok)], "ts", wanted, utc_naive=False)
    assert [(g.rows, g.lo, g.hi) for g in groups] == [(4, 0, 3000), (4, 4000, 7000),
                                                      (2, 8000, 9000)]
    f32 = tmp_path / "f32.parquet"  # stored FLOAT, declared DOUBLE
    pq.write_table(pa.table({"ts": ts, "v": np.arange(10.0, dtype=np.float32)}), f32)
    assert pc_.index([str(f32)], "ts", wanted, utc_naive=False) is None
    nulls = tmp_path / "nulls.parquet"  # a NULL event time
    pq.write_table(pa.table({"ts": pa.array([0, None, 5], pa.timestamp("us", tz="UTC")),
                             "v": [1.0, 2.0, 3.0]}), nulls)
    assert pc_.index([str(nulls)], "ts", wanted, utc_naive=False) is None
    naive = tmp_path / "naive.parquet"  # no time zone: read as UTC only in a UTC session
    pq.write_table(pa.table({"ts": ts.cast(pa.timestamp("ms")), "v": np.arange(10.0)}), naive)
    assert pc_.index([str(naive)], "ts", wanted, utc_naive=False) is None
    assert pc_.index([str(naive)], "ts", wanted, utc_naive=True)[0].hi == 9000
    missing = tmp_path / "missing.parquet"
    pq.write_table(pa.table({"ts": ts}), missing)
    assert pc_.index([str(missing)], "ts", wanted, utc_naive=False) is None
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1 not really")
    assert pc_.index([str(broken)], "ts", wanted, utc_naive=False) is None


# ---------------------------------------------------------------------------- Spark
def _ticks(rng, n, start_us=1_700_000_000_000_000):
    steps = rng.choice([0, 1_000, 3_000, 10_000], n, p=[0.2, 0.5, 0.2, 0.1])
    steps[::2000] = 4_000_000  # gaps longer than any frame
    us = start_us + np.cumsum(steps)
    v = rng.normal(50, 10, n)
    frame = pd.DataFrame({"us": us, "v": v, "q": rng.integers(-100, 100, n),
                          "k": rng.integers(0, 4, n)})
    frame["v"] = frame["v"].astype(object).where(rng.random(n) >= 0.05, None)
    frame["k"] = frame["k"].astype(object).where(rng.random(n) >= 0.03, None)
    return frame


def _table(frame, unit="us", tz="UTC", punct_every=0):
    punct = np.full(len(frame), None, object)
    if punct_every:  # punctuation rows: not data (their values would change every window)
        punct[::punct_every] = 0
    ts = pa.array(frame["us"].to_numpy(), pa.int64()).cast(pa.timestamp("us", tz=tz))
    return pa.table({
        "ts": ts.cast(pa.timestamp(unit, tz=tz)),
        "v": pa.array(frame["v"], pa.float64()),
        "q": pa.array(frame["q"], pa.int32()),
        "k": pa.array(frame["k"], pa.int64()),
        "punct": pa.array([None if p is None else 1_700_000_000_000_000 for p in punct],
                          pa.int64()).cast(pa.timestamp("us", tz=tz)),
    })


def _write(folder, table, files=3, row_group_size=700):
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(table.num_rows), files)):
        pq.write_table(table.take(pa.array(part)), folder / f"part-{i}.parquet",
                       row_group_size=row_group_size)
    return folder


QUERIES = [
    # TiLT trend's windows: several frames, one pass, then Spark over the result
    """SELECT ts, v, q,
              avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 20 MILLISECONDS PRECEDING
                           AND CURRENT ROW) AS a,
              sum(q) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 5 MILLISECONDS PRECEDING
                           AND INTERVAL 3 MILLISECONDS FOLLOWING) AS s,
              count(*) OVER (ORDER BY ts RANGE BETWEEN CURRENT ROW AND CURRENT ROW) AS peers,
              stddev_samp(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 50 MILLISECONDS
                                   PRECEDING AND CURRENT ROW) AS sd
       FROM ticks""",
    # fraud's shape: PARTITION BY (a NULL key too), in a CTE, a Spark expression above
    """WITH w AS (
         SELECT ts, k, v,
                min(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                             MILLISECONDS PRECEDING AND CURRENT ROW) AS lo,
                max(q) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                             MILLISECONDS PRECEDING AND INTERVAL 1 MILLISECOND PRECEDING) AS hi,
                var_pop(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                                 MILLISECONDS PRECEDING AND CURRENT ROW) AS vp,
                count(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                               MILLISECONDS PRECEDING AND CURRENT ROW) AS n
         FROM ticks)
       SELECT *, v > lo + 3 * sqrt(vp) AS flag FROM w""",
    # a star beside the window, an alias on the stream
    """SELECT t.*, avg(t.v) OVER (ORDER BY t.ts RANGE BETWEEN INTERVAL 1 SECOND PRECEDING
                                  AND CURRENT ROW) AS a FROM ticks t""",
]


def _run(ws, sql, mode):
    from tests.test_tilt import _pandas

    ws.spark.conf.set("wavesql.windows.chunked", mode)
    df = ws.sql(sql)
    return df, df._jdf.queryExecution().executedPlan().toString(), _pandas(df)


def _compare(ws, sql, expect_direct: bool):
    """The query with the chunked windows equals it with Spark's own windows."""
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    ws.spark.conf.set("wavesql.windows.chunk_rows", "400")  # many ranges, many boundaries
    ws.spark.conf.set("wavesql.fused", "false")  # this pass (fused chains: their own tests)
    try:
        chunked, plan, got = _run(ws, sql, "true")
        assert ("time_windows_scan" in plan) is expect_direct, plan
        plain, plain_plan, want = _run(ws, sql, "false")
        assert "time_windows_scan" not in plain_plan
    finally:
        for key in ("windows.chunked", "windows.min_rows", "windows.chunk_rows", "fused"):
            ws.spark.conf.unset(f"wavesql.{key}")
    assert chunked.schema == plain.schema
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want) > 0
    assert_same_frames(got, want)
    return got


def _create(ws, folder, progress=True):
    ws.sql(f"CREATE OR REPLACE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k BIGINT, "
           f"punct TIMESTAMP) FROM '{folder}' FORMAT parquet EVENT TIME ts "
           f"WATERMARK 1 SECOND" + (" PROGRESS COLUMN punct" if progress else ""))


@pytest.mark.spark
@pytest.mark.parametrize("query", range(len(QUERIES)))
def test_direct_windows_equal_spark_windows(ws, tmp_path, query):
    table = _table(_ticks(np.random.default_rng(query), 5000), punct_every=97)
    _create(ws, _write(tmp_path / "ticks", table))
    got = _compare(ws, QUERIES[query], expect_direct=True)
    assert len(got) == 5000 - len(range(0, 5000, 97))  # punctuation rows are not data


@pytest.mark.spark
def test_direct_windows_read_millisecond_and_zone_less_times(ws, tmp_path):
    frame = _ticks(np.random.default_rng(11), 3000)
    frame["us"] = frame["us"] // 1000 * 1000  # whole milliseconds
    _create(ws, _write(tmp_path / "ticks", _table(frame, unit="ms", tz=None)))
    _compare(ws, QUERIES[0], expect_direct=True)  # the session's time zone is UTC


@pytest.mark.spark
@pytest.mark.parametrize("case", ["null time", "out of order", "stored float", "where",
                                  "partition folder"])
def test_inputs_the_direct_pass_leaves_to_spark(ws, tmp_path, case):
    rng = np.random.default_rng(5)
    table = _table(_ticks(rng, 3000))
    folder = tmp_path / "ticks"
    sql = QUERIES[0]
    if case == "null time":
        table = table.set_column(0, "ts", pa.array(
            [None if i == 1234 else t for i, t in enumerate(table.column("ts").to_pylist())],
            table.schema.field("ts").type))
    elif case == "out of order":
        table = table.take(pa.array(rng.permutation(table.num_rows)))
    elif case == "stored float":
        table = table.set_column(1, "v", table.column("v").cast(pa.float32()))
    elif case == "where":  # a WHERE the direct pass cannot apply exactly
        sql = sql.replace("FROM ticks", "FROM ticks WHERE abs(q) > 5 OR v IN (1.0, 2.0)")
    if case == "partition folder":
        _write(folder / "day=1", table)
    else:
        _write(folder, table)
    _create(ws, folder)
    _compare(ws, sql, expect_direct=False)


# ------------------------------------------------------------ found in review (regressions)
def _mixed(table, how):
    """The first half of ``table`` stored another way Spark reads the same."""
    first = table.slice(0, table.num_rows // 2)
    ts = first.schema.field("ts")
    changed = {"ms": pa.field("ts", pa.timestamp("ms", tz="UTC")),
               "required": pa.field("ts", ts.type, nullable=False),
               "zone spelling": pa.field("ts", pa.timestamp("us", tz="+00:00"))}[how]
    return first.cast(pa.schema([changed] + list(first.schema)[1:])), table.slice(
        table.num_rows // 2)


@pytest.mark.spark
@pytest.mark.parametrize("how", ["ms", "required", "zone spelling"])
def test_direct_windows_over_files_stored_differently(ws, tmp_path, how):
    frame = _ticks(np.random.default_rng(21), 3000)
    frame["us"] = frame["us"] // 1000 * 1000  # whole milliseconds: exact in both files
    a, b = _mixed(_table(frame), how)
    folder = tmp_path / "ticks"
    folder.mkdir()
    pq.write_table(a, folder / "a.parquet", row_group_size=300)
    pq.write_table(b, folder / "b.parquet", row_group_size=300)
    _create(ws, folder)
    _compare(ws, QUERIES[0], expect_direct=True)


@pytest.mark.spark
def test_direct_windows_without_the_time_column_selected(ws, tmp_path):
    _create(ws, _write(tmp_path / "ticks", _table(_ticks(np.random.default_rng(4), 3000))))
    _compare(ws, """SELECT v, min(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 9 MILLISECONDS
                                     PRECEDING AND CURRENT ROW) AS lo,
                       count(q) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 9 MILLISECONDS
                                      PRECEDING AND CURRENT ROW) AS n FROM ticks""",
             expect_direct=True)


@pytest.mark.spark
def test_direct_windows_floating_keys_group_as_spark_does(ws, tmp_path):
    """-0.0 and 0.0 are one partition, every NaN another (Spark normalises the keys)."""
    n = 600
    us = T0_US + np.arange(n) * 1000
    other_nan = np.frombuffer(np.array([0x7FF8000000000001], np.uint64).tobytes(), np.float64)[0]
    k = np.array([0.0, -0.0, np.nan, other_nan, 1.5])
    table = pa.table({"ts": pa.array(us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                      "v": np.ones(n), "q": pa.array(np.zeros(n, np.int32)),
                      "k": pa.array(k[np.arange(n) % len(k)], pa.float64()),
                      "punct": pa.nulls(n, pa.timestamp("us", tz="UTC"))})
    folder = _write(tmp_path / "ticks", table, files=1, row_group_size=100)
    ws.sql(f"CREATE OR REPLACE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k DOUBLE, "
           f"punct TIMESTAMP) FROM '{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    got = _compare(ws, "SELECT ts, k, sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
                       "INTERVAL 1 SECOND PRECEDING AND CURRENT ROW) AS s FROM ticks",
                   expect_direct=True)
    assert got["s"].max() > 200  # the 240 zeros (of both signs) are one partition


@pytest.mark.spark
def test_direct_window_bigint_sums_as_spark(ws, tmp_path):
    """avg of BIGINTs is summed in DOUBLE (no wrap-around); a sum past BIGINT fails as in
    Spark's ANSI mode, never wraps silently."""
    from wavesql.spark_errors import translate_runtime_error

    n = 400
    table = pa.table({"ts": pa.array(T0_US + np.arange(n) * 1000, pa.int64()).cast(
        pa.timestamp("us", tz="UTC")), "q": pa.array(np.full(n, 5 * 10 ** 18), pa.int64())})
    folder = _write(tmp_path / "big", table, files=1, row_group_size=50)
    ws.sql(f"CREATE OR REPLACE STREAM big (ts TIMESTAMP, q BIGINT) FROM '{folder}' "
           f"FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    frame = "OVER (ORDER BY ts RANGE BETWEEN INTERVAL 5 MILLISECONDS PRECEDING AND CURRENT ROW)"
    got = _compare(ws, f"SELECT ts, avg(q) {frame} AS a FROM big", expect_direct=True)
    assert (got["a"] == 5e18).all()
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    try:
        for mode in ("true", "false"):  # the direct pass, then Spark's own window
            ws.spark.conf.set("wavesql.windows.chunked", mode)
            with pytest.raises(Exception) as info:
                ws.sql(f"SELECT ts, sum(q) {frame} AS s FROM big").collect()
            assert "overflow" in translate_runtime_error(info.value).message.lower()
    finally:
        for key in ("min_rows", "chunked"):
            ws.spark.conf.unset(f"wavesql.windows.{key}")


@pytest.mark.spark
def test_a_damaged_file_is_named_in_the_error(ws, tmp_path):
    from wavesql.spark_errors import translate_runtime_error

    folder = _write(tmp_path / "ticks", _table(_ticks(np.random.default_rng(2), 3000)),
                    files=1, row_group_size=1000)
    path = folder / "part-0.parquet"
    meta = pq.ParquetFile(path).metadata
    data = bytearray(path.read_bytes())
    start = meta.row_group(2).column(1).data_page_offset + 40
    data[start:start + 200] = bytes(b ^ 0x5A for b in data[start:start + 200])
    path.write_bytes(bytes(data))  # the footer still reads: the page does not
    _create(ws, folder)
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    try:
        with pytest.raises(Exception) as info:
            ws.sql(QUERIES[0]).collect()
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
    err = translate_runtime_error(info.value)
    assert err.code == "CORRUPT_FILE" and "part-0.parquet" in err.message


def test_index_refuses_times_beyond_pythons_datetime(tmp_path):
    path = tmp_path / "y10k.parquet"
    pq.write_table(pa.table({"ts": pa.array([0, 253402300800000000],
                                            pa.timestamp("us", tz="UTC"))}), path)
    assert pc_.index([str(path)], "ts", {"ts": pa.timestamp("us", tz="UTC")},
                     utc_naive=False) is None


@pytest.mark.spark
@pytest.mark.parametrize("where", [
    "q > -90 AND (v >= 45.5 OR v IS NULL) AND NOT k = 2",
    "v BETWEEN 40 AND 60.5 OR q <= -95 OR 3 < k",
    "NOT (f > 0.3) AND k IS NOT NULL",        # FLOAT with NaN: NaN is greater than 0.3
    "f >= -1e9 AND b",                       # NaN passes >=, a bare boolean column
    "NOT b OR s = 'x' OR s > 'y'",
])
def test_direct_windows_apply_a_where_as_spark_does(ws, tmp_path, where):
    """A WHERE of comparisons with literals is applied by the direct pass before the windows
    (rows it drops are in no frame); NULLs, NaN (greater than every number) and three-valued
    NOT as Spark."""
    rng = np.random.default_rng(len(where))
    frame = _ticks(rng, 4000)
    table = _table(frame, punct_every=89)
    n = table.num_rows
    f = rng.normal(0.5, 1, n).astype(np.float32)
    f[rng.random(n) < 0.05] = np.nan
    f[::37] = np.float32(0.3)  # above the DOUBLE 0.3 once widened, as Spark compares it
    table = table.append_column("f", pa.array(f, mask=rng.random(n) < 0.05))
    table = table.append_column("b", pa.array(rng.random(n) < 0.6, mask=rng.random(n) < 0.05))
    table = table.append_column("s", pa.array(rng.choice(["x", "y", "z", "é"], n),
                                              mask=rng.random(n) < 0.05))
    folder = _write(tmp_path / "ticks", table)
    ws.sql(f"CREATE OR REPLACE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k BIGINT, "
           f"punct TIMESTAMP, f FLOAT, b BOOLEAN, s STRING) FROM '{folder}' FORMAT parquet "
           f"EVENT TIME ts WATERMARK 1 SECOND PROGRESS COLUMN punct")
    got = _compare(ws, QUERIES[0].replace("FROM ticks", f"FROM ticks WHERE {where}"),
                   expect_direct=True)
    assert 0 < len(got) < n
