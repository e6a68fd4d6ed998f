"""Rewindow: re-cut the segments of a signal into exact sample windows, whatever order, sizes
and partitioning the segments arrive in.

The WAV scan (:mod:`wavesql.sources.wav_scan`) cuts windows while it reads a file. This
module does the same for segments that come from anywhere else -- a catalog view, a
subquery, the pieces an earlier stage produced (``subseg``, ``threshold_ranges``) -- and
gives exactly the rows the scan gives for the same samples. It holds the numpy/pyarrow
kernels; ``wavesql.planner.rewindow`` runs them on Spark.

Input
-----
Rows carrying one SigSeg per channel (``struct<start: bigint, rate: double,
samples: array<float>>``; the channels of a row share start, rate and width). Rows with the
same values of the *key* columns are one signal (a *group*); with no keys the whole input is
one signal. Rows may come in any order and partitioning, of any width (1 sample to millions),
and need not align with the window grid. Empty segments (width 0) hold no samples and are
ignored.

A *run* is a maximal stretch of consecutive sample numbers present in a group: segments that
abut (one's ``start`` is the other's end) join; a missing stretch ends a run. Gaps are never
closed.

Windows
-------
``width`` n and ``slide`` m (default n), whole numbers of samples >= 1. Window k covers sample
numbers ``[k*m, k*m + n)`` -- the absolute grid of the WAV scan. For every run and every k the
output has one row, the piece ``run ∩ [k*m, k*m + n)``, **if it is non-empty and starts before
(k+1)*m**. That one rule gives:

- a window inside a run is *full* (n samples);
- the windows at a run's end are *partial*: cut at the last sample, still returned;
- a run that starts off the grid gets one partial window, the one its first sample falls in
  (windows starting earlier would only repeat a prefix of it, so they are not emitted);
- a window that spans a gap yields its contiguous pieces as separate, shorter rows: the piece
  before the gap, and the piece after it when it starts before (k+1)*m -- a later piece is
  the off-grid start of the next run and belongs to a later window;
- every row starts inside ``[k*m, (k+1)*m)``, so its window index is ``start // m``.

These are the WAV scan's windows (``sources.wav_plan.k_range``: every window starting
inside a run, plus the window starting just before an off-grid run start, each cut to the
run); the tests check both on the same recording. Keep only full windows with ``width(ch) = n``.

With m = n (tumbling) every sample is returned exactly once; with m < n (sliding) every
sample at least once and the windows overlap by n - m; with m > n the samples between
windows (``[k*m + n, (k+1)*m)``) are not returned -- allowed because the WAV scan allows it
(``[SAMPLES n SLIDE m]`` sub-sampling in time), and they are still checked for overlaps.

Returned samples are the input float32 values, copied bit for bit; a row's ``rate`` is its
group's rate. A NULL element inside ``samples`` comes back as NaN.

Carried columns
---------------
Other columns can be carried to the output. Each output row takes the value of the input row
that holds its *first sample* -- meant for columns constant per key (a sensor's site), for
which that is simply the value; for a column varying per segment (a label) it is the label of
the segment the window starts in.

Errors
------
:class:`~wavesql.udfs.sigseg.SignalError` with these codes (raised in the Spark task; the
driver recovers the code with ``wavesql.spark_errors.translate_runtime_error``):

- ``OVERLAPPING_SEGMENTS``: one sample number held by two rows of one group (checked over
  every sample, including those skipped with m > n);
- ``RATE_MISMATCH``: rows of one group with different rates (checked over the whole group,
  not only within windows), or channels of one row with different rates;
- ``MISALIGNED_CHANNELS``: channels of one row with different starts or widths;
- ``INVALID_RATE``: a rate that is not a positive number; ``TYPE_ERROR``: a NULL segment.

How it runs (scalably)
----------------------
Windows are handled in *blocks* of ``B = max(1, block_samples // max(n, m))`` consecutive grid
windows (block b holds windows ``b*B .. b*B + B - 1``), so that one Python call cuts about
``block_samples`` samples into windows with numpy instead of paying a call per window.

1. :func:`tag_batch` (a ``mapInArrow``, per input batch): tags each segment with the blocks it
   overlaps and cuts it to each block's range *before* the shuffle, so a block receives only
   the samples its windows need (with m > n: only the samples inside windows, plus each
   piece's bounds for the overlap check; when the pieces tile the batch's buffer, as with
   tumbling windows, by re-offsetting it without a copy). It also emits one *census* row per key and rate
   of the batch (block NULL): the rate check over the whole group rides in the same shuffle.
2. group the pieces by (keys, block) and the census rows by a hash of their keys into at most
   :data:`CENSUS_SHARDS` groups (not one group per key: a group costs Spark about as much as
   a small block's work); :func:`rewindow_group` (an ``applyInArrow``) sorts the pieces of a
   block, checks overlaps and rates, stitches runs and cuts them into windows -- zero-copy
   re-offsetting for m >= n, one gather for m < n -- or checks a census group's rates.

:func:`stitch` and :func:`rewindow` are the same rules over :class:`SigSeg` lists, in plain
numpy: the reference the tests hold the Arrow path to, and handy for local use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa

from .sigseg import SigSeg, SignalError

__all__ = ["DEFAULT_BLOCK_SAMPLES", "BLOCK", "LO", "HI", "RATE", "SHARD", "RESERVED",
           "CENSUS_SHARDS", "SIGSEG_ARROW",
           "Grid", "first_window", "end_window", "stitch", "cut", "rewindow", "tag_batch",
           "rewindow_group", "tagged_schema", "output_schema"]

#: Target samples per block of windows (one ``rewindow_group`` call), as in the WAV scan.
DEFAULT_BLOCK_SAMPLES = 1 << 20

# Columns of the tagged pieces between the two stages (SHARD only in Spark's grouping);
# names starting with ``__rw_`` are reserved.
BLOCK, LO, HI, RATE, SHARD = "__rw_block", "__rw_lo", "__rw_hi", "__rw_rate", "__rw_shard"
RESERVED = (BLOCK, LO, HI, RATE, SHARD)

#: Census rows (block NULL) are grouped by ``pmod(hash(keys), CENSUS_SHARDS)``.
CENSUS_SHARDS = 64

SIGSEG_ARROW = pa.struct([("start", pa.int64()), ("rate", pa.float64()),
                          ("samples", pa.list_(pa.float32()))])


# ---------------------------------------------------------------------------------- grid
def first_window(run_start, width: int, slide: int):
    """Grid index of the first window of a run starting at ``run_start`` (array or int):
    the window the first sample falls in, or the next one when that window ends before it
    (possible only with slide > width)."""
    k = np.floor_divide(run_start, slide)
    return k + (k * slide + width <= run_start)


def end_window(run_end, slide: int):
    """One past the grid index of the last window of a run ending at ``run_end`` (exclusive):
    the last window starting before the run's end."""
    return np.floor_divide(np.asarray(run_end) - 1, slide) + 1


@dataclass(frozen=True)
class Grid:
    """The window grid (``width`` n, ``slide`` m) and its blocks of ``per_block`` windows.

    Block b owns the windows starting in ``[b*stride, (b+1)*stride)``; the samples it needs
    or checks lie in ``[b*stride, b*stride + reach)``. The ranges tile the sample line (with
    m < n they overlap by n - m), so every sample is checked for overlaps in some block.
    """

    width: int
    slide: int
    per_block: int = 1

    @staticmethod
    def of(width: int, slide: int | None = None,
           block_samples: int = DEFAULT_BLOCK_SAMPLES) -> "Grid":
        """Check the arguments (``INVALID_ARGUMENT``) and size the blocks."""
        slide = width if slide is None else slide
        for name, value in (("width", width), ("slide", slide), ("block_samples", block_samples)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise SignalError("INVALID_ARGUMENT",
                                  f"rewindow {name} must be a whole number of samples >= 1, "
                                  f"got {value!r}")
        width, slide = int(width), int(slide)
        return Grid(width, slide, max(1, int(block_samples) // max(width, slide)))

    @property
    def stride(self) -> int:
        return self.per_block * self.slide

    @property
    def reach(self) -> int:
        return self.stride + max(self.width - self.slide, 0)

    @property
    def packs(self) -> bool:
        """Whether samples between windows are left out in transit (slide > width)."""
        return self.slide > self.width

    def blocks(self, lo, hi):
        """``(b0, b1)``: the blocks whose range overlaps ``[lo, hi)`` are ``b0 <= b < b1``."""
        return (np.floor_divide(np.asarray(lo) - self.reach, self.stride) + 1,
                np.floor_divide(np.asarray(hi) - 1, self.stride) + 1)

    def packed(self, p):
        """Position of sample ``p`` among the samples that lie inside windows (identity
        unless slide > width): samples in transit are stored in these coordinates."""
        if not self.packs:
            return p
        n, m = self.width, self.slide
        return np.floor_divide(p, m) * n + np.minimum(np.mod(p, m), n)

    def unpacked(self, c):
        """Inverse of :meth:`packed` for samples inside windows."""
        if not self.packs:
            return c
        n, m = self.width, self.slide
        return np.floor_divide(c, n) * m + np.mod(c, n)


# ---------------------------------------------------------------------------------- reference
def stitch(segments: Sequence[SigSeg], lo: int | None = None,
           hi: int | None = None) -> list[SigSeg]:
    """The gap-free runs of ``segments`` (any order), cut to ``[lo, hi)`` when given.

    Abutting segments are concatenated; a gap starts a new run. Empty segments are ignored.
    Given the pieces of one window and its bounds, this returns the window's contiguous runs.

    Raises
    ------
    SignalError
        ``OVERLAPPING_SEGMENTS`` if two segments hold the same sample number,
        ``RATE_MISMATCH`` if their rates differ.

    Examples
    --------
    >>> f = lambda s, n: SigSeg(s, 10.0, np.arange(s, s + n, dtype=np.float32))
    >>> [(r.start, r.width) for r in stitch([f(5, 3), f(0, 5), f(10, 2)])]
    [(0, 8), (10, 2)]
    >>> [(r.start, r.width) for r in stitch([f(5, 3), f(0, 5), f(10, 2)], 4, 11)]
    [(4, 4), (10, 1)]
    """
    segs = sorted((s for s in segments if s.width), key=lambda s: s.start)
    _check_rates(np.array([s.rate for s in segs]), "")
    runs: list[list[SigSeg]] = []
    for seg in segs:
        if runs and seg.start < runs[-1][-1].end:
            prev = runs[-1][-1]
            raise _overlap(seg.start, min(prev.end, seg.end), "")
        if runs and seg.start == runs[-1][-1].end:
            runs[-1].append(seg)
        else:
            runs.append([seg])
    out = []
    for run in runs:
        start, rate = run[0].start, run[0].rate
        samples = run[0].samples if len(run) == 1 else np.concatenate([s.samples for s in run])
        a = start if lo is None else max(lo, start)
        b = start + len(samples) if hi is None else min(hi, start + len(samples))
        if a < b:
            out.append(SigSeg(a, rate, samples[a - start:b - start]))
    return out


def cut(runs: Sequence[SigSeg], width: int, slide: int | None = None) -> list[SigSeg]:
    """The window pieces of gap-free ``runs`` (the module's rule), in (start, width) order.

    Examples
    --------
    >>> run = SigSeg(3, 10.0, np.arange(3, 13, dtype=np.float32))
    >>> [(p.start, p.width) for p in cut([run], 4)]
    [(3, 1), (4, 4), (8, 4), (12, 1)]
    >>> [(p.start, p.width) for p in cut([run], 4, 2)]     # not (2, ...): starts before 3
    [(3, 3), (4, 4), (6, 4), (8, 4), (10, 3), (12, 1)]
    """
    g = Grid.of(width, slide)
    n, m = g.width, g.slide
    out = []
    for run in runs:
        for k in range(int(first_window(run.start, n, m)), int(end_window(run.end, m))):
            a, b = max(k * m, run.start), min(k * m + n, run.end)
            out.append(SigSeg(a, run.rate, run.samples[a - run.start:b - run.start]))
    return sorted(out, key=lambda s: (s.start, s.width))


def rewindow(segments: Sequence[SigSeg], width: int, slide: int | None = None) -> list[SigSeg]:
    """Rewindow one signal's segments (any order) in plain numpy: ``cut(stitch(segments))``."""
    return cut(stitch(segments), width, slide)


# ---------------------------------------------------------------------------------- Arrow path
def tagged_schema(schema: pa.Schema, channels: Sequence[str], keys: Sequence[str] = (),
                  carry: Sequence[str] = ()) -> pa.Schema:
    """Schema of :func:`tag_batch`'s output for an input of ``schema``."""
    return pa.schema([schema.field(c) for c in keys]
                     + [schema.field(c).with_nullable(True) for c in carry]  # census: NULL
                     + [pa.field(BLOCK, pa.int64()), pa.field(LO, pa.int64()),
                        pa.field(HI, pa.int64()), pa.field(RATE, pa.float64())]
                     + [pa.field(c, pa.list_(pa.float32())) for c in channels])


def output_schema(schema: pa.Schema, channels: Sequence[str], keys: Sequence[str] = (),
                  carry: Sequence[str] = ()) -> pa.Schema:
    """Schema of :func:`rewindow_group`'s output: keys, one SigSeg per channel, carried."""
    return pa.schema([schema.field(c) for c in keys]
                     + [pa.field(c, SIGSEG_ARROW) for c in channels]
                     + [schema.field(c) for c in carry])


def tag_batch(batch: pa.RecordBatch, channels: Sequence[str], grid: Grid,
              keys: Sequence[str] = (), carry: Sequence[str] = ()) -> Iterator[pa.RecordBatch]:
    """Stage 1: the block pieces of a batch of segment rows, then its census rows.

    Yields batches of :func:`tagged_schema`: one row per (segment, block it overlaps) with
    the keys, carried columns, the block, the piece's bounds ``[LO, HI)`` (the segment cut
    to the block's range), its rate, and per channel the piece's samples (those inside
    windows only, when slide > width); then one census row per distinct (keys, rate) of the
    batch, with a NULL block.
    """
    schema = tagged_schema(batch.schema, channels, keys, carry)
    if batch.num_rows == 0:
        return
    decoded = [_decode(batch.column(c), c) for c in channels]
    starts, rates, widths, _ = decoded[0]
    for (s, r, w, _), c in zip(decoded[1:], channels[1:]):
        _check_channels(starts, rates, widths, s, r, w, channels[0], c)
    bad = ~((rates > 0) & np.isfinite(rates)) & (widths > 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SignalError("INVALID_RATE", f"segment rate must be positive, got "
                          f"{rates[i]}{_key_text(batch, keys, i)}")
    keep = np.flatnonzero(widths > 0)  # empty segments hold no samples: nothing to place
    if keep.size == 0:
        return
    # Rows in chunks of about _CHUNK_SAMPLES: the index arrays cost 8 bytes a sample, and
    # Spark sizes Arrow batches by rows, not bytes.
    ends = np.cumsum(widths)
    cuts = np.searchsorted(ends, np.arange(_CHUNK_SAMPLES, ends[-1], _CHUNK_SAMPLES), "left")
    bounds = np.unique(np.concatenate([[0], cuts + 1, [batch.num_rows]]).clip(0, batch.num_rows))
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        part = [(s[a:b], r[a:b], w[a:b], samples.slice(a, b - a))
                for s, r, w, samples in decoded]
        pieces = _pieces(batch.slice(a, b - a), part, grid, schema, keys, carry)
        if pieces is not None:
            yield pieces
    yield _census(batch, rates, keep, schema, keys, carry, channels)


_CHUNK_SAMPLES = 1 << 24


def _pieces(batch, decoded, grid: Grid, schema, keys, carry) -> pa.RecordBatch | None:
    """The (segment, block) pieces of some rows (:func:`tag_batch`), or None."""
    starts, rates, widths, _ = decoded[0]
    keep = np.flatnonzero(widths > 0)
    if keep.size == 0:
        return None
    b0, b1 = grid.blocks(starts[keep], starts[keep] + widths[keep])
    count = b1 - b0
    row = np.repeat(keep, count)
    first_of_row = np.repeat(np.cumsum(count) - count, count)
    block = np.repeat(b0, count) + (np.arange(row.size) - first_of_row)
    s_row = starts[row]
    lo = np.maximum(s_row, block * grid.stride)
    hi = np.minimum(s_row + widths[row], block * grid.stride + grid.reach)
    length = grid.packed(hi) - grid.packed(lo)
    out_off = np.zeros(row.size + 1, dtype=np.int64)
    np.cumsum(length, out=out_off[1:])

    # rel[j]: where output sample j sits in its segment
    if grid.packs:
        c = np.repeat(grid.packed(lo) - out_off[:-1], length) + np.arange(out_off[-1])
        rel = grid.unpacked(c) - np.repeat(s_row, length)
    lists = []
    for _, _, _, samples in decoded:
        base = samples.offsets.to_numpy().astype(np.int64)
        src = base[row] + (lo - s_row)  # where each piece starts in the samples buffer
        if not grid.packs and bool((src[1:] == src[:-1] + length[:-1]).all()):
            # The pieces tile the buffer (tumbling windows; or no segment crosses a block):
            # re-offset it, copy nothing.
            offsets = np.concatenate([src, src[-1:] + length[-1:]])
            lists.append(pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)),
                                                  samples.values))
            continue
        if not grid.packs:
            rel = np.repeat(lo - s_row - out_off[:-1], length) + np.arange(out_off[-1])
        values = _float32(samples.values)[np.repeat(base[row], length) + rel]
        lists.append(pa.ListArray.from_arrays(pa.array(out_off.astype(np.int32)),
                                              pa.array(values, pa.float32())))
    take = pa.array(row, pa.int64())
    arrays = ([batch.column(c).take(take) for c in (*keys, *carry)]
              + [pa.array(block, pa.int64()), pa.array(lo, pa.int64()), pa.array(hi, pa.int64()),
                 pa.array(rates[row], pa.float64())] + lists)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _census(batch, rates, keep, schema, keys, carry, channels) -> pa.RecordBatch:
    """One row per distinct (keys, rate) among the batch's non-empty segments."""
    if keys:
        table = pa.table([batch.column(c).take(pa.array(keep)) for c in keys]
                         + [pa.array(rates[keep], pa.float64())], names=[*keys, RATE])
        try:
            table = table.group_by([*keys, RATE], use_threads=False).aggregate([])
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            pass  # key types Arrow cannot group (nested): one census row per segment
        key_arrays = [table.column(c).combine_chunks() for c in keys]
        census_rates = table.column(RATE).combine_chunks()
    else:
        key_arrays = []
        census_rates = pa.array(np.unique(rates[keep]), pa.float64())
    k = len(census_rates)
    arrays = (key_arrays + [pa.nulls(k, schema.field(c).type) for c in carry]
              + [pa.nulls(k, pa.int64())] * 3 + [census_rates]
              + [pa.nulls(k, pa.list_(pa.float32())) for _ in channels])
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def rewindow_group(table: pa.Table, channels: Sequence[str], grid: Grid,
                   keys: Sequence[str] = (), carry: Sequence[str] = ()) -> pa.Table:
    """Stage 2: the windows of one (keys, block) group of :func:`tag_batch` rows.

    Sorts the pieces, checks overlaps and rates, stitches runs and cuts the block's windows
    (the module's rule), as a table of :func:`output_schema` in (start, width) order. A census
    group (NULL block; census rows of any number of keys) only checks that each key has one
    rate, and returns no rows.
    """
    schema = output_schema(table.schema, channels, keys, carry)
    rates = table.column(RATE).to_numpy()
    block = table.column(BLOCK)
    if table.num_rows == 0:
        return schema.empty_table()
    if block.null_count:
        _check_census(table, keys)
        return schema.empty_table()
    _check_rates(rates, _key_text(table, keys, 0))
    b = block[0].as_py()
    n, m, per = grid.width, grid.slide, grid.per_block
    lo, hi = table.column(LO).to_numpy(), table.column(HI).to_numpy()
    order = np.argsort(lo, kind="stable")
    lo_s, hi_s = lo[order], hi[order]
    clash = np.flatnonzero(lo_s[1:] < hi_s[:-1])
    if clash.size:
        i = int(clash[0])
        raise _overlap(int(lo_s[i + 1]), int(min(hi_s[i], hi_s[i + 1])),
                       _key_text(table, keys, 0))

    # Runs: sorted pieces that abut.
    breaks = np.flatnonzero(lo_s[1:] != hi_s[:-1]) + 1
    run_first = np.concatenate([[0], breaks])
    run_last = np.concatenate([breaks - 1, [lo_s.size - 1]])
    run_lo, run_hi = lo_s[run_first], hi_s[run_last]

    # The block's windows of each run: (run, k) pairs in run order, then k order.
    k0 = np.maximum(first_window(run_lo, n, m), b * per)
    k1 = np.minimum(end_window(run_hi, m), (b + 1) * per)
    count = np.maximum(k1 - k0, 0)
    run = np.repeat(np.arange(run_lo.size), count)
    k = np.repeat(k0, count) + (np.arange(run.size) - np.repeat(np.cumsum(count) - count, count))
    if k.size == 0:  # e.g. m > n and the pieces lie between windows
        return schema.empty_table()
    w_lo = np.maximum(k * m, run_lo[run])
    w_hi = np.minimum(k * m + n, run_hi[run])

    # Samples travel packed, concatenated in sorted order: window j is [i0[j], i1[j]).
    length = grid.packed(hi_s) - grid.packed(lo_s)
    piece_off = np.concatenate([[0], np.cumsum(length)])
    i0 = piece_off[run_first][run] + grid.packed(w_lo) - grid.packed(run_lo[run])
    i1 = i0 + grid.packed(w_hi) - grid.packed(w_lo)
    # With m >= n the windows tile the packed samples exactly: re-offset, copy nothing.
    tiles = (i0[0] == 0 and i1[-1] == piece_off[-1] and bool((i0[1:] == i1[:-1]).all()))
    if tiles:
        offsets = pa.array(np.concatenate([i0, i1[-1:]]).astype(np.int32))
    else:  # m < n: windows overlap, so their samples are gathered (copied) out
        size = i1 - i0
        out_end = np.cumsum(size)
        gather = np.repeat(i0 - (out_end - size), size) + np.arange(int(out_end[-1]))
        offsets = pa.array(np.concatenate([[0], out_end]).astype(np.int32))

    identity = bool((order == np.arange(order.size)).all())
    seg_columns = []
    for c in channels:
        col = table.column(c)
        lists = (col if identity else col.take(pa.array(order))).combine_chunks()
        got = np.diff(lists.offsets.to_numpy())
        if got.shape != length.shape or (got != length).any():
            raise SignalError("TYPE_ERROR", f"rewindow: pieces of `{c}` do not hold the samples "
                              "their bounds say (the tagging stage and this one disagree)")
        values = lists.flatten()
        if not tiles:
            values = pa.array(_float32(values)[gather], pa.float32())
        samples = pa.ListArray.from_arrays(offsets, values)
        seg_columns.append(pa.StructArray.from_arrays(
            [pa.array(w_lo, pa.int64()), pa.array(np.full(w_lo.size, rates[0]), pa.float64()),
             samples], fields=list(SIGSEG_ARROW)))

    # Keys and carried values: from the piece holding each window's first sample.
    source = pa.array(order[np.searchsorted(lo_s, w_lo, side="right") - 1], pa.int64())
    arrays = ([table.column(c).take(source).combine_chunks() for c in keys] + seg_columns
              + [table.column(c).take(source).combine_chunks() for c in carry])
    return pa.Table.from_arrays(arrays, schema=schema)


# ---------------------------------------------------------------------------------- helpers
def _decode(column, name: str):
    """(starts, rates, widths, samples ListArray) of a column of SigSeg structs."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    # flatten(): the children cut to the column's slice (a batch may be a slice)
    start, rate, samples = (dict(zip([f.name for f in column.type], column.flatten()))[f]
                            for f in ("start", "rate", "samples"))
    if column.null_count or start.null_count or rate.null_count or samples.null_count:
        raise SignalError("TYPE_ERROR", f"segment column `{name}` has NULL rows or fields",
                          hint=f"filter them out first: WHERE {name} IS NOT NULL")
    if not pa.types.is_float32(samples.type.value_type):
        raise SignalError("TYPE_ERROR", f"segment column `{name}` holds {samples.type.value_type}"
                          " samples, not float32", hint="cast the samples to array<float>")
    starts = start.to_numpy().astype(np.int64, copy=False)
    rates = rate.to_numpy().astype(np.float64, copy=False)
    widths = np.diff(samples.offsets.to_numpy()).astype(np.int64)
    return starts, rates, widths, samples


def _float32(values: pa.Array) -> np.ndarray:
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32)


def _check_channels(starts, rates, widths, s, r, w, first: str, other: str) -> None:
    for what, a, b in (("rate", rates, r), ("start", starts, s), ("width", widths, w)):
        bad = np.flatnonzero(a != b)
        if bad.size:
            i = int(bad[0])
            code = "RATE_MISMATCH" if what == "rate" else "MISALIGNED_CHANNELS"
            raise SignalError(code, f"channels `{first}` and `{other}` of one row have different "
                              f"{what}s ({a[i]} and {b[i]})",
                              hint="the SigSeg columns of a row must share start, rate and width")


def _check_census(table: pa.Table, keys: Sequence[str]) -> None:
    """Each key of a census group has one rate."""
    rates = table.column(RATE).to_numpy()
    if not keys or (rates == rates[0]).all():
        _check_rates(rates, "")
        return
    try:
        per_key = table.group_by(list(keys), use_threads=False).aggregate(
            [(RATE, "min"), (RATE, "max")])
        lo, hi = (per_key.column(f"{RATE}_{f}").to_numpy() for f in ("min", "max"))
        bad = np.flatnonzero(lo != hi)
        if bad.size:
            i = int(bad[0])
            _check_rates(np.array([lo[i], hi[i]]), _key_text(per_key, keys, i))
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
        seen: dict[str, tuple[float, int]] = {}  # key types Arrow cannot group (nested)
        values = list(zip(*(table.column(c).to_pylist() for c in keys)))
        for i, (key, rate) in enumerate(zip(values, rates)):
            first = seen.setdefault(repr(key), (rate, i))
            if first[0] != rate:
                _check_rates(np.array([first[0], rate]), _key_text(table, keys, i))


def _check_rates(rates: np.ndarray, key: str) -> None:
    if rates.size and (rates != rates[0]).any():
        other = rates[np.flatnonzero(rates != rates[0])[0]]
        lo, hi = sorted((float(rates[0]), float(other)))
        raise SignalError("RATE_MISMATCH", f"segments of one signal have different rates "
                          f"({lo:g} Hz and {hi:g} Hz){key}",
                          hint="resample them to one rate first, or give each rate its own key")


def _overlap(lo: int, hi: int, key: str) -> SignalError:
    what = f"sample {lo} appears" if hi - lo == 1 else f"samples {lo}..{hi - 1} appear"
    return SignalError("OVERLAPPING_SEGMENTS",
                       f"{what} in two segments of one signal{key}",
                       hint="drop the duplicate segments, or key the signals apart")


def _key_text(data, keys: Sequence[str], row: int) -> str:
    """`` (key sensor=3)`` for error messages: where in the input the problem is."""
    if not keys:
        return ""
    parts = [f"{c}={data.column(c)[row].as_py()!r}" for c in keys]
    return f" (key {', '.join(parts)})"
