"""Names with backticks, quotes, spaces and non-ASCII letters -- of streams, columns,
signals, channels and paths -- are names everywhere WaveSQL writes SQL (wavesql/sqltext.py),
never SQL. Oracles: pandas and numpy."""

from __future__ import annotations

import glob

import numpy as np
import pandas as pd
import pytest

from wavesql.udfs.wav import write_wav

STREAM = "`wéird st``ream`"         # the stream  wéird st`ream
T, V, K = "`t s`", "`v``x'y`", "`ünï`"  # columns  t s,  v`x'y,  ünï


@pytest.fixture
def odd(ws, tmp_path):
    folder = tmp_path / "in dir é 'q'"
    folder.mkdir()
    frame = pd.DataFrame({"t s": pd.to_datetime(np.arange(120) * 500, unit="ms"),
                          "v`x'y": np.arange(120.0), "ünï": ["a", "b", "c"] * 40})
    frame.assign(**{"t s": frame["t s"].astype("datetime64[us]")}).to_parquet(
        folder / "a.parquet")
    ws.sql(f"CREATE STREAM {STREAM} ({T} TIMESTAMP, {V} DOUBLE, {K} STRING) "
           f"FROM '{str(folder).replace(chr(39), chr(39) * 2)}' FORMAT parquet "
           f"EVENT TIME {T} WATERMARK 1 SECOND")
    return frame


def test_batch_queries_over_odd_names(ws, odd):
    row = ws.sql(f"SELECT count(*) AS n, sum({V}) AS s FROM {STREAM}").collect()[0]
    assert (row.n, row.s) == (120, odd["v`x'y"].sum())
    got = ws.sql(f"SELECT {K} AS k, count(*) AS n FROM {STREAM} "
                 f"[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY {K}").toPandas()
    # CQL: the window at instant k * 10 s holds the rows of (k * 10 s - 10 s, k * 10 s]
    bucket = -(-odd["t s"].astype("int64") // 10**10)
    want = odd.groupby([bucket, "ünï"]).size()
    assert sorted(got.n) == sorted(want.tolist())
    ws.spark.conf.set("wavesql.windows.min_rows", "0")  # the chunked OVER pass too
    try:
        over = ws.sql(f"SELECT {T} AS t, avg({V}) OVER (ORDER BY {T} RANGE BETWEEN "
                      f"INTERVAL 2 SECONDS PRECEDING AND CURRENT ROW) AS a FROM {STREAM}"
                      ).toPandas().sort_values("t")
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
    want = odd.set_index("t s")["v`x'y"].rolling("2001ms").mean()  # [t - 2 s, t]
    np.testing.assert_allclose(over.a.to_numpy(), want.to_numpy(), rtol=1e-12)


def test_a_continuous_query_over_odd_names(ws, odd, tmp_path):
    out = tmp_path / "out é"
    ws.stream(f"SELECT {K} AS k, count(*) AS n FROM {STREAM} [RANGE 10 SECONDS SLIDE 10 "
              f"SECONDS] GROUP BY {K}", out, tmp_path / "ck 'x'").await_termination()
    files = [f for f in glob.glob(str(out / "**" / "*.parquet"), recursive=True)
             if "_progress" not in f]
    got = pd.concat([pd.read_parquet(f) for f in files])
    # the window at instant k * 10 s holds (k * 10 s - 10 s, k * 10 s]; instants up to the
    # progress (the watermark, 1 s behind the last row) are final
    final = got[got["_final"]]
    seconds = odd["t s"].astype("int64") / 1e9
    instant = np.ceil(seconds / 10) * 10
    progress = (final["_progress"].max() - pd.Timestamp(0)).total_seconds()
    want = odd[instant <= progress].groupby([instant[instant <= progress], "ünï"]).size()
    have = final.groupby([(final["_time"] - pd.Timestamp(0)).dt.total_seconds(), "k"]).n.sum()
    assert len(want) == 16 and have.to_dict() == want.to_dict()


def test_a_signal_with_odd_channel_names(ws, tmp_path):
    folder = tmp_path / "rec 'é'"
    folder.mkdir()
    x = (np.random.default_rng(2).standard_normal((4000, 2)) * 0.3).astype(np.float32)
    write_wav(folder / "a b.wav", x, 8000, "float32")
    ws.sql(f"CREATE SIGNAL `m ic` (`ch 1` FLOAT, `ch``2` FLOAT) RATE 8000 HZ "
           f"FROM '{str(folder).replace(chr(39), chr(39) * 2)}' FORMAT wav")
    rows = ws.sql("SELECT start_sample(`ch 1`) AS s, seg_rms(`ch 1`) AS a, "
                  "seg_rms(lowpass(`ch``2`, 1000.0)) AS b FROM `m ic` [SAMPLES 1000]"
                  ).orderBy("s").collect()
    from scipy import signal as sps

    y = sps.sosfilt(sps.butter(4, 1000.0, fs=8000, output="sos"), x[:, 1].astype(np.float64))
    np.testing.assert_allclose([r.a for r in rows], np.sqrt(np.mean(
        x[:, 0].astype(np.float64).reshape(4, 1000) ** 2, axis=1)), rtol=1e-9)
    np.testing.assert_allclose([r.b for r in rows],
                               np.sqrt(np.mean(y.reshape(4, 1000) ** 2, axis=1)), rtol=1e-9)
