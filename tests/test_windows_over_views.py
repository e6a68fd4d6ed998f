"""CQL windows over a view (catalog or temporary) or a CTE: the event time is the stream's,
carried through by name (planner/bind.py: carried_event_time). Oracle: pandas."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError


@pytest.fixture
def ticks(ws, tmp_path):
    rng = np.random.default_rng(9)
    frame = pd.DataFrame({"ts": pd.to_datetime(np.sort(rng.integers(0, 60_000, 400)), unit="ms"),
                          "v": rng.normal(0, 1, 400)})
    (tmp_path / "t").mkdir()
    frame.assign(ts=frame.ts.astype("datetime64[us]")).to_parquet(tmp_path / "t" / "a.parquet")
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE) FROM '{tmp_path / 't'}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    return frame


def _oracle(frame: pd.DataFrame) -> dict:
    """count and sum per instant k * 5 s of the rows in (k * 5 s - 10 s, k * 5 s]."""
    ms = frame.ts.astype("int64") // 10**6
    out = {}
    for k in range(0, 75_000 // 5_000):
        inside = frame[(ms > k * 5_000 - 10_000) & (ms <= k * 5_000)]
        if len(inside):
            out[k * 5] = (len(inside), inside.v.sum())
    return out


@pytest.mark.parametrize("setup, source", [
    (None, "WITH x AS (SELECT ts, v FROM ticks WHERE v > 0) SELECT {cols} FROM x"),
    ("CREATE TEMP VIEW tv AS SELECT ts, v FROM ticks WHERE v > 0", "SELECT {cols} FROM tv"),
    ("CREATE VIEW cv AS SELECT ts, v FROM ticks WHERE v > 0", "SELECT {cols} FROM cv"),
    (None, "SELECT {cols} FROM (SELECT ts, v FROM ticks WHERE v > 0) x"),
])
def test_a_window_over_a_view_or_cte_equals_one_over_the_filtered_stream(ws, ticks, setup,
                                                                         source):
    if setup:
        ws.sql(setup)
    text = source.format(cols="count(*) AS n, sum(v) AS s") + " [RANGE 10 SECONDS SLIDE 5 SECONDS]"
    rows = ws.sql(text).collect()
    got = {int(r._time.timestamp()): (r.n, r.s) for r in rows}
    want = _oracle(ticks[ticks.v > 0])
    assert got.keys() == want.keys()
    for k in want:
        assert got[k][0] == want[k][0] and got[k][1] == pytest.approx(want[k][1], rel=1e-12)


def test_a_view_without_the_event_time_says_which_column_to_keep(ws, ticks, tmp_path):
    with pytest.raises(WaveSQLError) as e:
        ws.sql("WITH x AS (SELECT v FROM ticks) SELECT count(*) FROM x [RANGE 2 SECONDS]")
    assert e.value.code == "STREAMING_RULE" and "'ts'" in (e.value.hint or "")
    ws.sql("CREATE VIEW cv AS SELECT ts, v FROM ticks")
    with pytest.raises(WaveSQLError) as e:  # continuous: not yet, and said so
        ws.stream("SELECT count(*) AS n FROM cv [RANGE 2 SECONDS]", tmp_path / "o",
                  tmp_path / "c")
    assert e.value.code == "NOT_IMPLEMENTED"
