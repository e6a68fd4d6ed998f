"""The fault-injection hook (wavesql/faults.py) itself; the crash tests that use it are in
tests/test_run_files.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

SCRIPT = ("from wavesql import faults\n"
          "for stage in ['staged', 'renamed', 'staged', 'renamed']:\n"
          "    print('before', stage, flush=True)\n"
          "    faults.point(stage)\n"
          "print('survived', flush=True)\n")


def _run(fault: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "WAVESQL_FAULT"}
    if fault is not None:
        env["WAVESQL_FAULT"] = fault
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=60, start_new_session=True)


def test_unset_the_hook_does_nothing():
    done = _run(None)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "survived"


@pytest.mark.parametrize("fault, reached", [("renamed", 2), ("staged@2", 3),
                                            ("renamed@2", 4), ("staged@3", None)])
def test_the_process_is_killed_the_nth_time_the_stage_is_reached(fault, reached):
    done = _run(fault)
    lines = done.stdout.splitlines()
    if reached is None:  # the stage is never reached a third time
        assert done.returncode == 0 and lines[-1] == "survived"
        return
    assert done.returncode == -signal.SIGKILL
    assert len(lines) == reached and "survived" not in lines


def test_an_unknown_stage_is_an_error():
    done = _run("commited")
    assert done.returncode != 0 and "the stages are staged, renamed" in done.stderr
