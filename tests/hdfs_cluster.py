"""A real HDFS on loopback for the HDFS tests: Hadoop's MiniDFSCluster (one namenode, one
datanode, WebHDFS on) from Hadoop's own jars on Maven Central (``make hdfs-cluster``:
connectors/hdfs-cluster/pom.xml), run by Hadoop's ready main for it,
``org.apache.hadoop.test.MiniDFSClusterManager``, in a JVM of its own.

Spark reaches it with the HDFS client PySpark ships (hdfs://), WaveSQL's own I/O through
its storage layer (WebHDFS: no libhdfs here), both configured by the Hadoop settings of
:meth:`HdfsCluster.hadoop`. The tests' oracles put and read files with plain WebHDFS REST
calls (urllib), independently of both. ``python -m tests.hdfs_cluster`` runs one in the
foreground.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.processes import ServerProcess

#: the user both clients act as (Hadoop's simple authentication): the one that started
#: the cluster, so its superuser
USER = os.environ.get("HADOOP_USER_NAME") or os.environ.get("USER") or "root"


def cluster_jars() -> str:
    """The cluster's class path: ``$WAVESQL_HDFS_CLUSTER`` or where ``make hdfs-cluster``
    put the jars (the minicluster's own unpacked into ``classes``: it starts faster)."""
    folder = os.environ.get("WAVESQL_HDFS_CLUSTER") or os.path.join(
        sys.prefix, "share", "wavesql", "hdfs-cluster")
    if not os.path.isdir(os.path.join(folder, "classes")):
        raise RuntimeError(f"no HDFS minicluster in {folder}: run `make hdfs-cluster`")
    return os.pathsep.join([os.path.join(folder, "classes"), os.path.join(folder, "*")])


class HdfsCluster(ServerProcess):
    """``with HdfsCluster(folder) as hdfs: hdfs.uri("data/x.parquet")`` -- its blocks,
    configuration and log in ``folder``."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.process: subprocess.Popen | None = None
        self.rpc_port = self.http_address = None

    def start(self, timeout: float = 120) -> "HdfsCluster":
        self.folder.mkdir(parents=True, exist_ok=True)
        details, config = self.folder / "details.json", self.folder / "hdfs-site.xml"
        log = open(self.folder / "cluster.log", "w")
        self.process = subprocess.Popen(
            ["java", "-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             # MiniDFSCluster keeps its blocks and name folder under test.build.data
             f"-Dtest.build.data={self.folder / 'data'}", "-cp", cluster_jars(),
             "org.apache.hadoop.test.MiniDFSClusterManager", "-format",
             "-writeDetails", str(details), "-writeConfig", str(config),
             "-D", "dfs.webhdfs.enabled=true", "-D", "dfs.replication=1",
             "-D", "dfs.namenode.http-address=127.0.0.1:0",
             "-D", "dfs.datanode.http.address=127.0.0.1:0",
             "-D", "dfs.datanode.address=127.0.0.1:0",
             "-D", "dfs.datanode.ipc.address=127.0.0.1:0"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the HDFS cluster exited; see {self.folder}/cluster.log")
            if details.exists() and details.stat().st_size and config.exists():
                self.rpc_port = json.loads(details.read_text())["namenode_port"]
                self.http_address = re.search(
                    r"<name>dfs.namenode.http-address</name><value>([^<]+)</value>",
                    config.read_text()).group(1)
                if self._answers():
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the HDFS cluster did not start; see {self.folder}")

    def _answers(self) -> bool:
        try:
            self._rest("GET", "/", "GETFILESTATUS")
            return True
        except OSError:
            return False

    # -- what a user configures; the URIs -----------------------------------------------
    @property
    def authority(self) -> str:
        return f"localhost:{self.rpc_port}"

    def uri(self, path: str) -> str:
        return f"hdfs://{self.authority}/{path.lstrip('/')}"

    def hadoop(self) -> dict[str, str]:
        """The Hadoop settings (without ``spark.hadoop.``) that reach this cluster beyond
        the hdfs:// URI itself: the namenode's WebHDFS address, one replica (one
        datanode)."""
        return {"dfs.namenode.http-address": self.http_address, "dfs.replication": "1"}

    # -- the tests' side: plain WebHDFS REST calls ----------------------------------------
    def _rest(self, method: str, path: str, op: str, data: bytes | None = None, **params):
        query = urllib.parse.urlencode({"op": op, "user.name": USER, **params})
        url = f"http://{self.http_address}/webhdfs/v1/{path.lstrip('/')}?{query}"
        request = urllib.request.Request(url, data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.read()

    def put(self, path: str, body: bytes | Path) -> None:
        """Write a file (bytes, or a local file's bytes): CREATE at the namenode, which
        answers with the datanode to send the bytes to."""
        data = body.read_bytes() if isinstance(body, Path) else body
        try:  # urllib does not follow a PUT's redirect: ask, then send to where it says
            self._rest("PUT", path, "CREATE", overwrite="true")
            raise RuntimeError("the namenode did not redirect a CREATE")
        except urllib.error.HTTPError as e:
            if e.code != 307:
                raise
            datanode = e.headers["Location"]
        urllib.request.urlopen(urllib.request.Request(datanode, data=data, method="PUT"),
                               timeout=30).close()

    def get(self, path: str) -> bytes:
        return self._rest("GET", path, "OPEN")

    def files(self, path: str) -> list[str]:
        """Every file under ``path`` (recursive), as paths from the root, sorted."""
        try:
            listing = json.loads(self._rest("GET", path, "LISTSTATUS"))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return []
            raise
        out = []
        for status in listing["FileStatuses"]["FileStatus"]:
            child = f"{path.rstrip('/')}/{status['pathSuffix']}"
            out += [child] if status["type"] == "FILE" else self.files(child)
        return sorted(out)


@pytest.fixture(scope="session")
def hdfs(spark, tmp_path_factory):
    """A real HDFS on loopback, and the shared Spark configured to reach it (the Hadoop
    settings WaveSQL's own I/O reads too). Started by the first test that asks for it,
    stopped at the end of the session."""
    cluster = HdfsCluster(tmp_path_factory.mktemp("hdfs"))
    cluster.start()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in cluster.hadoop().items():
        conf.set(key, value)
    yield cluster
    for key in cluster.hadoop():
        conf.unset(key)
    cluster.stop()


if __name__ == "__main__":  # an HDFS in the foreground
    import tempfile

    with HdfsCluster(Path(tempfile.mkdtemp(prefix="wavesql-hdfs-"))) as running:
        print(f"HDFS at hdfs://{running.authority}/ (WebHDFS at {running.http_address}); "
              f"set {running.hadoop()}; Ctrl-C stops it", flush=True)
        try:
            running.process.wait()
        except KeyboardInterrupt:
            pass
