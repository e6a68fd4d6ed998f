"""What the analysis rules share: :class:`BindContext`, the same for every query of one
statement, and :class:`Found`, what the rules have found in one query so far.

Every rule of ``planner.analyze.RULES`` is ``rule(node, ctx, found) -> node``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Callable

from .. import ir


@dataclass
class BindContext:
    """The catalog and engine a statement binds against, and the binder itself.

    ``binder`` is ``planner.bind.bind_query``, given rather than imported because that
    function applies the rules that call it back: a rule binds a view's body, a CTE or a
    subquery as a query of its own with :meth:`bind_query`.
    """

    catalog: object  # wavesql.catalog.Catalog
    env: object  # planner.bind.Environment
    base_dir: str = "."  # relative DDL paths resolve against this (a query file's folder)
    #: folders relative paths may not lead out of (a query file's; empty: no rule)
    path_roots: tuple[str, ...] = ()
    view_stack: tuple[str, ...] = ()  # the views being expanded, outermost first
    #: Inputs an enclosing query's rules made (``__wavesql_window_0``...) that an inline
    #: query bound on its own may read: a CTE or subquery is taken from the enclosing
    #: query's tree after earlier rules rewrote it (a windowed CTE reads its window input).
    outer: dict[str, ir.Relation] = field(default_factory=dict)
    binder: Callable[..., ir.Relation] = field(kw_only=True, repr=False)

    def bind_query(self, node, stmt=None, top_level: bool = False) -> ir.Relation:
        """Bind ``node`` (a query) in this context: ``planner.bind.bind_query``."""
        return self.binder(node, stmt, self, top_level)

    def inside_view(self, name: str) -> BindContext:
        """This context while the body of view ``name`` is bound (to catch a view that
        reads itself)."""
        return dataclasses.replace(self, view_stack=self.view_stack + (name.lower(),))

    def reading(self, made: dict[str, ir.Relation]) -> BindContext:
        """This context while an inline query of an enclosing query is bound, the inputs
        that query's rules ``made`` so far readable by their names."""
        return dataclasses.replace(self, outer={**self.outer, **made})


@dataclass
class Found:
    """What the rules have found in one query so far."""

    #: The named inputs the rules made of WaveSQL constructs (an ISTREAM, a windowed
    #: stream, a RESAMPLE, a SYNC, a signal stage...), in the order they were made; the
    #: rewritten SQL reads each by its name (``__wavesql_window_0``...).
    made: list[tuple[str, ir.Relation]] = field(default_factory=list)
    #: The catalog objects and Spark tables the rewritten SQL reads by their own names.
    read: tuple[tuple[str, ir.Relation], ...] = ()
    #: Whether a band join was given an equality on time bins (planner/band.py).
    binned: bool = False

    @property
    def inputs(self) -> tuple[tuple[str, ir.Relation], ...]:
        """Every input of the query: those made, then those read."""
        return tuple(self.made) + self.read
