"""Interval (band) joins: time binning gives Spark's own answer without a nested loop."""

from __future__ import annotations

import os
import time

from collections import Counter

import numpy as np
import pandas as pd
import pytest

SECOND = 1_000_000


def _stream(ws, tmp_path, name, n, seed):
    rng = np.random.default_rng(seed)
    folder = tmp_path / name
    folder.mkdir()
    pd.DataFrame({"k": rng.integers(0, 3, n), "v": rng.random(n),
                  "ts": pd.to_datetime(rng.integers(0, 120 * SECOND, n), unit="us")
                  .astype("datetime64[us]")}).to_parquet(folder / "p.parquet")
    ws.sql(f"CREATE STREAM {name} (k BIGINT, v DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts")
    return folder


BANDS = [
    "a.ts BETWEEN b.ts - INTERVAL 2 SECONDS AND b.ts + INTERVAL 500 MILLISECONDS",
    "a.ts >= b.ts - INTERVAL 1 SECOND AND a.ts <= b.ts",
    "b.ts > a.ts AND b.ts - INTERVAL 3 SECONDS < a.ts AND a.k = b.k",
    "a.ts + INTERVAL 1 SECOND >= b.ts AND a.ts - INTERVAL 1 SECOND <= b.ts AND a.v < b.v",
]


@pytest.mark.parametrize("band", BANDS)
def test_band_join_equals_spark_and_avoids_nested_loops(ws, spark, tmp_path, band):
    fa = _stream(ws, tmp_path, "a_s", 400, 1)
    fb = _stream(ws, tmp_path, "b_s", 300, 2)
    sql = f"SELECT * FROM a_s a JOIN b_s b ON {band}"
    got = ws.sql(sql)
    spark.read.parquet(str(fa)).createOrReplaceTempView("a_plain")
    spark.read.parquet(str(fb)).createOrReplaceTempView("b_plain")
    want = spark.sql(sql.replace("a_s a", "a_plain a").replace("b_s b", "b_plain b"))
    assert got.columns == want.columns
    assert Counter(map(tuple, got.collect())) == Counter(map(tuple, want.collect()))
    assert len(want.collect()) > 20
    plan = got._jdf.queryExecution().executedPlan().toString()
    assert "NestedLoop" not in plan and "Cartesian" not in plan
    assert "__band_bin" in ws.explain(sql, "SPARK")  # the binned rewrite


def _arriving(folder, frame, parts, rng):
    """``frame`` written as ``parts`` files in rough time order, shuffled within each file and
    a little across files (less than the watermark)."""
    frame = frame.assign(_o=frame.ts.astype("int64") + rng.integers(0, 2 * SECOND, len(frame)))
    frame = frame.sort_values("_o").drop(columns="_o")
    edges = np.linspace(0, len(frame), parts + 1).astype(int)
    folder.mkdir()
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        path = folder / f"p{i:02d}.parquet"
        frame.iloc[lo:hi].sample(frac=1, random_state=i).to_parquet(path)
        # Spark takes files by modification time: make it the arrival order
        stamp = time.time() - 3600 + i
        os.utime(path, (stamp, stamp))


def _pandas_band(a, b, band):
    """The band join in pandas over the frames the test wrote: every pair, then the band's
    condition (the oracle; the SQL text of ``BANDS`` read by hand)."""
    pairs = a.merge(b, how="cross", suffixes=("_a", "_b"))
    at, bt, s = pairs.ts_a, pairs.ts_b, pd.Timedelta(seconds=1)
    keep = {
        BANDS[0]: (at >= bt - 2 * s) & (at <= bt + s / 2),
        BANDS[1]: (at >= bt - s) & (at <= bt),
        BANDS[2]: (bt > at) & (bt - 3 * s < at) & (pairs.k_a == pairs.k_b),
        BANDS[3]: (at + s >= bt) & (at - s <= bt) & (pairs.v_a < pairs.v_b),
    }[band]
    pairs = pairs[keep]
    return Counter(zip(pairs.k_a, pairs.v_a, pairs.ts_a.dt.to_pydatetime(), pairs.k_b,
                       pairs.v_b))


# CI runs the two band forms the batch planner rewrites most (strict bounds with a key, an
# extra condition); the other two are slow: tests/test_stateful_interval.py checks the state
# store's pairing against pandas for every band shape, batch by batch.
CONTINUOUS_BANDS = [pytest.param(b, marks=pytest.mark.slow) for b in BANDS[:2]] + BANDS[2:]


@pytest.mark.parametrize("band", CONTINUOUS_BANDS)
def test_continuous_band_join_equals_the_batch_join(ws, spark, tmp_path, band):
    """Both streams arrive in 6 files each, out of order within the watermark: the pairs
    the continuous join delivers (once each, all final) are exactly the batch join's, and
    each side's state stays within the band plus the watermark.
    Oracle: pandas (a cross merge filtered by the band) over the rows written, plus the
    batch join."""
    rng = np.random.default_rng(len(band))
    frames = {}
    for name, n in (("a_s", 400), ("b_s", 300)):
        frames[name] = pd.DataFrame({
            "k": rng.integers(0, 3, n), "v": rng.random(n),
            "ts": pd.to_datetime(rng.integers(0, 120 * SECOND, n), unit="us")
            .astype("datetime64[us]")})
        _arriving(tmp_path / name, frames[name], 6, rng)
        ws.sql(f"CREATE STREAM {name} (k BIGINT, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{tmp_path / name}' FORMAT parquet EVENT TIME ts WATERMARK 3 SECONDS")
    sql = f"SELECT a.k AS ak, a.v AS av, a.ts AS at, b.k AS bk, b.v AS bv FROM a_s a JOIN b_s b ON {band}"
    q = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1,
                  clock=lambda: 0.0)
    q.await_termination()
    got = spark.read.parquet(str(tmp_path / "out"))
    assert set(got.columns) - {"batch"} == {"ak", "av", "at", "bk", "bv", "_progress"}
    cols = ["ak", "av", "at", "bk", "bv"]
    delivered = Counter(map(tuple, got.select(*cols).collect()))
    want = _pandas_band(frames["a_s"], frames["b_s"], band)
    assert delivered == want and len(want) > 20
    assert delivered == Counter(map(tuple, ws.sql(sql).collect()))  # the two modes agree
    reports = q.reports
    assert len(reports) >= 6 and sum(r.late for r in reports) == 0
    # state: at most the rows within band + watermark of progress, far below the input
    assert max(r.buffered for r in reports) < 0.25 * (400 + 300)
