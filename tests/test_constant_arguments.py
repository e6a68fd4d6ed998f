"""Constant arguments of signal functions may be any Spark expression without columns:
folded into literals when the query is planned (planner/signals.py). Oracle: scipy."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import signal as sps

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATE = 8000


@pytest.fixture
def mic(ws, tmp_path):
    x = np.random.default_rng(1).standard_normal(8000).astype(np.float32)
    write_wav(tmp_path / "a.wav", x, RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path}' FORMAT wav")
    return x.astype(np.float64)


def _means(ws, call: str) -> np.ndarray:
    rows = ws.sql(f"SELECT start_sample(ch1) AS s, seg_avg({call}) AS m "
                  "FROM mic [SAMPLES 2000]").orderBy("s").collect()
    return np.array([r.m for r in rows])


@pytest.mark.parametrize("call, oracle", [
    ("fir(ch1, array_repeat(1.0D / 30, 30))",  # a moving average of 30 samples
     lambda x: sps.lfilter(np.full(30, 1 / 30), [1.0], x)),
    ("fir(ch1, concat(ARRAY(-1), array_repeat(0, 15), ARRAY(32)))",  # Pan-Tompkins' taps
     lambda x: sps.lfilter(np.r_[-1.0, np.zeros(15), 32.0], [1.0], x)),
    ("lowpass(ch1, 8000 / 8 * 1.0, 2 + 2)",
     lambda x: sps.sosfilt(sps.butter(4, 1000.0, fs=RATE, output="sos"), x)),
    ("iir(ch1, array(1.0D - 0.9D), array(1.0, -pow(0.9D, 1)))",
     lambda x: sps.lfilter([0.1], [1.0, -0.9], x)),
])
def test_constant_expressions_are_literals(ws, mic, call, oracle):
    want = oracle(mic).reshape(4, 2000).mean(axis=1)
    np.testing.assert_allclose(_means(ws, call), want, rtol=1e-9, atol=1e-12)


def test_an_argument_reading_a_column_is_not_a_constant(ws, mic):
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SELECT fir(ch1, array_repeat(ch1.rate, 3)) FROM mic [SAMPLES 2000]")
    assert e.value.code == "TYPE_ERROR" and "cannot be an argument" in e.value.message
    with pytest.raises(WaveSQLError) as e:  # folded, but a string array is not taps
        ws.sql("SELECT fir(ch1, array_repeat('a', 3)) FROM mic [SAMPLES 2000]")
    assert e.value.code == "TYPE_ERROR"
