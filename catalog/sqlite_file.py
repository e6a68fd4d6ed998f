"""Opening a catalog file safely, and the transactions every catalog operation runs in.

A file is only ever written after it has been recognised as a WaveSQL catalog of a version
this code understands (or is empty): foreign SQLite files, random bytes and catalogs from a
newer WaveSQL are refused with ``CATALOG_CORRUPT`` / ``CATALOG_TOO_NEW`` and left
byte-for-byte untouched. An older catalog is migrated in place
(:data:`wavesql.catalog.schema.MIGRATIONS`).

Concurrency rests on SQLite itself rather than on anything in-process: WAL journaling (readers
never block the writer), ``BEGIN IMMEDIATE`` around every read-check-write (so "does the name
exist? then insert" is atomic across processes), a busy timeout, ``synchronous=FULL`` (a
committed definition survives a crash), and no cached state (every call reads the file).
"""

from __future__ import annotations

import contextlib
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from wavesql.errors import WaveSQLError

from .schema import APPLICATION, META_TABLE, MIGRATIONS

#: Environment variable naming the catalog file used by ``Catalog(None)``.
CATALOG_ENV = "WAVESQL_CATALOG"
#: File name used in the working directory when neither a path nor the variable is given.
DEFAULT_CATALOG_FILE = "wavesql_catalog.db"
_SQLITE_HEADER = b"SQLite format 3\x00"


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


class CatalogFile:
    """One catalog file, open: its connection, its transactions and its lifetime.

    :class:`wavesql.catalog.Catalog` documents the parameters; this class knows nothing of
    what the tables hold.
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

    #: Whether several hosts share this catalog (no: an SQLite file is one host's).
    shared = False

    def state_location(self) -> str | None:
        """Where state that belongs to no sink folder goes by default (a Kafka sink's
        checkpoints, wavesql/jobs.py): the catalog file's folder; None when in memory."""
        return None if self._memory else os.path.dirname(self.path)

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
        if META_TABLE not in tables:
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
            f"SELECT value FROM {META_TABLE} WHERE key = 'application'").fetchone()
        if row is None or row[0] != APPLICATION or version < 1:
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
                conn.execute(f"UPDATE {META_TABLE} SET value = ? WHERE key = 'format_version'",
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

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Close the file; further calls raise RuntimeError. Closing twice is fine."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __repr__(self) -> str:
        return f"Catalog({self.path!r})"
