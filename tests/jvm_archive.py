"""Quick JVM starts for the Spark processes the tests start (the CLI, ``wavesql run`` killed
mid-run, the REPL, notebooks, two hosts sharing a catalog...).

Such a process lives for a few statements or micro-batches, so most of its time is the
JVM's start: loading and verifying Spark's ~10,000 classes, then compiling the hot ones.
Measured here (2 cores, load 6-8) for start_spark plus two small queries: 31-47 s as the
JVM starts by default, 7-12 s with a class-data-sharing archive of those classes and the
client compiler only. So the suite makes such an archive once (a small Spark job run with
``-XX:ArchiveClassesAtExit``, in the background at the start of a session that runs Spark
tests) and every Spark the tests start in a process of their own reads it through
``SPARK_SUBMIT_OPTS`` -- the options spark-submit gives the driver JVM it launches (in
local mode the only JVM), without the "Picked up JAVA_TOOL_OPTIONS" line that variable
would print on every process's stderr. The suite's own long-lived Spark session
(tests/conftest.py) reads the archive too, with the same options (:func:`session_options`):
the suite runs some thousand small, different queries, each planned and code-generated
afresh, so C2's compiling costs more than its faster code saves. Measured with two runs of
the same files side by side at the same time (load 10-12, so with the same share of the
machine), against the JVM's defaults: the archive and the serial collector took 10% less
CPU (test_stateful_streaming, test_temporal_queries, test_streaming: 431 -> 388 CPU s,
1,082 -> 1,001 s); the client compiler besides, against those two alone, 25% less CPU on
test_spark_compat and test_fused_chain (211 -> 159 CPU s, 362 -> 313 s; 17% less CPU after
their first 100 tests) and the same on the continuous tests once the session has started
(test_kafka_operators, test_stateful_streaming: +1% CPU after the first two tests, which
took 34% less).

Nothing changes in what runs: a class is read from the archive instead of a jar (the JVM
checks the archive was made from the same JVM and class path, and otherwise ignores it),
and code is compiled by C1 only. The archive's name carries a digest of the JVM and the
jars, so a new Spark or connector makes a new one; it lives with the environment
(``.venv/share/wavesql/test-jvm/``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / ".venv" / "share" / "wavesql" / "test-jvm"
#: the options every test-started Spark gets once the archive exists (-Xlog:disable: a JVM
#: whose class path differs from the archive's says so on stdout otherwise)
QUICK_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Xlog:disable"
#: the suite's own session without the archive (not made yet): the same compiler and
#: collector (on a heap of 2 GB and two cores G1's concurrent threads and write barriers
#: cost more CPU than the serial collector's pauses)
SESSION_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: what the archiving run does: start Spark as the CLI does, then the kinds of work a test
#: process does (SQL with a shuffle, Parquet, Arrow to pandas and Python UDFs, streaming)
_WORKLOAD = """
import sys, tempfile
from wavesql.spark import start_spark
spark = start_spark("local[2]", {"spark.ui.enabled": "false",
                                 "spark.sql.shuffle.partitions": "2"})
folder = tempfile.mkdtemp()
spark.sql("SELECT id % 3 AS k, id AS v FROM range(1000)").write.parquet(folder + "/t")
df = spark.read.parquet(folder + "/t")
df.groupBy("k").count().toPandas()
df.mapInArrow(lambda it: it, df.schema).count()
q = (spark.readStream.schema(df.schema).parquet(folder + "/t").writeStream
     .format("parquet").option("checkpointLocation", folder + "/c")
     .trigger(availableNow=True).start(folder + "/o"))
q.awaitTermination()
jvm = spark.sparkContext._gateway.proc  # the JVM writes the archive as it exits:
spark.stop()                             # wait for that, not only for this process
jvm.stdin.close()
jvm.wait()
"""


def _digest() -> str:
    """The JVM and the jars on the driver's class path (Spark's and the connectors')."""
    import pyspark

    h = hashlib.sha256()
    java = shutil.which("java") or ""
    h.update(os.path.realpath(java).encode())
    for folder in (Path(pyspark.__file__).parent / "jars",
                   ROOT / ".venv" / "share" / "wavesql" / "connectors"):
        if folder.is_dir():
            for jar in sorted(folder.rglob("*.jar")):
                h.update(f"{jar.name}:{jar.stat().st_size}".encode())
    return h.hexdigest()[:16]


def archive() -> Path:
    return FOLDER / f"spark-{_digest()}.jsa"


def start_archiving() -> subprocess.Popen | None:
    """Start making the archive in the background (None: it exists, or cannot be made)."""
    path = archive()
    if path.exists() or shutil.which("java") is None:
        return None
    FOLDER.mkdir(parents=True, exist_ok=True)
    for stale in FOLDER.glob("*.partial"):  # left by a run stopped while archiving
        if stale.stat().st_mtime < time.time() - 3600:
            stale.unlink(missing_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial")
    env = dict(os.environ, SPARK_SUBMIT_OPTS=f"-XX:ArchiveClassesAtExit={partial} "
                                             "-Xlog:disable")
    proc = subprocess.Popen([sys.executable, "-c", _WORKLOAD], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.partial, proc.path = partial, path  # type: ignore[attr-defined]
    return proc


def finish_archiving(proc: subprocess.Popen | None, wait: bool = False) -> str | None:
    """The ``SPARK_SUBMIT_OPTS`` for test-started Sparks once the archive is there (None:
    not yet -- ``wait`` false and still running -- or it could not be made)."""
    if proc is None:
        path = archive()
        return f"-XX:SharedArchiveFile={path} {QUICK_OPTIONS}" if path.exists() else None
    if proc.poll() is None and not wait:
        return None
    if proc.wait() == 0 and proc.partial.exists():
        os.replace(proc.partial, proc.path)  # whole, or not there
    else:
        proc.partial.unlink(missing_ok=True)
    return finish_archiving(None)


def session_options() -> str:
    """The ``SPARK_SUBMIT_OPTS`` for the suite's own Spark session: those of test-started
    Sparks if the archive is there (made whole, or not at all), else the same compiler and
    collector."""
    return finish_archiving(None) or SESSION_OPTIONS
