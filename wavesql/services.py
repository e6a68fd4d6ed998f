"""Query files as services: ``STREAM REAL-TIME INTO <kafka sink> <query>;`` in a file that
``wavesql run`` runs.

A query file's ``INSERT INTO`` statements are jobs that process what has arrived and stop
(:mod:`wavesql.jobs`). A real-time query (Spark's real-time mode, streaming/realtime.py)
never stops, so a file holding one runs as a **long-running service**:

1. every other statement of the file runs first, in order (``CREATE STREAM``, ``CREATE
   SINK``, ``INSERT INTO`` jobs ...), whatever its place among them;
2. then each real-time statement starts, in the file's order -- all of them, each its own
   Spark query, with the same checks and errors as the REPL's spelling (``EXPLAIN STREAM``
   says whether a plan can; one that cannot is ``STREAMING_RULE`` at its statement, and the
   statements started before it are stopped);
3. they run until the process gets SIGINT or SIGTERM (or ``run_file``'s ``stop()`` says
   so): every query is then stopped and the run ends ``ok`` (``wavesql run`` exits 0). A
   second signal stops at once. If one query fails, the others are stopped and the run
   ends ``failed`` with that query's error (exit 1).

Each statement's checkpoint is kept like a Kafka sink's ``INSERT INTO`` job's -- under
``kafka_sinks/<sink>/_wavesql/<job id>/`` under the state location (wavesql/jobs.py
``state_root``: next to an SQLite catalog by default), or the sink's ``checkpoint`` option, the job id a hash of the file and the statement (wavesql/jobs.py) -- so a service
restarted later continues from the offsets its last run committed (delivery stays at least
once: records since the last checkpoint interval are sent again, with their keys).

``wavesql schedule`` refuses a file with a real-time statement (``NOT_SCHEDULABLE``: a run
that never ends would hold the file's lock for ever), and a query file has no use for the
REPL's ``STREAM <query>`` / ``STREAM BACKGROUND <query>`` (``UNSUPPORTED_STATEMENT``): both
are found before any statement runs, without Spark (:func:`real_time_statements`).

When SIGTERM reaches the whole process group (systemd's default ``KillMode``), Spark's JVM
stops by itself at the same moment; a stop that was asked for still ends the run ``ok``
(the checkpoint is Spark's, written at each interval). ``KillMode=mixed`` lets WaveSQL stop
the queries first.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass
from typing import Callable

from wavesql.dialect.stream_prefix import StreamPrefix, stream_prefix
from wavesql.errors import WaveSQLError

__all__ = ["RealTimeStatement", "real_time_statements", "refuse_repl_only",
           "refuse_in_schedule", "sink_of", "start", "StopRequest", "serve", "figures",
           "without"]


@dataclass(frozen=True)
class RealTimeStatement:
    """One ``STREAM REAL-TIME INTO <sink> <query>`` of a file: offsets into the file's text."""

    prefix: StreamPrefix
    start: int  # the statement (without its ``;``)
    end: int
    text: str  # the statement's text

    @property
    def sink(self) -> str:
        return self.prefix.sink

    @property
    def query_span(self) -> tuple[int, int]:
        return self.prefix.query_start, self.end


def real_time_statements(text: str) -> list[RealTimeStatement]:
    """The real-time statements of query file text ``text`` (no Spark, nothing runs).

    Raises ``UNSUPPORTED_STATEMENT`` at a ``STREAM <query>`` or ``STREAM BACKGROUND
    <query>`` (the REPL's: they show micro-batches at the prompt), and ``PARSE_ERROR`` where
    the text cannot be split into statements.

    >>> [s.sink for s in real_time_statements("CREATE SINK a TO KAFKA 't' OPTIONS "
    ...     "(bootstrap = 'h:9092') FORMAT json; STREAM REAL-TIME INTO a SELECT 1")]
    ['a']
    """
    from wavesql.dialect import split_statements

    found = []
    for span in split_statements(text):
        prefix = stream_prefix(text, span.start, span.end)
        if prefix is None:
            continue
        refuse_repl_only(prefix, text)
        found.append(RealTimeStatement(prefix, span.start, span.end,
                                       text[span.start:span.end]))
    return found


def refuse_repl_only(prefix: StreamPrefix, text: str) -> None:
    """``UNSUPPORTED_STATEMENT`` for the REPL's ``STREAM <query>`` / ``STREAM BACKGROUND
    <query>`` in a query file."""
    if not prefix.real_time:
        raise WaveSQLError(
            "UNSUPPORTED_STATEMENT", f"`{prefix.spelling} <query>` is the REPL's: it shows a "
            "continuous query's micro-batches at the prompt", prefix.span,
            hint="in a query file, INSERT INTO <sink> <query> runs it as a job (what has "
                 "arrived, then stop); STREAM REAL-TIME INTO <kafka sink> <query> runs a "
                 "row-by-row query as a service", query=text)


def refuse_in_schedule(text: str, source: str | None = None) -> None:
    """``NOT_SCHEDULABLE`` at the first real-time statement of ``text``, if it has one
    (other problems of the text are left to its runs to report)."""
    from wavesql.dialect import split_statements

    found = [p for p in (stream_prefix(text, span.start, span.end)
                         for span in split_statements(text, lenient=True))
             if p is not None and p.real_time]
    if found:
        raise WaveSQLError(
            "NOT_SCHEDULABLE", "a scheduled file cannot hold STREAM REAL-TIME INTO: a "
            "real-time query never ends, so the run would never finish",
            found[0].span, query=text, source=source,
            hint="run the file as a service with `wavesql run FILE` (it runs until SIGINT or "
                 "SIGTERM), and keep the scheduled statements in a file of their own")


def without(text: str, statements: list[RealTimeStatement]) -> str:
    """``text`` with ``statements`` blanked (newlines kept): every other statement where it
    was, for the parser."""
    out = list(text)
    for s in statements:
        for i in range(s.start, s.end):
            if out[i] not in "\r\n":
                out[i] = " "
    return "".join(out)


def sink_of(catalog, prefix: StreamPrefix, text: str):
    """The Kafka sink of a real-time statement's prefix in ``catalog`` (its ``SinkDef``);
    errors at its name in ``text``."""
    from wavesql.catalog import objects as cat
    from wavesql.errors import did_you_mean

    name = prefix.sink
    defn = catalog.get(name)
    if not isinstance(defn, cat.SinkDef):
        raise WaveSQLError(
            "UNKNOWN_STREAM", f"STREAM REAL-TIME INTO `{name}`: no such sink",
            prefix.sink_span, query=text,
            hint=did_you_mean(name, catalog.names("SINK"), "sinks")
            or f"CREATE SINK {name} TO KAFKA 'topic' OPTIONS (bootstrap = 'host:9092') "
               "FORMAT json")
    if defn.source != "kafka":
        raise WaveSQLError(
            "STREAMING_RULE", f"this query cannot run in real-time mode: its output "
            f"`{name}` is not a Kafka sink; real-time mode writes to a Kafka sink",
            prefix.sink_span, query=text,
            hint="STREAM REAL-TIME INTO a sink created TO KAFKA; INSERT INTO a file sink runs "
                 "the query as a job")
    return defn


def start(session, statement: RealTimeStatement, text: str, sink, checkpoint: str):
    """Start one real-time statement of file text ``text`` (errors point into it) into
    ``sink`` (:func:`sink_of`); returns the running query (streaming/realtime.py
    ``RealTimeQuery``). The query is what the REPL's spelling starts: the same checks, the
    same ``STREAMING_RULE`` for a plan real-time mode cannot run."""
    from wavesql.planner.insert import blank_outside

    query = blank_outside(text, [statement.query_span])
    try:
        return session.stream(query, output=sink.name, checkpoint=checkpoint,
                              trigger="real-time")
    except WaveSQLError as err:
        if err.span is not None:
            raise
        # an error of the whole plan (real-time mode cannot run it): at the statement
        raise WaveSQLError(err.code, err.message, statement.prefix.span, err.hint,
                           text) from None


class StopRequest:
    """SIGINT and SIGTERM, while in the block (on the main thread), as a request to stop:
    ``is_set()`` turns true; a second signal raises ``KeyboardInterrupt`` (stop at once)."""

    def __init__(self, say: Callable[[str], None] | None = None):
        self.say = say
        self._event = threading.Event()
        self._previous: dict = {}

    def is_set(self) -> bool:
        return self._event.is_set()

    def _handle(self, signum, frame) -> None:
        if self._event.is_set():
            raise KeyboardInterrupt
        if self.say is not None:
            self.say(f"{signal.Signals(signum).name}: stopping the real-time queries (again "
                     "to stop at once)")
        self._event.set()

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._handle)
                              for sig in (signal.SIGINT, signal.SIGTERM)}
        return self

    def __exit__(self, *exc) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)


def serve(queries: list, stopping: Callable[[], bool], poll: float = 0.5) -> None:
    """Wait while ``queries`` run, until ``stopping()``; then stop them all and return.
    When one fails first, stop the others and raise its error (a ``WaveSQLError``); a
    failure once a stop was asked for (the JVM stopped by the same signal) is that stop."""
    failure = None
    try:
        while failure is None and not stopping():
            for cq in queries:
                try:
                    ended = cq.await_termination(poll / max(len(queries), 1))
                except WaveSQLError as err:
                    failure = err
                    break
                except Exception as err:  # noqa: BLE001 - the JVM went away, or alike
                    from wavesql.spark_errors import translate_runtime_error

                    failure = translate_runtime_error(err)
                    break
                if ended:
                    failure = WaveSQLError(
                        "SPARK_ERROR", "a real-time query ended by itself (its Spark query "
                        "was stopped outside WaveSQL)", hint="run the file again to restart "
                        "it from its checkpoint")
                    break
                if stopping():
                    break
    finally:
        for cq in queries:
            try:
                cq.stop()
            except Exception:  # noqa: BLE001 - already stopped, or the JVM is gone
                pass
    if failure is not None and not stopping():
        raise failure


def figures(queries: list) -> tuple[int, int] | None:
    """(rows in, rows out) of the real-time queries, from the progress Spark reported at
    their checkpoint intervals; None when it reported none yet (best effort)."""
    rows_in = rows_out = intervals = 0
    for cq in queries:
        try:
            status = cq.status()
        except Exception:  # noqa: BLE001 - the query or the JVM is gone
            continue
        intervals += status.get("batches") or 0
        rows_in += status.get("rows_in") or 0
        rows_out += status.get("rows_out") or 0
    return (rows_in, rows_out) if intervals else None
