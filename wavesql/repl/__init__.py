"""The interactive ``wavesql`` shell: a prompt_toolkit REPL in the spirit of psql, DuckDB's
shell and the Flink SQL client.

What it does
------------
* **Editing**: syntax highlighting (:class:`WaveSQLLexer`, Pygments' SQL lexer plus WaveSQL's
  words), multi-line statements -- Enter inserts a newline until the buffer holds a complete
  statement ending in ``;`` (meta-commands need none; where a statement ends is the
  dialect's decision, :func:`wavesql.dialect.is_complete`) -- and a persistent history in
  ``~/.wavesql_history`` (``$WAVESQL_HISTORY`` overrides it).
* **Completion** on Tab (:class:`WaveSQLCompleter`): keywords, catalog objects, their columns
  (``name.`` or an alias restricts to one object), signal functions and Spark functions, read
  from the live catalog and refreshed after every statement (so after DDL).
* **Results** as aligned tables with the row count and the time; long results are cut to
  ``--max-rows`` / ``\\rows N`` rows with a note; signal segments print compactly as
  ``⟨start=4096 rate=44100 n=4096⟩`` (:mod:`wavesql.render`, shared with the CLI and the
  notebook).
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

Layout
------
* :mod:`wavesql.repl.shell` -- :class:`Repl`: the loop, dispatch, statements; :func:`main`.
* :mod:`wavesql.repl.jobs` -- job control: worker threads, job groups, progress, Ctrl-C.
* :mod:`wavesql.repl.streams` -- continuous queries (``STREAM ...``).
* :mod:`wavesql.repl.meta` -- the backslash commands.
* :mod:`wavesql.repl.completion` -- Tab completion.
* :mod:`wavesql.repl.lexer` -- the vocabulary and the highlighting.
"""

from wavesql.repl.completion import WaveSQLCompleter
from wavesql.repl.lexer import SQL_KEYWORDS, WAVESQL_KEYWORDS, WaveSQLLexer
from wavesql.repl.meta import META_COMMANDS
from wavesql.repl.shell import Repl, main

__all__ = ["Repl", "main", "WaveSQLCompleter", "WaveSQLLexer", "META_COMMANDS",
           "WAVESQL_KEYWORDS", "SQL_KEYWORDS"]
