"""gs:// locations end to end against a real GCS-protocol server on loopback
(tests/gcs_server.py: fake-gcs-server): Spark reads and writes with Google's Hadoop
connector (gcs-connector), WaveSQL's own I/O (WAV samples in tasks, listings, progress and
commit records) goes through pyarrow's GcsFileSystem (storage/gcs.py). Both are configured
once, by the Hadoop settings on the Spark session. The oracles: the server's own JSON API
(urllib) for what is in the bucket, numpy/scipy/pandas for results, plain ``spark.read``
for sinks.
"""

from __future__ import annotations


import pytest

from wavesql import storage
from wavesql.errors import WaveSQLError

from tests.gcs_server import gcs  # noqa: F401 - the session's GCS fixture
from tests.store_cases import (create_event_stream, insert_job_runs_incrementally,
                                put_events, signal_equals_numpy, unique_prefix)

pytestmark = pytest.mark.spark


def test_the_storage_layer_sees_what_the_json_api_sees(gcs, spark, tmp_path):
    """Listings, types, ranged reads, whole-object writes and deletes through WaveSQL's
    storage layer, configured from the Spark session's Hadoop settings alone, against what
    the server's JSON API says."""
    storage.use(storage.Settings.from_spark(spark))  # what a session does at each statement
    p = unique_prefix(tmp_path)
    for key, body in [("a.wav", b"x" * 10), ("b.WAV", b"y" * 5), ("c.txt", b"z"),
                      ("sub/d.wav", b"w" * 3)]:
        gcs.put(f"{p}/{key}", body)
    folder = gcs.uri(p)
    assert storage.file_type(folder) == "dir"
    assert storage.file_type(f"{folder}/a.wav") == "file"
    assert storage.file_type(f"{folder}/nothing") == "missing"
    assert [(e.location, e.size) for e in storage.files(folder, suffix=".wav")] == [
        (f"{folder}/a.wav", 10), (f"{folder}/b.WAV", 5)]
    assert [e.location for e in storage.list_files(folder, recursive=True)] == [
        gcs.uri(k) for k in gcs.keys(p + "/")]
    assert [e.location for e in storage.glob(f"{folder}/**/*.wav")] == [
        f"{folder}/a.wav", f"{folder}/sub/d.wav"]
    # a subfolder without a marker object (as Spark's connector leaves most) is a folder
    assert storage.children(folder) == gcs.children(p + "/") == [
        ("a.wav", False), ("b.WAV", False), ("c.txt", False), ("sub", True)]
    assert storage.stat(f"{folder}/a.wav").mtime_ns > 0  # arrival order needs real times
    storage.write_bytes(f"{folder}/out/x.bin", b"hello")
    storage.write_bytes(f"{folder}/out/x.bin", b"hello, again")
    assert gcs.get(f"{p}/out/x.bin") == b"hello, again"
    with storage.open_input(f"{folder}/a.wav") as f:
        f.seek(4)
        buf = bytearray(3)
        assert f.readinto(buf) == 3 and bytes(buf) == b"xxx"
    storage.delete(folder, recursive=True)
    assert gcs.keys(p + "/") == []


def test_a_batch_query_over_a_stream_in_gcs_equals_pandas(gcs, ws, tmp_path):
    p = unique_prefix(tmp_path)
    events = put_events(gcs, tmp_path, p)
    create_event_stream(ws, gcs, p)
    got = ws.sql("SELECT k, sum(v) AS s, count(*) AS n FROM ev WHERE v > 1.5 GROUP BY k"
                 ).collect()
    want = events[events.v > 1.5].groupby("k").v.agg(["sum", "count"])
    assert sorted((r.k, r.s, r.n) for r in got) == sorted(
        (k, s, n) for k, (s, n) in want.iterrows())


def test_a_signal_in_gcs_equals_numpy_over_its_samples(gcs, ws, tmp_path):
    """seg_rms and seg_max per 1,000-sample window over two WAV files in the bucket (read
    in Spark's Python tasks through pyarrow's GcsFileSystem; local copies gone), against
    numpy over the samples scipy reads from the same files."""
    signal_equals_numpy(gcs, ws, tmp_path, unique_prefix(tmp_path))


# ---------------------------------------------------------------------------- bad locations
@pytest.mark.parametrize("ddl, code, where", [
    ("CREATE STREAM t (v DOUBLE) FROM 'gs://no-such-bucket/x/' FORMAT parquet",
     "MISSING_BUCKET", "'gs://no-such-bucket/x/'"),
    ("CREATE STREAM t (v DOUBLE) FROM 'gs://wavesql-test/not/there/' FORMAT parquet",
     "MISSING_PATH", "'gs://wavesql-test/not/there/'"),
    ("CREATE SINK k TO 'gs://no-such-bucket/out/' FORMAT parquet",
     "MISSING_BUCKET", "'gs://no-such-bucket/out/'"),
])
def test_a_bad_gcs_location_is_a_clear_error_at_its_clause(gcs, ws, ddl, code, where):
    with pytest.raises(WaveSQLError) as info:
        ws.sql(ddl)
    err = info.value
    assert err.code == code, err
    assert ddl[err.span.start:err.span.end] == where  # the location, not the statement
    assert "Exception" not in str(err) and "\tat " not in str(err)


# ---------------------------------------------------------------------------- jobs
@pytest.mark.slow
def test_insert_into_a_sink_in_gcs_runs_incrementally_exactly_once(gcs, ws, spark, tmp_path):
    """An INSERT INTO job with its stream, sink and checkpoint in the bucket, run twice with
    a file arriving in between: the second run reads only the new file, and the sink (read
    by plain Spark at its root) holds each row once, equal to pandas' filter. (7.7 s in a
    warm session at load 1.5 on 2 cores; slow as its HDFS twin, whose time triples under
    the load of a full run.)"""
    p = unique_prefix(tmp_path)
    insert_job_runs_incrementally(gcs, ws, spark, tmp_path, p)
    # the commit log Spark reads the sink by is in the store
    assert any("/_spark_metadata/" in k for k in gcs.keys(f"{p}/sink/"))
