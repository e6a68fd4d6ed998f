"""RESAMPLE's result schema, written by the planner without Spark's analysis
(planner/analyze/temporal.py ``resample_columns``), against Spark's analysis of the very SQL the
RESAMPLE runs (the oracle): every atomic type as a value, a key and under each method,
type names as users write them (``INTEGER``, ``LONG``, ``DECIMAL``, ``NUMERIC(5, 2)``).

Binding used to ask Spark for it -- ~0.4 s of driver time per RESAMPLE on a quiet machine,
before any task runs. A difference here would make the direct pass declare a column's type
or nullability wrongly (planner/physical/direct_resample.py builds its result with it)."""

from __future__ import annotations

import itertools

import pytest

pytestmark = pytest.mark.spark

#: (type as written, more types as written) -- every atomic type Spark has, and aliases
TYPES = ["TINYINT", "smallint", "INTEGER", "long", "FLOAT", "real", "DOUBLE", "BOOLEAN",
         "STRING", "BINARY", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "DECIMAL",
         "DECIMAL(18, 4)", "numeric(5,2)", "dec(38,10)"]


def _analysed(spark, columns, time_col, method, keys):
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    from wavesql.planner.temporal import resample_sql

    # every column may hold NULLs, as the planner's stand-ins for binding are
    schema = StructType([StructField(n, _parse_datatype_string(t), True) for n, t in columns])
    spark.createDataFrame([], schema).createOrReplaceTempView("rs_in")
    try:
        sql = resample_sql("rs_in", columns, time_col, 1000, method, keys)
        return [(f.name, f.dataType.simpleString(), f.nullable)
                for f in spark.sql(sql).schema.fields]
    finally:
        spark.catalog.dropTempView("rs_in")


@pytest.mark.parametrize("method", ["linear", "prev", "zero", "null"])
def test_resample_schema_equals_sparks_analysis(spark, method):
    from wavesql.planner.analyze.temporal import resample_columns

    values = [(f"c{i}", t) for i, t in enumerate(TYPES)]
    for time_type, keyed in itertools.product(["TIMESTAMP", "timestamp_ltz"], [False, True]):
        columns = [("ts", time_type)] + values
        keys = ("c2", "c8") if keyed else ()  # an INTEGER and a STRING key
        got = resample_columns(columns, "ts", method, keys)
        assert got == _analysed(spark, columns, "ts", method, keys), (time_type, keys)


def test_resample_schema_leaves_other_types_to_spark():
    from wavesql.planner.analyze.temporal import resample_columns

    for typ in ("ARRAY<INT>", "STRUCT<a: INT>", "MAP<STRING, INT>", "INTERVAL DAY",
                "VARIANT"):
        assert resample_columns([("ts", "TIMESTAMP"), ("x", typ)], "ts", "prev") is None
