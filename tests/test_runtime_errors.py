"""Errors Spark raises while a query *runs* reach the user as WaveSQL errors, everywhere.

A Java failure PySpark does not convert (a failed job, a failed write) arrives as a
``Py4JJavaError`` with a 100-line Java stack; a lost JVM as a refused connection; a stopped
SparkContext as an ``AttributeError`` inside PySpark. ``wavesql.spark_errors.runtime_errors()`` /
``is_runtime_error`` + ``translate_runtime_error`` turn each into ``error[CODE]`` with one
meaningful line: the CLI (``-c``, ``run``), the REPL and the notebook all go through them.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

from wavesql.errors import WaveSQLError
from wavesql.spark_errors import _java_message, is_runtime_error, translate_runtime_error

JAVA_STACK = "\tat org.apache"


def _wavesql(*args, cwd):
    return subprocess.run([sys.executable, "-m", "wavesql", "--master", "local[1]", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def _readings(folder):
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame({"id": [1, 2], "v": [1.0, 2.0],
                  "ts": pd.to_datetime(["2024-01-01", "2024-01-02"]).astype("datetime64[us]")}
                 ).to_parquet(folder / "a.parquet")


def _corrupt(folder):
    """A file that is not Parquet in the stream's folder (a botched copy)."""
    (folder / "b.parquet").write_bytes(b"PAR1" + b"garbage" * 20)


def _no_java_stack(text: str) -> None:
    assert JAVA_STACK not in text and "Traceback" not in text and "Py4J" not in text, text
    assert "An error occurred while calling" not in text, text


# -- pure: the first meaningful line of a Java error ---------------------------------------
def test_java_message_is_the_failed_tasks_exception_and_its_root_cause():
    text = ("An error occurred while calling o80.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in "
            "stage 1.0 failed 1 times, most recent failure: Lost task 0.0 in stage 1.0 (TID 1) "
            "(10.0.0.1 executor driver): org.apache.spark.SparkException: "
            "[FAILED_READ_FILE.NO_HINT] Encountered error while reading file "
            "file:///d/b.parquet.  SQLSTATE: KD001\n"
            "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.cannotReadFile(x.scala:1)\n"
            "\tat org.apache.spark.rdd.RDD.iterator(RDD.scala:2)\n"
            "Caused by: java.lang.RuntimeException: file:/d/b.parquet is not a Parquet file\n"
            "\tat org.apache.parquet.hadoop.ParquetFileReader.readFooter(P.java:3)\n"
            "\t... 20 more\n")
    message, condition = _java_message(text)
    assert message == ("Encountered error while reading file file:///d/b.parquet: "
                       "file:/d/b.parquet is not a Parquet file")
    assert condition == "FAILED_READ_FILE.NO_HINT"


def test_unrelated_exceptions_are_not_runtime_errors():
    assert not is_runtime_error(ValueError("a bug"))
    assert not is_runtime_error(WaveSQLError("PARSE_ERROR", "x"))
    assert is_runtime_error(ConnectionRefusedError(111, "Connection refused"))
    lost = translate_runtime_error(ConnectionRefusedError(111, "Connection refused"))
    assert lost.code == "SPARK_UNAVAILABLE" and lost.hint


# -- the CLI as a user runs it --------------------------------------------------------------
@pytest.mark.spark
def test_cli_run_and_c_report_a_java_failure_as_one_error(tmp_path):
    _readings(tmp_path / "in")
    catalog = ["--catalog", str(tmp_path / "cat.db")]
    _corrupt(tmp_path / "in")
    # (one process: each CLI run starts a JVM, the costliest part of this test)
    (tmp_path / "q.wsql").write_text("CREATE STREAM r (id BIGINT, v DOUBLE, ts TIMESTAMP) "
                                     "FROM 'in/' FORMAT parquet;\n"
                                     "SELECT count(*) AS n FROM r;\n")
    out = _wavesql(*catalog, "run", "q.wsql", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "error[SPARK_ERROR]" in out.stderr and "b.parquet" in out.stderr, out.stderr
    assert "not a Parquet file" in out.stderr
    _no_java_stack(out.stderr + out.stdout)
    # a runtime failure of Spark SQL itself (ANSI overflow) through -c (the corrupt file
    # through -c's code path: test_cli_statements_in_process)
    out = _wavesql(*catalog, "-c", "SELECT 2147483647 + CAST(id AS INT) AS x FROM range(3)",
                   cwd=tmp_path)
    assert out.returncode == 1
    assert "error[SPARK_ERROR]: overflow" in out.stderr and "ARITHMETIC_OVERFLOW" in out.stderr
    _no_java_stack(out.stderr)


@pytest.mark.spark
def test_cli_statements_in_process(ws, tmp_path, capsys):
    from wavesql.cli import _run_text

    _readings(tmp_path / "in")
    ws.sql(f"CREATE STREAM r (id BIGINT, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path}/in/' "
           "FORMAT parquet")
    assert _run_text(ws, "SELECT assert_true(false) AS ok", 10) == 1
    err = capsys.readouterr().err
    assert "error[SPARK_ERROR]: 'false' is not true!" in err and "USER_RAISED_EXCEPTION" in err
    _corrupt(tmp_path / "in")
    assert _run_text(ws, "SELECT count(*) FROM r", 10) == 1
    err = capsys.readouterr().err
    assert "error[SPARK_ERROR]" in err and "b.parquet" in err
    _no_java_stack(err)
    # a Spark command that runs its job while the statement executes (not when rows are
    # fetched) goes through the same translation
    assert _run_text(ws, "CACHE TABLE r", 10) == 1
    err = capsys.readouterr().err
    assert "error[SPARK_ERROR]" in err and "b.parquet" in err
    _no_java_stack(err)


@pytest.mark.spark
def test_notebook_and_repl_translate_java_failures(ws, tmp_path):
    from rich.console import Console

    from wavesql.notebook import CellError, run
    from wavesql.repl import Repl

    _readings(tmp_path / "in")
    ws.sql(f"CREATE STREAM r (id BIGINT, v DOUBLE, ts TIMESTAMP) FROM '{tmp_path}/in/' "
           "FORMAT parquet")
    _corrupt(tmp_path / "in")
    with pytest.raises(CellError) as caught:
        run(ws, "SELECT * FROM r")
    assert caught.value.code == "SPARK_ERROR" and "b.parquet" in caught.value.message
    _no_java_stack(str(caught.value))

    screen = io.StringIO()
    repl = Repl(ws, console=Console(file=screen, width=400, force_terminal=False),
                history=tmp_path / "history")
    repl.handle("SELECT * FROM r;")
    shown = screen.getvalue()
    assert "error[SPARK_ERROR]" in shown and "b.parquet" in shown, shown
    assert "internal error" not in shown
    _no_java_stack(shown)


LOST = textwrap.dedent("""
    import argparse, os, signal, subprocess, sys, time
    from wavesql.cli import _connect, _run_text

    ws = _connect(argparse.Namespace(master="local[1]", catalog=sys.argv[1], conf=[]))  # as the CLI
    assert _run_text(ws, "SELECT 1 AS one", 5) == 0
    if sys.argv[2] == "kill":       # the JVM dies (OOM killer, crash)
        jvm = subprocess.run(["pgrep", "-P", str(os.getpid()), "java"], capture_output=True,
                             text=True).stdout.split()
        os.kill(int(jvm[0]), signal.SIGKILL)
        for _ in range(300):  # until it is gone (a zombie: nobody reaps it here)
            try:
                with open(f"/proc/{jvm[0]}/stat") as f:
                    if f.read().split(")")[-1].split()[0] in ("Z", "X"):
                        break
            except FileNotFoundError:
                break
            time.sleep(0.1)
    else:                            # somebody stopped the SparkContext
        ws.spark.stop()
    print("status", _run_text(ws, "SELECT 2 AS two", 5), flush=True)
    os._exit(0)
""")


@pytest.mark.spark
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_lost_spark_is_spark_unavailable(tmp_path, how):
    script = tmp_path / "lost.py"
    script.write_text(LOST)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "cat.db"), how],
                         capture_output=True, text=True, timeout=300)
    assert "status 1" in out.stdout, out.stdout + out.stderr
    assert "error[SPARK_UNAVAILABLE]" in out.stderr, out.stderr
    _no_java_stack(out.stderr)
