"""A stream's rows put through a view before the state store's kernel sees them.

A continuous RESAMPLE (:mod:`.resample_query`) or a continuous ASOF or interval join
(:mod:`.asof_query`, :mod:`.interval_query`) may read a view, CTE or subquery that is row
by row over one catalog stream (``streaming/plan.py`` :func:`row_by_row_stream`). Its
stream's rows are then

1. given their kind (punctuation, malformed, no event time: the stream row's), event time
   and promise (``__wm``: event time minus the WATERMARK, a punctuation's value) by the
   stream's own EVENT TIME -- every row, those the view drops too;
2. watermarked in Spark there (an input whose progress Spark keeps), or, for an input
   whose progress the driver keeps (a two-stream join's left one), also handed on as one
   promise row each (kind :data:`.plan.TICK`: no kernel reads it as data), so that rows
   the view drops move that progress too;
3. put through the view, row by row (a micro-batch's rows give the rows the view gives
   over the whole stream), the kind, promise, file and corrupt record carried
   (:func:`streaming.plan.carrying`), rows of those kinds passing the view's filters;
4. encoded for the kernel by the plan's per-row SQL over the view's columns.

The view passes the EVENT TIME through unchanged (``streaming/plan.py``
:func:`require_time_carried`), so a row the view keeps is late exactly when its stream row
is. After the kernel, the batch plan reads the rows handed back in place of the view
(:func:`substituted`).
"""

from __future__ import annotations

from dataclasses import replace

from wavesql.planner import ir
from wavesql.planner.temporal import quote

from . import plan as pl
from .processor import tick_filler, watermark_sql


def view_rows(query, frame, trigger: str, stream, view: ir.Relation, pre,
              watermark: bool = True):
    """``frame`` (``stream``'s rows as read) through ``view`` and encoded by ``pre`` for
    ``query`` (a :class:`~.query.StatefulQuery`): the module docstring's steps. With
    ``watermark`` False, ``__wm`` is kept as a column (every stream row's promise among
    the rows), not watermarked."""
    from pyspark.sql import functions as F

    from wavesql.planner.bad_rows import CORRUPT_COLUMN

    s = stream
    frame = (frame.withColumn("__kind", F.expr(f"CAST({pl.row_kind(s)} AS TINYINT)"))
             .withColumn("__ts", F.expr(f"coalesce(unix_micros({quote(s.event_time)}), 0L)")))
    frame = frame.withColumn("__wm", F.expr(watermark_sql(query._promised(s))))
    if trigger.startswith("every ") and s.heartbeat_us is not None:
        frame = frame.unionByName(query._ticker(frame, s.heartbeat_us, raw=True))
    if watermark:  # (its resume rows first, on a checkpoint that has them: resume.py)
        frame = query._resume_add(frame, raw=True).withWatermark("__wm", "0 seconds")
    promises = frame.select("__wm")
    frame = through_view(query, frame, s, view)
    for name, sql_text in pre:
        frame = frame.withColumn(name, F.expr(sql_text))
    keep = [n for n, _ in pre]
    if CORRUPT_COLUMN in frame.columns:  # (as the stream's own rows: query.py)
        frame = frame.withColumn("__record", F.col(quote(CORRUPT_COLUMN)))
        keep += ["__file", "__record"]
    if watermark:
        return frame.select(*keep)
    frame = frame.select(*keep, "__wm")
    special = {"__kind": F.lit(pl.TICK), "__bucket": F.lit(0), "__wm": F.col("__wm")}
    return frame.unionByName(promises.select(*[
        special.get(f.name, tick_filler(f.dataType)).cast(f.dataType).alias(f.name)
        for f in frame.schema.fields]))


def through_view(query, frame, stream, view: ir.Relation):
    """``frame`` (``stream``'s rows, kind and promise on) put through ``view``."""
    from wavesql.planner.bad_rows import CORRUPT_COLUMN
    from wavesql.planner.lower import Runtime, lower_relation
    from wavesql.streaming.plan import carrying

    types = {f.name: f.dataType.simpleString() for f in frame.schema.fields}
    carried = ["__kind", "__wm", "__file", CORRUPT_COLUMN]
    if stream.source == "kafka":
        carried.append("_timestamp")  # (its arrival time: plan.arrival)
    carried = tuple((n, types[n]) for n in carried if n in types)
    # The view's filters name __wm: Spark pushes a filter that does not name the
    # event-time column below the watermark (PushPredicateThroughNonJoin), and the rows
    # the view drops would then not move progress -- the stream's, by its EVENT TIME.
    view = carrying(view, carried, keep_if=(
        f"__kind IN ({pl.PUNCTUATION}, {pl.MALFORMED}, {pl.TICK}) "
        "OR (__wm IS NOT NULL AND __kind = -1)"))
    # (the view reads the stream by its own name, also where the join reads it as a copy
    # named apart: streaming/joins.py _apart)
    under = {r.stream.key for r in ir.walk(view) if isinstance(r, ir.StreamScan)}
    rt = Runtime(query.spark, query.session.catalog, query.text,
                 streams={key: frame for key in under | {stream.key}})
    return lower_relation(view, rt)


def substituted(rel: ir.Relation, old: ir.Relation, new: ir.Relation) -> ir.Relation:
    """``rel`` with the relation ``old`` (a view read by the kernel's input) replaced by
    ``new`` (its rows handed back, as a stream of the view's columns)."""
    if rel is old or rel == old:
        return new
    if isinstance(rel, ir.ViewRef):
        return replace(rel, body=substituted(rel.body, old, new))
    if isinstance(rel, ir.SqlQuery):
        return replace(rel, inputs=tuple((n, substituted(r, old, new)) for n, r in rel.inputs))
    return rel
