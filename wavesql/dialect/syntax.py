"""The words of WaveSQL's own syntax that the parser reads and the generator writes back.

Shared by :mod:`wavesql.dialect.parser_base`, :mod:`wavesql.dialect.parser_ddl` and
:mod:`wavesql.dialect.generator`, so that what is accepted and what is written stay one list.
"""

from __future__ import annotations

#: Spellings accepted for interval units in WaveSQL positions -> canonical singular unit.
TIME_UNITS: dict[str, str] = {
    spelling: unit
    for unit in ("MICROSECOND", "MILLISECOND", "SECOND", "MINUTE", "HOUR", "DAY")
    for spelling in (unit, unit + "S")
}

#: DDL clauses by object kind, in the order the generator writes them.
CLAUSES: dict[str, tuple[str, ...]] = {
    "STREAM": ("FROM", "FORMAT", "OPTIONS", "EVENT TIME", "WATERMARK", "PROGRESS COLUMN",
               "HEARTBEAT"),
    # AS <query>: a signal defined by a query (instead of FROM/FORMAT), always last
    "SIGNAL": ("RATE", "FROM", "FORMAT", "OPTIONS", "SEGMENT", "EPOCH", "AS"),
    "SINK": ("TO", "FORMAT", "OPTIONS"),
}
REQUIRED_CLAUSES: dict[str, tuple[str, ...]] = {
    "STREAM": ("FROM", "FORMAT"),
    "SIGNAL": ("RATE", "FROM", "FORMAT"),
    "SINK": ("TO", "FORMAT"),
}
#: DDL clause -> the ``CreateStream`` arg it fills.
CLAUSE_ARGS: dict[str, str] = {
    "FROM": "path", "TO": "path", "FORMAT": "format", "OPTIONS": "options",
    "EVENT TIME": "event_time", "WATERMARK": "watermark", "PROGRESS COLUMN": "progress_column",
    "HEARTBEAT": "heartbeat", "RATE": "rate", "SEGMENT": "segment", "EPOCH": "epoch",
    "AS": "query"}
