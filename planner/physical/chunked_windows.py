"""Chunked OVER windows: RANGE frames evaluated in parallel chunks of event time.

Rule :func:`chunk_windows`. Spark runs ``avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 20
MILLISECONDS PRECEDING AND CURRENT ROW)`` in **one partition** (there is no PARTITION BY to
split on), and its sliding frame re-aggregates every row's whole frame: one core, O(rows x
frame). A time-bounded frame needs only the rows within its interval, so the stream can be
cut into chunks of event time, each handed the rows that precede it by the frame's reach
(*context*), and evaluated independently (TiLT's boundary resolution). Here:

1. every row goes to its own chunk ``floor(t / C)`` and, flagged as context, to the chunks
   whose frames reach it (``explode(sequence(...))``; with ``C`` at least
   ``MIN_CHUNK_FRAMES`` frame reaches, that is at most one or two more);
2. ``groupBy(chunk).applyInArrow`` runs the numpy kernel of ``udfs/time_windows.py`` on each
   chunk: frames by binary search, sums in row order, spreads in two passes;
3. the SELECT that held the windows reads the kernel's output instead, its windows replaced
   by the result columns; its WHERE moved below the windows (SQL filters before windowing).

When the SELECT reads a catalog Parquet stream (with no WHERE, or one of comparisons with
literals that the pass applies itself: planner/physical/row_filter.py), steps 1-2 skip
Spark altogether (:func:`_direct`): the chunks are ranges of event time planned from the row
groups' min/max statistics (planner/physical/file_ranges.py), and each task reads the row
groups its range and its frames' reach need with pyarrow (sources/parquet_chunks.py) -- no
scan, ``explode``, shuffle or sort before the windows. Files it cannot read exactly as
Spark does (NULL times, other stored types, partition folders, out of time order) keep the
shuffled pass. Windows with a PARTITION BY take the direct pass too: there it costs no
more JVM <-> Python crossings than Spark's own plan.

Where: batch queries only (the continuous runner evaluates OVER windows over its own
bounded buffers, streaming/runner.py), the SELECTs where the rewrite is exact: the
window's ORDER BY is one ascending TIMESTAMP expression, the frame is ``RANGE BETWEEN
<interval> PRECEDING|CURRENT ROW AND CURRENT ROW|<interval> PRECEDING|FOLLOWING``, the
function one of :data:`udfs.time_windows.FUNCTIONS` over a numeric argument (not DECIMAL),
the SELECT reads one table (no join) and has no GROUP BY (windows over groups run after
aggregation). In one SELECT the windows sharing the most common (PARTITION BY, ORDER BY)
are chunked together; any other window stays Spark's, over the same filtered rows.

Windows with a PARTITION BY are left to Spark when they would need the shuffled pass:
Spark already spreads their partitions over the cores, and the shuffled pass's JVM <->
Python crossings can cost more than the chunking saves (a few rows per frame, as in TiLT's
fraud detector). ``SET wavesql.windows.chunked = all`` chunks them too, ``false`` turns the
rule off, direct pass included (tests/test_time_windows.py compares all three with Spark's
own windows).

The chunk length ``C`` targets :func:`_target_rows` rows per chunk, from a density estimate
read from the Parquet footers of the streams below the query (row count, min/max of the
event time) or, for other inputs, from one aggregate job over the filtered rows. Inputs
estimated under ``wavesql.windows.min_rows`` rows keep Spark's window: the chunked pass
costs a shuffle and a Python pass's set-up, which pays only where Spark's single-partition
window is slow.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

from sqlglot import exp

from wavesql import settings
from wavesql.dialect import to_spark_sql
from wavesql.sqltext import quote
from wavesql.udfs import time_windows as kernel

from .. import ir
from ..ctes import visible_ctes
from ..spark_sql import run_sql_frames
from .file_ranges import MIN_CHUNK_FRAMES, direct_ranges
from .plan import SqlPlan
from .row_filter import as_row_filter
from .sql_shapes import depth, direct_stream, frame_shape, min_rows, windows_mode

_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")
_counter = itertools.count()


def chunk_windows(plan: SqlPlan) -> SqlPlan:
    """``plan`` with the chunkable OVER windows of its SQL read from chunked passes, each a
    view added to ``plan.views``; ``plan`` itself when none applies (module docstring)."""
    tree, views = chunk(plan.read(), plan.inputs(), plan.rt, _streams_below(plan.query),
                          plan.scans())
    if not views:
        return plan
    return dataclasses.replace(plan, tree=tree, views={**plan.views, **views})


def chunk(tree: exp.Expression, inputs, rt, streams=(), scans=None):
    """``(tree, extra views)``: a copy of the query's AST ``tree`` with its chunkable windows read
    from chunked passes, each registered under a view name returned in ``extra`` (name ->
    DataFrame); ``tree`` itself (and no views) when nothing applies. ``inputs``: ``(name,
    DataFrame)`` the query reads; ``streams``: the catalog streams below the query (for the
    density estimate); ``scans``: lower-case input name -> the catalog stream it scans as it
    is (those the windows may read straight from their Parquet files)."""
    mode = windows_mode(rt.spark)
    if rt.streams is not None or mode == "false" or tree.find(exp.Window) is None:
        return tree, {}
    given, tree = tree, tree.copy()
    selects = sorted(tree.find_all(exp.Select), key=lambda s: -depth(s))  # inner first
    scans = scans or {}
    planned = [(select, p) for select in selects
               if (p := _plan_select(select)) is not None
               and (not p.partition or mode == "all" or direct_stream(select, scans))]
    if not planned:
        return given, {}
    # read once per query, and only if a shuffled pass needs it (the direct pass reads the
    # footers itself): the same streams for every SELECT
    footers = functools.cache(lambda: _footer_estimate(streams))
    views: dict = {}
    for select, windows in planned:
        name = f"__wavesql_timewin_{next(_counter)}"
        df = _chunked(select, windows, name, inputs, rt, views, footers,
                      direct_stream(select, scans))
        if df is not None:
            views[name] = df
    if not views:
        return given, {}
    return tree, views


class _Planned:
    def __init__(self, windows, specs, args, order, partition):
        self.windows = windows        # the exp.Window nodes replaced
        self.specs = specs            # kernel.Spec per window
        self.args = args              # argument expressions (kernel.arg_column(i))
        self.order = order            # ORDER BY expression
        self.partition = partition    # PARTITION BY expressions


def _plan_select(select: exp.Select) -> _Planned | None:
    from_ = select.args.get("from_")
    if (from_ is None or not isinstance(from_.this, exp.Table) or select.args.get("joins")
            or select.args.get("laterals") or select.args.get("group")
            or select.args.get("having")):
        return None
    mine = [w for w in select.find_all(exp.Window) if w.find_ancestor(exp.Select) is select]
    if any(isinstance(n, exp.AggFunc) and n.find_ancestor(exp.Window) is None
           and n.find_ancestor(exp.Select) is select for n in select.find_all(exp.AggFunc)):
        return None  # an aggregate query: its windows run over the groups
    groups: dict[tuple, list] = {}
    for w in mine:
        shape = frame_shape(w)
        if shape is not None:
            groups.setdefault(shape[0], []).append((w, shape[1]))
    if not groups:
        return None
    key, chosen = max(groups.items(), key=lambda kv: len(kv[1]))
    windows, specs, args = [], [], []
    for w, (func, arg, before, after) in chosen:
        index = None
        if arg is not None:
            index = len(args)
            args.append(arg)
        windows.append(w)
        specs.append(kernel.Spec(func, index, before, after))
    first = chosen[0][0]
    order = first.args["order"].expressions[0].this
    return _Planned(windows, specs, args, order, list(first.args.get("partition_by") or []))


def _chunked(select, planned: _Planned, name, inputs, rt, views, footers, stream=None):
    """The chunked pass's DataFrame, ``select`` rewritten to read it; None to leave it.
    ``stream``: the catalog stream ``select`` reads as it is, whose Parquet files the pass
    may read itself (:func:`_direct`)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    table = select.args["from_"].this
    alias = table.alias_or_name
    where = select.args.get("where")
    base = exp.select(exp.Star()).from_(table.copy())
    if where is not None:
        base = base.where(where.this.copy())
    ctes = visible_ctes(select)
    if ctes:
        base.set("with_", exp.With(expressions=[c.copy() for c in ctes]))
    helpers = [exp.alias_(a.copy(), kernel.arg_column(i), quoted=True)
               for i, a in enumerate(planned.args)]
    helpers.append(exp.alias_(planned.order.copy(), "__wavesql_t", quoted=True))
    helpers += [exp.alias_(p.copy(), kernel.key_column(i), quoted=True)
                for i, p in enumerate(planned.partition)]
    inner = base.copy()
    inner.set("expressions", [exp.Column(this=exp.Star(), table=exp.to_identifier(alias))]
              + helpers)
    all_inputs = list(inputs) + list(views.items())
    try:
        child = run_sql_frames(to_spark_sql(inner), all_inputs, rt, None)
    except Exception:  # noqa: BLE001 -- Spark will report it on the original text
        return None
    fields = {f.name: f for f in child.schema.fields}
    if not isinstance(fields["__wavesql_t"].dataType, T.TimestampType):
        return None
    for i in range(len(planned.args)):
        if fields[kernel.arg_column(i)].dataType.simpleString() not in _NUMERIC:
            return None
    source = [f for f in child.schema.fields if not f.name.startswith("__wavesql_")]
    used = _used_columns(select, planned.windows, [f.name for f in source])
    passthrough = [f.name for f in source if f.name.lower() in used]
    if len({n.lower() for n in passthrough}) != len(passthrough):
        return None  # duplicate names (a join below): keep Spark's window
    # Send each column once: an argument or the time that is a column already sent is read
    # from it (Arrow's JVM <-> Python crossing costs more than the window arithmetic).
    sent = {n.lower(): n for n in passthrough}
    helpers_sent: list[str] = []

    def column_for(expr, helper):
        if isinstance(expr, exp.Column) and expr.name.lower() in sent \
                and fields.get(sent[expr.name.lower()]) is not None:
            return sent[expr.name.lower()]
        helpers_sent.append(helper)
        return helper

    args = [column_for(a, kernel.arg_column(i)) for i, a in enumerate(planned.args)]
    time_col = column_for(planned.order, "__wavesql_t")
    specs = tuple(kernel.Spec(s.func, None if s.arg is None else args[s.arg], s.before, s.after)
                  for s in planned.specs)
    if stream is not None:
        frame = dict((n.lower(), df) for n, df in inputs).get(table.name.lower())
        direct = _direct(planned, fields, passthrough, stream, frame, rt,
                         where.this if where is not None else None)
        if direct is not None:
            _replace(select, planned, name, alias, passthrough, used)
            return direct
    if planned.partition and windows_mode(rt.spark) != "all":
        return None  # partitioned windows are Spark's unless read straight from the files
    estimate = footers() or _counted(child)
    if estimate is None or (estimate[0] or 0) < min_rows(rt.spark):
        return None  # small input: Spark's window costs less than a Python pass's set-up
    chunk_us, origin = _chunk_length(rt, planned, estimate)
    reach_before = max(s.before for s in planned.specs)
    reach_after = max(max(s.after, 0) for s in planned.specs)
    chunk_us = _fitting_chunk(rt.spark, estimate, chunk_us, reach_before + reach_after,
                              len(passthrough) + len(helpers_sent) + len(planned.specs) + 2)
    if chunk_us is None:
        return None  # even a small chunk's context would not fit a worker: Spark's window
    us = F.unix_micros(F.col("__wavesql_t")) - F.lit(origin)
    own = F.floor(us / chunk_us)
    chunks = F.sequence(F.floor((us - reach_after) / chunk_us),
                        F.floor((us + reach_before) / chunk_us))
    keys = [kernel.key_column(i) for i in range(len(planned.partition))]
    staged = child.select(*[F.col(quote(c)) for c in passthrough + helpers_sent + keys],
                          own.alias("__own"), F.explode_outer(chunks).alias("__chunk"))
    staged = staged.select("*", F.coalesce(F.col("__chunk") != F.col("__own"), F.lit(False))
                           .alias(kernel.CONTEXT)).drop("__own")
    out_fields = [fields[c] for c in passthrough] + [
        T.StructField(kernel.result_column(i), _result_type(s, fields), s.func != "count")
        for i, s in enumerate(specs)]
    nkeys = len(keys)
    keep = tuple(passthrough)

    def run(batch):
        return kernel.evaluate(batch, specs, time_col, nkeys, keep)

    out = staged.groupBy("__chunk").applyInArrow(run, T.StructType(out_fields))
    _replace(select, planned, name, alias, passthrough, used)
    return out


# ------------------------------------------------------------- straight from the files
def _direct(planned: _Planned, fields, passthrough, stream, frame, rt, where=None):
    """The chunked pass reading the stream's Parquet files itself (sources/parquet_chunks.py):
    one task per range of event time, each reading the row groups its range and its frames'
    reach need; no scan, shuffle or sort in Spark before the windows. None when the files
    or the query are not ones it reads exactly as Spark would (the shuffled pass then)."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from wavesql.sources import parquet_chunks as pc_
    from wavesql.sources.arrow import conform

    if frame is None:
        return None
    names = {n.lower(): n for n in fields if not n.startswith("__wavesql_")}

    def column(e):
        return names.get(e.name.lower()) if isinstance(e, exp.Column) else None

    time_col = column(planned.order)
    args = [column(a) for a in planned.args]
    keys = [column(p) for p in planned.partition]
    if time_col is None or None in args or None in keys:
        return None
    row_filter = None
    if where is not None:
        row_filter = as_row_filter(where, names, fields)
        if row_filter is None:
            return None  # a WHERE it cannot apply exactly as Spark does: the shuffled pass
    progress = stream.progress_column
    if progress is not None:
        progress = names.get(progress.lower())
        if progress is None:
            return None
    needed = list(dict.fromkeys(list(passthrough) + args + keys + [time_col]
                                + pc_.filter_columns(row_filter)
                                + ([progress] if progress else [])))
    arrow = to_arrow_schema(T.StructType([fields[c] for c in needed]), timezone="UTC")
    wanted = {f.name: f.type for f in arrow}
    before = max(s.before for s in planned.specs)
    after = max(max(s.after, 0) for s in planned.specs)
    ranges = direct_ranges(frame, stream, rt, time_col, wanted, progress, min_rows(rt.spark),
                           before=before, after=after,
                           min_span=max(1, MIN_CHUNK_FRAMES * (before + after)),
                           columns=len(wanted) + len(planned.specs))
    if ranges is None:
        return None
    specs = tuple(kernel.Spec(s.func, None if s.arg is None else args[s.arg], s.before, s.after)
                  for s in planned.specs)
    out_fields = [fields[c] for c in passthrough] + [
        T.StructField(kernel.result_column(i), _result_type(s, fields), s.func != "count")
        for i, s in enumerate(specs)]
    out_type = T.StructType(out_fields)
    target = to_arrow_schema(out_type, timezone="UTC")
    columns = list(dict.fromkeys(list(passthrough) + args + keys + [time_col]
                                 + pc_.filter_columns(row_filter)))
    keep = tuple(passthrough)

    def time_windows_scan(batches):  # the name shows in Spark's plans
        for b in batches:
            for i in b.column(0).to_pylist():
                table = pc_.read_range(ranges[i], columns, time_col, progress, wanted)
                if row_filter is not None:  # the WHERE, before the windows (SQL's order)
                    table = table.filter(pc_.evaluate_filter(row_filter, table))
                for k, key in enumerate(keys):
                    table = table.append_column(kernel.key_column(k), table.column(key))
                out = kernel.evaluate(table, specs, time_col, len(keys), keep)
                for batch in out.to_batches():
                    yield conform(batch, target)

    n = len(ranges)
    return rt.spark.range(0, n, 1, n).mapInArrow(time_windows_scan, out_type)


def _used_columns(select, windows, names) -> set[str]:
    """Lower-case source columns ``select`` needs outside the chunked windows (all on ``*``)."""
    replaced = {id(w) for w in windows}
    used: set[str] = set()
    for node in select.walk():
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column)
                                          and isinstance(node.this, exp.Star)):
            if node.find_ancestor(exp.Select) is select:
                return {n.lower() for n in names}
        if isinstance(node, exp.Column):
            w = node.find_ancestor(exp.Window)
            while w is not None and id(w) not in replaced:
                w = w.find_ancestor(exp.Window)
            if w is None:
                used.add(node.name.lower())
    return used


def _result_type(spec, fields):
    from pyspark.sql import types as T

    kind = kernel.FUNCTIONS[spec.func]
    if kind == "bigint":
        return T.LongType()
    if kind == "double":
        return T.DoubleType()
    arg = fields[spec.arg].dataType
    if kind == "arg":
        return arg
    return T.LongType() if isinstance(arg, T.IntegralType) else T.DoubleType()  # sum


def _replace(select, planned, name, alias, passthrough, used):
    """Point ``select`` at the chunked view: windows -> result columns, WHERE gone."""
    for i, w in enumerate(planned.windows):
        w.replace(exp.column(kernel.result_column(i), table=alias, quoted=True))
    select.set("where", None)
    select.set("from_", exp.From(this=exp.Table(this=exp.to_identifier(name),
                                                alias=exp.TableAlias(
                                                    this=exp.to_identifier(alias)))))
    expressions = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            expressions += [exp.column(c, table=alias, quoted=True) for c in passthrough]
        else:
            expressions.append(e)
    select.set("expressions", expressions)


# ------------------------------------------------------------------- chunk length
def _target_rows(spark) -> int:
    """Rows per chunk: enough chunks for every core, none so big it strains a worker."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    override = settings.get(spark, "wavesql.windows.chunk_rows")
    if override:
        return override
    return 1 << 18 if cores <= 2 else 1 << 17


def _chunk_length(rt, planned: _Planned, estimate: tuple) -> tuple[int, int]:
    """``(C, origin)`` in microseconds, from a density estimate ``(rows, first, last)``."""
    reach = max(s.before + max(s.after, 0) for s in planned.specs)
    target = _target_rows(rt.spark)
    n, lo, hi = estimate
    if not n or lo is None:
        return max(1, MIN_CHUNK_FRAMES * reach), 0
    span = hi - lo + 1
    chunk = max(1, span * target // max(n, 1), MIN_CHUNK_FRAMES * reach)
    return int(chunk), int(lo)


def _fitting_chunk(spark, estimate: tuple, chunk_us: int, reach: int, columns: int):
    """``chunk_us``, shortened until a chunk's rows and context fit one Python task's
    memory at the estimated mean density (planner/physical/task_memory.py), or None if a
    chunk of 1 us with its context would not (the frames reach too many rows)."""
    from . import task_memory

    n, lo, hi = estimate
    if not n or lo is None:
        return chunk_us
    density = n / max(1, hi - lo + 1)  # rows per microsecond
    limit = task_memory.max_rows(spark, columns)
    if density * (chunk_us + reach) <= limit:
        return chunk_us
    fitting = int(limit / density) - reach
    return fitting if fitting >= 1 else None


def _counted(child) -> tuple | None:
    """Rows and time span of ``child``, by one aggregate job over it; None if the job fails
    (bad input): the query then runs as written and reports it where it always does."""
    from pyspark.sql import functions as F

    from wavesql.spark_errors import runtime_error_types

    try:
        row = child.agg(F.count("*").alias("n"), F.min(F.unix_micros("__wavesql_t")).alias("lo"),
                        F.max(F.unix_micros("__wavesql_t")).alias("hi")).first()
    except runtime_error_types():
        return None
    return row["n"], row["lo"], row["hi"]


def _footer_estimate(streams) -> tuple | None:
    """Rows and event-time span of the Parquet streams below the query, from their files'
    footers (row counts, min/max statistics): no Spark job, and nothing below the windows
    (another window, a join) is computed twice. A WHERE or a join only thins the rows, so the
    estimate errs towards smaller chunks. None when a stream is not Parquet or lacks them."""
    from wavesql import storage
    from wavesql.sources.parquet_chunks import micros, parquet_file

    if not streams:
        return None
    rows, lo, hi = 0, None, None
    for s in streams:
        if s.format != "parquet" or s.event_time is None:
            return None
        path = s.path
        files = (storage.list_files(path, recursive=True, suffix=".parquet")
                 if storage.is_dir(path) else storage.glob(path))
        if not files or len(files) > 256:
            return None
        for f in files:
            try:
                meta = parquet_file(f.location).metadata
            except Exception:  # noqa: BLE001 -- unreadable footer: count instead
                return None
            names = [meta.schema.column(i).name for i in range(meta.num_columns)]
            if s.event_time not in names:
                return None
            col = names.index(s.event_time)
            rows += meta.num_rows
            for g in range(meta.num_row_groups):
                st = meta.row_group(g).column(col).statistics
                if st is None or not st.has_min_max:
                    return None
                try:
                    a, b = micros(st.min), micros(st.max)
                except (OverflowError, ValueError):  # beyond Python's datetime range
                    return None
                if a is None or b is None:
                    return None
                lo = a if lo is None else min(lo, a)
                hi = b if hi is None else max(hi, b)
    return rows, lo, hi


def _streams_below(rel) -> list:
    """The catalog streams ``rel`` reads."""
    return [r.stream for r in ir.walk(rel) if isinstance(r, ir.StreamScan)]
