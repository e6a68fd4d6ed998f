"""A CQL window over a windowed aggregate's rows, in batch: the inner query's instant,
named (``_time AS t``), is the outer window's event time -- in a CTE, a subquery or a
catalog view. Oracle: the brute-force reference evaluator (tests/cql_reference.py) applied
twice, the outer window over the inner result's rows at their instants."""

from __future__ import annotations

import datetime as dt
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests import cql_reference as ref
from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

SECOND = 1_000_000
EPOCH = dt.datetime(1970, 1, 1)

INNER = "SELECT _time AS t, k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 5 SECONDS] GROUP BY _time, k"
OUTER = "SELECT _time, k, max(a) AS mx, count(*) AS n FROM {m} [RANGE 30 SECONDS SLIDE 30 SECONDS] GROUP BY _time, k"


def _rows(seed=3, n=160):
    rng = np.random.default_rng(seed)
    return [{"k": int(k), "v": float(round(v, 3)), "ts": int(ts)} for k, v, ts in zip(
        rng.integers(0, 2, n), rng.random(n), rng.integers(0, 180 * SECOND, n))]


def _stream(ws, tmp_path, rows):
    folder = tmp_path / "s"
    folder.mkdir()
    frame = pd.DataFrame(rows)
    frame["ts"] = pd.to_datetime(frame["ts"], unit="us").astype("datetime64[us]")
    frame.to_parquet(folder / "p.parquet")
    ws.sql(f"CREATE STREAM s (k BIGINT, v DOUBLE, ts TIMESTAMP) FROM '{folder}' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")


def _oracle(rows) -> Counter:
    def per_key(present, fn):
        groups = {}
        for r in present:
            groups.setdefault(r["k"], []).append(r)
        return [fn(k, g) for k, g in groups.items()]

    inner = ref.evaluate(rows, "ts", ref.Window("SLIDE", 10 * SECOND, 5 * SECOND), ("k", "v"),
                         lambda p: per_key(p, lambda k, g: (k, sum(r["v"] for r in g) / len(g))))
    mids = [{"t": t, "k": k, "a": a} for (t, k, a), n in inner.items() for _ in range(n)]
    return ref.evaluate(mids, "t", ref.Window("SLIDE", 30 * SECOND, 30 * SECOND), ("k", "a"),
                        lambda p: per_key(p, lambda k, g: (k, round(max(r["a"] for r in g), 9),
                                                           len(g))))


def _got(ws, sql) -> Counter:
    out = Counter()
    for t, k, mx, n in ws.sql(sql).collect():
        delta = t - EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * SECOND + delta.microseconds
        out[(micros, k, round(mx, 9), n)] += 1
    return out


def test_a_window_over_a_windowed_cte_subquery_and_view_equals_the_reference(ws, tmp_path):
    """Before: UNKNOWN_STREAM `__wavesql_window_0` at line 1 column 1 (the inner window's
    internal input was not readable while the CTE bound for the outer window), then
    'does not keep the EVENT TIME column'."""
    rows = _rows()
    _stream(ws, tmp_path, rows)
    want = _oracle(rows)
    assert len(want) > 8
    ws.sql(f"CREATE VIEW mv AS {INNER}")
    for sql in (f"WITH m AS ({INNER}) " + OUTER.format(m="m"),
                OUTER.format(m=f"({INNER}) m"),
                OUTER.format(m="mv")):
        assert _got(ws, sql) == want, sql


def test_a_window_over_a_windowed_cte_without_its_instant_named_says_what_to_select(ws,
                                                                                    tmp_path):
    """The inner result's `_time` itself cannot be the outer window's event time (the outer
    window's instant takes that name): refused at the outer window, the hint naming it."""
    _stream(ws, tmp_path, _rows(n=20))
    sql = ("WITH m AS (SELECT _time, k, avg(v) AS a FROM s [RANGE 10 SECONDS] GROUP BY "
           "_time, k) SELECT _time, max(a) AS mx FROM m [RANGE 30 SECONDS] GROUP BY _time")
    with pytest.raises(WaveSQLError) as err:
        ws.sql(sql)
    assert err.value.code == "STREAMING_RULE", err.value
    assert "_time AS t" in err.value.hint, err.value
    assert err.value.span.start == sql.index("[RANGE 30")
