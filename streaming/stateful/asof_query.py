"""A continuous ASOF JOIN on Spark's state store: the processor and the micro-batch.

Both streams' rows go through :class:`~.query.StatefulQuery`'s pipeline -- each stream
encoded by its own :attr:`.asof_plan.AsofPlan.pre_left` / ``pre_right`` (the stream in
``__right``) and watermarked on its own, so Spark's watermark is the smaller of the two
streams' promises (``multipleWatermarkPolicy`` "min"; a stream that has sent nothing yet
holds it at none) -- unioned and grouped by bucket of keys into one
``transformWithStateInPandas``. :class:`AsofProcessor` runs the kernel (:mod:`.asof`) per
bucket and hands back the left rows whose match became final with the right rows of their
keys, late / timeless / malformed rows of either stream and its counts;
:class:`StatefulAsofQuery` evaluates the batch plan over the rows handed back -- each left
row once, final.

Progress and late rows: the re-evaluating runner keeps one progress per stream (each
stream's largest event time minus its WATERMARK, punctuation, HEARTBEAT) and the query's
is their minimum; Spark keeps one watermark per query, that minimum, and this runner uses
it for both streams: a row of either stream is late below it, a left row is final once it
passes (backward: the row's time; forward: its match's). So a stream that runs ahead of
the other has fewer late rows here (those between the other's promise and its own are
joined) and its rows wait for both promises -- the results equal the batch join over the
rows that are not late either way, and each is final as it comes (no ``_final`` column,
``_progress`` the query's progress, as on the re-evaluating runner; ``EMIT CHANGES``
changes nothing on either). A batch's ``_progress/`` record counts both streams' rows.
"""

from __future__ import annotations

import pandas as pd

from wavesql.sqltext import JSON_OPTIONS
from wavesql.streaming.report import PROGRESS, timestamp_lit

from . import asof as kernel
from . import plan as pl
from .query import StatefulQuery, _earliest_arrival, union
from .resample_query import ResampleProcessor


class AsofProcessor(ResampleProcessor):
    """One :class:`~.asof_plan.AsofPlan`'s kernel per bucket (module docstring). The
    encoded-row helpers (``_rows``, ``_out``) are the RESAMPLE processor's: both hand the
    kernel a frame of ``op.schema()``'s columns under ``__`` names."""

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        progress, kinds, data = self._begin(batch, timer_values)
        new = self._rows(data)
        result = kernel.step(self.op, self._stored(), new, progress)
        self._keep(result.state, result.timer)
        parts = [self._out(result.context, pl.RESULT)]
        late_n = int(result.late.sum())
        if late_n:
            parts.append(self._out(new[result.late], pl.LATE))
        parts += self._passed_through(batch, kinds, self._rows)
        parts.append(self._stats(kinds, len(new) - late_n, late_n, result.state_rows,
                                 result.state, batch))
        return pd.concat(parts, ignore_index=True)[self.columns]


class StatefulAsofQuery(StatefulQuery):
    """A continuous ASOF JOIN of two streams (module docstring)."""

    engine = "stateful-asof"

    def _processor(self, columns: list[str]):
        return AsofProcessor(self.windowed, columns)

    def _streams(self) -> list:
        return list(self.windowed.streams)

    def _by_stream(self, value):
        from pyspark.sql import functions as F

        w = self.windowed
        return F.when(F.col("__right"), value(w.right)).otherwise(value(w.left))

    def _row_json(self):
        from pyspark.sql import functions as F

        w = self.windowed
        return self._by_stream(lambda st: F.to_json(F.struct(*[
            F.expr(d) for d in w.decoded(st is w.right)]), JSON_OPTIONS))

    def _source_frame(self, trigger: str, max_files: int | None):
        w = self.windowed
        # one watermark per stream (per partition of a Kafka topic): Spark's global one is
        # their minimum; the left stream's sources come first, as in _streams
        return union([f for st, pre in ((w.left, w.pre_left), (w.right, w.pre_right))
                      for f in self._stream_frames(st, pre, trigger, max_files)])

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import functions as F

        from wavesql.planner.lower import Runtime, lower

        w = self.windowed
        stats = df.where(f"__kind = {pl.STATS}").groupBy().agg(*[
            F.sum(f"__n{i}").alias(n) for i, n in enumerate(pl.STAT_NAMES)],
            *_earliest_arrival(df)).collect()[0].asDict()
        rows = df.where(f"__kind = {pl.RESULT}")
        left = rows.where("NOT __right").selectExpr(*w.decoded(False))
        right = rows.where("__right").selectExpr(*w.decoded(True))
        rt = Runtime(spark, self.session.catalog, self.text,
                     streams={w.left.key: left, w.right.key: right})
        out = lower(self.bound, rt).withColumn(PROGRESS, timestamp_lit(progress))
        self._deliver_counted(out, batch_id, report, by_final=False)
        return {**{n: int(stats[n] or 0) for n in pl.STAT_NAMES},
                "arrived": stats.get("arrived")}
