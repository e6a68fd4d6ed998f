"""ZIP of a CTE or view of a query over a signal's windows needs no ``BY``: its rows are
ordered by its ``start_time(...)`` column, as a CQL window over it is (planner/combine.py
``_order_of``, planner/analyze/combine.py ``_signal_time``; before, ``ZIP_ORDER`` "it has
no EVENT TIME"). Oracle: numpy's RMS and peak per 800-sample window of the samples
written to the WAV files, paired by window number, as long as the shorter recording."""

from __future__ import annotations

import numpy as np
import pytest

from wavesql.udfs.wav import write_wav

pytestmark = pytest.mark.spark

RATE = 8000
WINDOW = 800


def _signal(ws, tmp_path, name: str, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 0.3, n).astype(np.float32)
    folder = tmp_path / name
    folder.mkdir()
    write_wav(str(folder / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
    ws.sql(f"CREATE SIGNAL {name} (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
    return x.astype(np.float64)


def test_zip_of_a_cte_and_a_view_of_signal_queries(ws, tmp_path):
    """A CTE over one signal (RMS per window) zipped with a view over another (peak per
    window), no BY: the i-th windows of each in time order, 14 of them (the shorter
    recording), equal to numpy's."""
    a = _signal(ws, tmp_path, "mic", 20 * WINDOW, 1)
    b = _signal(ws, tmp_path, "acc", 14 * WINDOW, 2)
    ws.sql(f"CREATE VIEW pv AS SELECT start_time(ch1) AS t, seg_max(ch1) AS peak "
           f"FROM acc [SAMPLES {WINDOW}]")
    rows = ws.sql(f"WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic "
                  f"[SAMPLES {WINDOW}]) SELECT z._index AS i, z.f.t AS ft, z.f.rms AS rms, "
                  "z.p.t AS pt, z.p.peak AS peak FROM ZIP(f, pv AS p) z").collect()
    rows = sorted(rows, key=lambda r: r.i)
    want_rms = [np.sqrt(np.mean(a[i * WINDOW:(i + 1) * WINDOW] ** 2)) for i in range(14)]
    want_peak = [b[i * WINDOW:(i + 1) * WINDOW].max() for i in range(14)]
    assert [r.i for r in rows] == list(range(14))
    assert all(r.ft == r.pt for r in rows)  # the i-th windows of each start together
    assert [r.ft for r in rows] == sorted(r.ft for r in rows)
    np.testing.assert_allclose([r.rms for r in rows], want_rms, rtol=1e-6)
    np.testing.assert_allclose([r.peak for r in rows], want_peak, rtol=1e-6)
