"""Multi-node: a Spark standalone cluster (a master and two workers, separate JVMs started
by the test from the installed PySpark) runs the example applications unchanged, with the
results of local mode; a worker killed mid-query is survived."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cluster import StandaloneCluster, canonical
from tests.data import COUNTING_WAV
from wavesql.datasets import array_recording

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
APPS = ["statfilter.wsql", "silencefilter_sync.wsql", "detectaudio.wsql"]


def _workspace(tmp_path: Path) -> Path:
    (tmp_path / "data").mkdir()
    shutil.copy(COUNTING_WAV, tmp_path / "data")
    array_recording(tmp_path / "data" / "array", seconds=6.0, events=4)
    for app in APPS:
        shutil.copy(EXAMPLES / app, tmp_path)
    return tmp_path


def _run_on(master: str, tmp_path: Path, catalog: str, files,
            hadoop: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.cluster", master, str(tmp_path / catalog),
         *[str(tmp_path / f) for f in files]],
        cwd=Path(__file__).resolve().parent.parent, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, WAVESQL_TEST_HADOOP=json.dumps(hadoop or {})))


def _results(proc: subprocess.Popen, timeout: float = 900) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    line = next(x for x in out.splitlines() if x.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def _local(ws, tmp_path, files) -> dict:
    return {str(tmp_path / f): canonical(ws.execute_file(tmp_path / f)[-1].dataframe.collect())
            for f in files}


@pytest.mark.slow
@pytest.mark.parametrize("where", ["local", "s3"])
def test_examples_on_a_standalone_cluster_match_local_mode(request, ws, tmp_path, where):
    """The cluster's results equal local mode's on local data; with ``where`` "s3", the
    cluster reads the data only from the S3 bucket (the local copy is deleted): its
    executors reach the store with the settings given to Spark (spark.hadoop.*)."""
    work = _workspace(tmp_path)
    local = _local(ws, work, APPS)
    assert all(local.values())
    hadoop = None
    if where == "s3":
        from tests.object_store import move_to_bucket

        s3 = request.getfixturevalue("s3")
        move_to_bucket(s3, work / "data", [work / app for app in APPS], f"{tmp_path.name}/c")
        hadoop = s3.hadoop()
    with StandaloneCluster(workers=2, logs=tmp_path) as cluster:
        remote = _results(_run_on(cluster.master_url, work, "cluster.db", APPS, hadoop))
        assert cluster.alive_workers() == 2
    assert remote == local


@pytest.mark.slow
def test_a_worker_killed_mid_query_is_survived(ws, tmp_path):
    work = _workspace(tmp_path)
    local = _local(ws, work, ["detectaudio.wsql"])
    with StandaloneCluster(workers=2, logs=tmp_path) as cluster:
        proc = _run_on(cluster.master_url, work, "cluster.db", ["detectaudio.wsql"])

        def kill_when_running():
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and proc.poll() is None:
                apps = cluster.state().get("activeapps") or []
                if apps and apps[0].get("cores", 0) >= 2:  # executors on both workers
                    time.sleep(3)  # let tasks start on them
                    cluster.kill_worker(0)
                    return
                time.sleep(0.5)

        killer = threading.Thread(target=kill_when_running)
        killer.start()
        remote = _results(proc)
        killer.join()
        assert cluster.workers[0].poll() is not None  # the worker really died
    assert remote == local
