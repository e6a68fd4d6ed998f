"""The interactive ``wavesql`` shell: a prompt_toolkit REPL in the spirit of psql, DuckDB's
shell and the Flink SQL client.

What it does
------------
* **Editing**: syntax highlighting (:class:`WaveSQLLexer`, Pygments' SQL lexer plus WaveSQL's
  words), multi-line statements -- Enter inserts a newline until the buffer holds a complete
  statement ending in ``;`` (meta-commands need none) -- and a persistent history in
  ``~/.wavesql_history`` (``$WAVESQL_HISTORY`` overrides it).
* **Completion** on Tab (:class:`WaveSQLCompleter`): keywords, catalog objects, their columns
  (``name.`` or an alias restricts to one object), signal functions and Spark functions, read
  from the live catalog and refreshed after every statement (so after DDL).
* **Results** as aligned tables with the row count and the time; long results are cut to
  ``--max-rows`` / ``\\rows N`` rows with a note; signal segments print compactly as
  ``⟨start=4096 rate=44100 n=4096⟩``.
* **Batch queries** run in a worker thread under their own Spark job group, so the main
  thread stays free to draw a progress bar (from ``statusTracker()``) and to turn Ctrl-C into
  ``cancelJobGroup`` -- the query is cancelled, the REPL stays.
* **Continuous queries**: ``STREAM <query>;`` runs the query with :meth:`Session.stream`
  (trigger every second), printing each micro-batch's rows and figures until Ctrl-C stops it;
  ``STREAM BACKGROUND <query>;`` leaves it running behind the prompt, for ``\\status`` and
  ``\\stop``; ``STREAM REAL-TIME INTO <kafka sink> <query>;`` runs one in Spark's real-time
  mode there (streaming/realtime.py).
* **Errors** never end the REPL: a :class:`WaveSQLError` prints with its caret excerpt and
  hint, a Spark runtime error goes through :func:`translate_runtime_error`.

Threads and Ctrl-C
------------------
The main thread never calls into the JVM while a statement runs: every Spark call happens
in a worker or poller thread, and the main thread only waits on Python events and prints.
While a job runs, SIGINT (Ctrl-C with the terminal in cooked mode) only sets the job's
"cancelled" flag, which the helper threads act on; an exception raised wherever the main
thread happens to be could leave a Py4J connection holding an unread answer or rich's live
display running. PySpark's own SIGINT handler (``cancelAllJobs``) is replaced for the
REPL's lifetime: it would also kill the micro-batches of background continuous queries;
cancelling the statement's job group is precise.

Non-interactive use (``wavesql -c``, piped stdin, ``run``, ``check``) never comes here; see
:mod:`wavesql.cli`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import queue
import re
import shutil
import signal
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from prompt_toolkit.completion import Completer, Completion
from pygments.lexer import inherit, words
from pygments.lexers.sql import SqlLexer
from pygments.token import Keyword, Name
from rich.console import Console
from rich.table import Table
from rich.text import Text

from wavesql.errors import WaveSQLError

# -- vocabulary ----------------------------------------------------------------------------

#: Words WaveSQL adds to Spark SQL (DDL clauses, windows, relation-to-stream, emit/late,
#: signal joins, the REPL's own STREAM prefix). Highlighted as keywords and completed.
WAVESQL_KEYWORDS = (
    "STREAM", "STREAMS", "SIGNAL", "SIGNALS", "SINK", "SINKS", "VIEWS", "SAMPLES", "SLIDE",
    "RANGE", "ROWS", "NOW", "UNBOUNDED", "ISTREAM", "DSTREAM", "RSTREAM", "EMIT", "FINAL",
    "CHANGES", "LATE", "INTO", "SYNC", "MISSING", "RESAMPLE", "ASOF", "WATERMARK", "PROGRESS",
    "HEARTBEAT", "EVENT", "TIME", "RATE", "HZ", "KHZ", "SEGMENT", "EPOCH", "FORMAT", "OPTIONS",
    "COLUMN", "PARTITION", "REPLICATE", "TRUNCATE", "BACKGROUND", "IR", "AST", "KAFKA",
    "REALTIME",
)

#: The Spark SQL words worth completing (the full reserved-word list would mostly be noise).
SQL_KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "QUALIFY",
    "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "OUTER", "CROSS", "SEMI", "ANTI", "ON", "USING",
    "LATERAL", "VIEW", "EXPLODE", "UNION", "INTERSECT", "EXCEPT", "ALL", "DISTINCT", "AS",
    "WITH", "CASE", "WHEN", "THEN", "ELSE", "END", "AND", "OR", "NOT", "IN", "IS", "NULL",
    "LIKE", "RLIKE", "BETWEEN", "EXISTS", "ASC", "DESC", "NULLS", "FIRST", "LAST", "OVER",
    "WINDOW", "PRECEDING", "FOLLOWING", "CURRENT", "ROW", "INTERVAL", "CAST", "TRUE", "FALSE",
    "CREATE", "REPLACE", "TEMPORARY", "DROP", "IF", "SHOW", "DESCRIBE", "EXPLAIN", "EXTENDED",
    "FORMATTED", "CODEGEN", "COST", "INSERT", "OVERWRITE", "VALUES", "TABLE", "TABLES", "PIVOT",
    "TO", "SECOND", "SECONDS", "MINUTE", "MINUTES", "HOUR", "HOURS", "DAY", "DAYS",
    "MILLISECOND", "MILLISECONDS", "MICROSECOND", "MICROSECONDS", "STRING", "DOUBLE", "FLOAT",
    "INT", "BIGINT", "BOOLEAN", "TIMESTAMP", "DATE", "ARRAY", "MAP", "STRUCT", "DECIMAL",
)

#: Meta-commands: name -> (argument synopsis, one-line help). The order is \help's order.
META_COMMANDS: dict[str, tuple[str, str]] = {
    "\\streams": ("", "list every catalog object (streams, signals, views, sinks)"),
    "\\d": ("[name]", "describe a stream, signal, view or sink (no name: like \\streams)"),
    "\\explain": ("[mode] <query>", "show the plan; mode IR (default), AST, SPARK, EXTENDED ..."),
    "\\timing": ("[on|off]", "toggle showing the elapsed time of each statement"),
    "\\rows": ("[n]", "show or set how many rows a result shows"),
    "\\status": ("[id]", "live figures of continuous queries (with an id: its last batch)"),
    "\\stop": ("[id|all]", "stop a background continuous query (default: all)"),
    "\\help": ("", "this help"),
    "\\q": ("", "quit (also Ctrl-D, `quit`, `exit`)"),
}
_META_ALIASES = {"\\describe": "\\d", "\\?": "\\help", "\\h": "\\help", "\\quit": "\\q"}

#: ``STREAM <query>`` / ``STREAM BACKGROUND <query>``: the REPL's continuous-query spelling.
#: No WaveSQL or Spark statement starts with the word STREAM (``CREATE STREAM`` and
#: ``ISTREAM (...)`` do not match), so the prefix is unambiguous.
#: ``STREAM REAL-TIME INTO <kafka sink> <query>``: Spark's real-time mode, in the background.
_STREAM_PREFIX = re.compile(r"\A(\s*STREAM\s+)(BACKGROUND\s+)?(?:(REAL-?TIME)\s+INTO\s+(\w+)\s+)?",
                            re.IGNORECASE)
_STREAM_TRIGGER = "every 1 second"

_EXPLAIN_MODES = ("AST", "IR", "SPARK", "EXTENDED", "FORMATTED", "CODEGEN", "COST")
_NUMERIC_TYPES = ("byte", "short", "integer", "long", "float", "double", "decimal")


#: What can follow `[` after a stream or signal (CQL and sample windows).
_WINDOW_WORDS = ("NOW", "PARTITION", "RANGE", "ROWS", "SAMPLES")


class WaveSQLLexer(SqlLexer):
    """Pygments' SQL lexer with WaveSQL's words as keywords and ``\\meta`` commands."""

    name = "WaveSQL"
    aliases = ["wavesql"]
    filenames = ["*.wsql"]
    # Rules listed here are tried before the inherited SQL rules (``inherit``), so a WaveSQL
    # word is a Keyword even where plain SQL would call it a Name (SAMPLES, HZ, ...).
    tokens = {
        "root": [
            (r"\\[a-zA-Z?]+", Keyword.Pseudo),
            (words(WAVESQL_KEYWORDS, prefix=r"\b", suffix=r"\b"), Keyword),
            (r"`[^`]*`", Name.Variable),
            inherit,
        ],
    }


# -- statement text --------------------------------------------------------------------------

def _scan(text: str) -> tuple[list[int], int, int]:
    """Where the statement separators are.

    Returns the offsets of the ``;`` outside strings and comments, the offset of the last
    character that is not whitespace or comment (-1 if none), and where the string, quoted
    name or block comment the text ends inside of begins (-1: it ends outside any).
    """
    semis: list[int] = []
    last = -1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"`":
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`":  # Spark SQL strings take backslash escapes
                    j += 2
                    continue
                if text[j] == c:
                    if j + 1 < n and text[j + 1] == c:  # a doubled quote is a quote
                        j += 2
                        continue
                    break
                j += 1
            if j >= n:
                return semis, n - 1, i
            last, i = j, j + 1
            continue
        if text.startswith("--", i):
            j = text.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                return semis, last, i
            i = j + 2
            continue
        if c == ";":
            semis.append(i)
        if not c.isspace():
            last = i
        i += 1
    return semis, last, -1


def statement_complete(text: str) -> bool:
    """Whether ``text`` ends with a statement terminator (``;`` outside strings/comments).

    >>> statement_complete("SELECT 1;"), statement_complete("SELECT ';'"), \
        statement_complete("SELECT 1; -- done")
    (True, False, True)
    """
    semis, last, open_at = _scan(text)
    return open_at < 0 and last >= 0 and last in semis


def split_statements(text: str) -> list[tuple[int, str]]:
    """The statements of ``text`` as ``(offset, text)`` pairs, without their ``;``; pieces
    holding only whitespace and comments are left out.

    >>> split_statements("SELECT 1; -- x\\nSELECT ';' ;")
    [(0, 'SELECT 1'), (9, " -- x\\nSELECT ';' ")]
    """
    semis, _, _ = _scan(text)
    out, start = [], 0
    for end in semis + [len(text)]:
        piece = text[start:end]
        if _scan(piece)[1] >= 0:
            out.append((start, piece))
        start = end + 1
    return out


def _ready(text: str) -> bool:
    """Whether Enter should run the buffer (else it inserts a newline)."""
    stripped = text.strip()
    if not stripped or stripped.startswith("\\") or stripped.lower() in ("quit", "exit"):
        return True
    return statement_complete(text)


# -- values and tables -----------------------------------------------------------------------

def _is_sigseg(value) -> bool:
    fields = getattr(value, "__fields__", None)
    return bool(fields) and {"start", "rate", "samples"} <= set(fields)


def _is_spectrum(value) -> bool:  # fft's struct<start, rate, n, re, im>
    fields = getattr(value, "__fields__", None)
    return bool(fields) and {"start", "rate", "n", "re", "im"} <= set(fields)


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def format_value(value, max_items: int = 8, nested: bool = False) -> str:
    """One cell as text: signal segments and spectra compact, long arrays cut to
    ``max_items``, structs and maps inline, floats inside them to 6 significant digits.

    >>> from pyspark.sql import Row
    >>> format_value(Row(start=4096, rate=44100.0, samples=[0.0] * 4096))
    '⟨start=4096 rate=44100 n=4096⟩'
    >>> format_value(list(range(10)))
    '[0, 1, 2, 3, 4, 5, 6, 7, … 10 items]'
    """
    if value is None:
        return "NULL"
    if _is_sigseg(value) or _is_spectrum(value):
        rate = value["rate"]
        rate = _number(rate) if rate is not None else "NULL"
        if _is_spectrum(value):
            bins = len(value["re"]) if value["re"] is not None else 0
            return f"⟨spectrum start={value['start']} rate={rate} n={value['n']} bins={bins}⟩"
        samples = value["samples"]
        return f"⟨start={value['start']} rate={rate} n={len(samples) if samples else 0}⟩"
    fields = getattr(value, "__fields__", None)
    if fields is not None:  # a struct (pyspark Row)
        return "{" + ", ".join(f"{k}: {format_value(value[k], max_items, True)}"
                               for k in fields) + "}"
    if isinstance(value, (list, tuple)):
        items = [format_value(v, max_items, True) for v in value[:max_items]]
        if len(value) > max_items:
            items.append(f"… {len(value)} items")
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        shown = list(value.items())[:max_items]
        more = f", … {len(value)} entries" if len(value) > max_items else ""
        return "{" + ", ".join(f"{format_value(k, max_items, True)}: "
                               f"{format_value(v, max_items, True)}" for k, v in shown) + more + "}"
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, dt.datetime):
        return _datetime(value)
    if isinstance(value, float):
        return f"{value:.6g}" if nested else repr(value)
    return str(value)


def rows_table(columns: list[str], rows: Iterable, numeric: Iterable[bool] = (),
               title: str | None = None) -> Table:
    """A rich table of ``rows``; numeric columns right-aligned, NULL dimmed."""
    numeric = list(numeric) or [False] * len(columns)
    table = Table(header_style="bold", title=title, title_justify="left", title_style="bold")
    for name, is_num in zip(columns, numeric):
        table.add_column(name, justify="right" if is_num else "left", overflow="fold")
    for row in rows:
        table.add_row(*(Text("NULL", style="dim") if v is None else Text(format_value(v))
                        for v in row))
    return table


def _count_note(shown: int, cut: bool, elapsed: float | None) -> Text:
    what = (f"first {shown} rows shown, more were cut (\\rows N shows more)" if cut
            else f"{shown} row{'' if shown == 1 else 's'}")
    if elapsed is not None:
        what += f", {elapsed:.2f} s"
    return Text(f"({what})", style="dim")


def error_text(err: WaveSQLError) -> Text:
    """``str(err)`` (message, caret excerpt, hint) with the first line in red."""
    first, _, rest = str(err).partition("\n")
    text = Text(first, style="bold red")
    if rest:
        text.append("\n" + rest)
    return text


def _datetime(value: dt.datetime) -> str:
    """``2024-05-01 12:00:03.5``: ISO with a space, fractional seconds without trailing 0s."""
    text = value.isoformat(sep=" ")
    return text.rstrip("0") if "." in text else text


def _fmt_us(us: int | None) -> str:
    if us is None:
        return "none yet"
    return _datetime(dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us))


# -- completion ------------------------------------------------------------------------------

_WORD = re.compile(r"([A-Za-z_][\w]*\.)?([\w]*)$")
_ALIAS = re.compile(r"\b(?:FROM|JOIN)\s+([A-Za-z_]\w*)(?:\s*\[[^\]]*\])?\s+(?:AS\s+)?"
                    r"([A-Za-z_]\w*)", re.IGNORECASE)
# After these words only a relation makes sense, so only catalog objects are offered; after
# DROP <kind> too (not after a bare STREAM: that is also the REPL's continuous-query prefix).
_RELATION_WORDS = {"FROM", "JOIN", "DESCRIBE", "TABLE", "INTO", "\\D", "\\DESCRIBE"}
_OBJECT_KINDS = {"STREAM", "SIGNAL", "VIEW", "SINK"}


class WaveSQLCompleter(Completer):
    """Completes keywords, catalog objects, columns and functions from a live session.

    :meth:`refresh` re-reads the catalog (a SQLite query) and the function list (cached by
    the session until DDL invalidates it); the REPL calls it after every statement.
    """

    def __init__(self, session=None):
        self.session = session
        self.objects: dict[str, str] = {}  # lower-cased name -> name as written
        self.kinds: dict[str, str] = {}  # lower-cased name -> STREAM / SIGNAL / VIEW / SINK
        self.columns: dict[str, list[str]] = {}  # lower-cased name -> column names
        self.signal_functions: dict[str, str] = {}  # name -> signature
        self.spark_functions: list[str] = []
        self.keywords = sorted(set(SQL_KEYWORDS) | set(WAVESQL_KEYWORDS))
        self._lock = threading.Lock()

    def refresh(self) -> None:
        """Re-read catalog objects, their columns and the function names."""
        if self.session is None:
            return
        objects, kinds, columns = {}, {}, {}
        for d in self.session.catalog.list():
            objects[d.key] = d.name
            kinds[d.key] = d.kind
            cols = getattr(d, "channels", None) or getattr(d, "columns", ())
            columns[d.key] = [c.name for c in cols]
        signal_functions = {}
        try:
            from wavesql.udfs import registry

            for f in registry.all():
                signal_functions[f.name] = f.signature()
        except Exception:  # noqa: BLE001 - completion must never break the REPL
            pass
        try:
            spark_functions = sorted(f for f in self.session.function_names()
                                     if re.fullmatch(r"[a-z_][a-z0-9_]*", f))
        except Exception:  # noqa: BLE001
            spark_functions = self.spark_functions
        with self._lock:
            self.objects, self.kinds, self.columns = objects, kinds, columns
            self.signal_functions = signal_functions
            self.spark_functions = [f for f in spark_functions if f not in signal_functions]

    # -- prompt_toolkit entry point --------------------------------------------------------
    def get_completions(self, document, complete_event):
        before = document.text_before_cursor
        match = _WORD.search(before)
        qualifier = (match.group(1) or "")[:-1]
        word = match.group(2)
        head = before[:match.start()]
        with self._lock:
            objects, kinds, columns = self.objects, self.kinds, self.columns
            signal_functions, spark_functions = self.signal_functions, self.spark_functions
        stripped = before.lstrip()

        # Inside a '...' string: a file path (CREATE STREAM ... FROM 'data/<Tab>).
        open_at = _scan(before)[2]
        if open_at >= 0 and before[open_at] == "'":
            from prompt_toolkit.completion import PathCompleter
            from prompt_toolkit.document import Document

            partial = before[open_at + 1:]
            yield from PathCompleter(expanduser=True).get_completions(
                Document(partial), complete_event)
            return

        # A meta-command name at the start of the buffer.
        if stripped.startswith("\\") and not re.search(r"\s", stripped):
            for name in list(META_COMMANDS) + list(_META_ALIASES):
                if name.startswith(stripped):
                    yield Completion(name, -len(stripped), display_meta=META_COMMANDS.get(
                        _META_ALIASES.get(name, name), ("", ""))[1])
            return

        # `name.` or `alias.`: the columns of that one object.
        if qualifier:
            target = qualifier.lower()
            if target not in columns:
                aliases = {a.lower(): n.lower() for n, a in _ALIAS.findall(document.text)}
                target = aliases.get(target, target)
            for col in columns.get(target, []):
                if col.lower().startswith(word.lower()):
                    yield Completion(col, -len(word), display_meta=f"column of "
                                     f"{objects.get(target, target)}")
            return

        # Right after `[`: a window, so only the words that open one.
        if head.rstrip().endswith("["):
            for kw in _WINDOW_WORDS:
                if kw.lower().startswith(word.lower()):
                    yield Completion(kw, -len(word), display_meta="window")
            return

        previous = [w.upper() for w in re.findall(r"[\\\w]+", head)]
        only_relations = bool(previous) and (previous[-1] in _RELATION_WORDS or (
            previous[-1] in _OBJECT_KINDS and previous[-2:-1] == ["DROP"]))

        def matches(candidate: str) -> bool:
            return candidate.lower().startswith(word.lower())

        seen: set[str] = set()

        def emit(text: str, meta: str):
            if text.lower() in seen or not matches(text):
                return None
            seen.add(text.lower())
            return Completion(text, -len(word), display_meta=meta)

        for key, name in objects.items():
            c = emit(name, kinds.get(key, "").lower())
            if c:
                yield c
        if only_relations or (not word and not complete_event.completion_requested):
            return
        in_query = {n.lower() for n, _ in _ALIAS.findall(document.text)} | {
            w.lower() for w in re.findall(r"\w+", document.text) if w.lower() in objects}
        # Columns of the objects the statement mentions first, then every other column.
        ordered = sorted(columns, key=lambda k: (k not in in_query, k))
        for key in ordered:
            for col in columns[key]:
                c = emit(col, f"column of {objects[key]}")
                if c:
                    yield c
        for name, signature in signal_functions.items():
            c = emit(name, signature)
            if c:
                yield c
        for name in spark_functions:
            c = emit(name, "function")
            if c:
                yield c
        lower = bool(word) and word == word.lower()
        for kw in self.keywords:
            c = emit(kw.lower() if lower else kw, "keyword")
            if c:
                yield c


# -- running work off the main thread ------------------------------------------------------

_groups = itertools.count(1)


class _Job:
    """One unit of REPL work (a statement list, a meta-command, a foreground stream).

    The worker thread does the work and hands what to print to the main thread through
    :meth:`emit`; ``cancelled`` is the main thread's Ctrl-C (``interrupts`` counts them,
    ``on_interrupt`` is what the first one prints, ``interrupt_ends`` says Ctrl-C is the
    normal end of the work rather than a failure); ``progress`` is the poller's latest
    ``(completed tasks, total tasks, running stage names)``.
    """

    def __init__(self):
        self.group = f"wavesql-repl-{os.getpid()}-{next(_groups)}"
        self.cancelled = threading.Event()
        self.interrupts = 0
        self.on_interrupt = "cancelling…"
        self.interrupt_ends = False
        self.finished = threading.Event()
        self.output: queue.Queue = queue.Queue()
        self.progress: tuple[int, int, list[str]] | None = None

    def emit(self, *renderables) -> None:
        for r in renderables:
            self.output.put(r)


@dataclass
class _Background:
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


class _Quit(Exception):
    """Raised by ``\\q`` to leave the loop."""


# -- the REPL --------------------------------------------------------------------------------

class Repl:
    """The interactive shell over a :class:`wavesql.session.Session`.

    Parameters
    ----------
    session : Session
    max_rows : int
        Rows a result shows before it is cut (``\\rows N`` changes it).
    console : rich.console.Console, optional
    history : path, optional
        The history file; ``$WAVESQL_HISTORY`` or ``~/.wavesql_history`` by default.
    """

    def __init__(self, session, max_rows: int = 50, console: Console | None = None,
                 history: str | os.PathLike | None = None):
        self.session = session
        self.max_rows = max_rows
        self.console = console or Console(highlight=False)
        self.timing = True
        self.completer = WaveSQLCompleter(session)
        self.history_path = Path(history or os.environ.get("WAVESQL_HISTORY")
                                 or Path.home() / ".wavesql_history").expanduser()
        self.background: dict[int, _Background] = {}
        self._next_background = itertools.count(1)
        self._print_lock = threading.Lock()

    # -- the loop ------------------------------------------------------------------------
    def run(self) -> int:
        """Read, run, print until ``\\q`` or Ctrl-D. Returns the exit status (0)."""
        prompt = self._prompt_session()
        # Ctrl-C outside the prompt (terminal in cooked mode) must reach us as a plain
        # KeyboardInterrupt, not PySpark's handler that cancels every job (module docstring).
        previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            self._banner()
            self._run_job(lambda job: None, progress=False)  # its worker loads the completer
            while True:
                try:
                    text = prompt.prompt("wavesql> ")
                except KeyboardInterrupt:  # Ctrl-C at the prompt clears the buffer
                    continue
                except EOFError:  # Ctrl-D
                    break
                try:
                    self.handle(text)
                except _Quit:
                    break
                except KeyboardInterrupt:  # between a job's end and the next prompt
                    continue
        finally:
            if any(not bg.stopped for bg in self.background.values()):
                self._run_job(self._stop_background, progress=False)
            signal.signal(signal.SIGINT, previous_handler)
        return 0

    def _prompt_session(self):
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.lexers import PygmentsLexer

        try:
            self.history_path.parent.mkdir(parents=True, exist_ok=True)
            self.history_path.touch(exist_ok=True)
            history = FileHistory(str(self.history_path))
        except OSError as e:
            self.console.print(f"history not saved: {e}", style="yellow", markup=False)
            history = InMemoryHistory()
        return PromptSession(
            history=history, lexer=PygmentsLexer(WaveSQLLexer), completer=self.completer,
            multiline=True, key_bindings=_key_bindings(),
            prompt_continuation=lambda width, line, wrapped: "...> ".rjust(width),
            complete_while_typing=False, enable_open_in_editor=True)

    def _banner(self) -> None:
        import wavesql

        sc = self.session.spark.sparkContext
        self.console.print(
            f"WaveSQL {wavesql.__version__} on Spark {sc.version} ({sc.master}); catalog "
            f"{self.session.catalog.path}.\nEnd statements with `;`, \\help lists the commands, "
            f"\\q quits. `STREAM <query>;` runs a continuous query until Ctrl-C.",
            markup=False, highlight=False)

    # -- dispatch ------------------------------------------------------------------------
    def handle(self, text: str) -> None:
        """Run one accepted buffer: a meta-command, or statements (``STREAM`` ones included)."""
        stripped = text.strip()
        if not stripped:
            return
        if stripped.lower() in ("quit", "exit"):
            raise _Quit
        if stripped.startswith("\\"):
            self._meta(stripped)
            return
        pieces = split_statements(text)
        if not any(_STREAM_PREFIX.match(piece) for _, piece in pieces):
            self._run_job(lambda job: self._statements(job, text, [(0, text)]))
            return
        # STREAM statements take over the terminal (or start in the background); the
        # statements around them run in order, each batch of plain ones as one job.
        plain: list[tuple[int, str]] = []
        for offset, piece in pieces + [(len(text), None)]:
            if piece is not None and not _STREAM_PREFIX.match(piece):
                plain.append((offset, piece))
                continue
            if plain:
                batch = list(plain)
                if not self._run_job(lambda job: self._statements(job, text, batch)):
                    return
                plain = []
            if piece is not None:
                match = _STREAM_PREFIX.match(piece)
                if match.group(2) or match.group(3):  # real-time: never ends by itself
                    self._run_job(lambda job: self._start_background(job, text, offset, piece,
                                                                     match), progress=False)
                elif not self._run_job(lambda job: self._stream_foreground(
                        job, text, offset, piece, match), progress=False):
                    return

    # -- jobs ----------------------------------------------------------------------------
    def _run_job(self, work: Callable[[_Job], None], progress: bool = True) -> bool:
        """Run ``work(job)`` in a worker thread; print what it emits; Ctrl-C cancels.

        Returns False when the work failed or was cancelled (the rest of the buffer is
        skipped, as psql does).
        """
        job = _Job()
        ok = [True]

        def worker():
            try:
                work(job)
            except BaseException as e:  # noqa: BLE001 - every error is printed, none ends the REPL
                ok[0] = False
                job.emit(self._describe_failure(e, job))
            finally:
                try:
                    self.completer.refresh()  # DDL may have changed names and columns
                except Exception:  # noqa: BLE001
                    pass
                job.finished.set()

        def on_sigint(signum, frame):
            # Only flags: an exception raised wherever the main thread happens to be (inside
            # rich's live display, say) could leave things half done.
            job.interrupts += 1
            job.cancelled.set()

        threading.Thread(target=worker, name="wavesql-repl-worker", daemon=True).start()
        threading.Thread(target=self._poll, args=(job, progress), name="wavesql-repl-poll",
                         daemon=True).start()
        bar = None
        started = time.monotonic()
        told = False
        previous_handler = signal.signal(signal.SIGINT, on_sigint)
        try:
            while True:
                finished = job.finished.wait(0.1)
                if job.cancelled.is_set() and not told:
                    told = True
                    ok[0] = ok[0] and job.interrupt_ends
                    self._print(Text(job.on_interrupt, style="yellow"))
                self._drain(job)
                if finished:
                    break
                if progress:
                    bar = self._show_progress(job, bar, time.monotonic() - started)
        finally:
            signal.signal(signal.SIGINT, previous_handler)
            if bar is not None:
                bar[0].stop()
            self._drain(job)
        return ok[0]

    def _describe_failure(self, e: BaseException, job: _Job):
        if isinstance(e, WaveSQLError):
            return error_text(e)
        if job.cancelled.is_set():
            return Text("cancelled", style="yellow")
        from wavesql.spark_errors import is_runtime_error, translate_runtime_error

        if is_runtime_error(e):
            return error_text(translate_runtime_error(e))
        return Text(f"internal error: {type(e).__name__}: {e}", style="bold red")

    def _poll(self, job: _Job, progress: bool) -> None:
        """Helper thread: Spark status for the progress bar; Ctrl-C -> cancel the group."""
        sc = self.session.spark.sparkContext
        cancelled_at = None
        while not job.finished.wait(0.25):
            try:
                if job.cancelled.is_set():
                    # Again every second: a statement may start new jobs after the first.
                    if cancelled_at is None or time.monotonic() - cancelled_at > 1:
                        sc.cancelJobGroup(job.group)
                        cancelled_at = time.monotonic()
                elif progress:
                    job.progress = _group_progress(sc.statusTracker(), job.group)
            except Exception:  # noqa: BLE001 - status is best effort; the job reports errors
                pass

    def _show_progress(self, job: _Job, bar, elapsed: float):
        """Create/update the transient progress bar once a job has run for half a second."""
        snapshot = job.progress
        if snapshot is None or snapshot[1] == 0 or elapsed < 0.5:
            return bar
        done, total, stages = snapshot
        if bar is None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)

            progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn(),
                                TextColumn("[dim]Ctrl-C cancels"), console=self.console,
                                transient=True)
            progress.start()
            bar = (progress, progress.add_task("running", total=total))
        label = stages[0] if stages else "running"
        bar[0].update(bar[1], total=total, completed=done,
                      description=f"{label[:40]}{' +' + str(len(stages) - 1) if len(stages) > 1 else ''}")
        return bar

    def _drain(self, job: _Job) -> None:
        while True:
            try:
                item = job.output.get_nowait()
            except queue.Empty:
                return
            self._print(item)

    def _print(self, renderable) -> None:
        with self._print_lock:
            if isinstance(renderable, str):
                self.console.print(renderable, markup=False, highlight=False)
            else:
                self.console.print(renderable)

    # -- statements ----------------------------------------------------------------------
    def _statements(self, job: _Job, text: str, pieces: list[tuple[int, str]]) -> None:
        """Worker: execute ``pieces`` of ``text`` and emit each result as it completes."""
        from wavesql.spark_errors import is_runtime_error, translate_runtime_error

        sc = self.session.spark.sparkContext
        sc.setJobGroup(job.group, "wavesql REPL statement", True)
        try:
            for offset, piece in pieces:
                # One piece at a time, so what ran before a failing statement is shown.
                for stmt_offset, stmt in split_statements(piece) or [(0, piece)]:
                    if job.cancelled.is_set():
                        return
                    where = offset + stmt_offset
                    started = time.perf_counter()
                    try:
                        results = self.session.execute(stmt)
                    except WaveSQLError as e:
                        raise _anchor(e, stmt, text, where) from None
                    for result in results:
                        df = result.dataframe
                        try:
                            rows = df.limit(self.max_rows + 1).collect()
                        except Exception as e:
                            if job.cancelled.is_set() or not is_runtime_error(e):
                                raise
                            raise translate_runtime_error(e) from None
                        job.emit(*self._render(df, rows, time.perf_counter() - started))
                        started = time.perf_counter()
        finally:  # the worker's JVM thread may be reused: leave no job group on it
            for key in ("spark.jobGroup.id", "spark.job.description",
                        "spark.job.interruptOnCancel"):
                sc.setLocalProperty(key, None)

    def _render(self, df, rows, elapsed: float) -> list:
        columns = df.columns
        shown_time = elapsed if self.timing else None
        if columns == ["status"] and len(rows) == 1:  # DDL: one status line
            line = Text(str(rows[0][0]))
            if self.timing:
                line.append(f" ({elapsed:.2f} s)", style="dim")
            return [line]
        if columns == ["plan"] and len(rows) == 1:  # EXPLAIN: the plan text as it is
            return [Text(str(rows[0][0]))] + (
                [Text(f"({elapsed:.2f} s)", style="dim")] if self.timing else [])
        numeric = [f.dataType.typeName() in _NUMERIC_TYPES for f in df.schema.fields]
        cut = len(rows) > self.max_rows
        return [rows_table(columns, rows[:self.max_rows], numeric),
                _count_note(min(len(rows), self.max_rows), cut, shown_time)]

    # -- continuous queries --------------------------------------------------------------
    def _start_stream(self, text: str, offset: int, piece: str, match, output,
                      trigger: str = _STREAM_TRIGGER):
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
            raise _anchor(e, query, text, offset) from None
        except BaseException:
            shutil.rmtree(checkpoint, ignore_errors=True)
            raise
        return cq, checkpoint

    def _stream_foreground(self, job: _Job, text: str, offset: int, piece: str, match) -> None:
        """Worker: run a continuous query, emitting batches and figures until Ctrl-C."""
        def output(df, batch_id):
            rows = _by_time(df.limit(self.max_rows + 1).collect(), df.columns)
            if rows:
                numeric = [f.dataType.typeName() in _NUMERIC_TYPES for f in df.schema.fields]
                job.emit(rows_table(df.columns, rows[:self.max_rows], numeric,
                                    title=f"batch {batch_id}"))
                if len(rows) > self.max_rows:
                    job.emit(_count_note(self.max_rows, True, None))

        cq, checkpoint = self._start_stream(text, offset, piece, match, output)
        job.interrupt_ends = True  # Ctrl-C is how a foreground continuous query ends
        job.on_interrupt = ("stopping after the current micro-batch… (Ctrl-C again stops at "
                            "once)")
        job.emit(Text(f"continuous query running (trigger {_STREAM_TRIGGER}); "
                      f"Ctrl-C stops it", style="cyan"))
        reported = 0
        try:
            while True:
                if job.cancelled.is_set() and (job.interrupts > 1 or not _in_batch(cq)):
                    break
                if cq.await_termination(0.25):  # it ended by itself (or failed: raises)
                    break
                while reported < len(cq.reports):
                    job.emit(_report_line(cq.reports[reported]))
                    reported += 1
        finally:
            cq.stop()
            while reported < len(cq.reports):
                job.emit(_report_line(cq.reports[reported]))
                reported += 1
            shutil.rmtree(checkpoint, ignore_errors=True)
        if job.cancelled.is_set():
            job.emit(Text(f"stopped after {len(cq.reports)} batch"
                          f"{'' if len(cq.reports) == 1 else 'es'}", style="cyan"))

    def _start_background(self, job: _Job, text: str, offset: int, piece: str, match) -> None:
        """Worker: start a continuous query that keeps running behind the prompt."""
        ident = next(self._next_background)
        holder: dict = {}

        def output(df, batch_id):  # keep the latest batch for \status <id>
            rows = _by_time(df.limit(self.max_rows + 1).collect(), df.columns)
            bg = holder.get("bg")
            if bg is not None:
                bg.last_batch, bg.last_columns = batch_id, df.columns
                bg.last_rows, bg.last_cut = rows[:self.max_rows], len(rows) > self.max_rows

        trigger = _STREAM_TRIGGER
        if match.group(3):  # STREAM REAL-TIME INTO sink: the sink is the output
            output, trigger = match.group(4), "real-time"
        cq, checkpoint = self._start_stream(text, offset, piece, match, output, trigger)
        body = piece[match.end():].strip()
        holder["bg"] = self.background[ident] = _Background(ident, body, cq, checkpoint)
        mode = f"in real-time mode into {match.group(4)}" if match.group(3) else \
            "in the background"
        job.emit(Text(f"continuous query {ident} running {mode}; \\status {ident} "
                      f"shows it, \\stop {ident} stops it", style="cyan"))

    def _stop_background(self, job: _Job, which: Iterable[int] | None = None) -> list[int]:
        """Worker: stop background queries (all, or ``which``), each between micro-batches
        unless Ctrl-C says not to wait."""
        stopped = []
        for ident in list(which if which is not None else self.background):
            bg = self.background.get(ident)
            if bg is None or bg.stopped:
                continue
            try:
                if _in_batch(bg.query):
                    job.on_interrupt = "stopping at once…"
                    job.emit(Text(f"query {ident}: waiting for its micro-batch to finish "
                                  f"(Ctrl-C stops it at once)…", style="dim"))
                while _in_batch(bg.query) and not job.cancelled.is_set():
                    time.sleep(0.2)
                bg.query.stop()
            except Exception:  # noqa: BLE001 - already gone
                pass
            bg.stopped = True
            shutil.rmtree(bg.checkpoint, ignore_errors=True)
            stopped.append(ident)
        return stopped

    # -- meta-commands -------------------------------------------------------------------
    def _meta(self, text: str) -> None:
        name, _, arg = text.partition(" ")
        if not arg and "\n" in name:
            name, _, arg = text.partition("\n")
        name = _META_ALIASES.get(name.lower(), name.lower())
        arg = arg.strip().rstrip(";").strip()
        if name == "\\q":
            raise _Quit
        if name == "\\help":
            self._print(self._help())
        elif name == "\\timing":
            self.timing = {"on": True, "off": False}.get(arg.lower(), not self.timing)
            self._print(f"Timing is {'on' if self.timing else 'off'}.")
        elif name == "\\rows":
            if arg:
                if not arg.isdigit() or int(arg) < 1:
                    self._print(Text(f"\\rows takes a positive number, got `{arg}`",
                                     style="red"))
                    return
                self.max_rows = int(arg)
            self._print(f"Results show up to {self.max_rows} rows.")
        elif name == "\\streams" or (name == "\\d" and not arg):
            self._print(self._objects_table())
        elif name == "\\d":
            self._run_job(lambda job: self._statements(
                job, f"DESCRIBE {arg}", [(0, f"DESCRIBE {arg}")]))
        elif name == "\\explain":
            self._run_job(lambda job: self._explain(job, arg))
        elif name == "\\status":
            self._run_job(lambda job: self._status(job, arg), progress=False)
        elif name == "\\stop":
            self._stop_command(arg)
        else:
            self._print(Text(f"unknown meta-command {name} (\\help lists them)", style="red"))

    def _help(self) -> Table:
        table = Table(show_header=False, box=None, padding=(0, 2))
        for name, (args, text) in META_COMMANDS.items():
            table.add_row(Text(f"{name} {args}".strip(), style="bold"), Text(text))
        table.add_row("", "")
        for usage, text in (
                ("<statement>;", "any WaveSQL / Spark SQL statement; Enter runs it once it "
                                 "ends with `;`"),
                ("STREAM <query>;", "run a continuous query, printing each micro-batch; "
                                    "Ctrl-C stops it"),
                ("STREAM BACKGROUND <query>;", "keep it running behind the prompt"),
                ("STREAM REAL-TIME INTO <sink> <query>;", "run a row-by-row query from a "
                 "Kafka stream to a Kafka sink in Spark's real-time mode, behind the prompt"),
                ("Tab / Ctrl-C / Ctrl-D", "complete / cancel the running query or clear the "
                                          "line / quit")):
            table.add_row(Text(usage, style="bold"), Text(text))
        return table

    def _objects_table(self) -> Table | Text:
        defs = self.session.catalog.list()
        if not defs:
            return Text("(the catalog is empty: CREATE STREAM / SIGNAL / VIEW / SINK adds "
                        "objects)", style="dim")
        table = Table(header_style="bold")
        for col in ("name", "kind", "format", "source", "columns", "details"):
            table.add_column(col, overflow="fold")
        for d in defs:
            cols = getattr(d, "channels", None) or getattr(d, "columns", ())
            source = getattr(d, "sql", None) or getattr(d, "path", "")
            table.add_row(Text(d.name, style="bold"), d.kind, Text(getattr(d, "format", "")),
                          Text(source), Text(", ".join(f"{c.name} {c.type}" for c in cols)),
                          Text(_details(d)))
        return table

    def _explain(self, job: _Job, arg: str) -> None:
        if not arg:
            job.emit(Text("usage: \\explain [mode] <query>", style="red"))
            return
        first, _, rest = arg.partition(" ")
        mode, query = (first.upper(), rest) if first.upper() in _EXPLAIN_MODES and rest \
            else ("IR", arg)
        job.emit(Text(self.session.explain(query, mode)))

    def _status(self, job: _Job, arg: str) -> None:
        if not self.background:
            job.emit(Text("no continuous queries are running (start one with "
                          "`STREAM BACKGROUND <query>;`)", style="dim"))
            return
        if arg and (not arg.isdigit() or int(arg) not in self.background):
            job.emit(Text(f"no continuous query `{arg}` (ids: "
                          f"{', '.join(map(str, self.background))})", style="red"))
            return
        table = Table(header_style="bold")
        for col in ("id", "state", "batches", "progress", "rows in", "late", "rows out",
                    "in/s", "processed/s", "kept", "latency p50/p99", "query"):
            table.add_column(col, justify="right" if col not in ("state", "progress", "query")
                             else "left", overflow="fold")
        chosen = [int(arg)] if arg else list(self.background)
        for ident in chosen:
            bg = self.background[ident]
            q = bg.query
            st = q.status()
            active = not bg.stopped and q.is_active
            state = "running" if active else "stopped"
            if q.error is not None:
                state = f"failed: {getattr(q.error, 'code', type(q.error).__name__)}"
            # live metrics (streaming/metrics.py): samples/s for signal queries, else rows/s
            unit = "samples" if st.get("input_samples_per_second") else "rows"

            def fig(v, fmt="{:.1f}"):
                return fmt.format(v) if v is not None else "-"

            table.add_row(str(ident), state, str(st["batches"]), _fmt_us(st["progress_us"]),
                          str(st["rows_in"]), str(st["late"] + st["no_time"]),
                          str(st["rows_out"]), fig(st.get(f"input_{unit}_per_second")),
                          fig(st.get(f"processed_{unit}_per_second")),
                          f"{st['buffered']} rows, {st.get('state_bytes', 0):,} B",
                          f"{fig(st.get('latency_p50_s'), '{:.2f}')}/"
                          f"{fig(st.get('latency_p99_s'), '{:.2f}')} s", Text(bg.text))
        job.emit(table)
        if arg:
            bg = self.background[int(arg)]
            if bg.query.error is not None:
                job.emit(error_text(bg.query.error) if isinstance(bg.query.error, WaveSQLError)
                         else Text(str(bg.query.error), style="red"))
            if bg.last_batch is not None:
                job.emit(rows_table(bg.last_columns, bg.last_rows,
                                    title=f"latest batch ({bg.last_batch})"))
                if bg.last_cut:
                    job.emit(_count_note(len(bg.last_rows), True, None))

    def _stop_command(self, arg: str) -> None:
        if arg and arg.lower() != "all" and (not arg.isdigit()
                                             or int(arg) not in self.background):
            self._print(Text(f"no continuous query `{arg}`", style="red"))
            return
        which = [int(arg)] if arg.isdigit() else None
        # query.stop() talks to the JVM: run it as a job, off the main thread.
        done: list[int] = []
        self._run_job(lambda job: done.extend(self._stop_background(job, which)),
                      progress=False)
        self._print(f"stopped {', '.join(map(str, done))}" if done
                    else "nothing to stop")


def _details(d) -> str:
    """The definition's time/rate facts for ``\\streams``."""
    parts = []
    if getattr(d, "event_time", None):
        parts.append(f"event time {d.event_time}")
    if getattr(d, "watermark_us", None) is not None:
        parts.append(f"watermark {d.watermark_us / 1e6:g} s")
    if getattr(d, "progress_column", None):
        parts.append(f"progress column {d.progress_column}")
    if getattr(d, "heartbeat_us", None) is not None:
        parts.append(f"heartbeat {d.heartbeat_us / 1e6:g} s")
    if getattr(d, "rate_hz", None) is not None:
        parts.append(f"{_number(d.rate_hz)} Hz, segment {d.segment}")
    return ", ".join(parts)


def _by_time(rows: list, columns: list[str]) -> list:
    """A micro-batch's rows in instant order (the runner delivers them unordered)."""
    if "_time" not in columns:
        return rows
    at = columns.index("_time")
    return sorted(rows, key=lambda r: (r[at] is None, r[at] or dt.datetime.min,
                                       [str(v) for v in r]))


def _in_batch(cq) -> bool:
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


def _report_line(report) -> Text:
    """One micro-batch's figures (a :class:`wavesql.streaming.BatchReport`)."""
    late = report.late + report.no_time
    return Text(
        f"batch {report.batch}: progress {_fmt_us(report.progress_us)} · in {report.rows_in} "
        f"(late {late}) · out {report.rows_out} (final {report.final_out}) · state "
        f"{report.buffered} rows · {report.seconds:.1f} s", style="dim")


def _anchor(err: WaveSQLError, piece: str, text: str, offset: int) -> WaveSQLError:
    """Re-anchor an error raised for ``piece`` in the whole buffer ``text`` it came from, so
    line numbers and the caret match what the user typed."""
    if err.query is None or err.query == piece:
        return err.with_query(text, offset=offset) if err.span is not None else \
            err.with_query(text)
    return err


def _group_progress(tracker, group: str) -> tuple[int, int, list[str]]:
    """(completed tasks, total tasks, names of running stages) of a job group's jobs."""
    done = total = 0
    running: list[str] = []
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is None:
            continue
        for stage_id in info.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            # A finished job's skipped stages never run their tasks: count them as done.
            done += stage.numTasks if info.status == "SUCCEEDED" else stage.numCompletedTasks
            if stage.numActiveTasks:
                running.append(f"stage {stage_id}")
    return done, total, running


def _key_bindings():
    """Enter runs a complete buffer and inserts a newline otherwise (psql's behaviour)."""
    from prompt_toolkit.filters import has_focus
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.enums import DEFAULT_BUFFER

    kb = KeyBindings()

    @kb.add("enter", filter=has_focus(DEFAULT_BUFFER))
    def _(event):
        buf = event.current_buffer
        state = buf.complete_state
        if state is not None and state.current_completion is not None:
            buf.apply_completion(state.current_completion)  # Enter picks from the menu
            return
        if _ready(buf.text):
            buf.validate_and_handle()
        else:
            buf.newline(copy_margin=False)

    @kb.add("escape", "enter", filter=has_focus(DEFAULT_BUFFER))
    def _(event):  # Alt-Enter: run the buffer as it is (a statement without `;`)
        event.current_buffer.validate_and_handle()

    return kb


def main(connect: Callable[[], object], max_rows: int = 50) -> int:
    """``wavesql`` in a terminal: start Spark, then run the REPL until `\\q`."""
    console = Console(highlight=False)
    # A plain line, not a spinner: the JVM writes its own start-up lines to the terminal
    # and would tear an animated one apart.
    console.print("starting Spark…", style="dim", markup=False)
    try:
        session = connect()
    except KeyboardInterrupt:
        return 130
    return Repl(session, max_rows=max_rows, console=console).run()
