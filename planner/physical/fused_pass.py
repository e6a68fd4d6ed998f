"""The fused pass of one chain: its levels compiled, its ranges planned, one DataFrame.

planner/physical/fused_chains.py finds a chain of SELECTs over a Parquet stream (or a
tumbling window over one, or a direct RESAMPLE of one); :func:`fused_frame` compiles its
levels (planner/physical/fused_compiler.py) into one :class:`udfs.fused.Program`,
checks the result's names and types against Spark's own analysis of the SELECT, plans the
ranges of event time (planner/physical/file_ranges.py) with the reach before each range
that the levels need, and returns a ``mapInArrow`` over one task per range
(``fused_chain_scan`` in Spark's plans). A total's partial aggregates are merged by Spark
in the SELECT's own expressions; a joined per-window aggregate is packed into one row
(``__wavesql_lookup_<i>``) broadcast beside every range.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from wavesql.dialect import to_spark_sql
from wavesql.sqltext import quote
from wavesql.udfs import fused
from wavesql.udfs.fused.expr import Column, WindowRef, columns_read, walk

from .. import ir
from ..ctes import visible_ctes
from ..spark_sql import run_sql_frames
from ..types import spark_struct
from ..windows import TIME
from .file_ranges import MIN_CHUNK_FRAMES, direct_groups, fitting_ranges
from .fused_compiler import Compiler, is_total
from .fused_joins import RIGHT_PREFIX, right_side
from .fused_types import kind_of
from .sql_shapes import min_rows

#: Rows a ``lag`` is assumed to reach back, in mean row spacings per row of offset, when the
#: read before a range is planned (further back is read when it is not enough).
LAG_SLACK = 4


def fused_frame(levels, stream, table, inputs, rt, schema=None, width=None, resample=None,
                joins=None):
    """``(DataFrame, rows)``: the fused pass for ``levels`` (bottom-up SELECTs over
    ``stream``), or ``(None, None)`` when the files are not ones it reads as Spark does (or
    too few rows); ``rows``: at most how many rows it gives when that is known (an
    aggregate per tumbling window: one row per window), else None. ``schema``: the top
    SELECT's result if known (ir.Schema; else Spark analyses it here); ``width``: the
    tumbling window the input is (its ``_time`` computed in the pass), None for a stream;
    ``resample``: the RESAMPLE (ir.SqlQuery) the input is, ``stream`` None (its grid points
    are made per range by planner/physical/direct_resample.py, and the chain runs over
    them); ``joins``: id of a level -> the lookup it joins (:class:`fused_joins.Join`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    frames = dict((n.lower(), df) for n, df in inputs)
    frame = frames.get(table.name.lower())
    event_time = resample.resample.time_column if resample is not None else stream.event_time
    if frame is None or not event_time:
        return None, None  # no event time: no order the ranges could follow
    fields = {f.name.lower(): f for f in frame.schema.fields}
    scope = [(f.name, Column(f.name.lower()), kind_of(f.dataType))
             for f in frame.schema.fields]
    time_name = event_time.lower()
    if fields.get(time_name) is None or kind_of(fields[time_name].dataType) != "timestamp":
        return None, None
    times = {time_name}
    bucket = TIME.lower() if width else None
    if bucket is not None and (fields.get(bucket) is None or bucket == time_name):
        return None, None
    buckets = {bucket} if bucket else set()
    ansi = str(rt.spark.conf.get("spark.sql.ansi.enabled", "true")).lower() == "true"
    compiled, reach_time, reach_rows, packed = [], 0, 0, []
    for select in levels:
        join = (joins or {}).get(id(select))
        right = None if join is None else right_side(join, frames, len(packed))
        if join is not None:
            if right is None:
                return None, None
            packed.append((frames[join.view.lower()], right.columns))
        compiler = Compiler(scope, times, select, ansi, buckets, width,
                            total=select is levels[-1] and is_total(select), right=right)
        level, scope, times, buckets, before, lags = compiler.level()
        compiled.append(level)
        reach_time += before
        reach_rows += lags
    shells = compiler.shells  # the top's, when it is a total
    compiled = _prune(compiled)
    for level in compiled:  # a level's columns are found by name (and Arrow's must differ)
        names = [name.lower() for name, _ in level.outputs]
        if len(set(names)) != len(names):
            return None, None  # ``*`` over a join of two ``_time``s...: Spark's own plan
    for level in compiled:  # the joined relations' columns the levels read, and their keys
        if level.lookup is not None:
            j = level.lookup.table
            read = {level.lookup.right_key.lower()} | {c[0].lower()
                                                        for c in level.lookup.columns}
            relation, columns = packed[j]
            packed[j] = (relation, tuple(c for c in columns if c[0].lower() in read))
    # the stream's columns the chain reads (not a joined relation's)
    used = {c for c in _columns_read(compiled[0]) if not c.startswith(RIGHT_PREFIX)}
    time_col = fields[time_name].name
    inputs_read = tuple((fields[c].name, kind_of(fields[c].dataType))
                        for c in sorted(used - {bucket} | {time_name}))
    program = fused.Program(inputs_read, time_col, tuple(compiled),
                            (fields[bucket].name, width) if bucket else None)
    # Spark's own analysis names and types the result; a differing compiled type refuses
    kinds = [kind for _, _, kind in scope]
    if schema is not None:
        result = spark_struct(schema.fields)
        if result is None:
            return None, None
    else:
        top = levels[-1].copy()
        ctes = visible_ctes(levels[-1])
        if ctes:
            top.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
        try:
            result = run_sql_frames(to_spark_sql(top), inputs, rt, None).schema
        except Exception:  # noqa: BLE001 -- Spark reports it on the original text
            return None, None
    if shells is None:
        out_type = result
        if [kind_of(f.dataType) for f in out_type.fields] != kinds:
            return None, None
    else:  # a total: one row of partial aggregates per range, merged by Spark below
        out_type = spark_struct([ir.Field(name, kind) for name, _, kind in scope])
    target = to_arrow_schema(out_type, timezone="UTC")
    if resample is not None:
        from . import direct_resample

        prepared = direct_resample.prepare(resample, rt)
        if prepared is None or reach_time or reach_rows:
            return None, None
        ranges, make_points, _ = prepared
        rows = None

        def evaluate(r, tables):  # the range's own grid points: complete by themselves
            return fused.run(make_points(r), program, r.start, None, ansi, tables)
    else:
        found = _stream_ranges(stream, frame, fields, inputs_read, time_col, rt, width,
                               reach_time, reach_rows, program, ansi)
        if found is None:
            return None, None
        ranges, evaluate, (first, last) = found
        top = compiled[-1]  # one row per window at most: an aggregate per window instant
        rows = (last - first) // width + 2 if top.group is not None and len(top.group) == 1 \
            else None

    joined = len(packed)  # (the closure must not hold the DataFrames)

    def fused_chain_scan(batches):  # the name shows in Spark's plans
        import pyarrow as pa

        for b in batches:
            for row, i in enumerate(b.column(0).to_pylist()):
                # the joined relations, each packed into one list of rows (see below)
                tables = [pa.Table.from_struct_array(b.column(1 + j).slice(row, 1).flatten())
                          for j in range(joined)]
                arrays = []
                for (values, valid), kind, field in zip(evaluate(ranges[i], tables), kinds,
                                                        target):
                    array = fused.to_arrow(values, valid, kind)
                    arrays.append(array if array.type.equals(field.type)
                                  else array.cast(field.type))
                yield pa.RecordBatch.from_arrays(arrays, schema=target)

    n = len(ranges)
    tasks = rt.spark.range(0, n, 1, n)
    for j, (relation, columns) in enumerate(packed):
        # the whole relation as one row (a list of its rows) beside every task's range:
        # computed once, broadcast, and read in the pass -- the rows it joins stay there
        names = [name for name, _, _ in columns]
        tasks = tasks.crossJoin(F.broadcast(relation.select(F.collect_list(F.struct(*[
            F.col(quote(c)) for c in names])).alias(f"__wavesql_lookup_{j}"))))
    df = tasks.mapInArrow(fused_chain_scan, out_type)
    if shells is None:
        return df, rows
    # the total's expressions, each aggregate replaced by its merge of the partials
    df = df.selectExpr(*[to_spark_sql(exp.alias_(shell, f.name, quoted=True))
                         for shell, f in zip(shells, result.fields)])
    if [kind_of(f.dataType) for f in df.schema.fields] != [kind_of(f.dataType)
                                                            for f in result.fields]:
        return None, None
    return df, None


def _stream_ranges(stream, frame, fields, inputs_read, time_col, rt, width, reach_time,
                   reach_rows, program, ansi):
    """``(ranges, evaluate)`` of a chain over a Parquet stream: ``evaluate(range)`` runs
    ``program`` over the range's rows and as many before as its levels reach (reading
    further back until its own rows are complete); None when the files do not qualify."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.sources import parquet_chunks as pc_

    progress = stream.progress_column
    if progress is not None:
        progress = fields.get(progress.lower()) and fields[progress.lower()].name
        if progress is None:
            return None
    read = [name for name, _ in inputs_read]
    arrow = to_arrow_schema(T.StructType([fields[c.lower()] for c in read]
                                         + ([fields[progress.lower()]] if progress else [])),
                            timezone="UTC")
    wanted = {f.name: f.type for f in arrow}
    groups = direct_groups(frame, stream, rt, time_col, wanted, progress, min_rows(rt.spark))
    if groups is None:
        return None
    total = sum(g.rows for g in groups)
    first, last = min(g.lo for g in groups), max(g.hi for g in groups)
    spacing = max(1, (last - first) // max(1, total))
    before = reach_time + LAG_SLACK * reach_rows * spacing
    # ranges that each fit a Python task's memory (planner/physical/task_memory.py), the
    # chain's outputs counted as columns too
    ranges = fitting_ranges(rt.spark, groups, 2 * len(read) + 1, before, 0,
                            max(1, MIN_CHUNK_FRAMES * before), align=width)
    if ranges is None:
        return None
    groups = tuple(groups)

    def evaluate(r, tables):
        while True:
            table = pc_.read_range(r, read, time_col, progress, wanted, context=False)
            complete = None if r.need_lo <= first else r.need_lo
            out = fused.run(table, program, r.start, complete, ansi, tables)
            if out is not None:
                return out
            # read twice as far back (at least some rows' worth)
            lo = r.start - max(2 * (r.start - r.need_lo), 64 * spacing)
            r = dataclasses.replace(r, need_lo=lo, groups=tuple(
                g for g in groups if g.hi >= lo and g.lo <= r.need_hi))

    return ranges, evaluate, (first, last)


def _prune(levels: list) -> list:
    """Drop the outputs (and windows) no level above reads: Spark would not evaluate them
    either (no error of theirs may be raised)."""
    out = list(levels)
    for i in range(len(out) - 2, -1, -1):
        wanted = _columns_read(out[i + 1])
        level = out[i]
        outputs = tuple((n, node) for n, node in level.outputs if n.lower() in wanted)
        out[i] = _keep_windows(dataclasses.replace(level, outputs=outputs))
    if out:
        out[-1] = _keep_windows(out[-1])
    return out


def _keep_windows(level):
    """``level`` with the windows no output reads left out (None: not evaluated), and the
    joined columns nothing reads."""
    if level.lookup is not None:
        read = columns_read(_level_roots(level, joined=False))
        level = dataclasses.replace(level, lookup=dataclasses.replace(
            level.lookup, columns=tuple(c for c in level.lookup.columns if c[1] in read)))
    roots = [e for _, e in level.outputs] + ([level.having] if level.having else [])
    used = {node.index for e in roots for node in walk(e) if isinstance(node, WindowRef)}
    return dataclasses.replace(level, windows=tuple(
        w if i in used else None for i, w in enumerate(level.windows)))


def _level_roots(level, joined=True):
    """The expressions a level evaluates over its input (``joined``: and its join's key,
    which reads the input before the join; None where a part is absent)."""
    # a GROUP BY level's outputs and HAVING read its groups (keys, aggregates), not its input
    outputs = [] if level.group is not None else [e for _, e in level.outputs]
    return outputs + [level.where] + list(level.group or ()) + [
        e for w in level.windows if w is not None for e in (w.arg, w.default) + w.keys] + (
        [level.lookup.key, level.lookup.where] if level.lookup is not None and joined else [])


def _columns_read(level) -> set[str]:
    return columns_read(_level_roots(level))
