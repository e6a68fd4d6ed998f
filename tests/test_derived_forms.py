"""A query over a signal query's rows written as a SQL user writes it, run continuously:
the signal query as a subquery in FROM, as a catalog or temporary view, and a signal
query's own OVER windows in one SELECT (streaming/derived_hoist.py, derived_over.py) --
each cut into the parts a signal CTE is (streaming/derived.py).

Oracles: numpy's RMS over each 4096-sample window of the samples written, then pandas
(groupby per tumbling window, rolling) -- nothing from WaveSQL. The rewrites' texts are
checked without Spark: every offset kept, the names the rest reads."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATE = 8000
N = 4096  # samples per window: 0.512 s
EPOCH = dt.datetime(1970, 1, 1)
BODY = "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]"


class _Catalog(dict):
    def get(self, name):
        return super().get(name.lower())


def _catalog(**more):
    from wavesql.catalog import SignalDef, StreamDef

    return _Catalog(mic=SignalDef("mic", [("ch1", "FLOAT")], 8000.0, "/nowhere"),
                    ctl=StreamDef("ctl", [("id", "BIGINT"), ("t0", "TIMESTAMP"),
                                          ("t1", "TIMESTAMP")], "/nowhere", "json",
                                  event_time="t0"), **more)


def _split(text, catalog=None):
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    (stmt,) = parse_statements(text)
    return find_split(stmt, text, catalog if catalog is not None else _catalog())


# -- the rewrites' texts (no Spark) ------------------------------------------------------

@pytest.mark.parametrize("text, name", [
    (f"SELECT max(rms) AS peak FROM ({BODY}) f [RANGE 2 SECONDS SLIDE 2 SECONDS]", "f"),
    (f"SELECT max(f.rms) AS peak FROM ( -- a (\n{BODY}) [RANGE 2 SECONDS] AS f", "f"),
    (f"SELECT e.id, f.rms FROM ctl e ASOF JOIN ({BODY}) f ON e.t0 >= f.t", "f"),
    # the alias is a catalog stream's name the statement does not read: the part keeps it
    # (shadowing it for this statement only), so its name does not depend on the catalog
    (f"SELECT max(rms) AS peak FROM ({BODY}) ctl [RANGE 2 SECONDS]", "ctl"),
    # ... and one the statement reads: a fresh name, the alias kept
    (f"SELECT e.id, ctl.rms FROM ctl e ASOF JOIN ({BODY}) ctl ON e.t0 >= ctl.t", "ctl_2"),
    # nested: the subquery reading the signal is the part, the outer one is rest
    (f"SELECT max(rms) FROM (SELECT t, rms FROM ({BODY}) g WHERE rms > 0.1) h "
     "[RANGE 2 SECONDS]", "g"),
])
def test_a_signal_subquery_is_cut_where_it_is(text, name):
    """The subquery's body is the part at its place; in the rest it is the part's name
    padded to the body's length, the user's alias after it: every other offset kept."""
    from wavesql.dialect import parse_statements

    split = _split(text)
    (part,) = split.parts
    assert (part.name, part.time_column, part.sync) == (name, "t", False)
    assert part.inner.index(BODY) == text.index(BODY) and part.inner.strip() == BODY \
        or part.inner.strip().endswith(BODY)  # (the comment inside the parentheses)
    assert len(split.outer) == len(text) and "mic" not in split.outer
    tail = text[text.index(BODY) + len(BODY) + 1:]  # what follows the ")" is where it was
    assert split.outer.endswith(tail)
    (rest,) = parse_statements(split.outer)
    assert name in {t.name for t in rest.node.find_all(__import__("sqlglot").exp.Table)}


def test_a_sync_subquery_is_a_sync_part_and_a_view_is_a_part_named_like_it():
    from wavesql.catalog import ViewDef

    sync = ("SELECT c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c SYNC JOIN mic m "
            "ON RANGE (c.t0, c.t1)")
    text = f"SELECT count(*) AS n FROM ({sync}) s [RANGE 2 SECONDS]"
    (part,) = _split(text).parts
    assert (part.name, part.time_column, part.sync) == ("s", "t", True)
    assert part.inner.index(sync) == text.index(sync)
    # a SYNC not passing its control's event time through: planned whole, as before
    assert _split(text.replace("c.t0 AS t", "c.id AS t")) is None

    catalog = _catalog(fv=ViewDef("fv", BODY))
    text = "SELECT max(rms) AS peak FROM fv [RANGE 2 SECONDS]"
    split = _split(text, catalog)
    assert [(p.name, p.inner, p.time_column) for p in split.parts] == [("fv", BODY, "t")]
    assert split.outer == text and [v.where.start for v in split.views] == [29]


def test_errors_point_into_the_users_statement():
    """A signal subquery without start_time(...): refused at the subquery; a view's
    query's error (check_views) at the view's name, naming the view."""
    from wavesql.catalog import ViewDef
    from wavesql.streaming.derived_hoist import check_views

    text = ("SELECT max(rms) FROM (SELECT seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]) f "
            "[RANGE 2 SECONDS]")
    with pytest.raises(WaveSQLError) as e:
        _split(text)
    assert e.value.code == "STREAMING_RULE" and "`f`" in e.value.message
    assert text.index("seg_rms") <= e.value.span.start < text.index(") f")

    catalog = _catalog(fv=ViewDef("fv", BODY))
    text = "SELECT rms,\n  max(rms) OVER (ORDER BY t ROWS 2 PRECEDING) AS m FROM fv"
    split = _split(text, catalog)

    def plan_part(catalog, env, part, part_text):
        raise WaveSQLError("NOT_IMPLEMENTED", "no", __import__(
            "wavesql.errors").errors.Span(7, 17))

    with pytest.raises(WaveSQLError) as e:
        check_views(split, catalog, None, plan_part)
    assert e.value.span.start == text.index("fv") and "view `fv`" in e.value.message
    assert "line 2" in e.value.render()


def test_a_signal_querys_own_over_window_is_cut_into_the_cte_form():
    """The per-window expressions in the part (under the user's alias when it has one),
    the OVER windows over its columns in the rest, each replaced text padded: every
    other offset kept."""
    text = ("SELECT start_time(ch1) AS t, avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) "
            "ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS a FROM mic [SAMPLES 4096]")
    split = _split(text)
    (part,) = split.parts
    assert (part.name, part.time_column) == ("mic_windows", "t")
    assert " ".join(part.inner.split()) == \
        "SELECT start_time(ch1) AS t, seg_rms(ch1) AS _w1 FROM mic [SAMPLES 4096]"
    assert part.inner.index("FROM mic") == text.index("FROM mic")
    assert " ".join(split.outer.split()) == ("SELECT t AS t, avg(_w1 ) OVER (ORDER BY t "
                                              "ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS a "
                                              "FROM mic_windows")
    assert split.outer.index("ROWS") == text.index("ROWS") and len(split.outer) == len(text)
    # no start_time(...) written: one is added as the part's event time
    split = _split("SELECT avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS 2 PRECEDING) "
                   "AS a FROM mic m [SAMPLES 4096] WHERE seg_rms(m.ch1) > 0.1")
    assert split.parts[0].time_column == "_w2" and "WHERE _w3" in split.outer


def test_over_windows_in_a_sync_select_are_cut_into_a_sync_part():
    """The control's and the signal's per-row expressions in the SYNC part, its event time
    the control's EVENT TIME passed through (``c.t0 AS t``), an unnamed column keeping its
    name (``c.id`` -> ``id``); the OVER window over them in the rest."""
    text = ("SELECT c.t0 AS t, c.id, avg(seg_rms(m.ch1)) OVER (ORDER BY c.t0 ROWS BETWEEN 2 "
            "PRECEDING AND CURRENT ROW) AS a FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)")
    split = _split(text)
    (part,) = split.parts
    assert (part.name, part.time_column, part.sync) == ("c_synced", "t", True)
    assert " ".join(part.inner.split()) == (
        "SELECT c.t0 AS t, c.id AS id, seg_rms(m.ch1) AS _w1 FROM ctl c SYNC JOIN mic m ON "
        "RANGE (c.t0, c.t1)")
    assert " ".join(split.outer.split()) == (
        "SELECT t AS t, id , avg(_w1 ) OVER (ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT "
        "ROW) AS a FROM c_synced")
    assert split.outer.index(") AS a") == text.index(") AS a")


@pytest.mark.parametrize("text", [
    # a subquery of the segments, read by signal functions around it (planner/passthrough.py)
    "SELECT start_time(ch1) AS t, seg_rms(ch1) AS r FROM (SELECT ch1 FROM mic [SAMPLES 512]) p",
    "SELECT max(seg_rms(ch1)) FROM mic [SAMPLES 4096]",  # an aggregate: needs a window
    "SELECT start_time(ch1) AS t, seg_rms(ch1) AS r FROM mic [SAMPLES 4096]",  # row by row
    "SELECT count(*) OVER (ORDER BY start_time(ch1)) AS n, max(seg_rms(ch1)) AS m "
    "FROM mic [SAMPLES 4096]",
    # a signal function per key over a SYNC's rows keeps its own state: not cut
    "SELECT c.id, lowpass(m.ch1, 100.0) OVER (PARTITION BY c.id) AS f FROM ctl c "
    "SYNC JOIN mic m ON RANGE (c.t0, c.t1)",
    # a * (the windows' segments): not cut
    "SELECT *, avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS 2 PRECEDING) AS a "
    "FROM mic [SAMPLES 4096]",
    # a start_time(...) column Spark would name after its text: not cut
    "SELECT start_time(ch1), avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS 2 "
    "PRECEDING) AS a FROM mic [SAMPLES 4096]",
])
def test_other_shapes_are_not_cut(text):
    assert _split(text) is None


# -- end to end (Spark) --------------------------------------------------------------------

def _recording(seconds: int) -> np.ndarray:
    n = seconds * RATE
    rng = np.random.default_rng(11)
    amplitude = np.repeat(rng.uniform(0.1, 0.9, seconds // 2 + 1), 2 * RATE)[:n]
    x = amplitude * np.sin(np.arange(n) * 2 * np.pi * 440 / RATE) + rng.normal(0, 0.02, n)
    return x.astype(np.float32)


def _features(x: np.ndarray) -> pd.DataFrame:
    """Each window's start (seconds) and RMS, numpy over the samples."""
    starts = np.arange(0, len(x), N)
    rms = [np.sqrt(np.mean(x[s:s + N].astype(np.float64) ** 2)) for s in starts]
    return pd.DataFrame({"t": starts / RATE, "rms": rms})


def _seconds(column: pd.Series) -> np.ndarray:
    return np.array([(v - EPOCH).total_seconds() for v in column])


def _setup(ws, tmp_path, seconds):
    x = _recording(seconds)
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "r_000.wav", x, RATE, "float32")
    (tmp_path / "rec" / "done.eof").write_text("")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'rec'}' "
           "FORMAT wav")
    return _features(x)


def _run(ws, spark, tmp_path, sql) -> pd.DataFrame:
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    return spark.read.parquet(str(tmp_path / "out")).toPandas()


def _windowed(feats: pd.DataFrame) -> pd.DataFrame:
    # [RANGE 2 SECONDS SLIDE 2 SECONDS] at instant i holds t in (i - 2, i]
    feats = feats.assign(instant=np.ceil(feats["t"] / 2.0) * 2.0)
    return feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()


@pytest.mark.spark
def test_windows_over_a_signal_subquery(ws, spark, tmp_path):
    """Tumbling windows over a FROM subquery's per-window RMS: each window once, equal to
    pandas over numpy's RMS; the part's folder is named after the alias."""
    feats = _setup(ws, tmp_path, 4)  # (the last 2 s window closes at the end: 4 s)
    got = _run(ws, spark, tmp_path, f"SELECT max(rms) AS peak, count(*) AS n FROM ({BODY}) f "
                                    "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    want = _windowed(feats)
    got = got.assign(instant=_seconds(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist()
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)
    assert (tmp_path / "ckpt" / "derived" / "f" / "rows").is_dir()


@pytest.mark.spark
def test_a_signal_querys_own_over_window(ws, spark, tmp_path):
    """One SELECT: the moving average of the RMS over the last 5 windows, ordered by the
    window's start, equal to pandas rolling(5) over numpy's RMS."""
    feats = _setup(ws, tmp_path, 6)
    got = _run(ws, spark, tmp_path, "SELECT start_time(ch1) AS t, avg(seg_rms(ch1)) OVER "
               "(ORDER BY start_time(ch1) ROWS BETWEEN 4 PRECEDING AND CURRENT ROW) AS a "
               "FROM mic [SAMPLES 4096]")
    got = got.assign(s=_seconds(got["t"])).sort_values("s").reset_index(drop=True)
    want = feats["rms"].rolling(5, min_periods=1).mean()
    assert got["s"].tolist() == feats["t"].tolist()
    np.testing.assert_allclose(got["a"], want, rtol=1e-6)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("temporary", [False, True])
def test_windows_over_a_signal_view(ws, spark, tmp_path, temporary):
    """A catalog view and a temporary view whose query is the signal query: windowed as a
    stream, equal to pandas; the part's folder named after the view."""
    feats = _setup(ws, tmp_path, 6)
    ws.sql(f"CREATE {'TEMPORARY ' if temporary else ''}VIEW fv AS {BODY}")
    got = _run(ws, spark, tmp_path, "SELECT max(rms) AS peak, count(*) AS n FROM fv "
                                    "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    want = _windowed(feats)
    got = got.assign(instant=_seconds(got["_time"])).sort_values("instant")
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)
    assert (tmp_path / "ckpt" / "derived" / "fv" / "rows").is_dir()


@pytest.mark.spark
@pytest.mark.slow
def test_explain_stream_of_a_subquery_and_a_view_error(ws, spark, tmp_path):
    """EXPLAIN STREAM shows the parts of the subquery form; a view whose signal query
    cannot run continuously is refused at the view's name in the statement."""
    _setup(ws, tmp_path, 2)
    text = ws.explain(f"SELECT max(rms) AS peak FROM ({BODY}) f [RANGE 2 SECONDS]",
                      mode="STREAM")
    assert "2 parts under one handle" in text and "signal part `f`" in text
    ws.sql("CREATE VIEW nv AS SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms "
           "FROM mic [SAMPLES 4096] LIMIT 3")
    sql = "SELECT max(rms) AS peak FROM nv [RANGE 2 SECONDS]"
    with pytest.raises(WaveSQLError) as e:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert e.value.span.start == sql.index("nv") and "view `nv`" in e.value.message


# -- SYNC (Spark, slow) ----------------------------------------------------------------------

SYNC_RATE = 1000  # 1 sample per millisecond: a time in ms is its sample number
#: (id, start ms, end ms); the control's progress: 5200 ms - 1 s watermark = 4200 ms
RANGES = [(1, 300, 800), (2, 900, 1400), (3, 1500, 1700), (4, 2200, 2600), (5, 3100, 3500),
          (6, 3800, 4300), (7, 5200, 5500)]
SYNC_BODY = ("SELECT c.id, c.t0 AS t, seg_rms(m.ch1) AS r FROM ctl c "
             "SYNC JOIN mic m ON RANGE (c.t0, c.t1)")


def _sync_setup(ws, tmp_path) -> pd.DataFrame:
    """6 s of noise in three WAV files, all there; the control rows; numpy's RMS of each
    row's range (t in ms)."""
    import json

    from scipy.io import wavfile

    data = np.random.default_rng(5).standard_normal(6 * SYNC_RATE).astype(np.float32)
    for d in ("sig", "ctl"):
        (tmp_path / d).mkdir()
    for i in range(3):
        wavfile.write(tmp_path / "sig" / f"mic_{i:03d}.wav", SYNC_RATE,
                      data[i * 2000:(i + 1) * 2000])

    def ts(ms):
        return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"

    (tmp_path / "ctl" / "c.json").write_text("".join(
        json.dumps({"id": i, "t0": ts(a), "t1": ts(b)}) + "\n" for i, a, b in RANGES))
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {SYNC_RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    return pd.DataFrame([{"id": i, "t": a, "r": float(np.sqrt(np.mean(
        data[a:b].astype(np.float64) ** 2)))} for i, a, b in RANGES])


def _ms(column: pd.Series) -> list[int]:
    return [int(round(pd.Timestamp(v).value / 1e6)) for v in column]


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("form", ["subquery", "view"])
def test_windows_over_a_sync_subquery_or_view(ws, spark, tmp_path, form):
    """Tumbling 2-second windows over a SYNC written as a subquery, and as a view: the
    windows below the control's progress (4200 ms), equal to pandas over numpy's RMS of
    each range."""
    rows = _sync_setup(ws, tmp_path)
    if form == "view":
        ws.sql(f"CREATE VIEW s AS {SYNC_BODY}")
        source = "s"
    else:
        source = f"({SYNC_BODY}) s"
    got = _run(ws, spark, tmp_path, f"SELECT count(*) AS n, avg(r) AS r FROM {source} "
                                    "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    rows["instant"] = np.ceil(rows["t"] / 2000.0).astype(int) * 2000
    want = rows.groupby("instant").agg(n=("r", "size"), r=("r", "mean")).reset_index()
    want = want[want["instant"] < 4200]
    got = got.assign(instant=_ms(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist() == [2000, 4000]
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["r"], want["r"], rtol=1e-6)
    assert (tmp_path / "ckpt" / "derived" / "s" / "rows").is_dir()


@pytest.mark.spark
@pytest.mark.slow
def test_over_window_in_a_sync_select_across_runs(ws, spark, tmp_path):
    """One SELECT: a moving average of the synced RMS over the last 3 control rows, in the
    control's time order, over two runs. Each run emits the rows below its progress (the
    control's, held back to a row waiting for the recording); the second run's rows
    average over the first run's too -- equal to pandas rolling(3) over numpy's RMS of each
    range. (Run whole on the SYNC runner, which keeps nothing between batches, row 8 was
    its own average.)"""
    import json

    rows = _sync_setup(ws, tmp_path)
    sql = ("SELECT c.id, c.t0 AS t, avg(seg_rms(m.ch1)) OVER (ORDER BY c.t0 ROWS BETWEEN 2 "
           "PRECEDING AND CURRENT ROW) AS a FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)")
    got = _run(ws, spark, tmp_path, sql)
    assert sorted(got["id"]) == [1, 2, 3, 4, 5, 6]  # below 4200 ms: row 7 waits
    # row 8 (5600 ms) is recorded; row 10 (7000 ms) is not: it holds progress at 6000 ms
    (tmp_path / "ctl" / "d.json").write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": 8, "t0": "1970-01-01T00:00:05.600Z", "t1": "1970-01-01T00:00:05.900Z"},
        {"id": 10, "t0": "1970-01-01T00:00:07.000Z", "t1": "1970-01-01T00:00:07.100Z"}]))
    data = np.random.default_rng(5).standard_normal(6 * SYNC_RATE).astype(np.float32)
    rows = pd.concat([rows, pd.DataFrame([{"id": 8, "t": 5600, "r": float(np.sqrt(np.mean(
        data[5600:5900].astype(np.float64) ** 2)))}])], ignore_index=True)
    got = _run(ws, spark, tmp_path, sql).sort_values("id")
    rows = rows[rows["id"] <= 8].sort_values("t")
    rows["a"] = rows["r"].rolling(3, min_periods=1).mean()
    assert got["id"].tolist() == rows["id"].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert _ms(got["t"]) == rows["t"].tolist()
    np.testing.assert_allclose(got["a"], rows["a"], rtol=1e-6)
    assert (tmp_path / "ckpt" / "derived" / "c_synced" / "rows").is_dir()
    batch = ws.sql(sql).toPandas().sort_values("id")  # the batch planner runs it too
    batch = batch[batch["id"] <= 8]
    assert batch["id"].tolist() == rows["id"].tolist()
    np.testing.assert_allclose(batch["a"], rows["a"], rtol=1e-6)


def test_the_rest_keeps_lines_and_a_star_keeps_what_follows_it():
    """A subquery over lines: the rest keeps its newlines (Spark reports lines and
    columns); the rest's ``*`` spelled out as the part's columns takes the subquery's
    blanks after it, so the WHERE keeps its offset."""
    from wavesql.streaming.derived_split import expand_stars

    text = ("SELECT * FROM (SELECT start_time(ch1) AS t,\n  seg_rms(ch1) AS rms FROM mic "
            "[SAMPLES 4096]) f\nWHERE rms > 0.1")
    split = _split(text)
    assert split.outer.count("\n") == 2 and split.outer.index("\n") == text.index("\n")
    rest = expand_stars(split.outer, split.parts[0].name, ["t", "rms"])
    assert rest.startswith("SELECT `t`, `rms` FROM f ") and len(rest) == len(text)
    assert rest.index("WHERE rms") == text.index("WHERE rms")


def test_a_parts_name_does_not_change_with_unrelated_catalog_objects():
    """A part's name is its checkpoint folder and the stream the rest reads: an unrelated
    ``CREATE STREAM f`` (or a view named like an OVER rewrite's part) between two starts
    of the same query must not rename it -- the part would start over and the rest's
    checkpoint be refused. Names a view the statement reads reads are still avoided."""
    from wavesql.catalog import StreamDef, ViewDef

    other = StreamDef("f", [("x", "BIGINT")], "/nowhere", "json")
    sub = f"SELECT max(rms) AS peak FROM ({BODY}) f [RANGE 2 SECONDS]"
    over = ("SELECT start_time(ch1) AS t, avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) "
            "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS a FROM mic [SAMPLES 4096]")
    for text in (sub, over):
        before = [p.name for p in _split(text).parts]
        after = [p.name for p in _split(text, _catalog(
            f=other, mic_windows=StreamDef("mic_windows", [("x", "BIGINT")], "/nowhere",
                                           "json"))).parts]
        assert before == after and before[0] in ("f", "mic_windows")
    # a view the statement reads, whose query reads a stream `f`: the part may not shadow it
    view = ViewDef("v", "SELECT id, t0 FROM f")
    text = f"SELECT v.id, f.rms FROM v ASOF JOIN ({BODY}) f ON v.t0 >= f.t"
    (part,) = _split(text, _catalog(f=StreamDef("f", [("id", "BIGINT"), ("t0", "TIMESTAMP")],
                                                  "/nowhere", "json", event_time="t0"),
                                    v=view)).parts
    assert part.name == "f_2"


@pytest.mark.parametrize("item", [
    # unnamed: Spark names the column after its text, which the rewrite would change
    "avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS BETWEEN 2 PRECEDING AND "
    "CURRENT ROW)",
    "seg_rms(ch1) - avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS 2 PRECEDING)",
])
def test_an_unnamed_column_around_a_rewritten_expression_is_not_cut(item):
    """Cutting would rename the user's column (``avg(_w1) OVER ...``): the statement is
    left to the whole query's planning (which refuses it with its hint)."""
    assert _split(f"SELECT start_time(ch1) AS t, {item} FROM mic [SAMPLES 4096]") is None


def test_a_window_function_sqlglot_leaves_anonymous_stays_in_the_rest():
    """``try_avg`` is a window function sqlglot does not know (Anonymous): the OVER around a
    SYNC is still cut, and ``try_avg(...)`` itself stays in the rest over the part's column
    (not moved into the part as a per-row expression)."""
    text = ("SELECT c.id, c.t0, try_avg(seg_rms(m.ch1)) OVER (ORDER BY c.t0 ROWS 2 PRECEDING) "
            "AS e FROM ctl c SYNC JOIN mic m ON RANGE (c.t0, c.t1)")
    split = _split(text)
    assert split is not None
    (part,) = split.parts
    assert part.sync and "try_avg" not in part.inner and "try_avg(" in split.outer
    assert "seg_rms(m.ch1)" in part.inner and "seg_rms" not in split.outer
