"""The catalog file's format: its tables, its format version and the steps that build them.

Layout of a catalog file (format version 3)::

    wavesql_meta(key, value)      application = 'wavesql', format_version, created_at
    objects(key, name, kind, version, definition, created_at, updated_at)
                                  the live objects, one row per lower-cased name
    history(seq, key, name, kind, version, action, definition, recorded_at)
                                  every version ever stored (CREATE/REPLACE) and every DROP
    runs(id, file, trigger, started_at, ended_at, status, statements, rows_in, rows_out,
         rows_late, error, pid, host)
                                  the run history of query files (format version 2)
    leases(name, holder, host, pid, acquired_at, expires)
                                  who holds what (format version 3): a job whose sink is in
                                  an object store, where no file lock exists (``Catalog.lease``)

``PRAGMA user_version`` holds the format version; :data:`MIGRATIONS` builds a file from
nothing and upgrades an older one. Opening, recognising and migrating a file is
:class:`wavesql.catalog.sqlite_file.CatalogFile`'s.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from typing import Callable

APPLICATION = "wavesql"
# Future formats must keep this table name and its `application` row: it is how any WaveSQL
# version tells "a newer catalog" (refuse politely) from "somebody else's file" (refuse).
META_TABLE = "wavesql_meta"


def utc_now() -> str:
    """The current time as the catalog stores it (ISO 8601, UTC, microseconds)."""
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


# -- migrations ---------------------------------------------------------------------------
# MIGRATIONS[i] upgrades a file from format version i to i + 1 inside the caller's write
# transaction (SQLite DDL is transactional, so a failed step leaves the file as it was).
# Version 0 is the empty file; so creating a catalog is simply "migrate from 0".
# Never edit a released step; append a new one.

def _migrate_0_to_1(conn: sqlite3.Connection) -> None:
    conn.execute(f"CREATE TABLE {META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany(
        f"INSERT INTO {META_TABLE} (key, value) VALUES (?, ?)",
        [("application", APPLICATION), ("format_version", "1"), ("created_at", utc_now())],
    )
    conn.execute(
        """CREATE TABLE objects (
               key        TEXT PRIMARY KEY,
               name       TEXT NOT NULL,
               kind       TEXT NOT NULL,
               version    INTEGER NOT NULL CHECK (version >= 1),
               definition TEXT NOT NULL,
               created_at TEXT NOT NULL,
               updated_at TEXT NOT NULL)"""
    )
    conn.execute(
        """CREATE TABLE history (
               seq         INTEGER PRIMARY KEY AUTOINCREMENT,
               key         TEXT NOT NULL,
               name        TEXT NOT NULL,
               kind        TEXT NOT NULL,
               version     INTEGER NOT NULL,
               action      TEXT NOT NULL CHECK (action IN ('CREATE', 'REPLACE', 'DROP')),
               definition  TEXT,
               recorded_at TEXT NOT NULL,
               UNIQUE (key, version))"""
    )


def _migrate_1_to_2(conn: sqlite3.Connection) -> None:
    # The run history of query files (`wavesql run`, `wavesql schedule`, `wavesql runs`).
    # It lives in the catalog file because a run is about the catalog's objects and the
    # scheduler needs one place every process writes with the same transactions.
    conn.execute(
        """CREATE TABLE runs (
               id         INTEGER PRIMARY KEY AUTOINCREMENT,
               file       TEXT NOT NULL,
               trigger    TEXT NOT NULL,
               started_at TEXT NOT NULL,
               ended_at   TEXT,
               status     TEXT NOT NULL CHECK (status IN
                              ('running', 'ok', 'failed', 'skipped', 'interrupted')),
               statements INTEGER NOT NULL DEFAULT 0,
               rows_in    INTEGER,
               rows_out   INTEGER,
               rows_late  INTEGER,
               error      TEXT,
               pid        INTEGER,
               host       TEXT)"""
    )
    conn.execute("CREATE INDEX runs_by_file ON runs (file, id)")


def _migrate_2_to_3(conn: sqlite3.Connection) -> None:
    # Leases (Catalog.lease): an INSERT INTO job writing to an object store cannot hold a
    # file lock there, and every process that runs the job uses this catalog.
    conn.execute(
        """CREATE TABLE leases (
               name        TEXT PRIMARY KEY,
               holder      TEXT NOT NULL,
               host        TEXT NOT NULL,
               pid         INTEGER NOT NULL,
               acquired_at TEXT NOT NULL,
               expires     REAL NOT NULL)"""
    )


MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_migrate_0_to_1,
                                                                 _migrate_1_to_2,
                                                                 _migrate_2_to_3)
#: The catalog file format this code writes.
FORMAT_VERSION = len(MIGRATIONS)
