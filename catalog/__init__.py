"""The persistent WaveSQL catalog: definitions of streams, signals, views and sinks.

:mod:`.objects` holds the validated, JSON-serialisable definition dataclasses;
:mod:`.store` keeps them, with their version history, in an SQLite file that several
processes of one host may share (the embedded default); :mod:`.spark_catalog` keeps them in
Spark's Hive metastore, which several hosts share (``catalog="spark"``), with the same API.
Nothing here imports the planner; only :mod:`.metastore` talks to Spark (through the session
it is given).

Examples
--------
>>> from wavesql.catalog import Catalog, StreamDef, Column
>>> with Catalog(":memory:") as cat:
...     t = cat.create(StreamDef("trades", [Column("ts", "TIMESTAMP")], "data/trades/",
...                              "parquet", event_time="ts"))
...     cat.require("TRADES", "stream").event_time
'ts'
"""

from .objects import (
    KINDS,
    Column,
    Definition,
    SignalDef,
    SinkDef,
    StreamDef,
    Tombstone,
    ViewDef,
    normalize_kind,
)
from .schema import FORMAT_VERSION, MIGRATIONS
from .spark_catalog import HIVE_CONFIG, SparkCatalog, shared_database
from .sqlite_file import CATALOG_ENV, DEFAULT_CATALOG_FILE
from .store import Catalog

__all__ = [
    "Catalog",
    "SparkCatalog",
    "shared_database",
    "HIVE_CONFIG",
    "Column",
    "Definition",
    "StreamDef",
    "SignalDef",
    "ViewDef",
    "SinkDef",
    "Tombstone",
    "KINDS",
    "normalize_kind",
    "CATALOG_ENV",
    "DEFAULT_CATALOG_FILE",
    "FORMAT_VERSION",
    "MIGRATIONS",
]
