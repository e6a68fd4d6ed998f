"""Column types and time literals: from the parsed AST to catalog values.

Column types are kept as Spark SQL type strings (``double``, ``array<float>``,
``decimal(10,2)``) because Spark is where they are finally interpreted. This module decides
which parsed types WaveSQL accepts and turns WaveSQL time literals (``5 SECONDS``,
``INTERVAL '100' MILLISECOND``) into integer microseconds -- never float seconds, which
cannot tell two audio samples apart.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.errors import Span, WaveSQLError, did_you_mean

_T = exp.DataType.Type

#: Parsed type kinds WaveSQL accepts for declared columns (what Spark can read from files).
SUPPORTED_TYPES: frozenset = frozenset({
    _T.BOOLEAN, _T.TINYINT, _T.SMALLINT, _T.INT, _T.BIGINT, _T.FLOAT, _T.DOUBLE,
    _T.DECIMAL, _T.TEXT, _T.VARCHAR, _T.CHAR, _T.DATE, _T.TIMESTAMP, _T.TIMESTAMPTZ,
    _T.TIMESTAMPNTZ, _T.TIMESTAMPLTZ, _T.BINARY, _T.VARBINARY, _T.ARRAY, _T.MAP, _T.STRUCT,
})

#: Names a user may write, for "did you mean" hints.
TYPE_NAMES = (
    "BOOLEAN", "TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "FLOAT", "DOUBLE", "DECIMAL",
    "STRING", "VARCHAR", "CHAR", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ",
    "BINARY", "ARRAY", "MAP", "STRUCT",
)

#: Types a signal channel may have: samples are numbers.
SAMPLE_TYPES: frozenset = frozenset({_T.FLOAT, _T.DOUBLE, _T.SMALLINT, _T.INT, _T.TINYINT})

_UNIT_US = {
    "MICROSECOND": 1,
    "MILLISECOND": 1_000,
    "SECOND": 1_000_000,
    "MINUTE": 60_000_000,
    "HOUR": 3_600_000_000,
    "DAY": 86_400_000_000,
    "WEEK": 7 * 86_400_000_000,
}


def spark_type(dtype: exp.DataType, where: exp.Expression | None = None,
               top_level: frozenset | None = None) -> str:
    """Validate a parsed column type and return its Spark SQL spelling.

    Every type in ``dtype`` (element types included) must be one WaveSQL reads from files,
    else ``UNKNOWN_TYPE`` with a did-you-mean hint. ``top_level`` narrows the outer type
    (signal channels must be numeric), else ``TYPE_ERROR``.

    >>> import sqlglot
    >>> spark_type(sqlglot.parse_one("ARRAY<FLOAT>", into=exp.DataType, read="spark"))
    'ARRAY<FLOAT>'
    """
    for node in dtype.walk():
        if isinstance(node, exp.DataType) and node.this not in SUPPORTED_TYPES:
            shown = _type_text(node)
            raise WaveSQLError(
                "UNKNOWN_TYPE", f"unknown column type `{shown}`", Span.of(node) or Span.of(where),
                hint=did_you_mean(shown.split("(")[0].upper(), TYPE_NAMES, "types"))
    if top_level is not None and dtype.this not in top_level:
        raise WaveSQLError(
            "TYPE_ERROR", f"type `{_type_text(dtype)}` is not allowed here",
            Span.of(dtype) or Span.of(where),
            hint="signal channels hold samples: use FLOAT or DOUBLE")
    return dtype.sql(dialect="spark")


def _type_text(node: exp.DataType) -> str:
    if node.this == _T.USERDEFINED:
        return str(node.args.get("kind") or node.name or node.sql())
    return node.sql(dialect="spark")


def interval_us(node: exp.Expression) -> int:
    """Microseconds in a WaveSQL interval literal (``5 SECONDS``, ``INTERVAL '1' MINUTE``).

    Raises ``INVALID_OPTION`` for a negative, fractional-microsecond or unit-less value.
    """
    unit_node = node.args.get("unit") if isinstance(node, exp.Interval) else None
    value_node = node.this if isinstance(node, exp.Interval) else node
    unit = unit_node.name.upper() if unit_node is not None else ""
    unit = unit.rstrip("S") if unit.endswith("S") else unit
    if unit not in _UNIT_US:
        what = f"unknown time unit `{unit_node.name}`" if unit else f"`{node.sql()}` has no time unit"
        raise WaveSQLError("INVALID_OPTION", what, Span.of(unit_node) or Span.of(node),
                           hint="units: MICROSECONDS, MILLISECONDS, SECONDS, MINUTES, HOURS, DAYS "
                                "(e.g. `5 SECONDS`)")
    try:
        value = float(value_node.name if isinstance(value_node, exp.Literal)
                      else value_node.sql().strip("'"))
    except ValueError:
        raise WaveSQLError("INVALID_OPTION", f"`{node.sql()}` is not a number of {unit.lower()}s",
                           Span.of(node)) from None
    micros = value * _UNIT_US[unit]
    if micros < 0 or micros != int(micros):
        raise WaveSQLError("INVALID_OPTION",
                           f"interval `{node.sql()}` must be a non-negative whole number of "
                           "microseconds", Span.of(node))
    return int(micros)


def number(node: exp.Expression) -> float:
    """The numeric value of a literal (``48000``, ``-1``, ``44.1``), or raise INVALID_OPTION."""
    negative = False
    while isinstance(node, exp.Neg):
        negative = not negative
        node = node.this
    if isinstance(node, exp.Paren):
        return number(node.this) * (-1 if negative else 1)
    if isinstance(node, exp.Literal) and not node.is_string:
        value = float(node.this)
        return -value if negative else value
    raise WaveSQLError("INVALID_OPTION", f"expected a number, found `{node.sql()}`", Span.of(node))


#: Spark type strings of atomic types -> the PySpark type's class name.
_ATOMIC = {"boolean": "BooleanType", "tinyint": "ByteType", "smallint": "ShortType",
           "int": "IntegerType", "bigint": "LongType", "float": "FloatType",
           "double": "DoubleType", "timestamp": "TimestampType", "string": "StringType",
           "date": "DateType", "timestamp_ntz": "TimestampNTZType", "binary": "BinaryType"}


def spark_struct(fields):
    """The PySpark ``StructType`` of ``fields`` (ir.Field: name, Spark type string,
    nullability) -- a schema Spark's analysis already gave, without asking it again -- or
    None when a type is not atomic (decimals, arrays, structs: left to Spark to parse)."""
    from pyspark.sql import types as T

    out = []
    for f in fields:
        name = _ATOMIC.get(f.type.strip().lower())
        if name is None:
            return None
        out.append(T.StructField(f.name, getattr(T, name)(), f.nullable))
    return T.StructType(out)
