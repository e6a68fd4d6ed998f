"""Temporary views over catalog objects (catalog/session_views.py): readable for the
session, shadowing, replaced and dropped like Spark's. Oracles: pandas and numpy."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav


@pytest.fixture
def ppg(ws, tmp_path):
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"ts": pd.date_range("2026-01-01", periods=500, freq="10ms"),
                          "v": rng.normal(0, 1, 500)})
    (tmp_path / "ppg").mkdir()
    frame.to_parquet(tmp_path / "ppg" / "a.parquet")
    ws.sql(f"CREATE STREAM ppg (ts TIMESTAMP, v DOUBLE) FROM '{tmp_path / 'ppg'}' "
           "FORMAT parquet EVENT TIME ts")
    return frame


def test_a_temporary_view_over_a_stream_reads_like_its_query(ws, ppg):
    ws.sql("CREATE TEMPORARY VIEW g AS SELECT ts, v FROM ppg WHERE v > 0")
    got = ws.sql("SELECT count(*) AS n, sum(v) AS s FROM g").collect()[0]
    want = ppg[ppg.v > 0]
    assert got.n == len(want) and got.s == pytest.approx(want.v.sum(), rel=1e-12)
    with pytest.raises(WaveSQLError) as e:
        ws.sql("CREATE TEMPORARY VIEW g AS SELECT ts FROM ppg")
    assert e.value.code == "DUPLICATE_OBJECT"
    ws.sql("CREATE OR REPLACE TEMP VIEW g AS SELECT v * 2 AS w FROM ppg")
    assert ws.sql("SELECT max(w) AS m FROM g").collect()[0].m == pytest.approx(2 * ppg.v.max())
    assert ws.catalog.catalog.get("g") is None  # never in the catalog file
    ws.sql("DROP VIEW g")
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SELECT * FROM g")
    assert e.value.code == "UNKNOWN_STREAM"
    ws.sql("DROP VIEW IF EXISTS g")


def test_a_temporary_view_over_a_signal_and_one_over_spark_tables(ws, tmp_path):
    x = (np.random.default_rng(1).standard_normal(4000) * 0.3).astype(np.float32)
    x[1000:1400] *= 10
    (tmp_path / "rec").mkdir()
    write_wav(tmp_path / "rec" / "a.wav", x, 8000, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{tmp_path / 'rec'}' FORMAT wav")
    ws.sql("CREATE TEMP VIEW level AS SELECT start_sample(ch1) AS s, seg_rms(ch1) AS r "
           "FROM mic [SAMPLES 200]")
    got = sorted(r.s for r in ws.sql("SELECT s FROM level WHERE r > 1.0").collect())
    rms = np.sqrt(np.mean(x.astype(np.float64).reshape(20, 200) ** 2, axis=1))
    assert got == [int(i * 200) for i in np.flatnonzero(rms > 1.0)] and len(got) == 2
    ws.sql("CREATE TEMP VIEW plain AS SELECT 1 AS one")  # Spark tables only: Spark's own
    assert not ws.catalog.is_temporary("plain")
    assert ws.spark.sql("SELECT * FROM plain").collect()[0].one == 1
    ws.spark.catalog.dropTempView("plain")


def test_check_mode_sees_a_temporary_view_created_earlier_in_the_text(ws, ppg):
    bound = ws.bind("CREATE TEMP VIEW g AS SELECT v FROM ppg; SELECT avg(v) FROM g")
    assert [type(b).__name__ for b in bound] == ["TempView", "QueryStatement"]
    assert not ws.catalog.is_temporary("g")  # checking changed nothing
