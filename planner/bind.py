"""``bind``: parsed statement (sqlglot AST) + catalog -> typed IR.

The binder resolves every name WaveSQL owns -- streams, signals, views, sinks, signal
functions, DDL types, formats, paths, rates -- and raises a positioned ``WaveSQLError`` with a
hint for anything wrong, before any Spark job starts.

Column names and types inside plain Spark SQL are resolved by Spark's analyzer through the
:class:`Environment` (``analyze``), which runs no job. Why not resolve them here: Spark SQL's
scoping rules (lateral column aliases, LATERAL VIEW, PIVOT, lambda variables, outer
references, ``GROUP BY ALL``...) are large and evolving; a second implementation would
disagree with Spark on real queries and break the promise that a query Spark accepts runs
unchanged. Spark's analysis errors are translated back into WaveSQL errors at the user's
position (``wavesql.spark_errors.translate_spark_error``).

This module is the entry point and the dispatcher: :func:`bind` sends each kind of
statement to its binder. A query goes through :func:`bind_query`, which applies the
analysis rules of ``planner.analyze.RULES`` in order (one module each, with an example)
and has Spark type the SQL they leave; DDL binds in ``planner/analyze/ddl.py``, INSERT
INTO a sink in ``planner/analyze/insert_into.py``, name resolution in
``planner/analyze/resolve.py``.
"""

from __future__ import annotations

import re
from typing import Protocol

from sqlglot import exp

from wavesql.dialect import Statement as ParsedStatement
from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql
from wavesql.errors import Span, WaveSQLError

from . import ir
from .analyze import RULES, ddl
from .analyze.checks import check_no_wavesql_constructs
from .analyze.context import BindContext, Found
from .analyze.insert_into import bind_insert_into_sink
from .analyze.relation_to_stream import bind_relation_to_stream
from .analyze.resolve import bind_inputs, resolve_relation

__all__ = ["bind", "bind_query", "BindContext", "Environment"]


class Environment(Protocol):
    """What the binder needs from the engine; the session implements it over Spark."""

    def spark_table_schema(self, name: str) -> ir.Schema | None:
        """Schema of a table/temp view in Spark's catalog, or None if there is none."""

    def spark_table_names(self) -> list[str]:
        """Names of Spark's tables and temp views (for hints)."""

    def function_names(self) -> frozenset[str]:
        """Lower-cased names of every function Spark can call (builtin and registered)."""

    def spark_parses(self, sql: str) -> bool:
        """Whether Spark's parser accepts ``sql`` (for statements sqlglot cannot parse)."""

    def analyze(self, sql: str, inputs: tuple[tuple[str, ir.Relation], ...],
                source_offset: int | None) -> ir.Schema:
        """Result schema of ``sql`` over ``inputs``; raises a translated WaveSQLError."""

    def constant(self, sql: str):
        """The value of a constant Spark expression (no columns): a Python value (numbers,
        strings, lists of them); raises a translated WaveSQLError."""

    def kafka_partitions(self, options, topic: str) -> int:
        """The partition count of a Kafka topic; raises ``KAFKA_UNREACHABLE`` or
        ``MISSING_TOPIC`` (sources/kafka.py)."""


def bind(stmt: ParsedStatement, catalog, env: Environment, base_dir: str = ".",
         path_roots: tuple[str, ...] = ()) -> ir.Statement:
    """Bind one parsed statement against the catalog.

    Parameters
    ----------
    stmt : wavesql.dialect.Statement
        From ``wavesql.dialect.parse_statements``: the AST plus its original text and offsets.
    catalog : wavesql.catalog.Catalog
    env : Environment
        Spark-side facts (tables, functions, analysis). ``wavesql.session`` provides it.
    base_dir : str
        Directory against which relative paths in DDL are resolved.
    path_roots : tuple of str
        Folders a relative path may not lead out of (``PATH_ESCAPES``; a query file's
        statements: wavesql/session.py ``path_roots``); empty: no such rule.

    Returns
    -------
    ir.Statement
    """
    try:
        return _bind(stmt, catalog, env, base_dir, path_roots)
    except WaveSQLError as err:
        # Every error about the user's text points somewhere in it: one raised far from the
        # AST (the catalog store, Spark's analysis of generated SQL) gets the statement.
        if err.span is None and err.query in (None, "", getattr(env, "user_text", None)):
            err.span = Span(stmt.start, stmt.end)
        raise


def _bind(stmt: ParsedStatement, catalog, env: Environment, base_dir: str,
          path_roots: tuple[str, ...] = ()) -> ir.Statement:
    ctx = BindContext(catalog, env, base_dir, path_roots, binder=bind_query)
    if stmt.error is not None:
        # sqlglot could not parse it; if Spark can, it is Spark SQL WaveSQL has no AST for:
        # run the text as is, with the catalog objects it names made visible to Spark.
        if not env.spark_parses(stmt.text):
            raise stmt.error
        # every identifier is a candidate name; only readable catalog objects are inputs
        # (an alias that happens to name a sink is just an alias)
        inputs = {n.lower(): resolve_relation(n, None, ctx) for n in stmt.names
                  if catalog.get(n) is not None and catalog.get(n).kind != "SINK"}
        return ir.SparkCommand(stmt.text, tuple(inputs.items()))
    return _bind_statement(stmt.node, stmt, ctx)


def _bind_statement(node: exp.Expression, stmt: ParsedStatement, ctx: BindContext) -> ir.Statement:
    if isinstance(node, wn.Explain):
        mode = (node.args.get("kind") or "IR").upper()
        target = node.this
        if mode == "AST":
            return ir.Explain(mode, repr(target), None)
        inner = _explained_statement(stmt, target)
        if mode != "STREAM":
            return ir.Explain(mode, inner.text, _bind_statement(inner.node, inner, ctx))
        bound = without_emit(inner)  # (text kept: it is read)
        try:
            return ir.Explain(mode, inner.text, _bind_statement(bound.node, bound, ctx))
        except WaveSQLError as err:  # it may run in parts (ir.Explain.unbound)
            return ir.Explain(mode, inner.text, None, unbound=err)
    if isinstance(node, wn.CreateStream):
        return ddl.bind_create_stream(node, ctx)
    if isinstance(node, wn.DropObject):
        return ddl.bind_drop(node, ctx)
    if isinstance(node, wn.ShowObjects):
        kind = (node.args.get("kind") or "").upper().rstrip("S") or None
        return ir.ShowObjects(None if kind in (None, "OBJECT", "ALL") else kind)
    if isinstance(node, exp.Describe):
        return ddl.bind_describe(node, stmt, ctx)
    show_functions = ddl.show_functions(node, stmt)
    if show_functions is not None:
        return show_functions
    if isinstance(node, exp.Create) and (node.args.get("kind") or "").upper() == "VIEW":
        view = ddl.bind_view(node, ctx)
        if view is not None:
            return view
    if isinstance(node, exp.Drop) and (node.args.get("kind") or "").upper() == "VIEW":
        drop = ddl.bind_drop_view(node, ctx)
        if drop is not None:
            return drop
    if isinstance(node, exp.Query):
        return ir.QueryStatement(bind_query(node, stmt, ctx, top_level=True))
    if isinstance(node, wn.RelationToStream):
        return ir.QueryStatement(bind_relation_to_stream(node, ctx))
    if isinstance(node, exp.Insert):
        insert = bind_insert_into_sink(node, stmt, ctx)
        if insert is not None:
            return insert
    if isinstance(node, exp.Set):
        ddl.check_settings(node)
    # Anything else -- SET, CACHE TABLE, CREATE TEMP VIEW, CREATE TABLE, INSERT INTO a Spark
    # table, unmodelled commands -- is Spark's business: run the user's text as is, with the
    # catalog objects it mentions made visible to Spark.
    check_no_wavesql_constructs(node)
    return ir.SparkCommand(stmt.text, bind_inputs(node, ctx, strict=False))


_EXPLAIN_PREFIX = re.compile(
    rf"\s*EXPLAIN(\s+({'|'.join(wn.EXPLAIN_KINDS)})\b)?\s+", re.IGNORECASE)


def without_emit(stmt: ParsedStatement) -> ParsedStatement:
    """``stmt`` without its ``EMIT FINAL|CHANGES``, the clause's text blanked so that
    Spark's error positions still map back: how a continuous query emits is its runner's
    business (``streaming/`` reads it from the statement), so a continuous query -- and
    ``EXPLAIN STREAM`` -- binds without it. (A batch query keeps refusing EMIT without a
    window.)"""
    emits = list(stmt.node.find_all(wn.Emit))
    if not emits:
        return stmt
    node = stmt.node.copy()
    for clause in list(node.find_all(wn.Emit)):
        clause.pop()
    text = stmt.text
    for clause in emits:
        span = Span.of(clause)
        if span is not None:
            a, b = span.start - stmt.start, span.end - stmt.start
            text = text[:a] + " " * (b - a) + text[b:]
    return ParsedStatement(node, text, stmt.start, stmt.end)


def _explained_statement(stmt: ParsedStatement, target: exp.Expression) -> ParsedStatement:
    """The statement after ``EXPLAIN [mode]``, with its own text and offsets in the user's."""
    match = _EXPLAIN_PREFIX.match(stmt.text)
    cut = match.end() if match else 0
    return ParsedStatement(target, stmt.text[cut:], stmt.start + cut, stmt.end)


def bind_query(node: exp.Expression, stmt: ParsedStatement | None, ctx: BindContext,
               top_level: bool = False) -> ir.Relation:
    """Bind a query: apply the analysis rules, then have Spark type the SQL they leave.

    ``stmt`` is the query's own text and offsets when it has any (a top-level query, the
    query of an INSERT); views, CTEs and subqueries bound on their own have none. The
    rules reach this function again through ``ctx.bind_query``.
    """
    given, found = node, Found()
    for rule in RULES:
        node = rule(node, ctx, found)
    inputs = found.inputs
    # Plain Spark SQL at the top level: hand Spark the user's exact text, so that Spark sees
    # what the user typed and its error positions map back one to one.
    if top_level and stmt is not None and not found.made and not found.binned \
            and node is given:
        sql, offset = stmt.text, stmt.start
    else:
        sql, offset = to_spark_sql(node), None
    schema = ctx.env.analyze(sql, inputs, offset)
    bounded = all(r.bounded for _, r in inputs)
    return ir.SqlQuery(sql, inputs, schema, bounded, offset, tree=node)
