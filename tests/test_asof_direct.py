"""Un-keyed ASOF JOIN of two Parquet streams as a direct pass over their files
(planner/physical/direct_asof.py), against pandas ``merge_asof`` over the right rows
collapsed per time by the documented rule (planner/temporal.py: of right rows sharing a
time the greatest wins), and against the Spark SQL lowering (``SET wavesql.asof.direct =
false``) for the relation's exact schema. Multi-file streams with many row groups and
small ranges (``wavesql.windows.chunk_rows``: many tasks), both directions, inclusive and
strict, LEFT and inner, duplicate right times, right rows only before / after the left's
span, gaps longer than a range, NULL values, NULL times on either side, timestamp and
integer times; each case checks that the plan ran the pass (``asof_scan``) over several ranges.
Also the inputs it leaves to the SQL.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_temporal_parallel import _asof_oracle, _pandas, _same

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000
MS = 1000
GAP = 40_000 * MS  # a dropout far longer than a range


def _side(rng, n, gaps=1, dup=0.15, null_times=0.0, shift=0):
    """A side in time order: microsecond times (bursts of equal times, ``gaps`` dropouts),
    v DOUBLE with NULLs, q INT with NULLs, s STRING; ``null_times``: that share of rows
    without a time, left where they fall (row groups' statistics still hold)."""
    steps = rng.choice([0, MS, 2 * MS, 5 * MS], n, p=[dup, 0.5 - dup / 2, 0.3, 0.2 - dup / 2])
    for g in range(gaps):
        steps[(g + 1) * n // (gaps + 1)] = GAP
    t = T0 + shift + np.cumsum(steps)
    frame = pd.DataFrame({
        "t": pd.array(t, dtype="Int64"),
        "v": pd.array(np.where(rng.random(n) < 0.05, np.nan, rng.normal(0, 5, n).round(6)),
                      dtype="Float64"),
        "q": pd.array(rng.integers(-9, 9, n), dtype="Int64"),
        "s": rng.choice(["a", "b", "ab", "c"], n),
    })
    frame.loc[rng.random(n) < 0.03, "q"] = pd.NA
    frame.loc[rng.random(n) < null_times, "t"] = pd.NA
    return frame


def _write(folder, frame, names=("ts", "v", "q", "s"), files=3, row_group_size=97):
    """``frame`` as ``files`` Parquet files of many row groups, in its row order, with an
    integer copy of the time in milliseconds (``ms``; NULL with it)."""
    folder.mkdir()
    t = [None if pd.isna(x) else int(x) for x in frame["t"]]
    table = pa.table({
        names[0]: pa.array(t, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        names[1]: pa.array([None if pd.isna(x) else float(x) for x in frame["v"]],
                           pa.float64()),
        names[2]: pa.array([None if pd.isna(x) else int(x) for x in frame["q"]], pa.int32()),
        names[3]: pa.array(list(frame["s"]), pa.string()),
        "ms": pa.array([None if x is None else x // MS for x in t], pa.int64()),
    })
    for i, rows in enumerate(np.array_split(np.arange(table.num_rows), files)):
        pq.write_table(table.take(pa.array(rows)), folder / f"part-{i}.parquet",
                       row_group_size=row_group_size)
    return folder


def _streams(ws, tmp_path, left, right, **kw):
    for name, frame, names in (("trades", left, ("ts", "v", "q", "s")),
                               ("quotes", right, ("rts", "w", "q", "s"))):
        folder = _write(tmp_path / name, frame, names, **kw)
        ws.sql(f"CREATE OR REPLACE STREAM {name} ({names[0]} TIMESTAMP, {names[1]} DOUBLE, "
               f"q INT, s STRING, ms BIGINT) FROM '{folder}' FORMAT parquet "
               f"EVENT TIME {names[0]}")


def _plan(df) -> str:
    return df._jdf.queryExecution().executedPlan().toString()


def _run(ws, sql, direct=True, chunk_rows="300"):
    """``sql`` as the direct pass (or, ``direct`` False, checked NOT to be) over several
    ranges, and as the SQL: both results, after checking that they have one schema."""
    ws.spark.conf.set("wavesql.asof.min_rows", "0")
    ws.spark.conf.set("wavesql.windows.chunk_rows", chunk_rows)
    try:
        df = ws.sql(sql)
        plan = _plan(df)
        assert ("asof_scan" in plan) is direct, plan
        if direct:
            splits = int(re.search(r"splits=(\d+)", plan).group(1))
            assert splits >= 4, plan  # several ranges
        got = _pandas(df)
        ws.spark.conf.set("wavesql.asof.direct", "false")
        plain = ws.sql(sql)
        assert "asof_scan" not in _plan(plain)
        assert df.schema == plain.schema
        want = _pandas(plain)
    finally:
        for key in ("asof.min_rows", "windows.chunk_rows", "asof.direct"):
            ws.spark.conf.unset(f"wavesql.{key}")
    return got, want


_SELECT = ("SELECT t.ts, t.v, t.q, t.s, q.rts, q.w, q.q AS rq, q.s AS rs FROM trades t "
           "{join} quotes q ON t.ts {op} q.rts")


def _check(got, sql_rows, oracle):
    oracle = oracle.copy()
    oracle.columns = got.columns
    frames = [got, sql_rows, oracle]
    for f in frames:
        for c in ("ts", "rts", "q", "rq"):
            f[c] = f[c].astype("Int64")
    key = list(got.columns)
    got, sql_rows, oracle = (f.fillna({"v": -1e9}) for f in frames)
    _same(got, oracle, key)
    _same(got, sql_rows, key)


def _right_for(rng, left_n, **kw):
    """Right rows 3 ms off the left's, with their own dropouts (longer than a range), and
    rows far before the left's first time and far after its last."""
    right = _side(rng, left_n, gaps=3, dup=0.3, shift=-3 * MS, **kw)
    right.loc[:15, "t"] = T0 - 5 * GAP  # (right rows need not be in time order across
    right.loc[len(right) - 15:, "t"] = T0 + 99 * GAP  # groups: only each side's share)
    return right


@pytest.mark.parametrize("op,outer", [
    (">=", False), (">", True), ("<", False),
    pytest.param("<=", True, marks=pytest.mark.slow)])
def test_direct_asof_equals_merge_asof_and_the_sql(ws, tmp_path, op, outer):
    """LEFT: the left rows without a time kept unmatched; inner: dropped."""
    rng = np.random.default_rng(len(op) + 2 * outer)
    left = _side(rng, 2500, gaps=2, null_times=0.02)
    right = _right_for(rng, 2500, null_times=0.02)  # a right row without a time never matches
    _streams(ws, tmp_path, left, right)
    join = "ASOF LEFT JOIN" if outer else "ASOF JOIN"
    got, sql_rows = _run(ws, _SELECT.format(join=join, op=op))
    direction = "backward" if op.startswith(">") else "forward"
    _check(got, sql_rows, _asof_oracle(left, right, direction, op.endswith("="), outer))
    assert got["ts"].isna().any() == outer


@pytest.mark.parametrize("where,op", [
    ("before", ">="), ("after", "<="),
    pytest.param("before", "<", marks=pytest.mark.slow),
    pytest.param("after", ">", marks=pytest.mark.slow)])
def test_right_rows_only_before_or_after_the_left(ws, tmp_path, where, op):
    """Every match (or none) lies outside the left's span: the neighbour of each range is
    found across row groups and files, however far."""
    rng = np.random.default_rng(11)
    left = _side(rng, 1500, gaps=2)
    shift = -9 * GAP if where == "before" else 9 * GAP
    right = _side(rng, 600, gaps=1, dup=0.4, shift=shift)
    _streams(ws, tmp_path, left, right)
    got, sql_rows = _run(ws, _SELECT.format(join="ASOF LEFT JOIN", op=op))
    direction = "backward" if op.startswith(">") else "forward"
    _check(got, sql_rows, _asof_oracle(left, right, direction, op.endswith("="), True))
    matched = got["rts"].notna()
    assert matched.all() if (where == "before") == (direction == "backward") else \
        not matched.any()


@pytest.mark.parametrize("op", [">=", "<"])
def test_integer_times(ws, tmp_path, op):
    """Integer times (BIGINT milliseconds, not the event time), an inner join whose left
    side has rows without a time (dropped, as the SQL drops them)."""
    rng = np.random.default_rng(5)
    left = _side(rng, 2000, gaps=1, null_times=0.01)
    right = _right_for(rng, 1500, null_times=0.01)
    _streams(ws, tmp_path, left, right)
    got, sql_rows = _run(ws, "SELECT t.*, q.rts, q.w, q.q AS rq, q.s AS rs, q.ms AS rms "
                             f"FROM trades t ASOF JOIN quotes q ON t.ms {op} q.ms")
    assert list(got.columns) == ["ts", "v", "q", "s", "ms", "rts", "w", "rq", "rs", "rms"]
    # the oracle over the millisecond times (collapsing per millisecond, as the join sees it)
    lm = left.assign(t=left["t"] // MS)[["t", "v", "q", "s"]]
    rm = right.assign(t=right["t"] // MS, rts=right["t"])[["t", "rts", "v", "q", "s"]]
    want = _ms_oracle(lm, rm, "backward" if op == ">=" else "forward", op == ">=")
    got.columns = sql_rows.columns = ["lts", "lv", "lq", "ls", "lms", "rts", "rv", "rq",
                                      "rs", "rms"]
    for f in (got, sql_rows):
        for c in ("lq", "rq"):
            f[c] = f[c].astype("Int64")
    cols = ["lms", "lv", "lq", "ls", "rms", "rts", "rv", "rq", "rs"]
    key = cols
    _same(got[cols].fillna({"lv": -1e9}), want[cols].fillna({"lv": -1e9}), key)
    _same(got[cols].fillna({"lv": -1e9}), sql_rows[cols].fillna({"lv": -1e9}), key)


def _ms_oracle(left, right, direction, inclusive):
    """merge_asof on integer times, the right rows collapsed per time to the greatest by
    (rts, v, q, s), NULL lowest: written out here for the extra column."""
    r = right.dropna(subset=["t"]).copy()
    order = ["t"]
    for c in ("rts", "v", "q", "s"):
        r[f"_{c}"] = r[c].notna()
        order += [f"_{c}", c]
    r = r.sort_values(order, na_position="first", kind="mergesort")
    r = r.drop_duplicates("t", keep="last")[["t", "rts", "v", "q", "s"]]
    r.columns = ["rms", "rts", "rv", "rq", "rs"]
    r["rms"] = r["rms"].astype(np.int64)
    l = left.dropna(subset=["t"]).rename(columns={"t": "lms", "v": "lv", "q": "lq",
                                                  "s": "ls"})
    l["lms"] = l["lms"].astype(np.int64)
    l = l.sort_values("lms", kind="mergesort")
    m = pd.merge_asof(l, r.assign(_k=r["rms"]), left_on="lms", right_on="_k",
                      direction=direction, allow_exact_matches=inclusive)
    m = m[m["rms"].notna()].copy()
    return m.assign(lq=m["lq"].astype("Int64"), rq=m["rq"].astype("Int64"))


def test_explain_shows_the_pass_and_empty_ranges(ws, tmp_path):
    """EXPLAIN shows ``asof_scan``; ranges inside a long left dropout (no left rows: no
    output, no right read) change nothing; ``SELECT *`` has the SQL's schema (both
    structs, the top-level copies)."""
    rng = np.random.default_rng(8)
    left = _side(rng, 1200, gaps=4)
    right = _right_for(rng, 800)
    _streams(ws, tmp_path, left, right, files=2, row_group_size=40)
    sql = _SELECT.format(join="ASOF JOIN", op=">")
    ws.spark.conf.set("wavesql.asof.min_rows", "0")
    try:
        assert "asof_scan" in ws.explain(sql, "SPARK")
    finally:
        ws.spark.conf.unset("wavesql.asof.min_rows")
    got, sql_rows = _run(ws, sql, chunk_rows="100")
    _check(got, sql_rows, _asof_oracle(left, right, "backward", False, False))
    ws.spark.conf.set("wavesql.asof.min_rows", "0")
    try:
        star = ws.sql("SELECT * FROM trades t ASOF JOIN quotes q ON t.ts > q.rts")
        assert "asof_scan" in _plan(star)
        ws.spark.conf.set("wavesql.asof.direct", "false")
        assert star.schema == ws.sql("SELECT * FROM trades t ASOF JOIN quotes q "
                                     "ON t.ts > q.rts").schema
    finally:
        ws.spark.conf.unset("wavesql.asof.min_rows")
        ws.spark.conf.unset("wavesql.asof.direct")


@pytest.mark.parametrize("case", ["left out of order",
                                  "right out of order", "small input", "setting off",
                                  "a subquery"])
def test_inputs_the_direct_asof_leaves_to_the_sql(ws, tmp_path, case):
    rng = np.random.default_rng(4)
    left = _side(rng, 1500, gaps=1)
    right = _right_for(rng, 1500)
    if case == "left out of order":
        left = left.sample(frac=1.0, random_state=1).reset_index(drop=True)
    if case == "right out of order":
        right = right.sample(frac=1.0, random_state=1).reset_index(drop=True)
    _streams(ws, tmp_path, left, right)
    join, op = ("ASOF LEFT JOIN", ">=")
    sql = _SELECT.format(join=join, op=op)
    if case == "a subquery":
        sql = sql.replace("FROM trades t", "FROM (SELECT * FROM trades WHERE q > -5) t")
        left = left[left["q"].fillna(-9) > -5]
    if case == "small input":  # 1,500 rows: under wavesql.asof.min_rows
        df = ws.sql(sql)
        assert "asof_scan" not in _plan(df)
        got = _pandas(df)
        sql_rows = got.copy()
    elif case == "setting off":
        ws.spark.conf.set("wavesql.asof.direct", "false")
        ws.spark.conf.set("wavesql.asof.min_rows", "0")
        try:
            df = ws.sql(sql)
            assert "asof_scan" not in _plan(df)
            got = _pandas(df)
        finally:
            ws.spark.conf.unset("wavesql.asof.direct")
            ws.spark.conf.unset("wavesql.asof.min_rows")
        sql_rows = got.copy()
    else:
        got, sql_rows = _run(ws, sql, direct=False)
    _check(got, sql_rows, _asof_oracle(left, right, "backward", True, True))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_random_streams(ws, tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    op = [">=", ">", "<=", "<"][seed % 4]
    outer = bool(seed // 4)
    left = _side(rng, int(rng.integers(500, 4000)), gaps=int(rng.integers(0, 4)),
                 dup=float(rng.uniform(0, 0.4)), null_times=float(rng.uniform(0, 0.03)))
    right = _side(rng, int(rng.integers(50, 4000)), gaps=int(rng.integers(0, 5)),
                  dup=float(rng.uniform(0, 0.5)), null_times=float(rng.uniform(0, 0.05)),
                  shift=int(rng.integers(-GAP, GAP)))
    chunk_rows = int(rng.integers(200, 800))  # row groups a fraction of a range: files in
    _streams(ws, tmp_path, left, right, files=int(rng.integers(1, 5)),  # time order read once
             row_group_size=int(rng.integers(10, chunk_rows // 4)))
    got, sql_rows = _run(ws, _SELECT.format(join="ASOF LEFT JOIN" if outer else "ASOF JOIN",
                                            op=op), chunk_rows=str(chunk_rows))
    direction = "backward" if op.startswith(">") else "forward"
    _check(got, sql_rows, _asof_oracle(left, right, direction, op.endswith("="), outer))


@pytest.mark.parametrize("seed", range(10))
def test_right_side_ranges_read_the_neighbours(seed, tmp_path):
    """The right side's share of a left range (sources/parquet_chunks.py ``span_range``):
    its rows in ``[start, end)`` and every row at the latest time before ``start`` and at
    the earliest from ``end`` on, wherever they are -- integer times, NULL times (never
    read), row groups of NULL times only, ranges with no right row of their own. Numpy
    oracle over the written rows."""
    from wavesql.sources import parquet_chunks as pc_

    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 800))
    t = np.sort(rng.integers(0, 400, n)) * 10
    t[n // 2:] += int(rng.integers(0, 3)) * 50_000  # maybe a gap wider than every range
    null = rng.random(n) < 0.05
    null[: int(rng.integers(0, 40))] = True  # maybe a row group without a time
    wanted = {"t": pa.int64(), "row": pa.int64()}
    table = pa.table({"t": pa.array(t, pa.int64(), mask=null),
                      "row": pa.array(np.arange(n), pa.int64())})
    pq.write_table(table, tmp_path / "r.parquet", row_group_size=int(rng.integers(5, 60)))
    groups = pc_.index([str(tmp_path / "r.parquet")], "t", wanted, utc_naive=False,
                       null_times=True, integer_time=True)
    assert groups is not None
    assert pc_.index([str(tmp_path / "r.parquet")], "t", wanted, utc_naive=False,
                     integer_time=True) is None or not null.any()
    cuts = np.unique(rng.integers(-500, t.max() + 500, int(rng.integers(2, 12))))
    timed = t[~null]
    for start, end in zip(cuts, cuts[1:]):
        r = pc_.span_range(groups, int(start), int(end), neighbours=True)
        got = pc_.read_range(r, ["t", "row"], "t", None, wanted, context=False)
        below, above = timed[timed < start], timed[timed >= end]
        want = ~null & (((t >= start) & (t < end))
                        | ((t == below.max()) if len(below) else False)
                        | ((t == above.min()) if len(above) else False))
        assert sorted(got.column("row").to_pylist()) == np.flatnonzero(want).tolist()


def test_punctuation_rows_are_not_data(ws, tmp_path):
    """A left stream with a PROGRESS COLUMN: its punctuation rows (the column not NULL) are
    not data in the pass either, wherever they fall in the row groups."""
    rng = np.random.default_rng(21)
    left = _side(rng, 2000, gaps=1)
    right = _right_for(rng, 1500)
    punct = rng.random(len(left)) < 0.05
    _streams(ws, tmp_path, left, right)
    folder = tmp_path / "trades"
    for i, path in enumerate(sorted(folder.glob("*.parquet"))):  # add the progress column
        table = pq.read_table(path)
        rows = np.array_split(np.arange(len(left)), 3)[i]
        marks = [T0 if p else None for p in punct[rows]]
        pq.write_table(table.append_column("punct", pa.array(marks, pa.int64()).cast(
            pa.timestamp("us", tz="UTC"))), path, row_group_size=97)
    ws.sql(f"CREATE OR REPLACE STREAM trades (ts TIMESTAMP, v DOUBLE, q INT, s STRING, "
           f"ms BIGINT, punct TIMESTAMP) FROM '{folder}' FORMAT parquet EVENT TIME ts "
           f"WATERMARK 1 SECOND PROGRESS COLUMN punct")
    got, sql_rows = _run(ws, _SELECT.format(join="ASOF LEFT JOIN", op=">="))
    data = left[~punct].reset_index(drop=True)
    _check(got, sql_rows, _asof_oracle(data, right, "backward", True, True))
