"""`wavesql schedule DIR` as a real process: a fast cron expression, overlapping runs refused
(in the scheduler and across processes), the history in the catalog, `wavesql runs`,
a clean stop on SIGTERM. Plus the header parsing, in-process."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.test_run_files import ROWS, env, hot_of, input_frame, oracle_hot, write_input

JOB = textwrap.dedent("""\
    -- copies every new reading into the sink
    -- schedule: * * * * * */2
    CREATE STREAM IF NOT EXISTS readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP)
      FROM '../in/' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND;
    CREATE SINK IF NOT EXISTS copy TO '../out/copy/' FORMAT parquet;
    INSERT INTO copy SELECT id, sensor, v, ts FROM readings WHERE v >= 0.5;
""")


def runs_of(catalog: Path, file: Path) -> list[dict]:
    from wavesql.catalog import Catalog

    with Catalog(catalog) as cat:
        return list(reversed(cat.runs(str(file.resolve()), limit=None)))


def wait_for(predicate, proc, timeout: float = 300, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the scheduler ended while waiting for {what}: "
                                 + proc.stdout.read())
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@contextlib.contextmanager
def hold(lock, catalog, file, proc):
    """Take the file's lock as soon as the scheduler's run in progress (if any) lets go."""
    from wavesql.errors import WaveSQLError

    while True:
        try:
            held = lock(catalog, file)
            held.__enter__()
            break
        except WaveSQLError as e:
            assert e.code == "RUN_IN_PROGRESS"
            assert proc.poll() is None, "the scheduler ended"
            time.sleep(0.05)
    try:
        yield
    finally:
        held.__exit__(None, None, None)


@pytest.mark.spark
def test_schedule_runs_refuses_overlaps_and_keeps_history(tmp_path):
    from wavesql.catalog import Catalog
    from wavesql.jobs import file_lock

    jobs = tmp_path / "jobs"
    jobs.mkdir()
    job = jobs / "ingest.wsql"
    job.write_text(JOB)
    (jobs / "adhoc.wsql").write_text("SELECT 1;\n")  # no header: not scheduled
    (jobs / "broken.wsql").write_text("-- schedule: every tuesday\nSELECT 1;\n")
    for i in range(3):
        write_input(tmp_path / "in", i)
    catalog = tmp_path / "catalog.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wavesql", "--master", "local[2]", "--catalog", str(catalog),
         "schedule", str(jobs), "--for", "400"],
        cwd=tmp_path, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        ok = lambda: [r for r in runs_of(catalog, job) if r["status"] == "ok"]  # noqa: E731
        wait_for(lambda: catalog.exists() and ok(), proc, what="the first run")
        for i in range(3, 5):
            write_input(tmp_path / "in", i)
        # Another process holds the file's lock (as a `wavesql run` by hand would): the
        # scheduler's runs in the meantime are refused and recorded.
        with Catalog(catalog) as cat, hold(file_lock, cat, str(job), proc):
            wait_for(lambda: any("already running" in (r["error"] or "")
                                 for r in runs_of(catalog, job)), proc, what="a refused run")
        # a run after the lock is gone, so it reads files 3 and 4
        seen = len(ok())
        wait_for(lambda: len(ok()) > seen, proc, what="a run after the lock")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert "SIGTERM: stopping" in output and "scheduler stopped" in output
    assert "INVALID_SCHEDULE" in output and "broken.wsql" in output and "adhoc" not in output

    runs = runs_of(catalog, job)
    assert all(r["trigger"] == "schedule" for r in runs)
    done = [r for r in runs if r["status"] == "ok"]
    overlapped = [r for r in runs if r["status"] == "skipped"
                  and "has not finished" in (r["error"] or "")]
    locked = [r for r in runs if r["status"] == "skipped"
              and "already running" in (r["error"] or "")]
    assert len(done) >= 2 and overlapped and locked, runs
    assert {r["status"] for r in runs} <= {"ok", "skipped", "interrupted"}
    # never two runs of the file at once: the ok runs' intervals do not overlap
    spans = sorted((r["started_at"], r["ended_at"]) for r in done)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # the runs together copied each qualifying row once (pandas oracle over the 5 files)
    data = input_frame(tmp_path / "in")
    assert hot_of(tmp_path / "out" / "copy") == oracle_hot(data)
    assert sum(r["rows_in"] or 0 for r in done) == 5 * ROWS

    shown = subprocess.run(
        [sys.executable, "-m", "wavesql", "--catalog", str(catalog), "runs", "--file",
         str(job), "--limit", "100"], capture_output=True, text=True, env=env(), timeout=60)
    assert shown.returncode == 0, shown.stderr
    table = shown.stdout
    assert f"({len(runs)} runs)" in table
    assert table.count("│ ok ") == len(done) and table.count("│ skipped ") == len(runs) - len(
        done) - sum(r["status"] == "interrupted" for r in runs)
    assert "has not finished" in table and "schedule" in table


def test_schedule_header(tmp_path):
    from wavesql.errors import WaveSQLError
    from wavesql.schedule import read_schedule

    f = tmp_path / "a.wsql"
    f.write_text("-- nightly\n--schedule:  0 3 * * *  \nSELECT 1;\n")
    assert read_schedule(f) == "0 3 * * *"
    f.write_text("SELECT 1;\n-- schedule: 0 3 * * *\n")  # after a statement: not a header
    assert read_schedule(f) is None
    f.write_text("\n-- schedule: 61 * * * *\nSELECT 1;\n")
    with pytest.raises(WaveSQLError) as info:
        read_schedule(f)
    err = info.value
    assert err.code == "INVALID_SCHEDULE" and err.hint
    assert f.read_text()[err.span.start:err.span.end] == "61 * * * *"
    assert ":2:14" in str(err)
