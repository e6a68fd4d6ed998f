"""Time-chunked OVER windows (planner/physical/chunked_windows.py, udfs/time_windows.py).

The kernel is checked against a row-by-row Python oracle (each frame picked out with plain
comparisons, aggregated with the statistics module's textbook formulas); the Spark rewrite
against Spark's own window functions on the same data (``SET wavesql.windows.chunked =
false``), with chunks forced small so that frames cross many chunk boundaries.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from wavesql.udfs import time_windows as tw

FUNCS = ("sum", "avg", "count", "min", "max", "stddev_pop", "stddev_samp", "var_pop",
         "var_samp")


# ---------------------------------------------------------------------------- kernel
def _oracle(func, ts, keys, x, t, key, before, after):
    """``func`` over the frame of a row at time ``t`` (None: NULL time) in partition ``key``."""
    rows = [i for i in range(len(ts)) if keys[i] == key and (
        (t is None and ts[i] is None) or
        (t is not None and ts[i] is not None and t - before <= ts[i] <= t + after))]
    if x is None:
        return len(rows)
    vals = [x[i] for i in rows if x[i] is not None]
    if func == "count":
        return len(vals)
    if not vals:
        return None
    if func == "sum":
        return sum(vals)
    if func == "avg":
        return sum(vals) / len(vals)
    if func == "min":
        finite = [v for v in vals if not math.isnan(v)]
        return min(finite) if finite else math.nan
    if func == "max":
        return math.nan if any(math.isnan(v) for v in vals) else max(vals)
    n = len(vals)
    if func.endswith("samp") and n == 1:
        return None
    if any(not math.isfinite(v) for v in vals):
        return math.nan
    mean = sum(vals) / n
    ss = sum((v - mean) ** 2 for v in vals)
    var = ss / (n - 1 if func.endswith("samp") else n)
    return math.sqrt(var) if func.startswith("stddev") else var


def _table(rng, n, keys, nulls, nonfinite):
    ts = rng.integers(0, 400, n).astype(object)  # many equal times: peers
    x = rng.normal(1000, 3, n).astype(object)    # an offset: naive E[x^2]-E[x]^2 would fail
    k = rng.integers(0, keys, n).astype(object)
    if nulls:
        ts[rng.random(n) < 0.05] = None
        x[rng.random(n) < 0.1] = None
        k[rng.random(n) < 0.05] = None
    if nonfinite:
        for v in (math.nan, math.inf, -math.inf):
            x[rng.integers(0, n, 2)] = v
    ctx = rng.random(n) < 0.3
    return ts, x, k, ctx


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("narrow", [True, False])
@pytest.mark.parametrize("presorted", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_kernel_matches_row_by_row_oracle(seed, narrow, presorted, batched, monkeypatch):
    """``presorted``: times in order and never NULL, as a chunk read straight from
    time-ordered files (the kernel then sorts by partition only, or not at all);
    ``batched``: the packed (partition, time) keys searched a few partitions at a time, as
    for many keys over a long span."""
    rng = np.random.default_rng(seed)
    if not narrow:  # the prefix-sum / sparse-table paths for wide frames
        monkeypatch.setattr(tw, "NARROW", 0)
    if batched:
        monkeypatch.setattr(tw, "_KEY_SPACE", 1 << 10)
    ts, x, k, ctx = _table(rng, 300, keys=1 + seed % 3, nulls=seed % 2 == 0,
                           nonfinite=seed % 3 == 1)
    keys = 1
    if presorted:
        ts = np.sort(rng.integers(0, 400, len(ts))).astype(object)
        if seed % 3 == 0:  # one partition: no key column at all
            k[:], keys = 0, 0
    before, after = [(20, 0), (0, 0), (35, 10), (50, -5), (100, 100), (7, 3)][seed]
    table = pa.table({"t": pa.array(list(ts), pa.int64()),
                      "x": pa.array(list(x), pa.float64()),
                      "__wavesql_k0": pa.array(list(k), pa.int64()),
                      tw.CONTEXT: pa.array(ctx)})
    specs = tuple(tw.Spec(f, "x", before, after) for f in FUNCS) + (
        tw.Spec("count", None, before, after),)
    out = tw.evaluate(table, specs, "t", keys, ("t", "x", "__wavesql_k0")).to_pydict()
    own = [i for i in range(len(ts)) if not ctx[i]]
    assert len(out["t"]) == len(own)
    got_rows = sorted(zip(*[out[c] for c in out]), key=repr)
    want_rows = []
    for i in own:
        t = ts[i]
        row = [t, x[i], k[i]]
        for f in FUNCS:
            row.append(_oracle(f, ts, k, x, t, k[i], before, after))
        row.append(_oracle("count", ts, k, None, t, k[i], before, after))
        want_rows.append(tuple(row))
    want_rows.sort(key=repr)
    # match rows by their own columns (time, value, key), then compare results
    got_by = {}
    for r in got_rows:
        got_by.setdefault(repr(r[:3]), []).append(r)
    for w in want_rows:
        candidates = got_by[repr(w[:3])]
        assert any(_same_row(g[3:], w[3:]) for g in candidates), repr((w, candidates))


def _same_row(got, want) -> bool:
    for g, w in zip(got, want):
        if w is None or g is None:
            if g is not w and not (g is None and w is None):
                return False
            continue
        if isinstance(w, float) and math.isnan(w):
            if not (isinstance(g, float) and math.isnan(g)):
                return False
            continue
        if not math.isclose(g, w, rel_tol=1e-9, abs_tol=1e-9):
            return False
    return True


@pytest.mark.parametrize("cards", [(1,), (7,), (40_000,), (50, 100), (3, 1, 5), (2**40, 2**30)])
def test_group_order_is_lexsort_order(cards):
    """The combined-key sort orders rows as numpy's ``lexsort`` over the keys (the first
    the primary), stably; keys too wide to combine in int64 fall back to it."""
    rng = np.random.default_rng(len(cards))
    n = 5_000
    codes = [rng.integers(0, c, n) for c in cards]
    want = np.lexsort(tuple(reversed(codes)))
    np.testing.assert_array_equal(tw.group_order(codes, n), want)
    assert (tw.combined_codes(codes) is None) == (math.prod(cards) > 2**62)
    assert len(tw.group_order([], 0)) == 0


def test_kernel_integers_keep_their_type_and_sum_exactly():
    big = 2 ** 62
    table = pa.table({"t": pa.array([0, 1, 2, 3], pa.int64()),
                      "x": pa.array([big, big, -big, -big], pa.int64()),
                      "y": pa.array([3, None, 1, 2], pa.int32()),
                      tw.CONTEXT: pa.array([False, True, False, False])})
    specs = (tw.Spec("sum", "x", 1, 0), tw.Spec("min", "y", 3, 0), tw.Spec("max", "y", 3, 0))
    out = tw.evaluate(table, specs, "t", 0, ("t",))
    assert out.column("t").to_pylist() == [0, 2, 3]
    # frame sums that fit in a BIGINT are exact although the running prefix wraps around
    assert out.column(tw.result_column(0)).to_pylist() == [big, 0, -2 ** 63]
    assert out.column(tw.result_column(1)).type == pa.int32()
    assert out.column(tw.result_column(1)).to_pylist() == [3, 1, 1]
    assert out.column(tw.result_column(2)).to_pylist() == [3, 3, 3]


def test_kernel_min_of_nan_only_frames_is_nan():
    """Spark orders NaN above every number: a frame of NaNs (and NULLs) has minimum NaN,
    one with a number has that number."""
    table = pa.table({"t": pa.array([0, 1, 2, 10, 11], pa.int64()),
                      "x": pa.array([None, math.nan, math.nan, 3.0, math.nan], pa.float64()),
                      tw.CONTEXT: pa.array([False] * 5)})
    for narrow in (64, 0):
        tw.NARROW, saved = narrow, tw.NARROW
        try:
            out = tw.evaluate(table, (tw.Spec("min", "x", 2, 0), tw.Spec("max", "x", 2, 0)),
                              "t", 0, ("t",)).to_pydict()
        finally:
            tw.NARROW = saved
        lo, hi = out[tw.result_column(0)], out[tw.result_column(1)]
        assert lo[0] is None and math.isnan(lo[1]) and math.isnan(lo[2])
        assert lo[3] == 3.0 and lo[4] == 3.0
        assert math.isnan(hi[4]) and hi[3] == 3.0


def test_kernel_empty_chunk():
    table = pa.table({"t": pa.array([], pa.int64()), "x": pa.array([], pa.float64()),
                      tw.CONTEXT: pa.array([], pa.bool_())})
    out = tw.evaluate(table, (tw.Spec("avg", "x", 5, 0),), "t", 0, ("t", "x"))
    assert out.num_rows == 0


# ---------------------------------------------------------------------------- Spark
def assert_same_frames(got: pd.DataFrame, want: pd.DataFrame, by=None, rtol=1e-9,
                       atol=1e-9) -> None:
    """Equal results in any row order: sorted by ``by`` (all columns by default), float
    columns within tolerance (NaN equal to NaN), the others exactly."""
    by = list(got.columns) if by is None else by
    got = got.sort_values(by).reset_index(drop=True)
    want = want.sort_values(by).reset_index(drop=True)
    for c in got.columns:
        if got[c].dtype == np.float64:
            np.testing.assert_allclose(got[c].to_numpy(), want[c].to_numpy(), rtol=rtol,
                                       atol=atol, equal_nan=True, err_msg=c)
        else:
            assert got[c].equals(want[c]), c


def _write(tmp_path, rng, n=4000, gap_every=700):
    """A stream with irregular times (bursts, equal times, a long gap), NULL values and
    NULL times, keys with a NULL key, an integer column."""
    steps = rng.choice([0, 1_000, 3_000, 10_000], n, p=[0.2, 0.5, 0.2, 0.1])
    steps[::gap_every] = 5_000_000  # gaps longer than any frame and than small chunks
    us = 1_700_000_000_000_000 + np.cumsum(steps)
    frame = pd.DataFrame({
        "ts": pd.to_datetime(us, unit="us", utc=True),
        "v": rng.normal(50, 10, n),
        "q": rng.integers(-100, 100, n).astype("int32"),
        "k": rng.integers(0, 4, n).astype("float64"),
    })
    frame.loc[rng.random(n) < 0.05, "v"] = np.nan  # becomes NULL in Parquet below
    frame["v"] = frame["v"].astype(object).where(frame["v"].notna(), None)
    frame.loc[rng.random(n) < 0.03, "k"] = np.nan
    frame.loc[rng.random(n) < 0.01, "ts"] = pd.NaT  # NULL times: peers of each other only
    frame = frame.sample(frac=1, random_state=1)  # out of order in the file
    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.set_column(0, "ts", table.column("ts").cast(pa.timestamp("us", tz="UTC")))
    table = table.set_column(2, "q", table.column("q").cast(pa.int32()))
    table = table.set_column(3, "k", table.column("k").cast(pa.int64()))
    folder = tmp_path / "ticks"
    folder.mkdir()
    import pyarrow.parquet as pq

    pq.write_table(table, folder / "part-0.parquet", row_group_size=1000)
    return folder


QUERIES = [
    # several frames, one chunked pass; WHERE filters before the windows; a Spark window
    # (lag) left beside them over the same filtered rows
    """SELECT ts, v, q,
              avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 20 MILLISECONDS PRECEDING
                           AND CURRENT ROW) AS a,
              sum(q) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 5 MILLISECONDS PRECEDING
                           AND INTERVAL 3 MILLISECONDS FOLLOWING) AS s,
              count(*) OVER (ORDER BY ts RANGE BETWEEN CURRENT ROW AND CURRENT ROW) AS peers,
              stddev_samp(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 50 MILLISECONDS
                                   PRECEDING AND CURRENT ROW) AS sd,
              lag(v) OVER (ORDER BY ts, q, v) AS before
       FROM ticks WHERE q > -90""",
    # PARTITION BY (a NULL key too), min/max/var, a frame that ends before the row
    """SELECT ts, k, v,
              min(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30 MILLISECONDS
                           PRECEDING AND CURRENT ROW) AS lo,
              max(q) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30 MILLISECONDS
                           PRECEDING AND INTERVAL 1 MILLISECOND PRECEDING) AS hi,
              var_pop(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                               MILLISECONDS PRECEDING AND CURRENT ROW) AS vp,
              count(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 30
                             MILLISECONDS PRECEDING AND CURRENT ROW) AS n
       FROM ticks""",
    # a window over a CTE holding another window (RSI's shape), star, a qualified column
    """WITH d AS (SELECT ts, v - lag(v) OVER (ORDER BY ts, q) AS dv, q FROM ticks)
       SELECT d.*, sum(dv) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 13 MILLISECONDS
                                 PRECEDING AND CURRENT ROW) AS gain
       FROM d""",
]


@pytest.mark.spark
@pytest.mark.parametrize("query,estimate", [(q, "footers") for q in range(len(QUERIES))]
                         + [(0, "counted")])
def test_chunked_windows_equal_spark_windows(ws, tmp_path, query, estimate, monkeypatch):
    """``estimate``: chunk length from the Parquet footers, or (as for CSV/JSON streams)
    from a counting job over the rows."""
    from wavesql.planner.physical import chunked_windows as time_windows
    from tests.test_tilt import _pandas

    if estimate == "counted":
        monkeypatch.setattr(time_windows, "_footer_estimate", lambda streams: None)

    folder = _write(tmp_path, np.random.default_rng(query))
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k BIGINT) "
           f"FROM '{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    sql = QUERIES[query]
    ws.spark.conf.set("wavesql.windows.chunk_rows", "300")  # ~15 chunks, many boundaries
    ws.spark.conf.set("wavesql.windows.min_rows", "0")  # small data, chunked all the same
    ws.spark.conf.set("wavesql.windows.chunked", "all")  # PARTITION BY windows too
    try:
        chunked = ws.sql(sql)
        plan = chunked._jdf.queryExecution().executedPlan().toString()
        assert "FlatMapGroupsInArrow" in plan  # the rewrite applied
        got = _pandas(chunked)
        ws.spark.conf.set("wavesql.windows.chunked", "false")
        plain = ws.sql(sql)
        assert "FlatMapGroupsInArrow" not in plain._jdf.queryExecution().executedPlan().toString()
        want = _pandas(plain)
    finally:
        for key in ("chunk_rows", "chunked", "min_rows"):
            ws.spark.conf.unset(f"wavesql.windows.{key}")
    assert list(got.columns) == list(want.columns)
    assert chunked.schema == plain.schema
    assert len(got) == len(want) > 0
    assert_same_frames(got, want)


@pytest.mark.spark
def test_partitioned_windows_stay_with_spark_by_default(ws, tmp_path):
    folder = _write(tmp_path, np.random.default_rng(3))
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k BIGINT) "
           f"FROM '{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    partitioned = ("SELECT avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL "
                   "1 SECOND PRECEDING AND CURRENT ROW) FROM ticks")
    plain = partitioned.replace("PARTITION BY k ", "")

    def chunked(sql):
        return "FlatMapGroupsInArrow" in ws.sql(sql)._jdf.queryExecution().executedPlan() \
            .toString()

    assert not chunked(plain)  # 4000 rows: under wavesql.windows.min_rows, Spark's window
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    try:
        assert chunked(plain) and not chunked(partitioned)
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")


@pytest.mark.spark
def test_unsupported_windows_stay_with_spark(ws, tmp_path):
    folder = _write(tmp_path, np.random.default_rng(9))
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE, q INT, k BIGINT) "
           f"FROM '{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    ws.spark.conf.set("wavesql.windows.min_rows", "0")  # not left out for being small
    for sql in (
        # ROWS frames, unbounded frames, DESC order, a GROUP BY query: Spark's own windows
        "SELECT avg(v) OVER (ORDER BY ts ROWS BETWEEN 3 PRECEDING AND CURRENT ROW) FROM ticks",
        "SELECT sum(v) OVER (ORDER BY ts RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) "
        "FROM ticks",
        "SELECT sum(v) OVER (ORDER BY ts DESC RANGE BETWEEN INTERVAL 1 SECOND PRECEDING AND "
        "CURRENT ROW) FROM ticks",
        "SELECT k, sum(sum(v)) OVER (ORDER BY max(ts) RANGE BETWEEN INTERVAL 1 SECOND "
        "PRECEDING AND CURRENT ROW) FROM ticks GROUP BY k",
    ):
        df = ws.sql(sql)
        assert "FlatMapGroupsInArrow" not in df._jdf.queryExecution().executedPlan().toString()
        df.collect()
    ws.spark.conf.unset("wavesql.windows.min_rows")


@pytest.mark.parametrize("seed", range(6))
def test_narrow_sums_add_in_row_order_as_spark(seed):
    """Spark re-aggregates a sliding frame row by row from its first row; the kernel's
    narrow sums must add in that order (to the last bit), infinities and NaN included."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40_000))
    x = rng.normal(0, 1, n) * 10.0 ** rng.integers(-3, 12, n)
    special = rng.random(n)
    x[special < 0.002], x[(special > 0.5) & (special < 0.501)] = np.inf, -np.inf
    x[special > 0.999] = np.nan
    lo = np.sort(rng.integers(0, n, n))
    hi = np.minimum(n, lo + rng.integers(0, 70, n))
    if seed % 2:  # regular ticks: each frame starts a row after the last (sliced sums)
        lo = np.maximum(0, np.arange(n) - 30)
        hi = np.minimum(n, np.arange(n) + 1 - (rng.random(n) < 0.01))
    got = tw._row_order_sum(x, lo, hi)
    want = np.array([sum(x[a:b].tolist(), 0.0) for a, b in zip(lo, hi)])
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()
