"""Rule (the last): resolve every table the rewritten query still reads by name.

After the other rules, the query is plain Spark SQL over two kinds of names: the inputs
the rules made (``found.made``: ``__wavesql_window_0``, a signal stage...) and the names
the user wrote, which are catalog objects, Spark tables or typos. This rule resolves the
second kind (planner/analyze/resolve.py) into ``found.read``, so that an unknown name is a
WaveSQL error with the names it may have meant, and a catalog stream or view becomes an
input Spark can read. CTE names are the query's own and are skipped.

Example::

    WITH big AS (SELECT * FROM trades WHERE qty > 100) SELECT * FROM big JOIN ref USING (sym)
    -- unchanged; found.read = (("trades", StreamScan(trades)),)
    -- ("ref", a table of Spark's, needs no input; an unknown name is UNKNOWN_STREAM)
"""

from __future__ import annotations

from sqlglot import exp

from .. import ir
from .context import BindContext, Found
from .resolve import bind_inputs


def read_inputs(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Resolve the names ``node`` reads, besides the inputs the rules made. Once rules have
    rewritten the query, CTEs it no longer reads (a windowed or SYNC-control CTE whose rows
    an input now gives) are dropped first, so that what they read is no input of the query.
    The user's own query, untouched, keeps its text (and its unused CTEs: Spark skips them)."""
    if found.made:
        node = _without_unread_ctes(node)
        found.made[:] = _without_absorbed(node, found.made)
    found.read = bind_inputs(node, ctx, skip={name for name, _ in found.made})
    return node


def _without_absorbed(node: exp.Expression, made: list) -> list:
    """``made`` without the inputs ``node`` no longer reads by name that another input
    made reads (a windowed CTE bound as an ASOF side: the join's input carries its window,
    planner/analyze/temporal.py), so that they are neither computed nor shown twice. The
    other input may hold its own binding of it, equal but not the same object: a window
    over a signal CTE binds the CTE's text again, signal stage and all, and the statement's
    signal stage for that CTE is then read by nothing."""
    read = {t.name.lower() for t in node.find_all(exp.Table)}
    return [(name, rel) for name, rel in made if name.lower() in read or not any(
        other is not rel and any(r is rel or r == rel for r in ir.walk(other))
        for _, other in made)]


def _without_unread_ctes(node: exp.Expression) -> exp.Expression:
    """``node`` without the CTEs no table reads (outside their own bodies), to a fixpoint;
    ``node`` itself when every CTE is read."""
    out = node
    while True:
        unread = [cte for cte in out.find_all(exp.CTE) if not _read(out, cte)]
        if not unread:
            return out
        if out is node:
            out = node.copy()
            unread = [cte for cte in out.find_all(exp.CTE) if not _read(out, cte)]
        for cte in unread:
            with_ = cte.parent
            cte.pop()
            if isinstance(with_, exp.With) and not with_.expressions:
                with_.pop()


def _read(root: exp.Expression, cte: exp.CTE) -> bool:
    """Whether a table outside ``cte``'s own body reads it by name."""
    name = cte.alias_or_name.lower()
    return any(_outside(t, cte) for t in root.find_all(exp.Table)
               if t.name.lower() == name and not t.args.get("db"))


def _outside(node: exp.Expression, ancestor: exp.Expression) -> bool:
    """Whether ``node`` is not inside ``ancestor``."""
    parent = node.parent
    while parent is not None:
        if parent is ancestor:
            return False
        parent = parent.parent
    return True
