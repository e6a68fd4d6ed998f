"""A real Spark standalone cluster on loopback, started from the installed PySpark: one
master and N workers (separate JVMs), for the multi-node tests.

Also a job runner: ``python -m tests.cluster MASTER CATALOG FILE...`` runs WaveSQL files with
``wavesql.connect(master=MASTER)`` and prints each last statement's rows as JSON, so a test
can compare a cluster run with a local one (``$WAVESQL_TEST_HADOOP``: JSON of Hadoop
settings, given to Spark as ``spark.hadoop.*``, e.g. to reach an S3 server).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


class StandaloneCluster:
    """``with StandaloneCluster(workers=2) as c: c.master_url``."""

    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g", logs: Path = None):
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.logs = Path(logs or "/tmp")
        self.port, self.ui = _free_port(), _free_port()
        self.master_url = f"spark://127.0.0.1:{self.port}"
        self.master = None
        self.workers: list[subprocess.Popen] = []

    def _spawn(self, args, name):
        env = dict(os.environ, SPARK_HOME=spark_home(), PYSPARK_PYTHON=sys.executable,
                   SPARK_LOCAL_IP="127.0.0.1")
        log = open(self.logs / f"{name}.log", "w")
        return subprocess.Popen([os.path.join(spark_home(), "bin", "spark-class"), *args],
                                env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)

    def start(self, timeout: float = 180) -> "StandaloneCluster":
        self.master = self._spawn(["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", str(self.port), "--webui-port",
                                   str(self.ui)], "master")
        for i in range(self.n_workers):
            self.workers.append(self._spawn(
                ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                 "--cores", str(self.cores), "--memory", self.memory,
                 "--webui-port", str(_free_port()), self.master_url], f"worker{i}"))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.alive_workers() == self.n_workers:
                return self
            time.sleep(1)
        self.stop()
        raise RuntimeError(f"cluster did not come up; logs in {self.logs}")

    def state(self) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                return json.load(r)
        except OSError:
            return {}

    def alive_workers(self) -> int:
        return int(self.state().get("aliveworkers", 0))

    def kill_worker(self, i: int) -> None:
        """SIGKILL a worker JVM and the executors it started (its process group)."""
        import signal

        os.killpg(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait()

    def stop(self) -> None:
        import signal

        for proc in self.workers + ([self.master] if self.master else []):
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in self.workers + ([self.master] if self.master else []):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def canonical(rows) -> list:
    """Rows as sorted JSON-able lists; segments as (start, width, sha1 of the samples)."""
    import datetime as dt

    import numpy as np

    def value(v):
        if isinstance(v, dt.datetime):
            return v.isoformat()
        if isinstance(v, float):
            return round(v, 9)
        if hasattr(v, "asDict"):
            d = v.asDict()
            if set(d) == {"start", "rate", "samples"}:
                samples = np.asarray(d["samples"], dtype=np.float32)
                return ["seg", d["start"], len(samples),
                        hashlib.sha1(samples.tobytes()).hexdigest()]
            return {k: value(x) for k, x in d.items()}
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        return v

    return sorted((json.dumps([value(v) for v in row], sort_keys=True) for row in rows))


def main(argv: list[str]) -> None:
    import wavesql

    master, catalog, files = argv[0], argv[1], argv[2:]
    config = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC",
              "spark.executor.memory": "1g", "spark.ui.enabled": "false"}
    # storage settings (an S3 endpoint and keys), as a user gives them: spark.hadoop.*
    hadoop = json.loads(os.environ.get("WAVESQL_TEST_HADOOP", "{}"))
    config.update({f"spark.hadoop.{k}": v for k, v in hadoop.items()})
    ws = wavesql.connect(master=master, catalog=catalog, config=config)
    out = {}
    for path in files:
        out[path] = canonical(ws.execute_file(path)[-1].dataframe.collect())
    print("RESULTS " + json.dumps(out))
    ws.spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
