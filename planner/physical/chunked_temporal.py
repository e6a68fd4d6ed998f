"""Un-keyed ``RESAMPLE`` and ``ASOF JOIN`` in parallel chunks of event time, over any input.

Rule :func:`temporal_in_chunks`. planner/temporal.py lowers both operators to Spark SQL
windows (``lead``, ``last_value(...) IGNORE NULLS OVER (ORDER BY ...)``); without a key
(no ``PARTITION BY``, no equality in the ASOF condition) Spark runs that window in **one
partition**, on one core, after a shuffle and a sort. direct_resample.py avoids it for a
catalog Parquet stream read as it is; this rule does it for every other input (CSV or JSON
streams, views, CTEs, subqueries, Kafka batch reads, a Parquet stream the direct pass
refuses), through Spark's shuffle, TiLT's way:

1. **estimate**: one aggregate job over the input (RESAMPLE) or the left side (ASOF):
   rows with a time, first and last time (and, for ``'linear'``, whether an interpolated
   column holds NULLs);
2. **summaries**: the span is cut into up to :data:`MAX_BUCKETS` equal buckets and one
   aggregation computes, per bucket, its rows and the rows at its edges -- the row at its
   latest time and the one at its earliest (``max(struct(t, row))`` /
   ``max(struct(-1 - t, row))``: with the rest of the row as the tie-break, that *is*
   planner/temporal.py's duplicate-time rule), for ``'linear'`` with NULLs each column's
   last and first non-NULL (over rows first collapsed per time, so a NULL winning a tie is a
   hole as in the SQL), for an ASOF JOIN the right side's rows at the edges;
3. **chunks**: on the driver, consecutive buckets are packed into chunks of about
   ``wavesql.temporal.chunk_rows`` rows and grid points (about four chunks per core, none
   over a Python task's memory budget: task_memory.py; a bucket too big alone leaves the
   query to the SQL), and each chunk is given its **context**: the edge rows of the nearest
   non-empty buckets before and after it, however far (a dropout of any length costs no
   look-back);
4. **the pass**: every row is tagged with its chunk (a small CASE tree over the chunk
   starts), the context rows (a few per chunk, a DataFrame made on the driver) are added,
   and ``groupBy(chunk).applyInArrow`` (RESAMPLE) or ``cogroup(...).applyInArrow`` (ASOF:
   left rows by chunk, right rows of the chunk's time range plus its context) runs the numpy
   kernels of udfs/temporal_chunks.py. Spark plans show them as ``resample_chunks`` /
   ``asof_chunks``.

Exactly the SQL's semantics (tests/test_temporal_parallel.py: pandas and numpy oracles, and
the SQL). Where it applies: batch queries, every column a number (not DECIMAL), boolean,
string, date or timestamp (types whose order Arrow's sort shares with Spark, for the
duplicate-time rule), unique column names; ASOF time columns both timestamps or both
integers; at least ``wavesql.temporal.min_rows`` rows with a time (RESAMPLE's input, the
ASOF's left side), since the pass costs two small jobs, a shuffle and a Python set-up.
It runs only with ``SET wavesql.temporal.parallel = true``: reading the input three times
(estimate, summary, pass), it measured 0.58x the one-partition SQL over 300k CSV rows
(benchmarks/temporal_parallel/results.md); reading it once is what would make it the
default. The estimate and summary jobs run
when the query is planned, as chunked_windows.py's row count does; a failing job (bad
input) leaves the query to the SQL, which reports the error where it always does.
"""

from __future__ import annotations

import dataclasses
import math

from wavesql import settings
from wavesql.sqltext import quote

from .plan import SqlPlan

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
    if q.resample is not None:
        df = _resample(q, plan.rt, dict(plan.frames))
    else:
        df = _asof(q, plan.rt, dict(plan.frames))
    return plan if df is None else dataclasses.replace(plan, result=df)


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


def _flat(summary):
    """The summary with each edge column ``struct(k, w)`` replaced by its row ``w``: a
    nullable column (as a field of a struct, Spark types it never NULL, and PySpark's
    ``toArrow`` refuses the NULL that ``max`` gives a bucket without such a row)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    return summary.select(*[F.col(f.name).getField("w").alias(f.name)
                            if isinstance(f.dataType, T.StructType) else F.col(f.name)
                            for f in summary.schema.fields])


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
    count = min(MAX_BUCKETS, max(1, 8 * math.ceil(cost / target)))
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


def _chunk_of(bucket, starts):
    """The chunk of a bucket column: a balanced CASE tree over the chunks' first buckets."""
    from pyspark.sql import functions as F

    def tree(a, b):
        if b - a == 1:
            return F.lit(a)
        m = (a + b) // 2
        return F.when(bucket < F.lit(starts[m]), tree(a, m)).otherwise(tree(m, b))

    return tree(0, len(starts)).cast("bigint")


def _edge_rows(summary, column: str, index):
    """The rows (an Arrow table, the input's columns) of the struct ``column`` (``struct(k,
    w: struct(row))``) of the collected summary at the positions ``index``."""
    import pyarrow as pa

    w = summary.column(column).combine_chunks()
    rows = w.take(pa.array(index, pa.int64()))
    return pa.Table.from_struct_array(rows) if len(rows) else \
        pa.schema([pa.field(f.name, f.type) for f in w.type]).empty_table()


def _context_frame(spark, parts, fields):
    """A DataFrame of context rows: ``parts`` is a list of ``(chunk, Arrow table)``;
    columns: CHUNK, ``fields``, CONTEXT (true)."""
    import pyarrow as pa
    from pyspark.sql import types as T

    from wavesql.udfs.temporal_chunks import CONTEXT

    schema = T.StructType([T.StructField(CHUNK, T.LongType(), False), *fields,
                           T.StructField(CONTEXT, T.BooleanType(), False)])
    tables = []
    for chunk, table in parts:
        if table.num_rows:
            tables.append(pa.table([pa.array([chunk] * table.num_rows, pa.int64()),
                                    *table.columns,
                                    pa.array([True] * table.num_rows)],
                                   names=[CHUNK, *table.column_names, CONTEXT]))
    if not tables:
        return spark.createDataFrame([], schema)
    return spark.createDataFrame(pa.concat_tables(tables, promote_options="permissive"),
                                 schema=schema)


def _conform(table, target):
    """``table`` with exactly the Arrow types of ``target`` (applyInArrow checks them)."""
    import pyarrow as pa

    arrays = []
    for field in target:
        col = table.column(field.name)
        arrays.append(col if col.type.equals(field.type) else col.cast(field.type))
    return pa.Table.from_arrays(arrays, schema=target)


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


# ------------------------------------------------------------------------------ RESAMPLE
def _resample(rel, rt, frames):
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.udfs.temporal_chunks import CONTEXT, resample_chunk

    from . import task_memory
    from ..types import spark_struct

    r = rel.resample
    frame = frames.get(r.input)
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
    rows = frame.where(_col(time_col).isNotNull())

    # 1. estimate
    stats = _run(lambda: rows.agg(F.count(F.lit(1)), F.min(us), F.max(us),
                                  *[F.count(_col(c)) for c in interp]).first())
    if stats is None or not stats[0] or stats[0] < settings.get(spark, "wavesql.temporal.min_rows"):
        return None
    n, lo, hi = stats[0], stats[1], stats[2]
    holes = any(stats[3 + i] < n for i in range(len(interp)))
    points = max(0, hi // P - (-(-lo // P)) + 1)
    target = _target(spark, n + points)
    buckets = _buckets(lo, hi, n + points, target)

    # 2. summaries per bucket
    b = buckets.expr(us)
    row = F.struct(*[_col(c) for c in names])
    if holes:  # collapse each time first: a NULL that wins a tie is a hole
        base = rows.groupBy(b.alias("b"), us.alias("t")).agg(F.max(row).alias("w"),
                                                               F.count(F.lit(1)).alias("n"))
        t, w, count = F.col("t"), F.col("w"), F.sum("n")
    else:
        base = rows.select(b.alias("b"), us.alias("t"), row.alias("w"))
        t, w, count = F.col("t"), F.col("w"), F.count(F.lit(1))
    last = F.struct(t.alias("k"), w.alias("w"))
    first = F.struct((F.lit(-1) - t).alias("k"), w.alias("w"))
    aggs = [count.alias("n"), F.max(last).alias("last"), F.max(first).alias("first")]
    if holes:
        for i, c in enumerate(interp):
            has = w.getField(c).isNotNull()
            aggs += [F.max(F.when(has, last)).alias(f"last{i}"),
                     F.max(F.when(has, first)).alias(f"first{i}")]
    summary = _run(lambda: _flat(base.groupBy("b").agg(*aggs)).toArrow())
    if summary is None:
        return None

    # 3. chunks and their context
    bs = summary.column("b").to_pylist()
    at = {bk: i for i, bk in enumerate(bs)}
    counts = dict(zip(bs, summary.column("n").to_pylist()))
    costs = []
    for k in range(buckets.count):
        s, e = max(buckets.edge(k), lo), min(buckets.edge(k + 1) - 1, hi)
        costs.append(counts.get(k, 0) + max(0, e // P - (-(-s // P)) + 1))
    limit = task_memory.max_rows(spark, len(names) + 1)
    starts = _pack(costs, target, limit)
    if starts is None:
        return None
    ends = starts[1:] + [buckets.count]
    kinds = [("last", "first", set(bs))]
    for i in range(len(interp) if holes else 0):
        kinds.append((f"last{i}", f"first{i}",
                      {bk for bk, v in zip(bs, summary.column(f"last{i}").to_pylist())
                       if v is not None}))
    parts = []
    for lname, fname, present in kinds:
        before, after = _nearest(present, buckets.count)
        prev = [(c, at[before[s]]) for c, s in enumerate(starts) if before[s] is not None]
        nxt = [(c, at[after[e]]) for c, e in enumerate(ends) if after[e] is not None]
        for name, picks in ((lname, prev), (fname, nxt)):
            table = _edge_rows(summary, name, [i for _, i in picks])
            for c, j in zip([c for c, _ in picks], range(len(picks))):
                parts.append((c, table.slice(j, 1)))
    context = _context_frame(spark, parts, fields)

    # 4. the pass
    staged = rows.select(_chunk_of(b, starts).alias(CHUNK), *[_col(c) for c in names],
                         F.lit(False).alias(CONTEXT)).unionByName(context)
    start_us = [buckets.edge(s) for s in starts]
    end_us = [buckets.edge(e) for e in ends]
    target_schema = to_arrow_schema(out_type, timezone="UTC")
    method = r.method

    def resample_chunks(table):  # the name shows in Spark's plans
        c = table.column(CHUNK)[0].as_py()
        out = resample_chunk(table, time_col, P, method, start_us[c], end_us[c], interp,
                             drop=(CHUNK,))
        return _conform(out, target_schema)

    return staged.groupBy(CHUNK).applyInArrow(resample_chunks, out_type)


# ------------------------------------------------------------------------------ ASOF JOIN
def _asof(rel, rt, frames):
    from pyspark.sql import functions as F
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.udfs.temporal_chunks import CONTEXT, asof_chunk

    from . import task_memory

    a = rel.asof
    left, right = frames.get(a.left), frames.get(a.right)
    if a.keys or left is None or right is None or rel.schema is None:
        return None
    lfields, rfields = left.schema.fields, right.schema.fields
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
    spark, backward = rt.spark, a.direction == "backward"
    lus, rus = _micros(lt), _micros(rt_)

    # 1. estimate: the left side's rows with a time
    stats = _run(lambda: left.where(_col(lt.name).isNotNull())
                 .agg(F.count(F.lit(1)), F.min(lus), F.max(lus)).first())
    if stats is None or not stats[0] or stats[0] < settings.get(spark, "wavesql.temporal.min_rows"):
        return None
    n, lo, hi = stats
    target = _target(spark, 2 * n)
    buckets = _buckets(lo, hi, 2 * n, target)

    # 2. summaries: left and right rows per bucket, the right rows at each bucket's edge
    # (the latest for a backward join, the earliest for a forward one); right rows before
    # the left's first time go to bucket -1, after its last to bucket `count`
    lb = F.coalesce(buckets.expr(lus), F.lit(0).cast("bigint"))
    rb = (F.when(rus < F.lit(lo), F.lit(-1).cast("bigint"))
          .when(rus > F.lit(hi), F.lit(buckets.count).cast("bigint"))
          .otherwise(buckets.expr(rus)))
    key = rus if backward else F.lit(-1) - rus
    wrow = F.struct(key.alias("k"), F.struct(*[_col(c) for c in rnames]).alias("w"))
    rights = right.where(_col(rt_.name).isNotNull())
    both = left.select(lb.alias("b"), F.lit(1).alias("l"),
                       F.lit(None).cast(_struct_type(rights, rnames, key, F))
                       .alias("r")) \
        .unionByName(rights.select(rb.alias("b"), F.lit(0).alias("l"), wrow.alias("r")))
    summary = _run(lambda: _flat(both.groupBy("b").agg(F.sum("l").alias("nl"),
                                                       F.count("r").alias("nr"),
                                                       F.max("r").alias("edge"))).toArrow())
    if summary is None:
        return None

    # 3. chunks and their context: the edge row of the nearest bucket with right rows
    # before (backward) or after (forward) each chunk
    bs = summary.column("b").to_pylist()
    at = {bk: i for i, bk in enumerate(bs)}
    nl = dict(zip(bs, summary.column("nl").to_pylist()))
    nr = dict(zip(bs, summary.column("nr").to_pylist()))
    costs = [(nl.get(k) or 0) + (nr.get(k) or 0) for k in range(buckets.count)]
    limit = task_memory.max_rows(spark, len(lnames) + len(rnames) + 1)
    starts = _pack(costs, target, limit)
    if starts is None:
        return None
    ends = starts[1:] + [buckets.count]
    present = {bk for bk in bs if nr.get(bk)}
    before, after = _nearest(present, buckets.count)
    if backward:
        picks = [(c, at[before[s]]) for c, s in enumerate(starts) if before[s] is not None]
    else:
        picks = [(c, at[after[e]]) for c, e in enumerate(ends) if after[e] is not None]
    table = _edge_rows(summary, "edge", [i for _, i in picks])
    parts = [(c, table.slice(j, 1)) for j, (c, _) in enumerate(picks)]
    context = _context_frame(spark, parts, rfields)

    # 4. the pass: left rows by chunk, cogrouped with the right rows of the chunk's range
    lcols = [f"__ws_l{i}" for i in range(len(lnames))]
    rcols = [f"__ws_r{i}" for i in range(len(rnames))]
    staged_left = left.select(_chunk_of(lb, starts).alias(CHUNK),
                              *[_col(c).alias(x) for c, x in zip(lnames, lcols)])
    own = rights.where((rb >= 0) & (rb < buckets.count))
    staged_right = own.select(_chunk_of(rb, starts).alias(CHUNK), *[_col(c) for c in rnames],
                              F.lit(False).alias(CONTEXT)).unionByName(context)
    staged_right = staged_right.select(CHUNK, *[_col(c).alias(x) for c, x in zip(rnames, rcols)],
                                       CONTEXT)
    flat = T.StructType(
        # nullable fields, as in the SQL's structs (each is NULL in the other union branch)
        [T.StructField(x, f.dataType, True) for x, f in zip(lcols, lfields)]
        + [T.StructField(x, f.dataType, True) for x, f in zip(rcols, rfields)]
        + [T.StructField(MATCHED, T.BooleanType(), False)])
    target_schema = to_arrow_schema(flat, timezone="UTC")
    ltime, rtime = lcols[lnames.index(lt.name)], rcols[rnames.index(rt_.name)]
    direction, inclusive, outer = a.direction, a.inclusive, a.outer

    def asof_chunks(lefts, rights_):  # the name shows in Spark's plans
        if lefts.num_rows == 0:
            return target_schema.empty_table()
        out = asof_chunk(lefts, rights_, ltime, rtime, direction, inclusive, outer, MATCHED,
                         drop=(CHUNK,))
        return _conform(out, target_schema)

    out = staged_left.groupBy(CHUNK).cogroup(staged_right.groupBy(CHUNK)) \
        .applyInArrow(asof_chunks, flat)
    lstruct = F.struct(*[F.col(x).alias(c) for c, x in zip(lnames, lcols)])
    rstruct = F.struct(*[F.col(x).alias(c) for c, x in zip(rnames, rcols)])
    joined = out.select(lstruct.alias(lalias),
                        (F.when(F.col(MATCHED), rstruct) if outer else rstruct).alias(ralias))
    return joined.select(_col(lalias), _col(ralias), *[
        F.col(quote(lalias if side == "l" else ralias)).getField(c).alias(c)
        for side, c in copies])


def _struct_type(rights, rnames, key, F):
    """The Spark type of the right side's edge struct ``struct(k, w: struct(row))``."""
    return rights.select(F.struct(key.alias("k"), F.struct(*[
        _col(c) for c in rnames]).alias("w")).alias("r")).schema["r"].dataType
