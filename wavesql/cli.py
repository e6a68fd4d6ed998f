"""The ``wavesql`` command.

::

    wavesql                         interactive shell (statements end with `;`): the REPL
                                    in a terminal (wavesql.repl), a line shell otherwise
    wavesql -c "SELECT ..."         run statements given on the command line
    wavesql run FILE.wsql ...       run statement files in order; INSERT INTO a sink processes
                                    only the input that is new since the last run (exactly once);
                                    a file with STREAM REAL-TIME INTO runs as a service until
                                    SIGINT/SIGTERM (wavesql/services.py)
    wavesql check FILE.wsql ...     parse and bind without running; every error as file:line:col
    wavesql schedule DIR            run DIR's .wsql files on the cron expressions in their
                                    headers (`-- schedule: */5 * * * *`); history in the catalog
    wavesql runs [--file F]         the run history (wavesql run and wavesql schedule)
    wavesql status OUTPUT [--json]  live figures of a continuous query (its _progress/ records)
    wavesql demo [DIR]              generate demo data and run the demo queries

Common options: ``--master URL`` (any Spark master; default ``local[*]``), ``--catalog PATH``
(the SQLite catalog; default ``./wavesql_catalog.db``; ``spark`` or ``spark:<database>`` for
the shared catalog in Spark's Hive metastore), ``--conf KEY=VALUE`` (a Spark
setting, repeatable, as spark-submit takes it: ``--conf spark.hadoop.fs.s3a.endpoint=...``),
``--max-rows N``.
Exit status: 0 on success (for a file run as a service: stopped by SIGINT/SIGTERM), 1 when a
statement failed, 2 for usage errors, 75 (EX_TEMPFAIL) when `wavesql run` found the file
already running (another run holds its lock).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from wavesql import render
from wavesql.errors import WaveSQLError

out = render.console()
err = render.console(stderr=True)


def _show_status(args) -> int:
    """``wavesql status OUTPUT``: streaming/metrics.py over ``OUTPUT/_progress/*.json``."""
    import json

    from wavesql import storage
    from wavesql.streaming.metrics import format_status, read_reports, summarize

    # an output in an object store: reached with the --conf spark.hadoop.* settings given
    prefix = "spark.hadoop."
    storage.use(storage.Settings.of({k[len(prefix):]: v for k, _, v in
                                     (c.partition("=") for c in args.conf)
                                     if k.startswith(prefix)}))
    reports = read_reports(args.output)
    if not reports:
        err.print(f"{args.output}: no _progress/ records (not the output directory of a "
                  "continuous query, or no batch finished yet)", markup=False)
        return 1
    figures = summarize(reports)
    out.print(json.dumps(figures) if args.json else format_status(figures), markup=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The command line: options, and one sub-command per verb (module docstring)."""
    parser = argparse.ArgumentParser(prog="wavesql", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument("--catalog", help="catalog file (default ./wavesql_catalog.db), or "
                        "`spark` / `spark:<database>`: Spark's Hive metastore, shared by hosts")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting (repeatable), e.g. "
                             "spark.hadoop.fs.s3a.endpoint=http://minio:9000")
    parser.add_argument("--max-rows", type=int, default=50, help="rows shown per result")
    parser.add_argument("-c", "--command", help="statements to run, then exit")
    sub = parser.add_subparsers(dest="verb")
    run_p = sub.add_parser("run", help="run statement files")
    run_p.add_argument("files", nargs="+")
    run_p.add_argument("--max-files-per-trigger", type=int, metavar="N",
                       help="INSERT INTO jobs read at most N new files per micro-batch")
    run_p.add_argument("--allow-parent-paths", action="store_true",
                       help="let the files' relative paths lead out of their folder and of "
                            "the current one (`..`)")
    check_p = sub.add_parser("check", help="compile statement files without running them")
    check_p.add_argument("files", nargs="+")
    check_p.add_argument("--allow-parent-paths", action="store_true",
                       help="let the files' relative paths lead out of their folder and of "
                            "the current one (`..`)")
    sched_p = sub.add_parser("schedule", help="run a folder's .wsql files on their cron "
                             "expressions (`-- schedule: <cron>` in the file header)")
    sched_p.add_argument("directory")
    sched_p.add_argument("--once", action="store_true",
                         help="run every scheduled file once now, then exit")
    sched_p.add_argument("--for", dest="duration", type=float, metavar="SECONDS",
                         help="stop after SECONDS (the run in progress is finished)")
    sched_p.add_argument("--max-files-per-trigger", type=int, metavar="N",
                         help="INSERT INTO jobs read at most N new files per micro-batch")
    sched_p.add_argument("--allow-parent-paths", action="store_true",
                       help="let the files' relative paths lead out of their folder and of "
                            "the current one (`..`)")
    runs_p = sub.add_parser("runs", help="show the run history kept in the catalog")
    runs_p.add_argument("--file", help="only the runs of this query file")
    runs_p.add_argument("--limit", type=int, default=20, help="newest N runs (default 20)")
    catalog_p = sub.add_parser("catalog", help="maintain the catalog")
    catalog_sub = catalog_p.add_subparsers(dest="catalog_verb", required=True)
    prune_p = catalog_sub.add_parser(
        "prune", help="forget old versions of definitions and old run records")
    prune_p.add_argument("--keep", type=int, metavar="N", default=10,
                         help="versions kept of each name, the newest (default 10)")
    prune_p.add_argument("--keep-runs", type=int, metavar="M", default=100,
                         help="run records kept of each query file, the newest; runs still "
                              "running are kept (default 100)")
    status_p = sub.add_parser("status", help="live figures of a continuous query from its "
                              "output directory's _progress/ records")
    status_p.add_argument("output")
    status_p.add_argument("--json", action="store_true", help="the figures as JSON")
    demo_p = sub.add_parser("demo", help="generate demo data and run the demo queries")
    demo_p.add_argument("directory", nargs="?", default="wavesql_demo")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    try:
        if args.verb is None and args.command is None and _interactive():
            from wavesql.repl import main as repl_main

            return repl_main(lambda: _connect(args), max_rows=args.max_rows)
        if args.verb == "demo":
            from wavesql.demo import run_demo

            return run_demo(args.directory, master=args.master, max_rows=args.max_rows)
        if args.verb == "runs":  # the catalog alone: no Spark needed
            return _show_runs(args)
        if args.verb == "catalog":  # the catalog alone: no Spark needed for a file
            return _prune_catalog(args)
        if args.verb == "status":  # the output's _progress/ records alone: no Spark needed
            return _show_status(args)
        ws = _connect(args)
        ws.allow_parent_paths = bool(getattr(args, "allow_parent_paths", False))
        if args.verb in ("run", "schedule") and args.max_files_per_trigger is not None:
            ws.job_options["max_files_per_trigger"] = args.max_files_per_trigger
        if args.verb == "run":
            return _run_files(ws, args.files, args.max_rows)
        if args.verb == "schedule":
            from wavesql.schedule import Scheduler

            return Scheduler(ws, args.directory, print_line=lambda m: out.print(m, markup=False),
                             print_error=lambda m: err.print(m, markup=False)).serve(
                                 once=args.once, duration=args.duration)
        if args.verb == "check":
            return _check_files(ws, args.files)
        if args.command is not None:
            return _run_text(ws, args.command, args.max_rows)
        if not sys.stdin.isatty():
            return _run_text(ws, sys.stdin.read(), args.max_rows)
        return _shell(ws, args.max_rows)
    except WaveSQLError as e:
        err.print(str(e), markup=False)
        return 1
    except Exception as e:  # a Spark failure outside a statement (Spark stopped, JVM lost)
        from wavesql.spark_errors import is_runtime_error, translate_runtime_error

        if not is_runtime_error(e):
            raise
        err.print(str(translate_runtime_error(e)), markup=False)
        return 1


def _interactive() -> bool:
    """The REPL needs a terminal on both ends; `wavesql > log` keeps the line shell."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def _connect(args):
    import os

    import wavesql

    # The command prints every error itself, positioned and translated; Spark's own ERROR
    # log lines (task failures with JVM stack traces) would bury it. WAVESQL_SPARK_LOG_LEVEL
    # brings them back for debugging.
    os.environ.setdefault("WAVESQL_SPARK_LOG_LEVEL", "OFF")
    # Likewise Py4J's traceback on the root logger when the JVM goes away mid-call: the
    # command reports that as SPARK_UNAVAILABLE.
    import logging

    logging.getLogger().addFilter(_not_from_py4j)

    config = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            from wavesql.errors import WaveSQLError

            raise WaveSQLError("INVALID_OPTION", f"--conf {item!r} is not KEY=VALUE",
                               hint="e.g. --conf spark.hadoop.fs.s3a.path.style.access=true")
        config[key.strip()] = value
    return wavesql.connect(master=args.master, catalog=args.catalog, config=config or None)


def _not_from_py4j(record) -> bool:
    return "py4j" not in record.pathname.replace("\\", "/").split("/")


def _run_text(ws, text: str, max_rows: int, source: str | None = None) -> int:
    from wavesql.spark_errors import runtime_errors

    try:
        with runtime_errors():  # DDL and Spark commands run here, not when rows are fetched
            results = ws.execute(text, source=source)
    except WaveSQLError as e:
        err.print(str(e), markup=False)
        return 1
    try:
        for result in results:
            show_result(result, max_rows)
    except WaveSQLError as e:
        err.print(str(e), markup=False)
        return 1
    return 0


def _run_files(ws, files: list[str], max_rows: int) -> int:
    """Run each file under its lock (``wavesql.jobs.run_file``): a summary line per statement
    (``file:line: what · figures · seconds``) and per file; stop at the first failure."""
    from wavesql.jobs import run_file

    for name in files:
        text = Path(name).read_text() if Path(name).is_file() else ""

        def report(result, seconds, name=name, text=text):
            line = text.count("\n", 0, result.statement.start) + 1
            if result.report is not None:
                out.print(f"{name}:{line}: {result.report.summary()}", markup=False)
                return
            shown = time.perf_counter()
            show_result(result, max_rows)  # a query runs here, when its rows are fetched
            seconds += time.perf_counter() - shown
            out.print(f"{name}:{line}: {result.kind} · {seconds:.2f} s", markup=False)

        try:
            run = run_file(ws, name, trigger="run", on_statement=report,
                           say=lambda m: err.print(m, markup=False))
        except KeyboardInterrupt:  # recorded as interrupted; a re-run redoes it exactly once
            err.print(f"{name}: interrupted", markup=False)
            return 130
        if run.status == "skipped":
            err.print(str(run.error), markup=False)
            return 75
        if run.status != "ok":
            error = run.error
            err.print(str(error) if isinstance(error, WaveSQLError) else repr(error),
                      markup=False)
            return 1
        figures = ""
        if run.rows_in is not None:
            figures = f" · in {run.rows_in} · late {run.rows_late} · out {run.rows_out}"
        out.print(f"{name}: {run.statements} statement(s) ok{figures} · {run.seconds:.2f} s",
                  markup=False)
    return 0


def _check_files(ws, files: list[str]) -> int:
    failures = 0
    for name in files:
        path = Path(name)
        if not path.is_file():
            err.print(f"{name}: no such file", markup=False)
            failures += 1
            continue
        errors = check_text(ws, path.read_text(), str(path.resolve().parent), str(path))
        for e in errors:
            err.print(str(e.with_query(path.read_text(), source=name)), markup=False)
        if errors:
            failures += 1
            err.print(f"{name}: {len(errors)} error{'s' if len(errors) != 1 else ''}",
                      markup=False)
        else:
            out.print(f"{name}: ok", markup=False)
    return 1 if failures else 0


def check_text(ws, text: str, base_dir: str = ".", source: str | None = None
               ) -> list[WaveSQLError]:
    """Every error of ``text``, statement by statement, without running anything.

    Each statement is parsed on its own (so a syntax error does not hide the statements
    after it) and bound against a scratch copy of the catalog that the text's own DDL
    updates (a file that creates a stream and then queries it checks cleanly). A statement
    whose CREATE failed leaves its object undefined, so later uses report it too. A
    ``STREAM REAL-TIME INTO <sink> <query>`` has its sink and its query checked (whether
    real-time mode can run the plan is for ``EXPLAIN STREAM``, or the run, to say).
    """
    from wavesql import services
    from wavesql.catalog import Catalog
    from wavesql.dialect import parse_statements, split_statements
    from wavesql.dialect.stream_prefix import stream_prefix
    from wavesql.planner.insert import blank_outside

    try:
        chunks = split_statements(text)
    except WaveSQLError as e:
        return [e]
    errors: list[WaveSQLError] = []
    scratch = Catalog(":memory:")
    try:
        for defn in ws.catalog.list():
            scratch.create(defn)
        # STREAM statements after the others, as `wavesql run` starts them (services.py)
        chunks.sort(key=lambda c: stream_prefix(text, c.start, c.end) is not None)
        for chunk in chunks:
            try:
                keep = (chunk.start, chunk.end)
                prefix = stream_prefix(text, chunk.start, chunk.end)
                if prefix is not None:  # STREAM REAL-TIME INTO <sink>: its sink, its query
                    services.refuse_repl_only(prefix, text)
                    services.sink_of(scratch, prefix, text)
                    keep = (prefix.query_start, chunk.end)
                for stmt in parse_statements(blank_outside(text, [keep]), lenient=True):
                    ws.bind_into(stmt, text, scratch, base_dir, source)
            except WaveSQLError as e:
                errors.append(e)
    finally:
        scratch.close()
    return errors


def _show_runs(args) -> int:
    """``wavesql runs``: the run history from the catalog, newest first."""
    import os

    from wavesql.catalog import Catalog, shared_database

    file = os.path.realpath(args.file) if args.file else None
    if shared_database(args.catalog or os.environ.get("WAVESQL_CATALOG")) is not None:
        with _connect(args) as ws:  # the shared catalog is in Spark's metastore
            rows = ws.catalog.runs(file, args.limit)
    else:
        with Catalog(args.catalog) as catalog:
            rows = catalog.runs(file, args.limit)
    table = Table(show_lines=False, header_style="bold")
    for c in ("id", "file", "trigger", "started", "seconds", "status", "statements",
              "rows in", "rows out", "late", "error"):
        table.add_column(c, overflow="fold")
    for r in rows:
        status = r["status"]
        if status == "running" and not _alive(r):
            status = "died"  # its process is gone: killed before it could record the end
        file = os.path.relpath(r["file"])
        table.add_row(str(r["id"]), r["file"] if file.startswith("..") else file, r["trigger"], r["started_at"][:19].replace(
            "T", " "), _seconds(r), status, str(r["statements"]),
            *("" if r[k] is None else str(r[k]) for k in ("rows_in", "rows_out", "rows_late")),
            r["error"] or "")
    # Piped or captured (cron mail, grep), rows stay one line each instead of folding to 80
    # columns.
    console = out if out.is_terminal else Console(highlight=False, width=400)
    console.print(table)
    console.print(f"({len(rows)} run{'s' if len(rows) != 1 else ''})", markup=False)
    return 0


def _prune_catalog(args) -> int:
    """``wavesql catalog prune``: ``Catalog.prune`` on the SQLite file or the shared
    catalog (the same rules: catalog/store.py)."""
    import os

    from wavesql.catalog import Catalog, shared_database

    keep = {"keep_versions": args.keep, "keep_runs": args.keep_runs}
    if shared_database(args.catalog or os.environ.get("WAVESQL_CATALOG")) is not None:
        with _connect(args) as ws:
            removed = ws.catalog.prune(**keep)
    else:
        with Catalog(args.catalog) as catalog:
            removed = catalog.prune(**keep)
    out.print(f"pruned {removed['versions']} old version(s) (kept the newest {args.keep} of "
              f"each name) and {removed['runs']} run record(s) (kept the newest "
              f"{args.keep_runs} of each file)", markup=False)
    return 0


def _alive(run: dict) -> bool:
    import os
    import socket

    if run.get("host") != socket.gethostname() or not run.get("pid"):
        return True  # another machine's run: cannot tell, trust the record
    try:
        os.kill(int(run["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _seconds(run: dict) -> str:
    from datetime import datetime

    if not run["ended_at"]:
        return ""
    took = datetime.fromisoformat(run["ended_at"]) - datetime.fromisoformat(run["started_at"])
    return f"{took.total_seconds():.2f}"


def show_result(result, max_rows: int = 50) -> None:
    """Print one statement's result on stdout: a table of rows, or its status line
    (:func:`wavesql.render.show` in the CLI's style).

    Raises WaveSQLError for a failure while the rows are fetched (``SPARK_ERROR`` with
    Spark's message, ``SPARK_UNAVAILABLE``, or the code a signal function raised)."""
    render.show(result, out, max_rows, render.CLI)


def _shell(ws, max_rows: int) -> int:
    """A minimal line shell (stdin a terminal, stdout not): statements end with `;` (outside
    strings and comments, as in the REPL), `\\q` quits."""
    from wavesql.dialect import is_complete

    out.print("WaveSQL shell. End statements with `;`. \\q quits.", markup=False)
    buffer: list[str] = []
    while True:
        try:
            line = input("wavesql> " if not buffer else "     ... ")
        except (EOFError, KeyboardInterrupt):
            out.print()
            return 0
        if not buffer and line.strip() in ("\\q", "quit", "exit"):
            return 0
        buffer.append(line)
        text = "\n".join(buffer)
        if is_complete(text):
            buffer = []
            _run_text(ws, text, max_rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
