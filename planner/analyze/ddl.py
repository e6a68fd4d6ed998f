"""Binding the statements that are not queries: CREATE STREAM/SIGNAL/SINK, CREATE [OR
REPLACE] VIEW and TEMPORARY VIEW, DROP, SHOW FUNCTIONS, DESCRIBE, and the check of
``SET wavesql.x = v``.

Each checks everything it can before the catalog is touched -- columns and types, the
EVENT TIME and PROGRESS columns, the format, that a path exists (and for a signal, that
its WAV headers agree with its RATE and channels), that a Kafka topic exists, that a name
is free -- and raises a ``WaveSQLError`` at the clause that is wrong. A view is bound as
a query (planner/bind.py: bind_query) for its columns. INSERT INTO a sink binds in
insert_into.py.
"""

from __future__ import annotations

import datetime as dt
import re

from sqlglot import exp

from wavesql import settings, storage
from wavesql.storage.local import escaping
from wavesql.catalog import objects as cat
from wavesql.dialect import Statement as ParsedStatement
from wavesql.dialect import nodes as wn
from wavesql.dialect import to_sql
from wavesql.errors import Span, WaveSQLError, did_you_mean
from wavesql.sources import kafka, kafka_signal, query_signal, table_signal
from wavesql.udfs import registry, wav

from .. import ir
from ..types import SAMPLE_TYPES, interval_us, number, spark_type
from .context import BindContext
from .resolve import bind_inputs, resolve_relation

#: The formats each kind of object reads or writes from files (Kafka's are sources/kafka.py's).
STREAM_FORMATS = ("parquet", "csv", "json")
SIGNAL_FORMATS = ("wav",) + table_signal.FORMATS  # tables: one row per sample
SINK_FORMATS = ("parquet", "csv", "json")


def bind_create_stream(node: wn.CreateStream, ctx: BindContext) -> ir.Statement:
    """``CREATE [OR REPLACE] STREAM|SIGNAL|SINK ... [IF NOT EXISTS]`` -> ``ir.CreateObject``."""
    kind = _kind_of(node)
    replace, exists = bool(node.args.get("replace")), bool(node.args.get("exists"))
    _check_replace_or_exists(node)
    name = node.name
    source = "kafka" if node.args.get("source") is not None else "files"
    if kind == "STREAM":
        columns = _bind_columns(node)
        if source == "kafka":
            columns = kafka.columns_with_metadata(columns, Span.of(node))
        watermark = node.args.get("watermark")
        heartbeat = node.args.get("heartbeat")
        defn = cat.StreamDef(
            name=name, columns=columns, source=source,
            path=_kafka_topic(node, ctx) if source == "kafka" else _path(node, ctx),
            format=_format(node, kafka.FORMATS if source == "kafka" else STREAM_FORMATS),
            options=_options(node),
            event_time=_column_ref(node, "event_time", columns),
            watermark_us=interval_us(watermark) if watermark is not None else None,
            progress_column=_column_ref(node, "progress_column", columns),
            heartbeat_us=interval_us(heartbeat) if heartbeat is not None else None,
        )
    elif kind == "SIGNAL":
        columns = _bind_columns(node, SAMPLE_TYPES)
        rate_node = node.args.get("rate")
        if rate_node is None:
            raise WaveSQLError("INVALID_RATE", f"signal `{name}` needs a RATE", Span.of(node),
                               hint="e.g. RATE 44100 HZ")
        rate = number(rate_node)
        unit = (node.args.get("rate_unit") or "HZ").upper()
        rate *= {"HZ": 1.0, "KHZ": 1000.0}.get(unit, 1.0)
        if not rate > 0 or rate == float("inf"):
            raise WaveSQLError("INVALID_RATE", f"signal rate must be positive, got {rate:g}",
                               Span.of(rate_node), hint="e.g. RATE 44100 HZ")
        segment_node = node.args.get("segment")
        segment = int(number(segment_node)) if segment_node is not None else 4096
        if segment <= 0:
            raise WaveSQLError("INVALID_OPTION", f"SEGMENT must be positive, got {segment}",
                               Span.of(segment_node), hint="e.g. SEGMENT 4096")
        epoch = node.args.get("epoch")
        if node.args.get("query") is not None:  # CREATE SIGNAL ... AS SELECT
            defn = _query_signal(node, ctx, columns, rate, segment,
                                 _epoch_us(epoch) if epoch is not None else 0)
            _check_create(defn, node.this, replace, exists, ctx)
            return ir.CreateObject(defn, replace, exists)
        from_kafka = source == "kafka"
        defn = cat.SignalDef(
            name=name, channels=columns, rate_hz=rate, source=source,
            path=_kafka_topic(node, ctx) if from_kafka else _path(node, ctx),
            format=_format(node, kafka_signal.FORMATS if from_kafka else SIGNAL_FORMATS),
            options=_options(node), segment=segment,
            epoch_us=_epoch_us(epoch) if epoch is not None else 0,
        )
        if from_kafka:  # a topic's blocks are checked as they are read
            pass
        elif defn.format in table_signal.FORMATS:
            _check_table_files(defn, node)
        else:
            _check_recordings(defn, node)
    elif kind == "SINK":
        kafka_sink = source == "kafka"
        defn = cat.SinkDef(name=name, source=source,
                           path=_kafka_topic(node, ctx) if kafka_sink
                           else _path(node, ctx, must_exist=False),
                           format=_format(node, kafka.FORMATS if kafka_sink else SINK_FORMATS),
                           columns=_bind_columns(node), options=_options(node))
    else:  # pragma: no cover - the parser only produces the kinds above
        raise WaveSQLError("UNSUPPORTED_STATEMENT", f"CREATE {kind} is not supported",
                           Span.of(node))
    _check_create(defn, node.this, replace, exists, ctx)
    return ir.CreateObject(defn, replace, exists)


def _query_signal(node: wn.CreateStream, ctx: BindContext, channels, rate: float,
                  segment: int, epoch_us: int) -> cat.SignalDef:
    """A signal defined by a query: the catalog keeps the query's text (bound again at each
    use, like a view's: sources/query_signal.py); it is bound now for its columns, to
    refuse a query that cannot be a signal before anything is stored."""
    query = node.args["query"]
    name = node.name
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    for table in query.find_all(exp.Table):
        if table.name.lower() == name.lower() and table.name.lower() not in ctes \
                and not table.args.get("db"):
            raise WaveSQLError("INVALID_OPTION", f"signal `{name}` is defined by a query "
                               "that reads itself", Span.of(table),
                               hint="a signal's query reads other streams, views or signals")
    defn = cat.SignalDef(name=name, channels=channels, rate_hz=rate, source="query",
                         path=to_sql(query), format="query", options=_options(node),
                         segment=segment, epoch_us=epoch_us)
    options = node.args.get("options")
    try:
        query_signal.layout_of(defn)
    except WaveSQLError as err:
        raise WaveSQLError(err.code, err.message, Span.of(options[0] if options else query),
                           hint=err.hint) from None
    body = ctx.bind_query(query)
    if not body.bounded:
        raise WaveSQLError("NOT_IMPLEMENTED", "a signal defined by an unbounded query",
                           Span.of(query), hint="define the signal over the stream's rows "
                                                "(batch); continuous queries do not read it")
    try:
        query_signal.check_columns(defn, [(f.name, f.type) for f in body.schema.fields])
    except WaveSQLError as err:
        raise WaveSQLError(err.code, err.message, Span.of(query), hint=err.hint) from None
    return defn


def _check_recordings(defn: cat.SignalDef, node: wn.CreateStream) -> None:
    """Read the WAV headers now: a wrong RATE or channel count is a DDL error, at the clause
    that is wrong, not a failed job later."""
    from wavesql.sources.wav_source import list_wav_files  # imports pyspark: only here

    files = list_wav_files(defn.path)
    if not files:
        raise WaveSQLError("MISSING_PATH", f"no .wav files at `{defn.path}`",
                           Span.of(node.args.get("path")))
    for path in files:
        try:
            info = wav.read_info(path)
            wav.check_declared(info, defn.rate_hz, len(defn.channels), signal=defn.name)
        except wav.WavError as err:
            where = {"RATE_MISMATCH": node.args.get("rate"),
                     "CHANNEL_MISMATCH": (node.args.get("columns") or [None])[0]}.get(err.code)
            raise WaveSQLError(err.code, f"{err.path}: {err.message}",
                               Span.of(where or node.args.get("path")), hint=err.hint) from None


def _check_table_files(defn: cat.SignalDef, node: wn.CreateStream) -> None:
    """A signal stored as a table: its options, files and columns, checked now."""
    try:
        table_signal.check_files(defn)
    except WaveSQLError as err:
        where = node.args.get("options") if err.code == "INVALID_OPTION" else None
        where = where[0] if isinstance(where, list) and where else where
        raise WaveSQLError(err.code, err.message,
                           Span.of(where or node.args.get("path")), hint=err.hint) from None


def _epoch_us(node: exp.Expression) -> int:
    """``EPOCH 'iso timestamp'`` in microseconds since 1970 (UTC when it names no zone)."""
    text = node.name
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise WaveSQLError("INVALID_OPTION", f"EPOCH `{text}` is not an ISO timestamp",
                           Span.of(node), hint="e.g. EPOCH '2024-01-01 00:00:00'") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    delta = stamp - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _bind_columns(node: wn.CreateStream, top_level=None) -> tuple[cat.Column, ...]:
    """The declared columns, each named once and typed (``top_level`` narrows the outer
    types: a signal's channels are numeric; planner/types.py: spark_type)."""
    columns = []
    seen: set[str] = set()
    for coldef in node.args.get("columns") or []:
        name = coldef.name
        if name.lower() in seen:
            raise WaveSQLError("DUPLICATE_COLUMN", f"column `{name}` is declared twice",
                               Span.of(coldef.this))
        seen.add(name.lower())
        dtype = coldef.args.get("kind")
        if dtype is None:
            raise WaveSQLError("UNKNOWN_TYPE", f"column `{name}` has no type", Span.of(coldef),
                               hint=f"write e.g. `{name} DOUBLE`")
        columns.append(cat.Column(name, spark_type(dtype, coldef, top_level)))
    return tuple(columns)


def _column_ref(node: wn.CreateStream, arg: str, columns) -> str | None:
    """The declared column a clause names (``EVENT TIME ts``), spelled as declared."""
    ref = node.args.get(arg)
    if ref is None:
        return None
    name = ref.name
    names = [c.name for c in columns]
    if name.lower() not in {n.lower() for n in names}:
        clause = arg.replace("_", " ").upper()
        raise WaveSQLError("UNKNOWN_COLUMN", f"{clause} `{name}` is not a declared column",
                           Span.of(ref), hint=did_you_mean(name, names, "columns"))
    return next(n for n in names if n.lower() == name.lower())


def _format(node: wn.CreateStream, allowed: tuple[str, ...]) -> str:
    """The ``FORMAT``, lower-cased, which must be one of ``allowed``."""
    fmt = node.args.get("format")
    value = (fmt.name if fmt is not None else "").lower()
    if value not in allowed:
        raise WaveSQLError("UNKNOWN_FORMAT", f"unsupported format `{value or '?'}`",
                           Span.of(fmt) or Span.of(node),
                           hint=f"supported here: {', '.join(allowed)}")
    return value


def _path(node: wn.CreateStream, ctx: BindContext, must_exist: bool = True) -> str:
    """The FROM/TO location as the catalog keeps it: a URI as given (``s3a://...``), a
    local path made absolute against the statement's folder (wavesql.storage)."""
    lit = node.args.get("path")
    raw = lit.name if lit is not None else ""
    try:
        outside = escaping(raw, ctx.base_dir, ctx.path_roots)
        if outside is not None:
            raise path_escapes(raw, outside)
        path = storage.normalize(raw, ctx.base_dir)
        if storage.is_remote(path):
            storage.resolve(path)  # an unknown scheme is an error here, at the clause
        if must_exist and not storage.exists(path):
            raise WaveSQLError("MISSING_PATH", f"path `{raw}` does not exist", hint=(
                f"resolved to {path}; " if path != raw else "") + "create it first or fix "
                "the path")
        if not must_exist:
            storage.check_reachable([path])
    except WaveSQLError as err:
        raise WaveSQLError(err.code, err.message, Span.of(lit), hint=err.hint) from None
    return path


def path_escapes(raw: str, resolved: str) -> WaveSQLError:
    """``PATH_ESCAPES`` for query-file path ``raw`` (resolving to ``resolved``)."""
    return WaveSQLError(
        "PATH_ESCAPES", f"path `{raw}` leads to {resolved}, out of the query file's folder "
        "and of the folder it is run from",
        hint="write the path inside one of them, or an absolute path; or allow it for this "
             "run: `wavesql run --allow-parent-paths` (Python: session.allow_parent_paths = "
             "True)")


def _kafka_topic(node: wn.CreateStream, ctx: BindContext) -> str:
    """The topic of ``FROM KAFKA 'topic'``, which must exist on the stream's brokers."""
    lit = node.args.get("path")
    topic = lit.name
    try:
        ctx.env.kafka_partitions(_options(node), topic)
    except WaveSQLError as err:
        where = Span.of(lit) if err.code != "INVALID_OPTION" else Span.of(node)
        raise WaveSQLError(err.code, err.message, where, hint=err.hint) from None
    return topic


def _options(node: wn.CreateStream) -> tuple[tuple[str, str], ...]:
    """The ``OPTIONS (key = value, ...)`` as (key, value text) pairs, in order."""
    pairs = []
    for opt in node.args.get("options") or []:
        key, value = opt.this, opt.expression
        pairs.append((key.name, value.name if isinstance(value, exp.Literal) else value.sql()))
    return tuple(pairs)


def bind_view(node: exp.Create, ctx: BindContext) -> ir.Statement | None:
    """``CREATE [OR REPLACE] [TEMPORARY] VIEW``: a catalog view, or a session view when
    temporary; None for a temporary view that reads only Spark's tables (Spark keeps it)."""
    if not _is_temporary(node):
        return _bind_create_view(node, ctx)
    return _bind_temp_view(node, ctx)


def _bind_create_view(node: exp.Create, ctx: BindContext) -> ir.Statement:
    """A catalog view: its query is bound now, for its columns and to refuse it early."""
    _check_replace_or_exists(node)
    table = node.this
    name = table.name if isinstance(table, exp.Table) else node.this.this.name
    query = node.expression
    body = ctx.bind_query(query)
    defn = cat.ViewDef(name=name, sql=to_sql(query),
                       columns=tuple(cat.Column(f.name, f.type) for f in body.schema.fields))
    replace = bool(node.args.get("replace"))
    exists = bool(node.args.get("exists"))
    _check_create(defn, table, replace, exists, ctx)
    return ir.CreateObject(defn, replace, exists)


def _bind_temp_view(node: exp.Create, ctx: BindContext) -> ir.TempView | None:
    """``CREATE TEMPORARY VIEW`` whose query reads catalog objects: a session view
    (catalog/session_views.py); None when it reads only Spark's tables (Spark keeps it)."""
    query = node.expression
    table = node.this
    name = table.name if isinstance(table, exp.Table) else node.this.this.name
    if not isinstance(query, exp.Query) or not hasattr(ctx.catalog, "temp_views"):
        return None
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
    read = {t.name for t in query.find_all(exp.Table)
            if t.name and not t.args.get("db") and t.name.lower() not in ctes}
    if not any(ctx.catalog.get(r) is not None for r in read):
        return None
    body = ctx.bind_query(query)
    defn = cat.ViewDef(name=name, sql=to_sql(query),
                       columns=tuple(cat.Column(f.name, f.type) for f in body.schema.fields))
    if not node.args.get("replace") and ctx.catalog.is_temporary(name):
        raise WaveSQLError("DUPLICATE_OBJECT", f"temporary view `{name}` already exists",
                           Span.of(table), hint="CREATE OR REPLACE TEMPORARY VIEW ...")
    return ir.TempView(name, defn, bool(node.args.get("replace")))


def _check_replace_or_exists(node: exp.Expression) -> None:
    """OR REPLACE and IF NOT EXISTS contradict each other."""
    if node.args.get("replace") and node.args.get("exists"):
        raise WaveSQLError("INVALID_OPTION", "OR REPLACE and IF NOT EXISTS cannot be used "
                           "together", Span.of(node.this) or Span.of(node),
                           hint="OR REPLACE overwrites an existing definition, IF NOT EXISTS "
                                "keeps it: choose one")


def _check_create(defn, where: exp.Expression, replace: bool, exists: bool,
                  ctx: BindContext) -> None:
    """Refuse a CREATE that the catalog would refuse, but with the name's position.

    The catalog re-checks atomically when it writes (another process may race us); this
    check exists so the common mistake gets a caret under the name.
    """
    current = ctx.catalog.get(defn.name)
    if current is None:
        return
    if current.kind != defn.kind:
        raise WaveSQLError(
            "DUPLICATE_OBJECT" if not (replace or exists) else "WRONG_OBJECT_KIND",
            f"`{current.name}` already exists as a {current.kind.lower()}", Span.of(where),
            hint=f"pick another name, or DROP {current.kind} {current.name} first")
    if not (replace or exists):
        kind = defn.kind
        raise WaveSQLError(
            "DUPLICATE_OBJECT", f"{kind.lower()} `{current.name}` already exists",
            Span.of(where),
            hint=f"use CREATE OR REPLACE {kind} to replace it (version {current.version} is kept "
                 f"in its history), or CREATE {kind} IF NOT EXISTS to keep it")


def bind_drop(node: wn.DropObject, ctx: BindContext) -> ir.Statement:
    """``DROP STREAM|SIGNAL|SINK [IF EXISTS] name``: the object must exist and be of that
    kind (unless IF EXISTS and there is none)."""
    exists = bool(node.args.get("exists"))
    if not exists or ctx.catalog.get(node.name) is not None:
        _at(node.this, lambda: ctx.catalog.require(node.name, _kind_of(node)))
    return ir.DropObject(node.name, _kind_of(node), exists)


def bind_drop_view(node: exp.Drop, ctx: BindContext) -> ir.Statement | None:
    """``DROP VIEW [IF EXISTS] name`` of a session or catalog view; None when the name is
    neither (Spark's view: Spark drops it)."""
    # sqlglot keeps the dropped name in ``this`` or, in newer versions, ``tables``
    target = node.this or next(iter(node.args.get("tables") or ()), None)
    name = target.name if isinstance(target, exp.Table) and not target.args.get("db") \
        else None
    if name and getattr(ctx.catalog, "is_temporary", lambda n: False)(name):
        return ir.TempView(name, None, if_exists=bool(node.args.get("exists")))
    if name and ctx.catalog.get(name) is not None:
        _at(target, lambda: ctx.catalog.require(name, "VIEW"))
        return ir.DropObject(name, "VIEW", bool(node.args.get("exists")))
    return None


def _at(where: exp.Expression, action):
    """Run a catalog call; an error it raises without a position gets ``where``'s."""
    try:
        return action()
    except WaveSQLError as err:
        if err.span is not None:
            raise
        raise WaveSQLError(err.code, err.message, Span.of(where), err.hint) from None


def _kind_of(node: exp.Expression) -> str | None:
    """The upper-cased ``kind`` of a CREATE/DROP node (``STREAM``, ``VIEW``...)."""
    kind = node.args.get("kind")
    return kind.upper() if isinstance(kind, str) else None


def _is_temporary(node: exp.Create) -> bool:
    props = node.args.get("properties")
    if props is None:
        return False
    return any(isinstance(p, exp.TemporaryProperty) for p in props.expressions)


_SHOW_FUNCTIONS = re.compile(
    r"^(?:(USER|SYSTEM|ALL)\s+)?FUNCTIONS(?:\s+(?:LIKE\s+)?'((?:[^'\\]|\\.)*)')?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL)

def show_functions(node, stmt: ParsedStatement) -> ir.ShowFunctions | None:
    """``SHOW [USER|SYSTEM|ALL] FUNCTIONS [[LIKE] 'pattern']`` (``FROM db`` stays Spark's)."""
    if not (isinstance(node, exp.Command) and str(node.this).upper() == "SHOW"):
        return None
    match = _SHOW_FUNCTIONS.match(str(node.expression or "").strip())
    if match is None:
        return None
    scope = (match.group(1) or "ALL").upper()
    return ir.ShowFunctions(stmt.text, scope != "USER", match.group(2))


def bind_describe(node: exp.Describe, stmt: ParsedStatement, ctx: BindContext) -> ir.Statement:
    """``DESCRIBE [FUNCTION] name``: a catalog object or a signal function WaveSQL describes;
    anything else is Spark's."""
    target = node.this
    if (node.args.get("kind") or "").upper() == "FUNCTION":
        name = target.name if isinstance(target, exp.Table) and not target.args.get("db") \
            else None
        if name and registry.lookup(name) is not None:
            return ir.DescribeFunction(name.lower(), (node.args.get("style") or "").upper()
                                       == "EXTENDED")
        return ir.SparkCommand(stmt.text, ())  # Spark's functions: Spark describes them
    if isinstance(target, exp.Table) and not target.args.get("db"):
        defn = ctx.catalog.get(target.name)
        if defn is not None:
            if isinstance(defn, cat.SignalDef):
                schema = ir.Schema.of_columns(defn.channels)
            else:
                schema = ir.Schema.of_columns(defn.columns)
            return ir.DescribeObject(defn, schema)
        if ctx.env.spark_table_schema(target.name) is None:
            resolve_relation(target.name, target.this, ctx)  # raises with a hint
    return ir.SparkCommand(stmt.text, bind_inputs(node, ctx, strict=False))


def check_settings(node: exp.Set) -> None:
    """``SET wavesql.x = v``: an unknown WaveSQL setting or a value it cannot take is refused
    here, pointing at the key, not when a later query reads it (``wavesql.settings``)."""
    for item in node.expressions:
        pair = item.this if isinstance(item, exp.SetItem) else item
        if not isinstance(pair, exp.EQ) or not isinstance(pair.this, exp.Column):
            continue
        name = ".".join(part.name for part in pair.this.parts)
        value = pair.expression
        text = (value.name if isinstance(value, exp.Literal) else
                str(value.this).lower() if isinstance(value, exp.Boolean) else value.sql())
        first, last = Span.of(pair.this.parts[0]), Span.of(pair.this.parts[-1])
        span = Span(first.start, last.end) if first and last else Span.of(pair.this)
        settings.check(name, text, span)


