"""Fused query chains: a chain of SELECTs over a catalog Parquet stream evaluated in one numpy
pass per range of event time -- TiLT's whole-query compilation.

TiLT's RSI is three SELECTs: ``d = v - lag(v) OVER (ORDER BY ts)``, two sums of CASEs over
``d`` in 14 ms RANGE frames, and an expression over the sums. In Spark the ``lag`` runs in
**one partition** (no PARTITION BY to split on) after a scan, a shuffle and a sort, and every
level's rows cross between the JVM and the Python window kernel. Here the chain is compiled
once on the driver into a :class:`udfs.fused_chain.Program` (scalar expressions, WHEREs,
``lag`` and RANGE windows ordered by the event time) and each Spark task reads one range of
the stream's files (sources/parquet_chunks.py) plus enough rows before it for every level's
reach, evaluates the whole chain in numpy and returns only its own rows: nothing in between
crosses into the JVM, and all ranges run in parallel. How far back is enough is decided as
the chain runs (:func:`udfs.fused_chain.run`): the sum of the levels' frame reaches and, for
``lag``, a guess from the stream's density, doubled until every own row is complete.

Where: batch queries, at lowering, for the outermost SELECT whose chain of FROMs (CTEs or
subqueries, each one plain SELECT: no join, GROUP BY, HAVING, DISTINCT, ORDER BY or LIMIT
but at the top or right below a total)
ends at a catalog Parquet stream read as it is, or at a tumbling CQL window over one
(``FROM s [RANGE w SLIDE w]``: the pass computes ``_time``, and the ranges are cut on
window boundaries so that each owns whole windows), with at least one window. The windows are
``lag(x [, n [, literal]]) OVER (ORDER BY <event time>)`` and the aggregates of
:data:`udfs.time_windows.FUNCTIONS` over RANGE frames ending at or before the row, with or
without PARTITION BY; over a tumbling window, aggregates of the whole window instant
(``agg(x) OVER ()``, which WaveSQL partitions by ``_time``: TiLT's normalisation), and at
the top a GROUP BY that includes ``_time`` (an aggregate per window: TiLT's vibration and
YSB; ``sum avg count min max stddev* var* kurtosis skewness``, HAVING). A *total* -- an
aggregate without GROUP BY at the top (``SELECT count(*), sum(v) / count(v) FROM (<chain>)``,
also over a GROUP BY level) -- is computed as partial aggregates of each range's own rows
(``sum avg count min max``; ``avg`` as a DOUBLE sum and a count) and merged by Spark in the
SELECT's own expressions, so one row per range crosses into the JVM instead of every row of
the chain's result. A total over a direct RESAMPLE (planner/resample_direct.py), through
scalar SELECTs, is computed in the pass that makes each range's grid points. No FOLLOWING frames (planner/time_windows.py's passes take those) and
no partitioned ``lag`` (a sparse key's previous row may lie anywhere before).

**Joins with a per-window aggregate** (TiLT's imputation: each grid point LEFT JOINed with
its 10 s bucket's mean). A level may ``[INNER | LEFT [OUTER]] JOIN`` a relation that is
itself a fused aggregate per tumbling window (``GROUP BY`` the window instant alone: one row
per window, so at most span / width + 2 rows, :data:`LOOKUP_ROWS` at most) on
``<its column> = <expression over the level's input>`` (integral or timestamp keys: exact
equality). Spark computes the relation once, packed into one row (``collect_list`` of its
rows, ``__wavesql_lookup_<i>`` in the plan), broadcast beside every range; the pass joins it
row by row (:class:`udfs.fused_chain.Lookup`) -- the rows it joins never cross into the JVM.
Before, the 30 M grid points of the imputation went to Spark for a broadcast hash join.
Why a packed row and not a collect on the driver: the DataFrame stays lazy (``explain``
runs nothing) and the relation is computed by the query that uses it. Expressions:
columns, number/boolean/NULL literals, ``+ - * /``, unary minus, comparisons, ``<=>`` / IS
[NOT] DISTINCT FROM, IS [NOT] NULL, AND/OR/NOT, BETWEEN, CASE, IF, NULLIF, COALESCE, ABS,
SQRT, ``unix_micros / unix_millis / unix_seconds``, ``timestamp_micros``, ``pmod`` by a
positive integer literal, widening CASTs and CASTs of BOOLEAN to numbers, over BOOLEAN, INT, BIGINT, FLOAT,
DOUBLE and TIMESTAMP columns. Anything else leaves the SELECT to the other plans (the chain
below it may still be fused). The result's names and types are Spark's own analysis of the
SELECT; the chain is not fused when the compiled types differ from it. Equal event times are ordered as the rows
are stored (Spark leaves the order of ``lag`` among equal ORDER BY values unspecified).

``SET wavesql.fused = false`` turns it off (``wavesql.windows.chunked = false`` too); inputs
under ``wavesql.windows.min_rows`` rows (100,000) keep the other plans.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import warnings

from sqlglot import exp

from wavesql import settings
from wavesql.dialect import parse_one, to_spark_sql
from wavesql.udfs import fused_chain as chain

from . import ir, time_windows
from .ctes import visible_ctes
from .temporal import quote
from .types import spark_struct
from .windows import TIME

#: Rows a ``lag`` is assumed to reach back, in mean row spacings per row of offset, when the
#: read before a range is planned (further back is read when it is not enough).
LAG_SLACK = 4
#: The most rows a relation a fused pass joins may have (each task is handed all of it).
LOOKUP_ROWS = 1 << 20
_RIGHT = "__wavesql_r"  # prefix of a joined relation's columns inside the pass
_counter = itertools.count()
_KINDS = ("boolean", "int", "bigint", "float", "double", "timestamp")
_PLAIN_SELECT = {"expressions", "from_", "where", "with_"}


class FusedChainWarning(RuntimeWarning):
    """Compiling a chain failed unexpectedly (a bug): the query ran on the other plans."""


class _Refuse(Exception):
    """The SELECT is not one this pass evaluates exactly as Spark does."""


def rewrite(sql: str, inputs, rt, run_sql, scans, schema=None, tumbling=None,
            resampled=None):
    """``(sql, views, whole)``: ``sql`` with its fusable SELECT chains read from fused
    passes, each registered under a view name in ``views`` (name -> DataFrame); ``whole``
    the DataFrame of the whole query when it is one fused chain (else None); ``sql``
    unchanged (no views) when none applies. ``schema``: the query's result (ir.Schema), as
    Spark's analysis gave it at binding; ``tumbling``: lower-case input name -> ``(stream,
    width)`` of the inputs that are a tumbling CQL window (``[RANGE w SLIDE w]``) over a
    catalog stream; ``resampled``: lower-case input name -> the RESAMPLE (ir.SqlQuery) of
    the inputs that are one (a total over it is computed where its grid points are made).
    Other arguments as :func:`planner.time_windows.rewrite`'s."""
    spark = rt.spark
    tumbling, resampled = tumbling or {}, resampled or {}
    if (rt.streams is not None or not (scans or tumbling or resampled)
            or ("OVER" not in sql.upper() and not (tumbling or resampled))
            or not settings.get(spark, "wavesql.fused")
            or time_windows._mode(spark) == "false"):
        return sql, {}, None
    try:
        tree = parse_one(sql)
    except Exception:  # noqa: BLE001 -- text Spark accepts but the dialect does not: leave it
        return sql, {}, None
    views: dict = {}
    lookups: dict[str, int] = {}  # fused per-window aggregates: view -> at most how many rows
    fused: set[int] = set()  # ids of the SELECTs inside a fused chain
    # the relations some SELECT joins first (a chain may join them once they are fused
    # per-window aggregates), then the outermost chains first
    selects = sorted(tree.find_all(exp.Select), key=time_windows._depth)
    joined = _joined_selects(tree)
    for select in [s for s in selects if id(s) in joined] + selects:
        if id(select) in fused or _root(select) is not tree:
            continue
        found = _chain(select, scans, tumbling, resampled, lookups)
        if found is None:
            continue
        levels, stream, table, width, joins = found
        try:
            df, rows = _fused(levels, stream, table, inputs + list(views.items()), rt,
                              run_sql, schema if select is tree else None, width,
                              resampled.get(table.name.lower()) if stream is None else None,
                              joins)
        except _Refuse:
            continue
        except Exception as err:  # noqa: BLE001 -- a planner bug must not fail the query
            warnings.warn(f"fused chain not used: {err!r}", FusedChainWarning, stacklevel=2)
            continue
        if df is None:
            continue
        if select is tree:
            return sql, {}, df
        fused.update(id(s) for s in levels)
        name = f"__wavesql_fused_{next(_counter)}"
        views[name] = df
        if rows is not None and rows <= LOOKUP_ROWS:
            lookups[name.lower()] = rows
        select.replace(exp.select(exp.Star()).from_(exp.to_table(name)))
    if not views:
        return sql, {}, None
    return to_spark_sql(tree), views, None


def _joined_selects(tree) -> set[int]:
    """Ids of the SELECTs that are the right side of a join (a subquery, or a CTE's)."""
    out = set()
    for select in tree.find_all(exp.Select):
        for join in select.args.get("joins") or []:
            right = join.this
            if isinstance(right, exp.Subquery) and isinstance(right.this, exp.Select):
                out.add(id(right.this))
            elif isinstance(right, exp.Table) and not right.args.get("db"):
                out.update(id(c.this) for c in visible_ctes(select)
                           if c.alias_or_name.lower() == right.name.lower())
    return out


def _root(node):
    while node.parent is not None:
        node = node.parent
    return node


def _chain(select: exp.Select, scans, tumbling, resampled=None, lookups=None):
    """``(levels bottom-up, stream, base table, tumbling width or None, joins)`` when
    ``select``'s FROMs lead through plain SELECTs to a catalog stream read straight from its
    files (or a tumbling window over one; or a RESAMPLE of one, ``stream`` None, when the
    chain is scalar SELECTs under a total); else None. A level may join one of ``lookups``
    (:func:`_lookup_join`); ``joins``: id of the level -> what it joins."""
    levels, joins = [], {}
    node = select
    total = _is_total(select)
    while True:
        # GROUP BY only at the top, or right below a total (an aggregate of the groups)
        top = node is select or (total and len(levels) == 1)
        if not isinstance(node, exp.Select):
            return None
        join = _lookup_join(node, lookups or {}) if node.args.get("joins") else None
        if not _plain(node, top=top, join=join is not None):
            return None
        if join is not None:
            joins[id(node)] = join
        levels.append(node)
        source = node.args["from_"].this
        if _renames(source):
            return None  # ``t(a, b)``: the columns by position -- the chain reads names
        if isinstance(source, exp.Subquery):
            if set(k for k, v in source.args.items() if v) - {"this", "alias"}:
                return None
            node = source.this
            continue
        if not isinstance(source, exp.Table) or set(
                k for k, v in source.args.items() if v) - {"this", "alias"}:
            return None
        ctes = [c for c in visible_ctes(node)
                if c.alias_or_name.lower() == source.name.lower()]
        if ctes:
            if _renames(ctes[-1]):
                return None  # ``WITH t(a, b) AS (...)``
            node = ctes[-1].this
            continue
        stream, width = time_windows._direct_stream(node, scans), None
        if stream is None and source.args.get("db") is None \
                and source.name.lower() in (resampled or {}):
            levels.reverse()
            scalar = not any(s.find(exp.Window) or s.args.get("group") for s in levels)
            return (levels, None, source, None, joins) if total and scalar else None
        if stream is None and source.args.get("db") is None \
                and source.name.lower() in tumbling:
            stream, width = tumbling[source.name.lower()]
            if stream.format != "parquet" or dict(stream.options):
                return None
        if stream is None:
            return None
        levels.reverse()
        has_window = any(w.find_ancestor(exp.Select) is s for s in levels
                         for w in s.find_all(exp.Window))
        grouped = width is not None and any(s.args.get("group") is not None for s in levels)
        return (levels, stream, source, width, joins) if has_window or grouped else None


def _is_total(select: exp.Select) -> bool:
    """An aggregate of the whole input: aggregates (outside windows), no GROUP BY."""
    return select.args.get("group") is None and any(
        a.find_ancestor(exp.Window) is None for e in select.expressions
        for a in e.find_all(exp.AggFunc))


def _plain(select: exp.Select, top: bool = False, join: bool = False) -> bool:
    """No join (but a lookup's, ``join``), DISTINCT, ORDER BY, LIMIT...; GROUP BY and HAVING
    only at the top."""
    allowed = _PLAIN_SELECT | ({"group", "having"} if top else set()) | (
        {"joins"} if join else set())
    return (select.args.get("from_") is not None
            and not {k for k, v in select.args.items() if v} - allowed)


@dataclasses.dataclass(frozen=True)
class _Join:
    """A level's join with a small relation: ``view`` (a fused per-window aggregate's view
    name), referred to as ``qualifiers``, on ``<right column key> = <left expression>``."""

    view: str
    qualifiers: frozenset
    key: str
    left_key: exp.Expression
    inner: bool


def _lookup_join(select: exp.Select, lookups) -> _Join | None:
    """The join of ``select``'s FROM when the pass can evaluate it as a lookup: one
    ``[INNER | LEFT [OUTER]] JOIN`` of a relation in ``lookups`` (view name -> at most how
    many rows: fused aggregates per tumbling window, one row per window, so the pass hands
    each task the whole relation) on ``<its column> = <expression over the left side>``."""
    joins = select.args.get("joins") or []
    if len(joins) != 1:
        return None
    join = joins[0]
    if {k for k, v in join.args.items() if v} - {"this", "on", "side", "kind"}:
        return None  # USING, NATURAL, LATERAL, hints...
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if side == "LEFT" and kind in ("", "OUTER"):
        inner = False
    elif not side and kind in ("", "INNER"):
        inner = True
    else:
        return None
    right = join.this
    view = _lookup_view(right, lookups)
    on = join.args.get("on")
    if view is None or not isinstance(on, exp.EQ):
        return None
    qualifiers = frozenset({right.alias_or_name.lower()})
    for key, left in ((on.this, on.expression), (on.expression, on.this)):
        if isinstance(key, exp.Column) and not isinstance(key.this, exp.Star) \
                and (key.table or "").lower() in qualifiers \
                and not any((c.table or "").lower() in qualifiers
                            for c in left.find_all(exp.Column)):
            return _Join(view, qualifiers, key.name, left, inner)
    return None


def _renames(node) -> bool:
    """Whether a FROM source or CTE renames its columns (``t(a, b)``: by position)."""
    alias = node.args.get("alias")
    return isinstance(alias, exp.TableAlias) and bool(alias.columns)


def _lookup_view(right, lookups) -> str | None:
    """The lookup view ``right`` (a table, CTE or subquery) reads as it is, or None."""
    body = None
    if _renames(right):
        return None
    if isinstance(right, exp.Subquery):
        if {k for k, v in right.args.items() if v} - {"this", "alias"}:
            return None
        body = right.this
    elif isinstance(right, exp.Table):
        if {k for k, v in right.args.items() if v} - {"this", "alias"}:
            return None
        if right.name.lower() in lookups:
            return right.name
        ctes = [c for c in visible_ctes(right.find_ancestor(exp.Select))
                if c.alias_or_name.lower() == right.name.lower()]
        body = ctes[-1].this if ctes and not _renames(ctes[-1]) else None
    # a fused chain's SELECT was replaced by ``SELECT * FROM <its view>``
    if not isinstance(body, exp.Select) or {k for k, v in body.args.items() if v} \
            - {"expressions", "from_"} or len(body.expressions) != 1 \
            or not isinstance(body.expressions[0], exp.Star):
        return None
    source = body.args["from_"].this
    if isinstance(source, exp.Table) and not source.args.get("db") \
            and source.name.lower() in lookups:
        return source.name
    return None


# ------------------------------------------------------------------------------ planning
def _fused(levels, stream, table, inputs, rt, run_sql, schema=None, width=None,
           resample=None, joins=None):
    """``(DataFrame, rows)``: the fused pass for ``levels`` (bottom-up SELECTs over
    ``stream``), or ``(None, None)`` when the files are not ones it reads as Spark does (or
    too few rows); ``rows``: at most how many rows it gives when that is known (an
    aggregate per tumbling window: one row per window), else None. ``schema``: the top
    SELECT's result if known (ir.Schema; else Spark analyses it here); ``width``: the
    tumbling window the input is (its ``_time`` computed in the pass), None for a stream;
    ``resample``: the RESAMPLE (ir.SqlQuery) the input is, ``stream`` None (its grid points
    are made per range by planner/resample_direct.py, and the chain runs over them);
    ``joins``: id of a level -> the lookup it joins (:class:`_Join`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    frames = dict((n.lower(), df) for n, df in inputs)
    frame = frames.get(table.name.lower())
    event_time = resample.resample[1] if resample is not None else stream.event_time
    if frame is None or not event_time:
        return None, None  # no event time: no order the ranges could follow
    fields = {f.name.lower(): f for f in frame.schema.fields}
    scope = [(f.name, ("col", f.name.lower()), _kind(f.dataType)) for f in frame.schema.fields]
    time_name = event_time.lower()
    if fields.get(time_name) is None or _kind(fields[time_name].dataType) != "timestamp":
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
        right = None if join is None else _right_side(join, frames, len(packed))
        if join is not None:
            if right is None:
                return None, None
            packed.append((frames[join.view.lower()], right.columns))
        compiler = _Compiler(scope, times, select, ansi, buckets, width,
                             total=select is levels[-1] and _is_total(select), right=right)
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
    used = {c for c in _columns_read(compiled[0]) if not c.startswith(_RIGHT)}
    time_col = fields[time_name].name
    inputs_read = tuple((fields[c].name, _kind(fields[c].dataType))
                        for c in sorted(used - {bucket} | {time_name}))
    program = chain.Program(inputs_read, time_col, tuple(compiled),
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
            result = run_sql(to_spark_sql(top), inputs, rt, None).schema
        except Exception:  # noqa: BLE001 -- Spark reports it on the original text
            return None, None
    if shells is None:
        out_type = result
        if [_kind(f.dataType) for f in out_type.fields] != kinds:
            return None, None
    else:  # a total: one row of partial aggregates per range, merged by Spark below
        out_type = spark_struct([ir.Field(name, kind) for name, _, kind in scope])
    target = to_arrow_schema(out_type, timezone="UTC")
    if resample is not None:
        from . import resample_direct

        prepared = resample_direct.prepare(resample, rt)
        if prepared is None or reach_time or reach_rows:
            return None, None
        ranges, make_points, _ = prepared
        rows = None

        def evaluate(r, tables):  # the range's own grid points: complete by themselves
            return chain.run(make_points(r), program, r.start, None, ansi, tables)
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
                    array = chain.to_arrow(values, valid, kind)
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
    if [_kind(f.dataType) for f in df.schema.fields] != [_kind(f.dataType)
                                                          for f in result.fields]:
        return None, None
    return df, None


@dataclasses.dataclass(frozen=True)
class _Right:
    """The joined relation as a level sees it: ``columns`` ``(name, internal name, kind)``
    (those of a known kind), ``table`` its index among the pass's joined relations."""

    join: _Join
    columns: tuple
    table: int


def _right_side(join: _Join, frames, table: int) -> _Right | None:
    frame = frames.get(join.view.lower())
    if frame is None:
        return None
    columns = tuple((f.name, f"{_RIGHT}{table}_{i}", _kind(f.dataType))
                    for i, f in enumerate(frame.schema.fields)
                    if _kind(f.dataType) != "opaque")
    return _Right(join, columns, table)


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
    groups = time_windows.direct_groups(frame, stream, rt, time_col, wanted, progress,
                                        time_windows._min_rows(rt.spark))
    if groups is None:
        return None
    total = sum(g.rows for g in groups)
    first, last = min(g.lo for g in groups), max(g.hi for g in groups)
    spacing = max(1, (last - first) // max(1, total))
    before = reach_time + LAG_SLACK * reach_rows * spacing
    # ranges that each fit a Python task's memory (planner/task_memory.py), the chain's
    # outputs counted as columns too
    ranges = time_windows.fitting_ranges(rt.spark, groups, 2 * len(read) + 1, before, 0,
                                         max(1, time_windows.MIN_CHUNK_FRAMES * before),
                                         align=width)
    if ranges is None:
        return None
    groups = tuple(groups)

    def evaluate(r, tables):
        while True:
            table = pc_.read_range(r, read, time_col, progress, wanted, context=False)
            complete = None if r.need_lo <= first else r.need_lo
            out = chain.run(table, program, r.start, complete, ansi, tables)
            if out is not None:
                return out
            # read twice as far back (at least some rows' worth)
            lo = r.start - max(2 * (r.start - r.need_lo), 64 * spacing)
            r = dataclasses.replace(r, need_lo=lo, groups=tuple(
                g for g in groups if g.hi >= lo and g.lo <= r.need_hi))

    return ranges, evaluate, (first, last)


def _kind(data_type) -> str:
    name = data_type.simpleString()
    return name if name in _KINDS else "opaque"


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
        read = {node[1] for node in _level_nodes(level, joined=False) if node[0] == "col"}
        level = dataclasses.replace(level, lookup=dataclasses.replace(
            level.lookup, columns=tuple(c for c in level.lookup.columns if c[1] in read)))
    roots = [e for _, e in level.outputs] + ([level.having] if level.having else [])
    used = {node[1] for e in roots for node in chain.nodes(e) if node[0] == "win"}
    return dataclasses.replace(level, windows=tuple(
        w if i in used else None for i, w in enumerate(level.windows)))


def _level_nodes(level, joined=True):
    """The expression nodes a level evaluates over its input (``joined``: and its join's
    key, which reads the input before the join)."""
    # a GROUP BY level's outputs and HAVING read its groups (keys, aggregates), not its input
    outputs = [] if level.group is not None else [e for _, e in level.outputs]
    roots = outputs + [level.where] + list(level.group or ()) + [
        e for w in level.windows if w is not None for e in (w.arg, w.default) + w.keys] + (
        [level.lookup.key, level.lookup.where] if level.lookup is not None and joined else [])
    for root in roots:
        if root is not None:
            yield from chain.nodes(root)


def _columns_read(level) -> set[str]:
    return {node[1] for node in _level_nodes(level) if node[0] == "col"}


# ----------------------------------------------------------------------------- compiling
class _Compiler:
    """One SELECT compiled over ``scope`` (its input's columns: ``(name, node, kind)`` in
    order) whose event-time columns are ``times`` and tumbling window instants
    ``buckets`` (lower-case names; ``width`` the window's, None without one)."""

    def __init__(self, scope, times, select: exp.Select, ansi: bool, buckets=frozenset(),
                 width=None, total=False, right: _Right | None = None):
        self.scope, self.times, self.select, self.ansi = scope, times, select, ansi
        self.buckets, self.width, self.total = buckets, width, total
        self.right = right  # the relation the FROM joins (its columns beside the input's)
        self.left_only = False  # compiling the join's key: the joined columns are not there
        #: a total's expressions over the merged partials (the top's SELECT list), else None
        self.shells: list | None = None
        self.by_name: dict = {}
        for name, _, kind in scope:
            self.by_name.setdefault(name.lower(), []).append(kind)
        source = select.args["from_"].this
        self.qualifiers = {source.alias_or_name.lower(), source.name.lower()}
        self.windows: list = []
        self.before = 0  # the time the level's frames reach back
        self.lags = 0    # the rows its lags reach back
        self.group: list | None = None  # GROUP BY key nodes (an aggregate level)
        self.in_aggregate = False

    def level(self):
        where = self.select.args.get("where")
        where = where.this if where is not None else None
        if self.right is None:
            return self.unjoined_level(where)
        before, where = self.split_where(where)
        lookup = self.lookup(before)
        level, *rest = self.unjoined_level(where)
        return (dataclasses.replace(level, lookup=lookup), *rest)

    def split_where(self, where):
        """``(node, rest)``: the WHERE's conjuncts that read only the join's left side,
        compiled (None: none), and the others (an expression or None). Spark filters the
        left side by the first before it joins (the key is never evaluated on a row they
        drop: no ANSI error from one), and the joined rows by the rest."""
        if where is None:
            return None, None
        conjuncts = list(where.flatten()) if isinstance(where, exp.And) else [where]
        before, after = None, []
        for conjunct in conjuncts:
            if conjunct.find(exp.Window, exp.AggFunc) is not None:
                after.append(conjunct)
                continue
            self.left_only = True
            try:
                node, kind = self.expr(conjunct)
                node = self.to(node, kind, "boolean")
            except _Refuse:  # reads the right side (or is not fusable: refused later)
                after.append(conjunct)
                continue
            finally:
                self.left_only = False
            before = node if before is None else ("and", before, node)
        rest = None
        for conjunct in after:
            rest = conjunct if rest is None else exp.And(this=rest, expression=conjunct)
        return before, rest

    def lookup(self, before=None) -> chain.Lookup:
        """The FROM's join (:class:`udfs.fused_chain.Lookup`): an integral or timestamp key,
        compared exactly (a BIGINT with an INT widened, as Spark does); ``before`` filters
        the left side first."""
        join = self.right.join
        matches = [c for c in self.right.columns if c[0].lower() == join.key.lower()]
        if len(matches) != 1:
            raise _Refuse  # unknown or ambiguous: Spark's error
        key_name, _, right_kind = matches[0]
        self.left_only = True
        try:
            node, kind = self.expr(join.left_key)
        finally:
            self.left_only = False
        integral = ("int", "bigint")
        if kind == right_kind and kind in integral + ("timestamp",):
            key_kind = kind
        elif kind in integral and right_kind in integral:
            key_kind, node = "bigint", self.to(node, kind, "bigint")
        else:
            raise _Refuse  # floating keys (NaN, -0.0), strings...: Spark's join
        return chain.Lookup(self.right.table, node, key_kind, key_name,
                            tuple((name, internal, kind)
                                  for name, internal, kind in self.right.columns),
                            self.right.join.inner, before)

    def unjoined_level(self, where):
        cond = None
        if where is not None:
            if where.find(exp.Window) is not None or where.find(exp.AggFunc) is not None:
                raise _Refuse
            node, kind = self.expr(where)
            cond = self.to(node, kind, "boolean")
        if self.select.args.get("group") is not None:
            return self.aggregate_level(cond)
        if self.total:
            return self.total_level(cond)
        if self.select.args.get("having") is not None:
            raise _Refuse  # HAVING without GROUP BY: an aggregate of the whole input
        outputs, scope, times, buckets = [], [], set(), set()
        for item in self.select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                for name, node, kind, left in self.star(item):
                    self.check_kind(kind)
                    outputs.append((name, node))
                    scope.append((name, ("col", name.lower()), kind))
                    if left and name.lower() in self.times:
                        times.add(name.lower())
                    if left and name.lower() in self.buckets:
                        buckets.add(name.lower())
                continue
            expr = item.this if isinstance(item, exp.Alias) else item
            name = item.alias if isinstance(item, exp.Alias) else (
                item.name if isinstance(item, exp.Column) else f"__wavesql_unnamed_{len(outputs)}")
            node, kind = self.expr(expr)
            if kind in ("null", "decimal"):
                raise _Refuse  # a bare NULL or DECIMAL literal: Spark's own types
            outputs.append((name, node))
            scope.append((name, ("col", name.lower()), kind))
            if isinstance(expr, exp.Column) and self.is_time(expr):
                times.add(name.lower())
            if isinstance(expr, exp.Column) and self.is_time(expr, self.buckets):
                buckets.add(name.lower())
        level = chain.Level(cond, tuple(self.windows), tuple(outputs))
        return level, scope, times, buckets, self.before, self.lags

    def aggregate_level(self, cond):
        """``SELECT <keys, aggregates> ... GROUP BY <the window instant>, ...`` over a
        tumbling window: one row per group, each group within one window (and range)."""
        group = self.select.args["group"]
        if self.width is None or {k for k, v in group.args.items() if v} - {"expressions"}:
            raise _Refuse  # no tumbling window below, or ROLLUP / CUBE / GROUPING SETS
        keys, bucket = [], None
        for i, key in enumerate(group.expressions):
            if key.find(exp.AggFunc) is not None or key.find(exp.Window) is not None:
                raise _Refuse
            node, kind = self.expr(key)
            if kind not in _KINDS:
                raise _Refuse
            if bucket is None and self.is_time(key, self.buckets):
                bucket = i
            keys.append(node)
        if bucket is None:
            raise _Refuse  # groups could span ranges
        self.group = keys
        outputs, scope = [], []
        for item in self.select.expressions:
            if isinstance(item, exp.Star) or (isinstance(item, exp.Column)
                                              and isinstance(item.this, exp.Star)):
                raise _Refuse
            expr = item.this if isinstance(item, exp.Alias) else item
            node, kind = self.expr(expr)
            if kind in ("null", "decimal"):
                raise _Refuse
            name = item.alias_or_name or f"__wavesql_unnamed_{len(outputs)}"
            outputs.append((name, node))
            scope.append((name, ("col", name.lower()), kind))
        having = None
        if self.select.args.get("having") is not None:
            node, kind = self.expr(self.select.args["having"].this)
            having = self.to(node, kind, "boolean")
        level = chain.Level(cond, tuple(self.windows), tuple(outputs), tuple(keys), bucket,
                            having)
        return level, scope, set(), set(), self.before, self.lags

    def total_level(self, cond):
        """``SELECT <expressions over aggregates>`` without GROUP BY at the top: each range
        computes partial aggregates of its own rows (``sum avg count min max``: a sum and a
        count for ``avg``) and Spark merges them in the expressions kept as ``shells``
        (``sum(x) / count(*)`` becomes ``sum(p0) / coalesce(sum(p1), 0)``, ``p<i>`` the
        partials' columns)."""
        if self.select.args.get("having") is not None:
            raise _Refuse
        self.group = []  # columns outside an aggregate are Spark's error
        outputs, scope, self.shells = [], [], []

        def partial(func, node, kind):
            self.windows.append(chain.Window(func, node, kind, whole=True))
            name = f"__wavesql_p{len(outputs)}"
            outputs.append((name, ("win", len(self.windows) - 1)))
            scope.append((name, ("col", name.lower()), chain.result_type(func, kind)))
            return exp.column(name)

        for item in self.select.expressions:
            shell = (item.this if isinstance(item, exp.Alias) else item).copy()
            if shell.find(exp.Window, exp.Select) is not None or isinstance(shell, exp.Star) \
                    or any(c.find_ancestor(exp.AggFunc) is None
                           for c in shell.find_all(exp.Column)):
                raise _Refuse  # a column outside an aggregate (Spark's error), a subquery
            for agg in [a for a in shell.find_all(exp.AggFunc)
                        if a.find_ancestor(exp.AggFunc) is None]:
                name, node, kind = self.aggregate_argument(agg, _TOTALS, True, _KINDS)
                if name == "avg":  # Spark: a DOUBLE sum over the count
                    total = partial("sum", self.to(node, kind, "double"), "double")
                    count = partial("count", node, kind)
                    merged = exp.Div(this=exp.Sum(this=total), expression=exp.Nullif(
                        this=exp.Sum(this=count), expression=exp.Literal.number(0)))
                elif name == "count":
                    merged = exp.Coalesce(this=exp.Sum(this=partial(name, node, kind)),
                                          expressions=[exp.Literal.number(0)])
                else:
                    merged = _TOTALS_MERGE[name](this=partial(name, node, kind))
                if agg is shell:
                    shell = merged
                else:
                    agg.replace(merged)
            self.shells.append(shell)
        level = chain.Level(cond, tuple(self.windows), tuple(outputs), total=True)
        return level, scope, set(), set(), self.before, self.lags

    def aggregate(self, e):
        """An aggregate of a GROUP BY level: the whole group's value."""
        if self.group is None or self.in_aggregate:
            raise _Refuse  # an aggregate query without GROUP BY, or nested aggregates
        return self.whole_aggregate(e, self.group, in_aggregate=True)

    def whole_aggregate(self, func, keys, in_aggregate=False):
        """The aggregate call ``func`` over the whole partition of ``keys`` (nodes), the
        argument compiled over the level's input (``in_aggregate``: inside a GROUP BY)."""
        name, node, kind = self.aggregate_argument(func, _AGGREGATES, in_aggregate)
        self.windows.append(chain.Window(name, node, kind, before=self.width,
                                         keys=tuple(keys), whole=True))
        return ("win", len(self.windows) - 1), chain.result_type(name, kind)

    def aggregate_argument(self, func, functions, in_aggregate, count_kinds=chain.NUMERIC):
        """``(name, argument node or None, its kind)`` of the aggregate call ``func`` (one of
        ``functions``, its argument compiled over the level's input: a number, or one of
        ``count_kinds`` for ``count``); refuses other calls and nested aggregates."""
        call = time_windows.aggregate_call(func, functions)
        if call is None or (call[1] is not None and call[1].find(exp.AggFunc)):
            raise _Refuse
        name, arg = call
        if arg is None:
            return name, None, None
        self.in_aggregate = in_aggregate
        try:
            node, kind = self.expr(arg)
        finally:
            self.in_aggregate = False
        if kind not in (count_kinds if name == "count" else chain.NUMERIC):
            raise _Refuse
        return name, node, kind

    # ----------------------------------------------------------------- expressions
    def star(self, item):
        """``(name, node, kind, from the left side)`` of the columns ``*`` / ``t.*`` reads:
        the input's, then the joined relation's (SQL's order)."""
        table = (item.table or "").lower() if isinstance(item, exp.Column) else ""
        right = self.right.columns if self.right is not None else ()
        if table and table not in self.qualifiers and not (
                right and table in self.right.join.qualifiers):
            raise _Refuse
        if not table or table in self.qualifiers:
            for name, _, kind in self.scope:
                yield name, ("col", name.lower()), kind, True
        if right and (not table or table in self.right.join.qualifiers):
            for name, internal, kind in right:
                yield name, ("col", internal), kind, False

    def resolve(self, column: exp.Column):
        if column.args.get("db") or column.args.get("catalog"):
            raise _Refuse
        table, name = (column.table or "").lower(), column.name.lower()
        right = self.right.join.qualifiers if self.right is not None else frozenset()
        joined = [c for c in (self.right.columns if self.right is not None else ())
                  if c[0].lower() == name]
        kinds = self.by_name.get(name, [])
        if table in right:  # the joined relation's (never in the join's own key)
            if self.left_only or len(joined) != 1:
                raise _Refuse  # unknown or ambiguous: Spark's error
            node, kind = ("col", joined[0][1]), joined[0][2]
        elif table and table not in self.qualifiers:
            raise _Refuse
        elif len(kinds) + (0 if table else len(joined)) != 1:
            raise _Refuse  # unknown or ambiguous: Spark's error
        elif kinds:
            node, kind = ("col", name), kinds[0]
        elif self.left_only:
            raise _Refuse  # the join's key compares the two sides, not one with itself
        else:
            node, kind = ("col", joined[0][1]), joined[0][2]
        self.check_kind(kind)
        if self.group is not None and not self.in_aggregate:
            if node not in self.group:
                raise _Refuse  # a column neither grouped nor aggregated: Spark's error
            return ("col", f"__g{self.group.index(node)}"), kind
        return node, kind

    def is_time(self, column, names=None) -> bool:
        """Whether ``column`` is one of the event-time columns (or of ``names``)."""
        names = self.times if names is None else names
        right = () if self.right is None else self.right.join.qualifiers
        return (isinstance(column, exp.Column) and not isinstance(column.this, exp.Star)
                and (column.table or "").lower() not in right
                and column.name.lower() in names and len(
                    self.by_name.get(column.name.lower(), ())) == 1)

    @staticmethod
    def check_kind(kind):
        if kind == "opaque":
            raise _Refuse

    def expr(self, e):  # noqa: C901 -- one branch per construct, as Spark names them
        if isinstance(e, exp.Paren):
            return self.expr(e.this)
        if isinstance(e, exp.Column):
            return self.resolve(e)
        if isinstance(e, exp.Literal):
            return _literal(e)
        if isinstance(e, exp.Boolean):
            return ("lit", bool(e.this), "boolean"), "boolean"
        if isinstance(e, exp.Null):
            return ("lit", None, "null"), "null"
        if isinstance(e, exp.Window):
            if self.group is not None:
                raise _Refuse  # windows over groups
            return self.window(e)
        if isinstance(e, exp.AggFunc):
            return self.aggregate(e)
        if isinstance(e, exp.Sqrt):
            a, kind = self.expr(e.this)
            return ("sqrt", self.to(a, kind, "double")), "double"
        if isinstance(e, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
            a, ka = self.expr(e.this)
            b, kb = self.expr(e.expression)
            kind = _common_numeric(ka, kb, self.ansi)
            if isinstance(e, exp.Div):
                kind = "double"  # Spark divides in DOUBLE (DECIMAL refused above)
            op = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}[type(e)]
            return ("arith", op, self.to(a, ka, kind), self.to(b, kb, kind), kind), kind
        if isinstance(e, exp.Neg):
            a, kind = self.expr(e.this)
            if a[0] == "lit" and kind in NUMERIC_LIT:
                return ("lit", None if a[1] is None else -a[1], kind), kind
            if kind not in chain.NUMERIC:
                raise _Refuse
            return ("neg", a, kind), kind
        if isinstance(e, tuple(_COMPARE)):
            return self.compare(_COMPARE[type(e)], e.this, e.expression)
        if isinstance(e, (exp.NullSafeEQ, exp.NullSafeNEQ)):
            a, b, _ = self.comparable(e.this, e.expression)
            return ("nullsafe", isinstance(e, exp.NullSafeNEQ), a, b), "boolean"
        if isinstance(e, exp.Is):
            if not isinstance(e.expression, exp.Null):
                raise _Refuse
            a, _ = self.expr(e.this)
            return ("isnull", False, a), "boolean"
        if isinstance(e, exp.Not):
            if isinstance(e.this, exp.Is) and isinstance(e.this.expression, exp.Null):
                a, _ = self.expr(e.this.this)
                return ("isnull", True, a), "boolean"
            a, kind = self.expr(e.this)
            return ("not", self.to(a, kind, "boolean")), "boolean"
        if isinstance(e, (exp.And, exp.Or)):
            a, ka = self.expr(e.this)
            b, kb = self.expr(e.expression)
            op = "and" if isinstance(e, exp.And) else "or"
            return (op, self.to(a, ka, "boolean"), self.to(b, kb, "boolean")), "boolean"
        if isinstance(e, exp.Between):
            if e.args.get("symmetric"):
                raise _Refuse
            low, _ = self.compare("ge", e.this, e.args["low"])
            high, _ = self.compare("le", e.this, e.args["high"])
            return ("and", low, high), "boolean"
        if isinstance(e, exp.Case):
            operand = e.this
            pairs = []
            for branch in e.args.get("ifs") or []:
                cond = (exp.EQ(this=operand.copy(), expression=branch.this.copy())
                        if operand is not None else branch.this)
                pairs.append((cond, branch.args["true"]))
            return self.case(pairs, e.args.get("default"))
        if isinstance(e, exp.If):
            return self.case([(e.this, e.args["true"])], e.args.get("false"))
        if isinstance(e, exp.Nullif):
            a, kind = self.expr(e.this)
            if kind in ("null", "decimal"):
                raise _Refuse
            cond, _ = self.compare("eq", e.this, e.expression)
            return ("case", ((cond, ("lit", None, kind)),), a, kind), kind
        if isinstance(e, exp.Coalesce):
            args = [self.expr(a) for a in [e.this] + list(e.expressions)]
            kind = _common([k for _, k in args], self.ansi)
            return ("coalesce", tuple(self.to(a, k, kind) for a, k in args), kind), kind
        if isinstance(e, exp.Abs):
            a, kind = self.expr(e.this)
            if kind not in chain.NUMERIC:
                raise _Refuse
            return ("abs", a, kind), kind
        if isinstance(e, (exp.Cast, exp.TryCast)):
            a, kind = self.expr(e.this)
            to = _cast_kind(e.args.get("to"))
            if kind == to:
                return a, kind
            if a[0] == "lit" and kind == "decimal" and to == "double":
                return ("lit", a[1], "double"), "double"  # the literal's nearest double
            if to not in _CASTS.get(kind, ()):
                raise _Refuse  # a cast that can fail or round differently
            return ("cast", a, to), to
        if isinstance(e, tuple(_UNIX)):  # a timestamp's microseconds: floor-divided by 10^k
            a, kind = self.expr(e.this)
            if kind != "timestamp":
                raise _Refuse  # a string or date Spark would cast first
            unit = _UNIX[type(e)]
            return (("cast", a, "bigint") if unit == 1 else ("floordiv", a, unit)), "bigint"
        if isinstance(e, exp.Anonymous) and str(e.this).lower() == "timestamp_micros" \
                and len(e.expressions) == 1:
            a, kind = self.expr(e.expressions[0])
            if kind not in ("int", "bigint"):
                raise _Refuse
            return ("cast", self.to(a, kind, "bigint"), "timestamp"), "timestamp"
        if isinstance(e, exp.Anonymous) and str(e.this).lower() == "pmod" \
                and len(e.expressions) == 2:
            # by a positive integer literal (a bucket's width): numpy's floor modulo is
            # Spark's pmod then; other divisors (0, negative, columns) are Spark's to do
            a, ka = self.expr(e.expressions[0])
            n, kn = self.expr(e.expressions[1])
            if n[0] != "lit" or kn not in ("int", "bigint") or n[1] is None or n[1] <= 0 \
                    or ka not in ("int", "bigint"):
                raise _Refuse
            kind = _common_numeric(ka, kn, self.ansi)
            return ("pmod", self.to(a, ka, kind), n[1], kind), kind
        raise _Refuse

    def to(self, node, kind, want):
        """``node`` of ``kind`` as ``want`` (Spark's implicit widening); refuses otherwise."""
        if kind == want:
            return node
        if node[0] == "lit" and (kind == "null" or (kind == "decimal"
                                                     and want in ("float", "double"))):
            return ("lit", node[1], want)
        if node[0] == "lit" and kind in ("int", "bigint") and want in chain.NUMERIC:
            return ("lit", node[1], want)
        if want in _WIDER.get(kind, ()):
            return ("cast", node, want)
        raise _Refuse

    def comparable(self, left, right):
        a, ka = self.expr(left)
        b, kb = self.expr(right)
        if ka in NUMERIC_LIT and kb in NUMERIC_LIT:
            kind = _common_numeric(ka, kb, self.ansi)
        else:
            kind = _common([ka, kb], self.ansi)
        return self.to(a, ka, kind), self.to(b, kb, kind), kind

    def compare(self, how, left, right):
        a, b, _ = self.comparable(left, right)
        return ("cmp", how, a, b), "boolean"

    def case(self, pairs, otherwise):
        conds = []
        values = []
        for cond, value in pairs:
            c, kc = self.expr(cond)
            conds.append(self.to(c, kc, "boolean"))
            values.append(self.expr(value))
        if otherwise is not None:
            values.append(self.expr(otherwise))
        kind = _common([k for _, k in values], self.ansi)
        cast = [self.to(v, k, kind) for v, k in values]
        branches = tuple(zip(conds, cast[:len(conds)]))
        default = cast[len(conds)] if otherwise is not None else None
        return ("case", branches, default, kind), kind

    # ------------------------------------------------------------------ windows
    def window(self, w: exp.Window):
        if w.args.get("alias"):
            raise _Refuse
        if w.args.get("order") is None and w.args.get("spec") is None:
            return self.whole(w)
        order = w.args.get("order")
        if order is None or len(order.expressions) != 1:
            raise _Refuse
        key = order.expressions[0]
        if key.args.get("desc") or not self.is_time(key.this):
            raise _Refuse
        func = w.this
        if isinstance(func, exp.Lag):
            if w.args.get("spec") is not None or w.args.get("partition_by"):
                raise _Refuse
            arg, kind = self.expr(func.this)
            if kind not in _KINDS:
                raise _Refuse
            n = 1
            if func.args.get("offset") is not None:
                offset = func.args["offset"]
                if not isinstance(offset, exp.Literal) or offset.is_string \
                        or not re.fullmatch(r"\d+", offset.this) or int(offset.this) < 1:
                    raise _Refuse
                n = int(offset.this)
            default = None
            if func.args.get("default") is not None:
                d, kd = self.expr(func.args["default"])
                if d[0] != "lit":
                    raise _Refuse
                default = self.to(d, kd, kind)
            self.windows.append(chain.Window("lag", arg, kind, n=n, default=default))
            self.lags = max(self.lags, n)
            return ("win", len(self.windows) - 1), kind
        shape = time_windows._shape(w)
        if shape is None:
            raise _Refuse
        _, (name, arg, before, after) = shape
        if after > 0:
            raise _Refuse
        keys = []
        for key in w.args.get("partition_by") or []:
            node, kind = self.expr(key)
            if kind not in _KINDS:
                raise _Refuse
            keys.append(node)
        node, kind = (None, None) if arg is None else self.expr(arg)
        if arg is not None and kind not in chain.NUMERIC:
            raise _Refuse
        self.windows.append(chain.Window(name, node, kind, before=before, after=after,
                                         keys=tuple(keys)))
        self.before = max(self.before, before)
        return ("win", len(self.windows) - 1), chain.result_type(name, kind)


    def whole(self, w: exp.Window):
        """``agg(x) OVER (PARTITION BY <tumbling window instant>, ...)``: the whole
        partition, which lies within one window (ranges own whole windows)."""
        keys = w.args.get("partition_by") or []
        if self.width is None or not any(self.is_time(k, self.buckets) for k in keys):
            raise _Refuse
        if any(isinstance(w.this, t) for t in _MOMENTS):
            raise _Refuse  # kurtosis / skewness: aggregates of GROUP BY only
        nodes = []
        for key in keys:
            node, kind = self.expr(key)
            if kind not in _KINDS:
                raise _Refuse
            nodes.append(node)
        self.before = max(self.before, self.width)
        return self.whole_aggregate(w.this, nodes)


NUMERIC_LIT = chain.NUMERIC + ("decimal", "null")
#: unix_micros / unix_millis / unix_seconds: the microseconds floor-divided by this
_UNIX = {exp.UnixMicros: 1, exp.UnixMillis: 1000, exp.UnixSeconds: 1_000_000}
_MOMENTS = {exp.Kurtosis: "kurtosis", exp.Skewness: "skewness"}
#: The aggregates a total merges from partials, and how.
_TOTALS = {exp.Sum: "sum", exp.Avg: "avg", exp.Count: "count", exp.Min: "min", exp.Max: "max"}
_TOTALS_MERGE = {"sum": exp.Sum, "min": exp.Min, "max": exp.Max}
_AGGREGATES = {**time_windows._FUNCTIONS, **_MOMENTS}
_COMPARE = {exp.EQ: "eq", exp.NEQ: "ne", exp.GT: "gt", exp.GTE: "ge", exp.LT: "lt",
            exp.LTE: "le"}
#: Casts that never fail and round as numpy does: kind -> kinds it widens to.
_WIDER = {"int": ("bigint", "float", "double"), "bigint": ("float", "double"),
          "float": ("double",)}
#: The explicit CASTs among them: also BOOLEAN to a number (true 1, false 0).
_CASTS = {**_WIDER, "boolean": ("int", "bigint", "float", "double")}


def _literal(e: exp.Literal):
    if e.is_string:
        raise _Refuse
    text = e.this
    if re.fullmatch(r"\d+", text):
        value = int(text)
        if value < (1 << 31):
            return ("lit", value, "int"), "int"
        if value < (1 << 63):
            return ("lit", value, "bigint"), "bigint"
        raise _Refuse
    if re.fullmatch(r"(\d+\.?\d*|\.\d+)[eE][+-]?\d+", text):
        return ("lit", float(text), "double"), "double"
    if re.fullmatch(r"\d+\.\d*|\.\d+", text):
        return ("lit", float(text), "decimal"), "decimal"  # meets only FLOAT / DOUBLE
    raise _Refuse


def _common_numeric(ka: str, kb: str, ansi: bool) -> str:
    """Spark's wider type of two numeric operands (DECIMAL literals only beside FLOAT or
    DOUBLE, where they become DOUBLE). With ANSI type coercion an INT or BIGINT meeting a
    FLOAT makes a DOUBLE (a FLOAT cannot hold every integer); without, a FLOAT."""
    kinds = {ka, kb} - {"null"}
    if not kinds or not kinds <= set(NUMERIC_LIT):
        raise _Refuse
    if "decimal" in kinds:
        others = kinds - {"decimal"}
        if not others or not others <= {"float", "double"}:
            raise _Refuse
        return "double"
    if ansi and "float" in kinds and kinds & {"int", "bigint"}:
        return "double"
    return max(kinds, key=chain.NUMERIC.index)


def _common(kinds, ansi: bool) -> str:
    """The common type of CASE branches / COALESCE arguments / comparison sides."""
    known = [k for k in kinds if k != "null"]
    if not known:
        raise _Refuse
    if all(k in NUMERIC_LIT for k in known):
        kind = known[0]
        for k in known[1:]:
            kind = _common_numeric(kind, k, ansi)
        if kind == "decimal":
            raise _Refuse
        return kind
    if len(set(known)) == 1 and known[0] in _KINDS:
        return known[0]
    raise _Refuse


def _cast_kind(to) -> str:
    if not isinstance(to, exp.DataType) or to.expressions:
        raise _Refuse
    names = {exp.DataType.Type.BOOLEAN: "boolean", exp.DataType.Type.INT: "int",
             exp.DataType.Type.BIGINT: "bigint", exp.DataType.Type.FLOAT: "float",
             exp.DataType.Type.DOUBLE: "double"}
    kind = names.get(to.this)
    if kind is None:
        raise _Refuse
    return kind
