"""The shared catalog (catalog/spark_catalog.py): WaveSQL's catalog in a Hive metastore that
several processes (hosts) use at once.

A standalone metastore service runs on loopback (tests/hive_metastore.py); WaveSQL runs in
processes of its own (tests/shared_catalog_worker.py), since the tests' own Spark session is
not Hive-enabled. The oracles are independent of WaveSQL's code: plain Spark SQL over the
metastore (``SHOW TABLES``, ``SHOW TBLPROPERTIES``, ``SELECT`` from the stream's view),
pandas over the Parquet files, and the clock for the lease's expiry.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
import uuid
import wave
from pathlib import Path

import pytest

from tests.hive_metastore import hive_metastore  # noqa: F401 - the fixture
from tests.shared_catalog_worker import SERIAL

pytestmark = pytest.mark.spark
ROOT = Path(__file__).resolve().parent.parent
LEASE_SECONDS = 4.5
#: the workers' Spark: small, no UI (as tests/conftest.py's session)
SMALL_SPARK = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
               "spark.default.parallelism": "1", "spark.driver.memory": "1g"}


def _trades(folder: Path):
    import pandas as pd

    folder.mkdir()
    frames = []
    for i in range(2):
        df = pd.DataFrame({
            "sym": ["A", "B", "C"],
            "px": [10.0 + i, 20.5 + i, 30.25 + i],
            "ts": pd.to_datetime([f"2024-01-0{i + 1} 00:00:0{k}" for k in range(3)],
                                 utc=True),
        })
        df.to_parquet(folder / f"part-{i}.parquet", index=False, coerce_timestamps="us")
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def _wav(folder: Path) -> None:
    folder.mkdir()
    with wave.open(str(folder / "rec.wav"), "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(8000)
        w.writeframes(bytes(4 * 800))


def _env() -> dict:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_two_processes_share_one_catalog(hive_metastore, tmp_path):  # noqa: F811
    """Both processes see each other's definitions; a concurrent replace of one object with
    expected_version gives one success and one CONFLICT, without it the versions are
    serialised; a query over a shared stream matches pandas; plain Spark sees every object
    under its name with its definition; a lease held by one is refused to the other and,
    once its holder is SIGKILLed, free after it expires."""
    db = "shared_" + uuid.uuid4().hex[:8]
    trades = _trades(tmp_path / "trades")
    _wav(tmp_path / "wavs")
    folder = tmp_path / "meet"
    folder.mkdir()
    job_file = tmp_path / "count.wsql"
    job_file.write_text("SELECT count(*) AS n FROM trades;\n")
    settings = {"folder": str(folder), "database": db, "trades": str(tmp_path / "trades"),
                "wavs": str(tmp_path / "wavs"), "sink": str(tmp_path / "sink"),
                "lease_seconds": LEASE_SECONDS, "metastore_port": hive_metastore.port,
                "job_file": str(job_file), "marker": f"marker_{db}"}
    procs = {}
    for role in "ab":
        (tmp_path / f"host-{role}").mkdir()  # each its own working directory and warehouse
        settings["spark"] = {**SMALL_SPARK,
                             **hive_metastore.spark_config(tmp_path / f"scratch-{role}")}
        path = tmp_path / f"{role}.settings.json"
        path.write_text(json.dumps(settings))
        procs[role] = subprocess.Popen(
            [sys.executable, "-m", "tests.shared_catalog_worker", role, str(path)],
            cwd=tmp_path / f"host-{role}", env=_env(), stdout=open(tmp_path / f"{role}.log", "w"),
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        hive_metastore.wait()  # started by the fixture; the workers start Spark meanwhile
        deadline = time.monotonic() + 240
        while not (folder / "b.refused").exists():
            for role, proc in procs.items():
                assert proc.poll() is None, (tmp_path / f"{role}.log").read_text()[-4000:]
            assert time.monotonic() < deadline, "the workers did not get to the lease"
            time.sleep(0.1)
        os.killpg(procs["a"].pid, signal.SIGKILL)  # the lease's holder dies holding it
        killed_at = time.time()
        procs["a"].wait(30)
        (folder / "a.killed").touch()
        assert procs["b"].wait(120) == 0, (tmp_path / "b.log").read_text()[-4000:]
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    a = json.loads((folder / "a.json").read_text())
    b = json.loads((folder / "b.json").read_text())
    print("seconds since start:", {"a": a["seconds"], "b": b["seconds"]})
    # (6) what a write costs, as the metastore's own audit log counts the calls it served
    calls = hive_metastore.calls(settings["marker"])
    calls.pop("end", None)  # (the rest of the run)
    for step, made in calls.items():
        kinds = collections.Counter(c.split()[1].rstrip(":") for c in made)
        print(f"metastore calls of {step}: {len(made)} {dict(kinds)}")
    # a replace: one conditional create (the version), the view's properties altered in
    # place (no drop + create), a probe for a newer version; was 44 calls with the read-back,
    # the foreign-table check, a listing and the view read again after each write
    replace = [c.split()[1].rstrip(":") for c in calls["replace"]]
    assert replace.count("create_table") == 1 and "drop_table" not in replace, calls["replace"]
    assert len(calls["replace"]) <= 28 and len(calls["replace2"]) <= 28
    assert len(calls["create"]) <= 38 and len(calls["drop"]) <= 27 and len(calls["get"]) <= 5

    # (1) each saw the other's definitions (b's view of the catalog after both created)
    assert a["catalog"] == b["catalog"] == "SparkCatalog"
    for seen in (a, b):
        assert {"trades", "shared", "mic", "alerts"} <= set(seen["names"])
    assert b["others"]["trades"]["path"] == str(tmp_path / "trades")
    assert b["others"]["trades"]["event_time"] == "ts"
    assert a["others"]["mic"]["rate_hz"] == 8000.0
    assert a["others"]["alerts"]["path"] == str(tmp_path / "sink")

    oracle = b["oracle"]
    tables = oracle["tables"]
    # (3) plain Spark: every object under its name, its definition in the properties
    assert {"trades", "mic", "alerts", "shared", "counter"} <= set(tables)
    for name, kind in (("trades", "STREAM"), ("mic", "SIGNAL"), ("alerts", "SINK"),
                       ("shared", "VIEW"), ("counter", "VIEW")):
        props = tables[name]
        assert props["wavesql.kind"] == kind
        definition = json.loads(props["wavesql.definition"])
        assert definition["name"] == name and definition["kind"] == kind
        assert int(props["wavesql.version"]) == definition["version"]
    assert json.loads(tables["mic"]["wavesql.definition"])["rate_hz"] == 8000.0

    # the race with expected_version: the metastore shows exactly one winner at version 2
    shared = json.loads(tables["shared"]["wavesql.definition"])
    assert shared["version"] == 2 and shared["sql"] in ("SELECT 'a' AS who", "SELECT 'b' AS who")
    winner, loser = (a, b) if shared["sql"] == "SELECT 'a' AS who" else (b, a)
    assert winner["race"] == {"ok": 2}
    assert loser["race"]["error"] == "CONFLICT", loser["race"]
    assert "expected version 1, but it is at version 2" in loser["race"]["message"]
    assert sorted(v for v in oracle["history"] if v.startswith("shared__v")) == \
        ["shared__v000001", "shared__v000002"]

    # serialised replaces: 2 x SERIAL writes, versions 1..2 x SERIAL, none lost, each
    # process's in its order
    n = 2 * SERIAL
    counter = json.loads(tables["counter"]["wavesql.definition"])
    assert counter["version"] == n
    assert sorted(v for v in oracle["history"] if v.startswith("counter__v")) == \
        [f"counter__v{v:06d}" for v in range(1, n + 1)]
    assert sorted(a["serial"] + b["serial"]) == list(range(1, n + 1))
    written = b["counter_history"]
    assert len(written) == n and a["counter_history"] == written
    for role in "ab":
        mine = [w for w in written if w.startswith(f"SELECT '{role}")]
        assert mine == [f"SELECT '{role}{i}' AS who" for i in range(SERIAL)]

    # (2) the query over the shared stream, as pandas reads the files; and plain Spark
    # reads the stream's view over the same files
    expected = sorted([r.sym, float(r.px), r.ts.strftime("%Y-%m-%d %H:%M:%S")]
                      for r in trades.itertuples())
    assert sorted(a["query"]) == expected
    assert sorted(oracle["trades_rows"]) == expected
    assert tables["trades"]["wavesql.view"] == "files"

    # (5) nothing host-local: both "hosts" (own working directory, own warehouse) default a
    # Kafka sink's checkpoints to one place, in the database's location in the metastore
    # (as plain Spark reads it), under neither's working directory
    location = oracle["location"].removeprefix("file:")
    assert a["state"]["kafka"] == b["state"]["kafka"] == \
        f"{location}/_wavesql_state/kafka_sinks/events_out"
    assert a["state"]["cwd"] != b["state"]["cwd"]
    for seen in (a, b):
        assert not a["state"]["kafka"].startswith(seen["state"]["cwd"])
    assert not list((tmp_path / "host-a").rglob("*lock*"))
    assert not list((tmp_path / "host-b").rglob("*lock*"))
    # a run of the file and an INSERT job held by a (as another host) refuse b's
    assert b["refused_run"]["status"] == "skipped", b["refused_run"]
    assert b["refused_run"]["code"] == "RUN_IN_PROGRESS"
    assert "another-host" in b["refused_run"]["message"]
    assert b["refused_insert"]["code"] == "RUN_IN_PROGRESS", b["refused_insert"]
    assert "another-host" in b["refused_insert"]["message"]
    assert b["later_run"]["status"] == "ok", b["later_run"]
    assert [r["status"] for r in b["runs"]] == ["ok", "skipped"]
    assert {r["file"] for r in b["runs"]} == {os.path.realpath(job_file)}

    # (7) pruning (catalog.prune, the SQLite file's rules: tests/test_prune.py): the newest
    # 2 versions of every name and the newest run of the file are left, as plain Spark lists
    # them; numbering goes on
    names = collections.Counter(v.rsplit("__v", 1)[0] for v in oracle["history"])
    assert b["pruned"] == {"versions": sum(max(0, n - 2) for n in names.values()),
                           "runs": 1}
    left = b["after_prune"]
    assert [v for v in left["history"] if v.startswith("counter__v")] == \
        [f"counter__v{v:06d}" for v in (2 * SERIAL - 1, 2 * SERIAL)]
    assert collections.Counter(v.rsplit("__v", 1)[0] for v in left["history"]) == \
        {name: min(n, 2) for name, n in names.items()}
    assert left["runs"] == 1
    assert left["counter"] == [2 * SERIAL - 1, 2 * SERIAL]
    assert left["next"] == 2 * SERIAL + 1

    # (8) a catalog a newer WaveSQL wrote (format 99, in the main database or a companion)
    # is CATALOG_TOO_NEW, another application's database CATALOG_CORRUPT -- with nothing
    # created or changed (the databases plain Spark lists are those the test made); an
    # empty database made beforehand (to choose the location) is used
    refused = a["refusals"]
    for what, code in (("newer", "CATALOG_TOO_NEW"), ("newer2", "CATALOG_TOO_NEW"),
                       ("other", "CATALOG_CORRUPT"), ("other2", "CATALOG_CORRUPT")):
        assert refused[what].get("code") == code, (what, refused[what])
    assert "format version 99" in refused["newer"]["message"]
    assert f"`{db}_other2_runs`" in refused["other2"]["message"]
    assert "holds tables" in refused["other"]["message"]
    made = {f"{db}_{n}" for n in ("newer_history", "newer2", "other", "other2_runs")}
    adopted = {f"{db}_adopted{suffix}" for suffix in ("", "_history", "_runs", "_leases")}
    assert set(refused["databases"]) == {db, f"{db}_history", f"{db}_runs", f"{db}_leases"} \
        | made | adopted
    assert refused["other_tables"] == ["sales"] and "wavesql" not in refused["other_properties"]
    assert refused["adopted"]["ok"] == str(folder / "adopted-location" / "_wavesql_state")

    # (4) the lease: refused while a held it; free once a's last renewal expired
    assert "second_holder" not in b
    assert b["refused"]["code"] == "RUN_IN_PROGRESS"
    assert "another-host" in b["refused"]["message"]
    waited = b["lease_taken_at"] - killed_at
    assert LEASE_SECONDS * 2 / 3 - 1 <= waited <= LEASE_SECONDS + 15, waited


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _FakeSpark:
    """Just enough of a SparkSession for the configuration checks (no JVM)."""

    def __init__(self, values):
        self.conf = _Conf(values)


@pytest.mark.parametrize("conf, says", [
    ({}, "keeps an in-memory catalog"),
    ({"spark.sql.catalogImplementation": "hive"}, "no shared Hive metastore is configured"),
    ({"spark.sql.catalogImplementation": "hive",
      "spark.hadoop.javax.jdo.option.ConnectionURL": "jdbc:derby:;databaseName=m;create=true"},
     "embedded Derby"),
])
def test_a_session_that_cannot_share_is_refused(conf, says):
    """CATALOG_UNREACHABLE, saying what to configure, before anything is written."""
    from wavesql.catalog import SparkCatalog
    from wavesql.errors import WaveSQLError

    with pytest.raises(WaveSQLError) as info:
        SparkCatalog(_FakeSpark(conf), "wavesql")
    assert info.value.code == "CATALOG_UNREACHABLE"
    assert says in info.value.message
    assert "hive.metastore.uris=thrift://" in info.value.hint


def test_catalog_spellings():
    from wavesql.catalog import shared_database
    from wavesql.errors import WaveSQLError

    assert shared_database("spark") == "wavesql"
    assert shared_database("spark:Ops_1") == "ops_1"
    assert shared_database("catalog.db") is None
    assert shared_database(Path("spark")) is None  # a path object is always a file
    with pytest.raises(WaveSQLError) as info:
        shared_database("spark:no-dashes")
    assert info.value.code == "INVALID_OPTION"
    # names the metastore would refuse or fold are kept under a hash (properties keep them)
    from wavesql.catalog.spark_catalog import table_name

    assert table_name("trades_2") == "trades_2"
    odd = table_name("straße-1")
    assert odd.startswith("wavesql_") and odd == table_name("straße-1") != table_name("x-1")


PLAIN_SPARK = """
import json, sys
from pyspark.sql import SparkSession
conf = json.loads(sys.argv[1])
b = SparkSession.builder.master("local[1]")
for k, v in conf.items():
    b = b.config(k, v)
spark = b.getOrCreate()
db = sys.argv[2]
out = {}
for row in spark.sql(f"SHOW TABLES IN {db}").collect():
    out[row.tableName] = {r.key: r.value for r in spark.sql(
        f"SHOW TBLPROPERTIES {db}.{row.tableName}").collect()}
out["_rows"] = [list(r) for r in spark.sql(
    f"SELECT sym, px FROM {db}.trades ORDER BY px").collect()]
try:
    spark.sql(f"SELECT * FROM {db}.mic").collect()
    out["_mic"] = "read"
except Exception as exc:
    out["_mic"] = str(exc)
print("RESULT " + json.dumps(out))
"""


@pytest.mark.slow
def test_cli_and_plain_pyspark(hive_metastore, tmp_path):  # noqa: F811
    """``wavesql --catalog spark:<db>`` defines objects, runs a query file and shows its run
    history (``wavesql runs``, read from the metastore); a PySpark process that never
    imports WaveSQL lists them, reads their properties and the stream's rows; querying a
    signal's view from plain Spark says to use WaveSQL; an unreachable metastore is
    CATALOG_UNREACHABLE naming its URI."""
    db = "cli_" + uuid.uuid4().hex[:8]
    _trades(tmp_path / "trades")
    _wav(tmp_path / "wavs")
    hive_metastore.wait()
    conf = {**SMALL_SPARK, **hive_metastore.spark_config(tmp_path / "scratch")}
    args = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    ddl = (f"CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP) FROM "
           f"'{tmp_path / 'trades'}' FORMAT parquet EVENT TIME ts; "
           f"CREATE SIGNAL mic (ch1 FLOAT, ch2 FLOAT) RATE 8000 HZ FROM '{tmp_path / 'wavs'}' "
           "FORMAT wav; SELECT count(*) AS n FROM trades")
    done = subprocess.run([sys.executable, "-m", "wavesql.cli", "--catalog", f"spark:{db}",
                           *args, "-c", ddl], cwd=tmp_path, env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "6" in done.stdout

    # a query file run against the shared catalog: its run history is in the metastore
    job = tmp_path / "count.wsql"
    job.write_text("SELECT count(*) AS n FROM trades;\n")
    for verb in (["run", str(job)], ["runs"]):
        done = subprocess.run([sys.executable, "-m", "wavesql.cli", "--catalog",
                               f"spark:{db}", *args, *verb], cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "count.wsql" in done.stdout and "ok" in done.stdout, done.stdout

    plain = subprocess.run([sys.executable, "-c", PLAIN_SPARK, json.dumps(conf), db],
                           cwd=tmp_path, env=_env(), capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0, plain.stderr[-3000:]
    out = json.loads(plain.stdout.split("RESULT ", 1)[1])
    assert out["trades"]["wavesql.kind"] == "STREAM"
    assert json.loads(out["trades"]["wavesql.definition"])["event_time"] == "ts"
    assert out["mic"]["wavesql.kind"] == "SIGNAL"
    assert len(out["_rows"]) == 6
    assert "is a WaveSQL signal" in out["_mic"]

    bad = dict(conf, **{"spark.hadoop.hive.metastore.uris": "thrift://127.0.0.1:9",
                        "spark.hadoop.hive.metastore.connect.retries": "1"})
    args = [a for k, v in bad.items() for a in ("--conf", f"{k}={v}")]
    done = subprocess.run([sys.executable, "-m", "wavesql.cli", "--catalog", f"spark:{db}",
                           *args, "-c", "SELECT 1"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0
    assert "CATALOG_UNREACHABLE" in done.stdout + done.stderr
    assert "thrift://127.0.0.1:9" in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
