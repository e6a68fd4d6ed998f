"""A real S3-protocol server on loopback for the object-storage tests: moto's server mode
(``python -m moto.server``) in a process of its own, with one bucket.

Spark reaches it through the S3A connector (``make connectors``), WaveSQL's own I/O through
its storage layer; both are configured by the same Hadoop settings (:meth:`S3Server.hadoop`).
The tests' oracles read the bucket with boto3, independently of either.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.processes import ServerProcess

ACCESS_KEY = SECRET_KEY = "wavesql-test"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server(ServerProcess):
    """``with S3Server(logs) as s3: s3.uri("data/x.parquet")``."""

    stop_seconds = 10

    def __init__(self, logs: Path, bucket: str = "wavesql-test", *, auth: bool = False):
        #: ``auth``: the server checks credentials (moto's IAM: none are valid), and has
        #: no bucket -- a store that refuses whoever asks
        self.auth = auth
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.bucket = bucket
        self.logs = Path(logs)
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "S3Server":
        log = open(self.logs / f"moto-{self.port}.log", "w")
        env = dict(os.environ, AWS_DEFAULT_REGION=REGION)
        if self.auth:
            env["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto server exited; see {self.logs}")
            try:
                urllib.request.urlopen(self.endpoint + "/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            self.stop()
            raise RuntimeError(f"moto server did not start; see {self.logs}")
        if not self.auth:
            self.client().create_bucket(Bucket=self.bucket)
        return self

    def client(self):
        """A boto3 client: the tests' independent view of the bucket."""
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)

    def hadoop(self) -> dict[str, str]:
        """The Hadoop settings (without the ``spark.hadoop.`` prefix) that reach this server:
        what a user sets once for Spark and WaveSQL alike."""
        return {
            "fs.s3a.endpoint": self.endpoint,
            "fs.s3a.endpoint.region": REGION,
            "fs.s3a.path.style.access": "true",
            "fs.s3a.connection.ssl.enabled": "false",
            "fs.s3a.access.key": ACCESS_KEY,
            "fs.s3a.secret.key": SECRET_KEY,
            "fs.s3a.aws.credentials.provider":
                "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
            # moto's HTTP server answers a PUT's "Expect: 100-continue" so that the AWS
            # SDK's asynchronous client sees status 100 as the reply: RocksDB's state
            # uploads (copyFromLocalFile, which S3A sends through that client) fail. Plain
            # PUTs through the synchronous client work. Real S3 and MinIO need neither.
            "fs.s3a.connection.expect.continue": "false",
            "fs.s3a.optimized.copy.from.local.enabled": "false",
        }

    def uri(self, key: str = "") -> str:
        return f"s3a://{self.bucket}/{key.lstrip('/')}"

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def put(self, key: str, data: bytes | str | Path) -> str:
        body = Path(data).read_bytes() if isinstance(data, Path) else (
            data.encode() if isinstance(data, str) else data)
        self.client().put_object(Bucket=self.bucket, Key=key, Body=body)
        return self.uri(key)

    def upload_tree(self, folder: Path, prefix: str) -> str:
        """Every file under ``folder`` to ``prefix/<relative path>``; the prefix's URI."""
        folder = Path(folder)
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path)
        return self.uri(prefix)

    def get(self, key: str) -> bytes:
        return self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read()


def move_to_bucket(s3: S3Server, data: Path, query_files, prefix: str) -> str:
    """Upload the folder ``data`` to the bucket under ``prefix``, delete the local copy
    (so nothing can be read from disk by mistake) and point the ``'data/...'`` locations of
    the query file(s) ``query_files`` at the bucket. Returns the bucket URI of the data."""
    import shutil

    uri = s3.upload_tree(data, f"{prefix}/data")
    shutil.rmtree(data)
    for query_file in [query_files] if isinstance(query_files, (str, Path)) else query_files:
        text = Path(query_file).read_text()
        assert "'data/" in text, f"{query_file} reads nothing under data/"
        Path(query_file).write_text(text.replace("'data/", f"'{uri}/"))
    return uri


def _stream_main(argv: list[str]) -> None:
    """``python -m tests.object_store stream CATALOG DDL QUERY OUTPUT CHECKPOINT``: run a
    continuous query to the end of its input (one file per micro-batch), reaching the S3
    server with the Hadoop settings in ``$WAVESQL_TEST_HADOOP`` (JSON) -- a process a test
    can SIGKILL in mid-run."""
    import json

    import wavesql

    catalog, ddl, query, output, checkpoint = argv
    hadoop = json.loads(os.environ["WAVESQL_TEST_HADOOP"])
    config = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
              **{f"spark.hadoop.{k}": v for k, v in hadoop.items()}}
    ws = wavesql.connect(master="local[2]", catalog=catalog, config=config)
    ws.sql(ddl)
    cq = ws.stream(query, output, checkpoint, max_files_per_trigger=1)
    cq.await_termination()
    print(f"DONE {len(cq.reports)} batches", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["stream"]:
        _stream_main(sys.argv[2:])
    else:
        raise SystemExit("usage: python -m tests.object_store stream CATALOG DDL QUERY OUT CKPT")
