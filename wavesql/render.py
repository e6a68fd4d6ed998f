"""Results as people see them: one statement's result -- its first rows, the status line of
DDL, or the text of an EXPLAIN -- fetched once and formatted for a terminal (rich) or a
notebook (HTML, plain text).

The REPL (:mod:`wavesql.repl`), the command line (:mod:`wavesql.cli`: ``-c``, piped
statements, ``run``, the line shell), ``wavesql demo`` and the ``%%wavesql`` magic
(:mod:`wavesql.notebook`) all show results through this module, so that a result is read
and a value is written one way everywhere:

* :func:`fetch` reads a DataFrame's first ``limit`` rows and one more, so a cut result is
  known to be cut without a second Spark job counting its rows;
* :func:`format_value` writes one cell: signal segments and spectra summarised, long arrays
  cut, structs and maps inline, floats inside them to 6 significant digits;
* :func:`terminal` turns a :class:`Result` into rich renderables (a table and its row count,
  the status line, or the plan); :func:`show` fetches and prints one (the CLI and the demo);
  :func:`html` and :func:`plain` write one for a notebook.

Where the front ends differ, the difference is a field of :class:`Style` rather than a
copy of the code; :data:`REPL`, :data:`CLI` and :data:`NOTEBOOK` are the three in use.
"""

from __future__ import annotations

import datetime as dt
import html as _html
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from wavesql.errors import WaveSQLError

#: Items of an array (entries of a map) a cell shows before "… N items".
MAX_ITEMS = 8
#: Spark type names shown as numbers (right-aligned in a terminal).
NUMERIC_TYPES = ("byte", "short", "integer", "long", "float", "double", "decimal")


@dataclass(frozen=True)
class Style:
    """What differs between the front ends when they show a result.

    The differences are kept as they were when each front end had its own copy of this
    code, so every front end prints what it printed before.
    """

    #: How a cell's value reads: ``"angle"`` (the REPL: ``⟨start=4096 rate=44100
    #: n=4096⟩``), ``"words"`` (the notebook: ``seg[start=4096, 4096 samples @ 44100 Hz]``),
    #: both through :func:`format_value`; or ``"str"`` (the CLI: Python's ``str(value)``).
    values: str = "angle"
    #: Right-align the columns Spark types as numbers.
    align_numbers: bool = True
    #: Dim the secondary text: NULL cells, the row count, the times.
    dim: bool = True
    #: What follows "first N rows" when the result had more rows than were fetched.
    cut_note: str = ""
    #: Between the row count and the time.
    time_sep: str = ", "
    #: A status line and a plan show their time too (else only a table's row count does).
    status_time: bool = True


#: The REPL: compact segments, numbers right-aligned, every line timed (``\\timing``).
REPL = Style(values="angle", align_numbers=True, dim=True,
             cut_note=" shown, more were cut (\\rows N shows more)", time_sep=", ",
             status_time=True)
#: ``wavesql -c``, ``wavesql run``, piped statements, the demo: output made to be read by
#: scripts too (``str`` values, no styles but the header's), status lines untimed.
CLI = Style(values="str", align_numbers=False, dim=False, cut_note="", time_sep=", ",
            status_time=False)
#: ``%%wavesql``: segments in words, the count line as ``N rows · 0.12 s``.
NOTEBOOK = Style(values="words", align_numbers=False, dim=True,
                 cut_note=" shown, more not fetched (--limit N shows more)", time_sep=" · ",
                 status_time=False)


# -- fetching --------------------------------------------------------------------------------

@dataclass
class Result:
    """One statement's result as fetched to be shown: a status line, a plan, or rows."""

    #: The statement's text ("" when the caller does not keep it).
    text: str
    dataframe: Any
    columns: list[str]
    #: The first ``limit`` rows.
    rows: list = field(default_factory=list)
    #: More rows exist than were fetched.
    truncated: bool = False
    #: Seconds to fetch the rows (the Spark job(s)), or since the caller's ``started``.
    elapsed: float = 0.0

    @property
    def status(self) -> str | None:
        """The one-line answer of DDL (``created signal ...``), else None."""
        if self.columns == ["status"] and len(self.rows) == 1:
            return str(self.rows[0][0])
        return None

    @property
    def plan(self) -> str | None:
        """The text of an ``EXPLAIN``, else None."""
        if self.columns == ["plan"] and len(self.rows) == 1:
            return str(self.rows[0][0])
        return None

    @property
    def numeric(self) -> list[bool]:
        """Per column, whether Spark types it as a number (read from the schema on use)."""
        return numeric_columns(self.dataframe)


def fetch(df, limit: int, *, text: str = "", started: float | None = None) -> Result:
    """The first ``limit`` rows of ``df``; one more is read to know whether it has more.

    ``elapsed`` counts from ``started`` (a :func:`time.perf_counter` value; the REPL counts
    the statement's planning too) or else from the start of the fetch. A Spark failure is
    raised as Spark raised it: each caller translates it its own way.
    """
    t0 = time.perf_counter() if started is None else started
    rows = df.limit(limit + 1).collect()
    elapsed = time.perf_counter() - t0
    return Result(text, df, list(df.columns), rows[:limit], len(rows) > limit, elapsed)


def numeric_columns(df) -> list[bool]:
    """Per column of ``df``, whether Spark types it as a number."""
    return [f.dataType.typeName() in NUMERIC_TYPES for f in df.schema.fields]


# -- values ----------------------------------------------------------------------------------

def format_value(value, max_items: int = MAX_ITEMS, nested: bool = False,
                 segments: str = "angle") -> str:
    """One cell as text: signal segments and spectra summarised, long arrays cut to
    ``max_items``, structs and maps inline, floats inside them to 6 significant digits,
    timestamps without trailing zeros.

    ``segments`` is how a segment and a spectrum read: ``"angle"`` (the REPL) or
    ``"words"`` (the notebook).

    >>> from pyspark.sql import Row
    >>> seg = Row(start=4096, rate=44100.0, samples=[0.0] * 4096)
    >>> format_value(seg), format_value(seg, segments="words")
    ('⟨start=4096 rate=44100 n=4096⟩', 'seg[start=4096, 4096 samples @ 44100 Hz]')
    >>> format_value(list(range(10)))
    '[0, 1, 2, 3, 4, 5, 6, 7, … 10 items]'
    """
    if value is None:
        return "NULL"
    fields = getattr(value, "__fields__", None)
    if fields:
        keys = set(fields)
        if {"start", "rate", "n", "re", "im"} <= keys:  # fft(...)'s spectrum
            return _spectrum(value, segments)
        if {"start", "rate", "samples"} <= keys:  # a SigSeg
            return _segment(value, segments)
    if fields is not None:  # a struct (pyspark Row)
        return "{" + ", ".join(f"{k}: {format_value(value[k], max_items, True, segments)}"
                               for k in fields) + "}"
    if isinstance(value, (list, tuple)):
        items = [format_value(v, max_items, True, segments) for v in value[:max_items]]
        if len(value) > max_items:
            items.append(f"… {len(value)} items")
        return "[" + ", ".join(items) + "]"
    if isinstance(value, dict):
        shown = [f"{format_value(k, max_items, True, segments)}: "
                 f"{format_value(v, max_items, True, segments)}"
                 for k, v in list(value.items())[:max_items]]
        if len(value) > max_items:
            shown.append(f"… {len(value)} entries")
        return "{" + ", ".join(shown) + "}"
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if isinstance(value, dt.datetime):
        return format_datetime(value)
    if isinstance(value, float):
        return f"{value:.6g}" if nested else repr(value)
    return str(value)


def format_number(x) -> str:
    """A rate or a count: ``44100`` for a whole number, ``12.5`` else, ``NULL`` for None."""
    if x is None:
        return "NULL"
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def _spectrum(value, segments: str) -> str:
    bins = len(value["re"]) if value["re"] is not None else 0
    if segments == "words":
        return (f"spectrum[start={value['start']}, n={value['n']}, {bins} bins "
                f"@ {format_number(value['rate'])} Hz]")
    return f"⟨spectrum start={value['start']} rate={format_number(value['rate'])} n={value['n']} " \
           f"bins={bins}⟩"


def _segment(value, segments: str) -> str:
    samples = value["samples"]
    if segments == "words":
        width = "NULL" if samples is None else str(len(samples))
        return f"seg[start={value['start']}, {width} samples @ {format_number(value['rate'])} Hz]"
    return f"⟨start={value['start']} rate={format_number(value['rate'])} " \
           f"n={len(samples) if samples else 0}⟩"


def format_datetime(value: dt.datetime) -> str:
    """``2024-05-01 12:00:03.5``: ISO with a space, fractional seconds without trailing 0s."""
    text = value.isoformat(sep=" ")
    return text.rstrip("0").rstrip(".") if "." in text else text


def cell_text(value, style: Style) -> str:
    """One cell as ``style`` writes it (:attr:`Style.values`)."""
    if style.values == "str":
        return "NULL" if value is None else str(value)
    return format_value(value, segments=style.values)


def count_line(shown: int, truncated: bool, elapsed: float | None, style: Style) -> str:
    """``3 rows, 0.12 s`` / ``first 50 rows shown, more were cut (...), 0.12 s``: the line
    under a table (``elapsed`` None: no time)."""
    what = (f"first {shown} rows{style.cut_note}" if truncated
            else f"{shown} row{'' if shown == 1 else 's'}")
    if elapsed is not None:
        what += f"{style.time_sep}{elapsed:.2f} s"
    return what


# -- a terminal ------------------------------------------------------------------------------

def console(stderr: bool = False) -> Console:
    """A console for the command line's output: no highlighting, and long lines are not
    wrapped (a piped result keeps one line per line)."""
    return Console(stderr=stderr, highlight=False, soft_wrap=True)


def table(columns: list[str], rows: Iterable, numeric: Iterable[bool] = (), *,
          style: Style = REPL, title: str | None = None) -> Table:
    """A rich table of ``rows``; ``numeric`` columns right-aligned (when the style says
    so), NULL dimmed (likewise). Cells are :class:`~rich.text.Text`, never markup: a value
    is shown exactly as it is."""
    numeric = list(numeric) if style.align_numbers else []
    numeric = numeric or [False] * len(columns)
    out = Table(header_style="bold", title=title, title_justify="left", title_style="bold")
    for name, is_num in zip(columns, numeric):
        out.add_column(name, justify="right" if is_num else "left", overflow="fold")
    null = "dim" if style.dim else ""
    for row in rows:
        out.add_row(*(Text("NULL", style=null) if v is None else Text(cell_text(v, style))
                      for v in row))
    return out


def count_note(shown: int, truncated: bool, elapsed: float | None, style: Style = REPL) -> Text:
    """:func:`count_line` in parentheses, as a terminal shows it under a table."""
    return Text(f"({count_line(shown, truncated, elapsed, style)})",
                style="dim" if style.dim else "")


def terminal(result: Result, style: Style = REPL, timing: bool = True) -> list:
    """What a terminal shows for ``result``: the status line, the plan, or the table and its
    row count; ``timing`` False leaves the time out."""
    time_style = "dim" if style.dim else ""
    if result.status is not None:  # DDL: one status line
        line = Text(result.status)
        if timing and style.status_time:
            line.append(f" ({result.elapsed:.2f} s)", style=time_style)
        return [line]
    if result.plan is not None:  # EXPLAIN: the plan text as it is
        return [Text(result.plan)] + (
            [Text(f"({result.elapsed:.2f} s)", style=time_style)]
            if timing and style.status_time else [])
    numeric = result.numeric if style.align_numbers else ()
    return [table(result.columns, result.rows, numeric, style=style),
            count_note(len(result.rows), result.truncated,
                       result.elapsed if timing else None, style)]


def show(result, out: Console, limit: int, style: Style = CLI) -> None:
    """Fetch one statement's result (a :class:`wavesql.session.StatementResult`) and print
    it on ``out``.

    Raises WaveSQLError for a failure while the rows are fetched (``SPARK_ERROR`` with
    Spark's message, ``SPARK_UNAVAILABLE``, or the code a signal function raised)."""
    from wavesql.spark_errors import runtime_errors

    with runtime_errors():
        fetched = fetch(result.dataframe, limit)
    for renderable in terminal(fetched, style):
        out.print(renderable)


def error_text(err: WaveSQLError) -> Text:
    """``str(err)`` (message, caret excerpt, hint) with the first line in red."""
    first, _, rest = str(err).partition("\n")
    text = Text(first, style="bold red")
    if rest:
        text.append("\n" + rest)
    return text


# -- a notebook ------------------------------------------------------------------------------

def html(result: Result, style: Style = NOTEBOOK) -> str:
    """``result`` as HTML: a status ``div``, a plan ``pre``, or a table and its count line."""
    if result.status is not None:
        return f'<div class="wavesql-status">{_html.escape(result.status)}</div>'
    if result.plan is not None:
        return f'<pre class="wavesql-plan">{_html.escape(result.plan)}</pre>'
    count = count_line(len(result.rows), result.truncated, result.elapsed, style)
    return (html_table(result.columns, result.rows, style) + "\n"
            f'<div class="wavesql-count" style="color: #777; font-size: smaller">'
            f'{_html.escape(count)}</div>')


def html_table(columns: list[str], rows: list, style: Style = NOTEBOOK) -> str:
    """An HTML table of ``rows`` (NULL in grey)."""
    head = "".join(f"<th>{_html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = ['<td style="color: #999">NULL</td>' if v is None
                 else f"<td>{_html.escape(cell_text(v, style))}</td>" for v in row]
        body.append("<tr>" + "".join(cells) + "</tr>")
    return ('<table class="dataframe wavesql-table">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def plain(result: Result, style: Style = NOTEBOOK) -> str:
    """``result`` as plain text (a notebook's text/plain): the status line, the plan, or a
    ``|``-separated table and its count line in parentheses."""
    if result.status is not None:
        return result.status
    if result.plan is not None:
        return result.plan
    count = count_line(len(result.rows), result.truncated, result.elapsed, style)
    return text_table(result.columns, result.rows, style) + f"\n({count})"


def text_table(columns: list[str], rows: list, style: Style = NOTEBOOK) -> str:
    """Columns padded to their widest cell, ``|`` between them, a ``-+-`` rule under the
    header."""
    cells = [[cell_text(v, style) for v in row] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]

    def line(items):
        return " | ".join(s.ljust(w) for s, w in zip(items, widths)).rstrip()

    out = [line(columns), "-+-".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)
