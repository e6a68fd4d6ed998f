"""Streaming polyphase resampling to a new rate.

The rate ratio ``new_rate / rate`` becomes a fraction ``up / down`` (exact for rates that
are integers or exact binary fractions, else ``Fraction.limit_denominator(MAX_FACTOR)``;
``up`` and ``down`` are at most :data:`MAX_FACTOR`). The anti-aliasing filter is the one
``scipy.signal.resample_poly`` designs: ``h = firwin(2 * half + 1, 1 / max(up, down),
window=('kaiser', 5.0)) * up`` with ``half = 10 * max(up, down)``. Output sample ``m`` of a
run is ``upfirdn(h, x, up, down)[m]`` -- the filter is used *causally*, state carried, so
resampling a run cut into segments of any sizes equals ``upfirdn`` over the whole run.

Placement in time (the group-delay choice):

- Output samples sit on the new rate's global grid: new-rate sample number ``k`` is at
  time ``k / new_rate``, and the output of a run starting at input sample ``s0`` starts at
  ``k0 = ceil(s0 * up / down)``, the first grid point at or after the run's start. Input
  samples before ``s0`` count as zeros, so the phase never depends on how the run was cut.
- The filter's group delay (``half / up`` input samples = ``half / down`` output samples,
  e.g. 27.6 input samples, 0.63 ms, for 44.1 kHz -> 16 kHz) is *not* compensated, as with
  ``lowpass`` and the other causal filters: output ``k`` depends only on input up to time
  ``k / new_rate``. Compensating would hold back ~``half / down`` outputs per run and lose
  them at a gap; subtract the delay in the query if absolute alignment matters.
- A run of ``N`` input samples yields the grid points inside its time span
  (``ceil(s_end * up / down) - k0`` samples, ``s_end = s0 + N``), exactly what
  ``upfirdn`` gives as its first outputs; its ring-down tail past the run's end is not
  emitted (as ``sosfilt`` emits none).

Stream rules as for the filters: a gap starts a new run (state reset), overlap is
``SEGMENT_ORDER``, a rate change ``RATE_MISMATCH``, empty segments pass through. Resampling
to the same rate returns the samples unchanged.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> y, st = resample(SigSeg(0, 48000.0, np.ones(480)), 16000.0)
>>> y.start, y.rate, y.width
(0, 16000.0, 160)
"""

from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np
from scipy import signal as sps

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import as_seg, ceil_div, lit_float, new_stream_state, samples64, stream_step

#: Largest up or down factor: the filter has 20 * max(up, down) + 1 taps.
MAX_FACTOR = 10_000


def ratio(rate: float, new_rate: float) -> tuple[int, int]:
    """``(up, down)`` with ``up / down`` = ``new_rate / rate`` (approximated if needed).

    Examples
    --------
    >>> ratio(44100.0, 16000.0), ratio(48000.0, 44100.0), ratio(1e6, 44100.0)
    ((160, 441), (147, 160), (441, 10000))
    """
    exact = Fraction(new_rate) / Fraction(rate)  # exact: floats are binary fractions
    if exact.numerator > MAX_FACTOR or exact.denominator > MAX_FACTOR:
        exact = exact.limit_denominator(MAX_FACTOR)
    up, down = exact.numerator, exact.denominator
    if up == 0 or up > MAX_FACTOR:
        raise SignalError("INVALID_ARGUMENT",
                          f"resample: {rate:g} Hz -> {new_rate:g} Hz needs a ratio beyond "
                          f"1/{MAX_FACTOR} .. {MAX_FACTOR}", hint="resample in stages")
    return up, down


@functools.lru_cache(maxsize=16)
def design(up: int, down: int) -> np.ndarray:
    """The anti-aliasing filter ``scipy.signal.resample_poly`` would use (gain ``up``).

    Cached, and kept out of the state, so the state carried across micro-batches stays
    small (a 441/10000 filter has 200001 taps).
    """
    max_rate = max(up, down)
    half = 10 * max_rate
    h = sps.firwin(2 * half + 1, 1.0 / max_rate, window=("kaiser", 5.0)) * up
    h.flags.writeable = False
    return h


def resample_init(new_rate) -> dict:
    """State for ``resample``: checks ``new_rate``; the ratio waits for the input rate."""
    nr = lit_float(new_rate, "resample", "new_rate")
    if not nr > 0:
        raise SignalError("INVALID_RATE", f"resample: new_rate must be positive, got {nr:g}")
    return new_stream_state(new_rate=nr, up=None, down=None, hist=None, hist_start=None,
                            next_k=None)


def resample(seg: SigSeg, new_rate: float, state: dict | None = None):
    """Resample ``seg`` to ``new_rate``, streaming; returns ``(segment, new state)``.

    The output rate is ``rate * up / down`` (== ``new_rate`` whenever the ratio is exact).
    """
    if state is None:
        state = resample_init(new_rate)
    seg = as_seg(seg, "resample")
    st = dict(state)
    where = stream_step(st, seg, "resample")
    up, down = ((st["up"], st["down"]) if st["up"] is not None
                else ratio(seg.rate, st["new_rate"]))
    out_rate = float(Fraction(seg.rate) * up / down)
    if where == "empty":
        return SigSeg(ceil_div(seg.start * up, down), out_rate, np.zeros(0)), st
    st["up"], st["down"] = up, down
    x = samples64(seg)
    if where != "next":
        # A new run. Start the history at a multiple of `down` at or before the run (zeros
        # in between): upfirdn's output j then lies exactly on new-rate grid point
        # hist_start * up / down + j, whatever s0 is.
        hist_start = (seg.start // down) * down
        st["hist"] = np.zeros(seg.start - hist_start)
        st["hist_start"] = hist_start
        st["next_k"] = ceil_div(seg.start * up, down)
    k_next, k_stop = st["next_k"], ceil_div(seg.end * up, down)
    if up == down:  # same rate: nothing to filter
        st.update(rate=seg.rate, end=seg.end, next_k=k_stop)
        return SigSeg(seg.start, out_rate, x), st
    h = design(up, down)
    buf = np.concatenate([st["hist"], x])
    hist_start = st["hist_start"]
    base = hist_start * up // down  # exact: down divides hist_start
    y = sps.upfirdn(h, buf, up, down)[k_next - base:k_stop - base]
    # Keep the inputs that outputs k_stop.. still need: k * down - (len(h) - 1) .. in the
    # upsampled domain, i.e. from input ceil((k_stop * down - len(h) + 1) / up).
    need = min(max(ceil_div(k_stop * down - (h.shape[0] - 1), up), hist_start), seg.end)
    new_start = (need // down) * down
    st.update(rate=seg.rate, end=seg.end, next_k=k_stop, hist_start=new_start,
              hist=buf[new_start - hist_start:].copy())
    return SigSeg(k_next, out_rate, y), st


register(SignalFunction(
    name="resample", kernel=resample,
    params=(Param("seg", "sigseg"), Param("new_rate", "double", literal=True)),
    returns="sigseg", output="segment", stateful=True, causal=True, lookback=None,
    unbounded="resample's output grid is anchored at the first sample of the stream",
    init_state=resample_init,
    doc=("Polyphase resampling to new_rate (rational up/down from the two rates, the "
         "Kaiser-windowed FIR scipy.signal.resample_poly designs), streaming: segments of "
         "any sizes give the same samples as upfirdn over the whole signal. Output sample "
         "numbers are on the new rate's grid (first = ceil(start * up / down)); the filter is "
         "causal and its group delay (10 * max(up, down) / up input samples) is not "
         "compensated. A gap starts a new run; overlap raises SEGMENT_ORDER, a rate change "
         "RATE_MISMATCH, new_rate <= 0 INVALID_RATE.\n"
         "Example: SELECT resample(ch1, 16000.0) FROM mic")))
