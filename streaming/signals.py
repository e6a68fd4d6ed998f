"""Continuous signal queries: a query over a SIGNAL, evaluated as its files arrive.

``SELECT start_time(voice) AS t, seg_rms(voice) AS rms FROM mic [SAMPLES 4096]
WHERE seg_rms(voice) > 0.1`` run with :meth:`wavesql.Session.stream` reads the signal's
directory with the streaming WAV reader (:class:`wavesql.sources.wav_stream.WavStreamReader`)
with the query's program pushed into the scan, exactly as the batch query does
(``planner/lower.py``): files are placed on the sample timeline as in batch (natural name
order back to back, or by the start time in their names), windows lie on the same absolute
grid, and the program's filters run next to the samples. A signal stored as a table (CSV,
Parquet or JSON files, one row per sample) streams the same way: the reader's ``layout``
option hands it to :class:`wavesql.sources.table_stream.TableStreamReader`, which places the
rows as the batch read does (file order, ``sample_column`` or ``time_column``); a new file
must land after everything already read (``OUT_OF_ORDER_FILE`` otherwise). A signal read
from Kafka sample blocks runs on :class:`.kafka_signals.KafkaSignalQuery`, and a signal
defined by a query that is row by row over one catalog stream of files on
:class:`.query_signals.QuerySignalQuery` (the Kafka machinery, each micro-batch's rows of
the signal's query placed as blocks; a row for a window already emitted goes to the late
sink) -- same guarantees, windows, ``_time``/``_progress``/``_final`` columns.

What a micro-batch emits
------------------------
A window is evaluated once its samples are all there: the reader's offset ``end`` (a grid
boundary, in samples) says every window starting below it has been read. The partial tail
window of the last file stays pending until the next file completes it, or until the
recording is marked ended by a ``*.eof`` file in the directory (then it is flushed, cut to
the data, as the batch read cuts it -- and detectors' pending output comes with it). So
every row a micro-batch emits is final: ``_final`` is always true, and

- ``_time`` is the window's start (``start_time`` of the window, with the signal's epoch),
  added to the result when the query does not name a column ``_time`` itself;
- ``_progress`` is the end time of the last complete window the input has covered,
  ``(end / m - 1) * m + n`` samples after the epoch (after the ``*.eof`` marker: the end of
  the last, partial, window's grid cell) -- or, when windows overlap (``n > m``), the
  next window's start, ``end / m * m`` samples, which lies before it. No later row has
  ``_time`` below it.

The micro-batch learns its offsets from Spark's offset log (``<checkpoint>/offsets/offsets/
<batch>``, written before the batch runs): the start is batch ``id - 1``'s entry.

Stateful signal functions
-------------------------
``lowpass``, ``iir``, ``fir``, ``cfar``, ``threshold_ranges``... carry state from window to
window. Functions of finite look-back -- FIR filters, and IIR filters that forget their state
(every stable one: :mod:`wavesql.udfs.kernels.filters` computes how many samples that takes
at the signal's rate) -- run each micro-batch's new windows in parallel partitions (option
``tasks``: about two per core), each warmed up on the samples before it, read again from the
files already on the timeline: the same samples as one whole-signal pass up to 2**-53 of the
filter's state. Functions of unbounded look-back (detectors, ``degap``, ``resample``, an IIR
filter with a pole on the unit circle) keep their state **in the checkpoint** (option
``state_dir`` = ``<checkpoint>/signal_state``): each micro-batch evaluates its new windows in
one ordered partition, starting from the Evaluator states saved at the batch's start offset
and saving them at its end offset (:mod:`wavesql.udfs.states`: JSON and numpy arrays, never
a pickle). Both are exactly once: a re-run of a batch after a crash reads the same files (or
starts from the same state file and rewrites the same end state), so the output equals the
batch query's, however the recording is cut into files and micro-batches.

What is refused (``NOT_IMPLEMENTED`` / ``STREAMING_RULE``, before anything runs): a signal
defined by a query that is not row by row over one stream of files (an aggregate, a join,
a table, a Kafka stream: the error points into the signal's query), a signal with a stream
in one continuous query, SYNC JOIN (its own
runner, streaming/sync.py, watches WAV folders and Kafka topics, not tables), segments of a
view, several signals, and anything but row-by-row SQL over the windows (aggregates, joins,
OVER windows, DISTINCT, LIMIT): each window's row is final when the window is, nothing is
carried across windows outside the signal functions.

What composes: a query over such a query's rows
------------------------------------------------
A signal query that is a CTE -- ``WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS
rms FROM mic [SAMPLES 4096])`` -- with a stream query around it (a CQL window, GROUP BY per
window, OVER windows, an ASOF or interval join with catalog streams) runs as two continuous
queries under one handle (:mod:`.derived`): this runner for the CTE, writing its final rows
and its progress into the checkpoint, and the stream runners for the rest, reading them as
a stream whose event time is the CTE's ``start_time(...)`` column. The same signal query
as a subquery or a view's query is cut the same way (:mod:`.derived_hoist`), and OVER
windows in the signal query's own SELECT are cut into that form (:mod:`.derived_over`)
before this runner sees them; what still reaches the refusals below is what the batch
planner would not run the same way over a stream (an aggregate with no window).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass

from sqlglot import exp

from wavesql import storage
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner.lower import TASKS_PER_CORE, Runtime, lower
from wavesql.planner.windows import TIME

from wavesql.sources.table_signal import FORMATS as TABLE_FORMATS
from wavesql.sources.table_stream import layout_option

from . import checkpoint_plan
from .plan import check_row_by_row, parsed
from .query import ContinuousQuery
from .report import FINAL, PROGRESS, BatchReport, timestamp_lit


#: How to run a stream query over a signal query's rows (streaming/derived.py)
_OVER_FEATURES = ("compute per window in a CTE with the window's start, and window, "
                  "aggregate or join its rows: WITH f AS (SELECT start_time(ch1) AS t, "
                  "seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]) SELECT max(rms) AS peak FROM "
                  "f [RANGE 10 SECONDS SLIDE 10 SECONDS]")


def signal_key(signal) -> tuple:
    """Key of a micro-batch's rows of ``signal`` in ``Runtime.streams`` (lower.py reads
    them in place of the WAV scan)."""
    return ("signal", signal.key)


@dataclass(frozen=True)
class SignalPlan:
    """The scan to stream (its program also outputs ``_time``) and the statement whose
    result carries ``_time``."""

    scan: ir.SignalScan
    bound: ir.QueryStatement


def plan_signal(root: ir.Relation, stmt) -> SignalPlan:
    """Check that ``root`` can run continuously over its signal; see the module docstring."""
    from wavesql.dialect import to_spark_sql
    from wavesql.udfs.program import Output, Program

    def refuse(code, message, hint=None):
        raise WaveSQLError(code, message, Span.of(stmt.node), hint=hint)

    scans = []
    for rel in ir.walk(root):
        if isinstance(rel, ir.SignalScan):
            scans.append(rel)
        elif isinstance(rel, ir.StreamScan):
            refuse("NOT_IMPLEMENTED", "a continuous query over a signal and a stream",
                   "join the stream with a CTE of the signal's windows, e.g. WITH f AS "
                   "(SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES "
                   "4096]) SELECT e.ts, f.rms FROM ev e ASOF JOIN f ON e.ts >= f.t")
        elif isinstance(rel, (ir.SignalStage, ir.Rewindow, ir.WindowScan,
                              ir.StreamOf, ir.SplitScan)):
            refuse("NOT_IMPLEMENTED", f"{type(rel).__name__} in a continuous signal query",
                   "a continuous signal query reads one signal in sample windows, e.g. "
                   "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]")
    if len(scans) != 1:
        refuse("NOT_IMPLEMENTED", "a continuous query over several signals")
    scan = scans[0]
    if scan.signal.format not in ("wav", "samples", "query") + TABLE_FORMATS:
        refuse("NOT_IMPLEMENTED", f"continuous queries read WAV signals, signals stored as "
               f"tables, Kafka sample blocks and signals defined by a query over a stream, "
               f"not {scan.signal.format} files",
               "run it as a batch query (or a scheduled query file: INSERT INTO a sink, "
               "`wavesql schedule`)")
    if not (isinstance(root, ir.SqlQuery) and len(root.inputs) == 1
            and root.inputs[0][1] is scan):
        refuse("NOT_IMPLEMENTED", "this shape of continuous signal query",
               "read the signal directly in the FROM of the query")
    tree = parsed(root)
    select = tree if isinstance(tree, exp.Select) else None
    table = select.args.get("from_") if select is not None else None
    table = table.this if table is not None else None
    if (select is None or not isinstance(table, exp.Table) or select.args.get("joins")
            or any(isinstance(n, (exp.Subquery, exp.Union)) for n in tree.walk())):
        refuse("NOT_IMPLEMENTED", "this shape of continuous signal query",
               "one SELECT over the signal's windows, without subqueries or set operations; "
               + _OVER_FEATURES)
    try:
        check_row_by_row(tree, stmt)
    except WaveSQLError as err:  # an aggregate, DISTINCT, LIMIT: over the windows' rows
        raise WaveSQLError(err.code, err.message, err.span, hint=_OVER_FEATURES) from None
    if any(True for _ in tree.find_all(exp.Window)):
        refuse("STREAMING_RULE", "OVER windows over a signal's windows in a continuous query",
               "name each column an OVER window is in (`avg(seg_rms(ch1)) OVER (...) AS a`, "
               "no `*`): such a SELECT runs, cut into a CTE of the per-window expressions "
               "and the windows over its rows (streaming/derived_over.py); or "
               + _OVER_FEATURES)

    channels = [c.name for c in scan.signal.channels]
    program = scan.program or Program.identity(channels)
    time_tree = {"call": "start_time", "args": [{"col": program.channels[0]}]}
    program = dataclasses.replace(program, outputs=program.outputs + (
        Output(TIME, time_tree, "timestamp", scan.signal.epoch_us),))
    schema = ir.Schema(scan.schema.fields + (ir.Field(TIME, "timestamp"),))
    new_scan = dataclasses.replace(scan, program=program, schema=schema)
    relation = dataclasses.replace(root, inputs=((root.inputs[0][0], new_scan),))
    if root.schema.find(TIME) is None:
        alias = table.alias_or_name
        select = select.copy()
        select.append("expressions", exp.alias_(exp.column(TIME, table=alias), TIME))
        relation = dataclasses.replace(
            relation, sql=to_spark_sql(select), source_offset=None,
            schema=ir.Schema(root.schema.fields + (ir.Field(TIME, "timestamp"),)))
    return SignalPlan(new_scan, ir.QueryStatement(relation))


def scan_options(scan: ir.SignalScan, checkpoint: str, max_files: int | None,
                 tasks: int | None = None) -> dict:
    """Options of the streaming WAV reader for ``scan`` (as ``_lower_signal_scan`` sets
    them for the batch read, with checkpointed state instead of warm-up/sequential)."""
    s = scan.signal
    width, slide = scan.window or (s.segment, s.segment)
    options = {"path": s.path, "rate": repr(s.rate_hz),
               "channels": json.dumps([c.name for c in s.channels]),
               "window": str(width), "slide": str(slide), "program": scan.program.to_json()}
    if s.format in TABLE_FORMATS:  # rows placed by sources/table_stream.py
        options["layout"] = layout_option(s)
    else:
        options.update(dict(s.options))
    if scan.program.stateful:  # only a program of unbounded look-back reads it
        options["state_dir"] = storage.join(checkpoint, "signal_state")
    if tasks is not None:
        options["tasks"] = str(tasks)
    if max_files is not None:
        options["max_files_per_trigger"] = str(max_files)
    return options


def read_offset(checkpoint: str, batch_id: int) -> dict | None:
    """The WAV source's end offset of ``batch_id`` from Spark's offset log (None: none)."""
    if batch_id < 0:
        return None
    path = storage.join(checkpoint, "offsets", "offsets", str(batch_id))
    try:
        lines = storage.read_text(path).splitlines()
    except FileNotFoundError:
        return None
    # "v1", the batch metadata, then one line per source ("-" when it has no offset yet)
    line = lines[2] if len(lines) > 2 else "-"
    if line.strip() in ("-", ""):
        return None
    value = json.loads(line)
    return json.loads(value) if isinstance(value, str) else value


class SignalContinuousQuery(ContinuousQuery):
    """A continuous query over a signal (module docstring)."""

    def _start(self, trigger: str, max_files: int | None):
        from wavesql.sources import wav_source

        checkpoint_plan.check_query(self, "signal")  # the CTE's body, for a derived query's
        sp = self.plan.signal
        wav_source.register(self.spark)
        reader = (self.spark.readStream.format(wav_source.SHORT_NAME)
                  .schema(sp.scan.program.spark_ddl())
                  .options(**scan_options(sp.scan, self.checkpoint, max_files,
                                          tasks=TASKS_PER_CORE * self.spark.sparkContext.defaultParallelism))
                  .options(**wav_source.storage_option()))
        return self._start_writer(reader.load(), trigger)

    def _progress_of(self, offset: dict | None) -> tuple[int | None, int | None]:
        """(samples covered, microseconds since 1970 below which no later row's ``_time``
        lies: the end of the last window emitted, or the next window's start when windows
        overlap)."""
        from wavesql.udfs.sigseg import time_of

        if not offset or offset.get("end") is None:
            return None, None
        s = self.plan.signal.scan.signal
        width, slide = self.plan.signal.scan.window or (s.segment, s.segment)
        k = offset["end"] // slide
        if k <= 0:
            return None, None
        samples = (k - 1) * slide + width
        # the promise is about ``_time``, a window's start: with windows wider than their
        # slide the next window (start ``k * slide``) begins before the last one's end
        return samples, s.epoch_us + time_of(min(samples, k * slide), s.rate_hz)

    def _run_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        began, wall = time.monotonic(), self.clock()
        spark = batch_df.sparkSession
        scan = self.plan.signal.scan
        start = read_offset(self.checkpoint, batch_id - 1)
        end = read_offset(self.checkpoint, batch_id)
        before, _ = self._progress_of(start)
        samples, progress = self._progress_of(end)
        report = BatchReport(batch_id, progress, started_at=wall)
        width, slide = scan.window or (scan.signal.segment, scan.signal.segment)
        k0 = (start or {}).get("end")
        k1 = (end or {}).get("end")
        report.rows_in = report.on_time = max(0, ((k1 or 0) - (k0 or 0)) // slide) \
            if k1 is not None else 0
        report.samples_in = max(0, (samples or 0) - (before or 0))
        new_files = sorted(set((end or {}).get("files") or ())
                           - set((start or {}).get("files") or ()))
        arrived = [m for m in (_mtime(f) for f in new_files) if m is not None]

        rt = Runtime(spark, self.session.catalog, self.text,
                     streams={signal_key(scan.signal): batch_df})
        out = (lower(self.bound, rt).withColumn(FINAL, F.lit(True))
               .withColumn(PROGRESS, timestamp_lit(progress))).persist()
        report.rows_out = report.final_out = out.count()
        self._deliver_final(out, batch_id, progress)
        out.unpersist()

        report.state_bytes = self._keep_signal_state(k0, k1, slide)
        self._commit_signal_state(batch_id, progress, samples, end)
        report.inputs = {scan.signal.key: progress}
        self._finish(report, began, arrived)

    def _deliver_final(self, out, batch_id: int, progress: int | None) -> None:
        """Deliver a batch's rows, all final up to ``progress`` (streaming/derived.py also
        writes the progress itself, for the query reading these rows)."""
        self._deliver(out, batch_id)

    def _keep_signal_state(self, k0, k1, slide) -> int:
        """Drop state files older than the batch's start; the size of the current one."""
        folder = storage.join(self.checkpoint, "signal_state")
        if k1 is None:
            return 0
        size = 0
        for f in storage.list_files(folder):
            name = storage.basename(f.location)
            if not (name.startswith("k=") and name.endswith(".state")):
                continue
            k = int(name[2:-len(".state")])
            if k0 is not None and k < k0 // slide:
                storage.delete(f.location)  # a re-run of this batch needs only k0's state
            elif k == k1 // slide:
                size = f.size
        return size

    def _commit_signal_state(self, batch_id: int, progress, samples, end) -> None:
        key = self.plan.signal.scan.signal.key
        self._commit_state(batch_id, {
            "batch": batch_id, "progress": progress,
            "inputs": {key: {"progress": progress, "samples": samples,
                             "final": bool((end or {}).get("final"))}}})


def _mtime(path: str | None) -> float | None:
    """Modification time (s since 1970) of a local file or ``file:`` URI, else None."""
    if not path:
        return None
    from urllib.parse import unquote, urlparse

    if "://" in path or path.startswith("file:"):
        uri = urlparse(path)
        if uri.scheme not in ("file", ""):
            return None
        path = unquote(uri.path)
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
