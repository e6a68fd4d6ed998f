"""What the window rules recognise in a query's Spark SQL.

planner/physical/chunked_windows.py and planner/physical/fused_chains.py take OVER windows
that Spark would run in one partition out of the SQL text. Both ask the same questions of
a sqlglot tree, answered here: is a call one of the aggregates the numpy kernels evaluate
(:data:`FUNCTIONS`, :func:`aggregate_call`); how far back and forward does a RANGE frame
reach (:func:`frame_shape`); which catalog stream does a SELECT read as it is, so that a
pass may read its Parquet files itself (:func:`direct_stream`); and what the settings that
switch the rules say (:func:`windows_mode`, :func:`min_rows`).
"""

from __future__ import annotations

from sqlglot import exp

from wavesql import settings
from wavesql.dialect import to_spark_sql

from ..ctes import visible_ctes

#: The aggregates the kernels evaluate over a frame (udfs/time_windows.py's names).
FUNCTIONS = {
    exp.Sum: "sum", exp.Avg: "avg", exp.Count: "count", exp.Min: "min", exp.Max: "max",
    exp.StddevPop: "stddev_pop", exp.StddevSamp: "stddev_samp", exp.Stddev: "stddev_samp",
    exp.VariancePop: "var_pop", exp.Variance: "var_samp",
}


def windows_mode(spark) -> str:
    """``wavesql.windows.chunked``: ``true`` (default): chunk un-partitioned windows, the
    ones Spark runs in a single partition; ``all``: PARTITION BY windows too; ``false``:
    never (and no fused chains either)."""
    return settings.get(spark, "wavesql.windows.chunked")


def min_rows(spark) -> int:
    """Below this many (estimated) rows the windows stay Spark's
    (``wavesql.windows.min_rows``): a Python pass's set-up, and the chunked pass's shuffle,
    pay only where Spark's single-partition window is slow."""
    return settings.get(spark, "wavesql.windows.min_rows")


def depth(node) -> int:
    """How many nodes lie above ``node`` in its tree."""
    d = 0
    while node.parent is not None:
        node, d = node.parent, d + 1
    return d


def frame_shape(window: exp.Window):
    """``((partition sql, order sql), (func, arg, before, after))`` of a RANGE-framed
    aggregate window the kernels evaluate, or None."""
    from ..types import interval_us

    call = aggregate_call(window.this)
    if call is None or window.args.get("alias"):
        return None
    name, arg = call
    order = window.args.get("order")
    spec = window.args.get("spec")
    if order is None or len(order.expressions) != 1 or spec is None:
        return None
    key = order.expressions[0]
    if key.args.get("desc"):  # NULLS FIRST/LAST: NULL times are peers of each other only
        return None
    if str(spec.args.get("kind") or "").upper() != "RANGE" or spec.args.get("exclude"):
        return None
    try:
        before = _bound(spec.args.get("start"), spec.args.get("start_side"), interval_us)
        after = _bound(spec.args.get("end"), spec.args.get("end_side"), interval_us)
    except Exception:  # noqa: BLE001 -- not an interval bound: Spark's window
        return None
    if before is None or after is None:
        return None
    before, after = -before, after  # start: t - before; end: t + after
    if before < 0 or after < -before:
        return None
    partition = tuple(to_spark_sql(p) for p in window.args.get("partition_by") or ())
    return (partition, to_spark_sql(key.this)), (name, arg, before, after)


def aggregate_call(func, functions=None):
    """``(name, argument)`` of a call to one of ``functions`` (default :data:`FUNCTIONS`)
    with one argument (None for ``count(*)``), no DISTINCT; None for any other call."""
    name = (functions or FUNCTIONS).get(type(func))
    if name is None or isinstance(func, exp.Distinct) or any(
            isinstance(a, exp.Distinct) for a in func.args.values()):
        return None
    arg = func.this
    if isinstance(arg, exp.Star):
        return (name, None) if name == "count" else None
    if arg is None or len([v for k, v in func.args.items()
                           if v not in (None, []) and k != "big_int"]) > 1:
        return None
    return name, arg


def _bound(value, side, interval_us):
    """Signed offset (us) of a frame bound from the current row, None if not an interval."""
    if value is None:
        return None
    if isinstance(value, str):
        return 0 if value.upper() == "CURRENT ROW" else None
    if not isinstance(value, exp.Interval):
        return None
    us = interval_us(value)
    side = str(side or "").upper()
    if side == "PRECEDING":
        return -us
    if side == "FOLLOWING":
        return us
    return None


def direct_stream(select: exp.Select, scans: dict):
    """The catalog stream ``select`` reads (no CTE of that name in the way), if its files
    may be read straight by a pass; else None. ``scans``: lower-case input name -> the
    catalog stream it scans as it is (``SqlPlan.scans``). (A WHERE is checked later: the
    chunked pass applies it when planner/physical/row_filter.py can say it exactly.)"""
    table = select.args["from_"].this
    if table.args.get("db") is not None:
        return None
    stream = scans.get(table.name.lower())
    if stream is None or stream.format != "parquet" or dict(stream.options):
        return None
    if any(c.alias_or_name.lower() == table.name.lower() for c in visible_ctes(select)):
        return None
    return stream
