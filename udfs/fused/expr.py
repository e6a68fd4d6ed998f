"""The expression nodes of a fused program: one small frozen dataclass per construct.

planner/physical/fused_compiler.py builds these from a SELECT's sqlglot expressions (after
Spark's name resolution and type coercion: every implicit widening is an explicit
:class:`Cast` here, every literal has the type of what it meets); udfs/fused/evaluate.py
evaluates them over numpy columns, one ``visit_<Node>`` method per class. A node is a value:
equal nodes compare and hash equal, so the planner can look one up among a GROUP BY's keys
and a level evaluates a window it holds twice only once.

*Kinds* are Spark's types as udfs/fused/kinds.py names them (``boolean``, ``int``,
``bigint``, ``float``, ``double``, ``timestamp``; ``null`` for a NULL literal). Nodes whose
result type is not fixed by the construct carry it as ``kind``; a comparison or a logical
node is BOOLEAN, :class:`Sqrt` DOUBLE, :class:`FloorDiv` BIGINT, a :class:`Column` or
:class:`WindowRef` the type of what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Union

Value = Union[bool, int, float, None]


class Expr:
    """An expression node; :func:`walk` visits it and those below it."""

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True)
class Column(Expr):
    """A column of the level's input, by lower-case ``name`` (a GROUP BY level's outputs
    read its keys as ``__g<i>``)."""

    name: str


@dataclass(frozen=True)
class Literal(Expr):
    """A constant of ``kind`` (None: NULL)."""

    value: Value
    kind: str


@dataclass(frozen=True)
class WindowRef(Expr):
    """The value of the level's ``index``-th window (or a GROUP BY level's aggregate)."""

    index: int


@dataclass(frozen=True)
class Cast(Expr):
    """``arg`` as ``kind``: a widening (never fails, rounds as numpy does) or a BOOLEAN as a
    number; also a timestamp's microseconds as BIGINT and back (the same int64 values)."""

    arg: Expr
    kind: str

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Arith(Expr):
    """``left op right``, ``op`` one of ``+ - * /``, both sides of ``kind`` (``/``: DOUBLE).
    Integer overflow and division by zero follow ANSI mode."""

    op: str
    left: Expr
    right: Expr
    kind: str

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class Neg(Expr):
    """``-arg`` (the smallest integer overflows)."""

    arg: Expr
    kind: str

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Abs(Expr):
    """``abs(arg)`` (of the smallest integer: an overflow in ANSI mode, else itself)."""

    arg: Expr
    kind: str

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Sqrt(Expr):
    """``sqrt(arg)`` of a DOUBLE (of a negative number: NaN, as Spark)."""

    arg: Expr

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Pmod(Expr):
    """``pmod(arg, divisor)`` by a positive integer constant: numpy's floor modulo."""

    arg: Expr
    divisor: int
    kind: str

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class FloorDiv(Expr):
    """A timestamp's microseconds floor-divided by a positive constant (``unix_millis``,
    ``unix_seconds``): BIGINT."""

    arg: Expr
    divisor: int

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Compare(Expr):
    """``left how right``, ``how`` one of ``eq ne lt le gt ge`` (udfs/spark_order.py),
    both sides of one kind; NULL where either side is."""

    how: str
    left: Expr
    right: Expr

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class NullSafeEq(Expr):
    """``left <=> right`` (``negate``: IS DISTINCT FROM): NULL equals NULL only; never
    NULL itself."""

    left: Expr
    right: Expr
    negate: bool = False

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class IsNull(Expr):
    """``arg IS NULL`` (``negate``: IS NOT NULL)."""

    arg: Expr
    negate: bool = False

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class Not(Expr):
    arg: Expr

    def children(self):
        return (self.arg,)


@dataclass(frozen=True)
class And(Expr):
    """Three-valued AND; ``right`` is evaluated only where ``left`` is not false."""

    left: Expr
    right: Expr

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class Or(Expr):
    """Three-valued OR; ``right`` is evaluated only where ``left`` is not true."""

    left: Expr
    right: Expr

    def children(self):
        return (self.left, self.right)


@dataclass(frozen=True)
class Case(Expr):
    """``CASE WHEN cond THEN value ... ELSE otherwise END`` (no ELSE: None, NULL), every
    value of ``kind``; a branch is evaluated only on the rows it takes."""

    branches: tuple[tuple[Expr, Expr], ...]
    otherwise: Expr | None
    kind: str

    def children(self):
        pairs = tuple(x for pair in self.branches for x in pair)
        return pairs if self.otherwise is None else pairs + (self.otherwise,)


@dataclass(frozen=True)
class Coalesce(Expr):
    """The first of ``args`` (all of ``kind``) that is not NULL; each evaluated only where
    those before it are NULL."""

    args: tuple[Expr, ...]
    kind: str

    def children(self):
        return self.args


#: Every node class (an evaluator has one ``visit_<name>`` method per class).
NODES = (Column, Literal, WindowRef, Cast, Arith, Neg, Abs, Sqrt, Pmod, FloorDiv, Compare,
         NullSafeEq, IsNull, Not, And, Or, Case, Coalesce)


def walk(node: Expr) -> Iterator[Expr]:
    """``node`` and every node below it."""
    yield node
    for child in node.children():
        yield from walk(child)


def columns_read(roots) -> set[str]:
    """The names of the columns the nodes ``roots`` (None: none) read."""
    return {node.name for root in roots if root is not None
            for node in walk(root) if isinstance(node, Column)}
