"""What every running continuous query shares, whichever runner evaluates it.

:class:`ContinuousQuery` is the object :meth:`wavesql.Session.stream` returns: one Spark
streaming query whose micro-batches go to :meth:`ContinuousQuery._run_batch`, with the
public API (``await_termination``, ``stop``, ``status``, ``metrics``, ``progress_us``)
and the parts of a micro-batch that are the same for every runner -- delivering the
result (a batch folder committed whole, or the user's function), the ``_progress``
record, the report, the state folder committed by its ``state.json``, and the quarantine
records of input files that changed after they were read. A runner is a subclass that
says how the streaming query is built (``_start``) and what a micro-batch does
(``_run_batch``): the re-evaluating runner (:class:`.runner.ReEvaluatingQuery`), the
signal runners (:mod:`.signals`, :mod:`.kafka_signals`) and the state-store runner
(:mod:`.stateful.query`). Which one a query gets is decided in :mod:`.launch`.

Stopping is coordinated with the micro-batch in progress through a lock, so that
``stop()`` ends the query between batches rather than in the middle of one.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict

from wavesql import faults, storage
from wavesql.errors import WaveSQLError

from . import sinks
from .metrics import summarize
from .plan import Plan
from .report import FINAL, REASON, BatchReport


class ContinuousQuery:
    """A running continuous query (see the module docstring). Create with
    :meth:`wavesql.Session.stream`; a runner (subclass) defines ``_start`` and
    ``_run_batch``."""

    def __init__(self, session, text, bound, plan: Plan, *, emit_changes, output,
                 checkpoint: str, late: str, trigger, max_files, clock,
                 output_format: str = "parquet", late_format: str = "parquet",
                 keep_replaced: bool = False):
        self.session = session
        self.keep_replaced = keep_replaced
        self.spark = session.spark
        self.text = text
        self.bound = bound
        self.plan = plan
        self.inputs = list(plan.inputs)
        self.emit_changes = emit_changes
        self.output = output
        #: the format of each batch folder under ``output`` (streaming/sinks.py)
        self.output_format = output_format
        self.checkpoint = checkpoint
        self.late_path = late
        self.late_format = late_format
        #: malformed input rows, with the file, the raw record and the reason
        self.quarantine_path = storage.join(checkpoint, "quarantine")
        self.clock = clock
        self.reports: list[BatchReport] = []
        self.error: BaseException | None = None
        self._stopping = False
        #: stop() was called on a running query (its interruption is not a failure)
        self._stopped_while_active = False
        self._batch_lock = threading.Lock()
        self._query = self._start(trigger, max_files)

    # -- public ------------------------------------------------------------------------
    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query (availableNow: until the input present at start is done);
        re-raises the error that stopped it, as a WaveSQLError where possible.

        With ``timeout`` (seconds): returns False if the query is still running then, as
        Spark's ``awaitTermination`` does. Without it, the wait is bounded only if
        ``WAVESQL_AWAIT_TIMEOUT_SECONDS`` is set (the test suite sets it, so a hung query
        fails its test instead of the whole run): past it the query is stopped and
        ``STREAM_TIMEOUT`` raised."""
        from pyspark.errors import StreamingQueryException

        default = timeout is None and await_timeout_seconds()
        try:
            done = self._query.awaitTermination(default or timeout)
        except StreamingQueryException as err:
            if isinstance(self.error, WaveSQLError):
                raise self.error from None
            if self._stopped_while_active:
                # Spark does not always recognise its own stop as one: a stop that lands
                # while a Python runner (transformWithStateInPandas) is still starting ends
                # the query with STREAMING_PYTHON_RUNNER_INITIALIZATION_COMMUNICATION_FAILURE.
                # The user asked for the stop; the interrupted batch is redone on restart.
                return True
            # failed outside a micro-batch (Spark reading its checkpoint, its source)
            from wavesql.spark_errors import translate_runtime_error

            raise translate_runtime_error(err) from None
        if self.error is not None:
            raise self.error
        if default and done is False:
            self.stop(wait=0)
            raise WaveSQLError(
                "STREAM_TIMEOUT", f"the continuous query was still running after {default:g} s "
                "(WAVESQL_AWAIT_TIMEOUT_SECONDS); it has been stopped",
                hint="raise WAVESQL_AWAIT_TIMEOUT_SECONDS (unset: wait as long as it takes), "
                     "or pass await_termination(timeout=...) and check its result")
        return done if done is not None else True

    @property
    def busy(self) -> bool:
        """Whether a micro-batch is running right now."""
        return bool(self._query.isActive and (self._query.status or {}).get("isTriggerActive"))

    def stop(self, wait: float = 60.0) -> None:
        """Stop the query, after the micro-batch in progress (up to ``wait`` seconds).

        Stopping Spark in the middle of a batch interrupts its driver-side jobs (and the
        batch is redone on restart anyway); waiting gives a clean stop and a complete last
        batch. ``wait=0`` stops at once.
        """
        # The batch lock closes the race between "no batch is running" and stop(): a
        # trigger firing in between finds _stopping set and does nothing (its offsets are
        # not committed, so a restart reads those rows again).
        self._stopping = True
        locked = self._batch_lock.acquire(timeout=max(wait, 0.0)) if wait > 0 else False
        try:
            self._stopped_while_active = self._stopped_while_active or self._query.isActive
            self._query.stop()
        finally:
            if locked:
                self._batch_lock.release()

    @property
    def is_active(self) -> bool:
        return self._query.isActive

    @property
    def progress_us(self) -> int | None:
        """The query's progress after the last batch (microseconds since 1970), or None."""
        state = self._load_state(None)
        return state.get("shown", state["progress"]) if state else None

    def status(self) -> dict:
        """Live figures (see :mod:`wavesql.streaming.metrics`): progress, input and
        processing rates (rows, and samples for signal queries), state rows and bytes,
        result latency (last, p50, p99, max), totals; plus Spark's own rates of its last
        trigger (``spark_input_rows_per_second``, ``spark_processed_rows_per_second``)."""
        last = self._query.lastProgress or {}
        figures = self.metrics
        figures["progress_us"] = self.progress_us
        figures["spark_input_rows_per_second"] = last.get("inputRowsPerSecond")
        figures["spark_processed_rows_per_second"] = last.get("processedRowsPerSecond")
        return figures

    @property
    def metrics(self) -> dict:
        """The live figures of :func:`wavesql.streaming.metrics.summarize` over the
        batches this query ran."""
        return summarize(list(self.reports))

    # -- setup -------------------------------------------------------------------------
    def _start(self, trigger: str, max_files: int | None):
        """Start the Spark streaming query (its batches through :meth:`_start_writer`)."""
        raise NotImplementedError

    def _start_writer(self, source, trigger: str):
        """Run ``source`` through this query's micro-batch callback on ``trigger``."""
        # Spark plans each batch's reads after this (streaming/stateful/query.py
        # ``_unchanged_since_listed``: a batch re-run after a restart reads files as now)
        self.started_ms = int(time.time() * 1000)
        writer = (source.writeStream.foreachBatch(self._guarded_batch)
                  .option("checkpointLocation", storage.join(self.checkpoint, "offsets")))
        if trigger == "availableNow":
            writer = writer.trigger(availableNow=True)
        elif trigger.startswith("every "):
            writer = writer.trigger(processingTime=trigger[len("every "):])
        else:
            raise WaveSQLError("INVALID_OPTION", f"unknown trigger `{trigger}`",
                               hint="'availableNow' or 'every 10 seconds'")
        return writer.start()

    def _guarded_batch(self, batch_df, batch_id: int) -> None:
        # Never block on the lock: stop() holds it while it waits for Spark, and Spark waits
        # for this callback -- so look at _stopping (set before stop() takes the lock).
        while not self._batch_lock.acquire(timeout=0.1):
            if self._stopping:
                raise _Stopping(f"batch {batch_id} not run: the query is stopping")
        with _Held(self._batch_lock):
            if self._stopping:
                raise _Stopping(f"batch {batch_id} not run: the query is stopping")
            try:
                self._run_batch(batch_df, batch_id)
                faults.point("batch-done")
            except BaseException as err:  # noqa: BLE001 - surfaced by await_termination
                from wavesql.spark_errors import translate_runtime_error

                if not self._stopping:  # an interruption by stop() is not the query's error
                    self.error = translate_runtime_error(err) \
                        if not isinstance(err, WaveSQLError) else err
                raise

    # -- one micro-batch ---------------------------------------------------------------
    def _run_batch(self, batch_df, batch_id: int) -> None:
        raise NotImplementedError

    def _changed_files(self, spark, batch_id: int, read_files: list[str]) -> list:
        """Quarantine records (``_record`` NULL) for files earlier batches read that changed
        since -- their new content is not read -- and the record of this batch's files."""
        from . import files

        changed = files.changed_since_read(self.checkpoint, batch_id)
        files.record_read(self.checkpoint, batch_id, read_files, changed)
        return self._file_records(spark, [
            (path if storage.is_remote(path) else f"file://{path}",
             files.describe_change(b, then, now)) for path, b, then, now in changed])

    def _vanished_files(self, spark, batch_id: int, gone: list[str],
                        during: bool = False) -> list:
        """Quarantine records (``_record`` NULL) for the files listed for this batch that
        were removed before it read them (streaming/files.py ``wait_until_ready``) -- or,
        ``during``, while it read them."""
        from . import files

        return self._file_records(spark, [(uri, files.describe_vanished(batch_id, during))
                                          for uri in gone])

    def _file_records(self, spark, entries: list[tuple[str, str]]) -> list:
        """Quarantine records of whole files (``(file, reason)``; ``_record`` NULL), each
        with the input stream the file belongs to."""
        from . import files

        if not entries:
            return []
        rows = [(next((inp.stream.name for inp in self.inputs
                       if files.belongs(uri, inp.stream.path)), None), uri, None, reason)
                for uri, reason in entries]
        return [spark.createDataFrame(
            rows, "_stream string, _file string, _record string, " + f"{REASON} string")]

    def _deliver_counted(self, out, batch_id: int, report: BatchReport, by_final: bool) -> None:
        """:meth:`_deliver` ``out`` and set the report's rows out (``by_final``: counted per
        ``_final``; else every row is final)."""
        if not (self.emit_changes or callable(self.output) or self.output_format != "parquet"):
            # every row final, Parquet: computed once, by the write, counted from its files
            report.rows_out = report.final_out = sinks.parquet_rows(self._deliver(out, batch_id))
            return
        out = out.persist()
        if by_final:
            counted = {r[0]: r[1] for r in out.groupBy(FINAL).count().collect()}
            report.rows_out = sum(counted.values())
            report.final_out = counted.get(True, 0)
        else:
            report.rows_out = report.final_out = out.count()
        self._deliver(out, batch_id)
        out.unpersist()

    def _finish(self, report: BatchReport, began: float, arrived: list[float]) -> None:
        """Close a micro-batch's report (latency from its inputs' arrival, ``began`` its
        start on the monotonic clock), write its ``_progress`` record and keep it."""
        report.finished_at = self.clock()
        if arrived:
            report.latency_s = max(0.0, report.finished_at - min(arrived))
        report.seconds = time.monotonic() - began
        self._write_report(report)
        self.reports.append(report)

    def _deliver(self, out, batch_id: int) -> list[str]:
        """Hand the batch's result to the output: the user's function, or a batch folder
        committed whole (streaming/sinks.py: Spark's own commit moves files into place one
        by one, so a reader, or a process killed mid-write, would see part of a batch); a
        batch re-run after a crash replaces the earlier attempt, so each batch's rows
        appear once. Returns the batch's files."""
        if callable(self.output):
            self.output(out, batch_id)
            return []
        return sinks.commit(out, self.output, batch_id, self.output_format,
                            keep_replaced=self.keep_replaced)

    # -- state ---------------------------------------------------------------------------
    def _state_dir(self, batch_id: int) -> str:
        return storage.join(self.checkpoint, "state", f"{batch_id:09d}")

    def _load_state(self, batch_id: int | None) -> dict | None:
        """The committed state of the latest batch before ``batch_id`` (None: any)."""
        done = sorted((int(name) for name, is_dir in
                       storage.children(storage.join(self.checkpoint, "state"))
                       if is_dir and name.isdigit()), reverse=True)
        for b in done:
            if batch_id is not None and b >= batch_id:
                continue
            where = storage.join(self._state_dir(b), "state.json")
            try:
                text = storage.read_text(where)
            except FileNotFoundError:
                continue  # a batch killed before its state was committed
            try:
                state = json.loads(text)
            except ValueError:
                state = None
            if not isinstance(state, dict):  # (committed whole: so edited or damaged since)
                raise WaveSQLError(
                    "CHECKPOINT_CORRUPT", f"`{where}` is not the state this query committed "
                    "(not a JSON object: truncated or edited)",
                    hint="restore the checkpoint folder from a backup, or start the query "
                         "with a new checkpoint (and a new output folder: the old output "
                         "would be written again)")
            state["dir"] = self._state_dir(b)
            return state
        return None

    def _commit_state(self, batch_id: int, state: dict) -> None:
        """Write ``state.json``, the commit point of a batch's state (whole or not at all:
        a rename locally, one object on a store), and keep the last two batches' state."""
        storage.write_text(storage.join(self._state_dir(batch_id), "state.json"),
                           json.dumps(state))
        faults.point("state-written")
        for name, is_dir in storage.children(storage.join(self.checkpoint, "state")):
            if name.isdigit() and int(name) < batch_id - 1:
                storage.delete(storage.join(self.checkpoint, "state", name), recursive=True)

    def _write_report(self, report: BatchReport) -> None:
        """Progress next to the output, so a reader can tell complete from incomplete."""
        if callable(self.output):
            return
        storage.write_text(storage.join(self.output, "_progress",
                                        f"batch={report.batch:09d}.json"),
                           json.dumps(asdict(report)))
        faults.point("progress-written")


def await_timeout_seconds() -> float | None:
    """The default bound on :meth:`ContinuousQuery.await_termination` (None: unbounded)."""
    text = os.environ.get("WAVESQL_AWAIT_TIMEOUT_SECONDS", "").strip()
    try:
        value = float(text) if text else 0.0
    except ValueError:
        raise WaveSQLError("INVALID_OPTION", f"WAVESQL_AWAIT_TIMEOUT_SECONDS={text!r} is not a "
                           "number of seconds") from None
    return value if value > 0 else None


class _Held:
    """Release an already acquired lock on leaving the block."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self.lock

    def __exit__(self, *exc):
        self.lock.release()


class _Stopping(RuntimeError):
    """Raised in a micro-batch that starts while stop() is under way (never recorded)."""
