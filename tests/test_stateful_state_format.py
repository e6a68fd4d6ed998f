"""The state value's format (streaming/stateful/state.py): a column repeating an earlier one
is stored once, a column in long runs run-length encoded, both read back exactly; format 1
and 2 values (written before) still read.

No Spark. The oracle is the table itself (Arrow's equality, and the floats' bits through
numpy) and a format-1 value built here byte by byte from the documented layout.
"""

from __future__ import annotations

import json
import struct

import numpy as np
import pyarrow as pa
import pytest

from wavesql.streaming.stateful import state as st


def _table() -> pa.Table:
    n = 1000
    rng = np.random.default_rng(3)
    k = pa.array(rng.integers(0, 50, n).astype(str))
    x = rng.random(n)
    x[::97] = np.nan
    signed = x.copy()
    signed[::89] = -0.0
    unsigned = signed.copy()
    unsigned[::89] = 0.0
    ts = np.sort(rng.integers(0, 10**9, n))
    return pa.table({"ts": ts, "k0": k, "a0": x, "o0": k, "o1": pa.array(x), "o2": ts,
                     "z0": signed, "z1": unsigned, "l0": pa.array([[v] for v in x]),
                     "l1": pa.array([[v] for v in x])})


def _bits(column) -> np.ndarray:
    return column.to_numpy(zero_copy_only=False).view(np.int64)


def test_repeated_columns_are_stored_once_and_read_back_exactly():
    table = _table()
    value = st.encode("windowed-rows", {"bound": 5}, {"kept": table})
    meta, tables = st.decode("windowed-rows", value)
    back = tables["kept"]
    assert meta == {"bound": 5}
    assert back.column_names == table.column_names
    assert back.schema == table.schema
    for name in table.column_names:
        if pa.types.is_floating(table.column(name).type):  # NaN, -0.0 bit for bit
            assert np.array_equal(_bits(back.column(name)), _bits(table.column(name)))
        elif pa.types.is_list(table.column(name).type):
            assert np.array_equal(_bits(back.column(name).combine_chunks().flatten()),
                                  _bits(table.column(name).combine_chunks().flatten()))
        else:
            assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    # o0, o1, o2 repeat k0, a0, ts: stored once. z1 differs from z0 only in the sign of
    # zeros, and list columns are never compared: those are all kept.
    alone = st.encode("windowed-rows", {"bound": 5},
                      {"kept": table.drop_columns(["o0", "o1", "o2"])})
    assert len(value) < len(alone) + 200
    header = json.loads(value[len(st.MAGIC) + 5:len(st.MAGIC) + 5 + struct.unpack_from(
        "<BI", value, len(st.MAGIC))[1]])
    assert sorted(r[1] for r in header["tables"][0][2]) == ["o0", "o1", "o2"]


def test_a_format_1_value_still_reads():
    table = pa.table({"ts": [1, 2, 3], "k0": ["a", "b", None]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    stream = sink.getvalue().to_pybytes()
    header = json.dumps({"kind": "windowed-rows", "meta": {"bound": 7},
                         "tables": [["kept", len(stream)]]}).encode()
    value = b"WSQLSTATE" + struct.pack("<BI", 1, len(header)) + header + stream
    meta, tables = st.decode("windowed-rows", value)
    assert meta == {"bound": 7} and tables["kept"].equals(table)
    newer = b"WSQLSTATE" + struct.pack("<BI", 9, len(header)) + header + stream
    with pytest.raises(st.StateError, match="version 9"):
        st.decode("windowed-rows", newer)


def _header(value: bytes) -> dict:
    size = struct.unpack_from("<BI", value, len(st.MAGIC))[1]
    return json.loads(value[len(st.MAGIC) + 5:len(st.MAGIC) + 5 + size])


def test_columns_in_long_runs_are_run_length_encoded_and_read_back_exactly():
    # a window's rows kept together per key: the key, its hash and a timestamp column run
    # in long runs (NULLs too); floats never (-0.0 must not merge into a run of 0.0)
    rng = np.random.default_rng(5)
    keys = np.repeat(rng.permutation(2000).astype(str), 10).astype(object)
    keys[100:130] = None
    n = len(keys)
    zeros = np.zeros(n)
    zeros[::7] = -0.0
    table = pa.table({"ts": np.sort(rng.integers(0, 10**12, n)),
                      "h": pa.array(np.repeat(rng.integers(-2**62, 2**62, 2000), 10)),
                      "k0": pa.array(keys, pa.string()),
                      "day": pa.array(np.repeat(np.arange(20).astype("datetime64[D]"), n // 20)),
                      "flag": pa.array(np.repeat([True, False], n // 2)),
                      "zero": zeros, "o0": pa.array(keys, pa.string())})
    value = st.encode("windowed-rows", {"bound": 1}, {"kept": table})
    meta, tables = st.decode("windowed-rows", value)
    back = tables["kept"]
    assert back.schema == table.schema and back.column_names == table.column_names
    for name in table.column_names:
        if name == "zero":
            assert np.array_equal(_bits(back.column(name)), _bits(table.column(name)))
        else:
            assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    entry = _header(value)["tables"][0]
    assert sorted(entry[3]) == ["day", "h", "k0"]  # ts is unique, bools are bits, floats never
    assert [r[1] for r in entry[2]] == ["o0"]
    plain, alone = pa.BufferOutputStream(), table.drop_columns(["o0"])
    with pa.ipc.new_stream(plain, alone.schema) as writer:
        writer.write_table(alone)
    assert len(value) < 0.75 * len(plain.getvalue().to_pybytes())


def test_a_format_2_value_still_reads():
    table = pa.table({"ts": [1, 2, 3], "k0": ["a", "a", "a"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    stream = sink.getvalue().to_pybytes()
    header = json.dumps({"kind": "windowed-rows", "meta": {"bound": 7},
                         "tables": [["kept", len(stream), [[2, "o0", "k0"]]]]}).encode()
    value = b"WSQLSTATE" + struct.pack("<BI", 2, len(header)) + header + stream
    meta, tables = st.decode("windowed-rows", value)
    assert tables["kept"].column_names == ["ts", "k0", "o0"]
    assert tables["kept"].column("o0").to_pylist() == ["a", "a", "a"]
