"""Kafka in query files and on the state-store runner, on a real broker (tests/kafka_broker.py),
checked with a client of their own (confluent-kafka) against oracles computed here:

* ``STREAM REAL-TIME INTO <kafka sink> <query>;`` in a query file: ``wavesql run`` runs it
  as a service (wavesql/services.py) until SIGTERM, in a process of its own; ``wavesql
  schedule`` refuses the file;
* the result latency of a windowed query over Kafka on the state-store runner, measured
  from the Kafka timestamps of the batch before the one that emits.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
import types
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

SECOND = 1_000_000
T0 = dt.datetime(2024, 1, 1)


def _topic(kafka, partitions: int = 1) -> str:
    return kafka.create_topic(f"t{uuid.uuid4().hex[:10]}", partitions)


def _iso(us: int) -> str:
    return (T0 + dt.timedelta(microseconds=int(us))).isoformat(sep=" ")


def _events(seed: int, n: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"k": rng.choice(list("abc"), n), "v": rng.integers(0, 100, n),
                         "ts": np.sort(rng.integers(0, 60 * SECOND, n)) // 1000 * 1000})


def _service_file(source: str, sink: str, bootstrap: str) -> str:
    # the real-time statement first: it starts after the file's other statements, so the
    # stream and the sink it needs, created below it, exist by then
    return f"""\
-- a threshold alarm, run as a service
STREAM REAL-TIME INTO alarms
  SELECT k, v, _partition, _offset FROM ev WHERE v >= 90;

CREATE STREAM IF NOT EXISTS ev (k STRING, v INT, ts TIMESTAMP)
  FROM KAFKA '{source}' OPTIONS (bootstrap = '{bootstrap}')
  FORMAT json EVENT TIME ts WATERMARK 2 SECONDS;
CREATE SINK IF NOT EXISTS alarms TO KAFKA '{sink}' OPTIONS (bootstrap = '{bootstrap}')
  FORMAT json;
"""


# -- real-time mode in query files ------------------------------------------------------

def test_wavesql_run_serves_a_real_time_statement_until_sigterm(kafka, tmp_path):
    """``wavesql run`` of a file with ``STREAM REAL-TIME INTO``, a real process: it runs the
    file's DDL, then the real-time query; records produced while it runs come out of the
    sink topic -- exactly the source records above the threshold, by partition and offset
    as the oracle consumer reads them (at least once: repeats share key and payload);
    SIGTERM stops it cleanly (exit 0, the run recorded ok)."""
    from wavesql.catalog import Catalog

    source, alarms = _topic(kafka, 2), _topic(kafka)
    (tmp_path / "alarm.wsql").write_text(_service_file(source, alarms, kafka.bootstrap))
    log = open(tmp_path / "out.log", "w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "wavesql", "--master", "local[2]", "--catalog",
         str(tmp_path / "catalog.db"), "--conf", "spark.sql.shuffle.partitions=2",
         "--conf", "spark.ui.enabled=false", "run", "alarm.wsql"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable,
             "PYSPARK_DRIVER_PYTHON": sys.executable})

    def output() -> str:
        return (tmp_path / "out.log").read_text()

    try:
        deadline = time.monotonic() + 180
        while "running in Spark's real-time mode" not in output():
            assert proc.poll() is None, "wavesql run ended: " + output()
            assert time.monotonic() < deadline, "the service did not start: " + output()
            time.sleep(0.2)
        assert "alarm.wsql:2: stream real-time into alarms: running" in output()
        events = _events(90, 200)
        kafka.produce(source, [(r.k, json.dumps({"k": r.k, "v": int(r.v), "ts": _iso(r.ts)}),
                                i % 2) for i, r in enumerate(events.itertuples())])
        # the oracle: the source records as a consumer of our own reads them
        produced = [(p, o, json.loads(v)) for p, o, _, v in kafka.consume(source)]
        want = sorted((r["k"], r["v"], p, o) for p, o, r in produced if r["v"] >= 90)
        assert len(want) > 10
        got, deadline = [], time.monotonic() + 60
        while time.monotonic() < deadline:
            got = kafka.consume(alarms)
            if len({key for *_, key, _ in got}) >= len(want):
                break
            assert proc.poll() is None, "the service ended: " + output()
            time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        log.close()
    assert code == 0, output()
    assert "SIGTERM: stopping the real-time queries" in output()
    assert "alarm.wsql: 3 statement(s) ok" in output(), output()
    by_key: dict = {}
    for *_, key, value in got:
        assert by_key.setdefault(key, value) == value, "one key, two payloads"
    rows = [json.loads(v) for v in by_key.values()]
    assert sorted((r["k"], r["v"], r["_partition"], r["_offset"]) for r in rows) == want
    assert all(r["_final"] is True and r.get("_progress") is None for r in rows)
    with Catalog(tmp_path / "catalog.db") as catalog:
        (last,) = catalog.runs(None, 1)
    assert last["status"] == "ok" and last["statements"] == 3 and last["trigger"] == "run"


def test_a_plan_real_time_mode_cannot_run_fails_the_run_at_its_statement(ws, kafka, tmp_path):
    """``wavesql check`` binds a real-time statement's sink and query. A windowed query in
    ``STREAM REAL-TIME INTO``: the run fails with the REPL's error (STREAMING_RULE, EXPLAIN
    STREAM's reason) at the statement's line, after the file's other statements ran; a file
    sink is refused at the sink's name."""
    from wavesql.cli import check_text
    from wavesql.jobs import run_file

    source, alarms = _topic(kafka), _topic(kafka)
    good = _service_file(source, alarms, kafka.bootstrap)
    assert check_text(ws, good) == []  # `wavesql check`: the sink and the query bind
    (typo,) = check_text(ws, good.replace("INTO alarms", "INTO alarm"))
    assert typo.code == "UNKNOWN_STREAM" and "did you mean `alarms`" in typo.hint
    text = good.replace(
        "SELECT k, v, _partition, _offset FROM ev WHERE v >= 90",
        "SELECT k, count(*) AS n FROM ev [RANGE 4 SECONDS] GROUP BY k")
    (tmp_path / "windowed.wsql").write_text(text)
    run = run_file(ws, str(tmp_path / "windowed.wsql"))
    assert run.status == "failed" and run.statements == 2  # the CREATEs ran
    err = run.error
    assert isinstance(err, WaveSQLError) and err.code == "STREAMING_RULE"
    assert "cannot run in real-time mode: it is a windowed query" in err.message
    assert "windowed.wsql:2:1" in str(err), str(err)  # STREAM REAL-TIME INTO's line
    ws.sql(f"CREATE SINK files TO '{tmp_path / 'files'}' FORMAT parquet")
    (tmp_path / "to_files.wsql").write_text(
        "SELECT 1;\nSTREAM REAL-TIME INTO files SELECT k, v FROM ev WHERE v > 1;\n")
    run = run_file(ws, str(tmp_path / "to_files.wsql"))
    assert run.status == "failed" and run.error.code == "STREAMING_RULE"
    assert "`files` is not a Kafka sink" in run.error.message
    assert "to_files.wsql:2:23" in str(run.error), str(run.error)


def test_schedule_refuses_a_file_with_a_real_time_statement(tmp_path):
    """No Spark: ``wavesql schedule`` leaves such a file out with NOT_SCHEDULABLE at the
    statement (line and column) and a hint to run it as a service; ``run_file`` refuses it
    for the scheduler too, before running anything; the REPL's own STREAM statements are
    refused in any query file."""
    from wavesql.catalog import Catalog
    from wavesql.jobs import run_file
    from wavesql.schedule import Scheduler, read_schedule

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    service = jobs / "alarm.wsql"
    service.write_text("-- schedule: */5 * * * *\n" + _service_file("src", "dst", "h:1"))
    (jobs / "plain.wsql").write_text("-- schedule: */5 * * * *\nSELECT 1;\n")
    with pytest.raises(WaveSQLError) as caught:
        read_schedule(service)
    err = caught.value
    assert err.code == "NOT_SCHEDULABLE" and "wavesql run" in err.hint
    assert f"{service}:3:1" in str(err), str(err)  # STREAM REAL-TIME INTO alarms, line 3
    errors: list[str] = []
    scheduler = Scheduler(None, jobs, print_error=errors.append)
    assert [Path(e.file).name for e in scheduler.entries()] == ["plain.wsql"]
    assert len(errors) == 1 and "NOT_SCHEDULABLE" in errors[0]

    with Catalog(tmp_path / "catalog.db") as catalog:
        session = types.SimpleNamespace(catalog=catalog)  # nothing may run: no Spark
        run = run_file(session, str(service), trigger="schedule")
        assert run.status == "failed" and run.error.code == "NOT_SCHEDULABLE"
        assert run.statements == 0
        repl_only = tmp_path / "repl.wsql"
        repl_only.write_text("SELECT 1;\nSTREAM BACKGROUND SELECT k FROM ev [RANGE 1 SECOND];\n")
        run = run_file(session, str(repl_only))
        assert run.status == "failed" and run.error.code == "UNSUPPORTED_STATEMENT"
        assert run.statements == 0 and f"{repl_only}:2:1" in str(run.error)


# -- result latency on the state store ----------------------------------------------------

def _kafka_timestamps(kafka, topic: str) -> dict[int, int]:
    """offset -> the record's Kafka timestamp (ms), as a consumer of our own reads it."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"o-{uuid.uuid4()}",
                         "log_level": 0, "enable.auto.commit": False})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
        consumer.assign([TopicPartition(topic, 0, 0)])
        out, deadline = {}, time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                out[msg.offset()] = msg.timestamp()[1]
        return out
    finally:
        consumer.close()


def _windows_oracle(frame: pd.DataFrame, progress: int) -> list[tuple]:
    """(end, k, n): windows (t - 2 s, t], t a multiple of 2 s, final below ``progress``."""
    ends = -(-frame.ts // (2 * SECOND)) * 2 * SECOND
    return sorted((int(t), k, len(g)) for (t, k), g in frame.assign(t=ends).groupby(["t", "k"])
                  if t < progress)


def _over_oracle(frame: pd.DataFrame, progress: int) -> list[tuple]:
    """(ts, k, c): each row final below ``progress``, with the count of its key's rows in
    [ts - 2 s, ts]."""
    return sorted((int(r.ts), r.k, int(((frame.k == r.k) & (frame.ts >= r.ts - 2 * SECOND)
                                        & (frame.ts <= r.ts)).sum()))
                  for r in frame.itertuples() if r.ts < progress)


@pytest.mark.parametrize("sql,time_column,oracle", [
    ("SELECT k, count(*) AS n FROM ev [RANGE 2 SECONDS SLIDE 2 SECONDS] GROUP BY k", "_time",
     _windows_oracle),
    ("SELECT ts, k, count(*) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL 2 SECONDS "
     "PRECEDING AND CURRENT ROW) AS n FROM ev", "ts", _over_oracle)], ids=["windows", "over"])
def test_state_store_over_kafka_reports_latency_from_the_batch_before(
        ws, spark, kafka, tmp_path, sql, time_column, oracle):
    """A tumbling-window count (and an OVER window) over a Kafka topic on the state-store
    runner, 50 records a micro-batch: every batch that emits final rows reports a latency,
    measured from the earliest Kafka timestamp of the batch before it (which made those
    rows final) -- equal to its finish time minus that timestamp as our own consumer reads
    it, >= 0 and within the wall-clock time since that record was produced. The figure each
    batch keeps for the next is in its _progress record; the results are pandas'."""
    from wavesql.streaming.metrics import read_reports

    topic, n, per_batch = _topic(kafka), 150, 50
    ws.sql(f"CREATE STREAM ev (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' OPTIONS "
           f"(bootstrap = '{kafka.bootstrap}', maxOffsetsPerTrigger = '{per_batch}') "
           "FORMAT json EVENT TIME ts WATERMARK 1 SECOND")
    assert "state store" in ws.explain(sql, "STREAM")
    frame = pd.DataFrame({"k": [("a", "b", "c")[i % 3] for i in range(n)],
                          "ts": [i * 200_000 for i in range(n)]})  # 10 s of events a batch
    kafka.produce(topic, [(None, json.dumps({"k": r.k, "v": i, "ts": _iso(r.ts)}), 0)
                          for i, r in enumerate(frame.itertuples())])
    stamps = _kafka_timestamps(kafka, topic)
    assert len(stamps) == n
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    done = time.time()

    reports = {r.batch: r for r in cq.reports}
    data = [b for b in sorted(reports) if reports[b].rows_in]
    assert data == list(range(n // per_batch))  # batch b reads offsets [50 b, 50 b + 50)
    assert all(reports[b].rows_in == per_batch for b in data)

    def earliest(b):  # the oracle: batch b's earliest record, in seconds
        return min(stamps[o] for o in range(b * per_batch, (b + 1) * per_batch)) / 1000

    for b in data:
        assert reports[b].arrived_s == pytest.approx(earliest(b), abs=1e-6)
    emitting = [b for b in sorted(reports) if reports[b].final_out]
    assert emitting == list(range(1, n // per_batch + 1))  # the last: Spark's no-data batch
    for b in emitting:
        latency = reports[b].latency_s
        assert latency is not None, f"batch {b} emitted final rows without a latency"
        assert latency == pytest.approx(reports[b].finished_at - earliest(b - 1), abs=1e-3)
        assert 0 <= latency <= done - earliest(b - 1)
    assert all(reports[b].latency_s is None for b in reports if not reports[b].final_out)
    # what a restarted query reads for the batch before its first: the _progress records
    records = {r["batch"]: r for r in read_reports(tmp_path / "out")}
    assert {b: records[b]["arrived_s"] for b in data} == {b: reports[b].arrived_s for b in data}
    assert {b: records[b]["latency_s"] for b in emitting} == {
        b: reports[b].latency_s for b in emitting}
    figures = cq.metrics
    assert figures["latency_max_s"] == max(reports[b].latency_s for b in emitting)

    # the results, final below the progress
    epoch = (T0 - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
    got = sorted(((r[time_column] - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1)
                  - epoch, r.k, r.n) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == oracle(frame, frame.ts.max() - SECOND)
