"""How values travel from Spark SQL to the state-store kernels, and the refusal they share.

A group key, tie-order column or aggregate argument is encoded per input row as a value
pandas keeps exact plus a NULL flag (:data:`KEY_TYPES`); a shape the state store does not
run is :class:`NotIncremental` with the reason (``EXPLAIN STREAM`` shows it).
"""

from __future__ import annotations

#: Spark types a group key or tie-order column may have, and how it travels to the kernel
#: (a value that pandas keeps exact): (encoding SQL over ``{v}``, encoded type, decoding).
KEY_TYPES = {
    "string": ("{v}", "string", "{v}"),
    "boolean": ("{v}", "boolean", "{v}"),
    "tinyint": ("CAST({v} AS BIGINT)", "bigint", "CAST({v} AS TINYINT)"),
    "smallint": ("CAST({v} AS BIGINT)", "bigint", "CAST({v} AS SMALLINT)"),
    "int": ("CAST({v} AS BIGINT)", "bigint", "CAST({v} AS INT)"),
    "bigint": ("{v}", "bigint", "{v}"),
    "float": ("CAST({v} AS DOUBLE)", "double", "CAST({v} AS FLOAT)"),
    "double": ("{v}", "double", "{v}"),
    "date": ("unix_date({v})", "bigint", "date_from_unix_date(CAST({v} AS INT))"),
    "timestamp": ("unix_micros({v})", "bigint", "timestamp_micros({v})"),
}
#: The zero each encoded type is filled with where the value is NULL.
_FILL = {"string": "''", "boolean": "false", "bigint": "0L", "double": "0.0D"}
INTEGRAL = ("tinyint", "smallint", "int", "bigint")
FLOATING = ("float", "double")


class NotIncremental(Exception):
    """The query is not of a shape the stateful runner evaluates (the reason)."""
