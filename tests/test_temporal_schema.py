"""RESAMPLE's and ASOF JOIN's result schemas, written by the planner without Spark's
analysis (planner/analyze/temporal.py ``resample_columns``, ``asof_columns``), against
Spark's analysis of the very SQL the operator runs (the oracle): every atomic type as a
value, a key and under each method or direction, type names as users write them
(``INTEGER``, ``LONG``, ``DECIMAL``, ``NUMERIC(5, 2)``).

Binding used to ask Spark for them -- ~0.4 s of driver time per operator on a quiet
machine, before any task runs. A difference here would make the direct passes declare a
column's type or nullability wrongly (planner/physical/direct_resample.py and
direct_asof.py build their results with it)."""

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


def _asof_analysed(spark, lcols, rcols, lalias, ralias, **kw):
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    from wavesql.planner.temporal import asof_join_relation

    for name, cols in (("asof_l", lcols), ("asof_r", rcols)):
        schema = StructType([StructField(n, _parse_datatype_string(t), True)
                             for n, t in cols])
        spark.createDataFrame([], schema).createOrReplaceTempView(name)
    try:
        sql = asof_join_relation("asof_l", "asof_r", lalias, ralias, lcols, rcols, **kw)
        return [(f.name, f.dataType.simpleString(), f.nullable)
                for f in spark.sql(sql).schema.fields]
    finally:
        for name in ("asof_l", "asof_r"):
            spark.catalog.dropTempView(name)


@pytest.mark.parametrize("outer", [False, True])
def test_asof_schema_equals_sparks_analysis(spark, outer):
    """The ASOF JOIN's relation: a struct per side, copies of the columns of one side only
    (a shared name and the aliases hidden), over every atomic type, keyed or not, both
    directions, strict or inclusive."""
    from wavesql.planner.analyze.temporal import asof_columns

    lcols = [("ts", "TIMESTAMP"), ("k", "STRING"), ("shared", "INT")] + [
        (f"l{i}", t) for i, t in enumerate(TYPES)]
    rcols = [("ts", "timestamp"), ("k", "string"), ("shared", "double"), ("t", "long")] + [
        (f"r{i}", t) for i, t in enumerate(TYPES)]
    for keys, direction, inclusive in [((), "backward", True), ((("k", "k"),), "forward",
                                                                 False)]:
        got = asof_columns(lcols, rcols, "t", "q")
        want = _asof_analysed(spark, lcols, rcols, "t", "q", left_time="ts", right_time="ts",
                              keys=keys, inclusive=inclusive, outer=outer,
                              direction=direction)
        assert got == want, (keys, direction)
    assert asof_columns([("ts", "TIMESTAMP"), ("a b", "INT")], [("ts", "TIMESTAMP")], "l",
                        "r") is None
