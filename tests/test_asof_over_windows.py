"""Batch ASOF JOIN and RESAMPLE over a relation computed across a stream's rows -- a
windowed aggregate (``[RANGE ...]``) or an OVER window -- written as a CTE, a subquery or a
catalog view, on either side of the join (issue 21, item 1). The windowed CTE's text is
bound after the window rule rewrote it to read its window input; it used to fail with
``UNKNOWN_STREAM ... __wavesql_window_0`` (planner/analyze/context.py ``outer``).

Oracle: pandas over the same rows -- the windows as a right-closed, right-labelled
grouping per key (instant i holds (i - 10 s, i]), then ``merge_asof`` backward per key;
the OVER average as a time-based rolling mean over [t - 5 s, t]; RESAMPLE as ``np.interp``
of each key's windows on its 5-second grid.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark

SECOND = 1000
WINDOWED = ("SELECT _time AS t, k, avg(v) AS a, count(*) AS n FROM s "
            "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time, k")
OVER = ("SELECT ts AS t, k, avg(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
        "INTERVAL 5 SECONDS PRECEDING AND CURRENT ROW) AS a FROM s")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:{ms // 60_000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _ms(value) -> int:
    """A timestamp Spark returned (naive, UTC session) in ms since 1970."""
    return int(round(pd.Timestamp(value).value / 1e6))


def _data(ws, tmp_path):
    """Readings of keys x (every 700 ms) and y (every 1100 ms, from 4.4 s) over 40 s, and
    events at irregular times, some before any window of their key; as two streams."""
    rng = np.random.default_rng(21)
    samples = [{"ts": t, "k": k, "v": float(np.round(rng.normal(), 3))}
               for k, step, start in (("x", 700, 0), ("y", 1100, 4400))
               for t in range(start, 40 * SECOND, step)]
    times = np.sort(rng.choice(np.arange(100, 42 * SECOND, 100), 24, replace=False))
    events = [{"ts": int(t), "k": "xy"[i % 2], "id": i} for i, t in enumerate(times)]
    for name, rows in (("s", samples), ("ev", events)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.json").write_text("".join(
            json.dumps({**r, "ts": _ts(r["ts"])}) + "\n" for r in rows))
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) FROM '{tmp_path / 's'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")
    ws.sql(f"CREATE STREAM ev (ts TIMESTAMP, k STRING, id BIGINT) FROM '{tmp_path / 'ev'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")
    return samples, events


def _windows(samples: list[dict]) -> pd.DataFrame:
    """pandas' tumbling 10-second windows per key, right-closed and right-labelled."""
    frame = pd.DataFrame(samples)
    frame["t"] = np.ceil(frame["ts"] / (10 * SECOND)).astype(int) * 10 * SECOND
    return frame.groupby(["k", "t"]).agg(a=("v", "mean"), n=("v", "size")).reset_index()


def _rolling(samples: list[dict]) -> pd.DataFrame:
    """pandas' average over each key's rows in [t - 5 s, t], at each row's t."""
    out = []
    for k, rows in pd.DataFrame(samples).groupby("k"):
        rows = rows.sort_values("ts")
        index = pd.to_datetime(rows["ts"], unit="ms")
        mean = pd.Series(rows["v"].to_numpy(), index=index).rolling(
            "5s", closed="both").mean()
        out.append(pd.DataFrame({"t": rows["ts"].to_numpy(), "k": k, "a": mean.to_numpy()}))
    return pd.concat(out, ignore_index=True)


def _asof_events(events: list[dict], right: pd.DataFrame) -> pd.DataFrame:
    """For each event, the last ``right`` row of its key at or before it (matched only)."""
    left = pd.DataFrame(events).sort_values("ts")
    got = pd.merge_asof(left, right.sort_values("t"), left_on="ts", right_on="t", by="k",
                        direction="backward", allow_exact_matches=True)
    got = got.dropna(subset=["t"])
    got["t"] = got["t"].astype(int)
    return got.sort_values("id").reset_index(drop=True)


def _got(ws, sql: str, times=("ts", "t")) -> pd.DataFrame:
    got = ws.sql(sql).toPandas()
    for c in times:
        got[c] = [_ms(v) for v in got[c]]
    return got


def _check_event_side(got: pd.DataFrame, want: pd.DataFrame) -> None:
    assert len(want) > 10 and got["id"].tolist() == want["id"].tolist()
    assert got["t"].tolist() == want["t"].tolist()
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-9)


def test_asof_join_of_a_stream_with_a_windowed_cte(ws, tmp_path):
    samples, events = _data(ws, tmp_path)
    query = (f"WITH m AS ({WINDOWED}) SELECT e.id, e.ts, m.t, m.a, m.n FROM ev e "
             "ASOF JOIN m ON e.k = m.k AND e.ts >= m.t ORDER BY e.id")
    got = _got(ws, query)
    want = _asof_events(events, _windows(samples))
    _check_event_side(got, want)
    assert got["n"].tolist() == want["n"].tolist()
    assert (want["ts"] - want["t"] < 10 * SECOND).all()  # the window, not an older one
    # the window is an input of the CTE's query, not also one of the statement's
    assert ws.explain(query).count("WindowScan") == 1


@pytest.mark.slow
@pytest.mark.parametrize("right", [
    f"({WINDOWED}) m",  # a windowed subquery
    "mv m",  # a catalog view of the windowed SELECT
    f"({OVER}) m",  # an OVER-window subquery
    "ov m",  # a catalog view of the OVER-window SELECT
    "om",  # a CTE of the OVER-window SELECT
])
def test_asof_join_with_a_windowed_subquery_view_or_over_cte(ws, tmp_path, right):
    samples, events = _data(ws, tmp_path)
    ws.sql(f"CREATE VIEW mv AS {WINDOWED}")
    ws.sql(f"CREATE VIEW ov AS {OVER}")
    alias = right.split()[-1]
    got = _got(ws, f"WITH om AS ({OVER}) SELECT e.id, e.ts, {alias}.t, {alias}.a FROM ev e "
                   f"ASOF JOIN {right} ON e.k = {alias}.k AND e.ts >= {alias}.t "
                   "ORDER BY e.id")
    windowed = right in (f"({WINDOWED}) m", "mv m")
    _check_event_side(got, _asof_events(events, _windows(samples) if windowed
                                        else _rolling(samples)))


@pytest.mark.slow
@pytest.mark.parametrize("left", [f"({WINDOWED}) m", "mv m", "wm m"])
def test_windowed_relation_as_the_left_side(ws, tmp_path, left):
    samples, events = _data(ws, tmp_path)
    ws.sql(f"CREATE VIEW mv AS {WINDOWED}")
    got = _got(ws, f"WITH wm AS ({WINDOWED}) SELECT m.t, m.k, m.a, e.id, e.ts FROM {left} "
                   "ASOF JOIN ev e ON m.k = e.k AND m.t >= e.ts ORDER BY m.k, m.t")
    want = pd.merge_asof(_windows(samples).sort_values("t"),
                         pd.DataFrame(events).sort_values("ts"), left_on="t", right_on="ts",
                         by="k", direction="backward", allow_exact_matches=True)
    want = want.dropna(subset=["id"]).sort_values(["k", "t"]).reset_index(drop=True)
    assert len(want) > 5
    assert list(zip(got["k"], got["t"], got["id"])) == list(zip(want["k"], want["t"],
                                                                want["id"].astype(int)))
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["m", f"({WINDOWED})", "mv"])
def test_resample_of_a_windowed_cte_subquery_or_view(ws, tmp_path, source):
    samples, _ = _data(ws, tmp_path)
    ws.sql(f"CREATE VIEW mv AS {WINDOWED}")
    got = _got(ws, f"WITH m AS ({WINDOWED}) SELECT r.k, r.t, r.a FROM RESAMPLE({source}, t, "
                   "INTERVAL 5 SECONDS PARTITION BY k) r ORDER BY r.k, r.t", times=("t",))
    rows = []
    for k, w in _windows(samples).groupby("k"):
        grid = np.arange(w["t"].min(), w["t"].max() + 1, 5 * SECOND)
        rows += [(k, int(g), a) for g, a in zip(grid, np.interp(grid, w["t"], w["a"]))]
    assert list(zip(got["k"], got["t"])) == [(k, t) for k, t, _ in rows]
    np.testing.assert_allclose(got["a"], [a for _, _, a in rows], rtol=1e-9)
