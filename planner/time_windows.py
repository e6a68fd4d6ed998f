"""Time-chunked OVER windows: RANGE frames evaluated in parallel chunks of event time.

Spark runs ``avg(v) OVER (ORDER BY ts RANGE BETWEEN INTERVAL 20 MILLISECONDS PRECEDING AND
CURRENT ROW)`` in **one partition** (there is no PARTITION BY to split on), and its sliding
frame re-aggregates every row's whole frame: one core, O(rows x frame). TiLT's observation
is that a time-bounded frame needs only the rows within its interval, so the stream can be
cut into chunks of event time, each handed the rows that precede it by the frame's reach
(*context*), and evaluated independently (TiLT's boundary resolution). Here:

1. every row goes to its own chunk ``floor(t / C)`` and, flagged as context, to the chunks
   whose frames reach it (``explode(sequence(...))``; with ``C`` at least
   :data:`MIN_CHUNK_FRAMES` frame reaches, that is at most one or two more);
2. ``groupBy(chunk).applyInArrow`` runs the numpy kernel of ``udfs/time_windows.py`` on each
   chunk: frames by binary search, sums in row order, spreads in two passes;
3. the SELECT that held the windows reads the kernel's output instead, its windows replaced
   by the result columns; its WHERE moved below the windows (SQL filters before windowing).

When the SELECT reads a catalog Parquet stream (with no WHERE, or one of comparisons with
literals that the pass applies itself, :func:`_row_filter`), steps 1-2 skip Spark
altogether (:func:`_direct`): the chunks are ranges of event time planned from the row
groups' min/max statistics, and each task reads the row groups its range and its frames'
reach need with pyarrow (sources/parquet_chunks.py) -- no scan, ``explode``, shuffle or
sort before the windows (TiLT trend: the windows 2.1 s -> 0.75 s on 3 M ticks). Files it
cannot read exactly as Spark does (NULL times, other stored types, partition folders,
remote paths, out of time order) keep the shuffled pass. Windows with a PARTITION BY use
it too (there it costs no extra crossing: TiLT fraud 1.7 s -> 0.8 s).

The rewrite is applied at lowering, to batch queries only (the continuous runner evaluates
OVER windows over its own bounded buffers, streaming/runner.py), to the SELECTs where it is
exact: the window's ORDER BY is one ascending TIMESTAMP expression, the frame is ``RANGE
BETWEEN <interval> PRECEDING|CURRENT ROW AND CURRENT ROW|<interval> PRECEDING|FOLLOWING``,
the function one of :data:`udfs.time_windows.FUNCTIONS` over a numeric argument (not
DECIMAL), the SELECT reads one table (no join) and has no GROUP BY (windows over groups run
after aggregation). In one SELECT the windows sharing the most common (PARTITION BY, ORDER
BY) are chunked together; any other window stays Spark's, over the same filtered rows.
Windows with a PARTITION BY are left to Spark by default when they would need the
shuffled pass: Spark already spreads their partitions over the cores, and on the TiLT fraud
detector (50 customers, frames of a few rows) the shuffled pass's JVM <-> Python crossings
cost more than the chunking saved (0.78x); ``SET wavesql.windows.chunked = all`` chunks
them too, ``false`` turns the rewrite off, direct pass included (the tests compare all
three with Spark's own windows).

The chunk length ``C`` targets :func:`_target_rows` rows per chunk, from a density estimate
read from the Parquet footers of the streams below the query (row count, min/max of the
event time) or, for other inputs, from one aggregate job over the filtered rows. Inputs
estimated under ``wavesql.windows.min_rows`` rows keep Spark's window.
"""

from __future__ import annotations

import functools
import itertools

from sqlglot import exp

from wavesql import settings
from wavesql.dialect import parse_one, to_spark_sql
from wavesql.sqltext import quote
from wavesql.udfs import time_windows as kernel

from . import ir
from .ctes import visible_ctes

#: A chunk spans at least this many frame reaches, so context stays a small fraction.
MIN_CHUNK_FRAMES = 16
# Inputs estimated below ``wavesql.windows.min_rows`` rows (100,000) keep Spark's window:
# the chunked pass costs a shuffle and a Python pass's set-up (~0.2 s), which only pays
# where Spark's single-partition window is slow.

_FUNCTIONS = {
    exp.Sum: "sum", exp.Avg: "avg", exp.Count: "count", exp.Min: "min", exp.Max: "max",
    exp.StddevPop: "stddev_pop", exp.StddevSamp: "stddev_samp", exp.Stddev: "stddev_samp",
    exp.VariancePop: "var_pop", exp.Variance: "var_samp",
}
_NUMERIC = ("tinyint", "smallint", "int", "bigint", "float", "double")
_counter = itertools.count()


def rewrite(sql: str, inputs, rt, run_sql, streams=(), scans=None):
    """``(sql, extra views)``: ``sql`` with its chunkable windows read from chunked passes,
    each registered under a view name returned in ``extra`` (name -> DataFrame); ``sql``
    unchanged (and no views) when nothing applies. ``inputs``: ``(name, DataFrame)`` the
    query reads; ``run_sql(sql, frames, rt, offset)`` runs Spark SQL over such frames;
    ``streams``: the catalog streams below the query (for the density estimate);
    ``scans``: lower-case input name -> the catalog stream it scans as it is (those the
    windows may read straight from their Parquet files)."""
    mode = _mode(rt.spark)
    if rt.streams is not None or mode == "false":
        return sql, {}
    if "OVER" not in sql.upper():
        return sql, {}
    try:
        tree = parse_one(sql)
    except Exception:  # noqa: BLE001 -- text Spark accepts but the dialect does not: leave it
        return sql, {}
    selects = sorted(tree.find_all(exp.Select), key=lambda s: -_depth(s))  # inner first
    scans = scans or {}
    planned = [(select, p) for select in selects
               if (p := _plan_select(select)) is not None
               and (not p.partition or mode == "all" or _direct_stream(select, scans))]
    if not planned:
        return sql, {}
    # read once per query, and only if a shuffled pass needs it (the direct pass reads the
    # footers itself): the same streams for every SELECT
    footers = functools.cache(lambda: _footer_estimate(streams))
    views: dict = {}
    for select, plan in planned:
        name = f"__wavesql_timewin_{next(_counter)}"
        df = _chunked(select, plan, name, inputs, rt, run_sql, views, footers,
                      _direct_stream(select, scans))
        if df is not None:
            views[name] = df
    if not views:
        return sql, {}
    return to_spark_sql(tree), views


def _mode(spark) -> str:
    """``true`` (default): chunk un-partitioned windows, the ones Spark runs in a single
    partition; ``all``: PARTITION BY windows too; ``false``: never."""
    return settings.get(spark, "wavesql.windows.chunked")


def _depth(node) -> int:
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d


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
        shape = _shape(w)
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


def _shape(window: exp.Window):
    """``((partition sql, order sql), (func, arg, before, after))`` or None."""
    from .types import interval_us

    call = aggregate_call(window.this)
    if call is None or window.args.get("alias"):
        return None
    name, arg = call
    order = window.args.get("order")
    spec = window.args.get("spec")
    if order is None or len(order.expressions) != 1 or spec is None:
        return None
    key = order.expressions[0]
    if key.args.get("desc"):  # NULLS FIRST/LAST: NULL times are peers of each other only
        return None
    if str(spec.args.get("kind") or "").upper() != "RANGE" or spec.args.get("exclude"):
        return None
    try:
        before = _bound(spec.args.get("start"), spec.args.get("start_side"), interval_us)
        after = _bound(spec.args.get("end"), spec.args.get("end_side"), interval_us)
    except Exception:  # noqa: BLE001 -- not an interval bound: Spark's window
        return None
    if before is None or after is None:
        return None
    before, after = -before, after  # start: t - before; end: t + after
    if before < 0 or after < -before:
        return None
    partition = tuple(to_spark_sql(p) for p in window.args.get("partition_by") or ())
    return (partition, to_spark_sql(key.this)), (name, arg, before, after)


def aggregate_call(func, functions=None):
    """``(name, argument)`` of a call to one of ``functions`` (default :data:`_FUNCTIONS`)
    with one argument (None for ``count(*)``), no DISTINCT; None for any other call."""
    name = (functions or _FUNCTIONS).get(type(func))
    if name is None or isinstance(func, exp.Distinct) or any(
            isinstance(a, exp.Distinct) for a in func.args.values()):
        return None
    arg = func.this
    if isinstance(arg, exp.Star):
        return (name, None) if name == "count" else None
    if arg is None or len([v for k, v in func.args.items()
                           if v not in (None, []) and k != "big_int"]) > 1:
        return None
    return name, arg


def _bound(value, side, interval_us):
    """Signed offset (us) of a frame bound from the current row, None if not an interval."""
    if value is None:
        return None
    if isinstance(value, str):
        return 0 if value.upper() == "CURRENT ROW" else None
    if not isinstance(value, exp.Interval):
        return None
    us = interval_us(value)
    side = str(side or "").upper()
    if side == "PRECEDING":
        return -us
    if side == "FOLLOWING":
        return us
    return None


def _chunked(select, planned: _Planned, name, inputs, rt, run_sql, views, footers,
             stream=None):
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
        child = run_sql(to_spark_sql(inner), all_inputs, rt, None)
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
    if planned.partition and _mode(rt.spark) != "all":
        return None  # partitioned windows are Spark's unless read straight from the files
    estimate = footers() or _counted(child)
    if estimate is None or (estimate[0] or 0) < _min_rows(rt.spark):
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
#: Rows one task of the direct pass holds at most (its arrays: ~100 bytes a row).
MAX_TASK_ROWS = 1 << 22
#: The direct pass reads at most this many times the stream's rows (row groups read by
#: several ranges); beyond it (files not in time order) Spark's shuffle costs less.
MAX_READ_FACTOR = 3


def _direct_stream(select: exp.Select, scans: dict):
    """The catalog stream ``select`` reads (no CTE of that name in the way), if its files
    may be read straight by the chunked pass; else None. (A WHERE is checked later: the
    pass applies it when :func:`_row_filter` can say it exactly.)"""
    table = select.args["from_"].this
    if table.args.get("db") is not None:
        return None
    stream = scans.get(table.name.lower())
    if stream is None or stream.format != "parquet" or dict(stream.options):
        return None
    if any(c.alias_or_name.lower() == table.name.lower() for c in visible_ctes(select)):
        return None
    return stream


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
        row_filter = _row_filter(where, names, fields)
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
    ranges = direct_ranges(frame, stream, rt, time_col, wanted, progress, _min_rows(rt.spark),
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


_COMPARE = {exp.EQ: "equal", exp.NEQ: "not_equal", exp.GT: "greater",
            exp.GTE: "greater_equal", exp.LT: "less", exp.LTE: "less_equal"}
_MIRROR = {"equal": "equal", "not_equal": "not_equal", "greater": "less",
           "greater_equal": "less_equal", "less": "greater", "less_equal": "greater_equal"}


def _row_filter(node, names: dict, fields):
    """A WHERE as a row filter for sources/parquet_chunks.py (nested tuples), or None when
    it is not one whose answer is certain to be Spark's: AND / OR / NOT of comparisons
    between a column and a literal of its kind (integer literals for integer columns, any
    number for floating ones, strings for strings, TRUE/FALSE for booleans), BETWEEN, IS
    [NOT] NULL and bare boolean columns. Anything else (functions, casts, timestamps, IN,
    arithmetic) leaves the query to the shuffled pass."""
    if isinstance(node, exp.Paren):
        return _row_filter(node.this, names, fields)
    if isinstance(node, (exp.And, exp.Or)):
        a = _row_filter(node.left, names, fields)
        b = _row_filter(node.right, names, fields)
        return None if a is None or b is None else (
            "and" if isinstance(node, exp.And) else "or", a, b)
    if isinstance(node, exp.Not):
        a = _row_filter(node.this, names, fields)
        return None if a is None else ("not", a)
    if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
        col = _filter_column(node.this, names)
        return None if col is None else ("is_null", col)
    if isinstance(node, exp.Column):
        col = _filter_column(node, names)
        return ("column", col) if col and _kind(fields[col]) == "boolean" else None
    if isinstance(node, exp.Between):
        low = _row_filter(exp.GTE(this=node.this.copy(), expression=node.args["low"].copy()),
                          names, fields)
        high = _row_filter(exp.LTE(this=node.this.copy(), expression=node.args["high"].copy()),
                           names, fields)
        return None if low is None or high is None else ("and", low, high)
    op = _COMPARE.get(type(node))
    if op is None:
        return None
    left, right = node.this, node.expression
    if _filter_column(left, names) is None:
        left, right, op = right, left, _MIRROR[op]
    col = _filter_column(left, names)
    if col is None:
        return None
    kind = _kind(fields[col])
    value = _literal(right, kind)
    if value is None:
        return None
    return ("compare", op, col, value, kind == "floating")


def _filter_column(node, names: dict):
    return names.get(node.name.lower()) if isinstance(node, exp.Column) else None


def _kind(field) -> str | None:
    from pyspark.sql import types as T

    t = field.dataType
    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return "integral"
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return "floating"
    if isinstance(t, T.StringType):
        return "string"
    if isinstance(t, T.BooleanType):
        return "boolean"
    return None


def _literal(node, kind):
    """The Python value of a literal of the column's kind, else None."""
    negative = False
    if isinstance(node, exp.Neg):
        node, negative = node.this, True
    if kind == "boolean":
        return node.this if isinstance(node, exp.Boolean) and not negative else None
    if not isinstance(node, exp.Literal):
        return None
    if kind == "string":
        return node.this if node.is_string and not negative else None
    if node.is_string or kind not in ("integral", "floating"):
        return None
    text = node.this
    try:
        value = int(text) if kind == "integral" else float(text)
    except ValueError:
        return None  # 2.5 against an integer column: Spark compares as DECIMAL
    if kind == "integral" and not -(1 << 63) <= (-value if negative else value) < (1 << 63):
        return None
    return -value if negative else value


def direct_ranges(frame, stream, rt, time_col: str, wanted: dict, progress, min_rows: int, *,
                  before: int = 0, after: int = 0, min_span: int = 1, neighbours: bool = False,
                  no_nulls=(), columns: int | None = None):
    """The ranges of event time a direct pass over ``stream``'s files reads
    (sources/parquet_chunks.py: ``ranges``), or None when the files are not ones it reads
    exactly as Spark does (``frame``: Spark's scan of them), hold fewer than ``min_rows``
    rows or NULLs in a ``no_nulls`` column, are too far out of time order, or cannot be cut
    into ranges that fit a Python task's memory (``columns``, default ``wanted``'s: the
    columns a row carries through the pass; planner/task_memory.py)."""
    groups = direct_groups(frame, stream, rt, time_col, wanted, progress, min_rows, no_nulls)
    if groups is None:
        return None
    return fitting_ranges(rt.spark, groups, columns or len(wanted), before, after, min_span,
                          neighbours=neighbours)


def fitting_ranges(spark, groups, columns: int, before: int, after: int, min_span: int, **kw):
    """``parquet_chunks.ranges`` cut into enough tasks that none reads more rows than one
    Python task may hold (planner/task_memory.py), or None when even the finest cut does
    not fit (a frame whose context alone is too large: the caller leaves the work to
    Spark) or reads more than :data:`MAX_READ_FACTOR` times the rows."""
    from wavesql.sources import parquet_chunks as pc_

    from . import task_memory

    total = sum(g.rows for g in groups)
    limit = task_memory.max_rows(spark, columns)
    tasks = max(direct_tasks(spark, total), -(-total // limit))
    while True:
        ranges = pc_.ranges(groups, tasks, before, after, min_span, **kw)
        if sum(g.rows for r in ranges for g in r.groups) > MAX_READ_FACTOR * total:
            return None
        if max(sum(g.rows for g in r.groups) for r in ranges) <= limit:
            return ranges
        if len(ranges) < tasks or tasks >= total:  # no finer cut exists
            return None
        tasks *= 2


def direct_groups(frame, stream, rt, time_col: str, wanted: dict, progress, min_rows: int,
                  no_nulls=()):
    """The row groups of ``stream``'s files (sources/parquet_chunks.py: ``index``), or None
    when the files are not ones a direct pass reads exactly as Spark does or hold fewer
    than ``min_rows`` rows."""
    from wavesql.sources import parquet_chunks as pc_

    files = _stream_files(frame, stream)
    if not files:
        return None
    tz = str(rt.spark.conf.get("spark.sql.session.timeZone", "")).upper()
    groups = pc_.index(files, time_col, wanted, utc_naive=tz in ("UTC", "ETC/UTC", "GMT", "Z"),
                       progress=progress, no_nulls=no_nulls)
    if not groups or sum(g.rows for g in groups) < min_rows:
        return None
    return groups


#: Tasks per core of a direct pass. Spark charges ~50 ms per Python task here (an empty
#: ``mapInArrow`` job: 0.12 s with one task, 0.17 s with two, 0.26 s with four on two
#: cores), and the ranges hold equal row counts, so one task per core: TiLT trend 0.57 ->
#: 0.48 s, RSI 0.61 -> 0.54 s (medians of 11, 3 M ticks, two cores).
DIRECT_TASKS_PER_CORE = 1


def direct_tasks(spark, total: int) -> int:
    """Tasks of a pass reading ``total`` rows straight from the files: one per core
    (:data:`DIRECT_TASKS_PER_CORE`), none over :data:`MAX_TASK_ROWS` rows
    (``wavesql.windows.chunk_rows`` overrides)."""
    override = settings.get(spark, "wavesql.windows.chunk_rows")
    if override:
        return max(1, -(-total // override))
    cores = max(1, spark.sparkContext.defaultParallelism)
    return max(DIRECT_TASKS_PER_CORE * cores, -(-total // MAX_TASK_ROWS))


def _stream_files(frame, stream) -> list[str] | None:
    """The files Spark's scan of ``stream`` reads (its own listing) as locations
    (wavesql.storage: local paths or object-store URIs); None if one sits in a
    ``key=value`` folder (a partition column Spark would add)."""
    from urllib.parse import unquote, urlparse

    from wavesql import storage

    try:
        uris = frame.inputFiles()
    except Exception:  # noqa: BLE001 -- the shuffled pass reports it where Spark does
        return None
    base = stream.path.rstrip("/")
    files = []
    for uri in uris:
        parsed = urlparse(uri)
        path = unquote(parsed.path)
        if parsed.scheme not in ("", "file"):
            path = f"{parsed.scheme}://{parsed.netloc}{path}"
        folder = storage.dirname(path)
        below = folder[len(base):] if folder.startswith(base) else ""
        if any("=" in part for part in below.split("/")):
            return None
        files.append(path)
    return sorted(files)


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


def _min_rows(spark) -> int:
    """Below this many (estimated) rows the windows stay Spark's."""
    return settings.get(spark, "wavesql.windows.min_rows")


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
    memory at the estimated mean density (planner/task_memory.py), or None if a chunk of
    1 us with its context would not (the frames reach too many rows)."""
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


def streams_below(rel) -> list:
    """The catalog streams ``rel`` reads."""
    return [r.stream for r in ir.walk(rel) if isinstance(r, ir.StreamScan)]
