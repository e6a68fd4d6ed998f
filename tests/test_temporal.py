"""RESAMPLE and ASOF JOIN as Spark SQL (planner/temporal.py), batch mode.

Oracles: hand-computed rows; numpy written from the module's stated semantics (``np.interp``
for 'linear', ``searchsorted`` for 'prev'/'null'/'zero'); pandas ``merge_asof`` and DuckDB's
``ASOF JOIN`` for the join. Random inputs are many independent series (keys) per Spark query,
so one job checks hundreds of series.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wavesql.errors import WaveSQLError
from wavesql.planner.temporal import (
    CHUNK, AsofCondition, asof_join_relation, asof_join_sql, parse_asof_condition, resample_sql)

MS = 1_000
METHODS = ("linear", "prev", "null", "zero")
SERIES = [("k", "string"), ("ts", "timestamp"), ("v", "double"), ("s", "string")]


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def _view(spark, name, rows, schema, time_cols=("ts",)):
    """Register ``rows`` as a temp view; ``time_cols`` are given as bigint microseconds and
    become timestamps (``timestamp_micros``), so no timezone conversion is involved."""
    df = spark.createDataFrame(rows, schema)
    df = df.selectExpr(*[f"timestamp_micros({c}) AS {c}" if c in time_cols else c
                     for c in df.columns])
    df.createOrReplaceTempView(name)
    return df


def _resampled(spark, source, period_us, method, columns=SERIES, keys=("k",), time="ts"):
    """Rows of RESAMPLE as (key..., grid micros, other columns...), sorted."""
    sql = resample_sql(source, columns, time, period_us, method, keys=keys)
    out = [f"unix_micros(r.`{name}`) AS `{name}`" if name == time else f"r.`{name}`"
           for name, _ in columns]
    # embedded as a derived table, as the binder will do
    rows = spark.sql(f"SELECT {', '.join(out)} FROM ({sql}) AS r").collect()
    return sorted((tuple(r) for r in rows), key=lambda r: tuple((x is None, x) for x in r))


def _resampled_all(spark, source, period_us):
    """{method: rows} for every method over SERIES-shaped ``source``, in one Spark job."""
    parts = [f"SELECT '{m}' AS m, r.k, unix_micros(r.ts) AS us, r.v, r.s FROM "
             f"({resample_sql(source, SERIES, 'ts', period_us, m, keys=('k',))}) AS r"
             for m in METHODS]
    out = {m: [] for m in METHODS}
    for row in spark.sql("\nUNION ALL\n".join(parts)).collect():
        out[row[0]].append(tuple(row)[1:])
    return {m: sorted(rows, key=lambda r: tuple((x is None, x) for x in r))
            for m, rows in out.items()}


def _close(a, b, tol=1e-9):
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=tol, abs_tol=tol)
    return a == b


def _assert_rows(got, want, tol=1e-9):
    assert len(got) == len(want), (len(got), len(want))
    for g, w in zip(got, want):
        assert len(g) == len(w) and all(_close(a, b, tol) for a, b in zip(g, w)), (g, w)


def _greatest(rows):
    """The greatest row by its columns left to right, NULL lowest (the duplicate rule)."""
    return max(rows, key=lambda r: tuple((x is not None, x if x is not None else 0) for x in r))


def oracle_resample(rows, period, method):
    """numpy reference of one series: ``rows`` are (micros, v, s); returns (micros, v, s).

    Written from the module docstring, independently of the SQL: dedup by the greatest row,
    grid k·P inside [min, max], np.interp between each column's non-null neighbours."""
    by_time: dict[int, list] = {}
    for t, v, s in rows:
        if t is not None:
            by_time.setdefault(t, []).append((v, s))
    if not by_time:
        return []
    times = np.array(sorted(by_time), dtype=np.int64)
    picked = [_greatest(by_time[t]) for t in times]
    vals = np.array([np.nan if v is None else v for v, _ in picked], dtype=float)
    strs = [s for _, s in picked]
    lo, hi = -(-int(times[0]) // period), int(times[-1]) // period  # ceil, floor
    grid = np.arange(lo, hi + 1, dtype=np.int64) * period
    if grid.size == 0:
        return []
    idx = np.searchsorted(times, grid, side="right") - 1  # latest row <= t
    prev_v = [None if np.isnan(vals[i]) else float(vals[i]) for i in idx]
    prev_s = [strs[i] for i in idx]
    if method == "prev":
        return list(zip(grid.tolist(), prev_v, prev_s))
    if method in ("null", "zero"):
        hit = (grid - times[idx]) < period  # a row in (t - P, t]
        fill = 0.0 if method == "zero" else None
        return [(int(t), prev_v[j] if hit[j] else fill, prev_s[j] if hit[j] else None)
                for j, t in enumerate(grid)]
    assert method == "linear"
    known = ~np.isnan(vals)
    if known.any():
        y = np.interp(grid.astype(float), times[known].astype(float), vals[known])
        outside = (grid < times[known][0]) | (grid > times[known][-1])
        lin = [None if o else float(x) for x, o in zip(y, outside)]
    else:
        lin = [None] * grid.size
    return list(zip(grid.tolist(), lin, prev_s))


def _oracle_keyed(rows, period, method):
    """``rows`` are (k, micros, v, s); the oracle per key, as (k, micros, v, s) sorted."""
    groups: dict = {}
    for k, t, v, s in rows:
        groups.setdefault(k, []).append((t, v, s))
    out = [(k, *r) for k, g in groups.items() for r in oracle_resample(g, period, method)]
    return sorted(out, key=lambda r: tuple((x is None, x) for x in r))


def _random_series(rng, n_series, period):
    """Irregular series with long gaps, exact grid hits, duplicates, NULLs, single rows,
    times before 1970 and around today's epoch values."""
    rows = []
    for i in range(n_series):
        key = f"k{i}"
        n = int(rng.choice([0, 1, 1, 2, 3, 5, 10, 30, 60]))
        base = int(rng.choice([0, -7 * period - 3,  # before 1970, and around now:
                               1_700_000_000_000_000 + int(rng.integers(1000))]))
        steps = rng.choice([1, period // 3 or 1, period, 2 * period + 1, 47 * period + 5],
                           size=n, p=[.15, .3, .25, .2, .1])
        steps = np.where(rng.random(n) < 0.1, 0, steps)  # duplicate times
        times = base + np.cumsum(steps)
        for t in times:
            if rng.random() < 0.15:
                t = (int(t) // period) * period  # an exact grid hit
            v = None if rng.random() < 0.15 else float(np.round(rng.normal(0, 10), 3))
            s = None if rng.random() < 0.1 else str(rng.choice(list("abc")))
            rows.append((key, int(t), v, s))
    rows.append(("knull", None, 1.0, "x"))  # a row without a time is ignored
    rows.append((None, 5 * period, 2.0, "n"))  # a NULL key is a series of its own
    rows.append((None, 9 * period + 1, 4.0, "n"))
    return rows


SCHEMA = "k string, ts bigint, v double, s string"


# ---------------------------------------------------------------------------------------
# RESAMPLE: hand-computed cases
# ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def irregular(spark):
    """P = 5 ms over rows at 1, 3, 12, 26 ms: grid points 5, 10, 15, 20, 25 ms."""
    rows = [("a", 1 * MS, 10, "w"), ("a", 3 * MS, 20, "x"), ("a", 12 * MS, 30, "y"),
            ("a", 26 * MS, 40, "z")]
    _view(spark, "irregular", rows, "k string, ts bigint, v int, s string")
    return [("k", "string"), ("ts", "timestamp"), ("v", "int"), ("s", "string")]


@pytest.mark.parametrize("method, want", [
    ("prev", [(5, 20, "x"), (10, 20, "x"), (15, 30, "y"), (20, 30, "y"), (25, 30, "y")]),
    # a row in (t - 5 ms, t]: 3 ms for 5, none for 10, 12 ms for 15, none for 20 and 25
    ("null", [(5, 20, "x"), (10, None, None), (15, 30, "y"), (20, None, None), (25, None, None)]),
    ("zero", [(5, 20, "x"), (10, 0, None), (15, 30, "y"), (20, 0, None), (25, 0, None)]),
    ("linear", [(5, 20 + 10 * 2 / 9, "x"), (10, 20 + 10 * 7 / 9, "x"), (15, 30 + 10 * 3 / 14, "y"),
                (20, 30 + 10 * 8 / 14, "y"), (25, 30 + 10 * 13 / 14, "y")]),
])
def test_resample_by_hand(spark, irregular, method, want):
    got = _resampled(spark, "irregular", 5 * MS, method, irregular)
    _assert_rows(got, [("a", t * MS, v, s) for t, v, s in want])


def test_resample_types(spark, irregular):
    for method, vtype in (("linear", "double"), ("prev", "int"), ("null", "int"), ("zero", "int")):
        df = spark.sql(resample_sql("irregular", irregular, "ts", 5 * MS, method, keys=("k",)))
        assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
            ("k", "string"), ("ts", "timestamp"), ("v", vtype), ("s", "string")]


def test_resample_4_to_5_by_hand(spark):
    """TiLT app 5 in miniature: period 4 ms -> 5 ms, y = v0 + (v1 - v0)(t - t0)/(t1 - t0)."""
    _view(spark, "p4", [(0, 1.0), (4 * MS, 3.0), (8 * MS, 2.0), (12 * MS, 6.0)],
          "ts bigint, v double")
    got = _resampled(spark, "p4", 5 * MS, "linear", [("ts", "timestamp"), ("v", "double")], ())
    assert got == [(0, 1.0), (5 * MS, 2.75), (10 * MS, 4.0)]


def test_resample_exact_hits_and_long_gap(spark):
    """Two rows 1 s apart at P = 1 ms: 1001 points, y = t exactly at both ends."""
    _view(spark, "gap", [("a", 0, 0.0, "p"), ("a", 1000 * MS, 1000.0, "q")], SCHEMA)
    got = _resampled(spark, "gap", MS, "linear")
    assert len(got) == 1001
    _assert_rows(got, [("a", i * MS, float(i), "p" if i < 1000 else "q") for i in range(1001)])
    nulls = _resampled(spark, "gap", MS, "null")
    assert [r[2] for r in nulls] == [0.0] + [None] * 999 + [1000.0]


def test_resample_gap_longer_than_a_chunk(spark):
    """A gap of 3.5 chunks of grid points is generated in chunks, none lost or repeated."""
    n = int(3.5 * CHUNK)
    _view(spark, "longgap", [("a", 3, 0.0, "p"), ("a", 3 + n * 10, float(n), "q")], SCHEMA)
    got = _resampled(spark, "longgap", 10, "linear")
    # grid 10, 20, ..., 10·n (the last below 3 + 10·n): y = (t - 3) / 10
    assert [r[1] for r in got] == [10 * i for i in range(1, n + 1)]
    _assert_rows(got, [("a", 10 * i, (10 * i - 3) / 10, "p") for i in range(1, n + 1)])


@pytest.mark.parametrize("us, want", [(7 * MS, 1), (7 * MS + 1, 0)])
def test_resample_single_row(spark, us, want):
    """One row makes one grid point if it is on the grid, else none."""
    _view(spark, "one", [("a", us, 2.5, "x")], SCHEMA)
    for method in METHODS:
        got = _resampled(spark, "one", MS, method)
        assert got == [("a", 7 * MS, 2.5, "x")] * want


def test_resample_empty_input(spark):
    _view(spark, "empty", [], SCHEMA)
    for method in METHODS:
        assert _resampled(spark, "empty", MS, method) == []


def test_resample_nulls(spark):
    """A NULL is a hole: 'linear' interpolates each column between its own non-null values,
    'prev' and 'null' keep the row's NULL."""
    rows = [(0, 1.0, None), (10, None, 5.0), (20, 3.0, 7.0), (30, None, None)]
    _view(spark, "holes", rows, "ts bigint, a double, b double")
    cols = [("ts", "timestamp"), ("a", "double"), ("b", "double")]
    linear = _resampled(spark, "holes", 10, "linear", cols, ())
    # a: 1, 2 (across the hole), 3, NULL (after a's last value); b: NULL (before its first)
    assert linear == [(0, 1.0, None), (10, 2.0, 5.0), (20, 3.0, 7.0), (30, None, None)]
    assert _resampled(spark, "holes", 10, "prev", cols, ()) == sorted(rows)
    assert _resampled(spark, "holes", 10, "zero", cols, ()) == sorted(rows)
    assert _resampled(spark, "holes", 5, "zero", cols, ()) == [
        (0, 1.0, None), (5, 0.0, 0.0), (10, None, 5.0), (15, 0.0, 0.0), (20, 3.0, 7.0),
        (25, 0.0, 0.0), (30, None, None)]


def test_resample_duplicate_times(spark):
    """Rows sharing a time collapse to the greatest by (v, s), NULL lowest: (3.0, 'b')."""
    rows = [("a", 0, 1.0, "x"), ("a", 0, 3.0, "a"), ("a", 0, None, "z"), ("a", 0, 3.0, "b"),
            ("a", 10, 5.0, None), ("a", 10, 5.0, "c"), ("a", 10, None, "zz")]
    _view(spark, "dups", rows, SCHEMA)
    assert _resampled(spark, "dups", 10, "prev") == [("a", 0, 3.0, "b"), ("a", 10, 5.0, "c")]
    assert _resampled(spark, "dups", 5, "linear") == [
        ("a", 0, 3.0, "b"), ("a", 5, 4.0, "b"), ("a", 10, 5.0, "c")]


def test_resample_keys(spark):
    """Each key is a series with its own span; NULL keys form one; no grid across keys."""
    rows = [("a", 0, 0.0, "a0"), ("a", 20, 2.0, "a1"), ("b", 15, 10.0, "b0"),
            ("b", 35, 30.0, "b1"), (None, 10, 7.0, "n"), ("c", 11, 1.0, "c")]
    _view(spark, "keyed", rows, SCHEMA)
    assert _resampled(spark, "keyed", 10, "linear") == [
        ("a", 0, 0.0, "a0"), ("a", 10, 1.0, "a0"), ("a", 20, 2.0, "a1"),
        ("b", 20, 15.0, "b0"), ("b", 30, 25.0, "b0"), (None, 10, 7.0, "n")]


def test_resample_keys_keep_their_place_and_non_numeric_types(spark):
    rows = [(1, 0, 5, True, "2024-01-01"), (1, 10, 9, False, "2024-01-02")]
    spark.createDataFrame(rows, "id int, us bigint, n smallint, b boolean, d string") \
        .selectExpr("n", "id", "timestamp_micros(us) AS at", "b", "CAST(d AS DATE) AS d") \
        .createOrReplaceTempView("mixed")
    cols = [("n", "smallint"), ("id", "int"), ("at", "timestamp"), ("b", "boolean"),
            ("d", "date")]
    df = spark.sql(resample_sql("mixed", cols, "AT", 5, "linear", keys=("ID",)))
    assert [f.name for f in df.schema.fields] == ["n", "id", "at", "b", "d"]
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "double", "int", "timestamp", "boolean", "date"]
    got = sorted((r.n, r.b, str(r.d)) for r in df.collect())
    assert got == [(5.0, True, "2024-01-01"), (7.0, True, "2024-01-01"),
                   (9.0, False, "2024-01-02")]
    zero = spark.sql(resample_sql("mixed", cols, "at", 5, "zero", keys=("id",)))
    assert sorted(tuple(r)[:2] + (r.b,) for r in zero.collect()) == [
        (0, 1, None), (5, 1, True), (9, 1, False)]


def test_resample_decimal_and_map_columns(spark):
    """Decimals interpolate as doubles; a map column (unorderable) is carried, not sorted."""
    spark.sql("SELECT timestamp_micros(us) AS ts, CAST(x AS DECIMAL(10, 2)) AS x, "
              "map('k', x) AS m FROM VALUES (0L, 1.5), (0L, 1.25), (4L, 2.5) AS v(us, x)") \
        .createOrReplaceTempView("dec")
    cols = [("ts", "timestamp"), ("x", "decimal(10,2)"), ("m", "map<string,decimal(12,2)>")]
    got = spark.sql(f"SELECT unix_micros(ts) AS us, x, m['k'] AS mk FROM "
                    f"({resample_sql('dec', cols, 'ts', 2, 'linear')})").collect()
    assert sorted((r.us, r.x, float(r.mk)) for r in got) == [(0, 1.5, 1.5), (2, 2.0, 1.5),
                                                             (4, 2.5, 2.5)]
    zero = spark.sql(resample_sql("dec", cols, "ts", 1, "zero"))
    assert zero.schema["x"].dataType.simpleString() == "decimal(10,2)"
    assert sorted(float(r.x) for r in zero.collect()) == [0.0, 0.0, 0.0, 1.5, 2.5]


# ---------------------------------------------------------------------------------------
# RESAMPLE: against the numpy oracle
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_resample_random_against_numpy(spark, seed):
    rng = np.random.default_rng(seed)
    period = int(rng.choice([7, 1000, 5 * MS]))
    rows = _random_series(rng, 120, period)
    _view(spark, "rand", rows, SCHEMA)
    got = _resampled_all(spark, "rand", period)
    for method in METHODS:
        _assert_rows(got[method], _oracle_keyed(rows, period, method))


series_rows = st.lists(st.tuples(
    st.sampled_from(["a", "b"]), st.integers(-50, 200),
    st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False).map(lambda x: round(x, 3))),
    st.one_of(st.none(), st.sampled_from(["x", "y"]))), max_size=25)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=series_rows, period=st.integers(1, 40))
def test_resample_hypothesis(spark, rows, period):
    _view(spark, "hyp", rows, SCHEMA)
    got = _resampled_all(spark, "hyp", period)
    for method in METHODS:
        _assert_rows(got[method], _oracle_keyed(rows, period, method))


@pytest.mark.parametrize("a, b", [(4, 5), (5, 4), (6, 3), (3, 6)])
def test_tilt_app5_period_conversion(spark, a, b):
    """TiLT app 5: a regular signal of period a ms, linearly interpolated onto period b ms."""
    rng = np.random.default_rng(a * 10 + b)
    n = 3000
    t = np.arange(n, dtype=np.int64) * a * MS
    v = rng.normal(size=n).cumsum()
    _view(spark, "sig", list(zip(t.tolist(), v.tolist())), "ts bigint, v double")
    got = _resampled(spark, "sig", b * MS, "linear", [("ts", "timestamp"), ("v", "double")], ())
    grid = np.arange(0, t[-1] + 1, b * MS)
    assert [r[0] for r in got] == grid.tolist()
    np.testing.assert_allclose([r[1] for r in got], np.interp(grid, t, v), rtol=1e-10,
                               atol=1e-10)


def test_tilt_app4_imputation(spark):
    """TiLT app 4: on the grid of period P a missing value is replaced by the mean of its
    tumbling bucket ((k·w, (k+1)·w]); RESAMPLE 'null' makes the missing values NULL."""
    rng = np.random.default_rng(4)
    period, bucket = MS, 100 * MS
    ticks = np.arange(1, 2001)
    keep = rng.random(ticks.size) > 0.1
    keep[550:800] = False  # a gap of 250 ticks: buckets (600, 700] and (700, 800] are empty
    keep[[0, -1]] = True
    t = ticks[keep] * period
    v = np.round(rng.normal(size=t.size), 6)
    _view(spark, "app4", list(zip(t.tolist(), v.tolist())), "ts bigint, v double")
    grid = resample_sql("app4", [("ts", "timestamp"), ("v", "double")], "ts", period, "null")
    rows = spark.sql(f"""
        SELECT us, coalesce(v, avg(v) OVER (PARTITION BY b)) AS v FROM (
          SELECT unix_micros(ts) AS us, v,
                 -- bucket k covers (k*w, (k+1)*w]
                 (unix_micros(ts) - 1 - pmod(unix_micros(ts) - 1, {bucket})) div {bucket} AS b
          FROM ({grid}))""").collect()
    got = sorted((r.us, r.v) for r in rows)
    # numpy
    g = ticks * period
    full = np.full(g.size, np.nan)
    full[keep] = v
    b = (g - 1) // bucket
    means = {k: np.nanmean(full[b == k]) if np.any(~np.isnan(full[b == k])) else np.nan
             for k in np.unique(b)}
    want = np.where(np.isnan(full), [means[k] for k in b], full)
    assert [u for u, _ in got] == g.tolist()
    np.testing.assert_allclose([np.nan if x is None else x for _, x in got], want,
                               rtol=1e-12, equal_nan=True)
    assert sum(x is None for _, x in got) == 200  # ticks 601..800: buckets with no value


def test_resample_million_rows(spark):
    """1 M irregular rows, un-keyed (one partition): finishes, and matches numpy in total."""
    n, period = 1_000_000, 1500
    spark.range(n).selectExpr(
        "timestamp_micros(id * 1000 + pmod(id * 7919, 900)) AS ts",
        "CAST(pmod(id * 31, 1000) AS DOUBLE) / 10 AS v").createOrReplaceTempView("big")
    sql = resample_sql("big", [("ts", "timestamp"), ("v", "double")], "ts", period, "linear")
    count, total = spark.sql(f"SELECT count(*), sum(v) FROM ({sql})").first()
    ids = np.arange(n, dtype=np.int64)
    t = ids * 1000 + (ids * 7919) % 900
    v = ((ids * 31) % 1000) / 10
    grid = np.arange(-(-t[0] // period), t[-1] // period + 1) * period
    assert count == grid.size
    assert math.isclose(total, np.interp(grid, t, v).sum(), rel_tol=1e-9)


# ---------------------------------------------------------------------------------------
# RESAMPLE: errors
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, code", [
    ({"method": "cubic"}, "INVALID_OPTION"),
    ({"period_us": 0}, "INVALID_OPTION"),
    ({"period_us": -5}, "INVALID_OPTION"),
    ({"period_us": 2.5}, "INVALID_OPTION"),
    ({"period_us": None}, "INVALID_OPTION"),
    ({"time_col": "tss"}, "UNKNOWN_COLUMN"),
    ({"time_col": "v"}, "TYPE_ERROR"),
    ({"keys": ("sym",)}, "UNKNOWN_COLUMN"),
    ({"keys": ("ts",)}, "INVALID_OPTION"),
    ({"columns": SERIES + [("__ws_t", "bigint")]}, "INVALID_OPTION"),
])
def test_resample_errors(kwargs, code):
    args = {"source": "s", "columns": SERIES, "time_col": "ts", "period_us": 5,
            "method": "linear", "keys": ("k",), **kwargs}
    with pytest.raises(WaveSQLError) as info:
        resample_sql(**args)
    assert info.value.code == code
    if kwargs.get("method") == "cubic":
        assert info.value.hint == "one of 'linear', 'prev', 'zero', 'null'"


def test_resample_method_is_case_insensitive_and_period_any_integer():
    assert resample_sql("s", SERIES, "ts", 5, "LINEAR") == resample_sql("s", SERIES, "ts", 5,
                                                                         "linear")
    assert resample_sql("s", SERIES, "ts", np.int64(5), "prev") == resample_sql(
        "s", SERIES, "ts", 5.0, "prev")


# ---------------------------------------------------------------------------------------
# ASOF JOIN: parsing the condition
# ---------------------------------------------------------------------------------------

def _on(condition: str):
    query = f"SELECT * FROM trades t ASOF JOIN quotes q ON {condition}"
    tree = sqlglot.parse_one(query, read="wavesql")
    join = tree.args["joins"][0]
    assert join.args.get("method") == "ASOF"
    return join.args["on"], query


@pytest.mark.parametrize("condition, keys, direction, inclusive", [
    ("t.sym = q.sym AND t.ts >= q.ts", (("sym", "sym"),), "backward", True),
    ("q.sym = t.sym AND q.ts <= t.ts", (("sym", "sym"),), "backward", True),
    ("t.ts > q.ts AND t.sym = q.sym", (("sym", "sym"),), "backward", False),
    ("q.ts < t.ts", (), "backward", False),
    ("t.ts <= q.qts", (), "forward", True),
    ("q.qts >= t.ts", (), "forward", True),
    ("(t.a = q.b AND (t.c = q.d)) AND q.ts > t.ts", (("a", "b"), ("c", "d")), "forward", False),
    ("T.Sym = Q.sym AND t.ts < q.ts", (("Sym", "sym"),), "forward", False),
])
def test_parse_asof_condition(condition, keys, direction, inclusive):
    on, _ = _on(condition)
    cond = parse_asof_condition(on, "t", "q")
    assert cond.keys == keys
    assert (cond.direction, cond.inclusive) == (direction, inclusive)
    assert cond.left_time == "ts"


def test_parse_asof_condition_unqualified():
    on, _ = _on("tsym = q.sym AND ts >= qts")
    cond = parse_asof_condition(on, "t", "q", ["tsym", "ts", "id"], ["sym", "qts", "px"])
    assert cond == AsofCondition((("tsym", "sym"),), "ts", "qts", "backward", True)


@pytest.mark.parametrize("condition, code, bad", [
    ("t.sym = q.sym", "INVALID_OPTION", "t.sym = q.sym"),  # no inequality: the whole ON
    ("t.ts >= q.ts AND t.ts < q.ts2", "INVALID_OPTION", "t.ts < q.ts2"),
    ("t.ts >= q.ts OR t.sym = q.sym", "INVALID_OPTION", "t.ts >= q.ts OR t.sym = q.sym"),
    ("t.sym <> q.sym AND t.ts >= q.ts", "INVALID_OPTION", "t.sym <> q.sym"),
    ("t.sym = 'A' AND t.ts >= q.ts", "INVALID_OPTION", "'A'"),
    # keywords and closing parentheses carry no position: the caret stops at the last token
    # that does
    ("lower(t.sym) = q.sym AND t.ts >= q.ts", "INVALID_OPTION", "lower(t.sym"),
    ("t.ts >= q.ts + INTERVAL 1 SECOND", "INVALID_OPTION", "q.ts"),
    ("t.a = t.b AND t.ts >= q.ts", "INVALID_OPTION", "t.a = t.b"),
    ("t.ts >= t.ts2", "INVALID_OPTION", "t.ts >= t.ts2"),
    ("NOT t.ts >= q.ts", "INVALID_OPTION", "t.ts >= q.ts"),
    ("x.sym = q.sym AND t.ts >= q.ts", "UNKNOWN_COLUMN", "x.sym"),
    ("sym = q.sym AND t.ts >= q.ts", "INVALID_OPTION", "sym"),
])
def test_parse_asof_condition_errors(condition, code, bad):
    on, query = _on(condition)
    with pytest.raises(WaveSQLError) as info:
        parse_asof_condition(on, "t", "q")
    err = info.value
    assert err.code == code
    assert err.hint
    assert err.span is not None
    start = query.index(" ON ") + 4
    assert query[err.span.start:err.span.end] == bad, (query[err.span.start:err.span.end], bad)
    assert err.span.start >= start


def test_parse_asof_condition_unqualified_errors():
    on, _ = _on("sym = q.sym AND ts >= q.ts")
    with pytest.raises(WaveSQLError) as info:
        parse_asof_condition(on, "t", "q", ["sym", "ts"], ["sym", "ts"])
    assert info.value.code == "AMBIGUOUS_COLUMN"
    with pytest.raises(WaveSQLError) as info:
        parse_asof_condition(on, "t", "q", ["ts"], ["tz"])
    assert info.value.code == "UNKNOWN_COLUMN" and "`sym`" in info.value.message


# ---------------------------------------------------------------------------------------
# ASOF JOIN: hand-computed cases
# ---------------------------------------------------------------------------------------

TRADE_COLS = [("sym", "string"), ("ts", "bigint"), ("id", "int")]
QUOTE_COLS = [("sym", "string"), ("ts", "bigint"), ("px", "double")]


@pytest.fixture(scope="module")
def trades_quotes(spark):
    trades = [("a", 1, 10), ("a", 5, 11), ("b", 3, 12), ("c", None, 13), (None, 4, 14),
              ("a", 0, 15)]
    # two quotes of `a` at time 1 (the tie goes to the greater row, px 2.0); a NULL key
    quotes = [("a", 1, 1.0), ("a", 1, 2.0), ("a", 4, 3.0), ("b", 4, 5.0), (None, 1, 6.0),
              ("a", None, 7.0), ("c", 2, 8.0)]
    spark.createDataFrame(trades, "sym string, ts bigint, id int").createOrReplaceTempView("tr")
    spark.createDataFrame(quotes, "sym string, ts bigint, px double") \
        .createOrReplaceTempView("qu")


@pytest.mark.parametrize("op, want", [
    # id -> matched (q.ts, px)
    (">=", {10: (1, 2.0), 11: (4, 3.0)}),
    (">", {11: (4, 3.0)}),
    ("<=", {10: (1, 2.0), 12: (4, 5.0), 15: (1, 2.0)}),
    ("<", {10: (4, 3.0), 12: (4, 5.0), 15: (1, 2.0)}),
])
def test_asof_by_hand(spark, trades_quotes, op, want):
    on, _ = _on(f"t.sym = q.sym AND t.ts {op} q.ts")
    cond = parse_asof_condition(on, "t", "q")
    for outer in (False, True):
        sql = asof_join_sql("tr", "qu", "t", "q", TRADE_COLS, QUOTE_COLS, outer=outer,
                            **cond.as_kwargs())
        rows = spark.sql(sql).collect()
        assert all(len(r) == 6 for r in rows)
        got = {r[2]: (r[4], r[5]) for r in rows}
        expect = dict(want)
        if outer:  # every trade, unmatched ones with NULLs
            expect = {i: want.get(i, (None, None)) for i in (10, 11, 12, 13, 14, 15)}
        assert got == expect
        for r in rows:  # the left columns are the trade's, the right sym is the same key
            assert r[3] in (None, r[0])


def test_asof_select_list_and_unique_names(spark, trades_quotes):
    sql = asof_join_sql("tr", "qu", "t", "q", TRADE_COLS, QUOTE_COLS, "ts", "ts",
                        [("sym", "sym")], select="t.id, px, q.ts AS qts, t.*")
    df = spark.sql(sql)
    assert df.columns == ["id", "px", "qts", "sym", "ts", "id"]
    assert sorted(tuple(r)[:3] for r in df.collect()) == [(10, 2.0, 1), (11, 3.0, 4)]
    # the relation alone, filtered and aggregated by the caller
    rel = asof_join_relation("tr", "qu", "t", "q", TRADE_COLS, QUOTE_COLS, "ts", "ts",
                             [("sym", "sym")], outer=True)
    n = spark.sql(f"SELECT count(*) FROM ({rel}) j WHERE q.px IS NULL AND t.id > 11").first()[0]
    # ids 12 (b's quote comes later), 13 (NULL time), 14 (NULL key), 15 (before a's quotes)
    assert n == 4


def test_asof_without_keys_and_with_timestamps(spark):
    spark.sql("SELECT timestamp_micros(us) AS ts, id FROM VALUES (5L, 1), (15L, 2), (0L, 3) "
              "AS v(us, id)").createOrReplaceTempView("l_ts")
    spark.sql("SELECT timestamp_micros(us) AS at, map('p', p) AS m, p FROM VALUES "
              "(1L, 10.0D), (10L, 20.0D), (10L, 30.0D) AS v(us, p)").createOrReplaceTempView("r_ts")
    sql = asof_join_sql("l_ts", "r_ts", "l", "r", [("ts", "timestamp"), ("id", "int")],
                        [("at", "timestamp"), ("m", "map<string,double>"), ("p", "double")],
                        "ts", "at", outer=True, select="id, unix_micros(at) AS at, r.m['p'] AS mp")
    got = sorted(tuple(r) for r in spark.sql(sql).collect())
    # the two rows at 10 tie on time; the greater (by p, the map not compared) wins
    assert got == [(1, 1, 10.0), (2, 10, 30.0), (3, None, None)]


def test_asof_errors():
    args = ("a", "b", "t", "q", TRADE_COLS, QUOTE_COLS, "ts", "ts")
    with pytest.raises(WaveSQLError) as info:
        asof_join_sql("a", "b", "t", "T", TRADE_COLS, QUOTE_COLS, "ts", "ts")
    assert info.value.code == "INVALID_OPTION"
    with pytest.raises(WaveSQLError) as info:
        asof_join_sql(*args, direction="nearest")
    assert info.value.code == "INVALID_OPTION"
    with pytest.raises(WaveSQLError) as info:
        asof_join_sql(*args, keys=[("sym", "symbol")])
    assert info.value.code == "UNKNOWN_COLUMN" and "did you mean `sym`" in info.value.hint


# ---------------------------------------------------------------------------------------
# ASOF JOIN: against pandas merge_asof and DuckDB
# ---------------------------------------------------------------------------------------

def _random_sides(rng, n_left, n_right, n_keys, unique_right_times=False):
    left = pd.DataFrame({"sym": rng.integers(0, n_keys, n_left).astype(str),
                         "ts": rng.integers(0, 10_000, n_left),
                         "id": np.arange(n_left, dtype=np.int32)})
    if unique_right_times:  # DuckDB picks any of tied rows: give it none
        per_key = n_right // n_keys
        right = pd.DataFrame({"sym": np.repeat(np.arange(n_keys).astype(str), per_key),
                              "ts": np.concatenate([rng.choice(10_000, per_key, replace=False)
                                                    for _ in range(n_keys)])})
    else:
        right = pd.DataFrame({"sym": rng.integers(0, n_keys, n_right).astype(str),
                              "ts": rng.integers(0, 10_000, n_right)})
    right["px"] = np.round(rng.normal(size=len(right)), 4)
    return left, right


def _spark_asof(spark, left, right, outer, **cond):
    spark.createDataFrame(left).createOrReplaceTempView("al")
    spark.createDataFrame(right).createOrReplaceTempView("ar")
    sql = asof_join_sql("al", "ar", "t", "q", list(left.columns), list(right.columns),
                        outer=outer, select="t.id, q.ts AS qts, q.px", **cond)
    return sorted(((r.id, r.qts, r.px) for r in spark.sql(sql).collect()),
                  key=lambda r: r[0])


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("direction", ["backward", "forward"])
@pytest.mark.parametrize("inclusive", [True, False])
def test_asof_against_merge_asof(spark, seed, direction, inclusive):
    rng = np.random.default_rng(seed)
    left, right = _random_sides(rng, 400, 300, 5)
    got = _spark_asof(spark, left, right, outer=True, keys=[("sym", "sym")], left_time="ts",
                      right_time="ts", direction=direction, inclusive=inclusive)
    # pandas takes the last of tied right rows going backward and the first going forward:
    # order ties so that it is the greatest (the documented rule)
    r = right.rename(columns={"ts": "qts"}).assign(on=lambda d: d.qts)
    r = r.sort_values(["on", "px"], ascending=[True, direction == "backward"], kind="stable")
    want = pd.merge_asof(left.sort_values("ts").rename(columns={"ts": "on"}), r, on="on",
                         by="sym", direction=direction, allow_exact_matches=inclusive)
    want = sorted(((int(w.id), None if pd.isna(w.qts) else int(w.qts),
                    None if pd.isna(w.px) else float(w.px)) for w in want.itertuples()),
                  key=lambda x: x[0])
    assert got == want


@pytest.mark.parametrize("op", [">=", ">", "<=", "<"])
@pytest.mark.parametrize("outer", [False, True])
def test_asof_against_duckdb(spark, op, outer):
    duckdb = pytest.importorskip("duckdb")
    rng = np.random.default_rng(len(op) * 2 + outer)
    left, right = _random_sides(rng, 500, 400, 4, unique_right_times=True)
    on, _ = _on(f"t.sym = q.sym AND t.ts {op} q.ts")
    cond = parse_asof_condition(on, "t", "q")
    got = _spark_asof(spark, left, right, outer=outer, **cond.as_kwargs())
    con = duckdb.connect()
    con.register("al", left)
    con.register("ar", right)
    join = "ASOF LEFT JOIN" if outer else "ASOF JOIN"
    want = con.execute(f"SELECT t.id, q.ts, q.px FROM al t {join} ar q "
                       f"ON t.sym = q.sym AND t.ts {op} q.ts").fetchall()
    assert got == sorted(((int(i), None if qt is None else int(qt), px) for i, qt, px in want),
                         key=lambda r: r[0])
    assert len(got) == (len(left) if outer else len([g for g in got if g[1] is not None]))


def test_asof_million_rows(spark):
    """1 M trades against 1 M quotes over 100 symbols: finishes, and matches pandas."""
    n = 1_000_000
    spark.range(n).selectExpr("CAST(pmod(id * 7, 100) AS STRING) AS sym",
                              "pmod(id * 7919, 10000000) AS ts", "id") \
        .createOrReplaceTempView("big_t")
    spark.range(n).selectExpr("CAST(pmod(id * 13, 100) AS STRING) AS sym",
                              "pmod(id * 104729, 10000000) * 10 + 5 AS ts",
                              "CAST(pmod(id * 31, 1000) AS DOUBLE) AS px") \
        .createOrReplaceTempView("big_q")
    sql = asof_join_sql("big_t", "big_q", "t", "q", TRADE_COLS, QUOTE_COLS, "ts", "ts",
                        [("sym", "sym")], select="t.id, q.px")
    count, total = spark.sql(f"SELECT count(*), sum(px) FROM ({sql})").first()
    ids = np.arange(n, dtype=np.int64)
    left = pd.DataFrame({"sym": ((ids * 7) % 100).astype(str), "ts": (ids * 7919) % 10_000_000})
    right = pd.DataFrame({"sym": ((ids * 13) % 100).astype(str),
                          "ts": ((ids * 104729) % 10_000_000) * 10 + 5,
                          "px": ((ids * 31) % 1000).astype(float)})
    want = pd.merge_asof(left.sort_values("ts"), right.sort_values(["ts", "px"]), on="ts",
                         by="sym").dropna(subset=["px"])
    assert count == len(want)
    assert total == want.px.sum()


def test_sql_has_no_spark_import():
    import subprocess
    import sys

    code = ("import sys; import wavesql.planner.temporal; "
            "sys.exit('pyspark' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_embedded_in_a_query(spark, irregular):
    """The generated text nests: as a derived table, inside a CTE, joined with itself."""
    sql = resample_sql("irregular", irregular, "ts", 5 * MS, "prev", keys=("k",))
    n = spark.sql(f"WITH r AS ({sql}) SELECT count(*) FROM r a JOIN r b ON a.ts = b.ts"
                  ).first()[0]
    assert n == 5
