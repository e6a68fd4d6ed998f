"""The ``wavesql`` command.

::

    wavesql                         interactive shell (statements end with `;`): the REPL
                                    in a terminal (wavesql.repl), a line shell otherwise
    wavesql -c "SELECT ..."         run statements given on the command line
    wavesql run FILE.wsql ...       run statement files in order
    wavesql check FILE.wsql ...     parse and bind without running; every error as file:line:col
    wavesql demo [DIR]              generate demo data and run the demo queries

Common options: ``--master URL`` (any Spark master; default ``local[*]``), ``--catalog PATH``
(the SQLite catalog; default ``./wavesql_catalog.db``), ``--max-rows N``.
Exit status: 0 on success, 1 when a statement failed, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from wavesql.errors import WaveSQLError

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wavesql", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    parser.add_argument("--catalog", help="catalog file (default ./wavesql_catalog.db)")
    parser.add_argument("--max-rows", type=int, default=50, help="rows shown per result")
    parser.add_argument("-c", "--command", help="statements to run, then exit")
    sub = parser.add_subparsers(dest="verb")
    run_p = sub.add_parser("run", help="run statement files")
    run_p.add_argument("files", nargs="+")
    check_p = sub.add_parser("check", help="compile statement files without running them")
    check_p.add_argument("files", nargs="+")
    demo_p = sub.add_parser("demo", help="generate demo data and run the demo queries")
    demo_p.add_argument("directory", nargs="?", default="wavesql_demo")
    args = parser.parse_args(argv)

    try:
        if args.verb is None and args.command is None and _interactive():
            from wavesql.repl import main as repl_main

            return repl_main(lambda: _connect(args), max_rows=args.max_rows)
        if args.verb == "demo":
            from wavesql.demo import run_demo

            return run_demo(args.directory, master=args.master, max_rows=args.max_rows)
        ws = _connect(args)
        if args.verb == "run":
            return _run_files(ws, args.files, args.max_rows)
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

    return wavesql.connect(master=args.master, catalog=args.catalog)


def _run_text(ws, text: str, max_rows: int, source: str | None = None) -> int:
    try:
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
    for name in files:
        started = time.perf_counter()
        try:
            results = ws.execute_file(name)
        except WaveSQLError as e:
            err.print(str(e), markup=False)
            return 1
        try:
            for result in results:
                show_result(result, max_rows)
        except WaveSQLError as e:
            err.print(str(e.with_query(e.query, source=name) if e.query else e), markup=False)
            return 1
        out.print(f"{name}: {len(results)} statement(s) ok in "
                  f"{time.perf_counter() - started:.2f} s", markup=False)
    return 0


def _check_files(ws, files: list[str]) -> int:
    failures = 0
    for name in files:
        path = Path(name)
        if not path.is_file():
            err.print(f"{name}: no such file", markup=False)
            failures += 1
            continue
        try:
            ws.bind(path.read_text(), base_dir=str(path.resolve().parent))
        except WaveSQLError as e:
            failures += 1
            err.print(str(e.with_query(e.query or path.read_text(), source=name)), markup=False)
        else:
            out.print(f"{name}: ok", markup=False)
    return 1 if failures else 0


def show_result(result, max_rows: int = 50) -> None:
    """Print one statement's result: a table of rows, or its status line."""
    from pyspark.errors import PySparkException

    from wavesql.spark import translate_runtime_error

    df = result.dataframe
    started = time.perf_counter()
    try:
        rows = df.limit(max_rows + 1).collect()
    except PySparkException as e:
        raise translate_runtime_error(e) from None
    elapsed = time.perf_counter() - started
    columns = df.columns
    if columns == ["status"] and len(rows) == 1:
        out.print(rows[0][0], markup=False)
        return
    if columns == ["plan"] and len(rows) == 1:
        out.print(rows[0][0], markup=False)
        return
    table = Table(show_lines=False, header_style="bold")
    for c in columns:
        table.add_column(c, overflow="fold")
    for row in rows[:max_rows]:
        table.add_row(*("NULL" if v is None else str(v) for v in row))
    out.print(table)
    more = len(rows) > max_rows
    count = f"first {max_rows} rows" if more else f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    out.print(f"({count}, {elapsed:.2f} s)", markup=False)


def _shell(ws, max_rows: int) -> int:
    """A minimal line shell (stdin a terminal, stdout not): statements end with `;`, `\\q`
    quits."""
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
        if text.rstrip().endswith(";"):
            buffer = []
            _run_text(ws, text, max_rows)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
