"""Fused query chains: a chain of SELECTs over a catalog Parquet stream evaluated in one
numpy pass per range of event time -- TiLT's whole-query compilation.

Rule :func:`fuse_chains`. TiLT's RSI is three SELECTs: ``d = v - lag(v) OVER (ORDER BY
ts)``, two sums of CASEs over ``d`` in 14 ms RANGE frames, and an expression over the sums.
In Spark the ``lag`` runs in **one partition** (no PARTITION BY to split on) after a scan,
a shuffle and a sort, and every level's rows cross between the JVM and the Python window
kernel. Here the chain is compiled once on the driver into a
:class:`udfs.fused.Program` (planner/physical/fused_compiler.py: scalar expressions,
WHEREs, ``lag`` and RANGE windows ordered by the event time) and each Spark task reads one
range of the stream's files (sources/parquet_chunks.py) plus enough rows before it for
every level's reach, evaluates the whole chain in numpy and returns only its own rows
(planner/physical/fused_pass.py): nothing in between crosses into the JVM, and all ranges
run in parallel. How far back is enough is decided as the chain runs
(:func:`udfs.fused.run`): the sum of the levels' frame reaches and, for ``lag``, a
guess from the stream's density, doubled until every own row is complete.

Where: batch queries, for the outermost SELECT whose chain of FROMs (CTEs or subqueries,
each one plain SELECT: no join, GROUP BY, HAVING, DISTINCT, ORDER BY or LIMIT but at the
top or right below a total) ends at

- a catalog Parquet stream read as it is, with at least one window in the chain;
- a tumbling CQL window over one (``FROM s [RANGE w SLIDE w]``: the pass computes
  ``_time``, and the ranges are cut on window boundaries so that each owns whole
  windows), with a window or a GROUP BY in the chain;
- a direct RESAMPLE of one (planner/physical/direct_resample.py), through scalar SELECTs
  under a total, computed in the pass that makes each range's grid points.

The windows are ``lag(x [, n [, literal]]) OVER (ORDER BY <event time>)`` and the aggregates
of :data:`udfs.time_windows.FUNCTIONS` over RANGE frames ending at or before the row, with
or without PARTITION BY; over a tumbling window, aggregates of the whole window instant
(``agg(x) OVER ()``, which WaveSQL partitions by ``_time``: TiLT's normalisation), and at
the top a GROUP BY that includes ``_time`` (an aggregate per window: TiLT's vibration and
YSB; ``sum avg count min max stddev* var* kurtosis skewness``, HAVING). No FOLLOWING
frames (planner/physical/chunked_windows.py takes those) and no partitioned ``lag`` (a
sparse key's previous row may lie anywhere before).

A *total* -- an aggregate without GROUP BY at the top (``SELECT count(*), sum(v) / count(v)
FROM (<chain>)``, also over a GROUP BY level) -- is computed as partial aggregates of each
range's own rows (``sum avg count min max``; ``avg`` as a DOUBLE sum and a count) and
merged by Spark in the SELECT's own expressions, so one row per range crosses into the JVM
instead of every row of the chain's result. A level may join a per-window aggregate
(planner/physical/fused_joins.py).

The expressions a level may hold are listed in planner/physical/fused_compiler.py; anything
else leaves the SELECT to the other plans (the chain below it may still be fused). The
result's names and types are Spark's own analysis of the SELECT; the chain is not fused
when the compiled types differ from it. Equal event times are ordered as the rows are
stored (Spark leaves the order of ``lag`` among equal ORDER BY values unspecified).

``SET wavesql.fused = false`` turns it off (``wavesql.windows.chunked = false`` too); inputs
under ``wavesql.windows.min_rows`` rows (100,000) keep the other plans.
"""

from __future__ import annotations

import dataclasses
import itertools
import warnings

from sqlglot import exp

from wavesql import settings

from .. import ir
from ..ctes import visible_ctes
from .fused_compiler import is_total
from .fused_joins import LOOKUP_ROWS, lookup_join, renames
from .fused_pass import fused_frame
from .fused_types import Refuse
from .plan import SqlPlan
from .sql_shapes import depth, direct_stream, windows_mode

_counter = itertools.count()
_PLAIN_SELECT = {"expressions", "from_", "where", "with_"}


class FusedChainWarning(RuntimeWarning):
    """Compiling a chain failed unexpectedly (a bug): the query ran on the other plans."""


def fuse_chains(plan: SqlPlan) -> SqlPlan:
    """``plan`` with its fusable SELECT chains read from fused passes, each a view added to
    ``plan.views``, or with its whole result when the query is one chain; ``plan`` itself
    when none applies (module docstring)."""
    rel = plan.query
    # the inputs that are a tumbling CQL window over a catalog stream
    tumbling = {name.lower(): (r.input.stream, r.window.size) for name, r in rel.inputs
                if isinstance(r, ir.WindowScan) and isinstance(r.input, ir.StreamScan)
                and not r.joint
                and r.window.kind == "SLIDE" and r.window.size == r.window.slide
                and not r.window.partition_by
                and r.time_column.lower() == (r.input.stream.event_time or "").lower()}
    resampled = {name.lower(): r for name, r in rel.inputs
                 if isinstance(r, ir.SqlQuery) and r.resample is not None
                 and not r.resample.keys}  # a series per key: no direct plan to fuse into
    tree, views, whole = fuse(plan.read(), plan.inputs(), plan.rt, plan.scans(),
                                 rel.schema, tumbling, resampled)
    if whole is not None:
        return dataclasses.replace(plan, result=whole)
    if not views:
        return plan
    return dataclasses.replace(plan, tree=tree, views={**plan.views, **views})


def fuse(tree: exp.Expression, inputs, rt, scans, schema=None, tumbling=None,
         resampled=None):
    """``(tree, views, whole)``: a copy of the query's AST ``tree`` with its fusable SELECT chains
    read from fused passes, each registered under a view name in ``views`` (name ->
    DataFrame); ``whole`` the DataFrame of the whole query when it is one fused chain (else
    None); ``tree`` itself (no views) when none applies. ``schema``: the query's result
    (ir.Schema), as Spark's analysis gave it at binding; ``tumbling``: lower-case input name
    -> ``(stream, width)`` of the inputs that are a tumbling CQL window (``[RANGE w SLIDE
    w]``) over a catalog stream; ``resampled``: lower-case input name -> the RESAMPLE
    (ir.SqlQuery) of the inputs that are one (a total over it is computed where its grid
    points are made). ``inputs``: ``(name, DataFrame)`` the query reads; ``scans``:
    ``SqlPlan.scans``."""
    spark = rt.spark
    tumbling, resampled = tumbling or {}, resampled or {}
    if (rt.streams is not None or not (scans or tumbling or resampled)
            or (tree.find(exp.Window) is None and not (tumbling or resampled))
            or not settings.get(spark, "wavesql.fused")
            or windows_mode(spark) == "false"):
        return tree, {}, None
    given, tree = tree, tree.copy()
    views: dict = {}
    lookups: dict[str, int] = {}  # fused per-window aggregates: view -> at most how many rows
    fused: set[int] = set()  # ids of the SELECTs inside a fused chain
    # the relations some SELECT joins first (a chain may join them once they are fused
    # per-window aggregates), then the outermost chains first
    selects = sorted(tree.find_all(exp.Select), key=depth)
    joined = _joined_selects(tree)
    for select in [s for s in selects if id(s) in joined] + selects:
        if id(select) in fused or _root(select) is not tree:
            continue
        found = _chain(select, scans, tumbling, resampled, lookups)
        if found is None:
            continue
        levels, stream, table, width, joins = found
        try:
            resample = resampled.get(table.name.lower()) if stream is None else None
            df, rows = fused_frame(levels, stream, table, inputs + list(views.items()), rt,
                                   schema if select is tree else None, width, resample, joins)
        except Refuse:
            continue
        except Exception as err:  # noqa: BLE001 -- a planner bug must not fail the query
            warnings.warn(f"fused chain not used: {err!r}", FusedChainWarning, stacklevel=2)
            continue
        if df is None:
            continue
        if select is tree:
            return given, {}, df
        fused.update(id(s) for s in levels)
        name = f"__wavesql_fused_{next(_counter)}"
        views[name] = df
        if rows is not None and rows <= LOOKUP_ROWS:
            lookups[name.lower()] = rows
        select.replace(exp.select(exp.Star()).from_(exp.to_table(name)))
    if not views:
        return given, {}, None
    return tree, views, None


def _joined_selects(tree) -> set[int]:
    """Ids of the SELECTs that are the right side of a join (a subquery, or a CTE's)."""
    out = set()
    for select in tree.find_all(exp.Select):
        for join in select.args.get("joins") or []:
            right = join.this
            if isinstance(right, exp.Subquery) and isinstance(right.this, exp.Select):
                out.add(id(right.this))
            elif isinstance(right, exp.Table) and not right.args.get("db"):
                out.update(id(c.this) for c in visible_ctes(select)
                           if c.alias_or_name.lower() == right.name.lower())
    return out


def _root(node):
    while node.parent is not None:
        node = node.parent
    return node


def _chain(select: exp.Select, scans, tumbling, resampled=None, lookups=None):
    """``(levels bottom-up, stream, base table, tumbling width or None, joins)`` when
    ``select``'s FROMs lead through plain SELECTs to a catalog stream read straight from its
    files (or a tumbling window over one; or a RESAMPLE of one, ``stream`` None, when the
    chain is scalar SELECTs under a total); else None. A level may join one of ``lookups``
    (:func:`fused_joins.lookup_join`); ``joins``: id of the level -> what it joins."""
    levels, joins = [], {}
    node = select
    total = is_total(select)
    while True:
        # GROUP BY only at the top, or right below a total (an aggregate of the groups)
        top = node is select or (total and len(levels) == 1)
        if not isinstance(node, exp.Select):
            return None
        join = lookup_join(node, lookups or {}) if node.args.get("joins") else None
        if not _plain(node, top=top, join=join is not None):
            return None
        if join is not None:
            joins[id(node)] = join
        levels.append(node)
        source = node.args["from_"].this
        if renames(source):
            return None  # ``t(a, b)``: the columns by position -- the chain reads names
        if isinstance(source, exp.Subquery):
            if set(k for k, v in source.args.items() if v) - {"this", "alias"}:
                return None
            node = source.this
            continue
        if not isinstance(source, exp.Table) or set(
                k for k, v in source.args.items() if v) - {"this", "alias"}:
            return None
        ctes = [c for c in visible_ctes(node)
                if c.alias_or_name.lower() == source.name.lower()]
        if ctes:
            if renames(ctes[-1]):
                return None  # ``WITH t(a, b) AS (...)``
            node = ctes[-1].this
            continue
        stream, width = direct_stream(node, scans), None
        if stream is None and source.args.get("db") is None \
                and source.name.lower() in (resampled or {}):
            levels.reverse()
            scalar = not any(s.find(exp.Window) or s.args.get("group") for s in levels)
            return (levels, None, source, None, joins) if total and scalar else None
        if stream is None and source.args.get("db") is None \
                and source.name.lower() in tumbling:
            stream, width = tumbling[source.name.lower()]
            if stream.format != "parquet" or dict(stream.options):
                return None
        if stream is None:
            return None
        levels.reverse()
        has_window = any(w.find_ancestor(exp.Select) is s for s in levels
                         for w in s.find_all(exp.Window))
        grouped = width is not None and any(s.args.get("group") is not None for s in levels)
        return (levels, stream, source, width, joins) if has_window or grouped else None


def _plain(select: exp.Select, top: bool = False, join: bool = False) -> bool:
    """No join (but a lookup's, ``join``), DISTINCT, ORDER BY, LIMIT...; GROUP BY and HAVING
    only at the top."""
    allowed = _PLAIN_SELECT | ({"group", "having"} if top else set()) | (
        {"joins"} if join else set())
    return (select.args.get("from_") is not None
            and not {k for k, v in select.args.items() if v} - allowed)
