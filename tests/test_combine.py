"""MERGE and ZIP (planner/combine.py) against plain-Python oracles, batch and continuous.

Oracles: MERGE is the multiset union of the input files' rows, each tagged with its input;
ZIP is Python's ``zip`` over each input's rows sorted by its order column (ties by the
other columns). Inputs are written with shuffled rows and duplicated keys on purpose.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.data import COUNTING_WAV
from wavesql.dialect import parse_one, to_sql
from wavesql.errors import WaveSQLError


def write_stream(folder, rows, *, files=2):
    """rows: (k, v, ts_us) tuples, written shuffled into ``files`` Parquet files."""
    folder.mkdir(parents=True)
    rows = list(rows)
    random.Random(len(rows)).shuffle(rows)
    for f in range(files):
        part = rows[f::files]
        pq.write_table(pa.table({
            "k": pa.array([r[0] for r in part], pa.int64()),
            "v": pa.array([r[1] for r in part], pa.float64()),
            "ts": pa.array([r[2] for r in part], pa.timestamp("us"))}), folder / f"p{f}.parquet")
    return rows


@pytest.fixture
def streams(ws, tmp_path):
    rng = np.random.default_rng(7)
    a = write_stream(tmp_path / "a", [(int(k), float(rng.normal()), int(t) * 1000)
                                      for k, t in zip(rng.integers(0, 5, 40),
                                                      rng.integers(0, 9_000, 40))])
    b = write_stream(tmp_path / "b", [(int(k), float(rng.normal()), int(t) * 1000)
                                      for k, t in zip(rng.integers(0, 5, 25),
                                                      rng.integers(0, 9_000, 25))])
    for name in "ab":
        ws.sql(f"CREATE STREAM {name} (k BIGINT, v DOUBLE, ts TIMESTAMP) "
               f"FROM '{tmp_path / name}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    return {"a": a, "b": b}


def us(ts) -> int:
    """A naive UTC datetime as microseconds since 1970."""
    return int(round((ts - ts.__class__(1970, 1, 1)).total_seconds() * 1e6))


@pytest.mark.parametrize("text", [
    "SELECT * FROM MERGE(a, b) AS m",
    "SELECT z._index FROM ZIP(a BY t, b BY x.y, c) AS z",
    "SELECT * FROM t JOIN MERGE(a, b, c) ON TRUE",
    "SELECT * FROM MERGE(a AS north, b AS south)",
    "SELECT * FROM ZIP(a AS x BY t, a AS y BY u) AS z",
])
def test_round_trip(text):
    assert to_sql(parse_one(to_sql(parse_one(text)))) == to_sql(parse_one(text)) == text


@pytest.mark.parametrize("text, message", [
    ("SELECT * FROM MERGE(a)", "MERGE needs two or more inputs"),
    ("SELECT * FROM ZIP(a BY, b)", "expected a column after BY"),
    ("SELECT * FROM MERGE(a, (SELECT 1))", "expected a table name"),
    ("SELECT * FROM MERGE(a b)", "expected `,` or ) in MERGE("),
    ("SELECT * FROM ZIP(a AS BY t, b)", "expected a name after AS"),
])
def test_syntax_errors(ws, text, message):
    with pytest.raises(WaveSQLError) as err:
        ws.sql(text)
    assert err.value.code == "PARSE_ERROR" and message in err.value.message
    assert err.value.span is not None


@pytest.mark.spark
def test_merge_is_the_tagged_union(ws, streams):
    got = Counter((r._source, r.k, r.v, us(r.ts)) for r in
                  ws.sql("SELECT * FROM MERGE(a, b) m").collect())
    want = Counter((name, *row) for name, rows in streams.items() for row in rows)
    assert got == want
    assert ws.sql("SELECT * FROM MERGE(a, b)").columns == ["_source", "k", "v", "ts"]


@pytest.mark.spark
def test_merge_refuses_different_columns(ws, streams, tmp_path):
    ws.sql(f"CREATE VIEW c AS SELECT k, CAST(v AS FLOAT) AS v, ts FROM a")
    ws.sql(f"CREATE VIEW d AS SELECT k, ts FROM a")
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM MERGE(a, c)")
    assert err.value.code == "SCHEMA_MISMATCH" and "v is float here, double in a" in \
        err.value.message
    assert err.value.span.start == "SELECT * FROM MERGE(a, ".__len__()
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM MERGE(a, b, d)")
    assert err.value.code == "SCHEMA_MISMATCH" and "missing v" in err.value.message


@pytest.mark.spark
def test_zip_pairs_the_ith_rows(ws, streams):
    def ordered(rows, key):
        return sorted(rows, key=key)

    a = ordered(streams["a"], lambda r: (r[2], r[0], r[1]))  # event time, ties: k, v
    b = ordered(streams["b"], lambda r: (r[0], r[1], r[2]))  # BY k, ties: v, ts
    want = [(i, ra, rb) for i, (ra, rb) in enumerate(zip(a, b))]
    rows = ws.sql("SELECT * FROM ZIP(a, b BY k) z ORDER BY _index").collect()
    got = [(r._index, (r.a.k, r.a.v, us(r.a.ts)), (r.b.k, r.b.v, us(r.b.ts))) for r in rows]
    assert got == want and len(got) == 25  # as long as the shorter input


@pytest.mark.spark
def test_named_inputs(ws, streams):
    """AS names the inputs: MERGE's tag, ZIP's struct columns -- so a stream zips with
    itself (each row with the row of the next rank of another order)."""
    got = Counter(r._source for r in ws.sql("SELECT * FROM MERGE(a AS x, b AS y)").collect())
    assert got == {"x": 40, "y": 25}
    rows = ws.sql("SELECT first.k AS k1, second.k AS k2, first.ts AS t1, second.ts AS t2 "
                  "FROM ZIP(a AS first, a AS second BY k) ORDER BY _index").collect()
    by_time = sorted(streams["a"], key=lambda r: (r[2], r[0], r[1]))
    by_key = sorted(streams["a"], key=lambda r: (r[0], r[1], r[2]))
    assert [(r.k1, us(r.t1), r.k2, us(r.t2)) for r in rows] == [
        (p[0], p[2], q[0], q[2]) for p, q in zip(by_time, by_key)]


@pytest.mark.spark
def test_zip_of_signals_pairs_segments(ws, tmp_path):
    for name in ("left", "right"):
        ws.sql(f"CREATE SIGNAL {name} (voice FLOAT) RATE 44100 HZ FROM '{COUNTING_WAV}' "
               f"FORMAT wav SEGMENT 4096")
    rows = ws.sql("SELECT _index, left.voice AS l, right.voice AS r FROM ZIP(left, right) "
                  "ORDER BY _index").collect()
    assert [r._index for r in rows] == list(range(len(rows))) and len(rows) > 90
    assert all(r.l.start == r.r.start == 4096 * r._index and r.l.samples == r.r.samples
               for r in rows)


@pytest.mark.spark
def test_zip_needs_an_order(ws, streams):
    ws.sql("CREATE VIEW va AS SELECT k, v FROM a")
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM ZIP(va, b)")
    assert err.value.code == "ZIP_ORDER" and "ZIP(va BY" in err.value.hint
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM ZIP(a BY nope, b)")
    assert err.value.code == "UNKNOWN_COLUMN" and err.value.span.start == 23
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM ZIP(a, a)")
    assert err.value.code == "INVALID_OPTION" and "ZIP(a AS a, a AS b)" in err.value.hint
    assert ws.sql("SELECT count(*) AS n FROM ZIP(va BY k, b)").collect()[0].n == 25


@pytest.mark.spark
def test_merge_runs_continuously_with_the_inputs_minimum_progress(ws, streams, tmp_path):
    q = ws.stream("SELECT _source, k, v, ts FROM MERGE(a, b)", output=str(tmp_path / "out"),
                  checkpoint=str(tmp_path / "chk"))
    q.await_termination()
    out = ws.spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter((r._source, r.k, r.v, us(r.ts)) for r in out) == Counter(
        (name, *row) for name, rows in streams.items() for row in rows)
    # progress: each input's newest event time less its 1 s watermark; the minimum of the two
    newest = min(max(r[2] for r in rows) for rows in streams.values())
    assert {us(r._progress) for r in out} == {newest - 1_000_000}


@pytest.mark.spark
def test_zip_is_refused_continuously(ws, streams, tmp_path):
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT * FROM ZIP(a, b)", output=str(tmp_path / "o"),
                  checkpoint=str(tmp_path / "c"))
    assert err.value.code == "STREAMING_RULE" and err.value.span.start == 14
