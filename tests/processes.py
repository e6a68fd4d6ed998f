"""Running a WaveSQL process a test can SIGKILL in mid-run (the crash-safety tests)."""

from __future__ import annotations

import signal
import subprocess

#: JVM options for the short-lived Spark a test starts in a process of its own (``wavesql
#: run`` killed mid-run, the CLI): the client compiler only and one GC thread. Such a JVM
#: lives for a few micro-batches, so most of its time is start-up, where C2's compile
#: threads and the parallel collector's only compete with the test's other processes for
#: the (2) cores. It changes no behaviour (the same code runs, compiled differently). The
#: suite's own Spark session uses them too (tests/jvm_archive.py).
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def quick_jvm_env(env: dict) -> dict:
    """``env`` for a process whose Spark should start quickly (:data:`QUICK_JVM_OPTIONS`
    added to ``JAVA_TOOL_OPTIONS``, which every JVM reads; it says so on stderr)."""
    own = env.get("JAVA_TOOL_OPTIONS", "")
    return {**env, "JAVA_TOOL_OPTIONS": f"{own} {QUICK_JVM_OPTIONS}".strip()}


def kill_after_two_commits_then_rerun(cmd, env, committed, batches: int):
    """:func:`kill_after_two_commits`, then run ``cmd`` again to the end; returns the
    rerun's CompletedProcess."""
    import subprocess

    root = kill_after_two_commits(cmd, env, committed, batches)
    again = subprocess.run(cmd, cwd=root, env=quick_jvm_env(env), capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    return again


def kill_after_two_commits(cmd, env, committed, batches: int):
    """Run ``cmd`` (one micro-batch per input file, ``batches`` of them; its JVM quick to
    start, :func:`quick_jvm_env`) in a process group of its own, SIGKILL it as soon as
    ``committed()`` counts two commit records, and check it was killed mid-run. Returns the
    folder it ran in."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(cmd, cwd=root, env=quick_jvm_env(env), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while proc.poll() is None and committed() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed: " + proc.stdout.read()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert 2 <= committed() < batches, "killed after its last batch"
    return root


class ServerProcess:
    """A server the tests start in a process of their own (S3, HDFS, GCS, Kafka, the Hive
    metastore): a subclass starts ``self.process``; stopping sends SIGTERM (SIGKILL with
    ``kill=True``: a crash) and kills it if it has not ended within :attr:`stop_seconds`.
    A context manager too (``with KafkaBroker(folder) as broker: ...``)."""

    process: subprocess.Popen | None = None
    stop_seconds: float = 30

    def start(self):
        raise NotImplementedError

    def stop(self, kill: bool = False) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.process.wait(self.stop_seconds)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
