"""A continuous RESAMPLE on Spark's state store: the processor and the micro-batch.

The stream's rows go through :class:`~.query.StatefulQuery`'s pipeline (encoded by
:attr:`.resample_plan.ResamplePlan.pre`, Spark's watermark as progress, grouped by bucket
into ``transformWithStateInPandas``); :class:`ResampleProcessor` runs the kernel
(:mod:`.resample`) per bucket and hands back the rows of the series with grid points
becoming final, one span per such series, late / timeless / malformed rows and its counts.
:class:`StatefulResampleQuery` then evaluates the batch plan over the rows handed back and
keeps each series' points inside its span -- once each, final. With ``EMIT CHANGES`` also
the points inside each pending span (not final yet: ``_final = false``), and those of the
buckets not called carried from the batch before (:mod:`.pending`).

``_progress``: for the whole stream, its bound; per key, the stalest key's bound (a key
that stops reporting holds it back, not the other keys' rows), as the re-evaluating runner
says (``streaming/resample.py``). A key's bound is ``min(W, its cap)``; a bucket reports
the smallest cap of its keys whenever it runs, and the cap does not change between its
runs (the kernel's timers fire where it would), so the driver keeps the last cap of every
bucket -- one number per bucket, in ``<checkpoint>/resample/<batch>.json`` (versioned
JSON, written by the batch and read by the next) -- and ``_progress`` is ``min(W, every
cap)``, without calling the buckets that have nothing to do.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from wavesql import storage
from wavesql.planner import ir
from wavesql.planner.temporal import quote
from wavesql.sqltext import JSON_OPTIONS
from wavesql.streaming.report import FINAL, PROGRESS, timestamp_lit

from . import batch_records
from . import plan as pl
from . import resample as kernel
from .processor import BucketProcessor
from .query import StatefulQuery
from .pending import not_final
from .resample_plan import PENDING, SPAN
from .view_rows import substituted, view_rows

#: The version of the driver's per-bucket caps record.
CAPS_VERSION = 1


class ResampleProcessor(BucketProcessor):
    """One :class:`~.resample_plan.ResamplePlan`'s kernel per bucket (module docstring)."""

    def __init__(self, plan, inputs: list[str]):
        super().__init__(plan.output_ddl, inputs)
        self.op = plan.operator
        self.names = [f.name for f in self.op.schema()]
        self.bucket = 0

    def handleInputRows(self, key, rows, timerValues):
        self.bucket = int(key[0])
        yield from super().handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo):
        self.bucket = int(key[0])
        yield from super().handleExpiredTimer(key, timerValues, expiredTimerInfo)

    def _step(self, batch: pd.DataFrame | None, timer_values) -> pd.DataFrame:
        progress, kinds, data = self._begin(batch, timer_values)
        new = self._rows(data)
        result = kernel.step(self.op, self._stored(), new, progress)
        self._keep(result.state, result.timer)
        parts = [self._out(result.context, pl.RESULT)]
        for kind, spans in ((SPAN, result.spans), (PENDING, result.pending)):
            if spans is not None and len(spans):
                parts.append(self._out(spans, kind, {
                    "__lo": spans["lo"].to_numpy(np.int64),
                    "__hi": spans["hi"].to_numpy(np.int64),
                    "__lon": ~spans["has_lo"].to_numpy(bool)}))
        late_n = int(result.late.sum())
        if late_n:
            parts.append(self._out(new[result.late], pl.LATE))
        parts += self._passed_through(batch, kinds, self._rows)
        stats = self._stats(kinds, len(new) - late_n, late_n, result.state_rows, result.state,
                            batch)
        stats["__cap"] = np.int64(result.cap if result.cap is not None else 0)
        stats["__capn"] = result.cap is None
        stats["__b"] = np.int64(self.bucket)
        parts.append(stats)
        return pd.concat(parts, ignore_index=True)[self.columns]

    def _rows(self, rows: pd.DataFrame | None) -> pd.DataFrame:
        """The encoded input rows under the kernel's names (``__c0`` -> ``c0``)."""
        if rows is None:
            return pd.DataFrame({n: pd.Series(dtype=self._dtype(n)) for n in self.names})
        return pd.DataFrame({n: rows[f"__{n}"].to_numpy() for n in self.names})

    def _dtype(self, name: str):
        t = self.types[f"__{name}"]
        return {"BIGINT": np.int64, "DOUBLE": np.float64, "BOOLEAN": bool}.get(t, object)

    def _out(self, rows: pd.DataFrame, kind: int, extra: dict | None = None) -> pd.DataFrame:
        cols = {f"__{n}": rows[n].to_numpy() for n in self.names}
        return self._frame(len(rows), kind, {**cols, **(extra or {})})


class StatefulResampleQuery(StatefulQuery):
    """A continuous RESAMPLE (module docstring)."""

    engine = "stateful-resample"

    def _processor(self, columns: list[str]):
        return ResampleProcessor(self.windowed, columns)

    def _watermarked(self, frame, trigger: str, stream=None, pre=None, watermark: bool = True):
        """Over a view (CTE, subquery): the stream's rows are watermarked by the stream's
        own EVENT TIME -- every row, those the view filters out too -- and then put
        through the view, row by row (a micro-batch's rows give the rows the view gives
        over the whole stream), before they are encoded. Each row's kind (punctuation,
        malformed, no event time, a heartbeat's tick) is the stream row's, carried through
        the view with what the runner reads of it (its file, corrupt record); those rows
        pass the view's filters. The view passes the EVENT TIME through unchanged
        (streaming/resample.py), so a row the view keeps is late exactly when its stream
        row is."""
        w = self.windowed
        if w.view is None or not watermark:  # (one stream: ``stream`` is w.stream)
            return super()._watermarked(frame, trigger, stream, pre, watermark)
        return view_rows(self, frame, trigger, w.stream, w.view, w.pre)

    def _row_json(self):
        from pyspark.sql import functions as F

        return F.to_json(F.struct(*[F.expr(d) for d in self.windowed.decoded()]), JSON_OPTIONS)

    def _deliver_results(self, spark, df, batch_id, progress, report) -> dict:
        from pyspark.sql import functions as F

        from wavesql.planner.lower import Runtime, lower

        w = self.windowed
        stats = df.where(f"__kind = {pl.STATS}").select(
            *[f"__n{i}" for i in range(len(pl.STAT_NAMES))], "__cap", "__capn", "__b",
            *([pl.ARRIVED] if pl.ARRIVED in df.columns else [])).collect()
        stats = [r.asDict() for r in stats]
        counts = {n: sum(int(r[f"__n{i}"]) for r in stats)
                  for i, n in enumerate(pl.STAT_NAMES)}
        arrived = [r[pl.ARRIVED] for r in stats if r.get(pl.ARRIVED)]
        before = self._caps_before(batch_id)
        caps = dict(before.get("caps", {}))
        for r in sorted(stats, key=lambda r: r["__capn"]):  # (a value over none)
            caps[str(r["__b"])] = None if r["__capn"] else int(r["__cap"])
        shown = self._shown(progress, caps, before.get("progress"))
        report.progress_us = shown
        rows = df.where(f"__kind = {pl.RESULT}").selectExpr(*w.decoded())
        rt = Runtime(spark, self.session.catalog, self.text, streams={w.stream.key: rows})
        bound = self.bound
        if w.view is not None:  # the rows are the view's already: it stands for the stream
            scan = ir.StreamScan(w.stream, w.view.schema)
            bound = replace(bound, relation=substituted(bound.relation, w.view, scan))
        result = lower(bound, rt)
        t = F.unix_micros(F.col(quote(self.plan.time_column)))
        if w.keys:
            on = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"s.{quote(k)}")) for k in w.keys]
        else:
            on = []
        inside = ((F.col("s.__wavesql_lo").isNull() | (t >= F.col("s.__wavesql_lo")))
                  & (t < F.col("s.__wavesql_hi")))
        cond = inside
        for c in on:
            cond = c & cond

        def within(kind: int):  # the result's points inside the spans of that kind
            spans = df.where(f"__kind = {kind}").selectExpr(
                # (the series' columns: over a view, the view's, not the stream's)
                *[d for d, (name, _) in zip(w.decoded(), w.columns) if name in w.keys],
                "CASE WHEN __lon THEN NULL ELSE __lo END AS __wavesql_lo",
                "__hi AS __wavesql_hi")
            return result.alias("r").join(F.broadcast(spans.alias("s")), cond, "inner").select(
                "r.*")

        out = within(SPAN).withColumn(FINAL, F.lit(True))
        if w.changes:  # the called buckets' points evaluated now, the others' carried
            called = df.where(f"__kind = {pl.STATS}").select(F.col("__b").cast("int"))
            pending = not_final(spark, self.checkpoint, batch_id, within(PENDING), called,
                                w.bucket)
            out = out.unionByName(pending.withColumn(FINAL, F.lit(False)))
        out = out.withColumn(PROGRESS, timestamp_lit(shown))
        self._deliver_counted(out, batch_id, report, by_final=True)
        self._write_caps(batch_id, caps, shown)
        return {**counts, "arrived": min(arrived) if arrived else None}

    def _shown(self, progress: int | None, caps: dict, previous: int | None) -> int | None:
        """``_progress`` (module docstring): per key ``min(W, every bucket's cap)``; for
        the whole stream its bound, which never goes back."""
        if progress is None:
            return previous
        if self.windowed.keys:
            return min([progress] + [c for c in caps.values() if c is not None])
        cap = caps.get("0")
        if cap is None:
            return previous
        bound = min(progress, cap)
        return bound if previous is None else max(previous, bound)

    # -- the per-bucket caps, outside the state store ------------------------------------
    def _caps_dir(self) -> str:
        return storage.join(self.checkpoint, "resample")

    def _caps_before(self, batch_id: int) -> dict:
        """The caps record of the latest batch before ``batch_id`` (empty: none)."""
        return batch_records.before(self._caps_dir(), batch_id, CAPS_VERSION)

    def _write_caps(self, batch_id: int, caps: dict, shown: int | None) -> None:
        """This batch's caps record (:mod:`.batch_records`)."""
        batch_records.write(self._caps_dir(), batch_id, CAPS_VERSION,
                            {"caps": caps, "progress": shown})

    @property
    def progress_us(self) -> int | None:
        """The ``_progress`` of the last batch this query ran (or of the checkpoint's)."""
        if self.reports:
            return self.reports[-1].progress_us
        ids = batch_records.ids(self._caps_dir())
        return self._caps_before(ids[-1] + 1).get("progress") if ids else None

