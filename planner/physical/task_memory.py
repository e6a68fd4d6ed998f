"""How much one Python task may hold, so that no pass is planned that would kill a worker.

The direct passes (planner/physical/chunked_windows.py, fused_chains.py and
direct_resample.py) hand each Python task whole ranges of rows: a range's own rows
plus the context its frames reach. A wide frame (``RANGE 1 DAY`` over a week) or a long
tumbling window makes a few huge ranges, and a Python worker that allocates past its limit
dies. So the planner estimates what a range holds -- rows times :func:`row_bytes` -- before
running anything and cuts the work finer until every range fits the budget, or, when even
the finest cut does not (a frame whose context alone is too large), leaves the windows to
Spark, whose window operator spills to disk.

The budget per task (:func:`budget`): ``SET wavesql.python.task_memory = '512m'``;
otherwise what Spark lets each Python worker have (:func:`worker_budget`); otherwise
:data:`DEFAULT_BUDGET`. Half of it is used (:data:`HEADROOM`): estimates come from
row-group statistics or a mean density, and a burst of rows inside a range is not in them.

``spark.executor.pyspark.memory`` is enforced by Spark as an *address-space* limit
(``RLIMIT_AS``) on each worker: ``pyspark.memory / spark.executor.cores`` (Spark's own
rule; cores default to 1, so in local mode every worker gets the whole setting). What
counts is therefore virtual memory, and a worker holds a good deal before any row:
measured here (tests/test_worker_memory.py, /proc/<worker>/status VmPeak), a worker that
ran a time-window pass over small ranges peaked at 1.38 GB of address space with pyarrow's
default allocator (mimalloc reserves large regions up front) and at 0.36 GB with the
system allocator; each further row of a range cost ~275 bytes of address space (4
columns). So when WaveSQL starts Spark with that limit it also makes workers use the
system allocator (``wavesql/spark.py``), and the budget is the worker's limit minus
:func:`worker_baseline`.
"""

from __future__ import annotations

from wavesql import settings
from wavesql.settings import parse_size

#: Without any setting: what one task may hold (the machine has 24 GB and two cores here;
#: a cluster sets spark.executor.pyspark.memory).
DEFAULT_BUDGET = 2 << 30
#: The fraction of the budget a planned range may fill.
HEADROOM = 0.5
#: Bytes a row costs a pass per column it reads or writes: the Arrow batch in, its numpy
#: arrays, intermediates and the Arrow batch out (measured as address space of a worker
#: running the time-window pass: ~275 bytes a row over 4 columns; module docstring).
BYTES_PER_COLUMN = 64
#: A worker's address space before its ranges' rows (module docstring): with the system
#: allocator, and with pyarrow's default (mimalloc), as measured here, rounded up.
BASELINE_SYSTEM_POOL = 384 << 20
BASELINE_MIMALLOC = 1536 << 20
#: The environment variable that picks pyarrow's allocator in a worker.
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


def budget(spark) -> int:
    """Bytes one Python task may hold (module docstring); 0 when a worker's limit leaves
    nothing beyond its baseline (every pass is then left to Spark)."""
    own = settings.get(spark, "wavesql.python.task_memory")
    if own:
        return own
    conf = spark.sparkContext.getConf()
    limit = conf.get("spark.executor.pyspark.memory", None)
    if not limit:
        return DEFAULT_BUDGET
    pool = conf.get(f"spark.executorEnv.{POOL_VARIABLE}", None)
    return worker_budget(limit, conf.get("spark.executor.cores", None), pool)


def worker_budget(pyspark_memory: str, executor_cores: str | None, pool: str | None) -> int:
    """What a Python worker may hold for rows under ``spark.executor.pyspark.memory`` =
    ``pyspark_memory`` (a bare number is MiB, as Spark reads it): Spark's per-worker share
    of it minus :func:`worker_baseline`, at least 0."""
    size = parse_size(pyspark_memory + "m" if pyspark_memory.strip().isdigit()
                      else pyspark_memory)
    share = size // max(1, int(executor_cores or 1))
    return max(0, share - worker_baseline(pool))


def worker_baseline(pool: str | None) -> int:
    """A worker's address space before any range's rows, by the allocator ``pool`` its
    pyarrow uses (``ARROW_DEFAULT_MEMORY_POOL``; unset: mimalloc)."""
    return BASELINE_SYSTEM_POOL if (pool or "").lower() == "system" else BASELINE_MIMALLOC


def row_bytes(columns: int) -> int:
    """Estimated bytes a row of ``columns`` columns costs a pass (time column included)."""
    return BYTES_PER_COLUMN * (max(1, columns) + 1)


def max_rows(spark, columns: int) -> int:
    """The most rows of ``columns`` columns one task may be planned to hold."""
    return int(HEADROOM * budget(spark) // row_bytes(columns))
