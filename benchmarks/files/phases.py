"""Where one incremental ``wavesql run job.wsql`` spends its time (a measuring aid, not a test).

    python benchmarks/files/phases.py CASE_DIR [--spark]

Runs the WaveSQL CLI (``wavesql run job.wsql`` in ``CASE_DIR``, as run.py prepares it) in
this process, with wall-clock timers wrapped around the functions of the job path, and prints
each one's total seconds and calls, Spark's per-trigger ``durationMs`` of the query, and the
seconds from this process's start to each phase. Add a new file to ``CASE_DIR/in`` first
(run.py ``add_file``) to time an incremental run that finds one.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()
T0_EPOCH = time.time()

import argparse  # noqa: E402
import functools  # noqa: E402
import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
from collections import defaultdict  # noqa: E402

TOTALS: dict = defaultdict(lambda: [0.0, 0])
MARKS: list = []
_lock = threading.Lock()

# (module, qualified name) of what is timed; nested ones are counted inside their callers
TIMED = [
    ("wavesql.session", "connect"),
    ("wavesql.spark", "check_java"),
    ("wavesql.spark", "start_spark"),
    ("wavesql.jobs", "run_file"),
    ("wavesql.jobs", "file_lock"),
    ("wavesql.session", "Session._run"),
    ("wavesql.planner", "bind"),
    ("wavesql.planner", "optimize"),
    ("wavesql.planner", "lower"),
    ("wavesql.jobs", "run_insert"),
    ("wavesql.jobs", "_late_target"),
    ("wavesql.jobs", "_describe_job"),
    ("wavesql.streaming.launch", "start"),
    ("wavesql.streaming.launch", "plan_continuous"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._start"),
    ("wavesql.streaming.query", "ContinuousQuery._start_writer"),
    ("wavesql.streaming.query", "ContinuousQuery.await_termination"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._run_batch"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._input_rows"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._results"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._read_buffer"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._write_state"),
    ("wavesql.streaming.runner", "ReEvaluatingQuery._arrivals"),
    ("wavesql.streaming.query", "ContinuousQuery._load_state"),
    ("wavesql.streaming.query", "ContinuousQuery._changed_files"),
    ("wavesql.streaming.query", "ContinuousQuery._deliver_counted"),
    ("wavesql.streaming.query", "ContinuousQuery._deliver"),
    ("wavesql.streaming.query", "ContinuousQuery._finish"),
    ("wavesql.streaming.query", "ContinuousQuery._commit_state"),
    ("wavesql.streaming.sinks", "commit"),
    ("wavesql.streaming.sinks", "parquet_rows"),
    ("wavesql.streaming.files", "wait_until_ready"),
    ("wavesql.streaming.files", "check_columns"),
    ("wavesql.streaming.files", "batch_files"),
    ("wavesql.render", "show"),
    ("wavesql.cli", "_connect"),
]


def _wrap(fn, label):
    @functools.wraps(fn)
    def timed(*a, **k):
        began = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            took = time.perf_counter() - began
            with _lock:
                TOTALS[label][0] += took
                TOTALS[label][1] += 1
                MARKS.append((began - T0, took, label))
    return timed


def instrument() -> None:
    for module_name, qual in TIMED:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner, _, name = qual.rpartition(".")
        target = getattr(module, owner) if owner else module
        fn = getattr(target, name, None)
        if fn is None:
            continue
        setattr(target, name, _wrap(fn, f"{module_name.split('.')[-1]}.{qual}"))
        # a name imported elsewhere by `from x import f` keeps the old object: patch those
        if not owner:
            for mod in list(sys.modules.values()):
                if mod is not None and getattr(mod, name, None) is fn and mod is not module:
                    setattr(mod, name, getattr(target, name))


def spark_jobs(spark) -> list:
    """(submitted, seconds, description) of every Spark job this process ran, from Spark's
    status store (seconds since the first job)."""
    store = spark.sparkContext._jsc.sc().statusStore()
    out = []
    listed = store.jobsList(None)
    for i in range(listed.length()):
        job = listed.apply(i)
        sub, done = job.submissionTime(), job.completionTime()
        began = sub.get().getTime() / 1000 if sub.isDefined() else None
        ended = done.get().getTime() / 1000 if done.isDefined() else None
        text = f"{job.name()} ({job.stageIds().length()} stage(s))"
        out.append((began, (ended - began) if began and ended else -1, str(text)[:120]))
    out.sort(key=lambda j: j[0] or 0)
    return [((b or T0_EPOCH) - T0_EPOCH, t, d) for b, t, d in out]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    args = parser.parse_args()
    os.chdir(args.case)
    began = time.perf_counter()
    import wavesql.cli as cli  # noqa: F401
    import wavesql.jobs, wavesql.streaming, wavesql.streaming.runner  # noqa: E401,F401
    imported = time.perf_counter()
    instrument()
    from wavesql.streaming import query as q

    progress = []
    orig = q.ContinuousQuery.await_termination

    def await_and_keep(self, *a, **k):
        try:
            return orig(self, *a, **k)
        finally:
            progress.extend(json.loads(p.json) if hasattr(p, "json") else p
                            for p in (self._query.recentProgress or []))
    q.ContinuousQuery.await_termination = await_and_keep
    conf = ["--conf", "spark.sql.shuffle.partitions=2", "--conf",
            "spark.sql.session.timeZone=UTC", "--conf", "spark.ui.enabled=false",
            "--conf", "spark.ui.showConsoleProgress=false"]
    jobs = []
    orig_run_file = wavesql.jobs.run_file

    def run_file_and_list_jobs(session, *a, **k):
        try:
            return orig_run_file(session, *a, **k)
        finally:
            jobs.extend(spark_jobs(session.spark))
    cli.run_file = wavesql.jobs.run_file = run_file_and_list_jobs
    rc = cli.main(["--master", "local[2]", "--catalog", "catalog.db", *conf, "run",
                   "job.wsql"])
    ended = time.perf_counter()
    print(f"\nimports before main: {imported - began:.2f} s (process start to here "
          f"{imported - T0:.2f} s); main: {ended - imported:.2f} s; rc {rc}")
    for label, (s, n) in sorted(TOTALS.items(), key=lambda kv: -kv[1][0]):
        print(f"{s:8.3f} s {n:4d}x  {label}")
    print("Spark jobs (s from process start, seconds, description):")
    for start, took, what in jobs:
        print(f"  {start:8.3f} {took:7.3f}  {what}")
    print("timeline (s from process start, seconds, what):")
    for start, took, label in sorted(MARKS):
        print(f"  {start:8.3f} {took:8.3f}  {label}")
    for p in progress:
        print("durationMs", json.dumps(p.get("durationMs")), "rows", p.get("numInputRows"))
    return rc


if __name__ == "__main__":
    sys.exit(main())
