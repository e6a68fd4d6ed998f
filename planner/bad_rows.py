"""Malformed CSV/JSON rows: found by Spark's own parser, never turned into silent NULLs.

Spark reads text formats in one of three modes. ``PERMISSIVE`` (its default) turns a field
it cannot parse into NULL -- a silently wrong row. ``FAILFAST`` raises, but its error names
neither the file nor, usefully, the row, and it stops at the first one. ``DROPMALFORMED``
loses rows. WaveSQL reads ``PERMISSIVE`` *with a corrupt-record column*: Spark then keeps
the raw text of every row it could not parse whole, and this module decides what happens
to such a row:

* in a batch query the query fails with ``MALFORMED_ROW``, naming the file and quoting the
  record (``fail_on_malformed``);
* in a continuous query the row goes to the query's quarantine with the reason, and is
  counted (``split_malformed``; ``streaming/runner.py``).

One trap: Spark prunes the columns a query does not use *before* parsing them, so
``SELECT sym FROM trades`` would never notice a bad ``px`` (and the corrupt-record column
stays NULL). The check below references every column of the row in the failing branch,
which keeps them all required, so the verdict never depends on the columns a query reads.
"""

from __future__ import annotations

from wavesql.sqltext import quote

#: The corrupt-record column WaveSQL asks Spark for (the ``__wavesql_`` prefix is the
#: planner's own namespace).
CORRUPT_COLUMN = "__wavesql_corrupt"

#: Formats whose rows are parsed from text (Parquet rows are typed by the file).
TEXT_FORMATS = ("csv", "json")


def reader_options(fmt: str) -> dict:
    """Reader options that keep malformed rows, marked, instead of failing or nulling."""
    if fmt not in TEXT_FORMATS:
        return {}
    return {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}


def schema_ddl(ddl: str, fmt: str) -> str:
    """The stream's schema plus the corrupt-record column, for a text format."""
    return f"{ddl}, {quote(CORRUPT_COLUMN)} STRING" if fmt in TEXT_FORMATS else ddl


def applies(stream, options: dict) -> bool:
    """Whether the quarantine/fail logic applies: a text format whose OPTIONS did not ask
    for a Spark mode of their own (a user's explicit ``mode`` is honoured as written)."""
    return stream.format in TEXT_FORMATS and "mode" not in dict(stream.options)


def fail_on_malformed(df, columns: list[str], where: str = "_metadata.file_path"):
    """``df`` without its corrupt-record column; a malformed row fails the query with
    ``MALFORMED_ROW`` naming the file (the column ``where``: a Kafka stream's records say
    ``kafka:<topic>/<partition>/<offset>``) and quoting the record."""
    from pyspark.sql import functions as F

    bad = F.col(CORRUPT_COLUMN).isNotNull()
    message = F.concat(
        F.lit("MALFORMED_ROW: malformed row in "), F.col(where),
        F.lit(": `"), F.col(CORRUPT_COLUMN),
        # every column, so that none is pruned before parsing (see the module docstring)
        F.lit("` (read as "), F.to_json(F.struct(*[F.col(quote(c)) for c in columns])),
        F.lit(") [MALFORMED_ROW]"))
    checked = df.where(F.when(bad, F.raise_error(message)).otherwise(F.lit(True)))
    return checked.drop(CORRUPT_COLUMN)


def split_malformed(df, columns: list[str]):
    """``(good, bad)``: ``bad`` holds the malformed rows as
    ``(_file, _record, _reason)``; ``good`` the others without the corrupt-record column."""
    from pyspark.sql import functions as F

    flagged = df.withColumn("__wavesql_file", F.col("_metadata.file_path"))
    good = flagged.where(F.col(CORRUPT_COLUMN).isNull()).drop(CORRUPT_COLUMN, "__wavesql_file")
    bad = flagged.where(F.col(CORRUPT_COLUMN).isNotNull()).select(
        F.col("__wavesql_file").alias("_file"), F.col(CORRUPT_COLUMN).alias("_record"),
        F.concat(F.lit("malformed: read as "),
                 F.to_json(F.struct(*[F.col(quote(c)) for c in columns]))).alias("_reason"))
    return good, bad
