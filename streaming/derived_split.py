"""Cutting a statement over signal CTEs into its parts, on the statement's tokens.

:func:`find_split` finds the CTEs of a query that read a signal (each a **part**: the
CTE's body alone, at its place in the text, every other character blanked) and **the
rest** (the text with those CTEs, their commas and, if no CTE is left, ``WITH`` blanked).
Blanking keeps every offset, so an error in either part points into the user's
statement. Positions come from the sqlglot AST and the WaveSQL tokenizer (comments are
not tokens, a literal is one), so a comment or string literal saying ``WITH``, ``(`` or
``,`` cannot mislead it. :func:`expand_stars` spells out the rest's ``*`` and ``f.*`` over
a part's rows as the CTE's own columns (the stream the rest reads has an internal
punctuation column besides them). Used by :mod:`.derived`, which runs the parts.
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql.catalog import objects as cat
from wavesql.dialect import Statement, parse_statements
from wavesql.errors import Span, WaveSQLError
from wavesql.sqltext import quote

from . import derived_chain, derived_hoist, derived_over, stream_parts
from .derived_chain import cte_extent as _cte_extent


@dataclasses.dataclass(frozen=True)
class Part:
    """One signal CTE: its name, ``inner`` (the full text with all but the CTE's body
    blanked) and the column of its rows' event time; ``sync``: a CTE with a SYNC JOIN (a
    continuous SYNC, its rows' time the control stream's event time)."""

    name: str
    inner: str
    time_column: str
    sync: bool = False
    #: a CTE computing across a stream's rows, joined or resampled by the rest
    #: (streaming/stream_parts.py)
    stream: bool = False
    #: what the user wrote the part as (EXPLAIN STREAM names it so): ``CTE``, ``view``
    #: or ``subquery`` (.derived_hoist), ``SELECT`` (the statement's own, .derived_over)
    origin: str = "CTE"
    #: the lower-case names of the parts before it whose rows it reads (a chain: planned
    #: and started over them, derived.py)
    reads: tuple = ()
    #: a view or subquery passing a signal's segments on, which signal functions outside
    #: it read: a part only when the query does not run whole (planning.runs_whole)
    segments: bool = False


#: each :attr:`Part.origin`'s words around the names, one part and several
_ORIGINS = {"CTE": ("CTE {}", "CTEs {}"), "view": ("view {}", "views {}"),
            "subquery": ("subquery {}", "subqueries {}"),
            "SELECT": ("part {} cut from its own SELECT", "parts {} cut from its own SELECT")}


def described(parts) -> str:
    """The parts as the user wrote them, for EXPLAIN STREAM (``CTE `m` and view `cv```),
    grouped by :attr:`Part.origin` in the statement's order; ``signal`` (or ``SYNC``)
    before the words when the parts that are not stream parts are all signal queries (or
    all SYNCs)."""
    groups: dict[str, list[str]] = {}
    for p in parts:
        groups.setdefault(p.origin, []).append(f"`{p.name}`")
    kinds = {"SYNC " if p.sync else "signal " for p in parts if not p.stream}
    words = [_ORIGINS[o][len(names) > 1].format(", ".join(names))
             for o, names in groups.items()]
    return (kinds.pop() if len(kinds) == 1 else "") + " and ".join(words)


@dataclasses.dataclass(frozen=True)
class Split:
    """A statement cut into its signal CTEs (``parts``, in the statement's order) and the
    rest (``outer``: the full text with those CTEs blanked)."""

    parts: tuple[Part, ...]
    outer: str
    text: str  # the whole statement: errors in either part are shown in it
    # parts that are views' queries (derived_hoist.ViewPart): their errors are in the
    # view's text, raised at the view's name by derived_hoist.check_views
    views: tuple = ()

    # (the first signal CTE's: a statement with one)
    name = property(lambda self: self.parts[0].name)
    inner = property(lambda self: self.parts[0].inner)
    time_column = property(lambda self: self.parts[0].time_column)


def find_split(stmt: Statement, text: str, catalog) -> Split | None:
    """The split of ``stmt`` (``text``: the full text its positions index) when some of
    its CTEs read a signal and the rest does not -- or, with no such CTE, some of its
    subqueries or views are signal queries (:mod:`.derived_hoist`); None when none is.
    Then the rest is cut again at the stream parts over those parts' rows (a chain)."""
    split = _cte_split(stmt, text, catalog)
    if split is not None:
        split = _with_stream_parts(split, catalog)
    else:
        hoisted = derived_hoist.hoist(stmt, text, catalog, Split, Part, _part_time)
        if hoisted is None:  # one SELECT over a signal's windows with OVER windows
            return derived_over.over_split(stmt, text, catalog, Split, Part)
        split = dataclasses.replace(hoisted[0], views=hoisted[1])
    return _parts_over_parts(split, catalog)


def _parts_over_parts(split: Split, catalog) -> Split:
    """``split`` with the stream parts of its rest that read its parts' rows cut too, after
    them (a chain: ``WITH f AS (<signal query>), m AS (SELECT _time AS t, max(rms) AS p
    FROM f [RANGE 10 SECONDS ...] GROUP BY _time) ... ASOF JOIN m`` -- ``m`` windows
    ``f``'s rows and is joined: a stream part over ``f``'s stream). The rest is cut as a
    statement in which each part's name is a catalog stream, event time the part's (the
    rest reads it so); each part is planned over the parts before it (derived.py)."""
    over = _overlay(catalog, split.parts)
    streams = set(over.objects)
    (rest,) = parse_statements(split.outer)
    try:  # (shown in the statement, not in the rest's text)
        more = _cte_split(rest, split.outer, over)
        if more is not None:
            more = _with_stream_parts(more, over)
        else:
            hoisted = derived_hoist.hoist(rest, split.outer, over, Split, Part,
                                          lambda *args, **kwargs: None)
            more = hoisted and dataclasses.replace(hoisted[0], views=hoisted[1])
    except WaveSQLError as err:
        raise err.with_query(split.text) from None
    if not more:
        return split
    parts = tuple(dataclasses.replace(p, reads=tuple(sorted(set(streams) & (
        derived_chain.read_names(parse_statements(p.inner)[0].node, over))))) for p in more.parts)
    return Split(split.parts + parts, more.outer, split.text, split.views + more.views)


def _overlay(catalog, parts) -> derived_chain.Overlay:
    """``catalog`` with each part's name read as a stream of its rows (event time its
    time column), as the rest reads it."""
    return derived_chain.Overlay(catalog, {
        p.name.lower(): cat.StreamDef(p.name, [(p.time_column, "TIMESTAMP")], "/", "parquet",
                                      event_time=p.time_column) for p in parts})


def _with_stream_parts(split: Split, catalog) -> Split:
    """``split`` (cut at its CTEs) with the subqueries and views of its rest that are
    stream parts (:mod:`.derived_hoist`) cut too: ``WITH m AS (...) SELECT ... FROM mv a
    ASOF JOIN m b ...`` with ``mv`` a windowed view. The rest keeps the statement's offsets,
    so it is cut as the statement would be; a signal subquery or view there is not a part
    (the rest reading a signal is refused by the CTE cut)."""
    (rest,) = parse_statements(split.outer)
    # the rest reads each part by its CTE's name: that is the part's stream, not a catalog
    # view of the same name (which would be hoisted as a second part of that name)
    over = _overlay(catalog, split.parts)
    try:
        hoisted = derived_hoist.hoist(rest, split.outer, over, Split, Part,
                                      lambda *args, **kwargs: None)
    except WaveSQLError as err:  # (shown in the statement, not in the rest's text)
        raise err.with_query(split.text) from None
    if hoisted is None:
        return split
    more, views = hoisted
    return Split(split.parts + more.parts, more.outer, split.text, views)


def _part_time(select: exp.Select, name: str, catalog, where=None) -> tuple[str, bool] | None:
    """``(time column, sync)`` of a SELECT that is a part (a signal query: its
    ``start_time(...)`` column, raising when it has none; a SYNC: its control's event
    time passed through), or None: a SYNC not passing it through is planned whole."""
    if any(j.args.get("sync") for j in select.find_all(exp.Join)):
        column = _select_sync_time(select, catalog)
        return None if column is None else (column, True)
    return _select_time(select, name, where if where is not None else select), False


def _cte_split(stmt: Statement, text: str, catalog) -> Split | None:
    """:func:`find_split` over the statement's CTEs."""
    node = stmt.node
    with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
    if with_ is None:
        return None
    names = {c.alias_or_name.lower() for c in with_.expressions}
    bodies = derived_chain.ctes_of(node)

    def signals_in(tree) -> list[exp.Table]:
        return [t for t in tree.find_all(exp.Table) if not t.args.get("db")
                and t.name.lower() not in names
                and isinstance(catalog.get(t.name), cat.SignalDef)]

    rest = node.copy()
    rest.set("with_", None)

    def is_part(cte) -> bool:
        if not signals_in(cte.this):  # a stream part, or none (streaming/stream_parts.py)
            # (used where the rest or another CTE joins or windows it: a CTE windowing a
            # windowed CTE is then a stream part over its rows, _parts_over_parts; the
            # CTEs whole, named: one filtering it may be what the rest windows)
            uses = exp.Tuple(expressions=[rest.copy()] + [
                c.copy() for c in with_.expressions if c is not cte])
            return not signals_in(rest) and stream_parts.is_stream_part(
                cte, names, uses, catalog, _others(bodies, cte))
        # a SYNC CTE is a part when it passes its control's event time through and the
        # rest reads no signal; else the query is planned whole (streaming/sync.py refuses
        # windows around a SYNC there, naming the column to pass through)
        return not _is_sync(cte) or (not signals_in(rest)
                                     and _sync_time_column(cte, catalog) is not None)

    found = [c for c in with_.expressions if is_part(c)]
    if not found:
        return None

    def refuse(what, where, hint):
        return WaveSQLError("NOT_IMPLEMENTED", what, Span.of(where), hint=hint)

    if any(signals_in(rest)):
        raise refuse("a continuous query reading a signal both in and beside a CTE",
                     found[0], "read the signal in a CTE only, straight from the signal")
    for cte in found:
        if not signals_in(cte.this):  # a stream part (reads catalog streams only)
            continue
        if any(t.name.lower() in names for t in cte.this.find_all(exp.Table)
               if not t.args.get("db")):
            raise refuse("a signal CTE reading another CTE", cte,
                         "read the signal in one CTE only, straight from the signal")
        if cte.args["alias"].columns:
            raise refuse("a signal CTE with a column list", cte.args["alias"],
                         f"name the columns in the CTE's SELECT instead: SELECT start_time("
                         f"ch1) AS t, ... (no `{cte.alias_or_name}(...)` list)")
    extents = [_cte_extent(text, cte) for cte in with_.expressions]
    signal = [any(cte is f for f in found) for cte in with_.expressions]
    parts, chained = [], set()
    for cte, extent, is_signal in zip(with_.expressions, extents, signal):
        if not is_signal:
            continue
        # the body alone, at its place; newlines kept: line/column positions stay right
        inner = _blank(text[:extent.closed], 0, extent.opened + 1)
        if not signals_in(cte.this):  # (refused with EMIT CHANGES: final rows only)
            # a chain: the CTEs it reads before it (WITH a AS (...) <its body>), offsets kept
            reads = derived_chain.cte_reads(cte.this, _others(bodies, cte))
            chained.update(reads)
            inner = derived_chain.lay_body(derived_chain.with_prefix(text, bodies, reads),
                                           text, extent.opened + 1, extent.closed)
            inner = inner[:extent.closed]
            try:  # (shown in the statement: its positions are the statement's)
                stream_parts.check_part(cte)
                time_column = stream_parts.time_column(cte, catalog, _others(bodies, cte))
            except WaveSQLError as err:
                raise err.with_query(text) from None
            parts.append(Part(cte.alias_or_name, inner, time_column, stream=True))
        elif _is_sync(cte):  # (its progress holds back to its rows still waiting: runner.py)
            parts.append(Part(cte.alias_or_name, inner, _sync_time_column(cte, catalog),
                              sync=True))
        else:
            parts.append(Part(cte.alias_or_name, inner, _time_column(cte)))
    # a CTE only the parts read (through a chain) goes with them: left in the rest, it
    # would read a stream there the rest does not
    kept = {n: c for n, c in bodies.items() if not any(c is f for f in found)}
    drop = {f.alias_or_name.lower() for f in found} | \
        (chained - set(derived_chain.cte_reads(rest, kept)))
    return Split(tuple(parts), derived_chain.drop_ctes(text, with_, drop), text)


def _others(bodies: dict, cte: exp.CTE) -> dict:
    """The CTEs of ``bodies`` but ``cte``: those it may read through (a chain)."""
    return {n: c for n, c in bodies.items() if c is not cte}


def _is_sync(cte: exp.CTE) -> bool:
    return any(j.args.get("sync") for j in cte.this.find_all(exp.Join))


def _sync_time_column(cte: exp.CTE, catalog) -> str | None:
    """A SYNC CTE's column that is its control's event-time column passed through as it
    is -- the event time of its rows (the SYNC's ``_progress`` is in that time) --, or None
    (the control is not a catalog stream with an EVENT TIME, or no column passes it)."""
    return _select_sync_time(cte.this, catalog)


def _select_sync_time(select, catalog) -> str | None:
    """:func:`_sync_time_column` of a SYNC's SELECT (a CTE's, a subquery's, a view's)."""
    select = select if isinstance(select, exp.Select) else None
    source = select.args.get("from_") if select is not None else None
    table = source.this if source is not None else None
    stream = catalog.get(table.name) if isinstance(table, exp.Table) \
        and not table.args.get("db") else None
    if not isinstance(stream, cat.StreamDef) or stream.event_time is None:
        return None
    alias = table.alias_or_name.lower()
    for projection in select.selects:
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(value, exp.Column) and value.name.lower() == \
                stream.event_time.lower() and value.table.lower() in ("", alias):
            return projection.alias_or_name
    return None


def _time_column(cte: exp.CTE) -> str:
    """The CTE's column holding ``start_time(...)``, the event time of its rows."""
    return _select_time(cte.this, cte.alias_or_name, cte, "the CTE")


def _select_time(select, name: str, where, what: str = "it") -> str:
    """The column of ``select`` (a signal query: a CTE's, a subquery's, a view's, named
    ``name``) holding ``start_time(...)``; the error, at ``where``, when none does."""
    for projection in select.selects if isinstance(select, exp.Select) else []:
        value = projection.this if isinstance(projection, exp.Alias) else projection
        if isinstance(value, exp.Anonymous) and str(value.this).lower() == "start_time":
            return projection.alias_or_name
    raise WaveSQLError(
        "STREAMING_RULE", f"a continuous query over the rows of `{name}` needs "
        f"their event time: {what} has no start_time(...) column", Span.of(where),
        hint=f"name the window's start in `{name}`, e.g. SELECT start_time(ch1) "
             "AS t, ...; its rows are then windowed and joined by t")


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + "".join(c if c == "\n" else " " for c in text[a:b]) + text[b:]


def expand_stars(text: str, name: str, columns: list[str]) -> str:
    """``text`` (the rest of the query) with each ``*`` and ``f.*`` over the derived stream
    ``name`` spelled out as the CTE's own ``columns``: the punctuation column is the
    stream's, not the user's. The text is rewritten, not only the AST (a plain query is
    handed to Spark as its text); each spelled-out list takes the place of blanks before it
    (the CTE's, usually: whitespace between tokens), so that what follows a star keeps its
    offset and errors there still point at the right place."""
    from wavesql.dialect.dialect import WaveSQL

    while True:
        (stmt,) = parse_statements(text)
        found = _stars(stmt.node, name, columns)
        if not found:
            return text
        tokens = WaveSQL().tokenizer().tokenize(text)
        star, replacement = max(found, key=lambda f: f[0].meta["start"])
        k = next(i for i, t in enumerate(tokens) if t.start == star.meta["start"])
        if k >= 2 and tokens[k - 1].token_type == TokenType.DOT:  # x.*: from the x
            k -= 2
        a, b = tokens[k].start, star.meta["end"] + 1
        n = len(replacement) - (b - a)
        cut = _spaces_before(text, tokens[:k], a, n)
        after = None if cut is not None or n <= 0 else _spaces_after(text, tokens, b, n)
        if after is not None:  # (a subquery's blanks, after the star: derived_hoist.py --
            # only what lies between the star and them moves)
            text = text[:after[0]] + text[after[1]:]
        text = text[:a] + replacement + text[b:]
        if cut is not None:
            text = text[:cut[0]] + text[cut[1]:]


def _spaces_before(text: str, tokens, limit: int, n: int) -> tuple[int, int] | None:
    """A span of ``n`` spaces before ``limit``, between ``tokens`` (those before it; the
    last such span, keeping a space there): they can go without changing what the text
    says (a comment's spaces may go too, a literal's never: it is a token). None if none."""
    if n <= 0:
        return None
    ends = [-1] + [t.end for t in tokens]
    starts = [t.start for t in tokens] + [limit]
    for end, start in reversed(list(zip(ends, starts))):
        at = text.rfind(" " * (n + 1), end + 1, start)
        if at >= 0:
            return at + 1, at + 1 + n
    return None


def _spaces_after(text: str, tokens, limit: int, n: int) -> tuple[int, int] | None:
    """A span of ``n`` spaces after ``limit``, between ``tokens`` (the first such span,
    keeping a space there), or None: :func:`_spaces_before` the other way."""
    later = [t for t in tokens if t.start >= limit]
    ends = [limit - 1] + [t.end for t in later]
    starts = [t.start for t in later] + [len(text)]
    for end, start in zip(ends, starts):
        at = text.find(" " * (n + 1), end + 1, start)
        if at >= 0:
            return at + 1, at + 1 + n
    return None


def _unspellable(select: exp.Select, sources: list) -> str | None:
    """Why a bare ``*`` of ``select`` over a derived stream cannot be spelled out (its
    columns are not just each input's, in order), or None."""
    if select.args.get("laterals"):
        return "beside a LATERAL VIEW"
    joins = select.args.get("joins") or []
    if any(j.args.get("using") or (j.args.get("method") or "").upper() == "NATURAL"
           for j in joins):
        return "over a USING or NATURAL join"
    if len(sources) > 1 and not all(s.alias_or_name for s in sources):
        return "beside an input without a name"
    return None


def _stars(node: exp.Expression, name: str, columns: list[str]) -> list:
    """(star node, its spelled-out text) of each ``*`` / ``x.*`` over ``name`` in ``node``."""
    found = []
    for select in node.find_all(exp.Select):
        sources = [select.args["from_"].this] if select.args.get("from_") else []
        sources += [j.this for j in select.args.get("joins") or []]
        ours = [t for t in sources if isinstance(t, exp.Table) and not t.args.get("db")
                and t.name.lower() == name.lower()]
        if not ours:
            continue

        def spelled(alias=None):
            prefix = quote(alias) + "." if alias else ""
            return ", ".join(prefix + quote(c) for c in columns)

        aliases = {t.alias_or_name.lower() for t in ours}
        for e in select.expressions:
            why = _unspellable(select, sources) if isinstance(e, exp.Star) else None
            if why is not None:
                raise WaveSQLError(
                    "NOT_IMPLEMENTED", f"`*` over `{name}`'s rows {why}: it would show the "
                    "internal punctuation column or lose columns", Span.of(e),
                    hint=f"name the columns: {spelled(ours[0].alias_or_name)}, ...")
            if isinstance(e, exp.Star) and len(sources) == 1:
                found.append((e, spelled()))
            elif isinstance(e, exp.Star) and all(s.alias_or_name for s in sources):
                # each input's columns, as a join's star gives them, ours spelled out
                found.append((e, ", ".join(
                    spelled(s.alias_or_name) if s in ours else quote(s.alias_or_name) + ".*"
                    for s in sources)))
            elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star) \
                    and e.table.lower() in aliases:
                found.append((e.this, spelled(e.table)))
    return found
