"""What of a stream's past rows a continuous query's windows still need: its look-back.

The re-evaluating runner (:mod:`.runner`) keeps, per input, only the rows later instants
can still need, so its state is bounded by the windows, not by the stream's length. The
rules here say which rows those are, as :attr:`.plan.Input.lookback` records them: a CQL
window's (``RANGE r`` keeps ``r``, ``SLIDE`` keeps ``r + s``, ``ROWS n`` the last ``n``
rows per partition) and an OVER window's (its bounded PRECEDING frame, summed along
windows nested over each other). A window that would need the whole stream, or its future,
is refused here with the reason, before anything runs.
"""

from __future__ import annotations

from sqlglot import exp

from wavesql.catalog import objects as cat
from wavesql.dialect import unqualified
from wavesql.errors import Span, WaveSQLError
from wavesql.sqltext import quote

from .plan import KeepRows, KeepTime


def window_lookback(specs, stmt) -> tuple:
    """Look-back rules of the CQL windows ``specs`` over one stream."""
    rules = []
    for s in specs:
        if s.kind == "UNBOUNDED":
            raise WaveSQLError("STREAMING_RULE", "[RANGE UNBOUNDED] would keep every row of a "
                               "stream forever", Span.of(stmt.node),
                               hint="use a bounded window such as [RANGE 1 HOUR]")
        if s.kind in ("ROWS", "PARTITION_ROWS"):
            rules.append(KeepRows(tuple(s.partition_by), s.size))
        else:
            # SLIDE: the instant before the first new one reaches back r + s.
            rules.append(KeepTime({"RANGE": s.size, "SLIDE": s.size + s.slide,
                                   "NOW": 1}[s.kind]))
    return tuple(rules)


def nested_lookback(tree, stream: cat.StreamDef, stmt) -> list:
    """Look-back rules of the OVER windows in ``tree``, summed along nested windows.

    A window over the output of another (RSI: ``sum(...) OVER (RANGE 13 ms)`` over a CTE
    computing ``v - lag(v)``) needs, for its rows at or after progress, the inner window's
    rows of its own look-back, and each of those the inner window's look-back: the chain's
    look-backs add up. Along each chain of nested windows (a SELECT's windows, over the
    SELECTs its FROM reads: CTEs and subqueries) the time look-backs sum to ``T`` and the
    rows look-backs to ``R``: the rule keeps event time >= progress - ``T`` and the last
    ``R`` rows before that per partition of each rows window in the chain
    (``KeepRows(keys, R, passes, T)``). The bound is exact for rows windows inside time
    windows (RSI), and for time windows inside rows windows when the rows are not sparser
    than the time window (``T`` before progress holds a row).
    """
    ctes = {c.alias_or_name.lower(): c.this for c in tree.find_all(exp.CTE)}
    seen: set[int] = set()

    def chains_of(query, depth=0) -> list[list]:
        if depth > 50:
            return [[]]
        if isinstance(query, exp.Subquery):
            return chains_of(query.this, depth + 1)
        if isinstance(query, exp.SetOperation):
            return (chains_of(query.this, depth + 1)
                    + chains_of(query.expression, depth + 1))
        if not isinstance(query, exp.Select):
            return [[]]
        mine = [w for w in query.find_all(exp.Window) if w.find_ancestor(exp.Select) is query]
        seen.update(id(w) for w in mine)
        own = [_over_lookback(w, stream, stmt) for w in mine]
        sources = []
        frm = query.args.get("from_") or query.args.get("from")
        for src in ([frm.this] if frm is not None else []) + [
                j.this for j in query.args.get("joins") or ()]:
            if isinstance(src, exp.Subquery):
                sources += chains_of(src.this, depth + 1)
            elif isinstance(src, exp.Table) and src.name.lower() in ctes:
                sources += chains_of(ctes[src.name.lower()], depth + 1)
        sources = sources or [[]]
        return [([w] if w is not None else []) + c for w in (own or [None]) for c in sources]

    chains = chains_of(tree)
    # windows off the FROM chains (e.g. in a scalar subquery): their own look-back
    chains += [[_over_lookback(w, stream, stmt)] for w in tree.find_all(exp.Window)
               if id(w) not in seen]
    rules = []
    for chain in chains:
        if not chain:
            continue
        time_us = sum(r.us for r in chain if isinstance(r, KeepTime))
        rows = [r for r in chain if isinstance(r, KeepRows)]
        if not rows:
            rules.append(KeepTime(time_us))
            continue
        total = sum(r.n for r in rows)
        rules += [KeepRows(r.keys, total, r.passes, time_us) for r in rows]
    return rules


#: Window functions that look forward or back to the start of the stream.
_UNBOUNDED_FUNCTIONS = (exp.Lead, exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile,
                        exp.PercentRank, exp.CumeDist)


def _over_lookback(window: exp.Window, stream: cat.StreamDef, stmt) -> KeepTime | KeepRows:
    """The look-back of one OVER window, or an error saying why it is unbounded."""
    from wavesql.dialect import to_spark_sql
    from wavesql.planner.types import interval_us, number

    def refuse(message, hint):
        raise WaveSQLError("STREAMING_RULE", message, Span.of(stmt.node), hint=hint)

    frame_hint = (f"e.g. avg(v) OVER (ORDER BY {stream.event_time} RANGE BETWEEN INTERVAL "
                  "20 SECONDS PRECEDING AND CURRENT ROW)")
    order = window.args.get("order")
    keys = order.expressions if order is not None else []
    if (len(keys) != 1 or keys[0].args.get("desc") or not isinstance(keys[0].this, exp.Column)
            or keys[0].this.name.lower() != stream.event_time.lower()):
        refuse(f"an OVER window over a stream must be ORDER BY its event time "
               f"{quote(stream.event_time)}", frame_hint)
    partition = tuple(to_spark_sql(unqualified(e)) for e in window.args.get("partition_by") or ())
    # A ROWS frame counts the rows that pass the SELECT's WHERE (it filters before the
    # window), so the look-back keeps the last n rows *that pass it*.
    select = window.find_ancestor(exp.Select)
    where = select.args.get("where") if select is not None else None
    passes = to_spark_sql(unqualified(where.this)) if where is not None else None
    func = window.this
    if isinstance(func, exp.Lag):
        offset = func.args.get("offset")
        return KeepRows(partition, int(number(offset)) if offset is not None else 1, passes)
    if isinstance(func, _UNBOUNDED_FUNCTIONS):
        refuse(f"`{func.sql()}` needs the whole stream (or its future) in a continuous query",
               "use lag() or an aggregate over a bounded PRECEDING frame")
    spec = window.args.get("spec")
    if (spec is None or str(spec.args.get("end")).upper() != "CURRENT ROW"
            or str(spec.args.get("start_side") or "").upper() != "PRECEDING"
            or str(spec.args.get("start")).upper() == "UNBOUNDED"):
        refuse("an OVER window over a stream needs a bounded frame ending at the current row",
               frame_hint)
    if str(spec.args.get("kind")).upper() == "RANGE":
        return KeepTime(interval_us(spec.args["start"]))
    return KeepRows(partition, int(number(spec.args["start"])), passes)
