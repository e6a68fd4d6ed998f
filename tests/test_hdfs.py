"""hdfs:// locations end to end against a real HDFS on loopback (tests/hdfs_cluster.py:
Hadoop's MiniDFSCluster with WebHDFS): Spark reads and writes with the HDFS client PySpark
ships, WaveSQL's own I/O (WAV samples in tasks, listings, progress and commit records)
goes through WebHDFS (storage/hdfs.py: no libhdfs here). Both are configured once, by the
Hadoop settings on the Spark session. The oracles: plain WebHDFS REST calls (urllib) for
what is in HDFS, numpy/scipy/pandas for results, plain ``spark.read`` for sinks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from wavesql import storage
from wavesql.errors import WaveSQLError

from tests.hdfs_cluster import hdfs  # noqa: F401 - the session's HDFS fixture
from tests.store_cases import (create_event_stream, insert_job_runs_incrementally,
                                put_events, signal_equals_numpy, unique_prefix)

pytestmark = pytest.mark.spark


def test_the_storage_layer_sees_what_webhdfs_sees(hdfs, spark, tmp_path):
    """Listings, types, ranged reads, whole-file writes and deletes through WaveSQL's
    storage layer, configured from the Spark session's Hadoop settings alone, against
    what the namenode's REST interface says."""
    storage.use(storage.Settings.from_spark(spark))  # what a session does at each statement
    p = unique_prefix(tmp_path, "/")
    for key, body in [("a.wav", b"x" * 10), ("b.WAV", b"y" * 5), ("c.txt", b"z"),
                      ("sub/d.wav", b"w" * 3)]:
        hdfs.put(f"{p}/{key}", body)
    folder = hdfs.uri(p)
    assert storage.file_type(folder) == "dir"
    assert storage.file_type(f"{folder}/a.wav") == "file"
    assert storage.file_type(f"{folder}/nothing") == "missing"
    assert [(e.location, e.size) for e in storage.files(folder, suffix=".wav")] == [
        (f"{folder}/a.wav", 10), (f"{folder}/b.WAV", 5)]
    assert [e.location for e in storage.list_files(folder, recursive=True)] == [
        hdfs.uri(f) for f in hdfs.files(p)]
    assert [e.location for e in storage.glob(f"{folder}/**/*.wav")] == [
        f"{folder}/a.wav", f"{folder}/sub/d.wav"]
    assert storage.stat(f"{folder}/a.wav").mtime_ns > 0  # arrival order needs real times
    # a whole-file write (then one over it), read back by the REST interface; no
    # temporary file left beside it
    storage.write_bytes(f"{folder}/out/x.bin", b"hello")
    storage.write_bytes(f"{folder}/out/x.bin", b"hello, again")
    assert hdfs.get(f"{p}/out/x.bin") == b"hello, again"
    assert hdfs.files(f"{p}/out") == [f"{p}/out/x.bin"]
    with storage.open_input(f"{folder}/a.wav") as f:
        f.seek(4)
        buf = bytearray(3)
        assert f.readinto(buf) == 3 and bytes(buf) == b"xxx"
    # hdfs:///path is the namenode of fs.defaultFS (a cluster's usual setting; not set on
    # the tests' shared Spark, where it would move every path without a scheme)
    settings = storage.current()
    storage.use(storage.Settings.of({**dict(settings.hadoop),
                                     "fs.defaultFS": f"hdfs://{hdfs.authority}"}))
    try:
        assert storage.read_bytes(f"hdfs://{p}/sub/d.wav") == b"w" * 3
    finally:
        storage.use(settings)
    storage.delete(folder, recursive=True)
    assert hdfs.files(p) == []


def test_a_batch_query_over_a_stream_in_hdfs_equals_pandas(hdfs, ws, tmp_path):
    p = unique_prefix(tmp_path, "/")
    events = put_events(hdfs, tmp_path, p)
    create_event_stream(ws, hdfs, p)
    got = ws.sql("SELECT k, sum(v) AS s, count(*) AS n FROM ev WHERE v > 1.5 GROUP BY k"
                 ).collect()
    want = events[events.v > 1.5].groupby("k").v.agg(["sum", "count"])
    assert sorted((r.k, r.s, r.n) for r in got) == sorted(
        (k, s, n) for k, (s, n) in want.iterrows())


def test_a_signal_in_hdfs_equals_numpy_over_its_samples(hdfs, ws, tmp_path):
    """seg_rms and seg_max per 1,000-sample window over two WAV files in HDFS (read in
    Spark's Python tasks over WebHDFS; local copies gone), against numpy over the samples
    scipy reads from the same files."""
    signal_equals_numpy(hdfs, ws, tmp_path, unique_prefix(tmp_path, "/"))


def test_the_direct_pass_reads_parquet_row_groups_from_hdfs(hdfs, ws, tmp_path, monkeypatch):
    """A moving average over a 2-second RANGE frame with the direct pass on at any size:
    it reads the Parquet footers and row groups from HDFS itself (WebHDFS, on the driver
    and in tasks); every row's average equals pandas' rolling mean. (5.5 s after other
    Spark tests, 44 s as a session's first query, at load 12-13 on 2 cores.)"""
    from wavesql.sources import parquet_chunks

    read = []
    monkeypatch.setattr(parquet_chunks, "parquet_file",
                        lambda loc, _f=parquet_chunks.parquet_file: read.append(loc) or _f(loc))
    rng = np.random.default_rng(3)
    p, n = unique_prefix(tmp_path, "/"), 3_000
    ms = np.sort(rng.choice(60_000, n, replace=False))  # distinct times: no frame peers
    events = pd.DataFrame({"k": rng.choice(["a", "b"], n), "v": rng.standard_normal(n),
                           "ts": (pd.Timestamp("2026-01-01") + pd.to_timedelta(ms, unit="ms")
                                  ).astype("datetime64[us]")})
    for i in range(3):
        events.iloc[i * 1000:(i + 1) * 1000].to_parquet(tmp_path / f"w{i}.parquet",
                                                         index=False, row_group_size=250)
        hdfs.put(f"{p}/events/w{i}.parquet", tmp_path / f"w{i}.parquet")
    create_event_stream(ws, hdfs, p)
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    ws.spark.conf.set("wavesql.windows.chunk_rows", "1000")
    try:
        got = ws.sql("SELECT ts, avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 2 SECONDS "
                     "PRECEDING AND CURRENT ROW) AS m FROM ev").toPandas()
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
        ws.spark.conf.unset("wavesql.windows.chunk_rows")
    assert read and all(loc.startswith("hdfs://") for loc in read)
    want = events.set_index("ts").v.rolling("2s", closed="both").mean()
    got = got.assign(ts=got.ts.astype("datetime64[us]")).set_index("ts").m.sort_index()
    assert got.index.tolist() == want.index.tolist()
    np.testing.assert_allclose(got.to_numpy(), want.to_numpy(), rtol=1e-9, atol=1e-12)

# ---------------------------------------------------------------------------- bad locations
def test_a_missing_path_and_an_unreachable_namenode_are_clear_errors(hdfs, ws, spark,
                                                                     tmp_path):
    """At the DDL's location clause: a path HDFS does not have is MISSING_PATH; a
    nameservice whose namenode does not answer (its WebHDFS address a closed port) is
    STORAGE_UNREACHABLE naming the settings to check -- never a stack trace."""
    ddl = f"CREATE STREAM t (v DOUBLE) FROM '{hdfs.uri('/not/there')}/' FORMAT parquet"
    with pytest.raises(WaveSQLError) as info:
        ws.sql(ddl)
    assert info.value.code == "MISSING_PATH"
    assert ddl[info.value.span.start:info.value.span.end] == f"'{hdfs.uri('/not/there')}/'"
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("dfs.namenode.http-address.deadnn", "127.0.0.1:1")
    try:
        with pytest.raises(WaveSQLError) as info:
            ws.sql("CREATE STREAM u (v DOUBLE) FROM 'hdfs://deadnn/x/' FORMAT parquet")
        assert info.value.code == "STORAGE_UNREACHABLE"
        assert "hdfs://deadnn/x/" in info.value.message
        assert "dfs.namenode.http-address" in info.value.hint
        assert "\tat " not in str(info.value) and "Traceback" not in str(info.value)
    finally:
        conf.unset("dfs.namenode.http-address.deadnn")


def test_spark_meeting_an_unreachable_namenode_is_storage_unreachable(hdfs, spark):
    """Spark's own HDFS client (a query's read) meeting a namenode that does not answer:
    STORAGE_UNREACHABLE naming its address and what to check, no Java stack trace."""
    from wavesql.spark_errors import runtime_errors

    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("ipc.client.connect.max.retries", "0")  # Hadoop's RPC client retries 10 times
    try:
        with pytest.raises(WaveSQLError) as info, runtime_errors():
            spark.read.parquet("hdfs://127.0.0.1:1/x/").collect()
    finally:
        conf.unset("ipc.client.connect.max.retries")
    assert info.value.code == "STORAGE_UNREACHABLE"
    # (Hadoop names 127.0.0.1 by its host name)
    assert info.value.message.endswith(":1 did not answer"), info.value.message
    assert "fs.defaultFS" in info.value.hint
    assert "\tat " not in str(info.value)


_AS_ANOTHER_USER = """
import sys
from wavesql import storage
from wavesql.errors import WaveSQLError
storage.use(storage.Settings.of({"dfs.namenode.http-address": sys.argv[1]}))
for attempt in (lambda: storage.check_reachable([sys.argv[2]]),
                lambda: storage.write_text(sys.argv[2] + "/mine.txt", "x")):
    try:
        attempt()
        print("ALLOWED")
    except WaveSQLError as e:
        print(e.code, "|", e.message, "|", e.hint)
"""


def test_a_folder_the_user_may_not_enter_is_storage_denied(hdfs, tmp_path):
    """A folder of HDFS's superuser with mode 700, reached by another user
    (HADOOP_USER_NAME, Hadoop's simple authentication) in a process of its own: reading
    and writing are STORAGE_DENIED, naming the location."""
    p = unique_prefix(tmp_path, "/")
    hdfs.put(f"{p}/secret/x.parquet", b"PAR1")
    hdfs._rest("PUT", p, "SETPERMISSION", permission="700")
    location = hdfs.uri(f"{p}/secret")
    env = dict(os.environ, HADOOP_USER_NAME="mallory")
    out = subprocess.run([sys.executable, "-c", _AS_ANOTHER_USER, hdfs.http_address, location],
                         env=env, capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out.stdout + out.stderr
    for line in lines:
        code, message, hint = line.split(" | ")
        assert code == "STORAGE_DENIED" and location in message and "mallory" in message
        assert "HADOOP_USER_NAME" in hint
    assert hdfs.files(f"{p}/secret") == [f"{p}/secret/x.parquet"]  # nothing written


# ---------------------------------------------------------------------------- jobs, continuous
@pytest.mark.slow
def test_insert_into_a_sink_in_hdfs_runs_incrementally_exactly_once(hdfs, ws, spark, tmp_path):
    """An INSERT INTO job with its stream, sink and checkpoint in HDFS, run twice with a
    file arriving in between: the second run reads only the new file, and the sink (read
    by plain Spark at its root) holds each row once, equal to pandas' filter. (Slow: 29-33 s in a
    warm session, 66 s in a cold one, at load 10-13 on 2 cores.)"""
    p = unique_prefix(tmp_path, "/")
    insert_job_runs_incrementally(hdfs, ws, spark, tmp_path, p)
    # the commit log Spark reads the sink by is in the store
    assert any("/_spark_metadata/" in f for f in hdfs.files(f"{p}/sink"))


@pytest.mark.slow
def test_a_windowed_query_in_hdfs_restarts_where_it_stopped(hdfs, ws, spark, tmp_path):
    """A continuous tumbling count on the state-store runner with its input, output and
    checkpoint (Spark's offsets and RocksDB state) in HDFS, run to the end of two files,
    then restarted after a third arrives: the final counts per window and key equal
    pandas' over all three files, each window once. (Slow: 52-73 s in a warm
    session at load 10-13 on 2 cores.)"""
    p = unique_prefix(tmp_path, "/")
    events = put_events(hdfs, tmp_path, p)
    create_event_stream(ws, hdfs, p)
    query = "SELECT k, count(*) AS n FROM ev [RANGE 2 SECONDS SLIDE 2 SECONDS] GROUP BY k"
    out, ckpt = hdfs.uri(f"{p}/out"), hdfs.uri(f"{p}/ckpt")
    assert "state store" in ws.explain(query, "STREAM")
    ws.stream(query, out, ckpt, max_files_per_trigger=1).await_termination()
    third = pd.DataFrame({"k": ["a", "c", "a", "b"], "v": [1.0] * 4,
                          "ts": pd.to_datetime([f"2026-01-01 00:00:{s:02d}"
                                                for s in (8, 9, 11, 14)]).astype("datetime64[us]")})
    third.to_parquet(tmp_path / "e2.parquet", index=False)
    hdfs.put(f"{p}/events/e2.parquet", tmp_path / "e2.parquet")
    ws.stream(query, out, ckpt).await_termination()  # a restart on the same checkpoint
    got = spark.read.parquet(out).where("_final").toPandas()
    every = pd.concat([events, third], ignore_index=True)
    # window (t - 2 s, t] at t = 2 s * k; final once progress (max ts - 1 s: every row
    # before it has arrived) is past t
    us = every.ts.astype("datetime64[us]").astype("int64")
    window_end = -(-us // 2_000_000) * 2_000_000
    closed = window_end < us.max() - 1_000_000
    want = every[closed].assign(t=window_end[closed]).groupby(["t", "k"]).size()
    have = got.assign(t=got["_time"].astype("datetime64[us]").astype("int64"))
    assert not have.duplicated(["t", "k"]).any(), "a window's final count twice"
    assert have.set_index(["t", "k"])["n"].to_dict() == want.to_dict()
