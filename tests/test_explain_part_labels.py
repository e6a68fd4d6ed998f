"""EXPLAIN STREAM names each part of a query cut into parts as the user wrote it -- a CTE,
a view, a subquery, or a part cut from the statement's own SELECT (streaming/
derived_split.py ``described``; before, every part was called a "CTE"). No Spark: the
statements are cut over a catalog of definitions only, and the words checked against
ones written here by hand."""

from __future__ import annotations

import pytest

from tests.test_stream_parts import _Catalog

WINDOWED = ("SELECT _time AS t, k, avg(v) AS a FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS] "
            "GROUP BY _time, k")
COUNTS = ("SELECT _time AS t, k, count(*) AS n FROM ev [RANGE 5 SECONDS SLIDE 5 SECONDS] "
          "GROUP BY _time, k")
SIGNAL = "SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]"
ASOF = "ASOF JOIN {} m ON e.k = m.k AND e.ts >= m.t"

CASES = [
    (f"WITH m AS ({WINDOWED}) SELECT e.id, m.a FROM ev e " + ASOF.format("m"), "CTE `m`"),
    ("SELECT e.id, m.a FROM ev e " + ASOF.format("mv"), "view `mv`"),
    ("SELECT e.id, m.a FROM ev e " + ASOF.format(f"({WINDOWED})"), "subquery `m`"),
    (f"WITH m AS ({WINDOWED}) SELECT c.k, m.a FROM cv c ASOF JOIN m ON c.k = m.k "
     "AND c.t >= m.t", "CTE `m` and view `cv`"),
    (f"SELECT max(rms) AS peak FROM ({SIGNAL}) f [RANGE 2 SECONDS]", "signal subquery `f`"),
    (f"WITH f AS ({SIGNAL}), g AS ({SIGNAL.replace('4096', '1024')}) SELECT f.rms FROM f "
     "[RANGE 2 SECONDS] UNION ALL SELECT g.rms FROM g [RANGE 2 SECONDS]",
     "signal CTEs `f`, `g`"),
    ("SELECT start_time(ch1) AS t, avg(seg_rms(ch1)) OVER (ORDER BY start_time(ch1) ROWS "
     "BETWEEN 4 PRECEDING AND CURRENT ROW) AS a FROM mic [SAMPLES 4096]",
     "signal part `mic_windows` cut from its own SELECT"),
    ("SELECT c.k AS k, count(*) AS n, avg(seg_rms(m.ch1)) AS r FROM ctl c [RANGE 4 SECONDS "
     "SLIDE 2 SECONDS] SYNC JOIN mic m ON RANGE (c.t0, c.t1) GROUP BY c.k",
     "SYNC part `c_synced` cut from its own SELECT"),
]


@pytest.mark.parametrize("text, words", CASES,
                         ids=["cte", "view", "subquery", "cte+view", "signal subquery",
                              "signal ctes", "own select", "own SYNC select"])
def test_each_part_is_named_as_written(text, words):
    from wavesql.catalog import SignalDef, StreamDef, ViewDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import described, find_split

    catalog = _Catalog(**{n: StreamDef(n, [("ts", "TIMESTAMP"), ("k", "STRING"), (c, t)],
                                       "/nowhere", "json", event_time="ts")
                          for n, c, t in (("s", "v", "DOUBLE"), ("ev", "id", "BIGINT"))})
    catalog["mic"] = SignalDef("mic", [("ch1", "FLOAT")], 8000, "/nowhere", "wav")
    catalog["mv"] = ViewDef("mv", WINDOWED)
    catalog["cv"] = ViewDef("cv", COUNTS)
    catalog["ctl"] = StreamDef("ctl", [("k", "BIGINT"), ("t0", "TIMESTAMP"),
                                       ("t1", "TIMESTAMP")], "/nowhere", "json",
                               event_time="t0")
    (stmt,) = parse_statements(text)
    split = find_split(stmt, text, catalog)
    assert described(split.parts) == words
