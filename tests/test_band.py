"""Interval (band) joins: time binning gives Spark's own answer without a nested loop."""

from __future__ import annotations

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
