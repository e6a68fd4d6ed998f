"""Un-keyed ``RESAMPLE`` and ``ASOF JOIN`` in parallel chunks of event time, over any input.

Rule :func:`temporal_in_chunks`. planner/temporal.py lowers both operators to Spark SQL
windows (``lead``, ``last_value(...) IGNORE NULLS OVER (ORDER BY ...)``); without a key
(no ``PARTITION BY``, no equality in the ASOF condition) Spark runs that window in **one
partition**, on one core, after a shuffle and a sort. direct_resample.py avoids it for a
catalog Parquet stream read as it is, and direct_asof.py for an ASOF JOIN of two such
streams (each task reads its range of both sides' files: no shuffle); this rule does it for
every other input (CSV or JSON streams, views, CTEs, subqueries, Kafka batch reads, a
Parquet stream the direct passes refuse), through Spark's shuffle, TiLT's way, **reading each input once** (temporal_inputs.py):
a catalog Parquet stream read as it is stays Spark's scan of its (columnar, pruned) files;
any other input becomes a lazy local checkpoint (``localCheckpoint(eager=False)``), which
the first job over it fills while it reads and parses the input, and which every later job
reads from the executors' block stores (memory, spilling to disk) -- the SQL too, when the
rule hands the query back to it after its estimate. Like any local checkpoint it is not
fault tolerant: an executor lost before the pass ran loses its blocks, and the query fails.

1. **estimate**: rows with a time, first and last time of the input (RESAMPLE) or the left
   side (ASOF), and, for ``'linear'``, whether an interpolated column holds NULLs: from a
   Parquet stream's footers (row counts, min/max and NULL counts: no job; files whose
   footers cannot say, e.g. NULL times, run the job), else one aggregate job -- the one
   that reads the input and fills its held copy;
2. **summaries**: the span is cut into up to :data:`MAX_BUCKETS` equal buckets (about 64
   per chunk) and one fixed-width aggregation (a hash aggregate: no sort, no struct
   comparisons) computes, per bucket, its rows and its first and last time; for
   ``'linear'`` with NULLs, each column's first and last time with a value; for an ASOF
   JOIN the left and right rows and the right side's latest time (backward) or earliest
   (forward). For an ASOF JOIN this job also fills the right side's held copy;
3. **chunks**: on the driver, consecutive buckets are packed into chunks of about
   ``wavesql.temporal.chunk_rows`` rows and grid points (about four chunks per core, none
   over a Python task's memory budget: task_memory.py; a bucket too big alone leaves the
   query to the SQL), and each chunk is given its **context**: the rows at the edge times
   of the nearest non-empty buckets before and after it, however far (a dropout of any
   length costs no look-back), fetched by one small job over the held rows; of rows
   sharing a time the greatest wins (udfs/temporal_chunks.py ``latest_per_time``:
   planner/temporal.py's duplicate-time rule). For ``'linear'`` with NULLs, where the row
   that wins a column's edge time holds NULL there (another row at that time had a value:
   the SQL sees a hole), the rest of the bucket is searched, then the next bucket, one
   small job a round (:func:`_resolve`; rare);
4. **the pass**: every row is tagged with its chunk's label (a small CASE tree over the
   chunk starts; labels chosen so that Spark's hash partitioning gives each chunk a
   partition of its own: temporal_inputs.py ``labels``), the context rows (a few per chunk, a DataFrame
   made on the driver) are added, and ``groupBy(chunk).applyInArrow`` (RESAMPLE) or
   ``cogroup(...).applyInArrow`` (ASOF: left rows by chunk, right rows of the chunk's time
   range plus its context) runs the numpy kernels of udfs/temporal_chunks.py. Spark plans
   show them as ``resample_chunks`` / ``asof_chunks``.

Exactly the SQL's semantics (tests/test_temporal_parallel.py: pandas and numpy oracles, and
the SQL). Where it applies: batch queries, every column a number (not DECIMAL), boolean,
string, date or timestamp (types whose order Arrow's sort shares with Spark, for the
duplicate-time rule), unique column names; ASOF time columns both timestamps or both
integers; at least ``wavesql.temporal.min_rows`` rows with a time (RESAMPLE's input, the
ASOF's left side), since the pass costs a few small jobs, a shuffle and a Python set-up.
The estimate, summary and context jobs run when the query is planned, as chunked_windows.py's
row count does; a failing job (bad input) leaves the query to the SQL, which reports the
error where it always does.

It runs only with ``SET wavesql.temporal.parallel = true``. Off by default: reading each
input once, it pays the parse once as the SQL does, but its fixed costs (a checkpoint, three
more jobs, a shuffle, Python workers) have not yet measured below the one-partition window
they replace on this 2-core machine (0.43x - 0.94x over 300k - 1M rows, a loaded machine:
benchmarks/temporal_parallel/results.md, with where the time goes). The rule for the
default: at least 1.0x the SQL, measured on a quiet machine, for the inputs it would take.
"""

from __future__ import annotations

import dataclasses
import math

from wavesql import settings
from wavesql.sqltext import quote

from .plan import SqlPlan
from .temporal_inputs import HeldInputs, labels as _labels

#: Spark types the pass carries (``simpleString``).
_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean", "string",
          "date", "timestamp")
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
#: The most buckets the summary aggregation groups by (rows it brings to the driver).
MAX_BUCKETS = 4096
#: Helper column names (planner/temporal.py reserves the prefix).
CHUNK, MATCHED = "__ws_chunk", "__ws_matched"


def temporal_in_chunks(plan: SqlPlan) -> SqlPlan:
    """``plan`` with its whole result when the query is an un-keyed RESAMPLE or ASOF JOIN
    this rule computes; ``plan`` itself otherwise (the SQL then)."""
    q = plan.query
    if (q.resample is None and q.asof is None) or plan.rt.streams is not None:
        return plan
    if not settings.get(plan.rt.spark, "wavesql.temporal.parallel"):
        return plan
    inputs = HeldInputs(plan)
    if q.resample is not None:
        df = _resample(q, plan.rt, inputs)
    else:
        df = _asof(q, plan.rt, inputs)
    if df is not None:
        return dataclasses.replace(plan, result=df)
    # the SQL then; an input this rule has read already is read from the copy it holds
    return inputs.sql_plan()


# ------------------------------------------------------------------------------ shared
def _carried(fields) -> bool:
    names = [f.name.lower() for f in fields]
    return (len(set(names)) == len(names) and not any(n.startswith("__ws_") for n in names)
            and all(f.dataType.simpleString() in _TYPES for f in fields))


def _find(fields, name):
    return next((f for f in fields if f.name.lower() == name.lower()), None)


def _col(name):
    from pyspark.sql import functions as F

    return F.col(quote(name))


def _micros(field):
    """The time column as a BIGINT expression (microseconds for a timestamp)."""
    from pyspark.sql import functions as F

    if field.dataType.simpleString() == "timestamp":
        return F.unix_micros(_col(field.name))
    return _col(field.name).cast("bigint")


def _run(job):
    """``job()``, or None when Spark fails running it (bad input: the SQL reports it)."""
    from wavesql.spark_errors import runtime_error_types

    try:
        return job()
    except runtime_error_types():
        return None


@dataclasses.dataclass(frozen=True)
class _Buckets:
    lo: int     # first time (microseconds or the integer time)
    width: int  # of a bucket
    count: int  # buckets 0 .. count - 1 cover [lo, lo + count * width)

    def expr(self, t):
        """The bucket of a time ``t`` (a BIGINT column at or after ``lo``)."""
        from pyspark.sql import functions as F

        return F.floor((t - F.lit(self.lo)) / F.lit(self.width)).cast("bigint")

    def edge(self, b: int) -> int:
        return self.lo + b * self.width


def _buckets(lo: int, hi: int, cost: int, target: int) -> _Buckets:
    count = min(MAX_BUCKETS, max(1, 64 * math.ceil(cost / target)))
    width = max(1, math.ceil((hi - lo + 1) / count))
    return _Buckets(lo, width, math.ceil((hi - lo + 1) / width))


def _target(spark, total: int) -> int:
    """Rows (and grid points) per chunk (module docstring, step 3)."""
    own = settings.get(spark, "wavesql.temporal.chunk_rows")
    if own:
        return own
    cores = max(1, spark.sparkContext.defaultParallelism)
    return min(1 << 18, max(1 << 14, math.ceil(total / (4 * cores))))


def _pack(costs, target: int, limit: int):
    """The first bucket of each chunk: consecutive buckets, up to ``target`` each; None
    when a bucket alone is over ``limit`` (the rows a Python task may hold)."""
    starts, current = [0], 0
    for b, cost in enumerate(costs):
        if cost > limit:
            return None
        if current and current + cost > target:
            starts.append(b)
            current = 0
        current += cost
    return starts


def _chunk_of(bucket, starts, labels):
    """The label of the chunk of a bucket column: a balanced CASE tree over the chunks'
    first buckets."""
    from pyspark.sql import functions as F

    def tree(a, b):
        if b - a == 1:
            return F.lit(labels[a])
        m = (a + b) // 2
        return F.when(bucket < F.lit(starts[m]), tree(a, m)).otherwise(tree(m, b))

    return tree(0, len(starts)).cast("bigint")


def _context_frame(spark, parts, fields, labels):
    """A DataFrame of context rows: ``parts`` is a list of ``(chunk, Arrow table)``;
    columns: CHUNK (the chunk's label), ``fields``, CONTEXT (true)."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from wavesql.udfs.temporal_chunks import CONTEXT

    schema = T.StructType([T.StructField(CHUNK, T.LongType(), False), *fields,
                           T.StructField(CONTEXT, T.BooleanType(), False)])
    tables = []
    for chunk, table in parts:
        if table.num_rows:
            tables.append(pa.table([pa.array([labels[chunk]] * table.num_rows, pa.int64()),
                                    *table.columns,
                                    pa.array([True] * table.num_rows)],
                                   names=[CHUNK, *table.column_names, CONTEXT]))
    if not tables:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(pa.concat_tables(tables, promote_options="permissive"),
                                 schema=schema)


def _nearest(present, count):
    """``(before, after)``: for each bucket b of 0 .. ``count``, the latest bucket < b in
    ``present`` (a set of buckets, -1 and ``count`` included) and the earliest >= b; None
    where there is none."""
    before, last = [], (-1 if -1 in present else None)
    for b in range(count + 1):
        before.append(last)
        if b in present:
            last = b
    after, first = [None] * (count + 1), None
    for b in range(count, -1, -1):
        if b in present:
            first = b
        after[b] = first
    return before, after


def _winners(rows, time_col, condition):
    """The rows of ``rows`` meeting ``condition``, collapsed per time (the greatest wins:
    udfs/temporal_chunks.py ``latest_per_time``, the SQL's duplicate-time rule), sorted by
    time, and their times as int64 (microseconds for a timestamp); None if Spark fails."""
    from wavesql.udfs.temporal_chunks import latest_per_time, micros

    table = _run(lambda: rows.where(condition).toArrow())
    if table is None:
        return None
    table = latest_per_time(table, time_col)
    return table, micros(table.column(time_col))


def _resolve(rows, us, time_col, buckets, wants, kinds):
    """RESAMPLE's context rows, ``[(chunk, one-row Arrow table)]``, from ``wants``: per
    chunk, the row wanted (``column`` None: at the latest time before the chunk, or the
    earliest after; else the latest row before / earliest after whose ``column`` holds a
    value), first looked for at the ``time`` the summaries give (the last / first time of
    the nearest bucket with such a row). The row at a time is the one that wins its ties;
    when that winner holds NULL in ``column`` although another row at that time had a
    value (the SQL sees a hole there), the rest of the bucket is searched, then the next
    bucket with a value, until found. Each round is one small job over the held rows: the
    rows at the times wanted, then (rarely) the rows of the buckets still searched.
    ``wants``: ``[chunk, column, before?, bucket, time]``; ``kinds``: ``(column, first
    times, last times)`` by bucket. None if a job fails."""
    import numpy as np

    parts, pending = [], []
    times = sorted({w[4] for w in wants})
    if times:
        got = _winners(rows, time_col, us.isin(times))
        if got is None:
            return None
        table, at = got
        index = {int(t): i for i, t in enumerate(at)}
        for w in wants:
            i = index[w[4]]
            if w[1] is None or table.column(w[1])[i].is_valid:
                parts.append((w[0], table.slice(i, 1)))
            else:
                pending.append(w)
    spans = {column: (los, his) for column, los, his in kinds}
    nearest = {column: _nearest({bk for bk, v in his.items() if v is not None},
                                buckets.count) for column, _, his in kinds}
    while pending:
        got = _winners(rows, time_col, buckets.expr(us).isin(sorted({w[3] for w in pending})))
        if got is None:
            return None
        table, at = got
        of = (at - buckets.lo) // buckets.width  # each time's bucket
        left = []
        for chunk, column, back, bk, time in pending:
            has = table.column(column).is_valid().to_numpy(zero_copy_only=False)
            found = np.flatnonzero((of == bk) & has & ((at < time) if back else (at > time)))
            if len(found):
                i = int(found[-1] if back else found[0])
                parts.append((chunk, table.slice(i, 1)))
                continue
            los, his = spans[column]
            before, after = nearest[column]
            nxt = before[bk] if back else after[bk + 1]
            if nxt is not None:  # search that bucket from its last (first) value on
                left.append([chunk, column, back, nxt, his[nxt] + 1 if back else los[nxt] - 1])
        pending = left
    return parts


# ------------------------------------------------------------------------------ RESAMPLE
def _resample(rel, rt, inputs):
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    # the pass's functions refer only to udfs/temporal_chunks.py: its Python workers
    # import that module, not the planner (seconds per worker)
    from wavesql.udfs.temporal_chunks import CONTEXT, conform, resample_chunk

    from . import task_memory
    from ..types import spark_struct

    r = rel.resample
    frame = inputs.frame(r.input)
    if r.keys or frame is None or rel.schema is None:
        return None
    fields = frame.schema.fields
    time_field = _find(fields, r.time_column)
    if not _carried(fields) or time_field is None \
            or time_field.dataType.simpleString() != "timestamp":
        return None
    names = [f.name for f in fields]
    time_col = time_field.name
    interp = tuple(_find(fields, c).name for c in r.numeric) if r.method == "linear" else ()
    if any(_find(fields, c).dataType.simpleString() in ("date", "timestamp", "boolean",
                                                        "string") for c in interp):
        return None
    out_type = spark_struct(rel.schema.fields)
    if out_type is None:
        return None
    spark, P = rt.spark, int(r.period_us)
    us = _micros(time_field)

    # 1. estimate: from a Parquet stream's footers, else the job that fills the held copy
    stats = inputs.footer(r.input, time_field, interp)
    if stats is None:
        held = inputs.held(r.input)
        got = _run(lambda: held.agg(F.count(_col(time_col)), F.min(us), F.max(us),
                                    *[F.count(F.when(_col(time_col).isNotNull(), _col(c)))
                                      for c in interp]).first())
        if got is None:
            return None
        inputs.filled(r.input)
        stats = (got[0], got[1], got[2], any(got[3 + i] < got[0] for i in range(len(interp))))
    n, lo, hi, holes = stats
    if not n or n < settings.get(spark, "wavesql.temporal.min_rows"):
        return None
    rows = inputs.held(r.input).where(_col(time_col).isNotNull())
    points = max(0, hi // P - (-(-lo // P)) + 1)
    target = _target(spark, n + points)
    buckets = _buckets(lo, hi, n + points, target)

    # 2. summaries per bucket, fixed-width (a hash aggregate): rows, first and last time,
    # for 'linear' with NULLs each interpolated column's first and last time with a value
    b = buckets.expr(us)
    aggs = [F.count(F.lit(1)).alias("n"), F.min(us).alias("lo"), F.max(us).alias("hi")]
    for i, c in enumerate(interp if holes else ()):
        has = _col(c).isNotNull()
        aggs += [F.min(F.when(has, us)).alias(f"lo{i}"), F.max(F.when(has, us)).alias(f"hi{i}")]
    summary = _run(lambda: rows.groupBy(b.alias("b")).agg(*aggs).toArrow())
    if summary is None:
        return None

    # 3. chunks and their context
    bs = summary.column("b").to_pylist()

    def per_bucket(name):
        return dict(zip(bs, summary.column(name).to_pylist()))

    counts = per_bucket("n")
    costs = []
    for k in range(buckets.count):
        s, e = max(buckets.edge(k), lo), min(buckets.edge(k + 1) - 1, hi)
        costs.append(counts.get(k, 0) + max(0, e // P - (-(-s // P)) + 1))
    limit = task_memory.max_rows(spark, len(names) + 1)
    starts = _pack(costs, target, limit)
    if starts is None:
        return None
    ends = starts[1:] + [buckets.count]
    # what each chunk needs: the row at the latest time before it and at the earliest after
    # it, and for 'linear' with NULLs each column's latest value before and earliest after
    kinds = [(None, per_bucket("lo"), per_bucket("hi"))]
    kinds += [(interp[i], per_bucket(f"lo{i}"), per_bucket(f"hi{i}"))
              for i in range(len(interp) if holes else 0)]
    wants = []  # [chunk, column or None, before?, bucket, time]
    for column, los, his in kinds:
        present = {bk for bk, v in his.items() if v is not None}
        before, after = _nearest(present, buckets.count)
        wants += [[c, column, True, before[s], his[before[s]]]
                  for c, s in enumerate(starts) if before[s] is not None]
        wants += [[c, column, False, after[e], los[after[e]]]
                  for c, e in enumerate(ends) if after[e] is not None]
    parts = _resolve(rows, us, time_col, buckets, wants, kinds)
    if parts is None:
        return None
    labels = _labels(len(starts))
    chunk = {label: c for c, label in enumerate(labels)}
    context = _context_frame(spark, parts, fields, labels)

    # 4. the pass: a partition per chunk (_labels)
    staged = rows.select(_chunk_of(b, starts, labels).alias(CHUNK), *[_col(c) for c in names],
                         F.lit(False).alias(CONTEXT)).unionByName(context) \
        .repartition(len(starts), CHUNK)
    start_us = [buckets.edge(s) for s in starts]
    end_us = [buckets.edge(e) for e in ends]
    target_schema = to_arrow_schema(out_type, timezone="UTC")
    method = r.method

    def resample_chunks(table):  # the name shows in Spark's plans
        c = chunk[table.column(CHUNK)[0].as_py()]
        out = resample_chunk(table, time_col, P, method, start_us[c], end_us[c], interp,
                             drop=(CHUNK,))
        return conform(out, target_schema)

    return staged.groupBy(CHUNK).applyInArrow(resample_chunks, out_type)


# ------------------------------------------------------------------------------ ASOF JOIN
def _asof(rel, rt, inputs):
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.udfs.temporal_chunks import CONTEXT, asof_chunk, conform

    from . import task_memory

    a = rel.asof
    left, right = inputs.frame(a.left), inputs.frame(a.right)
    if left is None or right is None:
        return None
    shape = asof_shape(rel, left.schema.fields, right.schema.fields)
    if shape is None:
        return None
    lt, rt_ = shape[0], shape[1]
    lfields, rfields = left.schema.fields, right.schema.fields
    lnames, rnames = [f.name for f in lfields], [f.name for f in rfields]
    spark, backward = rt.spark, a.direction == "backward"
    lus, rus = _micros(lt), _micros(rt_)

    # 1. estimate: the left side's rows with a time, from a Parquet stream's footers, else
    # the job that fills the left side's held copy
    stats = inputs.footer(a.left, lt)
    if stats is None:
        held = inputs.held(a.left)
        stats = _run(lambda: held.agg(F.count(_col(lt.name)), F.min(lus), F.max(lus)).first())
        if stats is None:
            return None
        inputs.filled(a.left)
    n, lo, hi = stats[0], stats[1], stats[2]
    if not n or n < settings.get(spark, "wavesql.temporal.min_rows"):
        return None
    left = inputs.held(a.left)
    target = _target(spark, 2 * n)
    buckets = _buckets(lo, hi, 2 * n, target)

    # 2. summaries, fixed-width (a hash aggregate): left and right rows per bucket and the
    # right side's latest time in it (backward join) or earliest (forward); right rows
    # before the left's first time go to bucket -1, after its last to bucket `count`
    lb = F.coalesce(buckets.expr(lus), F.lit(0).cast("bigint"))
    rb = (F.when(rus < F.lit(lo), F.lit(-1).cast("bigint"))
          .when(rus > F.lit(hi), F.lit(buckets.count).cast("bigint"))
          .otherwise(buckets.expr(rus)))
    right = inputs.held(a.right)  # filled by the summaries' job
    rights = right.where(_col(rt_.name).isNotNull())
    both = left.select(lb.alias("b"), F.lit(1).alias("l"), F.lit(None).cast("bigint").alias("t")) \
        .unionByName(rights.select(rb.alias("b"), F.lit(0).alias("l"), rus.alias("t")))
    edge = F.max("t") if backward else F.min("t")
    summary = _run(lambda: both.groupBy("b").agg(F.sum("l").alias("nl"),
                                                 F.count("t").alias("nr"),
                                                 edge.alias("edge")).toArrow())
    if summary is None:
        return None
    inputs.filled(a.right)

    # 3. chunks and their context: the right row at the edge time of the nearest bucket
    # with right rows before (backward) or after (forward) each chunk, the winner of its
    # ties (one small job over the held right rows at those times)
    bs = summary.column("b").to_pylist()
    nl = dict(zip(bs, summary.column("nl").to_pylist()))
    nr = dict(zip(bs, summary.column("nr").to_pylist()))
    edges = dict(zip(bs, summary.column("edge").to_pylist()))
    costs = [(nl.get(k) or 0) + (nr.get(k) or 0) for k in range(buckets.count)]
    limit = task_memory.max_rows(spark, len(lnames) + len(rnames) + 1)
    starts = _pack(costs, target, limit)
    if starts is None:
        return None
    ends = starts[1:] + [buckets.count]
    present = {bk for bk in bs if nr.get(bk)}
    before, after = _nearest(present, buckets.count)
    if backward:
        picks = [(c, edges[before[s]]) for c, s in enumerate(starts) if before[s] is not None]
    else:
        picks = [(c, edges[after[e]]) for c, e in enumerate(ends) if after[e] is not None]
    parts = []
    if picks:
        got = _winners(rights, rt_.name, rus.isin(sorted({t for _, t in picks})))
        if got is None:
            return None
        table, at = got
        index = {int(t): i for i, t in enumerate(at)}
        parts = [(c, table.slice(index[t], 1)) for c, t in picks]
    labels = _labels(len(starts))
    context = _context_frame(spark, parts, rfields, labels)

    # 4. the pass: left rows by chunk, cogrouped with the right rows of the chunk's range
    lcols, rcols, flat = asof_flat(lfields, rfields)
    staged_left = left.select(_chunk_of(lb, starts, labels).alias(CHUNK),
                              *[_col(c).alias(x) for c, x in zip(lnames, lcols)])
    own = rights.where((rb >= 0) & (rb < buckets.count))
    staged_right = own.select(_chunk_of(rb, starts, labels).alias(CHUNK),
                              *[_col(c) for c in rnames],
                              F.lit(False).alias(CONTEXT)).unionByName(context)
    staged_right = staged_right.select(CHUNK, *[_col(c).alias(x) for c, x in zip(rnames, rcols)],
                                       CONTEXT)
    target_schema = to_arrow_schema(flat, timezone="UTC")
    ltime, rtime = lcols[lnames.index(lt.name)], rcols[rnames.index(rt_.name)]
    direction, inclusive, outer = a.direction, a.inclusive, a.outer

    def asof_chunks(lefts, rights_):  # the name shows in Spark's plans
        if lefts.num_rows == 0:
            return target_schema.empty_table()
        out = asof_chunk(lefts, rights_, ltime, rtime, direction, inclusive, outer, MATCHED,
                         drop=(CHUNK,))
        return conform(out, target_schema)

    parts_ = len(starts)  # a partition per chunk on both sides (_labels)
    out = staged_left.repartition(parts_, CHUNK).groupBy(CHUNK) \
        .cogroup(staged_right.repartition(parts_, CHUNK).groupBy(CHUNK)) \
        .applyInArrow(asof_chunks, flat)
    return asof_relation(out, shape, lnames, lcols, rnames, rcols, outer)


def asof_flat(lfields, rfields):
    """``(left names, right names, flat type)``: the columns a pass over an un-keyed ASOF
    JOIN returns before :func:`asof_relation` -- each side's columns renamed ``__ws_l<i>``
    / ``__ws_r<i>`` (the sides may share names), then MATCHED."""
    from pyspark.sql import types as T

    lcols = [f"__ws_l{i}" for i in range(len(lfields))]
    rcols = [f"__ws_r{i}" for i in range(len(rfields))]
    flat = T.StructType(
        # nullable fields, as in the SQL's structs (each is NULL in the other union branch)
        [T.StructField(x, f.dataType, True) for x, f in zip(lcols, lfields)]
        + [T.StructField(x, f.dataType, True) for x, f in zip(rcols, rfields)]
        + [T.StructField(MATCHED, T.BooleanType(), False)])
    return lcols, rcols, flat


def asof_shape(rel, lfields, rfields):
    """``(left time field, right time field, left alias, right alias, copies)`` of the
    un-keyed ASOF JOIN ``rel`` (its sides' fields ``lfields`` / ``rfields``) when a pass
    can compute it -- columns of carried types, time columns both timestamps or both
    integers, the relation planner/temporal.py writes -- else None. ``copies``: the
    top-level copies of one side's columns, ``("l" | "r", name)``."""
    a = rel.asof
    if a is None or a.keys or rel.schema is None:
        return None
    lt, rt_ = _find(lfields, a.left_time), _find(rfields, a.right_time)
    if not (_carried(lfields) and _carried(rfields)) or lt is None or rt_ is None:
        return None
    kinds = {lt.dataType.simpleString(), rt_.dataType.simpleString()}
    if not (kinds == {"timestamp"} or kinds <= set(_INTEGRAL)):
        return None
    lnames, rnames = [f.name for f in lfields], [f.name for f in rfields]
    names = [f.name for f in rel.schema.fields]
    if len(names) < 2:
        return None
    lalias, ralias = names[0], names[1]
    shared = {n.lower() for n in lnames} & {n.lower() for n in rnames}
    hidden = shared | {lalias.lower(), ralias.lower()}
    copies = [("l", n) for n in lnames if n.lower() not in hidden] + \
             [("r", n) for n in rnames if n.lower() not in hidden]
    if names != [lalias, ralias] + [n for _, n in copies]:
        return None  # not the relation planner/temporal.py writes: leave it to the SQL
    return lt, rt_, lalias, ralias, copies


def asof_relation(out, shape, lnames, lcols, rnames, rcols, outer):
    """The joined relation planner/temporal.py's SQL gives (names, types, nullability),
    from a pass's flat rows ``out`` (:func:`asof_flat`; ``shape``: :func:`asof_shape`)."""
    from pyspark.sql import functions as F

    _, _, lalias, ralias, copies = shape
    lstruct = F.struct(*[F.col(x).alias(c) for c, x in zip(lnames, lcols)])
    rstruct = F.struct(*[F.col(x).alias(c) for c, x in zip(rnames, rcols)])
    joined = out.select(lstruct.alias(lalias),
                        (F.when(F.col(MATCHED), rstruct) if outer else rstruct).alias(ralias))
    return joined.select(_col(lalias), _col(ralias), *[
        F.col(quote(lalias if side == "l" else ralias)).getField(c).alias(c)
        for side, c in copies])

