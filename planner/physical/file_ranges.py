"""Ranges of event time that a direct pass reads straight from a Parquet stream's files.

The direct passes (planner/physical/chunked_windows.py, fused_chains.py and
direct_resample.py) hand each Spark task one range of event time; the task reads the row
groups its range needs with pyarrow (sources/parquet_chunks.py), with the rows before (and
after) it that its frames reach, so that no row goes through Spark's scan, shuffle and
sort first. The ranges are planned here, from the files' footers (row counts, min/max of
the event time), before anything runs:

- :func:`direct_groups`: the row groups, or None when the files are not ones a pass reads
  exactly as Spark does (partition folders, NULL times, stored types pyarrow reads
  otherwise...) or hold too few rows for a Python pass to pay;
- :func:`fitting_ranges`: the row groups cut into ranges of equal row counts, one task per
  core (:func:`direct_tasks`), cut finer until each range fits what one Python task may
  hold (planner/physical/task_memory.py); None when no cut fits or the ranges would read
  the rows too many times over (files out of time order: Spark's shuffle costs less);
- :func:`direct_ranges`: both.
"""

from __future__ import annotations

from wavesql import settings

from . import task_memory

#: A chunk spans at least this many frame reaches, so context stays a small fraction.
MIN_CHUNK_FRAMES = 16
#: Rows one task of a direct pass holds at most (its arrays: ~100 bytes a row).
MAX_TASK_ROWS = 1 << 22
#: A direct pass reads at most this many times the stream's rows (row groups read by
#: several ranges); beyond it (files not in time order) Spark's shuffle costs less.
MAX_READ_FACTOR = 3
#: Tasks per core of a direct pass. Spark charges a fixed cost per Python task (tens of
#: milliseconds) and the ranges hold equal row counts, so more tasks than cores only add
#: that cost.
DIRECT_TASKS_PER_CORE = 1


def direct_ranges(frame, stream, rt, time_col: str, wanted: dict, progress, min_rows: int, *,
                  before: int = 0, after: int = 0, min_span: int = 1, neighbours: bool = False,
                  no_nulls=(), columns: int | None = None):
    """The ranges of event time a direct pass over ``stream``'s files reads
    (sources/parquet_chunks.py: ``ranges``), or None when the files are not ones it reads
    exactly as Spark does (``frame``: Spark's scan of them), hold fewer than ``min_rows``
    rows or NULLs in a ``no_nulls`` column, are too far out of time order, or cannot be cut
    into ranges that fit a Python task's memory (``columns``, default ``wanted``'s: the
    columns a row carries through the pass; planner/physical/task_memory.py)."""
    groups = direct_groups(frame, stream, rt, time_col, wanted, progress, min_rows, no_nulls)
    if groups is None:
        return None
    return fitting_ranges(rt.spark, groups, columns or len(wanted), before, after, min_span,
                          neighbours=neighbours)


def fitting_ranges(spark, groups, columns: int, before: int, after: int, min_span: int, **kw):
    """``parquet_chunks.ranges`` cut into enough tasks that none reads more rows than one
    Python task may hold (planner/physical/task_memory.py), or None when even the finest
    cut does not fit (a frame whose context alone is too large: the caller leaves the work
    to Spark) or reads more than :data:`MAX_READ_FACTOR` times the rows."""
    from wavesql.sources import parquet_chunks as pc_


    total = sum(g.rows for g in groups)
    limit = task_memory.max_rows(spark, columns)
    if limit < 1:  # a worker's limit leaves no room for rows: Spark does the work
        return None
    tasks = max(direct_tasks(spark, total), -(-total // limit))
    while True:
        ranges = pc_.ranges(groups, tasks, before, after, min_span, **kw)
        if sum(g.rows for r in ranges for g in r.groups) > MAX_READ_FACTOR * total:
            return None
        if max(sum(g.rows for g in r.groups) for r in ranges) <= limit:
            return ranges
        if len(ranges) < tasks or tasks >= total:  # no finer cut exists
            return None
        tasks *= 2


def direct_groups(frame, stream, rt, time_col: str, wanted: dict, progress, min_rows: int,
                  no_nulls=(), **index_options):
    """The row groups of ``stream``'s files (sources/parquet_chunks.py: ``index``, which
    takes ``index_options``), or None when the files are not ones a direct pass reads
    exactly as Spark does or hold fewer than ``min_rows`` rows."""
    from wavesql.sources import parquet_chunks as pc_

    files = _stream_files(frame, stream)
    if not files:
        return None
    tz = str(rt.spark.conf.get("spark.sql.session.timeZone", "")).upper()
    groups = pc_.index(files, time_col, wanted, utc_naive=tz in ("UTC", "ETC/UTC", "GMT", "Z"),
                       progress=progress, no_nulls=no_nulls, **index_options)
    if not groups or sum(g.rows for g in groups) < min_rows:
        return None
    return groups


def direct_tasks(spark, total: int) -> int:
    """Tasks of a pass reading ``total`` rows straight from the files: one per core
    (:data:`DIRECT_TASKS_PER_CORE`), none over :data:`MAX_TASK_ROWS` rows, in a whole
    number of rounds of the cores (``wavesql.windows.chunk_rows`` overrides). Why whole
    rounds: the ranges hold equal row counts, so 3 tasks on 2 cores take as long as 4
    (the third runs alone) -- 10.8 M rows of un-keyed RESAMPLE took 2 rounds of 3.6 M
    rows instead of 2 of 2.7 M."""
    override = settings.get(spark, "wavesql.windows.chunk_rows")
    if override:
        return max(1, -(-total // override))
    slots = DIRECT_TASKS_PER_CORE * max(1, spark.sparkContext.defaultParallelism)
    rounds = max(1, -(-total // (MAX_TASK_ROWS * slots)))
    return rounds * slots


def _stream_files(frame, stream) -> list[str] | None:
    """The files Spark's scan of ``stream`` reads (its own listing) as locations
    (wavesql.storage: local paths or object-store URIs); None if one sits in a
    ``key=value`` folder (a partition column Spark would add)."""
    from urllib.parse import unquote, urlparse

    from wavesql import storage

    try:
        uris = frame.inputFiles()
    except Exception:  # noqa: BLE001 -- the shuffled pass reports it where Spark does
        return None
    base = stream.path.rstrip("/")
    files = []
    for uri in uris:
        parsed = urlparse(uri)
        path = unquote(parsed.path)
        if parsed.scheme not in ("", "file"):
            path = f"{parsed.scheme}://{parsed.netloc}{path}"
        folder = storage.dirname(path)
        below = folder[len(base):] if folder.startswith(base) else ""
        if any("=" in part for part in below.split("/")):
            return None
        files.append(path)
    return sorted(files)
