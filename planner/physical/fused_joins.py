"""Joins inside a fused chain: a level joined with a per-window aggregate.

TiLT's imputation joins each grid point with its 10 s bucket's mean. A level of a fused
chain (planner/physical/fused_chains.py) may ``[INNER | LEFT [OUTER]] JOIN`` a relation that
is itself a fused aggregate per tumbling window (``GROUP BY`` the window instant alone: one
row per window, so at most span / width + 2 rows, :data:`LOOKUP_ROWS` at most) on ``<its
column> = <expression over the level's input>`` (integral or timestamp keys: exact
equality). Spark computes the relation once, packed into one row (``collect_list`` of its
rows, ``__wavesql_lookup_<i>`` in the plan), broadcast beside every range; the pass joins
it row by row (:class:`udfs.fused.Lookup`), so the rows it joins never cross into the
JVM. The relation is packed into a row rather than collected on the driver so that the
DataFrame stays lazy (``explain`` runs nothing) and the relation is computed by the query
that uses it.

:func:`lookup_join` finds such a join in a SELECT (a :class:`Join`); :func:`right_side`
gives the joined relation's columns as the level's compiler sees them (a :class:`Right`,
planner/physical/fused_compiler.py).
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from ..ctes import visible_ctes
from .fused_types import kind_of

#: The most rows a relation a fused pass joins may have (each task is handed all of it).
LOOKUP_ROWS = 1 << 20
#: Prefix of a joined relation's columns inside the pass.
RIGHT_PREFIX = "__wavesql_r"


@dataclasses.dataclass(frozen=True)
class Join:
    """A level's join with a small relation: ``view`` (a fused per-window aggregate's view
    name), referred to as ``qualifiers``, on ``<right column key> = <left expression>``."""

    view: str
    qualifiers: frozenset
    key: str
    left_key: exp.Expression
    inner: bool


def lookup_join(select: exp.Select, lookups) -> Join | None:
    """The join of ``select``'s FROM when the pass can evaluate it as a lookup: one
    ``[INNER | LEFT [OUTER]] JOIN`` of a relation in ``lookups`` (view name -> at most how
    many rows: fused aggregates per tumbling window, one row per window, so the pass hands
    each task the whole relation) on ``<its column> = <expression over the left side>``."""
    joins = select.args.get("joins") or []
    if len(joins) != 1:
        return None
    join = joins[0]
    if {k for k, v in join.args.items() if v} - {"this", "on", "side", "kind"}:
        return None  # USING, NATURAL, LATERAL, hints...
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if side == "LEFT" and kind in ("", "OUTER"):
        inner = False
    elif not side and kind in ("", "INNER"):
        inner = True
    else:
        return None
    right = join.this
    view = _lookup_view(right, lookups)
    on = join.args.get("on")
    if view is None or not isinstance(on, exp.EQ):
        return None
    qualifiers = frozenset({right.alias_or_name.lower()})
    for key, left in ((on.this, on.expression), (on.expression, on.this)):
        if isinstance(key, exp.Column) and not isinstance(key.this, exp.Star) \
                and (key.table or "").lower() in qualifiers \
                and not any((c.table or "").lower() in qualifiers
                            for c in left.find_all(exp.Column)):
            return Join(view, qualifiers, key.name, left, inner)
    return None


def renames(node) -> bool:
    """Whether a FROM source or CTE renames its columns (``t(a, b)``: by position)."""
    alias = node.args.get("alias")
    return isinstance(alias, exp.TableAlias) and bool(alias.columns)


def _lookup_view(right, lookups) -> str | None:
    """The lookup view ``right`` (a table, CTE or subquery) reads as it is, or None."""
    body = None
    if renames(right):
        return None
    if isinstance(right, exp.Subquery):
        if {k for k, v in right.args.items() if v} - {"this", "alias"}:
            return None
        body = right.this
    elif isinstance(right, exp.Table):
        if {k for k, v in right.args.items() if v} - {"this", "alias"}:
            return None
        if right.name.lower() in lookups:
            return right.name
        ctes = [c for c in visible_ctes(right.find_ancestor(exp.Select))
                if c.alias_or_name.lower() == right.name.lower()]
        body = ctes[-1].this if ctes and not renames(ctes[-1]) else None
    # a fused chain's SELECT was replaced by ``SELECT * FROM <its view>``
    if not isinstance(body, exp.Select) or {k for k, v in body.args.items() if v} \
            - {"expressions", "from_"} or len(body.expressions) != 1 \
            or not isinstance(body.expressions[0], exp.Star):
        return None
    source = body.args["from_"].this
    if isinstance(source, exp.Table) and not source.args.get("db") \
            and source.name.lower() in lookups:
        return source.name
    return None


@dataclasses.dataclass(frozen=True)
class Right:
    """The joined relation as a level sees it: ``columns`` ``(name, internal name, kind)``
    (those of a known kind), ``table`` its index among the pass's joined relations."""

    join: Join
    columns: tuple
    table: int


def right_side(join: Join, frames, table: int) -> Right | None:
    """``join``'s relation as the ``table``-th the pass joins (None if it is not an input)."""
    frame = frames.get(join.view.lower())
    if frame is None:
        return None
    columns = tuple((f.name, f"{RIGHT_PREFIX}{table}_{i}", kind_of(f.dataType))
                    for i, f in enumerate(frame.schema.fields)
                    if kind_of(f.dataType) != "opaque")
    return Right(join, columns, table)
