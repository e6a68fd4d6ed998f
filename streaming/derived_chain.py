"""Chains of CTEs and views under a part of the derived pipeline, resolved before classifying.

A relation built in more than one step -- ``WITH a AS (SELECT ts, k, v FROM s WHERE v >
0), m AS (SELECT _time AS t, k, avg(v) AS av FROM a [RANGE 10 SECONDS SLIDE 10 SECONDS]
GROUP BY _time, k) ... ASOF JOIN m``, or a view reading a view -- is classified by what
lies at the end of its chain: :func:`resolve` follows the CTEs of the statement and the
views (catalog or temporary) it reads down to catalog objects, so :mod:`.stream_parts`
sees one level (``m`` reads stream ``s`` and computes across its rows: a stream part).

A part is planned as a query of its own, so its text must define what it reads:
:func:`with_prefix` is the statement with everything blanked but ``WITH`` and the CTEs
the part reads (in their order, with the commas between them), every offset kept -- the
part's body is then laid at its own place after them, and an error in either points
into the user's statement. A view is read by name: the part binds it from the catalog.
What follows a chain within one part is the planner's as for any query (a window or join
over a CTE or view row by row over one stream: planning._filtered_stream,
plan.row_by_row_stream); a chain it cannot follow is refused there, at the statement.
"""

from __future__ import annotations

import dataclasses
import re
from urllib.parse import quote

from sqlglot import exp
from sqlglot.tokens import TokenType

from wavesql.catalog import objects as cat
from wavesql.dialect import parse_statements
from wavesql.errors import Span, WaveSQLError


class Overlay:
    """``catalog`` with ``objects`` (lower-case name -> definition) laid over it, for
    classifying: a part's name read as the stream of its rows."""

    def __init__(self, catalog, objects: dict):
        self.catalog, self.objects = catalog, objects

    def __getattr__(self, attr):
        return getattr(self.catalog, attr)

    def get(self, name: str):
        found = self.objects.get(name.lower())
        return found if found is not None else self.catalog.get(name)


def ctes_of(node: exp.Expression) -> dict[str, exp.CTE]:
    """The CTEs of ``node``'s WITH by lower-case name (empty without one)."""
    with_ = node.args.get("with_") if isinstance(node, exp.Query) else None
    return {c.alias_or_name.lower(): c for c in with_.expressions} if with_ is not None else {}


def cte_reads(body: exp.Expression, ctes: dict[str, exp.CTE]) -> list[str]:
    """The names of the CTEs (of ``ctes``) ``body`` reads, directly or through each other,
    in the WITH's order."""
    seen: set[str] = set()
    todo = [body]
    while todo:
        for t in todo.pop().find_all(exp.Table):
            name = t.name.lower()
            if not t.args.get("db") and name in ctes and name not in seen:
                seen.add(name)
                todo.append(ctes[name].this)
    return [n for n in ctes if n in seen]


def view_query(view: cat.ViewDef) -> exp.Expression | None:
    """A view's query parsed (None when it does not parse: its own binding reports it)."""
    try:
        (body,) = parse_statements(view.sql)
    except (WaveSQLError, ValueError):
        return None
    return body.node


def resolve(body: exp.Expression, catalog, ctes: dict[str, exp.CTE] | None = None,
            opaque: set[str] = frozenset(), follow=lambda query: True) -> list | None:
    """The catalog objects at the end of ``body``'s chain: each table it reads, a CTE of
    ``ctes`` or a view followed to what its query reads, recursively; None when it reads a
    qualified name, a CTE of ``opaque`` (one not to be followed), an unknown name, a cycle,
    or a CTE or view whose query ``follow`` refuses (a step the chain may not hold)."""
    ctes = ctes or {}
    return _resolve(body, catalog, ctes, set(opaque), frozenset(), follow)


def _resolve(body, catalog, ctes, opaque, seen, follow) -> list | None:
    found = []
    for t in body.find_all(exp.Table):
        name = t.name.lower()
        if t.args.get("db") or name in opaque or name in seen:
            return None
        obj = None if name in ctes else catalog.get(t.name)
        query = ctes[name].this if name in ctes else \
            view_query(obj) if isinstance(obj, cat.ViewDef) else None
        if query is not None:
            below = _resolve(query, catalog, ctes if name in ctes else {}, opaque if name in
                             ctes else set(), seen | {name}, follow) if follow(query) else None
        else:
            below = None if obj is None or isinstance(obj, cat.ViewDef) else [obj]
        if below is None:
            return None
        found += below
    return found


@dataclasses.dataclass(frozen=True)
class Extent:
    """Where a CTE lies in the statement's text (offsets), from the tokens: so that a
    comment or a string literal saying ``WITH``, ``(`` or ``,`` cannot mislead a cut."""

    with_at: int  # the WITH keyword
    first: int  # the CTE's name
    opened: int  # its body's "("
    closed: int  # the body's ")"
    after: int | None  # the comma after it, or None (the last CTE)


def cte_extent(text: str, cte: exp.CTE) -> Extent:
    """The extent of ``cte`` in ``text`` (the full text its positions index)."""
    from wavesql.dialect.dialect import WaveSQL

    first = Span.of(cte.args["alias"]).start
    tokens = WaveSQL().tokenizer().tokenize(text)  # (comments are not tokens)
    i = next(k for k, t in enumerate(tokens) if t.start >= first)
    with_at = next(t.start for t in reversed(tokens[:i]) if t.token_type == TokenType.WITH)
    while tokens[i].token_type != TokenType.ALIAS:  # (a column list's "(" is not the body's)
        i += 1
    while tokens[i].token_type != TokenType.L_PAREN:  # (AS [NOT] MATERIALIZED)
        i += 1
    opened, depth = tokens[i].start, 0
    for k in range(i, len(tokens)):
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1}.get(tokens[k].token_type, 0)
        if depth == 0:
            nxt = tokens[k + 1] if k + 1 < len(tokens) else None
            comma = nxt.start if nxt is not None and nxt.token_type == TokenType.COMMA \
                else None
            return Extent(with_at, first, opened, tokens[k].start, comma)
    raise WaveSQLError("PARSE_ERROR", "unbalanced parentheses", Span.of(cte))


def with_prefix(text: str, ctes: dict[str, exp.CTE], keep: list[str]) -> str:
    """``text`` blanked but for ``WITH`` and the CTEs named ``keep`` (with a comma between
    each two), newlines kept (Spark's errors come back in lines and columns); all blank
    when ``keep`` is empty. A part's body laid after it is a query reading those CTEs."""
    out = "".join(c if c == "\n" else " " for c in text)
    if not keep:
        return out
    extents = [cte_extent(text, ctes[n]) for n in keep]

    def lay(a: int, b: int) -> None:
        nonlocal out
        out = out[:a] + text[a:b] + out[b:]

    lay(extents[0].with_at, extents[0].with_at + len("WITH"))
    for i, extent in enumerate(extents):
        lay(extent.first, extent.closed + 1)
        if i + 1 < len(extents):  # (a CTE followed by another has a comma after it)
            lay(extent.after, extent.after + 1)
    return out


def drop_ctes(text: str, with_: exp.With, drop: set[str]) -> str:
    """``text`` with the CTEs of ``with_`` named in ``drop`` blanked, their commas too,
    and ``WITH`` when none is left; every offset kept."""
    extents = [cte_extent(text, cte) for cte in with_.expressions]
    gone = [cte.alias_or_name.lower() in drop for cte in with_.expressions]
    out = text
    for extent, cut in zip(extents, gone):
        if cut:
            out = _blank(out, extent.first, extent.closed + 1)
    if all(gone):  # blank WITH [RECURSIVE] and the commas too
        return _blank(out, extents[0].with_at, extents[-1].closed + 1)
    last_kept = max(i for i, cut in enumerate(gone) if not cut)
    for i, extent in enumerate(extents):  # a comma after each CTE kept but the last kept
        if extent.after is not None and (gone[i] or i >= last_kept):
            out = _blank(out, extent.after, extent.after + 1)
    return out


def _blank(text: str, a: int, b: int) -> str:
    return text[:a] + "".join(c if c == "\n" else " " for c in text[a:b]) + text[b:]


def lay_body(prefix: str, text: str, a: int, b: int) -> str:
    """``prefix`` (:func:`with_prefix`) with ``text[a:b]`` -- a part's body, after the
    WITH -- laid at its place."""
    return prefix[:a] + text[a:b] + prefix[b:]


def await_read(reads, started, trigger: str) -> None:
    """With ``trigger`` ``availableNow``, wait for the end of each part of ``started`` whose
    rows a part reads (``reads``: their lower-case names): a part over another's rows starts
    once they are all written (it would otherwise see only those there when it started)."""
    if trigger != "availableNow":
        return
    for query in started:
        if query.derived_name.lower() in reads:
            query.await_termination()


def read_names(node: exp.Expression, catalog) -> set[str]:
    """The lower-case names of the tables ``node`` reads and, through the views among them,
    of those their queries read (recursively): a part named like one of them would shadow
    it where it is read. Depends on the catalog only through objects the statement reads
    (a changed view is a changed query anyway), so a part's name is stable across starts."""
    seen: set[str] = set()
    todo = [node]
    while todo:
        for table in todo.pop().find_all(exp.Table):
            name = table.name.lower()
            if table.args.get("db") or name in seen:
                continue
            seen.add(name)
            view = catalog.get(table.name)
            if isinstance(view, cat.ViewDef):
                try:
                    (body,) = parse_statements(view.sql)
                except (WaveSQLError, ValueError):
                    continue  # (its own binding reports it)
                todo.append(body.node)
    return seen


def home_name(cte: str) -> str:
    """The folder of a part under ``<checkpoint>/derived/``: the CTE's name in lower case
    when it is a plain word (``f``, ``rms_1``), else ``q-`` and the name percent-encoded --
    a quoted name (``WITH `../x` AS``) never names a folder outside the checkpoint. The two
    never meet: an encoded name keeps a character a plain word has not (``%``, ``.``)."""
    name = cte.lower()
    if re.fullmatch(r"\w[\w-]*", name):
        return name
    return "q-" + quote(name, safe="")
