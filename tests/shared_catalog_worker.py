"""One WaveSQL process of tests/test_shared_catalog.py: ``python -m tests.shared_catalog_worker
ROLE SETTINGS.json``. Two run at once (roles ``a`` and ``b``) against one Hive metastore,
meeting at files in a shared folder; each writes what it saw to ``<role>.json``.

Role a defines the stream over the test's Parquet files and queries it; role b defines a
signal and a sink, and at the end reads the metastore with plain Spark SQL (the test's
oracle: not WaveSQL's code). Both replace one view at once with ``expected_version`` (one
wins, one gets CONFLICT) and another, three times each, without (serialised versions). Then
the lease: a holds one (as if from another host, so only expiry can free it), b is refused,
the test SIGKILLs a, and b waits until it gets the lease.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


#: replaces of one view by each process at once
SERIAL = 3


def _wait_for(path: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {path.name} after {timeout} s")
        time.sleep(0.05)


def _wait_for_port(port: int, timeout: float = 180) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _meet(folder: Path, role: str, step: str) -> None:
    """Wait until both roles reached ``step``."""
    (folder / f"{role}.{step}").touch()
    _wait_for(folder / f"{'b' if role == 'a' else 'a'}.{step}")


def main(role: str, settings_file: str) -> None:
    import wavesql
    from wavesql.catalog import ViewDef
    from wavesql.errors import WaveSQLError

    s = json.loads(Path(settings_file).read_text())
    folder, db = Path(s["folder"]), s["database"]
    began = time.monotonic()
    seen: dict = {"role": role, "seconds": {}}

    def phase(name: str) -> None:  # how long each step took (the test prints them)
        seen["seconds"][name] = round(time.monotonic() - began, 1)

    from wavesql.spark import start_spark

    # Spark starts while the metastore service may still be starting (tests/hive_metastore.py)
    spark = start_spark("local[1]", s["spark"])
    _wait_for_port(s["metastore_port"])
    ws = wavesql.connect(spark=spark, catalog=f"spark:{db}")
    phase("connected")
    cat = ws.catalog.catalog  # the SparkCatalog under the session's temporary views
    seen["catalog"] = type(cat).__name__
    if role == "a":
        ws.sql(f"CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP) "
               f"FROM '{s['trades']}' FORMAT parquet EVENT TIME ts")
        cat.create(ViewDef("shared", "SELECT 'first' AS who"))
    else:
        ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT, ch2 FLOAT) RATE 8000 HZ FROM "
               f"'{s['wavs']}' FORMAT wav")
        ws.sql(f"CREATE SINK alerts TO '{s['sink']}' FORMAT parquet")
    phase("created")
    _meet(folder, role, "created")
    # each sees what the other process defined
    seen["names"] = cat.names()
    seen["others"] = {d.name: d.to_dict() for d in cat.list()}

    # one replace each, at once, both expecting version 1: one wins, one CONFLICT
    phase("listed")
    _meet(folder, role, "race")
    try:
        stored = cat.create(ViewDef("shared", f"SELECT '{role}' AS who"), replace=True,
                            expected_version=1)
        seen["race"] = {"ok": stored.version}
    except WaveSQLError as err:
        seen["race"] = {"error": err.code, "message": err.message}

    # three replaces each, at once, without expected_version: serialised, none lost
    phase("raced")
    _meet(folder, role, "serial")
    seen["serial"] = [cat.create(ViewDef("counter", f"SELECT '{role}{i}' AS who"),
                                 replace=True).version for i in range(SERIAL)]
    phase("serialised")
    _meet(folder, role, "written")
    seen["counter_history"] = [d.sql for d in cat.history("counter")]

    _meet(folder, role, "measure")
    if role == "a":  # alone: b waits, so the metastore's log holds a's calls only
        _measure(ws.spark, cat, s["marker"])
        (folder / "a.measured").touch()
    else:
        _wait_for(folder / "a.measured")
    phase("measured")
    _hosts(ws, cat, s, folder, role, seen)
    phase("run locks")

    if role == "a":
        rows = ws.sql("SELECT sym, px, CAST(ts AS STRING) AS ts FROM trades").collect()
        seen["query"] = [[r.sym, r.px, r.ts] for r in rows]
        phase("queried")
        seen["refusals"] = _refusals(ws.spark, db, folder)
        phase("refusals")
        (folder / "a.json").write_text(json.dumps(seen, default=str))
        # the lease, held as if by a process of another host: only expiry frees it
        import socket

        socket.gethostname = lambda: "another-host"
        with cat.lease("job:shared-test", "job shared-test", "wait for it",
                       seconds=s["lease_seconds"]):
            (folder / "a.holds").touch()
            time.sleep(3600)  # until the test kills this process
    else:
        _wait_for(folder / "a.holds")
        try:
            with cat.lease("job:shared-test", "job shared-test", "wait for it"):
                seen["second_holder"] = "got it while a held it"
        except WaveSQLError as err:
            seen["refused"] = {"code": err.code, "message": err.message}
        (folder / "b.refused").touch()
        _wait_for(folder / "a.killed")
        with cat.lease("job:shared-test", "job shared-test", "wait for it", wait=120):
            seen["lease_taken_at"] = time.time()
        phase("lease taken")
        seen["oracle"] = _plain_spark(ws.spark, db)
        phase("oracle read")
        # retention: the newest 2 versions of each name, the newest run of each file
        seen["pruned"] = cat.prune(keep_versions=2, keep_runs=1)
        seen["after_prune"] = {
            "history": sorted(r.tableName for r in ws.spark.sql(
                f"SHOW TABLES IN {db}_history").collect() if not r.isTemporary),
            "runs": len(ws.spark.sql(f"SHOW TABLES IN {db}_runs").collect()),
            "counter": [d.version for d in cat.history("counter")],
            "next": cat.create(ViewDef("counter", "SELECT 'after' AS who"),
                               replace=True).version}
        phase("pruned")
        (folder / "b.json").write_text(json.dumps(seen, default=str))


def _measure(spark, cat, marker: str) -> None:
    """The metastore calls of catalog writes and reads, each phase begun by a marker call
    (tests/hive_metastore.py ``calls`` cuts the metastore's audit log there)."""
    from wavesql.catalog import ViewDef

    def mark(phase: str) -> None:
        try:
            spark.sql(f"SHOW TBLPROPERTIES default.{marker}_{phase}").collect()
        except Exception:  # noqa: BLE001 - it does not exist: only the call matters
            pass

    mark("create")
    cat.create(ViewDef("measured", "SELECT 1 AS v"))
    mark("replace")
    cat.create(ViewDef("measured", "SELECT 2 AS v"), replace=True)
    mark("replace2")
    cat.create(ViewDef("measured", "SELECT 3 AS v"), replace=True, expected_version=2)
    mark("get")
    cat.get("measured")
    mark("drop")
    cat.drop("measured")
    mark("end")


def _hosts(ws, cat, s: dict, folder: Path, role: str, seen: dict) -> None:
    """Nothing host-local: each process (its own working directory and warehouse, as on a
    host of its own) works out the same default checkpoint of a Kafka sink; a, as if on
    another host, runs the query file (its lock) and holds the INSERT job's guard; b's run
    of the same file is then refused (recorded ``skipped``), and so is its INSERT of the
    same statement; once a is done, b's run goes ahead."""
    import socket

    from wavesql import jobs
    from wavesql.errors import WaveSQLError

    if role == "b":  # (stored directly: CREATE SINK ... TO KAFKA asks the broker)
        from wavesql.catalog import SinkDef

        cat.create(SinkDef("events_out", "events", "json", options={"bootstrap": "x:9"},
                           source="kafka"))
    _meet(folder, role, "sink")
    seen["state"] = {"cwd": os.getcwd(), "root": jobs.state_root(ws),
                     "kafka": jobs._kafka_root(ws, cat.require("events_out", "SINK"))}
    insert = "INSERT INTO alerts SELECT sym, px, ts FROM trades"
    if role == "a":
        real = socket.gethostname
        socket.gethostname = lambda: "another-host"  # its flock would be invisible to b
        try:
            with jobs.file_lock(cat, s["job_file"]), jobs._job_guard(
                    ws, s["sink"], jobs.job_id(None, insert), "INSERT INTO alerts"):
                (folder / "a.locked").touch()
                _wait_for(folder / "b.tried")
        finally:
            socket.gethostname = real
        (folder / "a.released").touch()
        return
    _wait_for(folder / "a.locked")
    run = jobs.run_file(ws, s["job_file"])
    seen["refused_run"] = {"status": run.status, "code": getattr(run.error, "code", None),
                           "message": getattr(run.error, "message", str(run.error))}
    try:
        ws.sql(insert)
        seen["refused_insert"] = {"code": None}
    except WaveSQLError as err:
        seen["refused_insert"] = {"code": err.code, "message": err.message}
    (folder / "b.tried").touch()
    _wait_for(folder / "a.released")
    run = jobs.run_file(ws, s["job_file"])
    seen["later_run"] = {"status": run.status, "error": str(run.error)}
    seen["runs"] = [{k: r[k] for k in ("file", "status", "host", "error")}
                    for r in cat.runs(s["job_file"])]


def _refusals(spark, db: str, folder: Path) -> dict:
    """Opening catalogs that plain Spark SQL set up as a newer WaveSQL (format version 99)
    or another application would have left them: refused, with nothing written; and an
    empty database an administrator made (to choose its location): used."""
    from wavesql.catalog import SparkCatalog
    from wavesql.errors import WaveSQLError

    def attempt(name: str) -> dict:
        try:
            return {"ok": SparkCatalog(spark, name).state_location()}
        except WaveSQLError as err:
            return {"code": err.code, "message": err.message}

    marked = "'wavesql.application' = 'wavesql', 'wavesql.format_version' = '99'"
    spark.sql(f"CREATE DATABASE {db}_newer_history WITH DBPROPERTIES ({marked})")
    spark.sql(f"CREATE DATABASE {db}_newer2 WITH DBPROPERTIES ({marked})")
    spark.sql(f"CREATE DATABASE {db}_other")
    spark.sql(f"CREATE VIEW {db}_other.sales AS SELECT 1 AS x")
    spark.sql(f"CREATE DATABASE {db}_other2_runs")
    spark.sql(f"CREATE DATABASE {db}_adopted LOCATION '{folder / 'adopted-location'}'")
    out = {what: attempt(f"{db}_{what}")
           for what in ("newer", "newer2", "other", "other2", "adopted")}
    out["databases"] = sorted(r[0] for r in spark.sql("SHOW DATABASES").collect()
                              if r[0].startswith(db))
    out["other_tables"] = [r.tableName for r in spark.sql(
        f"SHOW TABLES IN {db}_other").collect()]
    out["other_properties"] = next(str(r[1]) for r in spark.sql(
        f"DESCRIBE DATABASE EXTENDED {db}_other").collect() if r[0].lower() == "properties")
    return out


def _plain_spark(spark, db: str) -> dict:
    """What plain Spark SQL reads from the metastore (the test's oracle)."""
    out: dict = {"tables": {}, "history": []}
    for row in spark.sql(f"SHOW TABLES IN {db}").collect():
        if row.isTemporary:
            continue
        props = {r.key: r.value for r in spark.sql(
            f"SHOW TBLPROPERTIES {db}.{row.tableName}").collect()}
        out["tables"][row.tableName] = props
    out["history"] = sorted(r.tableName for r in spark.sql(
        f"SHOW TABLES IN {db}_history").collect() if not r.isTemporary)
    out["location"] = next(r[1] for r in spark.sql(f"DESCRIBE DATABASE {db}").collect()
                           if r[0].lower() == "location")
    out["trades_rows"] = [list(r) for r in spark.sql(
        f"SELECT sym, px, CAST(ts AS STRING) FROM {db}.trades").collect()]
    return out


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main(sys.argv[1], sys.argv[2])
