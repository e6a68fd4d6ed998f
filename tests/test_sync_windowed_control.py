"""A SYNC JOIN whose control is a windowed CTE or subquery (issue 21, item 1: any relation as
the control): each window's row asks for the audio of its own span. Oracle: pandas counts
per right-closed 1-s window and numpy's RMS of the samples written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy.io import wavfile

RATE = 1000
WINDOWED = ("SELECT _time AS t, _time - INTERVAL 1 SECOND AS t0, k, count(*) AS n FROM s "
            "[RANGE 1 SECONDS SLIDE 1 SECONDS] GROUP BY _time, k")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


@pytest.mark.spark
@pytest.mark.parametrize("form", ["cte", "subquery"])
def test_a_windowed_control_syncs_each_windows_span(ws, tmp_path, form):
    (tmp_path / "mic").mkdir()
    (tmp_path / "s").mkdir()
    x = (np.random.default_rng(1).standard_normal(4 * RATE) * 0.3).astype(np.float32)
    wavfile.write(tmp_path / "mic" / "mic_1970-01-01T00-00-00Z.wav", RATE, x)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'mic'}' "
           "FORMAT wav OPTIONS (timeline = 'timestamped')")
    times = list(range(0, 4000, 300))
    (tmp_path / "s" / "a.json").write_text("".join(
        json.dumps({"ts": _ts(t), "k": "x", "v": 1.0}) + "\n" for t in times))
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) FROM '{tmp_path / 's'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")
    select = "SELECT m.t, m.n, seg_rms(a.ch1) AS r FROM {} SYNC JOIN mic a ON RANGE (m.t0, m.t)"
    sql = (f"WITH m AS ({WINDOWED}) " + select.format("m") if form == "cte"
           else select.format(f"({WINDOWED}) m"))
    got = ws.sql(sql).toPandas().sort_values("t").reset_index(drop=True)

    # windows (i - 1 s, i] labelled by their end, as CQL's RANGE windows are
    ends = sorted({int(np.ceil(t / 1000)) for t in times})
    want_n = [sum(1 for t in times if (e - 1) * 1000 < t <= e * 1000) for e in ends]
    got_s = [int(round(pd.Timestamp(v).value / 1e9)) for v in got["t"]]
    assert got_s == ends and list(got["n"]) == want_n
    for e, r in zip(ends, got["r"]):
        if e == 0:  # [-1 s, 0): before the recording, no samples (MISSING NULL)
            assert pd.isna(r)
        else:
            seg = x[(e - 1) * RATE:e * RATE].astype(np.float64)
            assert r == pytest.approx(np.sqrt(np.mean(seg ** 2)), rel=1e-5)
