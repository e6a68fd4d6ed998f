"""Continuous queries: the batch plan, evaluated incrementally as progress advances.

How a continuous query runs
---------------------------
Spark Structured Streaming reads the new files of every input stream (one streaming query,
the inputs unioned, with Spark's own checkpointed offsets), and each micro-batch is handed to
:meth:`ContinuousQuery._run_batch`, which

1. splits the new rows of each input into **late** (event time below the progress that input
   had already promised), **no event time**, **punctuation** (rows carrying a value in the
   stream's ``PROGRESS COLUMN``) and **on time**; late and timeless rows are written to the
   late sink with the reason, never dropped;
2. advances each input's **progress** ``p`` -- "no row with event time < p will follow" --
   to the largest of: its previous progress, the largest event time seen minus its
   ``WATERMARK``, its latest punctuation, and (with ``HEARTBEAT h``) the wall clock minus
   ``h``, so an idle input does not hold the others back. The query's progress is the
   minimum over its inputs;
3. evaluates the **same plan as a batch query** (``planner.lower``) over each input's
   buffered rows, and emits the result rows whose instant ``_time`` became final in this
   batch (``previous progress <= _time < progress``), each with ``_final = true`` and
   ``_progress``; with ``EMIT CHANGES`` also the not-yet-final rows (``_final = false``),
   refined in later batches;
4. keeps in the buffer only what later instants can still need (the window's look-back:
   ``RANGE r`` keeps ``r``, ``SLIDE`` keeps ``r + s``, ``ROWS n`` the last ``n`` rows per
   partition) -- so state is bounded by the windows, not by the stream's length.

A query over a SIGNAL runs differently (its WAV files are read by the streaming WAV source
with the program in the scan, every emitted window is final): see :mod:`.signals`. Live
metrics of every continuous query (rates, progress, state, result latency) are in
:mod:`.metrics`.

Why not Spark's stateful operators with ``withWatermark``: Spark drops rows behind its
watermark silently (WaveSQL must send them to a late sink and count them), does not tell a
consumer which output rows are final, cannot emit early results in append mode, and refuses
ROWS windows and OVER windows on streams. Driving progress here keeps one evaluation path
for batch and streaming, so results are identical once final by construction -- and the
property tests of the batch windows cover the streaming ones too.

Exactly once: Spark re-runs a micro-batch after a crash with the same id and the same rows;
every file this runner writes is named by the batch id and overwritten on a re-run, and the
state a batch starts from is the committed state of the batch before it (``state.json`` is
written last, atomically).

Files still being written when Spark lists them (copied into place rather than renamed) are
waited for and then read whole, by the runner itself from the batch's file list in Spark's
log: see :mod:`.files`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from sqlglot import exp

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import parse_one, parse_statements, unqualified
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner import bad_rows
from wavesql.planner.lower import Runtime, lower, stream_reader_options
from wavesql.planner.windows import TIME
from wavesql.streaming import realtime, sinks
from wavesql.sqltext import quote

FINAL = "_final"
PROGRESS = "_progress"
REASON = "_reason"


@dataclass
class BatchReport:
    """What one micro-batch did.
    ``rows_in = on_time + late + no_time + punctuation + quarantined``."""

    batch: int
    progress_us: int | None
    rows_in: int = 0
    on_time: int = 0
    late: int = 0
    no_time: int = 0
    punctuation: int = 0
    quarantined: int = 0  # malformed CSV/JSON rows, written to <checkpoint>/quarantine
    rows_out: int = 0
    final_out: int = 0
    buffered: int = 0  # rows kept as state after the batch
    seconds: float = 0.0
    inputs: dict = field(default_factory=dict)  # stream -> its progress (microseconds)
    # Live metrics (ContinuousQuery.status / metrics, `wavesql status`):
    samples_in: int = 0  # signal queries: new samples the batch covered
    started_at: float | None = None  # wall clock (s since 1970) when the batch began
    finished_at: float | None = None  # ... when its results were delivered
    #: result latency: finished_at minus the earliest time an input of this batch became
    #: available (its file's modification time); None when no file was new
    latency_s: float | None = None
    state_bytes: int = 0  # bytes of state kept after the batch (buffers, signal state)


@dataclass
class _Input:
    index: int
    stream: cat.StreamDef
    #: What later results can still need of this input's past rows, each rule keeping rows:
    #: ("time", us) -- event time >= progress - us; ("rows", keys, n, passes) -- the last n
    #: before progress per value of the Spark SQL expressions ``keys``, counting only rows
    #: for which the SQL predicate ``passes`` holds (None: all). Empty: keep nothing.
    lookback: tuple = ()

    @property
    def column(self) -> str:
        return f"__in{self.index}"


@dataclass(frozen=True)
class _Plan:
    """How a continuous query is evaluated: ``mode`` is ``windowed`` (CQL windows: a row is
    final when its ``_time`` is below progress), ``over`` (OVER windows with bounded
    PRECEDING frames: final when its event time is below progress), ``rows`` (row by row:
    final as it comes) or ``sync`` (row by row over a SYNC JOIN's control stream: a row is
    final once the signal's files cover its range, and waits in the buffer until then)."""

    inputs: tuple
    mode: str
    time_column: str | None  # the result column compared with progress
    signal: object = None  # mode ``signal``: a streaming.signals.SignalPlan
    sync: object = None  # mode ``sync``: the ir.SyncJoin (see ContinuousQuery._sync_split)
    asof: dict | None = None  # mode ``asof``: left/right stream keys, the right key columns
    resample: dict | None = None  # a RESAMPLE (mode ``resample``, or under windows): its
    #: ``series`` (input, method, interpolated columns) and ``keys``


def start(session, text: str, output, checkpoint: str | os.PathLike, *,
          trigger: str = "availableNow", late: str | os.PathLike | None = None,
          max_files_per_trigger: int | None = None,
          clock: Callable[[], float] = time.time,
          output_format: str = "parquet", keep_replaced: bool = False) -> "ContinuousQuery":
    """Start ``text`` (one query) as a continuous query. See :meth:`Session.stream`.
    ``keep_replaced``: an ``INSERT INTO`` job's output in an object store, whose replaced
    attempts the sink's index may still list (streaming/sinks.py ``publish``)."""
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
    emit = next(iter(stmt.node.find_all(wn.Emit)), None)
    late_into = next(iter(stmt.node.find_all(wn.LateInto)), None)
    session._user_text = text
    from wavesql import planner

    bound = planner.rewrite(planner.bind(stmt, session.catalog, session))
    if not isinstance(bound, ir.QueryStatement):
        raise WaveSQLError("UNSUPPORTED_STATEMENT", "only a query can run continuously",
                           hint="DDL runs once: use Session.sql for it")
    late_format = "parquet"
    if late is None and late_into is not None:
        late, late_format = _late_path(late_into.this, session.catalog)
    plan = plan_continuous(bound.relation, stmt)
    sink = _kafka_sink(output, session.catalog)
    interval = realtime.parse_trigger(trigger)
    if interval is not None:  # Spark's real-time mode: streaming/realtime.py
        return realtime.start(session, bound, plan, stmt, sink, _absolute(checkpoint),
                              interval)
    if sink is not None:
        output = sinks.KafkaOutput(sink)
    cls, extra = ContinuousQuery, {}
    if plan.mode == "signal":  # a query over a SIGNAL: streaming/signals.py
        from .signals import SignalContinuousQuery as cls

        if plan.signal.scan.signal.source == "kafka":  # sample blocks: kafka_signals.py
            from .kafka_signals import KafkaSignalQuery as cls

        bound = plan.signal.bound
    elif plan.mode == "windowed":  # incremental on Spark's state store where it can be
        windowed, _ = stateful_plan(session.spark, stmt, bound.relation,
                                    _absolute(checkpoint))
        if windowed is not None:
            from .stateful.query import StatefulWindowQuery as cls

            extra = {"windowed": windowed}
    # Relative paths resolve against this process's current directory, as CREATE's do:
    # Spark would resolve them against the JVM's, which os.chdir does not move.
    output = output if callable(output) else _absolute(output)
    checkpoint = _absolute(checkpoint)
    return cls(session, text, bound, plan, **extra,
                           emit_changes=emit is not None and emit.kind == "CHANGES",
                           output=output, checkpoint=checkpoint,
                           late=_absolute(late) if late is not None
                           else storage.join(checkpoint, "late"),
                           trigger=trigger, max_files=max_files_per_trigger, clock=clock,
                           output_format=output_format, late_format=late_format,
                           keep_replaced=keep_replaced)


def _kafka_sink(output, catalog):
    """The catalog's Kafka sink named by ``output`` (a string), else None."""
    if not isinstance(output, str):
        return None
    defn = catalog.get(output) if output.replace("_", "").isalnum() else None
    return defn if isinstance(defn, cat.SinkDef) and defn.source == "kafka" else None


def stateful_plan(spark, stmt, relation: ir.Relation, checkpoint: str | None = None):
    """``(WindowedPlan, None)`` for a windowed continuous query that runs on Spark's state
    store, else ``(None, why not)`` -- the buffer is then re-evaluated each micro-batch.
    ``WAVESQL_STATEFUL=0`` forces the re-evaluating runner (comparisons, diagnosis)."""
    from .stateful import plan as stateful

    if os.environ.get("WAVESQL_STATEFUL", "1") == "0":
        return None, "WAVESQL_STATEFUL=0"
    emit = next(iter(stmt.node.find_all(wn.Emit)), None)
    try:
        return stateful.recognize(spark, stmt, relation,
                                  emit is not None and emit.kind == "CHANGES",
                                  stateful.buckets_for(spark, checkpoint)), None
    except stateful.NotIncremental as why:
        return None, str(why)


def explain_stream(spark, text: str, target: ir.QueryStatement) -> str:
    """``EXPLAIN STREAM``: how the query would run continuously -- which runner, what state
    it keeps per input -- or the streaming-rule error it would stop with."""
    stmt = parse_statements(text)[0]
    plan = plan_continuous(target.relation, stmt)
    lines = [f"continuous {plan.mode} query"]
    cannot = realtime.why_not(plan, None)
    lines.append("real-time mode: " + ("possible with a Kafka sink as output" if cannot and
                                       cannot.startswith("its output") else
                                       f"not possible ({cannot})"))
    if plan.mode == "windowed":
        windowed, why = stateful_plan(spark, stmt, target.relation)
        lines.append(windowed.explain if windowed is not None else
                     f"re-evaluated over each input's look-back every micro-batch (not on "
                     f"the state store: {why})")
    for inp in plan.inputs:
        rules = "; ".join(_rule_text(r) for r in inp.lookback) or "nothing between batches"
        lines.append(f"input {inp.stream.name}: keeps {rules}")
    return "\n".join(lines)


def _rule_text(rule: tuple) -> str:
    if rule[0] == "time":
        return f"{rule[1]} us of event time before progress"
    if rule[0] == "rows":
        keys = f" per {', '.join(rule[1])}" if rule[1] else ""
        return f"the last {rule[2]} rows{keys}"
    return " ".join(str(r) for r in rule)


def _watch_path(path: str) -> str:
    """What Spark's file source lists for a signal's FROM path: its folder (a single file's
    folder, filtered to .wav files) or its glob."""
    if storage.is_dir(path) or storage.has_magic(path):
        return path
    return storage.dirname(path) or "."


def _complete_placements(signal: cat.SignalDef, now: float) -> list:
    """The signal's files that are complete now, placed on its timeline (wav_source.plan).
    A file is complete when its header declares exactly the data present, or -- a header
    that cannot say (streamed WAV) -- when it has not been modified for the settle time."""
    from wavesql.planner.lower import signal_placements
    from wavesql.sources import wav_source
    from wavesql.udfs.wav import WavError, read_info

    from . import files

    complete = []
    for path in wav_source.list_wav_files(signal.path):
        try:
            info = read_info(path)
        except (OSError, WavError):
            info = None  # a header still being written: wait for it to settle
        if (info is not None and not info.truncated and not info.open_ended) or \
                files.why_not_ready(path, "wav", files.SETTLE_SECONDS, now) is None:
            complete.append(path)
    return signal_placements(signal, complete) if complete else []


def _fingerprint(placements, end: int) -> str:
    """What identifies the files placed before ``end`` (names, places, lengths): a digest,
    so the state stays one line however many files the signal has."""
    import hashlib

    used = sorted((os.path.basename(p.path), p.start_sample, p.info.frames)
                  for p in placements if p.start_sample < end)
    return hashlib.sha256(json.dumps(used).encode()).hexdigest()


def _absolute(path) -> str:
    """A local path made absolute (``~`` expanded); a URI (``s3a://...``) as it is."""
    return storage.normalize(os.fspath(path), os.getcwd())


def _late_path(target: exp.Expression, catalog) -> tuple[str, str]:
    """``LATE INTO 'path'`` (Parquet) or ``LATE INTO sink``: (path, format). Late rows are
    flat (``_stream``, ``_reason``, ``_row`` as JSON), so any sink format holds them."""
    if isinstance(target, exp.Literal) and target.is_string:
        return target.name, "parquet"
    defn = catalog.get(target.name)
    if not isinstance(defn, cat.SinkDef):
        from wavesql.errors import did_you_mean

        sinks = [d.name for d in catalog.list("SINK")]
        raise WaveSQLError("UNKNOWN_STREAM", f"LATE INTO `{target.name}`: no such sink",
                           Span.of(target), hint=did_you_mean(target.name, sinks, "sinks")
                           or "CREATE SINK late_rows TO 'late/' FORMAT parquet, or give a path")
    _no_kafka_late(defn, target)
    return defn.path, defn.format


def _no_kafka_late(defn, target) -> None:
    """Late rows go to a folder: a Kafka sink cannot take them yet."""
    if getattr(defn, "source", "files") == "kafka":
        raise WaveSQLError("NOT_IMPLEMENTED", f"LATE INTO `{defn.name}`: late rows go to a "
                           "file sink, and this one is a Kafka topic", Span.of(target),
                           hint="CREATE SINK late_rows TO 'late/' FORMAT json, or give a path")


def plan_continuous(root: ir.Relation, stmt) -> _Plan:
    """The streams a continuous query reads, each with the look-back its windows need;
    enforce the streaming rules (README: Time: windows, ...) with errors before anything runs."""
    syncs = [rel for rel in ir.walk(root) if isinstance(rel, ir.SyncJoin)]
    if syncs:
        return _plan_sync(root, syncs, stmt)
    windows: dict[str, list] = {}
    scans: dict[str, cat.StreamDef] = {}
    queries: list[ir.SqlQuery] = []
    for rel in ir.walk(root):
        if isinstance(rel, ir.WindowScan) and isinstance(rel.input, (ir.ViewRef, ir.SqlQuery)):
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"a continuous window over `{rel.stream}`, a view or CTE, "
                "is not implemented yet (batch queries take it)", Span.of(stmt.node),
                hint="window the stream itself: SELECT ... FROM stream [RANGE ...] WHERE ...")
        if isinstance(rel, ir.WindowScan):
            windows.setdefault(rel.input.stream.key if isinstance(rel.input, ir.StreamScan)
                               else rel.stream.lower(), []).append(rel.window)
        elif isinstance(rel, ir.StreamScan):
            scans[rel.stream.key] = rel.stream
        elif isinstance(rel, (ir.SignalScan, ir.SignalStage)):
            from .signals import plan_signal

            return _Plan((), "signal", TIME, plan_signal(root, stmt))
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
            rules = _window_lookback(windows[key], stmt)
            kept, resampled = _resample_lookback(
                queries, key, max((r[1] for r in rules if r[0] == "time"), default=0), stmt)
            inputs.append(_Input(index, stream, rules + kept))
            series += resampled
        return _Plan(tuple(inputs), "windowed", TIME,
                     resample={"keys": [], "series": series} if series else None)
    trees = [_parsed(q) for q in queries]
    overs = [w for t in trees if t is not None for w in t.find_all(exp.Window)]
    if any(q.asof is not None for q in queries):
        return _asof_join(queries, trees, scans, stmt)
    if any(q.resample is not None for q in queries):
        return _resample(root, queries, trees, scans, stmt)
    band = _band_join(queries, trees, scans, stmt)
    if band is not None:
        if overs:
            raise WaveSQLError("NOT_IMPLEMENTED", "OVER windows around a continuous interval "
                               "join", Span.of(stmt.node),
                               hint="join in one continuous query, window its output in another")
        return band
    for tree in trees:
        if tree is not None:
            _check_row_by_row(tree, stmt)
    if not overs:
        return _Plan(tuple(_Input(i, s) for i, (_, s) in enumerate(ordered)), "rows", None)
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
                                for r in _nested_lookback(t, stream, stmt)))
    return _Plan((_Input(0, stream, rules),), "over", stream.event_time)


def _asof_join(queries: list, trees: list, scans: dict, stmt) -> _Plan:
    """A continuous ``ASOF JOIN`` (planner/temporal.py), backward -- each left row with the
    latest right row at or before its time, per key -- or forward -- the earliest at or
    after it.

    Backward: a left row is final once the right stream's progress has passed its time -- no
    right row that could match it can still come -- and waits in the state until then. The
    right side keeps, per key, the rows from ``m`` on and the last rows before ``m`` (ties
    included), ``m`` being the earliest time a waiting or future left row can have: the
    smaller of the left progress and the oldest waiting left row. So state is bounded by
    the watermarks and the number of keys.

    Forward: a left row is final once a right row of its key at or after its time is below
    the right stream's progress (every right row that could come before that one has
    arrived); the right side keeps the rows from ``m`` on. A left row with no such right row
    yet waits -- in an ``ASOF LEFT JOIN`` too: its NULL match is never final while the
    right stream goes on, so it is not emitted (the batch join over the same rows gives
    it). State: the waiting left rows (per key, those since its last right row) and the
    right rows since ``m``."""
    asofs = [(i, q) for i, q in enumerate(queries) if q.asof is not None]
    if len(asofs) > 1 or len(scans) != 2:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous ASOF JOIN is implemented between "
                           "two streams, one per query", Span.of(stmt.node),
                           hint="split the query: one continuous ASOF JOIN per query")
    index, query = asofs[0]
    left_name, right_name, params, outer = query.asof
    params = dict(params)
    rels = dict(query.inputs)
    left, right = rels.get(left_name), rels.get(right_name)
    if not isinstance(left, ir.StreamScan) or not isinstance(right, ir.StreamScan) \
            or left.stream.key == right.stream.key:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous ASOF JOIN joins two different "
                           "catalog streams (not views, not a stream with itself)",
                           Span.of(stmt.node))
    for stream, column in ((left.stream, params["left_time"]),
                           (right.stream, params["right_time"])):
        _require_event_time(stream, column, "a continuous ASOF JOIN compares the streams' "
                            "event times", stmt)
    _check_row_by_row_except(trees, index, stmt)
    ordered = sorted(scans.items())
    inputs = tuple(_Input(k, st) for k, (_, st) in enumerate(ordered))
    info = {"left": left.stream.key, "right": right.stream.key,
            "keys": [r for _, r in params["keys"]], "pairs": list(params["keys"]),
            "direction": params["direction"], "inclusive": params["inclusive"]}
    return _Plan(inputs, "asof", None, asof=info)


def _require_event_time(stream: cat.StreamDef, column: str, why: str, stmt) -> None:
    """``column`` must be ``stream``'s EVENT TIME: progress is kept in event time."""
    if stream.event_time is None or stream.event_time.lower() != column.lower():
        raise WaveSQLError("STREAMING_RULE", f"{why}; `{column}` is not `{stream.name}`'s "
                           "EVENT TIME", Span.of(stmt.node),
                           hint=f"declare it: CREATE OR REPLACE STREAM ... EVENT TIME {column} "
                                "WATERMARK ...")


def _check_row_by_row_except(trees: list, index: int, stmt) -> None:
    """Every query but the ``index``-th (the operator the mode evaluates) is row by row."""
    for i, tree in enumerate(trees):
        if i != index and tree is not None:
            _check_row_by_row(tree, stmt)


def _resample_lookback(queries: list, key: str, reach_us: int, stmt) -> tuple:
    """What a RESAMPLE of stream ``key`` inside a windowed continuous query needs kept.

    The query's rows are final by ``_time`` (TiLT's imputation: a grid point joined to its
    bucket, final once the bucket is); a ``'prev'``/``'null'``/``'zero'`` grid point needs
    the rows up to it, which the window's look-back (``reach_us``) keeps, plus the last row
    before that look-back, so that the grid continues across a dropout longer than it.
    ``'linear'`` also needs the last value of every interpolated column before that, and
    its points need the next value after them: the instants are final only up to just past
    the last time below progress at which every interpolated column had a value
    (:meth:`ContinuousQuery._resample_final`). Per key (``PARTITION BY``) the same rows are
    kept per key, and as each key's grid ends at its last row (a later row of the key adds
    points across its pause, into windows that would otherwise be final), the instants are
    final only up to just past the stalest key's last row (and, ``'linear'``, its columns'
    last values): a key that stops reporting holds the query's progress -- and its state --
    until it reports again. Returns the rules and the series that bound progress (one per
    RESAMPLE of ``key`` that bounds)."""
    rules: tuple = ()
    series = []
    for q in queries:
        if q.resample is None:
            continue
        rel = dict(q.inputs).get(q.resample[0])
        if not isinstance(rel, ir.StreamScan) or rel.stream.key != key:
            continue
        _, _, _, method, numeric, keys = q.resample
        by = tuple(quote(k) for k in keys)
        rules += (("rows", by, 1, None, reach_us),)  # (every RESAMPLE of the stream's own)
        if method == "linear":
            rules += tuple(("rows", by, 1, f"{quote(c)} IS NOT NULL", reach_us) for c in numeric)
        if method == "linear" or keys:  # (un-keyed 'prev'/'null'/'zero': no series, above)
            series.append(_series(key, method, numeric, keys))
    return tuple(dict.fromkeys(rules)), series


#: The per-key bound column of :meth:`ContinuousQuery._key_bounds` (an internal name: a
#: stream's own columns, keys included, may be called anything else).
_BOUND = "__wavesql_bound"


def _series(key: str, method: str, numeric, keys=()) -> dict:
    """A RESAMPLE's series (per key with ``keys``) whose points bound a continuous query's
    progress."""
    return {"input": key, "method": method, "numeric": list(numeric), "keys": list(keys)}


def _resample(root: ir.Relation, queries: list, trees: list, scans: dict, stmt) -> _Plan:
    """A continuous ``RESAMPLE`` of one stream (planner/temporal.py).

    A grid point ``t`` is final once no row that could change it can still come: for
    ``'prev'``, ``'null'`` and ``'zero'`` when ``t`` is below the input's progress; for
    ``'linear'`` also only once every interpolated column has a value at or after ``t``
    below progress (the right end of its interpolation has arrived) -- and never past the
    stream's last row (the points after it exist only once a later row does). The result's
    progress is that bound, and the state keeps the rows from it on plus the last row before
    it (per interpolated column: its last non-NULL value), which bracket the grid points to
    come. Per key (``PARTITION BY``) the same holds for each key's series: a point is final
    below progress and up to that key's last row (and, ``'linear'``, its columns' last
    values), so a key that pauses holds back only its own points; the state keeps each
    key's bracketing rows."""
    found = [(i, q) for i, q in enumerate(queries) if q.resample is not None]
    if len(found) > 1 or len(scans) != 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous RESAMPLE is implemented over one "
                           "stream, once per query", Span.of(stmt.node),
                           hint="one continuous RESAMPLE per query; combine their outputs")
    index, query = found[0]
    source, time_col, period, method, numeric, keys = query.resample
    for k in keys:
        if root.schema.find(k) is None:
            raise WaveSQLError("STREAMING_RULE", f"a continuous RESAMPLE per key must keep "
                               f"the key {quote(k)} in its result", Span.of(stmt.node),
                               hint=f"add {k} to the SELECT: each key's points are final "
                                    "on their own")
    stream = next(iter(scans.values()))
    rel = dict(query.inputs).get(source)
    if not isinstance(rel, ir.StreamScan):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous RESAMPLE reads a catalog stream "
                           "(not a view)", Span.of(stmt.node))
    _require_event_time(stream, time_col, "a continuous RESAMPLE puts the stream's event "
                        "time on the grid", stmt)
    if root.schema.find(time_col) is None:
        raise WaveSQLError("STREAMING_RULE", f"a continuous RESAMPLE must keep the grid time "
                           f"{quote(time_col)} in its result", Span.of(stmt.node),
                           hint=f"add {time_col} to the SELECT: it says when a row is final")
    _check_row_by_row_except(trees, index, stmt)
    # the last row before the cut (per key) brackets the next points
    by = tuple(quote(k) for k in keys)
    last = [("rows", by, 1, None)]
    if method == "linear":
        last += [("rows", by, 1, f"{quote(c)} IS NOT NULL") for c in numeric]
    inp = _Input(0, stream, tuple(last))
    return _Plan((inp,), "resample", time_col, resample={
        "keys": list(keys), "series": [_series(stream.key, method, numeric, keys)]})


def _band_join(queries: list, trees: list, scans: dict, stmt) -> _Plan | None:
    """A continuous interval join (``planner/band.py``) of two streams, or None.

    Each micro-batch pairs the new rows of each side with everything buffered of the other
    (and with each other) -- every pair once, final as it is emitted -- and keeps of each
    side only the rows a future row of the other side can still match: side ``a`` (where
    ``a.t`` lies in ``[b.t + lo, b.t + hi]``) from ``progress(b) + lo`` on, side ``b`` from
    ``progress(a) - hi`` on. So state is bounded by the band and the watermarks."""
    from wavesql.planner.band import find_band

    found = []
    for tree in trees:
        if tree is None:
            continue
        for join in tree.find_all(exp.Join):
            band = find_band(join.args.get("on"))
            if band is not None:
                found.append((tree, join, band))
    if not found:
        return None
    if len(found) > 1 or len(scans) != 2:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous interval join is implemented "
                           "between two streams, one join per query", Span.of(stmt.node),
                           hint="split the query: one continuous join per query")
    tree, join, band = found[0]
    if (join.args.get("side") or "") or (join.args.get("kind") or "INNER").upper() not in (
            "INNER", ""):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous OUTER interval join (its unmatched "
                           "rows would have to wait for the other side's progress)",
                           Span.of(stmt.node), hint="use an inner join")
    names = {}  # alias -> stream name, through the bin subqueries of planner/band.py
    select = join.parent_select
    for source in [select.args["from_"].this] + [j.this for j in select.args["joins"]]:
        if isinstance(source, exp.Table):
            names[source.alias_or_name.lower()] = source.name.lower()
        elif isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select):
            inner = source.this.args["from_"].this
            if isinstance(inner, exp.Table):
                names[source.alias_or_name.lower()] = inner.name.lower()
    by_name = {st.name.lower(): st for st in scans.values()}
    a = by_name.get(names.get(band.a.table.lower(), ""))
    b = by_name.get(names.get(band.b.table.lower(), ""))
    if a is None or b is None or a.key == b.key:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous interval join joins two different "
                           "catalog streams (not a stream with itself, not views)",
                           Span.of(stmt.node))
    for side, column in ((a, band.a), (b, band.b)):
        _require_event_time(side, column.name, "a continuous interval join's band must be "
                            "on the streams' event times", stmt)
    rest = tree.copy()
    for j in rest.find_all(exp.Join):
        j.pop()  # the join itself is what this mode evaluates; the rest must be row by row
    _check_row_by_row(rest, stmt)
    ordered = sorted(scans.items())
    inputs = []
    for index, (key, stream) in enumerate(ordered):
        # keep rows with event time >= progress(other side) + offset
        other, offset = (b.key, band.lo) if key == a.key else (a.key, -band.hi)
        inputs.append(_Input(index, stream, (("band", other, offset),)))
    return _Plan(tuple(inputs), "band", None)


def _plan_sync(root: ir.Relation, syncs: list, stmt) -> _Plan:
    """A continuous SYNC JOIN: its control is a catalog stream read row by row; the signal's
    WAV folder is watched, and each control row is synced once the recording covers its
    range (``ContinuousQuery._sync_split``)."""
    if len(syncs) > 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "several SYNC JOINs in one continuous query",
                           Span.of(stmt.node),
                           hint="run one continuous query per signal, over the same control")
    sync = syncs[0]
    if not isinstance(sync.control, ir.StreamScan):
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN reads its ranges from a "
                           "catalog stream (not a view or a signal's results)",
                           Span.of(stmt.node), hint="write the control rows to a stream's "
                           "folder (INSERT INTO a sink it reads), then SYNC over that stream")
    stream = sync.control.stream
    if stream.event_time is None:
        raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` has no EVENT TIME",
                           Span.of(stmt.node), hint="a continuous query needs event time to "
                           "know which rows are late: CREATE OR REPLACE STREAM ... EVENT TIME "
                           "ts WATERMARK 5 SECONDS")
    for rel in ir.walk(root):
        if isinstance(rel, (ir.WindowScan, ir.StreamOf, ir.SignalStage, ir.Rewindow)):
            raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN with windows or "
                               "signal functions around it", Span.of(stmt.node),
                               hint="SYNC in one continuous query; process its results in a "
                                    "query over them")
        if isinstance(rel, ir.SqlQuery):
            tree = _parsed(rel)
            if tree is not None:
                _check_row_by_row(tree, stmt)
    return _Plan((_Input(0, stream),), "sync", None, sync=sync)


def _nested_lookback(tree, stream: cat.StreamDef, stmt) -> list:
    """Look-back rules of the OVER windows in ``tree``, summed along nested windows.

    A window over the output of another (RSI: ``sum(...) OVER (RANGE 13 ms)`` over a CTE
    computing ``v - lag(v)``) needs, for its rows at or after progress, the inner window's
    rows of its own look-back, and each of those the inner window's look-back: the chain's
    look-backs add up. Along each chain of nested windows (a SELECT's windows, over the
    SELECTs its FROM reads: CTEs and subqueries) the time look-backs sum to ``T`` and the
    rows look-backs to ``R``: the rule keeps event time >= progress - ``T`` and the last
    ``R`` rows before that per partition of each rows window in the chain
    (``("rows", keys, R, passes, T)``). The bound is exact for rows windows inside time
    windows (RSI), and for time windows inside rows windows when the rows are not sparser
    than the time window (``T`` before progress holds a row).
    """
    ctes = {c.alias_or_name.lower(): c.this for c in tree.find_all(exp.CTE)}
    seen: set[int] = set()

    def chains_of(query, depth=0) -> list[list]:
        if depth > 50:
            return [[]]
        if isinstance(query, exp.Subquery):
            return chains_of(query.this, depth + 1)
        if isinstance(query, exp.SetOperation):
            return (chains_of(query.this, depth + 1)
                    + chains_of(query.expression, depth + 1))
        if not isinstance(query, exp.Select):
            return [[]]
        mine = [w for w in query.find_all(exp.Window) if w.find_ancestor(exp.Select) is query]
        seen.update(id(w) for w in mine)
        own = [_over_lookback(w, stream, stmt) for w in mine]
        sources = []
        frm = query.args.get("from_") or query.args.get("from")
        for src in ([frm.this] if frm is not None else []) + [
                j.this for j in query.args.get("joins") or ()]:
            if isinstance(src, exp.Subquery):
                sources += chains_of(src.this, depth + 1)
            elif isinstance(src, exp.Table) and src.name.lower() in ctes:
                sources += chains_of(ctes[src.name.lower()], depth + 1)
        sources = sources or [[]]
        return [([w] if w is not None else []) + c for w in (own or [None]) for c in sources]

    chains = chains_of(tree)
    # windows off the FROM chains (e.g. in a scalar subquery): their own look-back
    chains += [[_over_lookback(w, stream, stmt)] for w in tree.find_all(exp.Window)
               if id(w) not in seen]
    rules = []
    for chain in chains:
        if not chain:
            continue
        time_us = sum(r[1] for r in chain if r[0] == "time")
        rows = [r for r in chain if r[0] == "rows"]
        if not rows:
            rules.append(("time", time_us))
            continue
        total = sum(r[2] for r in rows)
        rules += [("rows", r[1], total, r[3], time_us) for r in rows]
    return rules


def _parsed(rel: ir.SqlQuery):
    try:
        return parse_one(rel.sql)
    except WaveSQLError:
        return None


def _window_lookback(specs, stmt) -> tuple:
    rules = []
    for s in specs:
        if s.kind == "UNBOUNDED":
            raise WaveSQLError("STREAMING_RULE", "[RANGE UNBOUNDED] would keep every row of a "
                               "stream forever", Span.of(stmt.node),
                               hint="use a bounded window such as [RANGE 1 HOUR]")
        if s.kind in ("ROWS", "PARTITION_ROWS"):
            rules.append(("rows", s.partition_by, s.size, None))
        else:
            # SLIDE: the instant before the first new one reaches back r + s.
            rules.append(("time", {"RANGE": s.size, "SLIDE": s.size + s.slide,
                                   "NOW": 1}[s.kind]))
    return tuple(rules)


#: Window functions that look forward or back to the start of the stream.
_UNBOUNDED_FUNCTIONS = (exp.Lead, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile,
                        exp.PercentRank, exp.CumeDist)


def _over_lookback(window: exp.Window, stream: cat.StreamDef, stmt) -> tuple:
    """The look-back of one OVER window, or an error saying why it is unbounded."""
    from wavesql.dialect import to_spark_sql
    from wavesql.planner.types import interval_us, number

    def refuse(message, hint):
        raise WaveSQLError("STREAMING_RULE", message, Span.of(stmt.node), hint=hint)

    frame_hint = (f"e.g. avg(v) OVER (ORDER BY {stream.event_time} RANGE BETWEEN INTERVAL "
                  "20 SECONDS PRECEDING AND CURRENT ROW)")
    order = window.args.get("order")
    keys = order.expressions if order is not None else []
    if (len(keys) != 1 or keys[0].args.get("desc") or not isinstance(keys[0].this, exp.Column)
            or keys[0].this.name.lower() != stream.event_time.lower()):
        refuse(f"an OVER window over a stream must be ORDER BY its event time "
               f"{quote(stream.event_time)}", frame_hint)
    partition = tuple(to_spark_sql(unqualified(e)) for e in window.args.get("partition_by") or ())
    # A ROWS frame counts the rows that pass the SELECT's WHERE (it filters before the
    # window), so the look-back keeps the last n rows *that pass it*.
    select = window.find_ancestor(exp.Select)
    where = select.args.get("where") if select is not None else None
    passes = to_spark_sql(unqualified(where.this)) if where is not None else None
    func = window.this
    if isinstance(func, exp.Lag):
        offset = func.args.get("offset")
        return ("rows", partition, int(number(offset)) if offset is not None else 1, passes)
    if isinstance(func, _UNBOUNDED_FUNCTIONS):
        refuse(f"`{func.sql()}` needs the whole stream (or its future) in a continuous query",
               "use lag() or an aggregate over a bounded PRECEDING frame")
    spec = window.args.get("spec")
    if (spec is None or str(spec.args.get("end")).upper() != "CURRENT ROW"
            or str(spec.args.get("start_side") or "").upper() != "PRECEDING"
            or str(spec.args.get("start")).upper() == "UNBOUNDED"):
        refuse("an OVER window over a stream needs a bounded frame ending at the current row",
               frame_hint)
    if str(spec.args.get("kind")).upper() == "RANGE":
        return ("time", interval_us(spec.args["start"]))
    return ("rows", partition, int(number(spec.args["start"])), passes)


def _check_row_by_row(tree, stmt) -> None:
    """Outside OVER windows, a continuous query without CQL windows must be row by row."""
    for node in tree.walk():
        if isinstance(node, exp.AggFunc) and node.find_ancestor(exp.Window) is not None:
            continue
        if isinstance(node, (exp.AggFunc, exp.Group, exp.Join, exp.Distinct, exp.Limit)):
            raise WaveSQLError(
                "STREAMING_RULE", f"`{node.sql()[:40]}` over an unbounded stream needs a window",
                Span.of(stmt.node),
                hint="aggregate over a window, e.g. FROM trades [RANGE 1 MINUTE SLIDE 10 "
                     "SECONDS], or an OVER (... RANGE BETWEEN ... PRECEDING AND CURRENT ROW)")


class ContinuousQuery:
    """A running continuous query (see the module docstring). Create with
    :meth:`wavesql.Session.stream`."""

    def __init__(self, session, text, bound, plan: _Plan, *, emit_changes, output,
                 checkpoint: str, late: str, trigger, max_files, clock,
                 output_format: str = "parquet", late_format: str = "parquet",
                 keep_replaced: bool = False):
        self.session = session
        self.keep_replaced = keep_replaced
        self.spark = session.spark
        self.text = text
        self.bound = bound
        self.plan = plan
        self.inputs = list(plan.inputs)
        self.emit_changes = emit_changes
        self.output = output
        #: the format of each batch folder under ``output`` (streaming/sinks.py)
        self.output_format = output_format
        self.checkpoint = checkpoint
        self.late_path = late
        self.late_format = late_format
        #: malformed input rows, with the file, the raw record and the reason
        self.quarantine_path = storage.join(checkpoint, "quarantine")
        self.clock = clock
        self.reports: list[BatchReport] = []
        self.error: BaseException | None = None
        self._stopping = False
        self._batch_lock = threading.Lock()
        self._bounds: dict = {}
        self._query = self._start(trigger, max_files)

    # -- public ------------------------------------------------------------------------
    def await_termination(self, timeout: float | None = None) -> bool:
        """Wait for the query (availableNow: until the input present at start is done);
        re-raises the error that stopped it, as a WaveSQLError where possible.

        With ``timeout`` (seconds): returns False if the query is still running then, as
        Spark's ``awaitTermination`` does. Without it, the wait is bounded only if
        ``WAVESQL_AWAIT_TIMEOUT_SECONDS`` is set (the test suite sets it, so a hung query
        fails its test instead of the whole run): past it the query is stopped and
        ``STREAM_TIMEOUT`` raised."""
        from pyspark.errors import StreamingQueryException

        default = timeout is None and await_timeout_seconds()
        try:
            done = self._query.awaitTermination(default or timeout)
        except StreamingQueryException:
            if isinstance(self.error, WaveSQLError):
                raise self.error from None
            raise
        if self.error is not None:
            raise self.error
        if default and done is False:
            self.stop(wait=0)
            raise WaveSQLError(
                "STREAM_TIMEOUT", f"the continuous query was still running after {default:g} s "
                "(WAVESQL_AWAIT_TIMEOUT_SECONDS); it has been stopped",
                hint="raise WAVESQL_AWAIT_TIMEOUT_SECONDS (unset: wait as long as it takes), "
                     "or pass await_termination(timeout=...) and check its result")
        return done if done is not None else True

    @property
    def busy(self) -> bool:
        """Whether a micro-batch is running right now."""
        return bool(self._query.isActive and (self._query.status or {}).get("isTriggerActive"))

    def stop(self, wait: float = 60.0) -> None:
        """Stop the query, after the micro-batch in progress (up to ``wait`` seconds).

        Stopping Spark in the middle of a batch interrupts its driver-side jobs (and the
        batch is redone on restart anyway); waiting gives a clean stop and a complete last
        batch. ``wait=0`` stops at once.
        """
        # The batch lock closes the race between "no batch is running" and stop(): a
        # trigger firing in between finds _stopping set and does nothing (its offsets are
        # not committed, so a restart reads those rows again).
        self._stopping = True
        locked = self._batch_lock.acquire(timeout=max(wait, 0.0)) if wait > 0 else False
        try:
            self._query.stop()
        finally:
            if locked:
                self._batch_lock.release()

    @property
    def is_active(self) -> bool:
        return self._query.isActive

    @property
    def progress_us(self) -> int | None:
        """The query's progress after the last batch (microseconds since 1970), or None."""
        state = self._load_state(None)
        return state.get("shown", state["progress"]) if state else None

    def status(self) -> dict:
        """Live figures (see :mod:`wavesql.streaming.metrics`): progress, input and
        processing rates (rows, and samples for signal queries), state rows and bytes,
        result latency (last, p50, p99, max), totals; plus Spark's own rates of its last
        trigger (``spark_input_rows_per_second``, ``spark_processed_rows_per_second``)."""
        last = self._query.lastProgress or {}
        figures = self.metrics
        figures["progress_us"] = self.progress_us
        figures["spark_input_rows_per_second"] = last.get("inputRowsPerSecond")
        figures["spark_processed_rows_per_second"] = last.get("processedRowsPerSecond")
        return figures

    @property
    def metrics(self) -> dict:
        """The live figures of :func:`wavesql.streaming.metrics.summarize` over the
        batches this query ran."""
        from .metrics import summarize

        return summarize(list(self.reports))

    # -- setup -------------------------------------------------------------------------
    def _start(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        # One streaming query over all inputs: each input's rows travel as a struct in its
        # own column (NULL in the others), tagged with the input's index.
        frames = [stream_source(self.spark, inp.stream, max_files) for inp in self.inputs]
        rows = [df.drop("__file") for df in frames]
        parts = []
        for inp, df in zip(self.inputs, frames):
            cols = [F.struct(*[F.col(quote(c)) for c in other.columns]).alias(o.column)
                    if o is inp else F.lit(None).cast(other.schema).alias(o.column)
                    for o, other in zip(self.inputs, rows)]
            parts.append(df.select(F.lit(inp.index).alias("__src"), *cols, "__file"))
        if trigger.startswith("every ") and any(i.stream.heartbeat_us is not None
                                                for i in self.inputs):
            # Spark runs a micro-batch only when some input has new rows; a HEARTBEAT must
            # advance progress while every input is idle, so a ticker (Spark's rate source,
            # one row per second, tagged -1 and never treated as data) keeps batches coming.
            ticks = self.spark.readStream.format("rate").option("rowsPerSecond", "1").load()
            parts.append(ticks.select(F.lit(-1).alias("__src"), *[
                F.lit(None).cast(df.schema).alias(o.column)
                for o, df in zip(self.inputs, rows)], F.lit(None).cast("string").alias("__file")))
        if self.plan.mode == "sync":
            # New WAV files must run a micro-batch too (control rows wait for them): Spark's
            # binaryFile source lists them, tagged -2; the content column is never read.
            watch = (self.spark.readStream.format("binaryFile")
                     .schema("path STRING, modificationTime TIMESTAMP, length BIGINT, "
                             "content BINARY")
                     .option("pathGlobFilter", "*.[wW][aA][vV]")
                     .load(_watch_path(self.plan.sync.signal.signal.path)))
            parts.append(watch.select(F.lit(-2).alias("__src"), *[
                F.lit(None).cast(df.schema).alias(o.column)
                for o, df in zip(self.inputs, rows)], F.col("path").alias("__file")))
        source = parts[0]
        for part in parts[1:]:
            source = source.unionByName(part)
        return self._start_writer(source, trigger)

    def _start_writer(self, source, trigger: str):
        """Run ``source`` through this query's micro-batch callback on ``trigger``."""
        writer = (source.writeStream.foreachBatch(self._guarded_batch)
                  .option("checkpointLocation", storage.join(self.checkpoint, "offsets")))
        if trigger == "availableNow":
            writer = writer.trigger(availableNow=True)
        elif trigger.startswith("every "):
            writer = writer.trigger(processingTime=trigger[len("every "):])
        else:
            raise WaveSQLError("INVALID_OPTION", f"unknown trigger `{trigger}`",
                               hint="'availableNow' or 'every 10 seconds'")
        return writer.start()

    def _guarded_batch(self, batch_df, batch_id: int) -> None:
        # Never block on the lock: stop() holds it while it waits for Spark, and Spark waits
        # for this callback -- so look at _stopping (set before stop() takes the lock).
        while not self._batch_lock.acquire(timeout=0.1):
            if self._stopping:
                raise _Stopping(f"batch {batch_id} not run: the query is stopping")
        with _Held(self._batch_lock):
            if self._stopping:
                raise _Stopping(f"batch {batch_id} not run: the query is stopping")
            try:
                self._run_batch(batch_df, batch_id)
            except BaseException as err:  # noqa: BLE001 - surfaced by await_termination
                from wavesql.spark_errors import translate_runtime_error

                if not self._stopping:  # an interruption by stop() is not the query's error
                    self.error = translate_runtime_error(err) \
                        if not isinstance(err, WaveSQLError) else err
                raise

    # -- one micro-batch ---------------------------------------------------------------
    def _run_batch(self, batch_df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        began = time.monotonic()
        # Spark runs foreachBatch in a clone of the session: temp views the plan registers
        # must live in the batch's session, or spark.sql would not see them.
        spark = batch_df.sparkSession
        state = self._load_state(batch_id) or {"progress": None, "inputs": {}}
        now_us = int(self.clock() * 1_000_000)
        batch_df = batch_df.persist()
        report = BatchReport(batch_id, None, started_at=self.clock())
        arrived = self._arrivals(batch_id)  # for the result latency
        buffers, fresh, progress, olds = {}, {}, {}, {}
        self._release_bounds()  # (a batch that failed left its bounds cached)
        late_parts, quarantine_parts, cached = [], [], [batch_df]
        read_files: list[str] = []  # what this batch reads (streaming/files.py)
        for inp in self.inputs:
            s = inp.stream
            mine = state["inputs"].get(s.key, {"progress": None, "max_ts": None})
            rows = self._input_rows(spark, batch_df, inp, batch_id, read_files)
            marked = bad_rows.CORRUPT_COLUMN in rows.columns
            malformed = (F.col(bad_rows.CORRUPT_COLUMN).isNotNull() if marked else F.lit(False))
            ts = F.unix_micros(F.col(quote(s.event_time)))
            punct = (F.col(quote(s.progress_column)).isNotNull() if s.progress_column
                     else F.lit(False))
            before = mine["progress"]
            is_late = ts < F.lit(before) if before is not None else F.lit(False)
            tagged = rows.withColumn("__kind", F.when(malformed, "malformed")
                                     .when(punct, "punctuation")
                                     .when(ts.isNull(), "no_time")
                                     .when(is_late, "late").otherwise("on_time"))
            tagged = tagged.persist()
            cached.append(tagged)
            # a Kafka stream's facts per partition: its progress is their minimum
            per_partition = ["_partition"] if s.source == "kafka" else []
            stats = tagged.groupBy("__kind", *per_partition).agg(
                F.count(F.lit(1)).alias("n"), F.max(ts).alias("max_ts"),
                F.max(F.unix_micros(F.col(quote(s.progress_column))) if s.progress_column
                      else F.lit(None).cast("bigint")).alias("punct"),
                # a Kafka record's arrival: its timestamp (for the result latency)
                F.min(F.unix_micros("_timestamp") if per_partition
                      else F.lit(None).cast("bigint")).alias("arrived")).collect()
            by_kind = _by_kind(stats)
            arrived += [r["arrived"] / 1e6 for r in stats if r["arrived"] is not None]
            counts = {k: (by_kind[k]["n"] if k in by_kind else 0)
                      for k in ("on_time", "late", "no_time", "punctuation", "malformed")}
            for k, n in counts.items():
                field_name = "quarantined" if k == "malformed" else k
                setattr(report, field_name, getattr(report, field_name) + n)
            report.rows_in += sum(counts.values())
            if counts["malformed"]:
                quarantine_parts.append(
                    tagged.where(F.col("__kind") == "malformed").select(
                        F.lit(s.name).alias("_stream"), F.col("__file").alias("_file"),
                        F.col(bad_rows.CORRUPT_COLUMN).alias("_record"),
                        F.concat(F.lit("malformed: read as "), F.to_json(F.struct(
                            *[F.col(quote(c.name)) for c in s.columns]))).alias(REASON)))
            tagged = tagged.drop("__file", *([bad_rows.CORRUPT_COLUMN] if marked else []))
            on_time = tagged.where(F.col("__kind") == "on_time").drop("__kind")
            if counts["late"] or counts["no_time"]:
                late_parts.append(
                    tagged.where(F.col("__kind").isin("late", "no_time"))
                    .select(F.lit(s.name).alias("_stream"),
                            F.when(F.col("__kind") == "late",
                                   F.lit(f"event time before the progress already promised "
                                         f"({_fmt(before)})"))
                            .otherwise(F.lit(f"no event time ({s.event_time} is NULL)"))
                            .alias(REASON),
                            F.to_json(F.struct(*[F.col(quote(c.name)) for c in s.columns]))
                            .alias("_row")))
            newest = by_kind["on_time"]["max_ts"] if "on_time" in by_kind else None
            seen = [v for v in (mine["max_ts"], newest) if v is not None]
            max_ts = max(seen) if seen else None
            if per_partition:
                partitions = _partition_facts(mine.get("partitions"), stats,
                                              self._kafka_partitions(batch_id, s))
                promised = _least_promise(partitions, s.watermark_us or 0)
            else:
                promised = max([v for v in (
                    max_ts - (s.watermark_us or 0) if max_ts is not None else None,
                    by_kind["punctuation"]["punct"] if "punctuation" in by_kind else None,
                ) if v is not None], default=None)
            candidates = [v for v in (
                before, promised,
                now_us - s.heartbeat_us if s.heartbeat_us is not None else None,
            ) if v is not None]
            progress[s.key] = {"progress": max(candidates) if candidates else None,
                               "max_ts": max_ts}
            if per_partition:
                progress[s.key]["partitions"] = partitions
            fresh[s.key] = on_time
            olds[s.key] = self._read_buffer(spark, inp, state)
            buffers[s.key] = olds[s.key].unionByName(on_time)
        quarantine_parts += self._changed_files(spark, batch_id, read_files)
        known = [p["progress"] for p in progress.values()]
        overall = None if any(p is None for p in known) else min(known)
        previous = state["progress"]
        if self.plan.resample is not None:  # a RESAMPLE, alone or under windows
            overall = self._resample_final(buffers, overall, previous)
        shown = self._shown_progress(buffers, overall)
        report.progress_us = shown
        report.inputs = {k: v["progress"] for k, v in progress.items()}

        sync_state = None
        if self.plan.mode == "sync":  # synced: the rows the recording now covers
            key = self.inputs[0].stream.key
            ready, buffers[key], sync_state, placements = self._sync_split(buffers[key],
                                                                           state)
            # the SYNC reads the very files the split judged complete (no second listing)
            fresh = {key: ready,
                     ("placements", self.plan.sync.signal.signal.key): placements}
        stateful = self.plan.mode not in ("rows", "sync", "band", "asof")
        if self.plan.mode == "asof":
            fresh = self._asof_split(buffers, progress)
        if self.plan.mode == "band":  # every pair with a new row in it, once
            ka, kb = (inp.stream.key for inp in self.inputs)
            out = self._results(spark, {ka: fresh[ka], kb: buffers[kb]}, previous, overall)
            out = out.unionByName(self._results(spark, {ka: olds[ka], kb: fresh[kb]},
                                                previous, overall))
        else:
            out = self._results(spark, buffers if stateful else fresh, previous, overall, olds,
                                shown)
        self._deliver_counted(out, batch_id, report, by_final=stateful)
        sinks.commit_all(late_parts, self.late_path, batch_id, self.late_format)
        sinks.commit_all(quarantine_parts, self.quarantine_path, batch_id)
        report.buffered = self._write_state(spark, batch_id, buffers, progress, overall, shown,
                                            sync_state)
        report.state_bytes = sum(e.size for e in storage.list_files(self._state_dir(batch_id),
                                                                    recursive=True))
        self._finish(report, began, arrived)
        for df in cached + [out]:
            df.unpersist()
        self._release_bounds()

    def _kafka_partitions(self, batch_id: int, s: cat.StreamDef) -> list[int]:
        """The partitions of a Kafka stream's topic, as Spark's offset log of this batch
        lists them (every partition, including ones that never had a record: those hold
        the stream's progress back, like any idle partition, unless it has a HEARTBEAT)."""
        path = storage.join(self.checkpoint, "offsets", "offsets", str(batch_id))
        found: set[int] = set()
        try:
            lines = storage.read_text(path).splitlines()
        except (OSError, WaveSQLError):
            return []
        for line in lines[2:]:
            try:
                offsets = json.loads(line)
            except ValueError:
                continue
            if isinstance(offsets, dict) and isinstance(offsets.get(s.path), dict):
                found.update(int(p) for p in offsets[s.path])
        return sorted(found)

    def _changed_files(self, spark, batch_id: int, read_files: list[str]) -> list:
        """Quarantine records (``_record`` NULL) for files earlier batches read that changed
        since -- their new content is not read -- and the record of this batch's files."""
        from . import files

        changed = files.changed_since_read(self.checkpoint, batch_id)
        files.record_read(self.checkpoint, batch_id, read_files, changed)
        if not changed:
            return []
        owner = {}
        for inp in self.inputs:
            for path, *_ in changed:
                if _belongs(path, inp.stream.path):
                    owner.setdefault(path, inp.stream.name)
        rows = [(owner.get(path), path if storage.is_remote(path) else f"file://{path}", None,
                 files.describe_change(b, then, now))
                for path, b, then, now in changed]
        return [spark.createDataFrame(
            rows, "_stream string, _file string, _record string, " + f"{REASON} string")]

    def _input_rows(self, spark, batch_df, inp: _Input, batch_id: int,
                    read_files: list[str] | None = None):
        """The batch's new rows of ``inp`` (its columns and ``__file``), read whole.

        Spark's file source fixed each new file's size when it listed it, so a file still
        being written then (copied in place) would be read in part and never again. The
        batch's files are taken from Spark's file log instead, waited for until complete,
        and read as they are now (streaming/files.py); a re-run of the batch reads the same
        files, so it stays exactly once.
        """
        from pyspark.sql import functions as F

        from . import files

        listed = [p for p, _ in files.batch_files(self.checkpoint, inp.index, batch_id)]
        if not listed or not all(_belongs(p, inp.stream.path) for p in listed):
            return batch_df.where(F.col("__src") == inp.index).select(
                f"{inp.column}.*", "__file")
        files.wait_until_ready(listed, inp.stream.format)
        if read_files is not None:
            read_files.extend(listed)
        s = inp.stream
        ddl, options = _reader_settings(s)
        frame = spark.read.format(s.format).schema(ddl).options(**options).load(listed)
        return frame.select(*[F.col(quote(c)) for c in frame.columns],
                            F.input_file_name().alias("__file"))

    def _results(self, spark, streams: dict, previous: int | None, overall: int | None,
                 olds: dict | None = None, shown: int | None = None):
        """The batch's result rows with ``_final`` (by ``previous``/``overall``) and
        ``_progress`` (``shown``, default ``overall``)."""
        from pyspark.sql import functions as F

        rt = Runtime(spark, self.session.catalog, self.text, streams=streams)
        result = lower(self.bound, rt)
        shown = overall if shown is None else shown
        if self.plan.mode in ("rows", "sync", "band", "asof"):  # final as it comes
            return result.withColumn(PROGRESS, _timestamp(shown))
        t = F.unix_micros(F.col(quote(self.plan.time_column)))
        after = t >= F.lit(previous) if previous is not None else F.lit(True)
        before = t < F.lit(overall) if overall is not None else F.lit(False)
        if self.plan.mode == "resample" and self.plan.resample["keys"]:
            # each key's points: final below its bound now, not yet before its bound then
            series = self.plan.resample["series"][0]
            key, keys = series["input"], series["keys"]
            now = self._key_bounds(streams[key], overall, series)
            then = self._key_bounds(olds[key], previous, series).withColumnRenamed(
                _BOUND, "__wavesql_then")
            on = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"b.{quote(k)}")) for k in keys]
            on_then = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"a.{quote(k)}")) for k in keys]
            result = (result.alias("r").join(now.alias("b"), on, "left")
                      .join(then.alias("a"), on_then, "left")
                      .select("r.*", (F.col("__wavesql_then").isNull()
                                      | (t >= F.col("__wavesql_then")))
                              .alias("__after"),
                              F.coalesce(t < F.col(f"b.{_BOUND}"), F.lit(False))
                              .alias("__before")))
            after, before = F.col("__after"), F.col("__before")
        final = result.where(after & before).withColumn(FINAL, F.lit(True))
        if self.emit_changes:
            pending = ~before if overall is not None else F.lit(True)
            final = final.unionByName(result.where(pending).withColumn(FINAL, F.lit(False)))
        return final.drop("__after", "__before").withColumn(PROGRESS, _timestamp(shown))

    def _resample_final(self, buffers: dict, overall: int | None, previous: int | None):
        """Up to when a continuous RESAMPLE's grid points are final (see :func:`_resample`):
        the input's progress, but no later than just past the stream's last row (punctuation
        or a heartbeat can promise more: the points after the last row exist only if a
        later row comes), and for ``'linear'`` no later than just past the last time below
        progress at which every interpolated column has had a value. Per key, each key's
        own bound (:meth:`_key_bounds`); under windows (whose instants hold every key's
        rows) the stalest key's."""
        if overall is None or self.plan.resample["keys"]:
            return overall
        bound = overall
        for series in self.plan.resample["series"]:
            if series["keys"]:  # a RESAMPLE per key under windows
                lowest = self._stalest_bound(buffers, overall, series)
                if lowest is None:
                    return previous  # no row yet: nothing is final
                bound = min(bound, lowest)
                continue
            last, *ends = buffers[series["input"]].agg(
                *self._series_ends(series, overall)).first()
            if last is None or any(v is None for v in ends):
                return previous  # no row (or some column has no value) yet: nothing is final
            bound = min([bound] + [e + 1 for e in ends])
            if self.plan.mode == "resample":
                # Under windows this bound is not applied: a stream closed by punctuation
                # still has its last window final (the grid points a row after the close
                # would add are not waited for -- the imputation's last bucket); so only a
                # 'linear' RESAMPLE under windows has a series to bound by.
                bound = min(bound, last + 1)
        return bound if previous is None else max(previous, bound)

    def _shown_progress(self, buffers: dict, overall: int | None) -> int | None:
        """The progress a consumer is told (``_progress``): ``overall``, but for a RESAMPLE
        per key no later than the smallest key's bound -- a key's points after its last row
        come only with its next row, which may be below ``overall`` (so a key that stops
        holds ``_progress`` back, not the other keys' rows, each final as it comes)."""
        if overall is None or self.plan.resample is None or not self.plan.resample["keys"]:
            return overall
        lowest = self._stalest_bound(buffers, overall, self.plan.resample["series"][0])
        return overall if lowest is None else min(overall, lowest)

    def _stalest_bound(self, buffers: dict, overall: int, series: dict) -> int | None:
        """The smallest of a per-key series' key bounds (None: no key has a row)."""
        from pyspark.sql import functions as F

        return self._key_bounds(buffers[series["input"]], overall, series).agg(
            F.min(_BOUND)).first()[0]

    def _series_ends(self, series: dict, below: int | None) -> list:
        """Aggregates of a RESAMPLE series' last row time and ('linear') each interpolated
        column's last value time below ``below``: the points after them are not final."""
        from pyspark.sql import functions as F

        stream = next(i.stream for i in self.inputs if i.stream.key == series["input"])
        ts = F.unix_micros(F.col(quote(stream.event_time)))
        columns = series["numeric"] if series["method"] == "linear" else []
        under = ts < F.lit(below) if below is not None else F.lit(False)
        return [F.max(ts).alias("__wavesql_last")] + [
            F.max(F.when(F.col(quote(c)).isNotNull() & under, ts)).alias(f"__wavesql_end{i}")
            for i, c in enumerate(columns)]

    def _release_bounds(self) -> None:
        """Unpersist and forget the per-key bounds :meth:`_key_bounds` cached this batch."""
        for _, bounds in self._bounds.values():
            bounds.unpersist()
        self._bounds = {}

    def _key_bounds(self, buf, bound: int | None, series: dict):
        """Per key of a RESAMPLE ``PARTITION BY``: the bound below which its points are final
        (``_BOUND``: ``bound``, just past its last row and, ``'linear'``, past each column's
        last value below ``bound``; NULL: none final). A column without a value below
        ``bound`` bounds nothing: its points below ``bound`` precede its first value, NULL
        whatever comes.
        Computed once per batch and buffer (it is asked for the progress, the results and
        the pruning), persisted until the batch ends."""
        from pyspark.sql import functions as F

        memo = (id(buf), bound, id(series))
        if memo in self._bounds:
            return self._bounds[memo][1]
        keys = [F.col(quote(k)) for k in series["keys"]]
        ends = buf.groupBy(*keys).agg(*self._series_ends(series, bound))
        parts = [F.col(quote(c)) + F.lit(1) for c in ends.columns[len(keys):]]  # (not keys)
        top = F.least(F.lit(bound), *parts) if bound is not None else F.lit(None)
        out = ends.select(*keys, top.cast("bigint").alias(_BOUND)).persist()
        self._bounds[memo] = (buf, out)  # (buf kept alive: its id must not be reused)
        return out

    def _asof_split(self, buffers: dict, progress: dict) -> dict:
        """The streams to evaluate a continuous ASOF JOIN over now (the left rows whose match
        is final, all kept right rows); ``buffers`` is updated to what is kept (see
        :func:`_asof_join`)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        asof = self.plan.asof
        kl, kr = asof["left"], asof["right"]
        left = next(i.stream for i in self.inputs if i.stream.key == kl)
        right = next(i.stream for i in self.inputs if i.stream.key == kr)
        lt = F.unix_micros(F.col(quote(left.event_time)))
        rt = F.unix_micros(F.col(quote(right.event_time)))
        done = progress[kr]["progress"]
        candidates = buffers[kl]
        if asof["direction"] == "forward":
            ready, waiting = self._forward_ready(candidates, buffers[kr], left, right, done)
        else:
            final = lt < F.lit(done) if done is not None else F.lit(False)
            ready, waiting = candidates.where(final), candidates.where(~final)
        everything = kept = buffers[kr]
        left_progress = progress[kl]["progress"]
        if asof["direction"] == "forward" and done is not None:
            # a waiting row's match is not below the right progress (none of its key lay
            # between it and there), a future row's not below the left progress: the right
            # rows from the smaller on -- however old the oldest waiting row
            if left_progress is not None:  # (no left progress yet: keep all)
                kept = kept.where(rt >= F.lit(min(left_progress, done)))
        elif bounds := [v for v in (left_progress, waiting.agg(F.min(lt)).first()[0])
                        if v is not None]:
            # the earliest time a waiting or future left row can have
            m = min(bounds)
            if asof["direction"] == "forward":  # its match is at or after it
                kept = kept.where(rt >= F.lit(m))
            else:  # the last right rows before m per key (ties kept: the batch rule breaks them)
                w = Window.partitionBy(*[F.col(quote(k)) for k in self.plan.asof["keys"]],
                                       rt < F.lit(m)).orderBy(rt.desc())
                kept = (kept.withColumn("__rank", F.rank().over(w))
                        .where((rt >= F.lit(m)) | (F.col("__rank") == 1)).drop("__rank"))
        buffers[kr], buffers[kl] = kept, waiting
        # the ready rows are matched against every right row there is: one of them may be
        # older than what is kept for the rows still to come
        return {kl: ready, kr: everything}

    def _forward_ready(self, candidates, right_rows, left, right, done):
        """(left rows whose forward match is final, the rest): a left row is ready when a
        right row of its key at (or, strict, after) its time is below the right progress."""
        from pyspark.sql import functions as F

        if done is None:
            return candidates.limit(0), candidates
        asof = self.plan.asof
        lt = F.unix_micros(F.col(quote(left.event_time)))
        names = [(f"__k{i}", r) for i, (_, r) in enumerate(asof["pairs"])]
        arrived = right_rows.where(F.unix_micros(F.col(quote(right.event_time))) < F.lit(done))
        matches = arrived.select(F.unix_micros(F.col(quote(right.event_time))).alias("__rt"),
                                 *[F.col(quote(r)).alias(n) for n, r in names])
        later = (F.col("__rt") >= lt) if asof["inclusive"] else (F.col("__rt") > lt)
        cond = later
        for (n, _), (l, _) in zip(names, asof["pairs"]):
            cond = cond & (F.col(quote(l)) == F.col(n))
        # a NULL key matches nothing, ever: final at once (an ASOF LEFT JOIN gives it NULL)
        unmatched = F.lit(False)
        for left_key, _ in asof["pairs"]:
            unmatched = unmatched | F.col(quote(left_key)).isNull()
        ready = candidates.join(matches, cond, "left_semi").unionByName(
            candidates.where(unmatched))
        return ready, candidates.where(~unmatched).join(matches, cond, "left_anti")

    def _sync_split(self, candidates, state: dict):
        """(rows to sync now, rows that keep waiting, the signal's state, its complete files
        placed) for a continuous SYNC JOIN.

        A control row is final once the recording covers its range: its end sample is at
        or before the end of the signal's complete files (files still being written do not
        count), or its range is NULL or reversed (NULL either way). The others wait in the
        buffer -- so state is the control rows the signal has not caught up with, however
        long the streams run. Files must arrive in timeline order: one that lands before
        the end already used would change results already delivered (``OUT_OF_ORDER_FILE``).
        """
        from pyspark.sql import functions as F

        from wavesql.planner.sync import sample_number

        sync = self.plan.sync
        s = sync.signal.signal
        placements = _complete_placements(s, self.clock())
        before = state.get("signal") or {"end": None, "files": None}
        end = max((p.end_sample for p in placements), default=None)
        if before["end"] is not None:
            if (end is None or end < before["end"]
                    or _fingerprint(placements, before["end"]) != before["files"]):
                raise WaveSQLError(
                    "OUT_OF_ORDER_FILE", f"signal `{s.name}`: the files up to sample "
                    f"{before['end']} changed after results over them were delivered (a file "
                    "arrived out of timeline order, or one was removed)",
                    hint="add a signal's files in time order; to redo the results, start the "
                         "query again with a new checkpoint")
        if end is None:
            signal_state = before
        else:
            signal_state = {"end": end, "files": _fingerprint(placements, end)}
        ranged = candidates.alias(sync.control_alias).select(
            "*", F.expr(sync.start_sql).alias("__a"), F.expr(sync.end_sql).alias("__b"))
        types = {f.name: f.dataType for f in ranged.schema.fields}
        s0 = sample_number(F.col("__a"), types["__a"], s.rate_hz, s.epoch_us)
        s1 = sample_number(F.col("__b"), types["__b"], s.rate_hz, s.epoch_us)
        ready = s0.isNull() | s1.isNull() | (s1 < s0)
        if end is not None:
            ready = ready | (s1 <= F.lit(end))
        marked = ranged.withColumn("__ready", ready).drop("__a", "__b")
        now = marked.where("__ready").drop("__ready")
        waiting = marked.where("NOT __ready").drop("__ready")
        return now, waiting, signal_state, placements

    def _arrivals(self, batch_id: int) -> list[float]:
        """Modification times (s since 1970) of the files this batch reads, from Spark's
        file-source log (streaming/files.py ``batch_files``) -- no Spark job needed."""
        from . import files

        return [ms / 1000.0 for i in range(len(self.inputs))
                for _, ms in files.batch_files(self.checkpoint, i, batch_id) if ms]

    def _deliver_counted(self, out, batch_id: int, report: BatchReport, by_final: bool) -> None:
        """:meth:`_deliver` ``out`` and set the report's rows out (``by_final``: counted per
        ``_final``; else every row is final)."""
        if not (self.emit_changes or callable(self.output) or self.output_format != "parquet"):
            # every row final, Parquet: computed once, by the write, counted from its files
            report.rows_out = report.final_out = sinks.parquet_rows(self._deliver(out, batch_id))
            return
        out = out.persist()
        if by_final:
            counted = {r[0]: r[1] for r in out.groupBy(FINAL).count().collect()}
            report.rows_out = sum(counted.values())
            report.final_out = counted.get(True, 0)
        else:
            report.rows_out = report.final_out = out.count()
        self._deliver(out, batch_id)
        out.unpersist()

    def _finish(self, report: BatchReport, began: float, arrived: list[float]) -> None:
        """Close a micro-batch's report (latency from its inputs' arrival, ``began`` its
        start on the monotonic clock), write its ``_progress`` record and keep it."""
        report.finished_at = self.clock()
        if arrived:
            report.latency_s = max(0.0, report.finished_at - min(arrived))
        report.seconds = time.monotonic() - began
        self._write_report(report)
        self.reports.append(report)

    def _deliver(self, out, batch_id: int) -> list[str]:
        """Hand the batch's result to the output: the user's function, or a batch folder
        committed whole (streaming/sinks.py: Spark's own commit moves files into place one
        by one, so a reader, or a process killed mid-write, would see part of a batch); a
        batch re-run after a crash replaces the earlier attempt, so each batch's rows
        appear once. Returns the batch's files."""
        if callable(self.output):
            self.output(out, batch_id)
            return []
        return sinks.commit(out, self.output, batch_id, self.output_format,
                            keep_replaced=self.keep_replaced)

    # -- state ---------------------------------------------------------------------------
    def _state_dir(self, batch_id: int) -> str:
        return storage.join(self.checkpoint, "state", f"{batch_id:09d}")

    def _load_state(self, batch_id: int | None) -> dict | None:
        """The committed state of the latest batch before ``batch_id`` (None: any)."""
        done = sorted((int(name) for name, is_dir in
                       storage.children(storage.join(self.checkpoint, "state"))
                       if is_dir and name.isdigit()), reverse=True)
        for b in done:
            if batch_id is not None and b >= batch_id:
                continue
            try:
                state = json.loads(storage.read_text(
                    storage.join(self._state_dir(b), "state.json")))
            except FileNotFoundError:
                continue  # a batch killed before its state was committed
            state["dir"] = self._state_dir(b)
            return state
        return None

    def _read_buffer(self, spark, inp: _Input, state: dict):
        schema = ir.Schema.of_columns(inp.stream.columns).ddl()
        if state.get("dir"):
            folder = storage.join(state["dir"], f"buffer_{inp.index}")
            if storage.is_dir(folder):
                return spark.read.schema(schema).parquet(folder)
        return spark.createDataFrame([], schema)

    def _write_state(self, spark, batch_id: int, buffers: dict, progress: dict,
                     overall: int | None, shown: int | None,
                     sync_state: dict | None = None) -> int:
        folder = self._state_dir(batch_id)
        # a re-run of this batch after a crash: redo it from scratch
        storage.delete(folder, recursive=True)
        kept = 0
        for inp in self.inputs:
            buf = self._prune(buffers[inp.stream.key], inp, overall, progress)
            where = storage.join(folder, f"buffer_{inp.index}")
            buf.write.parquet(where)
            kept += sinks.parquet_rows([e.location for e in sinks.data_files(where)])
        state = {"batch": batch_id, "progress": overall, "shown": shown, "inputs": progress}
        if sync_state is not None:
            state["signal"] = sync_state
        self._commit_state(batch_id, state)
        return kept

    def _commit_state(self, batch_id: int, state: dict) -> None:
        """Write ``state.json``, the commit point of a batch's state (whole or not at all:
        a rename locally, one object on a store), and keep the last two batches' state."""
        storage.write_text(storage.join(self._state_dir(batch_id), "state.json"),
                           json.dumps(state))
        for name, is_dir in storage.children(storage.join(self.checkpoint, "state")):
            if name.isdigit() and int(name) < batch_id - 1:
                storage.delete(storage.join(self.checkpoint, "state", name), recursive=True)

    def _prune(self, buf, inp: _Input, overall: int | None, progress: dict | None = None):
        """Keep the rows results at or after ``overall`` can still need (the look-back)."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        if self.plan.mode == "rows":
            return buf.limit(0)  # row-by-row queries keep nothing
        if self.plan.mode == "band":  # what the other side's future rows can still match
            _, other, offset = inp.lookback[0]
            bound = (progress or {}).get(other, {}).get("progress")
            if bound is None:
                return buf
            ts = F.unix_micros(F.col(quote(inp.stream.event_time)))
            return buf.where(ts >= F.lit(bound + offset))
        if self.plan.mode in ("sync", "asof"):
            return buf  # _sync_split / _asof_split kept exactly what later rows need
        if overall is None:
            return buf  # nothing is final yet
        ts = F.unix_micros(F.col(quote(inp.stream.event_time)))
        cut, added = F.lit(overall), []
        if self.plan.mode == "resample" and self.plan.resample["keys"]:
            # per key from its own bound on: its points not final yet need all its rows there
            # (for 'linear', every column's values between a column's last value and progress)
            series = self.plan.resample["series"][0]
            bounds = self._key_bounds(buf, overall, series)
            on = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"b.{quote(k)}")) for k in series["keys"]]
            buf = buf.alias("r").join(bounds.alias("b"), on, "left").select(
                "r.*", F.col(f"b.{_BOUND}").alias("__wavesql_cut"))
            cut, added = F.col("__wavesql_cut"), ["__wavesql_cut"]
        old = ts < cut
        keep = ~old
        ranks = []
        for i, rule in enumerate(inp.lookback):
            if rule[0] == "time":
                keep = keep | (ts >= F.lit(overall - rule[1]))
                continue
            # the last n rows before progress - t (t: a nested window's time look-back,
            # whose rows from progress - t on are all kept), per key
            _, keys, n, passes = rule[:4]
            t_us = rule[4] if len(rule) > 4 else 0
            if t_us:
                keep = keep | (ts >= cut - F.lit(t_us))
            old = ts < cut - F.lit(t_us)
            counted = F.coalesce(F.expr(passes), F.lit(False)) if passes else F.lit(True)
            order = [ts.desc()] + [F.col(quote(c.name)).desc_nulls_last()
                                   for c in inp.stream.columns if "map<" not in c.type.lower()]
            w = Window.partitionBy(*[F.expr(k) for k in keys], old, counted).orderBy(*order)
            buf = buf.withColumn(f"__rank{i}", F.row_number().over(w))
            keep = keep | (old & counted & (F.col(f"__rank{i}") <= F.lit(n)))
            ranks.append(f"__rank{i}")
        return buf.where(keep).drop(*ranks, *added)

    def _write_report(self, report: BatchReport) -> None:
        """Progress next to the output, so a reader can tell complete from incomplete."""
        if callable(self.output):
            return
        storage.write_text(storage.join(self.output, "_progress",
                                        f"batch={report.batch:09d}.json"),
                           json.dumps(asdict(report)))


def await_timeout_seconds() -> float | None:
    """The default bound on :meth:`ContinuousQuery.await_termination` (None: unbounded)."""
    text = os.environ.get("WAVESQL_AWAIT_TIMEOUT_SECONDS", "").strip()
    try:
        value = float(text) if text else 0.0
    except ValueError:
        raise WaveSQLError("INVALID_OPTION", f"WAVESQL_AWAIT_TIMEOUT_SECONDS={text!r} is not a "
                           "number of seconds") from None
    return value if value > 0 else None


def _reader_settings(s: cat.StreamDef) -> tuple[str, dict]:
    """(schema DDL, reader options) a continuous query reads stream ``s``'s files with."""
    options = stream_reader_options(s)
    ddl = ir.Schema.of_columns(s.columns).ddl()
    if bad_rows.applies(s, options):
        # malformed CSV/JSON rows are marked, then quarantined (planner/bad_rows.py)
        options.update(bad_rows.reader_options(s.format))
        ddl = bad_rows.schema_ddl(ddl, s.format)
    return ddl, options


def _by_kind(stats) -> dict:
    """Per-kind facts of a batch's rows (summed/maxed over partitions when per partition)."""
    out: dict = {}
    for r in stats:
        have = out.get(r["__kind"])
        if have is None:
            out[r["__kind"]] = {"n": r["n"], "max_ts": r["max_ts"], "punct": r["punct"]}
            continue
        have["n"] += r["n"]
        for key in ("max_ts", "punct"):
            values = [v for v in (have[key], r[key]) if v is not None]
            have[key] = max(values) if values else None
    return out


def _partition_facts(before: dict | None, stats, partitions: list[int]) -> dict:
    """Each Kafka partition's largest on-time event time and latest punctuation, after
    this batch (keys are partition numbers as text: the state is JSON)."""
    facts = {k: dict(v) for k, v in (before or {}).items()}
    for p in partitions:
        facts.setdefault(str(p), {"max_ts": None, "punct": None})
    for r in stats:
        field_name = {"on_time": "max_ts", "punctuation": "punct"}.get(r["__kind"])
        if field_name is None or r["_partition"] is None:
            continue
        mine = facts.setdefault(str(r["_partition"]), {"max_ts": None, "punct": None})
        value = r[field_name]
        if value is not None and (mine[field_name] is None or value > mine[field_name]):
            mine[field_name] = value
    return facts


def _least_promise(partitions: dict, watermark_us: int) -> int | None:
    """What every partition has promised (its largest event time minus the watermark, or
    its punctuation): the minimum; None while some partition has promised nothing."""
    promises = []
    for facts in partitions.values():
        mine = [v for v in (facts["max_ts"] - watermark_us if facts["max_ts"] is not None
                            else None, facts["punct"]) if v is not None]
        if not mine:
            return None
        promises.append(max(mine))
    return min(promises) if promises else None


def stream_source(spark, s: cat.StreamDef, max_files: int | None = None,
                  partition: int | None = None):
    """Stream ``s`` read live: its columns, the corrupt-record column of a text format, and
    ``__file`` (the file a row came from; a Kafka record's ``kafka:<topic>/<p>/<offset>``).

    A Kafka stream is read through Spark's Kafka source (its offsets in the query's
    checkpoint), ``partition`` alone when given; ``max_files`` (files per micro-batch)
    does not apply to it (its OPTIONS may set ``maxOffsetsPerTrigger``)."""
    from pyspark.sql import functions as F

    from wavesql.sources import kafka

    if s.source == "kafka":
        return kafka.parse(kafka.load(spark, s, streaming=True, partition=partition), s)
    ddl, options = _reader_settings(s)
    reader = spark.readStream.format(s.format).schema(ddl).options(**options)
    if max_files is not None:
        reader = reader.option("maxFilesPerTrigger", str(max_files))
    return reader.load(s.path).withColumn("__file", F.input_file_name())


def _belongs(uri: str, stream_path: str) -> bool:
    """Whether the file ``uri`` (from Spark's file log) is one of ``stream_path``'s."""
    import fnmatch

    from .files import local_path

    path = local_path(uri)
    if path is None:
        return False
    root = os.path.abspath(stream_path)
    path = os.path.abspath(path)
    if any(ch in root for ch in "*?["):
        return fnmatch.fnmatch(path, root) or fnmatch.fnmatch(os.path.dirname(path), root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class _Held:
    """Release an already acquired lock on leaving the block."""

    def __init__(self, lock):
        self.lock = lock

    def __enter__(self):
        return self.lock

    def __exit__(self, *exc):
        self.lock.release()


class _Stopping(RuntimeError):
    """Raised in a micro-batch that starts while stop() is under way (never recorded)."""


def _timestamp(us: int | None):
    from pyspark.sql import functions as F

    if us is None:
        return F.lit(None).cast("timestamp")
    return F.timestamp_micros(F.lit(us))


def _mtime(path: str | None) -> float | None:
    """Modification time (s since 1970) of a local file or ``file:`` URI, else None."""
    if not path:
        return None
    from urllib.parse import unquote, urlparse

    if "://" in path or path.startswith("file:"):
        parsed = urlparse(path)
        if parsed.scheme not in ("file", ""):
            return None
        path = unquote(parsed.path)
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _fmt(us: int | None) -> str:
    if us is None:
        return "none"
    import datetime as dt

    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=us)).isoformat()
