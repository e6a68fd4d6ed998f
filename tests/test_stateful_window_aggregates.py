"""Algebraic and holistic aggregates of the incremental window kernel
(streaming/stateful/windows.py) and of continuous queries on Spark's state store, against
oracles written here: numpy/pandas over the same on-time rows (``np.var`` / ``np.std`` with
``ddof``, ``np.percentile`` with linear interpolation = Spark's ``percentile``, sets
compared as sets), never WaveSQL's other mode.

The kernel cases (no Spark) run micro-batch by micro-batch with out-of-order and late rows
through the helpers of tests/test_stateful_windows.py; the end-to-end cases through those
of tests/test_stateful_streaming.py (files arriving one per micro-batch).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests import cql_reference as cql
from tests.test_stateful_windows import CASES, SECOND, _run, _stream
from wavesql.streaming.stateful import windows as w

#: Values around 1e9 with a spread of a few units: ``E[x^2] - E[x]^2`` over them keeps no
#: digit of the spread (1e18 +- 1e2 in DOUBLE). A stable merge is off by about one rounding
#: of the mean (1e-7 at 1e9) relative to the spread, as Spark's running update is: within
#: :data:`REL` (a naive merge is off by 100%).
OFFSET = 10 ** 9
REL = 1e-6

SPREADS = (w.Aggregate("var_samp", 0, True), w.Aggregate("var_pop", 0, True),
           w.Aggregate("stddev_samp", 0, True), w.Aggregate("stddev_pop", 0, True))


def _spreads(vals: list) -> tuple:
    x = np.array(vals, np.float64)
    n = len(x)
    return (float(np.var(x, ddof=1)) if n > 1 else None, float(np.var(x)) if n else None,
            float(np.std(x, ddof=1)) if n > 1 else None, float(np.std(x)) if n else None)


def _query(keyed: bool, where, of_values):
    """The oracle's per-instant query: ``of_values`` over each group's non-NULL values."""
    def q(rel):
        groups: dict = {}
        for r in rel:
            if where(r):
                groups.setdefault(r["sym"] if keyed else None, []).append(r["v"])
        return [((key,) if keyed else ()) + of_values([x for x in vs if x is not None])
                for key, vs in groups.items()]
    return q


def _window(kind, size, slide, keyed):
    if kind == "ROWS" and keyed:
        return cql.Window("PARTITION_ROWS", size, partition_by=("sym",))
    if kind == "RANGE" and size == 1:
        return cql.Window("NOW")
    return cql.Window(kind, size, slide)


def _by_instant(counter, keyed: bool) -> dict:
    """``{(instant, key): values}`` of a result stream (each at most once)."""
    out = {}
    for row, n in counter.items():
        head = 2 if keyed else 1
        assert n == 1 and row[:head] not in out, row
        out[row[:head]] = row[head:]
    return out


def _assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key, values in want.items():
        for g, x in zip(got[key], values):
            assert (g is None) == (x is None), (key, got[key], values)
            if isinstance(x, (frozenset, str)) or (isinstance(x, tuple) and any(
                    isinstance(e, str) for e in x)):
                assert g == x, (key, got[key], values)
            elif x is not None:
                assert g == pytest.approx(x, rel=REL, abs=REL), (key, got[key], values)


@pytest.mark.parametrize("keyed", [True, False], ids=["group-by", "global"])
@pytest.mark.parametrize("kind, size, slide, output", CASES)
def test_spreads_against_numpy(kind, size, slide, output, keyed):
    """Variance and standard deviation (sample and population) of values near 1e9, NULLs
    and a WHERE, every window kind and output stream, batch by batch with late rows."""
    rows = [{**r, "v": None if r["v"] is None else r["v"] + OFFSET} for r in _stream(4, 160)]
    where = lambda r: r["v"] is None or r["v"] != OFFSET + 3  # noqa: E731
    got, want = _kernel_and_oracle((kind, size, slide, output), keyed, rows, where, SPREADS,
                                   _spreads)
    _assert_close(got, want)


def _kernel_and_oracle(window: tuple, keyed: bool, rows, where, aggs, of_values):
    """``({(instant, key): values}`` of the kernel run batch by batch, the same of the CQL
    reference over the on-time rows with ``of_values`` per group, below final progress)."""
    kind, size, slide, output = window
    op = w.Operator(kind, size, slide, output, keys=1 if keyed else 0, aggregates=aggs,
                    order=2 if kind == "ROWS" else 0)
    got, late, progress = _run(op, rows, 6, 2 * SECOND, where, keyed, kind == "ROWS")
    assert late
    on_time = [r for r in rows if r not in late]
    want = cql.evaluate(on_time, "ts", _window(kind, size, slide, keyed), ["sym", "v"],
                        _query(keyed, where, of_values), output)
    want = {k: n for k, n in want.items() if k[0] < progress}
    assert sum(want.values()) > 10
    return _by_instant(got, keyed), _by_instant(want, keyed)


def test_a_spread_merged_from_panes_is_stable():
    """RANGE 8 s SLIDE 1 s: each window merges 8 panes' (count, mean, M2); values 1e12 + a
    few units -- the merged spread is numpy's within the rounding of a mean at 1e12
    (2e-4 relative to a spread of 2; ``E[x^2] - E[x]^2`` would be off by ~1e8)."""
    op = w.Operator("SLIDE", 8 * SECOND, SECOND, "RSTREAM", aggregates=SPREADS)
    rng = np.random.default_rng(7)
    ts = np.arange(0, 20 * SECOND, SECOND // 4, dtype=np.int64)
    v = 10 ** 12 + rng.integers(0, 7, len(ts))
    rows = w.Rows(ts, np.ones(len(ts), bool), [], [(v, np.zeros(len(ts), bool))], [])
    res = w.step(op, w.step(op, None, rows, None).state, w.Rows(
        np.zeros(0, np.int64), np.zeros(0, bool), [], [(v[:0], np.zeros(0, bool))], []),
        30 * SECOND).results
    assert len(res) == 28  # windows (t - 8 s, t] ending at 0 s .. 27 s
    for i, t in enumerate(res.time):
        inside = v[(ts > t - 8 * SECOND) & (ts <= t)].astype(np.float64)
        for (values, null), want in zip(res.values, _spreads(list(inside))):
            assert bool(null[i]) == (want is None)
            assert want is None or values[i] == pytest.approx(want, rel=1e-3)


HOLISTIC = (w.Aggregate("percentile", 0, True, (0.25,)),
            w.Aggregate("percentile", 0, True, (0.0, 0.5, 0.9, 1.0), many=True),
            w.Aggregate("collect_list", 0, True), w.Aggregate("collect_set", 0, True),
            w.Aggregate("count_distinct", 0, True), w.Aggregate("sum_distinct", 0, True),
            w.Aggregate("percentile_approx", 0, True, (0.0, 0.3, 0.5, 1.0), many=True))


def _rank(vals, fractions) -> tuple:
    """percentile_approx's answer while a window holds fewer values than its accuracy
    (checked against Spark 4 for 1 to 5,000 values): the value of rank ceil(p * n)."""
    s = sorted(vals)
    return tuple(s[min(max(math.ceil(p * len(s)) - 1, 0), len(s) - 1)] for p in fractions)


def _holistic(with_list: bool):
    """numpy's percentile (linear interpolation: Spark's), the list as a sorted tuple (or,
    ``with_list`` false, a second set) and the set as a set."""
    def of(vals: list) -> tuple:
        return (float(np.percentile(vals, 25)) if vals else None,
                tuple(np.percentile(vals, [0, 50, 90, 100])) if vals else None,
                tuple(sorted(vals)) if with_list else frozenset(vals), frozenset(vals),
                len(set(vals)), sum(set(vals)) if vals else None,
                _rank(vals, (0.0, 0.3, 0.5, 1.0)) if vals else None)
    return of


def _as_compared(result: dict, with_list: bool) -> dict:
    """The kernel's holistic results in the oracle's form: a list sorted (the order of a
    list is arrival), a set as a set."""
    return {key: (p, q, tuple(sorted(lst)) if with_list else frozenset(lst), frozenset(st),
                  n, s, a) for key, (p, q, lst, st, n, s, a) in result.items()}


@pytest.mark.parametrize("keyed", [True, False], ids=["group-by", "global"])
@pytest.mark.parametrize("kind, size, slide, output, split", [
    case + (False,) for case in CASES] + [case + (True,) for case in CASES if case[0] != "SLIDE"])
def test_holistic_aggregates_against_numpy(kind, size, slide, output, split, keyed,
                                          monkeypatch):
    """percentile (one fraction, an array), collect_list, collect_set, count(DISTINCT),
    sum(DISTINCT), percentile_approx, NULLs and a WHERE, every window kind and output
    stream, batch by batch with late rows; unslid windows also evaluating only the keys
    something happens to (their kept results carried as they are)."""
    if split:  # (a slid window evaluates its buckets whole)
        monkeypatch.setattr(w, "SPLIT_ROWS", 0)
    rows = _stream(5, 160)
    where = lambda r: r["v"] is None or r["v"] != 3  # noqa: E731
    # ISTREAM/DSTREAM of a collect_list changes with its order, which is arrival (Spark's
    # is undefined): the list is checked under RSTREAM only (a second set elsewhere)
    with_list = output == "RSTREAM"
    aggs = HOLISTIC if with_list else HOLISTIC[:2] + (HOLISTIC[3],) + HOLISTIC[3:]
    got, want = _kernel_and_oracle((kind, size, slide, output), keyed, rows, where, aggs,
                                   _holistic(with_list))
    _assert_close(_as_compared(got, with_list), want)


@pytest.mark.parametrize("n", [32, 64, 100])
def test_moments_of_ranges_reaching_the_last_leaf(n):
    """Ranges ending at the last of 2^k partials (the segment tree's edge) merge too."""
    from wavesql.udfs.time_windows import merged_moments

    x = np.random.default_rng(n).normal(5.0, 2.0, n)
    lo, hi = np.array([0, n // 2, n - 1, n]), np.array([n, n, n, n])
    count, mean, m2 = merged_moments(np.ones(n, np.int64), x, np.zeros(n), lo, hi)
    for i in range(3):
        part = x[lo[i]:hi[i]]
        assert count[i] == len(part) and mean[i] == pytest.approx(part.mean())
        assert m2[i] == pytest.approx(((part - part.mean()) ** 2).sum(), abs=1e-12)
    assert count[3] == 0


# -- end to end, on Spark's state store -----------------------------------------------------
def _slid(rows, size: int, slide: int):
    """Each row once per window ``(t - size, t]`` (``t`` a multiple of ``slide``) holding it,
    with its window's instant in column ``t``."""
    import pandas as pd

    first = -(-rows.ts // slide)
    copies = [rows.assign(t=(first + i) * slide) for i in range(-(-size // slide))]
    out = pd.concat(copies)
    return out[(out.t - size < out.ts) & (out.ts <= out.t)]


def test_algebraic_aggregates_on_the_state_store_against_pandas(ws, spark, tmp_path):
    """Spreads, count of a string with NULLs, count_if, bool_and/every, bool_or/any over a
    sliding window per key, out-of-order files with late rows; HAVING and an expression
    over a spread. Also plain Spark SQL's stddev over the same on-time rows of one window
    (Spark's own result, not only pandas')."""
    from tests.test_stateful_streaming import _files, _late_split, _out
    from tests.test_stateful_streaming import _run as run_query
    from tests.test_stateful_streaming import _stream as create_stream

    parts = _files(tmp_path / "in", seed=2, n_files=3, per_file=120)
    on_time, late, progress = _late_split(parts)
    create_stream(ws, tmp_path / "in")
    sql = ("SELECT k, stddev(v) AS sd, var_pop(v) AS vp, variance(v) * 2 AS vs2, "
           "stddev_pop(v) AS sp, count(CASE WHEN v > 20 THEN k END) AS nk, "
           "count_if(v >= 50) AS big, bool_and(v >= 5) AS all5, every(v < 99) AS below, "
           "bool_or(v >= 95) AS top, any(v < 2) AS low "
           "FROM kv [RANGE 6 SECONDS SLIDE 2 SECONDS] GROUP BY k HAVING count(*) > 1")
    shown = ws.explain(sql, "STREAM")
    assert "state store" in shown and "a count, mean and sum of squared deviations" in shown
    cq = run_query(ws, tmp_path, sql)
    assert type(cq).__name__ != "ContinuousRunner" and cq.progress_us == progress
    want = {}
    for (t, k), g in _slid(on_time, 6 * SECOND, 2 * SECOND).groupby(["t", "k"]):
        v = g.v.dropna()
        if len(g) > 1 and t < progress:
            want[(t, k)] = (v.std(ddof=1) if len(v) > 1 else None,
                            v.var(ddof=0) if len(v) else None,
                            v.var(ddof=1) * 2 if len(v) > 1 else None,
                            v.std(ddof=0) if len(v) else None,
                            int((g.v > 20).sum()), int((g.v >= 50).sum()),
                            bool((v >= 5).all()) if len(v) else None,
                            bool((v < 99).all()) if len(v) else None,
                            bool((v >= 95).any()) if len(v) else None,
                            bool((v < 2).any()) if len(v) else None)
    columns = ["_time", "k", "sd", "vp", "vs2", "sp", "nk", "big", "all5", "below", "top", "low"]
    got = _by_instant(_out(spark, tmp_path, columns), keyed=True)
    assert len(want) > 50 and len(late) > 0
    _assert_close(got, {k: tuple(None if x is None or x != x else x for x in v)
                        for k, v in want.items()})
    types = dict(spark.read.parquet(str(tmp_path / "out")).dtypes)
    assert [types[c] for c in columns[2:]] == ["double"] * 4 + ["bigint"] * 2 + ["boolean"] * 4
    # Spark's own stddev over one window's on-time rows
    t, k = max(want, key=lambda key: want[key][0] or 0)
    rows = on_time[(on_time.k == k) & (on_time.ts > t - 6 * SECOND) & (on_time.ts <= t)]
    spark_sd = spark.createDataFrame(rows[["v"]].astype(float)).selectExpr(
        "stddev(v) AS sd").collect()[0]["sd"]
    assert got[(t, k)][0] == pytest.approx(spark_sd, rel=1e-12)


def test_aggregates_with_filter_on_the_state_store_against_pandas(ws, spark, tmp_path):
    """``agg(x) FILTER (WHERE c)`` runs on the state store: count(*), sum, max over no
    passing row (NULL), count(DISTINCT ...) and collect_list (empty over no passing row)
    with FILTER, over a sliding window per key with late rows -- each equal to pandas over
    the window's on-time rows that pass the filter."""
    from tests.test_stateful_streaming import _files, _late_split, _out
    from tests.test_stateful_streaming import _run as run_query
    from tests.test_stateful_streaming import _stream as create_stream

    parts = _files(tmp_path / "in", seed=5, n_files=3, per_file=120)
    on_time, late, progress = _late_split(parts)
    create_stream(ws, tmp_path / "in")
    sql = ("SELECT k, count(*) FILTER (WHERE v > 20) AS n20, sum(v) FILTER (WHERE v < 50) "
           "AS low, max(v) FILTER (WHERE v > 1000) AS never, count(DISTINCT floor(v / 10)) "
           "FILTER (WHERE v >= 10) AS tens, size(collect_list(v) FILTER (WHERE v > 80)) AS "
           "ntop, array_max(collect_list(v) FILTER (WHERE v > 80)) AS top FROM kv [RANGE 6 SECONDS SLIDE 2 SECONDS] GROUP BY k")
    shown = ws.explain(sql, "STREAM")
    assert "state store" in shown and "CASE WHEN v > 20 THEN 1 END" in shown, shown
    cq = run_query(ws, tmp_path, sql)
    assert type(cq).__name__ != "ContinuousRunner" and cq.progress_us == progress
    want = {}
    for (t, k), g in _slid(on_time, 6 * SECOND, 2 * SECOND).groupby(["t", "k"]):
        if t < progress:
            v = g.v
            low = v[v < 50]
            top = v[v > 80]
            want[(t, k)] = (int((v > 20).sum()), float(low.sum()) if len(low) else None,
                            None, int(np.floor(v[v >= 10] / 10).nunique()), len(top),
                            float(top.max()) if len(top) else None)
    columns = ["_time", "k", "n20", "low", "never", "tens", "ntop", "top"]
    got = _by_instant(_out(spark, tmp_path, columns), keyed=True)
    assert len(want) > 50 and len(late) > 0
    assert any(w[4] for w in want.values()) and any(not w[4] for w in want.values())
    _assert_close(got, want)


def test_holistic_aggregates_on_the_state_store_across_a_restart(ws, spark, tmp_path):
    """percentile (a fraction, an array), median, collect_list, collect_set of strings,
    count(DISTINCT), sum(DISTINCT) over a sliding window per key, run in two rounds on one
    checkpoint (the second restores the panes' values), late rows, vs numpy / pandas; the
    result types are Spark's batch ones and EXPLAIN says what is kept."""
    import shutil

    from tests.test_stateful_streaming import _files, _late_split, _micros
    from tests.test_stateful_streaming import _run as run_query
    from tests.test_stateful_streaming import _stream as create_stream

    parts = _files(tmp_path / "staging", seed=2, n_files=4, per_file=90)
    on_time, late, progress = _late_split(parts)
    (tmp_path / "in").mkdir()
    create_stream(ws, tmp_path / "in")
    sql = ("SELECT k, percentile(v, 0.3) AS p30, percentile(v, array(0.1, 0.5, 1.0)) AS ps, "
           "median(v) AS med, collect_list(v) AS vs, collect_set(concat(k, "
           "CAST(CAST(v AS INT) % 3 AS STRING))) AS tags, count(DISTINCT CAST(v AS INT) % 10) "
           "AS nd, sum(DISTINCT v) AS sd, percentile_approx(v, array(0.25, 0.75)) AS pa, "
           "approx_percentile(CAST(v AS INT), 0.5, 100) AS pai "
           "FROM kv [RANGE 6 SECONDS SLIDE 3 SECONDS] GROUP BY k")
    shown = ws.explain(sql, "STREAM")
    assert "state store" in shown
    assert "PERCENTILE(v, 0.3) [holistic: keeps every value of v in the window per pane]" in shown
    assert "each distinct value of" in shown
    files = sorted((tmp_path / "staging").iterdir())
    for batch in (files[:2], files[2:]):
        for f in batch:
            shutil.move(f, tmp_path / "in" / f.name)
        cq = run_query(ws, tmp_path, sql)
        assert type(cq).__name__ != "ContinuousRunner"
    assert cq.progress_us == progress and len(late) > 0
    want = {}
    for (t, k), g in _slid(on_time, 6 * SECOND, 3 * SECOND).groupby(["t", "k"]):
        v = g.v.dropna().to_numpy()
        if t >= progress:
            continue
        some = len(v) > 0
        want[(t, k)] = (float(np.percentile(v, 30)) if some else None,
                        tuple(np.percentile(v, [10, 50, 100])) if some else None,
                        float(np.median(v)) if some else None, tuple(sorted(v)),
                        frozenset(f"{k}{int(x) % 3}" for x in v),
                        len({int(x) % 10 for x in v}), float(sum(set(v))) if some else None,
                        _rank(v, (0.25, 0.75)) if some else None,
                        _rank([int(x) for x in v], (0.5,))[0] if some else None)
    columns = ["_time", "k", "p30", "ps", "med", "vs", "tags", "nd", "sd", "pa", "pai"]
    got = {(_micros(r["_time"]), r["k"]): (r["p30"], None if r["ps"] is None else tuple(r["ps"]),
                                          r["med"], tuple(sorted(r["vs"])), frozenset(r["tags"]),
                                          r["nd"], r["sd"],
                                          None if r["pa"] is None else tuple(r["pa"]), r["pai"])
           for r in spark.read.parquet(str(tmp_path / "out")).select(*columns).collect()}
    assert len(want) > 40
    _assert_close(got, want)
    types = dict(spark.read.parquet(str(tmp_path / "out")).dtypes)
    assert [types[c] for c in columns[2:]] == ["double", "array<double>", "double",
                                               "array<double>", "array<string>", "bigint",
                                               "double", "array<double>", "int"]
    # Spark's own percentile_approx over the on-time rows of the fullest window
    t, k = max(want, key=lambda key: len(want[key][3]))
    rows = on_time[(on_time.k == k) & (on_time.ts > t - 6 * SECOND) & (on_time.ts <= t)]
    spark_pa = spark.createDataFrame(rows[["v"]].astype(float)).selectExpr(
        "percentile_approx(v, array(0.25, 0.75)) AS pa").collect()[0]["pa"]
    assert got[(t, k)][7] == tuple(spark_pa)


def test_aggregates_not_kept_stay_re_evaluated_with_the_reason(ws, tmp_path):
    """What the state store does not keep stays on the re-evaluating runner, and EXPLAIN
    STREAM says why (no job runs)."""
    from tests.test_stateful_streaming import _files
    from tests.test_stateful_streaming import _stream as create_stream

    _files(tmp_path / "in", seed=1, n_files=1, per_file=10)
    create_stream(ws, tmp_path / "in")
    window = "FROM kv [RANGE 4 SECONDS SLIDE 2 SECONDS] GROUP BY k"
    for call, why in [("first(v)", "first() (its order is Spark's partitions', undefined)"),
                      ("last(v)", "last() (its order"),
                      ("avg(DISTINCT v)", "a DISTINCT aggregate other than count / sum"),
                      ("percentile(v, 0.25 + 0.25)", "percentile() whose fraction is not a number"),
                      ("count(DISTINCT k, v)", "count_distinct() of several columns"),
                      ("stddev(k)", "stddev_samp() of type string"),
                      ("kurtosis(v)", "the aggregate KURTOSIS(v)")]:
        shown = ws.explain(f"SELECT k, {call} AS x {window}", "STREAM")
        assert "re-evaluated" in shown and why in shown, (call, shown)
    # count(x) of any type counts where x is not NULL: kept, whatever x's type
    shown = ws.explain(f"SELECT k, count(CAST(v AS DECIMAL(10, 2))) AS d, count(array(v)) AS a "
                       f"{window}", "STREAM")
    assert "state store" in shown and "COUNT(ARRAY(v)) [a count per pane]" in shown, shown
    # and what it keeps, for those it runs: the values of a holistic one, in the window
    shown = ws.explain("ISTREAM (SELECT k, collect_list(v) AS vs, count(*) AS n FROM kv "
                       "[PARTITION BY k ROWS 5] GROUP BY k)", "STREAM")
    assert "stateful rows window" in shown
    assert "COLLECT_LIST(v) [holistic: keeps every value of v in the window]" in shown


@pytest.mark.slow
def test_istream_of_holistic_aggregates_over_a_rows_window(ws, spark, tmp_path):
    """ISTREAM of percentile, collect_set of an expression and collect_list of the event
    TIMESTAMP (array<timestamp>, in the window's row order: time, then the row's values)
    over [PARTITION BY k ROWS 3], vs a brute-force oracle: at each instant of a key its
    last 3 rows, a row out when the result changed."""
    from collections import Counter

    from tests.test_stateful_streaming import _files, _late_split, _micros
    from tests.test_stateful_streaming import _run as run_query
    from tests.test_stateful_streaming import _stream as create_stream

    parts = _files(tmp_path / "in", seed=11, n_files=4, per_file=60, keys="abcdef")
    on_time, late, progress = _late_split(parts)
    create_stream(ws, tmp_path / "in")
    sql = ("ISTREAM (SELECT k, percentile(v, 0.5) AS m, collect_set(CAST(v AS INT) % 4) AS s, "
           "collect_list(ts) AS tl FROM kv [PARTITION BY k ROWS 3] GROUP BY k)")
    assert "holistic: keeps every value of ts in the window" in ws.explain(sql, "STREAM")
    run_query(ws, tmp_path, sql)
    want = Counter()
    for k, g in on_time.groupby("k"):
        rows = sorted(zip(g.ts, g.v), key=lambda r: (r[0], not np.isnan(r[1]),
                                                     0 if np.isnan(r[1]) else r[1]))
        previous = None
        for t in sorted({ts for ts, _ in rows if ts < progress}):
            window = [r for r in rows if r[0] <= t][-3:]
            vals = [v for _, v in window if not np.isnan(v)]
            result = (round(float(np.percentile(vals, 50)), 9) if vals else None,
                      frozenset(int(v) % 4 for v in vals), tuple(int(ts) for ts, _ in window))
            if result != previous:
                want[(int(t), k) + result] += 1
            previous = result
    got = Counter()
    frame = spark.read.parquet(str(tmp_path / "out"))
    assert dict(frame.dtypes)["tl"] == "array<timestamp>"
    assert dict(frame.dtypes)["s"] == "array<int>"
    for r in frame.collect():
        got[(_micros(r["_time"]), r["k"], None if r["m"] is None else round(r["m"], 9),
             frozenset(r["s"]), tuple(_micros(x) for x in r["tl"]))] += 1
    assert sum(want.values()) > 100 and len(late) > 0
    assert got == want


def test_the_values_a_slid_window_keeps_are_its_panes_not_the_stream():
    """RANGE 20 s SLIDE 10 s, 500 rows per 10 s over 30 micro-batches: the state keeps the
    values of the panes not final yet (<= 3 panes' rows), not the 15,000 rows seen."""
    import pyarrow as pa

    from wavesql.streaming.stateful import state as st

    op = w.Operator("SLIDE", 20 * SECOND, 10 * SECOND, "RSTREAM",
                    aggregates=(w.Aggregate("percentile", 0, False, (0.5,)),))
    rng = np.random.default_rng(3)
    value, progress, emitted = None, None, 0
    for b in range(30):
        ts = np.sort(rng.integers(b * 10 * SECOND, (b + 1) * 10 * SECOND, 500))
        v = rng.normal(size=500)
        out = w.step(op, value, w.Rows(ts, np.ones(500, bool), [], [(v, np.zeros(500, bool))],
                                       []), progress)
        value, progress = out.state, int(ts.max()) - SECOND
        emitted += len(out.results)
        kept = st.decode(op.kind, value)[1]["kept"]
        values = pa.compute.list_value_length(kept.column("v0")).to_numpy().sum()
        assert values <= 3 * 500
    assert emitted >= 28


def test_a_distinct_bigint_sum_that_overflows_is_an_error():
    """Spark (ANSI) fails a BIGINT sum past 2^63; so does sum(DISTINCT) here, never a
    wrapped value."""
    op = w.Operator("SLIDE", SECOND, SECOND, "RSTREAM",
                    aggregates=(w.Aggregate("sum_distinct", 0, True),))
    v = np.array([2 ** 62, 2 ** 62 + 1, 5], np.int64)
    rows = w.Rows(np.array([1, 2, 3], np.int64), np.ones(3, bool), [],
                  [(v, np.zeros(3, bool))], [])
    with pytest.raises(ArithmeticError, match="ARITHMETIC_OVERFLOW"):
        w.step(op, w.step(op, None, rows, None).state, w.Rows(
            np.zeros(0, np.int64), np.zeros(0, bool), [], [(v[:0], np.zeros(0, bool))], []),
            10 * SECOND)
    small = w.Rows(np.array([1, 2, 3], np.int64), np.ones(3, bool), [],
                   [(np.array([2 ** 61, 2 ** 61, 5], np.int64), np.zeros(3, bool))], [])
    out = w.step(op, w.step(op, None, small, None).state, w.Rows(
        np.zeros(0, np.int64), np.zeros(0, bool), [], [(v[:0], np.zeros(0, bool))], []),
        10 * SECOND)
    assert out.results.values[0][0].tolist() == [2 ** 61 + 5]


@pytest.mark.parametrize("values, fraction, want", [
    ([-53.567, -13.21, 10.49, 12.573, 64.042], 0.913, 46.13078800000001),
    ([1.0, math.inf, 2.0, -math.inf], 0.25, math.nan),
    ([1.0, 3.0, math.inf], 0.9, math.inf)])
def test_percentile_interpolates_as_spark_4_does(values, fraction, want):
    """Spark 4's percentile interpolates as ``lower + (position - lower) * (higher -
    lower)``: these are its answers (spark-catalyst 4.3.0, ``SELECT percentile(v, p) FROM
    VALUES ...``), bit for bit -- the weighted sum ``(higher - position) * lower + (position
    - lower) * higher`` is one rounding off in the first and -inf, not NaN, in the second."""
    from wavesql.streaming.stateful import window_holistic as holistic

    x = np.array(values)
    got = holistic.evaluate("percentile", (fraction,), False, np.ones(len(x), bool), x,
                            np.array([0]), np.array([len(x)]))[0][0]
    assert (math.isnan(got) and math.isnan(want)) or got == want, (got, want)


def test_a_form_of_a_known_aggregate_the_kernel_does_not_run_is_named():
    """``percentile(v, p, frequency)`` stays Spark's own call (the dialect keeps the third
    argument): the state store says which call it does not run, not that ``v`` is neither
    a key nor an aggregate."""
    from wavesql.streaming.stateful import window_aggregates
    from wavesql.streaming.stateful.plan import NotIncremental
    from wavesql.dialect import parse_one

    select = parse_one("SELECT k, percentile(v, 0.5, f) FROM kv GROUP BY k")
    with pytest.raises(NotIncremental, match=r"percentile\(\) with 3 arguments"):
        window_aggregates.find(select)
