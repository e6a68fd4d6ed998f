"""Rule: a pass-through subquery over a signal merges into the SELECT that reads it.

Then that SELECT is the signal stage, and only its results cross into the JVM rather than
every sample of every segment the subquery let through. planner/passthrough.py decides
when the merge changes nothing; this rule tells it which tables are catalog signals (and
their channels). It runs before the signal stages are extracted, which it feeds.

Example::

    SELECT count(*) FROM (SELECT voice FROM mic [SAMPLES 4096]
                          WHERE seg_std(voice) > 0.02) q
    -- becomes
    SELECT count(*) FROM mic [SAMPLES 4096] q WHERE seg_std(voice) > 0.02
    -- which the signal stages rule then makes SELECT COUNT(*) FROM __wavesql_mic_0 AS q
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat

from ..ctes import cte_names
from ..passthrough import merge_into_signal_selects
from .context import BindContext, Found


def merge_passthrough(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Pass-through subqueries over a signal merged into the SELECT that reads them, so
    that SELECT becomes the signal stage (a copy of ``node`` if any is)."""
    ctes = cte_names(node)

    def channels_of(table: exp.Table) -> set[str] | None:
        if (not isinstance(table.this, exp.Identifier) or table.args.get("db")
                or table.name.lower() in ctes):
            return None
        defn = ctx.catalog.get(table.name)
        if not isinstance(defn, cat.SignalDef):
            return None
        return {c.name.lower() for c in defn.channels}

    return merge_into_signal_selects(node, channels_of)
