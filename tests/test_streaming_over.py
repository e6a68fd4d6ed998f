"""Continuous OVER windows (streaming/runner.py) against pandas over the whole input: the
final rows of a RANGE frame, lag per key and a ROWS frame under a WHERE, file by file."""

from __future__ import annotations

import numpy as np
import pytest

from tests.test_streaming import SECOND, _output, _rows, _run, _split, _stream, _trades, _write


def _over_mean(data):
    """avg(px) over the 3 s up to each trade (RANGE: the frame's start included)."""
    ts, px = data.ts.to_numpy(), data.px.to_numpy()
    return {(t, s, float(px[(ts >= t - 3 * SECOND) & (ts <= t)].mean()))
            for t, s in zip(ts, data.sym)}


def _over_lag(data):
    """px - lag(px, 2) per symbol."""
    out = set()
    for s, g in data.sort_values("ts").groupby("sym"):
        d = g.px - g.px.shift(2)
        out |= {(t, s, None if np.isnan(x) else x) for t, x in zip(g.ts, d)}
    return out


def _over_top(data):
    """max(px) over each trade and the 4 before it, per symbol, among trades with px > 1."""
    out = set()
    for s, g in data[data.px > 1].sort_values("ts").groupby("sym"):
        out |= {(t, s, x) for t, x in zip(g.ts, g.px.rolling(5, min_periods=1).max())}
    return out


OVER_QUERIES = [
    ("SELECT ts, sym, avg(px) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 3 SECONDS PRECEDING "
     "AND CURRENT ROW) AS mean FROM trades", _over_mean),
    ("SELECT ts, sym, px - lag(px, 2) OVER (PARTITION BY sym ORDER BY ts) AS d FROM trades",
     _over_lag),
    ("SELECT ts, sym, max(px) OVER (PARTITION BY sym ORDER BY ts ROWS BETWEEN 4 PRECEDING "
     "AND CURRENT ROW) AS top FROM trades WHERE px > 1", _over_top),
]


@pytest.mark.parametrize("sql, oracle", OVER_QUERIES, ids=["range", "lag", "rows-where"])
def test_over_windows_run_continuously(ws, spark, tmp_path, sql, oracle):
    """Against pandas over the whole input (no row is late: each is at most 2 s behind the
    order the files are written in, and the watermark is 2 s)."""
    data = _trades(200, seed=17)
    data = data.drop_duplicates("ts")  # ROWS frames and lag are defined up to ties only
    for i, chunk in enumerate(_split(data, 4)):
        _write(tmp_path / "in", f"part-{i}.parquet", chunk)
    _stream(ws, tmp_path / "in")
    cq = _run(ws, tmp_path, sql)
    progress = cq.progress_us
    assert progress == data.ts.max() - 2 * SECOND
    want = {r for r in oracle(data) if r[0] < progress}
    out = _output(spark, tmp_path)
    got = _rows(out.where("_final"), ws.sql(sql).columns)
    assert set(got.values()) == {1} and len(got) == len(want) > 100
    rounded = lambda rows: {tuple(round(x, 9) if isinstance(x, float) else x  # noqa: E731
                                  for x in r) for r in rows}
    assert rounded(got) == rounded(want)
    assert sum(r.late for r in cq.reports) == 0
    assert max(r.buffered for r in cq.reports) < len(data)  # the look-back, not the stream
