"""The bytes an incremental operator keeps in Spark's state store: named Arrow tables.

A state value is read back by the executors of every later micro-batch, so it must never be
able to run code: it is not a pickle. It is a short header and Arrow IPC streams::

    b"WSQLSTATE" | u8 format version | u32 header length | header (JSON) | IPC stream ...

The header says which operator wrote the value (``kind``, compared on load), the operator's
own small facts (``meta``: JSON numbers and strings), and the byte length of each table.
Arrow's IPC reader only allocates buffers of the declared types; a damaged or foreign value
is a clear ``StateError``, never an unpickled object.
"""

from __future__ import annotations

import json
import struct

import pyarrow as pa

MAGIC = b"WSQLSTATE"
VERSION = 1


class StateError(ValueError):
    """A state value that this version of WaveSQL cannot read (damaged, foreign, newer)."""


def encode(kind: str, meta: dict, tables: dict[str, pa.Table]) -> bytes:
    """``tables`` and ``meta`` as one state value (see the module docstring)."""
    streams = []
    for table in tables.values():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        streams.append(sink.getvalue().to_pybytes())
    header = json.dumps({"kind": kind, "meta": meta,
                         "tables": [[name, len(s)] for name, s in zip(tables, streams)]},
                        separators=(",", ":")).encode()
    return b"".join([MAGIC, struct.pack("<BI", VERSION, len(header)), header, *streams])


def decode(kind: str, value: bytes) -> tuple[dict, dict[str, pa.Table]]:
    """``(meta, tables)`` of a value :func:`encode` wrote for an operator of ``kind``."""
    value = bytes(value)
    head = len(MAGIC) + 5
    if len(value) < head or not value.startswith(MAGIC):
        raise StateError("not a WaveSQL state value")
    version, size = struct.unpack_from("<BI", value, len(MAGIC))
    if version != VERSION:
        raise StateError(f"state format version {version}; this WaveSQL reads {VERSION}")
    try:
        header = json.loads(value[head:head + size])
        if header["kind"] != kind:
            raise StateError(f"state of a `{header['kind']}` operator, expected `{kind}`")
        tables, at = {}, head + size
        for name, length in header["tables"]:
            with pa.ipc.open_stream(pa.py_buffer(value[at:at + length])) as reader:
                tables[name] = reader.read_all()
            at += length
    except StateError:
        raise
    except (ValueError, KeyError, TypeError, pa.ArrowException) as err:
        raise StateError(f"damaged state value: {err}") from None
    return header["meta"], tables


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
