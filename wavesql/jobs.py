"""Query files as jobs: ``INSERT INTO`` sinks run incrementally and exactly once.

What ``INSERT INTO <sink> <query>`` does
-----------------------------------------
When the query reads a catalog stream, it runs as a continuous query
(:mod:`wavesql.streaming`) with trigger ``availableNow``: it processes every input file that
arrived since the last run of the same statement, in micro-batches, and stops. Each run of
the same file therefore adds exactly the rows of the new input -- that is what makes a query
file cheap to run from cron. A query that reads no stream (a signal, a Spark table) is run
as a batch query and its output *replaces* the statement's previous output, so re-running it
never duplicates rows either.

Where things go (sink path ``S``, job id ``J``)::

    S/job=J/batch=000000007/part-*.parquet   micro-batch 7's rows (with _final, _progress),
                                             or part-*.csv / part-*.json: the sink's format
    S/job=J/_progress/batch=000000007.json   what micro-batch 7 did (rows in/late/out...)
    S/_wavesql/J/checkpoint/                 Spark's offsets + the runner's state
    S/_wavesql/J/late/                       late rows (unless the query says LATE INTO)
    S/_wavesql/J/job.json                    which file and statement J is
    S/_wavesql/J/lock                        held (flock) while J runs (local disk and
                                             an SQLite catalog; else a catalog lease)
    S/job=J/_spark_metadata/                 J's commit records (object stores)
    S/_spark_metadata/<n>.compact            what every job committed (object stores)

The job id ``J`` is ``<file stem>-<12 hex digits>``, a hash of the file's absolute path and
the statement's tokens: comments, whitespace and keyword case do not change it; any other
edit of the statement makes a new job, which starts at the beginning of its input (its
output goes to a new ``job=`` folder; delete the old one if the new query replaces it).
Statements run without a file (``Session.sql``, the REPL) hash their text alone.

Why the checkpoint lives inside the sink and not next to the catalog: the checkpoint records
which input files are already in the output, so the two are only correct *together*. Kept in
one folder they are moved, backed up and deleted together (delete the sink folder and the
next run rebuilds it from all the input); a checkpoint kept elsewhere would skip input whose
output was deleted (a gap), or redo input whose output is still there (duplicates). The
leading ``_`` hides ``_wavesql`` from Spark's and pyarrow's readers of the sink, and the
``job=`` folders read as a partition column, so several statements may write one sink and
``spark.read.parquet(S)`` still reads it (with ``job`` and ``batch`` columns).

Exactly once
------------
Spark writes a micro-batch's offsets before running it and its commit after; a run killed in
between re-runs that batch, with the same input files, when restarted. The runner writes a
batch's output aside and renames it into ``batch=N`` (replacing an earlier attempt's), so a
batch's rows are in the sink once, complete, whatever the moment of the kill; its state for
the next batch is committed with an atomic rename too. The lock keeps two processes from
running one job (and so one checkpoint) at the same time.

On an object store (``s3a://`` ...), where nothing renames atomically and no file can be
locked: a batch's files are committed by a record written last in ``S/job=J/_spark_metadata``
(streaming/sinks.py), a run of J holds a **lease in the catalog** instead of the ``flock``
(``Catalog.lease``: renewed while it runs; free again when it expires, or at once when its
holder was a process of this host that died), and at the end of each run the sink's index
``S/_spark_metadata`` is rewritten to list what every job has committed -- so
``spark.read.parquet(S)`` reads committed rows only, a killed run's files never among them
(they are deleted at a later publication). A replacing job commits its batch 0 anew each
run; the index then lists only the new files.

Query files as a whole (``wavesql run``, ``wavesql schedule``) are run by :func:`run_file`:
one run at a time per file (an ``flock`` on a file next to the catalog, released by the
kernel even when the process is SIGKILLed), each run recorded in the catalog's ``runs``
table with its status, figures and error.

With the shared catalog (``--catalog spark``, used by several hosts) nothing is kept on one
host's disk: a file's run and a job's checkpoint are guarded by leases in the catalog (a
host never sees another's ``flock``), and a Kafka sink's checkpoints default to
:func:`state_root` (``wavesql.state.location``, else a folder in the catalog database's
location that the metastore gives every host alike).

Real-time statements: a file run as a service
---------------------------------------------
``STREAM REAL-TIME INTO <kafka sink> <query>;`` -- the REPL's spelling of Spark's real-time
mode -- may stand in a query file too. A real-time query never ends, so such a file is a
**service** (details in :mod:`wavesql.services`): ``wavesql run`` runs the file's other
statements first, in order, then starts **every** real-time statement of it (in the
file's order) and keeps them running until SIGINT or SIGTERM, which stops them and ends
the run ``ok`` (exit status 0); when one fails, the others are stopped and the run ends
``failed`` with its error (exit 1). A plan real-time mode cannot run fails at its
statement as in the REPL (``STREAMING_RULE``; ``EXPLAIN STREAM`` says why). Each keeps its
checkpoint like a Kafka sink's ``INSERT INTO`` job (``<root>/_wavesql/J/checkpoint``, ``J``
the statement's job id), so a restarted service continues where the last one stopped.
``wavesql schedule`` refuses such a file (``NOT_SCHEDULABLE``, at the statement), and the
REPL's other ``STREAM`` statements have no place in a file (``UNSUPPORTED_STATEMENT``):
both are found before any statement runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from wavesql.errors import Span, WaveSQLError

__all__ = ["InsertReport", "FileRun", "job_id", "run_insert", "run_file", "file_lock"]


# -- INSERT INTO a sink -----------------------------------------------------------------------
@dataclass
class InsertReport:
    """What one ``INSERT INTO`` did in this run."""

    sink: str
    job: str
    mode: str  # "incremental" (reads streams), "replace" (batch, replaces its output) or
    #           "real-time" (STREAM REAL-TIME INTO: a service, wavesql/services.py)
    batches: int = 0
    rows_in: int = 0
    late: int = 0  # late rows and rows without event time (both go to the late sink)
    quarantined: int = 0  # malformed input rows (the runner's quarantine)
    rows_out: int = 0
    final_out: int = 0
    seconds: float = 0.0
    output: str = ""

    def summary(self) -> str:
        if self.mode == "real-time":
            return (f"stream real-time into {self.sink}: running in Spark's real-time mode "
                    f"(job {self.job}); SIGINT or SIGTERM stops it")
        if self.mode == "replace":
            return (f"insert into {self.sink}: {self.rows_out} rows (replaced this statement's "
                    f"output) · {self.seconds:.2f} s")
        if self.batches == 0:
            return f"insert into {self.sink}: no new input · {self.seconds:.2f} s"
        return (f"insert into {self.sink}: {self.batches} batch{'es' if self.batches != 1 else ''}"
                f" · in {self.rows_in} · late {self.late} · quarantined {self.quarantined}"
                f" · out {self.rows_out} "
                f"(final {self.final_out}) · {self.seconds:.2f} s")


def job_id(source: str | None, statement_text: str) -> str:
    """Stable id of one statement of one file (see the module docstring)."""
    from wavesql.dialect import WaveSQL

    try:
        tokens = [f"{t.token_type.name}:{t.text if t.token_type.name in ('STRING', 'IDENTIFIER') else t.text.upper()}"
                  for t in WaveSQL().tokenize(statement_text)]
        canon = "\x1f".join(tokens)
    except Exception:  # noqa: BLE001 - tokenizing cannot fail on parsed text; be safe anyway
        canon = " ".join(statement_text.split())
    origin = os.path.realpath(source) if source else ""
    digest = hashlib.sha256(f"{origin}\x00{canon}".encode()).hexdigest()[:12]
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", Path(source).stem if source else "query").strip("_")
    return f"{stem or 'query'}-{digest}"


@contextlib.contextmanager
def _flock(path: Path, what: str, hint: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` or raise ``RUN_IN_PROGRESS`` at once.

    ``flock`` (not ``lockf``) because its lock belongs to the open file, so it also refuses a
    second holder in the same process (the scheduler's threads); the kernel drops it when the
    process dies, however it dies, so a killed run never leaves a stale lock behind.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = ""
            with contextlib.suppress(OSError):
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            raise WaveSQLError("RUN_IN_PROGRESS", f"{what} is already running"
                               + (f" ({holder})" if holder else ""), hint=hint) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


def _resolve(path: str, base_dir: str) -> str:
    return path if os.path.isabs(path) or "://" in path else os.path.join(base_dir, path)


def _late_target(bound, session, base_dir: str, roots: tuple[str, ...] = ()):
    """The job's LATE INTO as ``(where, format)``: a folder, a Kafka sink's records; or None
    (the job's own folder)."""
    from sqlglot import exp

    from wavesql.catalog import objects as cat

    if bound.late_into is None:
        return None
    target = bound.late_into.this  # a quoted path or a sink's name
    if isinstance(target, exp.Literal) and target.is_string:
        from wavesql.storage.local import escaping

        outside = escaping(target.name, base_dir, roots)
        if outside is not None:
            from wavesql.planner.analyze.ddl import path_escapes

            err = path_escapes(target.name, outside)
            raise WaveSQLError(err.code, err.message, Span.of(target), hint=err.hint)
        return _resolve(target.name, base_dir), "parquet"
    defn = session.catalog.get(target.name)
    if not isinstance(defn, cat.SinkDef):
        from wavesql.errors import did_you_mean

        raise WaveSQLError("UNKNOWN_STREAM", f"LATE INTO `{target.name}`: no such sink",
                           Span.of(target), hint=did_you_mean(
                               target.name, session.catalog.names("SINK"), "sinks")
                           or "CREATE SINK late_rows TO 'late/' FORMAT parquet, or give a path")
    from wavesql.streaming.outputs import late_target

    return late_target(defn)  # (folder, format), or (a Kafka sink's records, "kafka")


def state_root(session) -> str | None:
    """Where state that belongs to no sink folder is kept: the setting
    ``wavesql.state.location``, else the catalog's default (an SQLite file's folder; the
    shared catalog's database location in the metastore, the same for every host:
    ``SparkCatalog.state_location``); None for an in-memory catalog."""
    from wavesql import settings, storage

    given = settings.get(session.spark, "wavesql.state.location")
    if given:
        return storage.normalize(given)
    return session.catalog.state_location()


def _kafka_root(session, sink) -> str:
    """Where a Kafka sink's jobs keep their checkpoints: its ``checkpoint`` option, else
    ``kafka_sinks/<sink>`` under :func:`state_root` (a topic has no folder of its own)."""
    from wavesql import storage

    given = next((v for k, v in sink.options if k.lower() == "checkpoint"), None)
    if given:
        return storage.normalize(given)
    state = state_root(session)
    if state is None:
        raise WaveSQLError("INVALID_OPTION", f"sink `{sink.name}` is a Kafka topic and the "
                           "catalog is in memory: there is nowhere to keep its jobs' "
                           "checkpoints", hint=f"CREATE SINK {sink.name} ... OPTIONS "
                           "(checkpoint = 'path/or/s3a/uri', ...), or SET "
                           "wavesql.state.location = 'path/or/s3a/uri'")
    return storage.join(state, "kafka_sinks", sink.key)


def run_insert(session, bound, text: str, source: str | None, base_dir: str = ".", *,
               max_files_per_trigger: int | None = None) -> InsertReport:
    """Run one bound ``INSERT INTO`` (``planner.insert.InsertInto``) to completion.

    ``text`` is the whole text the statement came from (a file's content): the query is
    handed to the continuous runner with everything else blanked, so its errors point at the
    file's own lines and columns.
    """
    from wavesql import storage
    from wavesql.planner.insert import blank_outside
    from wavesql.streaming import start

    began = time.monotonic()
    sink = bound.sink
    job = job_id(source, bound.statement_text)
    to_kafka = sink.source == "kafka"
    root = _kafka_root(session, sink) if to_kafka else sink.path
    remote = storage.is_remote(root)
    home = storage.join(root, "_wavesql", job)
    output = storage.join(root, f"job={job}")
    if to_kafka:  # each micro-batch's rows sent to the topic (sources/kafka.py: at least once)
        from wavesql.sources import kafka
        from wavesql.streaming.sinks import KafkaOutput

        output = KafkaOutput(sink)
    report = InsertReport(sink.name, job, "incremental" if bound.continuous else "replace",
                          output=str(output))
    late = _late_target(bound, session, base_dir, session.path_roots(source, base_dir))
    with _job_guard(session, root, job, f"INSERT INTO {sink.name} (job {job})"):
        _describe_job(home, job, source, bound)
        if bound.continuous:
            keep = [bound.query_span]
            query_text = blank_outside(text, keep)
            if bound.late_span is not None:
                a, b = bound.late_span
                query_text = query_text[:a] + blank_outside(query_text[a:b], []) + query_text[b:]
            session._use_storage_settings()
            cq = start(session, query_text, output, storage.join(home, "checkpoint"),
                       trigger="availableNow",
                       late=late[0] if late else storage.join(home, "late"),
                       late_format=late[1] if late else "parquet",
                       max_files_per_trigger=max_files_per_trigger, clock=time.time,
                       output_format=sink.format, keep_replaced=remote)
            cq.await_termination()
            for r in cq.reports:
                report.batches += 1
                report.rows_in += r.rows_in
                report.late += r.late + r.no_time
                report.quarantined += getattr(r, "quarantined", 0)
                report.rows_out += r.rows_out
                report.final_out += r.final_out
        elif to_kafka:  # a topic is appended to: a re-run sends the whole result again
            df = _batch_result(session, bound, text).persist()
            report.rows_out = report.final_out = df.count()
            kafka.write(df, sink, 0)
            df.unpersist()
        else:
            report.rows_out = _replace_output(session, bound, text, output, remote)
            report.final_out = report.rows_out
        if remote and not to_kafka:
            _publish(session, root, output, sink.name)
    report.seconds = time.monotonic() - began
    return report


def _job_guard(session, root: str, job: str, what: str):
    """One writer per job's checkpoint. Local disk: the kernel's flock, released however
    the process dies; an object store has no lock to take, and another host never sees
    this one's flock, so with either the catalog keeps a lease (catalog/leases.py:
    Leases.lease; catalog/spark_catalog.py for the shared catalog)."""
    from wavesql import storage

    hint = ("another process runs the same statement of the same file; wait for it (one "
            "checkpoint takes one writer at a time)")
    if storage.is_remote(root) or session.catalog.shared:
        return session.catalog.lease(f"job:{root}/{job}", what, hint)
    return _flock(Path(storage.join(root, "_wavesql", job)) / "lock", what, hint)


def _publish(session, root: str, output: str, name: str) -> None:
    """An object-store sink's index: what every job committed, readable at the sink's root
    (streaming/sinks.py ``publish``). One publisher at a time: a short lease on the sink,
    waited for."""
    from wavesql.streaming import sinks

    with session.catalog.lease(f"sink:{root}", f"publishing sink {name}",
                               "another job is publishing to the same sink", wait=120):
        sinks.publish(root, output)


def _describe_job(home: str, job: str, source: str | None, bound=None, *,
                  statement: str | None = None, sink: str | None = None) -> None:
    """``job.json``: which file and statement a job folder belongs to (for people)."""
    from wavesql import storage

    info = storage.join(home, "job.json")
    if storage.exists(info):
        return
    storage.write_text(info, json.dumps({
        "job": job, "file": os.path.realpath(source) if source else None,
        "statement": bound.statement_text if bound is not None else statement,
        "sink": bound.sink.name if bound is not None else sink}, indent=2))


def _batch_result(session, bound, text: str):
    """The DataFrame of an INSERT's query over bounded inputs."""
    from wavesql import planner
    from wavesql.planner import ir
    from wavesql.planner.lower import Runtime

    stmt = planner.optimize(ir.QueryStatement(bound.query))
    return planner.lower(stmt, Runtime(session.spark, session.catalog, text))


def _replace_output(session, bound, text: str, output: str, remote: bool = False) -> int:
    """A query over bounded inputs: write its whole result, then swap it in for the
    statement's previous output (batch 0), so a re-run replaces instead of appending (on
    an object store: batch 0 committed anew, the old files left to the sink's index)."""
    import shutil

    from wavesql.streaming import sinks

    df = _batch_result(session, bound, text)
    if remote:
        files = sinks.commit(df, output, 0, bound.sink.format, keep_replaced=True)
        if bound.sink.format == "parquet":
            return sinks.parquet_rows(files)
        return session.spark.read.format(bound.sink.format).options(
            **sinks.reader_options(bound.sink.format)).schema(df.schema).load(files).count()
    from wavesql import faults
    from wavesql.storage.local import exchange

    output = Path(output)
    target = output / "batch=000000000"
    staging = output / "_staging" / target.name
    sinks.write(df, str(staging), bound.sink.format)
    faults.point("staged")
    # the new output takes the old one's place in one step (the old one is then at
    # `staging`): a reader, or a run killed here, sees one or the other, never neither
    if not (target.exists() and exchange(str(staging), str(target))):
        old = output / "_staging" / "replaced"  # (no atomic swap here: two renames)
        if old.exists():
            shutil.rmtree(old)
        if target.exists():
            os.replace(target, old)
        os.replace(staging, target)
        staging = old
    faults.point("renamed")
    shutil.rmtree(staging, ignore_errors=True)
    return sinks.count(session.spark, str(target), bound.sink.format, df.schema)


# -- query files ------------------------------------------------------------------------------
@dataclass
class ServiceResult:
    """A started ``STREAM REAL-TIME INTO`` statement of a file, as ``run_file`` reports each
    statement (``session.Result``'s fields): its status line and its report."""

    statement: object  # wavesql.dialect.Statement
    dataframe: object
    report: InsertReport
    kind: str = "stream"


@dataclass
class FileRun:
    """One run of a query file: its status and the figures of its statements."""

    file: str
    run_id: int | None = None
    status: str = "running"  # ok / failed / skipped / interrupted
    statements: int = 0
    rows_in: int | None = None
    rows_out: int | None = None
    rows_late: int | None = None
    error: WaveSQLError | BaseException | None = None
    seconds: float = 0.0
    results: list = field(default_factory=list)

    def add(self, report: InsertReport) -> None:
        self.rows_in = (self.rows_in or 0) + report.rows_in
        self.rows_out = (self.rows_out or 0) + report.rows_out
        self.rows_late = (self.rows_late or 0) + report.late


def lock_dir(catalog) -> Path:
    """Where per-file run locks of an SQLite catalog live: next to the catalog file (so
    every process using the catalog sees them), in a temporary folder for an in-memory
    catalog. (The shared catalog has none: :func:`file_lock`.)"""
    state = catalog.state_location()
    if state is None:
        import tempfile

        return Path(tempfile.gettempdir()) / "wavesql_locks"
    return Path(state) / ".wavesql_locks"


def file_lock(catalog, file: str):
    """The lock that keeps two runs of one query file apart (across processes too): an
    ``flock`` next to an SQLite catalog; with the shared catalog, whose users are on
    several hosts that see no common lock file, a lease in the catalog named by the
    file's absolute path (hosts running one file see it at one path)."""
    path = os.path.realpath(file)
    what, hint = f"query file {file}", ("a run of this file (wavesql run or wavesql "
                                        "schedule) has not finished; see `wavesql runs`")
    if catalog.shared:
        return catalog.lease(f"file:{path}", what, hint)
    digest = hashlib.sha256(path.encode()).hexdigest()[:16]
    return _flock(lock_dir(catalog) / f"{Path(path).stem}-{digest}.lock", what, hint=hint)


def run_file(session, file: str, *, trigger: str = "run",
             on_statement: Callable | None = None,
             stop: Callable[[], bool] | None = None,
             say: Callable[[str], None] | None = None) -> FileRun:
    """Run every statement of query file ``file`` in order, under the file's lock, and
    record the run in the catalog's run history.

    ``on_statement(result, seconds)`` is called after each statement (the CLI prints there;
    an exception it raises fails the run like a failed statement). ``stop()`` is asked
    between statements: True ends the run as ``interrupted``. A run refused because the file
    is already running is recorded as ``skipped`` and returned with the ``RUN_IN_PROGRESS``
    error; other errors end the run as ``failed`` (the remaining statements are not run).

    ``STREAM REAL-TIME INTO`` statements (wavesql/services.py) start after the others and
    run until SIGINT/SIGTERM or ``stop()``, which end the run ``ok``; ``say(message)`` hears
    of the signal. ``trigger="schedule"`` refuses such a file (``NOT_SCHEDULABLE``).
    """
    from wavesql import services
    from wavesql.dialect import parse_statements

    catalog = session.catalog
    path = os.path.realpath(file)
    run = FileRun(path)
    began = time.monotonic()
    try:
        lock = file_lock(catalog, file)
        lock.__enter__()
    except WaveSQLError as err:
        run.status, run.error = "skipped", err
        run.run_id = catalog.start_run(path, trigger, status="skipped", error=err.message)
        return run
    try:
        run.run_id = catalog.start_run(path, trigger)
        try:
            p = Path(file)
            if not p.is_file():
                raise WaveSQLError("FILE_NOT_FOUND", f"query file `{file}` does not exist",
                                   hint="check the path (relative to the current directory)")
            text = p.read_text()
            base_dir = str(p.resolve().parent)
            try:  # found before anything runs, without Spark
                realtime = services.real_time_statements(text)
                if realtime and trigger == "schedule":
                    services.refuse_in_schedule(text, file)
            except WaveSQLError as err:
                raise err.with_query(err.query or text, source=file) from None
            for stmt in parse_statements(services.without(text, realtime), lenient=True):
                if stop is not None and stop():
                    run.status = "interrupted"
                    break
                started = time.monotonic()
                try:
                    result = session._run(stmt, text, base_dir, file)
                except WaveSQLError as err:
                    raise err.with_query(err.query or text, source=file) from None
                run.statements += 1
                run.results.append(result)
                if result.report is not None:
                    run.add(result.report)
                if on_statement is not None:
                    on_statement(result, time.monotonic() - started)
            else:
                if realtime:  # a service: until SIGINT/SIGTERM (then ok) or a failure
                    _serve(session, run, realtime, text, file, on_statement, stop, say)
                run.status = "ok"
        except WaveSQLError as err:
            run.status, run.error = "failed", err
        except Exception as err:  # noqa: BLE001 - recorded, then shown by the caller
            from wavesql.spark_errors import translate_runtime_error

            run.status = "failed"
            try:
                run.error = translate_runtime_error(err)
            except Exception:  # noqa: BLE001
                run.error = err
        except BaseException as err:  # KeyboardInterrupt / SystemExit: record, then re-raise
            run.status, run.error = "interrupted", err
            raise
        finally:
            run.seconds = time.monotonic() - began
            message = None
            if run.error is not None:
                message = (f"[{run.error.code}] {run.error.message}"
                           if isinstance(run.error, WaveSQLError) else repr(run.error))
            catalog.finish_run(run.run_id, run.status, statements=run.statements,
                               rows_in=run.rows_in, rows_out=run.rows_out,
                               rows_late=run.rows_late, error=message)
    finally:
        lock.__exit__(None, None, None)
    return run


def _serve(session, run: FileRun, statements: list, text: str, file: str,
           on_statement: Callable | None, stop: Callable[[], bool] | None,
           say: Callable[[str], None] | None) -> None:
    """Start a file's real-time statements (after its others) and run them until a signal,
    ``stop()`` or a failure (wavesql/services.py); each holds its job's lock meanwhile."""
    from wavesql import services, storage
    from wavesql.dialect import Statement
    from wavesql.sqltext import status_frame

    queries: list = []
    with contextlib.ExitStack() as held, services.StopRequest(say) as requested:
        def stopping() -> bool:
            return requested.is_set() or (stop is not None and stop())

        try:
            for rt in statements:
                if stopping():
                    break
                started = time.monotonic()
                try:
                    sink = services.sink_of(session.catalog, rt.prefix, text)
                    job = job_id(file, rt.text)
                    root = _kafka_root(session, sink)
                    held.enter_context(_job_guard(
                        session, root, job, f"STREAM REAL-TIME INTO {sink.name} (job {job})"))
                    home = storage.join(root, "_wavesql", job)
                    _describe_job(home, job, file, statement=rt.text, sink=sink.name)
                    queries.append(services.start(session, rt, text, sink,
                                                  storage.join(home, "checkpoint")))
                except WaveSQLError as err:
                    raise err.with_query(err.query or text, source=file) from None
                report = InsertReport(sink.name, job, "real-time", output=str(sink.path),
                                      seconds=time.monotonic() - started)
                status = status_frame(session.spark, report.summary())
                run.statements += 1
                run.results.append(ServiceResult(Statement(None, rt.text, rt.start, rt.end),
                                                 status, report))
                if on_statement is not None:
                    on_statement(run.results[-1], report.seconds)
            services.serve(queries, stopping)
        finally:
            for cq in queries:  # (stopped already, unless starting one of them failed)
                with contextlib.suppress(Exception):
                    cq.stop()
            counted = services.figures(queries)
            if counted is not None:  # nothing is late in real-time mode (streaming/realtime.py)
                run.rows_in = (run.rows_in or 0) + counted[0]
                run.rows_out = (run.rows_out or 0) + counted[1]
                run.rows_late = run.rows_late or 0
