"""Stateful signal functions per key over a view's segments: ``lowpass(ch1, f) OVER
(PARTITION BY sensor)`` (planner/signals.py ``_state_keys``).

A view holding two sensors' windows has overlapping sample numbers (each recording starts
at sample 0): one ordered pass over all rows is refused, and per sensor the filter runs
along that sensor's segments. Oracle: scipy's ``sosfilt`` over each sensor's whole
recording, computed here from the arrays written to the WAV files.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal as sps

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

pytestmark = pytest.mark.spark

RATE = 8000
N = 3 * RATE + 123  # not a whole number of windows: a short last window


@pytest.fixture
def sensors(ws, tmp_path):
    rng = np.random.default_rng(31)
    data = {}
    for name, tone in (("sa", 50.0), ("sb", 900.0)):
        t = np.arange(N) / RATE
        x = (0.5 * np.sin(2 * np.pi * tone * t) + 0.2 * rng.standard_normal(N))
        x = x.astype(np.float32)
        folder = tmp_path / name
        folder.mkdir()
        write_wav(str(folder / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
        ws.sql(f"CREATE SIGNAL {name} (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
        data[name] = x.astype(np.float64)
    ws.sql("CREATE VIEW both_sensors AS "
           "SELECT 'a' AS sensor, start_sample(ch1) AS s, ch1 FROM sa [SAMPLES 1000] "
           "UNION ALL SELECT 'b' AS sensor, start_sample(ch1) AS s, ch1 FROM sb [SAMPLES 1000]")
    return ws, data


def _filtered(x: np.ndarray) -> np.ndarray:
    return sps.sosfilt(sps.butter(4, 200.0, btype="low", fs=RATE, output="sos"), x)


def test_a_filter_runs_along_each_keys_segments(sensors):
    ws, data = sensors
    sql = ("SELECT sensor, s, lowpass(ch1, 200.0) OVER (PARTITION BY sensor) AS y, "
           "seg_rms(lowpass(ch1, 200.0)) OVER (PARTITION BY sensor) AS r FROM both_sensors")
    text = ws.explain(sql, "IR")
    assert "state per key (sensor)" in text
    rows = ws.sql(sql).collect()
    for key, name in (("a", "sa"), ("b", "sb")):
        mine = sorted((r for r in rows if r.sensor == key), key=lambda r: r.s)
        assert [r.s for r in mine] == list(range(0, N, 1000))
        got = np.concatenate([np.asarray(r.y.samples, dtype=np.float64) for r in mine])
        want = _filtered(data[name])
        np.testing.assert_allclose(got, want, atol=2e-6)
        rms = [float(np.sqrt(np.mean(want[r.s:r.s + 1000] ** 2))) for r in mine]
        np.testing.assert_allclose([r.r for r in mine], rms, rtol=1e-5)


def test_without_a_key_the_overlapping_series_are_refused(sensors):
    ws, _ = sensors
    with pytest.raises(Exception) as err:  # noqa: PT011 -- a task's error, as Spark raises it
        ws.sql("SELECT sensor, lowpass(ch1, 200.0) AS y FROM both_sensors").collect()
    assert "OVERLAPPING" in str(err.value) or "overlap" in str(err.value).lower()


@pytest.mark.parametrize("sql, code, words", [
    ("SELECT seg_rms(ch1) OVER (PARTITION BY sensor) FROM both_sensors", "INVALID_OPTION",
     "keeps no state"),
    ("SELECT lowpass(ch1, 200.0) OVER (PARTITION BY sensor ORDER BY s) FROM both_sensors",
     "INVALID_OPTION", "PARTITION BY only"),
    ("SELECT lowpass(ch1, 200.0) OVER (PARTITION BY sensr) FROM both_sensors",
     "UNKNOWN_COLUMN", "sensr"),
    ("SELECT lowpass(ch1, 200.0) OVER (PARTITION BY sensor), highpass(ch1, 50.0) "
     "FROM both_sensors", "INVALID_OPTION", "has no OVER"),
    ("SELECT lowpass(ch1, 200.0) OVER (PARTITION BY sensor), "
     "highpass(ch1, 50.0) OVER (PARTITION BY s) FROM both_sensors", "INVALID_OPTION",
     "same keys"),
])
def test_what_a_per_key_state_refuses(sensors, sql, code, words):
    ws, _ = sensors
    with pytest.raises(WaveSQLError) as err:
        ws.sql(sql)
    assert err.value.code == code and words in str(err.value)
    assert err.value.span is not None
