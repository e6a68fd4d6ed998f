"""A standalone Hive metastore service on loopback for the shared-catalog tests.

The shared catalog (catalog/spark_catalog.py) must be tested from several processes at once;
a Spark session's own embedded Derby metastore admits one process only. So the tests start
Hive's metastore service (thrift), from the Hive 2.3 and Derby jars PySpark ships (nothing
to download), with an embedded Derby database behind it that only the service opens, and
point every Spark session at it with :meth:`HiveMetastore.spark_config`. The service and its
database live in the test's temporary folder and are stopped by the fixture. Clients use
127.0.0.1; Hive 2.3's metastore has no bind-address setting, so the (free, random) port is
open on the host's other interfaces too for the test's duration.

``python -m tests.hive_metastore [port]`` runs one in the foreground.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.kafka_broker import _LOG4J, _free_port  # (the same log file and port rules)

from tests.processes import ServerProcess


def pyspark_jars() -> str:
    import pyspark

    return os.path.join(os.path.dirname(pyspark.__file__), "jars")


class HiveMetastore(ServerProcess):
    """``with HiveMetastore(folder) as hms: hms.uri`` -- one metastore service."""

    def __init__(self, folder: Path, port: int | None = None):
        self.folder = Path(folder)
        self.port = port or _free_port()
        self.uri = f"thrift://127.0.0.1:{self.port}"
        self.warehouse = self.folder / "warehouse"
        self.audit_log = self.folder / "hive.log"
        self.process: subprocess.Popen | None = None

    def calls(self, marker: str) -> dict[str, list[str]]:
        """The metastore's own record of the calls it served (its audit log), cut at the
        calls that name table ``<marker>_<phase>`` (a client's ``SHOW TBLPROPERTIES`` of
        such a table marks where its phase begins): phase -> the calls up to the next
        marker, as ``cmd=...`` texts. Only meaningful while one client is talking."""
        phases: dict[str, list[str]] = {}
        current: list[str] | None = None
        pattern = re.compile(rf"tbl={re.escape(marker)}_(\w+)")
        for line in self.audit_log.read_text(errors="replace").splitlines():
            if "cmd=" not in line:
                continue
            cmd = line.split("cmd=", 1)[1].strip()
            found = pattern.search(cmd)
            if found:
                current = phases.setdefault(found.group(1), [])
            elif current is not None:
                current.append(cmd)
        return phases

    def start(self, timeout: float = 120, *, wait: bool = True) -> "HiveMetastore":
        """Start the service; with ``wait=False`` return at once (:meth:`wait` later), so
        that its JVM starts while the tests' own processes start theirs."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.warehouse.mkdir(exist_ok=True)
        (self.folder / "log4j2.properties").write_text(
            _LOG4J.format(log=self.folder / "metastore.log"))
        settings = {
            # Derby embedded in this service only: every client goes through thrift
            "javax.jdo.option.ConnectionURL":
                f"jdbc:derby:;databaseName={self.folder / 'metastore_db'};create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": self.warehouse.as_uri(),
            "derby.stream.error.file": str(self.folder / "derby.log"),
            # Hive would switch log4j to asynchronous loggers (LMAX Disruptor: not shipped)
            "hive.async.log.enabled": "false",
            "log4j2.configurationFile": str(self.folder / "log4j2.properties"),
            # the service then switches to Hive's own log4j2 settings (its jar's), which
            # write to ${hive.log.dir}/${hive.log.file} (else /tmp/<user>/hive.log, shared
            # by every test run): kept here; its audit lines (one per call served) are the
            # oracle of how many calls a catalog write costs (`calls`)
            "hive.log.dir": str(self.folder),
            "hive.log.file": self.audit_log.name,
        }
        cmd = ["java", "-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
               *(f"-D{k}={v}" for k, v in settings.items()),
               "-cp", os.path.join(pyspark_jars(), "*"),
               "org.apache.hadoop.hive.metastore.HiveMetaStore", "-p", str(self.port)]
        log = open(self.folder / "stdout.log", "a")
        self.process = subprocess.Popen(cmd, cwd=self.folder, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        return self.wait(timeout) if wait else self

    def wait(self, timeout: float = 120) -> "HiveMetastore":
        """Return once the service answers on its port (raise if it died or took too long)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Hive metastore exited; see {self.folder}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Hive metastore did not start; see {self.folder}")

    def spark_config(self, scratch: Path) -> dict[str, str]:
        """The Spark settings of a session using this metastore (``scratch``: a folder of
        the process's own for Spark's warehouse default and Hive's scratch files)."""
        return {
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": self.uri,
            "spark.sql.warehouse.dir": str(Path(scratch) / "warehouse"),
            "spark.hadoop.hive.exec.scratchdir": str(Path(scratch) / "hive-scratch"),
            "spark.hadoop.hive.exec.local.scratchdir": str(Path(scratch) / "hive-local"),
            "spark.hadoop.hive.metastore.connect.retries": "2",
        }


@pytest.fixture(scope="session")
def hive_metastore(tmp_path_factory):
    """A Hive metastore service on loopback, shared by the session's tests (each test uses
    a database of its own). It is still starting when a test gets it: call ``wait()``."""
    metastore = HiveMetastore(tmp_path_factory.mktemp("hive-metastore")).start(wait=False)
    try:
        yield metastore  # tests wait() for it when they need it
    finally:
        metastore.stop()


if __name__ == "__main__":
    import tempfile

    with HiveMetastore(Path(tempfile.mkdtemp(prefix="wavesql-hms-")),
                       int(sys.argv[1]) if len(sys.argv) > 1 else 9083) as hms:
        print(f"Hive metastore at {hms.uri} (data in {hms.folder}); Ctrl-C stops it")
        try:
            hms.process.wait()
        except KeyboardInterrupt:
            pass
