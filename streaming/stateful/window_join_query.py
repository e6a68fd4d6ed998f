"""A continuous per-instant join of two windowed streams on Spark's state store: which ones
run there, the processor and the micro-batch.

A continuous query of the ``windowed`` shape that joins two catalog streams, each under
its own CQL window, in one SELECT::

    ISTREAM | DSTREAM (SELECT ... FROM a [window] [x] [JOIN] b [window] [y] [ON ...]
                       [WHERE ...] ...)

runs here (kernel :mod:`.window_join`) when each window is ``[RANGE r]``, ``[NOW]``,
``[RANGE r SLIDE s]``, ``[ROWS n]`` or ``[PARTITION BY p ROWS n]``, ``_time`` appears only
as a bare SELECT item (an expression of the instant would change a row at every instant),
nothing in it is volatile or a subquery, and every column of either stream travels exactly
through the kernel. Buckets are of the keys the join equates (``a.k = b.k`` in ON, or WHERE
of an inner join) when the SQL around the join is row by row and every ROWS window is
partitioned by (at least) its stream's keys -- then the query is additive over keys
(:mod:`.window_join`) -- else one bucket. ``RSTREAM`` stays on the re-evaluating runner
(it emits every key at every instant any key changes: its output alone grows with keys x
instants), as do ``EMIT CHANGES`` and three or more streams; ``EXPLAIN STREAM`` says why.

Both streams go through the ASOF join's pipeline (:mod:`.asof_query`: encoded alike, one
``transformWithStateInPandas`` grouped by bucket), with **both** watermarked in Spark:
Spark's watermark -- the smaller of the two streams' progress -- is the query's progress,
which makes instants final and fires the buckets' timers at their next change instant.
A row is late below **its own** stream's progress, as on the re-evaluating runner: each
row carries what it promises and which source it came from, each bucket hands back its
largest promise per source, and the driver keeps each stream's progress in a versioned
record per micro-batch (``<checkpoint>/joins/<batch>.json``), handed to the buckets of the
next as a local property of its Spark jobs. A micro-batch evaluates the batch plan over
the rows the called buckets hand back and keeps its rows whose ``_time`` became final
(``previous progress <= _time < progress``), ``_final = true``, as the re-evaluating
runner does over its whole buffer.

An inner join of that keyed shape -- or an outer one whose ON is key equalities only (a
pair of equal keys is then a match: the kernel knows where a row goes NULL-padded) --
whose statement is the SELECT directly over the two windowed streams skips the
per-instant evaluation: its buckets hand back the pairs entering and leaving (and the
padded rows, :mod:`.window_join_pairs`) and one Spark plan per micro-batch emits
``ISTREAM``/``DSTREAM`` from their signs (:mod:`.window_join_delta`). Semi and anti
joins, outer joins with more in ON, and everything with :data:`PAIRS_SETTING` ``=0`` stay
per instant. ``EXPLAIN STREAM`` says which.
"""

from __future__ import annotations

import json

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.planner import ir
from wavesql.planner.temporal import quote
from wavesql.planner.windows import TIME

from .. import plan as stream_plan
from . import batch_records
from . import plan as pl
from . import window_join as kernel
from .asof_plan import AsofPlan, encoded_rows, encoded_types, joined_streams, output_ddl
from .asof_query import (NO_PROMISE, PROMISE, PROMISED, SOURCE, AsofProcessor,
                         StatefulAsofQuery, batch_record, next_record)
from .plan import NotIncremental

#: The local property handing a micro-batch's per-stream progress to its buckets:
#: ``{"batch": id, "left": µs or null, "right": µs or null}``.
PROPERTY = "wavesql.windowJoin.progress"
#: An environment variable: ``0`` keeps a keyed inner join's ISTREAM/DSTREAM on the
#: per-instant evaluation (for comparing both in one benchmark run).
PAIRS_SETTING = "WAVESQL_WINDOW_JOIN_PAIRS"
#: The version of the driver's per-batch record of each stream's progress.
RECORD_VERSION = 1


#: How the state's progress is kept, part of the fingerprint.
PROGRESS_MODEL = ("both streams watermarked in Spark (the query's progress), each stream's "
                  "progress by the driver's record v1")


class WindowJoinPlan(AsofPlan):
    """A continuous per-instant join of two windowed streams (an :class:`AsofPlan` whose
    operator is a :class:`~.window_join.WindowJoinOperator`)."""

    @property
    def fingerprint(self) -> str:
        """What a checkpoint depends on, compared on restart: the operator (both windows),
        both streams' per-row SQL, the output schema, the buckets, the streams."""
        import hashlib

        text = json.dumps([repr(self.operator), self.pre_left, self.pre_right,
                           self.output_ddl, self.buckets, self.left.key, self.right.key,
                           PROGRESS_MODEL], default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def recognize_window_join(spark, stmt, relation: ir.Relation, plan: stream_plan.Plan,
                          emit_changes: bool, buckets: int) -> WindowJoinPlan:
    """The :class:`WindowJoinPlan` of a continuous windowed query joining two streams, or
    :class:`~.plan.NotIncremental` saying why not (module docstring)."""
    del spark
    node = stmt.node
    output = "RSTREAM"
    if isinstance(node, wn.RelationToStream):
        output, node = node.kind, node.this
    if output not in ("ISTREAM", "DSTREAM"):
        raise NotIncremental("RSTREAM of a join of windowed streams (every key at every "
                             "instant any key changes)")
    if emit_changes:
        raise NotIncremental("EMIT CHANGES over a join of windowed streams")
    while isinstance(node, (exp.Subquery, exp.Paren)):
        node = node.this
    if not isinstance(node, exp.Select) or node.args.get("with_") or node.args.get("with"):
        raise NotIncremental("not a single SELECT")
    select = node
    joins = select.args.get("joins") or []
    source = select.args.get("from_") or select.args.get("from")
    tables = [source.this if source is not None else None] + [j.this for j in joins]
    if len(tables) != 2 or not all(isinstance(t, exp.Table) and t.args.get("window")
                                   for t in tables):
        raise NotIncremental("not a join of two windowed streams in one SELECT")
    scans = [r for r in ir.walk(relation) if isinstance(r, ir.WindowScan)]
    if len(scans) != 2 or not all(isinstance(s.input, ir.StreamScan) for s in scans) \
            or scans[0].input.stream.key == scans[1].input.stream.key:
        raise NotIncremental("not two different catalog streams, each windowed itself")
    for n in select.walk():
        if isinstance(n, (exp.Subquery, exp.Exists)) or (isinstance(n, exp.Select)
                                                         and n is not select):
            raise NotIncremental("a subquery")
        if isinstance(n, exp.Window):
            raise NotIncremental("an OVER window")
    volatile = stream_plan._volatile(select)
    if volatile is not None:
        raise NotIncremental(f"`{volatile}` (another value each evaluation)")
    _check_time(select)
    by_name = {s.input.stream.name.lower(): s for s in scans}
    alias, window = {}, {}
    for t in tables:
        scan = by_name.get(t.name.lower())
        if scan is None:
            raise NotIncremental(f"`{t.name}` is not one of the windowed streams")
        alias[t.alias_or_name.lower()] = scan.input.stream.key
        window[scan.input.stream.key] = scan.window
    join = joins[0]
    side = (join.args.get("side") or "").upper()
    conditions = [join.args.get("on")]
    if not side:  # an inner (or comma) join: WHERE's equalities join it too
        where = select.args.get("where")
        conditions.append(where.this if where is not None else None)
    a_key, b_key = (alias[t.alias_or_name.lower()] for t in tables)
    a_alias, b_alias = (t.alias_or_name for t in tables)
    pairs = [p for c in conditions if c is not None for p in _key_pairs(c, a_alias, b_alias)]
    one, why_one = _one_bucket(select, pairs, window, plan, a_key, b_key)
    a, b, checked, n_buckets = joined_streams(plan, a_key, b_key, [] if one else pairs,
                                              buckets)
    wa, wb = _kernel_window(window[a.key]), _kernel_window(window[b.key])
    why_not_pairs = _why_not_pairs(join, relation, a_alias, b_alias) if checked else "not keyed"
    preserve = {"LEFT": (True, False), "RIGHT": (False, True), "FULL": (True, True)}.get(
        side, (False, False))
    # the key columns' positions: the pairs kernel compares key values, not only hashes
    positions = tuple((list(a.columns).index(ac), list(b.columns).index(bc))
                      for ac, bc in checked)
    op = kernel.WindowJoinOperator(encoded_types(a), encoded_types(b), wa, wb, bool(checked),
                                   pairs=why_not_pairs is None, preserve=preserve,
                                   keys=positions)
    pre_a = encoded_rows(a, False, [ac for ac, _ in checked], op, n_buckets)
    pre_b = encoded_rows(b, True, [bc for _, bc in checked], op, n_buckets)
    pre_a += _partition_sql(window[a.key])
    pre_b += _partition_sql(window[b.key])
    keys = ", ".join(f"{ac.name} = {bc.name}" for ac, bc in checked)
    explain = (f"stateful per-instant join of windowed streams on Spark's state store "
               f"({output}, {a.name} {window[a.key]} with {b.name} {window[b.key]}): each "
               "bucket keeps each stream's rows still in its window at or after progress; "
               + (f"{n_buckets} buckets of the keys ({keys})" if checked else
                  f"1 bucket ({why_one})")
               + "; progress per stream (a row below its own stream's is late, kept by the "
                 "driver per micro-batch), the query's the smaller (Spark's watermark); "
               + ("the buckets hand back the pairs entering and leaving at the instants a "
                  f"micro-batch makes final and one Spark plan per micro-batch emits {output} "
                  "from their signs (no per-instant evaluation)" if why_not_pairs is None else
                  "a micro-batch evaluates the query per instant over the buckets with a row "
                  f"entering or leaving at an instant made final ({why_not_pairs})")
               + " (timers at each bucket's next change)")
    return WindowJoinPlan(a, b, op, tuple(pre_a), tuple(pre_b), output_ddl(op, a, b),
                          n_buckets, explain)


def _why_not_pairs(join, relation: ir.Relation, a_alias: str, b_alias: str) -> str | None:
    """Why a keyed join's ISTREAM/DSTREAM is evaluated per instant, not from its pairs
    entering and leaving (:mod:`.window_join_delta`); None: from its pairs."""
    import os

    from wavesql.planner.band import _conjuncts

    from .window_join_delta import pair_query

    if os.environ.get(PAIRS_SETTING, "1") == "0":
        return f"{PAIRS_SETTING}=0"
    if (join.args.get("kind") or "").upper() not in ("", "INNER", "CROSS", "OUTER"):
        return "a semi or anti join"
    on = join.args.get("on")
    if (join.args.get("side") or "") and (on is None or len(list(_conjuncts(on))) != len(
            _key_pairs(on, a_alias, b_alias))):
        # a pair of equal keys must be a match: the kernel pads the rows without one
        return "an outer join whose ON is more than key equalities"
    if pair_query(relation) is None:
        return "not a SELECT directly over the two windowed streams"
    return None


def _check_time(select: exp.Select) -> None:
    """``_time`` only as a bare SELECT item: elsewhere a row would change with the instant
    itself, at every instant, in every bucket."""
    bare = {id(e if not isinstance(e, exp.Alias) else e.this) for e in select.expressions
            if isinstance(e if not isinstance(e, exp.Alias) else e.this, exp.Column)}
    for col in select.find_all(exp.Column):
        if col.name.lower() == TIME and id(col) not in bare:
            raise NotIncremental(f"`{TIME}` in an expression (its rows change with the instant)")


def _key_pairs(condition, a_alias: str, b_alias: str) -> list[tuple[str, str]]:
    """``(a column, b column)`` of each conjunct equating a bare column of each side."""
    from wavesql.planner.band import _conjuncts

    sides = {a_alias.lower(): 0, b_alias.lower(): 1}
    out = []
    for part in _conjuncts(condition):
        if not (isinstance(part, exp.EQ) and isinstance(part.this, exp.Column)
                and isinstance(part.expression, exp.Column)):
            continue
        cols = sorted((part.this, part.expression), key=lambda c: sides.get(c.table.lower(), 2))
        if [sides.get(c.table.lower()) for c in cols] == [0, 1]:
            out.append((cols[0].name, cols[1].name))
    return out


def _one_bucket(select: exp.Select, pairs: list, window: dict, plan, a_key: str,
                b_key: str) -> tuple[bool, str]:
    """Whether the query must keep one bucket, and why (module docstring)."""
    if not pairs:
        return True, "no keys"
    for node in select.walk():
        for kind, what in ((exp.AggFunc, "an aggregate"), (exp.Group, "GROUP BY"),
                           (exp.Distinct, "DISTINCT"), (exp.Limit, "LIMIT"),
                           (exp.SetOperation, "a set operation")):
            if isinstance(node, kind):
                return True, f"{what} across keys"
    keys = {a_key: {a.lower() for a, _ in pairs}, b_key: {b.lower() for _, b in pairs}}
    for key, spec in window.items():
        if spec.kind == "ROWS":
            return True, "a [ROWS n] window of the whole stream"
        if spec.kind == "PARTITION_ROWS":
            cols = {p.strip("`").lower() for p in spec.partition_by}
            if not keys[key] <= cols:
                return True, f"{spec} not partitioned by the keys"
    return False, ""


def _kernel_window(spec) -> kernel.JoinWindow:
    if spec.kind == "RANGE":
        return kernel.JoinWindow("RANGE", spec.size)
    if spec.kind == "NOW":
        return kernel.JoinWindow("NOW", 1)
    if spec.kind == "SLIDE":
        return kernel.JoinWindow("SLIDE", spec.size, spec.slide)
    if spec.kind in ("ROWS", "PARTITION_ROWS"):
        return kernel.JoinWindow("ROWS", spec.size)
    raise NotIncremental(f"a {spec} window (its rows never leave)" if spec.kind == "UNBOUNDED"
                         else f"a {spec} window")


def _partition_sql(spec) -> list[tuple[str, str]]:
    """A ROWS window's partition as two hashes (``pk``/``ph``); 0 otherwise."""
    if spec.kind == "PARTITION_ROWS" and spec.partition_by:
        keys = ", ".join(f"({k})" for k in spec.partition_by)
        return [("__pk", f"xxhash64({keys})"), ("__ph", f"CAST(hash({keys}) AS BIGINT)")]
    return [("__pk", "0L"), ("__ph", "0L")]


class WindowJoinProcessor(AsofProcessor):
    """The per-instant join's kernel per bucket; late rows, passed-through rows, the
    promises per source and the counts are the ASOF processor's."""

    def _kernel(self, new, progress):
        # each stream's progress from the driver; Spark's watermark is the query's
        left, right = stream_progress()
        return kernel.step(self.op, self._stored(), new, left, right, progress)


def stream_progress() -> tuple[int | None, int | None]:
    """Each stream's progress the running micro-batch hands its buckets (:data:`PROPERTY`)."""
    record = batch_record(PROPERTY, "a continuous join of windowed streams' bucket",
                          "progress")
    return record["left"], record["right"]


class StatefulWindowJoinQuery(StatefulAsofQuery):
    """A continuous per-instant join of two windowed streams (module docstring)."""

    engine = "stateful-window-join"

    def _processor(self, columns: list[str]):
        return WindowJoinProcessor(self.windowed, columns)

    # -- the streams: both watermarked, each row's promise and source kept --------------
    def _watermarked(self, frame, trigger: str, stream=None, pre=None, watermark: bool = True):
        return super(StatefulAsofQuery, self)._watermarked(frame, trigger, stream, pre,
                                                           watermark=False)

    def _source_frame(self, trigger: str, max_files: int | None):
        from pyspark.sql import functions as F

        from .processor import OFFSET
        from .query import union

        w = self.windowed
        left = self._stream_frames(w.left, w.pre_left, trigger, max_files)
        right = self._stream_frames(w.right, w.pre_right, trigger, max_files)
        self.n_left_sources, self.n_right_sources = len(left), len(right)
        promised = F.coalesce(F.expr(f"unix_micros(__wm) DIV 1000 - {OFFSET}"),
                              F.lit(int(NO_PROMISE)))
        # (each with its resume rows first, on a checkpoint that has them: resume.py)
        frames = [self._resume_add(f).withColumn(SOURCE, F.lit(i)).withColumn(PROMISED, promised)
                  .withWatermark("__wm", "0 seconds").drop("__wm")
                  for i, f in enumerate(left + right)]
        return union(frames)

    # -- progress ------------------------------------------------------------------------
    def _batch_progress(self, spark, batch_id: int) -> tuple[int | None, dict]:
        """The query's progress (Spark's watermark) and each stream's (the record of the
        batch before, handed to the buckets)."""
        from .processor import progress_of

        w = self.windowed
        record = self._record_before(batch_id)
        left = record.get("left", {}).get("progress")
        right = record.get("right", {}).get("progress")
        spark.sparkContext.setLocalProperty(
            PROPERTY, json.dumps({"batch": batch_id, "left": left, "right": right}))
        return (progress_of(self._batch_watermark(batch_id)),
                {w.left.key: left, w.right.key: right})

    def _record_dir(self) -> str:
        from wavesql import storage

        return storage.join(self.checkpoint, "joins")

    def _record_before(self, batch_id: int) -> dict:
        """Each stream's progress record of the latest batch before ``batch_id`` (empty:
        none, the first batch; every committed batch wrote one)."""
        from wavesql import storage
        from wavesql.errors import WaveSQLError

        record = batch_records.before(self._record_dir(), batch_id, RECORD_VERSION)
        if not record and batch_id > 0:
            done = storage.join(self.checkpoint, "offsets", "commits")
            if any(n.isdigit() and int(n) < batch_id for n, _ in storage.children(done)):
                raise WaveSQLError(
                    "CHECKPOINT_CORRUPT", f"{self._record_dir()} holds no record of the "
                    f"streams' progress before micro-batch {batch_id}",
                    hint="start the query from a fresh checkpoint (and output folder)")
        return record

    def _checkpoint_progress(self, batch_id: int) -> int | None:
        from .processor import progress_of

        return progress_of(self._batch_watermark(batch_id))

    # -- one micro-batch -----------------------------------------------------------------
    def _from_pairs(self, spark, events):
        """ISTREAM/DSTREAM from the pair events the buckets handed back
        (:mod:`.window_join_delta`)."""
        from wavesql.planner.lower import Runtime

        from .window_join_delta import delta, pair_query

        w = self.windowed
        relation = self.bound.relation

        def runtime(streams):
            return Runtime(spark, self.session.catalog, self.text, streams=streams)

        return delta(spark, runtime, pair_query(relation), events, w.buckets,
                     relation.operator, w.decoded(False), w.decoded(True),
                     (w.left.key, w.right.key))

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import functions as F

        from wavesql.streaming.report import FINAL, PROGRESS, timestamp_lit

        from .processor import progress_of
        from .query import _earliest_arrival

        w = self.windowed
        n = max(getattr(self, "n_left_sources", 1), 1) + max(
            getattr(self, "n_right_sources", 1), 1)
        promise = [F.max(F.when((F.col("__kind") == PROMISE) & (F.col("__sk") == i),
                                F.col("__ts"))).alias(f"promise{i}") for i in range(n)]
        stats = df.where(f"__kind IN ({pl.STATS}, {PROMISE})").groupBy().agg(*[
            F.sum(f"__n{i}").alias(name) for i, name in enumerate(pl.STAT_NAMES)],
            *promise, *_earliest_arrival(df)).collect()[0].asDict()
        rows = df.where(f"__kind = {pl.RESULT}")
        if w.operator.pairs:
            result = self._from_pairs(spark, rows)
        else:
            result = self._lowered(spark, rows.where("NOT __right").selectExpr(
                *w.decoded(False)), rows.where("__right").selectExpr(*w.decoded(True)))
        previous = progress_of(self._batch_watermark(batch_id - 1)) if batch_id else None
        t = F.unix_micros(F.col(quote(TIME)))
        after = t >= F.lit(previous) if previous is not None else F.lit(True)
        before = t < F.lit(progress) if progress is not None else F.lit(False)
        out = result.where(after & before).withColumn(FINAL, F.lit(True))
        self._deliver_counted(out.withColumn(PROGRESS, timestamp_lit(progress)), batch_id,
                              report, by_final=True)
        n_left = max(getattr(self, "n_left_sources", 1), 1)
        promises = [stats[f"promise{i}"] for i in range(n)]
        before_rec = self._record_before(batch_id)
        record = {"left": next_record(before_rec.get("left", {}), promises[:n_left]),
                  "right": next_record(before_rec.get("right", {}), promises[n_left:]),
                  "streams": [w.left.key, w.right.key]}
        batch_records.write(self._record_dir(), batch_id, RECORD_VERSION, record)
        return {**{name: int(stats[name] or 0) for name in pl.STAT_NAMES},
                "arrived": stats.get("arrived")}
