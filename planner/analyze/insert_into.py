"""Binding ``INSERT INTO <sink> <query>``: the query bound as a top-level query, and checked
against the sink before any job starts.

The sink must be a catalog sink (not a stream or view), appended to (no OVERWRITE, no
column list); a CSV sink takes no nested values, and the columns a sink declares must be
among the query's. The query may be a relation-to-stream query (``INSERT INTO s ISTREAM
(SELECT ...)``), as a continuous query may. The result is ``planner.insert.InsertInto``,
which the session runs as a job; an INSERT into anything that is not a catalog object is
Spark's.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import Statement as ParsedStatement
from wavesql.dialect import nodes as wn
from wavesql.errors import Span, WaveSQLError

from ..insert import InsertInto, flat_format_problem, reads_streams
from .context import BindContext
from .relation_to_stream import bind_relation_to_stream


def bind_insert_into_sink(node: exp.Insert, stmt: ParsedStatement, ctx: BindContext
                          ) -> InsertInto | None:
    """``INSERT INTO <sink> <query>`` -> ``planner.insert.InsertInto``; None when the target
    is not a catalog object (an INSERT into a Spark table stays Spark's business).

    The query is bound like a top-level query over its own text; ``LATE INTO`` is taken off
    it (and kept on the node) because where late rows go is the job's business, whether the
    query is windowed or row by row.
    """
    target = node.this
    table = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(table, exp.Table) or table.args.get("db") or not table.name:
        return None
    defn = ctx.catalog.get(table.name)
    if defn is None:
        return None
    if not isinstance(defn, cat.SinkDef):
        raise WaveSQLError(
            "WRONG_OBJECT_KIND", f"INSERT INTO `{defn.name}`: it is a {defn.kind.lower()}, "
            "not a sink", Span.of(table),
            hint=f"INSERT INTO writes to a sink, e.g. CREATE SINK {defn.name}_out TO "
                 f"'out/{defn.name}/' FORMAT parquet")
    if node.args.get("overwrite"):
        raise WaveSQLError("NOT_IMPLEMENTED", f"INSERT OVERWRITE into sink `{defn.name}`",
                           Span.of(node) or Span.of(table),
                           hint="a sink is appended to, each input row once: INSERT INTO")
    if isinstance(target, exp.Schema) and target.expressions:
        raise WaveSQLError("NOT_IMPLEMENTED", "a column list after a sink name",
                           Span.of(target.expressions[0]),
                           hint="name the columns in the SELECT instead (expr AS name)")
    name_span = Span.of(table)
    start = name_span.end if name_span is not None else stmt.start
    rest = stmt.text[start - stmt.start:]
    query_span = Span(start + len(rest) - len(rest.lstrip()), stmt.end)  # the query's text
    query = node.expression
    if not isinstance(query, (exp.Query, wn.RelationToStream)):
        raise WaveSQLError("UNSUPPORTED_STATEMENT", f"INSERT INTO sink `{defn.name}` needs a "
                           "query", query_span, hint=f"INSERT INTO {defn.name} SELECT ... "
                           "FROM stream")
    late = _body(query).args.get("late_into") if isinstance(_body(query), exp.Select) else None
    late_span = Span.of(late) if late is not None else None
    text = stmt.text[start - stmt.start:]
    if late is not None:
        query = query.copy()
        _body(query).set("late_into", None)
        if late_span is not None:  # same length, so Spark's error positions still map back
            a, b = late_span.start - start, late_span.end - start
            text = text[:a] + " " * (b - a) + text[b:]
    inner = ParsedStatement(query, text, start, stmt.end)
    relation = (bind_relation_to_stream(query, ctx) if isinstance(query, wn.RelationToStream)
                else ctx.bind_query(query, inner, top_level=True))
    problem = flat_format_problem(defn.format, relation.schema.fields)
    if problem:
        raise WaveSQLError("SINK_MISMATCH", f"sink `{defn.name}` is CSV, which has no nested "
                           f"values; the query's column {problem} is", query_span,
                           hint="write it to a parquet or json sink, or flatten the column "
                                "(to_json(col), col.field, explode)")
    if defn.columns:
        have = {f.name.lower() for f in relation.schema.fields}
        missing = [c.name for c in defn.columns if c.name.lower() not in have]
        if missing:
            raise WaveSQLError(
                "SINK_MISMATCH", f"sink `{defn.name}` declares column(s) "
                f"{', '.join(missing)} that the query does not produce", query_span,
                hint=f"the query produces: {', '.join(f.name for f in relation.schema.fields)}")
    return InsertInto(defn, relation, (start, stmt.end), late,
                      (late_span.start, late_span.end) if late_span is not None else None,
                      reads_streams(relation), stmt.text)


def _body(query: exp.Expression) -> exp.Expression:
    """The query an ``ISTREAM|DSTREAM|RSTREAM (...)`` wraps (where its LATE INTO is), or
    ``query`` itself."""
    return query.this if isinstance(query, wn.RelationToStream) else query
