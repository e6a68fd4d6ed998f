"""Rule: ``MERGE(...)`` and ``ZIP(...)`` become plain subqueries over their inputs.

It runs first, so that every later rule binds a MERGE or ZIP as the subquery it is (a
window over it in an outer query, a join, a view of it) and none needs to know about
them. The SQL of each and the checks of its inputs are planner/combine.py's; this rule
resolves the inputs, which may be catalog objects or CTEs the SELECT can see.

Example::

    SELECT * FROM MERGE(eu, us) m
    -- becomes
    SELECT * FROM (SELECT 'eu' AS _source, `sym`, `px` FROM `eu`
                   UNION ALL SELECT 'us' AS _source, `sym`, `px` FROM `us`) AS m
"""

from __future__ import annotations

from sqlglot import exp

from .. import ir
from ..combine import expand
from ..ctes import inline_query
from .context import BindContext, Found
from .resolve import resolve_relation


def expand_combines(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """``node`` with every MERGE/ZIP replaced by its subquery (a copy if there is any)."""
    return expand(node, lambda name: _combine_input(name, ctx), _signal_time)


def _signal_time(name: exp.Expression, rel: ir.Relation) -> str | None:
    """A ZIP input's order when it is a CTE or view of a query over a signal's windows:
    its first ``start_time(...)`` column, found as a CQL window over it finds it
    (planner/analyze/windows.py: in the CTE's text, or the views' own texts)."""
    from .windows import _view_window_starts, _window_start, _window_starts

    select = name.find_ancestor(exp.Select)
    query = None if select is None else inline_query(
        exp.Table(this=name.copy()) if isinstance(name, exp.Identifier) else name, select)
    return _window_start(_window_starts(query) + _view_window_starts(rel), rel)


def _combine_input(name: exp.Expression, ctx: BindContext) -> ir.Relation:
    """A MERGE/ZIP input: a catalog object, or a CTE the SELECT can see (bound for its
    schema and event time; the expanded SQL reads it by name)."""
    select = name.find_ancestor(exp.Select)
    if select is not None:
        query = inline_query(exp.Table(this=name.copy()) if isinstance(name, exp.Identifier)
                             else name, select)
        if query is not None:
            return ctx.bind_query(query)
    return resolve_relation(name.name, name, ctx)
