"""The `wavesql` command as a user runs it: a real subprocess, real files, exit codes."""

from __future__ import annotations

from tests.data import COUNTING_WAV
import os
import subprocess
import sys
import textwrap

import pytest

WAV = COUNTING_WAV


def _wavesql(*args, cwd, env=None, stdin=None):
    from tests.processes import quick_jvm_env

    full_env = quick_jvm_env(dict(os.environ))  # (its Spark's start is most of a run)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "wavesql", "--master", "local[1]", *args],
                          cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True,
                          timeout=300)


def test_missing_java_is_one_clear_line(tmp_path):
    env = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": os.path.dirname(sys.executable)}
    out = _wavesql("-c", "SELECT 1", cwd=tmp_path, env=env)
    assert out.returncode == 1
    assert "error[JAVA_MISSING]" in out.stderr and "Traceback" not in out.stderr
    assert "openjdk-17" in out.stderr


@pytest.mark.spark
def test_run_and_check_files(tmp_path):
    (tmp_path / "data.csv").write_text("k,v\na,1\nb,2\na,3\n")
    good = tmp_path / "good.wsql"
    good.write_text(textwrap.dedent("""
        CREATE STREAM kv (k STRING, v INT) FROM 'data.csv' FORMAT csv;
        SELECT k, sum(v) AS total FROM kv GROUP BY k ORDER BY k;
    """))
    bad = tmp_path / "bad.wsql"
    bad.write_text("SELECT k,\n       sum(vv)\nFROM kv GROUP BY k;\n")
    catalog = ["--catalog", str(tmp_path / "cat.db")]
    out = _wavesql(*catalog, "run", str(good), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "created stream kv (version 1)" in out.stdout
    assert "│ a │ 4     │" in out.stdout and "2 rows" in out.stdout
    # check: compiles without running; errors as file:line:column, exit status 1
    out = _wavesql(*catalog, "check", str(good).replace("good", "bad"), cwd=tmp_path)
    assert out.returncode == 1
    assert f"{bad}:2:12" in out.stderr and "unknown column `vv`" in out.stderr
    # statements on stdin, as in `echo ... | wavesql`
    out = _wavesql(*catalog, cwd=tmp_path, stdin="SHOW STREAMS;\n")
    assert out.returncode == 0 and "kv" in out.stdout and "csv" in out.stdout
