"""How a continuous query reads a catalog stream.

:func:`stream_source` is the stream read live (Spark's file source, or its Kafka source),
which every runner over streams starts from; :func:`reader_settings` the schema and reader
options its files are read with -- also when the re-evaluating runner reads a batch's
files itself, whole (:mod:`.files`) -- so that both reads mark malformed CSV/JSON rows the
same way for the quarantine (``planner/bad_rows.py``).
"""

from __future__ import annotations

from wavesql.catalog import objects as cat
from wavesql.planner import bad_rows, ir
from wavesql.planner.lower import stream_reader_options


def stream_source(spark, s: cat.StreamDef, max_files: int | None = None,
                  partition: int | None = None, skip_missing: bool = False):
    """Stream ``s`` read live: its columns, the corrupt-record column of a text format, and
    ``__file`` (the file a row came from; a Kafka record's ``kafka:<topic>/<p>/<offset>``).

    A Kafka stream is read through Spark's Kafka source (its offsets in the query's
    checkpoint), ``partition`` alone when given; ``max_files`` (files per micro-batch)
    does not apply to it (its OPTIONS may set ``maxOffsetsPerTrigger``). ``skip_missing``:
    a file listed for a micro-batch and removed before the batch reads it is skipped
    (Spark's ``ignoreMissingFiles``) -- for a runner that records such files itself
    (streaming/files.py ``describe_vanished``), so that the skip is never silent."""
    from pyspark.sql import functions as F

    from wavesql.sources import kafka

    if s.source == "kafka":
        return kafka.parse(kafka.load(spark, s, streaming=True, partition=partition), s)
    ddl, options = reader_settings(s)
    reader = spark.readStream.format(s.format).schema(ddl).options(**options)
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    if skip_missing:
        reader = reader.option("ignoreMissingFiles", "true")
    return reader.load(s.path).withColumn("__file", F.input_file_name())


def reader_settings(s: cat.StreamDef) -> tuple[str, dict]:
    """(schema DDL, reader options) a continuous query reads stream ``s``'s files with."""
    options = stream_reader_options(s)
    ddl = ir.Schema.of_columns(s.columns).ddl()
    if bad_rows.applies(s, options):
        # malformed CSV/JSON rows are marked, then quarantined (planner/bad_rows.py)
        options.update(bad_rows.reader_options(s.format))
        ddl = bad_rows.schema_ddl(ddl, s.format)
    return ddl, options
