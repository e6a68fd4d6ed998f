"""Name resolution: what a table name in a query reads.

A name is, in this order, an input an enclosing query's rules made (read by the text of
a CTE or subquery of that query bound on its own: ``BindContext.outer``), a catalog
object (a stream, a signal, a view -- bound from its SQL, so a view reads what its body
reads -- or a sink, which cannot be read), a table or temporary view of Spark's, or an
error with the names it may have meant. The rules and the DDL binding all resolve names
here, so that every query reads a name the same way.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import parse_one
from wavesql.errors import Span, WaveSQLError, did_you_mean
from wavesql.udfs.program import SPARK_TYPES

from .. import ir
from ..ctes import cte_names
from .context import BindContext


def resolve_relation(name: str, where: exp.Expression, ctx: BindContext) -> ir.Relation:
    """The relation ``name`` reads; an error at ``where`` when it names nothing readable."""
    made = ctx.outer.get(name.lower())
    if made is not None:  # an input an enclosing query made, read by an inline query of it
        return made
    defn = ctx.catalog.get(name)
    if isinstance(defn, cat.StreamDef):
        return ir.StreamScan(defn, ir.Schema.of_columns(defn.columns), True)
    if isinstance(defn, cat.SignalDef):  # joined, not selected from: plain segment rows
        schema = ir.Schema(tuple(ir.Field(c.name, SPARK_TYPES["sigseg"]) for c in defn.channels))
        return ir.SignalScan(defn, schema, True, (defn.segment, defn.segment))
    if isinstance(defn, cat.ViewDef):
        if defn.name.lower() in ctx.view_stack:
            raise WaveSQLError("INVALID_OPTION", f"view `{defn.name}` refers to itself",
                               Span.of(where), hint=" -> ".join(ctx.view_stack + (defn.name,)))
        inner = ctx.inside_view(defn.name)
        body = inner.bind_query(parse_one(defn.sql))
        return ir.ViewRef(defn, body, body.schema, body.bounded)
    if isinstance(defn, cat.SinkDef):
        raise WaveSQLError("UNKNOWN_STREAM", f"`{defn.name}` is a sink, not a stream",
                           Span.of(where),
                           hint="read its files by registering a stream over its path")
    schema = ctx.env.spark_table_schema(name)
    if schema is not None:
        return ir.SparkTable(name, schema)
    candidates = list(ctx.catalog.names()) + list(ctx.env.spark_table_names())
    raise WaveSQLError("UNKNOWN_STREAM", f"unknown stream or table `{name}`", Span.of(where),
                       hint=did_you_mean(name, candidates, "streams and tables")
                       or "create it with CREATE STREAM ... FROM 'path' FORMAT parquet")


def resolve_input(table: exp.Table, ctx: BindContext, known: dict[str, ir.Relation]
                  ) -> ir.Relation:
    """A FROM/JOIN table: one an earlier rule made (``__wavesql_window_0``, a RESAMPLE, an
    ASOF join -- ``known``), else a catalog object."""
    return known.get(table.name) or resolve_relation(table.name, table.this, ctx)


def bind_inputs(node: exp.Expression, ctx: BindContext, strict: bool = True,
                skip: set[str] = frozenset()) -> tuple[tuple[str, ir.Relation], ...]:
    """Resolve every table reference: catalog object, Spark table, or an error. Returns
    the catalog objects read, by lower-cased name (Spark's own tables need no input).

    Not ``strict`` (Spark commands): names WaveSQL does not know are left to Spark, since
    they may be what the command creates (``CREATE TEMPORARY VIEW v``, ``CACHE TABLE t``).
    """
    ctes = cte_names(node) | {name.lower() for name in skip}
    seen: dict[str, ir.Relation] = {}
    for table in node.find_all(exp.Table):
        ident = table.this
        if not isinstance(ident, exp.Identifier):
            continue  # table-valued function call: Spark's to resolve
        if table.args.get("db") or table.args.get("catalog"):
            continue  # qualified name: always Spark's
        if table.find_ancestor(exp.Hint) is not None:
            continue  # /*+ BROADCAST(t) */ names an alias, not an input
        name = ident.name
        key = name.lower()
        if key in ctes or key in seen:
            continue
        if not strict and ctx.catalog.get(name) is None:
            continue
        seen[key] = resolve_relation(name, ident, ctx)
    return tuple((n, r) for n, r in seen.items() if not isinstance(r, ir.SparkTable))
