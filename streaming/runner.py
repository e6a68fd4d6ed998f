"""Continuous queries: the batch plan, evaluated incrementally as progress advances.

How a continuous query runs
---------------------------
Spark Structured Streaming reads the new files of every input stream (one streaming query,
the inputs unioned, with Spark's own checkpointed offsets), and each micro-batch is handed to
:meth:`ReEvaluatingQuery._run_batch`, which

1. splits the new rows of each input into **late** (event time below the progress that input
   had already promised), **no event time**, **punctuation** (rows carrying a value in the
   stream's ``PROGRESS COLUMN``) and **on time**; late and timeless rows are written to the
   late sink with the reason, never dropped;
2. advances each input's **progress** ``p`` -- "no row with event time < p will follow" --
   to the largest of: its previous progress, the largest event time seen minus its
   ``WATERMARK``, its latest punctuation, and (with ``HEARTBEAT h``) the wall clock minus
   ``h``, so an idle input does not hold the others back. The query's progress is the
   minimum over its inputs;
3. evaluates the **same plan as a batch query** (``planner.lower``) over each input's
   buffered rows, and emits the result rows whose instant ``_time`` became final in this
   batch (``previous progress <= _time < progress``), each with ``_final = true`` and
   ``_progress``; with ``EMIT CHANGES`` also the not-yet-final rows (``_final = false``),
   refined in later batches;
4. keeps in the buffer only what later instants can still need (the window's look-back:
   ``RANGE r`` keeps ``r``, ``SLIDE`` keeps ``r + s``, ``ROWS n`` the last ``n`` rows per
   partition) -- so state is bounded by the windows, not by the stream's length.

How each shape of query is planned -- its mode and each input's look-back -- is in
:mod:`.planning` (the RESAMPLE, ASOF/interval join and SYNC JOIN parts in :mod:`.resample`,
:mod:`.joins` and :mod:`.sync`); what every runner shares (the public API, delivering a
batch, committing its state) in :mod:`.query`. A query over a SIGNAL runs differently (its
WAV files are read by the streaming WAV source with the program in the scan, every emitted
window is final): see :mod:`.signals`. Live metrics of every continuous query (rates,
progress, state, result latency) are in :mod:`.metrics`.

Why not Spark's stateful operators with ``withWatermark``: Spark drops rows behind its
watermark silently (WaveSQL must send them to a late sink and count them), does not tell a
consumer which output rows are final, cannot emit early results in append mode, and refuses
ROWS windows and OVER windows on streams. Driving progress here keeps one evaluation path
for batch and streaming, so results are identical once final by construction -- and the
property tests of the batch windows cover the streaming ones too.

Exactly once: Spark re-runs a micro-batch after a crash with the same id and the same rows;
every file this runner writes is named by the batch id and overwritten on a re-run, and the
state a batch starts from is the committed state of the batch before it (``state.json`` is
written last, atomically).

Files still being written when Spark lists them (copied into place rather than renamed) are
waited for, then read whole from the batch's file list in Spark's log: see :mod:`.files`.
"""

from __future__ import annotations

import json
import time

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.errors import WaveSQLError
from wavesql.planner import bad_rows, ir
from wavesql.planner.lower import Runtime, lower
from wavesql.planner.segment_stage import KEYED_STATE
from wavesql.sqltext import JSON_OPTIONS, quote

from . import checkpoint_plan, kafka_sync, query_sync, sinks
from .joins import asof_split
from .plan import Input, KeepTime, Plan, carries_state, carried_states
from .query import ContinuousQuery
from .report import FINAL, PROGRESS, REASON, BatchReport, format_us, timestamp_lit
from .resample import ResampleProgress
from .source import reader_settings, stream_source
from .sync import keeps_key_state, split_signals, watch_glob, watch_path
from .sync_state import signals_of

__all__ = ["ReEvaluatingQuery"]

_PINS = "pins"  # what batches decided by the wall clock, beside Spark's offsets (_batch_pin)


class ReEvaluatingQuery(ContinuousQuery):
    """A continuous query re-evaluated over its inputs' look-back every micro-batch (the
    module docstring): every shape the other runners do not take."""

    def __init__(self, session, text, bound, plan: Plan, **kw):
        self._resample = ResampleProgress(plan)
        super().__init__(session, text, bound, plan, **kw)

    # -- setup -------------------------------------------------------------------------
    def _start(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        ticking = trigger.startswith("every ") and any(i.stream.heartbeat_us is not None
                                                       for i in self.inputs)
        # a checkpoint of another runner or plan is refused (streaming/checkpoint_plan.py);
        # the ticker below is a Spark source, and Spark's offsets cannot take a source on
        # or off: whether it runs is part of the plan (a HEARTBEAT or trigger change that
        # adds or removes it is refused here, by name, rather than by Spark's assertion)
        checkpoint_plan.check_query(self, "re-evaluating",
                                    ("heartbeat ticker (a Spark source)", str(ticking)))
        # One streaming query over all inputs: each input's rows travel as a struct in its
        # own column (NULL in the others), tagged with the input's index.
        frames = [stream_source(self.spark, inp.stream, max_files) for inp in self.inputs]
        rows = [df.drop("__file") for df in frames]
        parts = []
        for inp, df in zip(self.inputs, frames):
            cols = [F.struct(*[F.col(quote(c)) for c in other.columns]).alias(o.column)
                    if o is inp else F.lit(None).cast(other.schema).alias(o.column)
                    for o, other in zip(self.inputs, rows)]
            parts.append(df.select(F.lit(inp.index).alias("__src"), *cols, "__file"))
        if ticking:
            # Spark runs a micro-batch only when some input has new rows; a HEARTBEAT must
            # advance progress while every input is idle, so a ticker (Spark's rate source,
            # one row per second, tagged -1 and never treated as data) keeps batches coming.
            ticks = self.spark.readStream.format("rate").option("rowsPerSecond", "1").load()
            parts.append(ticks.select(F.lit(-1).alias("__src"), *[
                F.lit(None).cast(df.schema).alias(o.column)
                for o, df in zip(self.inputs, rows)], F.lit(None).cast("string").alias("__file")))
        self._max_files = max_files  # a SYNC indexes a query signal's files by as many
        if self.plan.mode == "sync":
            parts += self._signal_watches(rows, max_files)
            if self._kafka_tags():  # every part carries the blocks' column (NULL but there)
                parts = [p if kafka_sync.BLOCK in p.columns else p.withColumn(
                    kafka_sync.BLOCK, F.lit(None).cast(kafka_sync.BLOCK_TYPE)) for p in parts]
        source = parts[0]
        for part in parts[1:]:
            source = source.unionByName(part)
        return self._start_writer(source, trigger)

    def _signal_watches(self, rows: list, max_files: int | None = None) -> list:
        """A continuous SYNC's watches of its signals, so that new samples run a micro-batch
        (control rows wait for them), each row tagged in ``__src`` and carrying NULL input
        columns: a Kafka signal's topic through Spark's Kafka source, each record's header
        and bytes in one struct column (:func:`.kafka_sync.tag`; streaming/kafka_sync.py);
        a file signal's folder -- or the folder of the stream a signal's query reads
        (streaming/query_sync.py; a query that is not row by row over one stream of files
        is refused here, before anything runs) -- through Spark's binaryFile source, tagged
        -2, its content never read (the split lists the folders itself). In signal order, a
        folder once. A query's stream is watched ``max_files`` files per trigger: the split
        indexes that many of its files per micro-batch, so as many micro-batches run."""
        from pyspark.sql import functions as F

        def tagged(frame, tag, *extra):
            return frame.select(F.lit(tag).alias("__src"), *[
                F.lit(None).cast(df.schema).alias(o.column)
                for o, df in zip(self.inputs, rows)], *extra)

        watches, folders, tags = [], set(), self._kafka_tags()
        for s in signals_of(self.plan.syncs or (self.plan.sync,)):
            if s.key in tags:
                watches.append(tagged(kafka_sync.watch(self.spark, s), tags[s.key],
                                      F.lit(None).cast("string").alias("__file"),
                                      kafka_sync.BLOCK))
                continue
            files = (query_sync.stream_of(self.spark, self.session.catalog, s)
                     if s.source == "query" else s)
            folder, names = watch_path(files.path), watch_glob(files)
            if (folder, names) in folders:
                continue
            folders.add((folder, names))
            watch = (self.spark.readStream.format("binaryFile")
                     .schema("path STRING, modificationTime TIMESTAMP, length BIGINT, "
                             "content BINARY")
                     .option("pathGlobFilter", names))
            if max_files and s.source == "query":
                watch = watch.option("maxFilesPerTrigger", str(int(max_files)))
            watch = watch.load(folder)
            watches.append(tagged(watch, -2, F.col("path").alias("__file")))
        return watches

    def _kafka_tags(self) -> dict[str, int]:
        """The ``__src`` tag of each Kafka signal's watch rows, by signal key."""
        signals = signals_of(self.plan.syncs or (self.plan.sync,))
        return {s.key: kafka_sync.tag(k) for k, s in enumerate(
            s for s in signals if s.source == "kafka")}

    # -- one micro-batch ---------------------------------------------------------------
    def _run_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        began = time.monotonic()
        # Spark runs foreachBatch in a clone of the session: temp views the plan registers
        # must live in the batch's session, or spark.sql would not see them.
        spark = batch_df.sparkSession
        state = self._load_state(batch_id) or {"progress": None, "inputs": {}}
        pin = self._batch_pin(batch_id)  # a re-run's: its first attempt's (clock, ends)
        batch_df = batch_df.persist()
        report = BatchReport(batch_id, None, started_at=self.clock())
        arrived = self._arrivals(batch_id)  # for the result latency
        buffers, fresh, progress, olds = {}, {}, {}, {}
        self._resample.release()  # (a batch that failed left its bounds cached)
        late_parts, quarantine_parts, cached = [], [], [batch_df]
        read_files: list[str] = []  # what this batch reads (streaming/files.py)
        gone: list[str] = []  # listed for it, removed before it could read them
        for inp in self.inputs:
            s = inp.stream
            mine = state["inputs"].get(s.key, {"progress": None, "max_ts": None})
            rows = self._input_rows(spark, batch_df, inp, batch_id, read_files, gone)
            marked = bad_rows.CORRUPT_COLUMN in rows.columns
            malformed = (F.col(bad_rows.CORRUPT_COLUMN).isNotNull() if marked else F.lit(False))
            ts = F.unix_micros(F.col(quote(s.event_time)))
            punct = (F.col(quote(s.progress_column)).isNotNull() if s.progress_column
                     else F.lit(False))
            before = mine["progress"]
            is_late = ts < F.lit(before) if before is not None else F.lit(False)
            tagged = rows.withColumn("__kind", F.when(malformed, "malformed")
                                     .when(punct, "punctuation")
                                     .when(ts.isNull(), "no_time")
                                     .when(is_late, "late").otherwise("on_time"))
            tagged = tagged.persist()
            cached.append(tagged)
            # a Kafka stream's facts per partition: its progress is their minimum
            per_partition = ["_partition"] if s.source == "kafka" else []
            stats = tagged.groupBy("__kind", *per_partition).agg(
                F.count(F.lit(1)).alias("n"), F.max(ts).alias("max_ts"),
                F.max(F.unix_micros(F.col(quote(s.progress_column))) if s.progress_column
                      else F.lit(None).cast("bigint")).alias("punct"),
                # a Kafka record's arrival: its timestamp (for the result latency)
                F.min(F.unix_micros("_timestamp") if per_partition
                      else F.lit(None).cast("bigint")).alias("arrived")).collect()
            by_kind = _by_kind(stats)
            arrived += [r["arrived"] / 1e6 for r in stats if r["arrived"] is not None]
            counts = {k: (by_kind[k]["n"] if k in by_kind else 0)
                      for k in ("on_time", "late", "no_time", "punctuation", "malformed")}
            for k, n in counts.items():
                field_name = "quarantined" if k == "malformed" else k
                setattr(report, field_name, getattr(report, field_name) + n)
            report.rows_in += sum(counts.values())
            if counts["malformed"]:
                quarantine_parts.append(
                    malformed_records(tagged.where(F.col("__kind") == "malformed"), s))
            tagged = tagged.drop("__file", *([bad_rows.CORRUPT_COLUMN] if marked else []))
            on_time = tagged.where(F.col("__kind") == "on_time").drop("__kind")
            if counts["late"] or counts["no_time"]:
                late_parts.append(
                    tagged.where(F.col("__kind").isin("late", "no_time"))
                    .select(F.lit(s.name).alias("_stream"),
                            F.when(F.col("__kind") == "late",
                                   F.lit(f"event time before the progress already promised "
                                         f"({format_us(before)})"))
                            .otherwise(F.lit(f"no event time ({s.event_time} is NULL)"))
                            .alias(REASON),
                            F.to_json(F.struct(*[F.col(quote(c.name)) for c in s.columns]),
                                      JSON_OPTIONS).alias("_row")))
            newest = by_kind["on_time"]["max_ts"] if "on_time" in by_kind else None
            seen = [v for v in (mine["max_ts"], newest) if v is not None]
            max_ts = max(seen) if seen else None
            if per_partition:
                partitions = _partition_facts(mine.get("partitions"), stats,
                                              self._kafka_partitions(batch_id, s))
                promised = _least_promise(partitions, s.watermark_us or 0)
            else:
                promised = max([v for v in (
                    max_ts - (s.watermark_us or 0) if max_ts is not None else None,
                    by_kind["punctuation"]["punct"] if "punctuation" in by_kind else None,
                ) if v is not None], default=None)
            candidates = [v for v in (
                before, promised,
                pin["now_us"] - s.heartbeat_us if s.heartbeat_us is not None else None,
            ) if v is not None]
            progress[s.key] = {"progress": max(candidates) if candidates else None,
                               "max_ts": max_ts}
            if per_partition:
                progress[s.key]["partitions"] = partitions
            fresh[s.key] = on_time
            olds[s.key] = self._read_buffer(spark, inp, state)
            buffers[s.key] = olds[s.key].unionByName(on_time)
        quarantine_parts += self._changed_files(spark, batch_id, read_files)
        quarantine_parts += self._vanished_files(spark, batch_id, gone)
        known = [p["progress"] for p in progress.values()]
        overall = None if any(p is None for p in known) else min(known)
        previous = state["progress"]
        if self.plan.resample is not None:  # a RESAMPLE, alone or under windows
            overall = self._resample.final(buffers, overall, previous)
        shown = self._resample.shown(buffers, overall)
        report.progress_us = shown
        report.inputs = {k: v["progress"] for k, v in progress.items()}
        sync_state = None
        if self.plan.mode == "sync":  # synced: the rows every signal now covers
            key = self.inputs[0].stream.key
            blocks = {k: batch_df.where(F.col("__src") == tag).select(f"{kafka_sync.BLOCK}.*")
                      for k, tag in self._kafka_tags().items()}
            # per key, a row reaches its key's state only once the control's progress
            # passed it, so the key's rows come in range order (sync.hold_for_keys)
            held = keeps_key_state(self.bound) or getattr(self, "in_order", False)
            hold = (self.inputs[0].stream.event_time, progress[key]["progress"]) if held else None
            got = split_signals(spark, self.plan, buffers[key], state, self.clock(), blocks,
                                catalog=self.session.catalog, batch_id=batch_id,
                                max_files=getattr(self, "_max_files", None), hold=hold,
                                ends=pin.get("ends") if hold is not None else None)
            if hold is not None and "ends" not in pin:  # (before anything is delivered)
                pin = self._batch_pin(batch_id, {**pin, "ends": got.ends})
            buffers[key], sync_state = got.waiting, got.state
            # a waiting control row is delivered in a later batch with its own (earlier)
            # time: _progress is no more than the earliest of them, so no row delivered
            # later is below a _progress already emitted (a derived part's punctuation,
            # streaming/derived.py, relies on it)
            shown = _sync_progress(shown, got.waiting, self.inputs[0].stream)
            report.progress_us = shown
            cached += got.cached
            # each SYNC reads what the split judged covered: the very files it placed (no
            # second listing), a Kafka signal's blocks through its index
            fresh = {key: got.ready, **got.inputs}
            report.rows_in += got.blocks  # a Kafka signal's block is a row here
            report.on_time += got.blocks - got.quarantined
            report.quarantined += got.quarantined
            quarantine_parts += got.quarantine
            # a query signal's rows (streaming/query_sync.py): on time, or late (late sink)
            report.rows_in += got.rows
            report.on_time += got.rows - got.late
            report.late += got.late
            late_parts += got.late_records
        if self.plan.mode == "rows" and carries_state(self.bound):  # along a part's segments
            fresh[KEYED_STATE], sync_state = carried_states(state)
        stateful = self.plan.mode not in ("rows", "sync", "band", "asof")
        if self.plan.mode == "asof":
            fresh = asof_split(self.plan, buffers, progress)
        if self.plan.mode == "band":  # every pair with a new row in it, once
            ka, kb = (inp.stream.key for inp in self.inputs)
            out = self._results(spark, {ka: fresh[ka], kb: buffers[kb]}, previous, overall)
            out = out.unionByName(self._results(spark, {ka: olds[ka], kb: fresh[kb]},
                                                previous, overall))
        else:
            out = self._results(spark, buffers if stateful else fresh, previous, overall, olds,
                                shown)
        keyed = fresh.get(KEYED_STATE) if self.plan.mode in ("sync", "rows") else None
        if keyed and keyed.get("late") is not None:  # too late for its key's state
            late_parts.append(keyed["late"].select(
                F.lit(self.inputs[0].stream.name).alias("_stream"),
                F.col("_reason").alias(REASON), "_row"))
            # counted in rows_in and on_time when it came (this batch or, held, one before):
            # moved to late here, so rows_in = on_time + late + ... holds per batch and in
            # the totals (on_time < 0 in a batch that finds late rows of earlier ones)
            report.on_time -= keyed["late_rows"]
            report.late += keyed["late_rows"]
        self._deliver_counted(out, batch_id, report, by_final=stateful)
        sinks.commit_all(late_parts, self.late_path, batch_id, self.late_format)
        sinks.commit_all(quarantine_parts, self.quarantine_path, batch_id)
        report.buffered = self._write_state(spark, batch_id, buffers, progress, overall, shown,
                                            sync_state)
        report.state_bytes = sum(e.size for e in storage.list_files(self._state_dir(batch_id),
                                                                    recursive=True))
        self._finish(report, began, arrived)
        for df in cached + [out]:
            df.unpersist()
        self._resample.release()

    def _batch_pin(self, batch_id: int, pin: dict | None = None) -> dict:
        """What batch ``batch_id`` decides by the wall clock (``now_us``: HEARTBEAT progress;
        per-key SYNC: ``ends``, sync.split_signals) as its first attempt did (``pin``: write
        it, before anything is delivered), so a re-run after a crash computes what that one
        delivered: a later HEARTBEAT progress makes more final (a stream part keeps the first
        attempt's rows, derived.py) or releases held rows (sync.hold_for_keys), as a file
        completed since would: one may sort before a delivered row of its key, change it."""
        pins = storage.join(self.checkpoint, "offsets", _PINS)
        where = storage.join(pins, f"{batch_id:09d}.json")
        try:
            if pin is None:
                got = json.loads(storage.read_text(where))
                return {**got, "now_us": int(got["now_us"])}
        except FileNotFoundError:
            pin = {"now_us": int(self.clock() * 1_000_000)}
            for name, _ in storage.children(pins):  # the last two batches' kept, as state
                if name[:9].isdigit() and int(name[:9]) < batch_id - 1:
                    storage.delete(storage.join(pins, name))
        except (ValueError, KeyError, TypeError) as err:  # written whole: so edited since
            raise WaveSQLError("CHECKPOINT_CORRUPT", f"`{where}` is not what this query wrote "
                               f"({err})", hint="restore the checkpoint folder, or start the "
                               "query with a new checkpoint and output") from None
        storage.write_text(where, json.dumps(pin))
        return pin

    def _kafka_partitions(self, batch_id: int, s: cat.StreamDef) -> list[int]:
        """The partitions of a Kafka stream's topic, as Spark's offset log of this batch
        lists them (every partition, including ones that never had a record: those hold
        the stream's progress back, like any idle partition, unless it has a HEARTBEAT)."""
        path = storage.join(self.checkpoint, "offsets", "offsets", str(batch_id))
        found: set[int] = set()
        try:
            lines = storage.read_text(path).splitlines()
        except (OSError, WaveSQLError):
            return []
        for line in lines[2:]:
            try:
                offsets = json.loads(line)
            except ValueError:
                continue
            if isinstance(offsets, dict) and isinstance(offsets.get(s.path), dict):
                found.update(int(p) for p in offsets[s.path])
        return sorted(found)

    def _input_rows(self, spark, batch_df, inp: Input, batch_id: int,
                    read_files: list[str] | None = None, gone: list[str] | None = None):
        """The batch's new rows of ``inp`` (its columns and ``__file``), read whole.

        Spark's file source fixed each new file's size when it listed it, so a file still
        being written then (copied in place) would be read in part and never again. The
        batch's files are taken from Spark's file log instead, waited for until complete,
        and read as they are now (streaming/files.py); a re-run of the batch reads the same
        files, so it stays exactly once.
        """
        from pyspark.sql import functions as F

        from . import files

        listed = [p for p, _ in files.batch_files(self.checkpoint, inp.index, batch_id)]
        if not listed or not all(files.belongs(p, inp.stream.path) for p in listed):
            return batch_df.where(F.col("__src") == inp.index).select(
                f"{inp.column}.*", "__file")
        removed = files.wait_until_ready(listed, inp.stream.format)
        if removed:  # quarantined by the caller; waiting would not bring them back
            listed = [p for p in listed if p not in removed]
            if gone is not None:
                gone.extend(removed)
        files.check_columns(listed, inp.stream)
        if read_files is not None:
            read_files.extend(listed)
        s = inp.stream
        if not listed:  # every file of the batch is gone: no rows
            return spark.createDataFrame([], f"{reader_settings(s)[0]}, __file STRING")
        ddl, options = reader_settings(s)
        frame = spark.read.format(s.format).schema(ddl).options(**options).load(listed)
        return frame.select(*[F.col(quote(c)) for c in frame.columns],
                            F.input_file_name().alias("__file"))

    def _results(self, spark, streams: dict, previous: int | None, overall: int | None,
                 olds: dict | None = None, shown: int | None = None):
        """The batch's result rows with ``_final`` (by ``previous``/``overall``) and
        ``_progress`` (``shown``, default ``overall``)."""
        from pyspark.sql import functions as F

        rt = Runtime(spark, self.session.catalog, self.text, streams=streams)
        result = lower(self.bound, rt)
        shown = overall if shown is None else shown
        if self.plan.mode in ("rows", "sync", "band", "asof"):  # final as it comes
            return result.withColumn(PROGRESS, timestamp_lit(shown))
        t = F.unix_micros(F.col(quote(self.plan.time_column)))
        after = t >= F.lit(previous) if previous is not None else F.lit(True)
        before = t < F.lit(overall) if overall is not None else F.lit(False)
        if self.plan.mode == "resample" and self.plan.resample["keys"]:
            result, after, before = self._resample.mark_per_key(result, t, streams, olds,
                                                                previous, overall)
        final = result.where(after & before).withColumn(FINAL, F.lit(True))
        if self.emit_changes:
            pending = ~before if overall is not None else F.lit(True)
            final = final.unionByName(result.where(pending).withColumn(FINAL, F.lit(False)))
        return final.drop("__after", "__before").withColumn(PROGRESS, timestamp_lit(shown))

    def _arrivals(self, batch_id: int) -> list[float]:
        """Modification times (s since 1970) of the files this batch reads, from Spark's
        file-source log (streaming/files.py ``batch_files``) -- no Spark job needed."""
        from . import files

        return [ms / 1000.0 for i in range(len(self.inputs))
                for _, ms in files.batch_files(self.checkpoint, i, batch_id) if ms]

    # -- state ---------------------------------------------------------------------------
    def _read_buffer(self, spark, inp: Input, state: dict):
        schema = ir.Schema.of_columns(inp.stream.columns).ddl()
        if state.get("dir"):
            folder = storage.join(state["dir"], f"buffer_{inp.index}")
            if storage.is_dir(folder):
                return spark.read.schema(schema).parquet(folder)
        return spark.createDataFrame([], schema)

    def _write_state(self, spark, batch_id: int, buffers: dict, progress: dict,
                     overall: int | None, shown: int | None,
                     sync_state: dict | None = None) -> int:
        folder = self._state_dir(batch_id)
        # a re-run of this batch after a crash: redo it from scratch
        storage.delete(folder, recursive=True)
        kept = 0
        for inp in self.inputs:
            if self.plan.mode == "rows":
                # a row-by-row query keeps nothing (_prune): writing its empty buffer would
                # be a Spark job per micro-batch for no row; _read_buffer reads a missing
                # buffer as empty
                continue
            buf = self._prune(buffers[inp.stream.key], inp, overall, progress)
            where = storage.join(folder, f"buffer_{inp.index}")
            buf.write.parquet(where)
            kept += sinks.parquet_rows([e.location for e in sinks.data_files(where)])
        state = {"batch": batch_id, "progress": overall, "shown": shown, "inputs": progress}
        if sync_state is not None:
            state["signal"] = sync_state
        self._commit_state(batch_id, state)
        return kept

    def _prune(self, buf, inp: Input, overall: int | None, progress: dict | None = None):
        """Keep the rows results at or after ``overall`` can still need (the look-back)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if self.plan.mode == "rows":
            return buf.limit(0)  # row-by-row queries keep nothing
        if self.plan.mode == "band":  # what the other side's future rows can still match
            rule = inp.lookback[0]
            bound = (progress or {}).get(rule.other, {}).get("progress")
            if bound is None:
                return buf
            ts = F.unix_micros(F.col(quote(inp.stream.event_time)))
            return buf.where(ts >= F.lit(bound + rule.offset_us))
        if self.plan.mode in ("sync", "asof"):
            return buf  # sync_split / asof_split kept exactly what later rows need
        if overall is None:
            return buf  # nothing is final yet
        ts = F.unix_micros(F.col(quote(inp.stream.event_time)))
        cut, added = F.lit(overall), []
        if self.plan.mode == "resample" and self.plan.resample["keys"]:
            # per key from its own bound on: its points not final yet need all its rows there
            # (for 'linear', every column's values between a column's last value and progress)
            buf, cut, added = self._resample.cut_per_key(buf, overall)
        old = ts < cut
        keep = ~old
        ranks = []
        for i, rule in enumerate(inp.lookback):
            if isinstance(rule, KeepTime):
                keep = keep | (ts >= F.lit(overall - rule.us))
                continue
            # the last n rows before progress - t (t: a nested window's time look-back,
            # whose rows from progress - t on are all kept), per key
            keys, n, passes, t_us = rule.keys, rule.n, rule.passes, rule.within_us
            if t_us:
                keep = keep | (ts >= cut - F.lit(t_us))
            old = ts < cut - F.lit(t_us)
            counted = F.coalesce(F.expr(passes), F.lit(False)) if passes else F.lit(True)
            order = [ts.desc()] + [F.col(quote(c.name)).desc_nulls_last()
                                   for c in inp.stream.columns if "map<" not in c.type.lower()]
            w = Window.partitionBy(*[F.expr(k) for k in keys], old, counted).orderBy(*order)
            buf = buf.withColumn(f"__rank{i}", F.row_number().over(w))
            keep = keep | (old & counted & (F.col(f"__rank{i}") <= F.lit(n)))
            ranks.append(f"__rank{i}")
        return buf.where(keep).drop(*ranks, *added)


def _sync_progress(shown: int | None, waiting, stream: cat.StreamDef) -> int | None:
    """A continuous SYNC's ``_progress``: the control's (``shown``), or the earliest event
    time of a control stream row still ``waiting`` for the recording when that is earlier.
    Rows delivered later are those waiting rows or new rows at or after the control's
    progress (earlier ones are late), so none is below it; it never goes back (the waiting
    rows' earliest time only rises but for new rows, which are at or after ``shown``)."""
    from pyspark.sql import functions as F

    earliest = waiting.agg(F.min(F.unix_micros(F.col(quote(stream.event_time))))).first()[0]
    return shown if earliest is None or shown is None else min(shown, earliest)


def malformed_records(rows, stream: cat.StreamDef):
    """The quarantine records of a stream's malformed ``rows`` (read with the file and the
    corrupt-record column): the stream, the file, the raw record and what it was read as."""
    from pyspark.sql import functions as F

    return rows.select(
        F.lit(stream.name).alias("_stream"), F.col("__file").alias("_file"),
        F.col(bad_rows.CORRUPT_COLUMN).alias("_record"),
        F.concat(F.lit("malformed: read as "), F.to_json(F.struct(
            *[F.col(quote(c.name)) for c in stream.columns]))).alias(REASON))


def _by_kind(stats) -> dict:
    """Per-kind facts of a batch's rows (summed/maxed over partitions when per partition)."""
    out: dict = {}
    for r in stats:
        have = out.get(r["__kind"])
        if have is None:
            out[r["__kind"]] = {"n": r["n"], "max_ts": r["max_ts"], "punct": r["punct"]}
            continue
        have["n"] += r["n"]
        for key in ("max_ts", "punct"):
            values = [v for v in (have[key], r[key]) if v is not None]
            have[key] = max(values) if values else None
    return out


def _partition_facts(before: dict | None, stats, partitions: list[int]) -> dict:
    """Each Kafka partition's largest on-time event time and latest punctuation, after
    this batch (keys are partition numbers as text: the state is JSON)."""
    facts = {k: dict(v) for k, v in (before or {}).items()}
    for p in partitions:
        facts.setdefault(str(p), {"max_ts": None, "punct": None})
    for r in stats:
        field_name = {"on_time": "max_ts", "punctuation": "punct"}.get(r["__kind"])
        if field_name is None or r["_partition"] is None:
            continue
        mine = facts.setdefault(str(r["_partition"]), {"max_ts": None, "punct": None})
        value = r[field_name]
        if value is not None and (mine[field_name] is None or value > mine[field_name]):
            mine[field_name] = value
    return facts


def _least_promise(partitions: dict, watermark_us: int) -> int | None:
    """What every partition has promised (its largest event time minus the watermark, or
    its punctuation): the minimum; None while some partition has promised nothing."""
    promises = []
    for facts in partitions.values():
        mine = [v for v in (facts["max_ts"] - watermark_us if facts["max_ts"] is not None
                            else None, facts["punct"]) if v is not None]
        if not mine:
            return None
        promises.append(max(mine))
    return min(promises) if promises else None
