"""Rule: ``RESAMPLE(...)`` tables and ``ASOF JOIN``s become named inputs.

Each is computed by SQL that planner/temporal.py writes (a resampling of a series onto a
regular grid; for each left row, the last right row at or before it), analysed here by
Spark for its schema and errors, and read by the SQL around it under a generated name.
Their inputs may be catalog objects, CTEs, subqueries (bound on their own, as earlier
rules left their text: a windowed CTE reads the window input made of it, which its
binding is given, ``BindContext.reading``), or inputs that earlier rules made (a windowed
stream, an ISTREAM) -- or a RESAMPLE of this rule, as in an ASOF JOIN of a RESAMPLE.
Innermost first.

Example::

    SELECT * FROM quotes q ASOF JOIN trades t ON q.sym = t.sym AND q.ts >= t.ts
    -- becomes
    SELECT q.*, t.* FROM __wavesql_asof_0
    -- with the input __wavesql_asof_0 = the as-of join's SQL over quotes and trades

    SELECT * FROM RESAMPLE(ticks, ts, INTERVAL 1 SECOND) r
    -- becomes
    SELECT * FROM __wavesql_resample_0 AS r
"""

from __future__ import annotations

import dataclasses
import re

from sqlglot import exp

from wavesql.dialect import nodes as wn, parse_one
from wavesql.errors import Span, WaveSQLError, did_you_mean

from .. import ir
from ..ctes import inline_query
from ..temporal import asof_join_relation, is_numeric, parse_asof_condition, resample_sql
from ..types import interval_us
from .context import BindContext, Found
from .resolve import resolve_input
from .tree import depth


def extract_temporal(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Bind every RESAMPLE, then every ASOF JOIN; ``node`` rewritten (a copy) to read
    each by its input's name."""
    if node.find(wn.Resample) is None and not any(
            (j.args.get("method") or "").upper() == "ASOF" for j in node.find_all(exp.Join)):
        return node
    node = node.copy()
    inputs: list[tuple[str, ir.Relation]] = []
    known = _KnownInputs(dict(found.made), inputs)
    for resample in sorted(node.find_all(wn.Resample), key=lambda n: -depth(n)):
        inputs.append(_bind_resample(resample, ctx, known, len(inputs)))
    for select in sorted(node.find_all(exp.Select), key=lambda n: -depth(n)):
        joins = select.args.get("joins") or []
        asof = [j for j in joins if (j.args.get("method") or "").upper() == "ASOF"]
        if asof:
            inputs.append(_bind_asof(select, asof[0], ctx, known, len(inputs)))
    found.made.extend(inputs)
    return node


def _bind_resample(resample: wn.Resample, ctx: BindContext, known: "_KnownInputs",
                   index: int):
    """``(name, relation)`` of one RESAMPLE, which is replaced by a table of that name."""
    table, source = _input_of(resample.this, resample.find_ancestor(exp.Select), ctx,
                              known, f"__wavesql_inline_{index}")
    columns = [(f.name, f.type) for f in source.schema.fields]
    time_col = resample.args["time"].name
    if source.schema.find(time_col) is None:
        raise WaveSQLError("UNKNOWN_COLUMN", f"RESAMPLE time column `{time_col}` is not a "
                           f"column of `{table.name}`", Span.of(resample.args["time"]),
                           hint=did_you_mean(time_col, source.schema.names, "columns"))
    period = interval_us(resample.args["period"])
    method_node = resample.args.get("method")
    method = method_node.name.lower() if method_node is not None else "linear"
    keys = []
    for key in resample.args.get("partition_by") or []:
        column = source.schema.find(key.name)
        if column is None or key.table:
            raise WaveSQLError("UNKNOWN_COLUMN", f"RESAMPLE key `{key.sql()}` is not a "
                               f"column of `{table.name}`", Span.of(key),
                               hint=did_you_mean(key.name, source.schema.names, "columns"))
        if column.name.lower() == time_col.lower():
            raise WaveSQLError("INVALID_OPTION", "the RESAMPLE time column cannot be a key",
                               Span.of(key), hint="partition by other columns")
        keys.append(column.name)
    try:
        sql = resample_sql(table.name, columns, time_col, period, method, tuple(keys))
    except WaveSQLError as err:
        where = method_node if err.hint and "linear" in err.hint else resample.args["period"]
        raise WaveSQLError(err.code, err.message, Span.of(where), err.hint) from None
    name = f"__wavesql_resample_{index}"
    derived = resample_columns(columns, time_col, method, tuple(keys))
    query = _temporal_query(sql, ((table.name.lower(), source),), ctx, None if derived is None
                            else ir.Schema(tuple(ir.Field(*c) for c in derived)))
    numeric = tuple(c for c, t in columns if c.lower() != time_col.lower()
                    and c.lower() not in {k.lower() for k in keys} and is_numeric(t))
    alias = resample.args.get("alias")
    resample.replace(exp.Table(this=exp.to_identifier(name), alias=alias.copy() if alias
                               else exp.TableAlias(this=exp.to_identifier(table.name))))
    return name, dataclasses.replace(query, resample=ir.Resample(
        table.name.lower(), time_col, period, method, numeric, tuple(keys)))


_ATOMIC = {"tinyint": "tinyint", "byte": "tinyint", "smallint": "smallint",
           "short": "smallint", "int": "int", "integer": "int", "bigint": "bigint",
           "long": "bigint", "float": "float", "real": "float", "double": "double",
           "boolean": "boolean", "string": "string", "binary": "binary", "date": "date",
           "timestamp": "timestamp", "timestamp_ltz": "timestamp",
           "timestamp_ntz": "timestamp_ntz", "decimal": "decimal(10,0)",
           "dec": "decimal(10,0)", "numeric": "decimal(10,0)"}
_DECIMAL = re.compile(r"^(?:decimal|dec|numeric)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)$")


def _atomic(spark_type: str) -> str | None:
    """Spark's own name (``simpleString``) of an atomic type written ``spark_type``, or
    None for anything else (arrays, structs, maps, intervals, variants...)."""
    text = spark_type.strip().lower()
    found = _DECIMAL.match(text)
    if found:
        return f"decimal({found.group(1)},{found.group(2) or 0})"
    return _ATOMIC.get(text)


def resample_columns(columns: list[tuple[str, str]], time_col: str, method: str,
                     keys: tuple[str, ...] = ()) -> "list[tuple[str, str, bool]] | None":
    """``(name, Spark type, nullable)`` of :func:`resample_sql`'s result over inputs whose
    columns may all hold NULLs, as Spark's analysis of that SQL gives them -- written here
    so that binding a RESAMPLE needs no analysis of its window SQL by Spark (~0.4 s of a
    quiet machine's time per query, on the driver, before any task: tests/
    test_temporal_schema.py checks it against that analysis over every atomic type and
    method). None where a column is not of an atomic type (Spark analyses the SQL then).

    The time column is the grid point (``timestamp_micros``: a TIMESTAMP, never NULL);
    'linear' numeric columns are interpolated as DOUBLE; every other column keeps its
    type: a key, a held value, the zero or the NULL after a gap's first point."""
    out = []
    special = {k.lower() for k in keys}
    for name, typ in columns:
        atomic = _atomic(typ)
        if atomic is None:
            return None
        if name.lower() == time_col.lower():
            out.append((name, "timestamp", False))
        elif method == "linear" and name.lower() not in special and is_numeric(typ):
            out.append((name, "double", True))
        else:
            out.append((name, atomic, True))
    return out


_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def asof_columns(lcols: list[tuple[str, str]], rcols: list[tuple[str, str]],
                 left_alias: str, right_alias: str) -> "list[tuple[str, str, bool]] | None":
    """``(name, Spark type, nullable)`` of planner/temporal.py's ``asof_join_relation``
    over inputs whose columns may all hold NULLs, as Spark's analysis of that SQL gives
    them (tests/test_temporal_schema.py checks it; why it is written here:
    :func:`resample_columns`): a struct of each side, then a copy of every column of one
    side only (the same for ASOF LEFT JOIN). None where a
    column is not of an atomic type or its name would need quoting in a struct type."""
    types = {}
    for side, cols in (("l", lcols), ("r", rcols)):
        for name, typ in cols:
            atomic = _atomic(typ)
            if atomic is None or not _PLAIN_NAME.match(name):
                return None
            types[side, name] = atomic

    def struct(side, cols):
        return "struct<" + ",".join(f"{n}:{types[side, n]}" for n, _ in cols) + ">"

    shared = {n.lower() for n, _ in lcols} & {n.lower() for n, _ in rcols}
    hidden = shared | {left_alias.lower(), right_alias.lower()}
    # (Spark's analysis leaves both structs nullable: the WHERE's IS NOT NULL does not
    # narrow an analysed plan's output)
    out = [(left_alias, struct("l", lcols), True), (right_alias, struct("r", rcols), True)]
    out += [(n, types[side, n], True) for side, cols in (("l", lcols), ("r", rcols))
            for n, _ in cols if n.lower() not in hidden]
    return out


def _bind_asof(select: exp.Select, join: exp.Join, ctx: BindContext, known: "_KnownInputs",
               index: int):
    """``(name, relation)`` of the ASOF JOIN of ``select``, which then reads that name."""
    joins = select.args.get("joins") or []
    left, lrel = _input_of(select.args["from_"].this, select, ctx, known,
                           f"__wavesql_inline_{index}_l")
    right, rrel = _input_of(join.this, select, ctx, known, f"__wavesql_inline_{index}_r")
    if len(joins) > 1 or not isinstance(left, exp.Table) or not isinstance(right, exp.Table):
        raise WaveSQLError("NOT_IMPLEMENTED", "ASOF JOIN is implemented between two "
                           "streams, tables, views, CTEs or subqueries, alone in their "
                           "SELECT", Span.of(join), hint="join other inputs in an outer query")
    lalias, ralias = left.alias_or_name, right.alias_or_name
    lcols = [(f.name, f.type) for f in lrel.schema.fields]
    rcols = [(f.name, f.type) for f in rrel.schema.fields]
    cond = parse_asof_condition(join.args.get("on"), lalias, ralias,
                                [c for c, _ in lcols], [c for c, _ in rcols])
    outer = (join.args.get("side") or "").upper() == "LEFT"
    sql = asof_join_relation(left.name, right.name, lalias, ralias, lcols, rcols,
                             outer=outer, **cond.as_kwargs())
    name = f"__wavesql_asof_{index}"
    derived = asof_columns(lcols, rcols, lalias, ralias)
    query = _temporal_query(sql, ((left.name.lower(), lrel), (right.name.lower(), rrel)), ctx,
                            None if derived is None
                            else ir.Schema(tuple(ir.Field(*c) for c in derived)))
    asof = ir.AsofJoin(left.name.lower(), right.name.lower(),
                       tuple(tuple(pair) for pair in cond.keys), cond.left_time,
                       cond.right_time, cond.direction, cond.inclusive, outer)
    join.pop()
    select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(name))))
    expressions = []
    for e in select.expressions:
        if isinstance(e, exp.Star):  # both sides' columns, as a join's star would give
            expressions += [exp.Column(this=exp.Star(), table=exp.to_identifier(lalias)),
                            exp.Column(this=exp.Star(), table=exp.to_identifier(ralias))]
        else:
            expressions.append(e)
    select.set("expressions", expressions)
    return name, dataclasses.replace(query, asof=asof)


class _KnownInputs(dict):
    """The inputs earlier rules made plus those this rule has made so far (a live view of
    its list): an ASOF JOIN may read a RESAMPLE made just before it."""

    def __init__(self, derived: dict, made: list):
        super().__init__(derived)
        self.made = made

    def get(self, name, default=None):
        return dict(self.made).get(name) or super().get(name, default)

    def snapshot(self) -> dict[str, ir.Relation]:
        """Every input made so far, by name."""
        return {**self, **dict(self.made)}


def _input_of(expr: exp.Expression, select: exp.Select, ctx: BindContext,
              known: _KnownInputs, label: str) -> tuple[exp.Expression, ir.Relation]:
    """``(table, relation)`` of a RESAMPLE input or an ASOF side: a named input as it is,
    a CTE under its own name, a subquery under ``label`` (its alias kept)."""
    query = inline_query(expr, select) if select is not None else None
    if query is None:
        return expr, (resolve_input(expr, ctx, known) if isinstance(expr, exp.Table)
                      else None)
    # the query is the enclosing query's text as earlier rules left it, which may read
    # the inputs they made: a windowed CTE or subquery its window (``__wavesql_window_0``)
    relation = ctx.reading(known.snapshot()).bind_query(query)
    if isinstance(expr, exp.Table):
        return expr, relation
    alias = expr.alias_or_name or label
    return exp.Table(this=exp.to_identifier(label),
                     alias=exp.TableAlias(this=exp.to_identifier(alias))), relation


def _temporal_query(sql: str, inputs, ctx: BindContext, schema: ir.Schema | None = None
                    ) -> ir.SqlQuery:
    """``sql`` over ``inputs`` (each name once), analysed by Spark for its schema unless
    ``schema`` is given (:func:`resample_columns`); its AST parsed once
    here (planner/temporal.py writes the operators' SQL as text)."""
    unique = tuple(dict(inputs).items())
    if schema is None:
        schema = ctx.env.analyze(sql, unique, None)
    return ir.SqlQuery(sql, unique, schema, all(r.bounded for _, r in unique),
                       tree=parse_one(sql))
