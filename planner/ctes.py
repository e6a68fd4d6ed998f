"""CTEs and inputs written inline: which ``WITH`` names a SELECT can see, and the query of
an input given as a CTE or a subquery.

Both the binder (planner/analyze/) and the lowering passes (planner/physical/chunked_windows.py,
planner/physical/fused_chains.py) ask these questions of a sqlglot tree; they live here, apart from
both, so that neither imports the other for them.
"""

from __future__ import annotations

from sqlglot import exp


def visible_ctes(select: exp.Select) -> list[exp.CTE]:
    """The CTEs ``select`` may reference: those of enclosing WITHs defined before it.

    >>> from wavesql.dialect import parse_one
    >>> tree = parse_one("WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM b")
    >>> [c.alias for c in visible_ctes(tree)]
    ['a', 'b']
    >>> [c.alias for c in visible_ctes(tree.args["with_"].expressions[1].this)]  # b's body
    ['a']
    """
    ctes: list[exp.CTE] = []
    node = select
    while node.parent is not None:
        parent = node.parent
        if isinstance(parent, exp.CTE):
            with_ = parent.parent
            earlier = []
            for cte in with_.expressions:
                if cte is parent:
                    break
                earlier.append(cte)
            ctes = earlier + ctes
            node = with_.parent  # the query owning this WITH: skip its own WITH below
            if node is None:
                break
            continue
        with_ = parent.args.get("with_") if isinstance(parent, exp.Query) else None
        if with_ is not None and node is not with_:
            ctes = list(with_.expressions) + ctes
        node = parent
    if isinstance(select.args.get("with_"), exp.With):
        ctes = ctes + list(select.args["with_"].expressions)
    return ctes


def cte_names(node: exp.Expression) -> set[str]:
    """The lower-cased names of every CTE anywhere in ``node``."""
    return {cte.alias_or_name.lower() for cte in node.find_all(exp.CTE)}


def inline_query(control: exp.Expression, select: exp.Select) -> exp.Query | None:
    """The query of an input written inline -- a CTE the SELECT can see, or a subquery --
    with the CTEs it may read; None for a named stream, view or table. SYNC controls,
    RESAMPLE inputs and ASOF sides take any relation this way (bound as a view of its
    own, its event time carried through by Spark's analysis of its columns).

    >>> from wavesql.dialect import parse_one
    >>> tree = parse_one("WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM b")
    >>> inline_query(tree.args["from_"].this, tree).sql()
    'WITH a AS (SELECT 1 AS x), b AS (SELECT x FROM a) SELECT * FROM b'
    >>> sub = parse_one("SELECT * FROM (SELECT x FROM t) s")
    >>> inline_query(sub.args["from_"].this, sub).sql()
    'SELECT x FROM t'
    """
    ctes = visible_ctes(select)
    names = [c.alias_or_name.lower() for c in ctes]
    if isinstance(control, exp.Table) and not control.args.get("db") \
            and control.name.lower() in names:
        keep = ctes[:len(names) - names[::-1].index(control.name.lower())]
        query = exp.select("*").from_(exp.Table(this=control.this.copy()))
    elif isinstance(control, exp.Subquery) and isinstance(control.this, exp.Query):
        keep, query = ctes, control.this.copy()
    else:
        return None
    own = query.args.get("with_")
    if keep:
        query.set("with_", exp.With(expressions=[c.copy() for c in keep]
                                    + (list(own.expressions) if own is not None else [])))
    return query
