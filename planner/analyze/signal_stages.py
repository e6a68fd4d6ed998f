"""Rule: every SELECT over a signal is split into a signal stage plus Spark SQL.

A SELECT whose FROM is a catalog signal (or a catalog view whose rows carry segments)
becomes a named input, an ``ir.SignalStage`` that computes its signal functions next to
the samples in one Python pass, and the SELECT reads the stage's columns instead
(planner/signals.py builds the stage). Signal functions over the segments of a subquery
or CTE make a stage over that inline relation's rows, bound on its own. Deepest first, so
an inner SELECT is rewritten before anything that contains it.

Example::

    SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]
    -- becomes
    SELECT mic._sig0 AS t, mic._sig1 AS rms FROM __wavesql_mic_0 AS mic
    -- with the input __wavesql_mic_0 = SignalStage(mic in windows of 4096 samples,
    --                                              a program computing _sig0 and _sig1)
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.errors import Span, WaveSQLError
from wavesql.udfs import registry
from wavesql.udfs.program import SPARK_TYPES

from .. import ir
from ..ctes import cte_names, inline_query
from ..signals import bind_segment_select, bind_signal_select
from .context import BindContext, Found
from .resolve import resolve_relation
from .tree import depth, follow, path_to

#: The Spark type of a column of segments, spaces removed (as schemas are compared).
_SIGSEG = SPARK_TYPES["sigseg"].replace(" ", "")


def extract_signal_stages(node: exp.Expression, ctx: BindContext, found: Found
                          ) -> exp.Expression:
    """Split every SELECT over a catalog signal into a signal stage plus Spark SQL;
    ``node`` rewritten (a copy) to read each stage by its input's name."""
    node, stages = _segments_of_inline_relations(node, ctx, found)
    selects = [s for s in node.find_all(exp.Select) if _signal_of(s, ctx) is not None]
    if not selects:
        found.made.extend(stages)
        return node
    node = node.copy()
    ctes = cte_names(node)
    # Deepest first, so an inner SELECT is rewritten before anything that contains it.
    for select in sorted(node.find_all(exp.Select), key=lambda s: -depth(s)):
        signal = _signal_of(select, ctx, ctes)
        if signal is None:
            continue
        table, defn = signal
        for join in select.args.get("joins") or []:
            raise WaveSQLError("NOT_IMPLEMENTED", "joining a signal is not implemented yet",
                               Span.of(join), hint="align rows with a signal's samples by "
                               "SYNC JOIN (SELECT ... FROM events e SYNC JOIN mic m ON RANGE "
                               "(e.t_from, e.t_to)), or select from the signal in a subquery "
                               "and join its results")
        view = f"__wavesql_{defn.name}_{len(stages)}"
        if isinstance(defn, cat.SignalDef):
            stage = bind_signal_select(select, table, defn, view, fold=ctx.env.constant)
        else:  # a catalog view whose rows carry segments
            source = resolve_relation(defn.name, table.this, ctx)
            stage = bind_segment_select(select, table, source, defn.name, view,
                                        fold=ctx.env.constant)
        stages.append((view, stage))
    found.made.extend(stages)
    return node


def calls_signal_functions(select: exp.Select) -> bool:
    """Whether ``select`` itself (not a nested SELECT) calls a signal function."""
    return any(registry.lookup(call.name) is not None
               and call.find_ancestor(exp.Select) is select
               for call in select.find_all(exp.Anonymous))


def _segments_of_inline_relations(node: exp.Expression, ctx: BindContext, found: Found):
    """Signal functions over the segments of a subquery or CTE (``SELECT seg_rms(ch1), t
    FROM (SELECT ch1, start_time(ch1) AS t FROM mic [SAMPLES 512]) s``): the inline
    relation is bound on its own (its signal stage included) and the SELECT becomes a
    segment stage over its rows, as over a catalog view. Shallowest SELECT first: an outer
    one takes its inline relation whole, before anything inside is rewritten.

    Returns ``node`` (a copy if anything changed) and the stages as named inputs."""
    stages: list = []
    if not any(registry.lookup(c.name) is not None for c in node.find_all(exp.Anonymous)):
        return node, stages
    copied = False
    for select in sorted(node.find_all(exp.Select), key=depth):
        source = (select.args.get("from_").this if select.args.get("from_") is not None
                  else None)
        if source is None or select.args.get("joins") or not calls_signal_functions(select) \
                or source.find_ancestor(exp.Select) is not select:
            continue
        if isinstance(source, exp.Table) and not isinstance(source.this, exp.Identifier):
            continue
        relation = _segment_source(source, select, ctx, found)
        if relation is None or not any(f.type.lower().replace(" ", "") == _SIGSEG
                                       for f in relation.schema.fields):
            continue
        if not copied:  # rewrite a copy, found again by position
            path = path_to(select, node)
            node, copied = node.copy(), True
            select = follow(node, path)
            source = select.args["from_"].this
        name = f"__wavesql_segments_{len(stages)}"  # (temporal.py names its own *_inline_*)
        alias = source.alias_or_name
        table = exp.Table(this=exp.to_identifier(name),
                          alias=exp.TableAlias(this=exp.to_identifier(alias)))
        cte_name = source.name.lower() if isinstance(source, exp.Table) else None
        if isinstance(relation, ir.WindowScan):  # (the CTE it windows: bound in it)
            cte_name = relation.stream.lower()
            _refuse_state_over_windows(select)
        source.replace(table)
        if cte_name is not None:
            _drop_unused_cte(node, cte_name)
        view = f"{name}_stage"
        stages.append((view, bind_segment_select(select, table, relation, alias, view,
                                                 fold=ctx.env.constant)))
    return node, stages


def _refuse_state_over_windows(select: exp.Select) -> None:
    """A stateful signal function over a CQL window's rows has no order to carry its
    state along: a sliding window holds a row at several instants."""
    for call in select.find_all(exp.Anonymous):
        fn = registry.lookup(call.name)
        if fn is not None and fn.stateful and call.find_ancestor(exp.Select) is select \
                and call.find_ancestor(exp.With) is None:  # (its own calls)
            raise WaveSQLError(
                "NOT_IMPLEMENTED", f"stateful signal function `{fn.name}` over a window's "
                "rows: a window holds a row at each of its instants, so the segments have no "
                "one order to carry state along", Span.of(call),
                hint="apply it before the window, in the CTE, subquery or view the window "
                     "reads")


def _segment_source(source: exp.Expression, select: exp.Select, ctx: BindContext,
                    found: Found) -> ir.Relation | None:
    """The relation whose segment columns ``select``'s signal functions read, when it is
    not a catalog signal or view: a CTE or subquery bound on its own; a window an earlier
    rule made of one, or of a stream (``FROM q [RANGE 2 SECONDS]``, now
    ``__wavesql_window_0``); or a catalog stream whose rows carry segments (the stream of
    a continuous query's part, streaming/derived.py). None for anything else."""
    inline = inline_query(source, select)
    if inline is not None:
        # (its text as earlier rules left it may read an input they made: a SYNC CTE
        # reads __wavesql_sync_0, so those names are readable while it binds)
        return ctx.reading(dict(found.made)).bind_query(inline)
    if not isinstance(source, exp.Table) or source.args.get("db"):
        return None
    made = {n.lower(): r for n, r in found.made}.get(source.name.lower())
    if made is not None:
        return made if isinstance(made, ir.WindowScan) else None
    defn = ctx.catalog.get(source.name)
    if isinstance(defn, cat.StreamDef) and source.args.get("window") is None \
            and _has_segments(defn):
        return resolve_relation(defn.name, source.this, ctx)
    return None


def _drop_unused_cte(node: exp.Expression, name: str) -> None:
    """Remove CTE ``name`` when no table reads it any more (it was bound on its own)."""
    if any(t.name.lower() == name for t in node.find_all(exp.Table)
           if isinstance(t.this, exp.Identifier)):
        return
    for cte in list(node.find_all(exp.CTE)):
        if cte.alias_or_name.lower() == name:
            with_ = cte.parent
            cte.pop()
            if isinstance(with_, exp.With) and not with_.expressions:
                with_.pop()


def _signal_of(select: exp.Select, ctx: BindContext, ctes: set[str] = frozenset()):
    """``(table, definition)`` when ``select`` reads a catalog signal, or a catalog view of
    segments that it windows or applies signal functions to; else None."""
    from_ = select.args.get("from_")
    table = from_.this if from_ is not None else None
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        return None
    if table.args.get("db") or table.name.lower() in ctes:
        return None
    defn = ctx.catalog.get(table.name)
    if isinstance(defn, cat.SignalDef):
        return table, defn
    window = table.args.get("window")
    if isinstance(defn, cat.ViewDef) and _has_segments(defn) and (
            (window is not None and window.kind == "SAMPLES") or
            any(registry.lookup(c.name) is not None for c in select.find_all(exp.Anonymous))):
        return table, defn
    return None


def _has_segments(view: cat.ViewDef) -> bool:
    return any(c.type.lower().replace(" ", "") == _SIGSEG for c in view.columns)
