"""The value types of a fused program: how each Spark type is held in numpy and Arrow.

Every column and expression value of a fused program is a pair ``(values, valid)`` of numpy
arrays: the values in the dtype of :data:`DTYPES` and where they are not NULL (NULL rows
hold anything, usually 0). :func:`vector` makes such a pair from an Arrow column and
:func:`to_arrow` turns one back; :func:`result_type` is the type Spark gives a window
function or aggregate.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from wavesql.udfs import time_windows

#: Numeric types, narrowest first (Spark widens along this order).
NUMERIC = ("int", "bigint", "float", "double")
#: Spark type name -> the numpy dtype values are held in (TIMESTAMP: microseconds, UTC).
DTYPES = {"boolean": np.bool_, "int": np.int32, "bigint": np.int64, "float": np.float32,
          "double": np.float64, "timestamp": np.int64}
ARROW = {"boolean": pa.bool_(), "int": pa.int32(), "bigint": pa.int64(),
         "float": pa.float32(), "double": pa.float64(), "timestamp": pa.int64()}


def vector(column: pa.ChunkedArray, kind: str):
    """``(values, valid)`` of an Arrow column (NULLs as 0 / false, never read)."""
    if kind == "timestamp":
        column = column.cast(pa.timestamp("us")).cast(pa.int64())
    valid = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    values = column.fill_null(False if kind == "boolean" else 0).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=DTYPES[kind]), valid


def to_arrow(values, valid, kind: str) -> pa.Array:
    if kind == "timestamp":
        return pa.array(values, mask=~valid, type=pa.int64()).cast(pa.timestamp("us", "UTC"))
    return pa.array(values, mask=~valid, type=ARROW[kind])


def result_type(func: str, arg_type: str | None) -> str:
    """Spark's result type of a window function or aggregate over ``arg_type``."""
    rule = time_windows.FUNCTIONS.get(func, "double")  # kurtosis, skewness
    if func == "lag" or rule == "arg":
        return arg_type
    if rule == "sum":
        return "bigint" if arg_type in ("int", "bigint") else "double"
    return rule
