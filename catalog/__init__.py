"""The persistent WaveSQL catalog: definitions of streams, signals, views and sinks.

:mod:`.objects` holds the validated, JSON-serialisable definition dataclasses;
:mod:`.store` keeps them, with their version history, in an SQLite file that several
processes may share. Nothing here imports Spark or the planner.

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
from .sqlite_file import CATALOG_ENV, DEFAULT_CATALOG_FILE
from .store import Catalog

__all__ = [
    "Catalog",
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
