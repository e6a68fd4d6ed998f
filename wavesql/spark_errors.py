"""Translating Spark's errors into WaveSQL's.

Two moments: an *analysis* error (Spark refuses the SQL a statement was planned into)
becomes a positioned ``WaveSQLError`` pointing into the user's text
(:func:`translate_spark_error`); a *runtime* error (a job failed: a task raised, storage
refused, the JVM went away) is recognised (:func:`is_runtime_error`, :func:`runtime_errors`)
and turned back into the ``WaveSQLError`` a Python worker raised, or a stable code with a
hint (:func:`translate_runtime_error`). Every layer may use this module: it imports no other
WaveSQL module but ``wavesql.errors``.
"""

from __future__ import annotations

import errno
import re
from contextlib import contextmanager

from wavesql.errors import Span, WaveSQLError

_CONDITION_CODES = {
    "UNRESOLVED_COLUMN": "UNKNOWN_COLUMN",
    "UNRESOLVED_FIELD": "UNKNOWN_COLUMN",
    "UNRESOLVED_MAP_KEY": "UNKNOWN_COLUMN",
    "UNRESOLVED_ROUTINE": "UNKNOWN_FUNCTION",
    "TABLE_OR_VIEW_NOT_FOUND": "UNKNOWN_STREAM",
    "AMBIGUOUS_REFERENCE": "AMBIGUOUS_COLUMN",
    "AMBIGUOUS_COLUMN_OR_FIELD": "AMBIGUOUS_COLUMN",
    "DATATYPE_MISMATCH": "TYPE_ERROR",
    "CAST_INVALID_INPUT": "TYPE_ERROR",
    "PARSE_SYNTAX_ERROR": "PARSE_ERROR",
    "PARSE_EMPTY_STATEMENT": "EMPTY_QUERY",
}


def translate_spark_error(error: Exception, sql: str, user_text: str,
                          offset: int | None) -> WaveSQLError:
    """Turn a PySpark exception raised for ``sql`` into a positioned WaveSQLError.

    ``offset`` is where ``sql`` starts inside ``user_text`` when it is the user's own text;
    otherwise (generated SQL) the error's fragment is searched for in the user's text.
    """
    condition = _condition(error)
    params = _params(error)
    code = _CONDITION_CODES.get(condition.split(".")[0], "SPARK_ERROR")
    span = _span(error, sql, user_text, offset)
    message = _first_line(error)
    hint = None
    if code == "UNKNOWN_COLUMN":
        name = params.get("objectName", "").strip("`") or _fragment(error)
        message = f"unknown column `{name}`"
        proposal = params.get("proposal")
        hint = f"did you mean one of {proposal}?" if proposal else None
    elif code == "UNKNOWN_FUNCTION":
        message = f"unknown function `{params.get('routineName', '').strip('`')}`"
    elif code == "AMBIGUOUS_COLUMN":
        name = params.get("name", "").strip("`") or _fragment(error)
        message = f"ambiguous column `{name}`"
        refs = params.get("referenceNames")
        hint = f"qualify it with its input: one of {refs.strip('[]')}" if refs else None
    elif code == "UNKNOWN_STREAM":
        message = f"unknown stream or table `{params.get('relationName', '').strip('`')}`"
    if code == "SPARK_ERROR" and condition:
        hint = f"Spark error condition {condition}"
    # Spark names columns after the relations it was given, WaveSQL's own among them
    message = _INTERNAL_QUALIFIER.sub("", message)
    hint = None if hint is None else _INTERNAL_QUALIFIER.sub("", hint)
    return WaveSQLError(code, message, span, hint, user_text)


#: ``__wavesql_asof_0``.``sym`` -> ``sym``: a relation WaveSQL made (an ASOF join's, a
#: window's pairs) is no name the user wrote or could write
_INTERNAL_QUALIFIER = re.compile(r"`?__wavesql_\w+`?\.")


def _condition(error: Exception) -> str:
    for getter in ("getCondition", "getErrorClass"):
        fn = getattr(error, getter, None)
        if fn is not None:
            try:
                value = fn()
            except Exception:  # noqa: BLE001
                value = None
            if value:
                return value
    return ""


def _params(error: Exception) -> dict:
    fn = getattr(error, "getMessageParameters", None)
    try:
        return dict(fn() or {}) if fn else {}
    except Exception:  # noqa: BLE001
        return {}


def _contexts(error: Exception) -> list:
    fn = getattr(error, "getQueryContext", None)
    try:
        return list(fn() or []) if fn else []
    except Exception:  # noqa: BLE001
        return []


def _fragment(error: Exception) -> str:
    for ctx in _contexts(error):
        try:
            return ctx.fragment() or ""
        except Exception:  # noqa: BLE001
            continue
    return ""


def _span(error: Exception, sql: str, user_text: str, offset: int | None) -> Span | None:
    for ctx in _contexts(error):
        try:
            start, stop, fragment = ctx.startIndex(), ctx.stopIndex(), ctx.fragment()
        except Exception:  # noqa: BLE001 - dataframe contexts have no SQL positions
            continue
        if start is None or start < 0:
            continue
        if offset is not None:
            return Span(offset + start, offset + stop + 1)
        if fragment:
            found = user_text.find(fragment)
            if found >= 0:
                return Span(found, found + len(fragment))
    # Parse errors carry a line/position in the message instead of a context.
    match = re.search(r"line (\d+), pos (\d+)", str(error))
    if match and offset is not None:
        line, pos = int(match.group(1)), int(match.group(2))
        lines = sql.split("\n")
        if line - 1 < len(lines):
            start = offset + sum(len(x) + 1 for x in lines[: line - 1]) + pos
            # "line 1, pos 15" of a 15-character text is its end: an empty span there
            start = min(start, len(user_text))
            return Span(start, min(start + 1, len(user_text)))
    return None


def java_message(error) -> str:
    """The first line of a Py4JJavaError's Java exception message (its error condition
    and SQLSTATE left out), or the error's own text."""
    try:
        text = str(error.java_exception.getMessage() or "")
    except Exception:  # noqa: BLE001 -- the gateway may be gone
        text = ""
    return _first_line(text or error) if text.strip() else _first_line(error)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    text = re.sub(r"^\[[A-Z_.]+\]\s*", "", text)
    return re.sub(r"\s*SQLSTATE: \w+.*$", "", text)


_WORKER_ERROR = re.compile(
    r"(?:SignalError|WavError|ReadError): (?P<message>.+?) \[(?P<code>[A-Z_]+)\]"
    r"(?: \(hint: (?P<hint>.*)\))?$", re.MULTILINE)


#: A worker's ChainError (udfs/fused/evaluate.py): Spark's runtime error (DIVIDE_BY_ZERO,
#: ARITHMETIC_OVERFLOW) where WaveSQL evaluates the expression instead of Spark.
_WORKER_SPARK_ERROR = re.compile(r"ChainError: \[([A-Z_]+)\] (.+)$", re.MULTILINE)


_RAISED_ERROR = re.compile(r"(?P<code>[A-Z_]+): (?P<message>.+?) \[(?P=code)\]", re.DOTALL)
_RAISED_HINTS = {
    "MALFORMED_ROW": "fix or remove the row; a continuous query (Session.stream / INSERT "
                     "INTO) quarantines such rows instead, with the reason",
}

#: Java exception class names (``org.apache.spark.SparkException: ``) before a message.
_JAVA_CLASS = re.compile(r"^(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error|Throwable)\b:?\s*")
#: Spark's wrapper around a task's own failure.
_TASK_FAILURE = re.compile(r"Job aborted due to stage failure: .*?most recent failure: "
                           r"Lost task [^)]*\)(?: \([^)]*\))?: (?P<cause>.*)", re.DOTALL)
_UNAVAILABLE_HINT = ("the query did not finish; start a new session (restart `wavesql`, or "
                     "the notebook kernel). If Spark's JVM died, look for an OutOfMemoryError "
                     "in its log (WAVESQL_SPARK_LOG_LEVEL=WARN) and give the driver more "
                     "memory (spark.driver.memory)")
_STOPPED = ("stopped SparkContext", "SparkContext was shut down", "SparkContext has been shutdown",
            "Answer from Java side is empty", "Error while sending or receiving",
            "Error while receiving", "Connection refused", "closed the connection")


def runtime_error_types() -> tuple[type[BaseException], ...]:
    """The exception classes Spark raises while a query runs: PySpark's own, Py4J's (a
    Java exception PySpark does not convert -- a failed job, a failed write -- arrives as
    ``Py4JJavaError``; a lost JVM as ``Py4JNetworkError`` or a refused connection)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError, ConnectionError)


def is_runtime_error(error: BaseException) -> bool:
    """Whether ``error`` came from Spark running a query (see :func:`runtime_error_types`),
    including a call into a SparkContext that was stopped (PySpark then fails with an
    ``AttributeError`` on its dropped JVM handle) and an I/O error on the way to a JVM that
    no longer answers."""
    if isinstance(error, WaveSQLError):
        return False
    if isinstance(error, runtime_error_types()):
        return True
    if isinstance(error, AttributeError):
        return _context_stopped()
    return isinstance(error, (OSError, EOFError)) and _jvm_gone()


@contextmanager
def runtime_errors():
    """Translate the Spark errors raised inside the block into WaveSQLError.

    Every place a user meets a query's rows or side effects runs it inside this block (the
    CLI, the REPL, the notebook, query files), so a Java failure never reaches them as a
    Py4J stack trace::

        with runtime_errors():
            rows = df.collect()
    """
    try:
        yield
    except Exception as err:
        if not is_runtime_error(err):
            raise
        raise translate_runtime_error(err) from None


def translate_runtime_error(error: BaseException) -> WaveSQLError:
    """A WaveSQLError for an exception Spark raised while *running* a query.

    Errors raised in Python workers (a kernel's SignalError, a WAV file that changed after
    planning) reach the driver only as traceback text; their ``[CODE]`` is recovered from
    it. A lost JVM or a stopped SparkContext is ``SPARK_UNAVAILABLE``. Anything else becomes
    ``SPARK_ERROR`` with the first meaningful line of Spark's (or Java's) message -- for a
    failed task the task's own exception, with its root cause -- never the Java stack.
    """
    from wavesql.errors import ERROR_CODES

    if isinstance(error, WaveSQLError):
        return error
    text = _text(error)
    if text is None or _unavailable(error, text):
        return WaveSQLError("SPARK_UNAVAILABLE", _unavailable_message(error, text),
                            hint=_UNAVAILABLE_HINT)
    local = _filesystem_error(error, text) or _file_or_checkpoint_error(text)
    if local is not None:
        return local
    raised = _RAISED_ERROR.search(text)
    if raised and raised.group("code") in ERROR_CODES:
        # a check compiled into the plan (raise_error), e.g. planner/bad_rows.py
        return WaveSQLError(raised.group("code"), raised.group("message"),
                            hint=_RAISED_HINTS.get(raised.group("code")))
    spark_like = _WORKER_SPARK_ERROR.findall(text)
    if spark_like:  # Spark's own runtime error, raised by a WaveSQL kernel standing in for it
        condition, message = spark_like[-1]
        return WaveSQLError("SPARK_ERROR", message.strip(),
                            hint=f"Spark error condition {condition}")
    found = [m for m in _WORKER_ERROR.finditer(text) if m.group("code") in ERROR_CODES]
    if found:
        m = found[-1]
        return WaveSQLError(m.group("code"), m.group("message"),
                            hint=m.group("hint") or "raised while the query ran, in a Spark task")
    stored = _storage_error(text)
    if stored is not None:
        return stored
    if _WORKER_MEMORY.search(text):
        return WaveSQLError("WORKER_OUT_OF_MEMORY", "a Python task ran out of memory: "
                            + _WORKER_MEMORY.search(text).group(0), hint=_WORKER_MEMORY_HINT)
    condition = _condition(error) if not _is_py4j(error) else ""
    message, java_condition = _java_message(text)
    condition = condition or java_condition
    return WaveSQLError("SPARK_ERROR", message,
                        hint=f"Spark error condition {condition}" if condition else None)


#: A Python worker failing to allocate (numpy, pyarrow or Python itself).
_WORKER_MEMORY = re.compile(r"(?:_ArrayMemoryError|MemoryError|ArrowMemoryError|"
                            r"pyarrow\.lib\.ArrowMemoryError)\b:?[^\n]*")
_WORKER_MEMORY_HINT = ("raise spark.executor.pyspark.memory (each worker's address-space limit),"
                       " or SET wavesql.python.task_memory lower so WaveSQL's passes hold less "
                       "per task (planner/physical/task_memory.py)")
#: A WaveSQLError raised in a Python task (wavesql.storage reading an object store).
_WORKER_WAVESQL_ERROR = re.compile(r"WaveSQLError: error\[(?P<code>[A-Z_]+)\]: (?P<message>.+)$",
                                   re.MULTILINE)
_S3A_HINT = ("check fs.s3a.endpoint, fs.s3a.access.key / fs.s3a.secret.key (or the AWS "
             "default chain) and fs.s3a.path.style.access in Spark's Hadoop settings")
#: Spark's filesystem connectors failing, by what their Java exceptions say: (code, what
#: the pattern means, hint). The location comes from the exception's text.
_STORAGE_FAILURES = (
    (re.compile(r"No FileSystem for scheme \"?(?P<scheme>[\w+.-]+)"), "UNSUPPORTED_SCHEME",
     "Spark has no filesystem for `{scheme}://` locations",
     "add the connector's jars (s3a: `make connectors`, or spark.jars.packages="
     "org.apache.hadoop:hadoop-aws:3.5.0; README, Run on a cluster)"),
    (re.compile(r"ClassNotFoundException: Class (?P<cls>org\.apache\.hadoop\.fs\.[\w.]+) not"),
     "UNSUPPORTED_SCHEME", "Spark lacks the filesystem class {cls}",
     "add the connector's jars (s3a: `make connectors`, or spark.jars.packages="
     "org.apache.hadoop:hadoop-aws:3.5.0; README, Run on a cluster)"),
    (re.compile(r"(?:UnknownStoreException|NoSuchBucket)\b.*?`?(?P<loc>\w+://[^`' ]+)?"),
     "MISSING_BUCKET", "the bucket does not exist", "create it, or fix the bucket's name"),
    (re.compile(r"(?:AccessDeniedException|InvalidAccessKeyId|SignatureDoesNotMatch|"
                r"403 Forbidden)"), "STORAGE_DENIED", "the object store refused the "
     "credentials", _S3A_HINT),
    # Hadoop's RPC client (hdfs://) names the namenode's address, not the location
    (re.compile(r"Call From \S+ to (?P<namenode>\S+) failed on connection exception"),
     "STORAGE_UNREACHABLE", "the HDFS namenode at {namenode} did not answer",
     "check the hdfs:// location's namenode host and port (or fs.defaultFS) and that the "
     "namenode runs"),
    (re.compile(r"(?:java\.net\.ConnectException|Unable to execute HTTP request|"
                r"SdkClientException: Unable to|UnknownHostException)"),
     "STORAGE_UNREACHABLE", "the object store did not answer", _S3A_HINT),
)
_LOCATION = re.compile(r"\b(?:s3a?|s3n|gs|abfss?|hdfs|wasbs?)://[^\s`'\":,]+")


def _storage_error(text: str) -> WaveSQLError | None:
    """A storage failure in a Spark job (the S3A connector's, or WaveSQL's own I/O in a
    Python task) as the stable code wavesql.storage uses, naming the location."""
    from wavesql.errors import ERROR_CODES

    worker = [m for m in _WORKER_WAVESQL_ERROR.finditer(text) if m.group("code") in ERROR_CODES]
    if worker:
        m = worker[-1]
        return WaveSQLError(m.group("code"), m.group("message").strip(),
                            hint="raised while the query ran, in a Spark task")
    head = _head(text)
    for pattern, code, what, hint in _STORAGE_FAILURES:
        m = pattern.search(head)
        if m:
            where = _LOCATION.search(head)
            message = what.format(**{k: v or "" for k, v in m.groupdict().items()})
            return WaveSQLError(code, (f"`{where.group(0)}`: " if where else "") + message,
                                hint=hint)
    return None


#: What a filesystem's refusal says, in Python (errno) and in Java (message): the code.
_FS_ERRNOS = {errno.ENOSPC: "STORAGE_FULL", errno.EDQUOT: "STORAGE_FULL",
              errno.EACCES: "STORAGE_DENIED", errno.EPERM: "STORAGE_DENIED",
              errno.EROFS: "STORAGE_DENIED"}
_FS_MESSAGES = re.compile(
    r"(?P<full>No space left on device|Disk quota exceeded)|"
    r"(?P<denied>Permission denied|Read-only file system|Operation not permitted|"
    r"Mkdirs failed to create)")
#: a local path or file: URI in a Java or Python message
_FS_LOCATION = re.compile(r"(?:file:)?(/[^\s'\"`:,()]+)")
_CHECKPOINT_IN_PLAN = re.compile(
    r"checkpointLocation=(?:file:)?(/[^\s,\]]+?)(?:/(?:offsets|commits|sources|state))?[,\]]")
_FS_HINTS = {
    "STORAGE_FULL": "free space on that filesystem, then run again: a failed micro-batch "
                    "of a continuous query or query file was not committed and is redone",
    "STORAGE_DENIED": "make the location writable by this user, then run again: a failed "
                      "micro-batch of a continuous query or query file was not committed "
                      "and is redone",
}


def _filesystem_error(error: BaseException, text: str) -> WaveSQLError | None:
    """A local (or mounted) filesystem refusing a write -- full, read-only, no permission --
    as ``STORAGE_FULL`` / ``STORAGE_DENIED`` naming the location, whether WaveSQL's own
    Python I/O raised it (an OSError with its errno) or Spark's writer (a Java
    IOException's message)."""
    if isinstance(error, OSError) and error.errno in _FS_ERRNOS:
        code = _FS_ERRNOS[error.errno]
        where = error.filename2 or error.filename
        return WaveSQLError(code, (f"`{where}`: " if where else "") + (
            error.strerror or str(error)), hint=_FS_HINTS[code])
    head = _head(text)
    m = _FS_MESSAGES.search(head)
    if m is None:
        return None
    code = "STORAGE_FULL" if m.group("full") else "STORAGE_DENIED"
    line = next(ln for ln in head.splitlines() if m.group(0) in ln)
    where = _FS_LOCATION.search(line)
    if where is not None:
        return WaveSQLError(code, f"`{where.group(1)}`: {m.group(0)}", hint=_FS_HINTS[code])
    # A write that failed in Spark's own streaming machinery (its offset or commit log: a
    # full disk says only "java.io.IOException: No space left on device", measured on a
    # real full filesystem) names no file; the query's checkpoint, in the plan it prints,
    # is where it was writing
    checkpoint = _CHECKPOINT_IN_PLAN.search(text)
    if checkpoint is not None:
        return WaveSQLError(code, f"`{checkpoint.group(1)}` (the query's checkpoint): "
                                  f"{m.group(0)}", hint=_FS_HINTS[code])
    return WaveSQLError(code, m.group(0), hint=_FS_HINTS[code])


_PARQUET_TYPE = re.compile(
    r"reading file (?P<file>\S+?)\. Data type mismatches when reading Parquet column "
    r"\[(?P<column>[^\]]+)\]\. Expected Spark type (?P<want>[\w()<>,: ]+?), actual Parquet "
    r"type (?P<found>\w+)")
_MALFORMED_LOG = re.compile(r"Failed to read log file (?P<file>\S+?)\. \[MALFORMED_LOG_FILE\]")


def _file_or_checkpoint_error(text: str) -> WaveSQLError | None:
    """A stream's file whose column has another type than declared (Spark's Parquet reader)
    as ``FILE_SCHEMA_MISMATCH``; a damaged file of Spark's own checkpoint logs (offsets,
    commits, sources) as ``CHECKPOINT_CORRUPT``; each naming the file."""
    m = _PARQUET_TYPE.search(text)
    if m is not None:
        return WaveSQLError(
            "FILE_SCHEMA_MISMATCH", f"`{m.group('file')}`: column `{m.group('column')}` is "
            f"{m.group('found')} in the file; the stream declares {m.group('want').upper()}",
            hint="move the file out of the stream's folder (or rewrite it with the declared "
                 "types) and run again; if the producers changed the schema, CREATE OR "
                 "REPLACE STREAM with the new types (and a new checkpoint for continuous "
                 "queries)")
    m = _MALFORMED_LOG.search(text)
    if m is not None:
        return WaveSQLError(
            "CHECKPOINT_CORRUPT", f"`{m.group('file')}`: Spark's checkpoint log file is "
            "malformed (truncated or edited)",
            hint="restore the checkpoint folder from a backup, or start the query with a new "
                 "checkpoint (and a new output folder: the old output would be written again)")
    return None


def _head(text: str) -> str:
    """An exception's text without its Java stack: the first lines and every cause."""
    return text.split("\n\tat ", 1)[0] + "\n" + "\n".join(
        ln for ln in text.splitlines() if ln.startswith("Caused by: "))


def _is_py4j(error: BaseException) -> bool:
    from py4j.protocol import Py4JError

    return isinstance(error, Py4JError)


def _text(error: BaseException) -> str | None:
    """``str(error)``; None when it cannot be had (a Py4JJavaError asks the JVM for its
    text, which fails when the JVM is gone)."""
    try:
        return str(error)
    except Exception:  # noqa: BLE001
        return None


def _context_stopped() -> bool:
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    sc = SparkContext._active_spark_context
    return sc is None or getattr(sc, "_jsc", None) is None


def _jvm_gone() -> bool:
    """Whether Spark's JVM does not answer (a call through the gateway fails); False when
    no gateway was ever started (nothing to have lost)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover
        return False
    gateway = SparkContext._gateway
    if gateway is None:
        return False
    try:
        gateway.jvm.java.lang.System.currentTimeMillis()
    except Exception:  # noqa: BLE001 - any failure here means it is unreachable
        return True
    return False


def _unavailable(error: BaseException, text: str) -> bool:
    from py4j.protocol import Py4JJavaError, Py4JNetworkError

    if isinstance(error, (Py4JNetworkError, ConnectionError)):
        return True
    if isinstance(error, AttributeError):
        return _context_stopped()
    if isinstance(error, (OSError, EOFError)):
        return _jvm_gone()
    if isinstance(error, Py4JJavaError):
        head = text.split("\n\tat ", 1)[0]
        return "Cannot call methods on a stopped SparkContext" in head or (
            "SparkContext was shut down" in head)
    from py4j.protocol import Py4JError

    if isinstance(error, Py4JError):  # e.g. "PythonUtils does not exist in the JVM"
        return any(s in text for s in _STOPPED) or _jvm_gone()
    return False


def _unavailable_message(error: BaseException, text: str | None) -> str:
    if isinstance(error, AttributeError) or (text and "stopped SparkContext" in text):
        return "Spark is not running: its SparkContext was stopped"
    return "lost the connection to Spark (its JVM exited or stopped answering)"


def _java_message(text: str) -> tuple[str, str]:
    """(first meaningful line, error condition) of an error's text: for a Py4JJavaError
    the Java exception's message (not Py4J's ``An error occurred while calling o80...``), a
    failed task's own exception rather than Spark's ``Job aborted`` wrapper, without class
    names, ``[CONDITION]`` and ``SQLSTATE``, followed by the root cause (the last
    ``Caused by``, or a Python worker's exception line) when it says more. Never a stack."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("An error occurred while calling"):
        lines = lines[1:]
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    first = re.sub(r"^:\s*", "", first)
    failure = _TASK_FAILURE.search(first)
    if failure:
        first = failure.group("cause")
    first, condition = _clean(first)
    causes = [ln[len("Caused by: "):] for ln in lines if ln.startswith("Caused by: ")]
    python = [ln.strip() for ln in lines if _PYTHON_ERROR.match(ln.strip())]
    root = causes[-1] if causes else python[-1] if python else ""
    if root:
        root = _clean(root)[0]
        if root and root not in first:
            first = f"{first.rstrip('. ')}: {root}" if first else root
    if len(first) > 600:
        first = first[:597] + "..."
    return first or "Spark failed while running the query", condition


_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception): \S")


def _clean(line: str) -> tuple[str, str]:
    """A message without its Java class name, ``[CONDITION]`` and ``SQLSTATE`` tail."""
    line = _JAVA_CLASS.sub("", line.strip())
    condition = ""
    match = re.match(r"^\[([A-Z_.]+)\]\s*", line)
    if match:
        condition, line = match.group(1), line[match.end():]
    return re.sub(r"\s*SQLSTATE: \w+.*$", "", line).strip(), condition
