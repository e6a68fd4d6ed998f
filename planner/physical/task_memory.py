"""How much one Python task may hold, so that no pass is planned that would kill a worker.

The direct passes (planner/physical/chunked_windows.py, fused_chains.py and
direct_resample.py) hand each Python task whole ranges of rows: a range's own rows
plus the context its frames reach. A wide frame (``RANGE 1 DAY`` over a week) or a long
tumbling window makes a few huge ranges, and a Python worker that allocates past its limit
dies (``spark.executor.pyspark.memory`` is enforced per worker as an address-space limit;
without it the machine's memory is the limit). So the planner estimates what a range holds
-- rows times :func:`row_bytes` -- before running anything and cuts the work finer until
every range fits the budget, or, when even the finest cut does not (a frame whose context
alone is too large), leaves the windows to Spark, whose window operator spills to disk.

The budget per task (:func:`budget`): ``SET wavesql.python.task_memory = '512m'``;
otherwise ``spark.executor.pyspark.memory`` divided by the cores of an executor (Spark gives
each concurrent worker that share); otherwise :data:`DEFAULT_BUDGET`. Half of it is used
(:data:`HEADROOM`): estimates come from row-group statistics or a mean density, and a burst
of rows inside a range is not in them.
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
#: arrays, intermediates and the Arrow batch out (measured on the TiLT passes: 80-120 bytes
#: a row over 3-4 columns).
BYTES_PER_COLUMN = 32


def budget(spark) -> int:
    """Bytes one Python task may hold (module docstring)."""
    own = settings.get(spark, "wavesql.python.task_memory")
    if own:
        return own
    worker = spark.sparkContext.getConf().get("spark.executor.pyspark.memory", None)
    if worker:
        cores = int(spark.sparkContext.getConf().get("spark.executor.cores", "1") or 1)
        master = spark.sparkContext.master or ""
        if master.startswith("local"):  # one executor of defaultParallelism cores
            cores = max(1, spark.sparkContext.defaultParallelism)
        # a bare number is MiB here, as Spark reads this setting
        size = parse_size(worker + "m" if worker.strip().isdigit() else worker)
        return max(1, size // max(1, cores))
    return DEFAULT_BUDGET


def row_bytes(columns: int) -> int:
    """Estimated bytes a row of ``columns`` columns costs a pass (time column included)."""
    return BYTES_PER_COLUMN * (max(1, columns) + 1)


def max_rows(spark, columns: int) -> int:
    """The most rows of ``columns`` columns one task may be planned to hold."""
    return max(1, int(HEADROOM * budget(spark) // row_bytes(columns)))
