"""End-to-end: DDL into the catalog, queries over Parquet/CSV/JSON streams, EXPLAIN, files.

Oracle: plain Spark reading the same files with the same schema (spark.read + spark.sql).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wavesql
from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark


@pytest.fixture
def data(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "trades").mkdir(parents=True)
    syms = ["AAPL", "MSFT", "GOOG"]
    for part in range(2):
        rows = [(syms[i % 3], 100.0 + i + part * 10, i + 1, f"2026-01-01T00:{part:02d}:{i:02d}")
                for i in range(20)]
        table = pa.table({
            "sym": [r[0] for r in rows], "px": [r[1] for r in rows], "qty": pa.array([r[2] for r in rows], pa.int32()),
            "ts": pa.array([r[3] for r in rows]).cast(pa.timestamp("us")),
        })
        pq.write_table(table, root / "trades" / f"part-{part}.parquet")
    (root / "refs.csv").write_text("sym,name,lot\nAAPL,Apple,100\nMSFT,Microsoft,50\nIBM,IBM,10\n")
    with open(root / "news.jsonl", "w") as f:
        for i in range(6):
            f.write(json.dumps({"sym": syms[i % 3], "ts": f"2026-01-01T00:00:{i * 7:02d}",
                                "headline": f"h{i}", "score": i / 2}) + "\n")
    return root


def _register(ws, data: Path) -> None:
    ws.sql(f"""
        CREATE STREAM trades (sym STRING, px DOUBLE, qty INT, ts TIMESTAMP)
          FROM '{data / 'trades'}' FORMAT parquet EVENT TIME ts WATERMARK 5 SECONDS;
        CREATE STREAM refs (sym STRING, name STRING, lot INT) FROM '{data / 'refs.csv'}' FORMAT csv;
        CREATE STREAM news (sym STRING, ts TIMESTAMP, headline STRING, score DOUBLE)
          FROM '{data / 'news.jsonl'}' FORMAT json;
    """)


def _rows(df):
    return sorted(tuple(r) for r in df.collect())


def test_queries_over_three_formats_match_plain_spark(ws, spark, data):
    _register(ws, data)
    spark.read.schema("sym STRING, px DOUBLE, qty INT, ts TIMESTAMP").parquet(
        str(data / "trades")).createOrReplaceTempView("o_trades")
    spark.read.schema("sym STRING, name STRING, lot INT").option("header", "true").csv(
        str(data / "refs.csv")).createOrReplaceTempView("o_refs")
    spark.read.schema("sym STRING, ts TIMESTAMP, headline STRING, score DOUBLE").json(
        str(data / "news.jsonl")).createOrReplaceTempView("o_news")
    query = """
        SELECT t.sym, r.name, count(*) AS n, sum(t.px * t.qty) AS notional,
               max(n.score) AS best
        FROM trades t LEFT JOIN refs r ON t.sym = r.sym
        LEFT JOIN news n ON n.sym = t.sym
        GROUP BY t.sym, r.name
    """
    oracle = query.replace("trades", "o_trades").replace("refs", "o_refs").replace(
        "news n", "o_news n")
    got = _rows(ws.sql(query))
    assert got == _rows(spark.sql(oracle))
    assert len(got) == 3 and sum(r[2] for r in got) == 40 * 2  # 40 trades x 2 news per sym


def test_definitions_persist_across_sessions(ws, spark, data, tmp_path):
    _register(ws, data)
    ws.sql("CREATE VIEW heavy AS SELECT sym, sum(qty) AS q FROM trades GROUP BY sym")
    ws.close()
    again = wavesql.connect(spark=spark, catalog=tmp_path / "catalog.db")
    names = [r.name for r in again.sql("SHOW STREAMS").collect()]
    assert names == ["news", "refs", "trades"]
    assert [r.name for r in again.sql("SHOW VIEWS").collect()] == ["heavy"]
    assert _rows(again.sql("SELECT * FROM heavy")) == [("AAPL", 140), ("GOOG", 126), ("MSFT", 154)]
    # ...and in a different process entirely (no shared Python state).
    script = textwrap.dedent(f"""
        from wavesql.catalog import Catalog
        c = Catalog({str(tmp_path / 'catalog.db')!r})
        print(sorted((d.name, d.kind, d.version) for d in c.list()))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("[('heavy', 'VIEW', 1), ('news', 'STREAM', 1), "
                                  "('refs', 'STREAM', 1), ('trades', 'STREAM', 1)]")


def test_describe_show_drop(ws, data):
    _register(ws, data)
    desc = ws.sql("DESCRIBE trades").collect()
    assert [(r.col_name, r.data_type) for r in desc[:4]] == [
        ("sym", "STRING"), ("px", "DOUBLE"), ("qty", "INT"), ("ts", "TIMESTAMP")]
    props = {r.col_name: r.data_type for r in desc[5:]}
    assert props["format"] == "parquet" and props["event_time"] == "ts"
    assert props["watermark_us"] == "5000000"
    assert ws.sql("DROP STREAM news").collect()[0].status == "dropped stream news"
    assert [r.name for r in ws.sql("SHOW STREAMS").collect()] == ["refs", "trades"]
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SELECT * FROM news")
    assert e.value.code == "UNKNOWN_STREAM"


def test_replace_bumps_version_and_changes_schema(ws, data):
    _register(ws, data)
    ws.sql(f"CREATE OR REPLACE STREAM refs (sym STRING, name STRING) "
           f"FROM '{data / 'refs.csv'}' FORMAT csv OPTIONS (enforceSchema = 'true')")
    show = {r.name: r.version for r in ws.sql("SHOW STREAMS").collect()}
    assert show["refs"] == 2
    assert ws.sql("SELECT * FROM refs").columns == ["sym", "name"]


def test_plain_spark_sql_and_spark_commands_pass_through(ws, spark):
    assert ws.sql("SELECT 1 + 1 AS two").collect()[0].two == 2
    ws.sql("CREATE TEMPORARY VIEW nums AS SELECT id FROM range(5)")
    assert ws.sql("SELECT sum(id) AS s FROM nums").collect()[0].s == 10
    ws.sql("SET spark.sql.ansi.enabled = true")
    assert spark.conf.get("spark.sql.ansi.enabled") == "true"
    ws.sql("SET spark.sql.ansi.enabled = false")


def test_explain_modes(ws, data):
    _register(ws, data)
    q = "SELECT sym, count(*) FROM trades WHERE px > 100 GROUP BY sym"
    ir_text = ws.explain(q, "IR")
    assert "SqlQuery" in ir_text and "StreamScan trades v1 [parquet" in ir_text
    assert "(sym: string, count(1): bigint not null) bounded" in ir_text
    spark_text = ws.explain(q, "SPARK")
    assert "== Physical Plan ==" in spark_text and "FileScan parquet" in spark_text
    assert "Select" in ws.explain(q, "AST")
    plan = ws.sql("EXPLAIN IR " + q).collect()[0].plan
    assert plan.startswith("Query") and "StreamScan trades" in plan
    formatted = ws.sql("EXPLAIN FORMATTED " + q).collect()[0].plan
    assert "Scan parquet" in formatted


def test_execute_file_resolves_paths_against_the_file(ws, data, tmp_path):
    job = data / "job.wsql"
    job.write_text(textwrap.dedent("""
        -- relative paths: against this file's folder
        CREATE STREAM refs (sym STRING, name STRING, lot INT) FROM 'refs.csv' FORMAT csv;
        SELECT sum(lot) AS lots FROM refs;
    """))
    results = ws.execute_file(job)
    assert [r.kind for r in results] == ["create", "query"]
    assert results[-1].dataframe.collect()[0].lots == 160
    stored = ws.catalog.get("refs")
    assert stored.path == str(data / "refs.csv")


def test_errors_in_files_name_the_file_and_line(ws, data):
    job = data / "bad.wsql"
    job.write_text("SELECT 1;\n\nSELECT * FROM nowhere_at_all;\n")
    with pytest.raises(WaveSQLError) as e:
        ws.execute_file(job)
    assert e.value.code == "UNKNOWN_STREAM"
    assert (e.value.line, e.value.column) == (3, 15)
    assert f"{job}:3:15" in str(e.value)
    with pytest.raises(WaveSQLError) as e:
        ws.execute_file(data / "missing.wsql")
    assert e.value.code == "FILE_NOT_FOUND"


def test_malformed_csv_row_is_an_error_not_silent_nulls(ws, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\nthree,4\n")
    ws.sql(f"CREATE STREAM nums (a INT, b INT) FROM '{bad}' FORMAT csv")
    with pytest.raises(Exception) as e:
        ws.sql("SELECT * FROM nums").collect()
    assert "three" in str(e.value) or "Malformed" in str(e.value)


def test_streams_of_one_schema_join_and_self_join(ws, tmp_path):
    # Binding analyses each query over empty stand-ins, one per schema and reused across
    # inputs and queries: two inputs of one schema (or one input twice) must stay apart.
    for name, offset in (("sa", 0.0), ("sb", 10.0)):
        (tmp_path / name).mkdir()
        pq.write_table(pa.table({"k": [1, 2, 3], "v": [offset + 1, offset + 2, offset + 3]}),
                       tmp_path / name / "p.parquet")
        ws.sql(f"CREATE STREAM {name} (k BIGINT, v DOUBLE) FROM '{tmp_path / name}' "
               "FORMAT parquet")
    rows = ws.sql("SELECT a.k, a.v AS av, b.v AS bv FROM sa a JOIN sb b ON a.k = b.k "
                  "ORDER BY a.k").collect()
    assert [tuple(r) for r in rows] == [(1, 1.0, 11.0), (2, 2.0, 12.0), (3, 3.0, 13.0)]
    rows = ws.sql("SELECT x.k, x.v AS xv, y.v AS yv FROM sa x JOIN sa y ON x.k = y.k + 1 "
                  "ORDER BY x.k").collect()
    assert [tuple(r) for r in rows] == [(2, 2.0, 1.0), (3, 3.0, 2.0)]


@pytest.mark.spark
def test_a_query_leaves_the_users_spark_views_as_they_were(ws, tmp_path):
    """Binding and running a statement over catalog stream ``ticks`` registers views named
    ``ticks`` only while Spark analyses it: the user's own temporary view of that name is
    back afterwards (binding stand-ins dropped it before, lowering replaced it), and with
    no such view none is left behind."""
    import pandas as pd

    folder = tmp_path / "ticks"
    folder.mkdir()
    pd.DataFrame({"ts": pd.to_datetime([1, 2, 3], unit="s", utc=True),
                  "v": [1.0, 2.0, 3.0]}).to_parquet(folder / "a.parquet")
    ws.sql(f"CREATE STREAM ticks (ts TIMESTAMP, v DOUBLE) FROM '{folder}' FORMAT parquet "
           f"EVENT TIME ts WATERMARK 1 SECOND")
    assert ws.sql("SELECT sum(v) AS s FROM ticks").collect()[0].s == 6.0
    assert not [t for t in ws.spark.catalog.listTables() if t.isTemporary]  # none left
    ws.spark.range(7).createOrReplaceTempView("ticks")  # the user's own view, same name
    assert ws.sql("SELECT sum(v) AS s FROM ticks").collect()[0].s == 6.0  # the stream wins
    assert ws.spark.sql("SELECT count(*) AS n FROM ticks").collect()[0].n == 7  # still theirs
    ws.sql("DROP STREAM ticks")
    assert ws.spark.sql("SELECT count(*) AS n FROM ticks").collect()[0].n == 7


def test_status_lines_are_read_without_a_spark_job(ws, tmp_path):
    """A statement's status line (the CREATE ... IF NOT EXISTS at the top of a query file
    run from cron, every run) is read without running a Spark job: each one cost 0.2-1 s
    (the first of a process several seconds), a tenth of an incremental run. Spark's
    status tracker, for the jobs of this thread's job group, is the oracle."""
    folder = tmp_path / "in"
    folder.mkdir()
    create = (f"CREATE STREAM IF NOT EXISTS ev (id BIGINT, ts TIMESTAMP) FROM '{folder}' "
              "FORMAT parquet EVENT TIME ts;")
    sc = ws.spark.sparkContext
    sc.setJobGroup("status-lines", "status lines of DDL")
    try:
        results = ws.execute(f"{create}\n{create}\nDROP STREAM ev;")
        rows = [[tuple(r) for r in result.dataframe.collect()] for result in results]
        jobs = sc.statusTracker().getJobIdsForGroup("status-lines")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    assert rows == [[("created stream ev (version 1)",)],
                    [("stream ev already exists (unchanged)",)], [("dropped stream ev",)]]
    assert jobs == []
