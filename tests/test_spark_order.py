"""udfs/spark_order.py against a hand-written table of Spark's answers (no Spark): NaN equals
NaN and is above every number, infinities included; -0.0 equals 0.0; integers compare with
floats by value. Each row is checked alone (the no-NaN fast path where it has no NaN) and
all rows together (one NaN sends every row through the NaN-aware path)."""

from __future__ import annotations

import numpy as np
import pytest

from wavesql.udfs import program
from wavesql.udfs.spark_order import UFUNCS, compare

NAN, INF = float("nan"), float("inf")
HOWS = ("eq", "ne", "lt", "le", "gt", "ge")

#: (a, b, the comparisons that are true, in HOWS' order: eq ne lt le gt ge)
TABLE = [
    (1.0, 2.0, "ne lt le"),
    (2.0, 1.0, "ne gt ge"),
    (1.5, 1.5, "eq le ge"),
    (NAN, NAN, "eq le ge"),
    (NAN, 1.0, "ne gt ge"),
    (1.0, NAN, "ne lt le"),
    (NAN, INF, "ne gt ge"),
    (INF, NAN, "ne lt le"),
    (-INF, NAN, "ne lt le"),
    (NAN, -INF, "ne gt ge"),
    (INF, INF, "eq le ge"),
    (-INF, INF, "ne lt le"),
    (-0.0, 0.0, "eq le ge"),
    (0.0, -0.0, "eq le ge"),
    (-0.0, NAN, "ne lt le"),
]

#: integers against integers and floats, by value
MIXED = [
    (3, 3.0, "eq le ge"),
    (3, 2.5, "ne gt ge"),
    (-1, 0.0, "ne lt le"),
    (0, -0.0, "eq le ge"),
    (7, NAN, "ne lt le"),
    (2**53 + 1, INF, "ne lt le"),
]
INTS = [(3, 3, "eq le ge"), (-5, 4, "ne lt le"), (2**62, -(2**62), "ne gt ge")]


def _expected(rows, how):
    return np.array([how in true.split() for _, _, true in rows])


@pytest.mark.parametrize("how", HOWS)
def test_floats_row_by_row_and_together(how):
    for a, b, true in TABLE:
        got = compare(how, np.array([a]), np.array([b]))
        assert got.tolist() == [how in true.split()], (a, how, b)
    a = np.array([r[0] for r in TABLE])
    b = np.array([r[1] for r in TABLE])
    assert compare(how, a, b).tolist() == _expected(TABLE, how).tolist()


@pytest.mark.parametrize("how", HOWS)
def test_float32_is_ordered_alike(how):
    a = np.array([r[0] for r in TABLE], dtype=np.float32)
    b = np.array([r[1] for r in TABLE], dtype=np.float32)
    assert compare(how, a, b).tolist() == _expected(TABLE, how).tolist()


@pytest.mark.parametrize("how", HOWS)
def test_integers_against_floats_and_integers(how):
    ints = np.array([r[0] for r in MIXED], dtype=np.int64)
    floats = np.array([r[1] for r in MIXED])
    assert compare(how, ints, floats).tolist() == _expected(MIXED, how).tolist()
    a = np.array([r[0] for r in INTS], dtype=np.int64)
    b = np.array([r[1] for r in INTS], dtype=np.int64)
    assert compare(how, a, b).tolist() == _expected(INTS, how).tolist()


def test_without_nan_it_is_numpy():
    rng = np.random.default_rng(3)
    a, b = rng.integers(-3, 3, 200).astype(float), rng.integers(-3, 3, 200).astype(float)
    for how, ufunc in UFUNCS.items():
        assert (compare(how, a, b) == ufunc(a, b)).all()


def test_an_unknown_comparison_is_an_error():
    with pytest.raises(KeyError):
        compare("like", np.array([1.0]), np.array([NAN]))


def test_signal_programs_compare_alike():
    """udfs/program.py's operators are the same comparisons."""
    a = np.array([r[0] for r in TABLE])
    b = np.array([r[1] for r in TABLE])
    for op, how in {"=": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt",
                    ">=": "ge"}.items():
        assert program._compare(op, a, b).tolist() == _expected(TABLE, how).tolist()
