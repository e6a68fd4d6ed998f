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

**Joins.** Windowed streams read by one SELECT (its FROM and joins, of any kind) are joined
per instant: the query runs on ``R1(t) JOIN R2(t) ...``. The instants are every instant at
which any of the relations changes, and every multiple of a slid window's slide at which it
holds rows or has just emptied. Between its multiples a slid window's relation is its last
window (CQL defines every relation at every instant), so a ``[RANGE r SLIDE s]`` row is in
the relation during ``[ceil(ts / s) * s, ceil((ts + r) / s) * s)``. The result's ``_time`` is
the instant (either side's in an outer join), and so is a bare ``_time`` anywhere in the
SELECT; ``*`` lists each windowed stream's columns after one ``_time`` (a ``USING`` column
once, also when a source that is not windowed joins by it -- then its columns must be
known: a catalog object's; a SEMI or ANTI join's side not at all).

Lowering: the windowed relation becomes a DataFrame of ``(_time, row)`` pairs -- one per
instant at which the row is in the relation -- and the user's SELECT over it is grouped by
``_time`` as well as its own keys. Slid windows expand each row into its ``r / s`` windows
(no join); ``[RANGE r]`` joins rows to the instants with **time binning** (an equi-join on
``floor(t / r)`` plus the range predicate, each row in at most two bins) rather than a
nested loop; ``[NOW]`` needs no join at all. Joined windowed streams are paired with the
instants of all of them (:func:`joint_instants`), and each join condition gains ``_time``
equality, so Spark joins the pairs instant by instant.

This module holds a window's spec (:class:`WindowSpec`) and the DataFrame side: the
``(_time, row)`` pairs of a window scan, the instants of joined windows, the
relation-to-stream operators and the routing of a split stream.
:mod:`wavesql.planner.window_rewrite` binds a written window to its spec and rewrites the
SELECT over it.
"""

from __future__ import annotations

from dataclasses import dataclass

from wavesql.sqltext import quote

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


# ---------------------------------------------------------------------------------------
# Lowering (DataFrame code; pyspark is imported by the callers' process only)
# ---------------------------------------------------------------------------------------
def _micros(col: str):
    from pyspark.sql import functions as F

    return F.unix_micros(F.col(quote(col)))


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
    rows = df.where(F.col(quote(time_col)).isNotNull()).withColumn("__from", t)
    if spec.kind in ("RANGE", "SLIDE"):
        return rows.withColumn("__to", F.col("__from") + F.lit(spec.size))
    if spec.kind == "NOW":
        return rows.withColumn("__to", F.col("__from") + F.lit(1))
    if spec.kind == "UNBOUNDED":
        return rows.withColumn("__to", F.lit(None).cast("bigint"))
    # ROWS: valid until the n-th later row (same partition) arrives.
    order = [F.col("__from")] + [F.col(quote(c)).asc_nulls_first() for c in _orderable(df)]
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


def _held(span_df, spec: WindowSpec):
    """A slid window's rows with ``__from``/``__to`` moved to the multiples of the slide
    between which they are held: visible from the first window that covers them to the
    first that does not (rows no window covers are left out)."""
    from pyspark.sql import functions as F

    return (span_df.withColumn("__from", _ceil_to(F.col("__from"), spec.slide))
            .withColumn("__to", _ceil_to(F.col("__to"), spec.slide))
            .where(F.col("__from") < F.col("__to")))


def joint_instants(windows):
    """The instants ``__t`` at which windowed tables joined in one SELECT are observed: where
    any of their relations changes, and every multiple of a slid window's slide at which it
    holds rows or has just emptied. ``windows``: ``[(df, time column, WindowSpec)]``."""
    from pyspark.sql import functions as F

    points = None
    for df, time_col, spec in windows:
        s = spans(df, time_col, spec)
        if spec.kind == "SLIDE":
            h = _held(s, spec)
            mine = h.select(F.explode(F.sequence(
                F.col("__from"), F.col("__to"), F.lit(spec.slide).cast("bigint"))).alias("__t"))
        else:
            mine = instants(s)
        points = mine if points is None else points.union(mine)
    return points.distinct()


def windowed_frame(df, time_col: str, spec: WindowSpec, points=None):
    """The ``(_time, row)`` pairs: one per instant at which a row is in the relation.

    ``points`` (from :func:`joint_instants`): the instants of a join of windowed tables, at
    which every row is paired while it is in its relation -- a slid window's rows are held
    from one multiple of the slide to the next, as CQL's relations are defined at every
    instant."""
    from pyspark.sql import functions as F

    columns = [F.col(quote(c)) for c in df.columns]
    if points is not None:
        s = spans(df, time_col, spec)
        if spec.kind == "SLIDE":
            s = _held(s, spec)
        width = {"RANGE": spec.size, "NOW": 1, "SLIDE": spec.size + spec.slide}.get(spec.kind)
        at = _pair(s, points, width)
        return at.select(F.timestamp_micros(F.col("__t")).alias(TIME), *columns)
    if spec.kind == "SLIDE" and spec.size == spec.slide:
        # Tumbling: a row's interval [t, t + r) holds exactly one multiple of r, its ceiling
        # -- arithmetic, not a one-element sequence exploded (20-25 % of such a query's
        # time), in one projection (each DataFrame step is a Spark analysis at planning)
        t = _micros(time_col)
        return df.where(F.col(quote(time_col)).isNotNull()).select(
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
    else:
        at = _pair(s, instants(s), spec.size if spec.kind == "RANGE" else None)
    return at.select(F.timestamp_micros(F.col("__t")).alias(TIME), *columns)


def _pair(span_df, points, width: int | None):
    """Rows joined to the instants ``__t`` in their ``[__from, __to)``. With ``width`` (no
    interval is longer) by **time binning** -- an equi-join on ``floor(t / width)``, each row
    in at most two bins -- rather than a nested loop; without (UNBOUNDED, ROWS: intervals may
    be long) a range join."""
    from pyspark.sql import functions as F

    if width is None:
        cond = (F.col("__t") >= F.col("__from")) & (
            F.col("__to").isNull() | (F.col("__t") < F.col("__to")))
        return span_df.join(points, cond)
    binned = span_df.withColumn("__bin", F.explode(F.array_distinct(F.array(
        _floor_div(F.col("__from"), width).cast("bigint"),
        _floor_div(F.col("__to") - F.lit(1), width).cast("bigint")))))
    points = points.withColumn("__bin", _floor_div(F.col("__t"), width).cast("bigint"))
    return (binned.join(points, "__bin")
            .where((F.col("__t") >= F.col("__from")) & (F.col("__t") < F.col("__to"))))


def relation_to_stream(result, kind: str, spec: WindowSpec, source=None, time_col=None,
                       points=None):
    """``ISTREAM``/``DSTREAM`` of a per-instant result (RSTREAM is the result itself).

    ``source``/``time_col`` (the windowed stream) give the instants of unslid windows, which
    are needed to know each instant's predecessor; slid windows step by the slide. A join
    of windowed tables passes its instants as ``points`` (:func:`joint_instants`).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if kind == "RSTREAM":
        return result
    names = result.columns
    # by position: a join's `*` may name two columns alike
    at = names.index(TIME)
    cols = [f"__c{i}" for i in range(len(names))]
    cols[at] = "__time"
    counts = (result.toDF(*cols).withColumn("__time", _micros("__time"))
              .withColumnRenamed("__time", "__t")
              .groupBy(*["__t" if c == "__time" else c for c in cols])
              .agg(F.count(F.lit(1)).alias("__n")))
    cols = [c for c in cols if c != "__time"]
    # The same counts, moved to the instant that follows theirs.
    if spec.kind == "SLIDE" and points is None:
        following = counts.withColumn("__t", F.col("__t") + F.lit(spec.slide))
    else:
        if points is None:
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
    out = [F.col(f"{side}.{c}") for c in cols]
    out.insert(at, F.timestamp_micros(F.col(f"{side}.__t")))
    return kept.select(*out).toDF(*names)


# ---------------------------------------------------------------------------------------
# Split streams: routing rows to their sub-streams
# ---------------------------------------------------------------------------------------
#: The sub-stream column of a split stream (``[PARTITION INTO n BY e REPLICATE WHEN p]``).
PART = "__part"


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
