"""Signals defined by a query: each row of a query's result is one sample.

``CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT) RATE 64 HZ OPTIONS (sample_column = 'n')
AS SELECT n, ax AS x, ay AS y, az AS z FROM readings WHERE device = 'a'``: the semantics
are exactly a table signal's (sources/table_signal.py) with the query's result as the
table -- a column per channel (named as the channels, any case), each row one sample of
every channel, placed by

- ``OPTIONS (sample_column = 'n')``: an integer (or whole-valued) column, the sample
  number; or
- ``OPTIONS (time_column = 'ts')``: a TIMESTAMP column, the nearest sample to
  ``(ts - EPOCH) * RATE`` (table_signal.to_samples).

One of them is required: a query's row order is not defined (Spark may return its rows in
any order from one run to the next), so "the rows in order" is no timeline. Missing numbers
are gaps, a number held twice is ``OVERLAPPING_SAMPLES``, a NULL or fractional position
``MALFORMED_ROW``, a NULL channel value a NaN sample.

Why the catalog keeps the query's text, not its result: like a view, the signal is what
its query reads *now* (new files in a stream, a replaced view), and a DROP of what it reads
behaves as for a view -- allowed, the signal then fails where it is read, naming the
missing object. The planner binds the text again at each use (planner/lower.py) and hands
this module the query's DataFrame; the columns are checked against the declaration then
(:func:`check_columns`), as at CREATE.

How it runs (:func:`batch_frame`), in two Spark jobs over one evaluation of the query,
neither collecting the rows. The query's position and channel columns are a lazy local
checkpoint (:func:`_held`): the first job computes the query once and leaves its rows in
the executors' block stores, the second reads them from there.

1. *Runs*: the query's position column (read from the checkpoint it fills), grouped in
   buckets of 2^18 consecutive samples (an aggregation: one shuffle of one column); each
   bucket's task sorts its numbers and returns its gap-free runs ``(first sample,
   count)`` -- a handful of numbers per bucket, whatever the row count -- and raises the
   NULL, fractional and duplicate errors. The driver sorts the runs, refuses overlaps
   (two timestamps rounding to one sample in two buckets) and places each run as a
   :class:`~wavesql.sources.table_signal.RowsPlacement`; runs that meet at a bucket's
   edge are one run again in the scan's plan (``wav_plan.runs_of``).
2. *Samples*: from there it is the WAV scan's plan (sources/placed.py: the same windows,
   partitions and warm-ups of stateful filters). Each partition reads a contiguous range
   of sample numbers (its windows and warm-up). A Python pass over the query's rows
   computes each row's sample number (as in step 1) and sends the row to every partition
   whose range holds it (a warm-up also reads the end of the partition before); the rows
   are then grouped by partition (one shuffle), sorted by sample number in the task and
   run through the same window and signal-function code as a WAV scan
   (:func:`~wavesql.sources.placed.scan_part`).

Why one evaluation: the two jobs must see the same rows -- runs planned from one set of
rows and samples read from another would be a half-placed read (``QUERY_CHANGED`` still
guards that: a lost executor's blocks are not recomputed silently, the job fails) -- and
the query may be costly (CSV parsing, joins, a view over views). Measured on 2 M rows
of two channels (a WHERE leaving gaps, 4 files; two warm runs each on a 2-core machine
at load ~14, so +-20%): over CSV 41-33 s once against 52-48 s twice; over Parquet, whose
second read is a cheap pruned scan, a wash (33-23 s either way). A local
checkpoint is not fault tolerant (an executor lost between the jobs fails the query) and
holds the rows (8 bytes per channel and sample) until the query's DataFrame is dropped.
Continuous queries over such a signal (its query row by row over one stream of files) run
in streaming/query_signals.py, each micro-batch's rows placed with :func:`sample_numbers`
and :func:`check_columns` as here; a continuous SYNC over it reads its stream's
files through the same functions (streaming/query_sync.py).
"""

from __future__ import annotations

import numpy as np

from wavesql.errors import WaveSQLError, did_you_mean
from wavesql.sources.placed import Frames
from wavesql.sources.table_signal import (Layout, RowsPlacement, channel_samples, sample_runs,
                                          to_samples)
from wavesql.spark_errors import runtime_errors

#: the OPTIONS a query signal takes
OPTIONS = ("sample_column", "time_column")
#: Spark types a sample number may have (a fractional one must hold whole numbers)
_NUMBER_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "decimal")
_POS = "__wavesql_pos"  # the position column, as the tasks see it
#: samples per bucket when the runs are found: a task's share, the runs it returns at least
BUCKET = 1 << 18
_PART = "__wavesql_part"


def layout_of(signal) -> Layout:
    """The signal's channels and position column (``INVALID_OPTION`` when its options are
    not exactly one of sample_column / time_column)."""
    options = {k.lower(): v for k, v in signal.options}
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}`: unknown option "
                           f"`{unknown[0]}` for a signal defined by a query",
                           hint=f"options here: {', '.join(OPTIONS)}")
    sample, time = options.get("sample_column") or None, options.get("time_column") or None
    if sample and time:
        raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}`: give sample_column or "
                           "time_column, not both",
                           hint="the sample number places a row exactly; use it alone")
    if not (sample or time):
        raise WaveSQLError("INVALID_OPTION", f"signal `{signal.name}` is defined by a query, "
                           "whose row order is not defined: name the column that places "
                           "each row on the timeline",
                           hint="OPTIONS (sample_column = 'n') for sample numbers, or "
                                "OPTIONS (time_column = 'ts') for timestamps")
    return Layout("query", tuple(c.name for c in signal.channels), sample, time,
                  float(signal.rate_hz), int(signal.epoch_us))


def check_columns(signal, fields) -> dict[str, str]:
    """The query's column for each channel and for the position, by declared name, given
    its result's ``(name, spark type)`` pairs: ``UNKNOWN_COLUMN`` for one it lacks,
    ``TYPE_ERROR`` for one of the wrong type, ``INVALID_OPTION`` for a position column that
    is also a channel."""
    layout = layout_of(signal)
    types = {}
    for name, typ in fields:
        types.setdefault(name.lower(), (name, typ))
    if layout.position.lower() in {c.lower() for c in layout.channels}:
        raise WaveSQLError("INVALID_OPTION", f"`{layout.position}` is a channel of "
                           f"`{signal.name}`; it cannot also be its sample numbers or times",
                           hint="declare the channels only: the position column is named "
                                "in OPTIONS")
    found = {}
    for wanted in list(layout.channels) + [layout.position]:
        if wanted.lower() not in types:
            names = [n for n, _ in fields]
            raise WaveSQLError("UNKNOWN_COLUMN", f"the query of signal `{signal.name}` has no "
                               f"column `{wanted}`", hint=did_you_mean(wanted, names, "columns")
                               or f"its columns: {', '.join(names)}; name a column "
                                  f"`{wanted}` (... AS {wanted})")
        name, typ = types[wanted.lower()]
        base = typ.lower().split("(")[0]
        if wanted in layout.channels and base not in _NUMBER_TYPES:
            raise WaveSQLError("TYPE_ERROR", f"channel `{wanted}` of signal `{signal.name}` is "
                               f"{typ} in its query, not a number",
                               hint=f"cast it: CAST(... AS FLOAT) AS {wanted}")
        if wanted == layout.sample_column and base not in _NUMBER_TYPES:
            raise WaveSQLError("TYPE_ERROR", f"sample_column `{wanted}` is {typ}, not sample "
                               "numbers", hint="an integer column, or name a timestamp: "
                                               "time_column")
        if wanted == layout.time_column and not base.startswith("timestamp"):
            raise WaveSQLError("TYPE_ERROR", f"time_column `{wanted}` is {typ}, not a "
                               "timestamp", hint=f"cast it: CAST(... AS TIMESTAMP) AS {wanted}")
        found[wanted] = name
    return found


def sample_numbers(column, layout: Layout, where: str) -> np.ndarray:
    """The sample number of each value of Arrow ``column`` (the position column), int64;
    ``MALFORMED_ROW`` for a NULL or a fractional one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if column.null_count:
        raise WaveSQLError("MALFORMED_ROW", f"{where}: a row has a NULL `{layout.position}`",
                           hint="every sample needs its place on the timeline: filter "
                                f"`{layout.position} IS NOT NULL` in the query if such rows "
                                "are not samples")
    if layout.time_column:
        micros = pc.cast(column, pa.timestamp("us", column.type.tz), safe=False)
        return to_samples(micros.cast(pa.int64()).to_numpy(zero_copy_only=False),
                          layout.rate, layout.epoch_us)
    if pa.types.is_decimal(column.type):
        column = pc.cast(column, pa.float64())
    values = column.to_numpy(zero_copy_only=False)
    if values.dtype.kind == "f":
        whole = np.isfinite(values) & (values == np.round(values))
        if not whole.all():
            raise WaveSQLError("MALFORMED_ROW", f"{where}: sample number "
                               f"{values[int(np.argmin(whole))]!r} in `{layout.position}` is "
                               "not a whole number", hint="sample numbers count samples from 0")
    return values.astype(np.int64, copy=False)


def placements(signal, layout: Layout, rows, column: str) -> list[RowsPlacement]:
    """The runs of the query's rows (``rows``, position in ``column``) on the timeline, in
    order, computed by Spark tasks over the position column alone (module docstring)."""
    where = f"signal `{signal.name}`'s query"

    def runs_of(table):
        import pyarrow as pa

        numbers = np.sort(sample_numbers(table.column(1).combine_chunks(), layout, where))
        found = [(a, n) for a, n, _ in sample_runs(numbers, where)]
        return pa.table({"start": pa.array([a for a, _ in found], pa.int64()),
                         "frames": pa.array([n for _, n in found], pa.int64())})

    from pyspark.sql import functions as F

    # buckets of BUCKET samples (of their time, for timestamps): a task gathers a bucket's
    # positions and returns its runs; runs across buckets join on the driver (runs_of)
    position = rows[column]
    if layout.time_column:
        key = F.floor(F.unix_micros(position.cast("timestamp")) / (BUCKET * 1e6 / layout.rate))
    else:
        key = F.floor(position / F.lit(BUCKET))
    positions = rows.select(key.alias(_PART), position.alias(_POS))
    with runtime_errors():  # a task's WaveSQLError, not a worker's traceback
        found = positions.groupBy(_PART).applyInArrow(
            runs_of, "start bigint, frames bigint").collect()
    runs = sorted((r["start"], r["frames"]) for r in found)
    placed = []
    for start, frames in runs:
        if placed and start < placed[-1].end_sample:
            raise WaveSQLError("OVERLAPPING_SAMPLES", f"{where}: two rows hold sample {start}",
                               hint="every sample number may appear once (two times that "
                                    "round to one sample are one sample twice)")
        placed.append(RowsPlacement(f"query:{signal.name}", Frames(frames), start, -1, 0))
    return placed


def batch_frame(spark, signal, rows, program, width: int, slide: int, *,
                lookback: int | None, sequential: bool, tasks: int):
    """A batch read of query signal ``signal`` -- ``rows`` being its query's DataFrame --
    through ``program`` in ``[SAMPLES width SLIDE slide]`` windows: a DataFrame of the
    program's output (module docstring)."""
    from pyspark.sql import functions as F

    from wavesql.sources.placed import placed_plan, scan_part
    from wavesql.sqltext import quote

    layout = layout_of(signal)
    columns = check_columns(signal, [(f.name, f.dataType.simpleString())
                                     for f in rows.schema.fields])
    where = f"signal `{signal.name}`'s query"
    names = [f"__wavesql_ch{i}" for i in range(len(layout.channels))]
    samples = _held(rows.select(rows[columns[layout.position]].alias(_POS), *[
        rows[columns[c]].cast("double").alias(name) for c, name in zip(layout.channels, names)]))
    placed = placed_plan(signal, program, placements(signal, layout, samples, _POS), width,
                         slide, path=f"query:{signal.name}", lookback=lookback,
                         sequential=sequential, tasks=tasks)
    struct_type = placed.struct_type
    if not placed.needed():
        return spark.createDataFrame([], struct_type)
    n, m = placed.options.window, placed.options.slide
    spans = []  # (partition, first sample, end sample) each partition reads
    for index, part in enumerate(placed.parts):
        reads = [(max(t.k0 * m, t.run_start), min((t.k1 - 1) * m + n, t.run_end))
                 for t in part.warmup + part.tasks if t.files]
        if reads:
            spans.append((index, min(a for a, _ in reads), max(b for _, b in reads)))
    spans.sort(key=lambda x: x[1])
    channel_layout = Layout("query", tuple(names), None, None, layout.rate, layout.epoch_us)
    los = np.array([lo for _, lo, _ in spans], dtype=np.int64)

    def route(batches):
        """Each row to every partition whose range holds it (warm-ups overlap), keyed by
        partition, with its sample number (computed here as when planning)."""
        import pyarrow as pa

        for batch in batches:
            if not batch.num_rows:
                continue
            numbers = sample_numbers(batch.column(0), layout, where)
            order = np.argsort(numbers, kind="stable")
            numbers = numbers[order]
            table = pa.Table.from_batches([batch]).take(pa.array(order))
            last = int(np.searchsorted(los, numbers[-1], side="right"))
            for index, lo, hi in spans[:last]:
                a, b = np.searchsorted(numbers, [lo, hi])
                if b > a:
                    part = table.slice(a, b - a)
                    yield pa.RecordBatch.from_arrays(
                        [pa.array(np.full(b - a, index, np.int32)),
                         pa.array(numbers[a:b])] + [part.column(c).combine_chunks()
                                                     for c in names],
                        names=[_PART, "__wavesql_n"] + names)

    routed_schema = ", ".join([f"{_PART} INT", "__wavesql_n BIGINT"]
                              + [f"{c} DOUBLE" for c in names])
    routed = samples.mapInArrow(route, routed_schema)

    def scan(table):
        index = table.column(_PART)[0].as_py()
        numbers = table.column("__wavesql_n").to_numpy()
        order = np.argsort(numbers, kind="stable")
        numbers = numbers[order]
        data = channel_samples(table, channel_layout, where)[:, order]

        def samples_of(f, lo, hi):
            a, b = np.searchsorted(numbers, [lo, hi])
            if b - a != hi - lo or (b > a and (numbers[a] != lo or numbers[b - 1] != hi - 1)):
                raise WaveSQLError(
                    "QUERY_CHANGED", f"{where}: samples {lo}..{hi - 1} are {b - a} rows now, "
                    f"{hi - lo} when the query was planned", hint="the query's result changed "
                    "while it was read (a non-deterministic query, or data written "
                    "meanwhile): run it again")
            return data[:, a:b]

        return scan_part(placed, index, samples_of)

    frame = routed.groupBy(_PART).applyInArrow(scan, struct_type)
    return frame.select(*[F.col(quote(f.name)) for f in struct_type.fields])


def _held(frame):
    """``frame`` (the query's position and channels) evaluated once for both jobs: a lazy
    local checkpoint, filled by the runs job while it reads the rows and read back from the
    executors' block stores by the samples job (module docstring)."""
    return frame.localCheckpoint(eager=False)


__all__ = ["OPTIONS", "batch_frame", "check_columns", "layout_of", "placements",
           "sample_numbers"]
