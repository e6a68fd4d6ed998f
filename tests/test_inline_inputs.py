"""RESAMPLE inputs and ASOF JOIN sides may be CTEs and subqueries, not only catalog
objects (issue 21: a language that composes). Oracles: numpy's interp, pandas' merge_asof."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest


@pytest.fixture
def streams(ws, tmp_path):
    rng = np.random.default_rng(6)
    us = np.sort(rng.choice(np.arange(0, 60_000_000, 1000), 300, replace=False))
    trades = pd.DataFrame({"ts": pd.to_datetime(us, unit="us"), "v": rng.normal(10, 1, 300)})
    qus = np.sort(rng.choice(np.arange(0, 60_000_000, 1000), 200, replace=False))
    quotes = pd.DataFrame({"ts": pd.to_datetime(qus, unit="us"), "p": rng.normal(5, 1, 200)})
    for name, frame in (("trades", trades), ("quotes", quotes)):
        (tmp_path / name).mkdir()
        frame.assign(ts=frame.ts.astype("datetime64[us]")).to_parquet(
            tmp_path / name / "a.parquet")
        cols = ", ".join(f"{c} {'TIMESTAMP' if c == 'ts' else 'DOUBLE'}" for c in frame)
        ws.sql(f"CREATE STREAM {name} ({cols}) FROM '{tmp_path / name}' FORMAT parquet "
               "EVENT TIME ts")
    return trades, quotes


@pytest.mark.parametrize("query", [
    "WITH r AS (SELECT ts, v * 2 AS w FROM trades WHERE v > 9) "
    "SELECT * FROM RESAMPLE(r, ts, INTERVAL 1 SECOND, 'linear') x ORDER BY ts",
    "SELECT * FROM RESAMPLE((SELECT ts, v * 2 AS w FROM trades WHERE v > 9), ts, "
    "INTERVAL 1 SECOND, 'linear') x ORDER BY ts",
])
def test_resample_of_a_cte_or_a_subquery(ws, streams, query):
    trades, _ = streams
    got = ws.sql(query).toPandas()
    kept = trades[trades.v > 9]
    t = kept.ts.astype("int64").to_numpy() // 1000  # microseconds
    grid = np.arange(-(-t[0] // 1_000_000) * 1_000_000, t[-1] + 1, 1_000_000)
    want = np.interp(grid, t, kept.v.to_numpy() * 2)
    assert (got.ts.astype("int64").to_numpy() // 1000 == grid).all()
    np.testing.assert_allclose(got.w.to_numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("query", [
    "WITH q AS (SELECT ts, p * 10 AS p FROM quotes) "
    "SELECT l.ts, l.v, q.p FROM (SELECT * FROM trades WHERE v > 10) l "
    "ASOF JOIN q ON l.ts >= q.ts",
    "SELECT l.ts, l.v, q.p FROM (SELECT * FROM trades WHERE v > 10) l "
    "ASOF JOIN (SELECT ts, p * 10 AS p FROM quotes) q ON l.ts >= q.ts",
])
def test_asof_join_of_a_cte_and_a_subquery(ws, streams, query):
    trades, quotes = streams
    got = ws.sql(query).toPandas().sort_values("ts").reset_index(drop=True)
    want = pd.merge_asof(trades[trades.v > 10].sort_values("ts"),
                         quotes.assign(p=quotes.p * 10).sort_values("ts"),
                         on="ts", direction="backward").dropna().reset_index(drop=True)
    assert len(got) == len(want) > 100
    np.testing.assert_allclose(got.p.to_numpy(), want.p.to_numpy(), rtol=1e-12)
    assert (got.ts.to_numpy() == want.ts.to_numpy()).all()


def test_merge_and_zip_of_ctes(ws, streams):
    trades, quotes = streams
    merged = ws.sql("WITH q AS (SELECT ts, p AS v FROM quotes WHERE p > 5) "
                    "SELECT * FROM MERGE(trades, q) m").toPandas()
    kept = quotes[quotes.p > 5]
    assert merged.groupby("_source").size().to_dict() == {"trades": 300, "q": len(kept)}
    assert merged[merged._source == "q"].v.sum() == pytest.approx(kept.p.sum(), rel=1e-12)
    zipped = ws.sql("WITH t AS (SELECT ts, v FROM trades WHERE v > 10) "
                    "SELECT _index, t.v AS tv, quotes.p AS qp FROM ZIP(t, quotes) z "
                    "ORDER BY _index").toPandas()
    left = trades[trades.v > 10].sort_values("ts").v.to_numpy()
    right = quotes.sort_values("ts").p.to_numpy()
    n = min(len(left), len(right))
    assert len(zipped) == n
    np.testing.assert_array_equal(zipped.tv.to_numpy(), left[:n])
    np.testing.assert_array_equal(zipped.qp.to_numpy(), right[:n])


@pytest.mark.parametrize("query", [
    "SELECT t, seg_rms(ch1) AS r FROM (SELECT ch1, start_sample(ch1) AS t "
    "FROM mic [SAMPLES 2000]) s WHERE seg_max(ch1) > 3.2",
    "WITH w AS (SELECT ch1, start_sample(ch1) AS t FROM mic [SAMPLES 2000]) "
    "SELECT w.t, seg_rms(w.ch1) AS r FROM w WHERE seg_max(ch1) > 3.2",
])
def test_signal_functions_over_the_segments_of_a_subquery_or_cte(ws, tmp_path, query):
    from wavesql.udfs.wav import write_wav

    x = np.random.default_rng(0).standard_normal(16000).astype(np.float32)
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "a.wav", x, 8000, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{tmp_path / 'rec'}' FORMAT wav")
    got = {r.t: r.r for r in ws.sql(query).collect()}
    windows = x.astype(np.float64).reshape(8, 2000)
    want = {i * 2000: float(np.sqrt(np.mean(w ** 2))) for i, w in enumerate(windows)
            if w.max() > 3.2}
    assert 0 < len(want) < 8 and got.keys() == want.keys()
    for t in want:
        assert got[t] == pytest.approx(want[t], rel=1e-12)


@pytest.mark.parametrize("source", [
    "(SELECT ch1, start_sample(ch1) AS t FROM mic [SAMPLES 2000]) s",
    "v",
])
def test_a_filter_over_the_segments_of_a_subquery_or_view_equals_scipy(ws, tmp_path, source):
    """A stateful function over segments a subquery or view hands on: one ordered pass,
    equal to scipy's filter over the whole recording (two files, one run); overlapping
    segments are refused, not filtered in a made-up order."""
    import scipy.signal as sps

    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(3)
    x = rng.standard_normal(16000).astype(np.float32)
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "a_0000.wav", x[:9000], 8000, "float32")
    write_wav(tmp_path / "rec" / "b_0001.wav", x[9000:], 8000, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{tmp_path / 'rec'}' FORMAT wav")
    ws.sql("CREATE VIEW v AS SELECT ch1, start_sample(ch1) AS t FROM mic [SAMPLES 2000]")
    rows = ws.sql(f"SELECT t, lowpass(ch1, 500.0) AS y FROM {source}").collect()
    got = np.concatenate([np.asarray(r.y.samples) for r in sorted(rows, key=lambda r: r.t)])
    sos = sps.butter(4, 500.0, btype="low", fs=8000, output="sos")
    np.testing.assert_allclose(got, sps.sosfilt(sos, x.astype(np.float64)), atol=1e-5)
    from wavesql.errors import WaveSQLError
    from wavesql.spark_errors import runtime_errors

    with pytest.raises(WaveSQLError) as err, runtime_errors():
        ws.sql("SELECT lowpass(ch1, 500.0) AS y FROM (SELECT ch1 FROM mic [SAMPLES 2000 "
               "SLIDE 1000]) s").collect()
    assert err.value.code == "STREAMING_RULE" and "overlapping" in err.value.message
