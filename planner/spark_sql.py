"""Spark SQL over the planner's DataFrames: each input visible to SQL text as a view.

Spark resolves names in SQL text only through views, so the planner registers each input
under a name while Spark analyses one statement (:func:`temp_views`,
:func:`run_sql_frames`) and leaves the user's own temporary views as they were; Spark's
analysis errors come back as WaveSQL errors positioned in the user's text.
"""

from __future__ import annotations

from contextlib import contextmanager

from wavesql.spark_errors import translate_spark_error
from wavesql.sqltext import quote

#: Prefix of the planner's own temporary views (never a user's).
INTERNAL_PREFIX = "__wavesql_"


@contextmanager
def temp_views(spark, frames):
    """Each ``(name, DataFrame)`` of ``frames`` visible as a temporary view while the block
    runs (Spark resolves names in SQL text only through views). Afterwards every name is as
    it was: a temporary view the user had under that name is put back, any other is
    dropped -- a WaveSQL statement never replaces or drops a view of the user's Spark
    session, and nothing it registered answers for a later statement. DataFrames made in
    the block keep their resolved plans."""
    saved: dict[str, tuple[str, object]] = {}
    try:
        for name, df in frames:
            if name.lower() not in saved:
                saved[name.lower()] = (name, None if name.startswith(INTERNAL_PREFIX)
                                       else _temp_view(spark, name))
            df.createOrReplaceTempView(quote(name))  # Spark parses it: any name, quoted
        yield
    finally:
        for name, previous in saved.values():
            if previous is None:
                spark.catalog.dropTempView(name)
            else:
                previous.createOrReplaceTempView(quote(name))


def _temp_view(spark, name: str):
    """The session's temporary view ``name`` as a DataFrame, or None if there is none."""
    try:
        exists = spark._jsparkSession.sessionState().catalog().getTempView(name).isDefined()
    except Exception:  # noqa: BLE001 -- not classic Spark: ask the public catalog
        try:
            exists = spark.catalog.getTable(name).isTemporary
        except Exception:  # noqa: BLE001
            exists = False
    if not exists:
        return None
    return spark.table(quote(name))


def run_sql_frames(sql: str, frames, rt, offset: int | None):
    """``spark.sql(sql)`` with each ``(name, DataFrame)`` of ``frames`` visible as a
    temporary view while Spark analyses ``sql`` (the session's views as they were after);
    ``rt``: the statement's ``planner.lower.Runtime`` (its Spark session, the user's text)."""
    from pyspark.errors import PySparkException

    try:
        with temp_views(rt.spark, frames):
            return rt.spark.sql(sql)
    except PySparkException as err:
        raise translate_spark_error(err, sql, rt.user_text or sql, offset) from None
