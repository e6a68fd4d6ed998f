"""The value kinds of a fused chain, and Spark's type coercion between them.

planner/physical/fused_compiler.py compiles a SELECT's expressions into the nodes of
udfs/fused/expr.py, each with a *kind*: one of :data:`KINDS` (the Spark types the numpy
program holds exactly as Spark does), ``"decimal"`` or ``"null"`` for literals that take the
type of what they meet, ``"opaque"`` for any other column. The functions here give the
result kind Spark's analyser would (widening, ANSI or legacy coercion, literals) and raise
:class:`Refuse` where the numpy result could differ from Spark's (DECIMAL arithmetic,
casts that can fail or round otherwise...): the SELECT then stays Spark's.
"""

from __future__ import annotations

import re

from sqlglot import exp

from wavesql.udfs.fused.expr import Literal
from wavesql.udfs.fused.kinds import NUMERIC

#: The Spark types a fused chain evaluates.
KINDS = ("boolean", "int", "bigint", "float", "double", "timestamp")
#: The numeric kinds, with those of a literal before it meets a column (decimal, null).
NUMERIC_LIT = NUMERIC + ("decimal", "null")
#: Casts that never fail and round as numpy does: kind -> kinds it widens to.
WIDER = {"int": ("bigint", "float", "double"), "bigint": ("float", "double"),
         "float": ("double",)}
#: The explicit CASTs among them: also BOOLEAN to a number (true 1, false 0).
CASTS = {**WIDER, "boolean": ("int", "bigint", "float", "double")}


class Refuse(Exception):
    """The SELECT is not one the fused pass evaluates exactly as Spark does."""


def kind_of(data_type) -> str:
    """The kind of a column of Spark type ``data_type``."""
    name = data_type.simpleString()
    return name if name in KINDS else "opaque"


def literal(e: exp.Literal):
    """``(node, kind)`` of a number literal; a string refuses."""
    if e.is_string:
        raise Refuse
    text = e.this
    if re.fullmatch(r"\d+", text):
        value = int(text)
        if value < (1 << 31):
            return Literal(value, "int"), "int"
        if value < (1 << 63):
            return Literal(value, "bigint"), "bigint"
        raise Refuse
    if re.fullmatch(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+", text):
        return Literal(float(text), "double"), "double"
    if re.fullmatch(r"\d+\.\d*|\.\d+", text):
        return Literal(float(text), "decimal"), "decimal"  # meets only FLOAT / DOUBLE
    raise Refuse


def common_numeric(ka: str, kb: str, ansi: bool) -> str:
    """Spark's wider type of two numeric operands (DECIMAL literals only beside FLOAT or
    DOUBLE, where they become DOUBLE). With ANSI type coercion an INT or BIGINT meeting a
    FLOAT makes a DOUBLE (a FLOAT cannot hold every integer); without, a FLOAT."""
    kinds = {ka, kb} - {"null"}
    if not kinds or not kinds <= set(NUMERIC_LIT):
        raise Refuse
    if "decimal" in kinds:
        others = kinds - {"decimal"}
        if not others or not others <= {"float", "double"}:
            raise Refuse
        return "double"
    if ansi and "float" in kinds and kinds & {"int", "bigint"}:
        return "double"
    return max(kinds, key=NUMERIC.index)


def common(kinds, ansi: bool) -> str:
    """The common type of CASE branches / COALESCE arguments / comparison sides."""
    known = [k for k in kinds if k != "null"]
    if not known:
        raise Refuse
    if all(k in NUMERIC_LIT for k in known):
        kind = known[0]
        for k in known[1:]:
            kind = common_numeric(kind, k, ansi)
        if kind == "decimal":
            raise Refuse
        return kind
    if len(set(known)) == 1 and known[0] in KINDS:
        return known[0]
    raise Refuse


def cast_kind(to) -> str:
    if not isinstance(to, exp.DataType) or to.expressions:
        raise Refuse
    names = {exp.DataType.Type.BOOLEAN: "boolean", exp.DataType.Type.INT: "int",
             exp.DataType.Type.BIGINT: "bigint", exp.DataType.Type.FLOAT: "float",
             exp.DataType.Type.DOUBLE: "double"}
    kind = names.get(to.this)
    if kind is None:
        raise Refuse
    return kind
