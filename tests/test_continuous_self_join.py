"""Continuous joins of a stream with itself, no view on either side (issue 21, closure):
``s a ASOF JOIN s b`` and ``s a JOIN s b ON ... b.ts BETWEEN ...`` read the stream twice,
the second side as a copy named ``<stream>@<label>`` (streaming/joins.py ``_itself``), on
one checkpoint across two runs (files arriving in two steps, a restart between) -- checked
against joins written here in pandas over the stream's on-time rows, not against
WaveSQL's batch mode.

The oracle: a row is late below the progress the files before it promised (their largest
EVENT TIME minus the 2 s WATERMARK); both sides read the same files, so both progresses
are the stream's. ASOF (backward, strict ``a.ts > b.ts``, by key): a left row is final once
the progress has passed its time, and its match is ``pd.merge_asof(...,
allow_exact_matches=False)`` over every on-time row. Interval join: every pair of on-time
rows of one key with ``b.ts`` in ``[a.ts - 5 s, a.ts]`` (a row with itself included), once.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_continuous_joins_views import _write_files

SECOND = 1_000_000
WATERMARK = 2 * SECOND
EPOCH = dt.datetime(1970, 1, 1)
STREAM = ("CREATE STREAM s (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{}' FORMAT parquet "
          "EVENT TIME ts WATERMARK 2 SECONDS")


def _input(seed: int, n: int) -> pd.DataFrame:
    """Rows in arrival order: distinct times (ms) over 40 s, up to 3 s out of order, keys
    a/b/c; five early rows come at the very end (late)."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.choice(40_000, n, replace=False)).astype(np.int64) * 1000
    frame = pd.DataFrame({"k": rng.choice(["a", "b", "c"], n), "v": rng.normal(size=n),
                          "ts": ts})
    order = np.argsort(ts + rng.integers(0, 3 * SECOND, n))
    old = set(np.flatnonzero(ts < 6 * SECOND)[:5])
    order = np.concatenate([[i for i in order if i not in old], sorted(old)])
    return frame.iloc[order].reset_index(drop=True)


def _stage(ws, tmp_path, seed: int, n_files: int) -> tuple:
    """The stream ``s`` (its folder empty) and its files staged; (all rows, per-file rows)."""
    frame = _input(seed, 160)
    parts = _write_files(tmp_path / "staging", frame, n_files)
    (tmp_path / "s").mkdir()
    ws.sql(STREAM.format(tmp_path / "s"))
    return frame, parts


def _run_in_steps(ws, tmp_path, sql: str, steps: list, engine: str) -> list:
    """Move each step's files into the stream's folder and run the query to the end on
    one checkpoint (a restart per step); every run's reports."""
    staged = sorted((tmp_path / "staging").iterdir())
    reports, at = [], 0
    for n in steps:
        for f in staged[at:at + n]:
            stamp = f.stat().st_mtime
            shutil.move(f, tmp_path / "s" / f.name)
            os.utime(tmp_path / "s" / f.name, (stamp, stamp))
        at += n
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        cq.await_termination()
        assert type(cq).__name__ == engine
        reports += cq.reports
    return reports


def _on_time(parts: list) -> tuple:
    """(on-time rows, number of late rows): a file's rows are late below what the files
    before it promised."""
    on_time, late, top = [], 0, None
    for part in parts:
        is_late = part.ts < top - WATERMARK if top is not None else np.zeros(len(part), bool)
        on_time.append(part[~is_late])
        late += int(is_late.sum())
        top = part.ts.max() if top is None else max(top, part.ts.max())
    return pd.concat(on_time), late


def _micros(value) -> int:
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds


def test_asof_join_of_a_stream_with_itself(ws, spark, tmp_path):
    """Each row with the previous row of its key (strictly earlier), files in two steps:
    merge_asof(allow_exact_matches=False) of the on-time rows with themselves, each final
    left row once across the restart; the copy's progress is the stream's."""
    frame, parts = _stage(ws, tmp_path, 7, 4)
    sql = ("SELECT a.ts, a.k, a.v, b.v AS prev, b.ts AS pts FROM s a ASOF JOIN s b "
           "ON a.k = b.k AND a.ts > b.ts")
    shown = ws.explain(sql, "STREAM")
    assert "stateful ASOF JOIN over a view of s@right" in shown, shown
    reports = _run_in_steps(ws, tmp_path, sql, [2, 2], "StatefulAsofQuery")
    on_time, late = _on_time(parts)
    progress = int(frame.ts.max()) - WATERMARK
    assert reports[-1].inputs == {"s": progress, "s@right": progress}
    assert not (frame.ts == progress).any()  # (no row whose finality is a tie)
    rows = on_time.sort_values("ts")
    want = pd.merge_asof(rows[rows.ts < progress], rows.rename(columns={"v": "prev"}).assign(
        pts=rows.ts), on="ts", by="k", direction="backward", allow_exact_matches=False)
    want = want.dropna(subset=["prev"])
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((r["k"], _micros(r["ts"]), r["v"], r["prev"], _micros(r["pts"]))
                  for r in out)
    assert got == Counter(zip(want.k, want.ts.astype(int), want.v, want.prev,
                              want.pts.astype(int)))
    assert len(want) > 100 and late > 0
    # each side judges the stream's rows by the same progress: a late row, late on both
    assert sum(r.late for r in reports) == 2 * late


@pytest.mark.slow
def test_interval_join_of_a_stream_with_itself(ws, spark, tmp_path):
    """Each row with every row of its key in the 5 s up to it (itself too), files in two
    steps: a pandas merge on the key of the on-time rows with themselves, then the band;
    every pair once."""
    _, parts = _stage(ws, tmp_path, 11, 4)
    sql = ("SELECT a.k, a.ts AS ta, b.ts AS tb, b.v FROM s a JOIN s b ON a.k = b.k "
           "AND b.ts BETWEEN a.ts - INTERVAL 5 SECONDS AND a.ts")
    shown = ws.explain(sql, "STREAM")
    assert "stateful interval join over a view of s@a" in shown, shown  # (the band's second side: a)
    _run_in_steps(ws, tmp_path, sql, [2, 2], "StatefulIntervalQuery")
    on_time, _ = _on_time(parts)
    pairs = on_time.merge(on_time, on="k", suffixes=("_a", "_b"))
    pairs = pairs[(pairs.ts_b >= pairs.ts_a - 5 * SECOND) & (pairs.ts_b <= pairs.ts_a)]
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((r["k"], _micros(r["ta"]), _micros(r["tb"]), r["v"]) for r in out)
    assert got == Counter(zip(pairs.k, pairs.ts_a.astype(int), pairs.ts_b.astype(int),
                              pairs.v_b))
    assert len(pairs) > 300
