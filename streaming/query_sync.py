"""A continuous SYNC JOIN over a signal defined by a query (``CREATE SIGNAL acc (x FLOAT)
RATE 64 HZ OPTIONS (sample_column = 'n') AS SELECT n, ax AS x FROM readings WHERE dev =
'a'``), alone or with file and Kafka signals in one SELECT (streaming/sync.py
``split_signals``).

The signal's query must be row by row over ONE catalog stream of CSV, Parquet or JSON files
(:func:`.query_rows.source_stream`: the rule of the continuous query over such a signal,
streaming/query_signals.py); anything else -- an aggregate, a join, a Kafka stream -- is
refused before anything runs, the error placed in the signal's query.

What the state keeps (a record of kind ``"query"`` among streaming/sync_state.py's
per-signal records, format 4)::

    {"kind": "query", "end": <sample>, "files": [[path, size, floor, [[first, count], ...]]],
     "merged": [{"first": path, "last": path, "n": files, "names": digest,
                 "bytes": size, "lo": sample, "hi": sample}]}

(format 3's records have no ``"merged"``: read as none.)

* **Which files count.** The stream's files complete now, as the table signal's continuous
  reader judges them (sources/table_stream.py ``TableStreamReader.complete``: a Parquet file
  once its footer parses, a CSV or JSON file once settled). While one is still being
  written, nothing moves: its rows may land anywhere on the timeline.
* **Indexing.** Each new complete file is read once (placed in name order), the stream's
  punctuation rows dropped (a malformed row fails the query, ``MALFORMED_ROW`` naming the
  file: the samples are not silently fewer), the signal's query applied and its rows placed
  by their sample numbers as the continuous query-signal reader places a micro-batch's rows
  (:func:`.query_rows.place_rows`: NULL or fractional positions ``MALFORMED_ROW``, NULL
  channels NaN, two rows holding one sample ``OVERLAPPING_SAMPLES``). The record keeps, per
  file, its size and its runs of samples: the index a later read follows.
* **When a control row is final.** As for that reader, the stream's rows are taken to come
  in sample order, file after file (one producer): the signal is covered up to ``end``, the
  end of the last sample any file has placed; a row whose range ends at or before it (or is
  NULL or reversed) is synced now, once and final, the others wait in the buffer. Samples
  missing below ``end`` -- rows the signal's query drops, or never written -- are a gap:
  the range gets what its ``MISSING`` policy says, as in the batch SYNC.
* **Late samples.** A row of a new file whose sample lies below ``end`` arrived after
  rows over it may have been released: it goes to the late sink (``_stream`` the signal,
  ``_reason``, ``_row`` the query's row), is counted, and is never read (the file's
  ``floor``: its rows below it are skipped) -- what the continuous query-signal reader does
  with a sample in a window already emitted. Within one batch of new files the rows may
  come in any order.
* **Reading the samples.** The rows synced now read, of this signal, only the files whose
  runs overlap their ranges (their query applied again, late rows skipped, a file whose
  size changed refused with ``FILE_CHANGED``); the rows become segments as the batch
  read makes them (sources/query_signal.py ``batch_frame``) and the batch SYNC's range join
  cuts them: each row's segments equal the batch SYNC's over the same rows.

* **Bounded batches.** A micro-batch indexes at most ``max_files_per_trigger`` new
  files (the first in name order; the rest in the next micro-batches -- the stream's
  folder watch then delivers as many files per trigger, so enough micro-batches run). The
  record is committed with the micro-batch's output, so a restart goes on from the next
  file: each file is indexed once.
* **A bounded record.** No sample can be dropped from the index: a control row's range is
  any expression of its columns, so a row arriving at any time may ask for the oldest
  samples (a control row is late by its event time, never by its range). So old entries
  are *merged*, not pruned -- as a Kafka signal's index merges its old blocks: beyond the
  :data:`MAX_FILES` newest, an entry joins the merged entry before it when the two are
  next to each other in name order (no file of the stream's listing between them) and
  neither had late rows (a ``floor`` is the file's own: its rows below it are skipped,
  which would skip another file's samples). A merged entry names its files by their first
  and last path (the files of the listing between them, inclusive), their number, a
  digest of their paths, their bytes and the span ``[lo, hi)`` of their
  samples; a read of a range overlapping that span reads all of them: so a merged entry
  takes :data:`MERGED_FILES` files at most, until there are :data:`MAX_MERGED` merged
  entries (neighbours merged pairwise beyond that: wider reads for old ranges). A file
  whose name falls inside a merged entry's range after it was merged -- one arriving far
  out of name order -- changes its count or digest: ``OUT_OF_ORDER_FILE``, as for a file
  signal (its rows would all be late anyway); a merged file removed (retention) is not
  an error until a read needs it, and a merged file changed or gone is ``FILE_CHANGED``
  when it is read. So the record holds at most :data:`MAX_FILES` +
  :data:`MAX_MERGED` entries plus one per file that had late rows (counted in the late
  sink too) and per place a file arrived out of name order.

Costs: a micro-batch reads its new files of the stream once (one Spark job for at most
``max_files_per_trigger`` of them; the query's positions and channels collected on the
driver, each row with its file, as a micro-batch of the continuous reader collects its
rows) and, for its final rows, the files their ranges touch (all the files of a merged
entry whose span a range overlaps). A micro-batch lists the stream's folder once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.planner import bad_rows
from wavesql.sources.table_signal import FORMATS, Layout
from wavesql.sources.table_stream import TableStreamReader
from wavesql.sources.wav_stream import WavStreamReader
from wavesql.sqltext import quote

from .files import local_path
from .query_rows import place_table, sample_columns, source_stream
from .report import BatchReport
from .source import reader_settings

__all__ = ["KIND", "Indexed", "advance", "fresh", "segments", "stream_of"]

#: The ``kind`` of this signal's record in streaming/sync_state.py's per-signal records.
KIND = "query"
#: The newest index entries kept one per file (module docstring, *A bounded record*).
MAX_FILES = 64
#: Files a merged entry takes before a new one starts (a read of an old range reads the
#: files of the merged entries it overlaps: this bounds it until MAX_MERGED is reached).
MERGED_FILES = 64
#: Merged entries kept before neighbours are merged pairwise.
MAX_MERGED = 256


def fresh() -> dict:
    """The record of a signal no micro-batch has indexed yet."""
    return {"kind": KIND, "end": None, "files": [], "merged": []}


def stream_of(spark, catalog, signal):
    """The catalog stream of files ``signal``'s query is row by row over; else the error,
    placed in the signal's query (:func:`.query_rows.source_stream`)."""
    stream = source_stream(spark, catalog, signal)
    if stream.format not in FORMATS:
        raise WaveSQLError("NOT_IMPLEMENTED", f"in the query of signal `{signal.name}`: it "
                           f"reads stream `{stream.name}` of {stream.format} files; a "
                           "continuous SYNC over a signal defined by a query reads a stream "
                           f"of {', '.join(FORMATS)} files",
                           hint="run the SYNC as a batch query (or a scheduled query file)",
                           query=signal.path, source=f"signal {signal.name}")
    return stream


@dataclass
class Indexed:
    """What :func:`advance` did: the signal's record after the batch, the late-sink records
    of its late rows and the row counts (``rows_in = on_time + late``)."""

    record: dict
    late: list = field(default_factory=list)
    report: BatchReport = field(default_factory=lambda: BatchReport(0, None))


def advance(spark, catalog, signal, before: dict, now: float, batch_id: int = 0,
            max_files: int | None = None) -> Indexed:
    """The record after a micro-batch at wall-clock time ``now``: the stream's new complete
    files indexed -- at most ``max_files`` of them, the first in name order -- (module
    docstring), ``end`` moved to the end of their samples, old entries merged."""
    stream = stream_of(spark, catalog, signal)
    ready, pending = _files(stream, signal).complete(now)
    got = Indexed(dict(before))
    merged = list(before.get("merged") or [])
    known = {f[0] for f in before["files"]} | _merged_files(signal, merged, ready)
    new = [p for p in ready if p not in known][:max_files]
    if pending or not new:  # a file still being written may land anywhere: wait for it
        return got
    end, files, placed = before["end"], list(before["files"]), []
    used = (f" is below sample {end}, up to which signal `{signal.name}` already covered "
            "control rows (they were released without it)")
    # one job for the batch's new files: the query's rows, each with its file (the query
    # is row by row, so a row is still in its file's scan task when input_file_name runs)
    import numpy as np
    import pyarrow as pa
    from pyspark.sql import functions as F

    view = _query_rows(spark, catalog, signal, stream, new, check=True)
    names, columns = sample_columns(signal, view)
    table = view.select(F.input_file_name().alias(_FILE), *columns).toArrow()
    origin = table.column(0).combine_chunks().dictionary_encode()
    which = origin.indices.to_numpy(zero_copy_only=False)
    named = [_same_file(u) for u in origin.dictionary.to_pylist()]
    table = table.drop_columns([_FILE])
    stray = sorted(set(named) - {_same_file(p) for p in new})
    if stray:  # (never silently: a row whose file Spark could not name would be lost)
        raise WaveSQLError("SPARK_ERROR", f"signal `{signal.name}`: rows of its query "
                           f"came from {stray[0]!r}, not one of the files read")
    for path in new:
        size = storage.stat(path).size
        mine, counts = {id(p) for p in placed}, BatchReport(batch_id, None)
        rows = table.filter(pa.array(np.isin(which, [i for i, u in enumerate(named)
                                                     if u == _same_file(path)])))
        placed, late = place_table(spark, signal, rows, names, batch_id, end, placed,
                                   counts, used)
        for name in ("rows_in", "on_time", "late"):
            setattr(got.report, name, getattr(got.report, name) + getattr(counts, name))
        runs = [[p.start_sample, p.info.frames] for p in placed if id(p) not in mine]
        files.append([path, size, end if late else None, sorted(runs)])
        got.late += late
    ends = [p.end_sample for p in placed] + ([end] if end is not None else [])
    files, merged = compact(files, merged, ready)
    got.record = {"kind": KIND, "end": max(ends) if ends else None, "files": files,
                  "merged": merged}
    return got


def _names(paths) -> str:
    """A digest of a set of paths that two sets' digests add up to (the sum of each path's
    SHA-256, modulo 2**256), so merging two entries needs no list of their files."""
    import hashlib

    total = sum(int(hashlib.sha256(p.encode()).hexdigest(), 16) for p in paths)
    return f"{total % 2 ** 256:064x}"


def _plus(a: str, b: str) -> str:
    return f"{(int(a, 16) + int(b, 16)) % 2 ** 256:064x}"


def _inside(entry: dict, listing: list[str]) -> list[str]:
    """The files of ``listing`` (sorted) a merged entry names: its first to its last."""
    import bisect

    return listing[bisect.bisect_left(listing, entry["first"]):
                   bisect.bisect_right(listing, entry["last"])]


def _merged_files(signal, merged: list[dict], ready: list[str]) -> set[str]:
    """The complete files ``ready`` that merged entries hold; ``OUT_OF_ORDER_FILE`` when a
    merged entry's range now holds other files than it did (module docstring)."""
    out = set()
    for entry in merged:
        inside = _inside(entry, ready)
        if len(inside) < entry["n"]:  # a file removed (retention): FILE_CHANGED if read
            out.update(inside)
            continue
        if len(inside) != entry["n"] or _names(inside) != entry["names"]:
            raise WaveSQLError(
                "OUT_OF_ORDER_FILE", f"signal `{signal.name}`: the files of its query's "
                f"stream from {entry['first']} to {entry['last']} changed ({entry['n']} "
                f"indexed, {len(inside)} now) after results over them were delivered (a "
                "file arrived far out of name order, or one was removed)",
                hint="add the stream's files in name order and leave them; to redo the "
                     "results, start the query again with a new checkpoint")
        out.update(inside)
    return out


def compact(files: list, merged: list[dict], listing: list[str],
            keep: int | None = None, most: int | None = None,
            width: int | None = None) -> tuple[list, list[dict]]:
    """``(files, merged)`` with the entries beyond the ``keep`` newest (:data:`MAX_FILES`)
    merged, ``width`` files (:data:`MERGED_FILES`) at most per merged entry, and at most
    ``most`` (:data:`MAX_MERGED`) merged entries where neighbours allow (module docstring,
    *A bounded record*). ``listing``: every complete file of the stream now, in name
    order."""
    import bisect

    keep = MAX_FILES if keep is None else keep
    most = MAX_MERGED if most is None else most
    width = MERGED_FILES if width is None else width
    merged = list(merged)

    def adjacent(last: str, first: str) -> bool:  # no listed file between them
        return last < first and (bisect.bisect_left(listing, first)
                                 - bisect.bisect_right(listing, last)) == 0

    def join(a: dict, b: dict) -> dict:
        return {"first": a["first"], "last": b["last"], "n": a["n"] + b["n"],
                "names": _plus(a["names"], b["names"]), "bytes": a["bytes"] + b["bytes"],
                "lo": min(a["lo"], b["lo"]), "hi": max(a["hi"], b["hi"])}

    cut = max(0, len(files) - keep)
    old, files = files[:cut], files[cut:]
    stay = []
    for path, size, floor, runs in old:
        if floor is not None or not runs:  # late rows (its own floor), or no samples
            stay.append([path, size, floor, runs])
            continue
        entry = {"first": path, "last": path, "n": 1, "names": _names([path]),
                 "bytes": size, "lo": min(a for a, _ in runs),
                 "hi": max(a + n for a, n in runs)}
        if merged and merged[-1]["n"] < width and adjacent(merged[-1]["last"], path):
            merged[-1] = join(merged[-1], entry)
        else:
            merged.append(entry)
    while len(merged) > most:
        pairs = [i for i in range(len(merged) - 1)
                 if adjacent(merged[i]["last"], merged[i + 1]["first"])]
        if not pairs:
            break
        out, i, chosen = [], 0, set()
        for k in pairs:  # neighbours pairwise, each entry in one pair
            if k - 1 not in chosen:
                chosen.add(k)
        while i < len(merged):
            if i in chosen:
                out.append(join(merged[i], merged[i + 1]))
                i += 2
            else:
                out.append(merged[i])
                i += 1
        merged = out
    return stay + files, merged


#: The file a row of the signal's query came from, while a batch's new files are indexed.
_FILE = "__wavesql_file"


def _same_file(location: str) -> str:
    """A file's path as a listing and Spark's ``input_file_name`` both give it (a URI)."""
    path = local_path(location)
    return os.path.abspath(path) if path is not None else location


def segments(spark, catalog, signal, record: dict, wanted: list[tuple[int, int]]):
    """The signal's segments over the sample ranges ``wanted`` (``[s0, s1)``, non-empty):
    the indexed files whose runs overlap them, read again through the signal's query
    (module docstring, *Reading the samples*), as the batch read's segments."""
    from wavesql.planner.lower import TASKS_PER_CORE
    from wavesql.sources import query_signal
    from wavesql.udfs.program import Program

    stream = stream_of(spark, catalog, signal)
    needed = [f for f in record["files"] if any(
        a < s1 and s0 < a + n for a, n in f[3] for s0, s1 in wanted)]
    groups: dict = {}  # files read together: those without late rows; each other alone
    for path, size, floor, _ in needed:
        _check_unchanged(signal, path, size)
        groups.setdefault(None if floor is None else path, (floor, []))[1].append(path)
    old = [m for m in record.get("merged") or []
           if any(m["lo"] < s1 and s0 < m["hi"] for s0, s1 in wanted)]
    listing = sorted(_files(stream, signal)._list()) if old else []
    for entry in old:  # every file it names (module docstring, *A bounded record*)
        groups.setdefault(None, (None, []))[1].extend(_merged_unchanged(signal, entry,
                                                                        listing))
    rows = None
    for floor, paths in groups.values():
        view = _query_rows(spark, catalog, signal, stream, paths)
        if floor is not None:
            view = _from(view, signal, floor)
        rows = view if rows is None else rows.unionByName(view)
    if rows is None:  # every range over a gap: no rows, the same columns
        rows = _query_rows(spark, catalog, signal, stream, [])
    names = [c.name for c in signal.channels]
    tasks = TASKS_PER_CORE * max(1, spark.sparkContext.defaultParallelism)
    return query_signal.batch_frame(spark, signal, rows, Program.identity(names),
                                    signal.segment, signal.segment, lookback=None,
                                    sequential=False, tasks=tasks)


def _query_rows(spark, catalog, signal, stream, paths: list[str], check: bool = False):
    """The signal's query over the rows of the stream's files ``paths`` (punctuation rows
    dropped; ``check``: a malformed row is ``MALFORMED_ROW`` naming its file)."""
    from pyspark.sql import functions as F

    from wavesql.planner.lower import Runtime, _query_signal_rows

    ddl, options = reader_settings(stream)
    if paths:
        rows = spark.read.format(stream.format).schema(ddl).options(**options).load(paths)
    else:
        rows = spark.createDataFrame([], ddl)
    if bad_rows.CORRUPT_COLUMN in rows.columns:
        corrupt = F.col(bad_rows.CORRUPT_COLUMN).isNotNull()
        # every column referenced: Spark parses only the columns a query uses, and
        # refuses a query of the corrupt-record column alone (planner/bad_rows.py)
        bad = rows.where(corrupt).select(bad_rows.CORRUPT_COLUMN, F.input_file_name(), *[
            quote(c.name) for c in stream.columns]).limit(1).collect() if check else []
        if bad:
            raise WaveSQLError("MALFORMED_ROW", f"{local_path(bad[0][1])}: a row of stream "
                               f"`{stream.name}` that signal `{signal.name}` reads is "
                               f"malformed: {bad[0][0]!r}", hint="fix or remove the file; "
                               "its samples would otherwise be silently fewer")
        rows = rows.where(~corrupt)
    if stream.progress_column is not None:  # punctuation is not data (as in batch)
        rows = rows.where(F.col(quote(stream.progress_column)).isNull())
    rows = rows.select(*[F.col(quote(c.name)) for c in stream.columns])
    rt = Runtime(spark, catalog, signal.path, streams={stream.key: rows})
    return _query_signal_rows(signal, rt)


def _from(view, signal, floor: int):
    """The rows of ``view`` (the signal's query) whose sample is at or after ``floor``."""
    from wavesql.sources.query_signal import check_columns, layout_of, sample_numbers

    layout = layout_of(signal)
    position = check_columns(signal, [(f.name, f.dataType.simpleString())
                                      for f in view.schema.fields])[layout.position]
    where = f"signal `{signal.name}`'s query"

    def keep(batches):
        import pyarrow as pa

        for batch in batches:
            numbers = sample_numbers(batch.column(position), layout, where)
            yield batch.filter(pa.array(numbers >= floor))

    return view.mapInArrow(keep, view.schema)


def _merged_unchanged(signal, entry: dict, listing: list[str]) -> list[str]:
    """The files of a merged entry, ``FILE_CHANGED`` unless they are those it merged, of
    the same bytes."""
    inside = _inside(entry, listing)
    size = 0
    for path in inside:
        try:
            size += storage.stat(path).size
        except FileNotFoundError:
            size = None
            break
    if len(inside) != entry["n"] or _names(inside) != entry["names"] or size != entry["bytes"]:
        raise WaveSQLError(
            "FILE_CHANGED", f"signal `{signal.name}`: the files of its query's stream from "
            f"{entry['first']} to {entry['last']} changed after their rows were placed "
            f"({entry['n']} files of {entry['bytes']} bytes then, {len(inside)} files of "
            f"{size} bytes now): results over them may already have been delivered",
            hint="add the stream's files whole and leave them; to redo the results, start "
                 "the query again with a new checkpoint")
    return inside


def _check_unchanged(signal, path: str, size: int) -> None:
    try:
        now = storage.stat(path).size
    except FileNotFoundError:
        now = None
    if now != size:
        raise WaveSQLError(
            "FILE_CHANGED", f"signal `{signal.name}`: {path} changed after its rows "
            f"were placed ({size} bytes then, {'gone' if now is None else f'{now} bytes'} "
            "now): results over them may already have been delivered",
            hint="add the stream's files whole and leave them; to redo the results, start "
                 "the query again with a new checkpoint")


class _Files(TableStreamReader):
    """The stream's files complete now, in name order: the table signal reader's listing and
    completeness (sources/table_stream.py), with placing left to :func:`advance` (a query's
    rows are placed by their sample numbers, known only once the query ran)."""

    def __init__(self, options, schema):
        super().__init__(options, schema)
        self._named_in_order = False  # a file still being written holds nothing back

    def _runs(self, path: str):
        # completeness only: a Parquet file is complete once its footer parses
        import pyarrow.parquet as pq

        def footer():
            with storage.open_input(path) as f:
                return pq.read_metadata(f).num_rows

        return self._memo(path, footer)

    def _plan_of(self, files: list[str]):
        return _Listed(sorted(files))

    def complete(self, now: float) -> tuple[list[str], bool]:
        return WavStreamReader.complete(self, now)


@dataclass
class _Listed:
    placements: list


#: The listings of the streams continuous SYNCs watch (a reader keeps what it learnt of
#: each file while it is unchanged: a Parquet footer is parsed once).
_READERS: dict = {}


def _files(stream, signal) -> _Files:
    import dataclasses
    import json

    from pyspark.sql.types import _parse_datatype_string

    from wavesql.udfs.program import Program

    names = [c.name for c in signal.channels]
    program = Program.identity(names)
    layout = Layout(stream.format, tuple(names), None, None, float(signal.rate_hz),
                    int(signal.epoch_us))
    options = {"path": stream.path, "rate": repr(signal.rate_hz),
               "channels": json.dumps(names), "window": str(signal.segment),
               "slide": str(signal.segment), "program": program.to_json(),
               "layout": json.dumps(dataclasses.asdict(layout))}
    key = json.dumps(options, sort_keys=True)
    if key not in _READERS:
        if len(_READERS) >= 64:
            del _READERS[next(iter(_READERS))]
        _READERS[key] = _Files(options, _parse_datatype_string(program.spark_ddl()))
    return _READERS[key]
