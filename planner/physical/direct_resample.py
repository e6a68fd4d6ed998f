"""``RESAMPLE`` of a catalog Parquet stream, in parallel ranges of event time.

Rule :func:`resample_in_ranges`. planner/temporal.py lowers ``RESAMPLE(stream, ts, P,
method)`` to Spark SQL whose window over the whole series runs in **one Spark partition**:
a long un-keyed series is resampled by one core, after a scan, a shuffle and a sort. When
the RESAMPLE reads a catalog Parquet stream as it is, this rule does it TiLT's way instead
(as planner/physical/chunked_windows.py does for OVER windows): the stream is cut into
ranges of event time from its row groups' min/max statistics
(planner/physical/file_ranges.py), and each Spark task reads its range's rows plus the rows
at the latest time before it and the earliest after it (sources/parquet_chunks.py:
``neighbours``) and puts its share of the grid on them in numpy (udfs/time_resample.py).
Same semantics, same result columns (tests/test_resample_direct.py compares the two).

It applies in batch queries when every column is a number, boolean or timestamp (numpy
orders those as Spark does, for the duplicate-time rule), ``'linear'`` columns hold no
NULLs (a NULL's neighbours may lie beyond the range), the files pass
:func:`sources.parquet_chunks.index` and are in time order (read factor), and the stream
has at least ``wavesql.resample.min_rows`` rows (100,000; below it the SQL costs less than
a Python pass's set-up). ``SET wavesql.resample.direct = false`` turns it off. An aggregate
without GROUP BY over the RESAMPLE is computed in the same pass, per range, by
planner/physical/fused_chains.py (:func:`prepare` gives it the ranges and their grid
points).
"""

from __future__ import annotations

import dataclasses

from wavesql import settings

from .. import ir
from .plan import SqlPlan

_VALUE_TYPES = ("tinyint", "smallint", "int", "bigint", "float", "double", "boolean",
                "timestamp")


def resample_in_ranges(plan: SqlPlan) -> SqlPlan:
    """``plan`` with its whole result when the query is a RESAMPLE this rule computes;
    ``plan`` itself otherwise (the SQL then)."""
    if plan.query.resample is None:
        return plan
    df = _resample_frame(plan.query, plan.rt, plan.frames)
    return plan if df is None else dataclasses.replace(plan, result=df)


def _resample_frame(rel: ir.SqlQuery, rt, frames):
    """The RESAMPLE ``rel`` as a direct pass over its stream's files, or None (SQL then).
    ``frames``: ``rel``'s inputs lowered, ``(name, DataFrame)``."""
    from wavesql.sources.arrow import conform

    prepared = prepare(rel, rt, frames)
    if prepared is None:
        return None
    ranges, read, out_type = prepared
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(out_type, timezone="UTC")

    def resample_scan(batches):  # the name shows in Spark's plans
        for b in batches:
            for i in b.column(0).to_pylist():
                for batch in read(ranges[i]).to_batches():
                    yield conform(batch, target)

    n = len(ranges)
    return rt.spark.range(0, n, 1, n).mapInArrow(resample_scan, out_type)


def prepare(rel: ir.SqlQuery, rt, frames=None):
    """``(ranges, read, result type)`` of the direct RESAMPLE ``rel``, or None when it does
    not apply: ``read(range)`` is that range's grid points as an Arrow table (in time
    order, the range's own points only), the result type a PySpark StructType. Also used
    by planner/physical/fused_pass.py to aggregate the points where they are made; planned
    once per statement (``rt.prepared``). ``frames``: ``rel``'s inputs lowered; None asks
    only for what was planned when ``rel`` was lowered (lowering a query lowers its inputs
    first, so a RESAMPLE read by a fused chain has been planned by then), None if nothing
    was."""
    key = ("resample", id(rel))
    if key not in rt.prepared:
        if frames is None:
            return None
        rt.prepared[key] = _prepare(rel, rt, frames)
    return rt.prepared[key]


def _prepare(rel: ir.SqlQuery, rt, frames):
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.sources import parquet_chunks as pc_
    from wavesql.udfs.time_resample import resample_range

    from ..spark_sql import run_sql_frames
    from ..types import spark_struct
    from .file_ranges import direct_ranges

    if rt.streams is not None or not settings.get(rt.spark, "wavesql.resample.direct"):
        return None
    r = rel.resample
    source, time_name, period, method, numeric, keys = (
        r.input, r.time_column, r.period_us, r.method, r.numeric, r.keys)
    scan = dict(rel.inputs).get(source)
    if not isinstance(scan, ir.StreamScan) or keys:  # a series per key: the SQL plan
        return None
    stream = scan.stream
    if stream.format != "parquet" or dict(stream.options):
        return None
    fields = scan.schema.fields
    if any(f.type.strip().lower() not in _VALUE_TYPES for f in fields):
        return None
    names = {f.name.lower(): f.name for f in fields}
    time_col = names.get(time_name.lower())
    progress = names.get((stream.progress_column or "").lower())
    if time_col is None or (stream.progress_column and progress is None):
        return None
    frame = dict(frames)[source]
    wanted = {f.name: f.type for f in to_arrow_schema(frame.schema, timezone="UTC")}
    # the PROGRESS COLUMN is NULL on every data row: held as 'prev' it is the same NULL
    interpolate = tuple(names[c.lower()] for c in numeric
                        if names[c.lower()] != progress) if method == "linear" else ()
    min_rows = settings.get(rt.spark, "wavesql.resample.min_rows")
    ranges = direct_ranges(frame, stream, rt, time_col, wanted, progress, min_rows,
                           min_span=16 * period, neighbours=True, no_nulls=interpolate)
    if ranges is None:
        return None
    # the SQL lowering's own result type (names, types, nullability): Spark's analysis of it
    # at binding (asked again only for types that are not atomic)
    out_type = spark_struct(rel.schema.fields) if rel.schema is not None else None
    if out_type is None:
        out_type = run_sql_frames(rel.sql, [(source, frame)], rt, None).schema
    columns = [f.name for f in fields]

    def read(r):
        table = pc_.read_range(r, columns, time_col, progress, wanted)
        return resample_range(table, time_col, period, method, r.start, r.end, interpolate)

    return ranges, read, out_type
