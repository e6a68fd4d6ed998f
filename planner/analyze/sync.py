"""Rule: ``FROM control c SYNC JOIN signal s ON RANGE (a, b)`` becomes a named input.

A SYNC JOIN cuts, for each control row, the samples of a recorded signal between its two
bounds (planner/sync.py computes it). The SELECT holding it is rewritten to read the
result (``ir.SyncJoin``), and several SYNCs of one SELECT chain, each keyed by the
control's columns. The control may be a catalog stream or view, a CTE or subquery
(bound on its own), or an input earlier rules made (a windowed stream, a RESAMPLE, an
ISTREAM). When the same SELECT applies signal functions to the synced segments, it
becomes a signal stage over the SYNC's rows (planner/signals.py: bind_segment_select).

Example::

    SELECT e.id, s.ch1 FROM events e SYNC JOIN mic s ON RANGE (e.t_from, e.t_to)
    -- becomes
    SELECT e.id, s.ch1 FROM __wavesql_sync_0
    -- with the input __wavesql_sync_0 = SyncJoin(events AS e, mic AS s, t_from, t_to)
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import to_spark_sql
from wavesql.errors import Span, WaveSQLError
from wavesql.udfs import registry

from .. import ir
from ..ctes import inline_query
from ..signals import bind_segment_select
from ..sync import output_fields
from .context import BindContext, Found
from .resolve import resolve_input, resolve_relation
from .signal_stages import calls_signal_functions
from .tree import depth


def extract_syncs(node: exp.Expression, ctx: BindContext, found: Found) -> exp.Expression:
    """Bind every SELECT's SYNC JOINs; ``node`` rewritten (a copy) to read each result by
    its input's name."""
    if not any(j.args.get("sync") is not None for j in node.find_all(exp.Join)):
        return node
    # the inputs earlier rules made of the FROM (a windowed stream, a RESAMPLE, an
    # ISTREAM): the control may be one of them
    derived = dict(found.made)
    node = node.copy()
    # each SELECT's inline control (a CTE, a subquery), taken before any SYNC inside it is
    # rewritten below: a control that SYNCs itself (a SYNC result as another SYNC's
    # control) is then bound whole, its own SYNC JOIN with it -- its rewritten text would
    # read the inner SYNC's internal input, which only this query has
    inlines = {id(s): inline_query(s.args["from_"].this, s) for s in node.find_all(exp.Select)
               if s.args.get("from_") is not None}
    inputs: list[tuple[str, ir.Relation]] = []
    for select in sorted(node.find_all(exp.Select), key=lambda n: -depth(n)):
        joins = select.args.get("joins") or []
        syncs = [j for j in joins if j.args.get("sync") is not None]
        if not syncs:
            continue
        if len(syncs) != len(joins):
            other = next(j for j in joins if j.args.get("sync") is None)
            raise WaveSQLError("NOT_IMPLEMENTED", "a SYNC JOIN is implemented with other SYNC "
                               "JOINs only, not with other joins in its SELECT", Span.of(other),
                               hint="SYNC in a view or subquery, then join its result")
        control_table = select.args["from_"].this
        inline = inlines.get(id(select))
        if inline is not None:  # a CTE or a subquery: bound as a view of its own -- its
            # text as the earlier rules left it may read an input they made (a windowed
            # CTE reads __wavesql_window_0), so those names are readable while it binds
            alias = control_table.alias_or_name or f"__wavesql_control_{len(inputs)}"
            named = f"__wavesql_control_{len(inputs)}"
            derived = {**derived, named: ctx.reading(dict(found.made)).bind_query(inline)}
            control_table = exp.Table(this=exp.to_identifier(named),
                                      alias=exp.TableAlias(this=exp.to_identifier(alias)))
        if not isinstance(control_table, exp.Table):
            raise WaveSQLError("NOT_IMPLEMENTED", "SYNC JOIN reads its control from a stream, "
                               "view, CTE or subquery", Span.of(syncs[0]),
                               hint="name the control rows in a WITH clause")
        control = resolve_input(control_table, ctx, derived)
        calias = control_table.alias_or_name
        rel: ir.Relation = control
        synced: list[tuple[str, cat.SignalDef, exp.Table]] = []  # (alias, signal, its table)
        for join in syncs:
            rel = _bind_sync(join, rel, control, control_table, calias, synced, ctx)
        name = f"__wavesql_sync_{len(inputs)}"
        for join in syncs:
            join.pop()
        from_table = exp.Table(this=exp.to_identifier(name))
        select.set("from_", exp.From(this=from_table))
        expressions = []
        for e in select.expressions:
            if isinstance(e, exp.Star):
                expressions += [exp.Column(this=exp.Star(), table=exp.to_identifier(a))
                                for a in [calias] + [a for a, _, _ in synced]]
            else:
                expressions.append(e)
        select.set("expressions", expressions)
        if calls_signal_functions(select):
            # seg_rms(s.ch1) over the synced segments, in the same SELECT: a signal stage
            # over the SYNC's rows (planner/signals.py: bind_segment_select)
            _refuse_shared_channel_names(select, control, synced)
            stage = bind_segment_select(select, from_table, rel, "SYNC JOIN", f"{name}_stage",
                                        fold=ctx.env.constant,
                                        qualifiers=tuple(a for a, _, _ in synced))
            inputs.append((f"{name}_stage", stage))
        else:
            inputs.append((name, rel))
    found.made.extend(inputs)
    return node


def _refuse_shared_channel_names(select: exp.Select, control: ir.Relation,
                                 synced: list) -> None:
    """Signal functions read a SYNC result's channels by their names, which must then be
    unique among the control's columns and the signals' channels: ``a.ch1`` of a signal
    whose ``ch1`` another one has too is refused at the reference, saying how to rename
    (rather than ``TYPE_ERROR``: the name is right, the stage cannot tell the two apart)."""
    names = [f.name.lower() for f in control.schema.fields]
    names += [c.name.lower() for _, d, _ in synced for c in d.channels]
    aliases = {a.lower(): d for a, d, _ in synced}
    # a channel read inside a signal function call (``a.ch1`` elsewhere reads the struct
    # ``a``'s field, which works whatever the names)
    calls = [c for c in select.find_all(exp.Anonymous) if registry.lookup(c.name) is not None]
    for column in (col for call in calls for col in call.find_all(exp.Column)):
        signal = aliases.get(column.table.lower()) if column.table else None
        if signal is None or names.count(column.name.lower()) < 2:
            continue
        raise WaveSQLError(
            "NOT_IMPLEMENTED", f"signal functions over `{column.sql()}`: channel "
            f"`{column.name}` is the name of another synced channel or control column too",
            Span.of(column), hint=f"define the signal under channel names of its own, e.g. "
            f"CREATE SIGNAL {signal.name}_2 ({signal.name}_{column.name} FLOAT, ...) RATE "
            f"{signal.rate_hz:g} HZ FROM '<its folder>' FORMAT wav, and SYNC that")


def _bind_sync(join: exp.Join, previous: ir.Relation, control: ir.Relation,
               control_table: exp.Table, calias: str, synced: list, ctx: BindContext
               ) -> ir.SyncJoin:
    """One ``SYNC JOIN signal ON RANGE (...)`` of a SELECT over ``previous`` (the control,
    or the SYNC JOIN before it: several SYNCs of one SELECT chain, each keyed by the
    control's columns). Appends ``(alias, signal, table)`` to ``synced``."""
    signal_table = join.this
    if not isinstance(signal_table, exp.Table):
        raise WaveSQLError("NOT_IMPLEMENTED", "SYNC JOIN reads a named control stream "
                           "(or view) and a named signal", Span.of(join),
                           hint="make the control a CREATE VIEW")
    defn = ctx.catalog.get(signal_table.name)
    if not isinstance(defn, cat.SignalDef):
        raise WaveSQLError("STREAMING_RULE", f"SYNC JOIN needs a signal, `{signal_table.name}`"
                           " is not one", Span.of(signal_table),
                           hint="SYNC aligns recorded signals; join event streams with JOIN")
    if signal_table.args.get("window") is not None:
        raise WaveSQLError("INVALID_OPTION", "a SYNC JOIN takes its ranges from the control "
                           "rows, not from a window", Span.of(signal_table.args["window"]))
    salias = signal_table.alias_or_name
    taken = [calias] + [a for a, _, _ in synced]
    if salias.lower() in (a.lower() for a in taken):
        raise WaveSQLError("INVALID_OPTION", f"`{salias}` names two inputs of this SELECT",
                           Span.of(signal_table), hint=f"give it another alias: "
                                                       f"SYNC JOIN {signal_table.name} AS s2")
    signal = resolve_relation(signal_table.name, signal_table.this, ctx)
    sync = join.args["sync"]
    start_sql, end_sql = to_spark_sql(sync.args["start"]), to_spark_sql(sync.args["end"])
    # Analyse the bounds now: an unknown column or a wrong type is a bind-time error.
    probe = ctx.env.analyze(
        f"SELECT {start_sql} AS a, {end_sql} AS b FROM {control_table.name} AS {calias}",
        ((control_table.name.lower(), control),), None)
    for field, bound in zip(probe.fields, (sync.args["start"], sync.args["end"])):
        if not (field.type.startswith(("timestamp", "decimal")) or field.type in
                ("bigint", "int", "smallint", "tinyint", "double", "float")):
            raise WaveSQLError("TYPE_ERROR", f"a SYNC range bound must be a TIMESTAMP, a "
                               f"sample number (BIGINT) or seconds (DOUBLE), not {field.type}",
                               Span.of(bound),
                               hint="e.g. ON RANGE (d.t_from, d.t_to) with TIMESTAMP columns")
    synced.append((salias, defn, signal_table))
    fields = output_fields(control.schema.fields,
                           [(a, [c.name for c in d.channels]) for a, d, _ in synced], calias)
    schema = ir.Schema(tuple(ir.Field(n, t) for n, t in fields))
    return ir.SyncJoin(previous, calias, signal, salias, start_sql, end_sql,
                       sync.args.get("missing") or "NULL", schema,
                       previous.bounded and signal.bounded,
                       carried=tuple((a, tuple(c.name for c in d.channels))
                                     for a, d, _ in synced[:-1]))
