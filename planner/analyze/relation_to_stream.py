"""Rule: every ``ISTREAM/DSTREAM/RSTREAM (query)`` read as a table becomes a named input.

A relation-to-stream operator turns the result of a windowed query back into a stream
(planner/windows.py explains the three). Its query is bound as a query of its own, into
an ``ir.StreamOf``, and the SQL around it reads the result by a generated name, so that
Spark sees plain SQL. Innermost first: an ISTREAM inside another is bound before the one
that reads it.

Example::

    SELECT sym, n FROM ISTREAM (SELECT sym, count(*) AS n
                                FROM trades [RANGE 1 MINUTE] GROUP BY sym) s
    -- becomes
    SELECT sym, n FROM __wavesql_stream_0 AS s
    -- with the input __wavesql_stream_0 = StreamOf(ISTREAM, the inner query bound)
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.errors import Span, WaveSQLError

from .. import ir
from .context import BindContext, Found
from .tree import depth


def extract_relation_to_streams(node: exp.Expression, ctx: BindContext, found: Found
                                ) -> exp.Expression:
    """Bind every ISTREAM/DSTREAM/RSTREAM used as a table; ``node`` rewritten (a copy) to
    read each by its input's name."""
    if not [n for n in node.find_all(wn.RelationToStream) if n is not node]:
        return node
    node = node.copy()
    inputs = []
    for r2s in sorted(node.find_all(wn.RelationToStream), key=lambda n: -depth(n)):
        name = f"__wavesql_stream_{len(inputs)}"
        inputs.append((name, bind_relation_to_stream(r2s, ctx)))
        target = r2s.parent if isinstance(r2s.parent, exp.Subquery) else r2s
        alias = target.args.get("alias")
        target.replace(exp.Table(this=exp.to_identifier(name), alias=alias.copy() if alias
                                 else exp.TableAlias(this=exp.to_identifier(name))))
    found.made.extend(inputs)
    return node


def bind_relation_to_stream(node: wn.RelationToStream, ctx: BindContext) -> ir.StreamOf:
    """``ISTREAM/DSTREAM/RSTREAM (query)``: the query must read one windowed stream."""
    inner = ctx.bind_query(node.this)
    scans = [r for _, r in getattr(inner, "inputs", ()) if isinstance(r, ir.WindowScan)]
    if len(scans) > 1 and all(r.joint and r.joint == scans[0].joint for r in scans):
        scans = scans[:1]  # one join of windowed tables: one sequence of instants
    if len(scans) != 1:
        raise WaveSQLError(
            "STREAMING_RULE", f"{node.kind} needs a query over one windowed stream",
            Span.of(node), hint="e.g. ISTREAM (SELECT sym, count(*) FROM trades [RANGE 1 MINUTE] "
                                "GROUP BY sym)")
    return ir.StreamOf(node.kind, inner, scans[0], inner.schema, inner.bounded)
