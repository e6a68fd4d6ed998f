"""Shared fixtures: one session-scoped local[2] Spark, a fresh catalog per test."""

from __future__ import annotations

import os
import sys

import pytest

# Spark's Python workers must use this interpreter (and so this environment).
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# A continuous query that hangs fails its test (STREAM_TIMEOUT) instead of the whole run;
# pytest-timeout (pyproject.toml) bounds every test as a whole.
os.environ.setdefault("WAVESQL_AWAIT_TIMEOUT_SECONDS", "240")

TEST_SPARK_CONFIG = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
}


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    from wavesql.spark import start_spark

    warehouse = tmp_path_factory.mktemp("warehouse")
    config = dict(TEST_SPARK_CONFIG)
    config["spark.sql.warehouse.dir"] = str(warehouse)
    # the class archive, the client compiler and the serial collector, as the Sparks tests
    # start (tests/jvm_archive.py session_options: 10-28% less CPU, measured). The user's
    # own SPARK_SUBMIT_OPTS win.
    from tests import jvm_archive

    own = "SPARK_SUBMIT_OPTS" in os.environ and not _archiving["applied"]
    before = os.environ.get("SPARK_SUBMIT_OPTS")
    if not own:
        os.environ["SPARK_SUBMIT_OPTS"] = jvm_archive.session_options()
    try:
        session = start_spark("local[2]", config)
    finally:
        if not own:
            if before is None:
                os.environ.pop("SPARK_SUBMIT_OPTS", None)
            else:
                os.environ["SPARK_SUBMIT_OPTS"] = before
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _wavesql_settings_stay_in_their_test(request):
    """WaveSQL's settings (``SET wavesql.x = ...``) last for the Spark session, which the
    suite shares: a test that leaves one set changes the plans of the tests after it (a
    ``wavesql.wav.scan = source`` once made another module's plan check fail). After each
    Spark test, the ``wavesql.*`` settings are as before it."""
    yield
    if "spark" not in request.fixturenames:
        return
    spark = request.getfixturevalue("spark")
    for key in _names(spark, spark.conf._jconf.getAllAsJava().keySet()):
        if key.startswith("wavesql."):
            spark.conf.unset(key)


def _names(spark, java_strings) -> list[str]:
    """A Java collection of strings as a list, in one Py4J call: ``conf.getAll`` and
    ``catalog.listTables()`` fetch entry by entry (40 ms after each of the 1,400 Spark
    tests on a quiet machine, seconds on a loaded one)."""
    jvm = spark.sparkContext._jvm
    return [n for n in jvm.java.lang.String.join("\n", java_strings).split("\n") if n]


def _temp_views(spark) -> list[str]:
    """The session's temporary views (the session catalog's own list; Spark's public
    ``catalog.listTables()`` if that internal call is not there)."""
    from py4j.protocol import Py4JError

    try:
        names = spark._jsparkSession.sessionState().catalog().getTempViewNames()
        return _names(spark, spark.sparkContext._jvm.scala.jdk.javaapi.CollectionConverters
                      .asJava(names))
    except Py4JError:
        return [v.name for v in spark.catalog.listTables() if v.isTemporary]


@pytest.fixture(scope="session")
def s3(spark, tmp_path_factory):
    """A real S3-protocol server on loopback (tests/object_store.py) with one bucket, and
    the shared Spark configured to reach it (Hadoop's S3A settings, which WaveSQL's own
    I/O reads too). Started by the first test that asks for it."""
    from tests.object_store import S3Server

    server = S3Server(tmp_path_factory.mktemp("s3"))
    server.start()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in server.hadoop().items():
        conf.set(key, value)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    """A real Kafka broker on loopback (tests/kafka_broker.py: one KRaft node from Kafka's
    own jars). Started by the first test that asks for it; tests create their own topics."""
    from tests.kafka_broker import KafkaBroker

    broker = KafkaBroker(tmp_path_factory.mktemp("kafka"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def ws(spark, tmp_path):
    """A WaveSQL session on the shared Spark with its own catalog file."""
    import wavesql

    session = wavesql.connect(spark=spark, catalog=tmp_path / "catalog.db")
    yield session
    session.close()
    for view in _temp_views(spark):
        spark.catalog.dropTempView(view)


#: Test modules whose tests start Spark in processes of their own (the CLI, the REPL, a
#: notebook kernel) or through fixtures asked for by name at run time: all ``spark``.
STARTS_SPARK_ITSELF = {"test_apps", "test_cli", "test_repl", "test_notebook", "test_schedule"}


#: the class-data-sharing archive for test-started Sparks (tests/jvm_archive.py): the
#: process making it, and whether SPARK_SUBMIT_OPTS was set from it
_archiving = {"proc": None, "pending": False, "applied": False}


def pytest_sessionstart(session):
    """A session that runs Spark tests makes the archive in the background if it is not
    there yet (``make test``'s first tier, without Spark, does not)."""
    from tests import jvm_archive

    if "SPARK_SUBMIT_OPTS" in os.environ:  # the user's own options win
        return
    if getattr(session.config.option, "numprocesses", None) and \
            "PYTEST_XDIST_WORKER" not in os.environ:
        return  # pytest-xdist's controller runs no test: each worker makes its own
    marks = session.config.getoption("markexpr") or ""
    if "not spark" not in marks.replace("(", " "):
        _archiving["proc"] = jvm_archive.start_archiving()
        _archiving["pending"] = True


def pytest_runtest_setup(item):
    """Test-started Sparks read the archive from the first test after it is made."""
    if _archiving["pending"]:
        from tests import jvm_archive

        opts = jvm_archive.finish_archiving(_archiving["proc"])
        if opts is not None or _archiving["proc"] is None or \
                _archiving["proc"].poll() is not None:
            _archiving["pending"] = False
        if opts is not None:
            os.environ["SPARK_SUBMIT_OPTS"] = opts
            _archiving["applied"] = True


def pytest_sessionfinish(session):
    proc = _archiving["proc"]
    if proc is not None and proc.poll() is None:
        try:
            proc.wait(120)  # a whole archive for the next run
        except Exception:  # noqa: BLE001 - never fail a run over its cache
            proc.kill()
        from tests import jvm_archive

        jvm_archive.finish_archiving(proc)


def pytest_collection_modifyitems(items):
    """Tests marked ``slow`` (not in CI) run for minutes by design: an hour each, unless they
    set their own ``timeout``. A test that uses the Spark session (any fixture built on
    ``spark``) is marked ``spark``: ``make test-fast`` runs the others, without a JVM."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()) or item.module.__name__.rpartition(
                ".")[2] in STARTS_SPARK_ITSELF:
            item.add_marker(pytest.mark.spark)
        if item.get_closest_marker("slow") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(3600))
