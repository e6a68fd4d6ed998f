"""Continuous queries on Spark's state store: windowed aggregates (:mod:`.plan`) and OVER
windows (:mod:`.over_plan`).

One Spark streaming query does the work::

    stream files --> row encoding (Spark SQL, plan.pre) + __wm --> withWatermark(__wm)
      --> groupBy(__bucket).transformWithStateInPandas(processor)   [state store]
      --> foreachBatch: the kernel's rows to results (windowed: the user's SELECT over
          them, plan.post; OVER: the batch plan over the rows handed back) to the output,
          late / timeless rows to the late sink, malformed ones to the quarantine,
          counts to the batch's _progress record (over Kafka with the batch's earliest
          record timestamp, from which the next batch's result latency is measured)

so a micro-batch's cost follows the rows that arrived and the windows (or rows) that
became final, not the state; Spark checkpoints the offsets, the watermark (= progress) and
the state together under ``<checkpoint>/offsets``. Exactly once: a batch re-run after a
crash gets the same rows and the state of the batch before it (Spark's state store is
versioned by batch), and every file it writes is named by the batch id and replaced on a
re-run.
"""

from __future__ import annotations

import json
import os
import time

from wavesql import storage
from wavesql.errors import WaveSQLError
from wavesql.planner.bad_rows import CORRUPT_COLUMN
from wavesql.planner.temporal import quote
from wavesql.sqltext import JSON_OPTIONS
from wavesql.streaming import checkpoint_plan, sinks
from wavesql.streaming.query import ContinuousQuery
from wavesql.streaming.report import (FINAL, PROGRESS, REASON, BatchReport, format_us,
                                     timestamp_lit)
from wavesql.streaming.source import stream_source

from . import over_plan
from . import plan as pl
from .pending import not_final
from .processor import (LookbackProcessor, WindowProcessor, progress_of, tick_filler,
                        watermark_sql)
from .resume import VERSION as RESUME_VERSION
from .resume import Resume, is_resume_file

#: The observed kernel output of a windowed query's micro-batch (its batch session's view).
KERNEL_VIEW = "__wavesql_kernel"

#: The state store every stateful query uses (transformWithState requires RocksDB).
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


class StatefulQuery(ContinuousQuery):
    """A running continuous query on Spark's state store (module docstring); the public API
    is :class:`~wavesql.streaming.query.ContinuousQuery`'s. ``self.windowed`` is its plan
    (a :class:`~.plan.WindowedPlan` or :class:`~.over_plan.OverPlan`); a subclass says
    which processor runs it and how a micro-batch's kernel rows become results."""

    engine = ""

    def __init__(self, session, text, bound, plan, windowed, **kw):
        self.windowed = windowed
        super().__init__(session, text, bound, plan, **kw)

    def _processor(self, columns: list[str]):
        raise NotImplementedError

    def _deliver_results(self, spark, df, batch_id: int, progress: int | None,
                         report: BatchReport) -> dict:
        """Deliver the batch's results; return the kernel's counts (``STAT_NAMES``)."""
        raise NotImplementedError

    def _row_json(self):
        """The Spark column of a late or malformed kernel row as JSON text."""
        from pyspark.sql import functions as F

        return F.col("__row")

    def _streams(self) -> list:
        """The query's input streams, in the order of its Spark sources (file logs)."""
        return [self.windowed.stream]

    def _by_stream(self, value):
        """A Spark column: ``value(stream)`` of the stream a kernel row came from (one
        stream: that one's)."""
        return value(self.windowed.stream)

    # -- setup -------------------------------------------------------------------------
    def _start(self, trigger: str, max_files: int | None):
        # a HEARTBEAT under a trigger 'every ...' adds a ticker source per stream, and
        # Spark's offsets cannot take a source on or off (streaming/checkpoint_plan.py)
        tickers = sum(1 for s in self._streams() if s.heartbeat_us is not None) \
            if trigger.startswith("every ") else 0
        resume_version = self._check_checkpoint(tickers)
        # each watermarked input's progress carried across restarts (resume.py), on the
        # checkpoints that have it in their plan
        self._resume = Resume(self.spark, self.checkpoint,
                              resume_version is not None and resume_version == RESUME_VERSION)
        self.spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        # a micro-batch uploads the changes of its state, not a snapshot of all of it
        self.spark.conf.set(CHANGELOG, "true")
        self.n_sources = 0  # counted by _stream_frames: Spark numbers its sources in order
        frame = self._source_frame(trigger, max_files)
        out = frame.groupBy("__bucket").transformWithStateInPandas(
            self._processor(frame.columns), self.windowed.output_ddl, "Append", "EventTime")
        return self._start_writer(out, trigger)

    def _source_frame(self, trigger: str, max_files: int | None):
        """The input rows, encoded and watermarked, as one streaming frame."""
        return union(self._stream_frames(self.windowed.stream, self.windowed.pre, trigger,
                                         max_files))

    def _stream_frames(self, s, pre, trigger: str, max_files: int | None) -> list:
        """One stream's rows, encoded by ``pre`` and watermarked: one frame, or one per
        partition of a Kafka topic."""
        if s.source == "kafka":
            # One source per partition, each with its own watermark: Spark's global
            # watermark is the minimum over them (multipleWatermarkPolicy "min"), so the
            # stream's progress is its slowest partition's (sources/kafka.py)
            from wavesql.sources import kafka

            count = kafka.describe_topic(self.spark, s.options, s.path)
            self.n_sources += count
            return [self._watermarked(stream_source(self.spark, s, partition=p), trigger, s,
                                      pre) for p in range(count)]
        self.n_sources += 1
        return [self._watermarked(stream_source(self.spark, s, max_files, skip_missing=True),
                                  trigger, s, pre)]

    def _watermarked(self, frame, trigger: str, stream=None, pre=None, watermark: bool = True):
        """``frame`` encoded for the kernel (plan.pre), with Spark's watermark on what each
        row promises (``__wm``); ``stream``/``pre``: another input's (two-stream plans);
        ``watermark`` False: ``__wm`` kept as a column, not watermarked (the caller keeps
        that input's progress)."""
        from pyspark.sql import functions as F

        w = self.windowed
        s = stream if stream is not None else w.stream
        pre = pre if pre is not None else w.pre
        for name, sql_text in pre:
            frame = frame.withColumn(name, F.expr(sql_text))
        frame = frame.withColumn("__wm", F.expr(watermark_sql(self._promised(s))))
        keep = [n for n, _ in pre]
        if CORRUPT_COLUMN in frame.columns:  # a CSV/JSON stream's malformed rows: their file
            # and text, for the quarantine (no other row needs its file: a stream that has
            # no malformed rows does not carry a path per row through the shuffle)
            frame = frame.withColumn("__record", F.col(quote(CORRUPT_COLUMN)))
            keep += ["__file", "__record"]
        frame = frame.select(*keep, "__wm")
        if trigger.startswith("every ") and s.heartbeat_us is not None:
            # the heartbeat is the stream's own promise: one watermark over both
            frame = frame.unionByName(self._ticker(frame, s.heartbeat_us))
        if not watermark:
            return frame
        return self._resume_add(frame).withWatermark("__wm", "0 seconds").select(*keep)

    def _resume_add(self, frame, raw: bool = False):
        """``frame`` (a watermarked input's rows before ``withWatermark``) with its resume
        rows (:mod:`.resume`); unchanged on a checkpoint from before them."""
        resume = getattr(self, "_resume", None)
        return frame if resume is None else resume.add(frame, raw)

    @staticmethod
    def _promised(s) -> str:
        """Spark SQL of what an encoded row of stream ``s`` promises (``__wm``, in µs)."""
        return (f"CASE WHEN __kind = {pl.RESULT} THEN __ts - {s.watermark_us or 0} "
                + (f"WHEN __kind = {pl.PUNCTUATION} THEN "
                   f"unix_micros({quote(s.progress_column)}) " if s.progress_column
                   else "") + "END")

    def _ticker(self, frame, heartbeat_us: int, raw: bool = False):
        """A HEARTBEAT's clock: Spark's rate source, one row a second promising the wall
        clock minus the heartbeat (its rows are of no kind the kernel reads); ``raw``:
        ``frame`` holds the stream's own columns, before a view (:func:`.processor.tick_filler`)."""
        from pyspark.sql import functions as F

        ticks = self.spark.readStream.format("rate").option("rowsPerSecond", "1").load()
        promised = f"unix_micros(timestamp) - {heartbeat_us}"
        cols = {"__kind": F.lit(pl.TICK).cast("tinyint"), "__bucket": F.lit(0),
                "__wm": F.expr(watermark_sql(promised))}
        return ticks.select(*[cols.get(f.name, tick_filler(f.dataType, raw)).cast(f.dataType)
                              .alias(f.name) for f in frame.schema.fields])

    def _check_checkpoint(self, tickers: int = 0) -> int | None:
        """A checkpoint belongs to one plan: restarting a changed query on it would read the
        state with another meaning (``CHECKPOINT_MISMATCH``, streaming/checkpoint_plan.py;
        a checkpoint with state but no marker came from another runner: refused). Returns
        the checkpoint's resume inputs' version (:mod:`.resume`; None: one written before
        them, whose Spark plan has none -- Spark cannot add sources to a checkpoint -- so
        it keeps that plan)."""
        # the marker's keys as this runner always wrote them: engine, plan, explain,
        # buckets, resume (stateful/plan.py reads ``buckets`` back); then the heartbeat
        # tickers among Spark's sources, checked where the marker has them
        mine = checkpoint_plan.Mark(self.engine, self.windowed.fingerprint,
                                    self.windowed.explain,
                                    extra=(("buckets", self.windowed.buckets),
                                           ("resume", RESUME_VERSION), ("tickers", tickers)),
                                    checked=("tickers",))
        theirs = checkpoint_plan.check(self.checkpoint, mine, legacy="refuse")
        if theirs is None:
            return RESUME_VERSION
        resume = theirs.get("resume")
        if resume is not None and resume != RESUME_VERSION:  # (a newer WaveSQL's plan)
            raise WaveSQLError(
                "CHECKPOINT_MISMATCH", f"the checkpoint {self.checkpoint} has resume "
                f"inputs of format {resume!r}; this WaveSQL writes {RESUME_VERSION}",
                hint="run it with the WaveSQL that wrote it, or give the query a new "
                     "checkpoint (and output) folder")
        return resume

    # -- one micro-batch ---------------------------------------------------------------
    def _run_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        from wavesql.streaming import files

        began = time.monotonic()
        spark = batch_df.sparkSession
        streams = self._streams()
        s = streams[0]
        progress, inputs = self._batch_progress(spark, batch_id)
        report = BatchReport(batch_id, progress, started_at=self.clock())
        # every source's file log (a Kafka partition's source has none): with two streams,
        # a topic's partitions come before or between the file sources
        sources = self._file_sources(batch_id)
        logged = [e for i in sources for e in files.batch_files(self.checkpoint, i, batch_id)
                  if not is_resume_file(self.checkpoint, e[0])]
        listed = [p for p, _ in logged]
        # The result latency: a batch emits what the batch before it made final (its
        # watermark is the one those rows raised), so it is measured from the arrival of
        # that batch's files -- or of its Kafka records (their earliest timestamp, which
        # that batch counted and kept in its report: _arrival_of).
        before = [e for i in sources
                  for e in files.batch_files(self.checkpoint, i, batch_id - 1)
                  if not is_resume_file(self.checkpoint, e[0])] if batch_id else []
        arrived = [ms / 1000.0 for _, ms in before if ms]
        if any(st.source == "kafka" for st in streams) and batch_id:
            previous = self._arrival_of(batch_id - 1)
            arrived += [previous] if previous is not None else []
        # Spark's file source reads the batch's files itself, so a removed one cannot be
        # dropped from its list: the source skips missing files (stream_source's
        # skip_missing), and each gets a quarantine record -- those gone before the read
        # (found here), and those gone after this check, which the read may have missed
        # (found after it)
        gone = [p for st in streams for p in files.wait_until_ready(
            [p for p in listed if _of(p, st, streams)], st.format)]
        if gone:
            listed = [p for p in listed if p not in gone]
            logged = [(p, ms) for p, ms in logged if p not in gone]
        if listed:
            for st in streams:
                mine = [p for p in listed if _of(p, st, streams)]
                if mine:
                    files.check_columns(mine, st)
            _unchanged_since_listed(logged, self._planned_after(batch_id))
        df = batch_df.persist()
        try:
            counts = self._deliver_results(spark, df, batch_id, progress, report)
            if getattr(self, "_resume", None) is not None:
                self._resume.record(batch_id)  # each input's progress, before Spark commits
            report.on_time, report.late = counts["on_time"], counts["late"]
            report.no_time, report.punctuation = counts["no_time"], counts["punctuation"]
            report.quarantined = counts["quarantined"]
            report.rows_in = sum(counts[n] for n in pl.STAT_NAMES[:5])
            report.buffered, report.state_bytes = counts["state_rows"], counts["state_bytes"]
            if counts.get("arrived"):
                report.arrived_s = counts["arrived"] / 1e6
            report.inputs = inputs
            if report.late or report.no_time:
                reason = F.when(F.col("__kind") == pl.LATE, self._by_stream(lambda st: F.lit(
                    "event time before the progress already promised "
                    f"({format_us(inputs[st.key])})")))
                reason = reason.otherwise(self._by_stream(
                    lambda st: F.lit(f"no event time ({st.event_time} is NULL)")))
                late = df.where(f"__kind IN ({pl.LATE}, {pl.NO_TIME})").select(
                    self._by_stream(lambda st: F.lit(st.name)).alias("_stream"),
                    reason.alias(REASON), self._row_json().alias("_row"))
                sinks.commit(late, self.late_path, batch_id, self.late_format)
            bad = []
            if report.quarantined:
                bad.append(df.where(f"__kind = {pl.MALFORMED}").select(
                    self._by_stream(lambda st: F.lit(st.name)).alias("_stream"),
                    F.col("__file").alias("_file"),
                    F.col("__record").alias("_record"),
                    F.concat(F.lit("malformed: read as "), self._row_json()).alias(REASON)))
            bad += self._changed_files(spark, batch_id, listed)
            bad += self._vanished_files(spark, batch_id, gone)
            bad += self._vanished_files(spark, batch_id, files.gone(listed), during=True)
            sinks.commit_all(bad, self.quarantine_path, batch_id)
        finally:
            df.unpersist()
        self._finish(report, began, arrived if report.final_out else [])

    def _file_sources(self, batch_id: int) -> range:
        """The Spark source ids whose file logs list the batch's files: the query's stream
        sources -- or, with resume inputs (which Spark numbers among them: each follows its
        input), every source in the batch's offset log entry, the resume files then
        skipped by path (a Kafka partition's or a rate source's entry lists none)."""
        counted = max(getattr(self, "n_sources", 1), 1)
        resume = getattr(self, "_resume", None)
        if resume is None or not resume.n_inputs:
            return range(counted)
        path = storage.join(self.checkpoint, "offsets", "offsets", str(batch_id))
        try:
            return range(max(len(storage.read_text(path).splitlines()) - 2, counted))
        except OSError:
            return range(counted + resume.n_inputs)

    def _batch_progress(self, spark, batch_id: int) -> tuple[int | None, dict]:
        """The progress batch ``batch_id`` runs with, and each stream's: Spark's
        watermark, for every stream."""
        progress = progress_of(self._batch_watermark(batch_id))
        return progress, {st.key: progress for st in self._streams()}

    def _arrival_of(self, batch_id: int) -> float | None:
        """The earliest Kafka timestamp (s) of batch ``batch_id``'s records: from its report
        -- in memory when this process ran it, else from its ``_progress`` record (a
        callable output keeps none: the first batch after a restart then has no latency)."""
        for report in reversed(self.reports):
            if report.batch == batch_id:
                return report.arrived_s
        if callable(self.output):
            return None
        record = storage.join(self.output, "_progress", f"batch={batch_id:09d}.json")
        try:
            return json.loads(storage.read_text(record)).get("arrived_s")
        except (OSError, ValueError):
            return None

    def _planned_after(self, batch_id: int) -> int:
        """A time (ms) before Spark planned this batch's read: when its offset log entry
        was written (just before), or -- a batch re-run after a restart, whose entry is
        older -- when this run started."""
        path = storage.join(self.checkpoint, "offsets", "offsets", str(batch_id))
        try:
            logged = storage.stat(path).mtime_ns // 1_000_000
        except (OSError, WaveSQLError):
            logged = 0
        return max(logged, getattr(self, "started_ms", 0))

    def _batch_watermark(self, batch_id: int) -> int | None:
        """Spark's watermark of batch ``batch_id`` (its offset log entry: written before the
        batch runs), in Spark's milliseconds."""
        path = storage.join(self.checkpoint, "offsets", "offsets", str(batch_id))
        try:
            lines = storage.read_text(path).splitlines()
            return int(json.loads(lines[1]).get("batchWatermarkMs", 0))
        except (OSError, IndexError, ValueError):
            return None

    @property
    def progress_us(self) -> int | None:
        """The progress of the last batch this query ran (or of the checkpoint's last)."""
        if self.reports:
            return self.reports[-1].progress_us
        last = self._last_committed_batch()
        return None if last is None else self._checkpoint_progress(last)

    def _last_committed_batch(self) -> int | None:
        """The id of the last batch Spark's commit log records, None before the first."""
        done = storage.join(self.checkpoint, "offsets", "commits")
        ids = [int(name) for name, _ in storage.children(done) if name.isdigit()]
        return max(ids) if ids else None

    def _checkpoint_progress(self, batch_id: int) -> int | None:
        """The progress committed batch ``batch_id`` reached: Spark's watermark."""
        return progress_of(self._batch_watermark(batch_id))


class StatefulWindowQuery(StatefulQuery):
    """A continuous windowed aggregate: partial aggregates per pane or the rows of each
    window per bucket (:mod:`.windows`), the user's SELECT over the kernel's rows."""

    engine = "stateful-window"

    def _processor(self, columns: list[str]):
        return WindowProcessor(self.windowed, columns)

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import Observation

        # The kernel's counts ride along the job that writes the results (an observation:
        # no job of their own); late and bad rows, rare, are read back from the cached
        # batch only when there are some. What runs on the driver per batch is a handful
        # of calls to the JVM: each of PySpark's column functions is several py4j round
        # trips (about 300 for the counts' columns, 0.1 s a batch), so the counts' columns
        # are made once per query and the rest is one SQL statement (_results_sql).
        counted = Observation(f"wavesql_batch_{batch_id}")
        df.observe(counted, *self._count_columns(df)).createOrReplaceTempView(KERNEL_VIEW)
        out = spark.sql(self._results_sql(progress))
        if self._post_names_progress():  # (a SELECT item of that name: replaced, as before)
            out = out.withColumn(PROGRESS, timestamp_lit(progress))
        self._deliver_counted(out, batch_id, report, by_final=True)
        figures = counted.get
        return {**{n: int(figures.get(n) or 0) for n in pl.STAT_NAMES},
                "arrived": figures.get("arrived")}

    def _count_columns(self, df) -> list:
        """The observation's columns: the kernel's counts (the sum of each over its stats
        rows) and, over Kafka, the earliest arrival. Made once per query (a Column is an
        unresolved expression: every batch's frame can take it)."""
        cached = getattr(self, "_counts_cache", None)
        if cached is None:
            from pyspark.sql import functions as F

            sums = [F.expr(f"sum(CASE WHEN __kind = {pl.STATS} THEN __n{i} END) AS {n}")
                    for i, n in enumerate(pl.STAT_NAMES)]
            cached = self._counts_cache = sums + _earliest_arrival(df)
        return cached

    def _results_sql(self, progress: int | None) -> str:
        """The user's SELECT (plan.post) over the kernel's result rows, with ``_time`` and
        the batch's ``_progress``: one statement over the observed batch (KERNEL_VIEW)."""
        results = (f"SELECT *, timestamp_micros(__time) AS _time FROM {KERNEL_VIEW} "
                   f"WHERE __kind = {pl.RESULT}")
        if self._post_names_progress():
            return f"WITH {pl.VIEW} AS ({results}) {self.windowed.post}"
        stamp = (f"timestamp_micros({int(progress)}L)" if progress is not None
                 else "CAST(NULL AS TIMESTAMP)")
        return (f"WITH {pl.VIEW} AS ({results}) SELECT *, {stamp} AS {PROGRESS} "
                f"FROM ({self.windowed.post}) AS __results")

    def _post_names_progress(self) -> bool:
        """Whether the user's SELECT has an item named ``_progress`` (then the batch's
        replaces it, as ``withColumn`` does)."""
        named = getattr(self, "_names_progress", None)
        if named is None:
            from sqlglot import exp

            tree = exp.maybe_parse(self.windowed.post, dialect="spark")
            named = self._names_progress = any(
                name.lower() == PROGRESS for name in tree.named_selects)
        return named


class StatefulOverQuery(StatefulQuery):
    """A continuous query of OVER windows: each bucket keeps its rows' look-back
    (:mod:`.lookback`) and hands back, when rows became final, those rows and their
    look-back; the batch plan runs over them and its rows that became final are emitted
    (``previous progress <= event time < progress``, as the re-evaluating runner would).
    ``EMIT CHANGES``: also every result row not final yet (``event time >= progress``,
    ``_final = false``) -- the called buckets' evaluated now, the others' carried from the
    batch before (:mod:`.pending`)."""

    engine = "stateful-over"

    def _processor(self, columns: list[str]):
        return LookbackProcessor(self.windowed, columns)

    def _row_json(self):
        from pyspark.sql import functions as F

        return F.to_json(F.struct(*[F.expr(d) for d in self.windowed.decoded()]), JSON_OPTIONS)

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import functions as F

        # The counts first (a few rows of the cached batch): the plan below may run jobs
        # of its own over its input while planning, which an observation would count.
        stats = df.where(f"__kind = {pl.STATS}").groupBy().agg(*[
            F.sum(f"__n{i}").alias(n) for i, n in enumerate(pl.STAT_NAMES)],
            *_earliest_arrival(df)).collect()[0].asDict()
        w = self.windowed
        kernel_rows = df.where(f"__kind = {pl.RESULT}")
        if w.post is not None:  # the kernel evaluated the windows: due rows (and pending)
            values = [c for c in df.columns if c.startswith(("__w", "__wn"))]
            (kernel_rows.selectExpr(*w.decoded(), "__ts AS __wavesql_ts", *values)
             .createOrReplaceTempView("__wavesql_over_rows"))

            def post(where: str):  # the user's SELECT over the kernel's rows where `where`
                return spark.sql(f"WITH {over_plan.VIEW} AS (SELECT * FROM __wavesql_over_rows "
                                 f"WHERE {where}) {w.post}")

            if not w.changes:
                final = post("true")
            else:
                at = f"__wavesql_ts >= {int(progress)}L" if progress is not None else "true"
                final, pending = post(f"NOT ({at})"), post(at)
        else:
            from wavesql.planner.lower import Runtime, lower

            rows = kernel_rows.selectExpr(*w.decoded())
            rt = Runtime(spark, self.session.catalog, self.text, streams={w.stream.key: rows})
            result = lower(self.bound, rt)
            previous = progress_of(self._batch_watermark(batch_id - 1)) if batch_id else None
            t = F.unix_micros(F.col(quote(self.plan.time_column)))
            after = t >= F.lit(previous) if previous is not None else F.lit(True)
            before = t < F.lit(progress) if progress is not None else F.lit(False)
            final = result.where(after & before)
            pending = result.where(~before) if progress is not None else result
        out = final.withColumn(FINAL, F.lit(True))
        if w.changes:  # the called buckets' rows evaluated now, the others' carried
            called = kernel_rows.selectExpr(*w.decoded()).select(F.expr(w.bucket).alias("__b"))
            pending = not_final(spark, self.checkpoint, batch_id, pending, called, w.bucket)
            out = out.unionByName(pending.withColumn(FINAL, F.lit(False)))
        self._deliver_counted(out.withColumn(PROGRESS, timestamp_lit(progress)), batch_id,
                              report, by_final=True)
        return {**{n: int(stats[n] or 0) for n in pl.STAT_NAMES},
                "arrived": stats.get("arrived")}


def union(frames: list):
    """Streaming frames unioned by name (a CSV stream's rows carry ``__record``, a Kafka
    stream's ``__arrived``, others not: NULL there)."""
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other, allowMissingColumns=True)
    return frame


def _earliest_arrival(df) -> list:
    """The aggregate of a batch's earliest Kafka arrival (µs, ``arrived``) over the kernel's
    stats rows (processor.py), for a Kafka stream's batch; none for files."""
    from pyspark.sql import functions as F

    if pl.ARRIVED not in df.columns:
        return []
    at = F.col(pl.ARRIVED)
    return [F.min(F.when((F.col("__kind") == pl.STATS) & (at > 0), at)).alias("arrived")]


def _of(path: str, stream, streams: list) -> bool:
    """Whether a listed file is ``stream``'s (one stream: every file is)."""
    from wavesql.streaming.files import belongs

    return len(streams) == 1 or belongs(path, stream.path)


def _unchanged_since_listed(logged: list[tuple[str, int]], planned_ms: int = 0) -> None:
    """Spark reads a batch's files with the sizes it saw when it planned the batch's read
    (after ``planned_ms``: :meth:`StatefulQuery._planned_after`): a file changed since it
    was listed, and after that, was still being written then and would be read in part, so
    the batch fails with ``INCOMPLETE_FILE`` before anything is committed. Running the query
    again re-plans the read after the file's last change and reads it whole. (The
    re-evaluating runner reads the files itself and waits instead; writing files aside and
    renaming them into place avoids both.)"""
    from wavesql.streaming.files import local_path

    for uri, listed_ms in logged:
        path = local_path(uri)
        try:
            now_ms = os.stat(path).st_mtime_ns // 1_000_000 if path else None
        except OSError:
            now_ms = None
        if path and listed_ms and now_ms is not None and now_ms != listed_ms \
                and now_ms >= planned_ms:
            raise WaveSQLError(
                "INCOMPLETE_FILE", f"{path} changed after this micro-batch listed it (it was "
                "still being written): nothing of the batch is committed",
                hint="run the query again to read it whole; write files aside and rename "
                     "them into place so that a listing never sees one half-written")
