"""The column arrays the window kernel works on: group keys and aggregates over frames.

A column travels as a pair of arrays, its values and its NULL mask (so a NULL and a NaN
double stay different keys). Group keys become dense codes or 64-bit hashes the way Spark's
grouping sees them (NULL a value of its own, ``-0.0`` equal to ``0.0``, every NaN equal);
aggregates over row frames keep the batch plan's arithmetic (``udfs.time_windows``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

from wavesql.udfs.time_windows import aggregate_frames, combined_codes

from .window_types import Aggregate


# -- group keys ----------------------------------------------------------------------
def key_hash(keys: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """A 64-bit hash of each row's group keys (NULL, ``-0.0`` and NaN as grouping sees
    them)."""
    out = np.zeros(n, np.uint64)
    for i, (values, null) in enumerate(keys):
        if values.dtype.kind == "f":
            values = np.where(np.isnan(values), np.nan, values + 0.0)
        hashed = pd.util.hash_array(np.asarray(values), categorize=False)
        out = out * np.uint64(1_000_003) + np.where(null, np.uint64(i + 1), hashed)
    return out.view(np.int64)


def key_codes(keys: list[tuple[np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """Dense codes of the rows' group keys (all columns together); NULL is a value of its
    own, ``-0.0`` groups with ``0.0`` and every NaN with every NaN (Spark's grouping)."""
    if not keys:
        return np.zeros(n, np.int64)
    codes = []
    for values, null in keys:
        if values.dtype.kind == "f":
            values = np.where(np.isnan(values), np.nan, values + 0.0)
        c, uniques = pd.factorize(values, use_na_sentinel=False)
        c = np.where(null, len(uniques), c).astype(np.int64)
        codes.append(c)
    combined = combined_codes(codes)
    if combined is None:  # too many distinct values to pack: factorize the tuples
        combined = pd.factorize(pd.MultiIndex.from_arrays(codes))[0].astype(np.int64)
    return pd.factorize(combined)[0].astype(np.int64)


def first_of_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of one occurrence of each distinct ``(a, b)`` pair, ordered by ``(a, b)``."""
    if len(a) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort((b, a))
    a, b = a[order], b[order]
    new = np.ones(len(order), bool)
    new[1:] = (a[1:] != a[:-1]) | (b[1:] != b[:-1])
    return order[new]


def to_table(columns: dict) -> pa.Table:
    return pa.table({name: pa.array(v) for name, v in columns.items()})


def keys_from(table: pa.Table | None, k: int) -> list:
    if table is None:
        return []
    return [(np_column(table, f"k{i}"), np_column(table, f"kn{i}")) for i in range(k)]


def np_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False)


def key_columns(keys: list) -> dict:
    out = {}
    for i, (values, null) in enumerate(keys):
        out[f"k{i}"], out[f"kn{i}"] = values, null
    return out


def concat_columns(a: list, b: list) -> list:
    """Columns of (values, NULL mask) pairs, ``a``'s rows then ``b``'s."""
    return [(concat_arrays(av, bv), np.concatenate([an, bn])) for (av, an), (bv, bn) in zip(a, b)]


def concat_arrays(*arrays: np.ndarray) -> np.ndarray:
    """``np.concatenate``, as objects if any is (strings: pyarrow hands them so)."""
    if any(a.dtype == object for a in arrays):
        return np.concatenate([a.astype(object) for a in arrays])
    return np.concatenate(arrays)


def take_keys(keys: list, idx) -> list:
    return [(v[idx], n[idx]) for v, n in keys]


# -- aggregates over frames ------------------------------------------------------------
def _arrow_type(values: np.ndarray):
    return pa.int64() if values.dtype.kind in "iub" else pa.float64()


def frame_values(agg: Aggregate, valid: np.ndarray, x: np.ndarray, lo, hi):
    """(values, NULL mask) of ``agg`` over the frames ``[lo, hi)`` of ``(valid, x)``."""
    x = np.where(valid, x, 0).astype(x.dtype, copy=False)  # the frames skip NULLs as zeros
    arr = aggregate_frames(agg.func, (_arrow_type(x), valid, x), lo, hi)
    null = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), bool)
    values = arr.fill_null(0).to_numpy(zero_copy_only=False)
    return values, null
