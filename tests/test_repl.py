"""The interactive REPL (wavesql/repl/).

The pieces that need no Spark (statement boundaries, highlighting, completion, cell
formatting) are tested directly; the REPL itself is driven as a user drives it: ``python -m
wavesql`` in a pseudo-terminal (pexpect), keystrokes in, the terminal's output read back.
One spawn covers the whole session, since each one starts a JVM.
"""

from __future__ import annotations

import os
import re
import sys
import time

import numpy as np
import pandas as pd
import pytest

from wavesql.catalog import Catalog
from wavesql.catalog.objects import SignalDef, StreamDef
from wavesql.planner.dict_environment import DictEnvironment
from wavesql.render import format_value
from wavesql.repl import WaveSQLCompleter, WaveSQLLexer
from wavesql.repl.shell import _pieces, _ready


# -- no Spark --------------------------------------------------------------------------------

def test_statement_boundaries():
    # Enter runs the buffer when the dialect calls it complete (tests/test_dialect.py tests
    # wavesql.dialect.is_complete / split_statements themselves); meta-commands and quit
    # need no `;`
    assert _ready("SELECT 1;")
    assert _ready("SELECT 1;  -- trailing comment\n")
    assert not _ready("SELECT 1")
    assert not _ready("SELECT ';'")  # inside a string
    assert not _ready("SELECT 1 /* ; */")  # inside a comment
    assert not _ready("SELECT 'it''s;")  # an unterminated string
    assert _ready("   ") and _ready("\\d trades") and _ready("quit")
    # the buffer's statements, each at its offset (for carets into what was typed)
    assert _pieces("SELECT 1; SELECT 'a;b';\n-- only a comment\n") == [
        (0, "SELECT 1"), (10, "SELECT 'a;b'")]
    assert _pieces("-- c\nSTREAM SELECT 1;") == [(5, "STREAM SELECT 1")]
    # an unterminated string (Alt-Enter runs it): the statement runs to the end, and fails
    # there when it runs, after the ones before it
    assert _pieces("SELECT 1; SELECT 'it''s") == [(0, "SELECT 1"), (10, "SELECT 'it''s")]


def test_lexer_knows_wavesql_words():
    from pygments.token import Keyword

    tokens = [(t, v) for t, v in WaveSQLLexer().get_tokens(
        "SELECT x FROM mic [SAMPLES 256 SLIDE 128] EMIT FINAL LATE INTO 'l' \\streams")]
    kinds = {v.upper(): t for t, v in tokens if v.strip()}
    for word in ("SELECT", "SAMPLES", "SLIDE", "EMIT", "FINAL", "LATE", "INTO"):
        assert kinds[word] in Keyword, word
    assert kinds["\\STREAMS"] is Keyword.Pseudo
    assert kinds["MIC"] not in Keyword


_HERE = os.path.dirname(os.path.abspath(__file__))


class _FakeSession:
    """What the completer reads from a session: the catalog and the environment's function
    names."""

    def __init__(self):
        self.catalog = Catalog(":memory:")
        self.catalog.create(StreamDef("trades", [("sym", "STRING"), ("px", "DOUBLE"),
                                                 ("ts", "TIMESTAMP")], "/data/t", "parquet"))
        self.catalog.create(SignalDef("mic", [("ch1", "FLOAT")], 48000, "/data/m.wav"))

        # the binder's environment without Spark, with a few of Spark's function names
        self.env = DictEnvironment(functions={"avg", "transform", "translate", "+"})


def _complete(completer, text):
    """Completions with the cursor at ``|`` (default: at the end)."""
    from prompt_toolkit.completion import CompleteEvent
    from prompt_toolkit.document import Document

    cursor = text.find("|")
    if cursor < 0:
        cursor = len(text)
    doc = Document(text.replace("|", ""), cursor_position=cursor)
    return [c.display_text for c in completer.get_completions(
        doc, CompleteEvent(completion_requested=True))]


def test_completion_from_the_catalog():
    completer = WaveSQLCompleter(_FakeSession())
    completer.refresh()
    assert _complete(completer, "SELECT * FROM tr") == ["trades"]  # only relations after FROM
    assert _complete(completer, "SELECT trades.p") == ["px"]  # columns of one object
    assert _complete(completer, "SELECT t.s| FROM trades t") == ["sym"]  # through an alias
    # Anywhere else: columns first (of the objects in the statement first), then signal
    # functions, Spark functions and keywords.
    found = _complete(completer, "SELECT C")
    assert found[0] == "ch1" and {"cfar", "crest_factor", "CASE", "CAST"} <= set(found)
    assert "lowpass" in _complete(completer, "SELECT low")  # signal functions
    assert _complete(completer, "SELECT transl") == ["translate"]  # Spark functions
    assert _complete(completer, "sel") == ["select"]  # keywords in the case being typed
    assert _complete(completer, "SELECT * FROM trades [SAM") == ["SAMPLES"]
    assert _complete(completer, "SELECT * FROM trades [RA") == ["RANGE"]  # no functions
    assert _complete(completer, "DROP STREAM t") == ["trades"]
    assert _complete(completer, "STREAM SEL") == ["SELECT"]
    assert _complete(completer, "\\st") == ["\\streams", "\\status", "\\stop"]
    assert _complete(completer, "\\d m") == ["mic"]
    assert _complete(completer, f"CREATE STREAM s (x INT) FROM '{_HERE}/test_rep") == [
        "test_repl.py"]  # paths inside quotes
    # DDL shows up after a refresh
    completer.session.catalog.create(StreamDef("quotes", [("bid", "DOUBLE")], "/q", "json"))
    completer.refresh()
    assert _complete(completer, "SELECT * FROM q") == ["quotes"]


def test_cells_are_compact():
    from pyspark.sql import Row

    seg = Row(start=4096, rate=44100.0, samples=[0.0] * 4096)
    assert format_value(seg) == "⟨start=4096 rate=44100 n=4096⟩"
    assert format_value([seg, None]) == "[⟨start=4096 rate=44100 n=4096⟩, NULL]"
    assert format_value(list(range(20))) == "[0, 1, 2, 3, 4, 5, 6, 7, … 20 items]"
    assert format_value(Row(a=1, b="x", c=[0.1234567891])) == "{a: 1, b: x, c: [0.123457]}"
    spectrum = Row(start=0, rate=8000.0, n=256, re=[0.0] * 129, im=[0.0] * 129)
    assert format_value(spectrum) == "⟨spectrum start=0 rate=8000 n=256 bins=129⟩"


def test_one_renderer_in_the_three_front_ends_styles():
    """wavesql.render shows results for the REPL, the CLI and the notebook; where they
    differ it is a Style field: cell values, number alignment, the cut note, times."""
    import io

    from pyspark.sql import Row
    from rich.console import Console

    from wavesql import render

    class Rows(render.Result):  # what Spark's schema would say: `n` is a number
        numeric = property(lambda self: [True, False])

    def shown(result, style, timing=True):
        screen = io.StringIO()
        console = Console(file=screen, width=100, highlight=False)
        for renderable in render.terminal(result, style, timing):
            console.print(renderable)
        return screen.getvalue()

    rows = [(1, "[b]x[/b] :smile:"), (22, None)]
    cut = Rows("", None, ["n", "s"], rows, truncated=True, elapsed=0.25)
    repl, cli = shown(cut, render.REPL), shown(cut, render.CLI)
    assert "│  1 │ [b]x[/b] :smile: │" in repl  # numbers right-aligned; values never markup
    assert "│ 1  │ [b]x[/b] :smile: │" in cli and "│ 22 │ NULL" in cli
    assert "(first 2 rows shown, more were cut (\\rows N shows more), 0.25 s)" in repl
    assert "(first 2 rows, 0.25 s)" in cli
    assert "0.25" not in shown(cut, render.REPL, timing=False)  # \timing off
    assert render.plain(cut).endswith(
        "(first 2 rows shown, more not fetched (--limit N shows more) · 0.25 s)")
    assert "<td>[b]x[/b] :smile:</td>" in render.html(cut)

    status = render.Result("", None, ["status"], [("created stream s (version 1)",)],
                           elapsed=0.25)
    assert shown(status, render.REPL) == "created stream s (version 1) (0.25 s)\n"
    assert shown(status, render.CLI) == "created stream s (version 1)\n"  # scripts read it
    assert render.html(status) == ('<div class="wavesql-status">created stream s '
                                   '(version 1)</div>')
    seg = Row(start=0, rate=8000.0, samples=[0.0] * 3)
    assert render.cell_text(seg, render.REPL) == "⟨start=0 rate=8000 n=3⟩"
    assert render.cell_text(seg, render.NOTEBOOK) == "seg[start=0, 3 samples @ 8000 Hz]"
    assert render.cell_text(1.5, render.CLI) == "1.5"


# -- the REPL in a terminal ------------------------------------------------------------------

_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[()][A-Za-z0-9]|\x1b[=>]|\r")
SECOND = 1_000_000


class _Terminal:
    """A pexpect child whose output is read as text with the terminal escapes removed.

    ``wait_for`` looks only at output that arrived since the last ``send``, so each step
    waits for its own results, not for an earlier prompt still in the buffer.
    """

    def __init__(self, child):
        self.child = child
        self.raw = ""
        self.mark = 0

    @property
    def screen(self) -> str:
        return _ESCAPES.sub("", self.raw)

    def send(self, keys: str) -> None:
        self._read_available()
        self.mark = len(self.screen)
        self.child.send(keys)

    def _read_available(self, timeout: float = 0.0) -> bool:
        import pexpect

        try:
            self.raw += self.child.read_nonblocking(65536, timeout=timeout)
            return True
        except pexpect.TIMEOUT:
            return False

    def wait_for(self, *needles: str, timeout: float = 180) -> str:
        """Wait until ``needles`` appear in order (regexes) in the output since the mark."""
        deadline = time.monotonic() + timeout
        pos = self.mark
        for needle in needles:
            pattern = re.compile(needle)
            while True:
                found = pattern.search(self.screen, pos)
                if found:
                    pos = found.end()
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"{needle!r} did not appear within {timeout} s; the "
                                         f"terminal showed (the end):\n{self.screen[self.mark:][-4000:]}")
                self._read_available(0.5)
        shown = self.screen[self.mark:pos]
        self.mark = pos
        return shown

    def run(self, keys: str, *needles: str, timeout: float = 180) -> str:
        """Type ``keys``, wait for ``needles`` and the next prompt; return what was shown."""
        self.send(keys)
        return self.wait_for(*needles, "wavesql>", timeout=timeout)


def _trades(folder, name, start_s, stop_s):
    """A Parquet file of one trade every 0.5 s in [start_s, stop_s), alternating a / b."""
    folder.mkdir(exist_ok=True)
    ts = np.arange(start_s * SECOND, stop_s * SECOND, SECOND // 2)
    frame = pd.DataFrame({"sym": np.where(np.arange(len(ts)) % 2 == 0, "a", "b"),
                          "px": np.arange(len(ts), dtype=float),
                          "ts": pd.to_datetime(ts, unit="us").astype("datetime64[us]")})
    # Written beside the folder and moved in: a running stream must never see half a file.
    scratch = folder.parent / f".{name}"
    frame.to_parquet(scratch)
    os.replace(scratch, folder / name)


@pytest.mark.spark
def test_repl_in_a_terminal(tmp_path):
    pexpect = pytest.importorskip("pexpect")
    folder = tmp_path / "trades"
    _trades(folder, "part-0.parquet", 0, 25)
    history = tmp_path / "history"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, WAVESQL_HISTORY=str(history),
               TERM="xterm-256color",
               # No terminal answers prompt_toolkit's cursor-position requests here.
               PROMPT_TOOLKIT_NO_CPR="1")
    # the terminal's own size (200 wide), not one inherited (pytest-xdist's workers set
    # COLUMNS=80, which rich would take over the terminal's)
    env.pop("COLUMNS", None)
    env.pop("LINES", None)
    child = pexpect.spawn(sys.executable, ["-m", "wavesql", "--master", "local[2]",
                                           "--catalog", str(tmp_path / "c.db")],
                          cwd=str(tmp_path), env=env, encoding="utf-8",
                          dimensions=(50, 200), timeout=180)
    term = _Terminal(child)
    try:
        term.wait_for("WaveSQL", r"\\help", "wavesql>", timeout=300)

        # A multi-line statement: Enter inserts a newline until the statement ends with `;`.
        term.send("CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP)\r")
        term.wait_for(r"\.\.\.>")
        term.send(f"FROM '{folder}' FORMAT parquet\r")
        term.wait_for(r"\.\.\.>")
        term.run("EVENT TIME ts WATERMARK 1 SECOND;\r", "created stream trades")

        # Tab completes the stream name just created (the completer refreshed after DDL).
        term.send("SELECT sym, count(*) AS n FROM tra")
        term.wait_for("tra")
        term.send("\t")
        term.wait_for("des")
        shown = term.run(" GROUP BY sym ORDER BY sym;\r", r"\(2 rows, [0-9.]+ s\)")
        assert re.search(r"│ a\s+│\s+25 │", shown) and re.search(r"│ b\s+│\s+25 │", shown)

        # An error shows the caret excerpt and hint; the REPL carries on.
        shown = term.run("SELECT sym,\r  pxx\rFROM trades;\r", r"error\[UNKNOWN_COLUMN\]",
                         r"2 \|\s+pxx", r"\^\^\^", "hint")
        assert re.search(r"hint: did you mean .*`px`", shown)
        term.run("SELECT 1 AS one;\r", r"\(1 row")

        # Meta-commands.
        shown = term.run("\\streams\r", "trades")
        assert "STREAM" in shown and "event time ts, watermark 1 s" in shown
        shown = term.run("\\d trades\r", "event_time")
        assert re.search(r"│ px\s+│ DOUBLE", shown, re.IGNORECASE)
        term.run("\\timing\r", "Timing is off")
        assert "row," not in term.run("SELECT 2 AS two;\r", r"\(1 row\)")
        term.run("\\timing\r", "Timing is on")
        term.run("\\explain SELECT sym FROM trades WHERE px > 1\r", "trades")
        term.run("\\nope\r", r"unknown meta-command \\nope")

        # Ctrl-C cancels a long batch query (after its progress bar showed) and keeps the REPL.
        term.send("SELECT max(id % 7) AS m FROM range(0, 1000000000000, 1, 2);\r")
        term.wait_for("tasks")
        child.sendintr()
        term.wait_for("cancel", "wavesql>", timeout=120)
        term.run("SELECT 3 AS three;\r", r"\(1 row")

        # A continuous query shows each micro-batch live until Ctrl-C stops it. A query that
        # cannot run continuously is refused with the position in what was typed.
        term.run("STREAM SELECT sym, count(*) FROM trades GROUP BY sym;\r",
                 r"error\[STREAMING_RULE\]", "line 1, column 20", r"1 \| STREAM SELECT sym, "
                 r"count\(\*\)", r"\|\s{20}\^")
        term.send("STREAM SELECT sym, count(*) AS n FROM trades "
                  "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY sym;\r")
        # Progress 23.5 s (newest row 24.5 s - 1 s watermark), promised by the first batch
        # and applied by the next (Spark's watermark): the windows ending at 0, 10 and 20 s
        # are final; each row says so (_final) and carries the progress.
        shown = term.wait_for("Ctrl-C stops it", r"batch 0: progress none yet · in 50",
                              r"batch 1: progress 1970-01-01 00:00:23.5 · in 0")
        assert re.search(r"│ 1970-01-01 00:00:10 │ a\s+│\s+10 │ True\s+│ 1970-01-01 "
                         r"00:00:23.5 ", shown), shown
        _trades(folder, "part-1.parquet", 25, 45)  # new data while it runs
        shown = term.wait_for(r"batch 2: progress 1970-01-01 00:00:23.5 · in 40",
                              r"batch 3: progress 1970-01-01 00:00:43.5 · in 0")
        assert re.search(r"│ 1970-01-01 00:00:30 │ b\s+│\s+10 │ True", shown), shown
        child.sendintr()
        term.wait_for("stopped after 4 batches", "wavesql>", timeout=120)

        # In the background it keeps running behind the prompt; \status shows its figures.
        term.run("STREAM BACKGROUND SELECT sym, count(*) AS n FROM trades "
                 "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY sym;\r", "running in the "
                 "background")
        shown = term.run("\\status\r", "running")
        assert "RANGE 10 SECONDS" in shown
        term.run("\\stop 1\r", "stopped 1")

        term.send("\\q\r")
        child.expect(pexpect.EOF, timeout=120)
    finally:
        if child.isalive():  # a failed step: do not leave the REPL (and its JVM) behind
            child.close(force=True)
    assert child.exitstatus == 0, term.screen[-3000:]
    assert "Traceback" not in term.screen and "Exception in thread" not in term.screen
    saved = history.read_text()
    assert "FROM trades GROUP BY sym ORDER BY sym;" in saved  # the completed text was run
    assert "+CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP)\n+FROM" in saved
