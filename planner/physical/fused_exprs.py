"""Compiling a SELECT's scalar expressions into the nodes of udfs/fused/expr.py.

:class:`Expressions` is the part of planner/physical/fused_compiler.py's ``Compiler`` that
turns one sqlglot expression into ``(node, kind)``: :meth:`Expressions.expr` looks the
expression's class up in a table of ``visit_<sqlglot class>`` methods (a subclass as its
nearest listed base: TRY_CAST as CAST, every aggregate as AggFunc), so a new construct is
one method. Each follows Spark's analysis: operands are widened to a common type
(planner/physical/fused_types.py) with explicit :class:`~udfs.fused.expr.Cast` nodes, and
anything whose numpy result could differ from Spark's raises ``Refuse``. Columns, windows
and aggregates are the compiler's (name resolution, frames, groups).

Expressions: columns, number/boolean/NULL literals, ``+ - * /``, unary minus,
comparisons, ``<=>`` / IS [NOT] DISTINCT FROM, IS [NOT] NULL, AND/OR/NOT, BETWEEN, CASE,
IF, NULLIF, COALESCE, ABS, SQRT, ``unix_micros / unix_millis / unix_seconds``,
``timestamp_micros``, ``pmod`` by a positive integer literal, widening CASTs and CASTs of
BOOLEAN to numbers, over BOOLEAN, INT, BIGINT, FLOAT, DOUBLE and TIMESTAMP columns.
"""

from __future__ import annotations

import functools

from sqlglot import exp

from wavesql.udfs import fused
from wavesql.udfs.fused import expr as ir

from .fused_types import (CASTS, NUMERIC_LIT, WIDER, Refuse, cast_kind, common,
                          common_numeric, literal)

#: unix_micros / unix_millis / unix_seconds: the microseconds floor-divided by this
_UNIX = {exp.UnixMicros: 1, exp.UnixMillis: 1000, exp.UnixSeconds: 1_000_000}
_ARITH = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
_COMPARE = {exp.EQ: "eq", exp.NEQ: "ne", exp.GT: "gt", exp.GTE: "ge", exp.LT: "lt",
            exp.LTE: "le"}


class Expressions:
    """The expression visitor of a ``Compiler`` (which provides ``resolve``, ``window``,
    ``aggregate``, ``group`` and ``ansi``)."""

    def expr(self, e):
        """``(node, kind)`` of the sqlglot expression ``e``: the ``visit_<class>`` method of
        its class or nearest base class (:func:`_visitor`); other constructs refuse."""
        return _visitor(type(e))(self, e)

    def visit_Column(self, e):
        return self.resolve(e)  # (the compiler's: the scope, the join, the GROUP BY)

    def visit_AggFunc(self, e):  # every aggregate (one in an OVER is visit_Window's)
        return self.aggregate(e)

    def visit_Paren(self, e):
        return self.expr(e.this)

    def visit_Literal(self, e):
        return literal(e)

    def visit_Boolean(self, e):
        return ir.Literal(bool(e.this), "boolean"), "boolean"

    def visit_Null(self, e):
        return ir.Literal(None, "null"), "null"

    def visit_Window(self, e):
        if self.group is not None:
            raise Refuse  # windows over groups
        return self.window(e)  # (the compiler's)

    def visit_Sqrt(self, e):
        a, kind = self.expr(e.this)
        return ir.Sqrt(self.to(a, kind, "double")), "double"

    def arithmetic(self, e):  # + - * /
        a, ka = self.expr(e.this)
        b, kb = self.expr(e.expression)
        kind = common_numeric(ka, kb, self.ansi)
        if isinstance(e, exp.Div):
            kind = "double"  # Spark divides in DOUBLE (DECIMAL refused above)
        op = _ARITH[type(e)]
        return ir.Arith(op, self.to(a, ka, kind), self.to(b, kb, kind), kind), kind

    visit_Add = visit_Sub = visit_Mul = visit_Div = arithmetic

    def visit_Neg(self, e):
        a, kind = self.expr(e.this)
        if isinstance(a, ir.Literal) and kind in NUMERIC_LIT:
            return ir.Literal(None if a.value is None else -a.value, kind), kind
        if kind not in fused.NUMERIC:
            raise Refuse
        return ir.Neg(a, kind), kind

    def comparison(self, e):  # = != > >= < <=
        return self.compare(_COMPARE[type(e)], e.this, e.expression)

    visit_EQ = visit_NEQ = visit_GT = visit_GTE = visit_LT = visit_LTE = comparison

    def null_safe(self, e):  # <=>, IS [NOT] DISTINCT FROM
        a, b, _ = self.comparable(e.this, e.expression)
        return ir.NullSafeEq(a, b, isinstance(e, exp.NullSafeNEQ)), "boolean"

    visit_NullSafeEQ = visit_NullSafeNEQ = null_safe

    def visit_Is(self, e):
        if not isinstance(e.expression, exp.Null):
            raise Refuse
        a, _ = self.expr(e.this)
        return ir.IsNull(a), "boolean"

    def visit_Not(self, e):
        if isinstance(e.this, exp.Is) and isinstance(e.this.expression, exp.Null):
            a, _ = self.expr(e.this.this)
            return ir.IsNull(a, negate=True), "boolean"
        a, kind = self.expr(e.this)
        return ir.Not(self.to(a, kind, "boolean")), "boolean"

    def logical(self, e):  # AND, OR
        a, ka = self.expr(e.this)
        b, kb = self.expr(e.expression)
        node = ir.And if isinstance(e, exp.And) else ir.Or
        return node(self.to(a, ka, "boolean"), self.to(b, kb, "boolean")), "boolean"

    visit_And = visit_Or = logical

    def visit_Between(self, e):
        if e.args.get("symmetric"):
            raise Refuse
        low, _ = self.compare("ge", e.this, e.args["low"])
        high, _ = self.compare("le", e.this, e.args["high"])
        return ir.And(low, high), "boolean"

    def visit_Case(self, e):
        operand = e.this
        pairs = []
        for branch in e.args.get("ifs") or []:
            cond = (exp.EQ(this=operand.copy(), expression=branch.this.copy())
                    if operand is not None else branch.this)
            pairs.append((cond, branch.args["true"]))
        return self.case(pairs, e.args.get("default"))

    def visit_If(self, e):
        return self.case([(e.this, e.args["true"])], e.args.get("false"))

    def visit_Nullif(self, e):
        a, kind = self.expr(e.this)
        if kind in ("null", "decimal"):
            raise Refuse
        cond, _ = self.compare("eq", e.this, e.expression)
        return ir.Case(((cond, ir.Literal(None, kind)),), a, kind), kind

    def visit_Coalesce(self, e):
        args = [self.expr(a) for a in [e.this] + list(e.expressions)]
        kind = common([k for _, k in args], self.ansi)
        return ir.Coalesce(tuple(self.to(a, k, kind) for a, k in args), kind), kind

    def visit_Abs(self, e):
        a, kind = self.expr(e.this)
        if kind not in fused.NUMERIC:
            raise Refuse
        return ir.Abs(a, kind), kind

    def visit_Cast(self, e):  # (and TRY_CAST, a subclass: only casts that cannot fail)
        a, kind = self.expr(e.this)
        to = cast_kind(e.args.get("to"))
        if kind == to:
            return a, kind
        if isinstance(a, ir.Literal) and kind == "decimal" and to == "double":
            return ir.Literal(a.value, "double"), "double"  # the literal's nearest double
        if to not in CASTS.get(kind, ()):
            raise Refuse  # a cast that can fail or round differently
        return ir.Cast(a, to), to

    def unix_time(self, e):  # a timestamp's microseconds: floor-divided by 10^k
        a, kind = self.expr(e.this)
        if kind != "timestamp":
            raise Refuse  # a string or date Spark would cast first
        unit = _UNIX[type(e)]
        return (ir.Cast(a, "bigint") if unit == 1 else ir.FloorDiv(a, unit)), "bigint"

    visit_UnixMicros = visit_UnixMillis = visit_UnixSeconds = unix_time

    def visit_Anonymous(self, e):  # functions sqlglot does not know, by name
        name, args = str(e.this).lower(), e.expressions
        if name == "timestamp_micros" and len(args) == 1:
            a, kind = self.expr(args[0])
            if kind not in ("int", "bigint"):
                raise Refuse
            return ir.Cast(self.to(a, kind, "bigint"), "timestamp"), "timestamp"
        if name == "pmod" and len(args) == 2:
            return self.pmod(*args)
        raise Refuse

    def pmod(self, x, divisor):
        """By a positive integer literal (a bucket's width): numpy's floor modulo is Spark's
        pmod then; other divisors (0, negative, columns) are Spark's to do."""
        a, ka = self.expr(x)
        n, kn = self.expr(divisor)
        if not isinstance(n, ir.Literal) or kn not in ("int", "bigint") or n.value is None \
                or n.value <= 0 or ka not in ("int", "bigint"):
            raise Refuse
        kind = common_numeric(ka, kn, self.ansi)
        return ir.Pmod(self.to(a, ka, kind), n.value, kind), kind

    # ---------------------------------------------------------------- coercion
    def to(self, node, kind, want):
        """``node`` of ``kind`` as ``want`` (Spark's implicit widening); refuses otherwise."""
        if kind == want:
            return node
        if isinstance(node, ir.Literal) and (kind == "null" or (
                kind == "decimal" and want in ("float", "double"))):
            return ir.Literal(node.value, want)
        if isinstance(node, ir.Literal) and kind in ("int", "bigint") \
                and want in fused.NUMERIC:
            return ir.Literal(node.value, want)
        if want in WIDER.get(kind, ()):
            return ir.Cast(node, want)
        raise Refuse

    def comparable(self, left, right):
        """Both sides compiled and widened to their common type: ``(a, b, kind)``."""
        a, ka = self.expr(left)
        b, kb = self.expr(right)
        if ka in NUMERIC_LIT and kb in NUMERIC_LIT:
            kind = common_numeric(ka, kb, self.ansi)
        else:
            kind = common([ka, kb], self.ansi)
        return self.to(a, ka, kind), self.to(b, kb, kind), kind

    def compare(self, how, left, right):
        a, b, _ = self.comparable(left, right)
        return ir.Compare(how, a, b), "boolean"

    def case(self, pairs, otherwise):
        """``CASE WHEN cond THEN value ... ELSE otherwise END`` of sqlglot expressions; the
        values widened to their common type."""
        conds, values = [], []
        for cond, value in pairs:
            c, kc = self.expr(cond)
            conds.append(self.to(c, kc, "boolean"))
            values.append(self.expr(value))
        if otherwise is not None:
            values.append(self.expr(otherwise))
        kind = common([k for _, k in values], self.ansi)
        cast = [self.to(v, k, kind) for v, k in values]
        branches = tuple(zip(conds, cast[:len(conds)]))
        default = cast[len(conds)] if otherwise is not None else None
        return ir.Case(branches, default, kind), kind


def _refuse(compiler, e):
    raise Refuse


#: sqlglot expression class -> the :class:`Expressions` method that compiles it
#: (``visit_<class name>``).
_VISITS = {getattr(exp, name.removeprefix("visit_")): method
           for name, method in vars(Expressions).items() if name.startswith("visit_")}


@functools.cache
def _visitor(cls):
    """The method compiling an expression of class ``cls``: its own or its nearest base
    class's (TRY_CAST is a CAST, every aggregate an AggFunc), else a refusal."""
    return next((_VISITS[c] for c in cls.__mro__ if c in _VISITS), _refuse)
