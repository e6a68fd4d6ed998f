"""The bytes an incremental operator keeps in Spark's state store: named Arrow tables.

A state value is read back by the executors of every later micro-batch, so it must never be
able to run code: it is not a pickle. It is a short header and Arrow IPC streams::

    b"WSQLSTATE" | u8 format version | u32 header length | header (JSON) | IPC stream ...

The header says which operator wrote the value (``kind``, compared on load), the operator's
own small facts (``meta``: JSON numbers and strings), and the byte length of each table.
Arrow's IPC reader only allocates buffers of the declared types; a damaged or foreign value
is a clear ``StateError``, never an unpickled object.

Format 2 stores a column equal to an earlier column of its table (same type, values and
NULLs) once: the header names it, its position and the column it repeats, and decoding
puts it back (the same Arrow buffers, no copy). A ``[PARTITION BY k ROWS n]`` window's rows
keep the stream's columns for the window's tie order beside the key, the argument and the
time they repeat: at 100,000 keys that was 40% of the bytes each micro-batch reads from and
writes to the state store.

Format 3 also stores a column that runs in long runs of equal values -- a window's key and
its hash, which repeat for each of a key's rows, kept together -- run-length encoded
(Arrow's run-end encoding; integer, string, binary and temporal columns only, never a
float: Arrow's equality would merge -0.0 into a run of 0.0) when that takes under half its
bytes; the header names those columns and decoding expands them. A ``[PARTITION BY k ROWS
10]`` bucket of 250,000 rows: 9.1 -> 5.5 MB. What a micro-batch pays for a bucket's value
follows its bytes (PySpark's ``ValueState.get`` and ``update``, measured on this machine at
~26 and ~17 ms per MB: the JVM side -- RocksDB and the row conversion -- not the socket).
Format 1 and 2 values are read as they are.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa

MAGIC = b"WSQLSTATE"
VERSION = 3
#: The formats this version reads.
READS = (1, 2, 3)


class StateError(ValueError):
    """A state value that this version of WaveSQL cannot read (damaged, foreign, newer)."""


def encode(kind: str, meta: dict, tables: dict[str, pa.Table]) -> bytes:
    """``tables`` and ``meta`` as one state value (see the module docstring)."""
    streams, entries = [], []
    for name, table in tables.items():
        table, repeats = _without_repeats(table)
        table, runs = _run_end_encoded(table)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        streams.append(sink.getvalue().to_pybytes())
        entries.append([name, len(streams[-1])] + ([repeats] if repeats or runs else [])
                       + ([runs] if runs else []))
    header = json.dumps({"kind": kind, "meta": meta, "tables": entries},
                        separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<BI", VERSION, len(header)), header, *streams])


def decode(kind: str, value: bytes) -> tuple[dict, dict[str, pa.Table]]:
    """``(meta, tables)`` of a value :func:`encode` wrote for an operator of ``kind``."""
    value = bytes(value)
    head = len(MAGIC) + 5
    if len(value) < head or not value.startswith(MAGIC):
        raise StateError("not a WaveSQL state value")
    version, size = struct.unpack_from("<BI", value, len(MAGIC))
    if version not in READS:
        raise StateError(f"state format version {version}; this WaveSQL reads "
                         f"{', '.join(map(str, READS))}")
    try:
        header = json.loads(value[head:head + size])
        if header["kind"] != kind:
            raise StateError(f"state of a `{header['kind']}` operator, expected `{kind}`")
        tables, at = {}, head + size
        for name, length, *extra in header["tables"]:
            with pa.ipc.open_stream(pa.py_buffer(value[at:at + length])) as reader:
                table = _run_end_decoded(reader.read_all(), *extra[1:2])
                tables[name] = _with_repeats(table, *extra[:1])
            at += length
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise StateError(f"damaged state value: {err}") from None
    return header["meta"], tables


def _without_repeats(table: pa.Table) -> tuple[pa.Table, list]:
    """``table`` without the columns that repeat an earlier one, and ``[[position, name,
    repeated column], ...]`` of them (ascending positions)."""
    repeats = []
    columns = [_exact(c) for c in table.columns]
    for i, column in enumerate(columns):
        for j in range(i):
            if (column is not None and columns[j] is not None
                    and table.column(i).type == table.column(j).type
                    and column.equals(columns[j])):
                repeats.append([i, table.column_names[i], table.column_names[j]])
                break
    if not repeats:
        return table, []
    return table.drop_columns([name for _, name, _ in repeats]), repeats


def _exact(column: pa.ChunkedArray) -> pa.ChunkedArray | None:
    """The column as its equality must see it to be stored once: floating values by their
    bits (Arrow's equality holds -0.0 equal to 0.0 and a NaN unequal to itself); None for
    a nested type (its floats would compare as numbers)."""
    t = column.type
    if pa.types.is_nested(t):
        return None
    if pa.types.is_floating(t):
        bits = {16: pa.int16(), 32: pa.int32(), 64: pa.int64()}[t.bit_width]
        return pa.chunked_array([chunk.view(bits) for chunk in column.chunks], bits)
    return column


#: At most this share of a column's bytes, run-end encoded, for it to be stored so.
RUN_SHARE = 0.5


def _run_end_encoded(table: pa.Table) -> tuple[pa.Table, list]:
    """``table`` with each column that runs in long runs run-end encoded, and the names of
    those columns (module docstring: which types, when)."""
    import pyarrow.compute as pc

    runs = []
    for i, name in enumerate(table.column_names):
        column = table.column(i)
        t = column.type
        if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_binary(t) or pa.types.is_temporal(t)) or len(column) < 64:
            continue
        encoded = pc.run_end_encode(column.combine_chunks(), run_end_type=pa.int32())
        if encoded.nbytes <= RUN_SHARE * column.nbytes:
            table = table.set_column(i, name, encoded)
            runs.append(name)
    return table, runs


def _run_end_decoded(table: pa.Table, runs: list = ()) -> pa.Table:
    """A table :func:`_run_end_encoded` wrote, its encoded columns expanded."""
    import pyarrow.compute as pc

    for name in runs:
        i = table.column_names.index(name)
        table = table.set_column(i, name, pc.run_end_decode(table.column(i)))
    return table


def _with_repeats(table: pa.Table, repeats: list = ()) -> pa.Table:
    """A table :func:`_without_repeats` wrote, with its repeated columns back in place."""
    for position, name, source in repeats:
        table = table.add_column(position, name, table.column(source))
    return table


def resume(kind: str, value: bytes | None, new_ts, watermark: int | None):
    """A bucket picked up where its last micro-batch left it: ``(meta, tables, w, late)`` --
    its stored value decoded (empty if none), its progress ``w`` (the stored ``"w"`` when
    the watermark is older or absent: progress never goes back; None: none yet) and which
    of the new rows' event times ``new_ts`` (int64 microseconds) are late (below ``w``)."""
    import numpy as np

    meta, tables = decode(kind, value) if value is not None else ({}, {})
    seen = meta.get("w")
    if watermark is not None and seen is not None and watermark < seen:
        watermark = seen
    w = int(watermark) if watermark is not None else seen
    late = new_ts < w if w is not None else np.zeros(len(new_ts), bool)
    return meta, tables, w, late
