"""Continuous joins of two streams: ASOF joins and interval (band) joins.

Each is planned here (the streaming rules it follows, what each side keeps between
micro-batches). Both run on Spark's state store where they can (:mod:`.stateful.asof`,
:mod:`.stateful.interval`: same rules, a progress per stream); otherwise the
re-evaluating runner (:mod:`.runner`) evaluates them over the rows it keeps: an ASOF JOIN through :func:`asof_split`, which picks the left rows whose match is
final and prunes the right side; an interval join by pairing each side's new rows with
the other side's kept ones (:meth:`.runner.ReEvaluatingQuery._run_batch`), its buffers
pruned by the band (``"band"`` look-back rules). So the state of either is bounded by the
watermarks (and, ASOF, the number of keys), not by the streams' lengths.

Either side may be a view, CTE or subquery row by row over one catalog stream
(:func:`.plan.row_by_row_stream`), its time column the stream's EVENT TIME passed through:
the plan names it per stream (``views``), and such a join runs on the state store only
(:mod:`.stateful.view_rows`). An interval join's side written inline is hoisted into an
input of its own (``query``: the query before and after). A CTE computing across a
stream's rows (windows, aggregates) runs as a stream of its own before the join is planned
(:mod:`.stream_parts`), so the join sees it as a catalog stream. A stream joined with
itself is read twice, the second side as a copy of the stream (:func:`_apart`).
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.planner.band import Band
from wavesql.sqltext import quote

from .plan import (Input, KeepMatchable, Plan, check_row_by_row, check_row_by_row_except,
                   require_event_time, require_time_carried, row_by_row_stream)


def plan_asof(queries: list, trees: list, scans: dict, stmt) -> Plan:
    """A continuous ``ASOF JOIN`` (planner/temporal.py), backward -- each left row with the
    latest right row at or before its time, per key -- or forward -- the earliest at or
    after it.

    Backward: a left row is final once the right stream's progress has passed its time -- no
    right row that could match it can still come -- and waits in the state until then. The
    right side keeps, per key, the rows from ``m`` on and the last rows before ``m`` (ties
    included), ``m`` being the earliest time a waiting or future left row can have: the
    smaller of the left progress and the oldest waiting left row. So state is bounded by
    the watermarks and the number of keys.

    Forward: a left row is final once a right row of its key at or after its time is below
    the right stream's progress (every right row that could come before that one has
    arrived); the right side keeps the rows from ``m`` on. A left row with no such right row
    yet waits -- in an ``ASOF LEFT JOIN`` too: its NULL match is never final while the
    right stream goes on, so it is not emitted (the batch join over the same rows gives
    it). State: the waiting left rows (per key, those since its last right row) and the
    right rows since ``m``."""
    asofs = [(i, q) for i, q in enumerate(queries) if q.asof is not None]
    if len(asofs) > 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous ASOF JOIN is implemented between "
                           "two streams, one per query", Span.of(stmt.node),
                           hint="split the query: one continuous ASOF JOIN per query")
    index, query = asofs[0]
    asof = query.asof
    rels = dict(query.inputs)
    (left, lview), (right, rview) = (
        _side(rels.get(name), column, f"a continuous ASOF JOIN ({role} side)",
              "ON ... {t} >= ...", stmt)
        for name, column, role in ((asof.left, asof.left_time, "left"),
                                   (asof.right, asof.right_time, "right")))
    itself = None
    if left.key == right.key and lview is None and rview is None:
        # the right branch of planner/temporal.py's ASOF SQL (left UNION ALL right)
        itself = _itself(query, lambda tree: next(tree.find_all(exp.Union)).expression
                         .args["from_"].this, asof.right, "right")
    (left, lview), (right, rview) = _apart((left, lview), (right, rview), "right",
                                           "a continuous ASOF JOIN", scans, stmt,
                                           itself and itself[0])
    for stream, column in ((left, asof.left_time), (right, asof.right_time)):
        require_event_time(stream, column, "a continuous ASOF JOIN compares the streams' "
                            "event times", stmt)
    check_row_by_row_except(trees, index, stmt)
    ordered = sorted({left.key: left, right.key: right}.items())
    inputs = tuple(Input(k, st) for k, (_, st) in enumerate(ordered))
    info = {"left": left.key, "right": right.key,
            "keys": [r for _, r in asof.keys], "pairs": list(asof.keys),
            "direction": asof.direction, "inclusive": asof.inclusive,
            "views": {left.key: lview, right.key: rview}}
    if itself is not None:  # the batch plan of the state store reads the right side apart
        info["query"] = (query, itself[1])
    return Plan(inputs, "asof", None, asof=info)


def _side(rel: ir.Relation | None, column: str, what: str, use: str, stmt) -> tuple:
    """``(stream, view)`` of a continuous join's side: a catalog stream (view None), or a
    view, CTE or subquery row by row over one (:func:`.plan.row_by_row_stream`) whose
    time column ``column`` is the stream's EVENT TIME passed through."""
    if rel is None:
        raise WaveSQLError("NOT_IMPLEMENTED", f"{what} is not a relation the continuous "
                           "planner can follow", Span.of(stmt.node))
    stream = row_by_row_stream(
        rel, stmt, what, "join a view (or CTE, subquery) that filters, projects and computes "
        "columns of one catalog stream's rows, or a CTE of this query that computes across "
        "the rows of catalog streams only (WITH m AS (SELECT _time AS t, k, avg(v) AS a FROM "
        "s [RANGE ...] GROUP BY _time, k)): it runs as a stream of its own")
    if isinstance(rel, ir.StreamScan):
        return stream, None
    require_time_carried(rel, stream, column, what, use, stmt, code="NOT_IMPLEMENTED")
    return stream, rel


def _apart(first: tuple, second: tuple, label: str, what: str, scans: dict, stmt,
           itself: ir.SqlQuery | None = None) -> tuple:
    """The two sides ``(stream, view)`` of a continuous join, each reading a stream of its
    own. The same stream on both sides, through a view on one side at least (``WITH a AS
    (SELECT * FROM s WHERE ...), b AS (SELECT * FROM s WHERE ...) ... a ASOF JOIN b``), is
    read twice: the second view's side (else the first's) as a copy of the stream named
    ``<stream>@<label>`` -- a source, a progress and rows of its own, as two streams would
    be (the view still reads the stream by its own name: .stateful.view_rows). With no
    view on either side (``s a ASOF JOIN s b``), the second side is ``itself``, the view
    ``SELECT * FROM s`` (:func:`_itself`), and is read the same way."""
    (s1, v1), (s2, v2) = first, second
    if s1.key == s2.key:
        if v1 is None and v2 is None:
            second = (s2, v2) = (s2, itself)
        from dataclasses import replace

        copy = replace(s2 if v2 is not None else s1, name=f"{s1.name}@{label}")
        first, second = ((s1, v1), (copy, v2)) if v2 is not None else ((copy, v1), (s2, v2))
    read = {r.stream.key for _, v in (first, second) if v is not None for r in ir.walk(v)
            if isinstance(r, ir.StreamScan)} | {s.key for s, v in (first, second) if v is None}
    if set(scans) - read:
        raise WaveSQLError("NOT_IMPLEMENTED", f"{what} is implemented between two streams, "
                           "one per query", Span.of(stmt.node),
                           hint="split the query: one continuous join per query")
    return first, second


def _itself(query: ir.SqlQuery, table_of, name: str, label: str) -> tuple:
    """``(view, query')`` for a join of a stream with itself, no view on either side: the
    view ``SELECT * FROM <name>`` over the stream ``query`` reads as input ``name``, and
    ``query`` with the second side's table (``table_of(tree)`` of its AST) reading that
    view as an input of its own -- so the state store's batch plan can hand that side's
    rows in apart from the first side's (.stateful.asof_query ``_over_views``)."""
    from dataclasses import replace

    from wavesql.dialect import to_spark_sql

    name, rel = next((n, r) for n, r in query.inputs if n.lower() == name.lower())
    body = exp.select("*").from_(exp.Table(this=exp.to_identifier(name)))
    view = ir.SqlQuery(to_spark_sql(body), ((name, rel),), rel.schema, rel.bounded,
                       tree=body)
    tree, alias = query.ast(), f"__wavesql_self_{label.lower()}"
    table = table_of(tree)
    table.set("this", exp.to_identifier(alias))
    if not table.alias:  # (the columns name the side by the stream's name)
        table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    return view, replace(query, sql=to_spark_sql(tree), tree=tree, source_offset=None,
                         inputs=query.inputs + ((alias, view),))


def plan_band(queries: list, trees: list, scans: dict, stmt) -> Plan | None:
    """A continuous interval join (``planner/band.py``) of two streams, or None.

    Each micro-batch pairs the new rows of each side with everything buffered of the other
    (and with each other) -- every pair once, final as it is emitted -- and keeps of each
    side only the rows a future row of the other side can still match: side ``a`` (where
    ``a.t`` lies in ``[b.t + lo, b.t + hi]``) from ``progress(b) + lo`` on, side ``b`` from
    ``progress(a) - hi`` on. So state is bounded by the band and the watermarks."""
    from wavesql.planner.band import find_band

    found = []
    for tree in trees:
        if tree is None:
            continue
        for join in tree.find_all(exp.Join):
            band = find_band(join.args.get("on"))
            if band is not None:
                found.append((tree, join, band))
    if not found:
        return None
    if len(found) > 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous interval join is implemented "
                           "between two streams, one join per query", Span.of(stmt.node),
                           hint="split the query: one continuous join per query")
    tree, join, band = found[0]
    select = join.parent_select
    outer = _outer_side(join, select, stmt)
    if outer is not None:  # the preserved side becomes the band's first: a in [b+lo, b+hi]
        if outer == band.b.table.lower():
            band = Band(band.b, band.a, -band.hi, -band.lo)
        band = _exact_band(join.args.get("on"), band, stmt)
    rest = tree.copy()
    for j in rest.find_all(exp.Join):
        j.pop()  # the join itself is what this mode evaluates; the rest must be row by row
    query = next(q for q, t in zip(queries, trees) if t is tree)
    rels, sources = dict(query.inputs), _sources(select)
    sides, hoisted = [], {}
    for column, label in ((band.a, "__wavesql_band_a"), (band.b, "__wavesql_band_b")):
        source = sources.get(column.table.lower())
        rel = None
        if source is not None:
            rel = _inline_side(source, select, query, label)
            if rel is not None:
                hoisted[id(source)] = (source, label, rel)
            else:
                rel = rels.get(_source_name(source))
        sides.append(_side(rel, column.name, "a continuous interval join (side "
                           f"`{column.table}`)", "ON ... {t} BETWEEN ...", stmt))
    itself = None
    if sides[0][0].key == sides[1][0].key and sides[0][1] is None and sides[1][1] is None:
        source = sources[band.b.table.lower()]
        path = [id(n) for n in tree.walk()].index(id(source.find(exp.Table)))
        itself = _itself(query, lambda t: list(t.walk())[path], _source_name(source),
                         band.b.table)
    (a, aview), (b, bview) = _apart(sides[0], sides[1], band.b.table,
                                    "a continuous interval join", scans, stmt,
                                    itself and itself[0])
    for side, column in ((a, band.a), (b, band.b)):
        require_event_time(side, column.name, "a continuous interval join's band must be "
                            "on the streams' event times", stmt)
    check_row_by_row(rest, stmt)
    ordered = sorted({a.key: a, b.key: b}.items())
    inputs = []
    for index, (key, stream) in enumerate(ordered):
        # keep rows with event time >= progress(other side) + offset
        other, offset = (b.key, band.lo) if key == a.key else (a.key, -band.hi)
        inputs.append(Input(index, stream, (KeepMatchable(other, offset),)))
    info = {"a": a.key, "b": b.key, "lo": band.lo, "hi": band.hi,
            "pairs": _key_pairs(join.args.get("on"), band.a.table, band.b.table),
            "views": {a.key: aview, b.key: bview}}
    if hoisted:  # the batch plan of the state store reads the hoisted sides by name
        info["query"] = (query, _with_sides(query, tree, hoisted))
    elif itself is not None:  # and the second side of a stream with itself apart
        info["query"] = (query, itself[1])
    if outer is not None:
        info["outer"] = True  # stream a preserved
        if outer == FULL:
            info["full"] = True  # stream b too
    return Plan(tuple(inputs), "band", None, band=info)


def _sources(select: exp.Select) -> dict:
    """Alias -> source (a table or subquery) of ``select``'s FROM and JOINs."""
    found = [select.args["from_"].this] + [j.this for j in select.args.get("joins") or []]
    return {s.alias_or_name.lower(): s for s in found}


def _source_name(source: exp.Expression) -> str:
    """The input a source names: a table's name, through planner/band.py's bin subqueries
    (``(SELECT *, floor(...) AS __band_bin FROM stream) alias``)."""
    if _is_bin_subquery(source):
        source = source.this.args["from_"].this
    return source.name if isinstance(source, exp.Table) else ""


def _is_bin_subquery(source: exp.Expression) -> bool:
    """Whether ``source`` is one of planner/band.py's bin subqueries over a named input."""
    from wavesql.planner.band import BIN

    return isinstance(source, exp.Subquery) and isinstance(source.this, exp.Select) and any(
        e.alias_or_name == BIN for e in source.this.expressions)


def _inline_side(source: exp.Expression, select: exp.Select, query: ir.SqlQuery,
                 label: str) -> ir.SqlQuery | None:
    """A join side written inline -- a CTE or a subquery (planner/ctes.py) -- as a view of
    its own over the inputs it reads (None: a named input). Its schema is left empty: the
    state store's planner asks Spark for it (:func:`side_schemas`)."""
    from wavesql.dialect import to_spark_sql
    from wavesql.planner.ctes import inline_query

    if _is_bin_subquery(source):
        return None
    inline = inline_query(source, select)
    if inline is None:
        return None
    _drop_unread_ctes(inline)  # (a subquery gets every CTE it could read)
    read = {t.name.lower() for t in inline.find_all(exp.Table)}
    inputs = tuple((n, r) for n, r in query.inputs if n.lower() in read)
    return ir.SqlQuery(to_spark_sql(inline), inputs, ir.Schema(()), query.bounded,
                       tree=inline)


def _with_sides(query: ir.SqlQuery, tree: exp.Expression, hoisted: dict) -> ir.SqlQuery:
    """``query`` (``tree``: its AST, the join's sources in it) reading each hoisted side
    (:func:`_inline_side`) as an input of its own under its label, the CTEs and inputs
    nothing reads any more dropped (the stream under a side is read through it only)."""
    from dataclasses import replace

    from wavesql.dialect import to_spark_sql

    tree = tree.copy()
    by_alias = {s.alias_or_name.lower(): (label, rel) for s, label, rel in hoisted.values()}
    for select in list(tree.find_all(exp.Select)):
        for alias, source in _sources(select).items() if select.args.get("from_") else ():
            if alias in by_alias and source.find(exp.Table) is not None and _is_side(
                    source, select, by_alias[alias][1]):
                source.replace(exp.Table(this=exp.to_identifier(by_alias[alias][0]),
                                         alias=exp.TableAlias(this=exp.to_identifier(alias))))
    _drop_unread_ctes(tree)
    read = {t.name.lower() for t in tree.find_all(exp.Table)}
    inputs = tuple((n, r) for n, r in query.inputs if n.lower() in read)
    inputs += tuple((label, rel) for _, label, rel in hoisted.values())
    return replace(query, sql=to_spark_sql(tree), tree=tree, inputs=inputs,
                   source_offset=None)


def _drop_unread_ctes(tree: exp.Expression) -> None:
    """Remove from ``tree`` the CTEs nothing outside themselves reads."""
    changed = True
    while changed:
        changed = False
        for cte in list(tree.find_all(exp.CTE)):
            name = cte.alias_or_name.lower()
            if not any(t.name.lower() == name and t.find_ancestor(exp.CTE) is not cte
                       for t in tree.find_all(exp.Table)):
                with_ = cte.parent
                cte.pop()
                if not with_.expressions:
                    with_.pop()
                changed = True


def _is_side(source: exp.Expression, select: exp.Select, rel: ir.SqlQuery) -> bool:
    """Whether ``source`` of ``select`` is the inline side ``rel`` was made from."""
    from wavesql.planner.ctes import inline_query

    inline = inline_query(source, select)
    if inline is None:
        return False
    _drop_unread_ctes(inline)
    return inline == rel.tree


def _outer_side(join: exp.Join, select: exp.Select, stmt) -> str | None:
    """The alias of the side an outer interval join preserves (``a LEFT JOIN b``: ``a``;
    ``RIGHT``: ``b``), :data:`FULL` for a FULL join (both; the band stays as written),
    None for an inner join."""
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if not side and kind in ("", "INNER"):
        return None
    if side not in ("LEFT", "RIGHT", "FULL") or kind not in ("", "OUTER"):
        what = " ".join(w for w in (side, kind) if w)
        raise WaveSQLError("NOT_IMPLEMENTED", f"a continuous {what} interval join: "
                           "inner, LEFT, RIGHT and FULL outer joins run", Span.of(join),
                           hint="join inner, or run the query as a batch query")
    if side == "FULL":
        return FULL
    kept = select.args["from_"].this if side == "LEFT" else join.this
    return kept.alias_or_name.lower()


#: :func:`_outer_side` of a FULL join (no alias is empty).
FULL = ""


def _exact_band(on, band: Band, stmt) -> Band:
    """``band`` as the ON clause of an outer interval join states it, bounds inclusive in
    microseconds (``>`` is ``>=`` one microsecond on: timestamps are microseconds), the
    clause holding nothing but the band's bounds and equalities of the two sides' columns.
    An unpaired preserved row is emitted when no row of the other stream can still pair
    with it, which the state store judges by the band and the keys alone: a further
    condition in ON could leave a row unmatched that the band and keys pair (it would
    then never be extended), so it is refused (it belongs in WHERE, or in a query over
    the join's results)."""
    from wavesql.planner.band import _conjuncts, _term

    a, b = (band.a.table.lower(), band.a.name.lower()), (band.b.table.lower(),
                                                         band.b.name.lower())
    lo, hi = None, None
    for part in _conjuncts(on):
        if isinstance(part, exp.EQ) and all(isinstance(c, exp.Column) and c.table for c in (
                part.this, part.expression)) and {part.this.table.lower(),
                                                  part.expression.table.lower()} == {a[0], b[0]}:
            continue  # a key equality
        bound = None
        if isinstance(part, exp.Between):
            bound = [(part.this, part.args["low"], ">=", False),
                     (part.this, part.args["high"], "<=", False)]
        elif isinstance(part, (exp.GTE, exp.GT, exp.LTE, exp.LT)):
            bound = [(part.this, part.expression,
                      ">=" if isinstance(part, (exp.GTE, exp.GT)) else "<=",
                      isinstance(part, (exp.GT, exp.LT)))]
        for x, y, kind, strict in bound or []:
            tx, ty = _term(x), _term(y)
            cols = None if tx is None or ty is None else [
                (t[0].table.lower(), t[0].name.lower()) for t in (tx, ty)]
            if cols == [b, a]:  # b + ob (kind) a + oa  ->  a (flipped kind) b + ob - oa
                (tx, ty), kind = (ty, tx), "<=" if kind == ">=" else ">="
            elif cols != [a, b]:
                bound = None
                break
            offset = ty[1] - tx[1]  # a (kind) b + offset
            if kind == ">=":
                value = offset + (1 if strict else 0)
                lo = value if lo is None else max(lo, value)
            else:
                value = offset - (1 if strict else 0)
                hi = value if hi is None else min(hi, value)
        if bound is None:
            raise WaveSQLError("NOT_IMPLEMENTED", "a continuous outer interval join's ON "
                               "holds only the band between the event times and equalities "
                               "of the two streams' columns", Span.of(part),
                               hint="move the other condition to WHERE (it then filters the "
                                    "joined rows, NULL-extended ones included), or join "
                                    "inner")
    return Band(band.a, band.b, lo, hi)


def _key_pairs(on, a_alias: str, b_alias: str) -> list[tuple[str, str]]:
    """``(a column, b column)`` of each conjunct of ``on`` that equates a bare column of
    each side (the join's keys; planner/band.py's bin equality aside)."""
    from wavesql.planner.band import BIN, _conjuncts

    pairs = []
    sides = {a_alias.lower(): 0, b_alias.lower(): 1}
    for part in _conjuncts(on):
        if not (isinstance(part, exp.EQ) and isinstance(part.this, exp.Column)
                and isinstance(part.expression, exp.Column)):
            continue
        cols = sorted((part.this, part.expression), key=lambda c: sides.get(c.table.lower(), 2))
        if [sides.get(c.table.lower()) for c in cols] == [0, 1] and BIN not in (
                cols[0].name, cols[1].name):
            pairs.append((cols[0].name, cols[1].name))
    return pairs


def asof_split(plan: Plan, buffers: dict, progress: dict) -> dict:
    """The streams to evaluate a continuous ASOF JOIN over now (the left rows whose match
    is final, all kept right rows); ``buffers`` is updated to what is kept (see
    :func:`plan_asof`)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    asof = plan.asof
    kl, kr = asof["left"], asof["right"]
    left = next(i.stream for i in plan.inputs if i.stream.key == kl)
    right = next(i.stream for i in plan.inputs if i.stream.key == kr)
    lt = F.unix_micros(F.col(quote(left.event_time)))
    rt = F.unix_micros(F.col(quote(right.event_time)))
    done = progress[kr]["progress"]
    candidates = buffers[kl]
    if asof["direction"] == "forward":
        ready, waiting = _forward_ready(asof, candidates, buffers[kr], left, right, done)
    else:
        final = lt < F.lit(done) if done is not None else F.lit(False)
        ready, waiting = candidates.where(final), candidates.where(~final)
    everything = kept = buffers[kr]
    left_progress = progress[kl]["progress"]
    if asof["direction"] == "forward" and done is not None:
        # a waiting row's match is not below the right progress (none of its key lay
        # between it and there), a future row's not below the left progress: the right
        # rows from the smaller on -- however old the oldest waiting row
        if left_progress is not None:  # (no left progress yet: keep all)
            kept = kept.where(rt >= F.lit(min(left_progress, done)))
    elif bounds := [v for v in (left_progress, waiting.agg(F.min(lt)).first()[0])
                    if v is not None]:
        # the earliest time a waiting or future left row can have
        m = min(bounds)
        if asof["direction"] == "forward":  # its match is at or after it
            kept = kept.where(rt >= F.lit(m))
        else:  # the last right rows before m per key (ties kept: the batch rule breaks them)
            w = Window.partitionBy(*[F.col(quote(k)) for k in asof["keys"]],
                                   rt < F.lit(m)).orderBy(rt.desc())
            kept = (kept.withColumn("__rank", F.rank().over(w))
                    .where((rt >= F.lit(m)) | (F.col("__rank") == 1)).drop("__rank"))
    buffers[kr], buffers[kl] = kept, waiting
    # the ready rows are matched against every right row there is: one of them may be
    # older than what is kept for the rows still to come
    return {kl: ready, kr: everything}


def _forward_ready(asof: dict, candidates, right_rows, left, right, done):
    """(left rows whose forward match is final, the rest): a left row is ready when a
    right row of its key at (or, strict, after) its time is below the right progress."""
    from pyspark.sql import functions as F

    if done is None:
        return candidates.limit(0), candidates
    lt = F.unix_micros(F.col(quote(left.event_time)))
    names = [(f"__k{i}", r) for i, (_, r) in enumerate(asof["pairs"])]
    arrived = right_rows.where(F.unix_micros(F.col(quote(right.event_time))) < F.lit(done))
    matches = arrived.select(F.unix_micros(F.col(quote(right.event_time))).alias("__rt"),
                             *[F.col(quote(r)).alias(n) for n, r in names])
    later = (F.col("__rt") >= lt) if asof["inclusive"] else (F.col("__rt") > lt)
    cond = later
    for (n, _), (l, _) in zip(names, asof["pairs"]):
        cond = cond & (F.col(quote(l)) == F.col(n))
    # a NULL key matches nothing, ever: final at once (an ASOF LEFT JOIN gives it NULL)
    unmatched = F.lit(False)
    for left_key, _ in asof["pairs"]:
        unmatched = unmatched | F.col(quote(left_key)).isNull()
    ready = candidates.join(matches, cond, "left_semi").unionByName(
        candidates.where(unmatched))
    return ready, candidates.where(~unmatched).join(matches, cond, "left_anti")
