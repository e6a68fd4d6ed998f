"""A continuous RESAMPLE over a view, CTE or subquery that is row by row over one catalog
stream (issue 21, closure): it runs on Spark's state store, files arriving in steps on one
checkpoint (each step a restart that restores the state), against a RESAMPLE written here
in pandas over the rows the view keeps -- not against WaveSQL's batch mode, nor any helper
of the code under test.

The oracle: a stream row is late below the progress the files before it promised (their
largest EVENT TIME minus the 2 s WATERMARK, every stream row counted, those the view drops
too); the view is applied to the on-time rows (``q > 0``, ``w = 2 v``); each series (per
key, or the whole stream) collapsed to one row per instant (the greatest ``w``, NULL
lowest) and put on the grid ``n * 250 ms`` from its first to its last row: ``'prev'``
holds the last row, ``'linear'`` interpolates ``w`` between its nearest values (NULL
outside them). A point is final below its series' bound: progress, just past the series'
last row and ('linear') just past ``w``'s last value below progress (README: continuous
RESAMPLE).
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
PERIOD = 250_000
EPOCH = dt.datetime(1970, 1, 1)
STREAM = ("CREATE STREAM kv (k STRING, v DOUBLE, q INT, ts TIMESTAMP) FROM '{}' "
          "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")


# -- the oracle ----------------------------------------------------------------------------
def _late_split(parts: list) -> tuple:
    """(on-time rows, late rows): a file's rows are late below what the files before it
    promised -- all their rows, before any view."""
    on_time, late, top = [], [], None
    for part in parts:
        is_late = part.ts < top - WATERMARK if top is not None else np.zeros(len(part), bool)
        on_time.append(part[~is_late])
        late.append(part[is_late])
        top = part.ts.max() if top is None else max(top, part.ts.max())
    return pd.concat(on_time), pd.concat(late)


def _series(frame: pd.DataFrame, keyed: bool) -> list:
    if not keyed:
        return [(None, frame)]
    return [(None if pd.isna(k) else k, g) for k, g in frame.groupby("k", dropna=False)]


def _oracle(rows: pd.DataFrame, method: str, keyed: bool, progress: int) -> dict:
    """``{(key, grid time): w}`` of the final points (module docstring); NaN: NULL."""
    out = {}
    for key, g in _series(rows, keyed):
        g = g.assign(has=g.w.notna()).sort_values(["ts", "has", "w"])
        g = g.drop_duplicates("ts", keep="last")
        ts, w = g.ts.to_numpy(np.int64), g.w.to_numpy(float)
        valued = ~np.isnan(w)
        ends = [ts.max()]
        if method == "linear":
            below = ts[valued & (ts < progress)]
            if not len(below) and not keyed:
                continue  # the whole stream waits for a value
            ends += list(below[-1:])
        bound = min([progress] + [e + 1 for e in ends])
        tv, wv = ts[valued], w[valued]
        for n in range(-(-ts.min() // PERIOD), ts.max() // PERIOD + 1):
            t = n * PERIOD
            if t >= bound:
                break
            if method == "prev":
                out[(key, t)] = w[np.searchsorted(ts, t, side="right") - 1]
                continue
            i = np.searchsorted(tv, t, side="right") - 1
            if i >= 0 and tv[i] == t:
                out[(key, t)] = wv[i]
            elif i < 0 or i + 1 >= len(tv):
                out[(key, t)] = np.nan
            else:
                out[(key, t)] = wv[i] + (wv[i + 1] - wv[i]) * (t - tv[i]) / (tv[i + 1] - tv[i])
    return out


# -- the input -----------------------------------------------------------------------------
def _input(seed: int, n: int) -> pd.DataFrame:
    """Rows in arrival order: up to 3 s out of order, ties in time, NULL values and keys,
    ``q`` in 0..2 (the views keep ``q > 0``); the stream's last rows are ones the views drop
    (``q = 0``), so progress comes from rows no view keeps, and six rows it keeps come
    long after their time (late)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 40 * SECOND, n)) // 1000 * 1000
    ts[10:14] = ts[10]
    k = rng.choice(["a", "b", None], n, p=[0.45, 0.45, 0.1]).astype(object)
    v = rng.normal(size=n)
    v[rng.random(n) < 0.15] = np.nan
    q = rng.integers(0, 3, n).astype(np.int32)
    q[-5:] = 0
    order = np.argsort(ts + rng.integers(0, 3 * SECOND, n))
    # the dropped rows last, and before them six rows the view keeps from far back: late
    old = np.flatnonzero((q > 0) & (ts < 5 * SECOND))[:6]
    order = [i for i in order if i < n - 5 and i not in set(old)]
    order = np.concatenate([order, old, np.arange(n - 5, n)])
    return pd.DataFrame({"k": k, "v": v, "q": q, "ts": ts}).iloc[order].reset_index(drop=True)


def _write_files(folder, frame: pd.DataFrame, n_files: int) -> list:
    """``frame`` as ``n_files`` Parquet files in arrival order; the per-file frames."""
    folder.mkdir(parents=True)
    edges = np.linspace(0, len(frame), n_files + 1).astype(int)
    parts = []
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        part = frame.iloc[a:b]
        part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]"),
                    v=part.v.astype(object).where(part.v.notna(), None)).to_parquet(
            folder / f"part-{i:03d}.parquet")
        stamp = time.time() - 3600 + i
        os.utime(folder / f"part-{i:03d}.parquet", (stamp, stamp))
        parts.append(part)
    return parts


def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _run_in_steps(ws, tmp_path, sql: str, steps: list) -> list:
    """Move each step's files into the stream's folder and run the query to the end on one
    checkpoint (a restart per step); every run's reports."""
    staged = sorted(tmp_path.joinpath("staging").iterdir())
    reports, at = [], 0
    for n in steps:
        for f in staged[at:at + n]:
            stamp = f.stat().st_mtime
            shutil.move(f, tmp_path / "in" / f.name)
            os.utime(tmp_path / "in" / f.name, (stamp, stamp))
        at += n
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        cq.await_termination()
        assert type(cq).__name__ == "StatefulResampleQuery"
        reports += cq.reports
    return reports


def _check(ws, spark, tmp_path, sql: str, method: str, keyed: bool, seed: int, steps: list):
    frame = _input(seed, 240)
    parts = _write_files(tmp_path / "staging", frame, sum(steps))
    (tmp_path / "in").mkdir()
    ws.sql(STREAM.format(tmp_path / "in"))
    if sql.startswith("CREATE VIEW"):
        view, sql = sql.split(";")
        ws.sql(view)
    shown = ws.explain(sql, "STREAM")
    assert "stateful RESAMPLE over a view of kv" in shown, shown
    reports = _run_in_steps(ws, tmp_path, sql, steps)
    on_time, late = _late_split(parts)
    progress = reports[-1].inputs["kv"]
    # progress is the stream's: its last rows, which the view drops, moved it
    assert progress == int(frame.ts.max()) - WATERMARK
    kept = on_time[on_time.q > 0]
    rows = kept.assign(w=2 * kept.v, k=kept.k if keyed else None)
    want = _oracle(rows, method, keyed, progress)
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    assert out and all(r["_final"] for r in out)
    seen = Counter(((r["k"] if keyed else None), _micros(r["ts"])) for r in out)
    assert set(seen.values()) == {1}  # each grid point once, across the restarts
    got = {((r["k"] if keyed else None), _micros(r["ts"])):
           (np.nan if r["w"] is None else r["w"]) for r in out}
    assert set(got) == set(want), sorted(set(got) ^ set(want), key=str)[:5]
    for p, v in want.items():
        assert (np.isnan(v) and np.isnan(got[p])) or np.isclose(got[p], v, rtol=1e-12), p
    assert len(want) > 60
    # the late rows the view keeps were dropped as late, not resampled
    assert len(late[late.q > 0]) >= 6
    assert sum(r.late for r in reports) == len(late[late.q > 0])


def test_resample_over_a_cte_per_key(ws, spark, tmp_path):
    """A CTE filtering and computing a column of the stream, RESAMPLEd per key ('linear'),
    files arriving in two steps (three files); the key is not where the stream has it (the
    view's columns carry the key to the grid points' spans). ``2 * q DIV q`` is 2 for
    every row the CTE keeps (q > 0); the rows WaveSQL adds for its own progress (resume
    rows, ticks) pass its WHERE and must not make it divide by zero under ANSI."""
    sql = ("WITH f AS (SELECT ts, (2 * q DIV q) * v AS w, k FROM kv WHERE q > 0) "
           "SELECT k, ts, w FROM RESAMPLE(f, ts, INTERVAL 250 MILLISECONDS, 'linear' "
           "PARTITION BY k) r")
    _check(ws, spark, tmp_path, sql, "linear", True, 3, [2, 1])


@pytest.mark.slow
def test_resample_over_a_view_whole_stream(ws, spark, tmp_path):
    """A catalog view (a subquery of a projection) RESAMPLEd as one series ('prev'), files
    arriving in two steps."""
    sql = ("CREATE VIEW fv AS SELECT k, ts, w FROM (SELECT k, ts, 2 * v AS w, q FROM kv) s "
           "WHERE q > 0;"
           "SELECT k, ts, w FROM RESAMPLE(fv, ts, INTERVAL 250 MILLISECONDS, 'prev') r")
    _check(ws, spark, tmp_path, sql, "prev", False, 4, [1, 1])


@pytest.mark.slow
def test_resample_over_a_subquery_whole_stream(ws, spark, tmp_path):
    """A subquery (``SELECT *`` filtered, a column computed over it) RESAMPLEd as one
    series ('linear'), files arriving in two steps."""
    sql = ("SELECT ts, w, k FROM RESAMPLE((SELECT k, ts, v + v AS w FROM (SELECT * FROM kv "
           "WHERE q > 0) x), ts, INTERVAL 250 MILLISECONDS, 'linear') r")
    _check(ws, spark, tmp_path, sql, "linear", False, 5, [2, 1])


# -- refusals ------------------------------------------------------------------------------
REFUSED = [
    ("SELECT k, ts, v FROM kv LIMIT 10", "LIMIT"),
    ("SELECT k, ts, v FROM kv UNION ALL SELECT k, ts, v FROM kv", "a set operation"),
    ("SELECT k, ts, v * rand() AS v FROM kv", "gives another value each time"),
]


def _refusal_of_resampling(ws, tmp_path, body):
    """The error of a continuous RESAMPLE of CTE ``f`` = ``body`` over stream kv."""
    (tmp_path / "in").mkdir()
    ws.sql(STREAM.format(tmp_path / "in"))
    sql = (f"WITH f AS ({body}) SELECT k, ts, v FROM RESAMPLE(f, ts, INTERVAL 1 SECOND, "
           "'prev') r")
    with pytest.raises(WaveSQLError) as err:
        ws.explain(sql, "STREAM")
    return err


@pytest.mark.parametrize("body, what", REFUSED, ids=[w for _, w in REFUSED])
def test_state_across_rows_is_refused(ws, tmp_path, body, what):
    """A view, CTE or subquery the continuous RESAMPLE can neither read row by row nor run
    as a stream part of its own: NOT_IMPLEMENTED naming it, with a hint."""
    err = _refusal_of_resampling(ws, tmp_path, body)
    assert err.value.code == "NOT_IMPLEMENTED"
    assert "continuous RESAMPLE's input" in err.value.message and what in err.value.message
    assert "row by row" in err.value.hint or "one catalog stream" in err.value.hint


OWN_RULE = [
    ("SELECT 'a' AS k, avg(v) AS v, max(ts) AS ts FROM kv",
     "selects neither the window's _time nor its stream's event time (ts)"),
    ("SELECT k, max(v) AS v, ts FROM kv GROUP BY k, ts", "`GROUP BY k, ts` over an unbounded "
     "stream needs a window"),
    ("SELECT k, ts, avg(v) OVER (PARTITION BY k ORDER BY ts) AS v FROM kv",
     "needs a bounded frame"),
    ("SELECT DISTINCT k, ts, v FROM kv", "`DISTINCT` over an unbounded stream needs a window"),
    ("SELECT a.k, a.ts, b.v FROM kv a JOIN kv b ON a.k = b.k", "over an unbounded stream "
     "needs a window"),
]


@pytest.mark.parametrize("body, what", OWN_RULE,
                         ids=["aggregate", "GROUP BY", "OVER", "DISTINCT", "join"])
def test_an_input_computing_across_rows_follows_its_own_streaming_rules(ws, tmp_path, body,
                                                                         what):
    """An input that computes across rows runs as a stream part of its own
    (streaming/stream_parts.py; a windowed one runs: tests/test_stream_parts.py), so one
    that could not run continuously on its own -- no window, an unbounded OVER frame, no
    event time to RESAMPLE by -- gets that STREAMING_RULE, naming what."""
    err = _refusal_of_resampling(ws, tmp_path, body)
    assert err.value.code == "STREAMING_RULE", err.value
    assert what in err.value.message, err.value


def test_the_event_time_must_pass_through(ws, tmp_path):
    """The grid time must be the stream's EVENT TIME passed through unchanged: renamed or
    computed, a STREAMING_RULE naming the column to use."""
    (tmp_path / "in").mkdir()
    ws.sql(STREAM.format(tmp_path / "in"))
    renamed = ("WITH f AS (SELECT k, ts AS t, v FROM kv) SELECT k, t, v "
               "FROM RESAMPLE(f, t, INTERVAL 1 SECOND, 'prev') r")
    computed = ("WITH f AS (SELECT k, ts + INTERVAL 1 SECOND AS ts, v FROM kv) SELECT k, ts, v "
                "FROM RESAMPLE(f, ts, INTERVAL 1 SECOND, 'prev') r")
    for sql in (renamed, computed):
        with pytest.raises(WaveSQLError) as err:
            ws.explain(sql, "STREAM")
        assert err.value.code == "STREAMING_RULE", err.value
        assert "EVENT TIME" in err.value.message and "select ts unchanged" in err.value.hint


def test_the_re_evaluating_runner_refuses_a_view(ws, tmp_path, monkeypatch):
    """Where the state store cannot run it (here forced off), a RESAMPLE over a view is
    refused -- the re-evaluating runner keeps the stream's rows by the stream's columns,
    not the view's: NOT_IMPLEMENTED saying why, not wrong results."""
    (tmp_path / "in").mkdir()
    ws.sql(STREAM.format(tmp_path / "in"))
    sql = ("WITH f AS (SELECT k, ts, v FROM kv WHERE q > 0) SELECT k, ts, v "
           "FROM RESAMPLE(f, ts, INTERVAL 1 SECOND, 'prev') r")
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    for run in (lambda: ws.explain(sql, "STREAM"),
                lambda: ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")):
        with pytest.raises(WaveSQLError) as err:
            run()
        assert err.value.code == "NOT_IMPLEMENTED"
        assert "state store only" in err.value.message
        assert "WAVESQL_STATEFUL=0" in err.value.message
