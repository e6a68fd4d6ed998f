"""Continuous queries: the batch plan, evaluated incrementally as progress advances.

How a continuous query runs
---------------------------
Spark Structured Streaming reads the new files of every input stream (one streaming query,
the inputs unioned, with Spark's own checkpointed offsets), and each micro-batch is handed to
:meth:`ContinuousQuery._run_batch`, which

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
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import parse_one, parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner.lower import Runtime, lower, stream_reader_options
from wavesql.planner.windows import TIME

FINAL = "_final"
PROGRESS = "_progress"
REASON = "_reason"


@dataclass
class BatchReport:
    """What one micro-batch did. ``rows_in = on_time + late + no_time + punctuation``."""

    batch: int
    progress_us: int | None
    rows_in: int = 0
    on_time: int = 0
    late: int = 0
    no_time: int = 0
    punctuation: int = 0
    rows_out: int = 0
    final_out: int = 0
    buffered: int = 0  # rows kept as state after the batch
    seconds: float = 0.0
    inputs: dict = field(default_factory=dict)  # stream -> its progress (microseconds)


@dataclass
class _Input:
    index: int
    stream: cat.StreamDef
    lookback: tuple[str, int] | None  # ("time", us) / ("rows", n) / None: stateless

    @property
    def column(self) -> str:
        return f"__in{self.index}"


def start(session, text: str, output, checkpoint: str | os.PathLike, *,
          trigger: str = "availableNow", late: str | os.PathLike | None = None,
          max_files_per_trigger: int | None = None,
          clock: Callable[[], float] = time.time) -> "ContinuousQuery":
    """Start ``text`` (one query) as a continuous query. See :meth:`Session.stream`."""
    stmts = parse_statements(text)
    if len(stmts) != 1:
        raise WaveSQLError("UNSUPPORTED_STATEMENT", f"a continuous query is one statement, got "
                           f"{len(stmts)}")
    stmt = stmts[0]
    emit = next(iter(stmt.node.find_all(wn.Emit)), None)
    late_into = next(iter(stmt.node.find_all(wn.LateInto)), None)
    session._user_text = text
    from wavesql import planner

    bound = planner.rewrite(planner.bind(stmt, session.catalog, session))
    if not isinstance(bound, ir.QueryStatement):
        raise WaveSQLError("UNSUPPORTED_STATEMENT", "only a query can run continuously",
                           hint="DDL runs once: use Session.sql for it")
    if late is None and late_into is not None:
        target = late_into.this
        if not (isinstance(target, exp.Literal) and target.is_string):
            raise WaveSQLError("NOT_IMPLEMENTED", "LATE INTO a sink name is not implemented yet",
                               Span.of(target), hint="give a path: LATE INTO 'late/trades'")
        late = target.name
    inputs, windowed = _plan_inputs(bound.relation, stmt)
    return ContinuousQuery(session, text, bound, inputs, windowed,
                           emit_changes=emit is not None and emit.kind == "CHANGES",
                           output=output, checkpoint=Path(checkpoint),
                           late=Path(late) if late is not None else Path(checkpoint) / "late",
                           trigger=trigger, max_files=max_files_per_trigger, clock=clock)


def _plan_inputs(root: ir.Relation, stmt) -> tuple[list[_Input], bool]:
    """The streams a continuous query reads, each with the look-back its windows need;
    enforce the streaming rules (DESIGN.md §4) with errors at bind time."""
    windows: dict[str, list] = {}
    scans: dict[str, cat.StreamDef] = {}
    queries: list[ir.SqlQuery] = []
    windowed = False
    for rel in ir.walk(root):
        if isinstance(rel, ir.WindowScan):
            windowed = True
            windows.setdefault(rel.input.stream.key if isinstance(rel.input, ir.StreamScan)
                               else rel.stream.lower(), []).append(rel.window)
        elif isinstance(rel, ir.StreamScan):
            scans[rel.stream.key] = rel.stream
        elif isinstance(rel, (ir.SignalScan, ir.SignalStage)):
            raise WaveSQLError("NOT_IMPLEMENTED", "continuous signal queries are not "
                               "implemented yet", Span.of(stmt.node),
                               hint="run the query in batch (Session.sql) over the recordings")
        elif isinstance(rel, ir.SqlQuery):
            queries.append(rel)
    if not windowed:
        for rel in queries:
            _check_stateless(rel, stmt)
    if not scans:
        raise WaveSQLError("STREAMING_RULE", "a continuous query needs a catalog stream to read",
                           Span.of(stmt.node))
    if windowed and root.schema.find(TIME) is None:
        raise WaveSQLError("STREAMING_RULE", f"a continuous windowed query must keep `{TIME}` "
                           "in its result", Span.of(stmt.node),
                           hint=f"it says which instant a row belongs to, hence when it is final; "
                                f"add {TIME} to the outer SELECT")
    inputs = []
    for index, (key, stream) in enumerate(sorted(scans.items())):
        if stream.event_time is None:
            raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` has no EVENT TIME",
                               Span.of(stmt.node), hint="a continuous query needs event time "
                               "to know when results are final: CREATE OR REPLACE STREAM ... "
                               "EVENT TIME ts WATERMARK 5 SECONDS")
        specs = windows.get(key)
        if windowed and not specs:
            raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` is read without a "
                               "window in a windowed continuous query", Span.of(stmt.node),
                               hint="window every stream of the query, e.g. [RANGE 1 MINUTE]")
        inputs.append(_Input(index, stream, _lookback(specs, stmt) if specs else None))
    return inputs, windowed


def _lookback(specs, stmt) -> tuple[str, int]:
    kinds = {s.kind for s in specs}
    if "UNBOUNDED" in kinds:
        raise WaveSQLError("STREAMING_RULE", "[RANGE UNBOUNDED] would keep every row of a "
                           "stream forever", Span.of(stmt.node),
                           hint="use a bounded window such as [RANGE 1 HOUR]")
    if kinds & {"ROWS", "PARTITION_ROWS"}:
        if len(specs) > 1:
            raise WaveSQLError("NOT_IMPLEMENTED", "a ROWS window and another window over the "
                               "same stream in one continuous query", Span.of(stmt.node))
        return ("rows", specs[0])
    need = 0
    for s in specs:
        # SLIDE: the instant before the first new one reaches back r + s.
        need = max(need, {"RANGE": s.size, "SLIDE": s.size + s.slide, "NOW": 1}[s.kind])
    return ("time", need)


def _check_stateless(rel: ir.SqlQuery, stmt) -> None:
    """A continuous query without windows must be row-by-row (filter/projection)."""
    try:
        tree = parse_one(rel.sql)
    except WaveSQLError:
        return
    stateful = [n for n in tree.walk() if isinstance(
        n, (exp.AggFunc, exp.Group, exp.Window, exp.Join, exp.Distinct, exp.Order, exp.Limit))]
    if stateful:
        node = stateful[0]
        raise WaveSQLError(
            "STREAMING_RULE", f"`{node.sql()[:40]}` over an unbounded stream needs a window",
            Span.of(stmt.node),
            hint="aggregate over a window, e.g. FROM trades [RANGE 1 MINUTE SLIDE 10 SECONDS]")


class ContinuousQuery:
    """A running continuous query (see the module docstring). Create with
    :meth:`wavesql.Session.stream`."""

    def __init__(self, session, text, bound, inputs, windowed, *, emit_changes, output,
                 checkpoint: Path, late: Path, trigger, max_files, clock):
        self.session = session
        self.spark = session.spark
        self.text = text
        self.bound = bound
        self.inputs = inputs
        self.windowed = windowed
        self.emit_changes = emit_changes
        self.output = output
        self.checkpoint = checkpoint
        self.late_path = late
        self.clock = clock
        self.reports: list[BatchReport] = []
        self.error: BaseException | None = None
        self._query = self._start(trigger, max_files)

    # -- public ------------------------------------------------------------------------
    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query (availableNow: until the input present at start is done);
        re-raises the error that stopped it, as a WaveSQLError where possible."""
        from pyspark.errors import StreamingQueryException

        try:
            done = self._query.awaitTermination(timeout)
        except StreamingQueryException:
            if isinstance(self.error, WaveSQLError):
                raise self.error from None
            raise
        if self.error is not None:
            raise self.error
        return done if done is not None else True

    def stop(self) -> None:
        self._query.stop()

    @property
    def is_active(self) -> bool:
        return self._query.isActive

    @property
    def progress_us(self) -> int | None:
        """The query's progress after the last batch (microseconds since 1970), or None."""
        state = self._load_state(None)
        return state["progress"] if state else None

    def status(self) -> dict:
        """Live figures: progress, last batch, totals, Spark's input/processing rates."""
        last = self._query.lastProgress or {}
        totals = {k: sum(getattr(r, k) for r in self.reports)
                  for k in ("rows_in", "on_time", "late", "no_time", "punctuation", "rows_out")}
        return {"progress_us": self.progress_us, "batches": len(self.reports),
                "buffered": self.reports[-1].buffered if self.reports else 0,
                "input_rows_per_second": last.get("inputRowsPerSecond"),
                "processed_rows_per_second": last.get("processedRowsPerSecond"), **totals}

    # -- setup -------------------------------------------------------------------------
    def _start(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        # One streaming query over all inputs: each input's rows travel as a struct in its
        # own column (NULL in the others), tagged with the input's index.
        frames = []
        for inp in self.inputs:
            s = inp.stream
            reader = (self.spark.readStream.format(s.format).schema(
                ir.Schema.of_columns(s.columns).ddl()).options(**stream_reader_options(s)))
            if max_files is not None:
                reader = reader.option("maxFilesPerTrigger", str(max_files))
            frames.append(reader.load(s.path))
        parts = []
        for inp, df in zip(self.inputs, frames):
            cols = [F.struct(*[F.col(f"`{c}`") for c in other.columns]).alias(o.column)
                    if o is inp else F.lit(None).cast(other.schema).alias(o.column)
                    for o, other in zip(self.inputs, frames)]
            parts.append(df.select(F.lit(inp.index).alias("__src"), *cols))
        source = parts[0]
        for part in parts[1:]:
            source = source.unionByName(part)
        writer = (source.writeStream.foreachBatch(self._guarded_batch)
                  .option("checkpointLocation", str(self.checkpoint / "offsets")))
        if trigger == "availableNow":
            writer = writer.trigger(availableNow=True)
        elif trigger.startswith("every "):
            writer = writer.trigger(processingTime=trigger[len("every "):])
        else:
            raise WaveSQLError("INVALID_OPTION", f"unknown trigger `{trigger}`",
                               hint="'availableNow' or 'every 10 seconds'")
        return writer.start()

    def _guarded_batch(self, batch_df, batch_id: int) -> None:
        try:
            self._run_batch(batch_df, batch_id)
        except BaseException as err:  # noqa: BLE001 - surfaced by await_termination
            from wavesql.spark import translate_runtime_error

            self.error = translate_runtime_error(err) if not isinstance(err, WaveSQLError) \
                else err
            raise

    # -- one micro-batch ---------------------------------------------------------------
    def _run_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        began = time.monotonic()
        # Spark runs foreachBatch in a clone of the session: temp views the plan registers
        # must live in the batch's session, or spark.sql would not see them.
        spark = batch_df.sparkSession
        state = self._load_state(batch_id) or {"progress": None, "inputs": {}}
        now_us = int(self.clock() * 1_000_000)
        batch_df = batch_df.persist()
        report = BatchReport(batch_id, None)
        buffers, fresh, progress = {}, {}, {}
        late_parts, cached = [], [batch_df]
        for inp in self.inputs:
            s = inp.stream
            mine = state["inputs"].get(s.key, {"progress": None, "max_ts": None})
            rows = batch_df.where(F.col("__src") == inp.index).select(f"{inp.column}.*")
            ts = F.unix_micros(F.col(f"`{s.event_time}`"))
            punct = (F.col(f"`{s.progress_column}`").isNotNull() if s.progress_column
                     else F.lit(False))
            before = mine["progress"]
            is_late = ts < F.lit(before) if before is not None else F.lit(False)
            tagged = rows.withColumn("__kind", F.when(punct, "punctuation")
                                     .when(ts.isNull(), "no_time")
                                     .when(is_late, "late").otherwise("on_time"))
            tagged = tagged.persist()
            cached.append(tagged)
            stats = tagged.groupBy("__kind").agg(
                F.count(F.lit(1)).alias("n"), F.max(ts).alias("max_ts"),
                F.max(F.unix_micros(F.col(f"`{s.progress_column}`")) if s.progress_column
                      else F.lit(None).cast("bigint")).alias("punct")).collect()
            by_kind = {r["__kind"]: r for r in stats}
            counts = {k: (by_kind[k]["n"] if k in by_kind else 0)
                      for k in ("on_time", "late", "no_time", "punctuation")}
            for k, n in counts.items():
                setattr(report, k, getattr(report, k) + n)
            report.rows_in += sum(counts.values())
            on_time = tagged.where(F.col("__kind") == "on_time").drop("__kind")
            if counts["late"] or counts["no_time"]:
                late_parts.append(
                    tagged.where(F.col("__kind").isin("late", "no_time"))
                    .select(F.lit(s.name).alias("_stream"),
                            F.when(F.col("__kind") == "late",
                                   F.lit(f"event time before the progress already promised "
                                         f"({_fmt(before)})"))
                            .otherwise(F.lit(f"no event time ({s.event_time} is NULL)"))
                            .alias(REASON),
                            F.to_json(F.struct(*[F.col(f"`{c.name}`") for c in s.columns]))
                            .alias("_row")))
            newest = by_kind["on_time"]["max_ts"] if "on_time" in by_kind else None
            seen = [v for v in (mine["max_ts"], newest) if v is not None]
            max_ts = max(seen) if seen else None
            candidates = [v for v in (
                before,
                max_ts - (s.watermark_us or 0) if max_ts is not None else None,
                by_kind["punctuation"]["punct"] if "punctuation" in by_kind else None,
                now_us - s.heartbeat_us if s.heartbeat_us is not None else None,
            ) if v is not None]
            progress[s.key] = {"progress": max(candidates) if candidates else None,
                               "max_ts": max_ts}
            fresh[s.key] = on_time
            buffers[s.key] = self._read_buffer(spark, inp, state).unionByName(on_time)
        known = [p["progress"] for p in progress.values()]
        overall = None if any(p is None for p in known) else min(known)
        previous = state["progress"]
        report.progress_us = overall
        report.inputs = {k: v["progress"] for k, v in progress.items()}

        out = self._results(spark, buffers if self.windowed else fresh, previous, overall)
        out = out.persist()
        if self.windowed:
            by_final = {r[0]: r[1] for r in out.groupBy(FINAL).count().collect()}
            report.rows_out = sum(by_final.values())
            report.final_out = by_final.get(True, 0)
        else:
            report.rows_out = report.final_out = out.count()
        self._deliver(out, batch_id)
        if late_parts:
            late_df = late_parts[0]
            for part in late_parts[1:]:
                late_df = late_df.unionByName(part)
            late_df.write.mode("overwrite").parquet(str(self.late_path / f"batch={batch_id:09d}"))
        report.buffered = self._write_state(spark, batch_id, buffers, progress, overall)
        report.seconds = time.monotonic() - began
        self._write_report(report)
        self.reports.append(report)
        for df in cached + [out]:
            df.unpersist()

    def _results(self, spark, streams: dict, previous: int | None, overall: int | None):
        from pyspark.sql import functions as F

        rt = Runtime(spark, self.session.catalog, self.text, streams=streams)
        result = lower(self.bound, rt)
        if not self.windowed:  # row by row: every row is final as it comes
            return result.withColumn(PROGRESS, _timestamp(overall))
        t = F.unix_micros(F.col(TIME))
        after = t >= F.lit(previous) if previous is not None else F.lit(True)
        before = t < F.lit(overall) if overall is not None else F.lit(False)
        final = result.where(after & before).withColumn(FINAL, F.lit(True))
        if self.emit_changes:
            pending = ~before if overall is not None else F.lit(True)
            final = final.unionByName(result.where(pending).withColumn(FINAL, F.lit(False)))
        return final.withColumn(PROGRESS, _timestamp(overall))

    def _deliver(self, out, batch_id: int) -> None:
        if callable(self.output):
            self.output(out, batch_id)
            return
        target = Path(self.output) / f"batch={batch_id:09d}"
        out.write.mode("overwrite").parquet(str(target))

    # -- state ---------------------------------------------------------------------------
    def _state_dir(self, batch_id: int) -> Path:
        return self.checkpoint / "state" / f"{batch_id:09d}"

    def _load_state(self, batch_id: int | None) -> dict | None:
        """The committed state of the latest batch before ``batch_id`` (None: any)."""
        root = self.checkpoint / "state"
        if not root.is_dir():
            return None
        done = sorted(int(p.name) for p in root.iterdir()
                      if p.name.isdigit() and (p / "state.json").is_file())
        if batch_id is not None:
            done = [b for b in done if b < batch_id]
        if not done:
            return None
        state = json.loads((self._state_dir(done[-1]) / "state.json").read_text())
        state["dir"] = str(self._state_dir(done[-1]))
        return state

    def _read_buffer(self, spark, inp: _Input, state: dict):
        schema = ir.Schema.of_columns(inp.stream.columns).ddl()
        folder = Path(state.get("dir", "")) / f"buffer_{inp.index}"
        if state.get("dir") and folder.is_dir():
            return spark.read.schema(schema).parquet(str(folder))
        return spark.createDataFrame([], schema)

    def _write_state(self, spark, batch_id: int, buffers: dict, progress: dict,
                     overall: int | None) -> int:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        folder = self._state_dir(batch_id)
        if folder.exists():  # a re-run of this batch after a crash: redo it from scratch
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        kept = 0
        for inp in self.inputs:
            buf = buffers[inp.stream.key]
            if self.windowed and inp.lookback is not None and overall is not None:
                ts = F.unix_micros(F.col(f"`{inp.stream.event_time}`"))
                kind, need = inp.lookback
                if kind == "time":
                    buf = buf.where(ts >= F.lit(overall - need))
                else:  # the last n rows before the progress, per partition, and all after
                    spec = need
                    order = [ts.desc()] + [F.col(f"`{c.name}`").desc_nulls_last()
                                           for c in inp.stream.columns
                                           if "map<" not in c.type.lower()]
                    w = Window.partitionBy(*[F.expr(k) for k in spec.partition_by]).orderBy(*order)
                    old = buf.where(ts < F.lit(overall))
                    old = (old.withColumn("__rank", F.row_number().over(w))
                           .where(F.col("__rank") <= spec.size).drop("__rank"))
                    buf = old.unionByName(buf.where(ts >= F.lit(overall)))
            elif not self.windowed:
                buf = buf.limit(0)  # row-by-row queries keep nothing
            buf.write.parquet(str(folder / f"buffer_{inp.index}"))
            kept += spark.read.parquet(str(folder / f"buffer_{inp.index}")).count()
        state = {"batch": batch_id, "progress": overall, "inputs": progress}
        tmp = folder / "state.json.tmp"
        tmp.write_text(json.dumps(state))
        os.replace(tmp, folder / "state.json")  # the commit point of this batch's state
        for old in (self.checkpoint / "state").iterdir():  # keep the last two
            if old.name.isdigit() and int(old.name) < batch_id - 1:
                shutil.rmtree(old, ignore_errors=True)
        return kept

    def _write_report(self, report: BatchReport) -> None:
        """Progress next to the output, so a reader can tell complete from incomplete."""
        if callable(self.output):
            return
        folder = Path(self.output) / "_progress"
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f"batch={report.batch:09d}.json.tmp"
        tmp.write_text(json.dumps(asdict(report)))
        os.replace(tmp, folder / f"batch={report.batch:09d}.json")


def _timestamp(us: int | None):
    from pyspark.sql import functions as F

    if us is None:
        return F.lit(None).cast("timestamp")
    return F.timestamp_micros(F.lit(us))


def _fmt(us: int | None) -> str:
    if us is None:
        return "none"
    import datetime as dt

    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat()
