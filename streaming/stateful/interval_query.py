"""A continuous interval (band) join on Spark's state store: which ones run there, the
processor and the micro-batch.

A continuous query of the ``band`` shape (``streaming/joins.py`` :func:`plan_band`: one
inner, LEFT, RIGHT or FULL join of two catalog streams -- files or Kafka topics -- whose ON clause holds both
bounds of a band between their event times, row-by-row SQL around it) runs on the state
store when every column of either stream travels exactly through the kernel and each pair
of key columns (``a.k = b.k`` in the ON clause) holds the same kind of value on both sides
(:func:`.asof_plan.joined_streams`); else it stays on the re-evaluating runner and
``EXPLAIN STREAM`` says why.

It is the ASOF join's machinery (:mod:`.asof_query`) with another kernel
(:mod:`.interval`): both streams encoded alike (stream ``a`` as the left one, ``b`` as the
right one, plus ``__new``), grouped by a bucket of the keys (no keys: one bucket) into one
``transformWithStateInPandas`` with RocksDB; **progress per stream** -- ``b``'s is
Spark's watermark, ``a``'s the driver's versioned record per micro-batch handed to the
buckets as a Spark local property -- so a row is late below its own stream's progress and
``_progress`` is the smaller of the two. Each bucket hands back the new rows that can pair
and the kept rows a new row can pair with; the micro-batch evaluates the batch plan over
(new ``a``, every ``b`` handed back) and (kept ``a``, new ``b``): every pair once, final as
it is emitted, as on the re-evaluating runner (``streaming/runner.py``).
"""

from __future__ import annotations

from .. import plan as stream_plan
from . import interval as kernel
from .asof_plan import (AsofPlan, encoded_rows, encoded_types, joined_streams, output_ddl,
                        over_views, view_columns)
from .asof_query import AsofProcessor, StatefulAsofQuery
from .plan import NotIncremental


def recognize_interval(plan: stream_plan.Plan, emit_changes: bool, buckets: int,
                       spark=None) -> AsofPlan:
    """The two-stream plan (:class:`~.asof_plan.AsofPlan`, an
    :class:`~.interval.IntervalOperator` in it) of a continuous query planned as ``band``,
    or :class:`~.plan.NotIncremental` saying why not. (``EMIT CHANGES`` changes nothing: a
    pair is final as it is emitted, on either runner.)"""
    del emit_changes
    if plan.mode != "band" or plan.band is None or len(plan.inputs) != 2:
        raise NotIncremental("not an interval join of two streams")
    info = plan.band
    views = info.get("views") or {}
    cols = view_columns(spark, plan, views)
    a, b, pairs, n_buckets = joined_streams(plan, info["a"], info["b"], info["pairs"], buckets,
                                            cols)
    outer, full = bool(info.get("outer")), bool(info.get("full"))
    op = kernel.IntervalOperator(encoded_types(a, cols.get(a.key)),
                                 encoded_types(b, cols.get(b.key)), int(info["lo"]),
                                 int(info["hi"]), bool(pairs), outer, full)
    new = [("__new", "true")] + ([("__alone", "false")] if outer else []) + (
        [("__first", "false"), ("__second", "false")] if full else [])
    pre_a = encoded_rows(a, False, [ac for ac, _ in pairs], op, n_buckets, cols.get(a.key)) + new
    pre_b = encoded_rows(b, True, [bc for _, bc in pairs], op, n_buckets, cols.get(b.key)) + new
    keys = ", ".join(f"{ac.name} = {bc.name}" for ac, bc in pairs) or "no keys"
    explain = (f"stateful interval join{over_views(a, b, views)} on Spark's state store "
               f"({a.name}.{a.event_time} - "
               f"{b.name}.{b.event_time} in [{op.lo}, {op.hi}] us, {keys}): each bucket "
               f"keeps the {a.name} rows from {b.name}'s progress + {op.lo} us on and the "
               f"{b.name} rows from {a.name}'s progress - {op.hi} us on; "
               + (f"{n_buckets} buckets of the keys" if pairs else "1 bucket (no keys)")
               + f"; progress per stream (a row below its own stream's is late): the "
                 f"{b.name} stream's is Spark's watermark, the {a.name} stream's kept by "
                 "the driver per micro-batch; a micro-batch pairs the new rows with the "
                 "kept ones and each other, each pair once"
               + (f"; outer: a {a.name} row that goes unpaired is emitted NULL-extended, "
                  "final" if outer else "")
               + (f"; FULL: so is a {b.name} row, once {a.name}'s progress passed its band "
                  f"(at the latest when {b.name}'s next moves)" if full else ""))
    return AsofPlan(a, b, op, tuple(pre_a), tuple(pre_b), output_ddl(op, a, b), n_buckets,
                    explain, (views.get(a.key), views.get(b.key)),
                    (cols.get(a.key, ()), cols.get(b.key, ())), info.get("query"))


class IntervalProcessor(AsofProcessor):
    """The interval join's kernel per bucket; the rest (late rows, passed-through rows,
    the left stream's promises, counts) is the ASOF processor's."""

    kernel_step = staticmethod(kernel.step)


class StatefulIntervalQuery(StatefulAsofQuery):
    """A continuous interval join of two streams (module docstring)."""

    engine = "stateful-interval"

    def _processor(self, columns: list[str]):
        return IntervalProcessor(self.windowed, columns)

    def _joined(self, spark, rows):
        """Every pair with a new row in it, once: the batch plan over (new ``a``, every
        ``b`` handed back) and over (kept ``a`` handed back, new ``b``)."""
        w = self.windowed
        a, b = rows.where("NOT __right"), rows.where("__right")
        if w.operator.full:
            return self._full(spark, a, b)
        outer = w.operator.outer
        paired = a.where("NOT __alone") if outer else a
        a_new = paired.where("__new").selectExpr(*w.decoded(False))
        a_kept = paired.where("NOT __new").selectExpr(*w.decoded(False))
        b_all = b.selectExpr(*w.decoded(True))
        b_new = b.where("__new").selectExpr(*w.decoded(True))
        # (outer: a paired a row meets a partner in each pass it is in -- the partner
        # rule here is the ON clause's, streaming/joins.py -- so neither pass extends it)
        out = self._lowered(spark, a_new, b_all).unionByName(
            self._lowered(spark, a_kept, b_new))
        if outer:  # the unpaired a rows that went: the plan over them and no b row
            alone = a.where("__alone").selectExpr(*w.decoded(False))
            out = out.unionByName(self._lowered(spark, alone, b.where("false").selectExpr(
                *w.decoded(True))))
        return out

    def _full(self, spark, a, b):
        """A FULL join's passes (:mod:`.interval`: each row only in a pass where it has a
        partner, so the batch plan NULL-extends no row there), and the pass of the rows
        that went unpaired, of both streams."""
        w = self.windowed

        def joined(flag: str):
            return self._lowered(spark, a.where(flag).selectExpr(*w.decoded(False)),
                                 b.where(flag).selectExpr(*w.decoded(True)))

        return joined("__first").unionByName(joined("__second")).unionByName(
            joined("__alone"))
