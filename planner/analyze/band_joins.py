"""Rule: an interval (band) join of two streams gets an equality on time bins.

Spark has no range join: an ON clause with no equality compares every pair of rows.
planner/band.py explains the rewrite: both sides get the bin of their time (the second
side expanded to the two bins its band can touch), and the ON clause an equality on it,
so Spark joins by hash; the user's own condition still decides. This rule picks the joins
it applies to -- an inner join, alone in its SELECT, of two catalog streams or tables
named as such (no window, no CTE), whose band is between two TIMESTAMP columns -- and
records in ``found.binned`` that the SQL is no longer the user's text.

Example::

    SELECT * FROM clicks c JOIN views v
      ON c.ts BETWEEN v.ts - INTERVAL 5 SECONDS AND v.ts + INTERVAL 10 SECONDS
    -- becomes (the band is 15 seconds wide)
    SELECT c.uid, c.ts, v.uid, v.ts
    FROM (SELECT *, FLOOR(UNIX_MICROS(ts) / 15000000) AS __band_bin FROM clicks) AS c
    JOIN (SELECT *, EXPLODE(SEQUENCE(FLOOR((UNIX_MICROS(ts) + (-5000000)) / 15000000),
                                     FLOOR((UNIX_MICROS(ts) + (10000000)) / 15000000)))
                    AS __band_bin FROM views) AS v
      ON c.ts BETWEEN v.ts - INTERVAL '5' SECONDS AND v.ts + INTERVAL '10' SECONDS
         AND c.__band_bin = v.__band_bin
"""

from __future__ import annotations

from sqlglot import exp

from ..band import bin_tables, find_band
from ..ctes import cte_names
from .context import BindContext, Found
from .resolve import resolve_relation


def bin_band_joins(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Give interval joins of two streams an equality on time bins (a copy of ``node``)."""
    if not any(find_band(j.args.get("on")) for j in node.find_all(exp.Join)):
        return node
    node = node.copy()
    found.binned = _bin_copy(node, ctx)
    return node


def _bin_copy(node: exp.Expression, ctx: BindContext) -> bool:
    """Rewrite the band joins of ``node`` in place; whether any was."""
    candidates = []
    for select in node.find_all(exp.Select):
        joins = select.args.get("joins") or []
        if len(joins) != 1 or select.args.get("from_") is None:
            continue
        join = joins[0]
        if (join.args.get("sync") is not None or join.args.get("method")
                or (join.args.get("side") or "") or (join.args.get("kind") or "INNER").upper()
                not in ("INNER", "")):
            continue
        band = find_band(join.args.get("on"))
        if band is not None:
            candidates.append((select, join, band))
    ctes = cte_names(node)
    changed = False
    for select, join, band in candidates:
        tables = [select.args["from_"].this, join.this]
        if not all(isinstance(t, exp.Table) and isinstance(t.this, exp.Identifier)
                   and t.name.lower() not in ctes and not t.args.get("db")
                   and t.args.get("window") is None for t in tables):
            continue
        schemas, types = {}, {}
        for t in tables:
            rel = resolve_relation(t.name, t.this, ctx)
            schemas[t.alias_or_name.lower()] = rel.schema.names
            for f in rel.schema.fields:
                types[(t.alias_or_name.lower(), f.name.lower())] = f.type.lower()
        if not all(types.get((c.table.lower(), c.name.lower()), "").startswith("timestamp")
                   for c in (band.a, band.b)):
            continue
        bin_tables(select, join, band, schemas)
        changed = True
    return changed
