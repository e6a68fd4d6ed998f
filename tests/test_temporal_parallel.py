"""Un-keyed RESAMPLE and ASOF JOIN in parallel chunks of event time over CSV and JSON streams
(planner/physical/chunked_temporal.py, udfs/temporal_chunks.py), against independent
oracles: numpy / pandas for RESAMPLE (searchsorted for 'prev', ``np.interp`` for 'linear'),
pandas ``merge_asof`` for ASOF JOIN, each after collapsing duplicate times by the documented
rule (planner/temporal.py). Also compared with the Spark SQL lowering (``SET
wavesql.temporal.parallel = false``), and checked to run as the pass (its function in
Spark's plan and in ``EXPLAIN SPARK``), not the SQL. Several thousand rows over many chunks
(``wavesql.temporal.chunk_rows`` small), dropouts longer than several chunks, duplicate
times, NULL values in interpolated columns, NULL times.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000_000
MS = 1000
GAP = 30_000 * MS  # a dropout far longer than a chunk


def _series(rng, n, gaps=2, null_times=0.01):
    """Microsecond times with bursts of equal times and ``gaps`` long dropouts, and values:
    v DOUBLE with NULLs, q INT (NULL rarely), s STRING; NULL times at random."""
    steps = rng.choice([0, MS, 2 * MS, 4 * MS], n, p=[0.15, 0.45, 0.25, 0.15])
    for g in range(gaps):
        steps[(g + 1) * n // (gaps + 1)] = GAP
    t = T0 + np.cumsum(steps)
    v = rng.normal(0, 5, n).round(6)
    frame = pd.DataFrame({
        "t": pd.array(t, dtype="Int64"),
        "v": pd.array(np.where(rng.random(n) < 0.08, np.nan, v), dtype="Float64"),
        "q": pd.array(rng.integers(-9, 9, n), dtype="Int64"),
        "s": rng.choice(["a", "b", "c", "ab"], n),
    })
    frame.loc[rng.random(n) < 0.01, "q"] = pd.NA
    frame.loc[rng.random(n) < null_times, "t"] = pd.NA
    return frame.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)


def _iso(us) -> str:
    if pd.isna(us):
        return ""
    return pd.Timestamp(int(us), unit="us", tz="UTC").strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _write(folder, frame, fmt, names=("ts", "v", "q", "s")):
    folder.mkdir()
    path = folder / f"part-0.{fmt}"
    with open(path, "w") as f:
        if fmt == "csv":
            f.write(",".join(names) + "\n")
        for t, v, q, s in frame[["t", "v", "q", "s"]].itertuples(index=False):
            values = [_iso(t), None if pd.isna(v) else float(v), None if pd.isna(q) else int(q), s]
            if fmt == "csv":
                f.write(",".join("" if x is None else (x if isinstance(x, str) else repr(x))
                                 for x in values) + "\n")
            else:
                row = {k: x for k, x in zip(names, values) if x not in (None, "")}
                f.write(json.dumps(row) + "\n")
    return folder


def _stream(ws, name, folder, fmt, time="ts", value="v"):
    ws.sql(f"CREATE OR REPLACE STREAM {name} ({time} TIMESTAMP, {value} DOUBLE, q INT, "
           f"s STRING) FROM '{folder}' FORMAT {fmt} EVENT TIME {time}")


def _latest_per_time(frame, time="t"):
    """Rows sharing a time collapsed to the greatest by the other columns left to right,
    NULL lowest (planner/temporal.py)."""
    rest = [c for c in frame.columns if c != time]
    keyed = frame.dropna(subset=[time]).copy()
    order = [time]
    for c in rest:  # NULL lowest: sort on (has a value, value)
        keyed[f"_has_{c}"] = keyed[c].notna()
        order += [f"_has_{c}", c]
    keyed = keyed.sort_values(order, na_position="first", kind="mergesort")
    keyed = keyed.drop_duplicates(time, keep="last")
    return keyed[[time] + rest].reset_index(drop=True)


def _resample_oracle(frame, period, method):
    rows = _latest_per_time(frame)
    t = rows["t"].to_numpy(dtype=np.int64)
    grid = np.arange(-(-t[0] // period), t[-1] // period + 1, dtype=np.int64) * period
    prev = np.searchsorted(t, grid, side="right") - 1
    out = {"ts": grid}
    for c in ("v", "q", "s"):
        held = rows[c].to_numpy(dtype=object)[prev]
        if method == "linear" and c in ("v", "q"):
            have = rows[c].notna().to_numpy()
            tc = t[have]
            vc = rows[c][have].to_numpy(dtype=np.float64)
            y = np.interp(grid.astype(np.float64), tc.astype(np.float64), vc)
            inside = (grid >= tc[0]) & (grid <= tc[-1])
            out[c] = np.where(inside, y, np.nan)
        elif method in ("null", "zero"):
            hit = t[prev] > grid - period
            fill = 0 if (method == "zero" and c != "s") else None
            out[c] = np.where(hit, held, fill)
        else:  # 'prev', and the string column of 'linear'
            out[c] = held
    return pd.DataFrame(out)


def _pandas(df):
    from tests.test_tilt import _pandas as as_pandas

    return as_pandas(df)


def _run(ws, sql, marker, compare=True):
    """``sql`` with the pass (``marker`` in its plan) and, when ``compare``, with the SQL
    (not in it; else None)."""
    ws.spark.conf.set("wavesql.temporal.parallel", "true")  # (off by default: settings.py)
    ws.spark.conf.set("wavesql.temporal.min_rows", "0")
    ws.spark.conf.set("wavesql.temporal.chunk_rows", "400")
    try:
        df = ws.sql(sql)
        assert marker in df._jdf.queryExecution().executedPlan().toString()
        got = _pandas(df)
        if not compare:
            return got, None
        ws.spark.conf.set("wavesql.temporal.parallel", "false")
        plain = ws.sql(sql)
        assert marker not in plain._jdf.queryExecution().executedPlan().toString()
        want = _pandas(plain)
        assert df.schema == plain.schema
    finally:
        for key in ("min_rows", "chunk_rows", "parallel"):
            ws.spark.conf.unset(f"wavesql.temporal.{key}")
    return got, want


def _explained(ws, sql) -> str:
    """``EXPLAIN SPARK`` of ``sql`` with the pass on and no row minimum."""
    ws.spark.conf.set("wavesql.temporal.min_rows", "0")
    ws.spark.conf.set("wavesql.temporal.parallel", "true")
    try:
        return ws.explain(sql, "SPARK")
    finally:
        ws.spark.conf.unset("wavesql.temporal.min_rows")
        ws.spark.conf.unset("wavesql.temporal.parallel")


def _same(got, want, key):
    got = got.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    assert list(got.columns) == list(want.columns)
    assert len(got) == len(want)
    for c in got.columns:
        a, b = got[c], want[c]
        if pd.api.types.is_float_dtype(a) or pd.api.types.is_float_dtype(b):
            np.testing.assert_allclose(pd.to_numeric(a).to_numpy(np.float64),
                                       pd.to_numeric(b).to_numpy(np.float64),
                                       rtol=1e-9, atol=1e-9, equal_nan=True, err_msg=c)
        else:
            assert [None if pd.isna(x) else x for x in a] == \
                   [None if pd.isna(x) else x for x in b], c


# ------------------------------------------------------------------------------ RESAMPLE
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_resample_in_chunks_equals_numpy_and_the_sql(ws, tmp_path, fmt):
    """Every method against numpy; 'linear' (NULLs interpolated across, ties won by a
    NULL) also against the SQL."""
    rng = np.random.default_rng(len(fmt))
    frame = _series(rng, 4000)
    _stream(ws, "s", _write(tmp_path / "s", frame, fmt), fmt)
    period = 5 * MS
    for method in (["linear", "prev"] if fmt == "csv" else ["null", "zero"]):
        got, sql = _run(ws, f"SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, "
                            f"'{method}')", "resample_chunks", compare=method == "linear")
        want = _resample_oracle(frame, period, method)
        assert len(got) > 2 * GAP // period  # the dropouts' points: chunks without rows
        _same(got, want.astype({"q": "float64"} if method == "linear" else {}), ["ts"])
        if sql is not None:
            _same(got, sql, ["ts"])


def test_resample_of_a_subquery_in_chunks_shows_in_explain(ws, tmp_path):
    rng = np.random.default_rng(11)
    frame = _series(rng, 3000, gaps=1)
    _stream(ws, "s", _write(tmp_path / "s", frame, "csv"), "csv")
    sql = ("SELECT ts, v FROM RESAMPLE((SELECT ts, v FROM s WHERE q > -5), ts, "
           "INTERVAL 3 MILLISECONDS, 'linear') r")
    assert "resample_chunks" in _explained(ws, sql)
    got, sql_rows = _run(ws, sql, "resample_chunks")
    kept = frame[frame["q"].fillna(-100) > -5][["t", "v"]]
    want = _resample_oracle(kept.assign(q=0, s="a"), 3 * MS, "linear")[["ts", "v"]]
    _same(got, want, ["ts"])
    _same(got, sql_rows, ["ts"])


def test_small_inputs_and_the_setting_keep_the_sql(ws, tmp_path):
    rng = np.random.default_rng(5)
    _stream(ws, "s", _write(tmp_path / "s", _series(rng, 500), "csv"), "csv")
    sql = "SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'prev')"
    assert "resample_chunks" not in ws.sql(sql)._jdf.queryExecution().executedPlan().toString()
    # 500 rows: under wavesql.temporal.min_rows (100,000)
    ws.spark.conf.set("wavesql.temporal.parallel", "true")
    try:
        assert "resample_chunks" not in \
            ws.sql(sql)._jdf.queryExecution().executedPlan().toString()
    finally:
        ws.spark.conf.unset("wavesql.temporal.parallel")
    ws.spark.conf.set("wavesql.temporal.min_rows", "0")
    ws.spark.conf.set("wavesql.temporal.parallel", "false")
    try:
        plan = ws.sql(sql)._jdf.queryExecution().executedPlan().toString()
        assert "resample_chunks" not in plan
    finally:
        ws.spark.conf.unset("wavesql.temporal.min_rows")
        ws.spark.conf.unset("wavesql.temporal.parallel")


# ------------------------------------------------------------------------------ ASOF JOIN
def _asof_oracle(left, right, direction, inclusive, outer):
    """pandas merge_asof over the right rows collapsed per time; NULL left times never
    match."""
    r = _latest_per_time(right.rename(columns={"t": "rt"}), "rt")
    r.columns = ["rt", "rv", "rq", "rs"]
    l = left.rename(columns={"t": "lt", "v": "lv", "q": "lq", "s": "ls"})
    timed = l.dropna(subset=["lt"]).copy()
    timed["lt"] = timed["lt"].astype(np.int64)
    r["rt"] = r["rt"].astype(np.int64)
    timed = timed.sort_values("lt", kind="mergesort")
    r = r.assign(_key=r["rt"])
    m = pd.merge_asof(timed, r, left_on="lt", right_on="_key", direction=direction,
                      allow_exact_matches=inclusive).drop(columns="_key")
    if outer:
        untimed = l[l["lt"].isna()].assign(rt=pd.NA, rv=np.nan, rq=pd.NA, rs=None)
        m = pd.concat([m, untimed], ignore_index=True)
    else:
        m = m[m["rt"].notna()]
    return m[["lt", "lv", "lq", "ls", "rt", "rv", "rq", "rs"]].reset_index(drop=True)


@pytest.mark.parametrize("op,outer,fmt", [
    (">=", False, "csv"), (">", True, "json"),
    pytest.param("<=", True, "csv", marks=pytest.mark.slow),
    pytest.param("<", False, "json", marks=pytest.mark.slow)])
def test_asof_join_in_chunks_equals_merge_asof_and_the_sql(ws, tmp_path, op, outer, fmt):
    rng = np.random.default_rng(len(op) + 2 * outer)
    left = _series(rng, 3000, gaps=1)
    right = _series(rng, 3000, gaps=3, null_times=0.02)
    right["t"] = right["t"] - 10 * MS + pd.array(rng.integers(0, 3, len(right)) * MS,
                                                   dtype="Int64")
    # right rows before the left's first time and after its last
    right.loc[:20, "t"] = T0 - 7 * GAP
    right.loc[21:40, "t"] = T0 + 9 * GAP
    _stream(ws, "trades", _write(tmp_path / "l", left, fmt), fmt)
    _stream(ws, "quotes", _write(tmp_path / "r", right, fmt, ("rts", "w", "q", "s")), fmt,
            time="rts", value="w")
    join = "ASOF LEFT JOIN" if outer else "ASOF JOIN"
    sql = (f"SELECT t.ts, t.v, t.q, t.s, q.rts, q.w, q.q AS rq, q.s AS rs FROM trades t "
           f"{join} quotes q ON t.ts {op} q.rts")
    got, sql_rows = _run(ws, sql, "asof_chunks", compare=fmt == "csv")
    direction = "backward" if op.startswith(">") else "forward"
    want = _asof_oracle(left, right, direction, op.endswith("="), outer)
    want.columns = got.columns
    key = list(got.columns)
    for frame in (got, want) + ((sql_rows,) if sql_rows is not None else ()):
        for c in ("ts", "rts", "q", "rq"):
            frame[c] = frame[c].astype("Int64")
    got_k, want_k = got.fillna({"v": -1e9}), want.fillna({"v": -1e9})
    _same(got_k, want_k, key)
    if sql_rows is not None:
        _same(got_k, sql_rows.fillna({"v": -1e9}), key)
    if outer:
        assert got["rts"].isna().any() and got["ts"].isna().any()


def test_asof_join_of_a_view_on_itself_shows_in_explain(ws, tmp_path):
    rng = np.random.default_rng(3)
    frame = _series(rng, 3000, gaps=1, null_times=0)
    _stream(ws, "s", _write(tmp_path / "s", frame, "csv"), "csv")
    ws.sql("CREATE OR REPLACE TEMPORARY VIEW odd AS SELECT * FROM s WHERE q % 2 = 1")
    sql = ("SELECT a.ts, a.v, b.ts AS bts, b.v AS bv FROM s a ASOF JOIN odd b "
           "ON a.ts > b.ts")
    assert "asof_chunks" in _explained(ws, sql)
    got, _ = _run(ws, sql, "asof_chunks", compare=False)
    q = frame["q"].fillna(0)
    odd = frame[(q > 0) & (q % 2 == 1)]  # Spark's % keeps the sign: -3 % 2 = -1
    want = _asof_oracle(frame, odd, "backward", False, False)[["lt", "lv", "rt", "rv"]]
    want.columns = got.columns
    key = ["ts", "v", "bts"]
    _same(got.fillna({"v": -1e9}), want.fillna({"v": -1e9}), key)
    # integer times (milliseconds) from subqueries, forward
    ms = ("SELECT a.ms, a.v, b.ms AS bms FROM (SELECT unix_millis(ts) AS ms, v FROM s) a "
          "ASOF JOIN (SELECT unix_millis(ts) AS ms, q FROM odd) b ON a.ms <= b.ms")
    got, _ = _run(ws, ms, "asof_chunks", compare=False)
    want = _asof_oracle(frame, odd, "forward", True, False)
    want = pd.DataFrame({"ms": want["lt"] // MS, "v": want["lv"], "bms": want["rt"] // MS})
    _same(got.fillna({"v": -1e9}), want.fillna({"v": -1e9}), ["ms", "v", "bms"])


# ------------------------------------------------------------------------------ one read
def test_the_pass_reads_its_csv_input_once(ws, tmp_path):
    """The estimate's job fills a held copy of each input (a lazy local checkpoint) that
    the summaries and the pass read: with the files gone once the query is planned, the
    result is still right, and no file scan is left in the pass's plan."""
    rng = np.random.default_rng(21)
    frame = _series(rng, 3000, gaps=1)
    right = _series(rng, 3000, gaps=2, null_times=0.02)
    _stream(ws, "s", _write(tmp_path / "s", frame, "csv"), "csv")
    _stream(ws, "r", _write(tmp_path / "r", right, "csv", ("rts", "w", "q", "s")), "csv",
            time="rts", value="w")
    ws.spark.conf.set("wavesql.temporal.parallel", "true")
    ws.spark.conf.set("wavesql.temporal.min_rows", "0")
    ws.spark.conf.set("wavesql.temporal.chunk_rows", "400")
    try:
        resample = ws.sql("SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'prev')")
        asof = ws.sql("SELECT t.ts, t.v, t.q, t.s, q.rts, q.w, q.q AS rq, q.s AS rs "
                      "FROM s t ASOF LEFT JOIN r q ON t.ts >= q.rts")
        (tmp_path / "s").rename(tmp_path / "s-gone")
        (tmp_path / "r").rename(tmp_path / "r-gone")
        for df, marker in ((resample, "resample_chunks"), (asof, "asof_chunks")):
            plan = df._jdf.queryExecution().executedPlan().toString()
            assert marker in plan and "FileScan" not in plan, plan
        got_r, got_a = _pandas(resample), _pandas(asof)
    finally:
        for key in ("min_rows", "chunk_rows", "parallel"):
            ws.spark.conf.unset(f"wavesql.temporal.{key}")
    _same(got_r, _resample_oracle(frame, 5 * MS, "prev"), ["ts"])
    want = _asof_oracle(frame, right, "backward", True, True)
    want.columns = got_a.columns
    for f in (got_a, want):
        for c in ("ts", "rts", "q", "rq"):
            f[c] = f[c].astype("Int64")
    key = list(got_a.columns)
    _same(got_a.fillna({"v": -1e9}), want.fillna({"v": -1e9}), key)


def test_too_few_rows_leave_the_sql_reading_the_held_copy(ws, tmp_path):
    """Under wavesql.temporal.min_rows the SQL runs, over the copy the estimate filled (the
    input is not read again)."""
    rng = np.random.default_rng(8)
    frame = _series(rng, 800)
    _stream(ws, "s", _write(tmp_path / "s", frame, "csv"), "csv")
    ws.spark.conf.set("wavesql.temporal.parallel", "true")
    try:
        df = ws.sql("SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'linear')")
        (tmp_path / "s").rename(tmp_path / "s-gone")
        plan = df._jdf.queryExecution().executedPlan().toString()
        assert "resample_chunks" not in plan and "FileScan" not in plan, plan
        got = _pandas(df)
    finally:
        ws.spark.conf.unset("wavesql.temporal.parallel")
    want = _resample_oracle(frame, 5 * MS, "linear").astype({"q": "float64"})
    _same(got, want, ["ts"])


def _parquet(folder, frame, names=("ts", "v", "q", "s")):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir()
    table = pa.table({
        names[0]: pa.array([None if pd.isna(x) else int(x) for x in frame["t"]], pa.int64())
        .cast(pa.timestamp("us", tz="UTC")),
        names[1]: pa.array([None if pd.isna(x) else float(x) for x in frame["v"]], pa.float64()),
        "q": pa.array([None if pd.isna(x) else int(x) for x in frame["q"]], pa.int32()),
        "s": pa.array(list(frame["s"]), pa.string())})
    pq.write_table(table, folder / "part-0.parquet", row_group_size=700)
    return folder


@pytest.mark.parametrize("null_times", [0, 0.01])
def test_parquet_inputs_estimate_from_their_footers(ws, tmp_path, monkeypatch, null_times):
    """A Parquet stream read as it is: the estimate comes from the files' footers (no job;
    with NULL times the footers cannot say, and the job runs), and the summaries and the
    pass read the files themselves (no copy held)."""
    from wavesql.planner.physical.temporal_inputs import HeldInputs

    footers = []
    original = HeldInputs.footer

    def footer(self, *args, **kw):
        footers.append(original(self, *args, **kw))
        return footers[-1]

    monkeypatch.setattr(HeldInputs, "footer", footer)
    rng = np.random.default_rng(31)
    frame = _series(rng, 3000, gaps=1, null_times=null_times)
    right = _series(rng, 3000, gaps=2, null_times=null_times)
    right["t"] = right["t"] - 3 * MS
    for name, f, names, time, value in (("s", frame, ("ts", "v", "q", "s"), "ts", "v"),
                                        ("r", right, ("rts", "w", "q", "s"), "rts", "w")):
        _stream(ws, name, _parquet(tmp_path / name, f, names), "parquet", time=time,
                value=value)
    # a string column: the direct RESAMPLE (direct_resample.py) refuses it
    got, _ = _run(ws, "SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'linear')",
                  "resample_chunks", compare=False)
    want = _resample_oracle(frame, 5 * MS, "linear").astype({"q": "float64"})
    _same(got, want, ["ts"])
    sql = ("SELECT t.ts, t.v, t.q, t.s, q.rts, q.w, q.q AS rq, q.s AS rs FROM s t "
           "ASOF JOIN r q ON t.ts > q.rts")
    got, _ = _run(ws, sql, "asof_chunks", compare=False)
    want = _asof_oracle(frame, right, "backward", False, False)
    want.columns = got.columns
    for f in (got, want):
        for c in ("ts", "rts", "q", "rq"):
            f[c] = f[c].astype("Int64")
    _same(got.fillna({"v": -1e9}), want.fillna({"v": -1e9}), list(got.columns))
    assert len(footers) == 2
    assert all((f is None) == bool(null_times) for f in footers), footers
    if not null_times:
        n = int(frame["t"].notna().sum())
        assert footers[0][:3] == (n, int(frame["t"].min()), int(frame["t"].max()))
        assert footers[0][3] is True  # v holds NULLs
    ws.spark.conf.set("wavesql.temporal.parallel", "true")
    ws.spark.conf.set("wavesql.temporal.min_rows", "0")
    try:
        plan = ws.sql(sql)._jdf.queryExecution().executedPlan().toString()
    finally:
        ws.spark.conf.unset("wavesql.temporal.parallel")
        ws.spark.conf.unset("wavesql.temporal.min_rows")
    assert "FileScan parquet" in plan and "ExistingRDD" not in plan, plan


def test_linear_holes_where_a_null_wins_the_edge_time(ws, tmp_path, monkeypatch):
    """'linear' with a column whose value at a chunk's edge time loses its tie to a row
    holding NULL there (the SQL sees a hole): the context search goes on through the
    bucket and the ones before / after it, one small job a round. Every third time has a
    second row that wins (greater v) with q NULL."""
    from wavesql.planner.physical import chunked_temporal as ct

    fetched = []
    original = ct._winners

    def winners(rows, time_col, condition):
        fetched.append(str(condition))
        return original(rows, time_col, condition)

    monkeypatch.setattr(ct, "_winners", winners)
    rng = np.random.default_rng(17)
    frame = _series(rng, 3000, gaps=1, null_times=0)
    shadow = frame[frame.index % 3 == 0].copy()
    shadow["v"] = shadow["v"].fillna(0.0) + 100.0
    shadow["q"] = pd.NA
    both = pd.concat([frame, shadow], ignore_index=True).sample(frac=1.0, random_state=3)
    _stream(ws, "s", _write(tmp_path / "s", both, "csv"), "csv")
    sql = "SELECT * FROM RESAMPLE(s, ts, INTERVAL 5 MILLISECONDS, 'linear')"
    got, sql_rows = _run(ws, sql, "resample_chunks")
    want = _resample_oracle(both, 5 * MS, "linear").astype({"q": "float64"})
    _same(got, want, ["ts"])
    _same(got, sql_rows, ["ts"])
    assert any("floor" in f for f in fetched), fetched  # a bucket searched
