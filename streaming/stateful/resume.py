"""Resume inputs: each watermarked input's progress carried across a restart.

**The gap this closes.** A query on Spark's state store carries progress as Spark's
watermark (:mod:`.processor`): one ``withWatermark`` per input (per Kafka partition), the
query's watermark the minimum over them. Spark's offset log keeps only that global
watermark; after a restart each input's own watermark starts empty, and the global one
stays where the checkpoint left it until *every* input has had a row in that run (a known
Spark limitation; see apache/spark#48570's discussion). So an input that is idle after a
restart held the query back, though its own progress -- its last rows, its punctuation --
had moved further before: nothing lost, but instants and windows that were final waited.

**How.** Every watermarked input of a query started on a new checkpoint reads, unioned
with its rows *before* its ``withWatermark``, a small file stream of its own,
``<checkpoint>/resume/input-<i>/``, which Spark checkpoints like any file source. At each
start WaveSQL writes one JSON file there holding one row: the largest promise (``__wm``)
that input had made before the restart. Spark reads it in the first micro-batch of the
run, so every watermark operator has seen a row by the end of that batch and the query's
watermark is the minimum of the inputs' *own* progress again.

**The record.** Each input's largest promise is observed as its rows pass (Spark's
``observe``: no job of its own, the largest ``__wm`` per input and micro-batch) and kept,
the maximum so far, in a versioned record per micro-batch under
``<checkpoint>/resume/progress/`` (:mod:`.batch_records`), written by the batch before
Spark commits it. A batch re-run after a kill reads the same rows, so it promises the same.

**Why it is safe.** A resume row promises only progress its input had already made
(rows Spark had read; a record of a batch that was not committed is of rows the re-run
reads again), so it never makes a row late that would not have been, and promising the
same twice changes nothing: a start that dies after writing its file and starts again just
writes another. The rows are of kind :data:`.plan.TICK` (``__bucket`` 0, every other
column NULL), as a HEARTBEAT's ticks are: no kernel reads them as data, they go to no late
sink and count as no row in ``_progress``. Their files are not the stream's: the
micro-batch's file bookkeeping skips them (:func:`is_resume_file`). Writes go through
:mod:`wavesql.storage`, so object-store checkpoints work.

**Old checkpoints.** The resume sources change the query's Spark plan (its sources), and
Spark cannot add sources to a checkpoint. A checkpoint records whether its query has them
(``"resume"`` in its ``wavesql.json``); one written before -- without the key -- keeps the
old plan and the old behaviour. Starting the query on a new checkpoint gets the fix.
"""

from __future__ import annotations

import json
import time
import uuid

from wavesql import storage

from . import batch_records
from . import plan as pl
from .processor import progress_of, tick_filler, watermark_sql

#: The version of the resume inputs' format (files, record); a checkpoint's ``wavesql.json``
#: holds it under ``"resume"`` (absent: a checkpoint from before, no resume inputs).
VERSION = 1
#: The name of input ``i``'s observed largest promise in a micro-batch (Spark ``observe``).
METRIC = "wavesql_resume_{}"
#: How many resume files an input keeps (older ones are removed at a start: each was read
#: by the first batch of its run; a re-run that finds one gone skips it, ignoreMissingFiles,
#: which only loses that promise, never a row).
KEEP_FILES = 3


def folder(checkpoint: str) -> str:
    """The resume inputs' folder of a checkpoint (their files and the record)."""
    return storage.join(checkpoint, "resume")


def is_resume_file(checkpoint: str, path: str) -> bool:
    """Whether a file a micro-batch read is one of the resume inputs' (not a stream's)."""
    return _bare(path).startswith(_bare(folder(checkpoint)) + "/")


def _bare(location: str) -> str:
    """A location without its scheme and leading slashes (Spark's file log writes
    ``file:/x`` or ``file:///x`` where the checkpoint may be ``/x``), a URI's
    percent-escapes decoded (the log writes ``ck%20'x'`` for a folder ``ck 'x'``)."""
    from urllib.parse import unquote

    if "://" in location:
        rest = unquote(location.split("://", 1)[-1])
    elif location.startswith("file:"):
        rest = unquote(location[len("file:"):])
    else:
        rest = location
    return rest.lstrip("/").rstrip("/")


class Resume:
    """The resume inputs of one run of a query (module docstring). ``enabled`` False: the
    checkpoint is from before them -- :meth:`add` changes nothing, nothing is recorded."""

    def __init__(self, spark, checkpoint: str, enabled: bool):
        self.spark, self.checkpoint, self.enabled = spark, checkpoint, enabled
        self.n_inputs = 0
        self.record_dir = storage.join(folder(checkpoint), "progress")
        # the latest record (of a committed batch, or of one a kill interrupted: its re-run
        # reads the same rows, so its promises hold either way)
        self.before = (batch_records.before(self.record_dir, 1 << 62, VERSION)
                       if enabled else {})

    def add(self, frame, raw: bool = False):
        """``frame`` (one watermarked input's rows, ``__wm`` on, before its
        ``withWatermark``) with its resume rows unioned in and its largest promise
        observed; unchanged when not enabled. ``raw``: ``frame`` holds the stream's own
        columns, before a view (:func:`.processor.tick_filler`)."""
        if not self.enabled:
            return frame
        from pyspark.sql import functions as F

        i = self.n_inputs
        self.n_inputs += 1
        where = storage.join(folder(self.checkpoint), f"input-{i}")
        promised = (self.before.get("inputs") or [])
        promise = promised[i] if i < len(promised) else None
        self._write(where, promise)
        rows = (self.spark.readStream.schema("p BIGINT").option("ignoreMissingFiles", "true")
                .json(where))
        cols = {"__kind": F.lit(pl.TICK), "__bucket": F.lit(0),
                "__wm": F.expr(watermark_sql("p"))}
        rows = rows.select(*[cols.get(f.name, tick_filler(f.dataType, raw)).cast(f.dataType)
                             .alias(f.name)
                             for f in frame.schema.fields])
        # (the promise as Spark's watermark milliseconds: a BIGINT, no timestamp conversion)
        return frame.unionByName(rows).observe(METRIC.format(i),
                                               F.expr("max(unix_millis(__wm)) AS wm"))

    def _write(self, where: str, promise: int | None) -> None:
        """This start's resume file for one input (always one, a NULL promise too: the
        folder must exist for Spark's file source); older ones beyond KEEP_FILES removed."""
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.json"
        storage.write_text(storage.join(where, name), json.dumps({"p": promise}) + "\n")
        names = [n for n, is_dir in storage.children(where)
                 if not is_dir and n.endswith(".json")]
        for old in names[:-KEEP_FILES]:
            storage.delete(storage.join(where, old))

    def record(self, batch_id: int) -> None:
        """Record each input's progress after batch ``batch_id``: the record before with
        the batch's observed largest promises (called in the batch, before Spark commits
        it). Without Spark's observed metrics (another Spark's internals) nothing is
        recorded: a restart then waits for every input's row, as before, never worse."""
        if not self.enabled or not self.n_inputs:
            return
        seen = _observed(self.spark, self.n_inputs)
        if seen is None:
            return
        before = batch_records.before(self.record_dir, batch_id, VERSION)
        inputs = list(before.get("inputs") or []) + [None] * self.n_inputs
        inputs = inputs[:self.n_inputs]
        for i, wm_ms in enumerate(seen):
            if wm_ms is not None:
                p = progress_of(wm_ms)
                if p is not None and (inputs[i] is None or p > inputs[i]):
                    inputs[i] = p
        batch_records.write(self.record_dir, batch_id, VERSION, {"inputs": inputs})


def _observed(spark, n: int) -> list | None:
    """The largest ``__wm`` (Spark's watermark ms; None: no row) of each input in the running
    micro-batch, from its Spark execution's observed metrics -- read in the batch's
    callback (its thread names the query: ``sql.streaming.queryId``), after the batch's
    rows were read. None when they cannot be had."""
    try:
        query_id = spark.sparkContext.getLocalProperty("sql.streaming.queryId")
        # (registered with the session that started it, not the batch's clone of it)
        wrapper = spark._jsparkSession.streams().get(query_id) if query_id else None
        if wrapper is None:
            return None
        metrics = wrapper.streamingQuery().lastExecution().observedMetrics()
        out = []
        for i in range(n):
            name = METRIC.format(i)
            row = metrics.apply(name) if metrics.contains(name) else None
            out.append(None if row is None or row.isNullAt(0) else int(row.getLong(0)))
        return out
    except Exception:  # noqa: BLE001 - internals of another Spark: record nothing (docstring)
        return None
