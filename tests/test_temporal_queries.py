"""RESAMPLE and ASOF JOIN through the WaveSQL front end (the SQL builders themselves are
tested in tests/test_temporal.py): results against numpy/pandas, errors with positions."""

from __future__ import annotations

import os
import time

import numpy as np
import pandas as pd
import pytest

from tests import temporal_oracle as oracle
from wavesql.errors import WaveSQLError

MS = 1000


def _write(ws, tmp_path, name, frame, columns):
    folder = tmp_path / name
    folder.mkdir()
    frame = frame.copy()
    frame["ts"] = pd.to_datetime(frame["ts"], unit="us").astype("datetime64[us]")
    frame.to_parquet(folder / "part.parquet")
    ws.sql(f"CREATE STREAM {name} ({columns}, ts TIMESTAMP) FROM '{folder}' FORMAT parquet "
           "EVENT TIME ts")


@pytest.fixture
def ticks(ws, tmp_path):
    rng = np.random.default_rng(4)
    ts = np.sort(rng.choice(np.arange(0, 400 * MS, 1000), 120, replace=False))
    frame = pd.DataFrame({"v": rng.normal(size=len(ts)), "ts": ts})
    _write(ws, tmp_path, "ticks", frame, "v DOUBLE")
    return frame


def _us(series):
    return series.astype("datetime64[us]").astype("int64").to_numpy()


@pytest.mark.parametrize("period_ms", [3, 4, 5, 6])
def test_resample_linear_is_numpy_interp(ws, ticks, period_ms):
    got = ws.sql(f"SELECT ts, v FROM RESAMPLE(ticks, ts, INTERVAL {period_ms} MILLISECONDS, "
                 "'linear') r ORDER BY ts").toPandas()
    p = period_ms * MS
    grid = np.arange(-(-ticks.ts.min() // p) * p, ticks.ts.max() + 1, p)
    np.testing.assert_array_equal(_us(got.ts), grid)
    np.testing.assert_allclose(got.v, np.interp(grid, ticks.ts, ticks.v), rtol=1e-12, atol=1e-12)


def test_resample_prev_holds_the_last_value(ws, ticks):
    got = ws.sql("SELECT ts, v FROM RESAMPLE(ticks, ts, INTERVAL 7 MILLISECONDS, 'prev') r "
                 "ORDER BY ts").toPandas()
    grid = _us(got.ts)
    index = np.searchsorted(ticks.ts.to_numpy(), grid, side="right") - 1
    np.testing.assert_array_equal(got.v.to_numpy(), ticks.v.to_numpy()[index])


def test_an_unknown_column_over_an_asof_join_proposes_the_user_s_names(ws, tmp_path):
    """Found by the fuzzer: Spark's proposal named the columns after the relation the ASOF
    join is lowered to (``__wavesql_asof_0``.``sym``), a name the user never wrote."""
    from wavesql.errors import WaveSQLError

    frame = pd.DataFrame({"sym": ["a"], "px": [1.0], "ts": [0]})
    _write(ws, tmp_path, "trades", frame, "sym STRING, px DOUBLE")
    _write(ws, tmp_path, "quotes", frame.rename(columns={"px": "bid"}), "sym STRING, bid DOUBLE")
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT d.t_from, t.px FROM trades t ASOF JOIN quotes q "
               "ON t.sym = q.sym AND t.ts >= q.ts")
    assert err.value.code == "UNKNOWN_COLUMN" and "t_from" in err.value.message
    assert err.value.hint and "__wavesql_" not in err.value.hint, err.value.hint
    assert "px" in err.value.hint or "bid" in err.value.hint


def test_asof_join_is_pandas_merge_asof(ws, tmp_path):
    rng = np.random.default_rng(9)
    trades = pd.DataFrame({"sym": rng.choice(list("abc"), 200), "px": rng.random(200),
                           "ts": rng.choice(np.arange(0, 10**7, 100), 200, replace=False)})
    quotes = pd.DataFrame({"sym": rng.choice(list("abc"), 150), "bid": rng.random(150),
                           "ts": rng.choice(np.arange(0, 10**7, 100), 150, replace=False)})
    _write(ws, tmp_path, "trades", trades, "sym STRING, px DOUBLE")
    _write(ws, tmp_path, "quotes", quotes, "sym STRING, bid DOUBLE")
    got = ws.sql("SELECT t.sym, t.px, t.ts, q.bid FROM trades t ASOF LEFT JOIN quotes q "
                 "ON t.sym = q.sym AND t.ts >= q.ts").toPandas()
    want = pd.merge_asof(trades.sort_values("ts"), quotes.sort_values("ts"), on="ts", by="sym",
                         direction="backward")
    got = got.assign(ts=_us(got.ts)).sort_values("ts").reset_index(drop=True)
    want = want.sort_values("ts").reset_index(drop=True)
    np.testing.assert_array_equal(got.ts, want.ts)
    np.testing.assert_array_equal(got.sym, want.sym)
    np.testing.assert_allclose(got.bid.to_numpy(dtype=float), want.bid.to_numpy(dtype=float))
    inner = ws.sql("SELECT * FROM trades t ASOF JOIN quotes q ON t.sym = q.sym AND t.ts >= q.ts")
    assert inner.count() == want.bid.notna().sum()
    assert inner.columns == ["sym", "px", "ts", "sym", "bid", "ts"]


@pytest.mark.parametrize("method", ["linear", "prev"])
def test_resample_per_key_is_numpy_per_series(ws, tmp_path, method):
    """``PARTITION BY``: each device is a series with its own span, resampled alone (numpy
    interp / hold per device); the key column is kept, the grid never crosses devices."""
    rng = np.random.default_rng(12)
    frames = []
    for dev, (lo, hi) in {"d1": (0, 300), "d2": (100, 500), "d3": (250, 260)}.items():
        ts = np.sort(rng.choice(np.arange(lo * MS, hi * MS, 1000), 40 if hi - lo > 50 else 3,
                                replace=False))
        frames.append(pd.DataFrame({"dev": dev, "v": rng.normal(size=len(ts)), "ts": ts}))
    data = pd.concat(frames).sample(frac=1, random_state=1)
    _write(ws, tmp_path, "meters", data, "dev STRING, v DOUBLE")
    got = ws.sql(f"SELECT * FROM RESAMPLE(meters, ts, INTERVAL 7 MILLISECONDS, '{method}' "
                 "PARTITION BY dev) r").toPandas()
    assert list(got.columns) == ["dev", "v", "ts"]
    p = 7 * MS
    for dev, series in data.sort_values("ts").groupby("dev"):
        mine = got[got.dev == dev].assign(ts=lambda f: _us(f.ts)).sort_values("ts")
        t, v = series.ts.to_numpy(), series.v.to_numpy()
        grid = np.arange(-(-t.min() // p) * p, t.max() + 1, p)
        np.testing.assert_array_equal(mine.ts.to_numpy(), grid)
        want = (np.interp(grid, t, v) if method == "linear"
                else v[np.searchsorted(t, grid, side="right") - 1])
        np.testing.assert_allclose(mine.v.to_numpy(), want, rtol=1e-12, atol=1e-12)
    assert set(got.dev) == {"d1", "d2", "d3"}


@pytest.mark.parametrize("sql, code, at", [
    ("SELECT * FROM RESAMPLE(ticks, ts, INTERVAL 5 MILLISECONDS, 'cubic') r",
     "INVALID_OPTION", "'cubic'"),
    ("SELECT * FROM RESAMPLE(ticks, ts, INTERVAL 5 MILLISECONDS PARTITION BY dev) r",
     "UNKNOWN_COLUMN", "dev"),
    ("SELECT * FROM RESAMPLE(ticks, ts, INTERVAL 5 MILLISECONDS PARTITION BY ts) r",
     "INVALID_OPTION", "ts"),
    ("SELECT * FROM RESAMPLE(ticks, tz, INTERVAL 5 MILLISECONDS, 'linear') r",
     "UNKNOWN_COLUMN", "tz"),
    ("SELECT * FROM ticks a ASOF JOIN ticks b ON a.ts >= b.ts AND a.ts <= b.ts",
     "INVALID_OPTION", "a.ts <= b.ts"),
])
def test_temporal_errors_point_at_the_mistake(ws, ticks, sql, code, at):
    with pytest.raises(WaveSQLError) as err:
        ws.sql(sql)
    assert err.value.code == code
    span = err.value.span
    assert span is not None and sql[span.start:span.end].startswith(at.split()[0])


def _micros(value) -> float:
    """A timestamp Spark returned, as microseconds since 1970."""
    return (value - pd.Timestamp(0).to_pydatetime()).total_seconds() * 1e6


def _ts(micros):
    """Microseconds since 1970 as the datetime Spark returns for a TIMESTAMP."""
    return pd.Timestamp(int(micros), unit="us").to_pydatetime()


def _points(rows, key=None):
    """Spark rows ``(key?, ts, values...)`` as ``{(key, micros): values}``."""
    out = {}
    for r in rows:
        r = tuple(r)
        k, rest = (r[0], r[1:]) if key else (None, r)
        out[(k, int(round(_micros(rest[0]))))] = rest[1:]
    return out


def _continuous(ws, tmp_path, sql):
    """Run ``sql`` continuously over the files already there, one file per micro-batch, to
    the end; the ContinuousQuery (its ``reports``, ``progress_us``)."""
    q = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1,
                  clock=lambda: 0.0)
    q.await_termination()
    return q


def _trades_and_quotes(ws, tmp_path, rng, trades, quotes):
    """Both as catalog streams arriving in 6 files each, out of order within 2 s."""
    for name, frame, cols in (("trades", trades, "sym STRING, px DOUBLE"),
                              ("quotes", quotes, "sym STRING, bid DOUBLE")):
        _arriving(tmp_path / name, frame, 6, rng, 2 * 10**6)
        ws.sql(f"CREATE STREAM {name} ({cols}, ts TIMESTAMP) FROM '{tmp_path / name}' "
               "FORMAT parquet EVENT TIME ts WATERMARK 3 SECONDS")


def _arriving(folder, frame, parts, rng, spread_us):
    """``frame`` as ``parts`` files in rough time order, shuffled within each file and by up
    to ``spread_us`` across files."""
    folder.mkdir()
    order = np.argsort(frame.ts.to_numpy() + rng.integers(0, spread_us, len(frame)))
    frame = frame.iloc[order].copy()
    frame["ts"] = pd.to_datetime(frame["ts"], unit="us").astype("datetime64[us]")
    edges = np.linspace(0, len(frame), parts + 1).astype(int)
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        path = folder / f"p{i:02d}.parquet"
        frame.iloc[lo:hi].sample(frac=1, random_state=i).to_parquet(path)
        _arrived(path, i)


def _arrived(path, i: int) -> None:
    """Spark takes files by modification time: make it the arrival order (``i``-th)."""
    stamp = time.time() - 3600 + i
    os.utime(path, (stamp, stamp))


# The continuous tests below compare with the batch query; each starts a state-store query
# several times (10-60 s). CI runs one case of each; the others are `slow`. The state-store
# kernels are checked against pandas for every method, keying and direction, batch by batch,
# in tests/test_stateful_resample.py and tests/test_stateful_asof.py.
@pytest.mark.parametrize("kind, op", [("ASOF LEFT JOIN", ">="),
                                      pytest.param("ASOF JOIN", ">", marks=pytest.mark.slow)])
def test_continuous_asof_join_equals_the_batch_join(ws, spark, tmp_path, kind, op):
    """Trades and quotes arrive in 6 files each, out of order within the watermark: every
    trade the quotes' progress has passed is delivered once, final, with the batch join's
    match; the later trades wait; the state stays far below the input.
    Oracle: pandas.merge_asof over the rows written, plus the batch join."""
    rng = np.random.default_rng(len(kind) + len(op))
    n_t, n_q = 300, 400
    trades = pd.DataFrame({"sym": rng.choice(list("abc"), n_t), "px": rng.random(n_t),
                           "ts": rng.choice(np.arange(0, 120 * 10**6, 1000), n_t,
                                            replace=False)})
    quotes = pd.DataFrame({"sym": rng.choice(list("abc"), n_q), "bid": rng.random(n_q),
                           "ts": rng.choice(np.arange(0, 120 * 10**6, 1000), n_q,
                                            replace=False)})
    _trades_and_quotes(ws, tmp_path, rng, trades, quotes)
    sql = (f"SELECT t.sym, t.px, t.ts, q.bid FROM trades t {kind} quotes q "
           f"ON t.sym = q.sym AND t.ts {op} q.ts")
    q = _continuous(ws, tmp_path, sql)
    reports = q.reports
    assert len(reports) >= 6 and sum(r.late for r in reports) == 0
    done = reports[-1].inputs["quotes"]  # the quotes' final progress (us)
    got = spark.read.parquet(str(tmp_path / "out")).select("sym", "px", "ts", "bid")
    got = sorted(map(tuple, got.collect()), key=str)
    batch = [r for r in ws.sql(sql).collect()
             if _micros(r.ts) < done]
    assert got == sorted(map(tuple, batch), key=str)  # the two modes agree
    m = oracle.asof(trades, quotes, "sym", "backward", op == ">=")
    m = m[m.ts < done]
    if kind == "ASOF JOIN":
        m = m[m.bid.notna()]
    want = sorted(((s, p, _ts(t), None if pd.isna(b) else b)
                   for s, p, t, b in zip(m.sym, m.px, m.ts, m.bid)), key=str)
    assert got == want and len(want) > 100
    waiting = int((trades.ts >= done).sum())
    assert waiting > 0  # the trades the quotes have not passed yet wait, not lost
    # state: waiting trades + recent quotes (and the last one before them per symbol)
    assert max(r.buffered for r in reports) < 0.25 * (n_t + n_q)


@pytest.mark.parametrize("method", ["null"] + [pytest.param(m, marks=pytest.mark.slow)
                                                for m in ("linear", "prev", "zero")])
def test_continuous_resample_equals_the_batch_resample(ws, spark, tmp_path, method):
    """An irregular stream (with NULL holes) arrives in 6 files, out of order within the
    watermark: every grid point is delivered once, final, with the batch value, up to the
    progress the last batch reports; state stays far below the input.
    Oracle: numpy (tests/temporal_oracle.py: np.interp, hold, bucket) over the rows
    written, plus the batch RESAMPLE."""
    rng = np.random.default_rng(len(method))
    n = 300
    ts = np.sort(rng.choice(np.arange(0, 60 * 10**6, 1000), n, replace=False))
    v = rng.normal(size=n)
    v[rng.random(n) < 0.1] = np.nan  # NULL holes, interpolated across by 'linear'
    frame = pd.DataFrame({"v": v, "w": rng.integers(0, 9, n).astype(float), "ts": ts})
    frame["v"] = frame["v"].astype(object).where(frame["v"].notna(), None)
    _arriving(tmp_path / "ticks", frame, 6, rng, 10**6)
    ws.sql(f"CREATE STREAM ticks (v DOUBLE, w DOUBLE, ts TIMESTAMP) FROM '{tmp_path / 'ticks'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    sql = f"SELECT ts, v, w FROM RESAMPLE(ticks, ts, INTERVAL 250 MILLISECONDS, '{method}') r"
    q = _continuous(ws, tmp_path, sql)
    reports = q.reports
    assert len(reports) >= 6 and sum(r.late for r in reports) == 0
    done = reports[-1].progress_us
    got = spark.read.parquet(str(tmp_path / "out"))
    assert got.where("NOT _final").count() == 0
    got = sorted(map(tuple, got.select("ts", "v", "w").collect()))
    batch = sorted(tuple(r) for r in ws.sql(sql).collect()
                   if _micros(r.ts) < done)
    assert got == batch  # the two modes agree
    want = {p: v for p, v in oracle.resample(frame, 250 * MS, method, ("v", "w")).items()
            if p[1] < done}
    oracle.assert_same_points(_points(got), want)
    assert len(want) > 150
    assert done > 50 * 10**6  # most of the grid is final by the end
    assert max(r.buffered for r in reports) < 0.3 * n


@pytest.mark.parametrize("kind, op", [pytest.param("ASOF LEFT JOIN", "<=", marks=pytest.mark.slow),
                                      ("ASOF JOIN", "<")])
def test_continuous_forward_asof_join_equals_the_batch_join(ws, spark, tmp_path, kind, op):
    """A forward ASOF JOIN (each trade with the first quote at or after it) over trades and
    quotes arriving out of order: a trade is delivered, final, once a quote of its symbol
    after it is below the quotes' progress -- exactly the batch join's rows whose match is
    below that progress; the others wait (a LEFT join's NULL match is never final while the
    quotes go on); the state stays far below the input.
    Oracle: pandas.merge_asof (forward) over the rows written, plus the batch join."""
    rng = np.random.default_rng(len(kind) + len(op) + 1)
    n_t, n_q = 300, 400
    trades = pd.DataFrame({"sym": rng.choice(list("abc"), n_t), "px": rng.random(n_t),
                           "ts": rng.choice(np.arange(0, 120 * 10**6, 1000), n_t,
                                            replace=False)})
    quotes = pd.DataFrame({"sym": rng.choice(list("abcd"), n_q, p=[0.3, 0.3, 0.38, 0.02]),
                           "bid": rng.random(n_q),
                           "ts": rng.choice(np.arange(0, 120 * 10**6, 1000), n_q,
                                            replace=False)})
    quotes.loc[quotes.sym == "c", "ts"] %= 80 * 10**6  # no quote for c after 80 s: c waits
    quotes = quotes.drop_duplicates("ts")
    # trades without a symbol match nothing, ever: final at once (LEFT: with NULL)
    trades.loc[[5, 150, 290], "sym"] = None
    _trades_and_quotes(ws, tmp_path, rng, trades, quotes)
    sql = (f"SELECT t.sym, t.px, t.ts, q.bid, q.ts AS qts FROM trades t {kind} quotes q "
           f"ON t.sym = q.sym AND t.ts {op} q.ts")
    q = _continuous(ws, tmp_path, sql)
    reports = q.reports
    assert len(reports) >= 6 and sum(r.late for r in reports) == 0
    done = reports[-1].inputs["quotes"]
    got = spark.read.parquet(str(tmp_path / "out")).select("sym", "px", "ts", "bid", "qts")
    batch = ws.sql(sql).collect()
    want = [r for r in batch if (r.qts is not None and _micros(r.qts) < done) or r.sym is None]
    assert sorted(map(tuple, got.collect()), key=str) == sorted(map(tuple, want), key=str)
    m = oracle.asof(trades, quotes, "sym", "forward", op == "<=")
    m = m[(m.rts < done) | m.sym.isna()]
    if kind == "ASOF JOIN":
        m = m[m.rts.notna()]
    nullable = lambda x, f: None if pd.isna(x) else f(x)  # noqa: E731
    pandas_rows = sorted(((None if pd.isna(s) else s, p, _ts(t), nullable(b, float),
                           nullable(r, _ts)) for s, p, t, b, r in
                          zip(m.sym, m.px, m.ts, m.bid, m.rts)), key=str)
    assert sorted(map(tuple, got.collect()), key=str) == pandas_rows
    assert len(want) > 100 and len([r for r in want if r.sym is None]) == (
        3 if kind == "ASOF LEFT JOIN" else 0)
    # the rest wait: c's trades after its last quote, and the latest trades
    assert ((trades.sym == "c") & (trades.ts > 80 * 10**6)).sum() > 5
    assert not [r for r in got.collect() if r.sym == "c" and _micros(r.ts) > 80 * 10**6]
    assert len(want) < len(batch) if kind == "ASOF LEFT JOIN" else len(want) < n_t
    # state: the waiting trades (c's after 80 s, ~30, and the latest) and the quotes from
    # the smaller progress on -- not every quote since the oldest waiting trade
    assert reports[-1].buffered < 0.1 * (n_t + n_q)


def test_continuous_resample_does_not_finalise_past_its_last_row(ws, spark, tmp_path):
    """Punctuation can promise progress past a stream's last row. The grid points after
    that row exist only if a later row comes (a series spans its first to its last row), so
    they are not final yet: once rows at 40-50 s come, the points 11-39 s are delivered too,
    as the batch RESAMPLE has them.
    Oracle: hand-computed (v = t up to 10 s, held at 10 from 11 s to 39 s, t from 40 s)."""
    folder = tmp_path / "ticks"
    folder.mkdir()
    parts = [pd.DataFrame({"v": np.arange(11.0), "ts": np.arange(11) * 10**6, "punct": None}),
             pd.DataFrame({"v": [None], "ts": [10 * 10**6], "punct": [30 * 10**6]}),
             pd.DataFrame({"v": np.arange(40.0, 51.0), "ts": np.arange(40, 51) * 10**6,
                           "punct": None})]
    for i, frame in enumerate(parts):
        frame = frame.astype({"v": "float64", "punct": "float64"})
        for col in ("ts", "punct"):
            frame[col] = pd.to_datetime(frame[col], unit="us").astype("datetime64[us]")
        frame.to_parquet(folder / f"p{i}.parquet")
        _arrived(folder / f"p{i}.parquet", i)
    ws.sql(f"CREATE STREAM ticks (v DOUBLE, ts TIMESTAMP, punct TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND PROGRESS COLUMN punct")
    sql = "SELECT ts, v FROM RESAMPLE(ticks, ts, INTERVAL 1 SECOND, 'prev') r"
    q = _continuous(ws, tmp_path, sql)
    done = q.reports[-1].progress_us
    got = sorted(map(tuple, spark.read.parquet(str(tmp_path / "out")).select("ts", "v")
                     .collect()))
    want = sorted(tuple(r) for r in ws.sql(sql).collect()
                  if _micros(r.ts) < done)
    assert done >= 49 * 10**6 and len(want) == 49  # 0 .. 48 s
    assert got == want
    assert got == [(_ts(t * 10**6), float(t if t <= 10 or t >= 40 else 10))
                   for t in range(49)]


def _meters(rng, devices, holes: float) -> pd.DataFrame:
    """Rows ``(dev, v, w, ts)`` of each ``(dev, times)`` device (``times()`` draws its
    microseconds), ``v`` and ``w`` normal with a ``holes`` share of NaN each."""
    frames = []
    for dev, times in devices:
        ts = np.sort(times())
        v, w = rng.normal(size=len(ts)), rng.normal(size=len(ts))
        v[rng.random(len(ts)) < holes] = np.nan
        w[rng.random(len(ts)) < holes] = np.nan
        frames.append(pd.DataFrame({"dev": dev, "v": v, "w": w, "ts": ts}))
    return pd.concat(frames, ignore_index=True)


def _meters_stream(ws, tmp_path, rng, frame: pd.DataFrame, parts: int) -> None:
    """``frame`` (NaN as NULL) arriving in ``parts`` files as the catalog stream ``meters``."""
    frame = frame.copy()
    for col in ("v", "w"):
        frame[col] = frame[col].astype(object).where(frame[col].notna(), None)
    _arriving(tmp_path / "meters", frame, parts, rng, 10**6)
    ws.sql(f"CREATE STREAM meters (dev STRING, v DOUBLE, w DOUBLE, ts TIMESTAMP) FROM "
           f"'{tmp_path / 'meters'}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")


@pytest.mark.parametrize("method", ["linear"] + [pytest.param(m, marks=pytest.mark.slow)
                                                  for m in ("prev", "zero")])
def test_continuous_resample_per_key_equals_the_batch_resample(ws, spark, tmp_path, method):
    """``PARTITION BY dev``: three devices arrive in 6 files, out of order within the
    watermark; one stops reporting at 20 s. Every device's points are delivered once, final,
    as the batch RESAMPLE has them, up to the stream's progress; the stopped device holds
    back ``_progress`` (its later points would come with its next row), not the others'
    rows; state stays small. ``'linear'``: two columns with holes in different places, one
    of them (``w``) missing for a long stretch of d2 -- d2's points after its last ``w``
    wait for the next ``w``, and the rows in between must stay in the state (they carry
    ``v``'s values for those points).
    Oracle: numpy per device (tests/temporal_oracle.py) over the rows written, plus the
    batch RESAMPLE."""
    rng = np.random.default_rng(len(method) + 7)

    def until(end):
        return lambda: rng.choice(np.arange(0, end * 10**6, 1000), 120 if end == 60 else 40,
                                  replace=False)

    frame = _meters(rng, [("d1", until(60)), ("d2", until(60)), ("d3", until(20)),
                          (None, until(60))], holes=0.1)  # NULL: a key too
    frame.loc[(frame.dev == "d2") & (frame.ts > 25 * 10**6) & (frame.ts < 45 * 10**6),
              "w"] = np.nan
    _meters_stream(ws, tmp_path, rng, frame, 6)
    sql = (f"SELECT dev, ts, v, w FROM RESAMPLE(meters, ts, INTERVAL 250 MILLISECONDS, "
           f"'{method}' PARTITION BY dev) r")
    q = _continuous(ws, tmp_path, sql)
    reports = q.reports
    assert len(reports) >= 6 and sum(r.late for r in reports) == 0
    stream = reports[-1].inputs["meters"]  # the stream's own progress
    last = {d: int(f.ts.max()) for d, f in frame.groupby("dev", dropna=False)}
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.where("NOT _final").count() == 0
    got = sorted(map(tuple, out.select("dev", "ts", "v", "w").collect()), key=str)
    batch = ws.sql(sql).collect()
    # each device's points up to its own bound: the stream's progress, just past its last
    # row and ('linear') just past each column's last value below that progress
    bound = {}
    for d, f in frame.groupby("dev", dropna=False):
        ends = [int(f.ts.max())] + ([int(f.ts[f[c].notna() & (f.ts < stream)].max())
                                     for c in ("v", "w")] if method == "linear" else [])
        bound[None if pd.isna(d) else d] = min([stream] + [e + 1 for e in ends])
    want = sorted((tuple(r) for r in batch if _micros(r.ts) < bound[r.dev]), key=str)
    assert got == want
    points = oracle.resample(frame, 250 * MS, method, ("v", "w"), key="dev")
    oracle.assert_same_points(_points(got, key=True),
                              {p: v for p, v in points.items() if p[1] < bound[p[0]]})
    assert {r[0] for r in got} == {"d1", "d2", "d3", None} and stream > 50 * 10**6
    # _progress: the stalest device's bound (every point below it is there): just past the
    # stopped device's last row, or its last value
    assert q.progress_us == reports[-1].progress_us == min(bound.values())
    assert min(bound.values()) <= last["d3"] + 1
    assert {r[0] for r in out.select("_progress").collect()} <= {
        pd.Timestamp(p, unit="us").to_pydatetime() for p in
        [r.progress_us for r in reports if r.progress_us is not None]}
    assert max(r.buffered for r in reports) < 0.3 * len(frame)


@pytest.mark.parametrize("method", ["prev", pytest.param("linear", marks=pytest.mark.slow)])
def test_continuous_imputation_per_key_equals_the_batch_query(ws, spark, tmp_path, method):
    """TiLT's imputation per device: a RESAMPLE ``PARTITION BY dev`` joined to each device's
    10 s bucket means, continuously. d3 pauses from 20 s to 40 s: its grid spans the pause
    once its row at 40 s has come (the batch query has those points), so the buckets of
    the pause wait for it -- every final row equals the batch query's row, none is missing;
    the final progress is the stalest device's bound.
    Oracle: numpy/pandas (temporal_oracle.impute) over the rows written, plus the batch
    query."""
    rng = np.random.default_rng(len(method) + 11)

    def spans(*ranges):
        return lambda: np.concatenate([rng.choice(np.arange(lo * 10**6, hi * 10**6, 1000),
                                                  (hi - lo) * 2, replace=False)
                                       for lo, hi in ranges])

    frame = _meters(rng, [("d1", spans((0, 60))), ("d2", spans((0, 60))),
                          ("d3", spans((0, 20), (40, 60)))], holes=0.15)
    _meters_stream(ws, tmp_path, rng, frame, 8)
    sql = f"""
        WITH grid AS (
          SELECT dev, ts, v, w FROM RESAMPLE(meters, ts, INTERVAL 500 MILLISECONDS,
                                             '{method}' PARTITION BY dev)
        ), buckets AS (
          SELECT _time, dev, avg(v) AS mv, avg(w) AS mw
          FROM meters [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY dev
        )
        SELECT g._time, g.dev, g.ts, coalesce(g.v, b.mv) AS v, coalesce(g.w, b.mw) AS w
        FROM (SELECT timestamp_micros(unix_micros(ts) + pmod(-unix_micros(ts), 10000000))
                     AS _time, dev, ts, v, w FROM grid) g
        LEFT JOIN buckets b ON b._time = g._time AND b.dev = g.dev"""
    q = _continuous(ws, tmp_path, sql)
    reports = q.reports
    assert len(reports) == 8 and sum(r.late for r in reports) == 0
    stream = reports[-1].inputs["meters"]
    # the final progress: the stream's, but no later than just past each device's last row
    # (and, 'linear', its columns' last values below the stream's progress)
    bound = stream
    for _, f in frame.groupby("dev"):
        ends = [int(f.ts.max())] + ([int(f.ts[f[c].notna() & (f.ts < stream)].max())
                                     for c in ("v", "w")] if method == "linear" else [])
        bound = min([bound] + [e + 1 for e in ends])
    assert q.progress_us == bound and bound > 50 * 10**6
    # while d3 paused, progress stayed at its last row before the pause
    pause = int(frame[(frame.dev == "d3") & (frame.ts < 20 * 10**6)].ts.max())
    assert any(r.progress_us is not None and r.progress_us <= pause + 1 for r in reports)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.where("NOT _final").count() == 0
    key = lambda r: (r[0], r[1], r[2])  # noqa: E731
    got = sorted(map(tuple, out.select("_time", "dev", "ts", "v", "w").collect()), key=key)
    want = sorted((tuple(r) for r in ws.sql(sql).collect() if _micros(r._time) < bound),
                  key=key)
    assert len(want) > 200 and [r for r in want if r[1] == "d3" and
                                20 * 10**6 < _micros(r[2]) < 40 * 10**6]
    # the bucket means are sums in another order: equal to rounding
    assert [key(r) for r in got] == [key(r) for r in want]
    for g, w in zip(got, want):
        assert [x is None for x in g[3:]] == [x is None for x in w[3:]]
        assert [x for x in g[3:] if x is not None] == pytest.approx(
            [x for x in w[3:] if x is not None], rel=1e-12, abs=1e-12)
    mine = {(int(round(_micros(r[0]))), r[1], int(round(_micros(r[2])))): r[3:] for r in got}
    imputed = oracle.impute(frame, 500 * MS, method, ("v", "w"), "dev")
    oracle.assert_same_points(mine, {p: v for p, v in imputed.items() if p[0] < bound})


@pytest.mark.parametrize("whole", [pytest.param("before", marks=pytest.mark.slow), "after"])
def test_continuous_imputation_keeps_what_each_resample_needs(ws, spark, tmp_path, whole):
    """Two RESAMPLEs of one stream under windows, one per device and one of the whole
    stream: the state keeps each device's last row before the cut *and* the stream's. d3
    pauses from 20 s to 50 s; after the second file progress is 49 s, the cut 29 s (the
    windows' look-back is 20 s), and the window (40 s, 50 s] is not final yet -- it needs
    d3's row at 20 s, the 'prev' value of its points 40-50 s, though d1's rows are the
    stream's last before the cut.
    Oracle: numpy (tests/temporal_oracle.py) and pandas window counts over the rows
    written, plus the batch query."""
    folder = tmp_path / "meters"
    folder.mkdir()
    files = [  # (dev, v, ts in s)
        [("d1", float(t), t) for t in range(0, 31)] + [("d3", -float(t), t) for t in range(21)],
        [("d1", float(t), t) for t in range(31, 52)] + [("d3", 500.0, 50)],
        [("d1", float(t), t) for t in range(52, 71)] + [("d3", -float(t), t)
                                                         for t in range(51, 71)],
    ]
    for i, rows in enumerate(files):
        frame = pd.DataFrame(rows, columns=["dev", "v", "ts"])
        frame["ts"] = pd.to_datetime(frame["ts"] * 10**6, unit="us").astype("datetime64[us]")
        frame.to_parquet(folder / f"p{i}.parquet")
        _arrived(folder / f"p{i}.parquet", i)
    ws.sql(f"CREATE STREAM meters (dev STRING, v DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    instant = "timestamp_micros(unix_micros(ts) + pmod(-unix_micros(ts), 10000000)) AS _time"
    per_key = (f"SELECT {instant}, dev, ts, v FROM RESAMPLE(meters, ts, INTERVAL 1 SECOND, "
               "'prev' PARTITION BY dev)")
    stream = (f"SELECT {instant}, 'all' AS dev, ts, v FROM RESAMPLE(meters, ts, "
              "INTERVAL 1 SECOND, 'prev')")
    counts = "SELECT _time, 'n' AS dev, max(ts) AS ts, count(*) AS v FROM meters " \
             "[RANGE 10 SECONDS SLIDE 10 SECONDS]"
    parts = [stream, per_key] if whole == "before" else [per_key, stream]
    sql = " UNION ALL ".join(parts + [counts])
    q = _continuous(ws, tmp_path, sql)
    assert [r.progress_us for r in q.reports] == [20 * 10**6 + 1, 49 * 10**6, 68 * 10**6]
    out = spark.read.parquet(str(tmp_path / "out"))
    got = sorted(tuple(r) for r in out.select("_time", "dev", "ts", "v").collect())
    want = sorted(tuple(r) for r in ws.sql(sql).collect()
                  if _micros(r._time) < 68 * 10**6)
    d3 = [r for r in want if r[1] == "d3" and 40 < _micros(r[2]) / 10**6 < 50]
    assert len(d3) == 9 and {r[3] for r in d3} == {-20.0}
    assert got == want
    rows = pd.DataFrame([r for f in files for r in f], columns=["dev", "v", "ts"])
    rows["ts"] *= 10**6
    expect = {}
    for key in ("dev", None):  # per device, then the whole stream ('all')
        for (d, t), (v,) in oracle.resample(rows, 10**6, "prev", ("v",), key=key).items():
            expect[(oracle.bucket(t), d if key else "all", t)] = (v,)
    for b, g in rows.groupby(oracle.bucket(rows.ts)):
        expect[(b, "n", int(g.ts.max()))] = (float(len(g)),)
    mine = {(int(round(_micros(r[0]))), r[1], int(round(_micros(r[2])))): (r[3],)
            for r in got}
    oracle.assert_same_points(mine, {p: v for p, v in expect.items() if p[0] < 68 * 10**6})


def test_continuous_resample_per_key_whatever_the_key_is_called(ws, spark, tmp_path):
    """A key column named like the runner's internal aggregates (``__end...``) is a key,
    not a bound.
    Oracle: numpy per key (tests/temporal_oracle.py), plus the batch RESAMPLE."""
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"__endpoint": rng.choice(["a", "b"], 200), "v": rng.normal(size=200),
                          "ts": np.sort(rng.choice(np.arange(0, 40 * 10**6, 1000), 200,
                                                   replace=False))})
    _arriving(tmp_path / "ends", frame, 4, rng, 10**6)
    ws.sql(f"CREATE STREAM ends (__endpoint STRING, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{tmp_path / 'ends'}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    sql = ("SELECT __endpoint, ts, v FROM RESAMPLE(ends, ts, INTERVAL 500 MILLISECONDS, "
           "'linear' PARTITION BY __endpoint) r")
    q = _continuous(ws, tmp_path, sql)
    done = q.progress_us
    got = sorted(map(tuple, spark.read.parquet(str(tmp_path / "out"))
                     .select("__endpoint", "ts", "v").collect()))
    want = sorted(tuple(r) for r in ws.sql(sql).collect() if _micros(r.ts) < done)
    assert len(want) > 50 and got == want
    points = oracle.resample(frame, 500 * MS, "linear", ("v",), key="__endpoint")
    oracle.assert_same_points(_points(got, key=True),
                              {p: v for p, v in points.items() if p[1] < done})


@pytest.mark.parametrize("sql, code", [
    ("SELECT ts, v FROM RESAMPLE(meters, ts, INTERVAL 1 SECOND, 'prev' PARTITION BY dev) r",
     "STREAMING_RULE"),
    ("SELECT ts, v FROM RESAMPLE(meters, ts, INTERVAL 1 SECOND, 'linear' PARTITION BY dev) r",
     "STREAMING_RULE"),
])
def test_continuous_resample_per_key_rules(ws, tmp_path, sql, code):
    """The keys must stay in a continuous per-key RESAMPLE's result (each key's points are
    final on their own)."""
    _write(ws, tmp_path, "meters", pd.DataFrame({"dev": ["a"], "v": [1.0], "ts": [0]}),
           "dev STRING, v DOUBLE")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == code
