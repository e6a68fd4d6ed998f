"""Batch CQL windows over a view or a FROM subquery whose query is a signal query (issue 21,
item 1): the window's event time is the view's ``start_time(...)`` column, as it is a
CTE's -- a catalog view, a temporary view and a subquery give the CTE's rows.

Oracle: numpy's RMS over each 4096-sample window of the samples the test writes, then
pandas (each window's start assigned to its right-labelled tumbling window, max and count
per group) -- nothing from WaveSQL."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATE = 8000
N = 4096  # samples per window: 0.512 s
EPOCH = dt.datetime(1970, 1, 1)
BODY = "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]"
WINDOWED = "SELECT max(rms) AS peak, count(*) AS n FROM {} [RANGE 2 SECONDS SLIDE 2 SECONDS]"


def _setup(ws, tmp_path, seconds: int = 5) -> pd.DataFrame:
    """A recording whose loudness changes every second, and numpy's RMS per window."""
    n = seconds * RATE
    rng = np.random.default_rng(5)
    amplitude = np.repeat(rng.uniform(0.1, 0.9, seconds), RATE)[:n]
    x = (amplitude * np.sin(np.arange(n) * 2 * np.pi * 440 / RATE)
         + rng.normal(0, 0.02, n)).astype(np.float32)
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "r_000.wav", x, RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'rec'}' "
           "FORMAT wav")
    starts = np.arange(0, n, N)  # the last window is partial, as the scan cuts it
    rms = [np.sqrt(np.mean(x[s:s + N].astype(np.float64) ** 2)) for s in starts]
    return pd.DataFrame({"t": starts / RATE, "rms": rms})


def _want(feats: pd.DataFrame) -> pd.DataFrame:
    # [RANGE 2 SECONDS SLIDE 2 SECONDS]: the instant i holds the rows with t in (i - 2, i]
    feats = feats.assign(instant=np.ceil(feats["t"] / 2.0) * 2.0)
    return feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()


def _check(ws, sql: str, feats: pd.DataFrame) -> None:
    got = ws.sql(sql).toPandas()
    got = got.assign(instant=[(v - EPOCH).total_seconds() for v in got["_time"]])
    got = got.sort_values("instant").reset_index(drop=True)
    want = _want(feats)
    assert got["instant"].tolist() == want["instant"].tolist()
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)


@pytest.mark.spark
def test_windows_over_a_catalog_view_of_a_signal_query(ws, tmp_path):
    """``CREATE VIEW f AS <signal query>``, then tumbling windows over f in batch: each
    window's peak RMS and count equal pandas over numpy's RMS."""
    feats = _setup(ws, tmp_path)
    ws.sql(f"CREATE VIEW f AS {BODY}")
    _check(ws, WINDOWED.format("f"), feats)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("form", ["temporary view", "view of a view", "subquery", "cte"])
def test_windows_over_other_forms_of_a_signal_query(ws, tmp_path, form):
    """The same windows over a temporary view, a view reading the view of the query, a
    FROM subquery and a CTE of the query."""
    feats = _setup(ws, tmp_path)
    if form == "temporary view":
        ws.sql(f"CREATE TEMPORARY VIEW f AS {BODY}")
        sql = WINDOWED.format("f")
    elif form == "view of a view":
        ws.sql(f"CREATE VIEW f0 AS {BODY}")
        ws.sql("CREATE VIEW f AS SELECT rms, t FROM f0 WHERE rms >= 0")
        sql = WINDOWED.format("f")
    elif form == "subquery":
        sql = WINDOWED.format(f"({BODY}) f")
    else:
        sql = f"WITH f AS ({BODY}) " + WINDOWED.format("f")
    _check(ws, sql, feats)


@pytest.mark.spark
@pytest.mark.slow
def test_over_windows_and_asof_joins_over_a_catalog_view(ws, tmp_path):
    """OVER windows and an ASOF JOIN over the view (plain Spark windows and the ASOF rule,
    not the CQL window's event-time lookup): pandas rolling(3) and merge_asof backward
    over numpy's RMS."""
    feats = _setup(ws, tmp_path)
    ws.sql(f"CREATE VIEW f AS {BODY}")
    got = ws.sql("SELECT t, avg(rms) OVER (ORDER BY t ROWS BETWEEN 2 PRECEDING AND CURRENT "
                 "ROW) AS a FROM f").toPandas()
    got = got.assign(s=[(v - EPOCH).total_seconds() for v in got["t"]]).sort_values("s")
    assert got["s"].tolist() == feats["t"].tolist()
    np.testing.assert_allclose(got["a"], feats["rms"].rolling(3, min_periods=1).mean(),
                               rtol=1e-6)
    ev = pd.DataFrame({"ts": EPOCH + pd.to_timedelta([0.3, 1.0, 2.2, 3.5, 4.9], unit="s"),
                       "label": list("abcde")})
    (tmp_path / "ev").mkdir()
    ev.to_parquet(tmp_path / "ev" / "p.parquet", coerce_timestamps="us",
                  allow_truncated_timestamps=True)
    ws.sql(f"CREATE STREAM ev (ts TIMESTAMP, label STRING) FROM '{tmp_path / 'ev'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    got = ws.sql("SELECT e.label, f.rms FROM ev e ASOF JOIN f ON e.ts >= f.t").toPandas()
    want = pd.merge_asof(ev.assign(s=(ev["ts"] - EPOCH).dt.total_seconds()),
                         feats.rename(columns={"t": "s"}), on="s", direction="backward")
    got = got.sort_values("label").reset_index(drop=True)
    assert got["label"].tolist() == want["label"].tolist()
    np.testing.assert_allclose(got["rms"], want["rms"], rtol=1e-6)


@pytest.mark.spark
def test_explain_stream_of_a_view_whose_signal_query_fails_points_at_the_view(ws, tmp_path):
    """EXPLAIN STREAM of a statement reading a view whose signal query cannot run
    continuously (a LIMIT) raises at the view's name in the statement, naming the view, as
    running it does -- not at the offsets of the view's own text. Nothing runs."""
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "r_000.wav", np.zeros(RATE, np.float32), RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'rec'}' "
           "FORMAT wav")
    ws.sql(f"CREATE VIEW nv AS {BODY} LIMIT 3")
    sql = "SELECT max(rms) AS peak FROM nv [RANGE 2 SECONDS]"
    for explain in (lambda: ws.explain(sql, mode="STREAM"),
                    lambda: ws.sql("EXPLAIN STREAM " + sql)):
        with pytest.raises(WaveSQLError) as e:
            explain()
        where = e.value.span.start - (0 if e.value.query == sql else len("EXPLAIN STREAM "))
        assert where == sql.index("nv"), e.value
        assert "view `nv`" in e.value.message
