"""Continuous ASOF and interval joins whose sides are views, CTEs or subqueries row by row
over one catalog stream (issue 21, closure): they run on Spark's state store, files
arriving into both streams in steps on one checkpoint (each step a restart that restores
the state), against joins written here in pandas over the rows the views keep -- not
against WaveSQL's batch mode, nor any helper of the code under test.

The oracle: each stream has its own progress, and a stream row is late below the progress
its stream's files before it promised (their largest EVENT TIME minus the 2 s WATERMARK,
every stream row counted, those the view drops too). The views are applied to the on-time
rows. ASOF (backward, inclusive, by key): a left row is final once the right stream's
progress has passed its time, and is matched by ``pd.merge_asof`` against every on-time
right row the right view keeps. Interval join: every pair of on-time view rows of equal key
whose times lie within the band, once (a plain pandas merge on the key, then the band).
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError

SECOND = 1_000_000
WATERMARK = 2 * SECOND
EPOCH = dt.datetime(1970, 1, 1)
TRADES = ("CREATE STREAM trades (k STRING, v DOUBLE, q INT, ts TIMESTAMP) FROM '{}' "
          "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
QUOTES = ("CREATE STREAM quotes (k STRING, p DOUBLE, ts TIMESTAMP) FROM '{}' "
          "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
#: the right side's catalog view: quotes with p > 0, a computed column
QUOTES_VIEW = "CREATE VIEW qv AS SELECT k, p + 1 AS p1, ts FROM quotes WHERE p > 0"


# -- the input -----------------------------------------------------------------------------
def _input(seed: int, n: int, value: str, dropped) -> pd.DataFrame:
    """Rows in arrival order: distinct times (ms) over 40 s, up to 3 s out of order, keys
    a/b; the stream's last 4 rows are its latest and ones the views drop (``dropped``
    sets their columns), so its progress comes from rows no view keeps; six rows the view
    keeps come long after their time (late)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.choice(40_000, n, replace=False)).astype(np.int64) * 1000
    frame = pd.DataFrame({"k": rng.choice(["a", "b"], n), value: rng.normal(size=n),
                          "ts": ts})
    if value == "v":
        frame["q"] = rng.integers(0, 3, n).astype(np.int32)
    frame.iloc[-4:, [frame.columns.get_loc(c) for c in dropped]] = list(dropped.values())
    keeps = frame.q > 0 if value == "v" else frame.p > 0
    order = np.argsort(ts + rng.integers(0, 3 * SECOND, n))
    old = np.flatnonzero(keeps.to_numpy() & (ts < 6 * SECOND))[:6]
    order = [i for i in order if i < n - 4 and i not in set(old)]
    order = np.concatenate([order, old, np.arange(n - 4, n)])
    return frame.iloc[order].reset_index(drop=True)


def _write_files(folder, frame: pd.DataFrame, n_files: int) -> list:
    """``frame`` as ``n_files`` Parquet files in arrival order; the per-file frames."""
    folder.mkdir(parents=True)
    edges = np.linspace(0, len(frame), n_files + 1).astype(int)
    parts = []
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        part = frame.iloc[a:b]
        part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]")).to_parquet(
            folder / f"part-{i:03d}.parquet")
        stamp = time.time() - 3600 + i
        os.utime(folder / f"part-{i:03d}.parquet", (stamp, stamp))
        parts.append(part)
    return parts


def _late_split(parts: list) -> tuple:
    """(on-time rows, late rows) of one stream: a file's rows are late below what the
    files before it promised -- all their rows, before any view."""
    on_time, late, top = [], [], None
    for part in parts:
        is_late = part.ts < top - WATERMARK if top is not None else np.zeros(len(part), bool)
        on_time.append(part[~is_late])
        late.append(part[is_late])
        top = part.ts.max() if top is None else max(top, part.ts.max())
    return pd.concat(on_time), pd.concat(late)


def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _run_in_steps(ws, tmp_path, sql: str, steps: list, engine: str) -> list:
    """Move each step's files of both streams into their folders and run the query to the
    end on one checkpoint (a restart per step); every run's reports."""
    staged = {name: sorted(tmp_path.joinpath("staging", name).iterdir())
              for name in ("trades", "quotes")}
    reports, at = [], 0
    for n in steps:
        for name in ("trades", "quotes"):
            for f in staged[name][at:at + n]:
                stamp = f.stat().st_mtime
                shutil.move(f, tmp_path / name / f.name)
                os.utime(tmp_path / name / f.name, (stamp, stamp))
        at += n
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        cq.await_termination()
        assert type(cq).__name__ == engine
        reports += cq.reports
    return reports


def _setup(ws, tmp_path, seed: int, steps: list) -> tuple:
    """Both streams (files staged), the view ``qv``; the per-file frames of each."""
    trades = _input(seed, 150, "v", {"q": 0})
    quotes = _input(seed + 100, 150, "p", {"p": -1.0})
    tparts = _write_files(tmp_path / "staging" / "trades", trades, sum(steps))
    qparts = _write_files(tmp_path / "staging" / "quotes", quotes, sum(steps))
    for name, ddl in (("trades", TRADES), ("quotes", QUOTES)):
        (tmp_path / name).mkdir()
        ws.sql(ddl.format(tmp_path / name))
    ws.sql(QUOTES_VIEW)
    return trades, quotes, tparts, qparts


def _assert_left_rows(spark, tmp_path, want: dict) -> None:
    """The query's output is ``want`` -- ``(k, ts) -> (w, p1)`` per final left row --
    each left row once across the restart, the values to 1e-12."""
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    seen = Counter((r["k"], _micros(r["ts"])) for r in out)
    assert set(seen.values()) == {1}  # each left row once, across the restart
    got = {(r["k"], _micros(r["ts"])): (r["w"], r["p1"]) for r in out}
    assert set(got) == set(want), sorted(set(got) ^ set(want))[:5]
    for key, (w, p1) in want.items():
        assert np.isclose(got[key][0], w, rtol=1e-12) and np.isclose(got[key][1], p1,
                                                                       rtol=1e-12), key


# -- ASOF ----------------------------------------------------------------------------------
def test_asof_of_a_cte_and_a_catalog_view(ws, spark, tmp_path):
    """Left: a CTE filtering trades (q > 0) and computing a column; right: a catalog view
    filtering quotes (p > 0) and computing a column. Files in two steps (three per
    stream), rows out of order and late: the final left rows, each once across the
    restart, with merge_asof's match; the late rows the views keep counted as late."""
    steps = [2, 1]
    trades, quotes, tparts, qparts = _setup(ws, tmp_path, 11, steps)
    sql = ("WITH t AS (SELECT k, v * 2 AS w, ts FROM trades WHERE q > 0) "
           "SELECT t.k, t.ts, t.w, q.p1 FROM t ASOF JOIN qv q ON t.k = q.k AND t.ts >= q.ts")
    shown = ws.explain(sql, "STREAM")
    assert "stateful ASOF JOIN over a view of trades and a view of quotes" in shown, shown
    reports = _run_in_steps(ws, tmp_path, sql, steps, "StatefulAsofQuery")

    t_on, t_late = _late_split(tparts)
    q_on, q_late = _late_split(qparts)
    right_progress = reports[-1].inputs["quotes"]
    # the streams' progress is their own: their last rows, which the views drop, moved it
    assert right_progress == int(quotes.ts.max()) - WATERMARK
    assert reports[-1].inputs["trades"] == int(trades.ts.max()) - WATERMARK
    left = t_on[(t_on.q > 0) & (t_on.ts < right_progress)].assign(w=lambda f: 2 * f.v)
    right = q_on[q_on.p > 0].assign(p1=lambda f: f.p + 1)
    want = pd.merge_asof(left.sort_values("ts"), right[["k", "ts", "p1"]].sort_values("ts"),
                         on="ts", by="k", direction="backward", allow_exact_matches=True)
    want = want.dropna(subset=["p1"])  # an inner ASOF JOIN: no match, no row
    want = {(k, int(ts)): (w, p1) for k, ts, w, p1 in zip(want.k, want.ts, want.w, want.p1)}

    _assert_left_rows(spark, tmp_path, want)
    assert len(want) > 60
    # the late rows the views keep were set aside as late, not joined
    kept_late = len(t_late[t_late.q > 0]) + len(q_late[q_late.p > 0])
    assert len(t_late[t_late.q > 0]) >= 6 and len(q_late[q_late.p > 0]) >= 6
    assert sum(r.late for r in reports) == kept_late


@pytest.mark.slow
def test_asof_of_one_stream_through_two_ctes(ws, spark, tmp_path):
    """Both sides over trades, through two CTEs (q = 1 rows, q = 2 rows with a computed
    column): the stream read once per side, each side with its own progress -- equal, the
    stream's -- files in two steps; merge_asof over the on-time rows of each filter."""
    steps = [2, 1]
    trades, _, tparts, _ = _setup(ws, tmp_path, 41, steps)
    sql = ("WITH a AS (SELECT * FROM trades WHERE q = 1), "
           "b AS (SELECT k, v * 2 AS w, ts FROM trades WHERE q = 2) "
           "SELECT a.k, a.ts, a.v, b.w FROM a ASOF JOIN b ON a.k = b.k AND a.ts >= b.ts")
    shown = ws.explain(sql, "STREAM")
    assert "stateful ASOF JOIN over a view of trades and a view of trades@right" in shown
    reports = _run_in_steps(ws, tmp_path, sql, steps, "StatefulAsofQuery")
    t_on, t_late = _late_split(tparts)
    progress = int(trades.ts.max()) - WATERMARK
    assert reports[-1].inputs == {"trades": progress, "trades@right": progress}
    left = t_on[(t_on.q == 1) & (t_on.ts < progress)]
    right = t_on[t_on.q == 2].assign(w=lambda f: 2 * f.v)
    want = pd.merge_asof(left.sort_values("ts"), right[["k", "ts", "w"]].sort_values("ts"),
                         on="ts", by="k", direction="backward").dropna(subset=["w"])
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((r["k"], _micros(r["ts"]), r["v"], r["w"]) for r in out)
    assert got == Counter(zip(want.k, want.ts.astype(int), want.v, want.w))
    assert len(want) > 30
    assert sum(r.late for r in reports) == len(t_late[t_late.q.isin([1, 2])]) > 0


# -- interval join -------------------------------------------------------------------------
def _band_pairs(a: pd.DataFrame, b: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """Every pair of rows of equal key with ``a.ts`` in ``[b.ts + lo, b.ts + hi]``."""
    pairs = a.merge(b, on="k", suffixes=("_a", "_b"))
    return pairs[(pairs.ts_a >= pairs.ts_b + lo) & (pairs.ts_a <= pairs.ts_b + hi)]


def _check_band(ws, spark, tmp_path, sql: str, seed: int, steps: list, outer: bool):
    trades, quotes, tparts, qparts = _setup(ws, tmp_path, seed, steps)
    shown = ws.explain(sql, "STREAM")
    assert "stateful interval join over a view of trades" in shown, shown
    reports = _run_in_steps(ws, tmp_path, sql, steps, "StatefulIntervalQuery")
    t_on, t_late = _late_split(tparts)
    q_on, q_late = _late_split(qparts)
    a = t_on[t_on.q > 0].assign(w=lambda f: 2 * f.v)[["k", "ts", "w"]]
    b = q_on[q_on.p > 0].assign(p1=lambda f: f.p + 1)[["k", "ts", "p1"]]
    pairs = _band_pairs(a, b, -SECOND, SECOND)
    want = Counter((k, int(ta), int(tb)) for k, ta, tb in zip(pairs.k, pairs.ts_a, pairs.ts_b))
    values = {(k, int(ta), int(tb)): (w, p1) for k, ta, tb, w, p1 in zip(
        pairs.k, pairs.ts_a, pairs.ts_b, pairs.w, pairs.p1)}
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((r["k"], _micros(r["ta"]), None if r["tb"] is None else _micros(r["tb"]))
                  for r in out)
    paired = Counter({key: n for key, n in got.items() if key[2] is not None})
    assert paired == want, sorted(set(paired) ^ set(want))[:5]
    for r in out:
        if r["tb"] is not None:
            w, p1 = values[(r["k"], _micros(r["ta"]), _micros(r["tb"]))]
            assert np.isclose(r["w"], w, rtol=1e-12) and np.isclose(r["p"], p1, rtol=1e-12)
    assert sum(want.values()) > 30
    if outer:  # the unpaired a rows the b stream's progress has passed, NULL-extended
        r_progress = reports[-1].inputs["quotes"]
        alone = a[~a.set_index(["k", "ts"]).index.isin(
            pairs.set_index(["k", "ts_a"]).index) & (a.ts < r_progress - SECOND)]
        unpaired = Counter({key: n for key, n in got.items() if key[2] is None})
        assert unpaired == Counter((k, int(t), None) for k, t in zip(alone.k, alone.ts))
        assert len(alone) > 5
    kept_late = len(t_late[t_late.q > 0]) + len(q_late[q_late.p > 0])
    assert sum(r.late for r in reports) == kept_late


def test_interval_join_of_a_subquery_and_a_stream(ws, spark, tmp_path):
    """An inner interval join of a subquery over trades (q > 0, a computed column) with
    the view qv, files in two steps: every pair of on-time view rows within 1 s, once."""
    sql = ("SELECT a.k, a.ts AS ta, a.w, b.ts AS tb, b.p1 AS p FROM "
           "(SELECT k, ts, v * 2 AS w FROM trades WHERE q > 0) a JOIN qv b "
           "ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL 1 SECOND AND b.ts + INTERVAL 1 SECOND")
    _check_band(ws, spark, tmp_path, sql, 21, [2, 1], outer=False)


@pytest.mark.slow
def test_left_interval_join_of_a_cte_and_a_subquery(ws, spark, tmp_path):
    """A LEFT interval join of a CTE over trades with a subquery over quotes, files in two
    steps: every pair once, and each unpaired trades row the quotes' progress has passed
    (its band ended) once, NULL-extended."""
    sql = ("WITH a AS (SELECT k, ts, v * 2 AS w FROM trades WHERE q > 0) "
           "SELECT a.k, a.ts AS ta, a.w, b.ts AS tb, b.p1 AS p FROM a LEFT JOIN "
           "(SELECT k, ts, p + 1 AS p1 FROM quotes WHERE p > 0) b "
           "ON a.k = b.k AND a.ts BETWEEN b.ts - INTERVAL 1 SECOND AND b.ts + INTERVAL 1 SECOND")
    _check_band(ws, spark, tmp_path, sql, 31, [1, 2], outer=True)


# -- refusals ------------------------------------------------------------------------------
def _streams(ws, tmp_path):
    for name, ddl in (("trades", TRADES), ("quotes", QUOTES)):
        (tmp_path / name).mkdir()
        ws.sql(ddl.format(tmp_path / name))


REFUSED = [
    ("SELECT k, max(v) AS v, ts FROM trades GROUP BY k, ts", "`GROUP BY k, ts` over an "
     "unbounded stream needs a window"),
    ("SELECT k, avg(v) OVER (PARTITION BY k ORDER BY ts) AS v, ts FROM trades",
     "needs a bounded frame"),
    ("SELECT x.k, x.v, x.ts FROM trades x JOIN trades y ON x.k = y.k", "`JOIN trades AS y "
     "ON x.k = y.k` over an unbounded stream needs a window"),
]


@pytest.mark.parametrize("body, what", REFUSED, ids=["GROUP BY", "OVER", "join"])
def test_a_side_that_cannot_run_continuously_is_refused_by_its_own_rule(ws, tmp_path, body,
                                                                       what):
    """A side that computes across rows runs as a stream part of its own (a windowed one
    does: tests/test_stream_parts.py), so a side that could not run continuously on its own
    -- an aggregate or join with no window, an unbounded OVER frame -- is refused with that
    streaming rule, naming what, ASOF and interval join alike (before stream parts: the
    generic NOT_IMPLEMENTED "not row by row")."""
    _streams(ws, tmp_path)
    asof = (f"WITH t AS ({body}) SELECT t.k, t.ts, q.p FROM t ASOF JOIN quotes q "
            "ON t.k = q.k AND t.ts >= q.ts")
    band = (f"WITH t AS ({body}) SELECT t.k, t.ts, q.p FROM t JOIN quotes q "
            "ON t.k = q.k AND t.ts BETWEEN q.ts - INTERVAL 1 SECOND AND q.ts")
    for sql in (asof, band):
        with pytest.raises(WaveSQLError) as err:
            ws.explain(sql, "STREAM")
        assert err.value.code == "STREAMING_RULE", err.value
        assert what in err.value.message, err.value
        if what.startswith("`JOIN"):  # by design: the hint names the joins that bound state
            assert "interval join" in err.value.hint and "ASOF JOIN" in err.value.hint


def test_an_unbounded_join_of_two_streams_is_refused_naming_the_bounded_joins(ws, tmp_path):
    """An inner, outer or cross join of two streams with no time bound keeps every row of
    both for ever: refused by design (STREAMING_RULE), the hint spelling the interval and
    ASOF joins, which run."""
    _streams(ws, tmp_path)
    for join in ("JOIN quotes q ON t.k = q.k", "LEFT JOIN quotes q ON t.k = q.k",
                 "CROSS JOIN quotes q"):
        with pytest.raises(WaveSQLError) as err:
            ws.explain(f"SELECT t.k, t.ts, q.p FROM trades t {join}", "STREAM")
        assert err.value.code == "STREAMING_RULE", err.value
        assert "needs a window" in err.value.message, err.value
        assert "interval join" in err.value.hint and "ASOF JOIN" in err.value.hint


def test_the_time_column_must_be_the_event_time(ws, tmp_path):
    """A side's time column renamed or computed in the view: NOT_IMPLEMENTED whose hint
    names the column to use."""
    _streams(ws, tmp_path)
    renamed = ("WITH t AS (SELECT k, ts AS t2 FROM trades) SELECT t.k, t.t2, q.p FROM t "
               "ASOF JOIN quotes q ON t.k = q.k AND t.t2 >= q.ts")
    computed = ("SELECT a.k, a.ts, b.p FROM (SELECT k, ts + INTERVAL 1 SECOND AS ts "
                "FROM trades) a JOIN quotes b ON a.k = b.k "
                "AND a.ts BETWEEN b.ts - INTERVAL 1 SECOND AND b.ts")
    for sql in (renamed, computed):
        with pytest.raises(WaveSQLError) as err:
            ws.explain(sql, "STREAM")
        assert err.value.code == "NOT_IMPLEMENTED", err.value
        assert "EVENT TIME" in err.value.message and "select ts unchanged" in err.value.hint


def test_the_re_evaluating_runner_refuses_a_view(ws, tmp_path, monkeypatch):
    """Where the state store cannot run it (forced off), a join of a view is refused --
    the re-evaluating runner keeps each side's rows by the stream's columns."""
    _streams(ws, tmp_path)
    sql = ("WITH t AS (SELECT k, ts FROM trades WHERE q > 0) SELECT t.k, t.ts, q.p FROM t "
           "ASOF JOIN quotes q ON t.k = q.k AND t.ts >= q.ts")
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    with pytest.raises(WaveSQLError) as err:
        ws.explain(sql, "STREAM")
    assert err.value.code == "NOT_IMPLEMENTED" and "state store only" in err.value.message
    assert "of a view, CTE or subquery" in err.value.message
    # a stream joined with itself, no view written: said so, not "a view"
    with pytest.raises(WaveSQLError) as err:
        ws.explain("SELECT a.k, a.ts, b.q FROM trades a ASOF JOIN trades b "
                   "ON a.k = b.k AND a.ts > b.ts", "STREAM")
    assert err.value.code == "NOT_IMPLEMENTED" and "state store only" in err.value.message
    assert "of a stream with itself" in err.value.message, err.value


def test_a_session_temporary_view_is_a_side(ws, tmp_path):
    """A session temporary view over a stream is a side as a catalog view is (EXPLAIN
    STREAM: on the state store, over a view of its stream)."""
    _streams(ws, tmp_path)
    ws.sql("CREATE TEMPORARY VIEW tq AS SELECT k, p * 2 AS p2, ts FROM quotes WHERE p > 0")
    sql = "SELECT t.k, t.ts, q.p2 FROM trades t ASOF JOIN tq q ON t.k = q.k AND t.ts >= q.ts"
    shown = ws.explain(sql, "STREAM")
    assert "stateful ASOF JOIN over a view of quotes (row by row" in shown, shown


@pytest.mark.slow
def test_forward_asof_of_a_cte_and_a_catalog_view(ws, spark, tmp_path):
    """A forward ASOF JOIN (``t.ts <= q.ts``: each left row's next quote) of a CTE and a
    catalog view: a left row is final once a quote of its key at or after its time, kept
    by the view, lies below the quotes' progress; the final rows, each once across the
    restart, carry ``merge_asof(direction='forward')``'s match, and no other row is out."""
    steps = [2, 1]
    trades, quotes, tparts, qparts = _setup(ws, tmp_path, 17, steps)
    sql = ("WITH t AS (SELECT k, v * 2 AS w, ts FROM trades WHERE q > 0) "
           "SELECT t.k, t.ts, t.w, q.p1 FROM t ASOF JOIN qv q ON t.k = q.k AND t.ts <= q.ts")
    reports = _run_in_steps(ws, tmp_path, sql, steps, "StatefulAsofQuery")

    t_on, _ = _late_split(tparts)
    q_on, _ = _late_split(qparts)
    right_progress = reports[-1].inputs["quotes"]
    assert right_progress == int(quotes.ts.max()) - WATERMARK
    left = t_on[t_on.q > 0].assign(w=lambda f: 2 * f.v)
    right = q_on[q_on.p > 0].assign(p1=lambda f: f.p + 1)
    match = pd.merge_asof(left.sort_values("ts"),
                          right[["k", "ts", "p1"]].rename(columns={"ts": "qts"})
                          .sort_values("qts"), left_on="ts", right_on="qts", by="k",
                          direction="forward", allow_exact_matches=True)
    final = match[match.qts.notna() & (match.qts < right_progress)]
    assert 0 < len(final) < len(left)  # some left rows still wait for their next quote
    want = {(k, int(ts)): (w, p1) for k, ts, w, p1 in zip(final.k, final.ts, final.w,
                                                          final.p1)}
    _assert_left_rows(spark, tmp_path, want)
    assert len(want) > 40
