"""The persistent catalog: definitions of streams, signals, views and sinks, with their
version history, in one SQLite file shared safely by processes and threads.

:class:`Catalog` is the API. What a catalog file holds is :mod:`.schema`'s; opening it and
the transactions around every call, :mod:`.sqlite_file`'s; the run history and the leases
of jobs, :mod:`.runs` and :mod:`.leases`. Definitions are stored as the JSON of
:meth:`Definition.to_dict`, one row per live name plus every version in ``history``.
"""

from __future__ import annotations

import json
import sqlite3

from wavesql.errors import WaveSQLError

from . import rules
from .leases import Leases
from .objects import Definition, Tombstone, normalize_kind
from .runs import RunHistory
from .schema import utc_now

__all__ = ["Catalog"]


class Catalog(RunHistory, Leases):
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

    # -- stored definitions ------------------------------------------------------------------
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
        rules.check_create_call(defn, replace, if_not_exists, expected_version)
        kind, name = defn.kind, defn.name
        now = utc_now()
        with self._write() as conn:
            row = conn.execute("SELECT version, definition FROM objects WHERE key = ?",
                               (defn.key,)).fetchone()
            old = None if row is None else self._decode(row[1], name)
            kept = rules.decide_create(old, defn, replace=replace, if_not_exists=if_not_exists,
                                       expected_version=expected_version)
            if kept is not None:
                return kept
            if old is not None:
                stored = defn.with_version(old.version + 1, old.created_at, now)
                conn.execute(
                    "UPDATE objects SET name = ?, kind = ?, version = ?, definition = ?, "
                    "updated_at = ? WHERE key = ?",
                    (name, kind, stored.version, self._encode(stored), now, defn.key),
                )
                self._record(conn, stored, "REPLACE", now)
                return stored
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
        now = utc_now()
        with self._write() as conn:
            row = conn.execute("SELECT version, definition FROM objects WHERE key = ?",
                               (name.lower(),)).fetchone()
            if row is None:
                if if_exists:
                    return None
                raise rules.unknown(name, kind, self._names_in(conn, kind))
            old = self._decode(row[1], name)
            rules.check_drop_kind(old, kind)
            conn.execute("DELETE FROM objects WHERE key = ?", (old.key,))
            conn.execute(
                "INSERT INTO history (key, name, kind, version, action, definition, "
                "recorded_at) VALUES (?, ?, ?, ?, 'DROP', NULL, ?)",
                (old.key, old.name, old.kind, old.version + 1, now),
            )
            return old

    # -- retention ---------------------------------------------------------------------------
    def prune(self, *, keep_versions: int | None = None,
              keep_runs: int | None = None) -> dict[str, int]:
        """Forget old history: keep the newest ``keep_versions`` versions of every name
        (a DROP's tombstone counts as one; the newest is always kept, so numbering goes on)
        and the newest ``keep_runs`` run records of every query file (runs still marked
        ``running`` are kept: their end is still to be written). None keeps all of that
        kind. Returns ``{"versions": removed, "runs": removed}``. The Spark catalog's
        :meth:`~.spark_catalog.SparkCatalog.prune` does the same.

        Raises ``INVALID_OPTION`` for a count below 1."""
        rules.check_prune(keep_versions, keep_runs)
        removed = {"versions": 0, "runs": 0}
        with self._write() as conn:
            if keep_versions is not None:
                removed["versions"] = conn.execute(
                    "DELETE FROM history WHERE (SELECT COUNT(*) FROM history AS newer WHERE "
                    "newer.key = history.key AND newer.version > history.version) >= ?",
                    (keep_versions,)).rowcount
            if keep_runs is not None:
                removed["runs"] = conn.execute(
                    "DELETE FROM runs WHERE status != 'running' AND (SELECT COUNT(*) FROM "
                    "runs AS newer WHERE newer.file = runs.file AND newer.id > runs.id) >= ?",
                    (keep_runs,)).rowcount
        return removed

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
            raise rules.unknown(name, kind, candidates)
        return rules.check_required_kind(self._decode(row[0], name), name, kind, candidates)

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

    def __enter__(self) -> "Catalog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
