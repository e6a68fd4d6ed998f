"""Stream parts (streaming/stream_parts.py): a CTE computing across a stream's rows -- a
windowed aggregate -- used as a side of a continuous ASOF or interval join or as RESAMPLE's
input runs as a stream of its own, the rest over its final rows. Oracle: pandas (the
windows as a right-closed, right-labelled resample per key, then ``merge_asof``, ...) over
the same rows, restricted by hand to what is final at the stream's progress."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

SECOND = 1000

WINDOWED = ("SELECT _time AS t, k, avg(v) AS a, count(*) AS n FROM s "
            "[RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY _time, k")
ASOF = (f"WITH m AS ({WINDOWED}) "
        "SELECT e.id, e.k, e.ts, m.t, m.a, m.n FROM ev e ASOF JOIN m ON e.k = m.k AND e.ts >= m.t")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:{ms // 60_000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _ms(value) -> int:
    """A timestamp Spark returned (naive, UTC session) in ms since 1970."""
    return int(round(pd.Timestamp(value).value / 1e6))


def _define(ws, tmp_path):
    for d in ("s", "ev"):
        (tmp_path / d).mkdir()
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, k STRING, v DOUBLE) FROM '{tmp_path / 's'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")
    ws.sql(f"CREATE STREAM ev (ts TIMESTAMP, k STRING, id BIGINT) FROM '{tmp_path / 'ev'}' "
           "FORMAT json EVENT TIME ts WATERMARK 0 SECONDS")


def _write(folder, name: str, rows: list[dict]) -> None:
    (folder / f"{name}.json").write_text("".join(
        json.dumps({**r, "ts": _ts(r["ts"])}) + "\n" for r in rows))


def _samples(rng, start_ms: int, end_ms: int) -> list[dict]:
    """Readings of keys x and y every 700 ms (x) and 1100 ms (y) in [start, end)."""
    return [{"ts": t, "k": k, "v": float(np.round(rng.normal(), 3))}
            for k, step in (("x", 700), ("y", 1100))
            for t in range(start_ms - start_ms % step + step if start_ms % step else start_ms,
                           end_ms, step)]


def _windows(samples: list[dict], progress_ms: int) -> pd.DataFrame:
    """pandas' tumbling 10-second windows per key: instant i holds (i - 10 s, i] (a row
    on an instant is in the window ending there), those final below ``progress_ms``."""
    frame = pd.DataFrame(samples)
    frame["t"] = np.ceil(frame["ts"] / (10 * SECOND)).astype(int) * 10 * SECOND
    out = frame.groupby(["k", "t"]).agg(a=("v", "mean"), n=("v", "size")).reset_index()
    return out[out["t"] < progress_ms]


def _asof(events: list[dict], windows: pd.DataFrame, progress_ms: int) -> pd.DataFrame:
    """``merge_asof`` backward per key (a window at or before the event), of the events
    final below the windows' progress, those with a match."""
    left = pd.DataFrame(events).sort_values("ts")
    left = left[left["ts"] < progress_ms]
    right = windows.sort_values("t")
    got = pd.merge_asof(left, right, left_on="ts", right_on="t", by="k",
                        direction="backward", allow_exact_matches=True)
    got = got.dropna(subset=["t"])
    got["t"] = got["t"].astype(int)
    return got.sort_values("id").reset_index(drop=True)


def _read(spark, folder) -> pd.DataFrame:
    got = spark.read.parquet(str(folder)).toPandas()
    for c in ("ts", "t"):
        got[c] = [_ms(v) for v in got[c]]
    return got.sort_values("id").reset_index(drop=True)


@pytest.mark.spark
def test_asof_join_of_a_stream_with_a_windowed_average_across_runs(ws, spark, tmp_path):
    """Each event with the latest final 10-second average of its key at or before it,
    continuously over two runs: the windowed CTE runs as a stream part (its rows and a
    punctuation row per batch under <checkpoint>/derived/m/rows), the ASOF JOIN over its
    rows on the state store. An event after the windows' progress waits (24.6 s in the
    first run: a window up to 30 s could still come), and comes in the second run."""
    rng = np.random.default_rng(7)
    _define(ws, tmp_path)
    first = _samples(rng, 0, 24_001)  # progress 24 000 ms (y's 23 100 ms, x's 23 800 ms)
    first.append({"ts": 24_000, "k": "x", "v": 1.5})
    events = [{"ts": t, "k": "xy"[i % 2], "id": i} for i, t in
              enumerate(list(range(350, 24_000, 1_300)) + [24_050])]
    _write(tmp_path / "s", "s1", first)
    _write(tmp_path / "ev", "e1", events)

    def run():
        q = ws.stream(ASOF, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q

    run()
    got = _read(spark, tmp_path / "out")
    want = _asof(events, _windows(first, 24_000), 24_000)
    assert (tmp_path / "ckpt" / "derived" / "m" / "rows").is_dir()
    assert list(got["id"]) == list(want["id"])
    assert 24_050 in [e["ts"] for e in events] and 24_050 not in list(got["ts"])  # waits
    second = _samples(rng, 24_001, 47_001)
    _write(tmp_path / "s", "s2", second)
    more = [{"ts": t, "k": "xy"[i % 2], "id": 100 + i} for i, t in
            enumerate(range(25_150, 49_000, 1_700))]
    _write(tmp_path / "ev", "e2", more)
    run()
    progress = max(r["ts"] for r in first + second)
    got = _read(spark, tmp_path / "out")
    want = _asof(events + more, _windows(first + second, progress), progress)
    assert list(got["id"]) == list(want["id"])  # each once: none lost, none twice
    assert list(got["t"]) == list(want["t"]) and list(got["n"]) == list(want["n"])
    np.testing.assert_allclose(got["a"], want["a"], rtol=1e-12)
    assert got["ts"].max() < progress < 49_000
