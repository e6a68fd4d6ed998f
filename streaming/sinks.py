"""Sink folders in the sink's format: how a result is written and read back.

A sink (``CREATE SINK s TO 'out/' FORMAT parquet | csv | json``) receives one folder per
micro-batch (``batch=N``, see :mod:`wavesql.jobs`); this module is the one place that knows
how each format is written, so the continuous runner, ``INSERT INTO`` jobs and late-row
sinks write the same way. Every writer here writes a *whole* folder (mode overwrite): the
callers write aside and rename into place, so a reader never sees half a batch.

CSV is written with a header line and Spark's ISO-8601 timestamps, so a CSV sink can be read
back as a WaveSQL stream (``FORMAT csv`` reads with ``header=true``) with the same columns.
CSV has no nested values: a result with arrays, structs or maps (signal segments) cannot go
to a CSV sink -- :func:`flat_format_problem` says which column, at bind time.
"""

from __future__ import annotations

FORMATS = ("parquet", "csv", "json")

# Spark's readers/writers, per format: options that make a written folder read back as it was.
_OPTIONS = {"parquet": {}, "csv": {"header": "true"}, "json": {}}


def write(df, path: str, fmt: str = "parquet") -> None:
    """Write ``df`` as the folder ``path`` (replacing it) in format ``fmt``."""
    df.write.mode("overwrite").options(**_OPTIONS[fmt]).format(fmt).save(str(path))


def write_all(parts: list, path: str, fmt: str = "parquet") -> None:
    """The rows of every DataFrame of ``parts`` (same columns) as one folder, as
    :func:`write`; nothing when ``parts`` is empty."""
    if not parts:
        return
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    write(frame, path, fmt)


def count(spark, path: str, fmt: str = "parquet", schema: str | None = None) -> int:
    """Rows in a folder :func:`write` wrote (Parquet: from the footers, no Spark job)."""
    if fmt == "parquet":
        return parquet_rows(path)
    reader = spark.read.options(**_OPTIONS[fmt]).format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(str(path)).count()


def parquet_rows(path) -> int:
    """Rows in a local Parquet folder Spark wrote, summed from its files' footers: a Spark
    ``count()`` is a job (0.1-0.14 s per micro-batch, a third of some)."""
    from pathlib import Path

    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(Path(path).glob("*.parquet"))
               if not f.name.startswith(("_", ".")))  # (hidden from Spark's readers too)


def flat_format_problem(fmt: str, fields) -> str | None:
    """The first field (``name type``) a ``fmt`` file cannot hold, or None.

    ``fields`` are ``planner.ir.Field``-like objects with ``name`` and ``type`` (Spark DDL).
    """
    if fmt != "csv":
        return None
    for f in fields:
        kind = str(f.type).strip().lower()
        if kind.startswith(("array", "struct", "map", "variant")):
            return f"{f.name} {f.type}"
    return None
