"""A real memory limit on Spark's Python workers: the passes fit it, or fail saying so.

``spark.executor.pyspark.memory`` makes Spark cap each Python worker's address space
(``RLIMIT_AS``); a pass that plans ranges too large for it kills the task. The slow test
runs ``wavesql`` in a process of its own with that limit set (it cannot be changed on the
suite's running session) over 2 M rows and a 10-minute RANGE frame:

* as planned (planner/physical/task_memory.py: the worker's share minus its baseline),
  WaveSQL's time-window pass runs, and the answer equals pandas' rolling mean over the
  same rows;
* with ``wavesql.python.task_memory`` forced to 8g (ranges of a million rows), a worker
  runs out of memory and the user gets ``WORKER_OUT_OF_MEMORY`` with its hint -- the limit
  is real, and the first result is not luck.

The fast tests check the budget arithmetic against Spark's rule by hand.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

N = 2_000_000
QUERY = ("SELECT count(*) AS n, sum(a) AS s FROM (SELECT ts, avg(v) OVER (ORDER BY ts RANGE "
         "BETWEEN INTERVAL 10 MINUTES PRECEDING AND CURRENT ROW) AS a FROM ticks)")


def _wavesql(tmp_path, folder, *statements: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, WAVESQL_MASTER="local[2]")
    script = "; ".join([f"CREATE OR REPLACE STREAM ticks (ts TIMESTAMP, v DOUBLE) FROM "
                        f"'{folder}' FORMAT parquet EVENT TIME ts", *statements])
    return subprocess.run(
        [sys.executable, "-m", "wavesql", "--catalog", str(tmp_path / "cat.db"),
         "--conf", "spark.executor.pyspark.memory=600m",
         "--conf", "spark.sql.shuffle.partitions=2", "-c", script],
        capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_pass_fits_a_real_worker_memory_limit(tmp_path):
    rng = np.random.default_rng(4)
    us = 1_700_000_000_000_000 + np.arange(N, dtype=np.int64) * 10_000
    v = rng.normal(10, 2, N)
    folder = tmp_path / "ticks"
    folder.mkdir()
    pq.write_table(pa.table({"ts": pa.array(us, pa.timestamp("us", tz="UTC")), "v": v}),
                   folder / "part-0.parquet", row_group_size=50_000)
    # the oracle: pandas' time-based rolling mean, both ends of the 10-minute frame included
    series = pd.Series(v, index=pd.to_datetime(us, unit="us"))
    want = series.rolling("10min", closed="both").mean().sum()

    fits = _wavesql(tmp_path, folder, f"EXPLAIN SPARK {QUERY}", QUERY)
    assert fits.returncode == 0, fits.stdout + fits.stderr
    # WaveSQL's time-window pass ran (from the files, or chunked by Spark), in ranges that fit
    assert "time_windows_scan" in fits.stdout or "FlatMapGroupsInArrow" in fits.stdout
    n, total = re.findall(r"│\s*(\d+)\s*│\s*([-+\d.eE]+)\s*│", fits.stdout)[-1]  # the result
    assert int(n) == N
    assert float(total) == pytest.approx(want, rel=1e-9)

    forced = _wavesql(tmp_path, folder, "SET wavesql.python.task_memory = '8g'", QUERY)
    assert forced.returncode != 0
    assert "WORKER_OUT_OF_MEMORY" in forced.stdout + forced.stderr, forced.stdout + forced.stderr
    assert "spark.executor.pyspark.memory" in forced.stdout + forced.stderr


def test_the_budget_is_the_workers_share_minus_its_baseline():
    from wavesql.planner.physical import task_memory as tm

    mib = 1 << 20
    # Spark gives each worker pyspark.memory / spark.executor.cores (cores default to 1)
    assert tm.worker_budget("2g", None, "system") == 2048 * mib - tm.BASELINE_SYSTEM_POOL
    assert tm.worker_budget("4096", "4", "system") == 1024 * mib - tm.BASELINE_SYSTEM_POOL
    # pyarrow's default allocator reserves more address space before any row
    assert tm.worker_budget("2g", "1", None) == 2048 * mib - tm.BASELINE_MIMALLOC
    # a limit below the baseline leaves nothing: no Python range is planned at all
    assert tm.worker_budget("600m", "2", "system") == 0
    assert tm.BASELINE_SYSTEM_POOL < 600 * mib < tm.BASELINE_MIMALLOC


def test_a_worker_memory_error_is_translated():
    from pyspark.errors import PythonException

    from wavesql.spark_errors import translate_runtime_error

    text = ("An exception was thrown from the Python worker:\nTraceback (most recent call "
            "last):\n  File \"udfs/time_windows.py\", line 84, in evaluate\n"
            "numpy._core._exceptions._ArrayMemoryError: Unable to allocate 8.09 MiB for an "
            "array with shape (1060000,) and data type int64\n")
    err = translate_runtime_error(PythonException(text))
    assert err.code == "WORKER_OUT_OF_MEMORY"
    assert "Unable to allocate 8.09 MiB" in str(err)
    assert "spark.executor.pyspark.memory" in (err.hint or "")
