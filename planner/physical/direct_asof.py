"""Un-keyed ``ASOF JOIN`` of two catalog Parquet streams, in parallel ranges of event time.

Rule :func:`asof_in_ranges`. planner/temporal.py lowers ``left ASOF [LEFT] JOIN right ON
l.t >= r.t`` (no equality key) to Spark SQL whose window over both sides runs in **one
Spark partition**: one core, after a scan, a shuffle and a sort. When both sides are
catalog Parquet streams read as they are, this rule does it as direct_resample.py does
RESAMPLE: the LEFT stream is cut into ranges of event time from its row groups' min/max
statistics (planner/physical/file_ranges.py), and each Spark task reads with pyarrow
(sources/parquet_chunks.py) its range's left rows, the right rows of the same range and
the right rows its left rows may match beyond it -- backward, all rows at the latest right
time before the range; forward, at the earliest right time from its end on, however far
(a gap of any length) -- from only the right row groups that can hold them (the right
stream's files are indexed too), then matches in numpy (udfs/temporal_chunks.py
``asof_chunk``: binary search, of right rows sharing a time the greatest wins). No row goes
through Spark's scan, shuffle or sort. Plans show the pass as ``asof_scan``.

Why those right rows suffice: a left time ``t`` in ``[start, end)`` matches backward the
greatest right time ``<= t`` (``< t`` strictly): either one in ``[start, t]`` (read) or
else the latest before ``start`` (its neighbour); forward symmetrically. Strictness,
LEFT (outer) or inner and the duplicate-time rule are the kernel's, as in
chunked_temporal.py's shuffled pass; the result relation (struct per side, top-level
copies, names, types, nullability) is built by the same code (``asof_relation``).

Where it applies: batch queries; both sides catalog Parquet streams with no OPTIONS whose
files pyarrow reads as Spark does (file_ranges.py ``direct_groups``: no partition folders,
footers with time statistics, same stored types); columns of the types the kernel
carries (chunked_temporal.py ``_TYPES``); time columns both timestamps or both integers;
at least ``wavesql.asof.min_rows`` left rows (100,000; below it the SQL costs less than
a Python pass's set-up); files in time order well enough that the two sides' rows are
not read more than ``MAX_READ_FACTOR`` times over (else the SQL); each range's rows within
a Python task's memory (task_memory.py; cut finer until they are). Right rows without a
time never match (the SQL drops them): their row groups' statistics are still used. Left
rows without a time: an inner join drops them, as reading by time does; ``ASOF LEFT
JOIN`` keeps them unmatched, and the first task reads them (parquet_chunks.py
``read_untimed``). ``SET wavesql.asof.direct = false`` turns the rule off.
"""

from __future__ import annotations

import dataclasses

from wavesql import settings

from .. import ir
from .plan import SqlPlan


def asof_in_ranges(plan: SqlPlan) -> SqlPlan:
    """``plan`` with its whole result when the query is an un-keyed ASOF JOIN of Parquet
    streams this rule computes; ``plan`` itself otherwise (the SQL then)."""
    q = plan.query
    if q.asof is None or q.asof.keys or plan.rt.streams is not None:
        return plan
    if not settings.get(plan.rt.spark, "wavesql.asof.direct"):
        return plan
    df = _asof_frame(q, plan.rt, dict(plan.frames))
    return plan if df is None else dataclasses.replace(plan, result=df)


def _parquet_stream(rel: ir.SqlQuery, name: str):
    scan = dict(rel.inputs).get(name)
    if not isinstance(scan, ir.StreamScan):
        return None
    s = scan.stream
    return s if s.format == "parquet" and not dict(s.options) else None


def _asof_frame(rel: ir.SqlQuery, rt, frames):
    """The ASOF JOIN ``rel`` as a direct pass over its streams' files, or None (the SQL).
    ``frames``: its inputs lowered, by name."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.sources import parquet_chunks as pc_
    from wavesql.udfs.temporal_chunks import asof_chunk, conform

    from .chunked_temporal import MATCHED, asof_flat, asof_relation, asof_shape
    from .file_ranges import _stream_files, direct_groups

    a = rel.asof
    lstream, rstream = _parquet_stream(rel, a.left), _parquet_stream(rel, a.right)
    left, right = frames.get(a.left), frames.get(a.right)
    if lstream is None or rstream is None or left is None or right is None:
        return None
    lfields, rfields = left.schema.fields, right.schema.fields
    shape = asof_shape(rel, lfields, rfields)
    if shape is None:
        return None
    lt, rt_ = shape[0], shape[1]
    ltn, rtn = lt.name, rt_.name
    integer = lt.dataType.simpleString() != "timestamp"
    lnames, rnames = [f.name for f in lfields], [f.name for f in rfields]
    lprog, rprog = _progress(lstream, lnames), _progress(rstream, rnames)
    if lprog is False or rprog is False:
        return None
    lwanted = {f.name: f.type for f in to_arrow_schema(left.schema, timezone="UTC")}
    rwanted = {f.name: f.type for f in to_arrow_schema(right.schema, timezone="UTC")}
    spark = rt.spark
    # a left row without a time: an inner join drops it, as reading by time does; LEFT
    # keeps it unmatched: the first task reads those rows (read_untimed)
    lgroups = direct_groups(left, lstream, rt, lt.name, lwanted, lprog,
                            max(1, settings.get(spark, "wavesql.asof.min_rows")),
                            null_times=True, integer_time=integer)
    if lgroups is None:
        return None
    untimed = _stream_files(left, lstream) if a.outer else None
    rgroups = direct_groups(right, rstream, rt, rt_.name, rwanted, rprog, 0,
                            null_times=True, integer_time=integer)
    if rgroups is None:
        return None
    pairs = _ranges(spark, lgroups, rgroups, a.direction, len(lnames) + len(rnames) + 1)
    if pairs is None:
        return None

    lcols, rcols, flat = asof_flat(lfields, rfields)
    target = to_arrow_schema(flat, timezone="UTC")
    ltime, rtime = lcols[lnames.index(lt.name)], rcols[rnames.index(rt_.name)]
    direction, inclusive, outer = a.direction, a.inclusive, a.outer

    def match(lrows, rrows):
        out = asof_chunk(lrows.rename_columns(lcols), rrows.rename_columns(rcols), ltime,
                         rtime, direction, inclusive, outer, MATCHED)
        return conform(out, target).to_batches()

    def asof_scan(batches):  # the name shows in Spark's plans
        for b in batches:
            for i in b.column(0).to_pylist():
                lr, rr = pairs[i]
                if i == 0 and untimed:  # LEFT: the left rows without a time, unmatched
                    lrows = pc_.read_untimed(untimed, lnames, ltn, lprog, lwanted,
                                             lr.settings)
                    if lrows.num_rows:
                        yield from match(lrows, pa.schema(
                            [(n, rwanted[n]) for n in rnames]).empty_table())
                lrows = pc_.read_range(lr, lnames, ltn, lprog, lwanted, context=False)
                if lrows.num_rows == 0:
                    continue
                yield from match(lrows, pc_.read_range(rr, rnames, rtn, rprog, rwanted,
                                                       context=False))

    n = len(pairs)
    out = spark.range(0, n, 1, n).mapInArrow(asof_scan, flat)
    return asof_relation(out, shape, lnames, lcols, rnames, rcols, outer)


def _progress(stream, names):
    """The stream's PROGRESS COLUMN as the frame names it, None without one, False when the
    frame lacks it (not a scan this pass reads)."""
    if not stream.progress_column:
        return None
    found = {n.lower(): n for n in names}.get(stream.progress_column.lower())
    return False if found is None else found


def _ranges(spark, lgroups, rgroups, direction: str, columns: int):
    """``[(left range, right range)]``: the left rows cut into ranges of event time of
    equal row counts (file_ranges.py ``direct_tasks``, counting both sides' rows), each
    with the right row groups of the same time range and those that can hold its
    neighbour (backward: the latest right time before it; forward: the earliest from its
    end on). Cut finer until every task's rows fit a Python task (task_memory.py); None
    when no cut fits or the rows would be read more than ``MAX_READ_FACTOR`` times over
    (files out of time order: the SQL's shuffle costs less)."""
    from wavesql.sources import parquet_chunks as pc_

    from . import task_memory
    from .file_ranges import MAX_READ_FACTOR, direct_tasks

    ltotal, rtotal = sum(g.rows for g in lgroups), sum(g.rows for g in rgroups)
    limit = task_memory.max_rows(spark, columns)
    if limit < 1:
        return None
    tasks = max(direct_tasks(spark, ltotal + rtotal), -(-(ltotal + rtotal) // limit))
    backward = direction == "backward"
    while True:
        pairs = []
        for lr in pc_.ranges(lgroups, tasks, 0, 0, 1):
            rr = pc_.span_range(rgroups, lr.start, lr.end, neighbours=True)
            # only the neighbour on the side the match looks to
            rr = dataclasses.replace(rr, after=()) if backward else \
                dataclasses.replace(rr, before=())
            pairs.append((lr, rr))
        lread = [sum(g.rows for g in lr.groups) for lr, _ in pairs]
        rread = [sum(g.rows for g in rr.groups) for _, rr in pairs]
        # (both sides together: a small right side read whole by every task costs little)
        if sum(lread) + sum(rread) > MAX_READ_FACTOR * (ltotal + rtotal):
            return None
        if max(x + y for x, y in zip(lread, rread)) <= limit:
            return pairs
        if len(pairs) < tasks or tasks >= ltotal:  # no finer cut exists
            return None
        tasks *= 2
