"""Catalog definitions: what ``CREATE STREAM/SIGNAL/VIEW/SINK`` records.

Each definition is a frozen dataclass, validated when it is constructed (so a bad ``CREATE``
fails before anything is written) and convertible to and from plain JSON-ready dicts (so the
store keeps one JSON document per version). The store, not the caller, assigns ``version``,
``created_at`` and ``updated_at``.

Names are case-insensitive identifiers: they are stored as the user spelled them and looked up
by :attr:`Definition.key` (the lower-cased name), like Spark's own catalog.

Examples
--------
>>> s = StreamDef("trades", [Column("sym", "STRING"), Column("ts", "TIMESTAMP")],
...               path="data/trades/", format="parquet", event_time="ts",
...               watermark_us=5_000_000)
>>> s.kind, s.key, s.column("TS").type
('STREAM', 'trades', 'TIMESTAMP')
>>> Definition.from_dict(s.to_dict()) == s
True
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable, Mapping

from wavesql.errors import WaveSQLError, did_you_mean

__all__ = [
    "Column",
    "Definition",
    "StreamDef",
    "SignalDef",
    "ViewDef",
    "SinkDef",
    "Tombstone",
    "KINDS",
    "normalize_kind",
]


# -- validation helpers -------------------------------------------------------------------

def _check_name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WaveSQLError("INVALID_OPTION", f"{what} must be a non-empty name, got {value!r}",
                           hint="names are identifiers such as `trades` or `mic_left`")
    if any(ord(ch) < 32 for ch in value):
        raise WaveSQLError("INVALID_OPTION", f"{what} {value!r} contains control characters")
    return value


def _check_text(value: Any, what: str, hint: str | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise WaveSQLError("INVALID_OPTION", f"{what} must be a non-empty string, got {value!r}",
                           hint=hint)
    return value


def _check_int(value: Any, what: str, minimum: int | None = None, *, optional: bool = False,
               code: str = "INVALID_OPTION") -> int | None:
    if value is None and optional:
        return None
    # bool is an int subclass; `SEGMENT TRUE` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise WaveSQLError(code, f"{what} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        bound = "positive" if minimum == 1 else f">= {minimum}"
        raise WaveSQLError(code, f"{what} must be {bound}, got {value}")
    return value


def _check_columns(value: Any, owner: str, what: str = "column") -> tuple[Column, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise WaveSQLError("INVALID_OPTION",
                           f"the {what}s of {owner} must be a sequence of columns, got {value!r}")
    columns = []
    for item in value:
        if isinstance(item, Column):
            columns.append(item)
        elif isinstance(item, Mapping):  # the to_dict() form
            columns.append(Column.from_dict(item))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            columns.append(Column(*item))
        else:
            raise WaveSQLError("INVALID_OPTION",
                               f"{owner}: expected a Column or a (name, type) pair, got {item!r}")
    seen: dict[str, str] = {}
    for col in columns:
        if col.name.lower() in seen:
            raise WaveSQLError(
                "DUPLICATE_COLUMN",
                f"{what} `{col.name}` is declared twice in {owner}",
                hint=f"{what} names are case-insensitive (`{seen[col.name.lower()]}` and "
                     f"`{col.name}` are the same); rename one of them",
            )
        seen[col.name.lower()] = col.name
    return tuple(columns)


def _check_options(value: Any, owner: str) -> tuple[tuple[str, str], ...]:
    items = value.items() if isinstance(value, Mapping) else value
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise WaveSQLError("INVALID_OPTION", f"the options of {owner} must be key/value pairs")
    pairs = []
    seen: set[str] = set()
    for item in items:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise WaveSQLError("INVALID_OPTION",
                               f"{owner}: an option must be a (key, value) pair, got {item!r}")
        key, val = item
        _check_name(key, f"an option key of {owner}")
        if not isinstance(val, str):
            # Spark reader options are strings; converting silently would hide `1` vs `1.0`.
            raise WaveSQLError("INVALID_OPTION",
                               f"{owner}: option `{key}` must have a string value, got {val!r}",
                               hint=f"write it quoted, e.g. OPTIONS ({key} '{val}')")
        # Spark treats option keys case-insensitively, so `header` and `Header` collide.
        if key.lower() in seen:
            raise WaveSQLError("INVALID_OPTION", f"{owner}: option `{key}` is given twice")
        seen.add(key.lower())
        pairs.append((key, val))
    return tuple(pairs)


#: Where a stream's rows come from, or a sink's go: files (a location) or a Kafka topic.
SOURCES = ("files", "kafka")
#: A signal's samples may also be the rows of a query (``CREATE SIGNAL ... AS SELECT``).
SIGNAL_SOURCES = SOURCES + ("query",)


def _check_source(value: Any, owner: str, allowed: tuple[str, ...] = SOURCES) -> None:
    if value not in allowed:
        raise WaveSQLError("INVALID_OPTION", f"the source of {owner} must be one of "
                           f"{', '.join(allowed)}, got {value!r}")


def _find_column(columns: tuple[Column, ...], name: str) -> Column | None:
    wanted = name.lower()
    return next((c for c in columns if c.name.lower() == wanted), None)


def _require_column(columns: tuple[Column, ...], name: Any, clause: str, owner: str) -> str:
    _check_name(name, f"{clause} of {owner}")
    if _find_column(columns, name) is None:
        raise WaveSQLError(
            "UNKNOWN_COLUMN",
            f"{clause} `{name}` of {owner} is not one of its declared columns",
            hint=did_you_mean(name, [c.name for c in columns], "columns"),
        )
    return name


# -- columns ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Column:
    """One declared column (or signal channel): a name and a Spark SQL type string.

    The type is kept as written (``DOUBLE``, ``ARRAY<FLOAT>``, ``DECIMAL(10,2)``); whether
    Spark understands it is the binder's business, not the catalog's.

    Examples
    --------
    >>> Column("px", "DOUBLE")
    Column(name='px', type='DOUBLE')
    >>> str(Column("px", "DOUBLE"))
    'px DOUBLE'
    """

    name: str
    type: str

    def __post_init__(self) -> None:
        _check_name(self.name, "a column name")
        _check_text(self.type, f"the type of column `{self.name}`",
                    hint="give a Spark SQL type such as DOUBLE, TIMESTAMP or ARRAY<FLOAT>")

    def __str__(self) -> str:
        return f"{self.name} {self.type}"

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "type": self.type}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Column":
        extra = set(data) - {"name", "type"}
        if extra or "name" not in data or "type" not in data:
            raise WaveSQLError("INVALID_OPTION", f"not a column: {dict(data)!r}")
        return cls(data["name"], data["type"])


# -- definitions --------------------------------------------------------------------------

@dataclass(frozen=True)
class Definition:
    """Common part of every catalog object.

    Parameters
    ----------
    name : str
        The object's name as written; lookups use :attr:`key` (lower-cased).
    version : int, keyword-only
        1 for a fresh object, bumped by every ``CREATE OR REPLACE``; 0 means "not stored
        yet". Assigned by :class:`~wavesql.catalog.store.Catalog`.
    created_at, updated_at : str, keyword-only
        ISO-8601 UTC timestamps assigned by the store ("" until stored).

    Examples
    --------
    >>> v = ViewDef("Loud", "SELECT * FROM mic")
    >>> v.kind, v.key, v.version
    ('VIEW', 'loud', 0)
    """

    KIND: ClassVar[str] = ""

    name: str
    version: int = field(default=0, kw_only=True)
    created_at: str = field(default="", kw_only=True)
    updated_at: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if type(self) is Definition:
            raise TypeError("Definition is abstract; use StreamDef, SignalDef, ViewDef or SinkDef")
        _check_name(self.name, f"the name of a {self.KIND.lower()}")
        _check_int(self.version, f"the version of {self._owner}", 0)
        for attr in ("created_at", "updated_at"):
            if not isinstance(getattr(self, attr), str):
                raise WaveSQLError("INVALID_OPTION", f"{attr} of {self._owner} must be a string")

    # `_set` exists because the dataclass is frozen but __post_init__ normalises inputs
    # (lists -> tuples, dicts -> option pairs) so that equal definitions compare equal.
    def _set(self, attr: str, value: Any) -> None:
        object.__setattr__(self, attr, value)

    @property
    def _owner(self) -> str:
        return f"{self.KIND.lower()} `{self.name}`"

    @property
    def kind(self) -> str:
        """``"STREAM"``, ``"SIGNAL"``, ``"VIEW"`` or ``"SINK"``."""
        return self.KIND

    @property
    def key(self) -> str:
        """The lookup key: the lower-cased name."""
        return self.name.lower()

    def with_version(self, version: int, created_at: str, updated_at: str) -> "Definition":
        """A copy with store-assigned bookkeeping fields."""
        return dataclasses.replace(self, version=version, created_at=created_at,
                                   updated_at=updated_at)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict; ``Definition.from_dict(d.to_dict()) == d``."""
        out: dict[str, Any] = {"kind": self.KIND}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in ("columns", "channels"):
                value = [c.to_dict() for c in value]
            elif f.name == "options":
                value = [[k, v] for k, v in value]
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Definition":
        """Rebuild a definition from :meth:`to_dict` output (dispatching on ``kind``)."""
        if not isinstance(data, Mapping):
            raise WaveSQLError("INVALID_OPTION", f"not a definition: {data!r}")
        kind = data.get("kind")
        target = KINDS.get(kind) if isinstance(kind, str) else None
        if target is None:
            raise WaveSQLError("INVALID_OPTION", f"unknown definition kind {kind!r}")
        if cls is not Definition and target is not cls:
            raise WaveSQLError("INVALID_OPTION", f"expected a {cls.KIND}, got a {kind}")
        names = {f.name for f in dataclasses.fields(target)}
        fields = {k: v for k, v in data.items() if k != "kind"}
        unknown = sorted(set(fields) - names)
        if unknown:
            raise WaveSQLError("INVALID_OPTION",
                               f"unknown field(s) {', '.join(unknown)} in a {kind} definition")
        try:
            return target(**fields)
        except TypeError as exc:  # a required field is missing
            raise WaveSQLError("INVALID_OPTION", f"incomplete {kind} definition: {exc}") from exc


@dataclass(frozen=True)
class StreamDef(Definition):
    """An event stream: rows with (usually) an event-time column (``CREATE STREAM``).

    Parameters
    ----------
    name : str
    columns : sequence of Column or (name, type) pairs
        The declared schema; at least one column.
    path : str
        Where the data is read from (a file, directory or glob).
    format : str
        Source format (``parquet``, ``json``, ``csv``, ...); stored lower-cased.
    options : mapping or sequence of (str, str), optional
        Extra reader options, passed to Spark as strings.
    event_time : str, optional
        The event-time column; must be declared in ``columns``.
    watermark_us : int, optional
        Allowed out-of-orderness in microseconds (``WATERMARK 5 SECONDS`` -> 5_000_000).
    progress_column : str, optional
        Column marking explicit punctuation rows; must be declared in ``columns``.
    heartbeat_us : int, optional
        Idle interval after which progress advances without input, in microseconds.
    source : str, optional
        ``"files"`` (the default: ``path`` is a file, folder or glob) or ``"kafka"``
        (``FROM KAFKA 'topic'``: ``path`` is the topic, ``columns`` end with the record's
        envelope, ``sources/kafka.py``).

    Examples
    --------
    >>> StreamDef("trades", [("px", "DOUBLE"), ("ts", "TIMESTAMP")], "data/trades/",
    ...           "Parquet", event_time="ts").format
    'parquet'
    """

    KIND: ClassVar[str] = "STREAM"

    columns: tuple[Column, ...]
    path: str
    format: str
    options: tuple[tuple[str, str], ...] = ()
    event_time: str | None = None
    watermark_us: int | None = None
    progress_column: str | None = None
    heartbeat_us: int | None = None
    source: str = "files"

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        _check_source(self.source, owner)
        self._set("columns", _check_columns(self.columns, owner))
        if not self.columns:
            raise WaveSQLError("INVALID_OPTION", f"{owner} declares no columns",
                               hint="list its columns: CREATE STREAM s (ts TIMESTAMP, ...)")
        _check_text(self.path, f"the FROM path of {owner}")
        # Spark's format names are case-insensitive; one spelling keeps comparisons simple.
        self._set("format", _check_text(self.format, f"the FORMAT of {owner}").lower())
        self._set("options", _check_options(self.options, owner))
        if self.event_time is not None:
            _require_column(self.columns, self.event_time, "EVENT TIME column", owner)
        if self.progress_column is not None:
            _require_column(self.columns, self.progress_column, "PROGRESS COLUMN", owner)
        _check_int(self.watermark_us, f"the WATERMARK of {owner} (microseconds)", 0,
                   optional=True)
        _check_int(self.heartbeat_us, f"the HEARTBEAT of {owner} (microseconds)", 0,
                   optional=True)

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (case-insensitive), or None."""
        return _find_column(self.columns, name)


@dataclass(frozen=True)
class SignalDef(Definition):
    """An isochronous signal: channels sharing one timebase (``CREATE SIGNAL``).

    Parameters
    ----------
    name : str
    channels : sequence of Column or (name, type) pairs
        One per channel (``ch1 FLOAT, ...``); at least one.
    rate_hz : float
        Samples per second; finite and > 0.
    path : str
        Where the samples are read from (a file or glob); with ``source="query"``, the
        query's text (bound again wherever the signal is read, like a view's).
    format : str, default "wav"
        Stored lower-cased; ``"query"`` for a signal defined by a query.
    options : mapping or sequence of (str, str), optional
    segment : int, default 4096
        Samples per stored signal segment; > 0.
    epoch_us : int, default 0
        Time of sample 0 in microseconds since 1970 (sample n is at ``epoch + n / rate``).
    source : str, default "files"
        ``"files"``, ``"kafka"`` (``path`` is the topic) or ``"query"`` (``CREATE SIGNAL
        ... AS SELECT``: each row of the query is one sample, sources/query_signal.py).

    Examples
    --------
    >>> mic = SignalDef("mic", [("ch1", "FLOAT"), ("ch2", "FLOAT")], 48000,
    ...                 "recordings/array*.wav")
    >>> mic.rate_hz, mic.segment, mic.format
    (48000.0, 4096, 'wav')
    """

    KIND: ClassVar[str] = "SIGNAL"

    channels: tuple[Column, ...]
    rate_hz: float
    path: str
    format: str = "wav"
    options: tuple[tuple[str, str], ...] = ()
    segment: int = 4096
    epoch_us: int = 0
    source: str = "files"

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        _check_source(self.source, owner, SIGNAL_SOURCES)
        if (self.source == "query") != (str(self.format).lower() == "query"):
            raise WaveSQLError("INVALID_OPTION", f"{owner}: a signal defined by a query has "
                               "source and format `query`, and only such a signal")
        self._set("channels", _check_columns(self.channels, owner, "channel"))
        if not self.channels:
            raise WaveSQLError("INVALID_OPTION", f"{owner} declares no channels",
                               hint="list its channels: CREATE SIGNAL s (ch1 FLOAT, ...)")
        rate = self.rate_hz
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) \
                or not math.isfinite(rate) or rate <= 0:
            raise WaveSQLError(
                "INVALID_RATE",
                f"the RATE of {owner} must be a finite number of samples per second > 0, "
                f"got {rate!r}",
                hint="e.g. RATE 48000 HZ",
            )
        self._set("rate_hz", float(rate))
        _check_text(self.path, f"the query of {owner}" if self.source == "query"
                    else f"the FROM path of {owner}")
        self._set("format", _check_text(self.format, f"the FORMAT of {owner}").lower())
        self._set("options", _check_options(self.options, owner))
        _check_int(self.segment, f"the SEGMENT size of {owner} (samples)", 1)
        _check_int(self.epoch_us, f"the epoch of {owner} (microseconds)")

    def channel(self, name: str) -> Column | None:
        """The channel called ``name`` (case-insensitive), or None."""
        return _find_column(self.channels, name)


@dataclass(frozen=True)
class ViewDef(Definition):
    """A named query (``CREATE VIEW name AS sql``).

    Parameters
    ----------
    name : str
    sql : str
        The query text as written.
    columns : sequence of Column, optional
        The output schema if the binder recorded it; empty means "derive when used".

    Examples
    --------
    >>> ViewDef("voiced", "SELECT * FROM mic [SAMPLES 256]").sql
    'SELECT * FROM mic [SAMPLES 256]'
    """

    KIND: ClassVar[str] = "VIEW"

    sql: str
    columns: tuple[Column, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_text(self.sql, f"the query of {self._owner}")
        self._set("columns", _check_columns(self.columns, self._owner))


@dataclass(frozen=True)
class SinkDef(Definition):
    """A named output (``INSERT INTO name`` writes here).

    Parameters
    ----------
    name : str
    path : str
    format : str
        Stored lower-cased.
    columns : sequence of Column, optional
        Expected schema; empty means "whatever the query produces".
    options : mapping or sequence of (str, str), optional
    source : str, optional
        ``"files"`` (the default: ``path`` is a folder) or ``"kafka"`` (``TO KAFKA
        'topic'``: ``path`` is the topic).

    Examples
    --------
    >>> SinkDef("alerts", "out/alerts", "delta", options={"mergeSchema": "true"}).options
    (('mergeSchema', 'true'),)
    """

    KIND: ClassVar[str] = "SINK"

    path: str
    format: str
    columns: tuple[Column, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    source: str = "files"

    def __post_init__(self) -> None:
        super().__post_init__()
        owner = self._owner
        _check_source(self.source, owner)
        _check_text(self.path, f"the path of {owner}")
        self._set("format", _check_text(self.format, f"the FORMAT of {owner}").lower())
        self._set("columns", _check_columns(self.columns, owner))
        self._set("options", _check_options(self.options, owner))


@dataclass(frozen=True)
class Tombstone:
    """A ``DROP`` as recorded in an object's history.

    ``version`` continues the dropped object's numbering, so a name's history is numbered
    1, 2, 3, ... with no gaps even across DROP and re-CREATE.
    """

    name: str
    kind: str
    version: int
    dropped_at: str


#: Definition class per kind word, as used in DDL (``DROP SIGNAL ...``).
KINDS: dict[str, type[Definition]] = {
    cls.KIND: cls for cls in (StreamDef, SignalDef, ViewDef, SinkDef)
}


def normalize_kind(kind: str | type[Definition]) -> str:
    """``"stream"``, ``"STREAM"`` or ``StreamDef`` -> ``"STREAM"``.

    Examples
    --------
    >>> normalize_kind("signal"), normalize_kind(SinkDef)
    ('SIGNAL', 'SINK')
    """
    if isinstance(kind, type) and issubclass(kind, Definition) and kind.KIND:
        return kind.KIND
    if isinstance(kind, str) and kind.upper() in KINDS:
        return kind.upper()
    # A bad kind comes from WaveSQL's own code (the parser maps DDL words), not from a user.
    raise ValueError(f"unknown catalog object kind {kind!r}; expected one of {sorted(KINDS)}")
