"""Continuous RESAMPLE on Spark's state store (streaming/stateful/resample*.py), against a
RESAMPLE written here in pandas/numpy over the whole on-time input -- not against
WaveSQL's batch mode, nor with any helper of the code under test.

The oracle: each series (per key, or the whole stream) collapsed to one row per instant
(the greatest by ``v``, NULL lowest), put on the grid ``k * P`` from its first to its last
row; ``'prev'`` holds the last row, ``'linear'`` interpolates ``v`` between its nearest
values (NULL outside them). A point is final below its series' bound: progress (the
watermark the last micro-batch saw), just past the series' last row, and ('linear') just
past ``v``'s last value below progress -- a key without a value below progress is not
held by it, the whole stream is (README: continuous RESAMPLE). Late rows: below the
progress the files before them promised (largest event time minus the WATERMARK).

Two levels: the kernel alone, batch by batch with buckets called only for new rows or an
expired timer, as Spark calls them (fast, many seeds); and end to end on Spark, files
arriving in three rounds on one checkpoint (each round a restart that restores the state).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_stateful_streaming import _late_split  # (same 2 s watermark)
from wavesql.errors import WaveSQLError

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)
WATERMARK = 2 * SECOND
PERIOD = 250_000


# -- the oracle ----------------------------------------------------------------------------
def _key(k):
    return None if k is None or (isinstance(k, float) and np.isnan(k)) else k


#: The kernel tests' key hashes (``sk``) per key; bucket = code % 4.
CODES = {"a": 1, "b": 2, "c": 3, None: 4, "x": 0}


def kernel_rows(f: pd.DataFrame, keyed: bool) -> pd.DataFrame:
    """Rows ``k, v, ts`` in the RESAMPLE kernel's encoding (columns k, v, ts as c0-c2)."""
    return pd.DataFrame({
        "ts": f.ts.to_numpy(np.int64),
        "sk": np.array([CODES[_key(x)] if keyed else 0 for x in f.k], np.int64),
        "sh": np.zeros(len(f), np.int64),
        "cn0": f.k.isna().to_numpy(bool), "c0": f.k.fillna("").to_numpy(object),
        "cn1": f.v.isna().to_numpy(bool), "c1": f.v.fillna(0.0).to_numpy(float),
        "cn2": np.zeros(len(f), bool), "c2": f.ts.to_numpy(np.int64)})


def kernel_bucket(k, keyed: bool) -> int:
    """The bucket (of 4) of key ``k`` in the kernel tests."""
    return CODES[_key(k)] % 4 if keyed else 0


def _groups(frame: pd.DataFrame, keyed: bool):
    if not keyed:
        return [(None, frame)]
    return [(_key(k), g) for k, g in frame.groupby("k", dropna=False)]


def oracle_resample(frame: pd.DataFrame, method: str, keyed: bool) -> dict:
    """``{(key, grid time): v}`` of the whole input (module docstring); NaN: NULL."""
    out = {}
    for k, g in _groups(frame, keyed):
        g = g.assign(_has=g.v.notna()).sort_values(["ts", "_has", "v"])
        g = g.drop_duplicates("ts", keep="last")
        ts, v = g.ts.to_numpy(np.int64), g.v.to_numpy(float)
        has = ~np.isnan(v)
        for n in range(-(-ts.min() // PERIOD), ts.max() // PERIOD + 1):
            t = n * PERIOD
            if method == "prev":
                out[(k, t)] = v[np.searchsorted(ts, t, side="right") - 1]
                continue
            tv, vv = ts[has], v[has]
            i = np.searchsorted(tv, t, side="right") - 1
            if i >= 0 and tv[i] == t:
                out[(k, t)] = vv[i]
            elif i < 0 or i + 1 >= len(tv):
                out[(k, t)] = np.nan
            else:
                out[(k, t)] = vv[i] + (vv[i + 1] - vv[i]) * (t - tv[i]) / (tv[i + 1] - tv[i])
    return out


def oracle_bounds(frame: pd.DataFrame, method: str, keyed: bool, progress: int) -> dict:
    """Each series' bound: its grid points below it are final (module docstring)."""
    bounds = {}
    for k, g in _groups(frame, keyed):
        ends = [int(g.ts.max())]
        if method == "linear":
            below = g[g.v.notna() & (g.ts < progress)]
            if len(below):
                ends.append(int(below.ts.max()))
            elif not keyed:
                bounds[k] = None  # the whole stream waits for a value
                continue
        bounds[k] = min([progress] + [e + 1 for e in ends])
    return bounds


def _final_points(on_time, method, keyed, progress):
    points = oracle_resample(on_time, method, keyed)
    bounds = oracle_bounds(on_time, method, keyed, progress)
    return {p: v for p, v in points.items()
            if bounds[p[0]] is not None and p[1] < bounds[p[0]]}, bounds


def _same(got: dict, want: dict) -> None:
    assert set(got) == set(want), sorted(set(got) ^ set(want), key=str)[:5]
    for p, v in want.items():
        g = got[p]
        assert (np.isnan(v) and np.isnan(g)) or np.isclose(g, v, rtol=1e-12, atol=1e-12), p


# -- the input -----------------------------------------------------------------------------
def _input(seed: int, n: int, keyed: bool) -> pd.DataFrame:
    """Rows in arrival order: up to 3 s out of order, ties in time, NULL values and keys;
    per key, ``c`` stops at 20 s (it holds ``_progress``)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 60 * SECOND, n)) // 1000 * 1000
    ts[10:14] = ts[10]  # one instant, four rows: the greatest v is the one
    k = rng.choice(["a", "b", "c", None], n, p=[0.3, 0.3, 0.3, 0.1]).astype(object)
    k[(k == "c") & (ts > 20 * SECOND)] = "a"
    if not keyed:
        k[:] = "x"
    v = rng.normal(size=n)
    v[rng.random(n) < 0.15] = np.nan
    order = np.argsort(ts + rng.integers(0, 3 * SECOND, n))
    return pd.DataFrame({"k": k, "v": v, "ts": ts}).iloc[order].reset_index(drop=True)


# -- the kernel alone ---------------------------------------------------------------------
@pytest.mark.parametrize("keyed", [False, True], ids=["whole-stream", "per-key"])
@pytest.mark.parametrize("method", ["prev", "linear"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kernel_emits_each_final_point_once(seed, method, keyed):
    """Micro-batches of 50 rows over 4 buckets (per key; else one): a bucket is called
    with its new rows or when its timer expired (Spark's rule), the RESAMPLE of each due
    series evaluated over the rows it hands back (by the oracle) and kept inside its span.
    Every point is emitted once, equal to the whole input's, exactly up to its series'
    bound; ``_progress`` from the buckets' caps is the stalest bound; the state stays
    bounded by the keys and the watermark's delay, not the history."""
    from wavesql.streaming.stateful import resample as rk

    frame = _input(seed, 600, keyed)
    op = rk.ResampleOperator(("string", "double", "bigint"), PERIOD, method, keyed,
                             (1,) if method == "linear" else (), (1,))

    def encode(f):
        return kernel_rows(f, keyed)

    def bucket(k):
        return kernel_bucket(k, keyed)

    states, timers, caps, emitted, state_rows = {}, {}, {}, Counter(), []
    values, on_time, w, top, shown = {}, [], None, None, None
    parts = [frame.iloc[i:i + 50] for i in range(0, len(frame), 50)] + [frame.iloc[:0]] * 2
    for part in parts:
        due = {bucket(k) for k in part.k} | {b for b, t in timers.items()
                                            if t is not None and w is not None and w > t}
        for b in sorted(due):
            rows = part.loc[np.array([bucket(k) == b for k in part.k], bool)]
            step = rk.step(op, states.get(b), encode(rows), w)
            assert (step.late == (rows.ts.to_numpy() < w if w is not None else False)).all()
            on_time.append(rows[~step.late])
            states[b], timers[b], caps[b] = step.state, step.timer, step.cap
            state_rows.append(step.state_rows)
            ctx = step.context
            points = oracle_resample(pd.DataFrame({
                "k": np.where(ctx.cn0, None, ctx.c0), "v": np.where(ctx.cn1, np.nan, ctx.c1),
                "ts": ctx.ts.to_numpy(np.int64)}), method, keyed) if len(ctx) else {}
            for _, span in step.spans.iterrows():
                key = (None if span.cn0 else span.c0) if keyed else None
                lo = span.lo if span.has_lo else -(1 << 62)
                for (k, t), v in points.items():
                    if k == key and lo <= t < span.hi:
                        emitted[(k, t)] += 1
                        values[(k, t)] = v
        if w is not None:  # the driver's _progress (resample_query.py), from the caps
            cap = [c for c in caps.values() if c is not None]
            if keyed:
                shown = min([w] + cap)
            elif cap:
                shown = min(w, cap[0]) if shown is None else max(shown, min(w, cap[0]))
        if len(part):
            top = part.ts.max() if top is None else max(top, part.ts.max())
            w = int(top - WATERMARK)
    assert set(emitted.values()) == {1}
    everything = pd.concat(on_time).assign(k=lambda f: f.k if keyed else None)
    # the last call saw the watermark before the last update of w
    want, bounds = _final_points(everything, method, keyed, int(top - WATERMARK))
    _same(values, want)
    assert shown == min(b for b in bounds.values() if b is not None)
    assert len(want) > 200
    # bounded: far below the input, and no larger at the end than early on
    half = len(state_rows) // 2
    assert max(state_rows) < len(frame) // 4
    assert max(state_rows[half:]) <= 2 * max(state_rows[:half]) + 10


def test_kernel_state_is_arrow_bytes():
    from wavesql.streaming.stateful import resample as rk
    from wavesql.streaming.stateful import state as st

    op = rk.ResampleOperator(("bigint",), PERIOD, "prev", False, (), ())
    rows = pd.DataFrame({"ts": np.arange(5, dtype=np.int64) * SECOND, "sk": 0, "sh": 0,
                         "cn0": False, "c0": np.arange(5, dtype=np.int64)})
    rows = rows.astype({"sk": np.int64, "sh": np.int64})
    first = rk.step(op, None, rows, None)  # no progress yet: nothing due, all kept
    assert first.state_rows == 5 and not len(first.context) and first.timer == 0
    step = rk.step(op, first.state, rows.iloc[:0], 3 * SECOND)
    assert step.state.startswith(st.MAGIC) and b"pickle" not in step.state
    assert len(step.context) == 5 and step.spans.hi.tolist() == [3 * SECOND]
    meta, tables = st.decode("resample", step.state)
    # the bound is 3 s: the row at 2 s brackets the next points, the later rows are kept
    assert meta["w"] == 3 * SECOND and tables["rows"].column("ts").to_pylist() == [
        2 * SECOND, 3 * SECOND, 4 * SECOND]
    assert step.timer == 3 * SECOND and step.cap == 4 * SECOND + 1
    with pytest.raises(st.StateError):
        st.decode("over-lookback", step.state)


# -- end to end on Spark -------------------------------------------------------------------
def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _write_files(folder, frame: pd.DataFrame, n_files: int):
    """``frame`` as ``n_files`` Parquet files in arrival order (modification times in
    order), plus a row without event time in the second; the per-file frames."""
    folder.mkdir(parents=True)
    edges = np.linspace(0, len(frame), n_files + 1).astype(int)
    parts = []
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        part = frame.iloc[a:b]
        out = part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]"),
                          v=part.v.astype(object).where(part.v.notna(), None))
        if i == 1:
            timeless = pd.DataFrame({"k": ["a"], "v": [1.0], "ts": pd.Series(
                [pd.NaT], dtype="datetime64[us]")})
            out = pd.concat([out, timeless], ignore_index=True)
        out.to_parquet(folder / f"part-{i:03d}.parquet")
        stamp = time.time() - 3600 + i
        os.utime(folder / f"part-{i:03d}.parquet", (stamp, stamp))
        parts.append(part)
    return parts


def _rounds(ws, tmp_path, sql, rounds):
    """Move each round's files into the stream's folder and run the query to the end on
    one checkpoint; every run's reports."""
    staged = sorted(tmp_path.joinpath("staging").iterdir())
    reports = []
    at = 0
    for n in rounds:
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


CASES = [  # one in CI (about 10 micro-batches and three query starts each); the kernel
    # tests above cover every method and keying batch by batch
    pytest.param("linear", False, id="linear-whole-stream"),
    pytest.param("prev", True, id="prev-per-key", marks=pytest.mark.slow),
    pytest.param("prev", False, id="prev-whole-stream", marks=pytest.mark.slow),
    pytest.param("linear", True, id="linear-per-key", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("method, keyed", CASES)
def test_continuous_resample_on_the_state_store(ws, spark, tmp_path, method, keyed):
    """Files arrive in three rounds on one checkpoint (state restored at each restart),
    out of order, with late rows and a row without event time: every grid point is
    emitted once, final, equal to the oracle over the whole on-time input, exactly up to
    each series' bound; late rows are in the late sink; each micro-batch's ``_progress/``
    record accounts for its rows five ways; the state stays bounded."""
    frame = _input(11 if keyed else 12, 360, keyed)
    parts = _write_files(tmp_path / "staging", frame, 6)
    (tmp_path / "in").mkdir()
    ws.sql(f"CREATE STREAM kv (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    by = " PARTITION BY k" if keyed else ""
    sql = f"SELECT k, ts, v FROM RESAMPLE(kv, ts, INTERVAL 250 MILLISECONDS, '{method}'{by}) r"
    assert "stateful RESAMPLE on Spark's state store" in ws.explain(sql, "STREAM")
    reports = _rounds(ws, tmp_path, sql, [2, 2, 2])
    on_time, late, _ = _late_split(parts)
    progress = reports[-1].inputs["kv"]  # the watermark the last micro-batch saw
    assert progress == int(frame.ts.max()) - WATERMARK
    want, bounds = _final_points(on_time.assign(k=on_time.k if keyed else None), method,
                                 keyed, progress)
    out = spark.read.parquet(str(tmp_path / "out"))
    rows = out.collect()
    assert all(r["_final"] for r in rows)
    seen = Counter(((r["k"] if keyed else None), _micros(r["ts"])) for r in rows)
    assert set(seen.values()) == {1}  # each grid point once
    got = {((r["k"] if keyed else None), _micros(r["ts"])):
           (np.nan if r["v"] is None else r["v"]) for r in rows}
    _same(got, want)
    assert len(want) > 150
    assert reports[-1].progress_us == min(b for b in bounds.values() if b is not None)
    if keyed:  # the stopped key c holds _progress back, not the others' rows
        assert reports[-1].progress_us <= on_time[on_time.k == "c"].ts.max() + 1
        assert max(t for k, t in got if k == "a") > 50 * SECOND
    # late rows and the row without event time: in the late sink, counted
    late_rows = [json.loads(r["_row"]) for r in
                 spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()]
    assert len(late) > 0 and sum(r.late for r in reports) == len(late)
    assert sorted(r["ts"] for r in late_rows if "ts" in r) == sorted(
        pd.to_datetime(late.ts, unit="us").dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z")
    assert sum("ts" not in r for r in late_rows) == 1
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "_progress")
                                                         .glob("*.json"))]
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"])
    assert sum(r["rows_in"] for r in records) == len(frame) + 1
    assert sum(r["no_time"] for r in records) == 1
    # bounded: the series' rows from their bounds on (the watermark's delay and a file)
    # and a bracketing row or two per key -- not the history
    buffered = [r.buffered for r in reports if r.rows_in]
    assert 0 < max(buffered) < len(frame) // 3
    assert max(buffered[-2:]) <= 2 * max(buffered[:2]) + 10


def test_an_old_re_evaluated_checkpoint_is_refused(ws, tmp_path, monkeypatch):
    """A RESAMPLE's checkpoint written by the re-evaluating runner cannot be read by the
    state-store runner: a clear CHECKPOINT_MISMATCH, not results from an empty state."""
    frame = _input(5, 40, False)
    _write_files(tmp_path / "in", frame, 1)
    ws.sql(f"CREATE STREAM kv (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    sql = "SELECT ts, v FROM RESAMPLE(kv, ts, INTERVAL 1 SECOND, 'prev') r"
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    old = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    old.await_termination()
    assert type(old).__name__ == "ReEvaluatingQuery"
    monkeypatch.delenv("WAVESQL_STATEFUL")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "CHECKPOINT_MISMATCH"
    assert "new checkpoint" in err.value.hint


def test_resample_under_windows_stays_re_evaluated(ws, tmp_path):
    """A RESAMPLE under CQL windows (TiLT's imputation) stays on the re-evaluating runner,
    and EXPLAIN STREAM says so."""
    frame = _input(6, 20, True)
    _write_files(tmp_path / "in", frame, 1)
    ws.sql(f"CREATE STREAM kv (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    imputed = """
        WITH grid AS (SELECT k, ts, v FROM RESAMPLE(kv, ts, INTERVAL 1 SECOND, 'prev'
                                                  PARTITION BY k)),
             buckets AS (SELECT _time, k, avg(v) AS mv
                         FROM kv [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k)
        SELECT g._time, g.k, g.ts, coalesce(g.v, b.mv) AS v
        FROM (SELECT timestamp_micros(unix_micros(ts) + pmod(-unix_micros(ts), 10000000))
                     AS _time, k, ts, v FROM grid) g
        LEFT JOIN buckets b ON b._time = g._time AND b.k = g.k"""
    shown = ws.explain(imputed, "STREAM")
    assert "continuous windowed query" in shown and "stateful RESAMPLE" not in shown
