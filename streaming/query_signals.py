"""Continuous queries over a signal defined by a query (``CREATE SIGNAL acc (x FLOAT, ...)
RATE 64 HZ OPTIONS (sample_column = 'n') AS SELECT n, ax AS x, ... FROM readings WHERE
device = 'a'``): the signal's samples are the rows its query makes of a catalog stream's new
files, placed on the timeline as the batch read places them (sources/query_signal.py).

What runs
---------
The signal's query must be row by row over ONE catalog stream of files -- filters,
projections, computed columns, each row made from one stream row alone: the rule a
continuous SYNC's control and a continuous RESAMPLE over a view follow
(:func:`.plan.row_by_row_stream`). Then the query over a micro-batch's new stream rows gives
exactly the signal's new samples, whatever came before. Anything else (an aggregate, a
join, an OVER window, a second stream, a table, a Kafka stream) is refused before anything
runs, with the error placed in the signal's query (its text and ``signal <name>``).

Each micro-batch (Spark's file source over the stream's folder; the batch's files read
whole once complete, as the re-evaluating runner reads them: ``runner._input_rows``,
:mod:`.files`):

1. the stream's rows: a malformed CSV/JSON row goes to the quarantine with the file and
   the reason (as in every continuous query over a stream); punctuation rows (its
   ``PROGRESS COLUMN``) are not data, as in batch;
2. the signal's query over them, lowered as the batch read lowers it
   (``planner.lower._query_signal_rows`` with the batch's rows standing in for the stream);
   each row's sample number computed as in batch (:func:`.query_signal.sample_numbers`: a
   NULL or fractional position is ``MALFORMED_ROW``; a timestamp rounds to the nearest
   sample); channel NULLs are NaN;
3. a row whose sample lies in a window already emitted (below the grid position up to
   which windows were emitted) is **late**: it goes to the late sink (``_stream`` the
   signal, ``_reason``, ``_row`` the query's row as JSON) and is counted, never placed --
   placing it would change a row already delivered as final. Failing the query instead
   would stop every later sample for one straggler, and the late sink is where every
   continuous query puts rows that come too late;
4. the other rows, in sample order, become gap-free blocks: two rows holding one sample,
   in the batch or one still pending from an earlier batch, are ``OVERLAPPING_SAMPLES``,
   as the batch read of the same rows fails (nothing of the micro-batch is committed);
5. from there it is the Kafka-signal micro-batch (:class:`.kafka_signals.KafkaSignalQuery`,
   whose ``_run_batch`` this class reuses whole; only how a batch's input becomes placed
   blocks differs): the blocks join the pending ones, the complete windows are evaluated
   and emitted once, final; finite look-back functions (``lowpass``, ``fir``, stable
   ``iir``) run in parallel partitions warmed up on the kept look-back blocks, unbounded
   ones (``cfar``, ``degap``, a pole on the unit circle) in order from the states saved in
   the checkpoint; the pending blocks (``pending.npz``) and the grid position are committed
   with the batch's state.

Why the Kafka-signal machinery rather than the table-signal reader: the table reader places
*files* (each one's rows learnt from the file, new files after all read ones), but a query's
rows have no file of their own -- a filter may keep any rows of any file, and the samples
exist only once the query has run over the batch's rows. Rows arriving per micro-batch,
each with its sample number, are what the Kafka machinery places (blocks with first sample
numbers); a run of rows is such a block.

When a window is final
----------------------
The stream's rows are taken to come in sample order, file after file (one producer, as one
Kafka partition): a window is complete once its last sample has arrived, and a gap is
settled once a later sample has -- the partial window before it is then emitted, and
samples arriving later into an emitted window are late (3). Within a micro-batch the rows
may come in any order. The stream has no end: the partial window after the last sample
waits for the next one (the batch read cuts it to the data); so do detectors' pending
outputs. Every emitted row equals the batch query's over the same rows.

Exactly once: a micro-batch re-run after a crash reads the same files (Spark's log), starts
from the state the batch before committed and writes the same output, late records and
state, each named by the batch id.

Memory: a micro-batch's samples (its new rows, position and channels) are collected on the
driver to be placed, as a Kafka micro-batch's records are; bound a batch with
``max_files_per_trigger``.
"""

from __future__ import annotations

from wavesql.planner import bad_rows
from wavesql.sqltext import quote

from . import checkpoint_plan
from .kafka_signals import Arrivals, KafkaSignalQuery
from .plan import Input
from .query_rows import place_rows, source_stream
from .report import BatchReport
from .runner import ReEvaluatingQuery, malformed_records

__all__ = ["QuerySignalQuery", "source_stream"]

class QuerySignalQuery(KafkaSignalQuery):
    """A continuous query over a signal defined by a query (module docstring)."""

    # the batch's files read whole once complete, and when they arrived: as the
    # re-evaluating runner does (streaming/files.py)
    _input_rows = ReEvaluatingQuery._input_rows
    _arrivals = ReEvaluatingQuery._arrivals

    def _start(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        from .source import stream_source

        checkpoint_plan.check_query(self, "query-signal")
        signal = self.plan.signal.scan.signal
        stream = source_stream(self.spark, self.session.catalog, signal)
        inp = Input(0, stream)
        self.inputs = [inp]  # names the stream in quarantine records (query.py)
        frame = stream_source(self.spark, stream, max_files)
        columns = [F.col(quote(c)) for c in frame.columns if c != "__file"]
        # the shape _input_rows reads when Spark's file log lists no file for the batch
        source = frame.select(F.lit(0).alias("__src"), F.struct(*columns).alias(inp.column),
                              "__file")
        return self._start_writer(source, trigger)

    def _timeline(self) -> str:
        return f"query:{self.plan.signal.scan.signal.name}"

    def _arrivals_placed(self, spark, batch_df, batch_id: int, mine: dict, pending: list,
                         report: BatchReport) -> Arrivals:
        """The batch's stream rows through the signal's query, placed with the ``pending``
        blocks (module docstring, steps 1-4); fills the report's row counts."""
        from pyspark.sql import functions as F

        from wavesql.planner.lower import Runtime, _query_signal_rows

        inp = self.inputs[0]
        s = inp.stream
        read, gone = [], []
        rows = self._input_rows(spark, batch_df, inp, batch_id, read, gone)
        quarantine = self._changed_files(spark, batch_id, read)
        quarantine += self._vanished_files(spark, batch_id, gone)
        rows = rows.persist()
        try:
            if bad_rows.CORRUPT_COLUMN in rows.columns:
                corrupt = F.col(bad_rows.CORRUPT_COLUMN).isNotNull()
                malformed = malformed_records(rows.where(corrupt), s)
                count = malformed.count()
                if count:
                    quarantine.append(spark.createDataFrame(malformed.collect(),
                                                            malformed.schema))
                report.quarantined = report.rows_in = count
                rows = rows.where(~corrupt)
            if s.progress_column is not None:  # punctuation is not data (as in batch)
                punct = F.col(quote(s.progress_column)).isNotNull()
                report.punctuation = rows.where(punct).count()
                report.rows_in += report.punctuation
                rows = rows.where(~punct)
            keep = [F.col(quote(c.name)) for c in s.columns]
            signal = self.plan.signal.scan.signal
            rt = Runtime(spark, self.session.catalog, self.text,
                         streams={s.key: rows.select(*keep)})
            got = place_rows(spark, signal, _query_signal_rows(signal, rt), batch_id,
                             mine["end"], pending, report)
        finally:
            rows.unpersist()
        placed, late = got
        reached = dict(mine.get("partitions") or {})
        ends = [p.end_sample for p in placed] + [reached.get("0", 0)]
        reached["0"] = max(ends)  # one producer, in sample order (module docstring)
        return Arrivals(placed, reached, None, False, self._arrivals(batch_id), quarantine,
                        late)
