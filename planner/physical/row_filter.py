"""A query's WHERE as a row filter a direct pass applies itself, exactly as Spark would.

The chunked OVER windows (planner/physical/chunked_windows.py) read a Parquet stream's
files straight with pyarrow only when they can also apply the SELECT's WHERE before the
windows (SQL's order). :func:`as_row_filter` turns the WHERE into the nested tuples
sources/parquet_chunks.py evaluates (``evaluate_filter``), or says None when the answer
could differ from Spark's (casts, functions, literals of another type...): the query then
keeps the shuffled pass, whose WHERE Spark applies.
"""

from __future__ import annotations

from sqlglot import exp

_COMPARE = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater",
            exp.GTE: "greater_equal", exp.LT: "less", exp.LTE: "less_equal"}


_MIRROR = {"equal": "equal", "not_equal": "not_equal", "greater": "less",
           "greater_equal": "less_equal", "less": "greater", "less_equal": "greater_equal"}


def as_row_filter(node, names: dict, fields):
    """A WHERE as a row filter for sources/parquet_chunks.py (nested tuples), or None when
    it is not one whose answer is certain to be Spark's: AND / OR / NOT of comparisons
    between a column and a literal of its kind (integer literals for integer columns, any
    number for floating ones, strings for strings, TRUE/FALSE for booleans), BETWEEN, IS
    [NOT] NULL and bare boolean columns. Anything else (functions, casts, timestamps, IN,
    arithmetic) leaves the query to the shuffled pass."""
    if isinstance(node, exp.Paren):
        return as_row_filter(node.this, names, fields)
    if isinstance(node, (exp.And, exp.Or)):
        a = as_row_filter(node.left, names, fields)
        b = as_row_filter(node.right, names, fields)
        return None if a is None or b is None else (
            "and" if isinstance(node, exp.And) else "or", a, b)
    if isinstance(node, exp.Not):
        a = as_row_filter(node.this, names, fields)
        return None if a is None else ("not", a)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        col = _filter_column(node.this, names)
        return None if col is None else ("is_null", col)
    if isinstance(node, exp.Column):
        col = _filter_column(node, names)
        return ("column", col) if col and _kind(fields[col]) == "boolean" else None
    if isinstance(node, exp.Between):
        low = as_row_filter(
            exp.GTE(this=node.this.copy(), expression=node.args["low"].copy()), names, fields)
        high = as_row_filter(
            exp.LTE(this=node.this.copy(), expression=node.args["high"].copy()), names, fields)
        return None if low is None or high is None else ("and", low, high)
    op = _COMPARE.get(type(node))
    if op is None:
        return None
    left, right = node.this, node.expression
    if _filter_column(left, names) is None:
        left, right, op = right, left, _MIRROR[op]
    col = _filter_column(left, names)
    if col is None:
        return None
    kind = _kind(fields[col])
    value = _literal(right, kind)
    if value is None:
        return None
    return ("compare", op, col, value, kind == "floating")


def _filter_column(node, names: dict):
    return names.get(node.name.lower()) if isinstance(node, exp.Column) else None


def _kind(field) -> str | None:
    from pyspark.sql import types as T

    t = field.dataType
    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return "integral"
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return "floating"
    if isinstance(t, T.StringType):
        return "string"
    if isinstance(t, T.BooleanType):
        return "boolean"
    return None


def _literal(node, kind):
    """The Python value of a literal of the column's kind, else None."""
    negative = False
    if isinstance(node, exp.Neg):
        node, negative = node.this, True
    if kind == "boolean":
        return node.this if isinstance(node, exp.Boolean) and not negative else None
    if not isinstance(node, exp.Literal):
        return None
    if kind == "string":
        return node.this if node.is_string and not negative else None
    if node.is_string or kind not in ("integral", "floating"):
        return None
    text = node.this
    try:
        value = int(text) if kind == "integral" else float(text)
    except ValueError:
        return None  # 2.5 against an integer column: Spark compares as DECIMAL
    if kind == "integral" and not -(1 << 63) <= (-value if negative else value) < (1 << 63):
        return None
    return -value if negative else value
