"""CQL windows on event streams and the relation-to-stream operators.

Semantics (this is the user documentation; ``tests/cql_reference.py`` is an independent
brute-force evaluator of exactly this text, and the Spark lowering is tested against it):

Time is the stream's ``EVENT TIME`` column, counted in integer microseconds. A window turns
the stream into a **relation that varies with time**: every row gets a validity interval
``[from, to)`` of instants, and the relation at instant ``t`` is ``R(t) = {rows with
from <= t < to}``:

==============================  ==============================================================
window                          a row with event time ``ts`` is in the relation during
==============================  ==============================================================
``[RANGE r]``                   ``[ts, ts + r)`` -- the window at ``t`` covers ``(t - r, t]``
``[RANGE r SLIDE s]``           the same, but observed only at multiples of ``s`` (aligned to
                                1970-01-01 UTC): at ``t = k*s`` the window covers
                                ``(t - r, t]`` -- tumbling when ``s = r``
``[NOW]``                       ``[ts, ts + 1 microsecond)``: the rows *at* ``t``
``[RANGE UNBOUNDED]``           ``[ts, forever)``: every row so far
``[ROWS n]``                    from ``ts`` until ``n`` later rows have arrived: the last ``n``
``[PARTITION BY k ROWS n]``     the last ``n`` rows of each value of ``k``
==============================  ==============================================================

Rows at the same instant are ordered by their column values (in declared order, NULLs
first), so "the last n rows" is deterministic even with ties. Rows whose event time is NULL
belong to no window.

The query is evaluated on the relation at each **instant**: for unslid windows, every
instant at which some row enters or leaves (the relation is constant in between); for slid
windows, every multiple of the slide. An empty relation gives no result rows (even for a
global aggregate such as ``count(*)``), so only instants with rows produce output. Results
become a stream again by a relation-to-stream operator, and every result row carries
``_time``, its instant:

* ``RSTREAM (q)`` -- the default when none is written: the whole result at every instant
  (for slid windows: every window once);
* ``ISTREAM (q)`` -- the rows the result gained since the previous instant (multiset
  difference: a row twice now and once before is emitted once);
* ``DSTREAM (q)`` -- the rows it lost, at the instant they left.

Lowering: the windowed relation becomes a DataFrame of ``(_time, row)`` pairs -- one per
instant at which the row is in the relation -- and the user's SELECT over it is grouped by
``_time`` as well as its own keys. Slid windows expand each row into its ``r / s`` windows
(no join); ``[RANGE r]`` joins rows to the instants with **time binning** (an equi-join on
``floor(t / r)`` plus the range predicate, each row in at most two bins) rather than a
nested loop; ``[NOW]`` needs no join at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql
from wavesql.errors import Span, WaveSQLError

from .types import interval_us, number

#: The instant column every windowed result carries.
TIME = "_time"

WINDOW_KINDS = ("RANGE", "SLIDE", "NOW", "UNBOUNDED", "ROWS", "PARTITION_ROWS")


@dataclass(frozen=True)
class WindowSpec:
    """A bound CQL window. ``size``/``slide`` are microseconds (RANGE, SLIDE) or a row
    count (ROWS); ``partition_by`` are Spark SQL expressions over the stream's columns."""

    kind: str
    size: int = 0
    slide: int = 0
    partition_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        if self.kind == "RANGE":
            return f"[RANGE {_us_text(self.size)}]"
        if self.kind == "SLIDE":
            return f"[RANGE {_us_text(self.size)} SLIDE {_us_text(self.slide)}]"
        if self.kind == "ROWS":
            return f"[ROWS {self.size}]"
        if self.kind == "PARTITION_ROWS":
            return f"[PARTITION BY {', '.join(self.partition_by)} ROWS {self.size}]"
        return f"[{'RANGE UNBOUNDED' if self.kind == 'UNBOUNDED' else 'NOW'}]"


def _us_text(us: int) -> str:
    for unit, size in (("DAYS", 86_400_000_000), ("HOURS", 3_600_000_000),
                       ("MINUTES", 60_000_000), ("SECONDS", 1_000_000),
                       ("MILLISECONDS", 1000)):
        if us % size == 0:
            return f"{us // size} {unit}"
    return f"{us} MICROSECONDS"


def bind_window(node: wn.StreamWindow, stream_name: str) -> WindowSpec:
    """Check a window written after an event stream and return its spec."""
    kind = node.kind
    if kind == "SAMPLES":
        raise WaveSQLError("INVALID_OPTION", "SAMPLES windows cut signals, not event streams",
                           Span.of(node), hint=f"`{stream_name}` is a stream: use "
                           "[RANGE 10 SECONDS], [ROWS 100], [NOW] or [RANGE UNBOUNDED]")
    if kind == "RANGE":
        size = _positive_interval(node.args["size"], "RANGE")
        slide = node.args.get("slide")
        if slide is None:
            return WindowSpec("RANGE", size)
        return WindowSpec("SLIDE", size, _positive_interval(slide, "SLIDE"))
    if kind in ("ROWS", "PARTITION_ROWS"):
        size_node = node.args["size"]
        n = number(size_node)
        if n != int(n) or n < 1:
            raise WaveSQLError("INVALID_OPTION", f"ROWS needs a positive whole number, got "
                               f"`{size_node.sql()}`", Span.of(size_node), hint="e.g. [ROWS 10]")
        keys = tuple(to_spark_sql(e) for e in node.args.get("partition_by") or ())
        return WindowSpec(kind, int(n), partition_by=keys)
    if kind in ("NOW", "UNBOUNDED"):
        return WindowSpec(kind)
    raise WaveSQLError("NOT_IMPLEMENTED", f"window kind {kind} is not supported", Span.of(node))


def _positive_interval(node: exp.Expression, what: str) -> int:
    us = interval_us(node)
    if us <= 0:
        raise WaveSQLError("INVALID_OPTION", f"{what} must be longer than zero", Span.of(node),
                           hint=f"e.g. {what} 10 SECONDS")
    return us


# ---------------------------------------------------------------------------------------
# Rewriting the SELECT over a window: evaluate it per instant
# ---------------------------------------------------------------------------------------
def windowed_table(select: exp.Select) -> exp.Table | None:
    """The windowed stream table a SELECT reads (FROM or a join), if any."""
    found = [t for t in _own_tables(select) if _event_window(t) is not None]
    if len(found) > 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "joining two windowed streams is not "
                           "implemented yet", Span.of(found[1]),
                           hint="window one stream per SELECT; join the results by _time")
    return found[0] if found else None


def _event_window(table: exp.Table) -> wn.StreamWindow | None:
    window = table.args.get("window")
    if window is None or window.kind in ("SAMPLES",):
        return None
    return window


def _own_tables(select: exp.Select):
    from_ = select.args.get("from_")
    if from_ is not None and isinstance(from_.this, exp.Table):
        yield from_.this
    for join in select.args.get("joins") or []:
        if isinstance(join.this, exp.Table):
            yield join.this


def per_instant(select: exp.Select, table: exp.Table, scan_name: str) -> exp.Select:
    """Rewrite ``select`` (in place) to evaluate it once per instant of ``table``'s window.

    The table becomes ``scan_name`` (the ``(_time, row)`` pairs) under the same alias; the
    result gains ``_time``; aggregates and OVER windows are grouped/partitioned by it.
    """
    alias = table.alias_or_name
    if select.args.get("limit") is not None or select.args.get("offset") is not None:
        raise WaveSQLError("NOT_IMPLEMENTED", "LIMIT inside a windowed query is not "
                           "implemented (it would limit each instant)",
                           Span.of(select.args.get("limit") or select.args.get("offset")),
                           hint="put the windowed query in a subquery and LIMIT outside it")
    for stray in ("emit", "late_into"):
        select.set(stray, None)  # batch: everything is final and nothing is late
    table.replace(exp.Table(this=exp.to_identifier(scan_name),
                            alias=exp.TableAlias(this=exp.to_identifier(alias))))
    time_col = exp.column(TIME, table=alias)
    for window in _own(select, exp.Window):
        window.set("partition_by", [time_col.copy()] + list(window.args.get("partition_by") or []))
    if _is_aggregate(select):
        group = select.args.get("group")
        if group is not None and (group.args.get("rollup") or group.args.get("cube")
                                  or group.args.get("grouping_sets")):
            raise WaveSQLError("NOT_IMPLEMENTED", "ROLLUP/CUBE/GROUPING SETS over a window is "
                               "not implemented yet", Span.of(group))
        keys = list(group.expressions) if group is not None else []
        select.set("group", exp.Group(expressions=[time_col.copy()] + keys))
    if not any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star))
               or e.alias_or_name.lower() == TIME for e in select.expressions):
        select.set("expressions", [exp.alias_(time_col.copy(), TIME)] + list(select.expressions))
    return select


#: The sub-stream column of a split stream (``[PARTITION INTO n BY e REPLICATE WHEN p]``).
PART = "__part"


def per_substream(select: exp.Select, table: exp.Table, scan_name: str,
                  columns: list[str]) -> exp.Select:
    """Rewrite ``select`` (in place) to run once per sub-stream of a split stream and union
    the results: aggregates are grouped and OVER windows partitioned by the sub-stream too;
    ``*`` lists the stream's own columns (the sub-stream number stays hidden)."""
    alias = table.alias_or_name
    for arg, what in (("distinct", "DISTINCT"), ("limit", "LIMIT"), ("joins", "a join")):
        if select.args.get(arg):
            raise WaveSQLError("NOT_IMPLEMENTED", f"{what} over a split stream is not "
                               "implemented yet", Span.of(select.args[arg] if arg != "joins"
                                                          else select.args[arg][0]),
                               hint="split the stream in a subquery, then combine outside it")
    table.replace(exp.Table(this=exp.to_identifier(scan_name),
                            alias=exp.TableAlias(this=exp.to_identifier(alias))))
    part = exp.column(PART, table=alias)
    for window in _own(select, exp.Window):
        window.set("partition_by", [part.copy()] + list(window.args.get("partition_by") or []))
    if _is_aggregate(select):
        group = select.args.get("group")
        keys = list(group.expressions) if group is not None else []
        select.set("group", exp.Group(expressions=[part.copy()] + keys))
    expanded = []
    for e in select.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            expanded += [exp.column(c, table=alias) for c in columns]
        else:
            expanded.append(e)
    select.set("expressions", expanded)
    return select


def split_frame(df, n: int, by_sql: str, replicate_sql: str | None):
    """Each row to sub-stream ``pmod(hash(by), n)``, rows matching ``replicate`` to all of
    them, rows with a NULL ``by`` (and not replicated) to none; ``n`` Spark partitions."""
    from pyspark.sql import functions as F

    part = F.pmod(F.hash(F.expr(by_sql)), F.lit(n))
    replicate = (F.coalesce(F.expr(replicate_sql), F.lit(False)) if replicate_sql
                 else F.lit(False))
    routed = df.where(~replicate & F.expr(by_sql).isNotNull()).withColumn(PART, part)
    copies = df.where(replicate).withColumn(PART, F.explode(F.sequence(F.lit(0), F.lit(n - 1))))
    return routed.unionByName(copies).repartition(n, PART)


def split_costs(df, n: int, by_sql: str, replicate_sql: str | None) -> str:
    """Splitstream's cost figures for EXPLAIN: the routed / broadcast / omitted fractions of
    the input and the rows each sub-stream gets (one aggregation job)."""
    from pyspark.sql import functions as F

    replicate = (F.coalesce(F.expr(replicate_sql), F.lit(False)) if replicate_sql
                 else F.lit(False))
    kind = (F.when(replicate, "broadcast").when(F.expr(by_sql).isNull(), "omitted")
            .otherwise("routed"))
    part = F.when(kind == "routed", F.pmod(F.hash(F.expr(by_sql)), F.lit(n)))
    rows = df.select(kind.alias("k"), part.alias("p")).groupBy("k", "p").count().collect()
    total = sum(r["count"] for r in rows) or 1
    by_kind = {k: sum(r["count"] for r in rows if r["k"] == k)
               for k in ("routed", "broadcast", "omitted")}
    per = [by_kind["broadcast"]] * n
    for r in rows:
        if r["k"] == "routed":
            per[r["p"]] += r["count"]
    mean = sum(per) / n
    return (f"split into {n}: {total} rows in; routed {by_kind['routed'] / total:.3f}, "
            f"broadcast {by_kind['broadcast'] / total:.3f}, omitted "
            f"{by_kind['omitted'] / total:.3f}; rows per sub-stream min {min(per)} max "
            f"{max(per)} mean {mean:.1f} (skew {max(per) / mean if mean else 0:.2f}); "
            f"work vs unsplit {sum(per) / total:.2f}x")


def _own(select: exp.Select, kind):
    """Nodes of ``kind`` in ``select`` itself, not inside its subqueries."""
    for node in select.find_all(kind):
        if node.find_ancestor(exp.Select) is select:
            yield node


def _is_aggregate(select: exp.Select) -> bool:
    if select.args.get("group") is not None:
        return True
    for node in _own(select, exp.AggFunc):
        if node.find_ancestor(exp.Window) is None:
            return True
    return False


# ---------------------------------------------------------------------------------------
# Lowering (DataFrame code; pyspark is imported by the callers' process only)
# ---------------------------------------------------------------------------------------
def _micros(col: str):
    from pyspark.sql import functions as F

    return F.unix_micros(F.col(f"`{col}`"))


def _ceil_to(column, step: int):
    """Smallest multiple of ``step`` >= column (integer arithmetic, negative-safe)."""
    from pyspark.sql import functions as F

    return column + F.pmod(-column, F.lit(step))


def _floor_div(column, step: int):
    from pyspark.sql import functions as F

    return (column - F.pmod(column, F.lit(step))) / F.lit(step)


def spans(df, time_col: str, spec: WindowSpec):
    """``df`` with ``__from``/``__to`` (microseconds; ``__to`` NULL = forever)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    t = _micros(time_col)
    rows = df.where(F.col(f"`{time_col}`").isNotNull()).withColumn("__from", t)
    if spec.kind in ("RANGE", "SLIDE"):
        return rows.withColumn("__to", F.col("__from") + F.lit(spec.size))
    if spec.kind == "NOW":
        return rows.withColumn("__to", F.col("__from") + F.lit(1))
    if spec.kind == "UNBOUNDED":
        return rows.withColumn("__to", F.lit(None).cast("bigint"))
    # ROWS: valid until the n-th later row (same partition) arrives.
    order = [F.col("__from")] + [F.col(f"`{c}`").asc_nulls_first() for c in _orderable(df)]
    window = Window.partitionBy(*[F.expr(k) for k in spec.partition_by]).orderBy(*order)
    return rows.withColumn("__to", F.lead("__from", spec.size).over(window))


def _orderable(df) -> list[str]:
    from pyspark.sql.types import MapType, StructType, ArrayType

    def ok(dtype):
        if isinstance(dtype, MapType):
            return False
        if isinstance(dtype, ArrayType):
            return ok(dtype.elementType)
        if isinstance(dtype, StructType):
            return all(ok(f.dataType) for f in dtype.fields)
        return True

    return [f.name for f in df.schema.fields if ok(f.dataType)]


def instants(span_df):
    """Distinct change instants ``__t`` (rows entering or leaving), unslid windows."""
    from pyspark.sql import functions as F

    starts = span_df.select(F.col("__from").alias("__t"))
    ends = span_df.where(F.col("__to").isNotNull()).select(F.col("__to").alias("__t"))
    return starts.union(ends).distinct()


def windowed_frame(df, time_col: str, spec: WindowSpec):
    """The ``(_time, row)`` pairs: one per instant at which a row is in the relation."""
    from pyspark.sql import functions as F

    columns = [F.col(f"`{c}`") for c in df.columns]
    if spec.kind == "SLIDE" and spec.size == spec.slide:
        # Tumbling: a row's interval [t, t + r) holds exactly one multiple of r, its ceiling
        # -- arithmetic, not a one-element sequence exploded (20-25 % of such a query's
        # time), in one projection (each DataFrame step is a Spark analysis at planning)
        t = _micros(time_col)
        return df.where(F.col(f"`{time_col}`").isNotNull()).select(
            F.timestamp_micros(_ceil_to(t, spec.slide)).alias(TIME), *columns)
    s = spans(df, time_col, spec)
    if spec.kind == "NOW":
        at = s.withColumn("__t", F.col("__from"))
    elif spec.kind == "SLIDE":
        first = _ceil_to(F.col("__from"), spec.slide)
        stop = _ceil_to(F.col("__to"), spec.slide)
        at = (s.withColumn("__first", first).withColumn("__stop", stop)
              .where(F.col("__first") < F.col("__stop"))
              .withColumn("__t", F.explode(F.sequence(
                  F.col("__first"), F.col("__stop") - F.lit(spec.slide),
                  F.lit(spec.slide).cast("bigint")))))
    elif spec.kind == "RANGE":
        # Time binning: bins of the window's length, so a row's interval touches <= 2 bins.
        r = spec.size
        binned = s.withColumn("__bin", F.explode(F.array_distinct(F.array(
            _floor_div(F.col("__from"), r).cast("bigint"),
            _floor_div(F.col("__to") - F.lit(1), r).cast("bigint")))))
        points = instants(s).withColumn("__bin", _floor_div(F.col("__t"), r).cast("bigint"))
        at = (binned.join(points, "__bin")
              .where((F.col("__t") >= F.col("__from")) & (F.col("__t") < F.col("__to"))))
    else:  # UNBOUNDED, ROWS: intervals may be long, a range join on the instants
        points = instants(s)
        cond = (F.col("__t") >= F.col("__from")) & (
            F.col("__to").isNull() | (F.col("__t") < F.col("__to")))
        at = s.join(points, cond)
    return at.select(F.timestamp_micros(F.col("__t")).alias(TIME), *columns)


def relation_to_stream(result, kind: str, spec: WindowSpec, source=None, time_col=None):
    """``ISTREAM``/``DSTREAM`` of a per-instant result (RSTREAM is the result itself).

    ``source``/``time_col`` (the windowed stream) give the instants of unslid windows, which
    are needed to know each instant's predecessor; slid windows step by the slide.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if kind == "RSTREAM":
        return result
    names = result.columns
    others = [n for n in names if n != TIME]
    cols = [f"__c{i}" for i in range(len(others))]
    counts = (result.select(_micros(TIME).alias("__t"),
                            *[F.col(f"`{n}`").alias(c) for n, c in zip(others, cols)])
              .groupBy("__t", *cols).agg(F.count(F.lit(1)).alias("__n")))
    # The same counts, moved to the instant that follows theirs.
    if spec.kind == "SLIDE":
        following = counts.withColumn("__t", F.col("__t") + F.lit(spec.slide))
    else:
        points = instants(spans(source, time_col, spec))
        nxt = points.withColumn("__next", F.lead("__t").over(Window.orderBy("__t")))
        following = (counts.join(nxt, "__t").where(F.col("__next").isNotNull())
                     .select(F.col("__next").alias("__t"), *cols, "__n"))
    now, before = counts.alias("now"), following.alias("before")
    on = [F.col("now.__t") == F.col("before.__t")] + [
        F.col(f"now.{c}").eqNullSafe(F.col(f"before.{c}")) for c in cols]
    if kind == "ISTREAM":
        joined = now.join(before, on, "left")
        side, extra = "now", F.col("now.__n") - F.coalesce(F.col("before.__n"), F.lit(0))
    else:  # DSTREAM: what the previous instant had and this one has not
        joined = before.join(now, on, "left")
        side, extra = "before", F.col("before.__n") - F.coalesce(F.col("now.__n"), F.lit(0))
    kept = (joined.withColumn("__k", extra).where(F.col("__k") > 0)
            .withColumn("__copy", F.explode(F.sequence(F.lit(1).cast("bigint"), F.col("__k")))))
    back = {TIME: F.timestamp_micros(F.col(f"{side}.__t")).alias(TIME)}
    back.update({n: F.col(f"{side}.{c}").alias(n) for n, c in zip(others, cols)})
    return kept.select(*[back[n] for n in names])
