"""``wavesql schedule DIR``: run query files on the cron expressions in their headers.

A file takes part when its header -- the comment lines before its first statement -- has a
line ``-- schedule: <cron>``::

    -- schedule: */5 * * * *          every five minutes
    -- schedule: * * * * * */10       every ten seconds (a sixth field: seconds, croniter's
                                      convention)
    -- schedule: @hourly

Times are the machine's local time, as in cron. The folder is re-read on every tick, so a
file added, edited or removed while the scheduler runs is picked up.

How runs are kept apart
-----------------------
One scheduler runs one file at a time, in a worker thread that shares the scheduler's Spark
session (a JVM start costs seconds; a run of a file with nothing new costs well under one);
the main thread keeps the clock. When a file comes due while its previous run is still going
(or still waiting for the worker), that run is **refused** and recorded as ``skipped`` --
never queued behind it, so a slow job cannot pile up a backlog. Across processes (two
schedulers, or ``wavesql run`` by hand), the per-file ``flock`` of :func:`wavesql.jobs.run_file`
refuses the second run the same way. Every run -- ok, failed, skipped, interrupted -- is a row
of the catalog's ``runs`` table, which ``wavesql runs`` shows.

Why one worker and not a thread per file: binding registers temporary views on the shared
Spark session, so two statements bound at the same moment in one session could see each
other's stand-ins; files due together simply run one after the other.

Stopping: SIGINT or SIGTERM stops scheduling; the run in progress ends after its current
statement (an ``INSERT INTO`` finishes its ``availableNow`` query) and is recorded as
``interrupted`` if statements were left; a second signal exits at once -- safe, because an
``INSERT INTO`` killed mid-way is redone exactly once by the next run.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from wavesql.errors import Span, WaveSQLError

__all__ = ["Scheduler", "read_schedule"]

_HEADER = re.compile(r"--\s*schedule\s*:\s*(?P<expr>.*?)\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Entry:
    file: str  # absolute path
    expr: str


def read_schedule(path: str | os.PathLike) -> str | None:
    """The cron expression in the header of query file ``path`` (None: not scheduled).

    Raises ``INVALID_SCHEDULE`` (positioned at the expression) when croniter cannot read it,
    and ``NOT_SCHEDULABLE`` (at the statement) when a scheduled file holds a ``STREAM
    REAL-TIME INTO`` statement: a real-time query never ends (wavesql/services.py).
    """
    from croniter import croniter

    text = Path(path).read_text()
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped and not stripped.startswith("--"):
            return None  # the header ends at the first statement
        m = _HEADER.match(stripped)
        if m:
            expr = m.group("expr")
            if not croniter.is_valid(expr):
                begin = offset + line.index(stripped) + m.start("expr")
                raise WaveSQLError(
                    "INVALID_SCHEDULE", f"`{expr}` is not a cron expression",
                    Span(begin, begin + max(len(expr), 1)), query=text, source=str(path),
                    hint="five fields (minute hour day month weekday), e.g. */5 * * * *; a "
                         "sixth field is seconds: * * * * * */10; or @hourly, @daily")
            from wavesql.services import refuse_in_schedule

            refuse_in_schedule(text, str(path))
            return expr
        offset += len(line)
    return None


class Scheduler:
    """Runs the scheduled files of ``directory`` (see the module docstring)."""

    def __init__(self, session, directory: str | os.PathLike, *,
                 print_line: Callable[[str], None] = print,
                 print_error: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.time):
        self.session = session
        self.directory = Path(directory)
        self.print_line = print_line
        self.print_error = print_error
        self.clock = clock
        self.stopping = threading.Event()
        self._queue: queue.Queue = queue.Queue()
        self._busy: set[str] = set()  # files queued or running
        self._lock = threading.Lock()
        self._next: dict[str, tuple[str, float]] = {}  # file -> (expr, next due time)
        self._bad: dict[str, str] = {}  # file -> error already reported
        self.failures = 0

    # -- the folder ---------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """The scheduled files of the folder now; a bad header is reported once per edit."""
        if not self.directory.is_dir():
            raise WaveSQLError("FILE_NOT_FOUND", f"`{self.directory}` is not a folder",
                               hint="wavesql schedule DIR runs the .wsql files of DIR")
        found = []
        for path in sorted(self.directory.glob("*.wsql")):
            file = str(path.resolve())
            try:
                expr = read_schedule(path)
            except WaveSQLError as e:
                stamp = f"{path.stat().st_mtime_ns}"
                if self._bad.get(file) != stamp:
                    self._bad[file] = stamp
                    self.print_error(str(e))
                continue
            except OSError:
                continue  # removed while we looked
            self._bad.pop(file, None)
            if expr is not None:
                found.append(Entry(file, expr))
        return found

    # -- the loop -----------------------------------------------------------------------
    def serve(self, *, once: bool = False, duration: float | None = None) -> int:
        """Schedule until stopped (SIGINT/SIGTERM, ``duration`` seconds), or with ``once``
        run every scheduled file once now. Returns the exit status: 0, or 1 when a run
        failed."""
        previous = self._install_signals()
        worker = threading.Thread(target=self._work, name="wavesql-schedule", daemon=True)
        worker.start()
        began = time.monotonic()
        try:
            entries = self.entries()
            self.print_line(f"scheduling {len(entries)} file(s) in {self.directory}"
                            + (" (once)" if once else ""))
            if once:
                for entry in entries:
                    self._submit(entry.file)
            else:
                while not self.stopping.is_set():
                    if duration is not None and time.monotonic() - began >= duration:
                        break
                    self._tick()
                    self.stopping.wait(self._sleep(duration, began))
        finally:
            if not once:
                self.stopping.set()
            self._queue.put(None)  # the worker ends after the runs already queued (once)
            while worker.is_alive():
                worker.join(0.2)  # in slices, so a second signal can still interrupt
            self._restore_signals(previous)
        self.print_line("scheduler stopped")
        return 1 if self.failures else 0

    def _sleep(self, duration, began) -> float:
        now = self.clock()
        due = min((t for _, t in self._next.values()), default=now + 1.0)
        wait = min(max(due - now, 0.02), 1.0)
        if duration is not None:
            wait = min(wait, max(duration - (time.monotonic() - began), 0.0))
        return wait

    def _tick(self) -> None:
        from croniter import croniter

        now = self.clock()
        current = {e.file: e.expr for e in self.entries()}
        for file in list(self._next):
            if file not in current:
                del self._next[file]
        for file, expr in current.items():
            known = self._next.get(file)
            if known is None or known[0] != expr:  # new or edited: first due at the next match
                self._next[file] = (expr, croniter(expr, datetime.fromtimestamp(now))
                                    .get_next(float))
                continue
            if now >= known[1]:
                self._next[file] = (expr, croniter(expr, datetime.fromtimestamp(now))
                                    .get_next(float))
                self._submit(file)

    def _submit(self, file: str) -> None:
        with self._lock:
            busy = file in self._busy
            if not busy:
                self._busy.add(file)
        if busy:
            reason = "the previous run of this file has not finished"
            self.session.catalog.start_run(file, "schedule", status="skipped", error=reason)
            self.print_line(f"{_stamp()} {file}: skipped ({reason})")
            return
        self._queue.put(file)

    def _work(self) -> None:
        from wavesql.jobs import run_file

        while True:
            file = self._queue.get()
            if file is None:
                return
            try:
                if self.stopping.is_set():
                    continue
                self.print_line(f"{_stamp()} {file}: started")
                run = run_file(self.session, file, trigger="schedule",
                               stop=self.stopping.is_set)
                line = f"{_stamp()} {file}: {run.status}"
                if run.status == "ok":
                    line += f" · {run.statements} statement(s)"
                    if run.rows_in is not None:
                        line += f" · in {run.rows_in} · late {run.rows_late} · out {run.rows_out}"
                line += f" · {run.seconds:.2f} s"
                self.print_line(line)
                if run.status == "failed":
                    self.failures += 1
                if run.error is not None and run.status != "skipped":
                    self.print_error(str(run.error))
                elif run.status == "skipped":
                    self.print_line(f"  ({run.error.message})")
            except Exception as e:  # noqa: BLE001 - the scheduler outlives one bad run
                self.failures += 1
                self.print_error(f"{file}: {e!r}")
            finally:
                with self._lock:
                    self._busy.discard(file)

    # -- signals ------------------------------------------------------------------------
    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return None

        def handle(signum, frame):
            if self.stopping.is_set():
                raise KeyboardInterrupt  # second signal: stop at once
            self.print_line(f"{signal.Signals(signum).name}: stopping after the current "
                            "statement (again to stop at once)")
            self.stopping.set()

        return {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}

    @staticmethod
    def _restore_signals(previous) -> None:
        for sig, handler in (previous or {}).items():
            signal.signal(sig, handler)


def _stamp() -> str:
    return datetime.now().strftime("%H:%M:%S")
