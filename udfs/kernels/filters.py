"""Linear filters whose state is carried from segment to segment (and across micro-batches).

Filtering a signal cut into segments of any sizes, state carried, gives the same samples
as filtering it in one piece with ``scipy.signal.lfilter`` / ``sosfilt`` (zero initial
conditions): the carried state is the filter's delay line (``zi``).

Stream rules shared by the family (see :func:`~._common.stream_step`):

- the design (Butterworth sections, notch) depends on the sample rate, so it is made on
  the first non-empty segment; a later segment at another rate is ``RATE_MISMATCH``;
- a segment starting after the previous one ended (a gap in sample numbers) *resets* the
  delay line: each contiguous run is filtered as a signal of its own, the output keeps
  the gap (it is never closed); use ``degap`` first to filter across gaps;
- a segment overlapping or before the previous one is ``SEGMENT_ORDER``;
- empty segments pass through and leave the state alone;
- segments of any width work (a 1-sample segment is fine: the order of a filter is not
  limited by the segment width);
- NaN/Inf samples propagate as in scipy: an IIR filter's output stays NaN after one
  (until the state resets at a gap); an FIR's for ``len(taps)`` samples.

Parallel partitions (:func:`forgetting_samples`): a stable IIR filter forgets its state
geometrically, so a partition of the signal can start from zero state L samples early and
reach, at its first owned sample, the state the whole-signal filter has there up to
``2**-53`` of its size. L is computed when the query is planned, from the design at the
signal's rate: the smallest power of two with ``||A**L||_2 <= 2**-53``, A the filter's
state-transition matrix in scipy's own ``zi`` convention (so any incoming state shrinks
below one rounding of itself). A lowpass at 1 kHz on 48 kHz audio needs 1,024 samples; a
50 Hz notch with q = 30 at 48 kHz about 512 K. A filter whose state never dies out (a
pole on or outside the unit circle, e.g. ``iir(x, array(1.0), array(1.0, -1.0))``) or
that needs more than :data:`MAX_FORGET` samples runs in one ordered pass instead, and
EXPLAIN says why. FIR filters need exactly ``len(taps) - 1`` samples.

Designs are literals (``LITERAL_REQUIRED`` otherwise) checked by ``init_state`` when the
stream starts, and against the Nyquist frequency ``rate / 2`` at the first segment
(``INVALID_ARGUMENT``). Unstable IIR coefficients are the user's choice and not checked.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> x = np.random.default_rng(1).normal(size=1000)
>>> st = None
>>> parts = []
>>> for a, b in ((0, 10), (10, 700), (700, 1000)):
...     y, st = lowpass(SigSeg(a, 1000.0, x[a:b]), 50.0, 4, st)
...     parts.append(y.samples)
>>> sos = sps.butter(4, 50.0, output="sos", fs=1000.0)
>>> bool(np.allclose(np.concatenate(parts), sps.sosfilt(sos, x), atol=1e-12))
True
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import signal as sps

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import as_seg, lit_array, lit_float, lit_int, new_stream_state, samples64, stream_step

MAX_ORDER = 32  # Butterworth orders beyond this are numerically meaningless in float64
#: Warm-ups longer than this (2**24 samples: 5.8 minutes at 48 kHz) make the scan sequential:
#: re-reading that much before every partition would cost more than the parallelism gains.
MAX_FORGET = 1 << 24
#: The state error a warm-up may leave, relative to the state's size: one rounding.
FORGET_TOLERANCE = 2.0 ** -53


# -- designs ------------------------------------------------------------------------------
def _sos_state(fname: str, spec: tuple) -> dict:
    return new_stream_state(fname=fname, spec=spec, sos=None, b=None, a=None, zi=None)


def _order(order, fname: str) -> int:
    return lit_int(order, fname, "order", lo=1, hi=MAX_ORDER)


def _below_nyquist(fname: str, what: str, hz: float, rate: float) -> None:
    if not hz < rate / 2:
        raise SignalError("INVALID_ARGUMENT",
                          f"{fname}: {what} {hz:g} Hz is not below the Nyquist frequency "
                          f"{rate / 2:g} Hz of a {rate:g} Hz signal")


def _design(spec: tuple, rate: float) -> np.ndarray:
    """Second-order sections for ``spec`` at ``rate`` (checked against Nyquist)."""
    kind = spec[0]
    if kind in ("lowpass", "highpass"):
        _, cutoff, order = spec
        _below_nyquist(kind, "cutoff_hz", cutoff, rate)
        return sps.butter(order, cutoff, btype=kind, output="sos", fs=rate)
    if kind == "bandpass":
        _, lo, hi, order = spec
        _below_nyquist(kind, "hi_hz", hi, rate)
        return sps.butter(order, [lo, hi], btype="bandpass", output="sos", fs=rate)
    if kind == "notch":
        _, freq, q = spec
        _below_nyquist(kind, "freq_hz", freq, rate)
        b, a = sps.iirnotch(freq, q, fs=rate)
        return sps.tf2sos(b, a)
    raise AssertionError(kind)  # pragma: no cover - specs come from the init functions below


def lowpass_init(cutoff_hz, order=4) -> dict:
    """State for ``lowpass``: validates the literals; the design waits for the rate."""
    return _sos_state("lowpass", ("lowpass", lit_float(cutoff_hz, "lowpass", "cutoff_hz",
                                                       positive=True), _order(order, "lowpass")))


def highpass_init(cutoff_hz, order=4) -> dict:
    """State for ``highpass``."""
    return _sos_state("highpass", ("highpass", lit_float(cutoff_hz, "highpass", "cutoff_hz",
                                                         positive=True),
                                   _order(order, "highpass")))


def bandpass_init(lo_hz, hi_hz, order=4) -> dict:
    """State for ``bandpass`` (needs ``0 < lo_hz < hi_hz``)."""
    lo = lit_float(lo_hz, "bandpass", "lo_hz", positive=True)
    hi = lit_float(hi_hz, "bandpass", "hi_hz", positive=True)
    if not lo < hi:
        raise SignalError("INVALID_ARGUMENT",
                          f"bandpass: lo_hz must be below hi_hz, got {lo:g} and {hi:g}")
    return _sos_state("bandpass", ("bandpass", lo, hi, _order(order, "bandpass")))


def notch_init(freq_hz, q=30.0) -> dict:
    """State for ``notch`` (quality factor ``q`` = centre frequency / -3 dB bandwidth)."""
    return _sos_state("notch", ("notch", lit_float(freq_hz, "notch", "freq_hz", positive=True),
                                lit_float(q, "notch", "q", positive=True)))


def fir_init(taps) -> dict:
    """State for ``fir``: the taps, a delay line of ``len(taps) - 1`` samples."""
    b = lit_array(taps, "fir", "taps")
    return new_stream_state(fname="fir", spec=None, sos=None, b=b, a=np.ones(1), zi=None)


def iir_init(b, a) -> dict:
    """State for ``iir`` (``a[0]`` must be non-zero; coefficients are normalised by it)."""
    bb = lit_array(b, "iir", "b")
    aa = lit_array(a, "iir", "a")
    if aa[0] == 0:
        raise SignalError("INVALID_ARGUMENT", "iir: a[0] must be non-zero")
    return new_stream_state(fname="iir", spec=None, sos=None, b=bb, a=aa, zi=None)


# -- how far back a partition must start (parallel scans) ------------------------------------
def transition_matrix(sos: np.ndarray | None = None, b=None, a=None) -> np.ndarray:
    """The filter's state-transition matrix A (``zi_next = A @ zi`` on a zero input), in
    the state layout scipy's ``sosfilt``/``lfilter`` use, built by stepping unit states."""
    if sos is not None:
        n = 2 * sos.shape[0]
        return np.column_stack([sps.sosfilt(sos, [0.0], zi=e.reshape(-1, 2))[1].ravel()
                                for e in np.eye(n)]) if n else np.zeros((0, 0))
    n = max(len(a), len(b)) - 1
    return np.column_stack([sps.lfilter(b, a, [0.0], zi=e)[1] for e in np.eye(n)]) \
        if n else np.zeros((0, 0))


def forgetting_samples(A: np.ndarray, fname: str) -> int | str:
    """The smallest power of two L with ``||A**L||_2 <= FORGET_TOLERANCE`` -- and at
    ``2L`` too, so a longer warm-up (partitions start on the window grid) is no worse --
    or the reason there is none up to :data:`MAX_FORGET`.

    >>> forgetting_samples(transition_matrix(b=np.ones(4), a=np.ones(1)), "fir")
    4
    >>> forgetting_samples(transition_matrix(b=np.ones(1), a=np.array([1.0, -1.0])), "iir")
    'iir never forgets its state (a pole on or outside the unit circle)'
    """
    if A.size == 0:
        return 0
    power, length, previous = A, 1, np.inf
    with np.errstate(all="ignore"):
        while length <= MAX_FORGET:
            norm = float(np.linalg.norm(power, 2)) if np.isfinite(power).all() else np.inf
            if norm <= FORGET_TOLERANCE and previous <= FORGET_TOLERANCE:
                return length // 2
            previous = norm
            power, length = power @ power, length * 2
    radius = float(np.max(np.abs(np.linalg.eigvals(A))))
    if radius >= 1 - 1e-12:
        return f"{fname} never forgets its state (a pole on or outside the unit circle)"
    return (f"{fname} takes more than {MAX_FORGET:,} samples to forget its state (pole "
            f"radius {radius:.9f})")


@functools.lru_cache(maxsize=256)
def _sos_forgetting(spec: tuple, rate: float) -> int | str:
    try:
        sos = _design(spec, rate)
    except SignalError as err:  # reported when the stream starts; plan as if sequential
        return err.message
    return forgetting_samples(transition_matrix(sos), spec[0])


@functools.lru_cache(maxsize=256)
def _ba_forgetting(b: tuple, a: tuple) -> int | str:
    bb, aa = np.asarray(b, float), np.asarray(a, float)
    if aa.size == 0 or aa[0] == 0 or bb.size == 0:
        return "iir: invalid coefficients"
    return forgetting_samples(transition_matrix(b=bb / aa[0], a=aa / aa[0]), "iir")


def _spec_rule(init):
    """A ``lookback_rule`` for the Butterworth/notch family: the design at the rate."""
    def rule(rate, *args):
        try:
            spec = init(*args)["spec"]
        except SignalError as err:
            return err.message
        return _sos_forgetting(spec, float(rate)) if rate else "the signal's rate is unknown"
    return rule


def _iir_rule(rate, b, a) -> int | str:
    try:
        st = iir_init(b, a)
    except SignalError as err:
        return err.message
    return _ba_forgetting(tuple(st["b"].tolist()), tuple(st["a"].tolist()))


# -- the one streaming loop -----------------------------------------------------------------
def _run(seg: SigSeg, state: dict) -> tuple[SigSeg, dict]:
    fname = state["fname"]
    seg = as_seg(seg, fname)
    st = dict(state)  # never mutate the caller's state: a retried batch must replay exactly
    x = samples64(seg)
    where = stream_step(st, seg, fname)
    if where == "empty":
        return SigSeg(seg.start, seg.rate, x), st
    if st["b"] is None and st["sos"] is None:
        st["sos"] = _design(st["spec"], seg.rate)
    if st["sos"] is not None:
        zi = st["zi"] if where == "next" else np.zeros((st["sos"].shape[0], 2))
        y, zf = sps.sosfilt(st["sos"], x, zi=zi)
    else:
        zi = (st["zi"] if where == "next"
              else np.zeros(max(st["a"].shape[0], st["b"].shape[0]) - 1))
        y, zf = sps.lfilter(st["b"], st["a"], x, zi=zi)
    st.update(rate=seg.rate, end=seg.end, zi=zf)
    return SigSeg(seg.start, seg.rate, y), st


def lowpass(seg: SigSeg, cutoff_hz: float, order: int = 4, state: dict | None = None):
    """Butterworth low-pass (``scipy.signal.butter(order, cutoff_hz, fs=rate)``), streaming.

    Returns ``(filtered segment, new state)``; ``state=None`` starts a stream.
    """
    return _run(seg, lowpass_init(cutoff_hz, order) if state is None else state)


def highpass(seg: SigSeg, cutoff_hz: float, order: int = 4, state: dict | None = None):
    """Butterworth high-pass, streaming; returns ``(segment, state)``."""
    return _run(seg, highpass_init(cutoff_hz, order) if state is None else state)


def bandpass(seg: SigSeg, lo_hz: float, hi_hz: float, order: int = 4,
             state: dict | None = None):
    """Butterworth band-pass (order ``order`` per edge), streaming; returns ``(segment, state)``."""
    return _run(seg, bandpass_init(lo_hz, hi_hz, order) if state is None else state)


def notch(seg: SigSeg, freq_hz: float, q: float = 30.0, state: dict | None = None):
    """Second-order notch (``scipy.signal.iirnotch(freq_hz, q, fs=rate)``), streaming."""
    return _run(seg, notch_init(freq_hz, q) if state is None else state)


def fir(seg: SigSeg, taps, state: dict | None = None):
    """FIR filter ``y[n] = sum_k taps[k] x[n - k]`` (``lfilter(taps, [1], x)``), streaming."""
    return _run(seg, fir_init(taps) if state is None else state)


def iir(seg: SigSeg, b, a, state: dict | None = None):
    """Direct-form IIR filter ``lfilter(b, a, x)``, streaming."""
    return _run(seg, iir_init(b, a) if state is None else state)


# -- registry -------------------------------------------------------------------------------
SEG = Param("seg", "sigseg")
ORDER = Param("order", "int", 4, literal=True)
_STREAM = ("State is carried across segments and batches; a gap in sample numbers resets it "
           "(each contiguous run is filtered on its own), overlapping segments raise "
           "SEGMENT_ORDER and a rate change RATE_MISMATCH.")


def _entry(name, kernel, params, init, doc, lookback_rule=None):
    register(SignalFunction(
        name=name, kernel=kernel, params=(SEG,) + params, returns="sigseg", output="segment",
        stateful=True, causal=True, lookback=None, init_state=init,
        lookback_rule=lookback_rule or _spec_rule(init), doc=doc))


_entry("lowpass", lowpass, (Param("cutoff_hz", "double", literal=True), ORDER), lowpass_init,
       "Butterworth low-pass filter of the given order (scipy.signal.butter, second-order "
       "sections, designed for the signal's rate); cutoff_hz must be below rate / 2. "
       + _STREAM + "\nExample: SELECT lowpass(ch1, 1000.0, 4) FROM mic")
_entry("highpass", highpass, (Param("cutoff_hz", "double", literal=True), ORDER),
       highpass_init,
       "Butterworth high-pass filter of the given order (scipy.signal.butter, second-order "
       "sections); cutoff_hz must be below rate / 2. " + _STREAM
       + "\nExample: SELECT seg_rms(highpass(vib, 500.0)) FROM bearing")
_entry("bandpass", bandpass, (Param("lo_hz", "double", literal=True),
                              Param("hi_hz", "double", literal=True), ORDER), bandpass_init,
       "Butterworth band-pass filter passing lo_hz..hi_hz (0 < lo_hz < hi_hz < rate / 2; "
       "2 * order poles). " + _STREAM
       + "\nExample: SELECT bandpass(ch1, 300.0, 3400.0, 4) AS voice FROM mic")
_entry("notch", notch, (Param("freq_hz", "double", literal=True),
                        Param("q", "double", 30.0, literal=True)), notch_init,
       "Second-order IIR notch removing freq_hz (scipy.signal.iirnotch; q = freq_hz / "
       "bandwidth), e.g. mains hum. " + _STREAM
       + "\nExample: SELECT notch(ecg, 50.0, 30.0) FROM patient")
_entry("fir", fir, (Param("taps", "array<double>", literal=True),), fir_init,
       "FIR filter with the given taps, y[n] = sum_k taps[k] * x[n - k] (as "
       "scipy.signal.lfilter(taps, [1], x)); output n needs the len(taps) - 1 previous "
       "samples. " + _STREAM
       + "\nExample: SELECT fir(ch1, array(0.25, 0.5, 0.25)) FROM mic",
       lookback_rule=lambda rate, taps: len(taps) - 1)
_entry("iir", iir, (Param("b", "array<double>", literal=True),
                    Param("a", "array<double>", literal=True)), iir_init,
       "IIR filter with numerator b and denominator a (scipy.signal.lfilter(b, a, x); "
       "a[0] must be non-zero, stability is not checked). " + _STREAM
       + "\nExample: SELECT iir(ch1, array(0.1), array(1.0, -0.9)) FROM mic",
       lookback_rule=_iir_rule)
