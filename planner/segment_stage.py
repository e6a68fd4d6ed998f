"""Signal functions over segments that are values: a view's, a subquery's, a SYNC result's.

planner/signals.py binds them into an :class:`~.ir.SignalStage`; :func:`stage_frame` runs its
program over the input's rows in a ``mapInArrow`` -- in parallel where no state crosses
rows, in one ordered pass where it does, per key with ``f(...) OVER (PARTITION BY k)``.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.errors import Span, WaveSQLError
from wavesql.sqltext import JSON_OPTIONS, quote

from . import ir


def refuse_row_order(select: exp.Select) -> None:
    """Stateful functions over a SYNC result's segments: what state does a row start from?

    A SYNC result row is the excerpt ``[start, end)`` its control row asked for. The
    ranges may overlap, repeat, leave gaps between them or come in any order, so they are
    not one sequence of samples a filter's state could be carried along (and carrying it
    from the rows the query happens to keep would make a row's value depend on the *other*
    control rows and on the WHERE). So each row's segment is a signal of its own, as the
    issue's "segments are values" asks: a filter starts from rest at the range's first
    sample (scipy's ``sosfilt(sos, x[a:b])``), a detector's range still open at the range's
    end is closed there -- each row depends on its own range only, and rows run in
    parallel. (The whole-signal filter cut to the range is a different value: a filter
    applied where the signal is read, before the range is cut.)

    A stateful function whose state runs over *rows* -- ``cfar`` takes one score per row --
    needs an order of the rows, which a SYNC result does not have: refused here, at the
    call, rather than given the rows in whatever order Spark hands them over. The user who
    means the ranges as one sequence per key says so with ``OVER (PARTITION BY k)``
    (:func:`refuse_pending_per_key`).
    """
    from wavesql.udfs import registry

    for call in select.find_all(exp.Anonymous):
        fn = registry.lookup(call.name)
        if fn is None or not fn.stateful or not fn.params or fn.params[0].type == "sigseg":
            continue
        raise WaveSQLError(
            "UNDEFINED_ORDER", f"`{fn.name}` carries its state from row to row, and the rows "
            "of a SYNC result have no order (each is one control row's range; ranges may "
            "overlap or repeat)", Span.of(call),
            hint=f"{fn.name}(...) OVER (PARTITION BY <control column>) takes each key's "
                 "ranges in start order; or run it over the signal's own windows (SELECT "
                 f"... FROM <signal> [SAMPLES n] WHERE {fn.name}(...)), or over the rows of "
                 "a subquery, which are taken in order of their first channel's start sample")


def refuse_pending_per_key(select: exp.Select, keys: tuple[str, ...]) -> None:
    """Stateful functions over a SYNC result with ``OVER (PARTITION BY k)``: each key's
    ranges are one signal.

    The control rows of one key (one sensor's, one speaker's turns) ask for ranges of one
    recording; the user's OVER says they are a sequence. Rows have no order in SQL, so the
    order is the ranges' own -- by start sample, as over a view's segments (signals.py
    ``_state_keys``) -- and the state runs from one range's last sample into the next
    range's first. Between ranges the rules are those of a view's segments, i.e. of the
    kernels (udfs/kernels/filters.py): ranges that meet carry the state; a gap between
    them resets it (each contiguous run of ranges is filtered from rest, as across a gap
    of a WAV signal; ``degap`` first to filter across it). Two ranges of one key that
    overlap (or repeat) would feed the filter samples twice, so there is no one sequence:
    ``SEGMENT_ORDER`` naming the key and both ranges, raised by the stage
    (:func:`stage_frame`), rather than an order made up. A NULL segment (a range the
    recording does not cover) gives NULL results and leaves the key's state alone.

    A detector's range still open at a key's last range (``threshold_ranges``) is closed
    at the key's end in batch, in a row of its own (:func:`_tail`); over a relation that
    is a stream at binding it is refused here, and over a continuous SYNC (whose
    micro-batches are bound as batches) at the lowering (:func:`refuse_pending_continuously`):
    a key's next control row may continue it, or never come."""
    from wavesql.udfs import registry

    for call in select.find_all(exp.Anonymous):
        fn = registry.lookup(call.name)
        if fn is not None and fn.stateful and fn.flush is not None:
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"`{fn.name}` OVER (PARTITION BY {', '.join(keys)}) over a "
                "SYNC result: a range still open at a key's last synced range would have no "
                "row to close it in", Span.of(call),
                hint=f"drop the OVER: {fn.name} then runs over each row's range from rest, "
                     "a range open at the row's end closed there")


def kept_before_keys(select: exp.Select, source: ir.Relation, view_name: str) -> ir.Relation:
    """What a per-key stage (``f(...) OVER (PARTITION BY k)`` over the SYNC result
    ``source``) runs over: ``source`` kept to the rows the WHERE's conditions on the
    control's columns keep.

    SQL applies WHERE before windows: ``WHERE c.kind = 'x'`` decides which rows a key's
    ranges are, so the state must run along the kept rows' ranges only (a range the WHERE
    drops is a gap between the kept ones, not samples the state went through). The stage
    is bound before the SELECT's WHERE, which Spark applies to the stage's rows: each
    conjunct that reads only control columns (``c.<column>``, the control's alias) and
    calls no signal function, no subquery, aggregate or window, is applied again here,
    under the stage -- a filter, row by row, so a continuous SYNC runs it too. (Kept in the
    SELECT as well: the same condition, true again.) Conditions on the signal functions'
    results stay after the stage, as the window's results they are."""
    from wavesql.dialect import parse_one, to_spark_sql
    from wavesql.udfs import registry

    where = select.args.get("where")
    alias = getattr(source, "control_alias", None)
    if where is None or not alias:
        return source
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]

    def on_control(cond) -> bool:
        if any(isinstance(n, (exp.Subquery, exp.Select, exp.AggFunc, exp.Window, exp.Rand))
               or (isinstance(n, exp.Anonymous) and registry.lookup(n.name) is not None)
               for n in cond.walk()):
            return False
        columns = list(cond.find_all(exp.Column))
        return bool(columns) and all(c.table and c.table.lower() == alias.lower()
                                     for c in columns)

    kept = [c.copy() for c in conjuncts if on_control(c)]
    if not kept:
        return source
    name = f"{view_name}_kept"
    sql = f"SELECT * FROM {quote(name)} WHERE {to_spark_sql(exp.and_(*kept))}"
    return ir.SqlQuery(sql, ((name, source),), source.schema, source.bounded,
                       tree=parse_one(sql))


def refuse_pending_continuously(program, where=None) -> None:
    """A detector per key over a continuous SYNC's rows: a key's next micro-batch may
    continue the range open at its last range, or never come, and then the range would be
    held in the key's state forever -- no row would close it. Refused (the binder cannot
    tell a continuous SYNC's plan from a batch one: the continuous SYNC lowers each
    micro-batch's rows as a batch, with its keys' states, so this runs at that lowering;
    streaming/sync.py also calls it when it plans the query, before anything runs, with
    the statement's position ``where``)."""
    from wavesql.udfs import registry

    for call in program.calls():
        fn = registry.lookup(call["call"])
        if fn is not None and fn.stateful and fn.flush is not None:
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"`{fn.name}` OVER (PARTITION BY ...) over a continuous "
                "SYNC: a range still open at a key's last synced range would wait for the "
                "key's next control row, which may never come", where,
                hint=f"drop the OVER: {fn.name} then runs over each row's range from rest, "
                     "a range open at the row's end closed there; or run the query in batch")


def stage_frame(rel: ir.SignalStage, df, rt=None):
    """The program as a ``mapInArrow`` over the rows of ``df`` (``rel.input`` lowered)
    (segments not read straight from a WAV signal: a view's, a subquery's, a SYNC
    result's): one Python pass per Arrow batch.

    A stateful program (a filter, a detector) carries its state from segment to segment,
    which is only right over the samples in order: its rows are then read in one ordered
    pass -- one task, sorted by the first channel's start sample. The kernels reset the
    state at a gap and refuse overlapping segments (``[SAMPLES n SLIDE m]`` windows with
    m < n, or two sources' segments in one column), so no order is made up. Over a SYNC
    result (``per_row``) each row is a signal of its own, from rest
    (:func:`refuse_row_order` says why): rows are independent, so they run in parallel, in
    any order. With ``OVER (PARTITION BY k)`` over a SYNC result (``per_key``) each key's
    ranges are its signal, in start order; two ranges of a key that overlap are
    ``SEGMENT_ORDER`` naming both (whatever the function: a row-to-row one such as
    ``cfar`` would not see it), and a NULL segment's row gets NULL results
    (:func:`refuse_pending_per_key`) -- as per key over any relation's segments (a SYNC
    CTE's column): the key's state is left as it was.

    In batch, the end of a task's rows ends each signal in it -- each key's, or the one
    ordered pass's -- so a detector's range still open there (``threshold_ranges`` above
    the threshold up to the last sample) comes in one more row, as at a WAV signal's end
    (:func:`_tail`), never dropped.

    Continuously (``rt.streams[KEYED_STATE]``, put there by the continuous SYNC --
    streaming/sync.py -- or, for the one ordered pass or the keys along a part's segment
    column, by the rows runner: streaming/plan.py ``carried_states``), each key starts
    from the state its last micro-batch ended with
    and the states it ends with go back into the SYNC's state (:func:`_carry_keys`). The
    continuous SYNC hands a key's rows over only once the control's progress passed them
    (streaming/sync.py ``hold_for_keys``), so they come in range order; one still behind
    its key's state is a late row with its reason, not ``SEGMENT_ORDER`` -- which a re-run
    batch would raise again at every restart (:func:`_split_late`)."""
    program_json = rel.program.to_json()
    passthrough = tuple(rel.passthrough)
    per_row = rel.state == "per_row"
    per_key = rel.state == "per_key"
    keys = tuple(rel.keys) if rel.program.stateful else ()
    # continuously (the rows runner over a part's rows, streaming/runner.py) the one
    # ordered pass of a relation's segments goes on from the last micro-batch's state too
    carried = rel.state == "carried" and rel.program.stateful
    holder = (rt.streams or {}).get(KEYED_STATE) if (per_key or carried) and rt is not None \
        else None
    saved = dict(holder["in"]) if holder is not None else None  # key text -> state text
    if saved is not None:
        refuse_pending_continuously(rel.program)
    # the task's input ends each signal in it -- each key's, or the one ordered pass's --
    # so what a detector still holds open is flushed there, as at a WAV signal's end
    # (sources/wav_scan.py). Not per row (each row flushes its own) nor continuously (a
    # key's next micro-batch may continue its range).
    ends_signal = rel.program.stateful and not per_row and saved is None

    def run(batches):
        from wavesql.udfs.program import Evaluator, Program

        program = Program.from_json(program_json)
        evaluator = Evaluator(program, per_row=per_row)
        current, ends, schema, last = None, {}, None, None
        if saved is not None and not keys:  # one signal, from the last batch's state
            current = ()
            evaluator, ends = _start(program, False, saved, current)
        for batch in batches:
            # per key: the rows come sorted by key, then start; a new key, a new signal
            for key, piece in _key_runs(batch, keys):
                if keys and key != current:
                    if saved is not None and schema is not None:
                        yield _state_row(schema, current, evaluator, ends)
                    if ends_signal and last is not None:  # the key before ended here
                        yield from _tail(evaluator, last, passthrough, keys)
                    evaluator, ends = _start(program, per_key or bool(keys), saved, key)
                    current = key
                last = piece
                if saved is not None:
                    # continuously a key's row whose range its state went past is a late
                    # row (with its reason), never the query's end (_split_late says why)
                    piece, late = _split_late(piece, program.channels, ends, key or (), keys,
                                              synced=per_key)
                    if late is not None:
                        yield _late_batch(program, late, passthrough)
                    if not piece.num_rows:
                        continue
                elif per_key:
                    _check_disjoint(piece, program.channels, ends, key, keys)
                out = evaluator.run_batch(piece, passthrough)
                if saved is not None:
                    schema = out.schema
                    out = out.append_column(_STATE, _nulls(out.num_rows))
                if out.num_rows:
                    yield out
        if saved is not None and schema is not None:
            yield _state_row(schema, current, evaluator, ends)
        if ends_signal and last is not None:  # the last key's (or the one signal's) end
            yield from _tail(evaluator, last, passthrough, keys)

    # a channel may pass too; keys travel to the task to cut its rows by
    columns = dict.fromkeys(rel.program.channels + passthrough + keys)
    ties = _tie_breaks(rel, df) if keys else []
    df = df.select(*[quote(c) for c in columns], *[t.alias(f"{_TIE}{i}")
                                                    for i, t in enumerate(ties)])
    start = f"{quote(rel.program.channels[0])}.start" if rel.program.channels else None
    if keys:
        # per key a total order (the ties: :func:`_tie_breaks`), then the tie columns go
        # (a projection keeps each partition's order)
        df = df.repartition(*[quote(k) for k in keys]).sortWithinPartitions(
            *[quote(k) for k in keys], start, *[f"{_TIE}{i}" for i in range(len(ties))]) \
            .drop(*[f"{_TIE}{i}" for i in range(len(ties))])
    elif rel.program.stateful and not per_row:
        df = df.repartition(1).sortWithinPartitions(start)
    if saved is None:
        return df.mapInArrow(run, rel.schema.ddl())
    # a late row's columns for the late sink: not its segments (samples, not the row)
    from wavesql.udfs.program import SPARK_TYPES

    sigseg = SPARK_TYPES["sigseg"].replace(" ", "").lower()
    shown = [c for c in passthrough if c not in rel.program.channels
             and sigseg not in rel.schema.find(c).type.replace(" ", "").lower()]
    return _carry_keys(df.mapInArrow(run, f"{rel.schema.ddl()}, {_STATE} string"), holder,
                       shown)


_TIE = "__wavesql_tie_"


def _tie_breaks(rel: ir.SignalStage, df) -> list:
    """What orders a key's rows of the same range start: Spark's shuffle hands rows over
    in any order, and which of two such rows comes first decides which one runs through
    the key's state and which is late (continuously, :func:`_split_late`) or named first
    in ``SEGMENT_ORDER`` (batch) -- so a re-run, or another run over the same rows, could
    differ. The order is made total: the range's end (the first channel's: the shorter
    range first), then the control row's event time (the earlier row first, as it would
    be in an earlier micro-batch), then the control row's values (as JSON text: any
    column type, no hash collision) -- rows equal in all of these give equal rows out."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType, TimestampType

    ties = []
    if rel.program.channels:
        ch = quote(rel.program.channels[0])
        ties.append(F.col(f"{ch}.start") + F.size(F.col(f"{ch}.samples")))
    sync = next((r for r in ir.walk(rel.input) if isinstance(r, ir.SyncJoin)), None)
    control = next((f for f in df.schema.fields if sync is not None
                    and f.name.lower() == sync.control_alias.lower()
                    and isinstance(f.dataType, StructType)), None)
    if control is None:  # (not a SYNC result's rows: every column but the segments)
        names = [c for c in df.columns if c not in rel.program.channels] or df.columns
        return ties + [F.to_json(F.struct(*[F.col(quote(c)) for c in names]), JSON_OPTIONS)]
    # the control stream's EVENT TIME, where the control row keeps it (by name, a timestamp)
    times = {r.stream.event_time.lower() for r in ir.walk(sync.control)
             if isinstance(r, ir.StreamScan) and r.stream.event_time}
    ties += [F.col(f"{quote(control.name)}.{quote(f.name)}") for f in control.dataType
             if f.name.lower() in times and isinstance(f.dataType, TimestampType)][:1]
    return ties + [F.to_json(F.col(quote(control.name)), JSON_OPTIONS)]


#: ``rt.streams`` entry of a continuous SYNC's per-key states (streaming/sync.py; or the
#: rows runner's, over a part's segment column: streaming/plan.py ``carried_states``): a dict
#: with ``"in"`` (key text -> state text, from the last micro-batch) and ``"state"`` (the
#: SYNC's state dict for this batch, which gains ``"keyed"``: the states after it); the
#: stage adds ``"late"``: the rows too late for their key's state, a DataFrame of
#: ``_reason`` and ``_row`` (the row's columns as JSON), or None, and ``"late_rows"``.
KEYED_STATE = ("keyed_state", "")
_STATE = "__wavesql_key_state"
#: The state column's text of a late row (:func:`_late_batch`): this, then the reason. (A
#: state row's text starts with its key's JSON list, ``[``.)
_LATE = "late\n"


def _carry_keys(frame, holder: dict, shown: list[str] = ()):
    """The rows of ``frame`` without its state rows, whose states -- one per key run this
    micro-batch, beside the saved ones of keys not in it -- become the SYNC state's
    ``"keyed"`` entry, committed with the batch (streaming/runner.py), so a re-run of the
    batch starts from the same states; and without its late rows, which become
    ``holder["late"]`` (their reason, and their ``shown`` columns as JSON) for the query's
    late sink. Computed once (a local checkpoint: the rows are delivered from it), as the
    states must be known before the state is written."""
    from pyspark.sql import functions as F

    frame = frame.localCheckpoint(eager=True)
    after, late = dict(holder["in"]), 0
    for row in frame.where(F.col(_STATE).isNotNull()).select(_STATE).collect():
        if row[0].startswith(_LATE):
            late += 1
            continue
        key, text = row[0].split("\n", 1)
        after[key] = text
    holder["state"]["keyed"] = after
    holder["late_rows"] = late
    holder["late"] = frame.where(F.col(_STATE).startswith(_LATE)).select(
        F.expr(f"substring({_STATE}, {len(_LATE) + 1})").alias("_reason"),
        (F.to_json(F.struct(*[F.col(quote(c)) for c in shown]), JSON_OPTIONS) if shown
         else F.lit("{}")).alias("_row")) if late else None
    return frame.where(F.col(_STATE).isNull()).drop(_STATE)


def _key_text(key) -> str:
    """A key's name in the saved states: the same for the same key whatever the session's
    time zone (a TIMESTAMP key comes in the session's zone: it is named in UTC, as the
    UTC sessions that saved states before wrote it)."""
    import datetime
    import json

    def plain(value):
        if isinstance(value, datetime.datetime) and value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc)
        return str(value)

    return json.dumps(list(key), default=plain)


def _start(program, per_key: bool, saved: dict | None, key):
    """A key's evaluator and ranges' ends: from rest, or from its saved state."""
    import base64

    from wavesql.udfs import states
    from wavesql.udfs.program import Evaluator

    text = saved.get(_key_text(key)) if saved else None
    if text is None:
        return Evaluator(program, null_rows=per_key), {}
    got = states.loads(base64.b64decode(text))
    return Evaluator(program, states=got["states"], null_rows=per_key), dict(got["ends"])


def _state_row(schema, key, evaluator, ends: dict):
    """One row of NULLs in ``schema`` and the key's state (JSON and numpy, no pickle:
    wavesql.udfs.states) in the state column."""
    import base64

    import pyarrow as pa

    from wavesql.udfs import states

    text = base64.b64encode(states.dumps({"states": evaluator.states, "ends": ends})).decode()
    arrays = [pa.nulls(1, f.type) for f in schema] + [pa.array([f"{_key_text(key)}\n{text}"])]
    return pa.RecordBatch.from_arrays(arrays, names=[*schema.names, _STATE])


def _tail(evaluator, last, passthrough: tuple[str, ...], keys: tuple[str, ...]):
    """The row of what ``evaluator`` still holds open at its signal's end
    (``Evaluator.finish()``: a ``threshold_ranges`` range above the threshold up to the
    last sample), if any: the flushing calls' outputs, NULL for the other outputs, as the
    WAV scan's last row; its key columns are the key's (taken from ``last``, the key's last
    rows), its other columns NULL -- it is no one segment's row (so a WHERE on them, which
    Spark applies to the stage's rows, treats it as any row with NULLs there)."""
    import pyarrow as pa

    tail = evaluator.finish()
    if tail is None or not tail.num_rows:
        return
    if passthrough:
        key_of = {k.lower(): last.column(k).slice(last.num_rows - 1, 1) for k in keys}
        arrays = list(tail.columns) + [_key_only(last.column(c), c, key_of)
                                       for c in passthrough]
        tail = pa.RecordBatch.from_arrays(arrays, names=[*tail.schema.names, *passthrough])
    yield tail


def _key_only(column, name: str, key_of: dict):
    """A one-row ``column`` holding only the key: the key's value if it is a key column;
    a struct (a SYNC result's control row ``c``, whose fields are the control columns the
    keys are) with its key fields set and the others NULL; else NULL."""
    import pyarrow as pa

    if name.lower() in key_of:
        return key_of[name.lower()]
    if not pa.types.is_struct(column.type) or not any(
            f.name.lower() in key_of for f in column.type):
        return pa.nulls(1, column.type)
    fields = list(column.type)
    return pa.StructArray.from_arrays(
        [key_of[f.name.lower()].cast(f.type) if f.name.lower() in key_of
         else pa.nulls(1, f.type) for f in fields], fields=fields)


def _nulls(k: int):
    import pyarrow as pa

    return pa.nulls(k, pa.string())


def _key_runs(batch, keys: tuple[str, ...]):
    """``(key, rows)`` of each run of equal ``keys`` in ``batch`` (the whole batch, key
    None, without keys). NULLs are one key, NaNs one key, as Spark's PARTITION BY has it."""
    if not keys or not batch.num_rows:
        yield None, batch
        return
    values = list(zip(*[[("NaN",) if v != v else v for v in batch.column(k).to_pylist()]
                        for k in keys]))
    begin = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[begin]:
            yield values[begin], batch.slice(begin, i - begin)
            begin = i


def _check_disjoint(piece, channels, ends: dict, key, names) -> None:
    """Each channel's non-NULL ranges in ``piece`` (one key's rows, in start order) start
    at or after the end of the one before (``ends``: channel -> (start, end) of the last
    range seen of this key, across batches); else ``SEGMENT_ORDER`` naming the key and both
    ranges. An empty range (a point event, or shorter than a sample) holds no sample: it
    overlaps nothing, wherever it sorts among ranges of the same start."""
    import numpy as np

    from wavesql.udfs.sigseg import SignalError

    for name in channels:
        column = piece.column(name)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        starts = column.field("start").to_numpy(zero_copy_only=False)[valid].astype(np.int64)
        offsets = column.field("samples").offsets.to_numpy()
        stops = starts + np.diff(offsets)[valid]
        starts, stops = starts[stops > starts], stops[stops > starts]
        if not len(starts):
            continue
        last = ends.get(name)
        lo = np.concatenate(([last[0]], starts[:-1])) if last else starts[:-1]
        hi = np.concatenate(([last[1]], stops[:-1])) if last else stops[:-1]
        nxt, nxt_hi = (starts, stops) if last else (starts[1:], stops[1:])
        bad = np.flatnonzero(nxt < hi)
        if len(bad):
            i = bad[0]
            shown = ", ".join(f"{k} = {v!r}" for k, v in zip(names, key))
            # (a range before the last one: only across micro-batches, the rows of one
            # batch come in start order)
            how = (f"[{nxt[i]}, {nxt_hi[i]}) comes before [{lo[i]}, {hi[i]}), whose "
                   "results were delivered" if nxt[i] < lo[i] else
                   f"[{lo[i]}, {hi[i]}) and [{nxt[i]}, {nxt_hi[i]}) overlap")
            raise SignalError(
                "SEGMENT_ORDER", f"two synced ranges of `{name}` for key ({shown}): {how} "
                "(samples); a stateful function OVER (PARTITION BY ...) runs along each "
                "key's ranges in start order as one signal, each sample once",
                hint="make each key's ranges disjoint (continuously: each key's control rows "
                     "in range order), or drop the OVER (each row's range then from rest)")
        ends[name] = (int(starts[-1]), int(stops[-1]))


def _split_late(piece, channels, ends: dict, key, names, synced: bool = True):
    """``(kept, late)``: a continuous SYNC's rows of one key in ``piece`` (in start order)
    split into those its state can run through and those it cannot (None: none), each
    late row with its reason; ``ends`` (channel -> (start, end) of the key's last range,
    across micro-batches) advanced over the kept ones.

    A key's rows are synced only once the control's progress passed their event time,
    then in range order (streaming/sync.py ``split_signals``), so rows that came out of
    order within the watermark are put in order before the state sees them. Event time
    and range start are different columns, though: a row on time may still ask for a
    range that starts before the end of the key's last range -- one delivered already, or
    one before it in this batch (an overlap). Its samples are behind the key's state, and
    there is no other state to run it through: in batch the stage refuses such a key
    (:func:`_check_disjoint`), but continuously that error would come back at every
    restart (the batch is re-run as it was) and the query could never go on -- so the row
    is the query's late row instead, its reason naming the key and both ranges, and the
    key's state goes on as if it had not come. A NULL or empty range holds no sample: it
    is never late.

    Not ``synced``: the rows of a continuous query's part (a signal CTE's windows, a
    SYNC CTE's ranges) under a stateful function carried along them, per key or as one
    signal -- likewise late when behind the state. A signal part delivers its windows in
    order; a SYNC part then syncs each control row only once the control's progress
    passed it (streaming/derived.py ``in_order``), so, as in the SYNC's own SELECT, only
    a range starting before one its key already ran through is late."""
    import numpy as np
    import pyarrow as pa

    spans = []
    for name in channels:
        column = piece.column(name)
        valid = column.is_valid().to_numpy(zero_copy_only=False)
        starts = column.field("start").fill_null(0).to_numpy(zero_copy_only=False)
        lengths = np.diff(column.field("samples").offsets.to_numpy())
        spans.append((name, valid, starts.astype(np.int64), starts.astype(np.int64) + lengths))
    late, reasons = [], []
    for i in range(piece.num_rows):
        why = None
        for name, valid, starts, stops in spans:
            last = ends.get(name)
            if valid[i] and stops[i] > starts[i] and last and starts[i] < last[1]:
                shown = ", ".join(f"{k} = {v!r}" for k, v in zip(names, key))
                how = ("comes before" if starts[i] < last[0] else "overlaps")
                if not synced:
                    whose = f" for key ({shown})" if names else ""
                    why = (f"too late for the state: segment [{starts[i]}, {stops[i]}) of "
                           f"`{name}` (samples){whose} {how} [{last[0]}, {last[1]}), one "
                           "the state already ran through (a stateful signal function "
                           "runs along the segments in start order, each sample once)")
                    break
                why = (f"too late for its key's state: SYNC range [{starts[i]}, {stops[i]}) "
                       f"of `{name}` (samples) for key ({shown}) {how} [{last[0]}, "
                       f"{last[1]}), a range of the key its state already ran through "
                       "(OVER (PARTITION BY ...) runs along each key's ranges in start "
                       "order, each sample once; a key's rows are synced once the "
                       "control's progress passed their event time)")
                break
        if why is not None:
            late.append(i)
            reasons.append(why)
            continue
        for name, valid, starts, stops in spans:
            if valid[i] and stops[i] > starts[i]:
                ends[name] = (int(starts[i]), int(stops[i]))
    if not late:
        return piece, None
    keep = np.setdiff1d(np.arange(piece.num_rows), late)
    return (piece.take(pa.array(keep, pa.int64())),
            (piece.take(pa.array(late, pa.int64())), reasons))


def _late_batch(program, late, passthrough: tuple[str, ...]):
    """The late rows ``late`` (rows, reasons: :func:`_split_late`) as the stage's rows:
    NULL outputs, their passthrough columns, the reason in the state column after
    :data:`_LATE` (:func:`_carry_keys` sends them to the late sink, never delivered)."""
    import pyarrow as pa

    rows, reasons = late
    arrays = [pa.nulls(rows.num_rows, f.type) for f in program.arrow_schema()]
    arrays += [rows.column(c) for c in passthrough]
    arrays.append(pa.array([_LATE + r for r in reasons], pa.string()))
    names = [*program.arrow_schema().names, *passthrough, _STATE]
    return pa.RecordBatch.from_arrays(arrays, names=names)
