"""A continuous RESAMPLE: when its grid points are final, and what it keeps.

A RESAMPLE of one stream runs alone (mode ``resample``) or under CQL windows (TiLT's
imputation); per key with ``PARTITION BY``. Planned here (:func:`plan_resample`, and
:func:`resample_lookback` for one under windows); each micro-batch the re-evaluating runner
(:mod:`.runner`) asks :class:`ResampleProgress` up to when its points are final -- not past
the stream's last row, nor ('linear') past the last value of an interpolated column, and
per key each key's own bound -- which rows are final, and from where each key's rows must
be kept. A RESAMPLE alone (with EMIT CHANGES too) runs on Spark's state store instead
(:mod:`.stateful.resample`), whose kernel computes these same bounds per series; the
re-evaluating runner keeps it under windows and with ``WAVESQL_STATEFUL=0``. Its input
may be a view row by row over one stream, or a CTE computing across a stream's rows, which
runs as a stream of its own first (:mod:`.stream_parts`).
"""

from __future__ import annotations

from wavesql.errors import Span, WaveSQLError
from wavesql.planner import ir
from wavesql.sqltext import quote

from .plan import (Input, KeepRows, Plan, check_row_by_row_except, require_event_time,
                   require_time_carried, row_by_row_stream)


def resample_lookback(queries: list, key: str, reach_us: int, stmt) -> tuple:
    """What a RESAMPLE of stream ``key`` inside a windowed continuous query needs kept.

    The query's rows are final by ``_time`` (TiLT's imputation: a grid point joined to its
    bucket, final once the bucket is); a ``'prev'``/``'null'``/``'zero'`` grid point needs
    the rows up to it, which the window's look-back (``reach_us``) keeps, plus the last row
    before that look-back, so that the grid continues across a dropout longer than it.
    ``'linear'`` also needs the last value of every interpolated column before that, and
    its points need the next value after them: the instants are final only up to just past
    the last time below progress at which every interpolated column had a value
    (:meth:`ResampleProgress.final`). Per key (``PARTITION BY``) the same rows are
    kept per key, and as each key's grid ends at its last row (a later row of the key adds
    points across its pause, into windows that would otherwise be final), the instants are
    final only up to just past the stalest key's last row (and, ``'linear'``, its columns'
    last values): a key that stops reporting holds the query's progress -- and its state --
    until it reports again. Returns the rules and the series that bound progress (one per
    RESAMPLE of ``key`` that bounds)."""
    rules: tuple = ()
    series = []
    for q in queries:
        if q.resample is None:
            continue
        rel = dict(q.inputs).get(q.resample.input)
        if not isinstance(rel, ir.StreamScan) or rel.stream.key != key:
            continue
        method, numeric, keys = q.resample.method, q.resample.numeric, q.resample.keys
        by = tuple(quote(k) for k in keys)
        rules += (KeepRows(by, 1, None, reach_us),)  # (every RESAMPLE of the stream's own)
        if method == "linear":
            rules += tuple(KeepRows(by, 1, f"{quote(c)} IS NOT NULL", reach_us)
                           for c in numeric)
        if method == "linear" or keys:  # (un-keyed 'prev'/'null'/'zero': no series, above)
            series.append(_series(key, method, numeric, keys))
    return tuple(dict.fromkeys(rules)), series


#: The per-key bound column of :meth:`ResampleProgress.key_bounds` (an internal name: a
#: stream's own columns, keys included, may be called anything else).
_BOUND = "__wavesql_bound"


def _series(key: str, method: str, numeric, keys=()) -> dict:
    """A RESAMPLE's series (per key with ``keys``) whose points bound a continuous query's
    progress."""
    return {"input": key, "method": method, "numeric": list(numeric), "keys": list(keys)}


def plan_resample(root: ir.Relation, queries: list, trees: list, scans: dict, stmt) -> Plan:
    """A continuous ``RESAMPLE`` of one stream (planner/temporal.py).

    A grid point ``t`` is final once no row that could change it can still come: for
    ``'prev'``, ``'null'`` and ``'zero'`` when ``t`` is below the input's progress; for
    ``'linear'`` also only once every interpolated column has a value at or after ``t``
    below progress (the right end of its interpolation has arrived) -- and never past the
    stream's last row (the points after it exist only once a later row does). The result's
    progress is that bound, and the state keeps the rows from it on plus the last row before
    it (per interpolated column: its last non-NULL value), which bracket the grid points to
    come. Per key (``PARTITION BY``) the same holds for each key's series: a point is final
    below progress and up to that key's last row (and, ``'linear'``, its columns' last
    values), so a key that pauses holds back only its own points; the state keeps each
    key's bracketing rows."""
    found = [(i, q) for i, q in enumerate(queries) if q.resample is not None]
    if len(found) > 1 or len(scans) != 1:
        raise WaveSQLError("NOT_IMPLEMENTED", "a continuous RESAMPLE is implemented over one "
                           "stream, once per query", Span.of(stmt.node),
                           hint="one continuous RESAMPLE per query; combine their outputs")
    index, query = found[0]
    r = query.resample
    source, time_col, method, numeric, keys = (r.input, r.time_column, r.method, r.numeric,
                                               r.keys)
    for k in keys:
        if root.schema.find(k) is None:
            raise WaveSQLError("STREAMING_RULE", f"a continuous RESAMPLE per key must keep "
                               f"the key {quote(k)} in its result", Span.of(stmt.node),
                               hint=f"add {k} to the SELECT: each key's points are final "
                                    "on their own")
    rel = dict(query.inputs).get(source)
    stream = row_by_row_stream(
        rel, stmt, "a continuous RESAMPLE's input",
        "RESAMPLE a view (or CTE, subquery) that filters, projects and computes columns of "
        "one catalog stream's rows, or a CTE of this query that computes across the rows of "
        "catalog streams only (WITH m AS (SELECT _time AS t, avg(v) AS a FROM s [RANGE ...] "
        "GROUP BY _time)): it runs as a stream of its own")
    view = None if isinstance(rel, ir.StreamScan) else rel
    if view is not None:
        _check_time_carried(view, stream, time_col, stmt)
    require_event_time(stream, time_col, "a continuous RESAMPLE puts the stream's event "
                        "time on the grid", stmt)
    if root.schema.find(time_col) is None:
        raise WaveSQLError("STREAMING_RULE", f"a continuous RESAMPLE must keep the grid time "
                           f"{quote(time_col)} in its result", Span.of(stmt.node),
                           hint=f"add {time_col} to the SELECT: it says when a row is final")
    check_row_by_row_except(trees, index, stmt)
    # the last row before the cut (per key) brackets the next points
    by = tuple(quote(k) for k in keys)
    last = [KeepRows(by, 1)]
    if method == "linear":
        last += [KeepRows(by, 1, f"{quote(c)} IS NOT NULL") for c in numeric]
    inp = Input(0, stream, tuple(last))
    return Plan((inp,), "resample", time_col, resample={
        "keys": list(keys), "series": [_series(stream.key, method, numeric, keys)],
        "view": view})


def _check_time_carried(view: ir.Relation, stream, time_col: str, stmt) -> None:
    """Over a view (CTE, subquery), the RESAMPLE's time column must be the stream's EVENT
    TIME passed through unchanged (:func:`.plan.require_time_carried`)."""
    require_time_carried(view, stream, time_col, "a continuous RESAMPLE",
                         "RESAMPLE(..., {t}, ...)", stmt)


class ResampleProgress:
    """How far a continuous RESAMPLE's grid points are final, micro-batch by micro-batch
    (:func:`plan_resample`). The per-key bounds it computes are cached for the batch and
    persisted: :meth:`release` them when it ends."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self._bounds: dict = {}

    def final(self, buffers: dict, overall: int | None, previous: int | None):
        """Up to when a continuous RESAMPLE's grid points are final (see :func:`plan_resample`):
        the input's progress, but no later than just past the stream's last row (punctuation
        or a heartbeat can promise more: the points after the last row exist only if a
        later row comes), and for ``'linear'`` no later than just past the last time below
        progress at which every interpolated column has had a value. Per key, each key's
        own bound (:meth:`key_bounds`); under windows (whose instants hold every key's
        rows) the stalest key's."""
        if overall is None or self.plan.resample["keys"]:
            return overall
        bound = overall
        for series in self.plan.resample["series"]:
            if series["keys"]:  # a RESAMPLE per key under windows
                lowest = self._stalest_bound(buffers, overall, series)
                if lowest is None:
                    return previous  # no row yet: nothing is final
                bound = min(bound, lowest)
                continue
            last, *ends = buffers[series["input"]].agg(
                *self._series_ends(series, overall)).first()
            if last is None or any(v is None for v in ends):
                return previous  # no row (or some column has no value) yet: nothing is final
            bound = min([bound] + [e + 1 for e in ends])
            if self.plan.mode == "resample":
                # Under windows this bound is not applied: a stream closed by punctuation
                # still has its last window final (the grid points a row after the close
                # would add are not waited for -- the imputation's last bucket); so only a
                # 'linear' RESAMPLE under windows has a series to bound by.
                bound = min(bound, last + 1)
        return bound if previous is None else max(previous, bound)

    def shown(self, buffers: dict, overall: int | None) -> int | None:
        """The progress a consumer is told (``_progress``): ``overall``, but for a RESAMPLE
        per key no later than the smallest key's bound -- a key's points after its last row
        come only with its next row, which may be below ``overall`` (so a key that stops
        holds ``_progress`` back, not the other keys' rows, each final as it comes)."""
        if overall is None or self.plan.resample is None or not self.plan.resample["keys"]:
            return overall
        lowest = self._stalest_bound(buffers, overall, self.plan.resample["series"][0])
        return overall if lowest is None else min(overall, lowest)

    def mark_per_key(self, result, t, streams: dict, olds: dict, previous: int | None,
                     overall: int | None):
        """``result`` (rows of a RESAMPLE per key, ``t`` their grid time) with whether each is
        at or after its key's bound of the batch before (``__after``) and below its bound now
        (``__before``): ``(result, after, before)``."""
        from pyspark.sql import functions as F

        # each key's points: final below its bound now, not yet before its bound then
        series = self.plan.resample["series"][0]
        key, keys = series["input"], series["keys"]
        now = self.key_bounds(streams[key], overall, series)
        then = self.key_bounds(olds[key], previous, series).withColumnRenamed(
            _BOUND, "__wavesql_then")
        on = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"b.{quote(k)}")) for k in keys]
        on_then = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"a.{quote(k)}")) for k in keys]
        result = (result.alias("r").join(now.alias("b"), on, "left")
                  .join(then.alias("a"), on_then, "left")
                  .select("r.*", (F.col("__wavesql_then").isNull()
                                  | (t >= F.col("__wavesql_then")))
                          .alias("__after"),
                          F.coalesce(t < F.col(f"b.{_BOUND}"), F.lit(False))
                          .alias("__before")))
        return result, F.col("__after"), F.col("__before")

    def cut_per_key(self, buf, overall: int):
        """``buf`` (an input of a RESAMPLE per key) with each key's bound of the batch
        (``__wavesql_cut``, below which its rows are old): ``(buf, cut, added columns)``."""
        from pyspark.sql import functions as F

        series = self.plan.resample["series"][0]
        bounds = self.key_bounds(buf, overall, series)
        on = [F.col(f"r.{quote(k)}").eqNullSafe(F.col(f"b.{quote(k)}")) for k in series["keys"]]
        buf = buf.alias("r").join(bounds.alias("b"), on, "left").select(
            "r.*", F.col(f"b.{_BOUND}").alias("__wavesql_cut"))
        return buf, F.col("__wavesql_cut"), ["__wavesql_cut"]

    def release(self) -> None:
        """Unpersist and forget the per-key bounds :meth:`key_bounds` cached this batch."""
        for _, bounds in self._bounds.values():
            bounds.unpersist()
        self._bounds = {}

    def key_bounds(self, buf, bound: int | None, series: dict):
        """Per key of a RESAMPLE ``PARTITION BY``: the bound below which its points are final
        (``_BOUND``: ``bound``, just past its last row and, ``'linear'``, past each column's
        last value below ``bound``; NULL: none final). A column without a value below
        ``bound`` bounds nothing: its points below ``bound`` precede its first value, NULL
        whatever comes.
        Computed once per batch and buffer (it is asked for the progress, the results and
        the pruning), persisted until the batch ends."""
        from pyspark.sql import functions as F

        memo = (id(buf), bound, id(series))
        if memo in self._bounds:
            return self._bounds[memo][1]
        keys = [F.col(quote(k)) for k in series["keys"]]
        ends = buf.groupBy(*keys).agg(*self._series_ends(series, bound))
        parts = [F.col(quote(c)) + F.lit(1) for c in ends.columns[len(keys):]]  # (not keys)
        top = F.least(F.lit(bound), *parts) if bound is not None else F.lit(None)
        out = ends.select(*keys, top.cast("bigint").alias(_BOUND)).persist()
        self._bounds[memo] = (buf, out)  # (buf kept alive: its id must not be reused)
        return out

    def _stalest_bound(self, buffers: dict, overall: int, series: dict) -> int | None:
        """The smallest of a per-key series' key bounds (None: no key has a row)."""
        from pyspark.sql import functions as F

        return self.key_bounds(buffers[series["input"]], overall, series).agg(
            F.min(_BOUND)).first()[0]

    def _series_ends(self, series: dict, below: int | None) -> list:
        """Aggregates of a RESAMPLE series' last row time and ('linear') each interpolated
        column's last value time below ``below``: the points after them are not final."""
        from pyspark.sql import functions as F

        stream = next(i.stream for i in self.plan.inputs if i.stream.key == series["input"])
        ts = F.unix_micros(F.col(quote(stream.event_time)))
        columns = series["numeric"] if series["method"] == "linear" else []
        under = ts < F.lit(below) if below is not None else F.lit(False)
        return [F.max(ts).alias("__wavesql_last")] + [
            F.max(F.when(F.col(quote(c)).isNotNull() & under, ts)).alias(f"__wavesql_end{i}")
            for i, c in enumerate(columns)]
