"""``EMIT CHANGES`` over a continuous RESAMPLE on Spark's state store
(streaming/stateful/resample*.py, pending.py), batch by batch, against the pandas/numpy
RESAMPLE of tests/test_stateful_resample.py (the oracle: the grid of each series over the
on-time rows received so far, final below the series' bound).

EMIT CHANGES (README "Continuous queries"): each micro-batch emits the grid points that
became final in it (``_final = true``, once each) and every point not final yet -- at or
after its series' bound (no bound yet: all), up to the series' last row -- with its value
over the rows so far (``_final = false``), in every batch until final.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_stateful_over_changes import run_in_two_steps
from tests.test_stateful_resample import (PERIOD, _input, _same, kernel_bucket, kernel_rows,
                                          oracle_bounds, oracle_resample)

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)
WATERMARK = 2 * SECOND


def _not_final(rows: pd.DataFrame, method: str, keyed: bool, progress: int | None) -> dict:
    """The points not final yet over ``rows`` at ``progress``: at or after their series'
    bound, all of a series without one."""
    points = oracle_resample(rows, method, keyed)
    if progress is None:
        return points
    bounds = oracle_bounds(rows, method, keyed, progress)
    return {p: v for p, v in points.items() if bounds[p[0]] is None or p[1] >= bounds[p[0]]}


# -- the kernel alone ---------------------------------------------------------------------
@pytest.mark.parametrize("keyed", [False, True], ids=["whole-stream", "per-key"])
@pytest.mark.parametrize("method", ["prev", "linear"])
@pytest.mark.parametrize("seed", [1, 2])
def test_kernel_hands_back_the_points_not_final_yet(seed, method, keyed):
    """Micro-batches of 50 rows over 4 buckets, each called only with new rows or an
    expired timer (Spark's rule): a called bucket's pending spans over the rows it hands
    back give its points not final yet; an uncalled bucket's are those of its last call
    (carried, as the driver does). Each batch, all of them together are exactly the
    oracle's points not final yet over the rows so far; final points come once each."""
    from wavesql.streaming.stateful import resample as rk

    frame = _input(seed, 500, keyed)
    args = (("string", "double", "bigint"), PERIOD, method, keyed,
            (1,) if method == "linear" else (), (1,))
    op = rk.ResampleOperator(*args, changes=True)
    final_op = rk.ResampleOperator(*args)

    def encode(f):
        return kernel_rows(f, keyed)

    def bucket(k):
        return kernel_bucket(k, keyed)

    def inside(step, spans):
        ctx = step.context
        points = oracle_resample(pd.DataFrame({
            "k": np.where(ctx.cn0, None, ctx.c0), "v": np.where(ctx.cn1, np.nan, ctx.c1),
            "ts": ctx.ts.to_numpy(np.int64)}), method, keyed) if len(ctx) else {}
        out = {}
        for _, span in spans.iterrows():
            key = (None if span.cn0 else span.c0) if keyed else None
            lo = span.lo if span.has_lo else -(1 << 62)
            out.update({(k, t): v for (k, t), v in points.items()
                        if k == key and lo <= t < span.hi})
        return out

    states, finals, timers, carried, emitted = {}, {}, {}, {}, Counter()
    on_time, w, top, early_seen = [], None, None, 0
    parts = [frame.iloc[i:i + 50] for i in range(0, len(frame), 50)] + [frame.iloc[:0]] * 2
    for part in parts:
        due = {bucket(k) for k in part.k} | {b for b, t in timers.items()
                                            if t is not None and w is not None and w > t}
        for b in sorted(due):
            rows = encode(part.loc[np.array([bucket(k) == b for k in part.k], bool)])
            step = rk.step(op, states.get(b), rows, w)
            same = rk.step(final_op, finals.get(b), rows, w)
            # the same state, timer and final spans as without EMIT CHANGES
            assert step.state == same.state and step.timer == same.timer
            assert step.spans.equals(same.spans)
            assert same.pending is None or not len(same.pending)
            states[b], finals[b], timers[b] = step.state, same.state, step.timer
            on_time.append(part.loc[np.array([bucket(k) == b for k in part.k], bool)]
                           [~step.late])
            for p in inside(step, step.spans):
                emitted[p] += 1
            carried[b] = inside(step, step.pending)
        so_far = pd.concat(on_time).assign(k=lambda f: f.k if keyed else None)
        got = {p: v for points in carried.values() for p, v in points.items()}
        _same(got, _not_final(so_far, method, keyed, w))
        early_seen += len(got)
        if len(part):
            top = part.ts.max() if top is None else max(top, part.ts.max())
            w = int(top - WATERMARK)
    assert set(emitted.values()) == {1} and len(emitted) > 200
    assert early_seen > 100


def test_the_operator_names_changes_only_when_set():
    from dataclasses import fields

    from wavesql.streaming.stateful import resample as rk

    final = rk.ResampleOperator(("bigint",), PERIOD, "prev", False)
    before = "ResampleOperator(" + ", ".join(
        f"{f.name}={getattr(final, f.name)!r}" for f in fields(final)
        if f.name != "changes") + ")"
    assert repr(final) == before
    assert "changes=True" in repr(rk.ResampleOperator(("bigint",), PERIOD, "prev", False,
                                                      changes=True))


# -- end to end on Spark -------------------------------------------------------------------
def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def _write(folder, parts) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts):
        path = folder / f"part-{i:03d}.parquet"
        part.assign(ts=pd.to_datetime(part.ts, unit="us").astype("datetime64[us]"),
                    v=part.v.astype(object).where(part.v.notna(), None)).to_parquet(path)
        stamp = time.time() - 3600 + i
        os.utime(path, (stamp, stamp))


def _check(spark, tmp_path, parts, reports, method, keyed, late_rows=True):
    """Each batch's points not final yet against the oracle over the rows so far at its
    progress, the final points once each and the oracle's; returns (final points wanted,
    points not final yet seen)."""
    assert [r.batch for r in reports] == list(range(len(reports)))
    got: dict = {}
    for r in spark.read.parquet(str(tmp_path / "out")).collect():
        point = ((r["k"] if keyed else None), _micros(r["ts"]))
        got.setdefault((r["batch"], r["_final"]), []).append(
            (point, np.nan if r["v"] is None else r["v"]))
    on_time, top, finals, late_n, early_seen = [], None, Counter(), 0, 0
    files = iter(parts)
    for r in reports:
        progress = None if top is None else top - WATERMARK
        assert r.inputs["kv"] == progress, r.batch
        if r.rows_in:
            part = next(files)
            late = (part.ts < progress) if progress is not None else np.zeros(len(part), bool)
            assert r.late == int(late.sum())
            late_n += r.late
            on_time.append(part[~late])
            top = max(int(part.ts.max()), top if top is not None else int(part.ts.max()))
        so_far = pd.concat(on_time).assign(k=lambda f: f.k if keyed else None)
        early = dict(got.get((r.batch, False), []))
        assert len(early) == len(got.get((r.batch, False), []))  # each point once a batch
        _same(early, _not_final(so_far, method, keyed, progress))
        early_seen += len(early)
        for point, v in got.get((r.batch, True), []):
            finals[point] += 1
    assert next(files, None) is None and (late_n > 0) == late_rows
    everything = pd.concat(on_time).assign(k=lambda f: f.k if keyed else None)
    points = oracle_resample(everything, method, keyed)
    bounds = oracle_bounds(everything, method, keyed, top - WATERMARK)
    want = {p: v for p, v in points.items() if bounds[p[0]] is not None and p[1] < bounds[p[0]]}
    assert set(finals.values()) == {1}
    _same({p: v for (b, f), rows in got.items() if f for p, v in rows}, want)
    return want, early_seen


def _buckets(spark, sql_of_k: str, keys: str) -> dict:
    """Each key's bucket as the plan computes it (``sql_of_k`` over a column ``k``), by
    Spark: the scenario below needs two keys in different buckets."""
    values = ", ".join(f"('{k}')" for k in keys)
    return {r["k"]: r["b"] for r in spark.sql(
        f"SELECT k, {sql_of_k} AS b FROM VALUES {values} AS t(k)").collect()}


def test_a_bucket_not_called_keeps_emitting_its_points(ws, spark, tmp_path):
    """Keys x and y in different buckets; a second file (read after a restart on the same
    checkpoint) with y's rows out of order and a late one, a third with y's: neither
    raises progress (8 s), so x's bucket -- no row, none of its points passed -- is not
    called in the last two batches, and its points not final yet (8 s to 10 s) are
    emitted again all the same (carried, across the restart too)."""
    n = max(2, min(2 * int(spark.conf.get("spark.sql.shuffle.partitions")), 1024))
    buckets = _buckets(spark, f"pmod(xxhash64(k IS NULL, k), {n})", "abcdefgh")
    x = "a"
    y = next(k for k in "bcdefgh" if buckets[k] != buckets[x])
    t = np.arange(0, 41) * 250_000  # 0 to 10 s
    parts = [pd.DataFrame({"k": [x] * len(t) + [y] * len(t), "v": np.r_[t, t] / 1e6,
                           "ts": np.r_[t, t]}),
             pd.DataFrame({"k": [y, y, y], "v": [1.0, 2.0, 5.0],
                           "ts": [9_000_000, 9_500_000, 1_000_000]}),
             pd.DataFrame({"k": [y], "v": [3.0], "ts": [9_700_000]})]
    _write(tmp_path / "staging", parts)
    (tmp_path / "in").mkdir()
    ws.sql(f"CREATE STREAM kv (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    sql = ("SELECT k, ts, v FROM RESAMPLE(kv, ts, INTERVAL 250 MILLISECONDS, 'prev' "
           "PARTITION BY k) r EMIT CHANGES")
    shown = ws.explain(sql, "STREAM")
    assert "stateful RESAMPLE on Spark's state store" in shown and "EMIT CHANGES" in shown
    reports = run_in_two_steps(ws, tmp_path, sql, "StatefulResampleQuery")
    assert [r.inputs["kv"] for r in reports] == [None] + [8 * SECOND] * 3
    _check(spark, tmp_path, parts, reports, "prev", True)
    out = spark.read.parquet(str(tmp_path / "out"))
    for batch in (2, 3):  # 8 s to 10 s every 250 ms, though x's bucket was not called
        assert out.where(f"batch = {batch} AND NOT _final AND k = '{x}'").count() == 9


@pytest.mark.parametrize("method, keyed", [  # (CI: the deterministic case above)
    pytest.param("prev", True, id="prev-per-key", marks=pytest.mark.slow),
    pytest.param("linear", False, id="linear-whole-stream", marks=pytest.mark.slow),
    pytest.param("linear", True, id="linear-per-key", marks=pytest.mark.slow)])
def test_changes_of_a_resample_batch_by_batch(ws, spark, tmp_path, method, keyed):
    """Files in two rounds on one checkpoint (a restart mid-run), out of order with late
    rows: each batch emits its points not final yet -- the oracle's over the rows so far,
    at the batch's progress -- and the final points come once each, the oracle's."""
    frame = _input(21, 240, keyed)
    edges = np.linspace(0, len(frame), 3).astype(int)
    parts = [frame.iloc[a:b] for a, b in zip(edges[:-1], edges[1:])]
    late = frame.iloc[:1].assign(ts=int(parts[0].ts.min()) + 1)  # late for sure
    parts[1] = pd.concat([parts[1], late], ignore_index=True)
    _write(tmp_path / "staging", parts)
    (tmp_path / "in").mkdir()
    ws.sql(f"CREATE STREAM kv (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'in'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    by = " PARTITION BY k" if keyed else ""
    sql = (f"SELECT k, ts, v FROM RESAMPLE(kv, ts, INTERVAL 250 MILLISECONDS, '{method}'{by}) r "
           "EMIT CHANGES")
    shown = ws.explain(sql, "STREAM")
    assert "stateful RESAMPLE on Spark's state store" in shown and "EMIT CHANGES" in shown
    reports = run_in_two_steps(ws, tmp_path, sql, "StatefulResampleQuery")
    want, early_seen = _check(spark, tmp_path, parts, reports, method, keyed)
    assert len(want) > 100 and early_seen > 50
