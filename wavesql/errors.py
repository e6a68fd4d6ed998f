"""WaveSQL's one error type and the table of its stable codes.

Every problem a user can cause -- a typo in a query, an unknown stream, bad DDL, a query that
cannot run in streaming mode -- is raised as a :class:`WaveSQLError` *before* any Spark job
starts. It carries a stable ``UPPER_SNAKE`` code (scripts may match on it), a message, the
span of the offending text (character offsets into the query, from which line and column are
derived), and a hint. ``str(err)`` renders the query line with a caret underline::

    error[UNKNOWN_STREAM]: unknown stream `trdes`
     --> line 1, column 15
      |
    1 | SELECT * FROM trdes
      |               ^^^^^
      = hint: did you mean `trades`?

The codes and their one-line meaning live in :data:`ERROR_CODES` below (one place, like
PySpark's error-conditions file); constructing an error with an unlisted code is a bug and
fails loudly.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable

#: Stable error codes. Add new ones here; never rename or reuse one.
ERROR_CODES: dict[str, str] = {
    # front end
    "PARSE_ERROR": "the text is not valid WaveSQL / Spark SQL",
    "EMPTY_QUERY": "no statement was given",
    "UNSUPPORTED_STATEMENT": "the statement parses but WaveSQL cannot run it (yet)",
    # names
    "UNKNOWN_STREAM": "a FROM/JOIN names a stream, signal, view or table that does not exist",
    "UNKNOWN_COLUMN": "a column reference does not resolve",
    "UNKNOWN_FUNCTION": "a function name is neither a Spark function nor a signal function",
    "AMBIGUOUS_COLUMN": "a column reference matches more than one input",
    # DDL / catalog
    "DUPLICATE_OBJECT": "a stream, signal, view or sink with that name already exists",
    "DUPLICATE_COLUMN": "a column name is declared twice",
    "UNKNOWN_TYPE": "a column type is not a Spark SQL type WaveSQL supports",
    "UNKNOWN_FORMAT": "a FORMAT clause names an unsupported source format",
    "MISSING_PATH": "a FROM path does not exist",
    # storage (wavesql.storage): locations that are URIs
    "UNSUPPORTED_SCHEME": "a location's scheme (s3a://, gs://, ...) has no filesystem here",
    "STORAGE_UNREACHABLE": "an object store's endpoint did not answer",
    "MISSING_BUCKET": "a location's bucket or container does not exist",
    "STORAGE_DENIED": "an object store refused the configured credentials, or a filesystem "
                      "refused access (permissions, a read-only or immutable location)",
    "STORAGE_FULL": "a filesystem had no space left (or the user's quota was exceeded)",
    "STORAGE_ERROR": "an object store failed a read or write for another reason",
    # Kafka (sources/kafka.py): live streams and sinks
    "KAFKA_UNREACHABLE": "no Kafka broker answered at a stream's or sink's bootstrap servers",
    "MISSING_TOPIC": "a Kafka stream's or sink's topic does not exist",
    "KAFKA_ERROR": "a Kafka broker refused a request for another reason",
    "NOT_INSTALLED": "a Spark connector WaveSQL needs is not on Spark's class path",
    "OVERLAPPING_BLOCKS": "two sample blocks of a Kafka signal claim the same samples",
    "OVERLAPPING_SAMPLES": "two rows of a signal stored as a table hold the same sample number",
    "INVALID_RATE": "a signal rate is zero, negative or not a number",
    "INVALID_OPTION": "a DDL clause has an invalid value",
    "INVALID_SETTING": "a wavesql.* setting (SET) has a value it cannot take",
    "UNKNOWN_OBJECT": "DROP/DESCRIBE names an object that does not exist",
    "WRONG_OBJECT_KIND": "DROP STREAM names a signal (or similar)",
    "CATALOG_CORRUPT": "the catalog file is not a readable WaveSQL catalog",
    "CATALOG_TOO_NEW": "the catalog file was written by a newer WaveSQL",
    "CATALOG_BUSY": "the catalog stayed locked by another process for too long",
    "CATALOG_UNREACHABLE": "the shared catalog's Hive metastore did not answer, or none is "
                           "configured (--catalog spark needs hive.metastore.uris)",
    "CATALOG_ERROR": "the shared catalog's Hive metastore refused a request",
    "CONFLICT": "another process changed the same definition concurrently",
    # types and planning
    "TYPE_ERROR": "an expression has the wrong type for where it is used",
    "SCHEMA_MISMATCH": "the inputs of MERGE do not have the same columns and types",
    "ZIP_ORDER": "an input of ZIP has no order to pair rows by (no event time, no BY column)",
    "NOT_IMPLEMENTED": "the construct parses but is not implemented yet",
    "STREAMING_RULE": "the query cannot run over an unbounded stream as written",
    "UNDEFINED_ORDER": "a stateful signal function carries state from row to row over rows "
                       "the query gives no order (a SYNC result's)",
    # signals (raised by kernels in wavesql.udfs, positioned by the planner)
    "EMPTY_SEGMENT": "a signal function that needs samples got a segment of width 0",
    "SEGMENT_TOO_SHORT": "a wavelet level or spectrogram length is too large for the segment",
    "INVALID_ARGUMENT": "a signal-function argument is out of range (cutoff above Nyquist, ...)",
    "LITERAL_REQUIRED": "a column was given where a signal function needs a constant",
    "OUT_OF_RANGE": "subseg asked for samples outside the segment",
    "RATE_MISMATCH": "signals or segments of different rates were combined",
    "SEGMENT_ORDER": "a segment overlaps or comes before the previous one of the same signal",
    "SIGNAL_GAP": "a gap in sample numbers where the query asked for none (degap 'error')",
    "OVERLAPPING_SEGMENTS": "two segments of one signal (one rewindow key) hold the same sample "
                            "number",
    "NON_FINITE_SAMPLES": "a signal function failed on NaN or infinite samples (see the "
                          "non-finite policy in udfs/registry.py)",
    "MISALIGNED_CHANNELS": "the channels (SigSeg columns) of one row differ in start or width",
    "CORRUPT_FILE": "a data file is not readable (a WAV's bad header or missing chunks, a "
                    "damaged Parquet file)",
    "TRUNCATED_FILE": "a signal file ends before its header says it should",
    "UNSUPPORTED_ENCODING": "a WAV encoding WaveSQL does not read (ADPCM, mu-law, ...)",
    "CHANNEL_MISMATCH": "a file has a different number of channels than the signal declares",
    "MALFORMED_ROW": "a CSV/JSON row does not parse as the stream's columns (batch queries "
                     "fail on it; continuous queries quarantine it)",
    "INCOMPLETE_FILE": "an input file of a continuous query was still being written when its "
                       "micro-batch had to read it (nothing of the batch is committed)",
    "FILE_SCHEMA_MISMATCH": "a stream's file does not hold the stream's columns as declared (a "
                            "column of another type, or -- a continuous query's new file -- "
                            "a declared column missing)",
    "FILE_CHANGED": "a file a continuous query already read changed afterwards (grew, shrank "
                    "or was rewritten)",
    "OVERLAPPING_FILES": "two files of one signal claim the same samples",
    "QUERY_CHANGED": "a signal defined by a query returned other rows when read than when "
                     "its runs were planned (a non-deterministic query, data written meanwhile)",
    "INVALID_FILE_TIMESTAMP": "a file name does not carry a readable start time",
    "OUT_OF_ORDER_FILE": "a new file sorts before one a stream already read (it would rewrite "
                         "the timeline)",
    # running
    "JAVA_MISSING": "no usable Java runtime was found for Spark",
    "SPARK_ERROR": "Spark rejected the query; the message is Spark's",
    "WORKER_OUT_OF_MEMORY": "a Spark Python worker ran out of the memory it may use "
                            "(spark.executor.pyspark.memory, or the machine's)",
    "SPARK_UNAVAILABLE": "the connection to Spark was lost (its JVM exited) or its "
                         "SparkContext was stopped while a query ran",
    "STREAM_TIMEOUT": "a continuous query was still running when the wait for it "
                      "(WAVESQL_AWAIT_TIMEOUT_SECONDS) ran out",
    "CHECKPOINT_CORRUPT": "a continuous query's checkpoint holds a file that cannot be read "
                          "(truncated or edited)",
    "CHECKPOINT_MISMATCH": "a continuous query was started on a checkpoint written by a "
                           "different query plan (or an older runner)",
    "PATH_ESCAPES": "a relative path in a query file leads out of the file's folder and of the "
                    "folder it is run from (`..`), which the run did not allow",
    "FILE_NOT_FOUND": "a query file passed to execute_file does not exist",
    # query files, sinks and schedules (wavesql run / schedule)
    "SINK_MISMATCH": "an INSERT INTO query does not produce the columns its sink declares",
    "RUN_IN_PROGRESS": "the same query file (or INSERT job) is already running elsewhere",
    "INVALID_SCHEDULE": "a `-- schedule:` header is not a valid cron expression",
    "NOT_SCHEDULABLE": "a scheduled query file holds a statement that never ends (STREAM "
                       "REAL-TIME INTO): run it as a service with `wavesql run`",
}


@dataclass(frozen=True)
class Span:
    """Half-open character range ``[start, end)`` into the query text."""

    start: int
    end: int

    @staticmethod
    def of(node) -> "Span | None":
        """Best span of a sqlglot node: its own position meta, else its first positioned child."""
        for candidate in _walk_positioned(node):
            meta = getattr(candidate, "meta", None) or {}
            if "start" in meta and "end" in meta:
                return Span(meta["start"], meta["end"] + 1)
        return None


def _walk_positioned(node):
    if node is None:
        return
    yield node
    walk = getattr(node, "walk", None)
    if walk is not None:
        for child in walk():
            if child is not node:
                yield child


class WaveSQLError(Exception):
    """A user-facing error with a stable code, a position in the query and a hint.

    Parameters
    ----------
    code : str
        One of :data:`ERROR_CODES`.
    message : str
        What went wrong, in one sentence.
    span : Span, optional
        Where in ``query`` the problem is.
    hint : str, optional
        How to fix it ("did you mean `mic`?").
    query : str, optional
        The full query text, for the caret excerpt. Often attached later by the
        entry point with :meth:`with_query`.
    source : str, optional
        Name of the file the query came from (``execute_file``), shown in the location.

    Examples
    --------
    >>> err = WaveSQLError("UNKNOWN_STREAM", "unknown stream `trdes`", Span(14, 19),
    ...                    hint="did you mean `trades`?", query="SELECT * FROM trdes")
    >>> err.line, err.column
    (1, 15)
    """

    def __init__(
        self,
        code: str,
        message: str,
        span: Span | None = None,
        hint: str | None = None,
        query: str | None = None,
        source: str | None = None,
        line_offset: int = 0,
    ):
        if code not in ERROR_CODES:
            raise ValueError(f"unregistered WaveSQL error code {code!r}")
        self.code = code
        self.message = message
        self.span = span
        self.hint = hint
        self.query = query
        self.source = source
        # When a statement is one of several in a file, its line numbers are shifted.
        self.line_offset = line_offset
        super().__init__(self.render())

    # -- position -------------------------------------------------------------------------
    @property
    def line(self) -> int | None:
        if self.span is None or self.query is None:
            return None
        return self.query.count("\n", 0, self.span.start) + 1 + self.line_offset

    @property
    def column(self) -> int | None:
        if self.span is None or self.query is None:
            return None
        line_start = self.query.rfind("\n", 0, self.span.start) + 1
        return self.span.start - line_start + 1

    def with_query(self, query: str, source: str | None = None, line_offset: int = 0,
                   offset: int = 0) -> "WaveSQLError":
        """Return this error re-anchored in ``query`` (spans shift by ``offset`` chars)."""
        span = self.span
        if span is not None and offset:
            span = Span(span.start + offset, span.end + offset)
        return WaveSQLError(self.code, self.message, span, self.hint, query,
                            source or self.source, line_offset)

    # -- rendering ------------------------------------------------------------------------
    def render(self) -> str:
        out = [f"error[{self.code}]: {self.message}"]
        if self.span is not None and self.query is not None:
            where = f"line {self.line}, column {self.column}"
            if self.source:
                where = f"{self.source}:{self.line}:{self.column}"
            out.append(f" --> {where}")
            out.extend(self._excerpt())
        elif self.source:
            out.append(f" --> {self.source}")
        if self.hint:
            out.append(f"  = hint: {self.hint}")
        return "\n".join(out)

    def _excerpt(self) -> list[str]:
        assert self.span is not None and self.query is not None
        text = self.query
        start = min(self.span.start, len(text))
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        if line_end < 0:
            line_end = len(text)
        src = text[line_start:line_end].replace("\t", " ")
        end = max(min(self.span.end, line_end), start + 1)
        number = str(self.line)
        pad = " " * len(number)
        caret = " " * (start - line_start) + "^" * (end - start)
        return [f"{pad} |", f"{number} | {src}", f"{pad} | {caret}"]

    def __str__(self) -> str:  # re-render: query may have been attached after construction
        return self.render()

    def to_dict(self) -> dict:
        """Machine-readable form (for the CLI's ``--json`` and notebooks)."""
        return {
            "code": self.code,
            "message": self.message,
            "line": self.line,
            "column": self.column,
            "hint": self.hint,
            "source": self.source,
        }


def did_you_mean(name: str, candidates: Iterable[str], what: str = "") -> str | None:
    """A hint naming the closest candidates to ``name``, or listing what exists."""
    pool = sorted({c for c in candidates if c})
    close = difflib.get_close_matches(name.lower(), [c.lower() for c in pool], n=3, cutoff=0.6)
    if close:
        lookup = {c.lower(): c for c in pool}
        names = " or ".join(f"`{lookup[c]}`" for c in close)
        return f"did you mean {names}?"
    if pool:
        shown = ", ".join(pool[:12]) + (", ..." if len(pool) > 12 else "")
        return f"available {what or 'names'}: {shown}"
    return None
