"""gs:// locations end to end against a real GCS-protocol server on loopback
(tests/gcs_server.py: fake-gcs-server): Spark reads and writes with Google's Hadoop
connector (gcs-connector), WaveSQL's own I/O (WAV samples in tasks, listings, progress and
commit records) goes through pyarrow's GcsFileSystem (storage/gcs.py). Both are configured
once, by the Hadoop settings on the Spark session. The oracles: the server's own JSON API
(urllib) for what is in the bucket, numpy/scipy/pandas for results, plain ``spark.read``
for sinks.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from wavesql import storage
from wavesql.errors import WaveSQLError

from tests.gcs_server import gcs  # noqa: F401 - the session's GCS fixture

pytestmark = pytest.mark.spark

_names = itertools.count()


def _prefix(tmp_path) -> str:
    return f"{tmp_path.name}-{next(_names)}"


def test_the_storage_layer_sees_what_the_json_api_sees(gcs, spark, tmp_path):
    """Listings, types, ranged reads, whole-object writes and deletes through WaveSQL's
    storage layer, configured from the Spark session's Hadoop settings alone, against what
    the server's JSON API says."""
    storage.use(storage.Settings.from_spark(spark))  # what a session does at each statement
    p = _prefix(tmp_path)
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


def _events_in_gcs(gcs, tmp_path, p: str, n: int = 2) -> pd.DataFrame:
    """``n`` Parquet files of (k, v, ts) events in the bucket under ``p/events/``."""
    frames = []
    for i in range(n):
        f = pd.DataFrame({"k": ["a", "b", "a", "c"],
                          "v": [1.0 + i, 2.0, 3.5, 4.0 * i],
                          "ts": pd.to_datetime([f"2026-01-01 00:00:0{j + 4 * i}"
                                                for j in range(4)]).astype("datetime64[us]")})
        f.to_parquet(tmp_path / f"e{i}.parquet", index=False)
        gcs.put(f"{p}/events/e{i}.parquet", tmp_path / f"e{i}.parquet")
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def _stream(ws, gcs, p):
    ws.sql(f"CREATE STREAM ev (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{gcs.uri(p)}/events/' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")


def test_a_batch_query_over_a_stream_in_gcs_equals_pandas(gcs, ws, tmp_path):
    p = _prefix(tmp_path)
    events = _events_in_gcs(gcs, tmp_path, p)
    _stream(ws, gcs, p)
    got = ws.sql("SELECT k, sum(v) AS s, count(*) AS n FROM ev WHERE v > 1.5 GROUP BY k"
                 ).collect()
    want = events[events.v > 1.5].groupby("k").v.agg(["sum", "count"])
    assert sorted((r.k, r.s, r.n) for r in got) == sorted(
        (k, s, n) for k, (s, n) in want.iterrows())


def test_a_signal_in_gcs_equals_numpy_over_its_samples(gcs, ws, tmp_path):
    """seg_rms and seg_max per 1,000-sample window over two WAV files in the bucket (read
    in Spark's Python tasks through pyarrow's GcsFileSystem; local copies gone), against
    numpy over the samples scipy reads from the same files."""
    from scipy.io import wavfile

    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(5_500).astype(np.float32) * 0.3,
             rng.standard_normal(4_700).astype(np.float32) * 0.3]
    p = _prefix(tmp_path)
    stored = []
    for i, x in enumerate(parts):
        write_wav(tmp_path / f"rec_{i}.wav", x, 8000)
        rate, pcm = wavfile.read(tmp_path / f"rec_{i}.wav")
        stored.append(pcm.astype(np.float64) / (32768.0 if pcm.dtype == np.int16 else 1.0))
        gcs.put(f"{p}/rec/rec_{i}.wav", tmp_path / f"rec_{i}.wav")
        (tmp_path / f"rec_{i}.wav").unlink()
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{gcs.uri(p)}/rec/' FORMAT wav")
    rows = ws.sql("SELECT start_sample(ch1) AS s, seg_rms(ch1) AS rms, seg_max(ch1) AS mx "
                  "FROM mic [SAMPLES 1000] ORDER BY s").collect()
    x = np.concatenate(stored)
    starts = list(range(0, len(x), 1000))
    assert [r.s for r in rows] == starts
    for r, s in zip(rows, starts):
        w = x[s:s + 1000]
        assert r.rms == pytest.approx(np.sqrt(np.mean(w * w)), rel=1e-6)
        assert r.mx == pytest.approx(w.max(), rel=1e-6)


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
    p = _prefix(tmp_path)
    events = _events_in_gcs(gcs, tmp_path, p)
    _stream(ws, gcs, p)
    sink = gcs.uri(f"{p}/sink")
    ws.sql(f"CREATE SINK k TO '{sink}/' FORMAT parquet")
    job = "INSERT INTO k SELECT k, v FROM ev WHERE v >= 1.0"
    first = ws.execute(job)[-1].report
    assert first.batches >= 1 and first.rows_in == len(events)
    third = pd.DataFrame({"k": ["z", "y"], "v": [9.0, 0.5],
                          "ts": pd.to_datetime(["2026-01-01 00:00:09",
                                                "2026-01-01 00:00:10"]).astype("datetime64[us]")})
    third.to_parquet(tmp_path / "e2.parquet", index=False)
    gcs.put(f"{p}/events/e2.parquet", tmp_path / "e2.parquet")
    second = ws.execute(job)[-1].report
    assert second.rows_in == len(third)  # only the new file
    every = pd.concat([events, third])
    want = sorted(map(tuple, every[every.v >= 1.0][["k", "v"]].to_numpy().tolist()))
    got = spark.read.parquet(sink).select("k", "v").collect()
    assert sorted((r.k, r.v) for r in got) == want
    # the commit log Spark reads the sink by is in the bucket, nothing on local disk
    assert any("/_spark_metadata/" in k for k in gcs.keys(f"{p}/sink/"))
    assert not list(tmp_path.glob("**/_spark_metadata"))
