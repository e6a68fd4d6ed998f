"""Shape functions: cut, join, measure and place segments in time.

None of these look at sample values, so they accept NaN/Inf samples unchanged and copy
nothing they do not have to (``subseg`` and ``dewindow`` return views).

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> s = SigSeg(100, 1000.0, np.arange(6.0))
>>> subseg(s, 102, 3).samples.tolist(), width(s), start_time(s), end_time(s)
([2.0, 3.0, 4.0], 6, 100000, 106000)
>>> dewindow(s, 2).end
104
"""

from __future__ import annotations

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SegBlock, SigSeg, SignalError
from ._common import as_seg, lit_int

SEG = Param("seg", "sigseg")


def subseg(seg: SigSeg, start_sample: int, length: int) -> SigSeg:
    """Samples ``start_sample .. start_sample + length - 1`` (absolute sample numbers).

    Raises ``OUT_OF_RANGE`` if that range is not inside the segment and
    ``INVALID_ARGUMENT`` for a negative length; ``length`` 0 gives an empty segment.

    Examples
    --------
    >>> import numpy as np
    >>> subseg(SigSeg(10, 4.0, np.arange(5.0)), 11, 2).samples.tolist()
    [1.0, 2.0]
    """
    seg = as_seg(seg, "subseg")
    start = lit_int(start_sample, "subseg", "start_sample")
    n = lit_int(length, "subseg", "length", lo=0)
    if start < seg.start or start + n > seg.end:
        raise SignalError("OUT_OF_RANGE",
                          f"subseg [{start}, {start + n}) is outside segment "
                          f"[{seg.start}, {seg.end})",
                          hint="start_sample is an absolute sample number, not an offset")
    return seg.subseg(start, n)


def append(a: SigSeg, b: SigSeg) -> SigSeg:
    """``a`` followed by ``b``; they must be adjacent (``b.start == a.end``) and share a rate.

    Errors come from :meth:`SigSeg.append` (``TYPE_ERROR``): gaps are never closed here,
    use ``degap`` for that.

    Examples
    --------
    >>> import numpy as np
    >>> append(SigSeg(0, 2.0, np.ones(2)), SigSeg(2, 2.0, np.zeros(1))).samples.tolist()
    [1.0, 1.0, 0.0]
    """
    return as_seg(a, "append", "a").append(as_seg(b, "append", "b"))


def width(seg: SigSeg) -> int:
    """Number of samples."""
    return as_seg(seg, "width").width


def start_sample(seg: SigSeg) -> int:
    """Absolute sample number of the first sample."""
    return int(as_seg(seg, "start_sample").start)


def sample_rate(seg: SigSeg) -> float:
    """Samples per second."""
    return float(as_seg(seg, "sample_rate").rate)


def start_time(seg: SigSeg) -> int:
    """Microseconds from the signal's epoch to the first sample (rounded down)."""
    return as_seg(seg, "start_time").start_time_us(0)


def end_time(seg: SigSeg) -> int:
    """Microseconds from the signal's epoch to just past the last sample."""
    return as_seg(seg, "end_time").end_time_us(0)


def dewindow(seg: SigSeg, overlap: int) -> SigSeg:
    """The first ``width - overlap`` samples: what a sliding window adds that the next
    window does not repeat.

    Windows ``[SAMPLES W SLIDE S]`` overlap by ``W - S`` samples; keeping the first ``S``
    samples of each window gives back the contiguous stream ``[s_0, s_0 + S), [s_1, ...)``
    with no sample twice. The trailing ``overlap`` samples of the *last* window are not
    repeated by a later window and so are not in any output (documented loss at end of
    stream). A window no wider than ``overlap`` yields an empty segment.

    Examples
    --------
    >>> import numpy as np
    >>> dewindow(SigSeg(8, 1.0, np.arange(4.0)), 1).samples.tolist()
    [0.0, 1.0, 2.0]
    """
    seg = as_seg(seg, "dewindow")
    k = lit_int(overlap, "dewindow", "overlap", lo=0)
    return seg.subseg(seg.start, max(seg.width - k, 0))


register(SignalFunction(
    name="subseg", kernel=subseg,
    params=(SEG, Param("start_sample", "bigint"), Param("length", "bigint")),
    returns="sigseg", output="segment",
    doc=("The sub-segment of `length` samples starting at absolute sample number "
         "`start_sample` (not an offset into the segment). A range outside the segment "
         "raises OUT_OF_RANGE; length 0 gives an empty segment.\n"
         "Example: SELECT subseg(ch1, 1000, 256) FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="append", kernel=append,
    params=(Param("a", "sigseg"), Param("b", "sigseg")), returns="sigseg", output="segment",
    doc=("Concatenates two adjacent segments of the same rate (b must start where a ends). "
         "Non-adjacent or different-rate segments raise TYPE_ERROR: gaps are never closed "
         "silently (use degap).\n"
         "Example: SELECT append(a.ch1, b.ch1) FROM w a JOIN w b ON b.seq = a.seq + 1")))

def _width_batch(block: SegBlock) -> np.ndarray:
    return np.full(block.k, block.width, dtype=np.int64)


def _time_batch(offset: int):
    def batch(block: SegBlock) -> np.ndarray:
        # floor(n * 1e6 / rate) per window, as SigSeg.start_time_us does one at a time.
        samples = (block.starts + offset * block.width).astype(np.int64)
        if float(block.rate).is_integer():
            return samples * 1_000_000 // int(block.rate)
        return np.floor(samples * 1_000_000 / block.rate + 1e-9).astype(np.int64)

    return batch


register(SignalFunction(
    name="width", kernel=width, batch=_width_batch, params=(SEG,), returns="bigint", output="scalar",
    doc=("Number of samples in the segment (0 for an empty one).\n"
         "Example: SELECT width(ch1) FROM mic")))

register(SignalFunction(
    name="start_sample", kernel=start_sample, batch=lambda block: block.starts.astype(np.int64),
    params=(SEG,), returns="bigint", output="scalar",
    doc=("Absolute sample number of the segment's first sample (the segment's `start` "
         "field; `ch1.start` in a query over the signal means this, computed without moving "
         "the samples).\n"
         "Example: SELECT start_sample(ch1) AS n FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="sample_rate", kernel=sample_rate,
    batch=lambda block: np.full(block.k, float(block.rate)),
    params=(SEG,), returns="double", output="scalar",
    doc=("Samples per second of the segment (its `rate` field; `ch1.rate` in a query over "
         "the signal means this).\n"
         "Example: SELECT sample_rate(ch1) FROM mic")))

register(SignalFunction(
    name="start_time", kernel=start_time, batch=_time_batch(0), params=(SEG,), returns="bigint", output="scalar",
    doc=("Time of the first sample in integer microseconds since the signal's epoch "
         "(sample n is at floor(n * 1e6 / rate) us, so that the time maps back to sample n). The kernel knows no epoch: the planner "
         "adds the signal's epoch to turn it into a timestamp.\n"
         "Example: SELECT start_time(ch1) AS t FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="end_time", kernel=end_time, batch=_time_batch(1), params=(SEG,), returns="bigint", output="scalar",
    doc=("Time just past the last sample (the start time of the next adjacent segment), in "
         "integer microseconds since the signal's epoch; the planner adds the epoch.\n"
         "Example: SELECT end_time(ch1) - start_time(ch1) AS dur_us FROM mic")))

register(SignalFunction(
    name="dewindow", kernel=dewindow,
    params=(SEG, Param("overlap", "bigint")), returns="sigseg", output="segment",
    doc=("Turns overlapping windows back into a contiguous stream: keeps the first "
         "width - overlap samples of each window, i.e. [start, end - overlap). For windows "
         "[SAMPLES W SLIDE S] use overlap = W - S; consecutive results are then adjacent. "
         "The last window's trailing overlap samples appear in no result; a window of at "
         "most `overlap` samples gives an empty segment; overlap < 0 is INVALID_ARGUMENT.\n"
         "Example: SELECT dewindow(ch1, 128) FROM mic [SAMPLES 256 SLIDE 128]")))
