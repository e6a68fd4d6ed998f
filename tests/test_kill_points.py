"""Crash safety of a continuous SYNC JOIN job (issue 23): ``wavesql run`` SIGKILLed at each
named stage of a micro-batch's commit (``WAVESQL_FAULT``, wavesql/faults.py), then run
again to its end. The oracle is the test's own: the signal written here with scipy from a
numpy array, each control row's samples sliced from that array -- the sink must hold every
control row exactly once, with exactly those samples.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_run_files import run, run_killed_at

RATE = 8_000
ROWS, FILES = 8, 5  # control rows per file, control files

SYNC_JOB = textwrap.dedent("""\
    CREATE SIGNAL IF NOT EXISTS sig (x FLOAT) RATE 8000 HZ FROM 'sig/' FORMAT wav SEGMENT 1024;
    CREATE STREAM IF NOT EXISTS events (id BIGINT, a BIGINT, b BIGINT, ts TIMESTAMP)
      FROM 'events/' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND;
    CREATE SINK IF NOT EXISTS synced TO 'out/synced/' FORMAT parquet;

    INSERT INTO synced
      SELECT e.id, s.x FROM events e SYNC JOIN sig s ON RANGE (e.a, e.b);
""")


def _write_inputs(tmp) -> tuple[np.ndarray, dict]:
    """Four 1-second float32 WAV files (scipy's writer) and FILES control files; returns the
    signal and each control row's range."""
    import os

    from scipy.io import wavfile

    rng = np.random.default_rng(23)
    x = rng.standard_normal(4 * RATE).astype(np.float32)
    (tmp / "sig").mkdir()
    for i in range(4):
        wavfile.write(tmp / "sig" / f"part_{i}.wav", RATE, x[i * RATE:(i + 1) * RATE])
    (tmp / "events").mkdir()
    ranges = {}
    for f in range(FILES):
        ids = np.arange(f * ROWS, (f + 1) * ROWS)
        a = rng.integers(0, 4 * RATE - 2_000, ROWS)
        b = a + rng.integers(1, 2_000, ROWS)  # some ranges span two files
        ranges.update({int(i): (int(lo), int(hi)) for i, lo, hi in zip(ids, a, b)})
        path = tmp / "events" / f"e{f}.parquet"
        pq.write_table(pa.table({
            "id": pa.array(ids, pa.int64()), "a": pa.array(a, pa.int64()),
            "b": pa.array(b, pa.int64()),
            "ts": pa.array((ids * 100_000).tolist(), pa.timestamp("us"))}), path)
        stamp = 1_700_000_000 + f  # Spark's file source takes the oldest first
        os.utime(path, (stamp, stamp))
    return x, ranges


def _synced(sink) -> list[tuple[int, int, np.ndarray]]:
    rows = []
    for f in sorted(sink.glob("job=*/batch=*/*.parquet")):
        for r in pq.read_table(f).to_pylist():
            rows.append((r["id"], r["x"]["start"], np.asarray(r["x"]["samples"], np.float32)))
    return rows


@pytest.mark.spark
@pytest.mark.parametrize("stage", [
    "renamed",
    pytest.param("staged", marks=pytest.mark.slow),
    pytest.param("state-written", marks=pytest.mark.slow),
    pytest.param("progress-written", marks=pytest.mark.slow),
    pytest.param("batch-done", marks=pytest.mark.slow),
])
def test_a_sync_job_killed_at_a_stage_is_exactly_once(tmp_path, stage):
    """Killed the second time a micro-batch reaches ``stage`` (one control file per batch),
    then run to the end: every control row once, its samples numpy's slice of the signal.
    (`renamed` in CI: the batch visible, its state not; the other stages `slow`.)"""
    x, ranges = _write_inputs(tmp_path)
    (tmp_path / "job.wsql").write_text(SYNC_JOB)
    run_killed_at(tmp_path, stage)
    again = run(tmp_path, "run", "--max-files-per-trigger", "1", "job.wsql")
    assert again.returncode == 0, again.stdout + again.stderr
    rows = _synced(tmp_path / "out" / "synced")
    assert sorted(r[0] for r in rows) == sorted(ranges), "a control row lost or repeated"
    for i, start, samples in rows:
        lo, hi = ranges[i]
        assert start == lo
        np.testing.assert_array_equal(samples, x[lo:hi])
