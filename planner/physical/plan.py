"""``SqlPlan``: what a physical rule is given and hands back (planner/physical/__init__.py)."""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from .. import ir


@dataclasses.dataclass(frozen=True)
class SqlPlan:
    """A Spark SQL query (``ir.SqlQuery``) on its way to a DataFrame.

    A rule returns the plan it was given when it has nothing to do, else a new one
    (``dataclasses.replace``): its query's AST rewritten to read views it made, or its whole
    result. A rule rewrites a copy (:meth:`ast`); ``lower`` renders the SQL text once, after
    the last rule.
    """

    #: the query being lowered: its Spark SQL, its inputs by name, its result's schema
    query: ir.SqlQuery
    #: the statement's ``planner.lower.Runtime``: the Spark session, ``streams`` (set for a
    #: continuous query's micro-batch, where no rule applies), ``prepared`` (what a rule
    #: planned for a relation, planned once per statement)
    rt: object
    #: the query's inputs lowered: ``(name, DataFrame)``
    frames: list
    #: the query's AST as the rules rewrote it; None until one does (``query.tree`` then)
    tree: exp.Expression | None = None
    #: the views the rules made so far, which the query reads besides ``frames``: name ->
    #: DataFrame
    views: dict = dataclasses.field(default_factory=dict)
    #: the whole result, once a rule has computed it: no later rule and no SQL runs then
    result: object = None

    def read(self) -> exp.Expression:
        """The query's AST so far, to read (not to change: see :meth:`ast`)."""
        if self.tree is not None:
            return self.tree
        return self.query.tree if self.query.tree is not None else self.query.ast()

    def ast(self) -> exp.Expression:
        """A copy of the query's AST so far, for a rule to rewrite."""
        return self.tree.copy() if self.tree is not None else self.query.ast()

    def inputs(self) -> list:
        """Every ``(name, DataFrame)`` the query may read: the inputs, then the views."""
        return list(self.frames) + list(self.views.items())

    def scans(self) -> dict:
        """Lower-case input name -> the catalog stream it scans as it is (an
        ``ir.StreamScan``): the inputs whose Parquet files a rule may read itself."""
        return {name.lower(): r.stream for name, r in self.query.inputs
                if isinstance(r, ir.StreamScan)}
