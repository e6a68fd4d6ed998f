"""Locations that are URIs: data in an S3 bucket (a real S3-protocol server on loopback,
tests/object_store.py), read by Spark's S3A connector and by WaveSQL's own storage layer
(wavesql.storage). The oracle for what is in the bucket is boto3; the example applications
with their data in the bucket are in tests/test_apps.py and tests/test_tilt.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from wavesql import storage
from wavesql.errors import WaveSQLError

from tests.processes import kill_after_two_commits, kill_after_two_commits_then_rerun
from tests.store_cases import (create_event_stream, put_events, signal_equals_numpy,
                                unique_prefix)
from tests.test_run_files import run_in_process

pytestmark = pytest.mark.spark

_names = itertools.count()  # bucket names of the tests' own


def test_the_storage_layer_sees_what_boto3_sees(s3, spark, tmp_path):
    storage.use(storage.Settings.from_spark(spark))  # what a session does at each statement
    p = unique_prefix(tmp_path)
    for key, body in [("a.wav", b"x" * 10), ("b.WAV", b"y" * 5), ("c.txt", b"z"),
                      ("sub/d.wav", b"w" * 3)]:
        s3.put(f"{p}/{key}", body)
    folder = s3.uri(p)
    assert storage.file_type(folder) == "dir"
    assert storage.file_type(f"{folder}/a.wav") == "file"
    assert storage.file_type(f"{folder}/nothing") == "missing"
    # a folder's *.wav in any case, not recursive; sizes as stored
    assert [(e.location, e.size) for e in storage.files(folder, suffix=".wav")] == [
        (f"{folder}/a.wav", 10), (f"{folder}/b.WAV", 5)]
    want = sorted(s3.uri(k) for k in s3.keys(p + "/"))
    assert [e.location for e in storage.list_files(folder, recursive=True)] == want
    assert [e.location for e in storage.glob(f"{folder}/*.wav")] == [f"{folder}/a.wav"]
    assert [e.location for e in storage.glob(f"{folder}/**/*.wav")] == [
        f"{folder}/a.wav", f"{folder}/sub/d.wav"]
    # a whole-object write, read back by boto3; delete removes a folder's every object
    storage.write_bytes(f"{folder}/out/x.bin", b"hello")
    assert s3.get(f"{p}/out/x.bin") == b"hello"
    with storage.open_input(f"{folder}/a.wav") as f:
        f.seek(4)
        buf = bytearray(3)
        assert f.readinto(buf) == 3 and bytes(buf) == b"xxx"
    storage.delete(folder, recursive=True)
    assert s3.keys(p + "/") == []


def test_locations_are_stored_as_given_and_local_paths_made_absolute(s3, ws, tmp_path):
    p = unique_prefix(tmp_path)
    pd.DataFrame({"v": [1.0]}).to_parquet(tmp_path / "x.parquet")
    s3.put(f"{p}/x.parquet", tmp_path / "x.parquet")
    ws.sql(f"CREATE STREAM r (v DOUBLE) FROM '{s3.uri(p)}/' FORMAT parquet")
    ws.sql("CREATE STREAM l (v DOUBLE) FROM 'x.parquet' FORMAT parquet", base_dir=tmp_path)
    ws.sql(f"CREATE STREAM f (v DOUBLE) FROM 'file://{tmp_path}/x.parquet' FORMAT parquet")
    assert ws.catalog.get("r").path == f"{s3.uri(p)}/"
    assert ws.catalog.get("l").path == str(tmp_path / "x.parquet")
    assert ws.catalog.get("f").path == str(tmp_path / "x.parquet")


@pytest.mark.parametrize("ddl, code, where", [
    ("CREATE STREAM t (v DOUBLE) FROM 's3a://no-such-bucket/x/' FORMAT parquet",
     "MISSING_BUCKET", "'s3a://no-such-bucket/x/'"),
    ("CREATE STREAM t (v DOUBLE) FROM 's3a://wavesql-test/not/there/' FORMAT parquet",
     "MISSING_PATH", "'s3a://wavesql-test/not/there/'"),
    ("CREATE STREAM t (v DOUBLE) FROM 'foo://host/x/' FORMAT parquet",
     "UNSUPPORTED_SCHEME", "'foo://host/x/'"),
    ("CREATE SINK k TO 's3a://no-such-bucket/out/' FORMAT parquet",
     "MISSING_BUCKET", "'s3a://no-such-bucket/out/'"),
    ("CREATE SIGNAL s (ch1 FLOAT) RATE 8000 HZ FROM 's3a://wavesql-test/none/' FORMAT wav",
     "MISSING_PATH", "'s3a://wavesql-test/none/'"),
])
def test_a_bad_location_is_a_clear_error_at_its_clause(s3, ws, ddl, code, where):
    with pytest.raises(WaveSQLError) as info:
        ws.sql(ddl)
    err = info.value
    assert err.code == code
    assert ddl[err.span.start:err.span.end] == where  # the location, not the statement
    assert "Exception" not in str(err) and "\tat " not in str(err)


def test_an_unreachable_store_is_named_with_what_to_configure(s3, ws, spark, tmp_path):
    from wavesql.spark_errors import runtime_errors

    bucket = f"unreachable-{next(_names)}"
    s3.client().create_bucket(Bucket=bucket)
    pd.DataFrame({"v": [1.0, 2.0]}).to_parquet(tmp_path / "x.parquet")
    s3.client().put_object(Bucket=bucket, Key="d/x.parquet",
                           Body=(tmp_path / "x.parquet").read_bytes())
    ws.sql(f"CREATE STREAM u (v DOUBLE) FROM 's3a://{bucket}/d/' FORMAT parquet")
    # then the bucket's endpoint (a per-bucket Hadoop setting, as S3A has them) stops
    # answering: for Spark's S3A connector (it has not touched this bucket yet, so it has no
    # filesystem cached for it) and for WaveSQL's own I/O
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    settings = {f"fs.s3a.bucket.{bucket}.endpoint": "http://127.0.0.1:1",
                f"fs.s3a.bucket.{bucket}.attempts.maximum": "1",
                f"fs.s3a.bucket.{bucket}.retry.limit": "1"}
    for k, v in settings.items():
        conf.set(k, v)
    try:
        with pytest.raises(WaveSQLError) as info, runtime_errors():
            ws.sql("SELECT sum(v) AS s FROM u").collect()
        assert info.value.code == "STORAGE_UNREACHABLE"
        assert f"s3a://{bucket}/d" in info.value.message
        assert "fs.s3a.endpoint" in info.value.hint and "\tat " not in str(info.value)
        with pytest.raises(WaveSQLError) as info:
            ws.sql(f"CREATE STREAM u2 (v DOUBLE) FROM 's3a://{bucket}/d/' FORMAT parquet")
        assert info.value.code == "STORAGE_UNREACHABLE"
        assert f"s3a://{bucket}/d/" in info.value.message
        assert "fs.s3a.endpoint" in info.value.hint
    finally:
        for k in settings:
            conf.unset(k)


def test_a_store_that_refuses_the_credentials_is_storage_denied(s3, ws, spark, tmp_path):
    """A second S3 server that checks credentials (none it knows): WaveSQL's own I/O (at
    the DDL) and Spark's S3A connector (a read) both say STORAGE_DENIED, naming the
    location and the settings to check -- never a stack trace."""
    from tests.object_store import S3Server
    from wavesql.spark_errors import runtime_errors

    with S3Server(tmp_path, auth=True) as strict:
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        bucket = f"denied-{next(_names)}"
        settings = {f"fs.s3a.bucket.{bucket}.endpoint": strict.endpoint,
                    f"fs.s3a.bucket.{bucket}.attempts.maximum": "1",
                    f"fs.s3a.bucket.{bucket}.retry.limit": "1"}
        for k, v in settings.items():
            conf.set(k, v)
        try:
            with pytest.raises(WaveSQLError) as info:
                ws.sql(f"CREATE STREAM d (v DOUBLE) FROM 's3a://{bucket}/x/' FORMAT parquet")
            assert info.value.code == "STORAGE_DENIED"
            assert f"s3a://{bucket}/x/" in info.value.message
            assert "fs.s3a.access.key" in info.value.hint
            with pytest.raises(WaveSQLError) as info, runtime_errors():
                spark.read.parquet(f"s3a://{bucket}/x/").collect()
            assert info.value.code == "STORAGE_DENIED", info.value
            assert "\tat " not in str(info.value)
        finally:
            for k in settings:
                conf.unset(k)


def test_a_signal_in_a_bucket_equals_numpy_over_its_samples(s3, ws, tmp_path):
    """seg_rms and seg_max per 1,000-sample window over two WAV files in the bucket (local
    copies gone), against numpy over the samples scipy reads from the same files."""
    signal_equals_numpy(s3, ws, tmp_path, unique_prefix(tmp_path))



def test_a_continuous_query_reads_a_stream_from_a_bucket(s3, ws, spark, tmp_path):
    """The input in the bucket, the checkpoint and output on disk: the continuous result
    equals pandas over the same rows."""
    p = unique_prefix(tmp_path)
    events = put_events(s3, tmp_path, p)
    ws.sql(f"CREATE STREAM ev (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{s3.uri(p)}/events/' "
           "FORMAT parquet EVENT TIME ts WATERMARK 0 SECONDS")
    cq = ws.stream("SELECT k, v FROM ev WHERE v > 1.5", tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    got = spark.read.parquet(str(tmp_path / "out")).select("k", "v").toPandas()
    want = events[events.v > 1.5][["k", "v"]]
    assert sorted(map(tuple, got.to_numpy().tolist())) == \
        sorted(map(tuple, want.to_numpy().tolist()))


def test_insert_into_a_sink_in_a_bucket_runs_incrementally_exactly_once(s3, ws, spark, tmp_path):
    """An INSERT INTO job with its stream, sink and checkpoint in the bucket, run twice
    with a file arriving in between: the sink, read at its root (the index of what every
    job committed), holds each row once; a second job publishes beside the first."""
    p = unique_prefix(tmp_path)
    events = put_events(s3, tmp_path, p)
    create_event_stream(ws, s3, p)
    sink = s3.uri(f"{p}/sink")
    ws.sql(f"CREATE SINK k TO '{sink}/' FORMAT parquet")
    first = ws.execute("INSERT INTO k SELECT k, v FROM ev WHERE v >= 1.0")[-1].report
    assert first.batches >= 1 and first.rows_in == len(events)
    third = pd.DataFrame({"k": ["z"], "v": [9.0],
                          "ts": pd.to_datetime(["2026-01-01 00:00:09"]).astype("datetime64[us]")})
    third.to_parquet(tmp_path / "e2.parquet", index=False)
    s3.put(f"{p}/events/e2.parquet", tmp_path / "e2.parquet")
    second = ws.execute("INSERT INTO k SELECT k, v FROM ev WHERE v >= 1.0")[-1].report
    assert second.rows_in == 1  # only the new file
    ws.execute("INSERT INTO k SELECT k, v * 10 AS v FROM ev WHERE k = 'z'")  # another job
    got = spark.read.parquet(sink).select("k", "v").collect()
    every = pd.concat([events, third])
    want = [tuple(r) for r in every[every.v >= 1.0][["k", "v"]].to_numpy().tolist()] + [
        ("z", 90.0)]
    assert sorted((r.k, r.v) for r in got) == sorted(want)
    assert set(spark.read.parquet(sink).columns) >= {"job", "batch", "_progress"}
    assert any(k.endswith(".compact") for k in s3.keys(f"{p}/sink/_spark_metadata/"))


def test_a_replacing_job_in_a_bucket_replaces_its_rows(s3, ws, spark, tmp_path):
    """A job over a signal (a batch query: each run replaces the statement's output) with
    the recording and the sink in the bucket: after three runs -- the third over one more
    file -- the sink holds the last run's rows once, equal to numpy's."""
    from scipy.io import wavfile

    from wavesql.udfs.wav import write_wav

    p = unique_prefix(tmp_path)
    rng = np.random.default_rng(11)
    parts = [rng.standard_normal(3_000).astype(np.float32) * 0.2 for _ in range(2)]

    def put(i):
        write_wav(tmp_path / f"r_{i}.wav", parts[i], 8000, "float32")
        s3.put(f"{p}/rec/r_{i}.wav", tmp_path / f"r_{i}.wav")

    put(0)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{s3.uri(p)}/rec/' FORMAT wav")
    sink = s3.uri(f"{p}/peaks")
    ws.sql(f"CREATE SINK peaks TO '{sink}/' FORMAT parquet")
    job = "INSERT INTO peaks SELECT start_sample(ch1) AS s, seg_max(ch1) AS m FROM mic [SAMPLES 1000]"
    ws.execute(job)
    ws.execute(job)
    assert spark.read.parquet(sink).count() == 3
    put(1)
    report = ws.execute(job)[-1].report
    assert report.mode == "replace" and report.rows_out == 6
    got = spark.read.parquet(sink).orderBy("s").collect()
    x = np.concatenate([wavfile.read(tmp_path / f"r_{i}.wav")[1] for i in range(2)])
    assert [r.s for r in got] == list(range(0, 6_000, 1000))
    np.testing.assert_array_equal([r.m for r in got],
                                  [x[s:s + 1000].max() for s in range(0, 6_000, 1000)])


# ---------------------------------------------------------------------------- commits
def test_spark_reads_only_the_batches_committed_to_a_bucket(s3, spark, tmp_path):
    """The commit protocol on an object store (streaming/sinks.py): 23 batches, a re-run of
    batch 12 (its first attempt's rows replaced), a killed attempt's file left in a batch
    folder: spark.read sees exactly the committed rows, across the log's compactions
    (records 9 and 19 repeat the ones before them)."""
    from wavesql.streaming import sinks

    storage.use(storage.Settings.from_spark(spark))
    root = s3.uri(f"{unique_prefix(tmp_path)}/out")
    want = {}
    for b in range(23):
        rows = [(b, i) for i in range(b % 4 + 1)]
        if b == 12:  # a first attempt, committed, then the batch re-run with other rows
            sinks.commit(spark.createDataFrame([(12, 99)], "b int, i int"), root, b)
        sinks.commit(spark.createDataFrame(rows, "b int, i int"), root, b)
        want[b] = rows
    # an attempt killed before its commit record: its file is in the folder, not the log
    orphan = tmp_path / "orphan.parquet"
    pd.DataFrame({"b": [22], "i": [1000]}).astype("int32").to_parquet(orphan)
    s3.put(f"{root.split('/', 3)[3]}/batch=000000022/part-orphan.parquet", orphan)
    got = sorted((r.b, r.i) for r in spark.read.parquet(root).select("b", "i").collect())
    assert got == sorted(r for rows in want.values() for r in rows)
    assert spark.read.parquet(root).select("batch").distinct().count() == 23
    names = [k.rsplit("/", 1)[1] for k in s3.keys(f"{root.split('/', 3)[3]}/_spark_metadata/")]
    assert "9.compact" in names and "19.compact" in names and "22" in names


# ---------------------------------------------------------------------------- continuous
def test_a_continuous_query_keeps_output_checkpoint_and_late_rows_in_a_bucket(
        s3, ws, spark, tmp_path):
    """Everything in the bucket -- input, output, checkpoint, late rows -- and a restart
    with new input: the output holds each on-time row once, the late rows their reason,
    and every micro-batch's record adds up (rows_in = on_time + late)."""
    from wavesql.streaming.metrics import read_reports

    p = unique_prefix(tmp_path)
    events = put_events(s3, tmp_path, p)
    create_event_stream(ws, s3, p)
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    query = "SELECT k, v, ts FROM ev WHERE v >= 1.0"
    ws.stream(query, out, ckpt, max_files_per_trigger=1).await_termination()
    # a third file: two on-time rows and one older than the progress already promised
    third = pd.DataFrame({"k": ["z", "z", "late"], "v": [5.0, 6.0, 7.0],
                          "ts": pd.to_datetime(["2026-01-01 00:00:09", "2026-01-01 00:00:10",
                                                "2026-01-01 00:00:01"]).astype("datetime64[us]")})
    third.to_parquet(tmp_path / "e2.parquet", index=False)
    s3.put(f"{p}/events/e2.parquet", tmp_path / "e2.parquet")
    ws.stream(query, out, ckpt).await_termination()  # a restart on the same checkpoint
    on_time = pd.concat([events, third.iloc[:2]])
    want = sorted(map(tuple, on_time[on_time.v >= 1.0][["k", "v"]].to_numpy().tolist()))
    got = spark.read.parquet(out).select("k", "v").collect()
    assert sorted((r.k, r.v) for r in got) == want
    late = spark.read.parquet(storage.join(ckpt, "late")).collect()
    assert [(r._stream, r._reason.startswith("event time before")) for r in late] == [
        ("ev", True)]
    reports = read_reports(out)
    assert [r["batch"] for r in reports] == [0, 1, 2]
    assert all(r["rows_in"] == r["on_time"] + r["late"] for r in reports)
    assert sum(r["rows_in"] for r in reports) == len(events) + len(third)
    assert not list(tmp_path.glob("**/_spark_metadata"))  # nothing went to local disk


def test_a_windowed_query_on_the_state_store_runs_in_a_bucket(s3, ws, spark, tmp_path):
    """The state-store runner with its checkpoint (Spark's offsets and RocksDB state) and
    output in the bucket: final tumbling counts per key equal pandas'."""
    p = unique_prefix(tmp_path)
    events = put_events(s3, tmp_path, p)
    create_event_stream(ws, s3, p)
    query = "SELECT k, count(*) AS n FROM ev [RANGE 2 SECONDS SLIDE 2 SECONDS] GROUP BY k"
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    assert "state store" in ws.explain(query, "STREAM")
    ws.stream(query, out, ckpt, max_files_per_trigger=1).await_termination()
    got = spark.read.parquet(out).where("_final").toPandas()
    assert storage.is_file(storage.join(ckpt, "wavesql.json"))
    # window (t - 2 s, t] at t = 2 s * k; final once progress (max ts - 1 s: every row
    # before it has arrived) is past t
    us = events.ts.astype("datetime64[us]").astype("int64")
    window_end = -(-us // 2_000_000) * 2_000_000
    closed = window_end < us.max() - 1_000_000
    want = events[closed].assign(t=window_end[closed]).groupby(["t", "k"]).size()
    have = got.assign(t=got["_time"].astype("datetime64[us]").astype("int64")).groupby(
        ["t", "k"])["n"].sum()
    assert have.to_dict() == want.to_dict()


def test_a_signal_query_over_arriving_wav_files_in_a_bucket(s3, ws, spark, tmp_path):
    """A stateful filter over WAV files arriving in the bucket in two rounds, its state and
    output in the bucket too: the same as scipy's filter over the whole recording."""
    from scipy import signal as sps

    from wavesql.udfs.wav import write_wav

    rate, n = 8000, 9_000
    x = (np.random.default_rng(5).standard_normal(n) * 0.2).astype(np.float32)
    p = unique_prefix(tmp_path)

    def put(i, a, b):
        write_wav(tmp_path / f"r_{i}.wav", x[a:b], rate, "float32")
        s3.put(f"{p}/rec/r_{i}.wav", tmp_path / f"r_{i}.wav")

    put(0, 0, 2_500)
    put(1, 2_500, 5_000)
    ws.sql(f"CREATE SIGNAL mic (voice FLOAT) RATE {rate} HZ FROM '{s3.uri(p)}/rec/' FORMAT wav")
    # degap (no gaps here: the identity) has an unbounded look-back, so the filter state
    # travels through the checkpoint on S3 (streaming/signals.py)
    query = ("SELECT start_sample(voice) AS s, "
             "seg_rms(lowpass(degap(voice, 'zero'), 600.0, 4)) AS lp FROM mic [SAMPLES 500]")
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    ws.stream(query, out, ckpt).await_termination()
    put(2, 5_000, n)
    s3.put(f"{p}/rec/done.eof", b"")
    ws.stream(query, out, ckpt).await_termination()
    assert any("/signal_state/" in k for k in s3.keys(f"{p}/ckpt/"))
    got = spark.read.parquet(out).orderBy("s").toPandas()
    assert got["s"].tolist() == list(range(0, n, 500))
    y = sps.sosfilt(sps.butter(4, 600.0, fs=rate, output="sos"), x.astype(np.float64))
    want = [np.sqrt(np.mean(y[s:s + 500] ** 2)) for s in range(0, n, 500)]
    np.testing.assert_allclose(got["lp"], want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_a_continuous_query_killed_mid_run_in_a_bucket_is_exactly_once(s3, spark, tmp_path):
    """A continuous query with input, output and checkpoint in the bucket, in a process of
    its own, SIGKILLed as soon as two micro-batches are committed, then run again to the
    end: the output (as Spark reads it: committed batches only) holds every row once, and
    the per-batch records count every input row once. (Slow, 40 s: CI runs the job's kill
    test below, whose continuous query commits the same way.)"""
    import json
    import os
    import sys

    from wavesql.streaming.metrics import read_reports

    storage.use(storage.Settings.from_spark(spark))  # read_reports below reads the bucket
    p = unique_prefix(tmp_path)
    frames = []
    for i in range(6):
        f = pd.DataFrame({"id": np.arange(i * 50, (i + 1) * 50),
                          "v": np.linspace(0.0, 1.0, 50) + i,
                          "ts": pd.Timestamp("2026-01-01") + pd.to_timedelta(
                              np.arange(i * 50, (i + 1) * 50), unit="s")})
        f["ts"] = f["ts"].astype("datetime64[us]")
        f.to_parquet(tmp_path / f"e{i}.parquet", index=False)
        s3.put(f"{p}/events/e{i}.parquet", tmp_path / f"e{i}.parquet")
        frames.append(f)
    data = pd.concat(frames, ignore_index=True)
    ddl = (f"CREATE STREAM IF NOT EXISTS ev (id BIGINT, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{s3.uri(p)}/events/' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    query = "SELECT id, v FROM ev WHERE v - floor(v) >= 0.5"
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    cmd = [sys.executable, "-m", "tests.object_store", "stream", str(tmp_path / "c.db"), ddl,
           query, out, ckpt]
    env = dict(os.environ, WAVESQL_TEST_HADOOP=json.dumps(s3.hadoop()),
               PYSPARK_PYTHON=sys.executable)
    kill_after_two_commits_then_rerun(
        cmd, env, lambda: len(s3.keys(f"{p}/out/_spark_metadata/")), batches=6)
    got = sorted(r.id for r in spark.read.parquet(out).select("id").collect())
    assert len(got) == len(set(got)), "a row twice in the output"
    assert got == sorted(data.id[data.v - np.floor(data.v) >= 0.5].tolist())
    reports = read_reports(out)
    assert sum(r["rows_in"] for r in reports) == len(data)
    assert [r["batch"] for r in reports] == list(range(len(reports)))


def test_a_job_killed_mid_run_in_a_bucket_leaves_the_sink_exactly_once(s3, ws, spark,
                                                                      tmp_path):
    """`wavesql run` of an INSERT INTO job with everything in the bucket (reached through
    --conf spark.hadoop.*), SIGKILLed as soon as two of its micro-batches are committed,
    then run again (in this process, on the same catalog: one JVM start fewer): the sink
    read at its root holds every row once, and the killed run's lease (held in the
    catalog: no file lock on an object store) did not block the rerun."""
    import os
    import sys

    p = unique_prefix(tmp_path)
    frames = []
    for i in range(5):
        f = pd.DataFrame({"id": np.arange(i * 40, (i + 1) * 40), "v": np.linspace(0, 1, 40) + i,
                          "ts": (pd.Timestamp("2026-01-01") + pd.to_timedelta(
                              np.arange(i * 40, (i + 1) * 40), unit="s")).astype("datetime64[us]")})
        f.to_parquet(tmp_path / f"e{i}.parquet", index=False)
        s3.put(f"{p}/events/e{i}.parquet", tmp_path / f"e{i}.parquet")
        frames.append(f)
    data = pd.concat(frames, ignore_index=True)
    sink = s3.uri(f"{p}/sink")
    (tmp_path / "job.wsql").write_text(
        f"CREATE STREAM IF NOT EXISTS ev (id BIGINT, v DOUBLE, ts TIMESTAMP)\n"
        f"  FROM '{s3.uri(p)}/events/' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND;\n"
        f"CREATE SINK IF NOT EXISTS hot TO '{sink}/' FORMAT parquet;\n"
        "INSERT INTO hot SELECT id, v FROM ev WHERE v - floor(v) >= 0.5;\n")
    conf = [a for k, v in s3.hadoop().items() for a in ("--conf", f"spark.hadoop.{k}={v}")]
    cmd = [sys.executable, "-m", "wavesql", "--master", "local[2]", "--catalog",
           str(tmp_path / "catalog.db"), *conf, "run", "--max-files-per-trigger", "1",
           str(tmp_path / "job.wsql")]  # (the ws fixture's catalog file)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    kill_after_two_commits(cmd, env, lambda: len([k for k in s3.keys(f"{p}/sink/")
                                                  if "/job=" in k and "_spark_metadata" in k]),
                           batches=5)
    assert run_in_process(ws, tmp_path).statements == 3
    got = sorted(r.id for r in spark.read.parquet(sink).select("id").collect())
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == sorted(data.id[data.v - np.floor(data.v) >= 0.5].tolist())
