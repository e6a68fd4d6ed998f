"""What every remote store's tests do alike (S3: tests/test_object_storage.py, HDFS:
tests/test_hdfs.py, GCS: tests/test_gcs.py): put a stream's Parquet files or a signal's WAV
files in the store through the store's own client (``store.put(key, local_file)``,
``store.uri(key)``), and check WaveSQL's results against pandas and numpy. Each store's
fixture (tests/object_store.py, tests/hdfs_cluster.py, tests/gcs_server.py) has that
interface; nothing here imports WaveSQL's storage layer, the code under test."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

_names = itertools.count()


def unique_prefix(tmp_path, root: str = "") -> str:
    """A key prefix of this test's own in the store's shared bucket or namespace (``root``
    "/" for a filesystem's absolute paths)."""
    return f"{root}{tmp_path.name}-{next(_names)}"


def put_events(store, tmp_path, p: str, n: int = 2) -> pd.DataFrame:
    """``n`` Parquet files of (k, v, ts) events in the store under ``p/events/``; the
    events as one frame (the oracle's input)."""
    frames = []
    for i in range(n):
        f = pd.DataFrame({"k": ["a", "b", "a", "c"],
                          "v": [1.0 + i, 2.0, 3.5, 4.0 * i],
                          "ts": pd.to_datetime([f"2026-01-01 00:00:0{j + 4 * i}"
                                                for j in range(4)]).astype("datetime64[us]")})
        f.to_parquet(tmp_path / f"e{i}.parquet", index=False)
        store.put(f"{p}/events/e{i}.parquet", tmp_path / f"e{i}.parquet")
        frames.append(f)
    return pd.concat(frames, ignore_index=True)


def create_event_stream(ws, store, p: str) -> None:
    """Stream ``ev`` over the files :func:`put_events` wrote."""
    ws.sql(f"CREATE STREAM ev (k STRING, v DOUBLE, ts TIMESTAMP) FROM '{store.uri(p)}/events/' "
           "FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")


def signal_equals_numpy(store, ws, tmp_path, p: str) -> None:
    """seg_rms and seg_max per 1,000-sample window over two WAV files in the store (read in
    Spark's Python tasks through WaveSQL's storage layer; the local copies deleted first),
    against numpy over the samples scipy reads from the same files."""
    from scipy.io import wavfile

    from wavesql.udfs.wav import write_wav

    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(5_500).astype(np.float32) * 0.3,
             rng.standard_normal(4_700).astype(np.float32) * 0.3]
    stored = []
    for i, x in enumerate(parts):
        write_wav(tmp_path / f"rec_{i}.wav", x, 8000)
        rate, pcm = wavfile.read(tmp_path / f"rec_{i}.wav")
        stored.append(pcm.astype(np.float64) / (32768.0 if pcm.dtype == np.int16 else 1.0))
        store.put(f"{p}/rec/rec_{i}.wav", tmp_path / f"rec_{i}.wav")
        (tmp_path / f"rec_{i}.wav").unlink()
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE 8000 HZ FROM '{store.uri(p)}/rec/' FORMAT wav")
    rows = ws.sql("SELECT start_sample(ch1) AS s, seg_rms(ch1) AS rms, seg_max(ch1) AS mx "
                  "FROM mic [SAMPLES 1000] ORDER BY s").collect()
    x = np.concatenate(stored)
    starts = list(range(0, len(x), 1000))
    assert [r.s for r in rows] == starts
    for r, s in zip(rows, starts):
        w = x[s:s + 1000]
        assert r.rms == pytest.approx(np.sqrt(np.mean(w * w)), rel=1e-6)
        assert r.mx == pytest.approx(w.max(), rel=1e-6)


def insert_job_runs_incrementally(store, ws, spark, tmp_path, p: str) -> None:
    """An INSERT INTO job with its stream, sink and checkpoint in the store, run twice with a
    file arriving in between: the second run reads only the new file, and the sink (read by
    plain Spark at its root) holds each row once, equal to pandas' filter; nothing of the
    sink's commit log on local disk (the caller checks it is in the store)."""
    events = put_events(store, tmp_path, p)
    create_event_stream(ws, store, p)
    sink = store.uri(f"{p}/sink")
    ws.sql(f"CREATE SINK k TO '{sink}/' FORMAT parquet")
    job = "INSERT INTO k SELECT k, v FROM ev WHERE v >= 1.0"
    first = ws.execute(job)[-1].report
    assert first.batches >= 1 and first.rows_in == len(events)
    third = pd.DataFrame({"k": ["z", "y"], "v": [9.0, 0.5],
                          "ts": pd.to_datetime(["2026-01-01 00:00:09",
                                                "2026-01-01 00:00:10"]).astype("datetime64[us]")})
    third.to_parquet(tmp_path / "e2.parquet", index=False)
    store.put(f"{p}/events/e2.parquet", tmp_path / "e2.parquet")
    second = ws.execute(job)[-1].report
    assert second.rows_in == len(third)  # only the new file
    every = pd.concat([events, third])
    want = sorted(map(tuple, every[every.v >= 1.0][["k", "v"]].to_numpy().tolist()))
    got = spark.read.parquet(sink).select("k", "v").collect()
    assert sorted((r.k, r.v) for r in got) == want
    assert not list(tmp_path.glob("**/_spark_metadata"))
