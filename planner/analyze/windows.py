"""Rule: every SELECT over a windowed event stream runs once per instant.

``FROM trades [RANGE 1 MINUTE]`` makes the stream a relation that varies with time
(planner/windows.py has the semantics). Each windowed table becomes a named input, an
``ir.WindowScan`` whose rows are ``(_time, row)`` pairs, one per instant at which the row
is in the window, and the SELECT is rewritten to group by ``_time`` as well as its own
keys (``window_rewrite.per_instant``). Windowed tables joined in one SELECT share their instants
(``joint``). A window may also be over a view or a CTE, whose event time is the one of
the stream it reads (over a signal's windows: the start of each, its ``start_time(...)``
column); ``[PARTITION INTO n BY e]`` splits a stream into sub-streams
instead (``ir.SplitScan``). A signal's windows are left to the signal stages.

Example::

    SELECT sym, count(*) AS n FROM trades [RANGE 1 MINUTE] GROUP BY sym
    -- becomes
    SELECT trades._time AS _time, sym, COUNT(*) AS n FROM __wavesql_window_0 AS trades
    GROUP BY trades._time, sym
    -- with the input __wavesql_window_0 = WindowScan(trades, RANGE 1 MINUTE)
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import parse_one, to_spark_sql
from wavesql.errors import Span, WaveSQLError

from .. import ir
from ..ctes import cte_names, inline_query
from ..types import number
from ..window_rewrite import bind_window, per_instant, per_substream, windowed_tables
from ..windows import PART, TIME
from .context import BindContext, Found
from .resolve import resolve_relation
from .tree import depth


def extract_windows(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Rewrite every SELECT over a windowed event stream to run once per instant."""
    for table in node.find_all(exp.Table):  # [SAMPLES n] on an event stream: say why not
        window = table.args.get("window")
        if window is not None and window.kind == "SAMPLES" and isinstance(
                ctx.catalog.get(table.name), cat.StreamDef):
            bind_window(window, table.name)
    selects = [s for s in node.find_all(exp.Select) if windowed_tables(s)]
    if not selects:
        return node
    node = node.copy()
    ctes = cte_names(node)
    inputs = []
    for select in sorted(node.find_all(exp.Select), key=lambda s: -depth(s)):
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
                # the CTE's text as deeper SELECTs left it may read the inputs they made
                # (a windowed CTE reads __wavesql_window_0): readable while it binds
                reading = ctx.reading({**dict(found.made), **dict(inputs)})
                scans.append((table, _bind_window_over_relation(table, window, select,
                                                                reading)))
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
    found.made.extend(inputs)
    return node


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


def _bind_window_scan(table: exp.Table, window, defn, ctx: BindContext) -> ir.WindowScan:
    """A window over a catalog stream, which must have an EVENT TIME."""
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
    source = resolve_relation(defn.name, table.this, ctx)
    schema = ir.Schema((ir.Field(TIME, "timestamp", False),) + source.schema.fields)
    return ir.WindowScan(source, defn.name, defn.event_time, spec, schema, source.bounded)


def _bind_window_over_relation(table: exp.Table, window, select: exp.Select,
                               ctx: BindContext) -> ir.WindowScan:
    """A window over a view (catalog or temporary) or a CTE: its event time is the one of
    the stream it reads, when its result keeps that column under the same name."""
    query = inline_query(table, select)
    starts = _window_starts(query)  # (before binding rewrites the signal calls)
    source = ctx.bind_query(query) if query is not None else \
        resolve_relation(table.name, table.this, ctx)
    starts += _view_window_starts(source)
    event_time = ir.carried_event_time(source) or _window_start(starts, source)
    if event_time is None:
        views = [parse_one(r.view.sql) for r in ir.walk(source) if isinstance(r, ir.ViewRef)
                 and r.view.name.lower() == table.name.lower()]
        event_time = _window_instant(_own_select(query) if query is not None else
                                     _own_select(views[0]) if views else None, source,
                                     query)
        if event_time is not None and source.schema.find(TIME) is not None:
            # the windowed query's own instant, which its rewrite keeps as _time beside the
            # user's name for it (t): this window's instant takes the name
            source = _without_instant(source)
    if event_time is None:
        streams = sorted({r.stream.event_time for r in ir.walk(source)
                          if isinstance(r, ir.StreamScan) and r.stream.event_time})
        raise WaveSQLError(
            "STREAMING_RULE", f"a window needs an event time: `{table.name}` does not keep "
            "the EVENT TIME column of the stream it reads", Span.of(window),
            hint=("name its window's instant, e.g. SELECT _time AS t, ... (this window's "
                  "instant takes the name _time)" if _reads_window(source)
                  else f"keep {' or '.join(repr(t) for t in streams)} in its result under "
                  "that name" if streams else "name the start of the signal's windows in it, e.g. "
                  "start_time(ch1) AS t" if _reads_signal(source)
                  else "read an event-time stream: CREATE STREAM ... EVENT TIME ts"))
    if source.schema.find(TIME) is not None:
        raise WaveSQLError("DUPLICATE_COLUMN", f"`{table.name}` has a column named {TIME}, "
                           "which windowed results use for the instant", Span.of(table),
                           hint="rename the column")
    spec = bind_window(window, table.name)
    schema = ir.Schema((ir.Field(TIME, "timestamp", False),) + source.schema.fields)
    return ir.WindowScan(source, table.name, event_time, spec, schema, source.bounded)


def _window_starts(query: exp.Expression | None) -> list[str]:
    """The names of the ``start_time(...)`` columns of the SELECTs in ``query`` (a CTE
    comes as ``WITH f AS (...) SELECT * FROM f``)."""
    selects = list(query.find_all(exp.Select)) if query is not None else []
    return [p.alias_or_name for s in selects for p in s.selects
            if isinstance(p.unalias(), exp.Anonymous)
            and str(p.unalias().this).lower() == "start_time"]


def _view_window_starts(source: ir.Relation) -> list[str]:
    """The ``start_time(...)`` columns of the views ``source`` reads (itself, a view of a
    signal query, or views below it): a view is bound from its own text, in which they are
    written, as a CTE's are in the statement's."""
    return [name for rel in ir.walk(source) if isinstance(rel, ir.ViewRef)
            for name in _window_starts(parse_one(rel.view.sql))]


def _window_start(starts: list[str], source: ir.Relation) -> str | None:
    """The event time of a query over a signal's windows: its first ``start_time(...)``
    column (each row is a window of the signal, at its start; the continuous runner reads
    the same column, streaming/derived.py). None when it reads no signal or has none."""
    if not _reads_signal(source):
        return None
    for name in starts:
        field = source.schema.find(name)
        if field is not None and field.type.startswith("timestamp"):
            return field.name
    return None


def _own_select(query: exp.Expression) -> exp.Select | None:
    """The SELECT whose columns are a relation's: a CTE's own body (:func:`inline_query`
    gives it as ``WITH ..., m AS (...) SELECT * FROM m``), else the query's own."""
    from_ = query.args.get("from_")
    with_ = query.args.get("with_")
    if with_ is not None and isinstance(query, exp.Select) and query.is_star \
            and from_ is not None and isinstance(from_.this, exp.Table):
        name = from_.this.name.lower()
        query = next((c.this for c in reversed(with_.expressions)
                      if c.alias_or_name.lower() == name), query)
    return query if isinstance(query, exp.Select) else None


def _window_instant(select: exp.Select | None, source: ir.Relation,
                    query: exp.Expression | None = None) -> str | None:
    """The event time of a query over CQL windows of a stream (a windowed aggregate,
    ``SELECT _time AS t, k, avg(v) AS a FROM s [RANGE ...] GROUP BY _time, k``): its column
    that is the window's instant ``_time`` passed through, under any name -- each of its
    rows is at that instant (the continuous stream part takes the same column,
    streaming/stream_parts.py). ``select``: the relation's own SELECT (:func:`_own_select`
    of the CTE's or subquery's query, or of the view's), whose columns are its result: an
    inner SELECT's ``_time AS t`` the relation recomputes is not its instant -- but one a
    filter passes through is (``SELECT t, k, a FROM m WHERE a > 0.5``, ``m`` a CTE or a
    subquery of ``query`` naming ``_time AS t``). None when it reads no CQL window or keeps
    no instant."""
    if select is None or not _reads_window(source):
        return None
    ctes = {c.alias_or_name.lower(): c.this for c in query.find_all(exp.CTE)} \
        if query is not None else {}
    for p in select.selects:
        if p.alias_or_name.lower() != TIME and _is_instant(select, p.alias_or_name, ctes):
            field = source.schema.find(p.alias_or_name)
            if field is not None and field.type.startswith("timestamp"):
                return field.name
    return None


def _is_instant(select: exp.Select, name: str, ctes: dict, depth: int = 0) -> bool:
    """Whether column ``name`` of ``select``'s result is a window's instant: ``_time``
    under that name, or such a column of its one FROM relation (a CTE of ``ctes``, a
    subquery) passed through unchanged, under its name (as continuously, where the part's
    rows carry it by name)."""
    value = next((p.unalias() for p in select.selects
                  if p.alias_or_name.lower() == name.lower()), None)
    if not isinstance(value, exp.Column) or depth > len(ctes) + 8:
        return False
    if value.name.lower() == TIME:
        return True
    if value.name.lower() != name.lower():
        return False  # (renamed on the way: as a stream's EVENT TIME, kept by name)
    source = select.args.get("from_")
    if source is None or select.args.get("joins") or any(
            isinstance(n, (exp.AggFunc, exp.Window, exp.Group)) for n in select.walk()
            if n.find_ancestor(exp.Select) is select):
        return False  # (computed across rows: not each row's instant)
    inner = source.this.this if isinstance(source.this, exp.Subquery) else \
        ctes.get(source.this.name.lower()) if isinstance(source.this, exp.Table) else None
    return isinstance(inner, exp.Select) and _is_instant(inner, value.name, ctes, depth + 1)


def _without_instant(source: ir.Relation) -> ir.SqlQuery:
    """``source`` without its ``_time`` column (kept under another name)."""
    fields = tuple(f for f in source.schema.fields if f.name.lower() != TIME)
    name = "__wavesql_instant_of"
    sql = "SELECT " + ", ".join(exp.column(f.name, quoted=True).sql(dialect="spark")
                                for f in fields) + f" FROM {name}"
    return ir.SqlQuery(sql, ((name, source),), ir.Schema(fields), source.bounded,
                       tree=parse_one(sql))


def _reads_window(source: ir.Relation) -> bool:
    return any(isinstance(r, ir.WindowScan) for r in ir.walk(source))


def _reads_signal(source: ir.Relation) -> bool:
    return any(isinstance(r, (ir.SignalScan, ir.SignalStage)) for r in ir.walk(source))


def _bind_split(select: exp.Select, table: exp.Table, window, ctx: BindContext, index: int):
    """``FROM s [PARTITION INTO n BY e REPLICATE WHEN p]``: the SELECT runs per sub-stream."""
    source = resolve_relation(table.name, table.this, ctx)
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
    """``node`` with its columns' table qualifiers dropped (``s.k`` -> ``k``)."""
    return node.copy().transform(
        lambda n: exp.column(n.name) if isinstance(n, exp.Column) and n.table else n)
