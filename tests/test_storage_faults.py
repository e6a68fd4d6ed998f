"""Storage faults (issue 23): a sink that cannot be written is a clear error naming it,
nothing of the failed micro-batch becomes visible, and the next run -- once the location
is writable again -- recovers: the sink then equals the pandas oracle, every row once.

The location is made unwritable for real: ``chattr +i`` (immutable: refused even to root,
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

from tests.test_run_files import (HOT_JOB, batches, hot_of, input_frame, oracle_hot, run,
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
def test_an_unwritable_sink_is_a_clear_error_and_the_next_run_recovers(tmp_path):
    (tmp_path / "job.wsql").write_text(HOT_JOB)
    hot = tmp_path / "out" / "hot"
    for i in range(2):
        write_input(tmp_path / "in", i)
    first = run(tmp_path, "run", "job.wsql")
    assert first.returncode == 0, first.stdout + first.stderr
    committed = batches(hot)
    (job,) = hot.glob("job=*")
    for i in range(2, 4):
        write_input(tmp_path / "in", i)
    # Spark's writer cannot create the batch's staging folder; then WaveSQL cannot rename
    # the staged batch into the job's folder
    for folder in (job / "_staging", job):
        with unwritable(folder):
            failed = run(tmp_path, "run", "job.wsql")
        assert failed.returncode != 0
        assert "error[STORAGE_DENIED]" in failed.stderr, failed.stderr
        assert str(job) in failed.stderr and "Traceback" not in failed.stderr
        assert "run again" in failed.stderr  # the hint
        assert batches(hot) == committed  # nothing of the failed batch is visible
    again = run(tmp_path, "run", "job.wsql")
    assert again.returncode == 0, again.stdout + again.stderr
    got = hot_of(hot)
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == oracle_hot(input_frame(tmp_path / "in"))
