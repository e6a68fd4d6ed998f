"""A continuous ASOF JOIN on Spark's state store: the processor and the micro-batch.

Both streams' rows go through :class:`~.query.StatefulQuery`'s pipeline -- each stream
encoded by its own :attr:`.asof_plan.AsofPlan.pre_left` / ``pre_right`` (the stream in
``__right``) -- unioned and grouped by bucket of keys into one
``transformWithStateInPandas``. :class:`AsofProcessor` runs the kernel (:mod:`.asof`) per
bucket and hands back the left rows whose match became final with the right rows of their
keys, late / timeless / malformed rows of either stream and its counts;
:class:`StatefulAsofQuery` evaluates the batch plan over the rows handed back -- each left
row once, final.

**Progress per stream**, as on the re-evaluating runner (``streaming/runner.py``): each
stream's progress is its largest event time minus its WATERMARK, its punctuation, its
HEARTBEAT (a Kafka topic's: its slowest partition's), and a row of a stream is late below
*its own* stream's progress; a left row is final once the *right* stream's progress passes
its time (backward) or its match's (forward); ``_progress`` is the smaller of the two.
Spark gives a query one watermark, so

* only the right stream is watermarked in Spark (``withWatermark``; one source per Kafka
  partition): Spark's watermark is the right stream's progress, its timers fire as that
  progress passes a waiting row, and it runs a micro-batch without new rows when it moved;
* the left stream's rows carry what each promises (``__lwm``: event time minus the
  WATERMARK, a punctuation's value, a HEARTBEAT tick's clock) and which of its sources
  they came from (``__src``); each bucket hands back its largest promise per source (kind
  :data:`PROMISE`) and the driver keeps the left progress -- each source's largest promise,
  the stream's the smallest of them, never going back -- in a record per micro-batch,
  ``<checkpoint>/asof/<batch>.json`` (versioned JSON, written by the batch before Spark
  commits it, read by the next). The next micro-batch hands it to every bucket as a local
  property of its Spark jobs (:data:`PROPERTY`, naming the batch: a bucket checks it
  against Spark's own batch id).

A micro-batch reads the record of the batch before it, however often it is run: one
re-run after a crash or a restart sees the progress its first run saw (the left one from
that record, the right one from Spark's offset log), so it late-marks and joins the same
rows. One batch behind the rows that raise it, as Spark's watermark is. Each left row is
final as it comes (no ``_final`` column, ``_progress`` the query's progress, as on the
re-evaluating runner; ``EMIT CHANGES`` changes nothing on either). A batch's
``_progress/`` record counts both streams' rows and names each stream's progress.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.planner import ir
from wavesql.sqltext import JSON_OPTIONS
from wavesql.streaming.report import PROGRESS, timestamp_lit

from . import asof as kernel
from . import batch_records
from . import plan as pl
from .processor import OFFSET, progress_of
from .query import StatefulQuery, _earliest_arrival, union
from .resample_query import ResampleProcessor
from .view_rows import substituted, view_rows

#: The kernel's output rows of a left source's largest promise in a call (``__sk``: the
#: source, ``__ts``: the promise).
PROMISE = 5
#: The columns of a left row's source (right rows: -1) and of what it promises (µs;
#: :data:`NO_PROMISE` where nothing).
SOURCE, PROMISED = "__src", "__lwm"
NO_PROMISE = np.iinfo(np.int64).min
#: The local property of a micro-batch's Spark jobs that hands the left stream's progress
#: to every bucket: ``{"batch": id, "progress": µs or null}``.
PROPERTY = "wavesql.asof.leftProgress"
#: Spark's own local property of a micro-batch's jobs: its batch id.
BATCH_ID = "streaming.sql.batchId"
#: The version of the driver's per-batch record of the left stream's progress.
RECORD_VERSION = 1


class AsofProcessor(ResampleProcessor):
    """One :class:`~.asof_plan.AsofPlan`'s kernel per bucket (module docstring). The
    encoded-row helpers (``_rows``, ``_out``) are the RESAMPLE processor's: both hand the
    kernel a frame of ``op.schema()``'s columns under ``__`` names. ``kernel_step``: the
    two-stream kernel it runs (the interval join's processor runs its own)."""

    kernel_step = staticmethod(kernel.step)

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        progress, kinds, data = self._begin(batch, timer_values)
        new = self._rows(data)
        result = self._kernel(new, progress)
        self._keep(result.state, result.timer)
        parts = [self._out(result.context, pl.RESULT)]
        late_n = int(result.late.sum())
        if late_n:
            parts.append(self._out(new[result.late], pl.LATE))
        parts += self._passed_through(batch, kinds, self._rows)
        parts += self._promises(batch, kinds, result.late)
        parts.append(self._stats(kinds, len(new) - late_n, late_n, result.state_rows,
                                 result.state, batch))
        return pd.concat(parts, ignore_index=True)[self.columns]

    def _kernel(self, new, progress: int | None):
        """The kernel's step over the bucket's state and its ``new`` rows; ``progress`` is
        Spark's watermark (here the right stream's progress)."""
        return self.kernel_step(self.op, self._stored(), new, left_progress(), progress)

    def _promises(self, batch: pd.DataFrame | None, kinds: np.ndarray,
                  late: np.ndarray) -> list:
        """Per left source, the largest promise of the call's rows (its late rows aside,
        as the re-evaluating runner counts on-time rows only): rows of kind PROMISE."""
        if batch is None:
            return []
        source = batch[SOURCE].to_numpy(np.int64)
        promised = batch[PROMISED].to_numpy(np.int64)
        counted = (source >= 0) & (promised != NO_PROMISE)
        counted[np.flatnonzero(kinds == pl.RESULT)[late]] = False
        if not counted.any():
            return []
        best = pd.Series(promised[counted]).groupby(source[counted]).max()
        return [self._frame(len(best), PROMISE, {"__sk": best.index.to_numpy(np.int64),
                                                 "__ts": best.to_numpy(np.int64)})]


def left_progress() -> int | None:
    """The left stream's progress the running micro-batch hands its buckets
    (:data:`PROPERTY`); a clear error when a bucket runs outside such a batch."""
    return batch_record(PROPERTY, "a continuous ASOF JOIN's bucket",
                        "left progress")["progress"]


def batch_record(prop: str, who: str, what: str) -> dict:
    """The record the running micro-batch hands its buckets (the Spark local property
    ``prop``, JSON), checked to be this micro-batch's; ``who``/``what`` name the operator and
    the record in errors."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    raw = ctx.getLocalProperty(prop) if ctx is not None else None
    if raw is None:
        raise RuntimeError(f"{who} ran without its micro-batch's {what} (Spark local "
                           f"property {prop})")
    record = json.loads(raw)
    batch = ctx.getLocalProperty(BATCH_ID)
    if batch is not None and int(batch) != record["batch"]:
        raise RuntimeError(f"{who} of micro-batch {batch} was handed the {what} of "
                           f"micro-batch {record['batch']}")
    return record


class StatefulAsofQuery(StatefulQuery):
    """A continuous ASOF JOIN of two streams (module docstring)."""

    engine = "stateful-asof"

    def _processor(self, columns: list[str]):
        return AsofProcessor(self.windowed, columns)

    def _streams(self) -> list:
        return list(self.windowed.streams)

    def _by_stream(self, value):
        from pyspark.sql import functions as F

        w = self.windowed
        return F.when(F.col("__right"), value(w.right)).otherwise(value(w.left))

    def _row_json(self):
        from pyspark.sql import functions as F

        w = self.windowed
        return self._by_stream(lambda st: F.to_json(F.struct(*[
            F.expr(d) for d in w.decoded(st is w.right)]), JSON_OPTIONS))

    # -- the streams ---------------------------------------------------------------------
    def _watermarked(self, frame, trigger: str, stream=None, pre=None, watermark: bool = True):
        # Spark's watermark: the right stream's promises only (module docstring)
        left = stream is not None and stream.key == self.windowed.left.key
        view = self.windowed.view(stream) if stream is not None else None
        if view is not None:  # a side that is a view: the stream's rows through it
            return view_rows(self, frame, trigger, stream, view, pre, watermark=not left)
        return super()._watermarked(frame, trigger, stream, pre, watermark=not left)

    def _source_frame(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        w = self.windowed
        # the left stream's sources come first, as in _streams: one per Kafka partition
        left = self._stream_frames(w.left, w.pre_left, trigger, max_files)
        self.n_left_sources = len(left)
        promised = F.coalesce(F.expr(f"unix_micros(__wm) DIV 1000 - {OFFSET}"),
                              F.lit(int(NO_PROMISE)))
        left = [f.withColumn(SOURCE, F.lit(i)).withColumn(PROMISED, promised).drop("__wm")
                for i, f in enumerate(left)]
        right = [f.withColumn(SOURCE, F.lit(-1)).withColumn(PROMISED, F.lit(int(NO_PROMISE)))
                 for f in self._stream_frames(w.right, w.pre_right, trigger, max_files)]
        return union(left + right)

    # -- progress ------------------------------------------------------------------------
    def _batch_progress(self, spark, batch_id: int) -> tuple[int | None, dict]:
        """Each stream's progress the batch runs with -- the left one from the record of
        the batch before (handed to the buckets), the right one Spark's watermark -- and
        the query's, the smaller."""
        w = self.windowed
        left = self._record_before(batch_id).get("progress")
        spark.sparkContext.setLocalProperty(
            PROPERTY, json.dumps({"batch": batch_id, "progress": left}))
        right = progress_of(self._batch_watermark(batch_id))
        both = None if left is None or right is None else min(left, right)
        return both, {w.left.key: left, w.right.key: right}

    def _record_dir(self) -> str:
        return storage.join(self.checkpoint, "asof")

    def _record_before(self, batch_id: int) -> dict:
        """The left stream's progress record of the latest batch before ``batch_id``
        (empty: none, the first batch; every committed batch wrote one)."""
        record = record_before(self._record_dir(), batch_id)
        if not record and batch_id > 0:
            done = storage.join(self.checkpoint, "offsets", "commits")
            if any(n.isdigit() and int(n) < batch_id for n, _ in storage.children(done)):
                raise WaveSQLError(
                    "CHECKPOINT_CORRUPT", f"{self._record_dir()} holds no record of the "
                    f"left stream's progress before micro-batch {batch_id}",
                    hint="start the query from a fresh checkpoint (and output folder)")
        return record

    @property
    def _checkpoint_progress(self, batch_id: int) -> int | None:
        """The smaller of the two streams' progress after committed batch ``batch_id``: the
        left stream's from the driver's record, the right's Spark's watermark."""
        left = self._record_before(batch_id).get("progress")
        right = progress_of(self._batch_watermark(batch_id))
        return None if left is None or right is None else min(left, right)

    # -- one micro-batch -----------------------------------------------------------------
    def _joined(self, spark, rows):
        """The batch plan over the rows the buckets handed back (kind RESULT): the left
        rows made final and the right rows of their keys."""
        w = self.windowed
        return self._lowered(spark, rows.where("NOT __right").selectExpr(*w.decoded(False)),
                             rows.where("__right").selectExpr(*w.decoded(True)))

    def _lowered(self, spark, left, right):
        """The batch plan over ``left`` and ``right`` as the two streams' rows (a side that
        is a view: its rows, standing for it)."""
        from wavesql.planner.lower import Runtime, lower

        w = self.windowed
        rt = Runtime(spark, self.session.catalog, self.text,
                     streams={w.left.key: left, w.right.key: right})
        return lower(self._over_views(), rt)

    def _over_views(self):
        """The bound statement reading each side that is a view (CTE, subquery) from the
        rows handed back -- a stream of the view's columns -- in place of the view."""
        w = self.windowed
        if all(v is None for v in w.views):
            return self.bound
        relation = self.bound.relation
        if w.hoisted is not None:  # an interval join's inline sides, read as inputs
            relation = substituted(relation, *w.hoisted)
        for right, (stream, view) in enumerate(zip(w.streams, w.views)):
            if view is not None:
                schema = ir.Schema(tuple(ir.Field(c.name, c.type) for c in w.columns(right)))
                relation = substituted(relation, view, ir.StreamScan(stream, schema))
        return replace(self.bound, relation=relation)

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import functions as F

        w = self.windowed
        n_left = max(getattr(self, "n_left_sources", 1), 1)
        promise = [F.max(F.when((F.col("__kind") == PROMISE) & (F.col("__sk") == i),
                                F.col("__ts"))).alias(f"promise{i}") for i in range(n_left)]
        stats = df.where(f"__kind IN ({pl.STATS}, {PROMISE})").groupBy().agg(*[
            F.sum(f"__n{i}").alias(n) for i, n in enumerate(pl.STAT_NAMES)],
            *promise, *_earliest_arrival(df)).collect()[0].asDict()
        out = self._joined(spark, df.where(f"__kind = {pl.RESULT}"))
        self._deliver_counted(out.withColumn(PROGRESS, timestamp_lit(progress)), batch_id,
                              report, by_final=False)
        record = next_record(self._record_before(batch_id),
                             [stats[f"promise{i}"] for i in range(n_left)])
        write_record(self._record_dir(), batch_id, {"stream": w.left.key, **record})
        return {**{n: int(stats[n] or 0) for n in pl.STAT_NAMES},
                "arrived": stats.get("arrived")}


# -- the driver's record of the left stream's progress ------------------------------------
def next_record(before: dict, promises: list) -> dict:
    """The left stream's progress after a micro-batch: ``before``'s (the record of the
    batch before; empty: none) with the batch's largest promise of each source
    (``promises``, None where it had none) -- each source's largest promise, the stream's
    progress the smallest of them once every source promised something, never going back
    (as Spark's watermark over one source per Kafka partition)."""
    sources = list(before.get("sources", []))
    sources += [None] * (len(promises) - len(sources))
    for i, p in enumerate(promises):
        if p is not None and (sources[i] is None or p > sources[i]):
            sources[i] = int(p)
    progress = before.get("progress")
    if sources and None not in sources:
        least = min(sources)
        progress = least if progress is None else max(progress, least)
    return {"sources": sources, "progress": progress}


def record_before(folder: str, batch_id: int) -> dict:
    """The left-progress record of the latest batch before ``batch_id`` (empty: none):
    see :mod:`.batch_records`."""
    return batch_records.before(folder, batch_id, RECORD_VERSION)


def write_record(folder: str, batch_id: int, record: dict) -> None:
    """Batch ``batch_id``'s left-progress record (:mod:`.batch_records`)."""
    batch_records.write(folder, batch_id, RECORD_VERSION, record)
