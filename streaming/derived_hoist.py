"""The other ways to write a query over a signal query's rows, cut as a signal CTE is.

A query over the rows of a signal query (or of a SYNC) runs continuously in parts
(:mod:`.derived`): the signal query as one part, the rest over its rows. The part is a CTE
there (:mod:`.derived_split`); a SQL user writes the same query in two more ways, and
:func:`hoist` cuts those into the same :class:`~.derived_split.Split`:

- **a subquery in FROM or a JOIN** -- ``SELECT max(rms) FROM (SELECT start_time(ch1) AS
  t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]) f [RANGE 10 SECONDS]``: the subquery's
  body is the part, at its place in the text (every other character blanked), and in the
  rest the parenthesized body is replaced by the part's name padded with blanks to the
  body's length, the user's alias kept after it. So every offset is kept: an error in
  either part points into the user's statement. The part is named like the alias (its
  checkpoint folder ``derived/<alias>``) unless that name is already taken -- a CTE, a
  table the statement reads or a view it reads reads (:func:`read_names`), another part --
  then ``<alias>_2``, ... Not any catalog object: the name must stay the same from one start
  to the next (it names the part's checkpoint folder and the stream the rest reads), and
  an unrelated ``CREATE STREAM f`` in between would rename the part (a fresh start of it,
  the rest's checkpoint refused); the overlay (``derived.WithDerived``) shadows a catalog
  object of that name for the statement only, which reads none.
- **a catalog view or a temporary view** whose query is a signal query or a SYNC --
  ``CREATE VIEW f AS SELECT start_time(ch1) AS t, ...; SELECT max(rms) FROM f [RANGE ...]``:
  the view's query is the part, named like the view, and the rest is the statement as
  written (the view's name reads the part's rows). The part's errors are in the view's own
  text: :func:`check_views` plans such parts first and raises their errors at the view's
  name in the statement, naming the view.

Only a SELECT reading a catalog signal in its FROM (in sample windows), or one with a SYNC
JOIN over a catalog stream passing its EVENT TIME through, is a part, as for CTEs; one
that reads a CTE is left to the whole query's planning (which refuses it as before). The
rest may read no signal itself.

A subquery or view computing across catalog streams' rows that the statement uses as a
side of a join or as RESAMPLE's input (``... ASOF JOIN (SELECT _time AS t, k, avg(v) AS a
FROM s [RANGE 10 SECONDS] GROUP BY _time, k) m ON ...``, or ``ASOF JOIN mv m`` of a view
of that query) is a **stream part** (:mod:`.stream_parts` decides, as for a CTE: one
classification), cut the same way: the part named after the alias (``subquery`` for
RESAMPLE's unnamed input) or the view, its event time the window's ``_time`` or the
stream's event time passed through (else refused, a view's error at its name). Such parts
are also cut from the rest of a statement cut at its CTEs (:mod:`.derived_split`), so a
stream-part CTE and a stream-part view or subquery may be the two sides of one join.

Views reading views are followed (:mod:`.derived_chain`): the first view down a chain
whose query is a part is the part -- ``g`` filtering ``f``, a view of a signal query:
``f`` is the signal part and the rest reads ``g`` over its rows; ``rv`` filtering ``mv``,
a windowed view, joined: ``mv`` is the stream part (a windowed view over a filter view
too) --, its errors raised where the statement names the view the chain starts at.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql.catalog import objects as cat
from wavesql.dialect import nodes as wn
from wavesql.dialect import parse_statements
from wavesql.errors import Span, WaveSQLError

from . import derived_chain, stream_parts
from .derived_chain import read_names  # noqa: F401 (derived_over reads it here)


@dataclasses.dataclass(frozen=True)
class ViewPart:
    """A part that is a view's query: where the statement names the view (errors of the
    view's query are raised there)."""

    name: str
    where: Span


def hoist(stmt, text: str, catalog, split_cls, part_cls, time_columns) -> tuple | None:
    """``(split, view_parts)``: ``stmt`` (``text``: the full text its positions index) cut
    at its signal subqueries and signal views, or None when it has none.
    ``split_cls``/``part_cls``: :class:`~.derived_split.Split` and ``Part``;
    ``time_columns(select, name, catalog)``: a part's ``(time column, sync)`` (raising when
    a signal part has none), None when the SELECT is not a part."""
    node = stmt.node
    if not isinstance(node, exp.Query):
        return None
    with_ = node.args.get("with_")
    ctes = {c.alias_or_name.lower() for c in with_.expressions} if with_ is not None else set()
    bodies = derived_chain.ctes_of(node)  # (a stream subquery may read through them)
    subqueries, views = [], {}
    for sq in node.find_all(exp.Subquery):
        reads = _reads_signal(sq.this, catalog, ctes) \
            if isinstance(sq.this, exp.Select) else None
        if isinstance(sq.parent, (exp.From, exp.Join)) and reads \
                and not _reads_ctes(sq.this, ctes):
            found = _part_kind(sq.this, sq.alias_or_name or "subquery", catalog,
                               time_columns, reads)
            if found is not None:
                subqueries.append((sq, found))
        elif isinstance(sq.parent, (exp.From, exp.Join, wn.Resample)) \
                and stream_parts.is_stream_query(sq.this, ctes, catalog, bodies) \
                and stream_parts.is_side(sq):
            try:  # (shown in the statement: its positions are the statement's)
                found = _stream_time(sq.this, sq.alias_or_name or "subquery", catalog, sq,
                                     "the subquery", bodies)
            except WaveSQLError as err:
                raise err.with_query(text) from None
            subqueries.append((sq, (found, {"stream": True})))
    # (table, where): the statement's tables, then those of the views' queries that are
    # no part -- a chain of views (g reads f, a signal view: f is the part, the rest reads
    # g over f's rows); a view's query's errors are raised where the statement names the
    # view it was reached from
    todo = [(t, t) for t in node.find_all(exp.Table)
            if t.args.get("db") or t.name.lower() not in ctes]
    seen = set()
    while todo:
        table, where = todo.pop(0)
        name = table.name.lower()
        # (a view read first where it is no side, then as a side, is a part: seen per use)
        side = stream_parts.is_side(table) or stream_parts.is_side(where)
        if table.args.get("db") or name in views or (name, side) in seen:
            continue
        seen.add((name, side))
        view = catalog.get(table.name)
        if not isinstance(view, cat.ViewDef):
            continue
        try:
            (body,) = parse_statements(view.sql)
        except WaveSQLError:
            continue
        reads = _reads_signal(body.node, catalog, set()) \
            if isinstance(body.node, exp.Select) else None
        if reads:
            found = _part_kind(body.node, view.name, catalog, time_columns, reads,
                               where=where)
            if found is not None:
                views[name] = (view, where, found)
        elif stream_parts.is_stream_query(body.node, set(), catalog) and side:
            try:  # (the view's query's positions are in its own text: raised at its name)
                found = _stream_time(body.node, view.name, catalog, body.node,
                                     "the view's query")
            except WaveSQLError as err:
                raise at_view(err, view.name, where, text) from None
            views[name] = (view, where, (found, {"stream": True}))
        else:
            todo += [(t, where) for t in body.node.find_all(exp.Table)]
    # nested: only the innermost subqueries read the signal directly; an outer one is rest
    subqueries = [(sq, f) for sq, f in subqueries
                  if not any(o is not sq and o in sq.find_all(exp.Subquery)
                             for o, _ in subqueries)]
    if not subqueries and not views:
        return None
    hoisted = {id(t) for sq, _ in subqueries for t in sq.find_all(exp.Table)}
    if any(id(t) not in hoisted and not t.args.get("db") and t.name.lower() not in ctes
           and isinstance(catalog.get(t.name), cat.SignalDef) for t in node.find_all(exp.Table)):
        return None  # a signal read beside them: planned whole (refused as before)
    taken = ctes | read_names(node, catalog) | set(views)
    parts, view_parts, outer, chained = [], [], text, set()
    for sq, (time_column, kind) in sorted(subqueries, key=lambda s: _body_start(s[0])):
        opened, closed = _parens(text, sq)
        name = _fresh(sq.alias_or_name or "subquery", taken)
        taken.add(name.lower())
        # a stream subquery reading CTEs (a chain): its text carries them before it
        reads = derived_chain.cte_reads(sq.this, bodies) if kind.get("stream") else []
        chained.update(reads)
        if put(text, opened, closed + 1, name) is None:
            return None  # (cannot be: a body is longer than a name; then planned whole)
        inner = derived_chain.lay_body(derived_chain.with_prefix(text, bodies, reads), text,
                                       opened + 1, closed)
        parts.append(part_cls(name, inner, time_column, origin="subquery", **kind))
        outer = put(outer, opened, closed + 1, name)
    if chained:  # a CTE only they read leaves the rest with them
        outer = _without_ctes(outer, chained)
    for name, (view, table, (time_column, kind)) in views.items():
        parts.append(part_cls(view.name, view.sql, time_column, origin="view", **kind))
        view_parts.append(ViewPart(view.name, Span.of(table)))
    return split_cls(tuple(parts), outer, text), tuple(view_parts)


def check_views(split, catalog, env, plan_part) -> None:
    """Plan each view part of ``split`` (``plan_part(catalog, env, part, text)``:
    derived.py's ``_plan_signal_part``) and raise its error at the view's name in the
    statement: the view's query is not in the statement's text, so its positions would
    point elsewhere."""
    for view in split.views:
        part = next(p for p in split.parts if p.name == view.name)
        earlier = {p.name.lower() for p in split.parts[:split.parts.index(part)]}
        if earlier & read_names(parse_statements(part.inner)[0].node, catalog):
            continue  # (over another part's rows: planned over them only, derived.py)
        try:
            plan_part(catalog, env, part, part.inner)
        except WaveSQLError as err:
            raise at_view(err, view.name, view.where, split.text) from None


def at_view(err: WaveSQLError, name: str, where, text: str) -> WaveSQLError:
    """``err`` of view ``name``'s query raised at ``where`` (a :class:`~wavesql.errors.Span`
    or the view's name in the statement ``text``), naming the view."""
    where = where if isinstance(where, Span) else Span.of(where)
    return WaveSQLError(err.code, f"in view `{name}` (its query runs as a part of the "
                        f"continuous query): {err.message}", where, hint=err.hint, query=text)


def _stream_time(body, name: str, catalog, where, what: str, ctes=None) -> str:
    """A stream part's event-time column (:func:`.stream_parts.query_time_column`; through
    the CTEs ``ctes`` it reads), its query checked to emit final rows only
    (:func:`.stream_parts.check_query`)."""
    stream_parts.check_query(body, name)
    return stream_parts.query_time_column(body, name, catalog, where, what, ctes)


def _reads_signal(select: exp.Select, catalog, ctes: set) -> str | None:
    """How ``select`` itself (not a subquery of it) reads a catalog signal in its FROM or
    its JOINs: ``"rows"`` naming its columns; ``"segments"`` passing a channel's segments
    on (``SELECT start_time(ch1) AS t, ch1 AS seg FROM mic [SAMPLES 500]``), which signal
    functions outside it read -- a part only where the query does not run whole
    (:attr:`~.derived_split.Part.segments`: a pass-through subquery merges into the
    SELECT around it, planner/passthrough.py); None: it reads none, or ``*``."""
    if any(isinstance(e, exp.Star) or isinstance(e, exp.Column) and isinstance(e.this, exp.Star)
           for e in select.expressions):
        return None
    sources = [select.args["from_"].this] if select.args.get("from_") else []
    sources += [j.this for j in select.args.get("joins") or []]
    signals = [catalog.get(t.name) for t in sources if isinstance(t, exp.Table)
               and not t.args.get("db") and t.name.lower() not in ctes]
    if not any(isinstance(g, cat.SignalDef) for g in signals):
        return None
    channels = {c.name.lower() for g in signals if isinstance(g, cat.SignalDef)
                for c in g.channels}
    if not any(j.args.get("sync") for j in select.args.get("joins") or []) and any(
            isinstance(e.unalias(), exp.Column) and e.unalias().name.lower() in channels
            for e in select.expressions):
        return "segments"
    return "rows"


def _part_kind(select: exp.Select, name: str, catalog, time_columns, reads: str,
               **where) -> tuple | None:
    """``(time column, Part keywords)`` of a signal subquery's or view's query (``reads``:
    :func:`_reads_signal`'s answer), None when it is no part: one passing segments on
    without a ``start_time(...)`` column stays in the query planned whole, as before."""
    try:
        found = time_columns(select, name, catalog, **where)
    except WaveSQLError:
        if reads == "segments":
            return None
        raise
    if found is None:
        return None
    return found[0], {"sync": found[1], "segments": reads == "segments"}


def _without_ctes(outer: str, chained: set) -> str:
    """The rest ``outer`` without the CTEs of ``chained`` it no longer reads."""
    (rest,) = parse_statements(outer)
    kept = derived_chain.ctes_of(rest.node)
    main = rest.node.copy()
    main.set("with_", None)
    drop = chained - set(derived_chain.cte_reads(main, kept))
    return derived_chain.drop_ctes(outer, rest.node.args["with_"], drop) if drop else outer


def _reads_ctes(select: exp.Select, ctes: set) -> bool:
    return any(t.name.lower() in ctes for t in select.find_all(exp.Table)
               if not t.args.get("db"))


def _fresh(base: str, taken: set) -> str:
    """``base`` or ``base_2``, ``base_3``, ...: the first name not ``taken`` -- no CTE,
    name the statement or its views read (:func:`read_names`) or other part (the rest reads
    the part's rows by that name)."""
    name, k = base, 1
    while name.lower() in taken:
        k += 1
        name = f"{base}_{k}"
    return name


def _body_start(sq: exp.Subquery) -> int:
    """The offset of the first positioned token of ``sq``'s body."""
    starts = [s.start for s in (Span.of(n) for n in sq.this.walk()) if s is not None]
    return min(starts)


def _parens(text: str, sq: exp.Subquery) -> tuple[int, int]:
    """The offsets of the "(" and ")" around ``sq``'s body, from the tokens (a comment or a
    string literal saying "(" cannot mislead it)."""
    from wavesql.dialect.dialect import WaveSQL

    tokens = WaveSQL().tokenizer().tokenize(text)
    first = _body_start(sq)
    i = next(k for k, t in enumerate(tokens) if t.start >= first)
    depth = 0
    for k in range(i - 1, -1, -1):  # back to the unmatched "(" before the body
        kind = tokens[k].token_type
        if kind == TokenType.R_PAREN:
            depth += 1
        elif kind == TokenType.L_PAREN:
            if depth == 0:
                i = k
                break
            depth -= 1
    depth = 0
    for k in range(i, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[k].token_type, 0)
        if depth == 0:
            return tokens[i].start, tokens[k].start
    raise WaveSQLError("PARSE_ERROR", "unbalanced parentheses", Span.of(sq))


def put(text: str, a: int, b: int, word: str) -> str | None:
    """``text`` with ``[a, b)`` blanked, its newlines kept (Spark's errors come back in
    lines and columns), and ``word`` written at the first place there without a newline;
    None when there is none."""
    text = _blank(text, a, b)
    at = next((i for i in range(a, b - len(word) + 1)
               if "\n" not in text[i:i + len(word)]), None)
    return None if at is None else text[:at] + word + text[at + len(word):]


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + "".join(c if c == "\n" else " " for c in text[a:b]) + text[b:]
