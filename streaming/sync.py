"""A continuous SYNC JOIN: a control stream's rows, each synced with a signal's samples
once the recording covers its range -- or with several signals' (``SYNC JOIN a ON RANGE
(...) SYNC JOIN b ON RANGE (...)``, file or Kafka signals at any rates), once every one
covers its.

The control is a catalog stream read row by row, or a view, CTE or subquery that is row by
row over one (filters, projections, computed range bounds: :func:`_control_stream`): the
buffer keeps the stream's rows, and a stream row waits exactly while a control row made
from it waits (:func:`control_ranges`, :func:`release`). For signals stored as files -- WAV,
or a table's CSV, Parquet or JSON rows (sources/table_stream.py) --, each signal's folder is
watched too (Spark's binaryFile source over :func:`watch_path`, so that a new file runs a
micro-batch); a signal read from Kafka has its topic watched, its blocks placed and indexed
by :mod:`.kafka_sync`; a signal defined by a query has the folder of the stream its query
is row by row over watched, that stream's files indexed by :mod:`.query_sync`. File, Kafka
and query signals mix freely in one query. Each micro-batch the
re-evaluating runner (:mod:`.runner`) splits the control rows it keeps with
:func:`split_signals`: those every signal now covers -- by its complete files (complete and
placed as the signal's continuous reader decides: :func:`.sync_state.complete_placements`),
or by the blocks below which no Kafka block can still come -- are synced, read from those
very files and blocks, and final; the others wait in its buffer. The state records, per
signal, how far its files went and what they were (a digest: :mod:`.sync_state`), so that
a file arriving out of timeline order fails the query rather than changing results already
delivered -- or a Kafka signal's coverage and index (a late block is quarantined).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlglot import exp

from wavesql import storage
from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner.segment_stage import KEYED_STATE, refuse_pending_continuously

from .plan import Input, Plan, carrying, check_row_by_row, parsed, row_by_row_stream


def plan_sync(root: ir.Relation, syncs: list, stmt) -> Plan:
    """A continuous SYNC JOIN: its control is a catalog stream read row by row -- or a view,
    CTE or subquery that is row by row over one (:func:`_control_stream`); the signal's
    folder (WAV files or a table's rows) is watched, and each control row is synced once
    the recording covers its range (:func:`sync_split`). Several SYNC JOINs of one SELECT
    (one control, a signal each, each with its own range and rate, files or Kafka) run
    too: a control row is synced once every signal covers its range. Signal functions
    over the synced segments in the same query are row by row too (each row's segment a
    signal of its own); windows around it are not."""
    for rel in ir.walk(root):  # (checked first: a window copies the SYNC it is over)
        if isinstance(rel, _WINDOWS) and any(isinstance(r, ir.SyncJoin) for r in ir.walk(rel)):
            raise _windows_around(stmt, syncs)
    if _windowed_control(stmt):  # (one SELECT: streaming/derived_over.py cuts what it can)
        raise _windows_around(stmt, syncs)
    chain = _chain(syncs, stmt)
    sync = chain[0]
    stream = _control_stream(sync.control, stmt)
    for each in chain:
        _check_signal(each, stmt)
    if stream.event_time is None:
        raise WaveSQLError("STREAMING_RULE", f"stream `{stream.name}` has no EVENT TIME",
                           Span.of(stmt.node), hint="a continuous query needs event time to "
                           "know which rows are late: CREATE OR REPLACE STREAM ... EVENT TIME "
                           "ts WATERMARK 5 SECONDS")
    for rel in _outside(root, sync.control):
        if isinstance(rel, ir.SignalStage) and (rel.state in ("per_row", "per_key")
                                                 or not rel.program.stateful):
            # signal functions over each synced row's own segments (a stateful one from
            # rest at its first sample, planner/segment_stage.py): row by row, final with
            # the row; or OVER (PARTITION BY k) along each key's ranges, each key's state
            # kept in the SYNC's state between micro-batches (split_signals) -- but not a
            # detector's range open at a key's last range (refused before anything runs)
            if rel.state == "per_key":
                refuse_pending_continuously(rel.program, Span.of(stmt.node))
            continue
        if isinstance(rel, (*_WINDOWS, ir.SignalStage)):
            raise _windows_around(stmt, syncs)
        if isinstance(rel, ir.SqlQuery):
            tree = parsed(rel)
            if tree is not None:
                if any(not _signal_function(w.this) for w in tree.find_all(exp.Window)):
                    # OVER windows over the synced rows: this runner keeps nothing between
                    # batches, so a row's window would hold only its batch's rows (any
                    # window function -- sqlglot leaves try_avg, every, ... Anonymous too)
                    raise _windows_around(stmt, syncs)
                check_row_by_row(tree, stmt)
    return Plan((Input(0, stream),), "sync", None, sync=sync, syncs=tuple(chain))


def _signal_function(call) -> bool:
    """``call`` is a signal function's (whose ``OVER (PARTITION BY k)`` is its own state)."""
    from wavesql.udfs import registry

    return isinstance(call, exp.Anonymous) and registry.lookup(call.name) is not None


def _windowed_control(stmt) -> bool:
    """A SELECT of ``stmt`` SYNC JOINs a control with a CQL window on it (``FROM ctl c
    [RANGE 2 SECONDS] SYNC JOIN ...``): windows around the SYNC in its own SELECT."""
    return any(isinstance(s.args.get("from_"), exp.From)
               and isinstance(s.args["from_"].this, exp.Table)
               and s.args["from_"].this.args.get("window") is not None
               and any(j.args.get("sync") for j in s.args.get("joins") or [])
               for s in stmt.node.find_all(exp.Select))


#: The relations that window their input: around a continuous SYNC, not implemented.
_WINDOWS = (ir.WindowScan, ir.StreamOf, ir.Rewindow)


def _windows_around(stmt, syncs=()) -> WaveSQLError:
    # (why here: a synced row waits until the recording covers its range, so it comes
    # after rows synced before it; windows over a SYNC CTE close on that part's own
    # progress, held back to its waiting rows: streaming/derived.py)
    stream, column = "ctl", "t0"  # (the control stream's names, when it is one)
    try:
        control = _control_stream(_chain(list(syncs), stmt)[0].control, stmt)
        if control.event_time is not None:
            stream, column = control.name, control.event_time
    except (WaveSQLError, StopIteration, IndexError):
        pass
    return WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN with windows, "
                        "aggregates, OVER windows, or signal functions carrying state from "
                        "one synced row to the next, around it in this form: they run over a "
                        "SYNC CTE, subquery or view that passes its control stream's EVENT "
                        "TIME through, and in the SYNC's own SELECT when every column "
                        "computed from the synced rows is named and the control is a "
                        "catalog stream, or a view, CTE or subquery filtering one (a synced row "
                        "waits for the recording, so it can "
                        "come after the control's progress)",
                        Span.of(stmt.node), hint=f"name each such column (avg(seg_rms(m.ch1)) "
                        f"AS r; no *) in one SELECT FROM {stream} c [RANGE ...] SYNC JOIN ...; "
                        f"or SYNC in a CTE passing the EVENT TIME through (WITH s AS (SELECT "
                        f"c.{column} AS t, ... FROM {stream} c SYNC JOIN ...)) and window s's "
                        "rows in the rest of the query")


def _chain(syncs: list, stmt) -> list:
    """The SYNC JOINs of one SELECT, first to last (each later one's control is the one
    before it: planner/analyze/sync.py chains them); SYNCs in different SELECTs are
    refused."""
    outermost = next(s for s in syncs if not any(o is not s and any(
        r is s for r in ir.walk(o)) for o in syncs))
    chain, rel = [], outermost
    while isinstance(rel, ir.SyncJoin):
        chain.append(rel)
        rel = rel.control
    if len(chain) != len(syncs):
        raise WaveSQLError("NOT_IMPLEMENTED", "SYNC JOINs in different SELECTs of one "
                           "continuous query", Span.of(stmt.node),
                           hint="SYNC every signal in one SELECT over the control: FROM c "
                                "SYNC JOIN a ON RANGE (...) SYNC JOIN b ON RANGE (...)")
    return chain[::-1]


def _check_signal(sync: ir.SyncJoin, stmt) -> None:
    """A signal a continuous SYNC can watch: a folder of WAV files or of a table's CSV,
    Parquet or JSON files, a Kafka topic of sample blocks, or a query row by row over one
    catalog stream of files (that it is: :func:`.query_sync.stream_of`, when the query
    starts); the signal itself, not its processed segments."""
    from wavesql.sources.table_signal import FORMATS

    signal = sync.signal.signal
    if not ((signal.source == "files" and signal.format in ("wav", *FORMATS))
            or (signal.source == "kafka" and signal.format == "samples")
            or signal.source == "query"):  # its stream is checked when the query starts
        what = f"{signal.format} from {'Kafka' if signal.source == 'kafka' else 'files'}"
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN watches a signal's "
                           "folder of WAV, CSV, Parquet or JSON files, its Kafka topic of "
                           "sample blocks, or the stream of files its query is row by row "
                           f"over; `{signal.name}` is {what}", Span.of(stmt.node),
                           hint="run the SYNC as a batch query (or a scheduled query file)")
    if sync.signal.program is not None:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous SYNC JOIN over a signal's "
                           "processed segments", Span.of(stmt.node),
                           hint="SYNC over the signal itself; apply signal functions to "
                                "the synced segments in a query over the results")


def _outside(root: ir.Relation, control: ir.Relation):
    """The relations of ``root``, pre-order, without ``control``'s subtree."""
    if root is control:
        return
    yield root
    for child in root.children():
        yield from _outside(child, control)


def _control_stream(control: ir.Relation, stmt) -> cat.StreamDef:
    """The catalog stream a continuous SYNC JOIN's control reads: the stream itself, or one
    stream under a view, CTE or subquery that is row by row over it
    (:func:`.plan.row_by_row_stream`). A stream row then waits in the buffer exactly while
    a control row made from it waits for the signal (:func:`sync_split`).

    Event time is not needed in the control's columns: a control row is final when the
    signal covers its range, and a stream row is late by the stream's own EVENT TIME before
    the view is applied."""
    return row_by_row_stream(
        control, stmt, "a continuous SYNC JOIN's control",
        "SYNC over a view (or CTE, subquery) that filters, projects and computes columns of "
        "one catalog stream's rows; compute anything across rows in a continuous query of "
        "its own into a stream, and SYNC over that stream")


@dataclass
class Split:
    """A micro-batch of a continuous SYNC JOIN, split (:func:`split_signals`)."""

    ready: object  # control stream rows to sync now (DataFrame)
    waiting: object  # control stream rows that keep waiting
    state: dict  # the signals' state for the next micro-batch (sync_state.to_state)
    inputs: dict  # what the batch SYNC reads of each signal, as planner/lower.py's Runtime
    #             # streams take it: ("placements", key) -> files, ("signal", key) -> segments
    blocks: int = 0  # the batch's records of the Kafka signals' topics
    quarantined: int = 0  # ... of them quarantined
    quarantine: list = field(default_factory=list)  # their quarantine records (DataFrames)
    cached: list = field(default_factory=list)  # persisted for the batch: unpersist after
    #: the query signals' new rows (their query's rows of the stream's new files) ...
    rows: int = 0
    late: int = 0  # ... of them late (below the samples already used) ...
    late_records: list = field(default_factory=list)  # ... and their late-sink records
    #: each file signal's end sample the rows synced now are within (``split_signals``'s
    #: ``ends``: a re-run's cap)
    ends: dict = field(default_factory=dict)


def sync_split(plan: Plan, candidates, state: dict, at: float, catalog=None,
               max_files: int | None = None):
    """(rows to sync now, rows that keep waiting, the signals' state, each signal's complete
    files placed, by signal key) for a continuous SYNC JOIN over file signals (and signals
    defined by a query, given the ``catalog``): the :func:`split_signals` of a micro-batch
    without Kafka signals."""
    got = split_signals(candidates.sparkSession, plan, candidates, state, at,
                        catalog=catalog, max_files=max_files)
    placements = {k: v for (kind, k), v in got.inputs.items() if kind == "placements"}
    return got.ready, got.waiting, got.state, placements


def split_signals(spark, plan: Plan, candidates, state: dict, at: float,
                  blocks: dict | None = None, catalog=None, batch_id: int = 0,
                  max_files: int | None = None, hold: tuple | None = None,
                  ends: dict | None = None) -> Split:
    """The micro-batch ``batch_id``'s control stream rows ``candidates`` split for a
    continuous SYNC JOIN, its file signals' files judged complete at wall-clock time ``at``,
    each Kafka signal's new sample blocks ``blocks[signal key]`` (watch rows:
    streaming/kafka_sync.py) and each signal defined by a query indexed over its stream's
    new complete files (:mod:`.query_sync`; its query bound in ``catalog``; at most
    ``max_files`` of them, the query's ``max_files_per_trigger``).

    A control row is final once the recording covers its range -- every signal it is
    SYNCed with, each over its own range at its own rate: for a signal of files, its end
    sample is at or before the end of that signal's complete files (files still being
    written do not count); for a Kafka signal, at or before the sample up to which no
    block can still come (:mod:`.kafka_sync`); for a signal defined by a query, at or
    before the end of the samples its stream's complete files gave (:mod:`.query_sync`:
    a late row is sent to the late sink); or the range is NULL or reversed (NULL segments
    either way). The others wait in the buffer -- so state is the control rows
    some signal has not caught up with, however long the streams run. A signal's files
    must arrive in timeline order: one that lands before the end already used would
    change results already delivered (``OUT_OF_ORDER_FILE``, :mod:`.sync_state`); a Kafka
    block that could is quarantined (late), with the signal's name.

    The rows synced now read, of each Kafka signal, only the offsets their ranges need
    (through its index); of each signal defined by a query, the stream's files their
    ranges touch (through its index); of each file signal, the complete files placed here.

    ``hold`` -- ``(event-time column, progress)`` of a query with per-key state
    (:func:`keeps_key_state`) -- also keeps waiting every control stream row whose event
    time the control's progress (µs, None: none yet) has not passed: a key's rows must
    reach its state in range order, and that order is known only once no row can still
    come before them (:func:`hold_for_keys`). ``ends`` (signal key -> end sample, or None)
    -- the first attempt's ``Split.ends`` when a per-key batch is re-run -- caps what each
    file signal covers: a file completed since would release rows the first attempt kept
    waiting, and such a row may sort before a delivered row of its key and change its
    values (its state); it waits for the next batch instead.
    """
    from pyspark.sql import functions as F

    from wavesql.planner.sync import sample_number

    from . import kafka_sync, query_sync, sync_state

    chain = plan.syncs or (plan.sync,)
    signals = sync_state.signals_of(chain)
    before = sync_state.records(state, signals)
    after, inputs, kafka, queried = {}, {}, {}, set()
    got = Split(None, None, {}, inputs)
    for s in signals:
        if sync_state.kind_of(s) == "query":
            q = query_sync.advance(spark, catalog, s, before[s.key], at, batch_id,
                                   max_files)
            after[s.key] = q.record
            queried.add(s.key)
            got.rows += q.report.rows_in
            got.late += q.report.late
            got.late_records += q.late
        elif sync_state.is_kafka(s):
            kafka[s.key] = k = kafka_sync.advance(spark, s, before[s.key], blocks[s.key])
            got.blocks += k.blocks
            got.quarantined += k.quarantined
            if k.quarantine is not None:
                got.quarantine.append(k.quarantine)
        else:
            after[s.key], inputs[("placements", s.key)] = sync_state.advance(
                s, before[s.key], at)
    held = None
    if hold is not None:
        candidates, held = hold_for_keys(candidates, *hold)
    keyed, ranged = control_ranges(plan.sync, candidates, chain)
    types = {f.name: f.dataType for f in ranged.schema.fields}
    ready, helpers, asks = F.lit(True), [], {}
    for i, each in enumerate(chain):
        s = each.signal.signal
        a, b = f"__a{i}" if i else "__a", f"__b{i}" if i else "__b"
        s0 = sample_number(F.col(a), types[a], s.rate_hz, s.epoch_us)
        s1 = sample_number(F.col(b), types[b], s.rate_hz, s.epoch_us)
        helpers += [a, b]
        if s.key in kafka or s.key in queried:  # its sample range: what to read
            ranged = ranged.withColumn(f"__s0_{i}", s0).withColumn(f"__s1_{i}", s1)
            asks.setdefault(s.key, []).append((f"__s0_{i}", f"__s1_{i}"))
            helpers += [f"__s0_{i}", f"__s1_{i}"]
        if s.key in kafka:
            ready = ready & kafka_sync.covers(kafka[s.key].covered, s0, s1)
            continue
        covered = s0.isNull() | s1.isNull() | (s1 < s0)
        end = after[s.key]["end"]
        if ends is not None and s.key in ends:
            end = None if end is None or ends[s.key] is None else min(end, ends[s.key])
        got.ends[s.key] = end
        if end is not None:
            covered = covered | (s1 <= F.lit(end))
        ready = ready & covered
    marked = ranged.withColumn("__ready", ready)
    if asks:  # read twice: the rows synced now and the ranges they ask for
        marked = marked.persist()
        got.cached.append(marked)
    got.ready, got.waiting, synced = release(keyed, marked, helpers)
    if held is not None:
        got.waiting = got.waiting.unionByName(held)
    if asks:
        columns = [c for pairs in asks.values() for pair in pairs for c in pair]
        rows = synced.select(*columns).distinct().collect()
        for key, k in kafka.items():
            signal = next(s for s in signals if s.key == key)
            wanted = kafka_sync.asked(rows, asks[key])
            inputs[("signal", key)] = k.timeline.segments(spark, signal, wanted)
            after[key] = k.timeline.state()
        for key in queried:
            signal = next(s for s in signals if s.key == key)
            inputs[("signal", key)] = query_sync.segments(
                spark, catalog, signal, after[key], kafka_sync.asked(rows, asks[key]))
    got.state = sync_state.to_state(after)
    # stateful functions OVER (PARTITION BY k) over the synced rows: each key's state from
    # the last micro-batch in, its state after this one written into got.state when the
    # batch plan is lowered (planner/segment_stage.py, KEYED_STATE), before it is committed
    kept = state.get("signal") if isinstance(state.get("signal"), dict) else {}
    inputs[KEYED_STATE] = {"in": dict(kept.get("keyed") or {}), "state": got.state}
    return got


def keeps_key_state(statement) -> bool:
    """Whether a continuous SYNC query (its bound ``statement``) runs stateful signal
    functions ``OVER (PARTITION BY k)`` along each key's synced ranges: then its control
    rows wait for the control's progress too (:func:`hold_for_keys`). A row-by-row SYNC
    query releases each row as soon as the recording covers it."""
    roots = (statement.relations() if isinstance(statement, ir.Statement)
             else (statement,))
    return any(isinstance(r, ir.SignalStage) and r.state == "per_key" and r.program.stateful
               for rel in roots for r in ir.walk(rel))


def hold_for_keys(candidates, event_time: str, progress: int | None):
    """``(passed, held)``: the control stream rows whose event time is below ``progress``
    (µs; None: no row has passed) and the others.

    Per key, the state runs along the key's ranges in start order, each sample once, and
    a range the state went past cannot be run any more. The rows of a stream come in any
    order within its watermark: the order of a key's rows is known only once the stream's
    progress passed them (the out-of-order-processing rule: no row with an earlier event
    time can still come). So a per-key query syncs a row only then, and the stage takes
    the key's rows of a micro-batch in range order (planner/segment_stage.py): rows that
    came out of order within the watermark reach the state in order. The rows held are
    at or above progress, so the query's ``_progress`` (held back to the earliest waiting
    row: runner.py ``_sync_progress``) stays the control's."""
    from pyspark.sql import functions as F

    from wavesql.sqltext import quote

    if progress is None:
        return candidates.limit(0), candidates
    passed = F.unix_micros(F.col(quote(event_time))) < F.lit(progress)
    return candidates.where(passed), candidates.where(~passed)


#: A control stream row's identity while its micro-batch is split, when the control is a
#: view over the stream (:func:`control_ranges`): a hash of all its columns. Equal rows make
#: equal control rows, so they may share it; two different rows that collide only wait
#: for each other.
RID = "__wavesql_rid"


def control_ranges(sync: ir.SyncJoin, candidates, chain=()):
    """``(keyed, ranged)``: ``ranged`` is the control rows made from ``candidates`` (rows of
    the control stream) with their range bounds as ``__a`` and ``__b`` -- and, given the
    ``chain`` of SYNC JOINs of the SELECT (``sync`` first), the later ones' bounds as
    ``__a1``, ``__b1``, ... (each over the same control row); when the control is the
    stream itself, they are the candidates row for row and ``keyed`` is None; else (a
    view, CTE or subquery row by row over it, :func:`_control_stream`) ``keyed`` is the
    candidates with their :data:`RID`, which each control row carries from the stream row
    it was made from (:func:`.plan.carrying`)."""
    from pyspark.sql import functions as F

    from wavesql.planner.lower import Runtime, lower_relation

    if isinstance(sync.control, ir.StreamScan):
        keyed, rows = None, candidates
    else:
        keyed = candidates.withColumn(RID, _row_hash(candidates))
        stream = next(r.stream for r in ir.walk(sync.control) if isinstance(r, ir.StreamScan))
        rt = Runtime(candidates.sparkSession, None, streams={stream.key: keyed})
        rows = lower_relation(carrying(sync.control, ((RID, "bigint"),)), rt)
    bounds = [F.expr(sync.start_sql).alias("__a"), F.expr(sync.end_sql).alias("__b")]
    for i, later in enumerate(chain[1:], start=1):
        # each SYNC's range is over the control's columns (its alias is the control's)
        bounds += [F.expr(later.start_sql).alias(f"__a{i}"),
                   F.expr(later.end_sql).alias(f"__b{i}")]
    ranged = rows.alias(sync.control_alias).select("*", *bounds)
    return keyed, ranged


def release(keyed, marked, helpers: list):
    """``(now, waiting, synced)``: the control stream's rows to sync now and those that keep
    waiting (without the ``helpers`` columns), and the rows of ``marked`` synced now, from
    ``marked`` -- :func:`control_ranges`' ranged rows with a boolean ``__ready``. A stream row
    waits while any control row made from it waits (a view may make several, or none: then
    it is released, and makes nothing)."""
    drop = ["__ready", *helpers]
    if keyed is None:
        synced = marked.where("__ready")
        return synced.drop(*drop), marked.where("NOT __ready").drop(*drop), synced
    waits = marked.where("NOT __ready").select(RID).distinct()
    return (keyed.join(waits, RID, "left_anti").drop(RID),
            keyed.join(waits, RID, "left_semi").drop(RID),
            marked.join(waits, RID, "left_anti"))


def _row_hash(frame):
    """:data:`RID` of each row: a 64-bit hash of all its columns (a map, which Spark cannot
    hash, as its JSON)."""
    from pyspark.sql import functions as F

    from wavesql.sqltext import quote

    cols = [F.to_json(F.col(quote(f.name))) if "map<" in f.dataType.simpleString()
            else F.col(quote(f.name)) for f in frame.schema.fields]
    return F.xxhash64(*cols)


def watch_path(path: str) -> str:
    """What Spark's file source lists for a signal's FROM path: its folder (a single file's
    folder, filtered by :func:`watch_glob`) or its glob."""
    if storage.is_dir(path) or storage.has_magic(path):
        return path
    return storage.dirname(path) or "."


def watch_glob(signal: cat.SignalDef | cat.StreamDef) -> str:
    """The file names a signal's (or a stream's) folder watch lists (any case): its
    format's suffixes."""
    from wavesql.sources.table_signal import SUFFIXES

    def any_case(suffix: str) -> str:
        return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in suffix)

    suffixes = [any_case(s) for s in SUFFIXES.get(signal.format, (".wav",))]
    return "*" + (suffixes[0] if len(suffixes) == 1 else "{" + ",".join(suffixes) + "}")
