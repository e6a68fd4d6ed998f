"""Starting a continuous query: parse and bind it, plan it, and pick the runner that fits.

:func:`start` (``Session.stream``, ``INSERT INTO`` jobs) refuses what cannot run
continuously before anything runs, resolves where the results and late rows go
(:mod:`.outputs`), plans the query (:func:`.planning.plan_continuous`) and starts it on one
runner: Spark's real-time mode (:mod:`.realtime`) when the trigger asks for it; a query
over a SIGNAL on :class:`.signals.SignalContinuousQuery`, or
:class:`.kafka_signals.KafkaSignalQuery` for sample blocks from Kafka; a windowed aggregate
on Spark's state store (:class:`.stateful.query.StatefulWindowQuery`; OVER windows and a
RESAMPLE likewise) where :func:`.planning.stateful_plan` accepts it; and every other shape
on the re-evaluating runner (:class:`.runner.ReEvaluatingQuery`). Each is a
:class:`~.query.ContinuousQuery` (the real-time one has its API).
"""

from __future__ import annotations

import os
import time
from typing import Callable

from wavesql import storage
from wavesql.dialect import nodes as wn
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir

from . import derived, derived_hoist, realtime, sinks
from .kafka_signals import KafkaSignalQuery
from .outputs import absolute, kafka_sink, late_path
from .planning import plan_continuous, runs_whole, stateful_plan
from .query import ContinuousQuery
from .query_signals import QuerySignalQuery
from .runner import ReEvaluatingQuery
from .signals import SignalContinuousQuery


def _without_late_into(stmt: Statement, late_into) -> Statement:
    """``stmt`` without its ``LATE INTO`` (where late rows go is the runner's business, not
    the query's), the clause's text blanked so that Spark's error positions still map back."""
    node = stmt.node.copy()
    for clause in node.find_all(wn.LateInto):
        clause.pop()
    span = Span.of(late_into)
    text = stmt.text
    if span is not None:
        a, b = span.start - stmt.start, span.end - stmt.start
        text = text[:a] + " " * (b - a) + text[b:]
    return Statement(node, text, stmt.start, stmt.end)


def start(session, text: str, output, checkpoint: str | os.PathLike, *,
          trigger: str = "availableNow", late: str | os.PathLike | None = None,
          max_files_per_trigger: int | None = None,
          clock: Callable[[], float] = time.time,
          output_format: str = "parquet", keep_replaced: bool = False,
          late_format: str = "parquet", wrap_runner=None) -> ContinuousQuery:
    """Start ``text`` (one query) as a continuous query. See :meth:`Session.stream`.
    ``late_format``: the format of a ``late`` folder (an ``INSERT INTO`` job's LATE INTO a
    file sink).
    ``keep_replaced``: an ``INSERT INTO`` job's output in an object store, whose replaced
    attempts the sink's index may still list (streaming/sinks.py ``publish``).
    ``wrap_runner``: the runner class picked -> the class started (a stream part's, whose
    rows go to its rows folder: streaming/stream_parts.py)."""
    stmts = parse_statements(text)
    if len(stmts) != 1:
        raise WaveSQLError("UNSUPPORTED_STATEMENT", f"a continuous query is one statement, got "
                           f"{len(stmts)}")
    stmt = stmts[0]
    for zipped in stmt.node.find_all(wn.Combine):
        if zipped.kind == "ZIP":  # planner/combine.py: row numbers from the first row on
            raise WaveSQLError("STREAMING_RULE", "ZIP does not run continuously: it numbers "
                               "each input's rows from the first, and a continuous query "
                               "would have to keep every row of a faster input until the "
                               "slower ones catch up", Span.of(zipped),
                               hint="ZIP the output of a query over a recorded stretch (a "
                                    "batch query), or join on a key instead")
    split = derived.find_split(stmt, text, session.catalog)
    if split is not None and all(p.sync or p.stream or p.segments for p in split.parts) and \
            runs_whole(split, stmt, _bound_whole(session, stmt, text)):
        split = None  # SYNC CTEs under a rest row by row (...): one continuous query
    if split is not None and split.views:  # (a view's query: its errors at the view's name)
        derived_hoist.check_views(split, session.catalog, session.env,
                                  lambda *a: derived._plan_signal_part(*a, plan_continuous))
    if split is not None:  # a CTE over a signal, the rest over its rows: streaming/derived.py
        def rest(overlay, outer_text):
            return start(overlay, outer_text, output, checkpoint, trigger=trigger, late=late,
                         max_files_per_trigger=max_files_per_trigger, clock=clock,
                         output_format=output_format, keep_replaced=keep_replaced,
                         late_format=late_format)
        return derived.start_pipeline(session, split, rest, checkpoint=absolute(checkpoint),
                                      trigger=trigger, max_files=max_files_per_trigger,
                                      clock=clock, plan_continuous=plan_continuous,
                                      start_query=start)
    emit = next(iter(stmt.node.find_all(wn.Emit)), None)
    late_into = next(iter(stmt.node.find_all(wn.LateInto)), None)
    if late_into is not None:
        stmt = _without_late_into(stmt, late_into)
    from wavesql import planner

    from wavesql.planner.bind import without_emit  # (EMIT is read from stmt: below)

    bound = planner.optimize(planner.bind(without_emit(stmt), session.catalog,
                                          session.env.for_text(text)))
    if not isinstance(bound, ir.QueryStatement):
        raise WaveSQLError("UNSUPPORTED_STATEMENT", "only a query can run continuously",
                           hint="DDL runs once: use Session.sql for it")
    if late is None and late_into is not None:
        late, late_format = late_path(late_into.this, session.catalog)
    if isinstance(late, sinks.KafkaOutput):  # a Kafka sink's records (an INSERT INTO job)
        late_format = "kafka"
    plan = plan_continuous(bound.relation, stmt)
    sink = kafka_sink(output, session.catalog)
    interval = realtime.parse_trigger(trigger)
    if interval is not None:  # Spark's real-time mode: streaming/realtime.py
        return realtime.start(session, bound, plan, stmt, sink, absolute(checkpoint),
                              interval)
    if sink is not None:
        output = sinks.KafkaOutput(sink)
    cls, extra = ReEvaluatingQuery, {}
    if plan.mode == "signal":  # a query over a SIGNAL: streaming/signals.py
        cls = SignalContinuousQuery
        if plan.signal.scan.signal.source == "kafka":  # sample blocks: kafka_signals.py
            cls = KafkaSignalQuery
        elif plan.signal.scan.signal.source == "query":  # a stream's rows: query_signals.py
            cls = QuerySignalQuery
        bound = plan.signal.bound
    elif plan.mode in ("windowed", "over", "resample", "asof", "band"):  # state store if it can
        windowed, _ = stateful_plan(session.spark, stmt, bound.relation,
                                    absolute(checkpoint), plan)
        if windowed is not None:
            from .stateful import query as stateful
            from .stateful.asof_query import StatefulAsofQuery
            from .stateful.interval_query import StatefulIntervalQuery
            from .stateful.resample_query import StatefulResampleQuery

            cls = {"windowed": stateful.StatefulWindowQuery,
                   "over": stateful.StatefulOverQuery,
                   "resample": StatefulResampleQuery, "asof": StatefulAsofQuery,
                   "band": StatefulIntervalQuery}[plan.mode]
            from .stateful.window_join_query import StatefulWindowJoinQuery, WindowJoinPlan

            if isinstance(windowed, WindowJoinPlan):  # a join of windowed streams
                cls = StatefulWindowJoinQuery
            extra = {"windowed": windowed}
    # Relative paths resolve against this process's current directory, as CREATE's do:
    # Spark would resolve them against the JVM's, which os.chdir does not move.
    output = output if callable(output) else absolute(output)
    checkpoint = absolute(checkpoint)
    if wrap_runner is not None:
        cls = wrap_runner(cls)
    return cls(session, text, bound, plan, **extra,
               emit_changes=emit is not None and emit.kind == "CHANGES",
               output=output, checkpoint=checkpoint,
               late=(late if late_format == "kafka" else absolute(late)) if late is not None
               else storage.join(checkpoint, "late"),
               trigger=trigger, max_files=max_files_per_trigger, clock=clock,
               output_format=output_format, late_format=late_format,
               keep_replaced=keep_replaced)


def _bound_whole(session, stmt, text: str):
    """The statement bound whole as a continuous query is (no EMIT, no LATE INTO), or None
    when it does not bind whole (a query over a signal CTE's rows binds in parts)."""
    from wavesql import planner
    from wavesql.planner.bind import without_emit

    late_into = next(iter(stmt.node.find_all(wn.LateInto)), None)
    if late_into is not None:
        stmt = _without_late_into(stmt, late_into)
    try:
        bound = planner.optimize(planner.bind(without_emit(stmt), session.catalog,
                                              session.env.for_text(text)))
    except WaveSQLError:
        return None
    return bound if isinstance(bound, ir.QueryStatement) else None
