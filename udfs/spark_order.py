"""Spark's comparison of numbers, vectorised: the one place its NaN ordering is written down.

Spark orders floating-point values with NaN *equal to NaN* and *above every number*
(infinity included), while IEEE comparison (numpy's) makes every comparison with NaN false
but ``!=``. A filter or CASE WaveSQL evaluates itself must keep exactly the rows Spark would,
so both numpy evaluators -- the fused chain's (udfs/fused/evaluate.py) and the signal
program's (udfs/program.py) -- compare through :func:`compare`. ``-0.0`` equals ``0.0``, as
in Spark's comparisons. Without a NaN (the usual case) numpy's own order is Spark's, and
:func:`compare` is one numpy call.
"""

from __future__ import annotations

import numpy as np

#: The comparisons, by name, as numpy's ufuncs (IEEE: right wherever there is no NaN).
UFUNCS = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
          "gt": np.greater, "ge": np.greater_equal}


def compare(how: str, a, b) -> np.ndarray:
    """``a <how> b`` elementwise in Spark's order (``how``: one of :data:`UFUNCS`' names):
    for floating values NaN equals NaN and is above every number."""
    ufunc = UFUNCS[how]
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return ufunc(a, b)
    an, bn = np.isnan(a), np.isnan(b)
    if not (an.any() or bn.any()):
        return ufunc(a, b)
    if how in ("gt", "ge"):  # a > b is b < a
        a, b, an, bn = b, a, bn, an
        how = "lt" if how == "gt" else "le"
    eq = (a == b) | (an & bn)
    if how == "eq":
        return eq
    if how == "ne":
        return ~eq
    lt = (a < b) | (~an & bn)  # (a < b is false wherever either is NaN)
    return lt if how == "lt" else lt | eq
