"""Starting Spark for WaveSQL.

``start_spark`` checks for a usable Java first (a missing JVM otherwise surfaces as a Py4J
stack trace), then builds a session with defaults sized for signal work on one machine:
Spark's 1 GB driver default fails on real recordings, and 200 shuffle partitions are absurd
for a laptop. Every default can be overridden with ``config``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from wavesql.errors import WaveSQLError

MIN_JAVA = 17


def _default_config(master: str) -> dict[str, str]:
    cores = os.cpu_count() or 2
    try:
        total_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        total_gb = 8
    driver_gb = int(max(1, min(8, total_gb // 4)))
    return {
        "spark.app.name": "WaveSQL",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": f"{driver_gb}g",
        "spark.sql.shuffle.partitions": str(max(2, 2 * cores) if master.startswith("local") else 200),
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
        "spark.ui.showConsoleProgress": "false",
    }


def java_version() -> tuple[str, int] | None:
    """(path, major version) of the Java Spark would use, or None when there is none."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.exists(java):
        return None
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    return java, major


def check_java() -> None:
    """Raise ``JAVA_MISSING`` unless a Java >= 17 runtime is available."""
    found = java_version()
    hint = ("install a Java 17+ runtime (Debian/Ubuntu: `apt-get install openjdk-17-jre-headless`;"
            " macOS: `brew install openjdk@17`) or point JAVA_HOME at one")
    if found is None:
        raise WaveSQLError("JAVA_MISSING", "Spark needs Java, and no `java` was found "
                           "(JAVA_HOME unset or wrong, nothing on PATH)", hint=hint)
    path, major = found
    if major < MIN_JAVA:
        raise WaveSQLError("JAVA_MISSING", f"Spark 4 needs Java {MIN_JAVA} or newer; "
                           f"{path} is Java {major}", hint=hint)


def connector_jars() -> list[str]:
    """The jars of Spark connectors installed beside WaveSQL (the S3A filesystem for
    ``s3a://`` locations): every ``*.jar`` in ``$WAVESQL_CONNECTORS``, by default the
    environment's ``share/wavesql/connectors`` where ``make connectors`` puts them (from
    ``connectors/pom.xml``). Empty when there are none: a cluster's own jars, or
    ``spark.jars.packages`` in ``config``, serve as well. ``start_spark`` puts them on the
    driver's and executors' class path."""
    folder = os.environ.get("WAVESQL_CONNECTORS") or os.path.join(
        sys.prefix, "share", "wavesql", "connectors")
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(folder, name) for name in os.listdir(folder)
                  if name.endswith(".jar"))


def start_spark(master: str | None = None, config: dict[str, str] | None = None):
    """Create (or reuse) the SparkSession WaveSQL runs on.

    Parameters
    ----------
    master : str, optional
        Any Spark master URL; ``local[*]`` by default (or ``$WAVESQL_MASTER``).
    config : dict, optional
        Spark settings overriding WaveSQL's defaults.
    """
    master = master or os.environ.get("WAVESQL_MASTER") or "local[*]"
    # Spark's Python workers must run the interpreter WaveSQL runs in, or they will not
    # find WaveSQL's dependencies (numpy, scipy, pyarrow) installed in this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    check_java()
    from pyspark.sql import SparkSession

    settings = _default_config(master)
    log_config = os.path.join(os.path.dirname(__file__), "log4j2.properties")
    if os.environ.get("WAVESQL_SPARK_LOG_LEVEL", "").upper() not in ("WARN", "INFO", "DEBUG"):
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile={log_config}"
    settings.update(config or {})
    if settings.get("spark.executor.pyspark.memory"):
        # Spark enforces it as an address-space limit, and pyarrow's default allocator
        # (mimalloc) reserves about a gigabyte of address space in each worker up front:
        # the system allocator leaves the limit to the rows (planner/physical/task_memory.py)
        settings.setdefault("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL", "system")
    jars = connector_jars()
    if jars:
        # On the class path, not in spark.jars: Spark would copy spark.jars (700 MB with the
        # AWS SDK) into every executor's work folder at every start. The executors' entry
        # serves a cluster whose hosts share this installation (as the tests' standalone
        # cluster does); elsewhere give the cluster the connector (README, Run on a cluster).
        for key in ("spark.driver.extraClassPath", "spark.executor.extraClassPath"):
            settings[key] = os.pathsep.join(filter(None, [settings.get(key), *jars]))
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _quiet_logs(spark)
    return spark


def _quiet_logs(spark) -> None:
    # PySpark logs every SQL analysis error (as JSON, with the JVM stack trace) before
    # raising it; WaveSQL reports the error itself, positioned, so that log is only noise.
    # The logger must be created by PySparkLogger (it is called with extra keywords).
    from pyspark.logger import PySparkLogger

    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True
    if os.environ.get("WAVESQL_SPARK_LOG_LEVEL", "").upper() not in ("WARN", "INFO", "DEBUG"):
        # Spark copies what its Python workers print to the JVM's System.err (PySpark's
        # stateful-processor worker prints a line per call); log4j keeps its own stream, and
        # every failure reaches WaveSQL as an exception, so that copy is only noise.
        try:
            jvm = spark.sparkContext._jvm
            jvm.java.lang.System.setErr(jvm.java.io.PrintStream(
                jvm.java.io.OutputStream.nullOutputStream()))
        except Exception:  # noqa: BLE001 - log tuning must never stop a session from starting
            pass
    try:
        spark.sparkContext.setLogLevel(os.environ.get("WAVESQL_SPARK_LOG_LEVEL", "ERROR"))
    except Exception:  # noqa: BLE001 - log tuning must never stop a session from starting
        pass


# Error translation lives in wavesql.spark_errors (every layer uses it); these names stay
# importable from here, where the README documents them.
from wavesql.spark_errors import (  # noqa: E402,F401
    is_runtime_error, runtime_error_types, runtime_errors, translate_runtime_error,
    translate_spark_error)
