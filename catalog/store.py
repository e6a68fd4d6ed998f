"""The persistent catalog: one SQLite file shared safely by processes and threads.

Layout of a catalog file (format version 2)::

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
                                  an object store, where no file lock exists (:meth:`lease`)

``PRAGMA user_version`` holds the format version. A file is only ever written after it has
been recognised as a WaveSQL catalog of a version this code understands (or is empty): foreign
SQLite files, random bytes and catalogs from a newer WaveSQL are refused with
``CATALOG_CORRUPT`` / ``CATALOG_TOO_NEW`` and left byte-for-byte untouched.

Concurrency rests on SQLite itself rather than on anything in-process: WAL journaling (readers
never block the writer), ``BEGIN IMMEDIATE`` around every read-check-write (so "does the name
exist? then insert" is atomic across processes), a busy timeout, ``synchronous=FULL`` (a
committed definition survives a crash), and no cached state (every call reads the file).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, Sequence

from wavesql.errors import WaveSQLError, did_you_mean

from .objects import Definition, Tombstone, normalize_kind

__all__ = ["Catalog", "CATALOG_ENV", "DEFAULT_CATALOG_FILE", "FORMAT_VERSION", "MIGRATIONS"]

#: Environment variable naming the catalog file used by ``Catalog(None)``.
CATALOG_ENV = "WAVESQL_CATALOG"
#: File name used in the working directory when neither a path nor the variable is given.
DEFAULT_CATALOG_FILE = "wavesql_catalog.db"

_APPLICATION = "wavesql"
_SQLITE_HEADER = b"SQLite format 3\x00"
# Future formats must keep this table name and its `application` row: it is how any WaveSQL
# version tells "a newer catalog" (refuse politely) from "somebody else's file" (refuse).
_META_TABLE = "wavesql_meta"


# -- migrations ---------------------------------------------------------------------------
# MIGRATIONS[i] upgrades a file from format version i to i + 1 inside the caller's write
# transaction (SQLite DDL is transactional, so a failed step leaves the file as it was).
# Version 0 is the empty file; so creating a catalog is simply "migrate from 0".
# Never edit a released step; append a new one.

def _migrate_0_to_1(conn: sqlite3.Connection) -> None:
    conn.execute(f"CREATE TABLE {_META_TABLE} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    conn.executemany(
        f"INSERT INTO {_META_TABLE} (key, value) VALUES (?, ?)",
        [("application", _APPLICATION), ("format_version", "1"), ("created_at", _now())],
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


def _alive(pid: int) -> bool:
    """Whether process ``pid`` of this host exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


def _error_name(exc: sqlite3.Error) -> str:
    # `sqlite_errorname` exists from Python 3.11; fall back to the message on 3.10.
    name = getattr(exc, "sqlite_errorname", None)
    if name:
        return name
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return "SQLITE_BUSY"
    if "not a database" in text:
        return "SQLITE_NOTADB"
    if "malformed" in text:
        return "SQLITE_CORRUPT"
    if "unable to open" in text:
        return "SQLITE_CANTOPEN"
    return "SQLITE_ERROR"


class Catalog:
    """The WaveSQL catalog of streams, signals, views and sinks, kept in an SQLite file.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The catalog file; created (with its parent directory) on first use. ``":memory:"``
        gives a private in-memory catalog. ``None`` (the default) means ``$WAVESQL_CATALOG``
        if set, else ``wavesql_catalog.db`` in the current working directory.
    busy_timeout : float, default 10.0
        Seconds to wait for another process's write before raising ``CATALOG_BUSY``.

    Raises
    ------
    WaveSQLError
        ``CATALOG_CORRUPT`` if the file is not a WaveSQL catalog, ``CATALOG_TOO_NEW`` if a
        newer WaveSQL wrote it; the file is not modified in either case.

    Notes
    -----
    One object may be shared by threads (calls are serialised by a lock); several objects
    and several processes may use one file at once. Nothing is cached: every call reads the
    file, so a definition written by another process is visible to the next call.

    Examples
    --------
    >>> from wavesql.catalog import Catalog, SignalDef
    >>> with Catalog(":memory:") as cat:
    ...     mic = cat.create(SignalDef("mic", [("ch1", "FLOAT")], 48000, "rec/*.wav"))
    ...     mic = cat.create(SignalDef("mic", [("ch1", "FLOAT")], 44100, "rec/*.wav"),
    ...                      replace=True)
    ...     (mic.version, cat.require("MIC").rate_hz, cat.names(),
    ...      [d.rate_hz for d in cat.history("mic")])
    (2, 44100.0, ['mic'], [48000.0, 44100.0])
    """

    #: The migration steps this class applies; a subclass may append steps (tests do).
    MIGRATIONS: Sequence[Callable[[sqlite3.Connection], None]] = MIGRATIONS

    def __init__(self, path: str | os.PathLike | None = None, *, busy_timeout: float = 10.0):
        if path is None:
            path = os.environ.get(CATALOG_ENV) or DEFAULT_CATALOG_FILE
        self._memory = os.fspath(path) == ":memory:"
        # Absolute, so a later chdir() does not silently switch catalogs.
        self.path: str = ":memory:" if self._memory else os.path.abspath(os.fspath(path))
        self.busy_timeout = float(busy_timeout)
        # One connection per Catalog, shared by threads: the lock keeps one thread's
        # transaction from interleaving with another's statements on that connection.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn = self._open()

    @property
    def format_version(self) -> int:
        """The catalog file format this object reads and writes."""
        return len(self.MIGRATIONS)

    # -- opening ---------------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        # Processes that open a new catalog file at the same moment race to switch it to WAL
        # and to create its tables. SQLite answers some of those steps (the journal-mode
        # change above all) with an immediate SQLITE_BUSY instead of waiting, so the whole
        # open is retried until the busy timeout is spent.
        deadline = time.monotonic() + self.busy_timeout
        while True:
            try:
                return self._open_once()
            except WaveSQLError as err:
                if err.code != "CATALOG_BUSY" or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.005, 0.05))

    def _open_once(self) -> sqlite3.Connection:
        if not self._memory:
            self._check_file_before_open(Path(self.path))
        with self._translate():
            # isolation_level=None: no implicit transactions; we issue BEGIN IMMEDIATE ourselves.
            conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                   check_same_thread=False)
        try:
            with self._translate():
                # Read-only inspection first: refuse foreign or newer files before any write.
                found = self._inspect_snapshot(conn)
                if not self._memory:
                    conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
            if found < self.format_version:
                self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_file_before_open(self, path: Path) -> None:
        if path.is_dir():
            raise WaveSQLError("CATALOG_CORRUPT", f"catalog path {self.path} is a directory",
                               hint=f"give a file name, e.g. {path / DEFAULT_CATALOG_FILE}")
        if path.exists():
            with path.open("rb") as fh:
                head = fh.read(len(_SQLITE_HEADER))
            # A 0-byte file is an empty catalog (SQLite would treat it the same way).
            if head and head != _SQLITE_HEADER:
                raise self._corrupt("is not an SQLite database")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)

    def _corrupt(self, why: str) -> WaveSQLError:
        return WaveSQLError(
            "CATALOG_CORRUPT",
            f"catalog file {self.path} {why}",
            hint=f"WaveSQL leaves it untouched; use another file (catalog=... or "
                 f"${CATALOG_ENV}) or restore this one from a backup",
        )

    def _inspect_snapshot(self, conn: sqlite3.Connection) -> int:
        # One read transaction so user_version and the table list come from the same state.
        conn.execute("BEGIN")
        try:
            return self._inspect(conn)
        finally:
            if conn.in_transaction:
                conn.execute("COMMIT")

    def _inspect(self, conn: sqlite3.Connection) -> int:
        """The file's format version (0 = empty), or raise if it must not be touched."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables and version == 0:
            return 0
        if _META_TABLE not in tables:
            shown = ", ".join(sorted(tables)[:8]) or "none"
            raise self._corrupt(f"is an SQLite database but not a WaveSQL catalog "
                                f"(its tables: {shown})")
        if version > self.format_version:
            raise WaveSQLError(
                "CATALOG_TOO_NEW",
                f"catalog file {self.path} has format version {version}; this WaveSQL "
                f"reads up to version {self.format_version}",
                hint="upgrade WaveSQL to use it; the file was left untouched",
            )
        row = conn.execute(
            f"SELECT value FROM {_META_TABLE} WHERE key = 'application'").fetchone()
        if row is None or row[0] != _APPLICATION or version < 1:
            raise self._corrupt("has a damaged WaveSQL header (wavesql_meta / user_version)")
        return version

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with self._write(conn):
            # Another process may have created or upgraded the file since we looked.
            version = self._inspect(conn)
            for step in range(version, self.format_version):
                try:
                    self.MIGRATIONS[step](conn)
                except sqlite3.OperationalError as exc:
                    if _error_name(exc).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                        raise
                    raise self._migration_failed(step, exc) from exc
                except Exception as exc:
                    raise self._migration_failed(step, exc) from exc
            if version != self.format_version:
                conn.execute(f"PRAGMA user_version = {int(self.format_version)}")
                conn.execute(f"UPDATE {_META_TABLE} SET value = ? WHERE key = 'format_version'",
                             (str(self.format_version),))

    def _migration_failed(self, step: int, exc: BaseException) -> WaveSQLError:
        return WaveSQLError(
            "CATALOG_CORRUPT",
            f"could not upgrade catalog file {self.path} from format version {step} to "
            f"{step + 1}: {exc}",
            hint="the upgrade was rolled back and the file is unchanged",
        )

    # -- plumbing ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        """Turn SQLite's errors into WaveSQL's stable codes."""
        try:
            yield
        except sqlite3.Error as exc:
            name = _error_name(exc)
            if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
                raise WaveSQLError(
                    "CATALOG_BUSY",
                    f"catalog file {self.path} stayed locked by another process for more "
                    f"than {self.busy_timeout:g} s",
                    hint="retry, or pass a larger busy_timeout to Catalog(...)",
                ) from exc
            if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CANTOPEN")):
                raise self._corrupt(f"cannot be read ({exc})") from exc
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"{self!r} is closed")
        return self._conn

    @contextlib.contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction: BEGIN IMMEDIATE takes the write lock up front, so every
        check made inside still holds when the transaction commits."""
        with self._lock:
            conn = conn if conn is not None else self._connection()
            with self._translate():
                conn.execute("BEGIN IMMEDIATE")
            try:
                with self._translate():
                    yield conn
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translate():
            yield self._connection()

    def _decode(self, text: str | None, name: str) -> Definition:
        try:
            return Definition.from_dict(json.loads(text or ""))
        except (ValueError, TypeError, WaveSQLError) as exc:
            raise self._corrupt(f"holds an unreadable definition of `{name}` ({exc})") from exc

    @staticmethod
    def _encode(defn: Definition) -> str:
        return json.dumps(defn.to_dict(), sort_keys=True, allow_nan=False)

    def _names_in(self, conn: sqlite3.Connection, kind: str | None) -> list[str]:
        if kind is None:
            rows = conn.execute("SELECT name FROM objects ORDER BY key")
        else:
            rows = conn.execute("SELECT name FROM objects WHERE kind = ? ORDER BY key", (kind,))
        return [row[0] for row in rows]

    @staticmethod
    def _what(kind: str | None) -> str:
        return kind.lower() if kind else "object"

    # -- writing -----------------------------------------------------------------------------
    def create(self, defn: Definition, *, replace: bool = False, if_not_exists: bool = False,
               expected_version: int | None = None) -> Definition:
        """Store ``defn``; return it with its assigned version and timestamps.

        Parameters
        ----------
        defn : Definition
            Its ``version``/``created_at``/``updated_at`` are ignored; the store assigns them.
        replace : bool
            ``CREATE OR REPLACE``: replace an object of the same kind, bumping its version.
        if_not_exists : bool
            ``CREATE ... IF NOT EXISTS``: if an object of the same kind exists, return it
            unchanged.
        expected_version : int, optional
            With ``replace``: optimistic concurrency. Raise ``CONFLICT`` unless the stored
            version is this (0 = "no object of that name may exist").

        Raises
        ------
        WaveSQLError
            ``DUPLICATE_OBJECT`` if the name is taken (by any kind) and neither flag is set;
            ``WRONG_OBJECT_KIND`` if ``replace``/``if_not_exists`` meet an object of another
            kind; ``CONFLICT``; ``CATALOG_BUSY``.
        """
        if not isinstance(defn, Definition):
            raise TypeError(f"expected a catalog definition, got {type(defn).__name__}")
        if replace and if_not_exists:
            raise WaveSQLError("INVALID_OPTION",
                               "OR REPLACE and IF NOT EXISTS cannot be used together",
                               hint="keep one: OR REPLACE overwrites, IF NOT EXISTS keeps")
        if expected_version is not None and not replace:
            raise ValueError("expected_version only applies with replace=True")
        kind, what, name = defn.kind, defn.kind.lower(), defn.name
        now = _now()
        with self._write() as conn:
            row = conn.execute("SELECT version, definition FROM objects WHERE key = ?",
                               (defn.key,)).fetchone()
            if row is not None:
                old = self._decode(row[1], name)
                if old.kind != kind and (replace or if_not_exists):
                    raise WaveSQLError(
                        "WRONG_OBJECT_KIND",
                        f"`{old.name}` is a {old.kind.lower()}, not a {what}",
                        hint=f"DROP {old.kind} {old.name} first, or choose another name",
                    )
                if old.kind != kind:
                    raise WaveSQLError(
                        "DUPLICATE_OBJECT",
                        f"cannot create {what} `{name}`: a {old.kind.lower()} named "
                        f"`{old.name}` already exists",
                        hint=f"choose another name, or DROP {old.kind} {old.name} first",
                    )
                if if_not_exists:
                    return old
                if not replace:
                    raise WaveSQLError(
                        "DUPLICATE_OBJECT", f"{what} `{old.name}` already exists",
                        hint=f"use CREATE OR REPLACE {kind} {name} to replace it, or "
                             f"CREATE {kind} IF NOT EXISTS to keep the existing one",
                    )
                if expected_version is not None and old.version != expected_version:
                    raise self._conflict(old.name, what, expected_version, old.version)
                stored = defn.with_version(old.version + 1, old.created_at, now)
                conn.execute(
                    "UPDATE objects SET name = ?, kind = ?, version = ?, definition = ?, "
                    "updated_at = ? WHERE key = ?",
                    (name, kind, stored.version, self._encode(stored), now, defn.key),
                )
                self._record(conn, stored, "REPLACE", now)
                return stored
            if expected_version not in (None, 0):
                raise self._conflict(name, what, expected_version, None)
            # Numbering continues across DROP + CREATE so a version never names two
            # different definitions (an expected_version from before the drop cannot match).
            last = conn.execute("SELECT MAX(version) FROM history WHERE key = ?",
                                (defn.key,)).fetchone()[0]
            stored = defn.with_version((last or 0) + 1, now, now)
            conn.execute(
                "INSERT INTO objects (key, name, kind, version, definition, created_at, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (defn.key, name, kind, stored.version, self._encode(stored), now, now),
            )
            self._record(conn, stored, "CREATE", now)
            return stored

    def _conflict(self, name: str, what: str, expected: int, found: int | None) -> WaveSQLError:
        state = "it no longer exists" if found is None else f"it is at version {found}"
        return WaveSQLError(
            "CONFLICT",
            f"{what} `{name}` was changed concurrently: expected version {expected}, but "
            f"{state}",
            hint="read it again (Catalog.get) and retry the change",
        )

    @staticmethod
    def _record(conn: sqlite3.Connection, defn: Definition, action: str, when: str) -> None:
        conn.execute(
            "INSERT INTO history (key, name, kind, version, action, definition, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (defn.key, defn.name, defn.kind, defn.version, action, Catalog._encode(defn), when),
        )

    def drop(self, name: str, kind: str | type[Definition] | None = None, *,
             if_exists: bool = False) -> Definition | None:
        """Remove ``name``; return the dropped definition (None if absent and ``if_exists``).

        A tombstone is appended to the name's history.

        Raises
        ------
        WaveSQLError
            ``UNKNOWN_OBJECT`` (with a did-you-mean hint) unless ``if_exists``;
            ``WRONG_OBJECT_KIND`` if ``kind`` is given and the object is of another kind
            (even with ``if_exists``, like Spark's ``DROP TABLE IF EXISTS`` on a view).
        """
        kind = normalize_kind(kind) if kind is not None else None
        now = _now()
        with self._write() as conn:
            row = conn.execute("SELECT version, definition FROM objects WHERE key = ?",
                               (name.lower(),)).fetchone()
            if row is None:
                if if_exists:
                    return None
                raise WaveSQLError(
                    "UNKNOWN_OBJECT", f"unknown {self._what(kind)} `{name}`",
                    hint=did_you_mean(name, self._names_in(conn, kind),
                                      f"{self._what(kind)}s"),
                )
            old = self._decode(row[1], name)
            if kind is not None and old.kind != kind:
                raise WaveSQLError(
                    "WRONG_OBJECT_KIND",
                    f"`{old.name}` is a {old.kind.lower()}, not a {kind.lower()}",
                    hint=f"use DROP {old.kind} {old.name}",
                )
            conn.execute("DELETE FROM objects WHERE key = ?", (old.key,))
            conn.execute(
                "INSERT INTO history (key, name, kind, version, action, definition, "
                "recorded_at) VALUES (?, ?, ?, ?, 'DROP', NULL, ?)",
                (old.key, old.name, old.kind, old.version + 1, now),
            )
            return old

    # -- reading -----------------------------------------------------------------------------
    def get(self, name: str) -> Definition | None:
        """The live definition called ``name`` (case-insensitive), or None."""
        with self._read() as conn:
            row = conn.execute("SELECT definition FROM objects WHERE key = ?",
                               (name.lower(),)).fetchone()
        return None if row is None else self._decode(row[0], name)

    def require(self, name: str, kind: str | type[Definition] | None = None) -> Definition:
        """Like :meth:`get`, but raise ``UNKNOWN_OBJECT`` / ``WRONG_OBJECT_KIND``."""
        kind = normalize_kind(kind) if kind is not None else None
        with self._read() as conn:
            row = conn.execute("SELECT definition FROM objects WHERE key = ?",
                               (name.lower(),)).fetchone()
            candidates = self._names_in(conn, kind) if row is None or kind else []
        if row is None:
            raise WaveSQLError(
                "UNKNOWN_OBJECT", f"unknown {self._what(kind)} `{name}`",
                hint=did_you_mean(name, candidates, f"{self._what(kind)}s"),
            )
        defn = self._decode(row[0], name)
        if kind is not None and defn.kind != kind:
            raise WaveSQLError(
                "WRONG_OBJECT_KIND",
                f"`{defn.name}` is a {defn.kind.lower()}, not a {kind.lower()}",
                hint=did_you_mean(name, candidates, f"{kind.lower()}s"),
            )
        return defn

    def list(self, kind: str | type[Definition] | None = None) -> list[Definition]:
        """All live definitions (of ``kind`` if given), sorted by name case-insensitively."""
        kind = normalize_kind(kind) if kind is not None else None
        with self._read() as conn:
            if kind is None:
                rows = conn.execute("SELECT name, definition FROM objects ORDER BY key")
            else:
                rows = conn.execute("SELECT name, definition FROM objects WHERE kind = ? "
                                    "ORDER BY key", (kind,))
            rows = rows.fetchall()
        return [self._decode(text, name) for name, text in rows]

    def names(self, kind: str | type[Definition] | None = None) -> list[str]:
        """Names of the live objects (of ``kind`` if given), as written, sorted."""
        kind = normalize_kind(kind) if kind is not None else None
        with self._read() as conn:
            return self._names_in(conn, kind)

    def history(self, name: str) -> list[Definition | Tombstone]:
        """Every version ever stored under ``name``, oldest first; a DROP is a Tombstone.

        Returns ``[]`` for a name that was never used.
        """
        with self._read() as conn:
            rows = conn.execute(
                "SELECT name, kind, version, action, definition, recorded_at FROM history "
                "WHERE key = ? ORDER BY version", (name.lower(),)).fetchall()
        out: list[Definition | Tombstone] = []
        for stored_name, kind, version, action, text, when in rows:
            if action == "DROP":
                out.append(Tombstone(stored_name, kind, version, when))
            else:
                out.append(self._decode(text, stored_name))
        return out

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    # -- run history -------------------------------------------------------------------------
    RUN_COLUMNS = ("id", "file", "trigger", "started_at", "ended_at", "status", "statements",
                   "rows_in", "rows_out", "rows_late", "error", "pid", "host")

    def start_run(self, file: str, trigger: str, *, status: str = "running",
                  error: str | None = None) -> int:
        """Record that a run of query file ``file`` began (``trigger``: ``run`` or
        ``schedule``); return its id. ``status="skipped"`` records a refused run, ended."""
        import socket

        now = _now()
        with self._write() as conn:
            cur = conn.execute(
                "INSERT INTO runs (file, trigger, started_at, ended_at, status, error, pid, host)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (file, trigger, now, None if status == "running" else now, status, error,
                 os.getpid(), socket.gethostname()))
            return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str, *, statements: int = 0,
                   rows_in: int | None = None, rows_out: int | None = None,
                   rows_late: int | None = None, error: str | None = None) -> None:
        """Record how run ``run_id`` ended."""
        with self._write() as conn:
            conn.execute(
                "UPDATE runs SET ended_at = ?, status = ?, statements = ?, rows_in = ?, "
                "rows_out = ?, rows_late = ?, error = ? WHERE id = ?",
                (_now(), status, statements, rows_in, rows_out, rows_late, error, run_id))

    # -- leases ----------------------------------------------------------------------------
    #: Seconds a lease lasts unless renewed; its holder renews it every third of that.
    LEASE_SECONDS = 30.0

    @contextlib.contextmanager
    def lease(self, name: str, what: str, hint: str, *, seconds: float | None = None,
              wait: float = 0.0) -> Iterator[None]:
        """Hold the lease ``name`` while the block runs, or raise ``RUN_IN_PROGRESS`` (after
        up to ``wait`` seconds) if a live holder has it.

        The kernel's ``flock`` is what keeps two runs of a job on local disk apart; on an
        object store there is no lock to take, so the catalog every such process uses keeps
        the lease instead. A holder renews it (a daemon thread) while it works; a lease
        whose holder died is free again once it expires, or at once when its holder was a
        process of this host that no longer exists (a SIGKILLed run)."""
        import socket
        import uuid

        seconds = self.LEASE_SECONDS if seconds is None else float(seconds)
        me, host, pid = uuid.uuid4().hex, socket.gethostname(), os.getpid()
        deadline = time.monotonic() + wait
        while True:
            holder = self._try_lease(name, me, host, pid, seconds)
            if holder is None:
                break
            if time.monotonic() >= deadline:
                raise WaveSQLError("RUN_IN_PROGRESS", f"{what} is already running ({holder})",
                                   hint=hint)
            time.sleep(0.2)
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(seconds / 3):
                try:
                    with self._write() as conn:
                        conn.execute("UPDATE leases SET expires = ? WHERE name = ? AND holder = ?",
                                     (time.time() + seconds, name, me))
                except Exception:  # noqa: BLE001 - a busy catalog: the next round renews
                    continue

        renewer = threading.Thread(target=renew, name=f"wavesql-lease-{name}", daemon=True)
        renewer.start()
        try:
            yield
        finally:
            stop.set()
            renewer.join(timeout=5)
            with self._write() as conn:
                conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (name, me))

    def _try_lease(self, name: str, me: str, host: str, pid: int, seconds: float) -> str | None:
        """Take the lease if it is free (or its holder is gone); else who holds it."""
        with self._write() as conn:
            row = conn.execute("SELECT host, pid, acquired_at, expires FROM leases "
                               "WHERE name = ?", (name,)).fetchone()
            if row is not None:
                their_host, their_pid, since, expires = row
                gone = expires < time.time() or (their_host == host and not _alive(their_pid))
                if not gone:
                    return f"pid {their_pid} on {their_host} since {since}"
            conn.execute("INSERT OR REPLACE INTO leases (name, holder, host, pid, acquired_at, "
                         "expires) VALUES (?, ?, ?, ?, ?, ?)",
                         (name, me, host, pid, _now(), time.time() + seconds))
        return None

    def runs(self, file: str | None = None, limit: int | None = 20) -> list[dict]:
        """The run history, newest first (of ``file`` if given), as dicts of
        :attr:`RUN_COLUMNS`."""
        sql = f"SELECT {', '.join(self.RUN_COLUMNS)} FROM runs"
        params: list = []
        if file is not None:
            sql += " WHERE file = ?"
            params.append(file)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [dict(zip(self.RUN_COLUMNS, row)) for row in rows]

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file; further calls raise RuntimeError. Closing twice is fine."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Catalog({self.path!r})"

