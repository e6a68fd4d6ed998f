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

pytestmark = pytest.mark.spark

_names = itertools.count()


def _prefix(tmp_path) -> str:
    return f"{tmp_path.name}-{next(_names)}"


def test_the_storage_layer_sees_what_boto3_sees(s3, spark, tmp_path):
    storage.use(storage.Settings.from_spark(spark))  # what a session does at each statement
    p = _prefix(tmp_path)
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
    p = _prefix(tmp_path)
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
    from wavesql.spark import runtime_errors

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


def test_a_signal_in_a_bucket_equals_numpy_over_its_samples(s3, ws, tmp_path):
    """seg_rms and seg_max per 1,000-sample window over two WAV files in the bucket (local
    copies gone), against numpy over the samples scipy reads from the same files."""
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
        s3.put(f"{p}/rec/rec_{i}.wav", tmp_path / f"rec_{i}.wav")
        (tmp_path / f"rec_{i}.wav").unlink()
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{s3.uri(p)}/rec/' FORMAT wav")
    rows = ws.sql("SELECT start_sample(ch1) AS s, seg_rms(ch1) AS rms, seg_max(ch1) AS mx "
                  "FROM mic [SAMPLES 1000] ORDER BY s").collect()
    x = np.concatenate(stored)
    starts = list(range(0, len(x), 1000))
    assert [r.s for r in rows] == starts
    for r, s in zip(rows, starts):
        w = x[s:s + 1000]
        assert r.rms == pytest.approx(np.sqrt(np.mean(w * w)), rel=1e-6)
        assert r.mx == pytest.approx(w.max(), rel=1e-6)
