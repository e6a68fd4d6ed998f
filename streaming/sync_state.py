"""What a continuous SYNC JOIN remembers of each signal it syncs, batch to batch.

A query may SYNC its control with several signals (``... SYNC JOIN mic a ON RANGE (...)
SYNC JOIN acc b ON RANGE (...)``), each a folder of its own -- WAV files, or a table's
CSV, Parquet or JSON files -- or a Kafka topic of sample blocks, at its own rate. For a
signal of files, which files are complete and where they sit on the timeline is what the
signal's continuous reader decides (:func:`complete_placements`), and the state keeps one
record: how far its complete files went (``end``, a sample number) and a digest of the
files placed before that end (``files``). A later batch whose files up to that end differ
-- a file arrived out of timeline order, or one was removed -- would change results
already delivered, so it fails the query (``OUT_OF_ORDER_FILE``). For a Kafka signal the
record is its coverage and index of blocks (:mod:`.kafka_sync`, versioned on its own); for
a signal defined by a query, its coverage and index of its stream's files
(:mod:`.query_sync`).

The records are stored in the checkpoint's ``state.json`` under ``signal``, versioned::

    {"version": 4, "signals": {"<signal key>": {"kind": "files", "end": ..., "files": ...},
                               "<kafka signal key>": {"kind": "kafka", "version": 1, ...},
                               "<query signal key>": {"kind": "query", "end": ..., ...}}}

(Kind ``"query"`` came after format 3's first checkpoints, which hold only the other two
kinds. Format 4 is format 3 whose query records may hold merged entries of old files --
``"merged"``, :mod:`.query_sync`, a bounded record; format 3's have none and load as they
are. Every SYNC checkpoint is written in format 4 now, so a WaveSQL from before it refuses
any of them with ``CHECKPOINT_MISMATCH``: it cannot tell which hold merged entries.)

Checkpoints of the formats before it still load: format 3, format 2 (``{"version": 2, "kind":
"wav", "signals": {...}}``: file signals only), format 1 (``{"end": ..., "files": ...}``, no
version: the record of a one-signal SYNC over files) and a lone Kafka signal's index as the
state itself (``{"kind": "kafka", ...}``), each when the query syncs what it recorded. Any
other mismatch between the checkpoint's signals and the query's is refused with
``CHECKPOINT_MISMATCH`` saying which: resuming would judge a signal's files against
another signal's record, or start a signal from nothing while its control rows were
already released without it.
"""

from __future__ import annotations

import hashlib
import json
import os

from wavesql.catalog import objects as cat
from wavesql.errors import WaveSQLError

#: The format of the per-signal records (1: the single record of a one-signal SYNC over
#: files; 2: file signals only, ``kind`` "wav"; 3: file and Kafka signals, a kind each;
#: 4: a query signal's record may merge old files' entries).
STATE_VERSION = 4
#: The formats with a ``kind`` per record (read alike: 3's query records merge nothing).
_KINDED = (3, STATE_VERSION)

_FRESH = {"end": None, "files": None}


def signals_of(syncs) -> list[cat.SignalDef]:
    """The distinct signals of a chain of SYNC JOINs, in SYNC order (one signal SYNCed
    twice, under two aliases, is watched and recorded once)."""
    seen: dict[str, cat.SignalDef] = {}
    for sync in syncs:
        seen.setdefault(sync.signal.signal.key, sync.signal.signal)
    return list(seen.values())


def is_kafka(signal: cat.SignalDef) -> bool:
    """Whether a continuous SYNC reads ``signal`` from Kafka sample blocks (else files)."""
    return signal.source == "kafka"


def kind_of(signal: cat.SignalDef) -> str:
    """The ``kind`` of ``signal``'s record: ``"kafka"`` (sample blocks), ``"query"`` (a
    signal defined by a query: its stream's files, :mod:`.query_sync`) or ``"files"``."""
    return {"kafka": "kafka", "query": "query"}.get(signal.source, "files")


#: How a refusal names where a record's kind reads a signal from.
_READ_FROM = {"files": "files", "kafka": "Kafka", "query": "its query's stream"}


def _fresh(signal: cat.SignalDef) -> dict:
    return {"files": dict(_FRESH), "kafka": {},
            "query": {"kind": "query", "end": None, "files": [], "merged": []}}[
                kind_of(signal)]


def records(state: dict, signals: list[cat.SignalDef]) -> dict[str, dict]:
    """Each signal's record from a batch's committed ``state`` (a fresh one if the query
    has not run yet: ``{"end": None, "files": None}`` for files, ``{}`` for Kafka, an
    empty index for a query's stream), by signal key; refuses a checkpoint whose records
    do not fit."""
    kept = state.get("signal")
    keys = [s.key for s in signals]
    names = ", ".join(s.name for s in signals)
    if not kept:
        return {s.key: _fresh(s) for s in signals}

    def refuse(why: str) -> WaveSQLError:
        return WaveSQLError("CHECKPOINT_MISMATCH", f"the checkpoint's SYNC state {why}",
                            hint="run the query as it was on this checkpoint, or give it a "
                                 "new checkpoint (and output) folder")

    if kept.get("kind") == "kafka":  # a lone Kafka signal's index, as the state itself
        if len(signals) != 1 or not is_kafka(signals[0]):
            raise refuse("is a Kafka signal's index (one Kafka signal synced alone); this "
                         f"query syncs {names}")
        return {keys[0]: dict(kept)}
    if "version" not in kept:  # format 1: one file signal's record, as the state itself
        if len(signals) != 1 or kind_of(signals[0]) != "files":
            raise refuse("is of a one-signal SYNC (format 1, before several signals were "
                         f"synced continuously, of files); this query syncs {names}")
        return {keys[0]: {"end": kept.get("end"), "files": kept.get("files")}}
    if kept.get("version") not in (2, *_KINDED):
        raise refuse(f"was written in format {kept.get('version')!r}; this WaveSQL reads "
                     f"{STATE_VERSION} (and 3, 2, 1)")
    mine = kept.get("signals") or {}
    if sorted(mine) != sorted(keys):
        raise refuse(f"records the signals {', '.join(sorted(mine)) or '(none)'}; this query "
                     f"syncs {', '.join(sorted(keys))}")
    out = {}
    for s in signals:
        record = dict(mine[s.key])
        kind = record.pop("kind", "files") if kept["version"] in _KINDED else "files"
        if kind != kind_of(s):
            raise refuse(f"records signal {s.name} as read from "
                         f"{_READ_FROM.get(kind, repr(kind))}; it is now read from "
                         f"{_READ_FROM[kind_of(s)]}")
        out[s.key] = record if kind == "files" else {**record, "kind": kind}
    return out


def to_state(per_signal: dict[str, dict]) -> dict:
    """The ``signal`` entry of ``state.json`` for the records ``per_signal`` (a Kafka
    signal's or a query signal's record says its kind itself: :mod:`.kafka_sync`,
    :mod:`.query_sync`)."""
    return {"version": STATE_VERSION, "signals": {
        k: r if r.get("kind") in ("kafka", "query") else {"kind": "files", **r}
        for k, r in per_signal.items()}}


def advance(signal: cat.SignalDef, before: dict, at: float) -> tuple[dict, list]:
    """``(record, placements)``: the signal's complete files at wall-clock time ``at``,
    placed on its timeline, and its record after this batch. Raises ``OUT_OF_ORDER_FILE``
    if the files up to the end already used are not those the record describes. While a
    file whose place only its rows tell is still being written, the end does not move
    (it may land anywhere): the files are checked, and the rows it could touch wait."""
    placements, pending = complete_placements(signal, at)
    end = max((p.end_sample for p in placements), default=None)
    if before["end"] is not None:
        if (end is None or end < before["end"]
                or fingerprint(placements, before["end"]) != before["files"]):
            raise WaveSQLError(
                "OUT_OF_ORDER_FILE", f"signal `{signal.name}`: the files up to sample "
                f"{before['end']} changed after results over them were delivered (a file "
                "arrived out of timeline order, or one was removed)",
                hint="add a signal's files in time order; to redo the results, start the "
                     "query again with a new checkpoint")
    if end is None or pending:
        return dict(before), placements
    return {"end": end, "files": fingerprint(placements, end)}, placements


def complete_placements(signal: cat.SignalDef, now: float) -> tuple[list, bool]:
    """``(placements, pending)``: the signal's files that are complete now, placed on its
    timeline, and whether one still being written may land among them -- what the
    signal's continuous reader decides (``complete`` of sources/wav_stream.py's reader):
    a WAV file once its header declares exactly the data present, or -- a header that
    cannot say -- once it has not been modified for the settle time; a Parquet file once
    its footer parses; a CSV or JSON file once settled; placed by WAV headers, file order,
    sample numbers or timestamps. A bad file is the error the reader gives."""
    from wavesql.udfs.wav import WavError

    try:
        return _reader(signal).complete(now)
    except WavError as err:
        raise WaveSQLError(err.code, f"{err.path}: {err.message}", hint=err.hint) from None


#: The readers of the signals continuous SYNCs watch, by their options: a reader keeps
#: what it learnt of each file (a header, a table file's rows) while the file is unchanged,
#: so a micro-batch does not parse every file of the signal again.
_READERS: dict = {}


def _reader(signal: cat.SignalDef):
    """The continuous reader of ``signal``'s files (sources/wav_stream.py, or
    sources/table_stream.py for a table signal), reading its samples as they are."""
    from pyspark.sql.types import _parse_datatype_string

    from wavesql.sources.table_signal import FORMATS
    from wavesql.sources.table_stream import TableStreamReader, layout_option
    from wavesql.sources.wav_stream import WavStreamReader
    from wavesql.udfs.program import Program

    names = [c.name for c in signal.channels]
    program = Program.identity(names)
    options = {"path": signal.path, "rate": repr(signal.rate_hz),
               "channels": json.dumps(names), "window": str(signal.segment),
               "slide": str(signal.segment), "program": program.to_json()}
    table = signal.format in FORMATS
    if table:
        options["layout"] = layout_option(signal)
    else:
        options.update(dict(signal.options))
    key = json.dumps(options, sort_keys=True)
    if key not in _READERS:
        if len(_READERS) >= 64:
            del _READERS[next(iter(_READERS))]
        schema = _parse_datatype_string(program.spark_ddl())
        _READERS[key] = (TableStreamReader if table else WavStreamReader)(options, schema)
    return _READERS[key]


def fingerprint(placements, end: int) -> str:
    """What identifies the files placed before ``end`` (names, places, lengths): a digest,
    so the state stays one line however many files the signal has."""
    used = sorted((os.path.basename(p.path), p.start_sample, p.info.frames)
                  for p in placements if p.start_sample < end)
    return hashlib.sha256(json.dumps(used).encode()).hexdigest()
