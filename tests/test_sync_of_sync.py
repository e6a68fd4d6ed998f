"""A SYNC result as another SYNC's control, in batch (issue 21, closure): a CTE or a view
that SYNCs a control with one signal is the control of a SYNC with another; each row's
RMS over both signals is numpy's over the samples written (the ranges cut by the README's
rule: from the first sample at or after the start, up to the first at or after the end)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATES = {"mic": 1000, "acc": 250}
RANGES = [(0, 500_000), (1_000_000, 1_800_000), (2_500_000, 3_000_000)]  # µs
INNER = ("SELECT c.id, c.t0, c.t1, seg_rms(m.ch1) AS r FROM ctrl c "
         "SYNC JOIN mic m ON RANGE (c.t0, c.t1)")


def _first_sample(us: int, rate: int) -> int:
    return -((-us * rate) // 1_000_000)


@pytest.fixture
def recorded(ws, tmp_path):
    """Two signals (4 s each) and the control stream; each signal's samples."""
    rng = np.random.default_rng(21)
    samples = {}
    for name, rate in RATES.items():
        (tmp_path / name).mkdir()
        x = (rng.standard_normal((rate * 4, 1)) * 0.3).astype(np.float32)
        write_wav(tmp_path / name / f"{name}_1970-01-01T00-00-00Z.wav", x, rate, "float32")
        samples[name] = x[:, 0].astype(np.float64)
        ws.sql(f"CREATE SIGNAL {name} (ch1 FLOAT) RATE {rate} HZ FROM '{tmp_path / name}' "
               "FORMAT wav OPTIONS (timeline = 'timestamped')")
    (tmp_path / "ctl").mkdir()
    times = {c: pd.to_datetime([r[i] for r in RANGES], unit="us").astype("datetime64[us]")
             for i, c in enumerate(("t0", "t1"))}
    pd.DataFrame({"id": np.arange(len(RANGES), dtype=np.int64), **times}).to_parquet(
        tmp_path / "ctl" / "c.parquet")
    ws.sql(f"CREATE STREAM ctrl (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet")
    return samples


def _rms(x, us0, us1, rate):
    seg = x[_first_sample(us0, rate):_first_sample(us1, rate)]
    return np.sqrt(np.mean(seg ** 2))


@pytest.mark.parametrize("how", ["cte", "view"])
def test_a_sync_result_is_a_sync_control(ws, recorded, how):
    if how == "cte":
        sql = (f"WITH s AS ({INNER}) SELECT s.id, s.r, seg_rms(a.ch1) AS ra "
               "FROM s SYNC JOIN acc a ON RANGE (s.t0, s.t1)")
    else:
        ws.sql(f"CREATE VIEW s AS {INNER}")
        sql = "SELECT s.id, s.r, seg_rms(a.ch1) AS ra FROM s SYNC JOIN acc a ON RANGE (s.t0, s.t1)"
    rows = sorted(ws.sql(sql).collect())
    assert [r.id for r in rows] == list(range(len(RANGES)))
    for r, (us0, us1) in zip(rows, RANGES):
        np.testing.assert_allclose(r.r, _rms(recorded["mic"], us0, us1, 1000), rtol=1e-12)
        np.testing.assert_allclose(r.ra, _rms(recorded["acc"], us0, us1, 250), rtol=1e-12)


def test_continuously_a_sync_control_that_syncs_is_refused(ws, recorded):
    """Continuously, the control must be row by row over a stream: NOT_IMPLEMENTED naming
    the SYNC inside it, not the internal input's name."""
    sql = (f"WITH s AS ({INNER}) SELECT s.id, seg_rms(a.ch1) AS ra "
           "FROM s SYNC JOIN acc a ON RANGE (s.t0, s.t1)")
    with pytest.raises(WaveSQLError) as err:
        ws.explain(sql, "STREAM")
    assert err.value.code == "NOT_IMPLEMENTED" and "SYNC JOIN" in err.value.message
    assert "__wavesql" not in str(err.value)
