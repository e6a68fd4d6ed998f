"""Planning a continuous query: which shape it is, what each input keeps, EXPLAIN STREAM.

:func:`plan_continuous` reads the bound query and returns its :class:`.plan.Plan`: a
signal query (:mod:`.signals`), a SYNC JOIN (:mod:`.sync`), CQL windows, an ASOF or
interval join (:mod:`.joins`), a RESAMPLE (:mod:`.resample`), OVER windows, or row by row
-- each input with its look-back (:mod:`.lookback`). The streaming rules (README: Time:
windows, ...) are enforced here, with errors, before anything runs. :func:`stateful_plan`
says whether a windowed query runs on Spark's state store (:mod:`.stateful`) instead, and
:func:`explain_stream` puts both into words for ``EXPLAIN STREAM``.
"""

from __future__ import annotations

import os

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner.windows import TIME
from wavesql.sqltext import quote
from wavesql.udfs import registry

from . import realtime
from .joins import plan_asof, plan_band
from .lookback import nested_lookback, window_lookback
from .plan import (Input, KeepTime, Plan, carries_state, check_row_by_row, parsed,
                   over_stream_rows, passes_through, stream_stages)
from .resample import plan_resample, resample_lookback
from .signals import plan_signal
from .sync import plan_sync


def plan_continuous(root: ir.Relation, stmt) -> Plan:
    """The streams a continuous query reads, each with the look-back its windows need;
    enforce the streaming rules (README: Time: windows, ...) with errors before anything runs."""
    plan = _plan_continuous(root, stmt)
    if sum(s.program.stateful for s in stream_stages(root)) > 1:
        # (the rows runner keeps one stage's states: segment_stage.py KEYED_STATE)
        raise WaveSQLError(
            "NOT_IMPLEMENTED", "stateful signal functions over segment columns in two "
            "SELECTs of one continuous query", _stateful_call(stmt),
            hint="nest them in one SELECT, e.g. highpass(lowpass(seg, 100.0), 10.0)")
    if plan.mode != "rows" and carries_state(root):
        # (the other runners re-evaluate kept rows, or keep a SYNC's own per-key state)
        raise WaveSQLError(
            "NOT_IMPLEMENTED", "a stateful signal function over a CTE's, subquery's or "
            f"view's segment column in a continuous {plan.mode} query", _stateful_call(stmt),
            hint="call it in the SELECT that reads the signal (WITH w AS (SELECT "
                 "start_time(ch1) AS t, lowpass(ch1, 100.0) AS seg FROM mic [SAMPLES n]) "
                 "... FROM w [RANGE ...]), or per key in the SYNC's own SELECT")
    return plan


def _plan_continuous(root: ir.Relation, stmt) -> Plan:
    syncs = [rel for rel in ir.walk(root) if isinstance(rel, ir.SyncJoin)]
    if syncs:
        return plan_sync(root, syncs, stmt)
    windows: dict[str, list] = {}
    scans: dict[str, cat.StreamDef] = {}
    queries: list[ir.SqlQuery] = []
    for rel in ir.walk(root):
        if isinstance(rel, ir.WindowScan):
            source = rel.input.stream if isinstance(rel.input, ir.StreamScan) else \
                _filtered_stream(rel, stmt)
            windows.setdefault(source.key, []).append(rel.window)
        elif isinstance(rel, ir.StreamScan):
            scans[rel.stream.key] = rel.stream
        elif isinstance(rel, ir.SignalScan) or isinstance(rel, ir.SignalStage) \
                and not over_stream_rows(rel):
            return Plan((), "signal", TIME, plan_signal(root, stmt))
        elif isinstance(rel, ir.SignalStage):
            _check_row_by_row_stage(rel, stmt)  # over a stream's segment column
        elif isinstance(rel, ir.Rewindow):
            raise WaveSQLError(
                "NOT_IMPLEMENTED", "re-cutting a stream's segment column into [SAMPLES n] "
                "windows continuously", Span.of(stmt.node),
                hint="window the signal itself (FROM mic [SAMPLES n]) in the query's part "
                     "that reads it")
        elif isinstance(rel, ir.SqlQuery):
            queries.append(rel)
    if not scans:
        raise WaveSQLError("STREAMING_RULE", "a continuous query needs a catalog stream to read",
                           Span.of(stmt.node))
    for stream in scans.values():
        if stream.event_time is None:
            raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` has no EVENT TIME",
                               Span.of(stmt.node), hint="a continuous query needs event time "
                               "to know when results are final: CREATE OR REPLACE STREAM ... "
                               "EVENT TIME ts WATERMARK 5 SECONDS")
    ordered = sorted(scans.items())
    if windows:
        if root.schema.find(TIME) is None:
            raise WaveSQLError(
                "STREAMING_RULE", f"a continuous windowed query must keep `{TIME}` in its "
                "result", Span.of(stmt.node),
                hint=f"it says which instant a row belongs to, hence when it is final; add "
                     f"{TIME} to the outer SELECT")
        inputs, series = [], []
        for index, (key, stream) in enumerate(ordered):
            if not windows.get(key):
                raise WaveSQLError(
                    "STREAMING_RULE", f"stream `{stream.name}` is read without a window in a "
                    "windowed continuous query", Span.of(stmt.node),
                    hint="window every stream of the query, e.g. [RANGE 1 MINUTE]")
            rules = window_lookback(windows[key], stmt)
            kept, resampled = resample_lookback(
                queries, key, max((r.us for r in rules if isinstance(r, KeepTime)), default=0),
                stmt)
            inputs.append(Input(index, stream, rules + kept))
            series += resampled
        return Plan(tuple(inputs), "windowed", TIME,
                     resample={"keys": [], "series": series} if series else None)
    trees = [parsed(q) for q in queries]
    overs = [w for t in trees if t is not None for w in t.find_all(exp.Window)]
    if any(q.asof is not None for q in queries):
        return plan_asof(queries, trees, scans, stmt)
    if any(q.resample is not None for q in queries):
        return plan_resample(root, queries, trees, scans, stmt)
    band = plan_band(queries, trees, scans, stmt)
    if band is not None:
        if overs:
            raise WaveSQLError("NOT_IMPLEMENTED", "OVER windows around a continuous interval "
                               "join", Span.of(stmt.node),
                               hint="join in one continuous query, window its output in another")
        return band
    for tree in trees:
        if tree is not None:
            check_row_by_row(tree, stmt)
    if not overs:
        return Plan(tuple(Input(i, s) for i, (_, s) in enumerate(ordered)), "rows", None)
    if len(ordered) != 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "OVER windows over several streams in one "
                           "continuous query", Span.of(stmt.node),
                           hint="compute the OVER window per stream in its own query")
    stream = ordered[0][1]
    if root.schema.find(stream.event_time) is None:
        raise WaveSQLError(
            "STREAMING_RULE", f"a continuous query with OVER windows must keep the event time "
            f"{quote(stream.event_time)} in its result", Span.of(stmt.node),
            hint=f"add {stream.event_time} to the SELECT: it says when each row is final")
    rules = tuple(dict.fromkeys(r for t in trees if t is not None
                                for r in nested_lookback(t, stream, stmt)))
    return Plan((Input(0, stream, rules),), "over", stream.event_time)


def _check_row_by_row_stage(stage: ir.SignalStage, stmt) -> None:
    """Signal functions over a stream's segment column (``SELECT t, seg_rms(seg) FROM q``,
    ``q`` a SYNC CTE's rows) run row by row, each micro-batch's rows on their own; a
    stateful one along them as in batch (per key, or one ordered pass: start order), its
    state carried from micro-batch to micro-batch (:func:`.plan.carries_state`) -- but not
    a detector whose range may stay open at the last segment: the next one may never
    come, and no row would close it."""
    for call in stage.program.calls():
        fn = registry.lookup(call["call"])
        if fn is not None and fn.stateful and fn.flush is not None:
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"`{fn.name}` over a CTE's, subquery's or view's segment "
                "column in a continuous query: a range still open at the last segment "
                "would wait for the next one, which may never come", _stateful_call(stmt),
                hint=f"call {fn.name} in the SELECT that reads the signal, or run the query "
                     "in batch")


def _stateful_call(stmt) -> Span:
    """Where the statement calls its first stateful signal function (else the statement)."""
    return Span.of(next((c for c in stmt.node.find_all(exp.Anonymous)
                         if getattr(registry.lookup(c.name), "stateful", False)), stmt.node))


def _filtered_stream(window: ir.WindowScan, stmt) -> cat.StreamDef:
    """The catalog stream under a window over a view, a CTE or a subquery, when that
    relation is row by row over it -- filters and projections of one stream, its EVENT TIME
    column passed through as it is: then the window's rows at an instant are the stream's
    rows at that instant, filtered, and the stream's look-back and progress are the
    window's. Else ``NOT_IMPLEMENTED`` saying why."""
    def refuse(why: str) -> WaveSQLError:
        return WaveSQLError(
            "NOT_IMPLEMENTED", f"a continuous window over `{window.stream}`: {why}",
            Span.of(stmt.node), hint="window a view (or CTE, subquery) that filters or "
            "projects one stream and keeps its EVENT TIME column as it is; or window the "
            "stream itself")

    below = list(ir.walk(window.input))
    scans = [r for r in below if isinstance(r, ir.StreamScan)]
    if len({s.stream.key for s in scans}) != 1:
        raise refuse("it reads several streams" if scans else "it reads no catalog stream")
    other = next((r for r in below if not isinstance(r, (ir.SqlQuery, ir.ViewRef,
                                                          ir.StreamScan))), None)
    if other is not None:
        what = {ir.WindowScan: "a CQL window", ir.StreamOf: "ISTREAM/DSTREAM/RSTREAM",
                ir.SparkTable: "a Spark table"}.get(type(other), type(other).__name__)
        raise refuse(f"it reads {what}")
    stream = scans[0].stream
    for query in (r for r in below if isinstance(r, ir.SqlQuery)):
        tree = parsed(query)
        if tree is None:
            raise refuse("its SQL could not be read")
        try:
            check_row_by_row(tree, stmt)
        except WaveSQLError:
            raise refuse("it is not row by row (an aggregate, join, DISTINCT or LIMIT)") \
                from None
        if tree.find(exp.Window) is not None:
            raise refuse("it holds an OVER window")
        if not passes_through(tree, stream.event_time):
            raise refuse(f"it changes or renames the EVENT TIME column `{stream.event_time}`")
    return stream


def stateful_plan(spark, stmt, relation: ir.Relation, checkpoint: str | None = None,
                  plan: Plan | None = None):
    """:func:`_stateful_plan`; a RESAMPLE over a view (CTE, subquery), and an ASOF or
    interval join of one, runs on the state store only -- the re-evaluating runner's
    look-back keeps the stream's rows by the stream's columns, not the view's -- so where
    the state store cannot run it, it is refused, saying why."""
    windowed, why = _stateful_plan(spark, stmt, relation, checkpoint, plan)
    if windowed is None:
        plan = plan if plan is not None else plan_continuous(relation, stmt)
        if plan.mode == "resample" and plan.resample.get("view") is not None:
            raise WaveSQLError("NOT_IMPLEMENTED", "a continuous RESAMPLE over a view, CTE or "
                               f"subquery runs on Spark's state store only, which cannot run "
                               f"this one: {why}", Span.of(stmt.node),
                               hint="RESAMPLE the catalog stream itself, or unset "
                                    "WAVESQL_STATEFUL=0")
        if plan.mode == "band" and plan.band.get("outer"):
            # the re-evaluating runner pairs rows; it never knows a row stays unpaired
            raise WaveSQLError("NOT_IMPLEMENTED", "a continuous outer interval join runs on "
                               f"Spark's state store only, which cannot run this one: {why}",
                               Span.of(stmt.node),
                               hint="join inner, or run the outer join as a batch query")
        join = plan.asof if plan.mode == "asof" else plan.band if plan.mode == "band" else None
        if join is not None and any(v is not None for v in join.get("views", {}).values()):
            # the re-evaluating runner keeps and prunes each side's rows by the stream's
            # columns, not the view's
            what = "an ASOF JOIN" if plan.mode == "asof" else "an interval join"
            # (a stream joined with itself reads its second side as a view of a copy of
            # the stream, streaming/joins.py _apart: say so, not "a view")
            itself = any("@" in str(key) for key in join["views"])
            of = "a stream with itself" if itself else "a view, CTE or subquery"
            raise WaveSQLError("NOT_IMPLEMENTED", f"a continuous {what} of {of} runs on "
                               "Spark's state store only, which cannot run this one: "
                               f"{why}", Span.of(stmt.node),
                               hint="unset WAVESQL_STATEFUL=0" if itself else
                                    "join the catalog streams themselves, or unset "
                                    "WAVESQL_STATEFUL=0")
    return windowed, why


def _stateful_plan(spark, stmt, relation: ir.Relation, checkpoint: str | None = None,
                   plan: Plan | None = None):
    """``(plan, None)`` for a continuous query that runs on Spark's state store -- a
    windowed aggregate's ``WindowedPlan``, OVER windows' ``OverPlan``, a RESAMPLE's
    ``ResamplePlan``, an ASOF or interval join's ``AsofPlan``, a join of windowed
    streams' ``WindowJoinPlan`` -- else ``(None,
    why not)``: the buffer is then re-evaluated each micro-batch. ``plan``: the query's
    :func:`plan_continuous` (made here if not given). ``WAVESQL_STATEFUL=0`` forces the
    re-evaluating runner (comparisons, diagnosis)."""
    from .stateful import over_plan
    from .stateful import plan as stateful

    if os.environ.get("WAVESQL_STATEFUL", "1") == "0":
        return None, "WAVESQL_STATEFUL=0"
    plan = plan if plan is not None else plan_continuous(relation, stmt)
    if any(isinstance(r, ir.SignalStage) for r in ir.walk(relation)):
        # (the state store's processors evaluate Spark expressions, not signal programs)
        return None, "signal functions over a segment column"
    emit = next(iter(stmt.node.find_all(wn.Emit)), None)
    changes = emit is not None and emit.kind == "CHANGES"
    buckets = stateful.buckets_for(spark, checkpoint)
    try:
        if plan.mode == "over":
            trees = [parsed(q) for q in ir.walk(relation) if isinstance(q, ir.SqlQuery)]
            return over_plan.recognize_over(spark, plan, trees, changes, buckets,
                                            tuple(relation.schema.names)), None
        if plan.mode == "windowed" and len(plan.inputs) == 2:  # a join of windowed streams
            from .stateful import window_join_query

            return window_join_query.recognize_window_join(
                spark, stmt, relation, plan, changes, buckets), None
        if plan.mode == "windowed":
            return stateful.recognize(spark, stmt, relation, changes, buckets), None
        if plan.mode == "resample":
            from .stateful import resample_plan

            return resample_plan.recognize_resample(plan, relation, changes, buckets), None
        if plan.mode == "asof":
            from .stateful import asof_plan

            return asof_plan.recognize_asof(plan, changes, buckets, spark), None
        if plan.mode == "band":
            from .stateful import interval_query

            return interval_query.recognize_interval(plan, changes, buckets, spark), None
    except stateful.NotIncremental as why:
        return None, str(why)
    return None, f"a {plan.mode} query"


def explain_stream(spark, text: str, target: ir.QueryStatement | None, catalog=None,
                   unbound: Exception | None = None) -> str:
    """``EXPLAIN STREAM``: how the query would run continuously -- which runner, what state
    it keeps per input -- or the streaming-rule error it would stop with. A query over a
    signal or SYNC CTE (``catalog`` given): every part (:func:`.derived.explain`), even when
    the whole statement does not bind (``target`` None, ``unbound`` the binder's error,
    raised when the query does not split: e.g. windows over a SYNC CTE's event time under
    another name, which the binder cannot follow and the parts do not need); a view
    part's error at the view's name, as when it runs."""
    stmt = parse_statements(text)[0]
    if catalog is not None:
        from . import derived

        split = derived.find_split(stmt, text, catalog)
        if split is not None and not runs_whole(split, stmt, target):
            try:
                return derived.explain(spark, catalog, split, explain_plan, plan_continuous)
            except WaveSQLError:
                if split.views:  # a view's query's error: at the view's name, as launch.py
                    _check_views(spark, catalog, split)
                raise
    if target is None:
        raise unbound
    return explain_plan(spark, stmt, target)


def _check_views(spark, catalog, split) -> None:
    """Raise the error of the first view part of ``split`` whose query does not plan, at
    the view's name in the statement (:func:`.derived_hoist.check_views`): the view's text
    is not the statement's, so the error's own positions would point elsewhere in it."""
    from wavesql.planner.spark_environment import SparkEnvironment

    from . import derived, derived_hoist

    derived_hoist.check_views(split, catalog, SparkEnvironment(spark),
                              lambda *a: derived._plan_signal_part(*a, plan_continuous))


def runs_whole(split, stmt, target: ir.QueryStatement | None) -> bool:
    """Whether a query cut into SYNC CTEs only (``split``) runs whole: as one continuous
    SYNC, when its rest is row by row over the SYNC's rows. It is cut only where it must be
    -- windows, aggregates, OVER windows or joins over a SYNC CTE's rows, which the SYNC
    runner refuses around it (streaming/sync.py) --: whole it is one query, cheaper, its
    checkpoint laid out as before SYNC CTEs could be parts. Stream parts
    (streaming/stream_parts.py), and views or subqueries passing a signal's segments on
    (``Part.segments``), likewise: cut only when the whole is refused. ``target``:
    the statement bound whole (None: it does not bind whole, so it is cut)."""
    if target is None or not all(p.sync or p.stream or p.segments for p in split.parts):
        return False
    try:
        plan_continuous(target.relation, stmt)
    except WaveSQLError:
        return False
    return True


def explain_plan(spark, stmt, target: ir.QueryStatement) -> str:
    """What :func:`explain_stream` says of one query run on one runner."""
    plan = plan_continuous(target.relation, stmt)
    lines = [f"continuous {plan.mode} query"]
    cannot = realtime.why_not(plan, None)
    lines.append("real-time mode: " + ("possible with a Kafka sink as output" if cannot and
                                       cannot.startswith("its output") else
                                       f"not possible ({cannot})"))
    if plan.mode in ("windowed", "over", "resample", "asof", "band"):
        windowed, why = stateful_plan(spark, stmt, target.relation, plan=plan)
        lines.append(windowed.explain if windowed is not None else
                     f"re-evaluated over each input's look-back every micro-batch (not on "
                     f"the state store: {why})")
    for inp in plan.inputs:
        rules = "; ".join(str(r) for r in inp.lookback) or "nothing between batches"
        lines.append(f"input {inp.stream.name}: keeps {rules}")
    for stage in stream_stages(target.relation):
        if stage.program.stateful:  # (runner.py: carried_states)
            along = f"per key ({', '.join(stage.keys)})" if stage.keys else "one ordered pass"
            lines.append(f"signal functions along a segment column: state {along}, kept "
                         "between batches")
    return "\n".join(lines)


