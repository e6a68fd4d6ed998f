"""Rule: a window over a subquery is a window over a CTE of that subquery.

``FROM (SELECT ...) s [RANGE 1 MINUTE]`` puts a CQL window on a relation written inline.
Windows over CTEs already carry the event time of the stream the CTE reads
(``windows.extract_windows``), so the subquery becomes a CTE named by its alias, appended
to the statement's WITH (after the CTEs it may read), and the window stays on a reference
to it. The alias is the name the user gave it, so errors about the window (no event time
kept, say) name it as written.

Example::

    SELECT count(*) AS n FROM (SELECT ts, v FROM trades WHERE v > 0) s [RANGE 1 MINUTE]
    -- becomes
    WITH s AS (SELECT ts, v FROM trades WHERE v > 0)
    SELECT count(*) AS n FROM s [RANGE 1 MINUTE]
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.errors import Span, WaveSQLError

from .context import BindContext, Found
from .tree import depth


def hoist_windowed_subqueries(node: exp.Expression, ctx: BindContext,
                              found: Found) -> exp.Expression:
    """Every windowed subquery -> a CTE of its own, read under the window."""
    if not any(s.args.get("window") is not None for s in node.find_all(exp.Subquery)):
        return node
    node = node.copy()
    taken = {t.name.lower() for t in node.find_all(exp.Table) if t.name}
    taken |= {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}
    windowed = [s for s in node.find_all(exp.Subquery) if s.args.get("window") is not None]
    for sub in sorted(windowed, key=lambda s: -depth(s)):  # inner first: no forward reads
        window = sub.args["window"]
        name = sub.alias_or_name
        if not name:
            raise WaveSQLError("STREAMING_RULE", "a window over a subquery needs the "
                               "subquery's alias", Span.of(window),
                               hint="name it: FROM (SELECT ...) s [RANGE 1 MINUTE]")
        if name.lower() in taken:
            raise WaveSQLError("DUPLICATE_OBJECT", f"the windowed subquery's alias `{name}` "
                               "is also a table or CTE name in this query", Span.of(sub),
                               hint="give the subquery an alias of its own")
        taken.add(name.lower())
        cte = exp.CTE(this=sub.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(name)))
        sub.replace(exp.Table(this=exp.to_identifier(name), window=window.copy()))
        with_ = node.args.get("with_")
        if with_ is None:
            node.set("with_", exp.With(expressions=[cte]))
        else:
            with_.append("expressions", cte)
    return node
