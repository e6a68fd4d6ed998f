"""No time-range pass is planned that would not fit a Python task's memory.

planner/physical/task_memory.py: the budget per task (``SET wavesql.python.task_memory``, else
``spark.executor.pyspark.memory`` per core); the time-chunked windows, the fused chain and
the direct RESAMPLE cut their ranges so none holds more, or leave the work to Spark. The
oracle is Spark's own window functions over the same files (``wavesql.windows.chunked =
false``) and pandas counts of the rows each range owns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wavesql.errors import WaveSQLError

N = 20_000


def _ticks(tmp_path):
    """20,000 ticks 10 ms apart (a 5 s gap in the middle), in time order, row groups of
    1,000 rows: a stream the direct pass reads from its files."""
    rng = np.random.default_rng(4)
    us = 1_700_000_000_000_000 + np.arange(N, dtype=np.int64) * 10_000
    us[N // 2:] += 5_000_000
    table = pa.table({"ts": pa.array(us, pa.timestamp("us", tz="UTC")),
                      "v": rng.normal(10, 2, N)})
    folder = tmp_path / "ticks"
    folder.mkdir()
    pq.write_table(table, folder / "part-0.parquet", row_group_size=1000)
    return folder, us


def _pass_used(df) -> bool:
    plan = df._jdf.queryExecution().executedPlan().toString()
    return any(name in plan for name in ("fused_chain_scan", "time_windows_scan",
                                         "FlatMapGroupsInArrow"))


def _rows(df) -> pd.DataFrame:
    out = df.toPandas().sort_values("ts").reset_index(drop=True)
    return out


@pytest.mark.spark
def test_a_wide_frame_that_would_not_fit_a_task_is_left_to_spark(ws, tmp_path):
    folder, _ = _ticks(tmp_path)
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE) FROM '{folder}' FORMAT parquet "
           "EVENT TIME ts")
    narrow = ("SELECT ts, avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 50 MILLISECONDS "
              "PRECEDING AND CURRENT ROW) AS a FROM ticks")
    wide = narrow.replace("50 MILLISECONDS", "1 HOUR")  # every frame holds every row before
    spark = ws.spark
    spark.conf.set("wavesql.windows.min_rows", "0")
    try:
        assert _pass_used(ws.sql(wide))  # the default budget (2 GB) holds 20,000 rows
        spark.conf.set("wavesql.python.task_memory", "1m")  # ~2,000 rows of 3 columns
        got_narrow, got_wide = ws.sql(narrow), ws.sql(wide)
        assert _pass_used(got_narrow)      # cut into more, smaller ranges
        assert not _pass_used(got_wide)    # its context alone is all the rows: Spark's
        got = [_rows(got_narrow), _rows(got_wide)]
        spark.conf.set("wavesql.windows.chunked", "false")
        want = [_rows(ws.sql(narrow)), _rows(ws.sql(wide))]
    finally:
        for key in ("wavesql.windows.min_rows", "wavesql.python.task_memory",
                    "wavesql.windows.chunked"):
            spark.conf.unset(key)
    for g, w in zip(got, want):
        assert len(g) == len(w) == N
        assert (g["ts"] == w["ts"]).all()
        np.testing.assert_allclose(g["a"], w["a"], rtol=1e-12)


@pytest.mark.spark
def test_direct_ranges_are_cut_until_each_fits_the_budget(ws, tmp_path):
    from wavesql.planner.physical import file_ranges as time_windows, task_memory
    from wavesql.sources import parquet_chunks as pc_

    folder, us = _ticks(tmp_path)
    groups = pc_.index([str(folder / "part-0.parquet")], "ts",
                       {"ts": pa.timestamp("us", tz="UTC"), "v": pa.float64()},
                       utc_naive=True)
    spark = ws.spark
    spark.conf.set("wavesql.python.task_memory", "1m")
    try:
        limit = task_memory.max_rows(spark, 3)
        ranges = time_windows.fitting_ranges(spark, groups, 3, 50_000, 0, 1)
        # a frame reaching back more than the budget's rows cannot be cut to fit
        too_wide = time_windows.fitting_ranges(spark, groups, 3, 3_600_000_000, 0, 1)
    finally:
        spark.conf.unset("wavesql.python.task_memory")
    assert 1_000 < limit < 4_000 and too_wide is None
    assert len(ranges) >= N // limit
    for r in ranges:
        assert sum(g.rows for g in r.groups) <= limit
    owned = [int(((us >= r.start) & (us < r.end)).sum()) for r in ranges]  # pandas-free count
    assert sum(owned) == N and all(owned)


def test_budget_settings_and_their_errors(ws):
    from wavesql.planner.physical import task_memory

    spark = ws.spark
    assert task_memory.budget(spark) == task_memory.DEFAULT_BUDGET  # nothing set here
    assert task_memory.parse_size("512m") == 512 << 20
    spark.conf.set("wavesql.python.task_memory", "64k")
    try:
        assert task_memory.budget(spark) == 64 << 10
        spark.conf.set("wavesql.python.task_memory", "lots")
        with pytest.raises(WaveSQLError) as e:
            task_memory.budget(spark)
        assert e.value.code == "INVALID_SETTING"
    finally:
        spark.conf.unset("wavesql.python.task_memory")
