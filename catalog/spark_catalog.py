"""The shared catalog: WaveSQL's catalog kept in Spark's own catalog (a Hive metastore).

The SQLite file (:mod:`.store`) is the embedded default; it cannot be shared by hosts (SQLite
over a network filesystem is not safe). ``wavesql.connect(catalog="spark")`` or ``wavesql
--catalog spark`` (``spark:<database>`` to choose the database; ``wavesql`` by default)
keeps the catalog in the Hive metastore the Spark session uses, which any number of hosts
share. :class:`SparkCatalog` has the API of :class:`~.store.Catalog` (definitions, run
history, leases), so nothing else in WaveSQL changes; the rules of a write are
:mod:`.rules`'.

Layout (``<db>`` is the chosen database; all objects are views, :mod:`.metastore` says why)::

    <db>.<name>                 one view per live stream, signal, view and sink, under its
                                name, for plain Spark users: ``SHOW TABLES IN wavesql``,
                                ``SHOW TBLPROPERTIES wavesql.trades``. Its properties hold
                                wavesql.kind / .name / .version / .definition (the JSON of
                                Definition.to_dict). A stream of Parquet or ORC files is a view
                                over its files (``SELECT * FROM wavesql.trades`` reads them);
                                any other object is a view of its declared columns that fails
                                with a message saying to query it through WaveSQL (one
                                without declared columns, a view with no rows); property
                                wavesql.view says which (files / declared / empty).
    <db>_history.<name>__v<n>   version n of <name>: its definition, or a DROP (a tombstone)
    <db>_runs.r<id>             one run of a query file (wavesql runs)
    <db>_leases.l<hash>__g<n>   generation n of a lease (who runs a job)

Names that are not plain lower-case identifiers (Hive allows ``[a-z0-9_]``) are kept under
``wavesql_<hash>``; their properties carry the name as written.

**Versions without compare-and-swap.** The history is the truth, and a version is committed
by the conditional create of its history entry ``<name>__v<n>`` (:meth:`Metastore.claim`):
two writers that both read version 1 both try to create ``__v000002``; one wins, the other
re-reads (a plain ``CREATE OR REPLACE`` then commits version 3 -- serialised, no lost
update; with ``expected_version`` it gets ``CONFLICT``; a plain ``CREATE`` gets
``DUPLICATE_OBJECT``). History entries are never changed, so reading them is cached; a
process that knows a name's latest version claims the next one without listing the history
first (the claim itself proves the version it decided on was still the latest). The view
under the object's name is a projection of the latest entry, written after the commit
(only its properties when its body stays the same); a writer then probes for a newer
version and rewrites the view until none exists (so of two racing writers the last to
look fixes what the other wrote), and a projection a crash left stale is fixed by the next
write to that name. Readers in WaveSQL read the history, never the projection.

**Leases without compare-and-swap** (:meth:`SparkCatalog.lease`, the same guarantees as
:mod:`.leases`): a lease is a sequence of generations ``l<hash>__g<n>``, each claimed by a
conditional create, the highest being the current one. A holder renews its generation's
``expires`` property; releasing marks it free. A contender takes generation n+1 only when
generation n is free, expired, or held by a process of its own host that no longer exists;
of two contenders exactly one creates n+1. The winner drops the generations below. Expiry
compares wall clocks, so hosts' clocks must agree to well within a lease (30 s): NTP.

**Run ids**: ``r<id>`` claimed the same way (max + 1, retried when another process took it).
Run history and leases are :mod:`.spark_runs`'.

**Opening**: every database of the catalog that exists is checked before any is created: a
newer format is ``CATALOG_TOO_NEW``, a database WaveSQL did not mark ``CATALOG_CORRUPT``
(except an empty main database, made beforehand to choose its location: it is adopted).
**Retention**: :meth:`SparkCatalog.prune`, the SQLite file's rules. **State** that belongs to
no sink (a Kafka sink's default checkpoints) goes under the main database's location
(:meth:`SparkCatalog.state_location`), which the metastore gives every host alike.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import time

from wavesql.errors import WaveSQLError

from . import rules
from .metastore import Metastore, ident, join_text, literal, split_text
from .objects import Definition, Tombstone, normalize_kind
from .spark_runs import SharedRuns
from .schema import utc_now

__all__ = ["SparkCatalog", "DEFAULT_DATABASE", "shared_database", "HIVE_CONFIG"]

#: The database of ``--catalog spark``.
DEFAULT_DATABASE = "wavesql"
#: Spark settings a session needs for the shared catalog (``wavesql.connect`` adds them).
HIVE_CONFIG = {"spark.sql.catalogImplementation": "hive"}
_PLAIN = re.compile(r"[a-z0-9_]{1,100}")
_ENTRY = re.compile(r"(.+)__v(\d{6,})")


def shared_database(spec: object) -> str | None:
    """``"spark"`` -> ``"wavesql"``, ``"spark:<database>"`` -> the database; None for a file.

    Examples
    --------
    >>> shared_database("spark"), shared_database("SPARK:Ops"), shared_database("cat.db")
    ('wavesql', 'ops', None)
    """
    if not isinstance(spec, str):
        return None
    text = spec.strip()
    head, sep, database = text.partition(":")
    if head.lower() != "spark" or (sep and database.startswith("/")):
        return None
    database = (database.strip() or DEFAULT_DATABASE).lower() if sep else DEFAULT_DATABASE
    if not re.fullmatch(r"[a-z_][a-z0-9_]{0,99}", database):
        raise WaveSQLError("INVALID_OPTION", f"`{spec}`: `{database}` is not a database name "
                           "the Hive metastore takes",
                           hint="letters, digits and _, e.g. --catalog spark:wavesql_ops")
    return database


def table_name(key: str) -> str:
    """The metastore name of the object with lookup key ``key``."""
    if _PLAIN.fullmatch(key):
        return key
    return "wavesql_" + hashlib.sha256(key.encode()).hexdigest()[:16]


class SparkCatalog(SharedRuns):
    """WaveSQL's catalog in the Hive metastore of ``spark`` (module docstring).

    Parameters
    ----------
    spark : SparkSession
        Hive-enabled (``spark.sql.catalogImplementation=hive``) and pointed at a shared
        metastore (``hive.metastore.uris``).
    database : str
        Where the objects appear to Spark; ``<database>_history``, ``_runs`` and ``_leases``
        hold the rest.
    busy_timeout : float
        Seconds a write keeps retrying while other writers win the same version.
    """

    #: Several hosts share it: nothing may be kept on one host's disk (wavesql/jobs.py
    #: takes leases here instead of file locks).
    shared = True

    def __init__(self, spark, database: str = DEFAULT_DATABASE, *, busy_timeout: float = 30.0):
        self.store = Metastore(spark)
        self.database = database
        self.path = f"spark:{database}"
        self.busy_timeout = float(busy_timeout)
        self.history_db, self.runs_db, self.leases_db = (
            f"{database}_history", f"{database}_runs", f"{database}_leases")
        self._entries: dict[tuple[str, int], dict[str, str]] = {}  # immutable: cached
        self._known: dict[str, int] = {}  # key -> the highest version seen committed
        self._closed = False
        self._state: str | None = None
        known = set(self.store.databases())  # the first call: CATALOG_UNREACHABLE if none
        databases = [(database, "WaveSQL streams, signals, views and sinks")] + [
            (db, f"WaveSQL catalog {database}: {what}")
            for db, what in ((self.history_db, "versions"), (self.runs_db, "run history"),
                             (self.leases_db, "leases"))]
        # every database that exists is checked before any is created: a foreign or newer
        # catalog is refused with nothing written
        for db, _ in databases:
            if db in known:
                self.store.check_database(db, self.store.database_properties(db) or {},
                                          may_adopt=db == database)
        for db, comment in databases:
            if db not in known:
                self.store.ensure_database(db, comment)

    def state_location(self) -> str:
        """Where state that belongs to no sink folder goes by default (a Kafka sink's
        checkpoints, wavesql/jobs.py): ``_wavesql_state`` in the location the metastore
        records for the catalog's database. Every host reads the same location there (a
        folder next to a process's own files would differ from host to host); it is as
        shared as the warehouse the database was created in (``spark.sql.warehouse.dir``
        on hdfs:// or s3a:// for a cluster; ``wavesql.state.location`` overrides it)."""
        if self._state is None:
            self._state = self.store.database_location(self.database).rstrip("/") \
                + "/_wavesql_state"
        return self._state

    # -- history entries ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")

    def _index(self, table: str | None = None) -> dict[str, list[int]]:
        """Table name -> its committed versions, ascending (one listing of the history; of
        ``table``'s entries only if given)."""
        self._check_open()
        out: dict[str, list[int]] = {}
        for entry in self.store.tables(self.history_db, None if table is None
                                       else f"{table}__v"):
            match = _ENTRY.fullmatch(entry)
            if match:
                out.setdefault(match.group(1), []).append(int(match.group(2)))
        for versions in out.values():
            versions.sort()
        return out

    def _entry(self, table: str, version: int, *, pruned_ok: bool = False
               ) -> dict[str, str] | None:
        """The properties of version ``version`` of ``table`` (None if ``pruned_ok`` and it
        is gone: :meth:`prune` dropped it after it was listed)."""
        cached = self._entries.get((table, version))
        if cached is None:
            cached = self.store.properties(self.history_db, f"{table}__v{version:06d}")
            if cached is None and pruned_ok:
                return None
            if cached is None or "wavesql.action" not in cached:
                raise self._corrupt(f"{table}__v{version:06d}", "is not a WaveSQL version")
            self._entries[(table, version)] = cached
        return cached

    def _corrupt(self, what: str, why: str) -> WaveSQLError:
        return WaveSQLError("CATALOG_CORRUPT", f"`{self.history_db}.{what}` in the Hive "
                            f"metastore at {self.store.uri} {why}",
                            hint="WaveSQL leaves it untouched; restore it or drop it by hand")

    def _decode(self, props: dict[str, str], what: str) -> Definition | Tombstone:
        if props["wavesql.action"] == "DROP":
            return Tombstone(props["wavesql.name"], props["wavesql.kind"],
                             int(props["wavesql.version"]), props["wavesql.recorded_at"])
        try:
            return Definition.from_dict(json.loads(join_text("wavesql.definition", props)
                                                   or ""))
        except (ValueError, TypeError, WaveSQLError) as exc:
            raise self._corrupt(what, f"holds an unreadable definition ({exc})") from exc

    def _latest(self, key: str, index: dict[str, list[int]] | None = None
                ) -> tuple[int, Definition | Tombstone | None]:
        """(highest version used by ``key``, its entry), or (0, None)."""
        table = table_name(key)
        versions = (self._index(table) if index is None else index).get(table)
        if not versions:
            return 0, None
        self._known[key] = max(self._known.get(key, 0), versions[-1])
        props = self._entry(table, versions[-1])
        if props.get("wavesql.key") != key:
            raise self._corrupt(table, f"belongs to `{props.get('wavesql.key')}`, not `{key}`")
        return versions[-1], self._decode(props, table)

    def _live(self, key: str, index=None) -> Definition | None:
        found = self._latest(key, index)[1]
        return found if isinstance(found, Definition) else None

    def _commit(self, key: str, version: int, action: str, when: str,
                defn: Definition) -> bool:
        """Claim version ``version`` of ``key`` (False: another writer committed it)."""
        props = {"wavesql.key": key, "wavesql.name": defn.name, "wavesql.kind": defn.kind,
                 "wavesql.version": str(version), "wavesql.action": action,
                 "wavesql.recorded_at": when}
        if action != "DROP":
            props.update(split_text("wavesql.definition", _encode(defn)))
        stored = self.store.claim(self.history_db, f"{table_name(key)}__v{version:06d}", props)
        if stored is not None:
            self._entries[(table_name(key), version)] = stored
            self._known[key] = max(self._known.get(key, 0), version)
        return stored is not None

    def _busy(self, name: str) -> WaveSQLError:
        return WaveSQLError("CATALOG_BUSY", f"`{name}` kept being changed by other processes "
                            f"for more than {self.busy_timeout:g} s",
                            hint="retry, or pass a larger busy_timeout")

    # -- writing -----------------------------------------------------------------------------
    def create(self, defn: Definition, *, replace: bool = False, if_not_exists: bool = False,
               expected_version: int | None = None) -> Definition:
        """Store ``defn`` (see :meth:`wavesql.catalog.Catalog.create`)."""
        rules.check_create_call(defn, replace, if_not_exists, expected_version)
        deadline = time.monotonic() + self.busy_timeout
        # A version this process already knows is the latest is tried without listing the
        # history: its claim of version n+1 succeeds only if nobody committed n+1, which is
        # the proof that n was the latest (versions are dense: each is claimed as the
        # latest + 1). Only a write is decided that way; an answer without a write
        # (IF NOT EXISTS, DUPLICATE_OBJECT, CONFLICT) is given from a fresh listing.
        fresh = defn.key not in self._known
        while True:
            if fresh:
                last, found = self._latest(defn.key)
            else:
                last = self._known[defn.key]
                props = self._entry(table_name(defn.key), last, pruned_ok=True)
                if props is None:  # pruned since (the newest never is): not the latest
                    fresh = True
                    continue
                found = self._decode(props, table_name(defn.key))
            old = found if isinstance(found, Definition) else None
            try:
                kept = rules.decide_create(old, defn, replace=replace,
                                           if_not_exists=if_not_exists,
                                           expected_version=expected_version)
            except WaveSQLError:
                if fresh:
                    raise
                fresh = True
                continue
            if kept is not None:
                if fresh:
                    return kept
                fresh = True
                continue
            if old is None:  # a new name (a live one is ours: its view is WaveSQL's)
                self._refuse_foreign(defn)
            now = utc_now()
            stored = defn.with_version(last + 1, old.created_at if old else now, now)
            if self._commit(defn.key, stored.version, "REPLACE" if old else "CREATE", now,
                            stored):
                self._project(defn.key, (stored.version, stored), old)
                return stored
            if time.monotonic() > deadline:  # others keep winning: look again, then give up
                raise self._busy(defn.name)
            if fresh:
                time.sleep(random.uniform(0.01, 0.1))
            fresh = True

    def drop(self, name: str, kind: str | type[Definition] | None = None, *,
             if_exists: bool = False) -> Definition | None:
        """Remove ``name`` (see :meth:`wavesql.catalog.Catalog.drop`)."""
        kind = normalize_kind(kind) if kind is not None else None
        key = name.lower()
        deadline = time.monotonic() + self.busy_timeout
        while True:
            last, found = self._latest(key)
            if not isinstance(found, Definition):
                if if_exists:
                    return None
                raise rules.unknown(name, kind, self.names(kind))
            rules.check_drop_kind(found, kind)
            if self._commit(key, last + 1, "DROP", utc_now(), found):
                self._project(key, (last + 1, None), found)
                return found
            if time.monotonic() > deadline:
                raise self._busy(name)
            time.sleep(random.uniform(0.01, 0.1))

    def _refuse_foreign(self, defn: Definition) -> None:
        """A table of the same name in the database that WaveSQL did not make: refused
        before a version is committed (its projection could never be written)."""
        props = self.store.properties(self.database, table_name(defn.key))
        if props is not None and "wavesql.key" not in props:
            raise WaveSQLError(
                "DUPLICATE_OBJECT", f"cannot create {defn.kind.lower()} `{defn.name}`: "
                f"`{self.database}.{table_name(defn.key)}` is a Spark table WaveSQL did not "
                "create", hint="choose another name, or another database (spark:<database>)")

    # -- the projection: one view per live object, for plain Spark users ----------------------
    def _project(self, key: str, committed: tuple[int, Definition | None],
                 before: Definition | None = None) -> None:
        """Make ``<db>.<name>`` show the latest version of ``key`` (module docstring): the
        version this process just ``committed`` (None: a DROP; ``before``: the version it
        replaced), then, while a newer version exists, the latest.

        Of writers racing on one name, each looks after writing the view whether a version
        above the one it wrote exists (one probe of the next history entry: versions are
        dense), and if so writes the latest and looks again; so the last writer of the
        view leaves it at the latest version."""
        table = table_name(key)
        last, found = committed
        shown = before
        for _ in range(8):
            try:
                if not isinstance(found, Definition):
                    self.store.drop_view(self.database, table)
                else:
                    self._write_view(table, found, shown)
            except Exception:  # noqa: BLE001 - another writer's projection raced ours
                shown = None  # (what the view shows is unknown now: written whole)
                time.sleep(random.uniform(0.05, 0.3))
                last, found = self._latest(key)
                continue
            if self.store.properties(self.history_db, f"{table}__v{last + 1:06d}") is None:
                return
            shown = found if isinstance(found, Definition) else None
            last, found = self._latest(key)

    def _write_view(self, table: str, defn: Definition, shown: Definition | None = None
                    ) -> None:
        """Write the view of ``defn``. ``shown``: the version the view is believed to show.
        When it does (read: the view's own properties say so) and its body would stay the
        same, with properties of the same keys, only the properties change (``ALTER VIEW
        ... SET TBLPROPERTIES``: about 7 metastore calls with the read, where ``CREATE OR
        REPLACE VIEW`` analyses the body, drops and creates: about 20)."""
        props = {"wavesql.key": defn.key, "wavesql.name": defn.name,
                 "wavesql.kind": defn.kind, "wavesql.version": str(defn.version),
                 "wavesql.updated_at": defn.updated_at,
                 **split_text("wavesql.definition", _encode(defn))}
        comment = (f"WaveSQL {defn.kind.lower()} {defn.name} (version {defn.version}); its "
                   "definition is in the wavesql.* table properties")
        bodies = _bodies(defn)
        if shown is not None and shown.key == defn.key and _bodies(shown) == bodies and \
                split_text("wavesql.definition", _encode(shown)).keys() == \
                split_text("wavesql.definition", _encode(defn)).keys():
            live = self.store.properties(self.database, table) or {}
            if live.get("wavesql.key") == defn.key and \
                    live.get("wavesql.version") == str(shown.version):
                self.store.set_properties(self.database, table,
                                          {**props, "comment": comment})
                return
        for i, (how, body) in enumerate(bodies):
            try:
                self.store.create_view(self.database, table, {**props, "wavesql.view": how},
                                       body, replace=True, comment=comment)
                return
            except Exception:  # noqa: BLE001 - files not readable here: the next body
                if i == len(bodies) - 1:
                    raise

    # -- retention ---------------------------------------------------------------------------
    def prune(self, *, keep_versions: int | None = None,
              keep_runs: int | None = None) -> dict[str, int]:
        """Forget old history (see :meth:`wavesql.catalog.Catalog.prune`: the same rules).
        Old versions' entries are dropped oldest first; the newest of every name is never
        touched, so a concurrent write (which claims the version above it) is unaffected,
        and a reader that listed an entry dropped meanwhile skips it."""
        rules.check_prune(keep_versions, keep_runs)
        removed = {"versions": 0, "runs": 0}
        if keep_versions is not None:
            for table, versions in self._index().items():
                for version in versions[:-keep_versions]:
                    self.store.drop_view(self.history_db, f"{table}__v{version:06d}")
                    self._entries.pop((table, version), None)
                    removed["versions"] += 1
        if keep_runs is not None:
            removed["runs"] = self._prune_runs(keep_runs)
        return removed

    # -- reading -----------------------------------------------------------------------------
    def get(self, name: str) -> Definition | None:
        """The live definition called ``name`` (case-insensitive), or None."""
        return self._live(name.lower())

    def require(self, name: str, kind: str | type[Definition] | None = None) -> Definition:
        """Like :meth:`get`, but raise ``UNKNOWN_OBJECT`` / ``WRONG_OBJECT_KIND``."""
        kind = normalize_kind(kind) if kind is not None else None
        defn = self.get(name)
        candidates = self.names(kind) if defn is None or kind else []
        if defn is None:
            raise rules.unknown(name, kind, candidates)
        return rules.check_required_kind(defn, name, kind, candidates)

    def list(self, kind: str | type[Definition] | None = None) -> list[Definition]:
        """All live definitions (of ``kind`` if given), sorted by name case-insensitively."""
        kind = normalize_kind(kind) if kind is not None else None
        index = self._index()
        out = []
        for table, versions in index.items():
            found = self._decode(self._entry(table, versions[-1]), table)
            if isinstance(found, Definition) and (kind is None or found.kind == kind):
                out.append(found)
        return sorted(out, key=lambda d: d.key)

    def names(self, kind: str | type[Definition] | None = None) -> list[str]:
        """Names of the live objects (of ``kind`` if given), as written, sorted."""
        return [d.name for d in self.list(kind)]

    def history(self, name: str) -> list[Definition | Tombstone]:
        """Every version ever stored under ``name``, oldest first; a DROP is a Tombstone."""
        table = table_name(name.lower())
        entries = [self._entry(table, v, pruned_ok=True)
                   for v in self._index(table).get(table, [])]
        return [self._decode(props, table) for props in entries if props is not None]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Forget the metastore (the SparkSession is left to its owner)."""
        self._closed = True

    def __enter__(self) -> "SparkCatalog":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparkCatalog({self.path!r} at {self.store.uri})"


def _encode(defn: Definition) -> str:
    return json.dumps(defn.to_dict(), sort_keys=True, allow_nan=False)


def _bodies(defn: Definition) -> list[tuple[str, str]]:
    """The bodies the view of ``defn`` may have, the first Spark accepts being used."""
    bodies = [_files_body(defn), _declared_body(defn),
              ("empty", "SELECT CAST(NULL AS STRING) AS wavesql_definition WHERE false")]
    return [b for b in bodies if b]


def _files_body(defn: Definition) -> tuple[str, str] | None:
    """A stream of Parquet/ORC files: a view reading them (Spark's SQL on files)."""
    if not (defn.kind == "STREAM" and defn.source == "files"
            and defn.format in ("parquet", "orc") and not defn.options):
        return None
    cols = ", ".join(ident(c.name) for c in defn.columns)
    return "files", f"SELECT {cols} FROM {defn.format}.{ident(defn.path)}"


def _declared_body(defn: Definition) -> tuple[str, str] | None:
    """The declared columns, typed, reading nothing: querying it says where to go."""
    cols = getattr(defn, "columns", ()) or getattr(defn, "channels", ())
    if not cols:
        return None
    message = literal(f"{defn.name} is a WaveSQL {defn.kind.lower()}: query it through "
                      "WaveSQL (its definition is in this view's wavesql.* properties)")
    listed = ", ".join(f"CAST(raise_error({message}) AS {c.type}) AS {ident(c.name)}"
                       for c in cols)
    return "declared", f"SELECT {listed}"
