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
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql
from wavesql.errors import Span, WaveSQLError

from .types import interval_us, number
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
def windowed_tables(select: exp.Select) -> list[exp.Table]:
    """The windowed stream tables a SELECT reads itself (FROM and joins), in order."""
    return [t for t in _own_tables(select) if _event_window(t) is not None]


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


def per_instant(select: exp.Select, scans: list[tuple[exp.Table, str]],
                columns: dict[str, list[str]], other_columns=None) -> exp.Select:
    """Rewrite ``select`` (in place) to evaluate it once per instant of its windows.

    ``scans`` pairs each windowed table of the SELECT with the name of its ``(_time, row)``
    pairs; ``columns`` names each table's stream columns (by alias). Each table becomes its
    scan under the same alias; the result gains ``_time``; aggregates and OVER windows are
    grouped/partitioned by it. Several windowed tables are joined **per instant**: each join
    condition gains ``_time`` equality with the tables before it (their pairs are made at
    the instants of all of them, see :func:`joint_instants`). ``other_columns(source)``: the
    column names of a source that is not windowed, None when not known (for ``*`` beside
    ``USING`` joins).
    """
    if select.args.get("limit") is not None or select.args.get("offset") is not None:
        raise WaveSQLError("NOT_IMPLEMENTED", "LIMIT inside a windowed query is not "
                           "implemented (it would limit each instant)",
                           Span.of(select.args.get("limit") or select.args.get("offset")),
                           hint="put the windowed query in a subquery and LIMIT outside it")
    for stray in ("emit", "late_into"):
        select.set(stray, None)  # batch: everything is final and nothing is late
    aliases = [table.alias_or_name for table, _ in scans]
    if len({a.lower() for a in aliases}) != len(aliases):
        raise WaveSQLError("DUPLICATE_COLUMN", f"windowed stream `{aliases[0]}` is read twice "
                           "under one name", Span.of(scans[-1][0]),
                           hint="give each an alias: FROM s [RANGE 1 MINUTE] a JOIN s [NOW] b ...")
    tables = []
    for table, scan_name in scans:
        tables.append(exp.Table(this=exp.to_identifier(scan_name),
                                alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name))))
        table.replace(tables[-1])
    times = [exp.column(TIME, table=a) for a in aliases]
    if len(times) > 1:
        # a SEMI / ANTI join's right side is not in the result: only a filter per instant
        hidden = {id(join.this) for join in select.args.get("joins") or []
                  if (join.args.get("kind") or "").upper() in ("SEMI", "ANTI")}
        shown = [i for i, t in enumerate(tables) if id(t) not in hidden]
        _join_per_instant(select, tables, times, shown)
        # an outer join leaves one side's instant NULL: the row's instant is either side's
        time_col = exp.func("coalesce", *[times[i].copy() for i in shown]) \
            if len(shown) > 1 else times[shown[0]].copy()
        _bare_times(select, time_col)
        _expand_stars(select, [aliases[i] for i in shown], columns, hidden,
                      other_columns or (lambda source: None))
    else:
        time_col = times[0]
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
    if not any(isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
                                           and len(times) == 1)
               or e.alias_or_name.lower() == TIME for e in select.expressions):
        select.set("expressions", [exp.alias_(time_col.copy(), TIME)] + list(select.expressions))
    return select


def _join_per_instant(select: exp.Select, tables, times, shown) -> None:
    """Each join that brings in a windowed table matches it at the same instant as the
    windowed tables before it (``USING`` gains ``_time``; ``ON`` and comma joins gain
    ``b._time = coalesce(a._time, ...)`` over the tables before it still in the result)."""
    def position(table):  # by identity: equal-looking tables are still different tables
        return next((i for i, t in enumerate(tables) if t is table), None)

    first = position(select.args["from_"].this)
    seen = [first] if first is not None else []
    merged = True  # the windowed tables so far have one _time column between them
    for join in select.args.get("joins") or []:
        index = position(join.this)
        if index is None:
            continue
        if not seen:  # the FROM is not windowed: the first windowed join starts the instants
            seen.append(index)
            continue
        before = [times[i].copy() for i in seen]
        same = exp.EQ(this=times[index].copy(),
                      expression=before[0] if len(before) == 1 else exp.func("coalesce", *before))
        using = join.args.get("using")
        if using:
            # USING (k, _time) matches the one _time the joins before made, if all were
            # USING joins too (after an ON join both sides' _time are there: ambiguous)
            if not merged:
                raise WaveSQLError("NOT_IMPLEMENTED", "USING after an ON join of windowed "
                                   "tables", Span.of(join),
                                   hint="write this join condition with ON too")
            join.set("using", list(using) + [exp.to_identifier(TIME)])
        else:
            merged = False
            on = join.args.get("on")
            join.set("on", exp.and_(on, same) if on is not None else same)
            if join.args.get("kind") == "CROSS":
                join.set("kind", None)  # a comma or CROSS join matches per instant now
        if index in shown:
            seen.append(index)


def _bare_times(select: exp.Select, time_col: exp.Expression) -> None:
    """An unqualified ``_time`` in a join of windowed tables is the instant (either side's
    ``_time`` would be ambiguous, and NULL on an outer join's unmatched side)."""
    for column in list(_own(select, exp.Column)):
        if column.table or column.name.lower() != TIME:
            continue
        if column.parent is select and column.arg_key == "expressions":
            column.replace(exp.alias_(time_col.copy(), TIME))
        else:
            column.replace(time_col.copy())


def _sources(select: exp.Select):
    """Every table, subquery or other source of the SELECT's FROM and joins, in order."""
    from_ = select.args.get("from_")
    if from_ is not None:
        yield from_.this
    for join in select.args.get("joins") or []:
        yield join.this


def _expand_stars(select: exp.Select, aliases, columns, hidden, other_columns) -> None:
    """``*`` and ``w.*`` of a windowed table list the stream's columns, so the result has
    one ``_time`` (the instant), not one per windowed table; a SEMI/ANTI join's side is not
    listed, as Spark does not. ``other_columns(source)``: a source's columns when it is not
    windowed (None: not known)."""
    windowed = {a.lower(): a for a in aliases}
    sources = [s for s in _sources(select) if id(s) not in hidden]
    # ``a JOIN b USING (k)``: ``*`` shows ``k`` once, as SQL does: the first source with
    # ``k`` shows coalesce(a.k, b.k, ...) (a FULL join's right-only rows have b's), the
    # sources joined by USING (k) do not repeat it
    using: dict[str, list[str]] = {}
    for join in select.args.get("joins") or []:
        if id(join.this) not in hidden:
            for u in join.args.get("using") or []:
                if u.name.lower() != TIME:
                    using.setdefault(u.name.lower(), []).append(join.this.alias_or_name.lower())
    rights = {r for joined in using.values() for r in joined}
    known = {}
    for source in sources:
        a = source.alias_or_name.lower()
        known[id(source)] = columns[a] if a in windowed else other_columns(source)
        if known[id(source)] is None and a in rights:  # its ``*`` would repeat the key
            raise WaveSQLError(
                "NOT_IMPLEMENTED", "* over windowed streams and a source joined by USING "
                "whose columns are not known before Spark runs the query (a subquery or a "
                "Spark table)", Span.of(source),
                hint="list the columns instead of *, or join that source with ON")
    # the key's owner: the first source left of the first join by it that has it (Spark
    # finds it there); one whose columns are not known is taken to have it (else Spark
    # reports the key missing) -- its ``*`` then shows its own key, which is the joined
    # key unless a FULL or RIGHT join by it adds rows the owner does not have
    owner = {}
    kinds = {join.this.alias_or_name.lower(): (join.args.get("side") or "").upper()
             for join in select.args.get("joins") or []}
    for c, joined in using.items():
        for source in sources:
            a = source.alias_or_name.lower()
            if a in joined:
                break
            if known[id(source)] is None:
                if any(kinds.get(r) in ("FULL", "RIGHT") for r in joined):
                    raise WaveSQLError(
                        "NOT_IMPLEMENTED", f"* over windowed streams joined by a FULL or "
                        f"RIGHT USING ({c}) with a source whose columns are not known "
                        "before Spark runs the query (a subquery or a Spark table)",
                        Span.of(source),
                        hint="list the columns instead of *, or join that source with ON")
                owner[c] = a
                break
            if c in {k.lower() for k in known[id(source)]}:
                owner[c] = a
                break
    out = []
    for e in select.expressions:
        if isinstance(e, exp.Star):
            out.append(exp.alias_(exp.func("coalesce", *[exp.column(TIME, table=a)
                                                          for a in aliases]), TIME))
            for source in sources:
                a = source.alias_or_name
                # a source not windowed is listed column by column when it takes part in a
                # USING join (as its right side, or the first to have its column)
                if known[id(source)] is not None and (
                        a.lower() in windowed or a.lower() in rights
                        or a.lower() in owner.values()):
                    for c in known[id(source)]:
                        joined = using.get(c.lower(), [])
                        if a.lower() in joined:
                            continue
                        out.append(exp.alias_(exp.func(
                            "coalesce", exp.column(c, table=a),
                            *[exp.column(c, table=r) for r in joined]), c)
                            if owner.get(c.lower()) == a.lower() else exp.column(c, table=a))
                elif a:
                    out.append(exp.Column(this=exp.Star(), table=exp.to_identifier(a)))
                else:
                    raise WaveSQLError("NOT_IMPLEMENTED", "* over joined windowed streams and "
                                       "a source without a name", Span.of(source),
                                       hint="give the subquery an alias")
        elif (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
              and e.table.lower() in windowed):
            out += [exp.column(c, table=windowed[e.table.lower()])
                    for c in columns[e.table.lower()]]
        else:
            out.append(e)
    select.set("expressions", out)


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
