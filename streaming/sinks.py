"""Sink folders in the sink's format: how a result is written, committed and read back.

A sink (``CREATE SINK s TO 'out/' FORMAT parquet | csv | json``) receives one folder per
micro-batch (``batch=N``, see :mod:`wavesql.jobs`); this module is the one place that knows
how each format is written, so the continuous runner, ``INSERT INTO`` jobs and late-row
sinks write the same way.

Commit: a batch is visible whole or not at all
-----------------------------------------------
:func:`commit` writes a micro-batch's folder ``<root>/batch=N`` so that a reader never sees
part of it, and a batch re-run after a crash replaces the earlier attempt's rows:

- **local disk** (and mounted filesystems): written aside (``<root>/_staging/batch=N``,
  hidden from readers by its ``_``) and renamed into place -- the rename is the commit.
- **object stores** (``s3a://`` ...), where nothing renames atomically and a folder is
  only a prefix: the batch's files are written straight into ``batch=N/`` (new names per
  attempt), then a **commit record written last** -- one object, which appears whole or not
  at all -- lists them, in the format of Spark's own file-sink log
  (``<root>/_spark_metadata/<n>``: a ``v1`` line, then one JSON line per file; every 10th
  record, ``<n>.compact``, repeats the records before it). ``spark.read`` of the root reads
  that log and so *only committed files*; a killed attempt's files are never listed, and are
  deleted when the batch is re-run and committed. A re-run of a batch whose record was
  already written (the kill came after it) replaces that record: a batch is committed in
  order, so its record can only be the last. Readers that list files instead of reading
  the log (pyarrow, pandas) can see a killed attempt's files until the re-run: read the
  root with Spark (or WaveSQL), as Spark's file sink asks too.

CSV is written with a header line and Spark's ISO-8601 timestamps, so a CSV sink can be read
back as a WaveSQL stream (``FORMAT csv`` reads with ``header=true``) with the same columns.
CSV has no nested values: a result with arrays, structs or maps (signal segments) cannot go
to a CSV sink -- ``planner.insert.flat_format_problem`` says which column, at bind time.
"""

from __future__ import annotations

import json
import os
from urllib.parse import quote

from wavesql import faults, storage

FORMATS = ("parquet", "csv", "json")

# Spark's readers/writers, per format: options that make a written folder read back as it was.
_OPTIONS = {"parquet": {}, "csv": {"header": "true"}, "json": {}}


def write(df, path: str, fmt: str = "parquet") -> None:
    """Write ``df`` as the folder ``path`` (replacing it) in format ``fmt``."""
    df.write.mode("overwrite").options(**_OPTIONS[fmt]).format(fmt).save(str(path))


class KafkaOutput:
    """A continuous query's output, or its late rows (``late``), when it is a Kafka sink:
    ``f(df, batch_id)`` sending the batch's rows to the topic (sources/kafka.py: at least
    once, deterministic keys)."""

    def __init__(self, sink, late: bool = False):
        self.sink = sink
        self.late = late

    def __call__(self, df, batch_id: int) -> None:
        from wavesql.sources import kafka

        kafka.write(df, self.sink, batch_id, results=not self.late)

    def __str__(self) -> str:
        return f"kafka topic {self.sink.path}"


def reader_options(fmt: str) -> dict:
    """The options that read a folder of format ``fmt`` back as it was written."""
    return dict(_OPTIONS[fmt])


def batch_folder(root: str, batch_id: int) -> str:
    return storage.join(str(root), f"batch={batch_id:09d}")


def commit(df, root: str, batch_id: int, fmt: str = "parquet", *,
           keep_replaced: bool = False) -> list[str]:
    """Write ``df`` as micro-batch ``batch_id``'s folder under ``root``, visible to readers
    whole or not at all and replacing an earlier attempt (module docstring); returns the
    batch's data files. ``keep_replaced`` (an object store's job output, which a sink's
    index may still list): an earlier attempt's files are left for :func:`publish`."""
    if isinstance(root, KafkaOutput):  # LATE INTO a Kafka sink: records, no folder
        root(df, batch_id)
        return []
    root = str(root)
    target = batch_folder(root, batch_id)
    if not storage.is_remote(root):
        import shutil

        staging = os.path.join(root, "_staging", os.path.basename(target))
        write(df, staging, fmt)
        faults.point("staged")
        if os.path.exists(target):
            shutil.rmtree(target)
        os.replace(staging, target)
        faults.point("renamed")
        return [e.location for e in data_files(target)]
    before = {e.location for e in storage.list_files(target)}
    df.write.mode("append").options(**_OPTIONS[fmt]).format(fmt).save(target)
    written = [e for e in data_files(target) if e.location not in before]
    faults.point("staged")
    SinkLog(root).commit(target, written)
    faults.point("renamed")
    if not keep_replaced:
        for stale in before - {e.location for e in written}:  # an earlier attempt's files
            storage.delete(stale)
    return [e.location for e in written]


def add_to_committed(df, root: str, batch_id: int, tag: str, fmt: str = "parquet") -> None:
    """Add ``df``'s rows to batch ``batch_id``'s folder, which an earlier attempt committed
    (:func:`commit`), as new files, visible whole or not at all, its committed files kept
    (a reader may have read them). Locally each file is renamed into the folder under a
    name with ``tag``; on an object store the files are written into the folder and the
    sink log's record of the batch (its last) rewritten to list them beside the committed
    ones. For a re-run that finds more rows than the attempt that committed the batch."""
    root = str(root)
    target = batch_folder(root, batch_id)
    if not storage.is_remote(root):
        staging = os.path.join(root, "_staging", f"{os.path.basename(target)}-{tag}")
        write(df, staging, fmt)
        for e in data_files(staging):
            name = storage.basename(e.location)
            os.replace(e.location, os.path.join(target, f"{tag}-{name}"))
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
        faults.point("renamed")
        return
    log = SinkLog(root)
    latest = log.latest()
    mine = _uri(target.rstrip("/") + "/")
    committed = {e["path"] for e in (log.entries(latest) if latest >= 0 else [])
                 if e["path"].startswith(mine)}
    before = {e.location for e in storage.list_files(target)}
    df.write.mode("append").options(**_OPTIONS[fmt]).format(fmt).save(target)
    files = [e for e in data_files(target)
             if e.location not in before or _uri(e.location) in committed]
    log.commit(target, files)
    faults.point("renamed")


def commit_all(parts: list, root: str, batch_id: int, fmt: str = "parquet") -> None:
    """The rows of every DataFrame of ``parts`` (same columns) as one batch folder, as
    :func:`commit`; nothing when ``parts`` is empty."""
    if not parts:
        return
    frame = parts[0]
    for part in parts[1:]:
        frame = frame.unionByName(part)
    commit(frame, root, batch_id, fmt)


def data_files(folder: str) -> list:
    """The files of a batch folder that hold rows (Spark's readers skip names starting
    with ``_`` or ``.``: ``_SUCCESS``, checksums)."""
    return [e for e in storage.list_files(str(folder))
            if not storage.basename(e.location).startswith(("_", "."))]


class SinkLog:
    """The commit records of a folder of batches on an object store, in the format of
    Spark's file-sink log (``<root>/_spark_metadata``), so that ``spark.read`` of the root
    reads committed files only (module docstring)."""

    #: Spark's ``spark.sql.streaming.fileSink.log.compactInterval`` default: readers find
    #: the records from the last ``<n>.compact`` on
    COMPACT_EVERY = 10

    def __init__(self, root: str):
        self.folder = storage.join(root, "_spark_metadata")

    def _location(self, n: int) -> str:
        compact = (n + 1) % self.COMPACT_EVERY == 0
        return storage.join(self.folder, f"{n}.compact" if compact else str(n))

    def latest(self) -> int:
        ids = [int(name.removesuffix(".compact")) for name, is_dir in
               storage.children(self.folder)
               if not is_dir and name.removesuffix(".compact").isdigit()]
        return max(ids, default=-1)

    def entries(self, n: int) -> list[dict]:
        lines = storage.read_text(self._location(n)).splitlines()
        if not lines or lines[0] != "v1":
            raise ValueError(f"{self._location(n)} is not a file-sink log record")
        return [json.loads(line) for line in lines[1:] if line.strip()]

    def records(self) -> list[dict]:
        """The records of the committed files, as Spark's reader finds them."""
        latest = self.latest()
        if latest < 0:
            return []
        first = max(0, (latest + 1) // self.COMPACT_EVERY * self.COMPACT_EVERY - 1)
        found: dict[str, dict] = {}
        for n in range(first, latest + 1):
            for e in self.entries(n):
                found[e["path"]] = e
        return [e for _, e in sorted(found.items()) if e.get("action", "add") == "add"]

    def files(self) -> list[str]:
        """The committed files, as Spark's reader finds them."""
        return [e["path"] for e in self.records()]

    def commit(self, batch: str, files: list) -> None:
        """Record ``files`` (:class:`wavesql.storage.Entry`) as the batch folder ``batch``'s
        content: the next record, or the last one if it is that batch's (a re-run)."""
        latest = self.latest()
        mine = _uri(batch.rstrip("/") + "/")
        n = latest if latest >= 0 and any(e["path"].startswith(mine)
                                          for e in self.entries(latest)) else latest + 1
        records = [{"path": _uri(f.location), "size": f.size, "isDir": False,
                    "modificationTime": f.mtime_ns // 1_000_000, "blockReplication": 1,
                    "blockSize": 33554432, "action": "add"} for f in files]
        if (n + 1) % self.COMPACT_EVERY == 0:  # a compaction: the records before it too
            kept: dict[str, dict] = {}
            for i in range(max(0, n - self.COMPACT_EVERY), n):
                for e in self.entries(i):
                    kept[e["path"]] = e
            records = [e for e in kept.values() if e.get("action", "add") == "add"
                       and not e["path"].startswith(mine)] + records
        storage.write_text(self._location(n),
                           "\n".join(["v1"] + [json.dumps(r) for r in records]))


def publish(sink: str, mine: str) -> int:
    """Make what every job has committed to the object-store sink ``sink`` readable at
    its root: a record ``<sink>/_spark_metadata/<n>.compact`` listing the committed files
    of every ``job=`` folder (from each one's own commit log), so ``spark.read`` of the
    sink reads exactly those. Each record is whole (a compaction of interval 1: readers
    read only the latest). In the publishing job's own folder ``mine`` (no other process
    writes there: the job's lease), files no record lists -- attempts killed before their
    commit, attempts a re-run replaced -- are deleted once neither this record nor the one
    before lists them (a reader may still be reading the one before); another job's folder
    may hold its batch in flight, and is left to that job. The caller keeps other
    publishers out (wavesql.jobs: a lease on the sink). Returns the files listed."""
    index = storage.join(sink, "_spark_metadata")
    ids = [int(name.removesuffix(".compact")) for name, is_dir in storage.children(index)
           if not is_dir and name.removesuffix(".compact").isdigit()]
    latest = max(ids, default=-1)
    previous: set[str] = set()
    if latest >= 0:
        lines = storage.read_text(storage.join(index, f"{latest}.compact")).splitlines()[1:]
        previous = {json.loads(line)["path"] for line in lines if line.strip()}
    committed: list = []
    for name, is_dir in storage.children(sink):
        if is_dir and name.startswith("job="):
            log = SinkLog(storage.join(sink, name))
            committed += log.records()
    listed = {r["path"] for r in committed}
    storage.write_text(storage.join(index, f"{latest + 1}.compact"),
                       "\n".join(["v1"] + [json.dumps(r) for r in committed]))
    for e in storage.list_files(mine, recursive=True):
        uri = _uri(e.location)
        if ("/batch=" in uri and uri not in listed and uri not in previous
                and not storage.basename(e.location).startswith(("_", "."))):
            storage.delete(e.location)
    for n in ids:
        if n < latest:
            storage.delete(storage.join(index, f"{n}.compact"))
    return len(listed)


def _uri(location: str) -> str:
    """A location as the URI Spark's log holds (its path part percent-encoded)."""
    kind = storage.scheme(location)
    head, rest = location[:len(kind) + 3], location[len(kind) + 3:]
    authority, _, key = rest.partition("/")
    return head + authority + "/" + quote(key, safe="/=:@!$&'()*+,;-._~")


def count(spark, path: str, fmt: str = "parquet", schema: str | None = None) -> int:
    """Rows in a folder :func:`write` wrote (Parquet: from the footers, no Spark job)."""
    if fmt == "parquet":
        return parquet_rows([e.location for e in data_files(path)])
    reader = spark.read.options(**_OPTIONS[fmt]).format(fmt)
    if schema is not None:
        reader = reader.schema(schema)
    return reader.load(str(path)).count()


def parquet_rows(files) -> int:
    """Rows in Parquet files (locations), summed from their footers: a Spark ``count()``
    is a job (0.1-0.14 s per micro-batch, a third of some)."""
    from wavesql.sources.parquet_chunks import parquet_file

    return sum(parquet_file(f).metadata.num_rows for f in files
               if str(f).endswith(".parquet"))

