"""The SYNC kernel: stitch the stored segments a range overlaps and cut them to the range.

Pure numpy/pyarrow (no Spark): ``planner/sync.py`` gathers, for every control row, the
stored segments (of every channel) overlapping its sample range ``[lo, hi)`` and hands the
rows here in Arrow batches.

What a range gives, per channel (``MISSING`` policy of ``SYNC JOIN ... ON RANGE``):

* the recording covers every sample of ``[lo, hi)``: the segment of exactly those samples
  (``hi == lo``: an empty segment starting at ``lo``);
* otherwise -- the range reaches outside the recording, or a gap lies inside it --
  ``NULL`` (the default), or with ``TRUNCATE`` the covered part when it is one gap-free run
  (the range only sticks out at the ends; a gap inside still gives NULL: gaps are never
  closed silently), or with ``ERROR`` a ``SIGNAL_GAP`` error naming the range.
* a reversed range (``hi < lo``) gives NULL, or ``INVALID_ARGUMENT`` with ``ERROR``;
  a NULL bound gives NULL.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa

from .rewindow import stitch
from .sigseg import SigSeg, SignalError

POLICIES = ("NULL", "TRUNCATE", "ERROR")


def cut_range(pieces: Sequence[SigSeg], lo: int, hi: int, rate: float, policy: str,
              what: str = "the signal") -> SigSeg | None:
    """The segment of ``[lo, hi)`` from ``pieces`` under ``policy`` (module doc).

    Examples
    --------
    >>> f = lambda s, n: SigSeg(s, 10.0, np.arange(s, s + n, dtype=np.float32))
    >>> cut_range([f(0, 4), f(4, 4)], 2, 7, 10.0, "NULL").samples.tolist()
    [2.0, 3.0, 4.0, 5.0, 6.0]
    >>> cut_range([f(0, 4)], 2, 7, 10.0, "NULL") is None
    True
    >>> cut_range([f(0, 4)], 2, 7, 10.0, "TRUNCATE").samples.tolist()
    [2.0, 3.0]
    """
    if hi < lo:
        if policy == "ERROR":
            raise SignalError("INVALID_ARGUMENT", f"SYNC range [{lo}, {hi}) of {what} ends "
                              "before it starts", hint="check the RANGE (start, end) order")
        return None
    if hi == lo:
        return SigSeg(lo, rate, np.zeros(0, dtype=np.float32))
    runs = stitch(pieces, lo, hi)
    if len(runs) == 1 and runs[0].start == lo and runs[0].end == hi:
        return runs[0]
    if policy == "TRUNCATE" and len(runs) == 1:
        return runs[0]
    if policy == "ERROR":
        covered = sum(r.width for r in runs)
        raise SignalError(
            "SIGNAL_GAP", f"SYNC range [{lo}, {hi}) of {what} is not fully recorded "
            f"({covered} of {hi - lo} samples)",
            hint="MISSING NULL gives NULL for such ranges, MISSING TRUNCATE the recorded part")
    return None


def sync_batch(batch: pa.RecordBatch, channels: Sequence[str], rate: float, policy: str,
               what: str) -> pa.RecordBatch:
    """Replace ``__pieces`` (list of structs of the channels' stored segments overlapping the
    row's range) by one segment column per channel, cut to ``[__s0, __s1)``; other columns
    pass through."""
    names = batch.schema.names
    bounded, lo, hi = _ranges(batch)
    pieces = batch.column(names.index("__pieces"))
    offsets = pieces.offsets.to_numpy()
    values = pieces.values
    decoded = {}
    for ch in channels:
        seg = values.field(ch)
        samples = seg.field("samples")
        decoded[ch] = (seg.field("start").to_numpy(zero_copy_only=False),
                       seg.field("rate").to_numpy(zero_copy_only=False),
                       samples.offsets.to_numpy(),
                       samples.values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False))
    valid = pieces.is_valid().to_numpy(zero_copy_only=False)
    out_columns = {ch: [] for ch in channels}
    for i in range(batch.num_rows):
        first, last = (offsets[i], offsets[i + 1]) if valid[i] else (0, 0)
        for ch in channels:
            if not bounded[i]:  # a NULL bound: no range, NULL segments
                out_columns[ch].append(None)
                continue
            starts, rates, soff, flat = decoded[ch]
            segs = [SigSeg(int(starts[p]), float(rates[p]), flat[soff[p]:soff[p + 1]])
                    for p in range(first, last)]
            out_columns[ch].append(cut_range(segs, int(lo[i]), int(hi[i]), rate, policy, what))
    arrays = [batch.column(k) for k, n in enumerate(names) if n != "__pieces"]
    fields = [batch.schema.field(k) for k, n in enumerate(names) if n != "__pieces"]
    for ch in channels:
        arrays.append(_sigseg_array(out_columns[ch]))
        fields.append(pa.field(ch, arrays[-1].type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def read_batch(batch: pa.RecordBatch, placements: Sequence, channels: Sequence[str],
               rate: float, policy: str, what: str) -> pa.RecordBatch:
    """Add one segment column per channel, cut to ``[__s0, __s1)``, read straight from the
    signal's files (``placements``: its :class:`~wavesql.udfs.wav.FilePlacement` list, or
    placements with a ``read(offset, count)`` of their own, in timeline order) -- only the
    samples the ranges cover are read.

    The pieces are the files' parts overlapping the range, so a gap between two files is a
    gap here exactly as in :func:`sync_batch`, and the cut is the same :func:`cut_range`.
    """
    from .wav import WavError, read_frames

    bounded, lo, hi = _ranges(batch)
    ends = np.array([p.end_sample for p in placements], dtype=np.int64)
    out_columns: dict[str, list] = {ch: [] for ch in channels}
    for i in range(batch.num_rows):
        if not bounded[i]:  # a NULL bound: no range, NULL segments
            for ch in channels:
                out_columns[ch].append(None)
            continue
        a, b = int(lo[i]), int(hi[i])
        pieces: list[list[SigSeg]] = [[] for _ in channels]
        k = int(np.searchsorted(ends, a, side="right"))  # the first file ending after a
        while b > a and k < len(placements) and placements[k].start_sample < b:
            f = placements[k]
            s, e = max(a, f.start_sample), min(b, f.end_sample)
            try:
                # placed rows (a table signal's, sources/table_stream.py) read themselves
                read = getattr(f, "read", None) or (lambda o, n: read_frames(f.info, o, n))
                frames = read(s - f.start_sample, e - s)
            except WavError:
                raise
            except FileNotFoundError:
                raise WavError("MISSING_PATH", f.path, "the file disappeared after the query "
                               "was planned", "files of a signal must stay in place while it "
                               "is read") from None
            except ValueError as err:  # shorter than its header said when planned
                raise WavError("TRUNCATED_FILE", f.path, str(err),
                               "a file shrank after planning") from None
            for c in range(len(channels)):
                pieces[c].append(SigSeg(s, rate, frames[:, c]))
            k += 1
        for c, ch in enumerate(channels):
            out_columns[ch].append(cut_range(pieces[c], a, b, rate, policy, what))
    arrays = [batch.column(k) for k in range(batch.num_columns)]
    fields = [batch.schema.field(k) for k in range(batch.num_columns)]
    for ch in channels:
        arrays.append(_sigseg_array(out_columns[ch]))
        fields.append(pa.field(ch, arrays[-1].type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _ranges(batch: pa.RecordBatch):
    """(both bounds present, ``__s0``, ``__s1``) per row; NULL bounds read as 0."""
    lo_col, hi_col = batch.column("__s0"), batch.column("__s1")
    bounded = np.logical_and(lo_col.is_valid().to_numpy(zero_copy_only=False),
                             hi_col.is_valid().to_numpy(zero_copy_only=False))
    return (bounded, lo_col.fill_null(0).to_numpy(zero_copy_only=False),
            hi_col.fill_null(0).to_numpy(zero_copy_only=False))


def _sigseg_array(segs: Sequence[SigSeg | None]) -> pa.StructArray:
    present = [s for s in segs if s is not None]
    widths = np.array([s.width if s is not None else 0 for s in segs], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int32)
    flat = (np.concatenate([s.samples for s in present]).astype(np.float32)
            if present else np.zeros(0, dtype=np.float32))
    mask = np.array([s is None for s in segs], dtype=bool)
    samples = pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.float32()))
    starts = pa.array([s.start if s is not None else 0 for s in segs], pa.int64())
    rates = pa.array([s.rate if s is not None else 0.0 for s in segs], pa.float64())
    return pa.StructArray.from_arrays([starts, rates, samples], ["start", "rate", "samples"],
                                      mask=pa.array(mask))
