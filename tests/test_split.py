"""Stream splitting ([PARTITION INTO n BY e REPLICATE WHEN p], splitstream): results equal
the unsplit query; EXPLAIN reports the split's cost figures."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd
import pytest


@pytest.fixture
def positions(ws, tmp_path):
    rng = np.random.default_rng(8)
    n = 3000
    frame = pd.DataFrame({
        "xway": pd.array(np.where(rng.random(n) < 0.02, None, rng.integers(0, 10, n)),
                         dtype="Int64"),
        "speed": rng.uniform(0, 100, n),
        "kind": np.where(rng.random(n) < 0.05, 2, 0).astype(np.int64),
        "ts": pd.to_datetime(np.arange(n) * 1000, unit="us").astype("datetime64[us]")})
    (tmp_path / "pos").mkdir()
    frame.to_parquet(tmp_path / "pos" / "p.parquet")
    ws.sql(f"CREATE STREAM positions (xway BIGINT, speed DOUBLE, kind BIGINT, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'pos'}' FORMAT parquet EVENT TIME ts")
    return frame


SPLIT = "[PARTITION INTO 4 BY xway REPLICATE WHEN kind = 2]"
QUERIES = [
    "SELECT xway, count(*) AS n, avg(speed) AS v FROM positions {w} WHERE kind = 0 GROUP BY xway",
    "SELECT xway, ts, avg(speed) OVER (PARTITION BY xway ORDER BY ts ROWS BETWEEN 2 PRECEDING "
    "AND CURRENT ROW) AS v FROM positions {w} WHERE kind = 0",
    "SELECT * FROM positions {w} WHERE kind = 0 AND speed > 50",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_split_query_equals_unsplit(ws, positions, sql):
    split = ws.sql(sql.format(w=SPLIT))
    plain = ws.sql(sql.format(w="").replace("kind = 0", "kind = 0 AND xway IS NOT NULL"))
    assert split.columns == plain.columns
    rows = lambda df: Counter(tuple(round(v, 9) if isinstance(v, float) else v for v in r)  # noqa: E731
                              for r in df.collect())
    assert rows(split) == rows(plain)
    assert split.rdd.getNumPartitions() >= 1


def test_replicated_rows_reach_every_substream(ws, positions):
    # every sub-stream sees every accident: 4 copies of each
    n = ws.sql(f"SELECT count(*) AS n FROM positions {SPLIT} WHERE kind = 2").collect()
    per = ws.sql(f"SELECT sum(n) FROM (SELECT count(*) AS n FROM positions {SPLIT} "
                 "WHERE kind = 2)").collect()
    accidents = int((positions.kind == 2).sum())
    assert sorted(r.n for r in n) == [accidents] * 4
    assert per[0][0] == 4 * accidents


def test_explain_shows_the_split_costs(ws, positions):
    text = ws.explain(f"SELECT xway, count(*) FROM positions {SPLIT} GROUP BY xway")
    assert "SplitScan positions [PARTITION INTO 4 BY xway REPLICATE WHEN kind = 2]" in text
    total = len(positions)
    broadcast = int((positions.kind == 2).sum())
    omitted = int(((positions.kind != 2) & positions.xway.isna()).sum())
    routed = total - broadcast - omitted
    assert f"{total} rows in; routed {routed / total:.3f}, broadcast {broadcast / total:.3f}, " \
           f"omitted {omitted / total:.3f}" in text
    assert f"work vs unsplit {(routed + 4 * broadcast) / total:.2f}x" in text
