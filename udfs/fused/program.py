"""A fused program: the levels of a chain of SELECTs, each over the one below.

A :class:`Program` reads some columns of one stream and runs its levels (:class:`Level`)
bottom up (udfs/fused/range_pass.py); a level is one SELECT -- an optional join with a
small relation (:class:`Lookup`), a WHERE, its windows (:class:`Window`: ``lag``,
RANGE-framed OVER windows ordered by event time, whole-partition and GROUP BY aggregates)
and its outputs, all expression nodes of udfs/fused/expr.py over the level's input columns.
"""

from __future__ import annotations

from dataclasses import dataclass

from .expr import Expr


@dataclass(frozen=True)
class Window:
    """A window of one level: ``lag`` (``n`` rows back, ``default`` a literal node or None) or a
    :data:`udfs.time_windows.FUNCTIONS` aggregate over ``[t - before, t + after]`` (us,
    ``after`` <= 0) among the rows of equal ``keys`` (PARTITION BY); ``arg`` (None:
    ``count(*)``) of type ``arg_type``."""

    func: str
    arg: Expr | None
    arg_type: str | None
    n: int = 1
    default: Expr | None = None
    before: int = 0
    after: int = 0
    keys: tuple[Expr, ...] = ()
    #: the whole partition (``OVER (PARTITION BY <tumbling window>, ...)``, no ORDER BY):
    #: one value per partition; its keys hold the window instant, so partitions lie within
    #: one tumbling window of width ``before``
    whole: bool = False


@dataclass(frozen=True)
class Lookup:
    """A join of a level's input rows with a small relation every task is handed whole
    (a per-window aggregate, planner/physical/fused_joins.py): a row joins the relation's
    rows whose column ``right_key`` equals the row's ``key`` (over the level's input; both
    of type ``key_type``, an integral or timestamp type: equality is exact). ``columns``:
    ``(relation column, its name in the level's scope, type)``. As a join does, a row
    matching several relation rows is repeated once per match (in the relation's order);
    a row matching none is dropped (``inner``) or kept with NULLs (LEFT JOIN); a NULL key
    matches nothing. ``table``: the relation's index among the tables the pass is
    given."""

    table: int
    key: Expr
    key_type: str
    right_key: str
    columns: tuple[tuple[str, str, str], ...]
    inner: bool = False
    #: the level's WHERE conjuncts that read only its input: applied before the join
    where: Expr | None = None


@dataclass(frozen=True)
class Level:
    """One SELECT: ``where`` filters its input, then ``windows`` are evaluated
    (:class:`~.expr.WindowRef` ``i`` reads the ``i``-th; None: a window nothing reads), then
    ``outputs`` ``(name, node)`` are its rows. With ``group`` (GROUP BY key nodes,
    ``group[bucket]`` the tumbling window instant) its rows are the groups: ``windows`` are
    the aggregates (whole over the group), outputs read the keys as ``Column("__g<i>")``,
    and ``having`` filters the groups. With ``total`` (the top level only) its one row
    holds its windows over the range's own rows."""

    where: Expr | None
    windows: tuple[Window | None, ...]
    outputs: tuple[tuple[str, Expr], ...]
    group: tuple[Expr, ...] | None = None
    bucket: int = 0
    having: Expr | None = None
    #: the top level is an aggregate without GROUP BY: one row per range, its windows (whole,
    #: no keys) over the range's own rows -- partial aggregates Spark merges (the planner)
    total: bool = False
    #: the level's FROM joins a small relation (before its WHERE, as SQL's FROM does)
    lookup: Lookup | None = None


@dataclass(frozen=True)
class Program:
    """``inputs``: the stream's columns read, ``(name, type)``; ``time``: its event time;
    ``bucket``: ``(name, width)`` of the tumbling window instant the input carries (a CQL
    ``[RANGE w SLIDE w]``: ``ceil(t / w) * w``), or None."""

    inputs: tuple[tuple[str, str], ...]
    time: str
    levels: tuple[Level, ...]
    bucket: tuple[str, int] | None = None
