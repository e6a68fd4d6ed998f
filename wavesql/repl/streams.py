"""Continuous queries in the REPL: ``STREAM <query>;`` runs one in the foreground, printing
each micro-batch's rows and figures until Ctrl-C; ``STREAM BACKGROUND <query>;`` leaves one
running behind the prompt (``\\status`` shows it, ``\\stop`` stops it, both in
:mod:`wavesql.repl.meta`); ``STREAM REAL-TIME INTO <kafka sink> <query>;`` runs one in
Spark's real-time mode there (streaming/realtime.py).

Every query here runs through :meth:`wavesql.session.Session.stream` with a scratch
checkpoint, and is stopped between micro-batches (:func:`in_batch` says why).
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterable

from rich.text import Text

from wavesql import render
from wavesql.errors import WaveSQLError
from wavesql.repl.jobs import Job, anchor

#: ``STREAM <query>`` / ``STREAM BACKGROUND <query>``: the REPL's continuous-query spelling;
#: ``STREAM REAL-TIME INTO <kafka sink> <query>``: Spark's real-time mode, in the background.
#: The prefix is read where query files read it too (wavesql/dialect/stream_prefix.py).
STREAM_TRIGGER = "every 1 second"


@dataclass
class Background:
    """A continuous query left running behind the prompt (``STREAM BACKGROUND``)."""

    id: int
    text: str
    query: object  # wavesql.streaming.ContinuousQuery
    checkpoint: str
    started: float = field(default_factory=time.time)
    last_batch: int | None = None
    last_columns: list[str] = field(default_factory=list)
    last_rows: list = field(default_factory=list)
    last_cut: bool = False
    stopped: bool = False


class ContinuousQueries:
    """The part of :class:`wavesql.repl.shell.Repl` that starts and stops continuous
    queries; it keeps the background ones in ``background`` (id -> :class:`Background`)."""

    def _start_stream(self, text: str, offset: int, piece: str, match, output,
                      trigger: str = STREAM_TRIGGER):
        """``session.stream`` for a ``STREAM ...`` piece; errors point into ``text``.

        The prefix is blanked rather than cut, so positions in the query the session sees
        are positions in the piece the user typed.
        """
        query = " " * match.end() + piece[match.end():]
        checkpoint = tempfile.mkdtemp(prefix="wavesql-stream-")
        try:
            cq = self.session.stream(query, output=output, checkpoint=checkpoint,
                                     trigger=trigger)
        except WaveSQLError as e:
            shutil.rmtree(checkpoint, ignore_errors=True)
            raise anchor(e, query, text, offset) from None
        except BaseException:
            shutil.rmtree(checkpoint, ignore_errors=True)
            raise
        return cq, checkpoint

    def _stream_foreground(self, job: Job, text: str, offset: int, piece: str, match) -> None:
        """Worker: run a continuous query, emitting batches and figures until Ctrl-C."""
        def output(df, batch_id):
            rows = by_time(df.limit(self.max_rows + 1).collect(), df.columns)
            if rows:
                job.emit(render.table(df.columns, rows[:self.max_rows],
                                      render.numeric_columns(df), style=render.REPL,
                                      title=f"batch {batch_id}"))
                if len(rows) > self.max_rows:
                    job.emit(render.count_note(self.max_rows, True, None, render.REPL))

        cq, checkpoint = self._start_stream(text, offset, piece, match, output)
        job.interrupt_ends = True  # Ctrl-C is how a foreground continuous query ends
        job.on_interrupt = ("stopping after the current micro-batch… (Ctrl-C again stops at "
                            "once)")
        job.emit(Text(f"continuous query running (trigger {STREAM_TRIGGER}); "
                      f"Ctrl-C stops it", style="cyan"))
        reported = 0
        try:
            while True:
                if job.cancelled.is_set() and (job.interrupts > 1 or not in_batch(cq)):
                    break
                if cq.await_termination(0.25):  # it ended by itself (or failed: raises)
                    break
                while reported < len(cq.reports):
                    job.emit(report_line(cq.reports[reported]))
                    reported += 1
        finally:
            cq.stop()
            while reported < len(cq.reports):
                job.emit(report_line(cq.reports[reported]))
                reported += 1
            shutil.rmtree(checkpoint, ignore_errors=True)
        if job.cancelled.is_set():
            job.emit(Text(f"stopped after {len(cq.reports)} batch"
                          f"{'' if len(cq.reports) == 1 else 'es'}", style="cyan"))

    def _start_background(self, job: Job, text: str, offset: int, piece: str, match) -> None:
        """Worker: start a continuous query that keeps running behind the prompt."""
        ident = next(self._next_background)
        holder: dict = {}

        def keep_latest(df, batch_id):  # keep the latest batch for \status <id>
            rows = by_time(df.limit(self.max_rows + 1).collect(), df.columns)
            bg = holder.get("bg")
            if bg is not None:
                bg.last_batch, bg.last_columns = batch_id, df.columns
                bg.last_rows, bg.last_cut = rows[:self.max_rows], len(rows) > self.max_rows

        if match.group(3):  # STREAM REAL-TIME INTO sink: the sink is the output
            output, trigger = match.group(4), "real-time"
        else:
            output, trigger = keep_latest, STREAM_TRIGGER
        cq, checkpoint = self._start_stream(text, offset, piece, match, output, trigger)
        body = piece[match.end():].strip()
        holder["bg"] = self.background[ident] = Background(ident, body, cq, checkpoint)
        mode = f"in real-time mode into {match.group(4)}" if match.group(3) else \
            "in the background"
        job.emit(Text(f"continuous query {ident} running {mode}; \\status {ident} "
                      f"shows it, \\stop {ident} stops it", style="cyan"))

    def _stop_background(self, job: Job, which: Iterable[int] | None = None) -> list[int]:
        """Worker: stop background queries (all, or ``which``), each between micro-batches
        unless Ctrl-C says not to wait."""
        stopped = []
        for ident in list(which if which is not None else self.background):
            bg = self.background.get(ident)
            if bg is None or bg.stopped:
                continue
            try:
                if in_batch(bg.query):
                    job.on_interrupt = "stopping at once…"
                    job.emit(Text(f"query {ident}: waiting for its micro-batch to finish "
                                  f"(Ctrl-C stops it at once)…", style="dim"))
                while in_batch(bg.query) and not job.cancelled.is_set():
                    time.sleep(0.2)
                bg.query.stop()
            except Exception:  # noqa: BLE001 - already gone
                pass
            bg.stopped = True
            shutil.rmtree(bg.checkpoint, ignore_errors=True)
            stopped.append(ident)
        return stopped


def by_time(rows: list, columns: list[str]) -> list:
    """A micro-batch's rows in instant order (the runner delivers them unordered)."""
    if "_time" not in columns:
        return rows
    at = columns.index("_time")
    return sorted(rows, key=lambda r: (r[at] is None, r[at] or dt.datetime.min,
                                       [str(v) for v in r]))


def in_batch(cq) -> bool:
    """Whether the continuous query is inside a micro-batch.

    The REPL stops queries between micro-batches: stopping one mid-batch interrupts the
    Python ``foreachBatch`` call, which fails the batch (``cq.error`` becomes a
    SPARK_ERROR) and makes Spark's stream thread print a StackOverflowError trace on the
    terminal.
    """
    try:
        return cq.busy
    except Exception:  # noqa: BLE001 - stopped or gone: not in a batch
        return False


def report_line(report) -> Text:
    """One micro-batch's figures (a :class:`wavesql.streaming.BatchReport`)."""
    late = report.late + report.no_time
    return Text(
        f"batch {report.batch}: progress {fmt_us(report.progress_us)} · in {report.rows_in} "
        f"(late {late}) · out {report.rows_out} (final {report.final_out}) · state "
        f"{report.buffered} rows · {report.seconds:.1f} s", style="dim")


def fmt_us(us: int | None) -> str:
    """An instant in microseconds since the epoch as a timestamp (``none yet`` for None)."""
    if us is None:
        return "none yet"
    return render.format_datetime(dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us))
