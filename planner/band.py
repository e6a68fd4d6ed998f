"""Interval (band) joins between event streams, lowered with time binning.

``SELECT ... FROM clicks c JOIN views v ON c.ts BETWEEN v.ts - INTERVAL 5 SECONDS AND
v.ts + INTERVAL 10 SECONDS`` (or the same band written as two comparisons) pairs rows whose
times are within a band of each other. Spark has no range join: without an equality in the
ON clause it compares every pair (a nested loop or a cartesian product). WaveSQL adds an
equality on **time bins** of the band's width ``w = x + y``: the row of the first side falls
in bin ``floor(t / w)``; the other side's band ``[t - x, t + y]`` touches at most two bins and
is expanded to them; the join is an equi-join on the bin plus the user's own condition,
which still decides. Every pair meets in exactly one bin, so the result is the user's
query's result, computed by a hash or sort-merge join.

The rewrite applies to inner joins of two named catalog streams (or tables) whose ON clause
holds both bounds of a band between their TIMESTAMP columns; anything else is left to Spark
as written.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from .types import interval_us

BIN = "__band_bin"


@dataclass(frozen=True)
class Band:
    a: exp.Column  # first side's time column
    b: exp.Column  # other side's time column: a in [b + lo, b + hi]
    lo: int
    hi: int


def _term(node: exp.Expression):
    """``col``, ``col + interval``, ``col - interval`` -> (column, offset us), else None."""
    if isinstance(node, exp.Paren):
        return _term(node.this)
    if isinstance(node, exp.Column) and node.table:
        return node, 0
    if isinstance(node, (exp.Add, exp.Sub)) and isinstance(node.expression, exp.Interval):
        inner = _term(node.this)
        if inner is None:
            return None
        try:
            us = interval_us(node.expression)
        except Exception:  # noqa: BLE001 - not a plain interval literal: not a band
            return None
        return inner[0], inner[1] + (us if isinstance(node, exp.Add) else -us)
    return None


def _conjuncts(node):
    if isinstance(node, exp.And):
        yield from _conjuncts(node.this)
        yield from _conjuncts(node.expression)
    elif isinstance(node, exp.Paren):
        yield from _conjuncts(node.this)
    else:
        yield node


def find_band(on: exp.Expression | None) -> Band | None:
    """The band in a join condition, if it has both bounds between two tables' columns."""
    if on is None:
        return None
    lower: dict = {}
    upper: dict = {}

    def add(left, right, kind):  # left (kind) right, kind in >= / <=
        lt, rt = _term(left), _term(right)
        if lt is None or rt is None or lt[0].table == rt[0].table:
            return
        (ca, oa), (cb, ob) = lt, rt
        key = (ca.table.lower(), ca.name.lower(), cb.table.lower(), cb.name.lower())
        offset = ob - oa  # ca >= cb + offset  (or <=)
        (lower if kind == ">=" else upper)[key] = (ca, cb, offset)
        flipped = (key[2], key[3], key[0], key[1])
        (upper if kind == ">=" else lower)[flipped] = (cb, ca, -offset)

    for part in _conjuncts(on):
        if isinstance(part, exp.Between):
            add(part.this, part.args["low"], ">=")
            add(part.this, part.args["high"], "<=")
        elif isinstance(part, (exp.GTE, exp.GT)):
            add(part.this, part.expression, ">=")
        elif isinstance(part, (exp.LTE, exp.LT)):
            add(part.this, part.expression, "<=")
    for key, (ca, cb, lo) in lower.items():
        if key in upper and upper[key][2] >= lo:
            return Band(ca, cb, lo, upper[key][2])
    return None


def bin_tables(select: exp.Select, join: exp.Join, band: Band,
               schemas: dict[str, list[str]]) -> None:
    """Rewrite ``select`` in place: both sides get a bin column, the ON an equality on it,
    and ``*`` / ``t.*`` are expanded so the bin columns stay hidden."""
    width = max(band.hi - band.lo, 1)
    tables = {t.alias_or_name.lower(): t for t in _tables(select)}
    a_table, b_table = tables[band.a.table.lower()], tables[band.b.table.lower()]
    a_us = f"unix_micros({exp.column(band.a.name).sql()})"
    b_us = f"unix_micros({exp.column(band.b.name).sql()})"
    _wrap(a_table, f"floor({a_us} / {width}) AS {BIN}")
    _wrap(b_table, f"explode(sequence(floor(({b_us} + ({band.lo})) / {width}), "
                   f"floor(({b_us} + ({band.hi})) / {width}))) AS {BIN}")
    join.set("on", exp.and_(join.args["on"], exp.EQ(
        this=exp.column(BIN, table=band.a.table), expression=exp.column(BIN, table=band.b.table))))
    order = [t.alias_or_name for t in _tables(select)]
    expanded = []
    for e in select.expressions:
        if isinstance(e, exp.Star):
            expanded += [exp.column(c, table=alias) for alias in order
                         for c in schemas[alias.lower()]]
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            expanded += [exp.column(c, table=e.table) for c in schemas[e.table.lower()]]
        else:
            expanded.append(e)
    select.set("expressions", expanded)


def _tables(select: exp.Select):
    yield select.args["from_"].this
    for j in select.args.get("joins") or []:
        yield j.this


def _wrap(table: exp.Table, extra: str) -> None:
    from wavesql.dialect import parse_one

    inner = parse_one(f"SELECT *, {extra} FROM {exp.to_identifier(table.name).sql()}")
    table.replace(exp.Subquery(this=inner, alias=exp.TableAlias(
        this=exp.to_identifier(table.alias_or_name))))
