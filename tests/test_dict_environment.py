"""planner/dict_environment.py: the binder's environment without Spark. Its answers are
checked against hand-written cases and, where Spark runs, against Spark's own analyzer."""

import pytest

from wavesql.errors import WaveSQLError
from wavesql.planner import ir
from wavesql.planner.dict_environment import DictEnvironment, parse_ddl, spark_function_names


class Input:
    """A bound input as the binder hands it to ``analyze``: a relation with a schema."""

    def __init__(self, ddl):
        self.schema = parse_ddl(ddl)


TRADES = "sym STRING, px DOUBLE, qty BIGINT, ts TIMESTAMP, seg STRUCT<start: BIGINT, samples: ARRAY<FLOAT>>"

# (query, aliased so Spark and sqlglot name every column alike)
QUERIES = [
    "SELECT sym, avg(px) AS a, count(*) AS n FROM trades GROUP BY sym",
    "SELECT sym, px * qty AS notional, qty + 1 AS q1 FROM trades WHERE px > 1",
    "SELECT sym, lag(px) OVER (PARTITION BY sym ORDER BY ts) AS prev FROM trades",
    "SELECT seg.start AS s0, seg AS whole, cast(px AS INT) AS p FROM trades",
    "SELECT x.sym, x.m FROM (SELECT sym, max(px) AS m FROM trades GROUP BY sym) x",
    "SELECT timestamp_micros(unix_micros(ts)) AS t, unix_micros(ts) AS us FROM trades",
    "SELECT sym, collect_list(px) AS pxs FROM trades GROUP BY sym",
    "SELECT * FROM trades",
]


def test_parse_ddl_prints_types_as_spark_does():
    schema = parse_ddl("a INT, `b c` ARRAY<FLOAT>, d STRUCT<x: BIGINT, y: STRING>")
    assert schema == ir.Schema((ir.Field("a", "int"), ir.Field("b c", "array<float>"),
                                ir.Field("d", "struct<x:bigint,y:string>")))


def test_analyze_types_and_names_by_hand():
    env = DictEnvironment()
    got = env.analyze(QUERIES[0], (("trades", Input(TRADES)),), None)
    assert [(f.name, f.type) for f in got.fields] == [
        ("sym", "string"), ("a", "double"), ("n", "bigint")]
    unaliased = env.analyze("SELECT count(*), px FROM trades", (("trades", Input(TRADES)),), None)
    assert unaliased.names == ["count(*)", "px"]  # Spark would say count(1): documented


def test_unknown_column_and_tables_from_the_dict():
    env = DictEnvironment(tables={"refs": "sym STRING, name STRING"})
    with pytest.raises(WaveSQLError) as e:
        env.analyze("SELECT pxx FROM trades", (("trades", Input(TRADES)),), None)
    assert e.value.code == "UNKNOWN_COLUMN" and "`pxx`" in e.value.message
    joined = env.analyze("SELECT t.sym, r.name FROM trades t JOIN refs r ON t.sym = r.sym",
                         (("trades", Input(TRADES)),), None)
    assert joined.names == ["sym", "name"]
    assert env.spark_table_schema("REFS").names == ["sym", "name"]
    assert env.spark_table_schema("nope") is None


def test_constants_functions_parsing_and_topics():
    env = DictEnvironment(topics={"clicks": 3})
    assert env.constant("array(0.25, -1, 2)") == [0.25, -1, 2]
    assert env.constant("'x'") == "x" and env.constant("1000.0") == 1000.0
    with pytest.raises(WaveSQLError) as e:
        env.constant("array_repeat(1, 3)")
    assert e.value.code == "NOT_IMPLEMENTED"
    assert {"avg", "lag", "array_repeat", "timestamp_micros"} <= env.function_names()
    assert env.spark_parses("SELECT 1") and not env.spark_parses("SELEC 1 FROM")
    assert env.kafka_partitions({}, "clicks") == 3
    with pytest.raises(WaveSQLError) as e:
        env.kafka_partitions({}, "nope")
    assert e.value.code == "MISSING_TOPIC"


@pytest.mark.spark
def test_function_list_is_the_running_sparks(spark):
    live = {r[0].lower() for r in spark.sql("SHOW SYSTEM FUNCTIONS").collect()}
    assert spark_function_names() == live, \
        "regenerate planner/spark_functions.txt from SHOW SYSTEM FUNCTIONS"


@pytest.mark.spark
@pytest.mark.parametrize("query", QUERIES)
def test_analyze_agrees_with_sparks_analyzer(spark, query):
    df = spark.createDataFrame([], TRADES)
    df.createOrReplaceTempView("trades")
    try:
        want = [(f.name, f.dataType.simpleString()) for f in spark.sql(query).schema.fields]
    finally:
        spark.catalog.dropTempView("trades")
    got = DictEnvironment().analyze(query, (("trades", Input(TRADES)),), None)
    assert [(f.name, f.type) for f in got.fields] == want
