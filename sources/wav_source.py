"""WAV files as a Spark data source (``wavesql_wav``), windowed and computed in the scan.

The scan reads WAV files in big blocks with :mod:`wavesql.udfs.wav`, cuts them into sample
windows on an absolute grid, runs the query's signal stage (a
:class:`wavesql.udfs.program.Program`) over whole blocks of windows, and hands Spark Arrow
record batches of the program's output -- raw samples never cross into the JVM unless the
program asks for them (the identity program does: one SigSeg column per channel).

Batch queries of the planner do not go through the data source: :func:`batch_frame` plans
the same partitions on the driver and runs them as ``mapInArrow`` tasks (no Python planning
processes per query); streaming reads and ``SET wavesql.wav.scan = source`` use it.

>>> register(spark)                                                   # doctest: +SKIP
>>> df = (spark.read.format("wavesql_wav").schema(prog.spark_ddl())   # doctest: +SKIP
...       .options(path="rec/", rate="48000", channels='["ch1"]', window="4096",
...                program=prog.to_json()).load())

The parts: :mod:`.wav_plan` (the options -- all listed there --, the files on their
timeline, runs, windows and partitions; the errors planning raises), :mod:`.wav_scan`
(reading a partition: windows, the program, checkpointed state files), :mod:`.wav_stream`
(the stream reader: offsets, files still being written, checkpointed state). This module is
the data source Spark sees (:class:`WavDataSource`, :func:`register`) and the ways in:
:func:`load` (options and files checked here first) and :func:`batch_frame`.

Errors are :class:`~wavesql.udfs.wav.WavError` (``str`` = ``"<path>: <message> [<CODE>]"``);
:func:`load` raises planning's (:mod:`.wav_plan`, *Errors*) in the calling process, while a
plain ``spark.read...load()`` reports them when Spark plans the scan, wrapped in its own
exception.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from typing import Mapping

from pyspark.sql.datasource import DataSource, DataSourceReader

from wavesql import storage

from .arrow import conform
from .wav_plan import WavOptions, list_wav_files, plan
from .wav_scan import WavScan, read_partition, target_schema
from .wav_stream import WavStreamReader

# plan, list_wav_files (wav_plan) and WavStreamReader (wav_stream) are here too: the ways
# into a WAV read, all in one place for the planner and streaming
__all__ = ["SHORT_NAME", "WavDataSource", "WavBatchReader", "WavStreamReader", "register",
           "load", "batch_frame", "lookback_partitions", "source_frame", "ordered_frame",
           "storage_option", "plan",
           "list_wav_files"]

SHORT_NAME = "wavesql_wav"


def storage_option() -> dict[str, str]:
    """The ``storage_secret`` option carrying this process's storage settings to the
    source's planning and tasks (empty when there are none)."""
    settings = storage.current()
    return {"storage_secret": settings.to_json()} if settings.hadoop else {}


class WavBatchReader(WavScan, DataSourceReader):
    """A batch read: all files listed when the query runs, split into partitions."""

    def __init__(self, options, schema):
        self._init_scan(options, schema, streaming=False)

    def partitions(self):
        return self._plan.partitions()


class WavDataSource(DataSource):
    """The ``wavesql_wav`` Spark data source (batch and streaming reads).

    Examples
    --------
    >>> spark.dataSource.register(WavDataSource)              # doctest: +SKIP
    >>> spark.read.format("wavesql_wav").load("rec/").count()  # doctest: +SKIP
    """

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self):
        return plan(self.options, allow_empty=True).spark_ddl

    def reader(self, schema):
        return WavBatchReader(self.options, schema)

    def streamReader(self, schema):
        if "layout" in self.options:  # a table signal's rows (sources/table_stream.py)
            from .table_stream import TableStreamReader

            return TableStreamReader(self.options, schema)
        return WavStreamReader(self.options, schema)


_registered: "weakref.WeakSet" = weakref.WeakSet()


def register(spark) -> None:
    """Register ``wavesql_wav`` with a Spark session (once per session; idempotent)."""
    if spark in _registered:
        return
    spark.dataSource.register(WavDataSource)
    _registered.add(spark)


def _option_text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return json.dumps(list(value))
    if hasattr(value, "to_json"):
        return value.to_json()
    return str(value)


def load(spark, schema: str | None = None, *, streaming: bool = False, **options):
    """Read WAV files as a DataFrame, checking the options and files here first.

    Unlike a bare ``spark.read.format("wavesql_wav")``, problems Spark would only report
    when the query runs (wrapped in its own exception) raise
    :class:`~wavesql.udfs.wav.WavError` right away.

    Parameters
    ----------
    spark : SparkSession
    schema : str, optional
        Spark DDL of the columns wanted (default: all of the program's outputs).
    streaming : bool
        ``spark.readStream`` instead of ``spark.read``.
    **options
        The source options; lists become JSON, a Program its JSON, booleans true/false.

    Examples
    --------
    >>> df = load(spark, path="rec/", window=4096, channels=["ch1"])   # doctest: +SKIP
    """
    opts = {k: _option_text(v) for k, v in options.items() if v is not None}
    checked = plan(opts, streaming=streaming)
    register(spark)
    source = spark.readStream if streaming else spark.read
    return source.format(SHORT_NAME).schema(schema or checked.spark_ddl).options(**opts).load()


def batch_frame(spark, schema: str, options: Mapping[str, str], *, read=None, split=None):
    """A batch read planned here, on the driver, and run as ``mapInArrow`` tasks.

    The same partitions and the same reading as the ``wavesql_wav`` source's batch reader,
    without a Python data source: Spark plans one of those by starting Python processes on
    the driver (the schema, then the partitions) for every query, about 0.2 s of fixed cost
    that dominated short reads (benchmarks/signals/README.md). Here the plan is made in
    this process, and each task is one partition index handed to a reused Python worker.
    ``read`` is :func:`.wav_plan.plan`'s (a header cache).

    With ``split`` (a :class:`wavesql.udfs.row_state.Split` whose ``scan`` program the
    options carry) the tasks score the windows and the result is :func:`ordered_frame`'s:
    each task's rows packed into one row, then the row-state functions in one ordered pass.
    """
    from pyspark.sql.types import _parse_datatype_string

    from wavesql.udfs import row_state

    opts = WavOptions.parse(options)
    checked = plan(opts, read=read)
    struct = _parse_datatype_string(schema)
    target = target_schema(checked, struct)
    parts = checked.partitions()
    heads = [None] * len(parts)
    if split is not None and isinstance(split.lookback, int):
        parts, heads = lookback_partitions(checked, split.lookback, parts)
    program_json, channels, stateful = checked.program_json, checked.channels, checked.stateful
    settings = storage.current()  # the tasks reach the files' store as the driver does

    def rows(batches):  # each partition index in the batches: its rows, in order
        storage.use(settings)
        for b in batches:
            for i in b.column(0).to_pylist():
                yield i, (conform(batch, target) for batch in read_partition(
                    parts[i], opts, program_json, channels, stateful))

    def wav_scan(batches):  # the name shows in Spark's plans: MapInArrow wav_scan(id)
        for _, out in rows(batches):
            yield from out

    def wav_scan_packed(batches):  # the scan's rows, one packed row per partition
        for i, out in rows(batches):
            yield from row_state.pack(i, out, split, heads[i])

    n = len(parts)
    frame = spark.range(0, n, 1, max(1, n))
    if split is None:
        return frame.mapInArrow(wav_scan, struct)
    return ordered_frame(frame.mapInArrow(wav_scan_packed, split.packed_ddl()), split, True)


def lookback_partitions(checked, lookback: int, parts: list) -> tuple[list, list]:
    """The partitions of a scan whose partitions run cfar themselves from the ``lookback``
    windows before them (udfs/row_chain.py): those windows read as a warm-up is, their
    rows kept (the first ``head`` rows of the partition); a partition that does not
    speculate (``head`` None) is read as planned."""
    from wavesql.udfs import row_chain

    wide = dataclasses.replace(checked, stateful=True, lookback=(checked.lookback or 0)
                               + lookback * checked.options.slide).partitions()
    heads = row_chain.heads(lookback, [sum(t.k1 - t.k0 for t in p.tasks) for p in wide],
                            [sum(t.k1 - t.k0 for t in p.warmup) for p in wide])
    return [p if h is None else dataclasses.replace(
        w, warmup=(), tasks=w.warmup + w.tasks, discard_before=None)
        for p, w, h in zip(parts, wide, heads)], heads


def source_frame(spark, schema: str, options: Mapping[str, str], split=None):
    """A batch read through the data source (``SET wavesql.wav.scan = source``); with
    ``split``, its rows then go through :func:`ordered_frame`."""
    register(spark)
    df = spark.read.format(SHORT_NAME).schema(schema).options(**options,
                                                              **storage_option()).load()
    return df if split is None else ordered_frame(df, split)


def ordered_frame(scanned, split, packed: bool = False):
    """The ordered pass of ``split`` over the ``scanned`` rows of its scan program, in one
    task. The rows reach it packed (:func:`row_state.pack`), one row per scan partition
    keyed by its index -- partitions are cut in timeline order --, so a shuffle moves a
    few rows and nothing is sorted by Spark. ``packed``: the scan packed them itself
    (:func:`batch_frame`); otherwise (the data source) each task packs its rows here."""
    from pyspark import TaskContext

    from wavesql.udfs import row_state

    def row_state_pack(batches):
        yield from row_state.pack(TaskContext.get().partitionId(), batches)

    def row_state_pass(batches):  # the name shows in Spark's plans
        yield from row_state.ordered_pass(batches, split)

    if not packed:
        scanned = scanned.mapInArrow(row_state_pack, split.packed_ddl())
    return scanned.repartition(1, row_state.PART).mapInArrow(row_state_pass,
                                                             split.ordered.spark_ddl())
