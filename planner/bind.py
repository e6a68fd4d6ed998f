"""``bind``: parsed statement (sqlglot AST) + catalog -> typed IR.

The binder resolves every name WaveSQL owns -- streams, signals, views, sinks, signal
functions, DDL types, formats, paths, rates -- and raises a positioned ``WaveSQLError`` with a
hint for anything wrong, before any Spark job starts.

Column names and types inside plain Spark SQL are resolved by Spark's analyzer through the
:class:`Environment` (``analyze``), which runs no job. Why not resolve them here: Spark SQL's
scoping rules (lateral column aliases, LATERAL VIEW, PIVOT, lambda variables, outer
references, ``GROUP BY ALL``...) are large and evolving; a second implementation would
disagree with Spark on real queries and break the promise that a query Spark accepts runs
unchanged. Spark's analysis errors are translated back into WaveSQL errors at the user's
position (``wavesql.spark_errors.translate_spark_error``).
"""

from __future__ import annotations

import dataclasses

import re
from dataclasses import dataclass
from typing import Protocol

from sqlglot import exp

from wavesql import settings, storage
from wavesql.catalog import objects as cat
from wavesql.dialect import Statement as ParsedStatement
from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql, to_sql, wavesql_nodes
from wavesql.errors import Span, WaveSQLError, did_you_mean
from wavesql.udfs import registry

from . import ir
from wavesql.sources import kafka, kafka_signal

from .signals import bind_segment_select, bind_signal_select
from .types import SAMPLE_TYPES, interval_us, number, spark_type

STREAM_FORMATS = ("parquet", "csv", "json")
SIGNAL_FORMATS = ("wav",)
SINK_FORMATS = ("parquet", "csv", "json")


class Environment(Protocol):
    """What the binder needs from the engine; the session implements it over Spark."""

    def spark_table_schema(self, name: str) -> ir.Schema | None:
        """Schema of a table/temp view in Spark's catalog, or None if there is none."""

    def spark_table_names(self) -> list[str]:
        """Names of Spark's tables and temp views (for hints)."""

    def function_names(self) -> frozenset[str]:
        """Lower-cased names of every function Spark can call (builtin and registered)."""

    def spark_parses(self, sql: str) -> bool:
        """Whether Spark's parser accepts ``sql`` (for statements sqlglot cannot parse)."""

    def analyze(self, sql: str, inputs: tuple[tuple[str, ir.Relation], ...],
                source_offset: int | None) -> ir.Schema:
        """Result schema of ``sql`` over ``inputs``; raises a translated WaveSQLError."""

    def constant(self, sql: str):
        """The value of a constant Spark expression (no columns): a Python value (numbers,
        strings, lists of them); raises a translated WaveSQLError."""

    def kafka_partitions(self, options, topic: str) -> int:
        """The partition count of a Kafka topic; raises ``KAFKA_UNREACHABLE`` or
        ``MISSING_TOPIC`` (sources/kafka.py)."""


@dataclass
class BindContext:
    catalog: object  # wavesql.catalog.Catalog
    env: Environment
    base_dir: str = "."  # relative DDL paths resolve against this (a query file's folder)
    view_stack: tuple[str, ...] = ()


def bind(stmt: ParsedStatement, catalog, env: Environment, base_dir: str = ".") -> ir.Statement:
    """Bind one parsed statement against the catalog.

    Parameters
    ----------
    stmt : wavesql.dialect.Statement
        From ``wavesql.dialect.parse_statements``: the AST plus its original text and offsets.
    catalog : wavesql.catalog.Catalog
    env : Environment
        Spark-side facts (tables, functions, analysis). ``wavesql.session`` provides it.
    base_dir : str
        Directory against which relative paths in DDL are resolved.

    Returns
    -------
    ir.Statement
    """
    try:
        return _bind(stmt, catalog, env, base_dir)
    except WaveSQLError as err:
        # Every error about the user's text points somewhere in it: one raised far from the
        # AST (the catalog store, Spark's analysis of generated SQL) gets the statement.
        if err.span is None and err.query in (None, "", getattr(env, "_user_text", None)):
            err.span = Span(stmt.start, stmt.end)
        raise


def _bind(stmt: ParsedStatement, catalog, env: Environment, base_dir: str) -> ir.Statement:
    ctx = BindContext(catalog, env, base_dir)
    if stmt.error is not None:
        # sqlglot could not parse it; if Spark can, it is Spark SQL WaveSQL has no AST for:
        # run the text as is, with the catalog objects it names made visible to Spark.
        if not env.spark_parses(stmt.text):
            raise stmt.error
        # every identifier is a candidate name; only readable catalog objects are inputs
        # (an alias that happens to name a sink is just an alias)
        inputs = {n.lower(): _resolve_relation(n, None, ctx) for n in stmt.names
                  if catalog.get(n) is not None and catalog.get(n).kind != "SINK"}
        return ir.SparkCommand(stmt.text, tuple(inputs.items()))
    return _bind_statement(stmt.node, stmt, ctx)


def _bind_statement(node: exp.Expression, stmt: ParsedStatement, ctx: BindContext) -> ir.Statement:
    if isinstance(node, wn.Explain):
        mode = (node.args.get("kind") or "IR").upper()
        target = node.this
        if mode == "AST":
            return ir.Explain(mode, repr(target), None)
        inner = _explained_statement(stmt, target)
        return ir.Explain(mode, inner.text, _bind_statement(target, inner, ctx))
    if isinstance(node, wn.CreateStream):
        return _bind_create_stream(node, ctx)
    if isinstance(node, wn.DropObject):
        exists = bool(node.args.get("exists"))
        if not exists or ctx.catalog.get(node.name) is not None:
            _at(node.this, lambda: ctx.catalog.require(node.name, _kind_of(node)))
        return ir.DropObject(node.name, _kind_of(node), exists)
    if isinstance(node, wn.ShowObjects):
        kind = (node.args.get("kind") or "").upper().rstrip("S") or None
        return ir.ShowObjects(None if kind in (None, "OBJECT", "ALL") else kind)
    if isinstance(node, exp.Describe):
        return _bind_describe(node, stmt, ctx)
    show_functions = _show_functions(node, stmt)
    if show_functions is not None:
        return show_functions
    if isinstance(node, exp.Create) and (node.args.get("kind") or "").upper() == "VIEW":
        if not _is_temporary(node):
            return _bind_create_view(node, stmt, ctx)
        temp = _bind_temp_view(node, ctx)
        if temp is not None:
            return temp
    if isinstance(node, exp.Drop) and (node.args.get("kind") or "").upper() == "VIEW":
        # sqlglot keeps the dropped name in ``this`` or, in newer versions, ``tables``
        target = node.this or next(iter(node.args.get("tables") or ()), None)
        name = target.name if isinstance(target, exp.Table) and not target.args.get("db") \
            else None
        if name and getattr(ctx.catalog, "is_temporary", lambda n: False)(name):
            return ir.TempView(name, None, if_exists=bool(node.args.get("exists")))
        if name and ctx.catalog.get(name) is not None:
            _at(target, lambda: ctx.catalog.require(name, "VIEW"))
            return ir.DropObject(name, "VIEW", bool(node.args.get("exists")))
    if isinstance(node, exp.Query):
        return ir.QueryStatement(_bind_query(node, stmt, ctx, top_level=True))
    if isinstance(node, wn.RelationToStream):
        return ir.QueryStatement(_bind_relation_to_stream(node, ctx))
    if isinstance(node, exp.Insert):
        insert = _bind_insert_into_sink(node, stmt, ctx)
        if insert is not None:
            return insert
    if isinstance(node, exp.Set):
        _check_settings(node)
    # Anything else -- SET, CACHE TABLE, CREATE TEMP VIEW, CREATE TABLE, INSERT INTO a Spark
    # table, unmodelled commands -- is Spark's business: run the user's text as is, with the
    # catalog objects it mentions made visible to Spark.
    _reject_wavesql_constructs(node)
    return ir.SparkCommand(stmt.text, _bind_inputs(node, ctx, strict=False))


_EXPLAIN_PREFIX = re.compile(
    rf"\s*EXPLAIN(\s+({'|'.join(wn.EXPLAIN_KINDS)})\b)?\s+", re.IGNORECASE)


def _check_settings(node: exp.Set) -> None:
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


def _explained_statement(stmt: ParsedStatement, target: exp.Expression) -> ParsedStatement:
    """The statement after ``EXPLAIN [mode]``, with its own text and offsets in the user's."""
    match = _EXPLAIN_PREFIX.match(stmt.text)
    cut = match.end() if match else 0
    return ParsedStatement(target, stmt.text[cut:], stmt.start + cut, stmt.end)


# ---------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------
def _bind_query(node: exp.Expression, stmt: ParsedStatement | None, ctx: BindContext,
                top_level: bool = False) -> ir.Relation:
    from . import combine

    # MERGE(...) / ZIP(...) become subqueries first, so everything else binds them as such
    given = node
    node = combine.expand(node, lambda table: _combine_input(table, ctx))
    _check_functions(node, ctx)
    node, streams = _extract_relation_to_streams(node, ctx)
    node, windows = _extract_windows(node, ctx)
    node, temporal = _extract_temporal(node, ctx, dict(streams + windows))
    node, syncs = _extract_syncs(node, ctx, dict(streams + windows + temporal))
    node, binned = _bin_band_joins(node, ctx)
    node = _merge_passthrough(node, ctx)
    node, stages = _extract_signal_stages(node, ctx)
    _reject_wavesql_constructs(node)
    _reject_stray_signal_calls(node, ctx)
    own = streams + windows + temporal + syncs + stages
    inputs = own + _bind_inputs(node, ctx, skip={name for name, _ in own})
    # Plain Spark SQL at the top level: hand Spark the user's exact text, so that Spark sees
    # what the user typed and its error positions map back one to one.
    if top_level and stmt is not None and not own and not binned and node is given:
        sql, offset = stmt.text, stmt.start
    else:
        sql, offset = to_spark_sql(node), None
    schema = ctx.env.analyze(sql, inputs, offset)
    bounded = all(r.bounded for _, r in inputs)
    return ir.SqlQuery(sql, inputs, schema, bounded, offset)


def _bind_relation_to_stream(node: wn.RelationToStream, ctx: BindContext) -> ir.StreamOf:
    """``ISTREAM/DSTREAM/RSTREAM (query)``: the query must read one windowed stream."""
    inner = _bind_query(node.this, None, ctx)
    scans = [r for _, r in getattr(inner, "inputs", ()) if isinstance(r, ir.WindowScan)]
    if len(scans) > 1 and all(r.joint and r.joint == scans[0].joint for r in scans):
        scans = scans[:1]  # one join of windowed tables: one sequence of instants
    if len(scans) != 1:
        raise WaveSQLError(
            "STREAMING_RULE", f"{node.kind} needs a query over one windowed stream",
            Span.of(node), hint="e.g. ISTREAM (SELECT sym, count(*) FROM trades [RANGE 1 MINUTE] "
                                "GROUP BY sym)")
    return ir.StreamOf(node.kind, inner, scans[0], inner.schema, inner.bounded)


def _extract_relation_to_streams(node: exp.Expression, ctx: BindContext):
    """Bind every ``ISTREAM/DSTREAM/RSTREAM (...)`` used as a table; return the rewritten
    copy of ``node`` (each replaced by a named input) and the inputs."""
    found = [n for n in node.find_all(wn.RelationToStream) if n is not node]
    if not found:
        return node, ()
    node = node.copy()
    inputs = []
    for r2s in sorted(node.find_all(wn.RelationToStream), key=lambda n: -_depth(n)):
        name = f"__wavesql_stream_{len(inputs)}"
        inputs.append((name, _bind_relation_to_stream(r2s, ctx)))
        target = r2s.parent if isinstance(r2s.parent, exp.Subquery) else r2s
        alias = target.args.get("alias")
        target.replace(exp.Table(this=exp.to_identifier(name), alias=alias.copy() if alias
                                 else exp.TableAlias(this=exp.to_identifier(name))))
    return node, tuple(inputs)


def _catalog_columns(source, ctx: BindContext, ctes) -> list[str] | None:
    """The columns of a FROM source that is a catalog object with declared columns (a
    stream or table read without a window, a view declared with its columns); None for
    anything else (a subquery, a CTE, a Spark table: Spark knows them)."""
    if not isinstance(source, exp.Table) or source.args.get("db") \
            or source.name.lower() in ctes:
        return None
    alias = source.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:  # ``t AS d(a, b, c)``
        return [c.name for c in alias.columns]
    columns = getattr(ctx.catalog.get(source.name), "columns", None)
    return [c.name for c in columns] if columns else None


def _extract_windows(node: exp.Expression, ctx: BindContext):
    """Rewrite every SELECT over a windowed event stream to run once per instant."""
    from .windows import bind_window, per_instant, windowed_tables

    for table in node.find_all(exp.Table):  # [SAMPLES n] on an event stream: say why not
        window = table.args.get("window")
        if window is not None and window.kind == "SAMPLES" and isinstance(
                ctx.catalog.get(table.name), cat.StreamDef):
            bind_window(window, table.name)
    selects = [s for s in node.find_all(exp.Select) if windowed_tables(s)]
    if not selects:
        return node, ()
    node = node.copy()
    ctes = _cte_names(node)
    inputs = []
    for select in sorted(node.find_all(exp.Select), key=lambda s: -_depth(s)):
        scans, tables = [], windowed_tables(select)
        for table in tables:
            defn = None if table.name.lower() in ctes or table.args.get("db") else \
                ctx.catalog.get(table.name)
            if isinstance(defn, cat.SignalDef):
                continue  # a signal's windows are the signal stage's
            window = table.args["window"]
            if window.kind == "SPLIT":
                if len(tables) > 1:
                    raise WaveSQLError("NOT_IMPLEMENTED", "a split stream joined with another "
                                       "windowed stream", Span.of(window),
                                       hint="split the stream in a subquery, join outside it")
                inputs.append(_bind_split(select, table, window, ctx, len(inputs)))
                break
            if table.name.lower() in ctes or isinstance(defn, cat.ViewDef):
                scans.append((table, _bind_window_over_relation(table, window, select, ctx)))
                continue
            scans.append((table, _bind_window_scan(table, window, defn, ctx)))
        if not scans:
            continue
        joint = tuple(scan for _, scan in scans) if len(scans) > 1 else ()
        names = []
        for table, scan in scans:
            names.append(f"__wavesql_window_{len(inputs)}")
            inputs.append((names[-1], dataclasses.replace(scan, joint=joint)))
        per_instant(select, [(table, name) for (table, _), name in zip(scans, names)],
                    {t.alias_or_name.lower(): list(scan.input.schema.names) for t, scan in scans},
                    lambda source: _catalog_columns(source, ctx, ctes))
    return node, tuple(inputs)


def _bind_window_over_relation(table: exp.Table, window, select: exp.Select,
                               ctx: BindContext) -> ir.WindowScan:
    """A window over a view (catalog or temporary) or a CTE: its event time is the one of
    the stream it reads, when its result keeps that column under the same name."""
    from .windows import TIME, bind_window

    query = _inline_query(table, select)
    source = _bind_query(query, None, ctx) if query is not None else \
        _resolve_relation(table.name, table.this, ctx)
    event_time = ir.carried_event_time(source)
    if event_time is None:
        streams = sorted({r.stream.event_time for r in ir.walk(source)
                          if isinstance(r, ir.StreamScan) and r.stream.event_time})
        raise WaveSQLError(
            "STREAMING_RULE", f"a window needs an event time: `{table.name}` does not keep "
            "the EVENT TIME column of the stream it reads", Span.of(window),
            hint=(f"keep {' or '.join(repr(t) for t in streams)} in its result under that name"
                  if streams else "read an event-time stream: CREATE STREAM ... EVENT TIME ts"))
    if source.schema.find(TIME) is not None:
        raise WaveSQLError("DUPLICATE_COLUMN", f"`{table.name}` has a column named {TIME}, "
                           "which windowed results use for the instant", Span.of(table),
                           hint="rename the column")
    spec = bind_window(window, table.name)
    schema = ir.Schema((ir.Field(TIME, "timestamp", False),) + source.schema.fields)
    return ir.WindowScan(source, table.name, event_time, spec, schema, source.bounded)


def _combine_input(name: exp.Expression, ctx: BindContext) -> ir.Relation:
    """A MERGE/ZIP input: a catalog object, or a CTE the SELECT can see (bound for its
    schema and event time; the expanded SQL reads it by name)."""
    select = name.find_ancestor(exp.Select)
    if select is not None:
        query = _inline_query(exp.Table(this=name.copy()) if isinstance(name, exp.Identifier)
                              else name, select)
        if query is not None:
            return _bind_query(query, None, ctx)
    return _resolve_relation(name.name, name, ctx)


def _bind_window_scan(table: exp.Table, window, defn, ctx: BindContext) -> ir.WindowScan:
    from .windows import TIME, bind_window

    if not isinstance(defn, cat.StreamDef) or defn.event_time is None:
        what = f"stream `{table.name}` has no EVENT TIME" if isinstance(defn, cat.StreamDef) \
            else f"`{table.name}` is not a catalog stream"
        raise WaveSQLError("STREAMING_RULE", f"a window needs an event-time stream: {what}",
                           Span.of(window), hint="declare one: CREATE STREAM ... EVENT TIME ts "
                                                 "WATERMARK 5 SECONDS")
    if defn.column(TIME) is not None:
        raise WaveSQLError("DUPLICATE_COLUMN", f"stream `{defn.name}` has a column named "
                           f"{TIME}, which windowed results use for the instant",
                           Span.of(table), hint="rename the column in the stream")
    spec = bind_window(window, defn.name)
    source = _resolve_relation(defn.name, table.this, ctx)
    schema = ir.Schema((ir.Field(TIME, "timestamp", False),) + source.schema.fields)
    return ir.WindowScan(source, defn.name, defn.event_time, spec, schema, source.bounded)


def _bind_split(select: exp.Select, table: exp.Table, window, ctx: BindContext, index: int):
    """``FROM s [PARTITION INTO n BY e REPLICATE WHEN p]``: the SELECT runs per sub-stream."""
    from .windows import PART, per_substream

    source = _resolve_relation(table.name, table.this, ctx)
    into = window.args["into"]
    n = number(into)
    if n != int(n) or not 1 <= n <= 10_000:
        raise WaveSQLError("INVALID_OPTION", "PARTITION INTO needs a whole number of "
                           "sub-streams between 1 and 10000", Span.of(into))
    by_sql = to_spark_sql(_unqualify(window.args["by"]))
    rep = window.args.get("replicate_when")
    rep_sql = to_spark_sql(_unqualify(rep)) if rep is not None else None
    name = f"__wavesql_split_{index}"
    schema = ir.Schema(source.schema.fields + (ir.Field(PART, "int", False),))
    # Check the routing expressions against the stream's columns now, with positions.
    ctx.env.analyze(f"SELECT {by_sql}{', ' + rep_sql if rep_sql else ''} FROM "
                    f"{table.name}", ((table.name.lower(), source),), None)
    per_substream(select, table, name, source.schema.names)
    return name, ir.SplitScan(source, table.name, int(n), by_sql, rep_sql, schema,
                              source.bounded)


def _unqualify(node: exp.Expression) -> exp.Expression:
    return node.copy().transform(
        lambda n: exp.column(n.name) if isinstance(n, exp.Column) and n.table else n)


def _extract_temporal(node: exp.Expression, ctx: BindContext,
                      derived: dict[str, ir.Relation] | None = None):
    """``RESAMPLE(...)`` tables and ``ASOF JOIN``s become named inputs computed by the SQL
    of ``planner/temporal.py``; their inputs may be ones earlier passes made (``derived``)
    or the RESAMPLEs made here (an ASOF JOIN of a RESAMPLE)."""
    if node.find(wn.Resample) is None and not any(
            (j.args.get("method") or "").upper() == "ASOF" for j in node.find_all(exp.Join)):
        return node, ()
    from .temporal import asof_join_relation, parse_asof_condition, resample_sql

    node = node.copy()
    inputs: list[tuple[str, ir.Relation]] = []
    known = _KnownInputs(derived or {}, inputs)
    for resample in sorted(node.find_all(wn.Resample), key=lambda n: -_depth(n)):
        table, source = _input_of(resample.this, resample.find_ancestor(exp.Select), ctx,
                                  known, f"__wavesql_inline_{len(inputs)}")
        columns = [(f.name, f.type) for f in source.schema.fields]
        time_col = resample.args["time"].name
        if source.schema.find(time_col) is None:
            raise WaveSQLError("UNKNOWN_COLUMN", f"RESAMPLE time column `{time_col}` is not a "
                               f"column of `{table.name}`", Span.of(resample.args["time"]),
                               hint=did_you_mean(time_col, source.schema.names, "columns"))
        period = interval_us(resample.args["period"])
        method_node = resample.args.get("method")
        method = method_node.name.lower() if method_node is not None else "linear"
        keys = []
        for key in resample.args.get("partition_by") or []:
            found = source.schema.find(key.name)
            if found is None or key.table:
                raise WaveSQLError("UNKNOWN_COLUMN", f"RESAMPLE key `{key.sql()}` is not a "
                                   f"column of `{table.name}`", Span.of(key),
                                   hint=did_you_mean(key.name, source.schema.names, "columns"))
            if found.name.lower() == time_col.lower():
                raise WaveSQLError("INVALID_OPTION", "the RESAMPLE time column cannot be a key",
                                   Span.of(key), hint="partition by other columns")
            keys.append(found.name)
        try:
            sql = resample_sql(table.name, columns, time_col, period, method, tuple(keys))
        except WaveSQLError as err:
            where = method_node if err.hint and "linear" in err.hint else resample.args["period"]
            raise WaveSQLError(err.code, err.message, Span.of(where), err.hint) from None
        from .temporal import is_numeric

        name = f"__wavesql_resample_{len(inputs)}"
        query = _temporal_query(sql, ((table.name.lower(), source),), ctx)
        numeric = tuple(c for c, t in columns if c.lower() != time_col.lower()
                        and c.lower() not in {k.lower() for k in keys} and is_numeric(t))
        inputs.append((name, dataclasses.replace(
            query, resample=(table.name.lower(), time_col, period, method, numeric,
                             tuple(keys)))))
        alias = resample.args.get("alias")
        resample.replace(exp.Table(this=exp.to_identifier(name), alias=alias.copy() if alias
                                   else exp.TableAlias(this=exp.to_identifier(table.name))))
    for select in sorted(node.find_all(exp.Select), key=lambda n: -_depth(n)):
        joins = select.args.get("joins") or []
        asof = [j for j in joins if (j.args.get("method") or "").upper() == "ASOF"]
        if not asof:
            continue
        join = asof[0]
        left, lrel = _input_of(select.args["from_"].this, select, ctx, known,
                               f"__wavesql_inline_{len(inputs)}_l")
        right, rrel = _input_of(join.this, select, ctx, known,
                                f"__wavesql_inline_{len(inputs)}_r")
        if len(joins) > 1 or not isinstance(left, exp.Table) or not isinstance(right, exp.Table):
            raise WaveSQLError("NOT_IMPLEMENTED", "ASOF JOIN is implemented between two "
                               "streams, tables, views, CTEs or subqueries, alone in their "
                               "SELECT", Span.of(join), hint="join other inputs in an outer query")
        lalias, ralias = left.alias_or_name, right.alias_or_name
        lcols = [(f.name, f.type) for f in lrel.schema.fields]
        rcols = [(f.name, f.type) for f in rrel.schema.fields]
        cond = parse_asof_condition(join.args.get("on"), lalias, ralias,
                                    [c for c, _ in lcols], [c for c, _ in rcols])
        outer = (join.args.get("side") or "").upper() == "LEFT"
        sql = asof_join_relation(left.name, right.name, lalias, ralias, lcols, rcols,
                                 outer=outer, **cond.as_kwargs())
        name = f"__wavesql_asof_{len(inputs)}"
        query = _temporal_query(sql, ((left.name.lower(), lrel), (right.name.lower(), rrel)),
                                ctx)
        asof = (left.name.lower(), right.name.lower(),
                tuple((k, tuple(map(tuple, v)) if k == "keys" else v)
                      for k, v in cond.as_kwargs().items()), outer)
        inputs.append((name, dataclasses.replace(query, asof=asof)))
        join.pop()
        select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(name))))
        expressions = []
        for e in select.expressions:
            if isinstance(e, exp.Star):  # both sides' columns, as a join's star would give
                expressions += [exp.Column(this=exp.Star(), table=exp.to_identifier(lalias)),
                                exp.Column(this=exp.Star(), table=exp.to_identifier(ralias))]
            else:
                expressions.append(e)
        select.set("expressions", expressions)
    return node, tuple(inputs)


class _KnownInputs(dict):
    """``derived`` plus the inputs a pass has made so far (a live view of its list)."""

    def __init__(self, derived: dict, made: list):
        super().__init__(derived)
        self.made = made

    def get(self, name, default=None):
        return dict(self.made).get(name) or super().get(name, default)


def _resolve_input(table: exp.Table, ctx: BindContext, known: dict[str, ir.Relation]
                   ) -> ir.Relation:
    """A FROM/JOIN table: one an earlier extraction pass made (``__wavesql_window_0``, a
    RESAMPLE, an ASOF join -- ``known``), else a catalog object."""
    return known.get(table.name) or _resolve_relation(table.name, table.this, ctx)


def _extract_syncs(node: exp.Expression, ctx: BindContext,
                   derived: dict[str, ir.Relation] | None = None):
    """``FROM control c SYNC JOIN signal s ON RANGE (a, b)`` becomes a named input
    (``planner/sync.py``); the SELECT then reads it. ``derived`` holds the inputs the
    earlier passes made of the FROM (a windowed stream, a RESAMPLE, an ISTREAM): the
    control may be one of them."""
    if not any(j.args.get("sync") is not None for j in node.find_all(exp.Join)):
        return node, ()

    node = node.copy()
    inputs: list[tuple[str, ir.Relation]] = []
    for select in sorted(node.find_all(exp.Select), key=lambda n: -_depth(n)):
        joins = select.args.get("joins") or []
        syncs = [j for j in joins if j.args.get("sync") is not None]
        if not syncs:
            continue
        if len(syncs) != len(joins):
            other = next(j for j in joins if j.args.get("sync") is None)
            raise WaveSQLError("NOT_IMPLEMENTED", "a SYNC JOIN is implemented with other SYNC "
                               "JOINs only, not with other joins in its SELECT", Span.of(other),
                               hint="SYNC in a view or subquery, then join its result")
        control_table = select.args["from_"].this
        inline = _inline_query(control_table, select)
        if inline is not None:  # a CTE or a subquery: bound as a view of its own
            alias = control_table.alias_or_name or f"__wavesql_control_{len(inputs)}"
            named = f"__wavesql_control_{len(inputs)}"
            derived = {**(derived or {}), named: _bind_query(inline, None, ctx)}
            control_table = exp.Table(this=exp.to_identifier(named),
                                      alias=exp.TableAlias(this=exp.to_identifier(alias)))
        if not isinstance(control_table, exp.Table):
            raise WaveSQLError("NOT_IMPLEMENTED", "SYNC JOIN reads its control from a stream, "
                               "view, CTE or subquery", Span.of(syncs[0]),
                               hint="name the control rows in a WITH clause")
        control = _resolve_input(control_table, ctx, derived or {})
        calias = control_table.alias_or_name
        rel: ir.Relation = control
        synced: list[tuple[str, cat.SignalDef, exp.Table]] = []  # (alias, signal, its table)
        for join in syncs:
            rel = _bind_sync(join, rel, control, control_table, calias, synced, ctx)
        name = f"__wavesql_sync_{len(inputs)}"
        for join in syncs:
            join.pop()
        from_table = exp.Table(this=exp.to_identifier(name))
        select.set("from_", exp.From(this=from_table))
        expressions = []
        for e in select.expressions:
            if isinstance(e, exp.Star):
                expressions += [exp.Column(this=exp.Star(), table=exp.to_identifier(a))
                                for a in [calias] + [a for a, _, _ in synced]]
            else:
                expressions.append(e)
        select.set("expressions", expressions)
        if _calls_signal_functions(select):
            # seg_rms(s.ch1) over the synced segments, in the same SELECT: a signal stage
            # over the SYNC's rows (planner/signals.py: bind_segment_select)
            stage = bind_segment_select(select, from_table, rel, "SYNC JOIN", f"{name}_stage",
                                        fold=ctx.env.constant,
                                        qualifiers=tuple(a for a, _, _ in synced))
            inputs.append((f"{name}_stage", stage))
        else:
            inputs.append((name, rel))
    return node, tuple(inputs)


def _calls_signal_functions(select: exp.Select) -> bool:
    """Whether ``select`` itself (not a nested SELECT) calls a signal function."""
    return any(registry.lookup(call.name) is not None
               and call.find_ancestor(exp.Select) is select
               for call in select.find_all(exp.Anonymous))


def _input_of(expr: exp.Expression, select: exp.Select, ctx: BindContext, known: dict,
              label: str) -> tuple[exp.Expression, ir.Relation]:
    """``(table, relation)`` of a RESAMPLE input or an ASOF side: a named input as it is,
    a CTE under its own name, a subquery under ``label`` (its alias kept)."""
    query = _inline_query(expr, select) if select is not None else None
    if query is None:
        return expr, (_resolve_input(expr, ctx, known) if isinstance(expr, exp.Table)
                      else None)
    relation = _bind_query(query, None, ctx)
    if isinstance(expr, exp.Table):
        return expr, relation
    alias = expr.alias_or_name or label
    return exp.Table(this=exp.to_identifier(label),
                     alias=exp.TableAlias(this=exp.to_identifier(alias))), relation


def _inline_query(control: exp.Expression, select: exp.Select) -> exp.Query | None:
    """The query of an input written inline -- a CTE the SELECT can see, or a subquery --
    with the CTEs it may read; None for a named stream, view or table. SYNC controls,
    RESAMPLE inputs and ASOF sides take any relation this way (bound as a view of its
    own, its event time carried through by Spark's analysis of its columns)."""
    from .time_windows import _visible_ctes

    ctes = _visible_ctes(select)
    names = [c.alias_or_name.lower() for c in ctes]
    if isinstance(control, exp.Table) and not control.args.get("db") \
            and control.name.lower() in names:
        keep = ctes[:len(names) - names[::-1].index(control.name.lower())]
        query = exp.select("*").from_(exp.Table(this=control.this.copy()))
    elif isinstance(control, exp.Subquery) and isinstance(control.this, exp.Query):
        keep, query = ctes, control.this.copy()
    else:
        return None
    own = query.args.get("with_")
    if keep:
        query.set("with_", exp.With(expressions=[c.copy() for c in keep]
                                    + (list(own.expressions) if own is not None else [])))
    return query


def _bind_sync(join: exp.Join, previous: ir.Relation, control: ir.Relation,
               control_table: exp.Table, calias: str, synced: list, ctx: BindContext
               ) -> ir.SyncJoin:
    """One ``SYNC JOIN signal ON RANGE (...)`` of a SELECT over ``previous`` (the control,
    or the SYNC JOIN before it: several SYNCs of one SELECT chain, each keyed by the
    control's columns). Appends ``(alias, signal, table)`` to ``synced``."""
    from .sync import output_fields

    signal_table = join.this
    if not isinstance(signal_table, exp.Table):
        raise WaveSQLError("NOT_IMPLEMENTED", "SYNC JOIN reads a named control stream "
                           "(or view) and a named signal", Span.of(join),
                           hint="make the control a CREATE VIEW")
    defn = ctx.catalog.get(signal_table.name)
    if not isinstance(defn, cat.SignalDef):
        raise WaveSQLError("STREAMING_RULE", f"SYNC JOIN needs a signal, `{signal_table.name}`"
                           " is not one", Span.of(signal_table),
                           hint="SYNC aligns recorded signals; join event streams with JOIN")
    if defn.source == "kafka":
        raise WaveSQLError("NOT_IMPLEMENTED", f"SYNC JOIN over `{defn.name}`, a signal read "
                           "from Kafka", Span.of(signal_table),
                           hint="SYNC reads WAV signals today; window the Kafka signal "
                                "([SAMPLES n]) and join on time instead")
    if signal_table.args.get("window") is not None:
        raise WaveSQLError("INVALID_OPTION", "a SYNC JOIN takes its ranges from the control "
                           "rows, not from a window", Span.of(signal_table.args["window"]))
    salias = signal_table.alias_or_name
    taken = [calias] + [a for a, _, _ in synced]
    if salias.lower() in (a.lower() for a in taken):
        raise WaveSQLError("INVALID_OPTION", f"`{salias}` names two inputs of this SELECT",
                           Span.of(signal_table), hint=f"give it another alias: "
                                                       f"SYNC JOIN {signal_table.name} AS s2")
    if synced and synced[0][1].rate_hz != defn.rate_hz:
        first_alias, first, _ = synced[0]
        raise WaveSQLError(
            "RATE_MISMATCH", f"signals SYNCed in one SELECT must share a rate: "
            f"`{first.name}` is {first.rate_hz:g} Hz, `{defn.name}` {defn.rate_hz:g} Hz",
            Span.of(signal_table),
            hint=f"resample one in a view: CREATE VIEW {defn.name}_r AS SELECT "
                 f"resample(...) ..., or SYNC each in its own SELECT and join the results")
    signal = _resolve_relation(signal_table.name, signal_table.this, ctx)
    sync = join.args["sync"]
    start_sql, end_sql = to_spark_sql(sync.args["start"]), to_spark_sql(sync.args["end"])
    # Analyse the bounds now: an unknown column or a wrong type is a bind-time error.
    probe = ctx.env.analyze(
        f"SELECT {start_sql} AS a, {end_sql} AS b FROM {control_table.name} AS {calias}",
        ((control_table.name.lower(), control),), None)
    for field, bound in zip(probe.fields, (sync.args["start"], sync.args["end"])):
        if not (field.type.startswith(("timestamp", "decimal")) or field.type in
                ("bigint", "int", "smallint", "tinyint", "double", "float")):
            raise WaveSQLError("TYPE_ERROR", f"a SYNC range bound must be a TIMESTAMP, a "
                               f"sample number (BIGINT) or seconds (DOUBLE), not {field.type}",
                               Span.of(bound),
                               hint="e.g. ON RANGE (d.t_from, d.t_to) with TIMESTAMP columns")
    synced.append((salias, defn, signal_table))
    fields = output_fields(control.schema.fields,
                           [(a, [c.name for c in d.channels]) for a, d, _ in synced], calias)
    schema = ir.Schema(tuple(ir.Field(n, t) for n, t in fields))
    return ir.SyncJoin(previous, calias, signal, salias, start_sql, end_sql,
                       sync.args.get("missing") or "NULL", schema,
                       previous.bounded and signal.bounded,
                       carried=tuple((a, tuple(c.name for c in d.channels))
                                     for a, d, _ in synced[:-1]))


def _bin_band_joins(node: exp.Expression, ctx: BindContext):
    """Give interval joins of two streams an equality on time bins (``planner/band.py``)."""
    from .band import find_band

    if not any(find_band(j.args.get("on")) for j in node.find_all(exp.Join)):
        return node, False
    node = node.copy()
    return node, _bin_copy(node, ctx)


def _bin_copy(node: exp.Expression, ctx: BindContext) -> bool:
    from .band import bin_tables, find_band

    candidates = []
    for select in node.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if len(joins) != 1 or select.args.get("from_") is None:
            continue
        join = joins[0]
        if (join.args.get("sync") is not None or join.args.get("method")
                or (join.args.get("side") or "") or (join.args.get("kind") or "INNER").upper()
                not in ("INNER", "")):
            continue
        band = find_band(join.args.get("on"))
        if band is not None:
            candidates.append((select, join, band))
    ctes = _cte_names(node)
    changed = False
    for select, join, band in candidates:
        tables = [select.args["from_"].this, join.this]
        if not all(isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier)
                   and t.name.lower() not in ctes and not t.args.get("db")
                   and t.args.get("window") is None for t in tables):
            continue
        schemas, types = {}, {}
        for t in tables:
            rel = _resolve_relation(t.name, t.this, ctx)
            schemas[t.alias_or_name.lower()] = rel.schema.names
            for f in rel.schema.fields:
                types[(t.alias_or_name.lower(), f.name.lower())] = f.type.lower()
        if not all(types.get((c.table.lower(), c.name.lower()), "").startswith("timestamp")
                   for c in (band.a, band.b)):
            continue
        bin_tables(select, join, band, schemas)
        changed = True
    return changed


def _temporal_query(sql: str, inputs, ctx: BindContext) -> ir.SqlQuery:
    unique = tuple(dict(inputs).items())
    schema = ctx.env.analyze(sql, unique, None)
    return ir.SqlQuery(sql, unique, schema, all(r.bounded for _, r in unique))


def _extract_signal_stages(node: exp.Expression, ctx: BindContext):
    """Split every SELECT over a catalog signal into a signal stage plus Spark SQL.

    Returns the rewritten copy of ``node`` and the stages as named inputs.
    """
    node, stages = _segments_of_inline_relations(node, ctx)
    selects = [s for s in node.find_all(exp.Select) if _signal_of(s, ctx) is not None]
    if not selects:
        return node, tuple(stages)
    node = node.copy()
    ctes = _cte_names(node)
    # Deepest first, so an inner SELECT is rewritten before anything that contains it.
    for select in sorted(node.find_all(exp.Select), key=lambda s: -_depth(s)):
        found = _signal_of(select, ctx, ctes)
        if found is None:
            continue
        table, defn = found
        for join in select.args.get("joins") or []:
            raise WaveSQLError("NOT_IMPLEMENTED", "joining a signal is not implemented yet",
                               Span.of(join), hint="align rows with a signal's samples by "
                               "SYNC JOIN (SELECT ... FROM events e SYNC JOIN mic m ON RANGE "
                               "(e.t_from, e.t_to)), or select from the signal in a subquery "
                               "and join its results")
        view = f"__wavesql_{defn.name}_{len(stages)}"
        if isinstance(defn, cat.SignalDef):
            stage = bind_signal_select(select, table, defn, view, fold=ctx.env.constant)
        else:  # a catalog view whose rows carry segments
            source = _resolve_relation(defn.name, table.this, ctx)
            stage = bind_segment_select(select, table, source, defn.name, view,
                                        fold=ctx.env.constant)
        stages.append((view, stage))
    return node, tuple(stages)


def _segments_of_inline_relations(node: exp.Expression, ctx: BindContext):
    """Signal functions over the segments of a subquery or CTE (``SELECT seg_rms(ch1), t
    FROM (SELECT ch1, start_time(ch1) AS t FROM mic [SAMPLES 512]) s``): the inline
    relation is bound on its own (its signal stage included) and the SELECT becomes a
    segment stage over its rows, as over a catalog view. Shallowest SELECT first: an outer
    one takes its inline relation whole, before anything inside is rewritten."""
    from wavesql.udfs.program import SPARK_TYPES

    sigseg = SPARK_TYPES["sigseg"].replace(" ", "")
    stages: list = []
    if not any(registry.lookup(c.name) is not None for c in node.find_all(exp.Anonymous)):
        return node, stages
    copied = False
    for select in sorted(node.find_all(exp.Select), key=_depth):
        source = (select.args.get("from_").this if select.args.get("from_") is not None
                  else None)
        if source is None or select.args.get("joins") or not _calls_signal_functions(select) \
                or source.find_ancestor(exp.Select) is not select:
            continue
        if isinstance(source, exp.Table) and not isinstance(source.this, exp.Identifier):
            continue
        inline = _inline_query(source, select)
        if inline is None:
            continue
        relation = _bind_query(inline, None, ctx)
        if not any(f.type.lower().replace(" ", "") == sigseg for f in relation.schema.fields):
            continue
        if not copied:  # rewrite a copy, found again by position
            path = _path_to(select, node)
            node, copied = node.copy(), True
            select = _follow(node, path)
            source = select.args["from_"].this
        name = f"__wavesql_inline_{len(stages)}"
        alias = source.alias_or_name
        table = exp.Table(this=exp.to_identifier(name),
                          alias=exp.TableAlias(this=exp.to_identifier(alias)))
        cte_name = source.name.lower() if isinstance(source, exp.Table) else None
        source.replace(table)
        if cte_name is not None:
            _drop_unused_cte(node, cte_name)
        view = f"{name}_stage"
        stages.append((view, bind_segment_select(select, table, relation, alias, view,
                                                 fold=ctx.env.constant)))
    return node, stages


def _drop_unused_cte(node: exp.Expression, name: str) -> None:
    """Remove CTE ``name`` when no table reads it any more (it was bound on its own)."""
    if any(t.name.lower() == name for t in node.find_all(exp.Table)
           if isinstance(t.this, exp.Identifier)):
        return
    for cte in list(node.find_all(exp.CTE)):
        if cte.alias_or_name.lower() == name:
            with_ = cte.parent
            cte.pop()
            if isinstance(with_, exp.With) and not with_.expressions:
                with_.pop()


def _path_to(target: exp.Expression, root: exp.Expression) -> list:
    """The (arg key, index) steps from ``root`` down to ``target``."""
    steps = []
    node = target
    while node is not root:
        steps.append((node.arg_key, node.index))
        node = node.parent
    return steps[::-1]


def _follow(root: exp.Expression, path: list) -> exp.Expression:
    node = root
    for key, index in path:
        child = node.args[key]
        node = child[index] if isinstance(child, list) else child
    return node


def _merge_passthrough(node: exp.Expression, ctx: BindContext) -> exp.Expression:
    """Pass-through subqueries over a signal merged into the SELECT that reads them, so
    that SELECT becomes the signal stage (planner/passthrough.py)."""
    from .passthrough import merge_into_signal_selects

    ctes = _cte_names(node)

    def channels_of(table: exp.Table) -> set[str] | None:
        if (not isinstance(table.this, exp.Identifier) or table.args.get("db")
                or table.name.lower() in ctes):
            return None
        defn = ctx.catalog.get(table.name)
        if not isinstance(defn, cat.SignalDef):
            return None
        return {c.name.lower() for c in defn.channels}

    return merge_into_signal_selects(node, channels_of)


def _reject_stray_signal_calls(node: exp.Expression, ctx: BindContext) -> None:
    """A signal function left after stage extraction is applied to something that is not a
    signal in FROM (a view's or subquery's segments): say so, instead of letting Spark
    report an unknown function -- unless a FROM names nothing at all (a typo), which is
    the error to report."""
    for call in node.find_all(exp.Anonymous):
        if registry.lookup(call.name) is not None:
            ctes = {c.alias_or_name.lower() for c in node.find_all(exp.CTE)}
            for table in node.find_all(exp.Table):
                if (isinstance(table.this, exp.Identifier) and not table.args.get("db")
                        and table.name.lower() not in ctes
                        and not table.name.startswith("__wavesql_")):
                    _resolve_relation(table.name, table.this, ctx)  # raises UNKNOWN_STREAM
            raise WaveSQLError(
                "NOT_IMPLEMENTED",
                f"signal function `{call.name}` is applied to a relation that is not a signal",
                Span.of(call),
                hint="signal functions run in the SELECT that reads a signal (FROM mic "
                     "[SAMPLES n]) or a catalog view of its segments; compute them there")


def _signal_of(select: exp.Select, ctx: BindContext, ctes: set[str] = frozenset()):
    from_ = select.args.get("from_")
    table = from_.this if from_ is not None else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    if table.args.get("db") or table.name.lower() in ctes:
        return None
    defn = ctx.catalog.get(table.name)
    if isinstance(defn, cat.SignalDef):
        return table, defn
    window = table.args.get("window")
    if isinstance(defn, cat.ViewDef) and _has_segments(defn) and (
            (window is not None and window.kind == "SAMPLES") or
            any(registry.lookup(c.name) is not None for c in select.find_all(exp.Anonymous))):
        return table, defn
    return None


def _has_segments(view: cat.ViewDef) -> bool:
    from wavesql.udfs.program import SPARK_TYPES

    sigseg = SPARK_TYPES["sigseg"].replace(" ", "")
    return any(c.type.lower().replace(" ", "") == sigseg for c in view.columns)


def _depth(node: exp.Expression) -> int:
    depth = 0
    while node.parent is not None:
        node, depth = node.parent, depth + 1
    return depth


def _reject_wavesql_constructs(node: exp.Expression) -> None:
    for found in wavesql_nodes(node):
        what = type(found).__name__
        raise WaveSQLError(
            "NOT_IMPLEMENTED",
            f"{_construct_name(found)} parses but is not implemented yet", Span.of(found),
            hint=f"this build plans plain Spark SQL over catalog streams; `{what}` lands "
                 "with the signals / time / sync work")


def _construct_name(node: exp.Expression) -> str:
    names = {
        "StreamWindow": "a stream window `[...]`",
        "Emit": "EMIT", "LateInto": "LATE INTO", "RelationToStream": "ISTREAM/DSTREAM/RSTREAM",
        "Resample": "RESAMPLE", "Combine": "MERGE/ZIP", "SyncRange": "SYNC JOIN", "SyncJoin": "SYNC JOIN",
    }
    return names.get(type(node).__name__, type(node).__name__)


def _cte_names(node: exp.Expression) -> set[str]:
    return {cte.alias_or_name.lower() for cte in node.find_all(exp.CTE)}


def _bind_inputs(node: exp.Expression, ctx: BindContext, strict: bool = True,
                 skip: set[str] = frozenset()) -> tuple[tuple[str, ir.Relation], ...]:
    """Resolve every table reference: catalog object, Spark table, or an error.

    Not ``strict`` (Spark commands): names WaveSQL does not know are left to Spark, since
    they may be what the command creates (``CREATE TEMPORARY VIEW v``, ``CACHE TABLE t``).
    """
    ctes = _cte_names(node) | {name.lower() for name in skip}
    seen: dict[str, ir.Relation] = {}
    for table in node.find_all(exp.Table):
        ident = table.this
        if not isinstance(ident, exp.Identifier):
            continue  # table-valued function call: Spark's to resolve
        if table.args.get("db") or table.args.get("catalog"):
            continue  # qualified name: always Spark's
        if table.find_ancestor(exp.Hint) is not None:
            continue  # /*+ BROADCAST(t) */ names an alias, not an input
        name = ident.name
        key = name.lower()
        if key in ctes or key in seen:
            continue
        if not strict and ctx.catalog.get(name) is None:
            continue
        seen[key] = _resolve_relation(name, ident, ctx)
    return tuple((n, r) for n, r in seen.items() if not isinstance(r, ir.SparkTable))


def _resolve_relation(name: str, where: exp.Expression, ctx: BindContext) -> ir.Relation:
    defn = ctx.catalog.get(name)
    if isinstance(defn, cat.StreamDef):
        return ir.StreamScan(defn, ir.Schema.of_columns(defn.columns), True)
    if isinstance(defn, cat.SignalDef):  # joined, not selected from: plain segment rows
        from wavesql.udfs.program import SPARK_TYPES

        schema = ir.Schema(tuple(ir.Field(c.name, SPARK_TYPES["sigseg"]) for c in defn.channels))
        return ir.SignalScan(defn, schema, True, (defn.segment, defn.segment))
    if isinstance(defn, cat.ViewDef):
        if defn.name.lower() in ctx.view_stack:
            raise WaveSQLError("INVALID_OPTION", f"view `{defn.name}` refers to itself",
                               Span.of(where), hint=" -> ".join(ctx.view_stack + (defn.name,)))
        inner = BindContext(ctx.catalog, ctx.env, ctx.base_dir,
                            ctx.view_stack + (defn.name.lower(),))
        from wavesql.dialect import parse_one
        body = _bind_query(parse_one(defn.sql), None, inner)
        return ir.ViewRef(defn, body, body.schema, body.bounded)
    if isinstance(defn, cat.SinkDef):
        raise WaveSQLError("UNKNOWN_STREAM", f"`{defn.name}` is a sink, not a stream",
                           Span.of(where),
                           hint="read its files by registering a stream over its path")
    schema = ctx.env.spark_table_schema(name)
    if schema is not None:
        return ir.SparkTable(name, schema)
    candidates = list(ctx.catalog.names()) + list(ctx.env.spark_table_names())
    raise WaveSQLError("UNKNOWN_STREAM", f"unknown stream or table `{name}`", Span.of(where),
                       hint=did_you_mean(name, candidates, "streams and tables")
                       or "create it with CREATE STREAM ... FROM 'path' FORMAT parquet")


def _check_functions(node: exp.Expression, ctx: BindContext) -> None:
    """Every function sqlglot does not know must be a Spark function or a signal function."""
    known: frozenset[str] | None = None
    for call in node.find_all(exp.Anonymous):
        if isinstance(call.parent, exp.Table) or call.find_ancestor(exp.Hint) is not None:
            continue  # table-valued functions in FROM and /*+ hints */ are Spark's to resolve
        name = call.name
        if registry.lookup(name) is not None:
            continue
        if known is None:
            known = ctx.env.function_names()
        if name.lower() in known:
            continue
        raise WaveSQLError(
            "UNKNOWN_FUNCTION", f"unknown function `{name}`", Span.of(call),
            hint=did_you_mean(name, list(known) + registry.names(), "functions"))


# ---------------------------------------------------------------------------------------
# DDL
# ---------------------------------------------------------------------------------------
def _at(where: exp.Expression, action):
    """Run a catalog call; an error it raises without a position gets ``where``'s."""
    try:
        return action()
    except WaveSQLError as err:
        if err.span is not None:
            raise
        raise WaveSQLError(err.code, err.message, Span.of(where), err.hint) from None


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



def _kind_of(node: exp.Expression) -> str | None:
    kind = node.args.get("kind")
    return kind.upper() if isinstance(kind, str) else None


def _is_temporary(node: exp.Create) -> bool:
    props = node.args.get("properties")
    if props is None:
        return False
    return any(isinstance(p, exp.TemporaryProperty) for p in props.expressions)


def _bind_columns(node: wn.CreateStream, top_level=None) -> tuple[cat.Column, ...]:
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
    pairs = []
    for opt in node.args.get("options") or []:
        key, value = opt.this, opt.expression
        pairs.append((key.name, value.name if isinstance(value, exp.Literal) else value.sql()))
    return tuple(pairs)


def _bind_create_stream(node: wn.CreateStream, ctx: BindContext) -> ir.Statement:
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
        from_kafka = source == "kafka"
        defn = cat.SignalDef(
            name=name, channels=columns, rate_hz=rate, source=source,
            path=_kafka_topic(node, ctx) if from_kafka else _path(node, ctx),
            format=_format(node, kafka_signal.FORMATS if from_kafka else SIGNAL_FORMATS),
            options=_options(node), segment=segment,
            epoch_us=_epoch_us(epoch) if epoch is not None else 0,
        )
        if not from_kafka:  # a topic's blocks are checked as they are read
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


def _check_recordings(defn: cat.SignalDef, node: wn.CreateStream) -> None:
    """Read the WAV headers now: a wrong RATE or channel count is a DDL error, at the clause
    that is wrong, not a failed job later."""
    from wavesql.udfs import wav

    from wavesql.sources.wav_source import list_wav_files

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


def _epoch_us(node: exp.Expression) -> int:
    import datetime as dt

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


def _check_replace_or_exists(node: exp.Expression) -> None:
    if node.args.get("replace") and node.args.get("exists"):
        raise WaveSQLError("INVALID_OPTION", "OR REPLACE and IF NOT EXISTS cannot be used "
                           "together", Span.of(node.this) or Span.of(node),
                           hint="OR REPLACE overwrites an existing definition, IF NOT EXISTS "
                                "keeps it: choose one")


def _bind_create_view(node: exp.Create, stmt: ParsedStatement, ctx: BindContext) -> ir.Statement:
    _check_replace_or_exists(node)
    table = node.this
    name = table.name if isinstance(table, exp.Table) else node.this.this.name
    query = node.expression
    body = _bind_query(query, None, ctx)
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
    body = _bind_query(query, None, ctx)
    defn = cat.ViewDef(name=name, sql=to_sql(query),
                       columns=tuple(cat.Column(f.name, f.type) for f in body.schema.fields))
    if not node.args.get("replace") and ctx.catalog.is_temporary(name):
        raise WaveSQLError("DUPLICATE_OBJECT", f"temporary view `{name}` already exists",
                           Span.of(table), hint="CREATE OR REPLACE TEMPORARY VIEW ...")
    return ir.TempView(name, defn, bool(node.args.get("replace")))


_SHOW_FUNCTIONS = re.compile(
    r"^(?:(USER|SYSTEM|ALL)\s+)?FUNCTIONS(?:\s+(?:LIKE\s+)?'((?:[^'\\]|\\.)*)')?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL)


def _show_functions(node, stmt: ParsedStatement) -> ir.ShowFunctions | None:
    """``SHOW [USER|SYSTEM|ALL] FUNCTIONS [[LIKE] 'pattern']`` (``FROM db`` stays Spark's)."""
    if not (isinstance(node, exp.Command) and str(node.this).upper() == "SHOW"):
        return None
    match = _SHOW_FUNCTIONS.match(str(node.expression or "").strip())
    if match is None:
        return None
    scope = (match.group(1) or "ALL").upper()
    return ir.ShowFunctions(stmt.text, scope != "USER", match.group(2))


def _bind_describe(node: exp.Describe, stmt: ParsedStatement, ctx: BindContext) -> ir.Statement:
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
            _resolve_relation(target.name, target.this, ctx)  # raises with a hint
    return ir.SparkCommand(stmt.text, _bind_inputs(node, ctx, strict=False))


# ---------------------------------------------------------------------------------------
# INSERT INTO a catalog sink
# ---------------------------------------------------------------------------------------
def _bind_insert_into_sink(node: exp.Insert, stmt: ParsedStatement, ctx: BindContext):
    """``INSERT INTO <sink> <query>`` -> ``planner.insert.InsertInto``; None when the target
    is not a catalog object (an INSERT into a Spark table stays Spark's business).

    The query is bound like a top-level query over its own text; ``LATE INTO`` is taken off
    it (and kept on the node) because where late rows go is the job's business, whether the
    query is windowed or row by row.
    """
    from .insert import InsertInto, reads_streams

    target = node.this
    table = target.this if isinstance(target, exp.Schema) else target
    if not isinstance(table, exp.Table) or table.args.get("db") or not table.name:
        return None
    defn = ctx.catalog.get(table.name)
    if defn is None:
        return None
    if not isinstance(defn, cat.SinkDef):
        raise WaveSQLError(
            "WRONG_OBJECT_KIND", f"INSERT INTO `{defn.name}`: it is a {defn.kind.lower()}, "
            "not a sink", Span.of(table),
            hint=f"INSERT INTO writes to a sink, e.g. CREATE SINK {defn.name}_out TO "
                 f"'out/{defn.name}/' FORMAT parquet")
    if node.args.get("overwrite"):
        raise WaveSQLError("NOT_IMPLEMENTED", f"INSERT OVERWRITE into sink `{defn.name}`",
                           Span.of(node) or Span.of(table),
                           hint="a sink is appended to, each input row once: INSERT INTO")
    if isinstance(target, exp.Schema) and target.expressions:
        raise WaveSQLError("NOT_IMPLEMENTED", "a column list after a sink name",
                           Span.of(target.expressions[0]),
                           hint="name the columns in the SELECT instead (expr AS name)")
    name_span = Span.of(table)
    start = name_span.end if name_span is not None else stmt.start
    rest = stmt.text[start - stmt.start:]
    query_span = Span(start + len(rest) - len(rest.lstrip()), stmt.end)  # the query's text
    query = node.expression
    if not isinstance(query, exp.Query):
        raise WaveSQLError("UNSUPPORTED_STATEMENT", f"INSERT INTO sink `{defn.name}` needs a "
                           "query", query_span, hint=f"INSERT INTO {defn.name} SELECT ... "
                           "FROM stream")
    late = query.args.get("late_into") if isinstance(query, exp.Select) else None
    late_span = Span.of(late) if late is not None else None
    text = stmt.text[start - stmt.start:]
    if late is not None:
        query = query.copy()
        query.set("late_into", None)
        if late_span is not None:  # same length, so Spark's error positions still map back
            a, b = late_span.start - start, late_span.end - start
            text = text[:a] + " " * (b - a) + text[b:]
    inner = ParsedStatement(query, text, start, stmt.end)
    relation = _bind_query(query, inner, ctx, top_level=True)
    from .insert import flat_format_problem

    problem = flat_format_problem(defn.format, relation.schema.fields)
    if problem:
        raise WaveSQLError("SINK_MISMATCH", f"sink `{defn.name}` is CSV, which has no nested "
                           f"values; the query's column {problem} is", query_span,
                           hint="write it to a parquet or json sink, or flatten the column "
                                "(to_json(col), col.field, explode)")
    if defn.columns:
        have = {f.name.lower() for f in relation.schema.fields}
        missing = [c.name for c in defn.columns if c.name.lower() not in have]
        if missing:
            raise WaveSQLError(
                "SINK_MISMATCH", f"sink `{defn.name}` declares column(s) "
                f"{', '.join(missing)} that the query does not produce", query_span,
                hint=f"the query produces: {', '.join(f.name for f in relation.schema.fields)}")
    return InsertInto(defn, relation, (start, stmt.end), late,
                      (late_span.start, late_span.end) if late_span is not None else None,
                      reads_streams(relation), stmt.text)
