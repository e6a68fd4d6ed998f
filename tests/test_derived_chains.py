"""CTE and view chains in continuous queries (issue 21, item 1): a relation built in more
than one step is classified by what its chain ends in (streaming/derived_chain.py).

- a windowed CTE reading a filter CTE (``WITH a AS (... WHERE v > 0), m AS (... FROM a
  [RANGE ...] GROUP BY ...)``), joined or resampled by the rest, is a stream part whose
  text carries ``WITH a AS (...)``;
- a windowed view reading a filter view is a stream part, and a filter view over a
  windowed (or signal) view is the rest over that view's part (``g`` over the signal view
  ``f``: the part ``f``, the filter in the rest).

Oracles: pandas (right-closed tumbling windows per key, ``merge_asof``) over the rows the
test writes, restricted by hand to what is final at the stream's progress; numpy's RMS per
4096-sample window then pandas for the signal chain. The no-Spark tests check the cut."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from tests.test_stream_parts import (SECOND, _Catalog, _asof, _define, _ms, _read, _run,
                                     _samples, _two_runs, _windows, _write, check_resampled,
                                     first_inputs)
from wavesql.errors import WaveSQLError

FILTER = "SELECT ts, k, v FROM s WHERE v > 0"
WINDOWED_A = ("SELECT _time AS t, k, avg(v) AS a, count(*) AS n FROM {} "
              "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time, k")
CHAIN = (f"WITH a AS ({FILTER}), m AS ({WINDOWED_A.format('a')}) "
         "SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.t")


def _split(text, views=None, signals=()):
    from wavesql.catalog import SignalDef, StreamDef, ViewDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(**{n: StreamDef(n, [("ts", "TIMESTAMP"), ("k", "STRING"), (c, t)],
                                       "/nowhere", "json", event_time="ts")
                          for n, c, t in (("s", "v", "DOUBLE"), ("ev", "id", "BIGINT"))})
    for name in signals:
        catalog[name] = SignalDef(name, [("ch1", "FLOAT")], 8000, "/nowhere", "wav")
    catalog.update({n: ViewDef(n, q) for n, q in (views or {}).items()})
    (stmt,) = parse_statements(text)
    return find_split(stmt, text, catalog)


def test_a_windowed_cte_over_a_filter_cte_is_a_stream_part_carrying_it():
    """No Spark: m reads a, which filters s: m is a stream part whose text is ``WITH a AS
    (...)`` and m's body, each at its place; a, read by m only, leaves the rest with it."""
    split = _split(CHAIN)
    assert [(p.name, p.time_column, p.stream) for p in split.parts] == [("m", "t", True)]
    inner = split.parts[0].inner
    body = WINDOWED_A.format("a")
    assert inner.index(f"WITH a AS ({FILTER})") == CHAIN.index(f"WITH a AS ({FILTER})")
    assert inner.index(body) == CHAIN.index(body)
    assert " ".join(inner.split()) == f"WITH a AS ({FILTER}) {body}"
    rest = CHAIN[CHAIN.index("SELECT e.id"):]
    assert split.outer.strip() == rest and split.outer.index(rest) == CHAIN.index(rest)


def test_a_cte_read_by_the_rest_and_by_a_part_stays_in_the_rest():
    """No Spark: a filter CTE read by the stream part and by the rest is in both; a CTE the
    part does not read is not in its text; the commas stay valid."""
    text = (f"WITH b AS (SELECT ts, k, id FROM ev WHERE id > 0), a AS ({FILTER}), "
            f"m AS ({WINDOWED_A.format('a')}) SELECT b.id, m.a FROM b ASOF JOIN m "
            "ON b.k = m.k AND b.ts >= m.t")
    split = _split(text)
    (part,) = split.parts
    assert " ".join(part.inner.split()) == f"WITH a AS ({FILTER}) {WINDOWED_A.format('a')}"
    assert " ".join(split.outer.split()) == ("WITH b AS (SELECT ts, k, id FROM ev WHERE id "
                                             "> 0) SELECT b.id, m.a FROM b ASOF JOIN m ON "
                                             "b.k = m.k AND b.ts >= m.t")
    assert len(split.outer) == len(text)


@pytest.mark.parametrize("text, top", [
    # a windowed view over a filter view: the windowed view is the part
    ("SELECT e.id, m.a FROM ev e ASOF JOIN mv m ON e.k = m.k AND e.ts >= m.t", "mv"),
    # a filter view over it: the windowed view is the part, the filter view in the rest
    ("SELECT e.id, m.a FROM ev e ASOF JOIN rv m ON e.k = m.k AND e.ts >= m.t", "rv"),
    ("SELECT t, k, a FROM RESAMPLE(rv, t, INTERVAL 5 SECONDS PARTITION BY k)", "rv"),
    # a view joining it: the join is in the view's own query
    ("SELECT id, a FROM jv", "jv"),
])
def test_view_chains_cut_at_the_view_that_computes_across_rows(text, top):
    """No Spark: the view at the end of a chain that windows a stream (through a filter
    view) is the stream part; the statement as written is the rest (its views read the
    part's rows by name), errors of the part's query at the statement's view name."""
    views = {"fv": FILTER, "mv": WINDOWED_A.format("fv"),
             "rv": "SELECT t, k, a FROM mv WHERE a > 0",
             "jv": "SELECT e.id, e.ts, m.a FROM ev e ASOF JOIN mv m ON e.k = m.k AND e.ts >= m.t"}
    split = _split(text, views)
    assert [(p.name, p.time_column, p.stream) for p in split.parts] == [("mv", "t", True)]
    assert split.outer == text and split.parts[0].inner == views["mv"]
    assert [v.name for v in split.views] == ["mv"]
    assert split.views[0].where.start == text.index(top)


def test_a_filter_view_over_a_signal_view_is_the_rest_over_the_signal_part():
    """No Spark: g filters f, a view of a signal query; windows over g cut f as the signal
    part and keep g (the filter) in the rest, as a CTE over f is."""
    views = {"f": "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]",
             "g": "SELECT t, rms FROM f WHERE rms > 0.1"}
    text = "SELECT max(rms) AS peak FROM g [RANGE 10 SECONDS SLIDE 10 SECONDS]"
    split = _split(text, views, signals=["mic"])
    assert [(p.name, p.time_column, p.stream, p.sync) for p in split.parts] == \
        [("f", "t", False, False)]
    assert split.outer == text and split.views[0].where.start == text.index("g")


def test_a_chained_part_without_event_time_is_refused_where_it_is_named():
    """No Spark: a windowed view over a filter view selecting no event time is refused
    (STREAMING_RULE) at the statement's view name -- the view a chain reaches it through
    -- naming the view and what to select; the CTE chain's at the CTE."""
    no_time = "SELECT k, avg(v) AS a FROM fv [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k"
    text = "SELECT e.id, m.a FROM ev e ASOF JOIN rv m ON e.k = m.k"
    with pytest.raises(WaveSQLError) as err:
        _split(text, {"fv": FILTER, "nv": no_time, "rv": "SELECT k, a FROM nv"})
    assert err.value.code == "STREAMING_RULE" and "in view `nv`" in err.value.message
    assert err.value.span.start == text.index("rv") and err.value.query == text
    text = CHAIN.replace("_time AS t, ", "").replace("e.ts >= m.t", "e.ts >= e.ts")
    with pytest.raises(WaveSQLError) as err:
        _split(text)
    assert err.value.code == "STREAMING_RULE" and "SELECT _time AS t" in err.value.hint
    assert err.value.span.start == text.index("m AS") and err.value.query == text


def test_a_window_over_a_windowed_cte_is_a_part_over_a_part():
    """No Spark: a chain is followed through row-by-row steps only -- m windowing a, which
    windows s itself, is not one part carrying a: a is a stream part (m windows it), and m
    a stream part over a's rows, after it (tests/test_windows_over_windows.py runs it)."""
    text = ("WITH a AS (SELECT _time AS t0, k, avg(v) AS v FROM s [RANGE 10 SECONDS SLIDE 10 "
            "SECONDS] GROUP BY _time, k), m AS (SELECT _time AS t, k, max(v) AS av FROM a "
            "[RANGE 30 SECONDS SLIDE 30 SECONDS] GROUP BY _time, k) "
            "SELECT e.id, m.av FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.t")
    split = _split(text)
    assert [(p.name, p.time_column, p.reads) for p in split.parts] == [
        ("a", "t0", ()), ("m", "t", ("a",))]
    assert "WITH" not in split.parts[1].inner and " a [RANGE 30" in split.parts[1].inner


def _filtered(samples: list[dict]) -> list[dict]:
    return [r for r in samples if r["v"] > 0]


@pytest.mark.spark
def test_asof_join_of_a_windowed_cte_over_a_filter_cte_across_runs(ws, spark, tmp_path):
    """The CTE chain runs: m (windows over a, which filters s) as a stream part under
    <checkpoint>/derived/m, the ASOF JOIN over its rows; over two runs each event once with
    the latest final 10-second average of its key's positive readings, vs pandas."""
    rng = np.random.default_rng(3)
    first, events = first_inputs(ws, tmp_path, rng)
    _run(ws, CHAIN, tmp_path)
    assert (tmp_path / "ckpt" / "derived" / "m" / "rows").is_dir()
    got = _read(spark, tmp_path / "out")
    want = _asof(events, _windows(_filtered(first), 24_000), 24_000)
    assert list(got["id"]) == list(want["id"]) and 24_050 not in list(got["ts"])
    second = _samples(rng, 24_001, 47_001)
    _write(tmp_path / "s", "s2", second)
    more = [{"ts": t, "k": "xy"[i % 2], "id": 100 + i} for i, t in
            enumerate(range(25_150, 49_000, 1_700))]
    _write(tmp_path / "ev", "e2", more)
    _run(ws, CHAIN, tmp_path)
    progress = max(r["ts"] for r in first + second)
    got = _read(spark, tmp_path / "out")
    want = _asof(events + more, _windows(_filtered(first + second), progress), progress)
    assert len(want) > 20 and list(got["id"]) == list(want["id"])  # each once
    assert list(got["t"]) == list(want["t"]) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)


RATE = 8000
N = 4096
SECONDS = 12


def _signal_views(ws, tmp_path) -> np.ndarray:
    """A 12-second recording whose loudness changes every second (all there: an end
    marker), the signal view f of its RMS per 4096 samples and g of the loud ones."""
    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(5)
    amplitude = np.repeat(rng.uniform(0.05, 0.9, SECONDS), RATE)
    x = (amplitude * np.sin(np.arange(SECONDS * RATE) * 2 * np.pi * 440 / RATE)
         + rng.normal(0, 0.02, SECONDS * RATE)).astype(np.float32)
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "r_000.wav", x, RATE, "float32")
    (tmp_path / "rec" / "done.eof").write_text("")  # the recording ends: its tail is cut
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'rec'}' "
           "FORMAT wav")
    ws.sql("CREATE VIEW f AS SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms "
           "FROM mic [SAMPLES 4096]")
    ws.sql("CREATE VIEW g AS SELECT t, rms FROM f WHERE rms > 0.3")
    return x


def _loud_windows(x: np.ndarray) -> pd.DataFrame:
    """numpy's RMS per 4096 samples, those above 0.3, in pandas' 2-second windows (the
    instant i holding the starts in (i - 2, i]): max and count."""
    starts = np.arange(0, len(x), N)
    feats = pd.DataFrame({"t": starts / RATE, "rms": [
        np.sqrt(np.mean(x[s:s + N].astype(np.float64) ** 2)) for s in starts]})
    feats = feats[feats["rms"] > 0.3]
    feats = feats.assign(instant=np.ceil(feats["t"] / 2.0) * 2.0)
    return feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()


@pytest.mark.spark
@pytest.mark.slow
def test_asof_join_of_windows_over_a_filter_view_of_a_signal_view(ws, spark, tmp_path):
    """A chain of parts: pv windows g, which filters f, a view of a signal query; events
    ASOF JOIN pv. f runs as the signal part, pv as a stream part over f's rows (after f
    under availableNow), the join over pv's rows: each event with the latest 2-second
    window of loud RMS at or before it, vs pandas merge_asof over numpy's RMS."""
    x = _signal_views(ws, tmp_path)
    ws.sql("CREATE VIEW pv AS SELECT _time AS t, max(rms) AS peak, count(*) AS n FROM g "
           "[RANGE 2 SECONDS SLIDE 2 SECONDS] GROUP BY _time")
    _define(ws, tmp_path)
    events = [{"ts": ms, "k": "x", "id": i} for i, ms in enumerate(range(300, 9_800, 450))]
    _write(tmp_path / "ev", "e1", events)
    q = ws.stream("SELECT e.id, e.ts, m.t, m.peak, m.n FROM ev e ASOF JOIN pv m "
                  "ON e.ts >= m.t", tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    for part in ("f", "pv"):
        assert (tmp_path / "ckpt" / "derived" / part / "rows").is_dir()
    right = _loud_windows(x).assign(tms=lambda w: (w["instant"] * 1000).astype(int))
    want = pd.merge_asof(pd.DataFrame(events).sort_values("ts"), right.sort_values("tms"),
                         left_on="ts", right_on="tms", direction="backward")
    want = want.dropna(subset=["tms"]).sort_values("id").reset_index(drop=True)
    got = _read(spark, tmp_path / "out")
    assert len(want) > 10 and list(got["id"]) == list(want["id"])  # each once, none lost
    assert list(got["t"]) == list(want["tms"].astype(int)) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)


@pytest.mark.spark
def test_windows_over_a_filter_view_of_a_signal_view(ws, spark, tmp_path):
    """CREATE VIEW f AS <signal query>; CREATE VIEW g AS <filter of f>: windows over g run
    continuously -- f as the signal part, g's filter in the rest -- equal to pandas over
    numpy's RMS of the loud windows, and to the batch query."""
    x = _signal_views(ws, tmp_path)
    sql = "SELECT max(rms) AS peak, count(*) AS n FROM g [RANGE 2 SECONDS SLIDE 2 SECONDS]"
    q = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    assert (tmp_path / "ckpt" / "derived" / "f" / "rows").is_dir()
    want = _loud_windows(x)
    assert 2 < len(want) < SECONDS / 2 + 1
    epoch = dt.datetime(1970, 1, 1)
    for got in (spark.read.parquet(str(tmp_path / "out")).toPandas(), ws.sql(sql).toPandas()):
        got = got.assign(instant=[(v - epoch).total_seconds() for v in got["_time"]])
        got = got.sort_values("instant").reset_index(drop=True)
        assert got["instant"].tolist() == want["instant"].tolist()
        assert got["n"].tolist() == want["n"].tolist()
        np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("form, part", [("cte", "m"), ("subquery", "subquery")])
def test_resample_of_windows_over_a_filter_cte_across_a_restart(ws, spark, tmp_path, form,
                                                                part):
    """RESAMPLE ('linear', 5 s, per key) of the 10-second averages of a's positive readings
    (a filters s) -- a CTE m or RESAMPLE's subquery over a --, over two runs: equal to
    numpy's interpolation of pandas' windows of those readings."""
    windows_sql = WINDOWED_A.format("a")
    query = (f"WITH a AS ({FILTER}), m AS ({windows_sql}) SELECT t, k, a FROM "
             "RESAMPLE(m, t, INTERVAL 5 SECONDS, 'linear' PARTITION BY k)") if form == "cte" \
        else (f"WITH a AS ({FILTER}) SELECT t, k, a FROM RESAMPLE(({windows_sql}), t, "
              "INTERVAL 5 SECONDS, 'linear' PARTITION BY k)")
    readings, _, before, after, progress = _two_runs(ws, spark, tmp_path, query)
    assert (tmp_path / "ckpt" / "derived" / part / "rows").is_dir()
    check_resampled(_windows(_filtered(readings), progress), before, after)


@pytest.mark.spark
@pytest.mark.slow
def test_asof_join_of_a_filter_view_over_a_windowed_view_over_a_filter_view(ws, spark,
                                                                            tmp_path):
    """rv filters mv, which windows fv, which filters s: mv runs as the stream part (its
    text the view's, fv bound from the catalog), the ASOF JOIN over rv in the rest; over
    two runs each event once with the latest final window of its key whose average is
    positive, vs pandas."""
    views = [f"CREATE VIEW fv AS {FILTER}", f"CREATE VIEW mv AS {WINDOWED_A.format('fv')}",
             "CREATE VIEW rv AS SELECT t, k, a, n FROM mv WHERE a > 0.2"]
    query = ("SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e ASOF JOIN rv m "
             "ON e.k = m.k AND e.ts >= m.t")
    readings, events, _, after, progress = _two_runs(ws, spark, tmp_path, query, views=views)
    assert (tmp_path / "ckpt" / "derived" / "mv" / "rows").is_dir()
    windows = _windows(_filtered(readings), progress)
    assert 0 < (windows["a"] <= 0.2).sum() < len(windows)  # the filter drops some
    want = _asof(events, windows[windows["a"] > 0.2], progress)
    for c in ("ts", "t"):
        after[c] = [_ms(v) for v in after[c]]
    got = after.sort_values("id").reset_index(drop=True)
    assert len(want) > 20 and list(got["id"]) == list(want["id"])
    assert list(got["t"]) == list(want["t"]) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)


def test_a_windowed_subquery_over_a_filter_cte_is_a_stream_part_carrying_it():
    """No Spark: a JOIN subquery windowing CTE a (a filter of s) is a stream part whose
    text is WITH a AS (...) and the subquery's body, each at its place; a, read by the
    part only, leaves the rest (WITH too); a CTE the rest reads stays."""
    sub = WINDOWED_A.format("a")
    for more, left in (("", "ev"), ("b AS (SELECT ts, k, id FROM ev WHERE id > 0), ", "b")):
        text = (f"WITH {more}a AS ({FILTER}) SELECT e.id, m.a FROM {left} e ASOF JOIN "
                f"({sub}) m ON e.k = m.k AND e.ts >= m.t")
        split = _split(text)
        (part,) = split.parts
        assert (part.name, part.time_column, part.stream) == ("m", "t", True)
        assert " ".join(part.inner.split()) == f"WITH a AS ({FILTER}) {sub}"
        assert part.inner.index(sub) == text.index(sub) and len(split.outer) == len(text)
        want = f"SELECT e.id, m.a FROM {left} e ASOF JOIN m m ON e.k = m.k AND e.ts >= m.t"
        if more:
            want = "WITH b AS (SELECT ts, k, id FROM ev WHERE id > 0) " + want
        assert " ".join(split.outer.split()) == want


def test_a_parts_checkpoint_marker_covers_the_chain_below_it(tmp_path):
    """No Spark: the marker of a chained part (streaming/checkpoint_plan.py, checked before
    the part runs under <checkpoint>/derived/<name>) changes with a step below it -- the
    filter CTE its text carries, the filter view its view reads -- so a restart after such
    a change is refused, not resumed from state made by the old chain."""
    from tests.test_checkpoint_plan import STREAM, _Binder
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    b = _Binder(tmp_path)
    b.ddl(STREAM.format(path="ev", wm="1 SECOND", hb=""))
    b.ddl(STREAM.format(path="other", wm="1 SECOND", hb="").replace("STREAM ev", "STREAM o"))
    windows = ("SELECT _time AS t, k, avg(v) AS a FROM {} [RANGE 10 SECONDS SLIDE 10 SECONDS] "
               "GROUP BY _time, k")
    join = " SELECT o.k, m.a FROM o ASOF JOIN {} m ON o.k = m.k AND o.ts >= m.t"

    def part_mark(text):
        (stmt,) = parse_statements(text)
        (part,) = find_split(stmt, text, b.catalog).parts
        return b.mark(part.inner).plan

    def cte(where):
        return (f"WITH a AS (SELECT ts, k, v FROM ev WHERE {where}), m AS "
                f"({windows.format('a')})" + join.format("m"))

    assert part_mark(cte("v > 0")) == part_mark(cte("v  >  0"))
    assert part_mark(cte("v > 0")) != part_mark(cte("v > 1"))
    b.ddl("CREATE VIEW fv AS SELECT ts, k, v FROM ev WHERE v > 0")
    b.ddl(f"CREATE VIEW mv AS {windows.format('fv')}")
    before = part_mark(join.format("mv").strip())
    b.ddl("CREATE OR REPLACE VIEW fv AS SELECT ts, k, v FROM ev WHERE v > 1")
    assert part_mark(join.format("mv").strip()) != before


def test_a_stream_part_over_a_signal_parts_rows_is_cut_after_it():
    """No Spark: windows over a signal CTE's rows, joined (m over f), or over a filter view
    of a signal view (pv over g over f): the signal part first, then the stream part over
    its rows -- its text reading the signal part by name --, the rest joining the second."""
    signal = "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]"
    windows = "SELECT _time AS t, max(rms) AS peak FROM {} [RANGE 2 SECONDS SLIDE 2 SECONDS] " \
              "GROUP BY _time"
    rest = "SELECT e.id, m.peak FROM ev e ASOF JOIN {} ON e.ts >= m.t"
    text = f"WITH f AS ({signal}), m AS ({windows.format('f')}) " + rest.format("m")
    split = _split(text, signals=["mic"])
    assert [(p.name, p.time_column, p.stream) for p in split.parts] == \
        [("f", "t", False), ("m", "t", True)]
    assert split.parts[1].inner.strip() == windows.format("f")
    assert split.parts[1].inner.index("FROM f") == text.index("FROM f [RANGE")
    assert split.outer.strip() == rest.format("m")
    views = {"f": signal, "g": "SELECT t, rms FROM f WHERE rms > 0.3", "pv": windows.format("g")}
    text = rest.format("pv m")
    split = _split(text, views, signals=["mic"])
    assert [(p.name, p.stream, p.inner) for p in split.parts] == \
        [("f", False, signal), ("pv", True, views["pv"])]
    assert split.outer == text and [v.where.start for v in split.views] == [text.index("pv")] * 2
