"""A real GCS-protocol server on loopback for the gs:// tests: fake-gcs-server (Go, built
by ``make gcs-server`` into the environment's ``share/wavesql/gcs-server``), in a process
of its own, plain HTTP, objects in memory, with one bucket.

Spark reaches it through Google's Hadoop connector (``make connectors``: the shaded
gcs-connector), WaveSQL's own I/O through its storage layer (pyarrow's GcsFileSystem,
storage/gcs.py); both are configured by the same Hadoop settings (:meth:`GcsServer.hadoop`).
The tests' oracles put and read objects with plain JSON API calls (urllib), independently
of both. ``python -m tests.gcs_server`` runs one in the foreground.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.processes import ServerProcess


def server_binary() -> str:
    """``$WAVESQL_GCS_SERVER`` or where ``make gcs-server`` put the binary."""
    path = os.environ.get("WAVESQL_GCS_SERVER") or os.path.join(
        sys.prefix, "share", "wavesql", "gcs-server", "fake-gcs-server")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no fake-gcs-server at {path}: run `make gcs-server`")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Hadoop 3.5's core-default.xml defaults for Google's connector written with a unit
#: ("64m"), in bytes: Google's connector parses them as plain numbers
BYTE_SIZES = {"fs.gs.block.size": str(64 << 20), "fs.gs.rewrite.max.chunk.size": str(512 << 20),
              "fs.gs.outputstream.buffer.size": str(8 << 20),
              "fs.gs.inputstream.inplace.seek.limit": str(8 << 20),
              "fs.gs.inputstream.min.range.request.size": str(2 << 20)}


class GcsServer(ServerProcess):
    """``with GcsServer(logs) as gcs: gcs.uri("data/x.parquet")``."""

    stop_seconds = 10

    def __init__(self, logs: Path, bucket: str = "wavesql-test"):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        self.logs = Path(logs)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 30) -> "GcsServer":
        self.logs.mkdir(parents=True, exist_ok=True)
        log = open(self.logs / f"fake-gcs-{self.port}.log", "w")
        # -public-host: the host in the upload URLs it hands out (resumable uploads, which
        # the connector uses for every write) must be the one clients reach it at
        self.process = subprocess.Popen(
            [server_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
             "-backend", "memory", "-public-host", f"127.0.0.1:{self.port}",
             "-external-url", self.endpoint, "-data", str(self.logs / "initial"),
             "-log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"fake-gcs-server exited; see {self.logs}")
            try:
                self._json("GET", "/storage/v1/b")
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.stop()
            raise RuntimeError(f"fake-gcs-server did not start; see {self.logs}")
        self.create_bucket(self.bucket)
        return self

    # -- what a user configures; the URIs -----------------------------------------------
    def uri(self, key: str = "") -> str:
        return f"gs://{self.bucket}/{key.lstrip('/')}"

    def hadoop(self) -> dict[str, str]:
        """The Hadoop settings (without ``spark.hadoop.``) that reach this server: Google's
        connector (3.x) at this root URL without credentials, and the gs:// filesystem
        classes (Hadoop 3.5's core-default.xml names Hadoop's own GCS filesystem, which
        PySpark does not ship). Hadoop 3.5's defaults for the byte sizes are written "64m",
        which Google's connector (reading plain numbers) rejects: given in bytes here."""
        return {
            **BYTE_SIZES,
            # Parquet's vectored reads call a Hadoop method whose signature changed in
            # Hadoop 3.4 (VectoredReadUtils.validateRangeRequest): the connector, built
            # for the old one, fails every read with NoSuchMethodError on PySpark's Hadoop
            # 3.5; plain ranged reads instead
            "parquet.hadoop.vectored.io.enabled": "false",
            # a rename (Spark's checkpoint and commit files) as copy and delete: the
            # server answers 400 to the connector's moveTo request (a newer JSON API call,
            # with generation preconditions) -- real GCS has it, keep it on there
            "fs.gs.operation.move.enable": "false",
            "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
            "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
            "fs.gs.storage.root.url": self.endpoint,
            "fs.gs.auth.type": "UNAUTHENTICATED",
            "fs.gs.project.id": "wavesql-test",
        }

    # -- the tests' side: plain JSON API calls ------------------------------------------
    def _json(self, method: str, path: str, body: bytes | None = None,
              content_type: str = "application/json"):
        request = urllib.request.Request(self.endpoint + path, data=body, method=method,
                                         headers={"Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=30) as reply:
            data = reply.read()
        return json.loads(data) if data and reply.headers.get_content_type() == \
            "application/json" else data

    def create_bucket(self, name: str) -> None:
        self._json("POST", "/storage/v1/b", json.dumps({"name": name}).encode())

    def put(self, key: str, body: bytes | Path, bucket: str | None = None) -> None:
        data = body.read_bytes() if isinstance(body, Path) else body
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        self._json("POST", f"/upload/storage/v1/b/{bucket or self.bucket}/o?{query}", data,
                   "application/octet-stream")

    def get(self, key: str) -> bytes:
        name = urllib.parse.quote(key, safe="")
        return self._json("GET", f"/storage/v1/b/{self.bucket}/o/{name}?alt=media")

    def children(self, prefix: str) -> list[tuple[str, bool]]:
        """``(name, is_folder)`` directly under ``prefix`` (``a/b/``), as the JSON API's
        listing with a delimiter says: objects, and the prefixes of deeper names."""
        query = urllib.parse.urlencode({"prefix": prefix, "delimiter": "/"})
        page = self._json("GET", f"/storage/v1/b/{self.bucket}/o?{query}")
        names = [(i["name"][len(prefix):], False) for i in page.get("items", [])]
        return sorted(names + [(p[len(prefix):].rstrip("/"), True)
                               for p in page.get("prefixes", [])])

    def keys(self, prefix: str = "") -> list[str]:
        """Every object's name under ``prefix``, sorted."""
        out, token = [], None
        while True:
            query = {"prefix": prefix, **({"pageToken": token} if token else {})}
            page = self._json("GET", f"/storage/v1/b/{self.bucket}/o?"
                              + urllib.parse.urlencode(query))
            out += [item["name"] for item in page.get("items", [])]
            token = page.get("nextPageToken")
            if not token:
                return sorted(out)


@pytest.fixture(scope="session")
def gcs(spark, tmp_path_factory):
    """A real GCS-protocol server on loopback, and the shared Spark configured to reach it
    (the Hadoop settings WaveSQL's own I/O reads too). Started by the first test that asks
    for it, stopped at the end of the session."""
    server = GcsServer(tmp_path_factory.mktemp("gcs"))
    server.start()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in server.hadoop().items():
        conf.set(key, value)
    yield server
    for key in server.hadoop():
        conf.unset(key)
    server.stop()


if __name__ == "__main__":  # a GCS server in the foreground
    import tempfile

    with GcsServer(Path(tempfile.mkdtemp(prefix="wavesql-gcs-"))) as running:
        print(f"GCS at {running.endpoint} with bucket {running.bucket}; set "
              f"{running.hadoop()}; Ctrl-C stops it", flush=True)
        try:
            running.process.wait()
        except KeyboardInterrupt:
            pass
