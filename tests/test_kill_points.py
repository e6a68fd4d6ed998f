"""Crash safety of a continuous SYNC JOIN job and of a stateful continuous signal query
(issue 23): SIGKILLed at a named stage of a micro-batch's commit (``WAVESQL_FAULT``,
wavesql/faults.py), then run again to its end. The oracle is the test's own: the signal
written here with scipy from a numpy array; each control row's samples sliced from it,
the filter computed by scipy over all of it -- every row exactly once, with exactly those
values. (The row-by-row, windowed and OVER jobs: tests/test_run_files.py.)
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_run_files import env, run_in_process, run_killed_at

RATE = 8_000
# control rows per file, control files (one per micro-batch): killed in the second batch,
# the rerun redoes it and runs one more
ROWS, FILES = 8, 3

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


def _stages(*slow: str) -> list:
    """``renamed`` (in CI: a batch visible, its state not), then ``slow`` stages."""
    return ["renamed"] + [pytest.param(stage, marks=pytest.mark.slow) for stage in slow]


@pytest.mark.spark
@pytest.mark.parametrize("stage", _stages("staged", "state-written", "progress-written",
                                          "batch-done"))
def test_a_sync_job_killed_at_a_stage_is_exactly_once(ws, tmp_path, stage):
    """Killed the second time a micro-batch reaches ``stage`` (one control file per batch),
    then run to the end: every control row once, its samples numpy's slice of the signal.
    (`renamed` in CI: the batch visible, its state not; the other stages `slow`.)"""
    x, ranges = _write_inputs(tmp_path)
    (tmp_path / "job.wsql").write_text(SYNC_JOB)
    run_killed_at(tmp_path, stage)
    run_in_process(ws, tmp_path)  # to the end, in this process
    rows = _synced(tmp_path / "out" / "synced")
    assert sorted(r[0] for r in rows) == sorted(ranges), "a control row lost or repeated"
    for i, start, samples in rows:
        lo, hi = ranges[i]
        assert start == lo
        np.testing.assert_array_equal(samples, x[lo:hi])


# -- a stateful signal query -------------------------------------------------------------------
SIGNAL_QUERY = ("SELECT lowpass(x, 500.0) AS y, seg_rms(x) AS r FROM sig [SAMPLES 1000]")
SIGNAL_SCRIPT = textwrap.dedent("""\
    import sys
    import wavesql
    catalog, folder, out, ckpt, query = sys.argv[1:]
    ws = wavesql.connect(master="local[2]", catalog=catalog,
                         config={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    ws.sql(f"CREATE SIGNAL IF NOT EXISTS sig (x FLOAT) RATE 8000 HZ FROM '{folder}' FORMAT wav")
    cq = ws.stream(query, out, ckpt, max_files_per_trigger=1)
    cq.await_termination()
    if cq.error is not None:
        raise cq.error
""")


def _signal_run(tmp, fault: str | None) -> subprocess.CompletedProcess:
    """The continuous signal query in a process of its own (leading its process group: a
    fault kills its JVM with it)."""
    extra = {"WAVESQL_FAULT": fault} if fault else {}
    return subprocess.run(
        [sys.executable, "-c", SIGNAL_SCRIPT, str(tmp / "c.db"), str(tmp / "sig"),
         str(tmp / "out"), str(tmp / "ckpt"), SIGNAL_QUERY],
        cwd=tmp, env={**env(), **extra}, capture_output=True, text=True, timeout=600,
        start_new_session=True)


@pytest.mark.spark
@pytest.mark.parametrize("stage", _stages("staged", "state-written", "batch-done"))
def test_a_stateful_signal_query_killed_at_a_stage_is_exactly_once(ws, tmp_path, stage):
    """A continuous lowpass over WAV files (one file per micro-batch), killed the second
    time a batch reaches ``stage`` -- its filter state carried from the batch before -- then
    run to the end: every window once, the filter equal to scipy's over the whole signal,
    the RMS to numpy's. (`renamed` in CI: the batch visible, its filter state not.)"""
    import scipy.signal as sps
    from scipy.io import wavfile

    rng = np.random.default_rng(7)
    n = 3  # one-second files, a micro-batch each: killed in the second, the rerun runs the third
    x = rng.standard_normal(n * RATE).astype(np.float32)
    (tmp_path / "sig").mkdir()
    for i in range(n):
        wavfile.write(tmp_path / "sig" / f"part_{i}.wav", RATE, x[i * RATE:(i + 1) * RATE])
    killed = _signal_run(tmp_path, f"{stage}@2")
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    # run again to the end, in this process (the same catalog and checkpoint)
    ws.sql(f"CREATE SIGNAL IF NOT EXISTS sig (x FLOAT) RATE 8000 HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav")
    ws.stream(SIGNAL_QUERY, tmp_path / "out", tmp_path / "ckpt",
              max_files_per_trigger=1).await_termination()
    rows = []
    for f in sorted((tmp_path / "out").glob("batch=*/*.parquet")):
        rows += pq.read_table(f).to_pylist()
    starts = sorted(r["y"]["start"] for r in rows)
    assert starts == list(range(0, n * RATE, 1000)), "a window lost or repeated"
    got = np.concatenate([np.asarray(r["y"]["samples"], np.float64)
                          for r in sorted(rows, key=lambda r: r["y"]["start"])])
    sos = sps.butter(4, 500.0, btype="low", fs=RATE, output="sos")
    np.testing.assert_allclose(got, sps.sosfilt(sos, x.astype(np.float64)), atol=1e-5)
    for r in rows:
        s = r["y"]["start"]
        assert r["r"] == pytest.approx(float(np.sqrt(np.mean(
            x[s:s + 1000].astype(np.float64) ** 2))), rel=1e-6)


# -- a replace-mode job --------------------------------------------------------------------------
REPLACE_JOB = textwrap.dedent("""\
    CREATE SIGNAL IF NOT EXISTS sig (x FLOAT) RATE 8000 HZ FROM 'sig/' FORMAT wav;
    CREATE SINK IF NOT EXISTS levels TO 'out/levels/' FORMAT parquet;

    INSERT INTO levels
      SELECT start_sample(x) AS s, seg_rms(x) AS r FROM sig [SAMPLES 1000];
""")


def _levels(sink) -> list[tuple[int, float]]:
    rows = []
    for f in sorted(sink.glob("job=*/batch=*/*.parquet")):
        rows += [(r["s"], r["r"]) for r in pq.read_table(f).to_pylist()]
    return sorted(rows)


def _levels_oracle(x: np.ndarray) -> list[tuple[int, float]]:
    return [(s, float(np.sqrt(np.mean(x[s:s + 1000].astype(np.float64) ** 2))))
            for s in range(0, len(x), 1000)]


def _same_levels(got, want) -> bool:
    return [s for s, _ in got] == [s for s, _ in want] and all(
        g == pytest.approx(w, rel=1e-6) for (_, g), (_, w) in zip(got, want))


@pytest.mark.spark
def test_a_replace_mode_job_killed_before_and_after_its_swap_shows_one_whole_output(
        ws, tmp_path):
    """A query over a signal runs in replace mode (its output is the whole result, swapped
    in for the previous one). Killed after the new result is staged, the sink still holds
    the previous run's result, whole; killed right after the swap, the new one, whole; a
    last run leaves it once -- each equal to numpy over the files present then."""
    from scipy.io import wavfile

    x = np.random.default_rng(9).standard_normal(4 * RATE).astype(np.float32)
    (tmp_path / "sig").mkdir()
    (tmp_path / "job.wsql").write_text(REPLACE_JOB)
    levels = tmp_path / "out" / "levels"

    def arrive(i):
        wavfile.write(tmp_path / "sig" / f"part_{i}.wav", RATE, x[i * RATE:(i + 1) * RATE])

    def killed_at(stage):
        done = subprocess.run(
            [sys.executable, "-m", "wavesql", "--master", "local[2]", "--catalog",
             str(tmp_path / "catalog.db"), "run", "job.wsql"], cwd=tmp_path,
            env={**env(), "WAVESQL_FAULT": stage}, capture_output=True, text=True,
            timeout=600, start_new_session=True)
        assert done.returncode == -signal.SIGKILL, done.stdout + done.stderr

    for i in range(2):
        arrive(i)
    run_in_process(ws, tmp_path)
    assert _same_levels(_levels(levels), _levels_oracle(x[:2 * RATE]))
    arrive(2)
    killed_at("staged")  # the new result written aside, not swapped in
    assert _same_levels(_levels(levels), _levels_oracle(x[:2 * RATE]))
    killed_at("renamed")  # swapped in; the old one not yet deleted
    assert _same_levels(_levels(levels), _levels_oracle(x[:3 * RATE]))
    arrive(3)
    run_in_process(ws, tmp_path)
    assert _same_levels(_levels(levels), _levels_oracle(x))
    assert [p.name for p in (levels).glob("job=*/_staging/*")] == []  # nothing left aside
