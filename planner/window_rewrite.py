"""CQL windows on the SQL side: a written window bound to its spec, and the SELECT over it
rewritten to run once per instant (or once per sub-stream of a split stream).

The semantics are :mod:`wavesql.planner.windows`'s (its docstring is the user
documentation); the windowed tables become scans of ``(_time, row)`` pairs made there, and
what is left to the SELECT is grouping and partitioning by the instant, joining per instant
and listing ``*`` with one ``_time``.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.dialect import nodes as wn
from wavesql.dialect import to_spark_sql
from wavesql.errors import Span, WaveSQLError

from .types import interval_us, number
from .windows import PART, TIME, WindowSpec


# ---------------------------------------------------------------------------------------
# Binding a written window
# ---------------------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------------------
# Rewriting the SELECT over a split stream: evaluate it per sub-stream
# ---------------------------------------------------------------------------------------
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
