"""Rule (the last): resolve every table the rewritten query still reads by name.

After the other rules, the query is plain Spark SQL over two kinds of names: the inputs
the rules made (``found.made``: ``__wavesql_window_0``, a signal stage...) and the names
the user wrote, which are catalog objects, Spark tables or typos. This rule resolves the
second kind (planner/analyze/resolve.py) into ``found.read``, so that an unknown name is a
WaveSQL error with the names it may have meant, and a catalog stream or view becomes an
input Spark can read. CTE names are the query's own and are skipped.

Example::

    WITH big AS (SELECT * FROM trades WHERE qty > 100) SELECT * FROM big JOIN ref USING (sym)
    -- unchanged; found.read = (("trades", StreamScan(trades)),)
    -- ("ref", a table of Spark's, needs no input; an unknown name is UNKNOWN_STREAM)
"""

from __future__ import annotations

from sqlglot import exp

from .context import BindContext, Found
from .resolve import bind_inputs


def read_inputs(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Resolve the names ``node`` reads, besides the inputs the rules made."""
    found.read = bind_inputs(node, ctx, skip={name for name, _ in found.made})
    return node
