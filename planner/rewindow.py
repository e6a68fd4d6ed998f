"""``rewindow`` on Spark: re-cut a DataFrame of signal segments into exact sample windows.

:func:`rewindow_frame` is the lowering of a sample window over segments that are not read
straight from a WAV file (a view's, a subquery's, the pieces of ``subseg`` or
``threshold_ranges``). The semantics -- which windows, partial windows, gaps, overlap and
rate errors, carried columns -- are those of :mod:`wavesql.udfs.rewindow` and equal the WAV
scan's windows over the same samples.

Plan: ``mapInArrow`` (tag each segment with the blocks of windows it overlaps and cut it to
each, so only the samples a block needs cross the shuffle; plus a census row per key and rate)
-> ``groupBy(keys, block)`` -> ``applyInArrow`` (stitch and cut the block's windows; census
rows are grouped into a few shards and only checked). One shuffle, no collect, no per-window
Python call: a block holds ``block_samples`` samples' worth of windows.
"""

from __future__ import annotations

from typing import Sequence

from wavesql.udfs import rewindow as rw
from wavesql.udfs.sigseg import SignalError
from wavesql.sqltext import quote

__all__ = ["rewindow_frame"]


def rewindow_frame(df, seg_columns: Sequence[str], width: int, slide: int | None = None,
                   keys: Sequence[str] = (), carry: Sequence[str] = (), *,
                   block_samples: int = rw.DEFAULT_BLOCK_SAMPLES):
    """Re-cut the segments of ``df`` into windows of ``width`` samples every ``slide``.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        Rows of segments, in any order and partitioning.
    seg_columns : list of str
        The channels: columns of type ``struct<start: bigint, rate: double,
        samples: array<float>>``; the channels of a row share start, rate and width.
    width, slide : int
        Window k covers sample numbers ``[k*slide, k*slide + width)``; ``slide`` defaults
        to ``width`` (tumbling). ``slide < width`` overlaps; ``slide > width`` skips the
        samples between windows.
    keys : list of str
        Columns telling signals apart (a sensor id): each key is rewindowed on its own.
    carry : list of str
        Other columns to keep; an output row gets the value of the input row holding its
        first sample (meant for columns constant per key).
    block_samples : int
        About how many samples one Python call cuts (windows are cut in blocks of
        ``max(1, block_samples // max(width, slide))``); bounds the memory of a task.
        The result does not depend on it.

    Returns
    -------
    DataFrame
        Columns ``keys``, then ``seg_columns`` (re-cut SigSegs), then ``carry``: one row per
        window piece (:mod:`wavesql.udfs.rewindow` states exactly which), in no particular
        order. A row's window index is ``floor(start / slide)``.

    Raises
    ------
    SignalError
        Here, before any job: ``INVALID_ARGUMENT`` (width, slide, column lists),
        ``UNKNOWN_COLUMN``, ``TYPE_ERROR`` (a channel that is not a float32 SigSeg).
        While the job runs (inside Spark's exception; ``wavesql.spark_errors.
        translate_runtime_error`` recovers the code): ``OVERLAPPING_SEGMENTS``,
        ``RATE_MISMATCH``, ``MISALIGNED_CHANNELS``, ``INVALID_RATE``, ``TYPE_ERROR``
        (NULL segment).

    Examples
    --------
    >>> frames = rewindow_frame(segs, ["voice"], 4096)                       # doctest: +SKIP
    >>> per_sensor = rewindow_frame(segs, ["x", "y"], 256, 128, keys=["sensor"],
    ...                             carry=["site"])                          # doctest: +SKIP
    """
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    grid = rw.Grid.of(width, slide, block_samples)
    channels, keys, carry = (_resolve(df, cols, what) for cols, what in (
        (seg_columns, "segment column"), (keys, "key"), (carry, "carried column")))
    if not channels:
        raise SignalError("INVALID_ARGUMENT", "rewindow needs at least one segment column")
    every = [*channels, *keys, *carry]
    repeated = sorted({c for c in every if every.count(c) > 1})
    if repeated:
        raise SignalError("INVALID_ARGUMENT", f"column(s) {repeated} given twice to rewindow",
                          hint="a column is a channel, a key or carried, not several")
    clash = [c for c in every if c.startswith("__rw_")]
    if clash:
        raise SignalError("INVALID_ARGUMENT", f"column name(s) {clash} are reserved by rewindow",
                          hint="rename them first")
    own = {f.name: f for f in df.schema.fields}
    for c in channels:
        _check_sigseg(own[c].dataType, c)

    # Between the stages: keys, carried, block, piece bounds, rate, one sample array per
    # channel (rw.tagged_schema); out: keys, channels re-cut, carried (rw.output_schema).
    tagged_type = T.StructType(
        [own[c] for c in keys]
        + [T.StructField(c, own[c].dataType) for c in carry]  # nullable: census rows
        + [T.StructField(rw.BLOCK, T.LongType()), T.StructField(rw.LO, T.LongType()),
           T.StructField(rw.HI, T.LongType()), T.StructField(rw.RATE, T.DoubleType())]
        + [T.StructField(c, T.ArrayType(T.FloatType())) for c in channels])
    out_type = T.StructType([own[c] for c in keys]
                            + [T.StructField(c, own[c].dataType) for c in channels]
                            + [own[c] for c in carry])
    selected = df.select(*[F.col(quote(c)) for c in every])

    def tag(batches):
        from wavesql.udfs.rewindow import tag_batch

        for batch in batches:
            yield from tag_batch(batch, channels, grid, keys, carry)

    def cut(table):
        from wavesql.udfs.rewindow import rewindow_group

        return rewindow_group(table, channels, grid, keys, carry)

    tagged = selected.mapInArrow(tag, tagged_type)
    # Pieces group by (keys, block). Census rows (block NULL) group by a hash of their keys
    # into a few shards, their keys masked: one census group per key would double the
    # groups -- and Spark's cost per group -- of a frame of many small signals. Their key
    # values still reach the kernel (the table holds the columns, not the grouping).
    piece = F.col(rw.BLOCK).isNotNull()
    shard = (F.pmod(F.hash(*[F.col(quote(c)) for c in keys]), F.lit(rw.CENSUS_SHARDS))
             if keys else F.lit(0))
    grouping = ([F.when(piece, F.col(quote(c))).alias(f"__rw_key{i}")
                 for i, c in enumerate(keys)]
                + [F.col(rw.BLOCK), F.when(~piece, shard).alias(rw.SHARD)])
    return tagged.groupBy(*grouping).applyInArrow(cut, out_type)


def _resolve(df, names, what: str) -> list[str]:
    """The DataFrame's spelling of each name (Spark resolves names case-insensitively)."""
    if isinstance(names, str):
        names = [names]
    fields = df.schema.fieldNames()
    out = []
    for name in names:
        if name in fields:
            out.append(name)
            continue
        matches = [f for f in fields if f.lower() == str(name).lower()]
        if len(matches) != 1:
            from wavesql.errors import did_you_mean

            raise SignalError("UNKNOWN_COLUMN", f"rewindow {what} `{name}` is not a column",
                              hint=did_you_mean(str(name), fields, "columns"))
        out.append(matches[0])
    return out


def _check_sigseg(dtype, name: str) -> None:
    from pyspark.sql import types as T

    ok = (isinstance(dtype, T.StructType)
          and [f.name for f in dtype.fields] == ["start", "rate", "samples"]
          and isinstance(dtype["start"].dataType, T.LongType)
          and isinstance(dtype["rate"].dataType, T.DoubleType)
          and isinstance(dtype["samples"].dataType, T.ArrayType)
          and isinstance(dtype["samples"].dataType.elementType, T.FloatType))
    if not ok:
        raise SignalError("TYPE_ERROR", f"rewindow segment column `{name}` is "
                          f"{dtype.simpleString()}, not a signal segment "
                          "struct<start:bigint,rate:double,samples:array<float>>",
                          hint="build it with named_struct('start', ..., 'rate', ..., "
                               "'samples', CAST(... AS array<float>))")
