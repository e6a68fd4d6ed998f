"""Input files that appear while they are still being written.

A continuous query lists its input directories on every trigger, and a file copied into
place (not written aside and renamed) can be listed before it is complete: a CSV/JSON file
whose last line is half written, a Parquet file without its footer, a WAV file whose data
is still growing. What WaveSQL does, so that no row is lost or duplicated silently:

**A file is read only once it is complete**, judged by:

- *Parquet*: it ends with a valid footer (``PAR1`` magic at both ends, a footer length that
  fits), which writers put last -- so an unfinished Parquet file is never taken for one;
- *WAV*: its header parses and declares exactly the data present (see the WAV source);
- otherwise (CSV, JSON, a WAV header that does not say where the data ends) *quiet*: its
  modification time is at least :data:`SETTLE_SECONDS` old (1 s by default;
  ``$WAVESQL_FILE_SETTLE_SECONDS``, or the WAV source's ``settle_ms`` option) -- a writer
  that is still writing keeps touching it. A writer that stalls longer than that in the
  middle of a file defeats this; the change is then caught afterwards (below).

**Parquet/CSV/JSON streams** (Spark's file source, :mod:`.runner`): Spark picks a batch's new
files itself, with the sizes it saw when it listed them, and never looks at a file again, so
rows written after that would be lost without a word (and a half-written Parquet file fails
the read). The runner therefore reads each micro-batch's files itself, from Spark's file log
(:func:`batch_files`): it first waits until every file is complete (:func:`wait_until_ready`,
polling up to :data:`READY_TIMEOUT_SECONDS`), then reads them whole -- with the sizes they
have *then*. The file list of a batch is fixed in the checkpoint before the batch runs, so a
batch re-run after a crash reads the same files: exactly once. A file that is still not
complete after the timeout fails the batch with ``INCOMPLETE_FILE`` naming it; nothing of
the batch is committed, and running the query again (``wavesql run``, or restarting it)
redoes that batch from the same file list. A listed file that is gone by the time its batch
reads it (removed in between) cannot be waited for: the batch goes on without it and puts
a record of it in ``<checkpoint>/quarantine`` (``_reason`` "file listed for micro-batch B
was removed before the batch read it ..."), as for a changed file below; being unknown,
its rows are in no row count. Each batch also records the size and
modification time of the files it read (``<checkpoint>/files/``) and checks the files of
the :data:`WATCH_BATCHES` batches before it: a file that changed after it was read (rows
appended by a writer that had stalled, a rewrite) gets a record in
``<checkpoint>/quarantine`` -- ``_file``, ``_record`` NULL, ``_reason`` "file grew by N bytes
after micro-batch B read it: the change is not read" -- once, so the loss is never silent.

**WAV signals** (:mod:`wavesql.sources.wav_stream`): the WAV stream reader lists files
itself, so it *defers* a file that is not yet quiet -- and every file after it in timeline
order, so the timeline never has to change -- until a later trigger. A file already read
that changes afterwards (grows, shrinks, is rewritten) is ``FILE_CHANGED`` naming it: its
samples are already on the timeline, and moving them would duplicate or drop windows.

Still the safest way to feed a continuous query: write each file aside (``x.wav.part``,
``.x.parquet``, or another folder) and rename it into place when it is complete.

**Object stores** need none of this: an object becomes visible only once it is complete
(a PUT, or the last part of a multipart upload), so a file there is always whole, and a
changed object is a new one (its size and modification time are still watched).
"""

from __future__ import annotations

import json
import os
import struct
import time
from typing import Callable, Sequence
from urllib.parse import unquote, urlparse

from wavesql import storage

#: How long (seconds) a file must have been left alone before it is read.
SETTLE_SECONDS = float(os.environ.get("WAVESQL_FILE_SETTLE_SECONDS", "1.0"))
#: How long a micro-batch waits for its files to become complete before it fails.
READY_TIMEOUT_SECONDS = float(os.environ.get("WAVESQL_FILE_READY_TIMEOUT_SECONDS", "120"))

_MAGIC = b"PAR1"
#: :func:`why_not_ready`'s answer for a file that no longer exists.
GONE = "it is gone"


def local_path(path: str) -> str | None:
    """The local path of ``path`` (a plain path or a ``file:`` URI), else None (an object
    store's: complete once visible, nothing to wait for)."""
    if "://" in path or path.startswith("file:"):
        parsed = urlparse(path)
        if parsed.scheme not in ("file", ""):
            return None
        return unquote(parsed.path)
    return path


def belongs(uri: str, stream_path: str) -> bool:
    """Whether the file ``uri`` (from Spark's file log) is one of ``stream_path``'s."""
    import fnmatch

    path = local_path(uri)
    if path is None:
        return False
    root = os.path.abspath(stream_path)
    path = os.path.abspath(path)
    if any(ch in root for ch in "*?["):
        return fnmatch.fnmatch(path, root) or fnmatch.fnmatch(os.path.dirname(path), root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def parquet_complete(path: str, size: int | None = None) -> bool:
    """Whether the Parquet file at ``path`` ends with a valid footer."""
    try:
        with open(path, "rb") as f:
            if size is None:
                size = os.fstat(f.fileno()).st_size
            if size < 12:
                return False
            head = f.read(4)
            f.seek(size - 8)
            tail = f.read(8)
    except OSError:
        return False
    if head != _MAGIC or len(tail) != 8 or tail[4:] != _MAGIC:
        return False
    (footer,) = struct.unpack("<I", tail[:4])
    return 0 < footer <= size - 12


def why_not_ready(path: str, fmt: str, settle: float, now: float) -> str | None:
    """None when the file at ``path`` looks complete; else what is missing."""
    if storage.is_remote(path):
        return None  # an object is visible only once complete
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return GONE
    if fmt == "parquet":  # the footer comes last: a file with one is complete
        return None if parquet_complete(path, st.st_size) else "it has no Parquet footer yet"
    age = now - st.st_mtime
    if age < settle:
        return f"it was modified {max(age, 0.0):.2f} s ago (less than {settle:g} s)"
    return None


def gone(paths: Sequence[str]) -> list[str]:
    """The files of ``paths`` (as given) no longer on local disk."""
    return [x for x in paths if (p := local_path(x)) is not None and not os.path.exists(p)]


def describe_vanished(batch: int, during: bool = False) -> str:
    """The quarantine reason for a file listed for micro-batch ``batch`` and gone when the
    batch came to read it (:func:`wait_until_ready` returns those). Its rows were never
    read, and waiting cannot bring it back (Spark's file source will not list the same path
    again), so the batch goes on without it instead of failing every re-run."""
    if during:  # (a runner whose reader skips missing files: it may have read none)
        return (f"file listed for micro-batch {batch} was removed while the batch read it: "
                "some or all of its rows may not have been read (to read them, put the file "
                "back under a new name)")
    return (f"file listed for micro-batch {batch} was removed before the batch read it: its "
            "rows are not read (to read them, put the file back under a new name)")


def wait_until_ready(paths: Sequence[str], fmt: str, *, settle: float | None = None,
                     timeout: float | None = None, clock: Callable[[], float] = time.time,
                     sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Return once every file of ``paths`` is complete (module docstring) or gone; the gone
    ones are returned (:func:`describe_vanished`). Raise ``INCOMPLETE_FILE`` naming the
    first that is neither after ``timeout`` seconds."""
    from wavesql.errors import WaveSQLError

    settle = SETTLE_SECONDS if settle is None else settle
    timeout = READY_TIMEOUT_SECONDS if timeout is None else timeout
    deadline = clock() + timeout
    pending = {p: x for x in paths if (p := local_path(x)) is not None}
    gone: list[str] = []
    while pending:
        now = clock()
        reasons = {p: why_not_ready(p, fmt, settle, now) for p in pending}
        gone += [pending[p] for p, r in reasons.items() if r == GONE]
        pending = {p: x for p, x in pending.items() if reasons[p] not in (None, GONE)}
        if not pending:
            break
        if now >= deadline:
            first = next(iter(pending))
            raise WaveSQLError(
                "INCOMPLETE_FILE", f"{first}: not complete after {timeout:g} s: "
                f"{reasons[first]}",
                hint="nothing of this micro-batch was committed; when the file is complete, "
                     "run the query again (wavesql run, or restart it) and the batch is redone "
                     "from the same files. Write files aside and rename them into place")
        sleep(min(0.1, max(settle / 4, 0.01)))
    return gone


def check_columns(paths: Sequence[str], stream) -> None:
    """``FILE_SCHEMA_MISMATCH`` for the first new Parquet file of ``stream`` that lacks a
    column the stream declares (not in its schema, nor a ``name=value`` folder of its path).

    Spark's reader would give such a column NULL in every row: right for the files of a
    table written before the column was added (batch queries keep that rule), but in a
    continuous query a *new* file without it means its producer changed -- its rows would
    enter the results with NULLs nobody wrote. A column of another type is caught by Spark's
    reader itself (wavesql/spark_errors.py); extra columns are not the stream's and are not
    read. Costs one footer read per new file."""
    import pyarrow.parquet as pq

    from wavesql.errors import WaveSQLError

    if stream.format != "parquet":
        return
    declared = [c.name for c in stream.columns]
    for path in paths:
        with storage.open_input(local_path(path) or path) as f:
            names = {n.lower() for n in pq.ParquetFile(f).schema_arrow.names}
        folders = {part.split("=", 1)[0].lower() for part in path.replace("\\", "/").split("/")
                   if "=" in part}
        missing = [c for c in declared if c.lower() not in names | folders]
        if missing:
            listed = ", ".join(f"`{c}`" for c in missing)
            raise WaveSQLError(
                "FILE_SCHEMA_MISMATCH", f"`{path}`: a new file of stream `{stream.name}` has "
                f"no column {listed} (its columns: {', '.join(sorted(names))})",
                hint="nothing of this micro-batch was committed; move the file out of the "
                     "stream's folder (or rewrite it with the stream's columns) and run again; "
                     "if the producers dropped the column, CREATE OR REPLACE STREAM without it "
                     "(and a new checkpoint)")


def batch_files(checkpoint: str, source: int, batch_id: int) -> list[tuple[str, int]]:
    """``(path, modification time in ms when Spark listed it)`` of the files micro-batch
    ``batch_id`` reads from source ``source``, from Spark's file-source log
    (``<checkpoint>/offsets/sources/<source>/<n>[.compact]``: a ``v1`` line, then one JSON
    line per file), in the log's order.

    The file source numbers its log entries itself, one per micro-batch that found new
    files: a micro-batch without new files (the one Spark runs to close windows when its
    watermark moved, or a HEARTBEAT's tick) has none, and from then on the log's numbers
    lag the query's batch ids. The query's offset log says which entries a batch reads:
    ``<checkpoint>/offsets/offsets/<batch>`` holds each source's ``logOffset`` (a line per
    source, in the sources' order), and the batch reads the entries after the previous
    batch's offset up to its own."""
    folder = storage.join(str(checkpoint), "offsets", "sources", str(source))
    upto = _log_offset(checkpoint, source, batch_id)
    if upto is None:
        return []
    after = _log_offset(checkpoint, source, batch_id - 1) if batch_id > 0 else None
    after = -1 if after is None else after
    found: dict[str, int] = {}
    for entry_id in range(after + 1, upto + 1):
        for name in (str(entry_id), f"{entry_id}.compact"):
            try:
                lines = storage.read_text(storage.join(folder, name)).splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                try:
                    entry = json.loads(line)
                except ValueError:
                    continue
                if entry.get("batchId") == entry_id and entry.get("path"):
                    found.setdefault(entry["path"], int(entry.get("timestamp") or 0))
    return list(found.items())


def _log_offset(checkpoint: str, source: int, batch_id: int) -> int | None:
    """The file-source log entry up to which micro-batch ``batch_id`` reads source
    ``source`` (None: no such batch, or not a file source)."""
    path = storage.join(str(checkpoint), "offsets", "offsets", str(batch_id))
    try:
        lines = storage.read_text(path).splitlines()
        entry = json.loads(lines[2 + source])
    except (OSError, IndexError, ValueError):
        return None
    offset = entry.get("logOffset") if isinstance(entry, dict) else None
    return int(offset) if isinstance(offset, int) else None


# -- files read, and files that changed after they were read --------------------------------
#: How many earlier micro-batches' files each batch checks for changes.
WATCH_BATCHES = 10


def _stat_key(path: str) -> list[int] | None:
    try:
        st = storage.stat(path)
    except OSError:
        return None
    return [st.size, st.mtime_ns]


def _record_path(checkpoint: str, batch_id: int) -> str:
    return storage.join(str(checkpoint), "files", f"{batch_id:09d}.json")


def changed_since_read(checkpoint: str, batch_id: int) -> list[tuple[str, int, list, list]]:
    """Files read by the :data:`WATCH_BATCHES` batches before ``batch_id`` that changed
    since (``(path, batch, [size, mtime_ns] then, now or None when gone)``), each reported
    once: :func:`record_read` notes the change, so the next batch does not report it again."""
    seen: dict[str, tuple[int, list]] = {}
    for b in range(max(0, batch_id - WATCH_BATCHES), batch_id):
        try:
            record = json.loads(storage.read_text(_record_path(checkpoint, b)))
        except (OSError, ValueError):
            continue
        for path, key in record.items():
            seen[path] = (b, key)
    out = []
    for path, (b, key) in seen.items():
        now = _stat_key(path)
        if now != key:
            out.append((path, b, key, now))
    return out


def record_read(checkpoint: str, batch_id: int, paths: Sequence[str],
                changed: Sequence[tuple] = ()) -> None:
    """Note the size and modification time of the files batch ``batch_id`` read (and of
    the ``changed`` ones it reported), atomically; a re-run of the batch rewrites it."""
    record = {}
    for uri in paths:
        location = local_path(uri) or uri
        record[location] = _stat_key(location)
    for path, _, _, now in changed:
        record[path] = now
    target = _record_path(checkpoint, batch_id)
    storage.write_text(target, json.dumps(record))
    folder = storage.dirname(target)
    for name, _ in storage.children(folder):  # keep the watch window
        stem = name.removesuffix(".json")
        if name.endswith(".json") and stem.isdigit() and int(stem) < batch_id - WATCH_BATCHES:
            storage.delete(storage.join(folder, name))


def describe_change(batch: int, before: list, now: list | None) -> str:
    """The quarantine reason for a file that changed after batch ``batch`` read it."""
    if now is None:
        return f"file removed after micro-batch {batch} read it"
    grew = now[0] - before[0] if before else None
    what = (f"grew by {grew} bytes" if grew and grew > 0 else
            f"shrank by {-grew} bytes" if grew and grew < 0 else "was rewritten")
    return (f"file {what} after micro-batch {batch} read it: the change is not read "
            "(write files aside and rename them into place)")
