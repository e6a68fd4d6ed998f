"""Arrow helpers shared by WaveSQL's readers (no Spark import)."""

from __future__ import annotations


def conform(batch, target):
    """The batch with exactly Spark's columns and Arrow types (names, order, nullability):
    ``mapInArrow`` refuses a batch whose schema differs from the one it declared."""
    import pyarrow as pa

    if batch.schema.equals(target):
        return batch
    arrays = []
    for field in target:
        col = batch.column(field.name)
        arrays.append(col if col.type.equals(field.type) else col.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)
