"""Evaluating a fused program's expression nodes over numpy columns, as Spark does.

An :class:`Evaluator` holds one set of rows -- the level's input columns and its windows'
results, each ``(values, valid)`` (udfs/fused/kinds.py) -- and evaluates a node over all of
them with the node class's ``visit_<Node>`` method (udfs/fused/expr.py: a new node is a
class there and a method here; a class without its method fails at import). Evaluation is
vectorised: the dispatch happens once per node, never per row.

**Semantics are Spark's** (tests/test_fused_chain.py compares every construct with Spark's
own plan): NULLs propagate; AND/OR are three-valued and short-circuit as Spark evaluates
them, so the ``active`` rows a node is evaluated for shrink under AND, OR, CASE and
COALESCE, and only active rows may raise (a division by zero in a CASE branch not taken is
no error); comparisons order NaN above every number and equal to itself
(udfs/spark_order.py); ``/`` is in DOUBLE; with ANSI mode on, integer ``+ - *``, unary
minus and ``abs`` raise on overflow and any ``/ 0`` raises (Spark's ``[DIVIDE_BY_ZERO]``,
``[ARITHMETIC_OVERFLOW]``), with it off they give NULL / wrap.
"""

from __future__ import annotations

import numpy as np

from wavesql.udfs.spark_order import compare

from . import expr as E
from .kinds import DTYPES


class ChainError(ArithmeticError):
    """A row's arithmetic fails as Spark's would (ANSI mode): ``[CODE] message``."""


class Evaluator:
    """Evaluates nodes over one set of rows: ``cols`` (lower-case name -> ``(values,
    valid)``) and ``wins`` (the level's window results, by index); ``ansi``: Spark's
    ``spark.sql.ansi.enabled``. ``evaluator(node, active)`` is the node's ``(values,
    valid)`` over every row; ``active`` marks the rows Spark evaluates it for, the only
    ones that may raise."""

    def __init__(self, cols, wins=(), ansi: bool = True):
        self.cols, self.wins, self.ansi = cols, wins, ansi

    def __call__(self, node: E.Expr, active):
        return _VISIT[type(node)](self, node, active)

    # --------------------------------------------------------------------- leaves
    def visit_Column(self, node: E.Column, active):
        return self.cols[node.name]

    def visit_WindowRef(self, node: E.WindowRef, active):
        return self.wins[node.index]

    def visit_Literal(self, node: E.Literal, active):
        n = len(active)
        if node.value is None:
            return (np.zeros(n, dtype=DTYPES.get(node.kind, np.float64)),
                    np.zeros(n, dtype=bool))
        return np.full(n, node.value, dtype=DTYPES[node.kind]), np.ones(n, dtype=bool)

    # ---------------------------------------------------------------- arithmetic
    def visit_Cast(self, node: E.Cast, active):
        # (no copy between types held alike: unix_micros, timestamp_micros)
        values, valid = self(node.arg, active)
        return values.astype(DTYPES[node.kind], copy=False), valid

    def visit_Arith(self, node: E.Arith, active):
        av, am = self(node.left, active)
        bv, bm = self(node.right, active)
        return _arith(node.op, node.kind, av, am, bv, bm, active, self.ansi)

    def visit_Neg(self, node: E.Neg, active):
        values, valid = self(node.arg, active)
        if node.kind in ("int", "bigint"):
            smallest = np.iinfo(DTYPES[node.kind]).min
            if self.ansi and (active & valid & (values == smallest)).any():
                overflow(node.kind)
        with np.errstate(over="ignore"):
            return -values, valid

    def visit_Abs(self, node: E.Abs, active):
        values, valid = self(node.arg, active)
        if node.kind in ("int", "bigint") and self.ansi:
            smallest = np.iinfo(DTYPES[node.kind]).min
            if (active & valid & (values == smallest)).any():
                overflow(node.kind)
        with np.errstate(over="ignore"):
            return np.abs(values), valid

    def visit_Sqrt(self, node: E.Sqrt, active):
        values, valid = self(node.arg, active)
        with np.errstate(invalid="ignore"):
            return np.sqrt(values), valid

    def visit_Pmod(self, node: E.Pmod, active):
        # by a positive constant (the planner's rule): numpy's floor modulo is Spark's pmod
        values, valid = self(node.arg, active)
        return np.mod(values, DTYPES[node.kind](node.divisor)), valid

    def visit_FloorDiv(self, node: E.FloorDiv, active):
        # unix_millis / unix_seconds: Math.floorDiv by a positive constant
        values, valid = self(node.arg, active)
        return np.floor_divide(values, node.divisor), valid

    # ----------------------------------------------------------------- predicates
    def visit_Compare(self, node: E.Compare, active):
        av, am = self(node.left, active)
        bv, bm = self(node.right, active)
        return compare(node.how, av, bv), am & bm

    def visit_NullSafeEq(self, node: E.NullSafeEq, active):
        av, am = self(node.left, active)
        bv, bm = self(node.right, active)
        same = (am & bm & compare("eq", av, bv)) | (~am & ~bm)
        return (~same if node.negate else same), np.ones(len(same), dtype=bool)

    def visit_IsNull(self, node: E.IsNull, active):
        _, am = self(node.arg, active)
        return (am if node.negate else ~am), np.ones(len(am), dtype=bool)

    def visit_Not(self, node: E.Not, active):
        values, valid = self(node.arg, active)
        return ~values, valid

    def visit_And(self, node: E.And, active):
        # Spark evaluates the right side only where the left is not false
        lv, lm = self(node.left, active)
        rv, rm = self(node.right, active & ~(lm & ~lv))
        false = (lm & ~lv) | (rm & ~rv)
        return lv & rv & lm & rm, false | (lm & rm)

    def visit_Or(self, node: E.Or, active):
        # Spark evaluates the right side only where the left is not true
        lv, lm = self(node.left, active)
        rv, rm = self(node.right, active & ~(lm & lv))
        true = (lm & lv) | (rm & rv)
        return true, true | (lm & rm)

    # ------------------------------------------------------------------ branching
    def visit_Case(self, node: E.Case, active):
        kind = node.kind
        pending = np.ones(len(active), dtype=bool)  # rows no earlier WHEN took
        taken = []
        for cond, value in node.branches:
            cv, cm = self(cond, active & pending)
            take = pending & cv & cm
            taken.append((take, self.branch(value, active & take, kind)))
            pending &= ~take
        if node.otherwise is None:
            values, valid = DTYPES[kind](0), np.False_
        else:
            values, valid = self.branch(node.otherwise, active & pending, kind)
        for take, (v, m) in taken:  # the WHENs take disjoint rows
            values, valid = np.where(take, v, values), np.where(take, m, valid)
        return values.astype(DTYPES[kind], copy=False), valid

    def branch(self, node: E.Expr, active, kind: str):
        """A CASE branch's ``(values, valid)``; a literal as a scalar (no array to fill)."""
        if isinstance(node, E.Literal):
            return (DTYPES[kind](0), np.False_) if node.value is None else \
                (DTYPES[kind](node.value), np.True_)
        return self(node, active)

    def visit_Coalesce(self, node: E.Coalesce, active):
        values = np.zeros(len(active), dtype=DTYPES[node.kind])
        valid = np.zeros(len(active), dtype=bool)
        for arg in node.args:
            v, m = self(arg, active & ~valid)
            take = ~valid & m
            values[take], valid = v[take], valid | m
        return values, valid


#: Node class -> its ``visit_<Node>`` method (every class of udfs/fused/expr.py has one).
_VISIT = {cls: getattr(Evaluator, f"visit_{cls.__name__}") for cls in E.NODES}


def evaluate(node: E.Expr, cols, wins, active, ansi: bool):
    """``(values, valid)`` of one node (:class:`Evaluator`)."""
    return Evaluator(cols, wins, ansi)(node, active)


def _arith(how: str, kind: str, av, am, bv, bm, active, ansi: bool):
    """``(a how b, valid)`` of two operands ``(av, am)``, ``(bv, bm)`` of ``kind``."""
    valid = am & bm
    if how == "/":  # DOUBLE; Spark checks the divisor first: 0 raises (ANSI) or gives NULL
        zero = bm & (bv == 0)
        if ansi and (active & zero).any():
            raise ChainError("[DIVIDE_BY_ZERO] Division by zero. Use `try_divide` to "
                             "tolerate divisor being 0 and return NULL instead." + _ANSI_OFF)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return av / np.where(zero, 1.0, bv), valid & ~zero
    ufunc = {"+": np.add, "-": np.subtract, "*": np.multiply}[how]
    if kind not in ("int", "bigint"):
        with np.errstate(over="ignore", invalid="ignore"):
            return ufunc(av, bv), valid
    with np.errstate(over="ignore"):
        if kind == "int":
            wide = ufunc(av.astype(np.int64), bv.astype(np.int64))
            bad = (wide < -(1 << 31)) | (wide >= (1 << 31))
            result = wide.astype(np.int32)
        else:
            result = ufunc(av, bv)
            bad = _long_overflow(how, av, bv, result)
    if ansi and (active & valid & bad).any():
        overflow(kind)
    return result, valid


def _long_overflow(how: str, a, b, r):
    """Where a wrapped int64 ``a (how) b = r`` overflowed."""
    if how == "+":
        return ((a ^ r) & (b ^ r)) < 0
    if how == "-":
        return ((a ^ b) & (a ^ r)) < 0
    suspect = np.abs(a.astype(np.float64) * b.astype(np.float64)) >= 2.0 ** 62
    bad = np.zeros(len(r), dtype=bool)
    for i in np.flatnonzero(suspect):  # rare: exact in Python integers
        exact = int(a[i]) * int(b[i])
        bad[i] = not (-(1 << 63) <= exact < (1 << 63))
    return bad


def overflow(kind: str):
    """Raise Spark's integer overflow error (ANSI mode) for a result of ``kind``."""
    raise ChainError(f"[ARITHMETIC_OVERFLOW] {'integer' if kind == 'int' else 'long'} "
                     "overflow. Use 'try_add', 'try_subtract' or 'try_multiply' to tolerate "
                     "overflow and return NULL instead." + _ANSI_OFF)


_ANSI_OFF = ' If necessary set "spark.sql.ansi.enabled" to "false" to bypass this error.'
