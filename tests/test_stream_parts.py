"""Stream parts (streaming/stream_parts.py): a CTE computing across a stream's rows -- a
windowed aggregate -- used as a side of a continuous ASOF or interval join or as RESAMPLE's
input runs as a stream of its own, the rest over its final rows. Oracle: pandas (the
windows as a right-closed, right-labelled resample per key, then ``merge_asof``, ...) over
the same rows, restricted by hand to what is final at the stream's progress."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

SECOND = 1000

WINDOWED = ("SELECT _time AS t, k, avg(v) AS a, count(*) AS n FROM s "
            "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time, k")
ASOF = (f"WITH m AS ({WINDOWED}) "
        "SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.t")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:{ms // 60_000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _ms(value) -> int:
    """A timestamp Spark returned (naive, UTC session) in ms since 1970."""
    return int(round(pd.Timestamp(value).value / 1e6))


def _define(ws, tmp_path):
    for d in ("s", "ev"):
        (tmp_path / d).mkdir()
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) FROM '{tmp_path / 's'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")
    ws.sql(f"CREATE STREAM ev (ts TIMESTAMP, k STRING, id BIGINT) FROM '{tmp_path / 'ev'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")


def _write(folder, name: str, rows: list[dict]) -> None:
    (folder / f"{name}.json").write_text("".join(
        json.dumps({**r, "ts": _ts(r["ts"])}) + "\n" for r in rows))


def _samples(rng, start_ms: int, end_ms: int) -> list[dict]:
    """Readings of keys x and y every 700 ms (x) and 1100 ms (y) in [start, end)."""
    return [{"ts": t, "k": k, "v": float(np.round(rng.normal(), 3))}
            for k, step in (("x", 700), ("y", 1100))
            for t in range(start_ms - start_ms % step + step if start_ms % step else start_ms,
                           end_ms, step)]


def _windows(samples: list[dict], progress_ms: int) -> pd.DataFrame:
    """pandas' tumbling 10-second windows per key: instant i holds (i - 10 s, i] (a row
    on an instant is in the window ending there), those final below ``progress_ms``."""
    frame = pd.DataFrame(samples)
    frame["t"] = np.ceil(frame["ts"] / (10 * SECOND)).astype(int) * 10 * SECOND
    out = frame.groupby(["k", "t"]).agg(a=("v", "mean"), n=("v", "size")).reset_index()
    return out[out["t"] < progress_ms]


def _asof(events: list[dict], windows: pd.DataFrame, progress_ms: int) -> pd.DataFrame:
    """``merge_asof`` backward per key (a window at or before the event), of the events
    final below the windows' progress, those with a match."""
    left = pd.DataFrame(events).sort_values("ts")
    left = left[left["ts"] < progress_ms]
    right = windows.sort_values("t")
    got = pd.merge_asof(left, right, left_on="ts", right_on="t", by="k",
                        direction="backward", allow_exact_matches=True)
    got = got.dropna(subset=["t"])
    got["t"] = got["t"].astype(int)
    return got.sort_values("id").reset_index(drop=True)


def _run(ws, query: str, tmp_path):
    """One availableNow run of ``query`` into ``out`` on checkpoint ``ckpt``, to its end."""
    q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return q


def _read(spark, folder) -> pd.DataFrame:
    got = spark.read.parquet(str(folder)).toPandas()
    for c in ("ts", "t"):
        got[c] = [_ms(v) for v in got[c]]
    return got.sort_values("id").reset_index(drop=True)


@pytest.mark.spark
def test_asof_join_of_a_stream_with_a_windowed_average_across_runs(ws, spark, tmp_path):
    """Each event with the latest final 10-second average of its key at or before it,
    continuously over two runs: the windowed CTE runs as a stream part (its rows and a
    punctuation row per batch under <checkpoint>/derived/m/rows), the ASOF JOIN over its
    rows on the state store. An event after the windows' progress waits (24.6 s in the
    first run: a window up to 30 s could still come), and comes in the second run."""
    _asof_two_runs(ws, spark, tmp_path, ASOF, "m")


@pytest.mark.spark
def test_asof_join_with_a_windowed_average_view_across_runs(ws, spark, tmp_path):
    """The same ASOF JOIN with the windowed SELECT as a catalog view: the view's query runs
    as a stream part named like the view (<checkpoint>/derived/mv/rows), equal to pandas
    over two runs as the CTE form is."""
    _asof_two_runs(ws, spark, tmp_path, "SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e "
                   "ASOF JOIN mv m ON e.k = m.k AND e.ts >= m.t", "mv",
                   views=[f"CREATE VIEW mv AS {WINDOWED}"])


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("side, part, view", [
    (f"({WINDOWED}) m", "m", None),  # a FROM/JOIN subquery: the part named after its alias
    ("tv m", "tv", f"CREATE TEMPORARY VIEW tv AS {WINDOWED}"),  # a temporary view
])
def test_asof_join_with_a_windowed_subquery_or_temporary_view(ws, spark, tmp_path, side,
                                                               part, view):
    """The ASOF JOIN with the windowed SELECT as a subquery or a temporary view, over two
    runs, vs pandas."""
    _asof_two_runs(ws, spark, tmp_path, f"SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e "
                   f"ASOF JOIN {side} ON e.k = m.k AND e.ts >= m.t", part,
                   views=[view] if view else [])


def first_inputs(ws, tmp_path, rng, views=()) -> tuple[list, list]:
    """The streams (and ``views``) defined, and the first run's readings -- progress
    24 000 ms (y's 23 100 ms, x's 23 800 ms) -- and events written; returns both."""
    _define(ws, tmp_path)
    for view in views:
        ws.sql(view)
    first = _samples(rng, 0, 24_001) + [{"ts": 24_000, "k": "x", "v": 1.5}]
    events = [{"ts": t, "k": "xy"[i % 2], "id": i} for i, t in
              enumerate(list(range(350, 24_000, 1_300)) + [24_050])]
    _write(tmp_path / "s", "s1", first)
    _write(tmp_path / "ev", "e1", events)
    return first, events


def check_resampled(windows: pd.DataFrame, before: pd.DataFrame, after: pd.DataFrame) -> None:
    """``after`` (the second run's result; ``before`` the first's) is numpy's linear
    interpolation of each key's final windows on the 5-second grid, more rows than
    before."""
    want = []
    for k, w in windows.groupby("k"):
        grid = np.arange(w["t"].min(), w["t"].max() + 1, 5 * SECOND)
        want += [(k, int(g), a) for g, a in zip(grid, np.interp(grid, w["t"], w["a"]))]
    after["t"] = [_ms(v) for v in after["t"]]
    got = sorted(zip(after["k"], after["t"], after["a"]))
    assert len(before) < len(got)
    assert [g[:2] for g in got] == [w[:2] for w in sorted(want)]
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in sorted(want)], rtol=1e-12)


def _asof_two_runs(ws, spark, tmp_path, query: str, part: str, views=()) -> None:
    """``query`` (an ASOF JOIN of ev with the 10-second averages, a stream part named
    ``part``) over two runs, each result vs pandas; ``views``: statements defining them."""
    rng = np.random.default_rng(7)
    first, events = first_inputs(ws, tmp_path, rng, views)

    def run():
        return _run(ws, query, tmp_path)

    run()
    got = _read(spark, tmp_path / "out")
    want = _asof(events, _windows(first, 24_000), 24_000)
    assert (tmp_path / "ckpt" / "derived" / part / "rows").is_dir()
    assert list(got["id"]) == list(want["id"])
    assert 24_050 in [e["ts"] for e in events] and 24_050 not in list(got["ts"])  # waits
    second = _samples(rng, 24_001, 47_001)
    _write(tmp_path / "s", "s2", second)
    more = [{"ts": t, "k": "xy"[i % 2], "id": 100 + i} for i, t in
            enumerate(range(25_150, 49_000, 1_700))]
    _write(tmp_path / "ev", "e2", more)
    run()
    progress = max(r["ts"] for r in first + second)
    got = _read(spark, tmp_path / "out")
    want = _asof(events + more, _windows(first + second, progress), progress)
    assert list(got["id"]) == list(want["id"])  # each once: none lost, none twice
    assert list(got["t"]) == list(want["t"]) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)
    assert got["ts"].max() < progress < 49_000


def _two_runs(ws, spark, tmp_path, query, crash: bool = False, views=()):
    """Run ``query`` over the first 24 s of readings (and events), then -- after a crash
    of the stream part after its batch folder was committed, before Spark committed the
    batch (simulated: its last commit entry removed), when ``crash`` -- over 23 s more.
    Returns (readings, events, the result after each run, the final progress)."""
    rng = np.random.default_rng(11)
    _define(ws, tmp_path)
    for view in views:
        ws.sql(view)
    first = _samples(rng, 0, 24_001) + [{"ts": 24_000, "k": "x", "v": 1.5}]
    events = [{"ts": t, "k": "xy"[i % 2], "id": i} for i, t in
              enumerate(range(350, 47_000, 1_300))]
    _write(tmp_path / "s", "s1", first)
    _write(tmp_path / "ev", "e1", [e for e in events if e["ts"] < 24_000])

    def run():
        return _run(ws, query, tmp_path)

    run()
    before = spark.read.parquet(str(tmp_path / "out")).toPandas()
    if crash:
        (commits,) = [p for p in (tmp_path / "ckpt" / "derived" / "m").rglob("commits")
                      if p.is_dir()]
        last = max((p for p in commits.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
        last.unlink()
        (commits / f".{last.name}.crc").unlink(missing_ok=True)
    second = _samples(rng, 24_001, 47_001)
    _write(tmp_path / "s", "s2", second)
    _write(tmp_path / "ev", "e2", [e for e in events if e["ts"] >= 24_000])
    q = run()
    if crash:  # the batch ran again, its committed folder kept
        assert q.inners[0].reports[0].batch == int(last.name)
    after = spark.read.parquet(str(tmp_path / "out")).toPandas()
    assert q.status()["late"] == 0
    return first + second, events, before, after, max(r["ts"] for r in first + second)


@pytest.mark.spark
@pytest.mark.slow
def test_interval_join_with_a_windowed_average_restarted_after_a_crash(ws, spark, tmp_path):
    """Each event paired with the final 10-second windows of its key whose span holds it
    (an interval join, ``e.ts`` in ``[m.t - 10 s, m.t]``), the windows a stream part; a
    crash of the part between its folder's commit and Spark's, then a restart with more
    rows: every pair once (the re-run batch keeps its folder), equal to pandas (a merge on
    the key, filtered by the band) over the final windows."""
    readings, events, _, after, progress = _two_runs(
        ws, spark, tmp_path,
        f"WITH m AS ({WINDOWED}) SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e JOIN m "
        "ON e.k = m.k AND e.ts BETWEEN m.t - INTERVAL 10 SECONDS AND m.t", crash=True)
    windows = _windows(readings, progress)
    pairs = pd.DataFrame(events).merge(windows, on="k")
    pairs = pairs[(pairs["ts"] >= pairs["t"] - 10 * SECOND) & (pairs["ts"] <= pairs["t"])]
    want = pairs.sort_values(["id", "t"]).reset_index(drop=True)
    for c in ("ts", "t"):
        after[c] = [_ms(v) for v in after[c]]
    got = after.sort_values(["id", "t"]).reset_index(drop=True)
    assert len(want) > 20
    assert list(zip(got["id"], got["t"])) == list(zip(want["id"], want["t"]))
    assert list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("source", ["m", "mv"])  # a CTE, a catalog view
def test_resample_of_a_windowed_average_across_a_restart(ws, spark, tmp_path, source):
    """RESAMPLE of the final 10-second averages per key onto a 5-second grid ('linear'),
    the windows a stream part (a CTE's or a view's query), over two runs: each key's grid
    points from its first window to its last final one, equal to numpy's linear
    interpolation; the points of the first run are not delivered again."""
    readings, _, before, after, progress = _two_runs(
        ws, spark, tmp_path,
        (f"WITH m AS ({WINDOWED}) " if source == "m" else "") + f"SELECT t, k, a FROM "
        f"RESAMPLE({source}, t, INTERVAL 5 SECONDS, 'linear' PARTITION BY k)",
        views=[f"CREATE VIEW mv AS {WINDOWED}"])
    assert (tmp_path / "ckpt" / "derived" / source / "rows").is_dir()
    check_resampled(_windows(readings, progress), before, after)


@pytest.mark.spark
@pytest.mark.slow
def test_asof_join_of_a_windowed_view_with_a_windowed_cte(ws, spark, tmp_path):
    """Both sides stream parts, one a CTE, one a view (cut from the CTE cut's rest): each
    event count per key and 5-second window with the latest 10-second average of its key
    at or before it, vs pandas (both as right-closed, right-labelled windows per key,
    merge_asof backward), the event windows final below the events' progress."""
    rng = np.random.default_rng(5)
    _define(ws, tmp_path)
    ws.sql("CREATE VIEW counts AS SELECT _time AS t, k, count(*) AS n FROM ev "
           "[RANGE 5 SECONDS SLIDE 5 SECONDS] GROUP BY _time, k")
    readings = _samples(rng, 0, 47_001)
    events = [{"ts": t, "k": "xy"[i % 3 % 2], "id": i} for i, t in
              enumerate(range(350, 36_000, 900))]
    _write(tmp_path / "s", "s1", readings)
    _write(tmp_path / "ev", "e1", events)
    q = ws.stream(f"WITH m AS ({WINDOWED}) SELECT c.t, c.k, c.n, m.t AS mt, m.a FROM counts c "
                  "ASOF JOIN m ON c.k = m.k AND c.t >= m.t", tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    assert (tmp_path / "ckpt" / "derived" / "counts" / "rows").is_dir()
    frame = pd.DataFrame(events)
    frame["t"] = np.ceil(frame["ts"] / (5 * SECOND)).astype(int) * 5 * SECOND
    left = frame.groupby(["k", "t"]).size().rename("n").reset_index()
    left = left[left["t"] < max(e["ts"] for e in events)].sort_values("t")
    right = _windows(readings, max(r["ts"] for r in readings)).rename(columns={"t": "mt"})
    want = pd.merge_asof(left, right[["k", "mt", "a"]].sort_values("mt"), left_on="t",
                         right_on="mt", by="k", direction="backward", allow_exact_matches=True)
    want = want.dropna(subset=["mt"]).sort_values(["k", "t"]).reset_index(drop=True)
    got = spark.read.parquet(str(tmp_path / "out")).toPandas()
    for c in ("t", "mt"):
        got[c] = [_ms(v) for v in got[c]]
    got = got.sort_values(["k", "t"]).reset_index(drop=True)
    assert len(want) > 10
    assert list(zip(got["k"], got["t"], got["n"], got["mt"])) == \
        list(zip(want["k"], want["t"], want["n"], want["mt"].astype(int)))
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)


class _Catalog(dict):
    def get(self, name):
        return super().get(name.lower())


def _split(text, views=None):
    from wavesql.catalog import StreamDef, ViewDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(**{n: StreamDef(n, [("ts", "TIMESTAMP"), ("k", "STRING"), (c, t)],
                                       "/nowhere", "json", event_time="ts")
                          for n, c, t in (("s", "v", "DOUBLE"), ("ev", "id", "BIGINT"))})
    catalog.update({n: ViewDef(n, q) for n, q in (views or {}).items()})
    (stmt,) = parse_statements(text)
    return find_split(stmt, text, catalog)


_JOIN = "SELECT e.id, m.a FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.{t}"


@pytest.mark.parametrize("cte, rest, time", [
    (WINDOWED, _JOIN.format(t="t"), "t"),
    ("SELECT _time, k, max(v) AS a FROM s [RANGE 10 SECONDS] GROUP BY _time, k",
     _JOIN.format(t="_time"), "_time"),
    # an OVER window's rows: the stream's event time passed through
    ("SELECT ts, k, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 5 "
     "SECONDS PRECEDING AND CURRENT ROW) AS a FROM s", _JOIN.format(t="ts"), "ts"),
    ("SELECT _time AS t, k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY "
     "_time, k", "SELECT t, k, a FROM RESAMPLE(m, t, INTERVAL 5 SECONDS, 'prev')", "t"),
    ("SELECT *, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 5 SECONDS "
     "PRECEDING AND CURRENT ROW) AS a FROM s", _JOIN.format(t="ts"), "ts"),
    # computed across again: under a CQL window of its own, or OVER windows over its rows
    (WINDOWED, "SELECT _time, max(a) AS mx FROM m [RANGE 60 SECONDS] GROUP BY _time", "t"),
    (WINDOWED, "SELECT t, avg(a) OVER (PARTITION BY k ORDER BY t ROWS BETWEEN 2 PRECEDING "
     "AND CURRENT ROW) AS r FROM m", "t"),
    # row by row (a view the join follows), or windowed but not joined: not a part
    ("SELECT ts AS t, k, v * 2 AS a FROM s WHERE v > 0", _JOIN.format(t="t"), None),
    (WINDOWED, "SELECT t, a FROM m WHERE a > 0", None),
])
def test_which_ctes_are_stream_parts(cte, rest, time):
    """No Spark: a CTE computing across a stream's rows is a stream part when the rest
    joins, RESAMPLEs, windows it or computes OVER windows over it, its event time the window's _time (under any name) or the
    stream's event time passed through; the rest keeps its offsets."""
    text = f"WITH m AS ({cte}) {rest}"
    split = _split(text)
    if time is None:
        assert split is None
        return
    assert [(p.name, p.time_column, p.stream) for p in split.parts] == [("m", time, True)]
    assert split.outer.index(rest) == text.index(rest) and " s " not in split.outer
    assert split.parts[0].inner.strip() == cte


@pytest.mark.parametrize("cte, code, words", [
    # no event time: the error names what to select
    ("SELECT k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k",
     "STREAMING_RULE", "SELECT _time AS t"),
    (WINDOWED + " EMIT CHANGES", "STREAMING_RULE", "only final rows"),
])
def test_stream_part_refusals(cte, code, words):
    """No Spark: a stream part without an event time, or with EMIT CHANGES, is refused
    with the CTE's position."""
    from wavesql.errors import WaveSQLError

    text = f"WITH m AS ({cte}) {_JOIN.format(t='t')}"
    with pytest.raises(WaveSQLError) as err:
        _split(text)
    assert err.value.code == code and words in str(err.value), str(err.value)
    assert err.value.span is not None and err.value.span.start >= text.index("m AS")
    assert err.value.query == text  # shown in the statement (line, column, caret)


@pytest.mark.parametrize("text, name, replaced", [
    # a JOIN subquery: the part named after its alias, the body replaced by that name
    (f"SELECT e.id, m.a FROM ev e ASOF JOIN ({WINDOWED}) m ON e.k = m.k AND e.ts >= m.t",
     "m", f"({WINDOWED})"),
    # the left side of an interval join, in FROM
    (f"SELECT e.id, w.a FROM ({WINDOWED}) w JOIN ev e ON e.k = w.k AND e.ts BETWEEN w.t - "
     "INTERVAL 10 SECONDS AND w.t", "w", f"({WINDOWED})"),
    # RESAMPLE's input, no alias: the part is `subquery`
    (f"SELECT t, k, a FROM RESAMPLE(({WINDOWED}), t, INTERVAL 5 SECONDS PARTITION BY k)",
     "subquery", f"({WINDOWED})"),
    # a view (catalog or temporary: the catalog lays temporary views over its own)
    ("SELECT e.id, m.a FROM ev e ASOF JOIN mv m ON e.k = m.k AND e.ts >= m.t", "mv", None),
    ("SELECT t, k, a FROM RESAMPLE(mv, t, INTERVAL 5 SECONDS PARTITION BY k)", "mv", None),
    # read first where it is no side, then as one (review finding: was not cut)
    ("SELECT t, a FROM mv UNION ALL SELECT e.ts AS t, m.a FROM ev e ASOF JOIN mv m "
     "ON e.k = m.k AND e.ts >= m.t", "mv", None),
])
def test_subqueries_and_views_hoisted_as_stream_parts(text, name, replaced):
    """No Spark: a subquery or a view that would be a stream part as a CTE is one -- the
    part is its query (a subquery's body at its place, every other character blanked; a
    view's text), its event time the window's _time column; in the rest a subquery's body
    is the part's name padded to the body's length (every offset kept), a view's name is
    the statement's own."""
    split = _split(text, {"mv": WINDOWED})
    assert [(p.name, p.time_column, p.stream, p.sync) for p in split.parts] == \
        [(name, "t", True, False)]
    assert len(split.outer) == len(text)
    assert split.parts[0].inner.strip() == WINDOWED
    if replaced is None:  # a view: the statement as written; its errors at its name
        assert split.outer == text and [v.name for v in split.views] == ["mv"]
        assert split.views[0].where.start == text.rindex("mv")  # (its use as a side)
        return
    at = text.index(replaced)
    assert split.parts[0].inner.index(WINDOWED) == at + 1
    assert split.outer[at:at + len(replaced)].strip() == name
    assert split.outer[:at] == text[:at]
    assert split.outer[at + len(replaced):] == text[at + len(replaced):]


@pytest.mark.parametrize("text", [
    # not a side: the whole query plans (a window over the subquery's rows would be refused
    # there, or runs)
    f"SELECT m.t, m.a FROM ({WINDOWED}) m WHERE m.a > 0",
    "SELECT t, a FROM mv WHERE a > 0",
    # row by row over one stream: the join follows it whole
    "SELECT e.id, r.a FROM ev e ASOF JOIN (SELECT ts AS t, k, v * 2 AS a FROM s) r "
    "ON e.k = r.k AND e.ts >= r.t",
    "SELECT e.id, r.a FROM ev e ASOF JOIN rv r ON e.k = r.k AND e.ts >= r.t",
])
def test_subqueries_and_views_that_are_not_stream_parts(text):
    """No Spark: a subquery or view computing across rows but not a side, or row by row
    over one stream, is not cut."""
    assert _split(text, {"mv": WINDOWED, "rv": "SELECT ts AS t, k, v AS a FROM s"}) is None


def test_a_cte_part_and_a_view_or_subquery_part_in_one_statement():
    """No Spark: beside a stream-part CTE, a windowed view or subquery on the other side of
    the join is cut too (from the rest, offsets kept); the rest reads both by name."""
    counts = ("SELECT _time AS t, k, count(*) AS n FROM ev [RANGE 5 SECONDS SLIDE 5 SECONDS] "
              "GROUP BY _time, k")
    for side, name in (("cv c", "cv"), (f"({counts}) c", "c")):
        rest = f"SELECT c.t, m.a FROM {side} ASOF JOIN m ON c.k = m.k AND c.t >= m.t"
        text = f"WITH m AS ({WINDOWED}) {rest}"
        split = _split(text, {"cv": counts})
        assert [(p.name, p.time_column, p.stream) for p in split.parts] == \
            [("m", "t", True), (name, "t", True)]
        assert split.parts[1].inner.strip() == counts and len(split.outer) == len(text)
        assert split.outer.strip().startswith("SELECT c.t, m.a FROM")
        assert split.outer.index("ASOF JOIN m ON") == text.index("ASOF JOIN m ON")
        assert [v.name for v in split.views] == (["cv"] if name == "cv" else [])


def test_a_view_stream_part_without_event_time_is_refused_at_its_name():
    """No Spark: a windowed view selecting no event time is refused (STREAMING_RULE) at
    the view's name in the statement, naming the view and what to select; a subquery's
    the same at its alias, as a CTE's at its name; a subquery with EMIT CHANGES at it."""
    from wavesql.errors import WaveSQLError

    no_time = "SELECT k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k"
    text = "SELECT e.id, m.a FROM ev e ASOF JOIN nv m ON e.k = m.k"
    with pytest.raises(WaveSQLError) as err:
        _split(text, {"nv": no_time})
    assert err.value.code == "STREAMING_RULE" and "in view `nv`" in err.value.message
    assert "SELECT _time AS t" in err.value.hint
    assert err.value.span.start == text.index("nv")
    text = f"SELECT e.id, m.a FROM ev e ASOF JOIN ({no_time}) m ON e.k = m.k"
    with pytest.raises(WaveSQLError) as err:
        _split(text)
    assert err.value.code == "STREAMING_RULE" and "the subquery selects neither" \
        in err.value.message
    assert err.value.span.start == text.index(") m") + 2 and err.value.query == text
    text = f"SELECT e.id, m.a FROM ev e ASOF JOIN ({WINDOWED} EMIT CHANGES) m ON e.k = m.k"
    with pytest.raises(WaveSQLError) as err:
        _split(text)
    assert err.value.code == "STREAMING_RULE" and "only final rows" in err.value.message
    assert err.value.span.start == text.index("EMIT") and err.value.query == text


@pytest.mark.spark
def test_explain_stream_shows_the_stream_part_and_the_rest(ws, tmp_path):
    """EXPLAIN STREAM names the stream part, its rows folder and event time, and the rest
    over its rows; a CTE whose rows come in no order of its progress (an ASOF JOIN of its
    own) is refused naming it, before anything runs."""
    from wavesql.errors import WaveSQLError

    _define(ws, tmp_path)
    text = ws.explain(ASOF, "STREAM")
    assert "2 parts under one handle (a query over the rows of CTE `m`)" in text, text
    assert "stream part `m`: rows and one punctuation row per batch to " \
           "<checkpoint>/derived/m/rows, event time t" in text, text
    assert "rest: over `m`'s rows (columns t, k, a, n)" in text, text
    joined = ("WITH m AS (SELECT e.ts AS t, e.k, s.v AS a FROM ev e ASOF JOIN s ON "
              "e.k = s.k AND e.ts >= s.ts) SELECT x.id, m.a FROM ev x ASOF JOIN m ON "
              "x.k = m.k AND x.ts >= m.t")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(joined, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "NOT_IMPLEMENTED" and "`m` is a continuous asof query" \
        in err.value.message, str(err.value)
    assert not (tmp_path / "ckpt").exists() and not (tmp_path / "out").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_asof_join_with_an_over_window_average_across_runs(ws, spark, tmp_path):
    """An OVER window (each reading with the average of its key's last 5 s, both ends
    in) as the ASOF JOIN's right side, a stream part on the state store, over two runs:
    equal to pandas' rolling('5s', closed='both') per key and merge_asof, for the events
    below the readings' progress (a reading at the progress itself may still come)."""
    over = ("SELECT ts, k, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
            "INTERVAL 5 SECONDS PRECEDING AND CURRENT ROW) AS a FROM s")
    readings, events, _, _, progress = _two_runs(
        ws, spark, tmp_path, f"WITH m AS ({over}) SELECT e.id, e.k, e.ts, m.ts AS t, m.a "
        "FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.ts", crash=True)
    frame = pd.DataFrame(readings).sort_values("ts")
    frame["when"] = pd.to_datetime(frame["ts"], unit="ms")
    rolled = []
    for _, g in frame.groupby("k"):
        g = g.set_index("when")
        g["a"] = g["v"].rolling("5s", closed="both").mean()
        rolled.append(g.reset_index())
    right = pd.concat(rolled).rename(columns={"ts": "t"})[["t", "k", "a"]]
    right = right[right["t"] < progress]
    want = _asof(events, right, progress)
    got = _read(spark, tmp_path / "out")
    assert len(want) > 20
    assert list(got["id"]) == list(want["id"]) and list(got["t"]) == list(want["t"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)


def test_a_cte_named_like_a_catalog_view_is_one_part():
    """No Spark: ``WITH m AS (...)`` shadows a catalog view ``m`` (SQL's scoping): the rest
    reads the CTE's part, and the view is not hoisted as a second part named ``m`` -- two
    parts would share one folder, and the rest would read the view's rows (review finding).
    """
    cte = WINDOWED.replace("avg(v)", "min(v)")
    text = (f"WITH m AS ({cte}) SELECT _time, max(a) AS mx FROM m "
            "[RANGE 60 SECONDS SLIDE 60 SECONDS] GROUP BY _time")
    split = _split(text, {"m": WINDOWED})
    assert [(p.name, p.stream) for p in split.parts] == [("m", True)]
    assert split.parts[0].inner.strip() == cte and not split.views
