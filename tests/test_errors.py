"""Snapshot tests of rendered error messages for bad queries.

Each case states the expected stable code (asserted directly) and the full rendered message
is compared with ``tests/golden/errors.txt``. After an intended change of wording, regenerate
with ``WAVESQL_UPDATE_GOLDEN=1 pytest tests/test_errors.py`` and review the diff.

Every case must fail before Spark runs a job: the test checks that the Spark job counter did
not move.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

GOLDEN = Path(__file__).parent / "golden" / "errors.txt"

# (name, expected code, query). Relative paths resolve against a directory with real files.
CASES = [
    ("unknown_stream", "UNKNOWN_STREAM", "SELECT * FROM trdes"),
    ("unknown_stream_in_join", "UNKNOWN_STREAM",
     "SELECT t.sym\nFROM trades t\nJOIN refz r ON t.sym = r.sym"),
    ("unknown_column", "UNKNOWN_COLUMN", "SELECT sym, pxx FROM trades"),
    ("unknown_column_line3", "UNKNOWN_COLUMN",
     "SELECT sym,\n       avg(px)\nFROM trades WHERE qtty > 3\nGROUP BY sym"),
    ("unknown_function", "UNKNOWN_FUNCTION", "SELECT sym, avgg(px) FROM trades GROUP BY sym"),
    ("ambiguous_column", "AMBIGUOUS_COLUMN",
     "SELECT sym FROM trades t JOIN refs r ON t.sym = r.sym"),
    ("type_mismatch", "TYPE_ERROR", "SELECT sym FROM trades WHERE px = array(1, 2)"),
    ("unterminated_string", "PARSE_ERROR", "SELECT 'abc FROM trades"),
    ("unclosed_window", "PARSE_ERROR", "SELECT * FROM trades [RANGE 5 SECONDS"),
    ("bad_keyword", "PARSE_ERROR", "SELECT sym FROM trades GROUP sym"),
    ("empty", "EMPTY_QUERY", "  -- nothing here\n"),
    ("duplicate_stream", "DUPLICATE_OBJECT",
     "CREATE STREAM trades (sym STRING) FROM 'refs.csv' FORMAT csv"),
    ("unknown_type", "UNKNOWN_TYPE",
     "CREATE STREAM s (a INT, b FLOT) FROM 'refs.csv' FORMAT csv"),
    ("duplicate_column", "DUPLICATE_COLUMN",
     "CREATE STREAM s (a INT, A DOUBLE) FROM 'refs.csv' FORMAT csv"),
    ("missing_path", "MISSING_PATH",
     "CREATE STREAM s (a INT) FROM '/no/such/dir/' FORMAT parquet"),
    ("unknown_format", "UNKNOWN_FORMAT",
     "CREATE STREAM s (a INT) FROM 'refs.csv' FORMAT avro"),
    ("event_time_not_a_column", "UNKNOWN_COLUMN",
     "CREATE STREAM s (a INT, ts TIMESTAMP) FROM 'refs.csv' FORMAT csv EVENT TIME tss"),
    ("zero_rate", "INVALID_RATE",
     "CREATE SIGNAL m (ch1 FLOAT) RATE 0 HZ FROM 'refs.csv' FORMAT wav"),
    ("negative_rate", "INVALID_RATE",
     "CREATE SIGNAL m (ch1 FLOAT) RATE -44100 HZ FROM 'refs.csv' FORMAT wav"),
    ("zero_segment", "INVALID_OPTION",
     "CREATE SIGNAL m (ch1 FLOAT) RATE 100 HZ FROM 'refs.csv' FORMAT wav SEGMENT 0"),
    ("string_channel", "TYPE_ERROR",
     "CREATE SIGNAL m (ch1 STRING) RATE 100 HZ FROM 'refs.csv' FORMAT wav"),
    ("drop_unknown", "UNKNOWN_OBJECT", "DROP STREAM tradez"),
    ("drop_wrong_kind", "WRONG_OBJECT_KIND", "DROP SIGNAL trades"),
    ("describe_unknown", "UNKNOWN_STREAM", "DESCRIBE tradez"),
    ("window_needs_event_time", "STREAMING_RULE",
     "SELECT sym, count(*) FROM trades [RANGE 1 MINUTE] GROUP BY sym"),
    ("bad_interval", "INVALID_OPTION",
     "CREATE STREAM s (a INT, ts TIMESTAMP) FROM 'refs.csv' FORMAT csv "
     "EVENT TIME ts WATERMARK 5 FORTNIGHTS"),
]


@pytest.fixture
def setup(ws, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "refs.csv").write_text("sym,name\nAAPL,Apple\n")
    ws.sql(f"""
        CREATE STREAM trades (sym STRING, px DOUBLE, qty INT, ts TIMESTAMP)
          FROM 'refs.csv' FORMAT csv;
        CREATE STREAM refs (sym STRING, name STRING) FROM 'refs.csv' FORMAT csv;
    """, base_dir=data)
    return ws, data


def _render(ws, data, query: str) -> WaveSQLError:
    tracker = ws.spark.sparkContext.statusTracker()
    jobs_before = set(tracker.getJobIdsForGroup(None))
    with pytest.raises(WaveSQLError) as caught:
        ws.sql(query, base_dir=data)
    assert set(tracker.getJobIdsForGroup(None)) == jobs_before, "a Spark job ran"
    return caught.value


def _snapshot(name: str, query: str, err: WaveSQLError, data) -> str:
    text = str(err).replace(str(data), "{data}")  # only hints mention the resolved path
    return f"=== {name}\n{query}\n---\n{text}\n"


def test_error_messages_match_snapshots(setup):
    ws, data = setup
    blocks = []
    for name, code, query in CASES:
        err = _render(ws, data, query)
        assert err.code == code, f"{name}: expected {code}, got {err.code}\n{err}"
        if query.strip() and not query.strip().startswith("--"):
            assert err.line is not None and err.column is not None, f"{name}: no position"
        blocks.append(_snapshot(name, query, err, data))
    rendered = "\n".join(blocks)
    if os.environ.get("WAVESQL_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(rendered)
    assert GOLDEN.exists(), "run with WAVESQL_UPDATE_GOLDEN=1 to create the snapshot"
    assert rendered == GOLDEN.read_text()


def test_at_least_twenty_cases():
    assert len(CASES) >= 20 and len({n for n, _, _ in CASES}) == len(CASES)


def test_positions_point_at_the_offending_text(setup):
    ws, data = setup
    query = "SELECT sym,\n       avg(px)\nFROM trades WHERE qtty > 3\nGROUP BY sym"
    err = _render(ws, data, query)
    assert (err.line, err.column) == (3, 19)
    assert query[err.span.start:err.span.end] == "qtty"
    err = _render(ws, data, "SELECT * FROM trdes")
    assert err.hint.startswith("did you mean `trades`")
