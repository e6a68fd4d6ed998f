"""AST nodes for WaveSQL's additions to Spark SQL.

Every node here is a :class:`sqlglot.expressions.Expression` subclass, so sqlglot's tree
utilities (``walk``, ``find_all``, ``copy``, ``==``, ``dump``/``load``, pickling) work on
them unchanged. They all derive from :class:`WaveSQLNode`, which is how
:func:`wavesql.dialect.wavesql_nodes` tells WaveSQL constructs from plain Spark SQL.

Where a construct decorates a node sqlglot already has, it is attached as an extra,
registered arg rather than a wrapper, so that sqlglot's scope and optimizer code keeps
seeing the ordinary node types:

==========================  ============================================================
construct                   where it lives
==========================  ============================================================
``FROM t [RANGE ...] a``    ``exp.Table.args["window"]`` -> :class:`StreamWindow`
``SYNC JOIN m ON RANGE``    ``exp.Join.args["sync"]`` -> :class:`SyncRange` (no ``on``)
``ASOF JOIN``               sqlglot's own ``exp.Join(method="ASOF", on=...)``
``EMIT FINAL|CHANGES``      ``exp.Select.args["emit"]`` -> :class:`Emit`
``LATE INTO 'path'|name``   ``exp.Select.args["late_into"]`` -> :class:`LateInto`
==========================  ============================================================

The remaining constructs are nodes of their own: :class:`CreateStream` (streams, signals
and sinks), :class:`DropObject`, :class:`ShowObjects`, :class:`Explain`,
:class:`RelationToStream` and :class:`Resample`.

Position meta: every node built by the parser carries ``meta["start"]``/``meta["end"]``
(inclusive character offsets into the full query text, like sqlglot's tokens) covering
the whole construct, and ``meta["line"]``/``meta["col"]`` copied from its first token
(sqlglot's convention: ``col`` is the 1-based column of that token's *last* character).
"""

from __future__ import annotations

from sqlglot import exp

__all__ = [
    "WaveSQLNode",
    "CreateStream",
    "DropObject",
    "ShowObjects",
    "Explain",
    "StreamWindow",
    "SyncRange",
    "RelationToStream",
    "Emit",
    "LateInto",
    "Resample",
    "Combine",
    "ZipInput",
    "OBJECT_KINDS",
    "WINDOW_KINDS",
    "EXPLAIN_KINDS",
    "RELATION_TO_STREAM_KINDS",
    "EMIT_KINDS",
]

#: Catalog object kinds created by ``CREATE <kind>`` / removed by ``DROP <kind>``.
OBJECT_KINDS = ("STREAM", "SIGNAL", "SINK")
#: ``StreamWindow.kind`` values.
WINDOW_KINDS = ("RANGE", "ROWS", "NOW", "UNBOUNDED", "SAMPLES", "PARTITION_ROWS", "SPLIT")
#: ``Explain.kind`` values (``None`` when no kind word is given).
EXPLAIN_KINDS = ("AST", "IR", "STAGES", "SPARK", "EXTENDED", "FORMATTED", "CODEGEN", "COST",
                 "STREAM")
#: ``RelationToStream.kind`` values.
RELATION_TO_STREAM_KINDS = ("ISTREAM", "DSTREAM", "RSTREAM")
#: ``Emit.kind`` values.
EMIT_KINDS = ("FINAL", "CHANGES")
#: ``SyncRange.missing`` values: what a range the recording does not fully cover gives.
SYNC_MISSING = ("NULL", "TRUNCATE", "ERROR")


class WaveSQLNode(exp.Expression):
    """Marker base class of every WaveSQL-specific AST node."""


class CreateStream(WaveSQLNode):
    """``CREATE [OR REPLACE] STREAM|SIGNAL|SINK [IF NOT EXISTS] name ...``.

    One class serves all three object kinds; ``kind`` says which. Clauses that do not
    belong to a kind are rejected by the parser, so e.g. a ``STREAM`` never has ``rate``.

    Args:
        this: ``exp.Identifier`` -- the object's name.
        kind: ``"STREAM"``, ``"SIGNAL"`` or ``"SINK"``.
        columns: list of ``exp.ColumnDef``; each ``kind`` is an ``exp.DataType``. A type
            name sqlglot does not know (``FLOT``) becomes
            ``DataType(this=DType.USERDEFINED, kind="FLOT")`` with position meta.
        path: ``exp.Literal`` string -- ``FROM 'path'`` (stream, signal) or ``TO 'path'``
            (sink); with ``source``, the Kafka topic of ``FROM KAFKA 'topic'``.
        source: ``exp.Var`` -- ``KAFKA`` in ``FROM KAFKA 'topic'`` / ``TO KAFKA 'topic'``;
            absent for files.
        format: ``exp.Var`` -- the ``FORMAT`` word, as written (validated by the binder).
        options: list of ``exp.EQ(this=key, expression=literal)``; ``key`` is an
            ``exp.Var`` (bare or dotted word) or an ``exp.Literal`` string.
        event_time: ``exp.Identifier`` -- ``EVENT TIME col``.
        watermark: ``exp.Interval`` -- ``WATERMARK <interval>``.
        progress_column: ``exp.Identifier`` -- ``PROGRESS COLUMN col``.
        heartbeat: ``exp.Interval`` -- ``HEARTBEAT <interval>``.
        rate: ``exp.Literal`` number (or ``exp.Neg`` of one) -- ``RATE <number>``.
        rate_unit: ``"HZ"``, ``"KHZ"`` or ``None`` when no unit was written.
        segment: ``exp.Literal`` number -- ``SEGMENT <samples per segment>``.
        epoch: ``exp.Literal`` string -- ``EPOCH '<timestamp>'``.
        query: ``exp.Query`` -- ``AS <query>`` of a signal defined by a query (then no
            ``path``/``format``; sources/query_signal.py).
        replace: ``True`` for ``CREATE OR REPLACE``.
        exists: ``True`` for ``IF NOT EXISTS``.
    """

    arg_types = {
        "this": True,
        "kind": True,
        "columns": False,
        "path": False,
        "source": False,
        "format": False,
        "options": False,
        "event_time": False,
        "watermark": False,
        "progress_column": False,
        "heartbeat": False,
        "rate": False,
        "rate_unit": False,
        "segment": False,
        "epoch": False,
        "query": False,
        "replace": False,
        "exists": False,
    }

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()

    @property
    def columns(self) -> list[exp.ColumnDef]:
        return self.args.get("columns") or []

    @property
    def options(self) -> dict[str, exp.Expression]:
        """``OPTIONS`` as an ordered ``{key: value literal}`` dict (keys as written)."""
        return {pair.this.name: pair.expression for pair in self.args.get("options") or []}


class DropObject(WaveSQLNode):
    """``DROP STREAM|SIGNAL|SINK [IF EXISTS] name``.

    Args:
        this: ``exp.Identifier`` -- the object's name.
        kind: ``"STREAM"``, ``"SIGNAL"`` or ``"SINK"``.
        exists: ``True`` for ``IF EXISTS``.
    """

    arg_types = {"this": True, "kind": True, "exists": False}

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()


class ShowObjects(WaveSQLNode):
    """``SHOW STREAMS | SIGNALS | SINKS | VIEWS``.

    Args:
        kind: ``"STREAMS"``, ``"SIGNALS"``, ``"SINKS"`` or ``"VIEWS"``. (``SHOW VIEWS``
            followed by more words, e.g. ``SHOW VIEWS IN db``, is Spark's statement and
            stays an ``exp.Command``.)
    """

    arg_types = {"kind": True}

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()


class Explain(WaveSQLNode):
    """``EXPLAIN [AST | IR | STAGES | SPARK | EXTENDED | FORMATTED | CODEGEN | COST | STREAM]
    <statement>``.

    Args:
        this: the explained statement's AST.
        kind: one of :data:`EXPLAIN_KINDS` or ``None``.
    """

    arg_types = {"this": True, "kind": False}

    @property
    def kind(self) -> str | None:
        kind = self.args.get("kind")
        return kind.upper() if kind else None


class StreamWindow(WaveSQLNode):
    """A window written in square brackets after a table in FROM/JOIN.

    Stored as ``exp.Table.args["window"]``. Forms and the args they set:

    ==============================================  ==================  ====================
    syntax                                          ``kind``            args
    ==============================================  ==================  ====================
    ``[RANGE <interval>]``                          ``RANGE``           size
    ``[RANGE <interval> SLIDE <interval>]``         ``RANGE``           size, slide
    ``[RANGE UNBOUNDED]``                           ``UNBOUNDED``
    ``[ROWS n]``                                    ``ROWS``            size
    ``[PARTITION BY e[, e] ROWS n]``                ``PARTITION_ROWS``  partition_by, size
    ``[NOW]``                                       ``NOW``
    ``[SAMPLES n]`` / ``[SAMPLES n SLIDE m]``       ``SAMPLES``         size[, slide]
    ``[PARTITION INTO n BY e [REPLICATE WHEN p]]``  ``SPLIT``           into, by[, replicate_when]
    ==============================================  ==================  ====================

    Intervals are ``exp.Interval`` in sqlglot's canonical form -- string value, singular
    upper-case unit (``5 SECONDS``, ``INTERVAL 5 SECONDS`` and ``INTERVAL '5' SECOND`` all
    give ``Interval(this='5', unit=SECOND)``); counts (``n``, ``m``) are ``exp.Literal``
    numbers.
    """

    arg_types = {
        "kind": True,
        "size": False,
        "slide": False,
        "partition_by": False,
        "into": False,
        "by": False,
        "replicate_when": False,
    }

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()


class SyncRange(WaveSQLNode):
    """``SYNC JOIN <signal> ON RANGE (start, end)``: the range each control row selects.

    Stored as ``exp.Join.args["sync"]`` on an otherwise plain ``exp.Join`` (no ``on``,
    ``kind`` or ``side``), one per SYNC JOIN in the select's ``joins``.

    Args:
        start: expression for the start of the range (inclusive end rules: the binder's).
        end: expression for the end of the range.
        missing: ``"NULL"`` / ``"TRUNCATE"`` / ``"ERROR"`` (``MISSING ...``), or None.
    """

    arg_types = {"start": True, "end": True, "missing": False}


class RelationToStream(WaveSQLNode):
    """``ISTREAM (<query>)``, ``DSTREAM (<query>)``, ``RSTREAM (<query>)``.

    Used both as a statement and as a table source in FROM/JOIN.

    Args:
        this: the wrapped query.
        kind: one of :data:`RELATION_TO_STREAM_KINDS`.
        alias: ``exp.TableAlias`` when used in FROM.
        with_: only while parsing ``WITH c AS (...) ISTREAM (...)``: the parser moves the
            CTEs into the wrapped query (``ISTREAM (WITH c AS (...) ...)``), as the query
            is what reads them.
    """

    arg_types = {"this": True, "kind": True, "alias": False, "with_": False}

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()


class Emit(WaveSQLNode):
    """``EMIT FINAL`` / ``EMIT CHANGES``, stored as ``exp.Select.args["emit"]``.

    Args:
        kind: ``"FINAL"`` or ``"CHANGES"``.
    """

    arg_types = {"kind": True}

    @property
    def kind(self) -> str:
        return (self.args.get("kind") or "").upper()


class LateInto(WaveSQLNode):
    """``LATE INTO 'path'`` / ``LATE INTO name``, stored as ``exp.Select.args["late_into"]``.

    Args:
        this: ``exp.Literal`` string (a path) or ``exp.Table`` (a sink name).
    """

    arg_types = {"this": True}


class Resample(WaveSQLNode):
    """``RESAMPLE(stream, ts_col, <interval>[, 'method'] [PARTITION BY k, ...])`` as a table
    source in FROM/JOIN.

    Args:
        this: ``exp.Table`` -- the input stream.
        time: ``exp.Column`` -- the time column.
        period: ``exp.Interval`` -- the output period.
        method: ``exp.Literal`` string (``'linear'``, ...) or ``None``.
        partition_by: ``exp.Column`` per key (each key's rows are a series of their own), or
            ``None``.
        alias: ``exp.TableAlias`` or ``None``.
    """

    arg_types = {"this": True, "time": True, "period": True, "method": False,
                 "partition_by": False, "alias": False}


class Combine(WaveSQLNode):
    """``MERGE(a, b, ...)`` or ``ZIP(a [BY col], b [BY col], ...)`` as a table source.

    ``MERGE`` is the union of its inputs with a ``_source`` column naming each row's input;
    ``ZIP`` pairs the i-th rows of its inputs (planner/combine.py has the semantics).

    Args:
        kind: ``"MERGE"`` or ``"ZIP"``.
        expressions: ``ZipInput`` per input.
        alias: ``exp.TableAlias`` or ``None``.
    """

    arg_types = {"kind": True, "expressions": True, "alias": False}

    @property
    def kind(self) -> str:
        return self.args["kind"]


class ZipInput(WaveSQLNode):
    """One input of MERGE/ZIP: ``this`` an ``exp.Table``, ``alias`` its name in the result
    (``AS name``: the ``_source`` tag, ZIP's struct column), ``order`` the ``BY`` column
    (ZIP)."""

    arg_types = {"this": True, "alias": False, "order": False}


#: Args WaveSQL adds to sqlglot's own node classes (see the module docstring).
EXTRA_ARGS: dict[type[exp.Expression], tuple[str, ...]] = {
    exp.Table: ("window",),
    exp.Join: ("sync",),
    exp.Select: ("emit", "late_into"),
}


def register_extra_args() -> None:
    """Declare :data:`EXTRA_ARGS` as optional args of sqlglot's classes.

    sqlglot validates args against ``arg_types`` (strictly, under pytest), so the
    extra args must be declared. They are optional and unknown to every other dialect's
    generator, which simply ignores them -- which is exactly why
    :func:`wavesql.dialect.to_spark_sql` refuses trees that contain WaveSQL nodes.
    """
    for cls, names in EXTRA_ARGS.items():
        for name in names:
            if name not in cls.arg_types:
                cls.arg_types[name] = False


register_extra_args()
