"""A continuous query's plan, and the streaming rules every shape of query checks.

:class:`Plan` says how the re-evaluating runner (:mod:`.runner`) evaluates a query -- its
mode, its inputs, the result column compared with progress -- and each :class:`Input` what
of its stream's past rows later results can still need (its look-back). They are made by
:func:`.planning.plan_continuous` and the planners of each shape (:mod:`.lookback`,
:mod:`.joins`, :mod:`.resample`, :mod:`.sync`, :mod:`.signals`), which share the checks
here: what runs continuously without a window must be row by row, and progress is kept in
a stream's EVENT TIME.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir


@dataclass(frozen=True)
class KeepTime:
    """Keep the rows whose event time is at least progress - ``us``."""

    us: int

    def __str__(self) -> str:
        return f"{self.us} us of event time before progress"


@dataclass(frozen=True)
class KeepRows:
    """Keep the last ``n`` rows before ``progress - within_us`` per value of the Spark SQL
    expressions ``keys``, counting only rows for which the SQL predicate ``passes`` holds
    (None: all), and every row from ``progress - within_us`` on."""

    keys: tuple[str, ...]
    n: int
    passes: str | None = None
    within_us: int = 0

    def __str__(self) -> str:
        keys = f" per {', '.join(self.keys)}" if self.keys else ""
        where = f" where {self.passes}" if self.passes else ""
        within = f" before the last {self.within_us} us" if self.within_us else ""
        return f"the last {self.n} rows{keys}{where}{within}"


@dataclass(frozen=True)
class KeepMatchable:
    """An interval join's side: keep the rows whose event time is at least the ``other``
    stream's progress + ``offset_us`` (what that side's future rows can still match)."""

    other: str
    offset_us: int

    def __str__(self) -> str:
        return f"the rows {self.other}'s future rows can match ({self.offset_us:+d} us)"


@dataclass
class Input:
    index: int
    stream: cat.StreamDef
    #: What later results can still need of this input's past rows: KeepTime, KeepRows or
    #: KeepMatchable rules, a row kept if any rule keeps it. Empty: keep nothing.
    lookback: tuple = ()

    @property
    def column(self) -> str:
        return f"__in{self.index}"


@dataclass(frozen=True)
class Plan:
    """How a continuous query is evaluated: ``mode`` is ``windowed`` (CQL windows: a row is
    final when its ``_time`` is below progress), ``over`` (OVER windows with bounded
    PRECEDING frames: final when its event time is below progress), ``rows`` (row by row:
    final as it comes) or ``sync`` (row by row over a SYNC JOIN's control stream: a row is
    final once the signal's files cover its range, and waits in the buffer until then)."""

    inputs: tuple
    mode: str
    time_column: str | None  # the result column compared with progress
    signal: object = None  # mode ``signal``: a streaming.signals.SignalPlan
    sync: object = None  # mode ``sync``: the ir.SyncJoin (see streaming.sync.sync_split)
    #: mode ``sync``: every SYNC JOIN of the SELECT, first (``sync``, over the control) to
    #: last -- several signals synced together
    syncs: tuple = ()
    asof: dict | None = None  # mode ``asof``: left/right stream keys, the right key columns
    band: dict | None = None  # mode ``band``: streams a and b (a.t - b.t in [lo, hi]), the
    #: key pairs (a column, b column) the ON clause equates
    resample: dict | None = None  # a RESAMPLE (mode ``resample``, or under windows): its
    #: ``series`` (input, method, interpolated columns) and ``keys``


def parsed(rel: ir.SqlQuery):
    """A copy of ``rel``'s AST (None: it has none and its text does not parse)."""
    try:
        return rel.ast()
    except WaveSQLError:
        return None


def check_row_by_row(tree, stmt) -> None:
    """Outside OVER windows, a continuous query without CQL windows must be row by row."""
    for node in tree.walk():
        if isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Window) is not None:
            continue
        if isinstance(node, exp.Join):
            # by design, not a gap: an unbounded join of two streams keeps every row of
            # both for ever (any later row may match any earlier one); the joins that bound
            # their state in event time run (interval, ASOF, windowed sides)
            raise WaveSQLError(
                "STREAMING_RULE", f"`{node.sql()[:40]}` over an unbounded stream needs a window",
                Span.of(stmt.node),
                hint="bound the join in event time so its state can be dropped: an interval "
                     "join (ON a.k = b.k AND b.ts BETWEEN a.ts - INTERVAL 5 SECONDS AND "
                     "a.ts), the latest row before (ASOF JOIN ... ON a.k = b.k AND a.ts >= "
                     "b.ts), or join windows of both streams")
        if isinstance(node, (exp.AggFunc, exp.Group, exp.Distinct, exp.Limit)):
            raise WaveSQLError(
                "STREAMING_RULE", f"`{node.sql()[:40]}` over an unbounded stream needs a window",
                Span.of(stmt.node),
                hint="aggregate over a window, e.g. FROM trades [RANGE 1 MINUTE SLIDE 10 "
                     "SECONDS], or an OVER (... RANGE BETWEEN ... PRECEDING AND CURRENT ROW)")


def check_row_by_row_except(trees: list, index: int, stmt) -> None:
    """Every query but the ``index``-th (the operator the mode evaluates) is row by row."""
    for i, tree in enumerate(trees):
        if i != index and tree is not None:
            check_row_by_row(tree, stmt)


def require_event_time(stream: cat.StreamDef, column: str, why: str, stmt) -> None:
    """``column`` must be ``stream``'s EVENT TIME: progress is kept in event time."""
    if stream.event_time is None or stream.event_time.lower() != column.lower():
        raise WaveSQLError("STREAMING_RULE", f"{why}; `{column}` is not `{stream.name}`'s "
                           "EVENT TIME", Span.of(stmt.node),
                           hint=f"declare it: CREATE OR REPLACE STREAM ... EVENT TIME {column} "
                                "WATERMARK ...")


def passes_through(tree: exp.Expression, column: str) -> bool:
    """Every SELECT of ``tree`` that outputs ``column`` outputs it as the bare column."""
    for select in tree.find_all(exp.Select):
        for item in select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                continue
            if item.alias_or_name.lower() != column.lower():
                continue
            inner = item.this if isinstance(item, exp.Alias) else item
            if not (isinstance(inner, exp.Column) and inner.name.lower() == column.lower()):
                return False
    return True


def require_time_carried(view: ir.Relation, stream: cat.StreamDef, time_col: str,
                         what: str, use: str, stmt, code: str = "STREAMING_RULE") -> None:
    """Over a view (CTE, subquery) row by row over ``stream``, the time column ``time_col``
    the construct (``what``) reads must be the stream's EVENT TIME passed through
    unchanged: a view row is then late, and final, exactly when the stream row it was made
    from is (the runner judges lateness by the stream's own EVENT TIME, before the view
    is applied). ``use`` shows how to name it, ``{t}`` standing for the EVENT TIME."""
    t = stream.event_time
    if t is not None and t.lower() != time_col.lower():
        raise WaveSQLError(
            code, f"{what} over a view reads the stream's EVENT TIME; `{time_col}` is not "
            f"`{stream.name}`'s EVENT TIME `{t}`", Span.of(stmt.node),
            hint=f"select {t} unchanged (not renamed) in the view and name it: "
                 + use.format(t=t))
    for rel in ir.walk(view):
        tree = parsed(rel) if isinstance(rel, ir.SqlQuery) else None
        if tree is not None and not passes_through(tree, time_col):
            raise WaveSQLError(
                code, f"{what} over a view reads the stream's EVENT TIME; the view computes "
                f"`{time_col}` instead of passing `{stream.name}.{t}` through",
                Span.of(stmt.node),
                hint=f"select {t} unchanged in the view and name it: {use.format(t=t)}; "
                     "shift or round times in a query over the result")


def stream_stages(statement) -> list[ir.SignalStage]:
    """The signal stages of a continuous query (its bound ``statement``, or a relation)
    over a stream's segment column -- the rows of a part (a signal or SYNC CTE's rows,
    streaming/derived.py) --, not over a signal's windows nor a SYNC's own rows."""
    roots = (statement.relations() if isinstance(statement, ir.Statement)
             else (statement,))
    return [r for rel in roots for r in ir.walk(rel) if isinstance(r, ir.SignalStage)
            and over_stream_rows(r)]


def over_stream_rows(stage: ir.SignalStage) -> bool:
    """Whether ``stage`` reads a stream's rows with segment columns (the rows of a
    continuous query's part, streaming/derived.py), not a signal's windows nor a SYNC's
    own rows."""
    return not any(isinstance(x, (ir.SignalScan, ir.SyncJoin)) for x in ir.walk(stage.input))


def carries_state(statement) -> bool:
    """Whether a continuous query runs a stateful signal function along a stream's
    segment column (:func:`stream_stages`): the rows runner then carries its state --
    per key, or the one ordered pass's -- from micro-batch to micro-batch
    (planner/segment_stage.py ``KEYED_STATE``)."""
    return any(s.program.stateful for s in stream_stages(statement))


def carried_states(state: dict) -> tuple[dict, dict]:
    """``(holder, saved)`` for a rows query that :func:`carries_state`: the holder of the
    stage's states (planner/segment_stage.py ``KEYED_STATE``: those the last committed
    batch ``state`` kept in, this batch's into ``saved``, committed with it)."""
    saved: dict = {}
    kept = state.get("signal") if isinstance(state.get("signal"), dict) else {}
    return {"in": dict(kept.get("keyed") or {}), "state": saved}, saved


def row_by_row_stream(rel: ir.Relation, stmt, what: str, hint: str) -> cat.StreamDef:
    """The one catalog stream ``rel`` reads: the stream itself, or one stream under a view,
    CTE or subquery that is row by row over it -- filters, projections, computed columns,
    each output row made from one stream row alone. Such a relation can be evaluated over
    any subset of the stream's rows (a buffer, a micro-batch) and give the rows it would
    give over the whole stream. Anything that keeps state across rows is refused (``what``
    says whose input ``rel`` is), with what it is: its result would depend on rows no
    longer held."""
    if isinstance(rel, ir.StreamScan):
        return rel.stream

    def refuse(why: str) -> WaveSQLError:
        return WaveSQLError("NOT_IMPLEMENTED", f"{what} {why}", Span.of(stmt.node), hint=hint)

    below = list(ir.walk(rel))
    kinds = {ir.WindowScan: "a CQL window", ir.StreamOf: "ISTREAM/DSTREAM/RSTREAM",
             ir.SyncJoin: "a SYNC JOIN", ir.SignalScan: "a signal's segments",
             ir.SignalStage: "signal functions", ir.Rewindow: "re-cut signal windows",
             ir.SplitScan: "PARTITION INTO", ir.SparkTable: "a Spark table"}
    for r in below:
        if not isinstance(r, (ir.SqlQuery, ir.ViewRef, ir.StreamScan)):
            kind = kinds.get(type(r), type(r).__name__)
            raise refuse(f"reads {kind}: only one catalog stream's rows, row by row, are "
                         "kept for it")
    streams = {r.stream.key: r.stream for r in below if isinstance(r, ir.StreamScan)}
    if len(streams) != 1:
        raise refuse("reads several streams" if streams else "reads no catalog stream")
    for r in below:
        if isinstance(r, ir.SqlQuery):
            if r.resample is not None or r.asof is not None:
                raise refuse("is not row by row: a RESAMPLE or ASOF JOIN keeps state across "
                             "rows")
            tree = parsed(r)
            if tree is None:
                raise refuse("is SQL whose steps cannot be checked to be row by row")
            why = _across_rows(tree)
            if why is not None:
                raise refuse(f"is not row by row: {why}")
            volatile = _volatile(tree)
            if volatile is not None:
                raise refuse(f"calls `{volatile}`, which gives another value each time: the "
                             "rows are evaluated more than once, and each time must agree")
    return next(iter(streams.values()))


def _volatile(tree) -> str | None:
    """The first call in ``tree`` whose value changes from one evaluation to the next."""
    kinds = (exp.Rand, exp.Randn, exp.Uuid, exp.Shuffle, exp.CurrentTimestamp,
             exp.CurrentDate)
    names = {"now", "random", "monotonically_increasing_id", "spark_partition_id",
             "localtimestamp", "current_timestamp", "current_date", "input_file_name"}
    for node in tree.walk():
        if isinstance(node, kinds) or (isinstance(node, exp.Anonymous)
                                       and node.name.lower() in names):
            return node.sql(dialect="spark")[:40]
    return None


def _across_rows(tree) -> str | None:
    """What in ``tree`` makes a row's result depend on other rows (None: nothing)."""
    checks = ((exp.AggFunc, "an aggregate"), (exp.Window, "an OVER window"),
              (exp.Group, "GROUP BY"), (exp.Join, "a join"), (exp.Distinct, "DISTINCT"),
              (exp.Limit, "LIMIT"), (exp.SetOperation, "a set operation"))
    for node in tree.walk():
        for kind, what in checks:
            if isinstance(node, kind):
                return f"{what} (`{node.sql(dialect='spark')[:40]}`) keeps state across rows"
    return None


def carrying(rel: ir.Relation, columns: tuple, keep_if: str | None = None) -> ir.Relation:
    """``rel`` (accepted by :func:`row_by_row_stream`) with the stream's ``columns`` (``(name,
    Spark type)`` pairs) added to the output of every SELECT that rows flow through (the
    FROM and WITH chain, not subqueries inside expressions) that does not output them
    already: being row by row, each SELECT has one source, which carries them. With
    ``keep_if`` (a SQL predicate over them) a row for which it holds passes every WHERE
    of that chain -- rows the view is not about (punctuation, malformed rows) still reach
    the runner, which handles them before the view's columns matter."""
    from dataclasses import replace

    from wavesql.dialect import to_spark_sql

    if isinstance(rel, ir.ViewRef):
        return replace(rel, body=carrying(rel.body, columns, keep_if))
    if not isinstance(rel, ir.SqlQuery):
        return rel  # the stream: its rows carry them already
    tree = rel.ast()
    for select in list(tree.find_all(exp.Select)):
        starred = any(isinstance(e, exp.Star) or (isinstance(e, exp.Column)
                                                   and isinstance(e.this, exp.Star))
                      for e in select.expressions)
        if select.args.get("from_") is None or not _row_path(select):
            continue
        if not starred:
            names = {e.alias_or_name.lower() for e in select.expressions}
            for name, _ in columns:
                if name.lower() not in names:
                    select.select(exp.column(name), append=True, copy=False)
        where = select.args.get("where")
        if keep_if is not None and where is not None:
            select.set("where", exp.Where(this=exp.or_(
                exp.maybe_parse(keep_if, dialect="spark"), exp.paren(where.this))))
    present = {f.name.lower() for f in rel.schema.fields}
    added = tuple(ir.Field(n, t) for n, t in columns if n.lower() not in present)
    return replace(rel, sql=to_spark_sql(tree), tree=tree, source_offset=None,
                   inputs=tuple((n, carrying(r, columns, keep_if)) for n, r in rel.inputs),
                   schema=ir.Schema(rel.schema.fields + added))


def _row_path(select) -> bool:
    """Whether the rows of ``select`` flow to its query's result: it is the query, or the
    source (FROM, or a CTE) of a SELECT that is."""
    path = {(exp.Subquery, "this"), (exp.From, "this"), (exp.Select, "from_"),
            (exp.CTE, "this"), (exp.With, "expressions"), (exp.Select, "with_")}
    node = select
    while node.parent is not None:
        if (type(node.parent), node.arg_key) not in path:
            return False
        node = node.parent
    return True
