"""RESAMPLE of a Parquet stream in parallel ranges of time (planner/physical/direct_resample.py,
udfs/time_resample.py) against the Spark SQL lowering of planner/temporal.py
(``SET wavesql.resample.direct = false``) over the same files: every method, duplicate
times (the greatest-row rule with NULLs and NaN), gaps far longer than a range (neighbours
across it), punctuation rows, integer / boolean / timestamp columns, millisecond times;
and the inputs it leaves to the SQL.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wavesql.sources import parquet_chunks as pc_
from tests.test_parquet_chunks import _write as write_files
from tests.test_time_windows import assert_same_frames

MS = 1000
T0 = 1_700_000_000_000_000


# ---------------------------------------------------------------------------- ranges
@pytest.mark.parametrize("seed", range(12))
def test_ranges_read_the_neighbours_across_gaps(seed, tmp_path):
    """Each range reads exactly its own data rows and the rows at the nearest data times
    before and after it, wherever they are (gaps wider than ranges, punctuation rows at the
    edges of row groups, row groups out of order across files)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 600))
    times = np.sort(rng.integers(0, 1000, n)) * 1000
    times[n // 2:] += int(rng.integers(0, 3)) * 10_000_000  # maybe a gap wider than a range
    punct = rng.random(n) < (0.1 if seed % 2 else 0)       # punctuation rows: not data
    size = int(rng.integers(5, 80))
    order = np.arange(n)
    if seed % 3 == 0:  # files written in another order than time (row groups still sorted)
        blocks = np.array_split(order, 3)
        order = np.concatenate(blocks[::-1])
    wanted = {"ts": pa.timestamp("us", tz="UTC"), "row": pa.int64(), "punct": pa.int64()}
    table = pa.table({"ts": pa.array(times[order], pa.int64()).cast(wanted["ts"]),
                      "row": pa.array(order, pa.int64()),
                      "punct": pa.array([1 if p else None for p in punct[order]], pa.int64())})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, row_group_size=size)
    groups = pc_.index([str(path)], "ts", wanted, utc_naive=False, progress="punct")
    data = ~punct
    for r in pc_.ranges(groups, int(rng.integers(1, 12)), 0, 0, 1, neighbours=True):
        got = pc_.read_range(r, ["ts", "row"], "ts", "punct", wanted)
        before = times[data & (times < r.start)]
        after = times[data & (times >= r.end)]
        want = data & (((times >= r.start) & (times < r.end))
                       | (len(before) > 0 and times == (before.max() if len(before) else 0))
                       | (len(after) > 0 and times == (after.min() if len(after) else 0)))
        assert sorted(got.column("row").to_pylist()) == np.flatnonzero(want).tolist()
        context = np.asarray(got.column(pc_.CONTEXT).to_pylist())
        rows = np.asarray(got.column("row").to_pylist(), dtype=int)
        assert (context == ((times[rows] < r.start) | (times[rows] >= r.end))).all()


# ---------------------------------------------------------------------------- Spark
def _stream(rng, n, dup_every=0, punct_every=0, unit="us", nulls=False):
    steps = rng.choice([1 * MS, 2 * MS, 4 * MS, 7 * MS], n)
    steps[n // 3] = 3_000_000_000  # a 50-minute gap: wider than any range
    us = T0 + np.cumsum(steps)
    if dup_every:
        us[1::dup_every] = us[0::dup_every][:len(us[1::dup_every])]  # equal times
        us = np.sort(us)
    v = rng.normal(0, 5, n)
    v[rng.random(n) < 0.002] = np.nan
    if dup_every:  # equal values too: the next column decides
        v[1::dup_every] = v[0::dup_every][:len(v[1::dup_every])]
    q = rng.integers(-50, 50, n)
    flag = rng.random(n) < 0.5
    punct = np.zeros(n, bool)
    if punct_every:
        punct[::punct_every] = True
    tz = "UTC"
    return pa.table({
        "ts": pa.array(us, pa.int64()).cast(pa.timestamp("us", tz=tz)).cast(
            pa.timestamp(unit, tz=tz)),
        "v": pa.array(v, pa.float64()),
        "q": pa.array([None if nulls and i % 11 == 0 else int(x) for i, x in enumerate(q)],
                      pa.int32()),
        "flag": pa.array(flag),
        "seen": pa.array(us - 500, pa.int64()).cast(pa.timestamp("us", tz=tz)),
        "punct": pa.array([T0 if p else None for p in punct], pa.int64()).cast(
            pa.timestamp("us", tz=tz)),
    })


def _write(folder, table):
    return write_files(folder, table, files=2, row_group_size=200)


def _create(ws, folder, types="v DOUBLE, q INT, flag BOOLEAN, seen TIMESTAMP"):
    ws.sql(f"CREATE OR REPLACE STREAM s (ts TIMESTAMP, {types}, punct TIMESTAMP) "
           f"FROM '{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND "
           f"PROGRESS COLUMN punct")


def _compare(ws, sql, expect_direct: bool, markers=("resample_scan",), by=("ts",),
             rtol=1e-12, atol=0.0):
    """``sql`` with the direct pass (whose plan has every one of ``markers``, or none when
    not ``expect_direct``) against the SQL lowering (none of them); its rows."""
    from tests.test_tilt import _pandas

    ws.spark.conf.set("wavesql.resample.min_rows", "0")
    ws.spark.conf.set("wavesql.windows.chunk_rows", "700")  # many ranges
    try:
        direct = ws.sql(sql)
        plan = direct._jdf.queryExecution().executedPlan().toString()
        assert all((m in plan) is expect_direct for m in markers), plan
        got = _pandas(direct)
        ws.spark.conf.set("wavesql.resample.direct", "false")
        plain = ws.sql(sql)
        plain_plan = plain._jdf.queryExecution().executedPlan().toString()
        assert not any(m in plain_plan for m in markers)
        want = _pandas(plain)
    finally:
        for key in ("resample.min_rows", "windows.chunk_rows", "resample.direct"):
            ws.spark.conf.unset(f"wavesql.{key}")
    assert direct.schema == plain.schema
    assert len(got) == len(want) > 0
    assert_same_frames(got, want, by=list(by), rtol=rtol, atol=atol)
    return got


@pytest.mark.spark
@pytest.mark.parametrize("method", ["linear", "prev", "null", "zero"])
@pytest.mark.parametrize("period_ms", [3, 5])
def test_direct_resample_equals_the_sql(ws, tmp_path, method, period_ms):
    rng = np.random.default_rng(period_ms)
    _create(ws, _write(tmp_path / "s", _stream(rng, 4000, dup_every=7, punct_every=53)))
    got = _compare(ws, f"SELECT * FROM RESAMPLE(s, ts, INTERVAL {period_ms} MILLISECONDS, "
                       f"'{method}')", expect_direct=True)
    assert (got["ts"] % (period_ms * MS) == 0).all()
    assert got["ts"].is_unique


@pytest.mark.spark
def test_direct_resample_inside_a_query_and_millisecond_times(ws, tmp_path):
    rng = np.random.default_rng(7)
    _create(ws, _write(tmp_path / "s", _stream(rng, 3000, unit="ms")))
    _compare(ws, "SELECT ts, v * 2 AS v2, q FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, "
                 "'linear') r WHERE q > -40", expect_direct=True)


@pytest.mark.spark
@pytest.mark.parametrize("case", ["null in linear column", "string column", "out of order",
                                  "small input"])
def test_inputs_the_direct_resample_leaves_to_the_sql(ws, tmp_path, case):
    rng = np.random.default_rng(3)
    table = _stream(rng, 3000, nulls=case == "null in linear column")
    types = "v DOUBLE, q INT, flag BOOLEAN, seen TIMESTAMP"
    if case == "string column":
        table = table.set_column(3, "flag", pa.array([str(x) for x in
                                                      table.column("flag").to_pylist()]))
        types = types.replace("flag BOOLEAN", "flag STRING")
    if case == "out of order":
        table = table.take(pa.array(rng.permutation(table.num_rows)))
    _create(ws, _write(tmp_path / "s", table), types)
    sql = "SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'linear')"
    if case == "small input":
        from tests.test_tilt import _pandas

        df = ws.sql(sql)  # 3000 rows: under wavesql.resample.min_rows
        assert "resample_scan" not in df._jdf.queryExecution().executedPlan().toString()
        assert len(_pandas(df)) > 0
        return
    _compare(ws, sql, expect_direct=False)


@pytest.mark.spark
def test_direct_resample_over_files_stored_differently_and_a_numeric_progress_column(
        ws, tmp_path):
    """One file with millisecond times, the other with microseconds (Spark reads both);
    the PROGRESS COLUMN is a BIGINT, NULL on every data row, which 'linear' does not count
    as a hole."""
    rng = np.random.default_rng(17)
    table = _stream(rng, 4000, punct_every=61)
    us = (table.column("ts").cast(pa.int64()).to_numpy() // 1000) * 1000  # whole ms
    table = table.set_column(0, "ts", pa.array(us, pa.int64()).cast(pa.timestamp("us", tz="UTC")))
    table = table.set_column(5, "punct", table.column("punct").cast(pa.int64()))
    half = table.num_rows // 2
    first = table.slice(0, half)
    first = first.cast(pa.schema([pa.field("ts", pa.timestamp("ms", tz="UTC"))]
                                 + list(first.schema)[1:]))
    folder = tmp_path / "s"
    folder.mkdir()
    pq.write_table(first, folder / "a.parquet", row_group_size=200)
    pq.write_table(table.slice(half), folder / "b.parquet", row_group_size=200)
    ws.sql(f"CREATE OR REPLACE STREAM s (ts TIMESTAMP, v DOUBLE, q INT, flag BOOLEAN, "
           f"seen TIMESTAMP, punct BIGINT) FROM '{folder}' FORMAT parquet EVENT TIME ts "
           f"WATERMARK 1 SECOND PROGRESS COLUMN punct")
    _compare(ws, "SELECT * FROM RESAMPLE(s, ts, INTERVAL 3 MILLISECONDS, 'linear')",
             expect_direct=True)


@pytest.mark.spark
@pytest.mark.parametrize("method", ["linear", "prev", "null", "zero"])
def test_a_total_over_a_resample_is_aggregated_where_the_points_are_made(ws, tmp_path,
                                                                         method):
    """``SELECT <aggregates> FROM RESAMPLE(...)``: each range's grid points are aggregated
    in the pass that makes them (planner/physical/fused_chains.py), one row per range reaches Spark;
    the answer is the SQL lowering's (sums in another order: 1e-9)."""
    rng = np.random.default_rng(11)
    _create(ws, _write(tmp_path / "s", _stream(rng, 4000, dup_every=7, punct_every=53)))
    sql = (f"SELECT count(*) AS n, sum(v) AS sv, avg(q) AS aq, min(v) AS mn, max(q) AS mq, "
           f"count(v) AS cv, sum(CAST(flag AS INT)) AS f, sum(v) / count(*) + 1 AS e "
           f"FROM (SELECT ts, v, q, flag FROM RESAMPLE(s, ts, INTERVAL 3 MILLISECONDS, "
           f"'{method}')) r WHERE q > -40 OR q IS NULL")
    got = _compare(ws, sql, True, markers=("fused_chain_scan", "__wavesql_p0"), by=(),
                   rtol=1e-9, atol=1e-9)
    assert len(got) == 1
    assert got["n"].iloc[0] > 1000


@pytest.mark.spark
@pytest.mark.parametrize("method", ["null", "prev"])
def test_imputation_joins_its_bucket_means_where_the_points_are_made(ws, tmp_path, method):
    """TiLT's imputation: a total over the grid LEFT JOINed with the per-window means on the
    window each point lies in. The means (a fused aggregate per tumbling window) are handed
    to every range whole and joined in the pass that makes the points: no grid point
    reaches Spark (``__wavesql_lookup_0`` in the plan). Answer: the SQL lowering's."""
    rng = np.random.default_rng(23)
    _create(ws, _write(tmp_path / "s", _stream(rng, 4000, dup_every=7, punct_every=53)))
    sql = f"""
        WITH grid AS (SELECT ts, v FROM RESAMPLE(s, ts, INTERVAL 3 MILLISECONDS, '{method}')),
        buckets AS (SELECT _time, avg(v) AS mean
                    FROM s [RANGE 100 MILLISECONDS SLIDE 100 MILLISECONDS] WHERE q > 30)
        SELECT count(*) AS n, sum(v) AS sv, sum(CAST(imputed AS INT)) AS filled,
               count(mean) AS matched
        FROM (SELECT g._time, g.ts, coalesce(g.v, b.mean) AS v, g.v IS NULL AS imputed, b.mean
              FROM (SELECT timestamp_micros(unix_micros(ts) + pmod(-unix_micros(ts), 100000))
                             AS _time, ts, v FROM grid) g
              LEFT JOIN buckets b ON b._time = g._time) q"""
    ws.spark.conf.set("wavesql.windows.min_rows", "0")  # the means: a fused aggregate
    try:
        got = _compare(ws, sql, True, markers=("__wavesql_lookup_0",), by=(), rtol=1e-9,
                       atol=1e-9)
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
    n, filled, matched = (int(got[c].iloc[0]) for c in ("n", "filled", "matched"))
    assert n > 1000 and 0 < matched < n  # some windows have no mean (q > 30 is rare)
    assert (filled > 0) is (method == "null")
