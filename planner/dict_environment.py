"""The binder's environment without Spark: tables, functions and topics from dicts, and the
schema of a Spark SQL fragment from sqlglot's type annotation.

The session binds against Spark itself (``planner.spark_environment``): Spark's analyzer is
the authority on what a Spark SQL fragment means. This environment answers the same
questions offline so the planner's rules can be tested, and a plan inspected, with no JVM
(``tests/test_plan_fixtures.py`` binds every fixture query with it). Where it differs from
Spark, it says so rather than guessing:

- result types come from ``sqlglot.optimizer.annotate_types``; a function sqlglot does not
  type gives the type ``unknown``;
- an unaliased expression is named by its SQL text (``count(*)``), where Spark writes its
  own form (``count(1)``);
- function names are Spark's built-ins as listed in ``planner/spark_functions.txt``
  (written from ``SHOW FUNCTIONS``; a Spark test keeps it equal to the running Spark's);
- a constant expression is folded only when it is a literal or an ``array(...)`` of them.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.annotate_types import annotate_types
from sqlglot.optimizer.qualify import qualify
from sqlglot.schema import MappingSchema

from wavesql.errors import WaveSQLError

from . import ir

FUNCTIONS_FILE = Path(__file__).with_name("spark_functions.txt")


@lru_cache(maxsize=1)
def spark_function_names() -> frozenset[str]:
    """Spark's built-in functions (lower case), as ``planner/spark_functions.txt`` lists."""
    return frozenset(line.strip().lower() for line in FUNCTIONS_FILE.read_text().splitlines()
                     if line.strip() and not line.startswith("#"))


class DictEnvironment:
    """An :class:`~wavesql.planner.bind.Environment` from plain data.

    Parameters
    ----------
    tables : dict
        Spark table name -> schema (an ``ir.Schema`` or a DDL string ``"a INT, b STRING"``).
    functions : iterable of str, optional
        Names Spark can call; default Spark's built-ins (:func:`spark_function_names`).
    topics : dict
        Kafka topic -> partition count.
    """

    def __init__(self, tables: dict | None = None, functions=None, topics: dict | None = None):
        self.tables = {k.lower(): (v if isinstance(v, ir.Schema) else parse_ddl(v))
                       for k, v in (tables or {}).items()}
        self.functions = (frozenset(f.lower() for f in functions) if functions is not None
                          else spark_function_names())
        self.topics = dict(topics or {})

    # -- Environment ---------------------------------------------------------------------
    def spark_table_schema(self, name: str) -> ir.Schema | None:
        return self.tables.get(name.lower())

    def spark_table_names(self) -> list[str]:
        return sorted(self.tables)

    def function_names(self) -> frozenset[str]:
        return self.functions

    def spark_parses(self, sql: str) -> bool:
        try:
            sqlglot.parse(sql, read="spark")
        except SqlglotError:
            return False
        return True

    def kafka_partitions(self, options, topic: str) -> int:
        if topic not in self.topics:
            raise WaveSQLError("MISSING_TOPIC", f"Kafka topic `{topic}` does not exist",
                               hint="create the topic first")
        return self.topics[topic]

    def constant(self, sql: str):
        node = sqlglot.parse_one(sql, read="spark")
        value = _literal_value(node)
        if value is _NOT_CONSTANT:
            raise WaveSQLError("NOT_IMPLEMENTED", f"cannot fold `{sql}` without Spark",
                               hint="the dict environment folds literals and array(...) only")
        return value

    def analyze(self, sql: str, inputs, source_offset: int | None) -> ir.Schema:
        tables = {name: rel.schema for name, rel in inputs}
        tables.update({k: v for k, v in self.tables.items() if k not in tables})
        schema = MappingSchema({_key(k): {f.name: _sqlglot_type(f.type) for f in s.fields}
                                for k, s in tables.items()}, dialect="spark")
        tree = sqlglot.parse_one(sql, read="spark")
        for select in _selects(tree):  # Spark names an unaliased expression by its text
            for e in list(select.expressions):
                if not isinstance(e, (exp.Alias, exp.Column, exp.Star)):
                    e.replace(exp.alias_(e.copy(), e.sql("spark"), quoted=True))
        for call in list(tree.find_all(exp.Anonymous)):  # typed as Spark types them
            known = _RESULT_TYPES.get(str(call.this).lower())
            if known:
                call.replace(exp.cast(call.copy(), known, dialect="spark"))
        try:
            typed = annotate_types(qualify(tree, schema=schema, dialect="spark",
                                           quote_identifiers=False),
                                   schema=schema, dialect="spark")
        except OptimizeError as err:
            column = re.match(r"Column '(.+)' could not be resolved", str(err))
            if column:
                raise WaveSQLError("UNKNOWN_COLUMN", f"unknown column `{column[1]}`",
                                   query=sql) from None
            raise WaveSQLError("ANALYSIS_ERROR", str(err).split(". Line:")[0],
                               query=sql) from None
        return ir.Schema(tuple(ir.Field(e.alias_or_name, _spark_type(e.type))
                               for e in typed.selects))


#: Result types of Spark functions sqlglot leaves untyped, which WaveSQL's own SQL uses.
_RESULT_TYPES = {"timestamp_micros": "TIMESTAMP", "timestamp_millis": "TIMESTAMP",
                 "window": "STRUCT<start: TIMESTAMP, end: TIMESTAMP>"}


def parse_ddl(ddl: str) -> ir.Schema:
    """``"a INT, b ARRAY<FLOAT>"`` -> ``ir.Schema`` (types as Spark prints them)."""
    fields = []
    for column in sqlglot.parse_one(f"CREATE TABLE t ({ddl})", read="spark").this.expressions:
        fields.append(ir.Field(column.name, _spark_type(column.args["kind"])))
    return ir.Schema(tuple(fields))


def _key(name: str) -> str:
    # sqlglot looks tables up by their normalized (quoted-as-is) name
    return f"`{name}`" if not re.fullmatch(r"[A-Za-z_]\w*", name) else name


def _sqlglot_type(spark_type: str) -> str:
    text = spark_type.strip()
    return "UNKNOWN" if text.lower() in ("unknown", "") else text


def _spark_type(data_type) -> str:
    """sqlglot's DataType as Spark's simpleString (``array<float>``, ``struct<a:int>``)."""
    if data_type is None or data_type.this == exp.DataType.Type.UNKNOWN:
        return "unknown"
    text = re.sub(r"\s*([:,<>])\s*", r"\1", data_type.sql("spark").lower())
    return re.sub(r"`([A-Za-z_]\w*)`", r"\1", text)  # struct field names, unquoted


def _selects(tree: exp.Expression) -> list[exp.Select]:
    """The SELECTs whose columns are the result's (both sides of a set operation)."""
    if isinstance(tree, exp.SetOperation):
        return _selects(tree.left) + _selects(tree.right)
    if isinstance(tree, exp.Subquery):
        return _selects(tree.this)
    return [tree] if isinstance(tree, exp.Select) else []


_NOT_CONSTANT = object()


def _literal_value(node: exp.Expression):
    if isinstance(node, exp.Paren):
        return _literal_value(node.this)
    if isinstance(node, exp.Neg):
        inner = _literal_value(node.this)
        return _NOT_CONSTANT if inner is _NOT_CONSTANT else -inner
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this.rstrip("DdFfLl")
        return float(text) if re.search(r"[.eE]", text) or node.this[-1:] in "DdFf" \
            else int(text)
    if isinstance(node, exp.Boolean):
        return node.this
    if isinstance(node, exp.Array):
        values = [_literal_value(e) for e in node.expressions]
        return _NOT_CONSTANT if _NOT_CONSTANT in values else values
    return _NOT_CONSTANT
