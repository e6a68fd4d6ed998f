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
    # continuously: over a row-by-row view that passes the EVENT TIME through; a view
    # computing across rows runs as a stream part when it can run on its own (windowed:
    # tests/test_windows_over_windows.py), else is refused by its own streaming rule
    ws.sql("CREATE VIEW shifted AS SELECT ts + INTERVAL 1 SECOND AS ts, v FROM ticks")
    ws.sql("CREATE VIEW distinct_rows AS SELECT DISTINCT ts, v FROM ticks")
    for view, code, why in (("shifted", "NOT_IMPLEMENTED", "changes or renames the EVENT TIME"),
                            ("distinct_rows", "STREAMING_RULE",
                             "`DISTINCT` over an unbounded stream needs a window")):
        with pytest.raises(WaveSQLError) as e:
            ws.stream(f"SELECT _time, count(*) AS n FROM {view} [RANGE 2 SECONDS]",
                      tmp_path / "o", tmp_path / "c")
        assert e.value.code == code and why in e.value.message, e.value


@pytest.mark.parametrize("setup, source", [
    (None, "WITH x AS (SELECT ts, v FROM ticks WHERE v > 0) SELECT {cols} FROM x"),
    ("CREATE VIEW cv AS SELECT * FROM ticks WHERE v > 0", "SELECT {cols} FROM cv"),
    (None, "SELECT {cols} FROM (SELECT v, ts FROM ticks WHERE v > 0) x"),
])
def test_a_continuous_window_over_a_filtering_view_equals_pandas(ws, tmp_path, setup, source):
    """Files arrive one per micro-batch, in time order, each shuffled inside: the instants
    final at the end (before the stream's progress) are delivered once, as pandas has them."""
    import os
    import time

    rng = np.random.default_rng(10)
    frame = pd.DataFrame({"ts": pd.to_datetime(np.sort(rng.integers(0, 60_000, 400)), unit="ms"),
                          "v": rng.normal(0, 1, 400)})
    folder = tmp_path / "t"
    folder.mkdir()
    for i in range(4):
        part = frame.iloc[i * 100:(i + 1) * 100]
        path = folder / f"p{i}.parquet"
        part.sample(frac=1, random_state=i).assign(
            ts=lambda f: f.ts.astype("datetime64[us]")).to_parquet(path)
        stamp = time.time() - 3600 + i  # Spark takes files by modification time
        os.utime(path, (stamp, stamp))
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    if setup:
        ws.sql(setup)
    text = source.format(cols="_time, count(*) AS n, sum(v) AS s") + \
        " [RANGE 10 SECONDS SLIDE 5 SECONDS]"
    q = ws.stream(text, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
    q.await_termination()
    progress_s = q.progress_us / 1e6
    assert progress_s == pytest.approx(frame.ts.max().timestamp() - 1, abs=1e-6)
    rows = ws.spark.read.parquet(str(tmp_path / "out")).collect()
    got = {int(r._time.timestamp()): (r.n, r.s) for r in rows}
    want = {k: w for k, w in _oracle(frame[frame.v > 0]).items() if k < progress_s}
    assert len(rows) == len(got) and got.keys() == want.keys() and len(want) >= 10
    for k in want:
        assert got[k][0] == want[k][0] and got[k][1] == pytest.approx(want[k][1], rel=1e-12)


@pytest.mark.parametrize("text", [
    "ISTREAM (SELECT count(*) AS n, sum(v) AS s FROM (SELECT ts, v FROM ticks WHERE v > 0) x "
    "[RANGE 10 SECONDS SLIDE 5 SECONDS])",
    # a WITH written before ISTREAM belongs to the query it wraps
    "WITH x AS (SELECT ts, v FROM ticks WHERE v > 0) "
    "ISTREAM (SELECT count(*) AS n, sum(v) AS s FROM x [RANGE 10 SECONDS SLIDE 5 SECONDS])",
])
def test_istream_over_a_windowed_subquery_or_cte(ws, ticks, text):
    """ISTREAM: an instant's row when the window's rows differ from the previous
    instant's (pandas: the sets of rows of consecutive windows)."""
    kept = ticks[ticks.v > 0]
    ms = kept.ts.astype("int64") // 10**6
    members = {k * 5: frozenset(kept.index[(ms > k * 5_000 - 10_000) & (ms <= k * 5_000)])
               for k in range(0, 75_000 // 5_000)}
    want = {k for k, rows in members.items() if rows and members.get(k - 5) != rows}
    got = {int(r._time.timestamp()): r for r in ws.sql(text).collect()}
    assert got.keys() == want and len(want) >= 10
    for k in want:
        assert got[k].n == len(members[k])
        assert got[k].s == pytest.approx(kept.v[list(members[k])].sum(), rel=1e-12)
