"""Pass-through subqueries over a signal merge into the query that reads them.

``SELECT count(*), sum(size(voice.samples)) FROM (SELECT voice FROM mic [SAMPLES 4096]
WHERE seg_std(voice) > 0.02) q`` is, row for row, ``SELECT count(*),
sum(size(voice.samples)) FROM mic [SAMPLES 4096] q WHERE seg_std(voice) > 0.02``. Written
the first way, the voiced segments leave the signal stage whole and every sample crosses
into the JVM only to be counted there; written the second way, the whole SELECT is one
signal stage and only the count of each window does (``planner/signals.py``). The same
holds for a chain of ``SELECT voice FROM (...)`` (XStream's PASSCHAIN): WaveScope passes
segments through such operators by reference, and WaveSQL removes them at planning.

A derived table merges into the SELECT around it only when nothing can change:

- the subquery is ``SELECT <plain columns> FROM <a catalog signal> [WHERE ...]`` -- no
  renaming, computing, grouping, ordering, limiting, DISTINCT, joins, or nested queries
  in its WHERE;
- the outer SELECT reads it alone (no joins), selects no ``*``, and every column it names
  is one the subquery selects or one of its own output aliases (so no column the
  subquery hid becomes visible, and no typo starts to resolve);
- the subquery's WHERE joins the outer one (both filter the same rows before anything
  else happens) -- unless the outer query runs a stateful signal function (a filter,
  a detector): over the subquery it sees only the windows that passed, with gaps between
  them, while in the merged SELECT it would run over every window.

Merging runs deepest first, so a chain of any length collapses onto the signal.
"""

from __future__ import annotations

from typing import Callable

from sqlglot import exp

from wavesql.udfs import registry

#: The only arguments a mergeable subquery's SELECT may carry.
_PLAIN_SELECT_ARGS = {"expressions", "from_", "where"}


def merge_into_signal_selects(
        node: exp.Expression,
        channels_of: Callable[[exp.Table], set[str] | None]) -> exp.Expression:
    """``node`` with every mergeable pass-through subquery over a signal merged into the
    SELECT that reads it (a copy when anything changes; ``node`` itself otherwise).
    ``channels_of(table)`` is the lower-case channel names of the signal ``table`` names,
    None for anything that is not a signal."""
    if not any(_mergeable(s, channels_of) for s in node.find_all(exp.Select)):
        return node
    node = node.copy()
    while True:
        # innermost first (reversed pre-order): a chain collapses from the signal outwards
        outer = next((s for s in reversed(list(node.find_all(exp.Select)))
                      if _mergeable(s, channels_of)), None)
        if outer is None:
            return node
        _merge(outer)


def _mergeable(outer: exp.Select, channels_of) -> bool:
    from_ = outer.args.get("from_")
    sub = from_.this if from_ is not None else None
    if not isinstance(sub, exp.Subquery) or set(_set_args(sub)) - {"this", "alias"}:
        return False  # not a derived table, or one with a window or sample clause of its own
    if sub.args.get("alias") is not None and sub.args["alias"].columns:
        return False  # (...) q(a, b) renames the columns
    inner = sub.this
    if not isinstance(inner, exp.Select) or set(_set_args(inner)) - _PLAIN_SELECT_ARGS:
        return False
    inner_from = inner.args.get("from_")
    source = inner_from.this if inner_from is not None else None
    channels = channels_of(source) if isinstance(source, exp.Table) else None
    if channels is None:
        return False
    alias, own = sub.alias.lower(), source.alias_or_name.lower()
    if {own, alias} & channels:
        return False  # `voice.start` would be ambiguous between a qualifier and a field
    where = inner.args.get("where")
    if where is not None and (
            where.find(exp.Query) is not None or _runs_stateful(outer, sub)
            or (alias and alias != own
                and any(_qualifier(c) == alias for c in where.find_all(exp.Column)))):
        return False  # a nested query, a stateful function, or a name only the outer has
    names = _projected_names(inner, source)
    if names is None or outer.args.get("joins") or outer.args.get("laterals"):
        return False
    if any(not isinstance(star.parent, exp.Count) and not _within(star, sub)
           for star in outer.find_all(exp.Star)):
        return False  # *, q.*, struct(*): would see the channels the subquery hides
    aliases = {e.alias.lower() for e in outer.expressions if isinstance(e, exp.Alias)}
    if aliases & (channels - names):
        return False  # in the merged SELECT the hidden channel would win over the alias
    allowed = names | aliases
    for column in outer.find_all(exp.Column):
        if _within(column, sub):
            continue  # the subquery's own columns
        if column.args.get("catalog"):
            return False
        parts = [p.lower() for p in (column.args.get("db") and column.db, column.table,
                                     column.name) if p]
        if parts[0] == alias and len(parts) > 1:
            parts = parts[1:]  # q.voice, q.voice.start
        # voice, voice.start -- or something else this simple check cannot place
        if parts[0] not in allowed:
            return False  # a column the subquery does not expose
    return True


def _qualifier(column: exp.Column) -> str:
    """The first part of a qualified column (``q`` of ``q.voice`` and ``q.voice.start``)."""
    return (column.args.get("db") and column.db or column.table).lower()


def _runs_stateful(outer: exp.Select, sub: exp.Subquery) -> bool:
    for call in outer.find_all(exp.Anonymous):
        fn = registry.lookup(call.name)
        if fn is not None and fn.stateful and not _within(call, sub):
            return True
    return False


def _projected_names(inner: exp.Select, source: exp.Table) -> set[str] | None:
    """Lower-case names the subquery selects, when each is a plain column of its source."""
    own = {source.alias_or_name.lower()}
    names = set()
    for e in inner.expressions:
        column = e.this if isinstance(e, exp.Alias) else e
        if not isinstance(column, exp.Column) or column.is_star or column.args.get("db"):
            return None
        if column.table and column.table.lower() not in own:
            return None
        if isinstance(e, exp.Alias) and e.alias.lower() != column.name.lower():
            return None  # a rename: the outer query names it differently
        if column.name.lower() in names:
            return None
        names.add(column.name.lower())
    return names


def _merge(outer: exp.Select) -> None:
    sub = outer.args["from_"].this
    inner = sub.this
    source = inner.args["from_"].this
    old = source.alias_or_name.lower()
    new = sub.alias or source.alias_or_name
    where = inner.args.get("where")
    conditions = []
    if where is not None:
        condition = where.this
        for column in condition.find_all(exp.Column):
            # c.voice or c.voice.start (the qualifier is the column's db part there)
            part = "db" if column.args.get("db") else "table"
            if column.text(part).lower() == old:
                column.set(part, exp.to_identifier(new))
        conditions.append(condition)
    source = source.copy()
    source.set("alias", exp.TableAlias(this=exp.to_identifier(new)))
    outer.args["from_"].set("this", source)
    if outer.args.get("where") is not None:
        conditions.append(outer.args["where"].this)
    if conditions:  # and_ parenthesises an OR operand
        outer.set("where", exp.Where(this=exp.and_(*conditions, copy=False)))


def _set_args(node: exp.Expression):
    return [k for k, v in node.args.items() if v not in (None, [], False)]


def _within(node: exp.Expression, ancestor: exp.Expression) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False

