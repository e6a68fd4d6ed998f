"""WaveSQL in Jupyter and IPython: ``%load_ext wavesql``, then ``%%wavesql`` cells.

::

    %load_ext wavesql
    %wavesql --connect --master local[2] --catalog demo.db      # optional: connect now

    %%wavesql -o hits --limit 10
    CREATE SIGNAL mic (ch1 FLOAT) RATE 48000 HZ FROM 'rec/' FORMAT wav;
    SELECT start_time(ch1) AS t, ch1, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]

The magic is shaped like the SQL magics notebook users know (ipython-sql, jupysql): the line
carries options, the cell carries statements, ``-o NAME`` keeps the result DataFrame in the
user's namespace, ``{{name}}`` in the text is replaced by the value of a variable.

Which session runs the text, first match wins:

1. ``--session NAME``: the :class:`wavesql.Session` held by variable ``NAME``;
2. ``--connect``/``--master``/``--catalog``/``--config``: a new session opened with them
   (kept while later cells give the same options or none);
3. the session the magic used last;
4. the one :class:`wavesql.Session` found in the user's namespace (``ws = wavesql.connect()``
   in an earlier cell), so a notebook that made its own session needs no option at all;
5. ``wavesql.connect()`` with its defaults (``local[*]``, ``./wavesql_catalog.db``).

Results come back as :class:`CellResult`: an HTML table of the first ``--limit`` rows (one
extra row is fetched to know whether more exist, so no second job counts them), a line with
the row count and the time, and the Spark DataFrame itself in ``.dataframe``. Signal segments
show as ``seg[start=4096, 4096 samples @ 44100 Hz]``, not as thousands of numbers. The
formatting is :mod:`wavesql.render`'s, shared with the REPL and the CLI.

Errors show as WaveSQL renders them (code, caret under the text, hint) with no Python
traceback: the magic raises :class:`CellError`, a :class:`~wavesql.WaveSQLError` that tells
IPython how to show itself (``_render_traceback_``). The cell fails, so "Run All" stops there
as it does for any error, and the kernel carries on.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import shlex
import time
from dataclasses import dataclass
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class, no_var_expand

from wavesql import render
from wavesql.errors import WaveSQLError

#: Rows a result shows unless ``--limit`` says otherwise.
DEFAULT_LIMIT = 20
#: Items of an array cell shown before "… N items".
MAX_ITEMS = render.MAX_ITEMS


def load_ipython_extension(ip) -> None:
    """``%load_ext wavesql``: register the ``%wavesql`` / ``%%wavesql`` magic."""
    ip.register_magics(WaveSQLMagics(ip))


# -- errors ------------------------------------------------------------------------------

class CellError(WaveSQLError):
    """A :class:`WaveSQLError` raised by the magic; IPython shows only its text.

    IPython calls ``_render_traceback_`` instead of formatting a traceback, so a notebook
    shows the error exactly as the CLI prints it: the caret points into the cell's text.
    """

    @classmethod
    def of(cls, err: WaveSQLError) -> "CellError":
        return cls(err.code, err.message, err.span, err.hint, err.query, err.source,
                   err.line_offset)

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


# -- cell values --------------------------------------------------------------------------

def format_cell(value: Any, nested: bool = False) -> str:
    """One value as the text a table cell shows (:func:`wavesql.render.format_value` with
    the notebook's notation for segments).

    Signal segments and spectra are summarised (start, width, rate), long arrays are cut
    to their first :data:`MAX_ITEMS` items, timestamps print without trailing zeros.

    >>> from pyspark.sql import Row
    >>> format_cell(Row(start=4096, rate=44100.0, samples=[0.0] * 4096))
    'seg[start=4096, 4096 samples @ 44100 Hz]'
    >>> format_cell(list(range(10)))
    '[0, 1, 2, 3, 4, 5, 6, 7, … 10 items]'
    """
    return render.format_value(value, MAX_ITEMS, nested, segments=render.NOTEBOOK.values)


# -- results -----------------------------------------------------------------------------

#: What one statement of a cell returned: a status line, a plan, or rows
#: (``.status``, ``.plan``, ``.rows``, ``.truncated``, ``.elapsed``, ``.dataframe``).
StatementResult = render.Result


@dataclass
class CellResult:
    """The outcome of a ``%%wavesql`` cell: one :class:`StatementResult` per statement.

    Shown as HTML in a notebook and as text in a terminal. ``dataframe`` is the last
    statement's Spark DataFrame (what ``-o NAME`` stores), ``rows`` its fetched rows.
    """

    results: list[StatementResult]
    #: Seconds for the whole cell: parsing, binding, planning and fetching.
    elapsed: float = 0.0

    @property
    def dataframe(self):
        return self.results[-1].dataframe if self.results else None

    @property
    def rows(self) -> list:
        return self.results[-1].rows if self.results else []

    @property
    def columns(self) -> list[str]:
        return self.results[-1].columns if self.results else []

    def _repr_html_(self) -> str:
        parts = ['<div class="wavesql-result">']
        parts.extend(render.html(r, render.NOTEBOOK) for r in self.results)
        parts.append(f'<div class="wavesql-time" style="color: #777; font-size: smaller">'
                     f'cell: {self.elapsed:.2f} s</div></div>')
        return "\n".join(parts)

    def __repr__(self) -> str:
        out = [render.plain(r, render.NOTEBOOK) for r in self.results]
        return "\n".join(out) if out else "(no statements)"

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text/plain
        p.text(repr(self))


# -- options ------------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad option as IPython's UsageError (one line, no exit)."""

    def error(self, message):
        raise UsageError(f"%wavesql: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="%wavesql", add_help=False)
    p.add_argument("--connect", action="store_true",
                   help="open a new session now (with --master/--catalog/--config)")
    p.add_argument("--master", help="Spark master URL (default local[*])")
    p.add_argument("--catalog", help="catalog file (default ./wavesql_catalog.db)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark setting for a new session (repeatable)")
    p.add_argument("-s", "--session", metavar="NAME",
                   help="run in the wavesql.Session held by variable NAME")
    p.add_argument("-o", "--out", metavar="NAME",
                   help="store the last statement's Spark DataFrame in variable NAME")
    p.add_argument("-n", "--limit", type=int, default=None, metavar="N",
                   help=f"rows shown per result (default {DEFAULT_LIMIT})")
    p.add_argument("-f", "--file", metavar="PATH", help="run a .wsql file")
    return p


PARSER = _parser()
_TAKES_VALUE = {o for a in PARSER._actions if a.nargs != 0 for o in a.option_strings}
_OPTION = re.compile(r"\s*(--?[A-Za-z][\w-]*)(?:=(\"[^\"]*\"|'[^']*'|\S*))?(?=\s|$)")
_VALUE = re.compile(r"\s+(\"[^\"]*\"|'[^']*'|\S+)")
_TEMPLATE = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*(!raw)?\s*\}\}")


def split_options(line: str) -> tuple[str, str]:
    """Split a magic line into its leading options and the statement text after them.

    The statement keeps its exact spelling (quotes, spacing), which a shell-style split of
    the whole line would destroy; only the options are tokenised.

    >>> split_options("-o df --limit 5 SELECT 'a b' AS s")
    ('-o df --limit 5', "SELECT 'a b' AS s")
    """
    pos = 0
    while True:
        m = _OPTION.match(line, pos)
        if m is None:
            break
        pos = m.end()
        if m.group(1) in _TAKES_VALUE and m.group(2) is None:
            value = _VALUE.match(line, pos)
            if value is not None:
                pos = value.end()
    return line[:pos].strip(), line[pos:].strip()


def expand_templates(text: str, namespace: dict) -> str:
    """Replace each ``{{name}}`` with variable ``name``'s value, bound where it stands, so a
    value is always data and never SQL:

    - inside a quoted string (``'{{folder}}/a.wav'``): its text, quotes doubled;
    - inside a backquoted name (```{{column}}```): its text, backquotes doubled;
    - anywhere else: a SQL literal of it -- a number (a float as a DOUBLE, ``2.5D``),
      ``'text'``, ``TRUE``, ``NULL``, ``TIMESTAMP '...'``, ``ARRAY(...)`` for a list
      (``WHERE v > {{limit}}``);
    - ``{{name!raw}}`` splices the value's text as it is (a table name, a clause): the
      explicit form for SQL built from variables.

    >>> expand_templates("FROM '{{folder}}/a.wav'", {"folder": "/data"})
    "FROM '/data/a.wav'"
    >>> expand_templates("WHERE who = {{w}} AND v > {{n}}", {"w": "O'Brien", "n": 2.5})
    "WHERE who = 'O''Brien' AND v > 2.5D"
    >>> expand_templates("SELECT * FROM {{t!raw}}", {"t": "mic [SAMPLES 256]"})
    'SELECT * FROM mic [SAMPLES 256]'
    """
    out, pos, quote = [], 0, None
    i = 0
    while i < len(text):
        c = text[i]
        if quote is None and text.startswith("--", i):  # a comment runs to the line's end
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if quote is None and c in "'\"`":
            quote = c
        elif quote is not None and c == quote:
            if text.startswith(quote * 2, i):  # an escaped quote inside
                i += 2
                continue
            quote = None
        elif text.startswith("{{", i):
            m = _TEMPLATE.match(text, i)
            if m is not None:
                out.append(text[pos:i])
                out.append(_bound(m.group(1), m.group(2), namespace, quote))
                pos = i = m.end()
                continue
        i += 1
    out.append(text[pos:])
    return "".join(out)


def _bound(name: str, raw: str | None, namespace: dict, quote: str | None) -> str:
    if name not in namespace:
        raise UsageError(f"%wavesql: {{{{{name}}}}} names no variable")
    value = namespace[name]
    if raw:
        return str(value)
    if quote is not None:  # inside a string or a quoted name: the text, escaped for it
        return str(value).replace(quote, quote * 2)
    return sql_literal(value)


def sql_literal(value) -> str:
    """A Python value as a Spark SQL literal (for ``{{name}}`` outside quotes).

    >>> sql_literal(3), sql_literal("it's"), sql_literal(None), sql_literal([1, 2.5])
    ('3', "'it''s'", 'NULL', 'ARRAY(1, 2.5D)')
    """
    import math

    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "CAST('NaN' AS DOUBLE)"
        if math.isinf(value):
            return f"CAST('{'-' if value < 0 else ''}Infinity' AS DOUBLE)"
        return repr(value) + ("D" if "e" not in repr(value) else "")
    if isinstance(value, dt.datetime):
        return f"TIMESTAMP '{value.isoformat(sep=' ')}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, (list, tuple)):
        return "ARRAY(" + ", ".join(sql_literal(v) for v in value) + ")"
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # a numpy scalar
        return sql_literal(value.item())
    return "'" + str(value).replace("'", "''") + "'"


# -- the magic ----------------------------------------------------------------------------

@magics_class
class WaveSQLMagics(Magics):
    """``%wavesql`` (a line) and ``%%wavesql`` (a cell) run WaveSQL statements."""

    def __init__(self, shell):
        super().__init__(shell)
        #: The session statements run in (see the module docstring for how it is chosen).
        self.session = None
        #: The session the magic opened itself (closed when it opens another) and the
        #: options it was opened with, so later cells giving the same options reuse it.
        self._owned = None
        self._opened: tuple | None = None

    @no_var_expand
    @line_cell_magic
    def wavesql(self, line: str, cell: str | None = None):
        """Run WaveSQL statements and show the result.

        ::

            %wavesql [options] [statement]
            %%wavesql [options]
            statement; statement; ...

        Options: ``--connect`` open a new session now; ``--master URL``, ``--catalog PATH``,
        ``--config KEY=VALUE`` (repeatable) for it; ``-s/--session NAME`` use the
        ``wavesql.Session`` in variable NAME; ``-o/--out NAME`` store the last result's
        Spark DataFrame in NAME; ``-n/--limit N`` rows shown (default 20); ``-f/--file
        PATH`` run a .wsql file. ``{{name}}`` in the text is replaced by a variable's value,
        bound as data (:func:`expand_templates`; ``{{name!raw}}`` splices its text).
        """
        ns = self.shell.user_ns
        options, rest = split_options(line)
        # options are words, not SQL: a variable's text goes in as it is (-f {{job}})
        options = _TEMPLATE.sub(lambda m: str(_bound(m.group(1), "raw", ns, None)), options)
        rest = expand_templates(rest, ns)
        args = PARSER.parse_args(shlex.split(options))
        if cell is not None:
            cell = expand_templates(cell, ns)
            text = rest + "\n" + cell if rest else cell
        else:
            text = rest
        if args.limit is not None and args.limit < 0:
            raise UsageError("%wavesql: --limit must be 0 or more")
        session = self._session(args)
        if not text.strip() and not args.file:
            return None  # connecting only
        limit = DEFAULT_LIMIT if args.limit is None else args.limit
        result = run(session, text, limit=limit, file=args.file)
        if args.out:
            ns[args.out] = result.dataframe
        return result

    def _session(self, args):
        import wavesql

        ns = self.shell.user_ns
        config = dict(_setting(s) for s in args.config)
        if args.session:
            found = ns.get(args.session)
            if not isinstance(found, wavesql.Session):
                raise UsageError(f"%wavesql: variable `{args.session}` holds no wavesql.Session"
                                 f" (it holds {type(found).__name__})")
            self.session = found
            return found
        wanted = (args.master, args.catalog, tuple(sorted(config.items())))
        if args.connect or args.master or args.catalog or config:
            if args.connect or self._owned is None or wanted != self._opened:
                return self._connect(*wanted)
            self.session = self._owned
            return self.session
        if self.session is not None:
            return self.session
        sessions = {id(v): v for v in list(ns.values()) if isinstance(v, wavesql.Session)}
        if len(sessions) == 1:
            self.session = next(iter(sessions.values()))
            return self.session
        if len(sessions) > 1:
            names = sorted(k for k, v in ns.items()
                           if isinstance(v, wavesql.Session) and not k.startswith("_"))
            raise UsageError("%wavesql: several wavesql.Session variables "
                             f"({', '.join(names)}); pick one with --session NAME")
        return self._connect(None, None, ())

    def _connect(self, master, catalog, config):
        import os

        import wavesql

        # As in the CLI: the magic shows every error itself, translated and positioned;
        # Spark's ERROR log of a failed task (a JVM stack trace on stderr) would bury it.
        os.environ.setdefault("WAVESQL_SPARK_LOG_LEVEL", "OFF")
        started = time.perf_counter()
        try:
            session = wavesql.connect(master=master, catalog=catalog, config=dict(config))
        except WaveSQLError as err:
            raise CellError.of(err) from None
        if self._owned is not None:
            self._owned.close()  # only its catalog: the SparkSession stays, shared
        self.session = self._owned = session
        self._opened = (master, catalog, config)
        running = session.spark.sparkContext.master
        note = ""
        if master and master != running:
            note = (f" (Spark was already running on {running}; restart the kernel to "
                    f"change the master)")
        print(f"wavesql: Spark {running}, catalog {session.catalog.path} "
              f"({time.perf_counter() - started:.1f} s){note}")
        return session


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise UsageError(f"%wavesql: --config takes KEY=VALUE, got {text!r}")
    return key.strip(), value.strip()


def run(session, text: str, *, limit: int = DEFAULT_LIMIT, file: str | None = None
        ) -> CellResult:
    """Run ``text`` (or a ``.wsql`` file, then ``text``) in ``session``; fetch every
    statement's first ``limit`` rows.

    Raises :class:`CellError` for any WaveSQL error, including one raised by Spark while
    fetching rows; the statements before it are shown first, so a failing last
    statement does not hide what the earlier ones did.
    """
    from wavesql.dialect import parse_statements
    from wavesql.spark_errors import runtime_errors

    started = time.perf_counter()
    done: list[StatementResult] = []

    def fetch(res) -> None:
        with runtime_errors():
            done.append(render.fetch(res.dataframe, limit, text=res.statement.text))

    try:
        with runtime_errors():
            executed = session.execute_file(file) if file else []
        for res in executed:
            fetch(res)
        try:
            statements = parse_statements(text, lenient=True)
        except WaveSQLError as err:
            raise err.with_query(err.query or text) from None
        # One statement at a time, each fetched before the next runs: a failing statement
        # then still shows what the ones before it did (a CREATE that worked, say).
        for stmt in statements:
            try:
                with runtime_errors():  # DDL and Spark commands run here
                    (res,) = session.execute(stmt.text)
            except WaveSQLError as err:
                raise _anchor(err, stmt.text, text, stmt.start) from None
            fetch(res)
    except WaveSQLError as err:
        if done:
            from IPython.display import display

            display(CellResult(done, time.perf_counter() - started))
        raise CellError.of(err) from None
    return CellResult(done, time.perf_counter() - started)


def _anchor(err: WaveSQLError, piece: str, text: str, offset: int) -> WaveSQLError:
    """Re-anchor an error raised for one statement ``piece`` in the cell ``text`` it starts
    at ``offset`` of, so the line number and the caret point into the cell as typed."""
    if err.query is None or err.query == piece:
        return err.with_query(text, offset=offset if err.span is not None else 0)
    return err
