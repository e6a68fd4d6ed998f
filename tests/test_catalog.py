"""Tests of the persistent catalog (wavesql.catalog): definitions, the SQLite store, its
refusal to touch foreign or newer files, and its behaviour under concurrent processes.

Everything runs on real SQLite files in pytest's tmp_path; no Spark, no mocks.
"""

from __future__ import annotations

import doctest
import json
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import wavesql.catalog
import wavesql.catalog.objects
import wavesql.catalog.store
from wavesql.catalog import (
    CATALOG_ENV,
    FORMAT_VERSION,
    MIGRATIONS,
    Catalog,
    Column,
    Definition,
    SignalDef,
    SinkDef,
    StreamDef,
    Tombstone,
    ViewDef,
)
from wavesql.errors import WaveSQLError


# -- helpers ------------------------------------------------------------------------------

def make_stream(name="trades", **kw) -> StreamDef:
    args = dict(
        columns=(Column("sym", "STRING"), Column("px", "DECIMAL(10,2)"), Column("qty", "INT"),
                 Column("ts", "TIMESTAMP"), Column("punct", "BOOLEAN")),
        path="data/trades/", format="parquet",
        options=(("mergeSchema", "true"), ("pathGlobFilter", "*.parquet")),
        event_time="ts", watermark_us=5_000_000, progress_column="punct",
        heartbeat_us=250_000,
    )
    args.update(kw)
    return StreamDef(name, **args)


def make_signal(name="mic", **kw) -> SignalDef:
    args = dict(
        channels=[Column(f"ch{i}", "FLOAT") for i in range(1, 5)], rate_hz=48000.5,
        path="recordings/array*.wav", format="wav", options={"channels": "4"},
        segment=1024, epoch_us=1_700_000_000_000_000,
    )
    args.update(kw)
    return SignalDef(name, **args)


def make_view(name="voiced", **kw) -> ViewDef:
    args = dict(sql="SELECT start_time(ch1) AS t FROM mic [SAMPLES 4096]",
                columns=(Column("t", "TIMESTAMP"), Column("sd", "ARRAY<FLOAT>")))
    args.update(kw)
    return ViewDef(name, **args)


def make_sink(name="alerts", **kw) -> SinkDef:
    args = dict(path="out/alerts", format="delta", columns=(Column("t", "TIMESTAMP"),),
                options=(("checkpointLocation", "chk/alerts"),))
    args.update(kw)
    return SinkDef(name, **args)


MAKERS = {"STREAM": make_stream, "SIGNAL": make_signal, "VIEW": make_view, "SINK": make_sink}


def raises(code: str):
    """pytest.raises for a WaveSQLError with a given code."""

    class _Check:
        def __enter__(self):
            self._ctx = pytest.raises(WaveSQLError)
            self.info = self._ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self._ctx.__exit__(*exc)
            assert self.info.value.code == code, str(self.info.value)
            return handled

    return _Check()


def bookkeeping_free(defn: Definition) -> Definition:
    return defn.with_version(0, "", "")


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file in a directory with its bytes, to prove nothing was written."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


@pytest.fixture
def path(tmp_path) -> Path:
    # A not-yet-existing subdirectory: the catalog must create its parent itself.
    return tmp_path / "state" / "wavesql_catalog.db"


@pytest.fixture
def cat(path):
    with Catalog(path) as c:
        yield c


# -- definitions --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_definition_dict_round_trip_is_exact_and_json_ready(kind):
    defn = MAKERS[kind]().with_version(7, "2024-01-01T00:00:00+00:00", "2024-01-02T00:00:00+00:00")
    data = json.loads(json.dumps(defn.to_dict()))
    assert data["kind"] == kind
    again = Definition.from_dict(data)
    assert again == defn and type(again) is type(defn)
    assert type(defn).from_dict(data) == defn


def test_definitions_normalise_inputs():
    s = StreamDef("t", [("a", "INT"), {"name": "ts", "type": "TIMESTAMP"}], "p", "PARQUET",
                  options={"k": "v"}, event_time="TS")
    assert s.columns == (Column("a", "INT"), Column("ts", "TIMESTAMP"))
    assert s.options == (("k", "v"),) and s.format == "parquet"
    assert s.column("A") == Column("a", "INT") and s.kind == "STREAM"
    assert make_signal(rate_hz=8000).rate_hz == 8000.0
    assert isinstance(make_signal(rate_hz=8000).rate_hz, float)
    assert make_signal().channel("CH2") == Column("ch2", "FLOAT")


@pytest.mark.parametrize("rate", [0, 0.0, -1, -48000.0, math.nan, math.inf, -math.inf, "fast",
                                  None, True])
def test_bad_rate_is_invalid_rate(rate):
    with raises("INVALID_RATE") as info:
        make_signal(rate_hz=rate)
    assert "RATE" in info.value.message and info.value.hint


@pytest.mark.parametrize("segment", [0, -4096, 1.5, "4096", True])
def test_bad_segment_is_invalid_option(segment):
    with raises("INVALID_OPTION") as info:
        make_signal(segment=segment)
    assert "SEGMENT" in info.value.message


def test_event_time_must_name_a_declared_column():
    with raises("UNKNOWN_COLUMN") as info:
        make_stream(event_time="tss")
    assert "EVENT TIME" in info.value.message and "`ts`" in info.value.hint
    with raises("UNKNOWN_COLUMN"):
        make_stream(progress_column="nope")
    assert make_stream(event_time="TS").event_time == "TS"  # case-insensitive match


@pytest.mark.parametrize("build, code", [
    (lambda: make_stream(columns=[("ts", "TIMESTAMP"), ("TS", "BIGINT")]), "DUPLICATE_COLUMN"),
    (lambda: make_signal(channels=[("ch1", "FLOAT"), ("Ch1", "FLOAT")]), "DUPLICATE_COLUMN"),
    (lambda: make_view(columns=[("a", "INT"), ("A", "INT")]), "DUPLICATE_COLUMN"),
    (lambda: make_stream(columns=[], event_time=None, progress_column=None), "INVALID_OPTION"),
    (lambda: make_signal(channels=[]), "INVALID_OPTION"),
    (lambda: make_stream(watermark_us=-1), "INVALID_OPTION"),
    (lambda: make_stream(heartbeat_us=-5), "INVALID_OPTION"),
    (lambda: make_stream(name=""), "INVALID_OPTION"),
    (lambda: make_stream(name="   "), "INVALID_OPTION"),
    (lambda: make_stream(path=""), "INVALID_OPTION"),
    (lambda: make_sink(format=""), "INVALID_OPTION"),
    (lambda: make_view(sql="  "), "INVALID_OPTION"),
    (lambda: Column("", "INT"), "INVALID_OPTION"),
    (lambda: Column("a", ""), "INVALID_OPTION"),
    (lambda: make_stream(options={"k": 1}), "INVALID_OPTION"),
    (lambda: make_stream(options=[("Header", "true"), ("header", "false")]), "INVALID_OPTION"),
    (lambda: Definition.from_dict({"kind": "TABLE", "name": "x"}), "INVALID_OPTION"),
    (lambda: Definition.from_dict({**make_view().to_dict(), "extra": 1}), "INVALID_OPTION"),
    (lambda: Definition.from_dict({"kind": "VIEW", "name": "x"}), "INVALID_OPTION"),
])
def test_invalid_definitions_are_rejected_at_construction(build, code):
    with raises(code):
        build()


def test_definitions_are_frozen():
    with pytest.raises(Exception):
        make_stream().path = "elsewhere"  # type: ignore[misc]


# -- persistence --------------------------------------------------------------------------

@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_every_kind_round_trips_through_the_file(path, kind):
    original = MAKERS[kind]()
    with Catalog(path) as cat:
        stored = cat.create(original)
    assert stored.version == 1 and stored.created_at and stored.updated_at == stored.created_at
    assert bookkeeping_free(stored) == original
    with Catalog(path) as again:  # a new object: nothing can come from memory
        assert again.get(original.name) == stored
        assert again.require(original.name, kind) == stored


def test_persists_across_processes(path):
    with Catalog(path) as cat:
        stored = [cat.create(make()) for make in MAKERS.values()]
    code = ("import json, sys; from wavesql.catalog import Catalog; "
            "c = Catalog(sys.argv[1]); print(json.dumps([d.to_dict() for d in c.list()])); "
            "c.close()")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                         text=True, timeout=60, check=True).stdout
    seen = [Definition.from_dict(d) for d in json.loads(out)]
    assert seen == sorted(stored, key=lambda d: d.key)


def test_parent_directory_is_created_and_path_is_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with Catalog(Path("deep/er/cat.db")) as cat:
        cat.create(make_view())
        assert cat.path == str(tmp_path / "deep" / "er" / "cat.db")
    assert (tmp_path / "deep" / "er" / "cat.db").stat().st_size > 0


def test_default_location_and_environment_variable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CATALOG_ENV, raising=False)
    with Catalog() as cat:
        assert cat.path == str(tmp_path / "wavesql_catalog.db")
    env_file = tmp_path / "from_env" / "c.db"
    monkeypatch.setenv(CATALOG_ENV, str(env_file))
    with Catalog(None) as cat:
        cat.create(make_sink())
    with Catalog(env_file) as cat:
        assert cat.names() == ["alerts"]


def test_memory_catalog(tmp_path):
    with Catalog(":memory:") as cat:
        cat.create(make_stream())
        assert cat.names() == ["trades"]


def test_zero_byte_file_is_an_empty_catalog(path):
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    with Catalog(path) as cat:
        assert cat.list() == []
        cat.create(make_view())
    with Catalog(path) as cat:
        assert cat.names() == ["voiced"]


def test_no_stale_cache_between_catalog_objects(path):
    with Catalog(path) as a, Catalog(path) as b:
        assert b.get("mic") is None
        a.create(make_signal())
        assert b.get("MIC") is not None
        b.create(make_signal(rate_hz=16000), replace=True)
        assert a.require("mic").rate_hz == 16000.0
        a.drop("mic")
        assert b.get("mic") is None and "mic" not in b


# -- names, duplicates, replace -----------------------------------------------------------

def test_case_insensitive_lookup_keeps_spelling(cat):
    cat.create(make_stream("Trades"))
    assert cat.get("TRADES").name == "Trades"
    assert cat.get("trades") == cat.require("tRaDeS", "stream")
    assert cat.names() == ["Trades"] and "trades" in cat
    with raises("DUPLICATE_OBJECT"):
        cat.create(make_stream("TRADES"))


def test_duplicate_same_kind(cat):
    cat.create(make_stream())
    with raises("DUPLICATE_OBJECT") as info:
        cat.create(make_stream(path="other/"))
    assert "CREATE OR REPLACE STREAM" in info.value.hint
    assert cat.require("trades").path == "data/trades/"
    assert len(cat.history("trades")) == 1


@pytest.mark.parametrize("first, second", [("STREAM", "SIGNAL"), ("SIGNAL", "VIEW"),
                                           ("VIEW", "SINK"), ("SINK", "STREAM")])
def test_duplicate_across_kinds(cat, first, second):
    cat.create(MAKERS[first]("thing"))
    with raises("DUPLICATE_OBJECT") as info:
        cat.create(MAKERS[second]("THING"))
    assert f"DROP {first} thing" in info.value.hint
    # Neither flag lets one kind silently take over another's name.
    with raises("WRONG_OBJECT_KIND") as info:
        cat.create(MAKERS[second]("thing"), replace=True)
    assert f"DROP {first} thing" in info.value.hint
    with raises("WRONG_OBJECT_KIND"):
        cat.create(MAKERS[second]("thing"), if_not_exists=True)
    assert cat.require("thing").kind == first and cat.require("thing").version == 1


def test_or_replace_bumps_version_and_keeps_history(cat):
    v1 = cat.create(make_signal(rate_hz=8000))
    time.sleep(0.001)
    v2 = cat.create(make_signal("MIC", rate_hz=16000), replace=True)
    v3 = cat.create(make_signal(rate_hz=48000), replace=True)
    assert (v1.version, v2.version, v3.version) == (1, 2, 3)
    assert v3.created_at == v1.created_at and v3.updated_at > v1.updated_at
    assert cat.require("mic") == v3
    history = cat.history("Mic")
    assert history == [v1, v2, v3]
    assert [h.rate_hz for h in history] == [8000.0, 16000.0, 48000.0]
    assert history[1].name == "MIC"


def test_replace_of_missing_object_creates_it(cat):
    assert cat.create(make_view(), replace=True).version == 1


def test_if_not_exists_is_a_no_op(cat):
    first = cat.create(make_sink(), if_not_exists=True)
    assert first.version == 1
    again = cat.create(make_sink(path="elsewhere"), if_not_exists=True)
    assert again == first and cat.require("alerts").path == "out/alerts"
    assert len(cat.history("alerts")) == 1


def test_replace_and_if_not_exists_are_exclusive(cat):
    with raises("INVALID_OPTION"):
        cat.create(make_view(), replace=True, if_not_exists=True)


def test_expected_version_detects_lost_updates(cat):
    v1 = cat.create(make_view(sql="SELECT 1"))
    v2 = cat.create(make_view(sql="SELECT 2"), replace=True, expected_version=v1.version)
    with raises("CONFLICT") as info:  # a writer still holding v1 must not overwrite v2
        cat.create(make_view(sql="SELECT 3"), replace=True, expected_version=v1.version)
    assert "version 1" in info.value.message and info.value.hint
    assert cat.require("voiced") == v2
    with raises("CONFLICT"):
        cat.create(make_view("gone", sql="SELECT 1"), replace=True, expected_version=4)
    assert cat.create(make_view("fresh"), replace=True, expected_version=0).version == 1
    with raises("CONFLICT"):
        cat.create(make_view("fresh"), replace=True, expected_version=0)


# -- drop, require, list ------------------------------------------------------------------

def test_drop_records_a_tombstone_and_numbering_continues(cat):
    v1 = cat.create(make_stream())
    v2 = cat.create(make_stream(path="p2/"), replace=True)
    assert cat.drop("TRADES", "stream") == v2
    assert cat.get("trades") is None and cat.names() == []
    v4 = cat.create(make_view("trades"))
    history = cat.history("trades")
    assert history[:2] == [v1, v2] and history[3] == v4
    tomb = history[2]
    assert isinstance(tomb, Tombstone)
    assert (tomb.name, tomb.kind, tomb.version) == ("trades", "STREAM", 3) and tomb.dropped_at
    assert v4.version == 4


def test_drop_unknown_suggests_names(cat):
    cat.create(make_stream())
    cat.create(make_signal())
    with raises("UNKNOWN_OBJECT") as info:
        cat.drop("trdes", "STREAM")
    assert "trdes" in info.value.message and "did you mean `trades`?" in info.value.hint
    with raises("UNKNOWN_OBJECT") as info:
        cat.drop("zzz")
    assert "mic" in info.value.hint and "trades" in info.value.hint
    assert cat.drop("trdes", "stream", if_exists=True) is None
    assert cat.names() == ["mic", "trades"]


def test_drop_wrong_kind_names_the_right_statement(cat):
    cat.create(make_signal())
    with raises("WRONG_OBJECT_KIND") as info:
        cat.drop("mic", "STREAM")
    assert "is a signal" in info.value.message and info.value.hint == "use DROP SIGNAL mic"
    with raises("WRONG_OBJECT_KIND"):  # IF EXISTS does not excuse the wrong kind (Spark too)
        cat.drop("mic", ViewDef, if_exists=True)
    assert cat.get("mic") is not None
    assert cat.drop("mic", SignalDef).name == "mic"


def test_require_errors(cat):
    cat.create(make_stream())
    cat.create(make_signal())
    with raises("UNKNOWN_OBJECT") as info:
        cat.require("mik")
    assert "did you mean `mic`?" in info.value.hint
    with raises("WRONG_OBJECT_KIND") as info:
        cat.require("mic", "stream")
    assert "is a signal, not a stream" in info.value.message
    assert cat.require("MIC", "signal").kind == "SIGNAL"
    with pytest.raises(ValueError):
        cat.require("mic", "table")


def test_list_and_names_are_sorted_case_insensitively(cat):
    for defn in (make_view("b_view"), make_stream("Alpha"), make_sink("c"), make_signal("A2"),
                 make_stream("beta")):
        cat.create(defn)
    assert cat.names() == ["A2", "Alpha", "b_view", "beta", "c"]
    assert [d.name for d in cat.list()] == cat.names()
    assert [d.name for d in cat.list("stream")] == ["Alpha", "beta"]
    assert cat.names(SinkDef) == ["c"]
    assert cat.history("never") == []


def test_closed_catalog(path):
    cat = Catalog(path)
    cat.close()
    cat.close()
    with pytest.raises(RuntimeError):
        cat.get("x")


# -- files the catalog must refuse and never touch ----------------------------------------

def test_random_bytes_are_corrupt_and_untouched(tmp_path):
    target = tmp_path / "junk.db"
    target.write_bytes(os.urandom(8192))
    before = snapshot(tmp_path)
    with raises("CATALOG_CORRUPT") as info:
        Catalog(target)
    assert str(target) in info.value.message and "untouched" in info.value.hint
    assert snapshot(tmp_path) == before


def test_sqlite_header_then_garbage_is_corrupt_and_untouched(tmp_path):
    target = tmp_path / "bad.db"
    target.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    before = snapshot(tmp_path)
    with raises("CATALOG_CORRUPT"):
        Catalog(target)
    assert snapshot(tmp_path) == before


def test_other_applications_database_is_corrupt_and_untouched(tmp_path):
    target = tmp_path / "app.db"
    other = sqlite3.connect(target)
    other.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    other.execute("INSERT INTO users (name) VALUES ('ada')")
    other.commit()
    other.close()
    before = snapshot(tmp_path)
    with raises("CATALOG_CORRUPT") as info:
        Catalog(target)
    assert "not a WaveSQL catalog" in info.value.message and "users" in info.value.message
    assert snapshot(tmp_path) == before


def test_other_application_with_only_user_version_is_corrupt(tmp_path):
    target = tmp_path / "app.db"
    other = sqlite3.connect(target)
    other.execute("PRAGMA user_version = 5")
    other.close()
    before = snapshot(tmp_path)
    with raises("CATALOG_CORRUPT"):
        Catalog(target)
    assert snapshot(tmp_path) == before


def test_newer_catalog_is_too_new_and_untouched(path):
    with Catalog(path) as cat:
        cat.create(make_stream())
    raw = sqlite3.connect(path)
    raw.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    raw.close()
    before = snapshot(path.parent)
    with raises("CATALOG_TOO_NEW") as info:
        Catalog(path)
    assert f"version {FORMAT_VERSION + 1}" in info.value.message and "upgrade" in info.value.hint
    assert snapshot(path.parent) == before


def test_damaged_definition_row_is_reported_as_corrupt(path):
    with Catalog(path) as cat:
        cat.create(make_stream())
    raw = sqlite3.connect(path)
    raw.execute("UPDATE objects SET definition = '{not json' WHERE key = 'trades'")
    raw.commit()
    raw.close()
    with Catalog(path) as cat:
        with raises("CATALOG_CORRUPT") as info:
            cat.get("trades")
        assert "`trades`" in info.value.message


def test_directory_path_is_refused(tmp_path):
    with raises("CATALOG_CORRUPT"):
        Catalog(tmp_path)


def test_file_format_is_recorded(path):
    Catalog(path).close()
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION == 3
    meta = dict(raw.execute("SELECT key, value FROM wavesql_meta"))
    assert meta["application"] == "wavesql" and meta["format_version"] == "3"
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw.close()


# -- migrations ---------------------------------------------------------------------------

def _add_tags_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE tags (key TEXT NOT NULL, tag TEXT NOT NULL)")


def _broken_step(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE half_done (x INTEGER)")
    raise RuntimeError("boom")


class CatalogV2(Catalog):
    MIGRATIONS = (*MIGRATIONS, _add_tags_table)


class BrokenCatalogV2(Catalog):
    MIGRATIONS = (*MIGRATIONS, _broken_step)


def tables(path: Path) -> set[str]:
    raw = sqlite3.connect(path)
    try:
        return {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        raw.close()


def test_older_file_is_migrated_in_place(path):
    new = FORMAT_VERSION + 1
    with Catalog(path) as cat:
        stored = cat.create(make_signal())
    with CatalogV2(path) as cat:
        assert cat.format_version == new
        assert cat.require("mic") == stored
    assert "tags" in tables(path)
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == new
    assert raw.execute("SELECT value FROM wavesql_meta WHERE key='format_version'").fetchone() \
        == (str(new),)
    raw.close()
    with raises("CATALOG_TOO_NEW"):  # the older code now refuses it
        Catalog(path)


def test_failed_migration_rolls_back(path):
    with Catalog(path) as cat:
        cat.create(make_signal())
    with raises("CATALOG_CORRUPT") as info:
        BrokenCatalogV2(path)
    assert (f"from format version {FORMAT_VERSION} to {FORMAT_VERSION + 1}" in info.value.message
            and "boom" in info.value.message)
    assert "half_done" not in tables(path)
    with Catalog(path) as cat:
        assert cat.names() == ["mic"]


class CatalogV1(Catalog):
    MIGRATIONS = MIGRATIONS[:1]


def test_version_1_file_gains_the_run_history(path):
    """Format 1 -> 2 adds the `runs` table (wavesql run / schedule) and keeps every object."""
    with CatalogV1(path) as cat:
        stored = cat.create(make_signal())
    assert "runs" not in tables(path)
    with Catalog(path) as cat:
        assert cat.require("mic") == stored
        first = cat.start_run("/jobs/a.wsql", "run")
        cat.finish_run(first, "ok", statements=2, rows_in=10, rows_out=4, rows_late=1)
        cat.start_run("/jobs/a.wsql", "schedule", status="skipped", error="busy")
        cat.start_run("/jobs/b.wsql", "run")
        runs = cat.runs("/jobs/a.wsql")
    assert [(r["status"], r["trigger"]) for r in runs] == [("skipped", "schedule"), ("ok", "run")]
    assert runs[1]["rows_in"] == 10 and runs[1]["ended_at"] >= runs[1]["started_at"]
    assert runs[0]["ended_at"] is not None and runs[0]["error"] == "busy"
    with Catalog(path) as cat:
        assert [r["file"] for r in cat.runs(limit=2)] == ["/jobs/b.wsql", "/jobs/a.wsql"]
        assert cat.runs(limit=None)[0]["status"] == "running"
    with raises("CATALOG_TOO_NEW"):  # a version-1 WaveSQL refuses the upgraded file
        CatalogV1(path)


# -- concurrency --------------------------------------------------------------------------

def test_busy_catalog_times_out_with_catalog_busy(path):
    Catalog(path).close()
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with Catalog(path, busy_timeout=0.2) as cat:
            start = time.monotonic()
            with raises("CATALOG_BUSY") as info:
                cat.create(make_view())
            assert time.monotonic() - start >= 0.15 and "busy_timeout" in info.value.hint
            assert cat.get("voiced") is None  # WAL: reads are not blocked by a writer
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    with Catalog(path) as cat:
        assert cat.create(make_view()).version == 1


def test_threads_sharing_one_catalog_and_using_their_own(path):
    shared = Catalog(path)
    shared.create(make_view("shared", sql="SELECT 0"))
    errors: list[BaseException] = []

    def work(worker: int, own: bool) -> None:
        try:
            cat = Catalog(path) if own else shared
            for i in range(15):
                cat.create(make_stream(f"t{worker}_{i}"))
                cat.create(make_view("shared", sql=f"SELECT {worker}"), replace=True)
            if own:
                cat.close()
        except BaseException as exc:  # surfaced below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w, w % 2 == 0)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(shared.names("stream")) == 6 * 15
    assert shared.require("shared").version == 6 * 15 + 1
    assert [h.version for h in shared.history("shared")] == list(range(1, 6 * 15 + 2))
    shared.close()


# A worker process: waits for the go file so that all workers start writing together.
WORKER = r"""
import json, os, random, sys, time
from wavesql.catalog import Catalog, SignalDef, SinkDef, StreamDef, ViewDef
from wavesql.errors import WaveSQLError

path, wid, go, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
cat = Catalog(path)
open(f"{go}.ready{wid}", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(go):
    if time.monotonic() > deadline:
        sys.exit("no go signal")
    time.sleep(0.002)
out = {"conflicts": 0, "won": [], "lost": []}
if mode == "mixed":
    for i in range(n):
        name = f"w{wid}_{i}"
        defn = [StreamDef(name, [("ts", "TIMESTAMP")], f"in/{name}", "json", event_time="ts"),
                SignalDef(name, [("ch1", "FLOAT")], 8000 + wid, f"in/{name}.wav"),
                ViewDef(name, f"SELECT {wid}, {i}"),
                SinkDef(name, f"out/{name}", "parquet")][i % 4]
        cat.create(defn)
        cat.create(ViewDef("shared", f"SELECT {wid} AS w, {i} AS i"), replace=True)
        # A short pause lets the other workers in, so writes interleave rather than run
        # in long bursts by whichever process holds the CPU.
        time.sleep(random.random() / 500)
        while True:  # read-modify-write with optimistic concurrency: no increment may be lost
            cur = cat.require("counter")
            value = int(cur.sql.split()[1])
            try:
                cat.create(ViewDef("counter", f"SELECT {value + 1}"), replace=True,
                           expected_version=cur.version)
                break
            except WaveSQLError as exc:
                if exc.code != "CONFLICT":
                    raise
                out["conflicts"] += 1
elif mode == "race":
    for i in range(n):
        try:
            cat.create(StreamDef(f"race{i}", [("ts", "TIMESTAMP")], f"winner/{wid}", "json"))
            out["won"].append(i)
            time.sleep(random.random() / 1000)
        except WaveSQLError as exc:
            if exc.code != "DUPLICATE_OBJECT":
                raise
            out["lost"].append(i)
cat.close()
print(json.dumps(out))
"""


def run_workers(path: Path, mode: str, workers: int, n: int) -> list[dict]:
    go = path.parent / "go"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(w), str(go), mode,
                               str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for w in range(workers)]
    try:
        deadline = time.monotonic() + 60
        while not all((path.parent / f"go.ready{w}").exists() for w in range(workers)):
            assert time.monotonic() < deadline, "workers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.005)
        go.touch()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            results.append(json.loads(out))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        go.unlink(missing_ok=True)


def integrity_ok(path: Path) -> bool:
    raw = sqlite3.connect(path)
    try:
        return raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        raw.close()


def test_four_processes_writing_at_once_lose_nothing(path):
    workers, n = 4, 50
    with Catalog(path) as cat:
        cat.create(ViewDef("shared", "SELECT 0"))
        cat.create(ViewDef("counter", "SELECT 0"))
    results = run_workers(path, "mixed", workers, n)
    assert integrity_ok(path)
    with Catalog(path) as cat:
        names = set(cat.names())
        expected = {f"w{w}_{i}" for w in range(workers) for i in range(n)}
        assert expected <= names and len(names) == workers * n + 2
        kinds = {d.name: d.kind for d in cat.list()}
        assert all(kinds[f"w{w}_{i}"] == ("STREAM", "SIGNAL", "VIEW", "SINK")[i % 4]
                   for w in range(workers) for i in range(n))
        shared = cat.require("shared")
        assert shared.version == workers * n + 1
        history = cat.history("shared")
        assert len(history) == workers * n + 1
        assert [h.version for h in history] == list(range(1, workers * n + 2))
        assert history[-1] == shared
        # Every worker's replaces are all in the history, in the order each worker made them.
        for w in range(workers):
            mine = [h.sql for h in history if h.sql.startswith(f"SELECT {w} AS")]
            assert mine == [f"SELECT {w} AS w, {i} AS i" for i in range(n)]
        counter = cat.require("counter")
        assert counter.sql == f"SELECT {workers * n}"
        assert counter.version == workers * n + 1
    print("optimistic conflicts retried:", sum(r["conflicts"] for r in results))


def test_processes_racing_for_the_same_name_exactly_one_wins(path):
    workers, n = 4, 25
    # No catalog file yet: the workers also race to create and initialise it.
    path.parent.mkdir(parents=True)
    results = run_workers(path, "race", workers, n)
    assert integrity_ok(path)
    with Catalog(path) as cat:
        for i in range(n):
            winners = [w for w, r in enumerate(results) if i in r["won"]]
            losers = [w for w, r in enumerate(results) if i in r["lost"]]
            assert len(winners) == 1 and len(losers) == workers - 1, (i, results)
            stored = cat.require(f"race{i}")
            assert stored.path == f"winner/{winners[0]}" and stored.version == 1
            assert len(cat.history(f"race{i}")) == 1


# -- hygiene ------------------------------------------------------------------------------

def test_catalog_imports_neither_spark_nor_the_planner():
    code = ("import sys, wavesql.catalog; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j') "
            "or m.startswith(('wavesql.planner', 'wavesql.udfs', 'wavesql.session'))]; "
            "print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("module", [wavesql.catalog, wavesql.catalog.objects,
                                    wavesql.catalog.store])
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# -- leases -------------------------------------------------------------------------------
def test_a_lease_keeps_a_second_holder_out_until_released(path):
    with Catalog(path) as one, Catalog(path) as two:
        with one.lease("job:x", "job x", "wait for it"):
            with raises("RUN_IN_PROGRESS") as info:
                with two.lease("job:x", "job x", "wait for it"):
                    pass
            assert f"pid {os.getpid()}" in info.value.message
            with two.lease("job:y", "job y", "-"):  # another name is free
                pass
        with two.lease("job:x", "job x", "-"):  # released
            pass


def test_a_lease_of_a_dead_process_or_past_its_time_is_free_again(path):
    import subprocess
    import sys
    import time as _time

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Catalog(path) as cat:
        with cat._write() as conn:
            import socket

            conn.execute("INSERT INTO leases VALUES ('a', 'h1', ?, ?, 'then', ?)",
                         (socket.gethostname(), dead.pid, _time.time() + 3600))
            conn.execute("INSERT INTO leases VALUES ('b', 'h2', 'elsewhere', 1, 'then', ?)",
                         (_time.time() - 1,))
            conn.execute("INSERT INTO leases VALUES ('c', 'h3', 'elsewhere', 1, 'now', ?)",
                         (_time.time() + 3600,))
        with cat.lease("a", "a", "-"), cat.lease("b", "b", "-"):
            pass
        with raises("RUN_IN_PROGRESS") as info:
            with cat.lease("c", "c", "-"):
                pass
        assert "on elsewhere" in info.value.message


def test_a_lease_is_renewed_while_it_is_held(path):
    import time as _time

    with Catalog(path) as one, Catalog(path) as two:
        with one.lease("r", "r", "-", seconds=0.6):
            _time.sleep(1.5)  # longer than the lease: renewed every 0.2 s
            with raises("RUN_IN_PROGRESS"):
                with two.lease("r", "r", "-"):
                    pass
