"""A real Kafka broker on loopback for the Kafka tests: Kafka's own jars from Maven Central
(``make kafka-broker``: connectors/kafka-broker/pom.xml), one node in KRaft mode (broker and
controller in one JVM), in a process of its own.

The tests produce and check with a Python client from PyPI (confluent-kafka), independently
of Spark's Kafka client. ``python -m tests.kafka_broker [port]`` runs one in the foreground
(the README's Kafka quick start).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

from tests.processes import ServerProcess

HERE = Path(__file__).resolve().parent


def broker_jars() -> str:
    """The broker's class path: ``$WAVESQL_KAFKA_BROKER`` or where ``make kafka-broker``
    put the jars."""
    folder = os.environ.get("WAVESQL_KAFKA_BROKER") or os.path.join(
        sys.prefix, "share", "wavesql", "kafka-broker")
    if not os.path.isdir(folder) or not any(n.endswith(".jar") for n in os.listdir(folder)):
        raise RuntimeError(f"no Kafka broker jars in {folder}: run `make kafka-broker`")
    return os.path.join(folder, "*")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d %p %c{{1}} %m%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
"""


class KafkaBroker(ServerProcess):
    """``with KafkaBroker(folder) as kafka: kafka.bootstrap`` -- one broker, its data in
    ``folder``; :meth:`restart` stops and starts it on the same port and data."""

    stop_seconds = 60

    def __init__(self, folder: Path, port: int | None = None):
        self.folder = Path(folder)
        self.port = port or _free_port()
        self.controller_port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self._formatted = False

    def _write_config(self) -> Path:
        data = self.folder / "data"
        config = self.folder / "server.properties"
        config.write_text("\n".join([
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={data}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            "auto.create.topics.enable=false",
            # small segments and a quick shutdown: a test broker
            "log.segment.bytes=16777216",
            "controlled.shutdown.enable=true",
            "",
        ]))
        (self.folder / "log4j2.properties").write_text(
            _LOG4J.format(log=self.folder / "broker.log"))
        return config

    def _java(self, main: str, *args: str, **popen) -> subprocess.Popen:
        cmd = ["java", "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC",
               f"-Dlog4j2.configurationFile={self.folder / 'log4j2.properties'}",
               "-cp", broker_jars(), main, *args]
        return subprocess.Popen(cmd, **popen)

    def start(self, timeout: float = 90) -> "KafkaBroker":
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        if not self._formatted:
            # A cluster id is 22 URL-safe base64 characters; one in 64 starts with '-', which
            # the storage tool's argument parser reads as an option (CI failed once on it), so
            # pass it as --cluster-id=<id>, the form argparse never splits.
            cluster = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            fmt = self._java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster}",
                             "-c", str(config), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT)
            out, _ = fmt.communicate(timeout=120)
            if fmt.returncode != 0:
                raise RuntimeError(f"formatting the Kafka log folder failed: {out!r}")
            self._formatted = True
        log = open(self.folder / "stdout.log", "a")
        self.process = self._java("kafka.Kafka", str(config), stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Kafka broker exited; see {self.folder}")
            if self._answers():
                return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"the Kafka broker did not start; see {self.folder}")

    def _answers(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            self.admin().list_topics(timeout=5)
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- the test side: a Python client of its own --------------------------------------
    def admin(self):
        from confluent_kafka.admin import AdminClient

        # log_level 0: librdkafka's own complaints (a broker being restarted) stay quiet
        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})

    def create_topic(self, name: str, partitions: int = 1) -> str:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until the futures are done
        futures = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                                replication_factor=1)])
        for future in futures.values():
            future.result(30)
        return name

    def producer(self, **config):
        from confluent_kafka import Producer

        # idempotent: records of one partition keep the order they were produced in
        return Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5, "log_level": 0,
                         "enable.idempotence": True, **config})

    def produce(self, topic: str, records, partition: int | None = None) -> None:
        """Send ``records`` -- ``(key, value)`` or ``(key, value, partition,
        timestamp_ms)``, values as ``str``/``bytes``/``None`` -- and wait until every one is
        acknowledged."""
        producer = self.producer()
        errors = []

        def done(err, _msg):
            if err is not None:
                errors.append(err)

        for record in records:
            key, value, *rest = record
            kwargs = {}
            part = rest[0] if rest else partition
            if part is not None:
                kwargs["partition"] = part
            if len(rest) > 1 and rest[1] is not None:
                kwargs["timestamp"] = rest[1]
            producer.produce(topic, key=key, value=value, on_delivery=done, **kwargs)
            producer.poll(0)
        left = producer.flush(60)
        if left or errors:
            raise RuntimeError(f"{left} records not delivered; errors: {errors[:3]}")

    def consume(self, topic: str, timeout: float = 30.0) -> list:
        """Every record of ``topic`` now (``(partition, offset, key, value)``)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap,
                             "group.id": f"oracle-{uuid.uuid4()}", "log_level": 0,
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        try:
            meta = consumer.list_topics(topic, timeout=10).topics[topic]
            parts = [TopicPartition(topic, p) for p in meta.partitions]
            ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in parts}
            consumer.assign([TopicPartition(topic, p.partition, 0) for p in parts])
            out, deadline = [], time.monotonic() + timeout
            got = {p: 0 for p in ends}
            while any(got[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                got[msg.partition()] = msg.offset() + 1
                out.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
            return out
        finally:
            consumer.close()


def _stream_main(argv: list[str]) -> None:
    """``python -m tests.kafka_broker stream CATALOG DDL QUERY OUTPUT CHECKPOINT``: run a
    continuous query to the end of what its topic holds -- a process a test can SIGKILL in
    mid-run (the stream's OPTIONS set maxOffsetsPerTrigger, so it takes several batches)."""
    import wavesql

    catalog, ddl, query, output, checkpoint = argv
    ws = wavesql.connect(master="local[2]", catalog=catalog,
                         config={"spark.sql.shuffle.partitions": "2",
                                 "spark.ui.enabled": "false"})
    ws.sql(ddl)
    cq = ws.stream(query, output, checkpoint)
    cq.await_termination()
    print(f"DONE {len(cq.reports)} batches", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["stream"]:
    _stream_main(sys.argv[2:])
elif __name__ == "__main__":  # the README's Kafka quick start: a broker in the foreground
    import tempfile

    port = int(sys.argv[1]) if len(sys.argv) > 1 else 9092
    with KafkaBroker(Path(tempfile.mkdtemp(prefix="wavesql-kafka-")), port) as broker:
        print(f"Kafka broker at {broker.bootstrap} (data in {broker.folder}); Ctrl-C stops it",
              flush=True)
        try:
            broker.process.wait()
        except KeyboardInterrupt:
            pass
