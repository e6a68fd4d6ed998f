"""Pruning the catalog's history (``Catalog.prune``, ``wavesql catalog prune``) on the SQLite
file. The oracle reads the file with plain ``sqlite3``, not through WaveSQL. (The shared
catalog's ``prune``, with the same rules, is tested in tests/test_shared_catalog.py.)"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from wavesql.catalog import Catalog, ViewDef
from wavesql.errors import WaveSQLError

ROOT = Path(__file__).resolve().parent.parent


def _stored(path: Path) -> tuple[set, list]:
    with sqlite3.connect(path) as conn:
        versions = set(conn.execute("SELECT key, version FROM history"))
        runs = conn.execute("SELECT file, status FROM runs ORDER BY id").fetchall()
    return versions, runs


def _fill(cat: Catalog) -> None:
    """v: versions 1-5, a DROP (6), created again (7); w: 1-2. Runs: a.wsql four (the
    oldest still running), b.wsql one."""
    for i in range(5):
        cat.create(ViewDef("v", f"SELECT {i} AS x"), replace=True)
    cat.drop("v")
    cat.create(ViewDef("v", "SELECT 7 AS x"))
    for i in range(2):
        cat.create(ViewDef("w", f"SELECT {i} AS x"), replace=True)
    cat.start_run("/q/a.wsql", "run")  # never finished: still `running`
    for _ in range(3):
        cat.finish_run(cat.start_run("/q/a.wsql", "schedule"), "ok")
    cat.finish_run(cat.start_run("/q/b.wsql", "run"), "failed", error="x")


def test_prune_keeps_the_newest(tmp_path):
    path = tmp_path / "cat.db"
    with Catalog(path) as cat:
        _fill(cat)
        assert cat.prune(keep_versions=2, keep_runs=1) == {"versions": 5, "runs": 2}
        versions, runs = _stored(path)
        assert versions == {("v", 6), ("v", 7), ("w", 1), ("w", 2)}
        assert runs == [("/q/a.wsql", "running"), ("/q/a.wsql", "ok"), ("/q/b.wsql", "failed")]
        # what is left reads as before; numbering goes on after the pruned versions
        assert [getattr(d, "sql", None) for d in cat.history("v")] == [None, "SELECT 7 AS x"]
        assert cat.create(ViewDef("v", "SELECT 8 AS x"), replace=True).version == 8
        assert cat.prune(keep_versions=1) == {"versions": 3, "runs": 0}  # v: 6, 7; w: 1
        cat.drop("w")
        assert cat.create(ViewDef("w", "SELECT 1 AS x")).version == 4
        assert cat.prune() == {"versions": 0, "runs": 0}  # nothing asked, nothing removed


@pytest.mark.parametrize("keep", [0, -1, True, 1.5])
def test_prune_refuses_to_keep_nothing(keep):
    with Catalog(":memory:") as cat:
        for kwargs in ({"keep_versions": keep}, {"keep_runs": keep}):
            with pytest.raises(WaveSQLError) as info:
                cat.prune(**kwargs)
            assert info.value.code == "INVALID_OPTION"


def test_cli_prune(tmp_path):
    path = tmp_path / "cat.db"
    with Catalog(path) as cat:
        _fill(cat)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-m", "wavesql.cli", "--catalog", str(path),
                           "catalog", "prune", "--keep", "1", "--keep-runs", "2"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pruned 7 old version(s)" in done.stdout and "1 run record(s)" in done.stdout
    versions, runs = _stored(path)
    assert versions == {("v", 7), ("w", 2)}
    assert runs == [("/q/a.wsql", "running"), ("/q/a.wsql", "ok"), ("/q/a.wsql", "ok"),
                    ("/q/b.wsql", "failed")]
    done = subprocess.run([sys.executable, "-m", "wavesql.cli", "--catalog", str(path),
                           "catalog", "prune", "--keep", "0"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 1 and "INVALID_OPTION" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
