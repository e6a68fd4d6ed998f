"""Storage faults (issue 23): a sink that cannot be written is a clear error naming it,
nothing of the failed micro-batch becomes visible, and the next run -- once the location
is writable again -- recovers: the sink then equals the pandas oracle, every row once.

A full filesystem is real too: a tmpfs mounted at the sink, sized to what it holds (the
test skips where mounting is not allowed). The location is made unwritable for real: ``chattr +i`` (immutable: refused even to root,
which this suite may run as) or, for another user, ``chmod``. Two places fail two ways:
the staging folder (Spark's own writer fails) and the job's folder (WaveSQL's rename of
the staged batch into place fails).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.test_run_files import (HOT_JOB, batches, hot_of, input_frame, oracle_hot,
                                  write_input)


@contextlib.contextmanager
def unwritable(folder: Path):
    """``folder`` refusing new entries while inside; skips the test where this machine
    cannot make it so (no chattr as root, an unusual filesystem)."""
    root = os.geteuid() == 0
    if root:
        if shutil.which("chattr") is None:
            pytest.skip("running as root without chattr: cannot make a folder unwritable")
        made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
        if made.returncode:
            pytest.skip(f"chattr +i refused here: {made.stderr.decode().strip()}")
    else:
        mode = folder.stat().st_mode
        folder.chmod(0o555)
    try:
        probe = folder / ".probe"
        try:
            probe.mkdir()
        except OSError:
            pass
        else:
            probe.rmdir()
            pytest.skip(f"{folder} stayed writable")
        yield
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(mode)


@pytest.mark.spark
def test_an_unwritable_sink_is_a_clear_error_and_the_next_run_recovers(ws, tmp_path):
    """A query file's job (run in this process, as `wavesql run` runs it) meets its sink
    unwritable twice -- Spark's writer cannot create the batch's staging folder, then the
    staged batch cannot be renamed into the job's folder -- each a failed run with
    STORAGE_DENIED naming the location and nothing of the batch visible; once writable,
    the next run leaves the sink equal to the pandas oracle, every row once."""
    from wavesql.jobs import run_file

    job_file = tmp_path / "job.wsql"
    job_file.write_text(HOT_JOB)
    hot = tmp_path / "out" / "hot"
    for i in range(2):
        write_input(tmp_path / "in", i)
    assert run_file(ws, str(job_file)).status == "ok"
    committed = batches(hot)
    (job,) = hot.glob("job=*")
    for i in range(2, 4):
        write_input(tmp_path / "in", i)
    for folder in (job / "_staging", job):
        with unwritable(folder):
            failed = run_file(ws, str(job_file))
        assert failed.status == "failed"
        assert failed.error.code == "STORAGE_DENIED", failed.error
        assert str(job) in failed.error.message and "run again" in failed.error.hint
        assert batches(hot) == committed  # nothing of the failed batch is visible
    assert run_file(ws, str(job_file)).status == "ok"
    got = hot_of(hot)
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == oracle_hot(input_frame(tmp_path / "in"))


@contextlib.contextmanager
def small_filesystem(folder: Path):
    """A filesystem of its own at ``folder`` (a tmpfs, 16 MB) whose size the block may set
    with the function it yields; skips the test where this machine cannot mount one (not
    root, or no CAP_SYS_ADMIN in a container)."""
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(folder)],
                          capture_output=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")

    def resize(size_bytes: int) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size_bytes}", str(folder)], check=True)

    try:
        yield resize
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.spark
def test_a_full_filesystem_is_storage_full_and_the_next_run_recovers(ws, tmp_path):
    """The sink's filesystem really fills up (a tmpfs sized to what it already holds): the
    run fails with STORAGE_FULL naming the location, nothing of the failed batch is
    visible; once space is freed, the next run leaves the sink equal to the pandas oracle,
    every row once."""
    from wavesql.jobs import run_file

    job_file = tmp_path / "job.wsql"
    job_file.write_text(HOT_JOB)
    hot = tmp_path / "out" / "hot"
    with small_filesystem(tmp_path / "out") as resize:
        for i in range(2):
            write_input(tmp_path / "in", i)
        assert run_file(ws, str(job_file)).status == "ok"
        committed = batches(hot)
        for i in range(2, 5):
            write_input(tmp_path / "in", i)
        used = os.statvfs(tmp_path / "out")
        resize((used.f_blocks - used.f_bfree) * used.f_frsize + 4096)  # one page free
        failed = run_file(ws, str(job_file))
        assert failed.status == "failed"
        assert failed.error.code == "STORAGE_FULL", failed.error
        assert str(tmp_path / "out") in failed.error.message
        assert batches(hot) == committed  # nothing of the failed batch is visible
        resize(16 << 20)
        assert run_file(ws, str(job_file)).status == "ok"
        got = hot_of(hot)
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == oracle_hot(input_frame(tmp_path / "in"))


# -- schema drift and a damaged checkpoint -----------------------------------------------------
def _readings(path: Path, ids, v=None, *, drop_v=False) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    columns = {"id": pa.array(ids, pa.int64())}
    if not drop_v:
        columns["v"] = v if v is not None else pa.array([i / 10 for i in ids], pa.float64())
    columns["ts"] = pa.array([i * 1_000_000 for i in ids], pa.timestamp("us"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


QUERIES = {
    "rows": "SELECT id, v FROM readings WHERE v >= 0.5",
    "state store": ("SELECT _time, count(*) AS n, sum(v) AS total FROM readings "
                    "[RANGE 10 SECONDS SLIDE 10 SECONDS]"),
}


@pytest.mark.spark
@pytest.mark.parametrize("kind", list(QUERIES))
def test_a_new_file_of_another_schema_stops_the_query_naming_it(ws, spark, tmp_path, kind):
    """A continuous query meets a new file whose `v` is text, then one without `v`: each is
    FILE_SCHEMA_MISMATCH naming the file and the column, nothing of its batch committed;
    with the file moved out, the query goes on -- every row of the good files once."""
    import pyarrow as pa

    from wavesql.errors import WaveSQLError

    folder = tmp_path / "in"
    _readings(folder / "a.parquet", list(range(0, 10)))
    ws.sql(f"CREATE OR REPLACE STREAM readings (id BIGINT, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    def run_query():
        q = ws.stream(QUERIES[kind], out, ckpt)
        q.await_termination()

    run_query()
    committed = sorted(p.name for p in out.glob("batch=*"))
    bad = [(folder / "b.parquet", dict(v=pa.array(["x"] * 10)), "is BINARY in the file"),
           (folder / "c.parquet", dict(drop_v=True), "has no column `v`")]
    for k, (path, how, text) in enumerate(bad, start=1):
        ids = list(range(10 * k, 10 * k + 10))
        _readings(path, ids, **how)
        with pytest.raises(WaveSQLError) as err:
            run_query()
        assert err.value.code == "FILE_SCHEMA_MISMATCH", err.value
        assert path.name in err.value.message and text in err.value.message, err.value
        assert sorted(p.name for p in out.glob("batch=*")) == committed
        _readings(path, ids)  # rewritten in place with the stream's columns
        run_query()
        committed = sorted(p.name for p in out.glob("batch=*"))
    _readings(folder / "d.parquet", list(range(30, 40)))
    run_query()
    rows = spark.read.parquet(str(out)).collect()
    if kind == "rows":  # every row of the good and the rewritten files, once
        assert sorted(r.id for r in rows) == [i for i in range(40) if i / 10 >= 0.5]
    else:  # tumbling windows (t - 10 s, t] (row i at i s), final below 39 - 1 s
        want = {}
        for i in range(40):
            t = -(-i // 10) * 10
            if t < 38:
                n, total = want.get(t, (0, 0.0))
                want[t] = (n + 1, total + i / 10)
        assert sorted((r.n, round(r.total, 6)) for r in rows) == sorted(
            (n, round(total, 6)) for n, total in want.values())


@pytest.mark.spark
def test_a_damaged_checkpoint_is_checkpoint_corrupt_naming_the_file(ws, tmp_path):
    """WaveSQL's own committed state (state.json) and Spark's offset log, each damaged
    after a run: the next run stops with CHECKPOINT_CORRUPT naming the file."""
    from wavesql.errors import WaveSQLError

    folder = tmp_path / "in"
    _readings(folder / "a.parquet", list(range(10)))
    ws.sql(f"CREATE OR REPLACE STREAM readings (id BIGINT, v DOUBLE, ts TIMESTAMP) FROM "
           f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    query = QUERIES["rows"]
    ckpt = tmp_path / "ckpt"
    ws.stream(query, tmp_path / "out", ckpt).await_termination()
    (state,) = ckpt.glob("state/*/state.json")
    good = state.read_text()
    state.write_text(good[: len(good) // 2])  # truncated
    _readings(folder / "b.parquet", list(range(10, 20)))
    with pytest.raises(WaveSQLError) as err:
        ws.stream(query, tmp_path / "out", ckpt).await_termination()
    assert err.value.code == "CHECKPOINT_CORRUPT" and "state.json" in err.value.message
    state.write_text(good)
    log = ckpt / "offsets" / "offsets" / "0"
    log.write_text("garbage")
    with pytest.raises(WaveSQLError) as err:
        ws.stream(query, tmp_path / "out", ckpt).await_termination()
    assert err.value.code == "CHECKPOINT_CORRUPT", err.value
    assert "offsets/offsets/0" in err.value.message
