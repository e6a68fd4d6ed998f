"""``EMIT CHANGES`` on the state store: the result rows not final yet, batch after batch.

EMIT CHANGES emits, in every micro-batch, every result row not final yet (``_final =
false``) with its value over the rows so far. Spark calls a bucket's kernel only when the
bucket gets rows or one of its timers fires -- and a kernel's timer fires as soon as one
of its rows (OVER windows) or grid points (RESAMPLE) becomes final. So a bucket that is
not called has the same rows not final yet as in the batch before, with the same values:
its rows are carried from that batch, and only the called buckets' are evaluated anew.

The driver keeps each batch's rows not final yet as Parquet under
``<checkpoint>/pending/<batch>`` (the batch's rows not final yet only: what it outputs
anyway); batch N reads the record of the latest batch before N -- so a batch redone after
a crash reads what its first run read -- and replaces its own. The last two are kept.
"""

from __future__ import annotations

from wavesql import storage
from wavesql.errors import WaveSQLError


def not_final(spark, checkpoint: str, batch_id: int, fresh, called, bucket_sql: str):
    """The batch's result rows not final yet: ``fresh`` (the called buckets' rows, evaluated
    this batch) and the rows of the batch before whose bucket (``bucket_sql`` over a result
    row: the bucket it came from) is not in ``called`` (a frame of one column ``__b``: the
    buckets this batch called). Written as this batch's record and read back from it (the
    rows are computed once)."""
    from pyspark.sql import functions as F

    folder = storage.join(checkpoint, "pending")
    earlier = sorted(int(n) for n, is_dir in storage.children(folder)
                     if is_dir and n.isdigit() and int(n) < batch_id)
    rows = fresh
    if earlier:
        before = spark.read.schema(fresh.schema).parquet(
            storage.join(folder, f"{earlier[-1]:09d}"))
        carried = (before.withColumn("__b", F.expr(bucket_sql))
                   .join(called.distinct(), "__b", "left_anti").drop("__b"))
        rows = fresh.unionByName(carried)
    elif batch_id:  # every batch keeps its record: the one before this is missing
        raise WaveSQLError(
            "CHECKPOINT_CORRUPT", f"{folder} holds no record of the result rows not final yet "
            f"before batch {batch_id}: the rows of the buckets this batch does not call "
            "cannot be emitted", hint="start the query from a fresh checkpoint")
    mine = storage.join(folder, f"{batch_id:09d}")
    rows.write.mode("overwrite").parquet(mine)
    for old in earlier[:-1]:
        storage.delete(storage.join(folder, f"{old:09d}"), recursive=True)
    return spark.read.schema(fresh.schema).parquet(mine)
