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
writes to the state store. Format 1 values (no repeats named) are read as they are.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa

MAGIC = b"WSQLSTATE"
VERSION = 2
#: The formats this version reads.
READS = (1, 2)


class StateError(ValueError):
    """A state value that this version of WaveSQL cannot read (damaged, foreign, newer)."""


def encode(kind: str, meta: dict, tables: dict[str, pa.Table]) -> bytes:
    """``tables`` and ``meta`` as one state value (see the module docstring)."""
    streams, entries = [], []
    for name, table in tables.items():
        table, repeats = _without_repeats(table)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        streams.append(sink.getvalue().to_pybytes())
        entries.append([name, len(streams[-1])] + ([repeats] if repeats else []))
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
        for name, length, *repeats in header["tables"]:
            with pa.ipc.open_stream(pa.py_buffer(value[at:at + length])) as reader:
                tables[name] = _with_repeats(reader.read_all(), *repeats)
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
