"""Talking to a Hive metastore through Spark: the plumbing of the shared catalog.

:mod:`.spark_catalog` keeps WaveSQL's catalog in Spark's own catalog (a Hive metastore that
several hosts share); this module is everything it needs from Spark, and the only module of
``wavesql.catalog`` that touches Spark (through the SparkSession it is given; ``pyspark`` is
imported inside functions only, so the package still imports without it).

Every object WaveSQL keeps there is a Spark **view** whose ``TBLPROPERTIES`` hold the data.
A view has no storage: creating or dropping one never creates, lists or deletes a folder
(a Hive table's ``CREATE`` makes the metastore create its location on the metastore's own
filesystem, and ``DROP`` of a managed table deletes data), so a catalog entry can precede its
files and never endangers them.

The metastore has no compare-and-swap on properties (Hive 2.3's ``alter_table`` takes no
expected value). What it does have is an atomic **conditional create**: a table name is
unique in its database (the metastore's own ``UNIQUETABLE`` index on ``TBLS (TBL_NAME,
DB_ID)``), so of two processes creating ``db.x`` at once exactly one succeeds.
:meth:`Metastore.claim` builds on that: it creates the view with a random writer token in
its properties: a create that succeeds won (Spark passes ``ignoreIfExists=false`` down to
the metastore's ``create_table``); one that fails reads the view back, and the writer whose
token is there won -- whatever error the loser saw (Spark's "already exists", the
metastore's unique-index violation surfacing as a ``MetaException`` when both passed Spark's
existence check, or a reply lost after the create happened). Versions, run ids and leases are all claimed this
way (:mod:`.spark_catalog` explains each).

Values of properties are strings of at most :data:`PART_CHARS` characters each (Hive's
schema scripts give ``TABLE_PARAMS.PARAM_VALUE`` 4000 characters on some back ends; the
Derby schema the tests' metastore creates, 32672); longer text (a definition's JSON) is split
into numbered parts, as Spark splits a table's schema.
"""

from __future__ import annotations

import re
import time
import uuid

from wavesql.errors import WaveSQLError

#: Longest property value written in one piece (Spark uses 4000 for its schema parts).
PART_CHARS = 3000
#: The marker every database of a WaveSQL shared catalog carries (DBPROPERTIES).
APPLICATION_KEY = "wavesql.application"
FORMAT_KEY = "wavesql.format_version"
#: The shared catalog's format; a newer one is refused (CATALOG_TOO_NEW).
FORMAT_VERSION = 1

_TRANSPORT = re.compile(
    r"Unable to instantiate|TTransportException|Connection refused|Could not connect to meta"
    r" ?store|SocketTimeoutException|UnknownHostException|MetaStoreClient", re.IGNORECASE)


def literal(text: str) -> str:
    """A Spark SQL string literal of ``text`` (backslashes and quotes escaped)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def ident(name: str) -> str:
    """A back-quoted Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def split_text(key: str, text: str) -> dict[str, str]:
    """``{key: text}``, or numbered parts of it when it is long (:func:`join_text`)."""
    if len(text) <= PART_CHARS:
        return {key: text}
    parts = [text[i:i + PART_CHARS] for i in range(0, len(text), PART_CHARS)]
    out = {f"{key}.numParts": str(len(parts))}
    out.update({f"{key}.part.{i}": part for i, part in enumerate(parts)})
    return out


def join_text(key: str, props: dict[str, str]) -> str | None:
    """The text :func:`split_text` stored under ``key`` (None if absent or incomplete)."""
    if key in props:
        return props[key]
    try:
        count = int(props[f"{key}.numParts"])
        return "".join(props[f"{key}.part.{i}"] for i in range(count))
    except (KeyError, ValueError):
        return None


def _condition(exc: BaseException) -> str:
    for getter in ("getCondition", "getErrorClass"):
        method = getattr(exc, getter, None)
        if method is not None:
            try:
                found = method()
            except Exception:  # noqa: BLE001 - an older PySpark: fall back to the text
                found = None
            if found:
                return str(found)
    return ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


class Metastore:
    """The Hive metastore behind a Hive-enabled SparkSession (module docstring).

    Raises ``CATALOG_UNREACHABLE`` when the session is not Hive-enabled, when no shared
    metastore is configured (an embedded Derby admits one process only: not a catalog
    several hosts can share), or when the metastore does not answer.
    """

    def __init__(self, spark):
        self.spark = spark
        self.uri = self._configured_uri()

    # -- configuration ---------------------------------------------------------------------
    def _conf(self, key: str) -> str | None:
        for lookup in (lambda k: self.spark.conf.get(k, None),
                       lambda k: self.spark.conf.get("spark.hadoop." + k, None),
                       lambda k: self.spark._jsparkSession.sharedState().hadoopConf().get(k)):
            try:
                value = lookup(key)
            except Exception:  # noqa: BLE001 - a remote (Connect) session has no JVM handle
                value = None
            if value:
                return str(value)
        return None

    def _configured_uri(self) -> str:
        hint = ("start WaveSQL with --conf spark.hadoop.hive.metastore.uris=thrift://HOST:9083 "
                "(or put a hive-site.xml naming the metastore in $SPARK_CONF_DIR); "
                "wavesql.connect(catalog='spark', config={...}) takes the same setting")
        impl = self._conf("spark.sql.catalogImplementation") or "in-memory"
        if impl != "hive":
            raise WaveSQLError(
                "CATALOG_UNREACHABLE",
                "the shared catalog lives in Spark's Hive metastore, but this Spark session "
                f"keeps an {impl} catalog",
                hint="let wavesql.connect(catalog='spark') start Spark, or build the session "
                     "with .enableHiveSupport(); and " + hint)
        uri = self._conf("hive.metastore.uris")
        if uri:
            return uri
        jdbc = self._conf("javax.jdo.option.ConnectionURL")
        if jdbc and not re.match(r"jdbc:derby:(?!//)", jdbc):  # not an embedded Derby
            return jdbc  # Spark talks to the metastore's database itself: shared as well
        raise WaveSQLError(
            "CATALOG_UNREACHABLE",
            "no shared Hive metastore is configured (hive.metastore.uris is empty): Spark "
            "would keep the catalog in an embedded Derby database, which one process at a "
            "time can open" + (f" ({jdbc})" if jdbc else ""),
            hint=hint)

    # -- errors ----------------------------------------------------------------------------
    def error(self, exc: BaseException, doing: str) -> WaveSQLError:
        """A WaveSQLError for a metastore call that failed."""
        if isinstance(exc, WaveSQLError):
            return exc
        text = str(exc)
        if _TRANSPORT.search(text):
            return WaveSQLError(
                "CATALOG_UNREACHABLE",
                f"the Hive metastore at {self.uri} did not answer ({doing})",
                hint="check that the metastore service runs and that hive.metastore.uris "
                     "(--conf spark.hadoop.hive.metastore.uris=thrift://HOST:9083) names it")
        return WaveSQLError("CATALOG_ERROR", f"the Hive metastore at {self.uri} refused "
                            f"{doing}: {_first_line(exc)}",
                            hint="the shared catalog is left as it was before this change")

    @staticmethod
    def missing(exc: BaseException) -> bool:
        return _condition(exc) in ("TABLE_OR_VIEW_NOT_FOUND", "SCHEMA_NOT_FOUND") or bool(
            re.search(r"NoSuchTable|NoSuchDatabase|not found", str(exc), re.IGNORECASE))

    # -- statements ------------------------------------------------------------------------
    def run(self, sql: str, doing: str) -> list:
        """Run one Spark SQL command against the metastore; its rows."""
        try:
            return self.spark.sql(sql).collect()
        except Exception as exc:  # noqa: BLE001 - translated
            raise self.error(exc, doing) from None

    def ensure_database(self, database: str, comment: str) -> None:
        """Create ``database``, marked as a WaveSQL catalog's, unless it exists; then check
        it is one this WaveSQL may use (:meth:`check_database`)."""
        props = f"({literal(APPLICATION_KEY)} = 'wavesql', {literal(FORMAT_KEY)} = " \
                f"'{FORMAT_VERSION}')"
        failure: BaseException | None = None
        # processes opening a new catalog at once race to create it: retried
        for _ in range(4):
            try:
                self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {ident(database)} COMMENT "
                               f"{literal(comment)} WITH DBPROPERTIES {props}").collect()
                failure = None
                break
            except Exception as exc:  # noqa: BLE001 - retried, then translated
                failure = exc
                if _TRANSPORT.search(str(exc)):
                    raise self.error(exc, f"creating database {database}") from None
                time.sleep(0.5)
        found = self.database_properties(database)
        if found is None:
            raise self.error(failure or RuntimeError("no database"),
                             f"creating database {database}")
        self.check_database(database, found)

    def check_database(self, database: str, found: dict[str, str], *,
                       may_adopt: bool = False) -> None:
        """Refuse a database that is not a WaveSQL catalog's (``CATALOG_CORRUPT``) or that
        a newer WaveSQL wrote (``CATALOG_TOO_NEW``), as the SQLite file refuses a foreign
        file or a newer format; nothing is written then. ``may_adopt``: an unmarked
        database with no tables (one an administrator created to choose its location) is
        marked as this catalog's and used."""
        if found.get(APPLICATION_KEY) != "wavesql" and may_adopt:
            if not self.tables(database):
                self.run(f"ALTER DATABASE {ident(database)} SET DBPROPERTIES "
                         f"({literal(APPLICATION_KEY)} = 'wavesql', {literal(FORMAT_KEY)} = "
                         f"'{FORMAT_VERSION}')", f"marking database {database}")
                return
            # (another process may have just adopted it and written to it: look again)
            found = self.database_properties(database) or {}
        if found.get(APPLICATION_KEY) != "wavesql":
            raise WaveSQLError(
                "CATALOG_CORRUPT",
                f"database `{database}` in the Hive metastore at {self.uri} exists and is not "
                "a WaveSQL catalog's" + (" (it holds tables WaveSQL did not make)"
                                         if may_adopt else ""),
                hint="WaveSQL leaves it untouched; choose another database with "
                     "--catalog spark:<database>")
        try:
            version = int(found.get(FORMAT_KEY, "0") or 0)
        except ValueError:
            version = FORMAT_VERSION + 1  # not a number this WaveSQL wrote
        if version > FORMAT_VERSION:
            raise WaveSQLError(
                "CATALOG_TOO_NEW",
                f"the shared catalog in `{database}` has format version "
                f"{found.get(FORMAT_KEY)}; this WaveSQL reads up to version {FORMAT_VERSION}",
                hint="upgrade WaveSQL to use it; the catalog was left untouched")

    def database_properties(self, database: str) -> dict[str, str] | None:
        """The DBPROPERTIES of ``database``; None if it does not exist."""
        try:
            rows = self.spark.sql(f"DESCRIBE DATABASE EXTENDED {ident(database)}").collect()
        except Exception as exc:  # noqa: BLE001
            if self.missing(exc):
                return None
            raise self.error(exc, f"reading database {database}") from None
        text = next((r[1] for r in rows if str(r[0]).lower() == "properties"), "") or ""
        return {k.strip(): v.strip() for k, v in re.findall(r"\(([^,()]+),([^()]*)\)", text)}

    def database_location(self, database: str) -> str:
        """Where the metastore keeps ``database`` (its ``Location``): a URI, or a plain
        path for local disk (Spark writes ``file:/x`` for ``/x``)."""
        rows = self.run(f"DESCRIBE DATABASE {ident(database)}", f"reading database {database}")
        found = next((str(r[1]) for r in rows if str(r[0]).lower() == "location"), "")
        if not found:
            raise WaveSQLError("CATALOG_ERROR", f"the Hive metastore at {self.uri} records no "
                               f"location for database {database}",
                               hint="set wavesql.state.location to a folder every host sees")
        local = re.match(r"file:(?://(?:localhost)?)?(/.*)", found)
        return local.group(1) if local else found

    def databases(self) -> list[str]:
        return [r[0] for r in self.run("SHOW DATABASES", "listing databases")]

    def tables(self, database: str, prefix: str | None = None) -> list[str]:
        """Names of the tables and views of ``database`` (temporary views left out); with
        ``prefix`` only those starting with it (the metastore filters: ``get_tables`` with a
        pattern, so the answer does not grow with the rest of the database)."""
        like = f" LIKE {literal(prefix + '*')}" if prefix else ""
        rows = self.run(f"SHOW TABLES IN {ident(database)}{like}",
                        f"listing database {database}")
        return [r["tableName"] for r in rows if not r["isTemporary"]]

    def properties(self, database: str, table: str) -> dict[str, str] | None:
        """The TBLPROPERTIES of ``database.table``; None if it does not exist."""
        try:
            rows = self.spark.sql(
                f"SHOW TBLPROPERTIES {ident(database)}.{ident(table)}").collect()
        except Exception as exc:  # noqa: BLE001
            if self.missing(exc):
                return None
            raise self.error(exc, f"reading {database}.{table}") from None
        return {r[0]: r[1] for r in rows}

    def create_view(self, database: str, table: str, props: dict[str, str], body: str, *,
                    replace: bool = False, comment: str | None = None) -> None:
        """``CREATE [OR REPLACE] VIEW database.table ... TBLPROPERTIES (props) AS body``."""
        listed = ", ".join(f"{literal(k)} = {literal(v)}" for k, v in props.items())
        self.spark.sql(
            f"CREATE {'OR REPLACE ' if replace else ''}VIEW {ident(database)}.{ident(table)}"
            + (f" COMMENT {literal(comment)}" if comment else "")
            + f" TBLPROPERTIES ({listed}) AS {body}").collect()

    def claim(self, database: str, table: str, props: dict[str, str],
              body: str = "SELECT 1 AS wavesql") -> dict[str, str] | None:
        """Create view ``database.table`` unless it exists: its properties as stored if this
        call created it (the conditional create of the module docstring), None if another
        writer had."""
        token = uuid.uuid4().hex
        mine = {**props, "wavesql.writer": token}
        try:
            self.create_view(database, table, mine, body)
            # Created without an error: this call won. (Spark's plain CREATE VIEW passes
            # ignoreIfExists=false down to the metastore's create_table, which fails on
            # the unique index if another writer's create came first: success is proof.)
            return mine
        except Exception as exc:  # noqa: BLE001 - who won is read back below
            failure = exc
        # Failed: lost to another writer, or failed for another reason -- or the reply was
        # lost after the create happened; the token read back says which.
        found = self.properties(database, table)
        if found is None:  # not created at all: the create failed for another reason
            raise self.error(failure or RuntimeError("the view vanished"),
                             f"creating {database}.{table}")
        return found if found.get("wavesql.writer") == token else None

    def set_properties(self, database: str, table: str, props: dict[str, str]) -> None:
        listed = ", ".join(f"{literal(k)} = {literal(v)}" for k, v in props.items())
        self.run(f"ALTER VIEW {ident(database)}.{ident(table)} SET TBLPROPERTIES ({listed})",
                 f"updating {database}.{table}")

    def drop_view(self, database: str, table: str) -> None:
        self.run(f"DROP VIEW IF EXISTS {ident(database)}.{ident(table)}",
                 f"dropping {database}.{table}")
