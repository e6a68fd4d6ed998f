"""The REPL's main loop: :class:`Repl` reads a buffer at the prompt, runs it -- a
meta-command, or statements (``STREAM`` ones included) -- and prints the results; :func:`main`
is ``wavesql`` in a terminal.

Enter runs the buffer once it holds a complete statement and inserts a newline otherwise;
the buffer is cut into statements where the parser cuts it (:func:`wavesql.dialect.is_complete`
and :func:`~wavesql.dialect.split_statements`), and each result is shown by
:mod:`wavesql.render`. The other parts of the REPL are mixed into :class:`Repl` from
their modules: job control (:mod:`~wavesql.repl.jobs`), continuous queries
(:mod:`~wavesql.repl.streams`) and meta-commands (:mod:`~wavesql.repl.meta`).
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from pathlib import Path
from typing import Callable

from rich.console import Console

from wavesql import render
from wavesql.dialect import is_complete, split_statements
from wavesql.dialect.stream_prefix import STREAM_PREFIX
from wavesql.errors import WaveSQLError
from wavesql.repl.completion import WaveSQLCompleter
from wavesql.repl.jobs import Job, JobControl, anchor
from wavesql.repl.lexer import WaveSQLLexer
from wavesql.repl.meta import MetaCommands, Quit
from wavesql.repl.streams import Background, ContinuousQueries


def _pieces(text: str) -> list[tuple[int, str]]:
    """The statements of a buffer as ``(offset, text)``; where the buffer cannot be read (an
    unterminated string), the statement there runs to its end, and fails when it runs."""
    return [(s.start, text[s.start:s.end]) for s in split_statements(text, lenient=True)]


def _ready(text: str) -> bool:
    """Whether Enter should run the buffer (else it inserts a newline)."""
    stripped = text.strip()
    if not stripped or stripped.startswith("\\") or stripped.lower() in ("quit", "exit"):
        return True
    return is_complete(text)


class Repl(JobControl, ContinuousQueries, MetaCommands):
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
        self.background: dict[int, Background] = {}
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
                except Quit:
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
            raise Quit
        if stripped.startswith("\\"):
            self._meta(stripped)
            return
        pieces = _pieces(text)
        if not any(STREAM_PREFIX.match(piece) for _, piece in pieces):
            self._run_job(lambda job: self._statements(job, text, [(0, text)]))
            return
        # STREAM statements take over the terminal (or start in the background); the
        # statements around them run in order, each batch of plain ones as one job.
        plain: list[tuple[int, str]] = []
        for offset, piece in pieces + [(len(text), None)]:
            if piece is not None and not STREAM_PREFIX.match(piece):
                plain.append((offset, piece))
                continue
            if plain:
                batch = list(plain)
                if not self._run_job(lambda job: self._statements(job, text, batch)):
                    return
                plain = []
            if piece is not None:
                match = STREAM_PREFIX.match(piece)
                if match.group(2) or match.group(3):  # real-time: never ends by itself
                    self._run_job(lambda job: self._start_background(job, text, offset, piece,
                                                                     match), progress=False)
                elif not self._run_job(lambda job: self._stream_foreground(
                        job, text, offset, piece, match), progress=False):
                    return

    # -- statements ----------------------------------------------------------------------
    def _statements(self, job: Job, text: str, pieces: list[tuple[int, str]]) -> None:
        """Worker: execute ``pieces`` of ``text`` and emit each result as it completes."""
        from wavesql.spark_errors import is_runtime_error, translate_runtime_error

        sc = self.session.spark.sparkContext
        sc.setJobGroup(job.group, "wavesql REPL statement", True)
        try:
            for offset, piece in pieces:
                # One piece at a time, so what ran before a failing statement is shown.
                for stmt_offset, stmt in _pieces(piece) or [(0, piece)]:
                    if job.cancelled.is_set():
                        return
                    where = offset + stmt_offset
                    started = time.perf_counter()
                    try:
                        results = self.session.execute(stmt)
                    except WaveSQLError as e:
                        raise anchor(e, stmt, text, where) from None
                    for result in results:
                        try:  # the time shown counts the planning too
                            fetched = render.fetch(result.dataframe, self.max_rows,
                                                   text=stmt, started=started)
                        except Exception as e:
                            if job.cancelled.is_set() or not is_runtime_error(e):
                                raise
                            raise translate_runtime_error(e) from None
                        job.emit(*render.terminal(fetched, render.REPL, self.timing))
                        started = time.perf_counter()
        finally:  # the worker's JVM thread may be reused: leave no job group on it
            for key in ("spark.jobGroup.id", "spark.job.description",
                        "spark.job.interruptOnCancel"):
                sc.setLocalProperty(key, None)


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
