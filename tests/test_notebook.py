"""The notebook way in: ``%load_ext wavesql``, ``%%wavesql`` cells, ``wavesql.plot`` figures,
and ``examples/notebook.ipynb`` run top to bottom in a real Jupyter kernel.

Oracles: numpy on the samples (generated here, or read from the WAV with scipy), a
short-time PSD written out by hand, windows over the generated readings counted with pandas,
and the recordings' known burst times (wavesql.datasets). HTML results are parsed with the
standard library, figures inspected through their artists, never by pixels.

The magic tests run in this process on the suite's one Spark (``ws``); the notebook test
starts its own kernel, hence its own Spark, once per test session.
"""

from __future__ import annotations

import base64
import datetime as dt
import math
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import Row

from tests.data import COUNTING_WAV
from wavesql.errors import WaveSQLError

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"


# -- helpers -----------------------------------------------------------------------------

class _Tables(HTMLParser):
    """Every <table> of an HTML text as rows of cell texts (header row first), plus the text
    of every <div> with a class."""

    def __init__(self, text: str):
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self.divs: list[tuple[str, str]] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._div: tuple[str, list[str]] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "div" and dict(attrs).get("class") != "wavesql-result":
            self._div = (dict(attrs).get("class", ""), [])

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None:
            self._row.append("".join(self._cell or []))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.tables[-1].append(self._row)
            self._row = None
        elif tag == "div" and self._div is not None:
            self.divs.append((self._div[0], "".join(self._div[1])))
            self._div = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._div is not None:
            self._div[1].append(data)


def _voice() -> np.ndarray:
    from scipy.io import wavfile

    rate, data = wavfile.read(COUNTING_WAV)
    return (data / 32768.0).astype(np.float32)


def _rms(x) -> float:
    x = np.asarray(x, np.float64)
    return float(np.sqrt(np.mean(x * x)))


def _xspan(artist) -> tuple[float, float]:
    """x extent of an axvspan (a Rectangle since matplotlib 3.9, a Polygon before)."""
    if hasattr(artist, "get_width"):
        return artist.get_x(), artist.get_x() + artist.get_width()
    xs = np.asarray(artist.get_xy())[:, 0]
    return float(xs.min()), float(xs.max())


# -- cell values and option parsing (no Spark) --------------------------------------------

def test_cells_show_segments_spectra_and_arrays_compactly():
    from wavesql.notebook import format_cell

    assert format_cell(Row(start=4096, rate=44100.0, samples=[0.5] * 4096)) == \
        "seg[start=4096, 4096 samples @ 44100 Hz]"
    assert format_cell(Row(start=7, rate=12.5, samples=[1.0, 2.0])) == \
        "seg[start=7, 2 samples @ 12.5 Hz]"
    spectrum = Row(start=0, rate=48000.0, n=32, re=[0.0] * 17, im=[0.0] * 17)
    assert format_cell(spectrum) == "spectrum[start=0, n=32, 17 bins @ 48000 Hz]"
    assert format_cell([Row(start=0, rate=8000.0, samples=[0.0])] * 2) == \
        "[seg[start=0, 1 samples @ 8000 Hz], seg[start=0, 1 samples @ 8000 Hz]]"
    assert format_cell(list(range(10))) == "[0, 1, 2, 3, 4, 5, 6, 7, … 10 items]"
    assert format_cell(Row(a=1, b=0.1234567)) == "{a: 1, b: 0.123457}"
    assert format_cell(dt.datetime(2026, 1, 5, 8, 0, 0, 901000)) == "2026-01-05 08:00:00.901"
    assert format_cell(dt.datetime(2026, 1, 5, 8, 0)) == "2026-01-05 08:00:00"
    assert format_cell(0.1) == "0.1" and format_cell(None) == "NULL"


def test_options_come_off_the_front_and_the_statement_keeps_its_spelling():
    from wavesql.notebook import expand_templates, split_options

    assert split_options("-o df --limit 5 SELECT 'a  b' AS s, -1 AS m") == \
        ("-o df --limit 5", "SELECT 'a  b' AS s, -1 AS m")
    assert split_options("--catalog 'my dir/c.db' --connect") == \
        ("--catalog 'my dir/c.db' --connect", "")
    assert split_options("--limit=3 SHOW STREAMS") == ("--limit=3", "SHOW STREAMS")
    assert split_options("SELECT 1 -- a comment") == ("", "SELECT 1 -- a comment")
    assert expand_templates("FROM '{{ folder }}/{{name}}.wav'", {"folder": "/d", "name": 7}) == \
        "FROM '/d/7.wav'"


def test_template_values_are_bound_as_data_not_sql():
    from wavesql.notebook import expand_templates

    hostile = "x' OR '1'='1"
    ns = {"who": hostile, "n": 3, "v": 0.5, "col": "a`b", "none": None, "ok": True,
          "xs": [1, 2.5], "t": "mic [SAMPLES 256]"}
    assert expand_templates("WHERE who = '{{who}}'", ns) == "WHERE who = 'x'' OR ''1''=''1'"
    assert expand_templates("WHERE who = {{who}} AND n < {{n}} AND v > {{v}}", ns) == \
        "WHERE who = 'x'' OR ''1''=''1' AND n < 3 AND v > 0.5D"
    assert expand_templates("SELECT `{{col}}`, {{none}}, {{ok}}, {{xs}}", ns) == \
        "SELECT `a``b`, NULL, TRUE, ARRAY(1, 2.5D)"
    assert expand_templates("SELECT * FROM {{ t!raw }} -- {{not_a_variable}}", ns) == \
        "SELECT * FROM mic [SAMPLES 256] -- {{not_a_variable}}"
    assert expand_templates("SELECT 'it''s {{n}}'", ns) == "SELECT 'it''s 3'"


def test_a_hostile_template_value_stays_a_value(ws):
    from wavesql.notebook import expand_templates

    text = expand_templates("SELECT {{who}} AS who, '{{who}}' AS again",
                            {"who": "x' AS who, 1 AS injected --"})
    row = ws.sql(text).collect()[0]
    assert row.asDict() == {"who": "x' AS who, 1 AS injected --",
                            "again": "x' AS who, 1 AS injected --"}


# -- wavesql.plot (no Spark) ---------------------------------------------------------------

def _windows(x: np.ndarray, rate: float, n: int, m: int, skip=()):
    """Rows of [SAMPLES n SLIDE m] windows over x, shuffled, minus the windows in skip."""
    rows = [Row(voice=Row(start=s, rate=rate, samples=x[s:s + n].tolist()))
            for s in range(0, len(x), m) if s not in skip]
    np.random.default_rng(0).shuffle(rows)
    return rows


def test_waveform_draws_every_sample_once_and_keeps_gaps():
    import wavesql

    rate = 8000.0
    x = np.random.default_rng(1).standard_normal(10_000).astype(np.float32)
    # overlapping windows (every sample in two of them), with [6000, 7000) missing
    rows = _windows(x, rate, 1000, 500, skip={5500, 6000, 6500})
    fig = wavesql.plot.waveform(rows, "voice")
    (ax,) = fig.axes
    lines = ax.get_lines()
    assert len(lines) == 2  # the gap is not bridged
    for line, (lo, hi) in zip(lines, [(0, 6000), (7000, 10_000)]):
        np.testing.assert_array_equal(line.get_ydata(), x[lo:hi].astype(np.float64))
        np.testing.assert_allclose(line.get_xdata(), np.arange(lo, hi) / rate, rtol=0, atol=1e-12)
        assert line.get_gid() == wavesql.plot.WAVEFORM_GID
    assert ax.get_xlabel() == "time (s)" and ax.get_ylabel() == "voice"
    assert fig._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")


def test_waveform_of_several_channels_shares_the_time_axis():
    import wavesql

    rate = 100.0
    t = np.arange(300)
    left, right = np.sin(t / 7), np.cos(t / 5)
    rows = [Row(left=Row(start=s, rate=rate, samples=left[s:s + 100].tolist()),
                right=Row(start=s, rate=rate, samples=right[s:s + 100].tolist()))
            for s in (200, 0, 100)]
    fig = wavesql.plot.waveform(rows, ["left", "right"])
    assert [ax.get_ylabel() for ax in fig.axes] == ["left", "right"]
    for ax, want in zip(fig.axes, (left, right)):
        (line,) = ax.get_lines()
        np.testing.assert_array_equal(line.get_ydata(), want)
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])


def test_detections_are_marked_where_the_detector_put_them():
    import wavesql

    rate = 1000.0
    x = np.zeros(3000, np.float32)
    rows = _windows(x, rate, 500, 500)
    # times as PySpark returns TIMESTAMPs: naive, in this process's time zone
    at = lambda s: dt.datetime.fromtimestamp(s)  # noqa: E731
    events = [Row(event=1, t_from=at(0.25), t_to=at(0.5)),
              Row(event=2, t_from=at(1.7505), t_to=at(2.0))]
    fig = wavesql.plot.detections(rows, "voice", events)
    marks = [a for a in fig.axes[0].get_children() if a.get_gid() == wavesql.plot.DETECTION_GID]
    assert [tuple(round(v, 9) for v in _xspan(a)) for a in marks] == [(0.25, 0.5), (1.7505, 2.0)]
    # instants (end=None) become vertical lines; plain numbers are seconds
    fig = wavesql.plot.detections(rows, "voice", [0.125, 2.5])
    lines = [a for a in fig.axes[0].get_lines() if a.get_gid() == wavesql.plot.DETECTION_GID]
    assert [line.get_xdata()[0] for line in lines] == [0.125, 2.5]


def test_spectrogram_is_the_short_time_psd_of_each_run():
    import wavesql

    rate, n = 8000.0, 256
    t = np.arange(8000) / rate
    x = (np.sin(2 * np.pi * 1000 * t) + 0.1 * np.random.default_rng(2).standard_normal(8000))
    x = x.astype(np.float32)
    rows = _windows(x, rate, 1000, 1000, skip={4000})  # two runs: [0, 4000) and [5000, 8000)
    fig = wavesql.plot.spectrogram(rows, "voice", nperseg=n)
    meshes = [a for a in fig.axes[0].get_children() if a.get_gid() == wavesql.plot.SPECTROGRAM_GID]
    assert len(meshes) == 2
    top = max(float(np.max(m.get_array())) for m in meshes)
    assert all(m.get_clim() == (top - 80, top) for m in meshes)  # colours span 80 dB
    step = n - n // 8  # scipy's default overlap: nperseg // 8
    w = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n) / n)  # periodic Hann
    for mesh, (lo, hi) in zip(meshes, [(0, 4000), (5000, 8000)]):
        run = x[lo:hi].astype(np.float64)
        starts = range(0, len(run) - n + 1, step)
        want = []
        for s in starts:
            seg = run[s:s + n] - run[s:s + n].mean()
            p = np.abs(np.fft.rfft(w * seg)) ** 2 / (rate * np.sum(w * w))
            p[1:-1] *= 2  # one-sided density
            want.append(10 * np.log10(p))
        got = np.asarray(mesh.get_array()).reshape(n // 2 + 1, len(starts))
        np.testing.assert_allclose(got, np.array(want).T, atol=1e-6)
        # every column's loudest bin is the tone's: 1000 Hz = bin 1000 / (8000 / 256) = 32
        assert set(np.argmax(got, axis=0)) == {32}
        centres = mesh.get_coordinates()[0, :-1, 0] + np.diff(mesh.get_coordinates()[0, :, 0]) / 2
        np.testing.assert_allclose(centres, [(lo + s + n / 2) / rate for s in starts], atol=1e-9)


def test_plot_inputs_that_are_not_signals_are_refused():
    import wavesql

    with pytest.raises(TypeError, match="signal segments"):
        wavesql.plot.waveform([Row(voice=1.5)], "voice")
    mixed = [Row(v=Row(start=0, rate=8000.0, samples=[0.0])),
             Row(v=Row(start=1, rate=16000.0, samples=[0.0]))]
    with pytest.raises(ValueError, match="rates"):
        wavesql.plot.waveform(mixed, "v")
    with pytest.raises(ValueError, match="nperseg"):
        wavesql.plot.spectrogram([Row(v=Row(start=0, rate=8000.0, samples=[0.0] * 10))], "v")


def test_import_wavesql_imports_neither_ipython_nor_matplotlib():
    code = ("import sys, wavesql; "
            "assert not {'IPython', 'matplotlib', 'pyspark'} & set(sys.modules), sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- the magic, in this process, on the suite's Spark -------------------------------------

@pytest.fixture
def ip(ws):
    """IPython with the extension loaded; the magic forgets its session afterwards."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.extension_manager.load_extension("wavesql")  # %load_ext, without its chatter
    magics = shell.magics_manager.registry["WaveSQLMagics"]
    before = set(shell.user_ns)
    yield shell
    magics.session = magics._owned = magics._opened = None
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]


def test_cell_magic_runs_statements_and_shows_the_first_rows(ip, ws):
    voice = _voice()
    ip.user_ns.update(ws=ws, wav=COUNTING_WAV)
    result = ip.run_cell_magic("wavesql", "--session ws -o frames --limit 3", (
        "CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{{wav}}' FORMAT wav "
        "SEGMENT 4096;\n"
        "SELECT start_time(voice) AS t, voice, seg_rms(voice) AS rms\n"
        "FROM counting [SAMPLES 4096] ORDER BY t"))
    first, query = result.results
    assert first.status == "created signal counting (version 1)"
    assert query.columns == ["t", "voice", "rms"] and len(query.rows) == 3 and query.truncated

    page = _Tables(result._repr_html_())
    assert ("wavesql-status", "created signal counting (version 1)") in page.divs
    (table,) = page.tables
    assert table[0] == ["t", "voice", "rms"]
    for k, row in enumerate(table[1:]):
        assert row[1] == f"seg[start={4096 * k}, 4096 samples @ 44100 Hz]"
        assert float(row[2]) == pytest.approx(_rms(voice[4096 * k:4096 * (k + 1)]), rel=1e-9)
    counts = [text for cls, text in page.divs if cls == "wavesql-count"]
    assert counts and counts[0].startswith("first 3 rows shown")
    assert "seg[start=8192, 4096 samples @ 44100 Hz]" in repr(result)

    frames = ip.user_ns["frames"]  # -o: the whole result as a Spark DataFrame
    assert frames.count() == math.ceil(len(voice) / 4096)


def test_line_magic_uses_the_session_in_the_namespace(ip, ws):
    ip.user_ns["my_session"] = ws
    result = ip.run_line_magic("wavesql", "SELECT 1 + 1 AS two, 'a  b' AS s, CAST(NULL AS INT) AS z")
    assert [tuple(r) for r in result.rows] == [(2, "a  b", None)]
    (table,) = _Tables(result._repr_html_()).tables
    assert table == [["two", "s", "z"], ["2", "a  b", "NULL"]]
    assert ip.magics_manager.registry["WaveSQLMagics"].session is ws


def test_errors_show_the_wavesql_text_and_the_kernel_goes_on(ip, ws, capsys):
    ip.user_ns["ws"] = ws
    ip.user_ns["wav"] = COUNTING_WAV
    outcome = ip.run_cell(
        "%%wavesql --session ws\n"
        "CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{{wav}}' FORMAT wav;\n"
        "SELECT *\nFROM countng")
    err = outcome.error_in_exec
    assert isinstance(err, WaveSQLError) and err.code == "UNKNOWN_STREAM"
    out = capsys.readouterr().out
    assert "created signal counting (version 1)" in out  # what ran before the error is shown
    assert str(err) in out and "hint: did you mean `counting`?" in out
    assert err.line == 3 and err.column == 6  # the caret points into the cell as typed
    assert "3 | FROM countng\n  |      ^^^^^^^" in out
    assert "Traceback" not in out and 'File "' not in out
    assert ip.run_cell("%wavesql SELECT 41 + 1 AS x").result.rows[0].x == 42


def test_an_error_raised_while_spark_runs_is_translated(ip, ws, capsys):
    ip.user_ns["ws"] = ws
    outcome = ip.run_cell("%wavesql --session ws SELECT raise_error(concat('bo', 'om')) AS x")
    assert isinstance(outcome.error_in_exec, WaveSQLError)
    assert outcome.error_in_exec.code == "SPARK_ERROR"
    out = capsys.readouterr().out
    assert out.startswith("error[SPARK_ERROR]") and "boom" in out and "Traceback" not in out


def test_bad_options_are_usage_errors(ip, ws):
    from IPython.core.error import UsageError

    ip.user_ns["ws"] = ws
    ip.user_ns["x"] = 3
    for line in ("--session x SELECT 1", "--session nobody SELECT 1", "--limit many SELECT 1",
                 "--session ws --limit -1 SELECT 1", "--session ws --config novalue SELECT 1",
                 "--session ws SELECT '{{undefined_name}}'"):
        with pytest.raises(UsageError):
            ip.run_line_magic("wavesql", line)


def test_file_option_runs_a_wsql_file(ip, ws, tmp_path):
    (tmp_path / "job.wsql").write_text(
        "CREATE VIEW numbers AS SELECT id FROM range(10);\n"
        "SELECT sum(id) AS total FROM numbers;\n")
    ip.user_ns["ws"] = ws
    ip.user_ns["job"] = str(tmp_path / "job.wsql")
    result = ip.run_line_magic("wavesql", "--session ws -f {{job}}")
    assert result.results[0].status == "created view numbers (version 1)"
    assert result.rows[0].total == sum(range(10))


def test_connect_opens_a_catalog_on_the_running_spark(ip, spark, tmp_path, capsys):
    saved = dict(spark.conf.getAll)
    try:
        ip.run_line_magic("wavesql", f"--connect --master local[1] --catalog {tmp_path}/nb.db")
        magics = ip.magics_manager.registry["WaveSQLMagics"]
        assert magics.session.spark is spark  # no second SparkSession in this process
        assert magics.session.catalog.path == str(tmp_path / "nb.db")
        out = capsys.readouterr().out
        assert f"catalog {tmp_path / 'nb.db'}" in out and "already running on local[2]" in out
        ip.run_cell_magic("wavesql", "", "CREATE VIEW v AS SELECT 1 AS one")
        # the same options again reuse the session; the catalog kept the view
        ip.run_line_magic("wavesql", f"--master local[1] --catalog {tmp_path}/nb.db")
        assert ip.run_line_magic("wavesql", "SELECT one FROM v").rows[0].one == 1
    finally:
        magics.session.close()
        # connect()'s getOrCreate wrote WaveSQL's defaults into the shared session's conf
        # (as SparkSession.builder does); undo it the same way, for the tests that follow
        conf = spark._jsparkSession.sessionState().conf()
        for key, value in spark.conf.getAll.items():
            if key not in saved:
                conf.unsetConf(key)
            elif value != saved[key]:
                conf.setConfString(key, saved[key])
        assert dict(spark.conf.getAll) == saved


# -- the example notebook, in a real kernel -----------------------------------------------

@pytest.fixture(scope="session")
def notebook(tmp_path_factory):
    """``examples/notebook.ipynb`` executed by nbclient in a kernel of this interpreter."""
    import json
    import time

    import nbformat
    from nbclient import NotebookClient

    root = tmp_path_factory.mktemp("notebook")
    kernel = root / "jupyter" / "kernels" / "wavesql-test"
    kernel.mkdir(parents=True)
    (kernel / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "WaveSQL tests", "language": "python"}))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               TMPDIR=str(root))  # the notebook's temporary folder lands under the test's
    nb = nbformat.read(NOTEBOOK, as_version=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(root / "jupyter"))  # find the kernel spec above
        client = NotebookClient(nb, kernel_name="wavesql-test", timeout=600,
                                resources={"metadata": {"path": str(root)}})
        started = time.perf_counter()
        client.execute(env=env)
        nb.metadata["wavesql_test_seconds"] = time.perf_counter() - started
    return nb


def _cell(nb, marker: str):
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return cell


def _html_table(cell) -> list[list[str]]:
    (html,) = [o.data["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    tables = _Tables(html).tables
    return tables[-1]


_TRUTH = {}


def _truth():
    """The array recording the notebook generates (seeded: the same call, the same data)."""
    if "array" not in _TRUTH:
        import tempfile

        from wavesql.datasets import array_recording

        with tempfile.TemporaryDirectory() as folder:
            _TRUTH["array"] = array_recording(Path(folder) / "array", seconds=4.0, events=4)
    return _TRUTH["array"]


def test_example_notebook_runs_without_errors_but_the_deliberate_one(notebook):
    errors = [(i, o) for i, c in enumerate(notebook.cells) if c.cell_type == "code"
              for o in c.outputs if o.output_type == "error"]
    (index, error), = errors
    assert "raises-exception" in notebook.cells[index].metadata.get("tags", [])
    # the WaveSQL text, line for line, and no Python traceback
    assert error.traceback == [
        "error[UNKNOWN_STREAM]: unknown stream or table `reading`",
        " --> line 1, column 38",
        "  |",
        "1 | SELECT sensor, avg(temperature) FROM reading GROUP BY sensor",
        "  |                                      ^^^^^^^",
        "  = hint: did you mean `readings`?"]
    print(f"\nexample notebook executed in {notebook.metadata['wavesql_test_seconds']:.1f} s;"
          " slowest cells:")
    for seconds, source in sorted(_cell_seconds(notebook), reverse=True)[:4]:
        print(f"  {seconds:5.1f} s  {source}")


def _cell_seconds(nb):
    """(seconds, first line) of every executed code cell, from nbclient's timing records."""
    for cell in nb.cells:
        times = cell.metadata.get("execution", {})
        if "iopub.execute_input" in times and "shell.execute_reply" in times:
            took = (dt.datetime.fromisoformat(times["shell.execute_reply"].replace("Z", "+00:00"))
                    - dt.datetime.fromisoformat(times["iopub.execute_input"].replace("Z", "+00:00")))
            yield took.total_seconds(), cell.source.splitlines()[0]


def test_example_notebook_shows_segments_with_their_numbers(notebook):
    table = _html_table(_cell(notebook, "-o audio"))
    assert table[0] == ["t", "ch1", "rms", "peak"] and len(table) == 1 + 5
    samples = _truth().samples[:, 0]
    for k, row in enumerate(table[1:]):
        seg = samples[4096 * k:4096 * (k + 1)]
        assert row[1] == f"seg[start={4096 * k}, 4096 samples @ 48000 Hz]"
        assert float(row[2]) == pytest.approx(_rms(seg), rel=1e-9)
        assert float(row[3]) == float(seg.max())


def test_example_notebook_detects_every_burst(notebook):
    from wavesql.udfs.sigseg import sample_at

    truth = _truth()
    table = _html_table(_cell(notebook, "-o events"))
    assert table[0] == ["event", "t_from", "t_to"]
    assert len(table) - 1 == len(truth.event_starts)  # every burst, no false alarm
    for (event, t_from, t_to), start, k in zip(table[1:], truth.event_starts, range(1, 99)):
        assert int(event) == k
        lo = sample_at(_micros(t_from), truth.rate)
        hi = sample_at(_micros(t_to), truth.rate)
        # the detected range covers the loud middle of the 20 ms burst
        assert lo <= start + truth.event_length // 4 and hi >= start + 3 * truth.event_length // 4


def _micros(text: str) -> int:
    value = dt.datetime.fromisoformat(text)
    delta = value - dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def test_example_notebook_draws_its_figures(notebook):
    for marker in ("wavesql.plot.detections", "wavesql.plot.spectrogram"):
        cell = _cell(notebook, marker)
        (png,) = [o.data["image/png"] for o in cell.outputs if "image/png" in o.get("data", {})]
        assert base64.b64decode(png).startswith(b"\x89PNG\r\n\x1a\n")


def test_example_notebook_windowed_stream_query_counts_each_window(notebook, tmp_path):
    import pyarrow.parquet as pq

    from wavesql.demo import generate

    generate(tmp_path / "fleet")  # seeded: the readings the notebook generated
    frame = pq.read_table(tmp_path / "fleet" / "readings").to_pandas()
    frame = frame[frame.sensor.isin(["s00", "s01"])]
    ts = frame.ts.dt.tz_convert("UTC").dt.tz_localize(None)
    # [RANGE 10 MINUTES SLIDE 10 MINUTES]: the window reported at T holds (T - 10 min, T]
    frame = frame.assign(_time=ts.dt.ceil("10min"))
    want = []
    for (time, sensor), group in sorted(frame.groupby(["_time", "sensor"])):
        want.append((str(time), sensor, len(group), group.temperature.mean(),
                     group.vibration.max()))
    table = _html_table(_cell(notebook, "[RANGE 10 MINUTES SLIDE 10 MINUTES]"))
    assert table[0] == ["_time", "sensor", "n", "avg_temp", "max_vibration"]
    assert len(table) - 1 == len(want) == 8
    for got, (time, sensor, n, mean, peak) in zip(table[1:], want):
        assert (got[0], got[1], int(got[2])) == (time, sensor, n)
        assert float(got[3]) == pytest.approx(mean, abs=0.005 + 1e-9)
        assert float(got[4]) == peak
