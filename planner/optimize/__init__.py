"""``optimize``: IR -> IR, the planner's own optimisations.

Rules are plain functions ``Relation -> Relation``, one per module here, listed in
:data:`RULES` and applied bottom-up, in order, until nothing changes. They are the
rewrites only WaveSQL can make (today: pushing a signal program into the scan that reads
its samples); relational optimisation of the Spark SQL is left to Spark's own optimizer,
and choosing how a query's SQL runs is planner/physical/'s.

Before returning, ``optimize`` checks the invariants ``lower`` relies on, so a broken rule
fails here with a clear message rather than as a wrong result.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from wavesql.errors import WaveSQLError

from .. import ir
from .push_program_into_scan import push_program_into_scan

Rule = Callable[[ir.Relation], ir.Relation]

#: The optimisation rules, in order.
RULES: list[Rule] = [push_program_into_scan]


def optimize(stmt: ir.Statement, rules: list[Rule] | None = None) -> ir.Statement:
    """Apply ``rules`` (default :data:`RULES`) to every relation in ``stmt``."""
    rules = RULES if rules is None else rules
    if isinstance(stmt, ir.QueryStatement):
        stmt = ir.QueryStatement(_fixpoint(stmt.relation, rules))
        check(stmt.relation)
    elif isinstance(stmt, ir.Explain) and stmt.target is not None:
        stmt = dataclasses.replace(stmt, target=optimize(stmt.target, rules),
                                   analyzed=stmt.analyzed or stmt.target)
    return stmt


def _fixpoint(rel: ir.Relation, rules: list[Rule], limit: int = 50) -> ir.Relation:
    for _ in range(limit):
        new = _apply(rel, rules)
        if new == rel:
            return new
        rel = new
    raise WaveSQLError("NOT_IMPLEMENTED", "optimisation rules did not reach a fixpoint",
                       hint="this is a WaveSQL bug: please report the query")


def _apply(rel: ir.Relation, rules: list[Rule]) -> ir.Relation:
    """``rules`` applied bottom-up: first inside every child relation, whatever the node
    (a SYNC JOIN's control, a window's input, a view's body ...), then to ``rel`` itself.

    Generic over the IR's dataclass fields, so a new operator's inputs are rewritten too
    (a rule missed inside SYNC JOIN once ran a detector per scan partition, restarting
    its state every 2^20 samples)."""
    changes = {}
    for f in dataclasses.fields(rel):
        value = getattr(rel, f.name)
        if isinstance(value, ir.Relation):
            new = _apply(value, rules)
        elif (isinstance(value, tuple) and value and all(
                isinstance(v, tuple) and len(v) == 2 and isinstance(v[1], ir.Relation)
                for v in value)):
            new = tuple((n, _apply(r, rules)) for n, r in value)  # SqlQuery.inputs
        else:
            continue
        if new != value:
            changes[f.name] = new
    if changes:
        rel = dataclasses.replace(rel, **changes)
    for rule in rules:
        rel = rule(rel)
    return rel


def check(rel: ir.Relation) -> None:
    """Invariants: boundedness follows the inputs, input names are unique."""
    for node in ir.walk(rel):
        kids = node.children()
        if kids and node.bounded and not all(k.bounded for k in kids):
            raise WaveSQLError("STREAMING_RULE",
                               f"{node.label()} claims to be bounded over an unbounded input")
        if isinstance(node, ir.SqlQuery):
            names = [n.lower() for n, _ in node.inputs]
            if len(names) != len(set(names)):
                raise WaveSQLError("NOT_IMPLEMENTED", f"duplicate input names {names}")
