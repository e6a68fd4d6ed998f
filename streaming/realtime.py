"""Real-time mode: a row-by-row continuous query from a Kafka stream to a Kafka sink, run by
Spark's Real-time Mode (``trigger(realTime=...)``, Spark 4.1+) -- records flow through as
they arrive instead of waiting for a micro-batch, for milliseconds of latency.

What runs in it (``why_not`` says why a plan does not): a query that is row by row (filters,
projections, scalar functions -- a threshold alarm on a sensor topic) over **one Kafka
stream**, to a **Kafka sink**. Spark's real-time mode supports no file sink and no
``foreachBatch``, so the re-evaluating runner's per-batch work (late and quarantine sinks,
progress records) cannot ride along; what each guarantee becomes here:

* every result row is final as it comes (``_final = true``); ``_progress`` is NULL: there
  are no micro-batch boundaries to promise progress at;
* a row-by-row result does not depend on lateness, so no row is held back or set aside
  as late;
* a malformed payload **stops the query** with ``MALFORMED_ROW`` naming its topic,
  partition and offset (there is no quarantine sink to send it to) -- run the query in
  micro-batches to quarantine bad records instead;
* delivery is at least once (Spark's Kafka sink); a record's key is the SHA-256 of its row
  (a real-time query has no batch to number its rows in), so equal rows share a key --
  select ``_partition, _offset`` to give each row its own.

Spark asks for the ``update`` output mode here; a row-by-row query's rows are appended
either way.

Spellings: ``trigger="real-time"`` (Python), ``STREAM REAL-TIME INTO <sink> <query>;`` in the
REPL (wavesql/repl/streams.py) and in query files, which ``wavesql run`` then runs as a
service until SIGINT/SIGTERM (wavesql/services.py).
"""

from __future__ import annotations

from wavesql.errors import WaveSQLError
from wavesql.sqltext import quote

#: The real-time trigger's checkpoint interval: how often offsets are committed (records
#: flow continuously in between).
DEFAULT_INTERVAL = "5 seconds"


def parse_trigger(trigger: str) -> str | None:
    """``"real-time"`` or ``"real-time 10 seconds"`` -> the checkpoint interval; else None."""
    text = trigger.strip().lower()
    if not text.startswith("real-time"):
        return None
    rest = trigger.strip()[len("real-time"):].strip()
    return rest or DEFAULT_INTERVAL


def why_not(plan, output) -> str | None:
    """Why a continuous plan cannot run in real-time mode (None: it can)."""
    if plan.mode != "rows":
        article = "an" if plan.mode[0] in "aeiou" else "a"
        return (f"it is {article} {plan.mode} query; real-time mode runs row-by-row queries "
                "only (filters, projections)")
    if len(plan.inputs) != 1:
        return "it reads several streams; real-time mode reads one"
    stream = plan.inputs[0].stream
    if stream.source != "kafka":
        return f"stream {quote(stream.name)} is files; real-time mode reads a Kafka stream"
    if output is None or getattr(output, "source", None) != "kafka":
        return "its output is not a Kafka sink; real-time mode writes to a Kafka sink"
    return None


class RealTimeQuery:
    """A running real-time query (the public API of
    :class:`~wavesql.streaming.query.ContinuousQuery`, without micro-batch reports)."""

    def __init__(self, query, checkpoint: str):
        self._query = query
        self.checkpoint = checkpoint
        self.reports: list = []  # no micro-batches: nothing to report per batch
        self.error = None

    def await_termination(self, timeout: float | None = None) -> bool:
        from wavesql.spark_errors import translate_runtime_error

        try:
            done = self._query.awaitTermination(timeout)
        except Exception as err:  # noqa: BLE001 - surfaced as a WaveSQLError
            self.error = translate_runtime_error(err)
            raise self.error from None
        return True if done is None else done

    @property
    def is_active(self) -> bool:
        return self._query.isActive

    @property
    def progress_us(self) -> int | None:
        return None

    @property
    def busy(self) -> bool:
        return False  # records flow continuously: there is no batch to wait for

    def stop(self, wait: float = 60.0) -> None:
        self._query.stop()

    def status(self) -> dict:
        """The figures ``ContinuousQuery.status`` has, from Spark's progress of the
        real-time query's checkpoint intervals (no progress, no state, nothing late)."""
        progress = list(self._query.recentProgress or [])
        last = progress[-1] if progress else {}
        rows_in = sum(int(p.get("numInputRows") or 0) for p in progress)
        rows_out = sum(int((p.get("sink") or {}).get("numOutputRows") or 0) for p in progress)
        return {"mode": "real-time", "batches": len(progress), "progress_us": None,
                "rows_in": rows_in, "late": 0, "no_time": 0, "quarantined": 0,
                "rows_out": max(rows_out, 0), "buffered": 0, "state_bytes": 0,
                "input_rows_per_second": last.get("inputRowsPerSecond"),
                "processed_rows_per_second": last.get("processedRowsPerSecond"),
                "latency_p50_s": None, "latency_p99_s": None}


def start(session, bound, plan, stmt, sink, checkpoint: str, interval: str) -> RealTimeQuery:
    """Start ``bound`` (a row-by-row query over one Kafka stream) in real-time mode,
    writing to Kafka sink ``sink``."""
    from pyspark.sql import functions as F

    from wavesql import storage
    from wavesql.planner import bad_rows
    from wavesql.planner.lower import Runtime, lower
    from wavesql.sources import kafka

    reason = why_not(plan, sink)
    if reason is not None:
        raise WaveSQLError("STREAMING_RULE", f"this query cannot run in real-time mode: "
                           f"{reason}", hint="run it in micro-batches (trigger 'every 1 "
                           "second'); EXPLAIN STREAM says how it runs")
    from . import checkpoint_plan

    checkpoint_plan.check(checkpoint, checkpoint_plan.mark_of("real-time", bound, plan))
    spark = session.spark
    stream = plan.inputs[0].stream
    rows = kafka.parse(kafka.load(spark, stream, streaming=True), stream)
    names = [c.name for c in stream.columns]
    rows = bad_rows.fail_on_malformed(rows, names, where="__file").drop("__file")
    if stream.progress_column is not None:  # punctuation rows are not data
        rows = rows.where(f"{quote(stream.progress_column)} IS NULL")
    rt = Runtime(spark, session.catalog, stmt.text, streams={stream.key: rows})
    result = lower(bound, rt)
    result = result.withColumn("_final", F.lit(True)).withColumn(
        "_progress", F.lit(None).cast("timestamp"))
    source, _ = kafka.split_options(sink.options)
    options = {k: v for k, v in source.items() if k.startswith("kafka.")}
    out = kafka.row_records(result, sink.format)
    writer = (out.writeStream.format("kafka").options(**options).option("topic", sink.path)
              .option("checkpointLocation", storage.join(checkpoint, "offsets"))
              .outputMode("update"))
    try:
        query = writer.trigger(realTime=interval).start()
    except Exception as err:  # noqa: BLE001 - Spark's refusal, as a WaveSQL error
        text = str(err)
        if "REAL_TIME_MODE_TRIGGER_INTERVAL" in text or "realTime" in text:
            raise WaveSQLError("INVALID_OPTION", f"real-time trigger `{interval}`: "
                               f"{text.splitlines()[0][:240]}",
                               hint="e.g. trigger='real-time 5 seconds' (Spark's minimum: "
                                    "spark.sql.streaming.realTimeMode.minBatchDuration)") \
                from None
        raise
    return RealTimeQuery(query, checkpoint)
