"""Explicit gap filling: the only place WaveSQL closes a gap in sample numbers.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> y, st = degap(SigSeg(0, 10.0, np.array([1.0, 2.0])), "linear")
>>> y, st = degap(SigSeg(4, 10.0, np.array([5.0])), "linear", None, st)
>>> y.start, y.samples.tolist()
(2, [3.0, 4.0, 5.0])
"""

from __future__ import annotations

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import as_seg, lit_choice, lit_int, new_stream_state, samples64, stream_step

POLICIES = ("zero", "hold", "linear", "error")


def degap_init(policy, max_gap=None) -> dict:
    """State for ``degap``: policy, limit, and the previous segment's end and last sample."""
    p = lit_choice(policy, "degap", "policy", POLICIES)
    limit = None if max_gap is None else lit_int(max_gap, "degap", "max_gap", lo=0)
    return new_stream_state(policy=p, max_gap=limit, last=None)


def _fill(policy: str, n: int, last: float, first: float) -> np.ndarray:
    if policy == "zero":
        return np.zeros(n)
    if policy == "hold":
        return np.full(n, last)
    # linear: the straight line from the last sample before the gap to the first after it,
    # at the n missing sample positions (end points excluded: they are real samples).
    return last + (first - last) * (np.arange(1, n + 1) / (n + 1))


def degap(seg: SigSeg, policy: str, max_gap: int | None = None,
          state: dict | None = None) -> tuple[SigSeg, dict]:
    """Make a stream contiguous by filling gaps between consecutive segments.

    When a segment starts ``g > 0`` samples after the previous one ended, the output is
    the fill followed by the segment, starting at the previous end, so consecutive
    outputs are adjacent. Policies: ``'zero'`` (zeros), ``'hold'`` (repeat the last sample
    before the gap), ``'linear'`` (interpolate between the last sample before and the first
    after the gap), ``'error'`` (raise ``SIGNAL_GAP`` on any gap). Gaps longer than
    ``max_gap`` samples (default: no limit) are left open -- the segment passes unchanged
    and the gap stays visible downstream. The first segment, adjacent segments and empty
    segments pass unchanged; overlapping or backwards segments are ``SEGMENT_ORDER``, a
    rate change ``RATE_MISMATCH``. A NaN last sample makes 'hold'/'linear' fills NaN.
    Returns ``(segment, new state)``.
    """
    st = dict(degap_init(policy, max_gap) if state is None else state)
    seg = as_seg(seg, "degap")
    where = stream_step(st, seg, "degap")
    if where == "empty":
        return seg, st
    x = samples64(seg)
    out = SigSeg(seg.start, seg.rate, x)
    if where == "gap":
        g = seg.start - st["end"]
        if st["policy"] == "error":
            raise SignalError("SIGNAL_GAP",
                              f"degap: {g} samples missing between {st['end']} and {seg.start}",
                              hint="choose a fill policy: 'zero', 'hold' or 'linear'")
        if st["max_gap"] is None or g <= st["max_gap"]:
            fill = _fill(st["policy"], g, st["last"], float(x[0]))
            out = SigSeg(st["end"], seg.rate, np.concatenate([fill, x]))
    st.update(rate=seg.rate, end=seg.end, last=float(x[-1]))
    return out, st


register(SignalFunction(
    name="degap", kernel=degap,
    params=(Param("seg", "sigseg"), Param("policy", "string", literal=True),
            Param("max_gap", "bigint", None, literal=True)),
    returns="sigseg", output="segment", stateful=True, causal=False, lookback=None,
    unbounded="degap fills a gap from the last sample before it, however long the gap",
    init_state=degap_init,
    doc=("Fills gaps in sample numbers between consecutive segments so the stream becomes "
         "contiguous: a segment starting after the previous one ended is returned with the "
         "fill prepended ('zero', 'hold' the last value, 'linear' interpolation), or "
         "'error' raises SIGNAL_GAP. Gaps longer than max_gap samples (default unlimited) are "
         "left open; overlapping segments raise SEGMENT_ORDER.\n"
         "Example: SELECT lowpass(degap(ch1, 'linear', 4800), 1000.0) FROM mic")))
