"""The REPL's job control: each piece of work that talks to Spark -- a buffer's statements,
a meta-command that reads the catalog or a plan, a continuous query in the foreground --
runs as a :class:`Job` in a worker thread under its own Spark job group, while the main
thread prints what the job emits, draws the progress bar and turns Ctrl-C into
``cancelJobGroup``. The package docstring ("Threads and Ctrl-C") says why the main thread
never calls into the JVM itself.

(Not :mod:`wavesql.jobs`, which runs ``INSERT INTO`` statements as incremental jobs.)
"""

from __future__ import annotations

import itertools
import os
import queue
import signal
import threading
import time
from typing import Callable

from rich.text import Text

from wavesql.errors import WaveSQLError
from wavesql.render import error_text

_groups = itertools.count(1)


class Job:
    """One unit of REPL work (a statement list, a meta-command, a foreground stream).

    The worker thread does the work and hands what to print to the main thread through
    :meth:`emit`; ``cancelled`` is the main thread's Ctrl-C (``interrupts`` counts them,
    ``on_interrupt`` is what the first one prints, ``interrupt_ends`` says Ctrl-C is the
    normal end of the work rather than a failure); ``progress`` is the poller's latest
    ``(completed tasks, total tasks, running stage names)``.
    """

    def __init__(self):
        self.group = f"wavesql-repl-{os.getpid()}-{next(_groups)}"
        self.cancelled = threading.Event()
        self.interrupts = 0
        self.on_interrupt = "cancelling…"
        self.interrupt_ends = False
        self.finished = threading.Event()
        self.output: queue.Queue = queue.Queue()
        self.progress: tuple[int, int, list[str]] | None = None

    def emit(self, *renderables) -> None:
        for r in renderables:
            self.output.put(r)


class JobControl:
    """Running work off the main thread: the part of :class:`wavesql.repl.shell.Repl` that
    starts jobs, shows their progress and output, and cancels them on Ctrl-C. It uses the
    REPL's ``session``, ``console``, ``completer`` and ``_print_lock``.
    """

    def _run_job(self, work: Callable[[Job], None], progress: bool = True) -> bool:
        """Run ``work(job)`` in a worker thread; print what it emits; Ctrl-C cancels.

        Returns False when the work failed or was cancelled (the rest of the buffer is
        skipped, as psql does).
        """
        job = Job()
        ok = [True]

        def worker():
            try:
                work(job)
            except BaseException as e:  # noqa: BLE001 - every error is printed, none ends the REPL
                ok[0] = False
                job.emit(self._describe_failure(e, job))
            finally:
                try:
                    self.completer.refresh()  # DDL may have changed names and columns
                except Exception:  # noqa: BLE001
                    pass
                job.finished.set()

        def on_sigint(signum, frame):
            # Only flags: an exception raised wherever the main thread happens to be (inside
            # rich's live display, say) could leave things half done.
            job.interrupts += 1
            job.cancelled.set()

        threading.Thread(target=worker, name="wavesql-repl-worker", daemon=True).start()
        threading.Thread(target=self._poll, args=(job, progress), name="wavesql-repl-poll",
                         daemon=True).start()
        bar = None
        started = time.monotonic()
        told = False
        previous_handler = signal.signal(signal.SIGINT, on_sigint)
        try:
            while True:
                finished = job.finished.wait(0.1)
                if job.cancelled.is_set() and not told:
                    told = True
                    ok[0] = ok[0] and job.interrupt_ends
                    self._print(Text(job.on_interrupt, style="yellow"))
                self._drain(job)
                if finished:
                    break
                if progress:
                    bar = self._show_progress(job, bar, time.monotonic() - started)
        finally:
            signal.signal(signal.SIGINT, previous_handler)
            if bar is not None:
                bar[0].stop()
            self._drain(job)
        return ok[0]

    def _describe_failure(self, e: BaseException, job: Job):
        if isinstance(e, WaveSQLError):
            return error_text(e)
        if job.cancelled.is_set():
            return Text("cancelled", style="yellow")
        from wavesql.spark_errors import is_runtime_error, translate_runtime_error

        if is_runtime_error(e):
            return error_text(translate_runtime_error(e))
        return Text(f"internal error: {type(e).__name__}: {e}", style="bold red")

    def _poll(self, job: Job, progress: bool) -> None:
        """Helper thread: Spark status for the progress bar; Ctrl-C -> cancel the group."""
        sc = self.session.spark.sparkContext
        cancelled_at = None
        while not job.finished.wait(0.25):
            try:
                if job.cancelled.is_set():
                    # Again every second: a statement may start new jobs after the first.
                    if cancelled_at is None or time.monotonic() - cancelled_at > 1:
                        sc.cancelJobGroup(job.group)
                        cancelled_at = time.monotonic()
                elif progress:
                    job.progress = group_progress(sc.statusTracker(), job.group)
            except Exception:  # noqa: BLE001 - status is best effort; the job reports errors
                pass

    def _show_progress(self, job: Job, bar, elapsed: float):
        """Create/update the transient progress bar once a job has run for half a second."""
        snapshot = job.progress
        if snapshot is None or snapshot[1] == 0 or elapsed < 0.5:
            return bar
        done, total, stages = snapshot
        if bar is None:
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                                       TextColumn, TimeElapsedColumn)

            progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                MofNCompleteColumn(), TextColumn("tasks"), TimeElapsedColumn(),
                                TextColumn("[dim]Ctrl-C cancels"), console=self.console,
                                transient=True)
            progress.start()
            bar = (progress, progress.add_task("running", total=total))
        label = stages[0] if stages else "running"
        bar[0].update(bar[1], total=total, completed=done,
                      description=f"{label[:40]}{' +' + str(len(stages) - 1) if len(stages) > 1 else ''}")
        return bar

    def _drain(self, job: Job) -> None:
        while True:
            try:
                item = job.output.get_nowait()
            except queue.Empty:
                return
            self._print(item)

    def _print(self, renderable) -> None:
        with self._print_lock:
            if isinstance(renderable, str):
                self.console.print(renderable, markup=False, highlight=False)
            else:
                self.console.print(renderable)


def anchor(err: WaveSQLError, piece: str, text: str, offset: int) -> WaveSQLError:
    """Re-anchor an error raised for ``piece`` in the whole buffer ``text`` it came from, so
    line numbers and the caret match what the user typed."""
    if err.query is None or err.query == piece:
        return err.with_query(text, offset=offset) if err.span is not None else \
            err.with_query(text)
    return err


def group_progress(tracker, group: str) -> tuple[int, int, list[str]]:
    """(completed tasks, total tasks, names of running stages) of a job group's jobs."""
    done = total = 0
    running: list[str] = []
    for job_id in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job_id)
        if info is None:
            continue
        for stage_id in info.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is None:
                continue
            total += stage.numTasks
            # A finished job's skipped stages never run their tasks: count them as done.
            done += stage.numTasks if info.status == "SUCCEEDED" else stage.numCompletedTasks
            if stage.numActiveTasks:
                running.append(f"stage {stage_id}")
    return done, total, running
