"""Detectors: peak trimming, CFAR over a score stream, threshold ranges.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> rest = trimpeak(SigSeg(100, 10.0, np.array([0.0, -3.0, 2.0, -1.0])), "min")
>>> rest.start, rest.samples.tolist()
(101, [-3.0, 2.0, -1.0])
>>> r, st = threshold_ranges(SigSeg(0, 10.0, np.array([0, 5, 5, 0, 0, 7, 0.0])), 1.0)
>>> r.spans, r.values
(((1, 3), (5, 6)), (5.0, 7.0))
"""

from __future__ import annotations

import math
import struct

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import (as_seg, is_number, lit_choice, lit_float, lit_int, new_stream_state,
                      samples64, stream_step)
from .values import Ranges


# -- trimpeak -------------------------------------------------------------------------------
def trimpeak(seg: SigSeg, mode: str) -> SigSeg:
    """Split ``seg`` at its extreme sample and return the part from the peak on.

    The result starts *at* the peak: its ``start`` is the peak's sample number and its first
    sample the peak value, so ``trimpeak`` chains (XStream's PIPELINE: min, then the max
    after it, ...). ``mode`` is ``'min'`` or ``'max'``; ties go to the first occurrence;
    NaN samples are ignored (an all-NaN segment returns itself). Empty segments are
    ``EMPTY_SEGMENT``. The result is never empty, so chains never fail on it.
    """
    seg = as_seg(seg, "trimpeak")
    m = lit_choice(mode, "trimpeak", "mode", ("min", "max"))
    x = samples64(seg)
    if x.shape[0] == 0:
        raise SignalError("EMPTY_SEGMENT", "trimpeak of an empty segment has no peak")
    nan = np.isnan(x)
    if nan.all():
        i = 0
    elif nan.any():
        i = int(np.nanargmin(x) if m == "min" else np.nanargmax(x))
    else:
        i = int(np.argmin(x) if m == "min" else np.argmax(x))
    return seg.subseg(seg.start + i, seg.width - i)


# -- cfar -----------------------------------------------------------------------------------
def cfar_init(k=3.0, alpha=0.01, warmup=32) -> dict:
    """State for ``cfar``: parameters, count of scores absorbed, noise mean and variance."""
    kk = lit_float(k, "cfar", "k", nonnegative=True)
    a = lit_float(alpha, "cfar", "alpha", positive=True)
    if a > 1:
        raise SignalError("INVALID_ARGUMENT", f"cfar: alpha must be in (0, 1], got {a:g}")
    w = lit_int(warmup, "cfar", "warmup", lo=2)
    return {"k": kk, "alpha": a, "warmup": w, "n": 0, "mean": 0.0, "m2": 0.0, "var": 0.0}


def cfar(score: float, k: float = 3.0, alpha: float = 0.01, warmup: int = 32,
         state: dict | None = None) -> tuple[bool, dict]:
    """Constant-false-alarm-rate detection on a stream of scores (one per row).

    Noise model N(mu, sigma^2), estimated online:

    - warm-up: the first ``warmup`` finite scores seed mu and sigma^2 (plain mean and
      population variance); nothing fires;
    - then a score fires when ``score > mu + k * sigma`` (estimate from the scores before
      it), and updates the estimate by exponential forgetting with weight ``alpha``
      (memory about ``1 / alpha`` scores): ``d = min(score, mu + k*sigma) - mu``,
      ``mu += alpha*d``, ``sigma^2 = (1 - alpha) * (sigma^2 + alpha * d^2)``. Clipping at the
      threshold keeps an event from inflating its own noise estimate while still letting a
      lasting change in the background raise it (no lock-in).

    NaN/None scores never fire and leave the state unchanged; +Inf fires after warm-up
    but is not absorbed. Returns ``(fired, new state)``.

    Examples
    --------
    >>> st, fired = None, []
    >>> for s in [1.0, 2.0] * 5 + [9.0, 1.5]:
    ...     f, st = cfar(s, 3.0, 0.1, 10, st)
    ...     fired.append(f)
    >>> fired[10:]
    [True, False]
    """
    fired, st = cfar_scan([score], k, alpha, warmup,
                          cfar_init(k, alpha, warmup) if state is None else state)
    return bool(fired[0]), st


def cfar_scan(scores, k: float, alpha: float, warmup: int, state: dict
              ) -> tuple[np.ndarray, dict]:
    """``cfar`` over a run of scores in order, in one loop (the evaluator's form for a
    block of rows: a Python loop over floats, no per-score call); returns the fired flags
    and the state after the last score.

    The arithmetic is :func:`cfar`'s, operation for operation (so any split of the scores
    gives the same bits); only the bookkeeping is hoisted out of the loop: a float array
    (what ``seg_rms`` and the other score functions give) skips the per-score type check,
    the fired rows are collected as indices, and the count of absorbed scores is the
    scores seen less the rare ones not absorbed (NaN, +-Inf). That made the loop about 4x
    faster on 1 M scores (the type check, an ABC ``isinstance``, was most of it).
    """
    st = dict(state)  # never mutate the caller's state: a retried batch must replay exactly
    n, mean, m2, var = st["n"], st["mean"], st["m2"], st["var"]
    kk, a, w = st["k"], st["alpha"], st["warmup"]
    values = _score_floats(scores)
    total = len(values)
    fired_at: list[int] = []
    i = 0
    while n < w and i < total:  # warm-up: Welford's running mean / variance seed the model
        s = values[i]
        i += 1
        if s != s or math.isinf(s):  # NaN (or None): ignored; +-Inf: not absorbed
            continue
        n += 1
        d = s - mean
        mean += d / n
        m2 += d * (s - mean)
        var = m2 / n
    first, skipped = i, 0
    inf, sqrt, keep = math.inf, math.sqrt, fired_at.append
    b = 1.0 - a
    for i in range(first, total):  # detection: the hot loop, one branch per score
        s = values[i]
        threshold = mean + kk * sqrt(var)
        if s > threshold:
            keep(i)
            if s == inf:  # fires, not absorbed
                skipped += 1
                continue
            d = threshold - mean  # min(s, threshold) - mean
        elif s == s and s != -inf:
            d = s - mean
        else:  # NaN never fires, -Inf never fires; neither is absorbed
            skipped += 1
            continue
        mean, var = mean + a * d, b * (var + a * d * d)
    n += total - first - skipped
    fired = np.zeros(total, dtype=np.bool_)
    fired[fired_at] = True
    st.update(n=n, mean=mean, m2=m2, var=var)
    return fired, st


#: How far before a partition a speculative cfar run starts, in units of ln(2**53) / alpha
#: scores (udfs/row_chain.py). Measured (benchmarks/signals/scaling.md, 2026-11-30): a run
#: from a fresh warm-up met the true run bit for bit after at most 1.7x (the benchmark's
#: 3-hour noise, alpha 0.01 and 0.001), 2.2x (speech, ../shared/data, alpha 0.01 and 0.02)
#: and 2.2x (alpha 0.5) of it; 3x leaves room, and a miss only costs a re-run.
CFAR_MEET_FACTOR = 3


def cfar_lookback(k=3.0, alpha=0.01, warmup=32) -> int:
    """Scores before a point after which a cfar run from a fresh state has most likely met
    any other run bit for bit: its warm-up plus ``CFAR_MEET_FACTOR * ln(2**53) / alpha``.

    Why they meet: after the warm-up both runs apply the same update to the same scores,
    and an unclipped score contracts the difference of their means (and, through ``d``,
    of their variances) by ``1 - alpha``; below an ulp the rounded results coincide, and
    from then on the same operations on the same bits give the same bits forever.

    >>> cfar_lookback(4.0, 0.01, 64)
    11086
    """
    a = lit_float(alpha, "cfar", "alpha", positive=True)
    w = lit_int(warmup, "cfar", "warmup", lo=2)
    return w + math.ceil(CFAR_MEET_FACTOR * 53 * math.log(2) / a)


def cfar_agrees(guess: dict, true: dict) -> bool:
    """Whether a cfar run from state ``guess`` flags the rows after it exactly as from
    ``true``: the same state bit for bit, or both past the warm-up with the same bits of
    mean and variance -- past the warm-up the flags and updates read only those (``n``
    only counts the absorbed scores, ``m2`` is the warm-up's, never read again)."""
    if guess.keys() != true.keys() or any(guess[p] != true[p] for p in ("k", "alpha",
                                                                           "warmup")):
        return False
    if all(_same_bits(guess[f], true[f]) for f in ("n", "mean", "m2", "var")):
        return True
    return (guess["n"] >= guess["warmup"] and true["n"] >= true["warmup"]
            and _same_bits(guess["mean"], true["mean"])
            and _same_bits(guess["var"], true["var"]))


def cfar_rebase(end: dict, guess: dict, true: dict) -> dict:
    """The state a run from ``true`` ends in, given the run from ``guess`` (agreeing:
    :func:`cfar_agrees`) ended in ``end``: its mean and variance, the true count of
    absorbed scores, the true warm-up's ``m2``."""
    if all(_same_bits(guess[f], true[f]) for f in ("n", "mean", "m2", "var")):
        return dict(end)
    return dict(end, n=true["n"] + end["n"] - guess["n"], m2=true["m2"])


def _same_bits(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return a == b


def _score_floats(scores) -> list:
    """The scores as Python floats, NaN for None (both never fire nor count); anything
    not a number is ``TYPE_ERROR``. A float array needs no check per score."""
    if isinstance(scores, np.ndarray) and scores.dtype.kind == "f":
        return scores.astype(np.float64, copy=False).tolist()
    out = []
    for score in scores:
        if score is None:
            out.append(math.nan)
        elif not is_number(score):
            raise SignalError("TYPE_ERROR", f"cfar: score must be a number, got {score!r}")
        else:
            out.append(float(score))
    return out


# -- threshold_ranges -------------------------------------------------------------------------
def threshold_ranges_init(threshold, min_gap=0) -> dict:
    """State for ``threshold_ranges``: parameters and the range still open, if any."""
    thr = lit_float(threshold, "threshold_ranges", "threshold")
    gap = lit_int(min_gap, "threshold_ranges", "min_gap", lo=0)
    return new_stream_state(threshold=thr, min_gap=gap, open=None)


def threshold_ranges(seg: SigSeg, threshold: float, min_gap: int = 0,
                     state: dict | None = None) -> tuple[Ranges, dict]:
    """Ranges of samples above ``threshold``, each reported once, when it closes.

    A range is a maximal run of samples ``> threshold``; runs separated by at most
    ``min_gap`` samples not above it are merged into one range. Its value is the largest
    sample in it. Because a run may continue in the next segment (or, with ``min_gap``,
    be merged with a later run), a range is emitted by the call in which more than
    ``min_gap`` non-above samples have followed it; until then it stays in the state, and
    :func:`threshold_ranges_flush` emits it at end of stream. So segmented input gives the
    same ranges as one piece. NaN samples count as not above. A gap in sample numbers
    closes the open range at its last above sample (missing samples are never bridged).
    Returns ``(ranges closed by this segment, new state)``.
    """
    st = dict(threshold_ranges_init(threshold, min_gap) if state is None else state)
    seg = as_seg(seg, "threshold_ranges")
    where = stream_step(st, seg, "threshold_ranges")
    if where == "empty":
        return Ranges((), ()), st
    thr, gap = st["threshold"], st["min_gap"]
    spans: list[tuple[int, int]] = []
    peaks: list[float] = []
    pending = st["open"]  # (start, end, peak) or None
    if pending is not None and where == "gap":
        spans.append(pending[:2])
        peaks.append(pending[2])
        pending = None
    x = samples64(seg)
    above = x > thr
    edges = np.flatnonzero(np.diff(np.concatenate(([0], above.view(np.int8), [0]))))
    if edges.size:
        run_lo, run_hi = edges[0::2], edges[1::2]
        run_peak = np.maximum.reduceat(np.where(above, x, -np.inf), run_lo)
        # Merge runs whose separation is <= min_gap, all at once.
        cut = np.flatnonzero(run_lo[1:] - run_hi[:-1] > gap) + 1
        first = np.concatenate(([0], cut))
        last = np.concatenate((cut, [run_lo.size])) - 1
        g_lo = (run_lo[first] + seg.start).tolist()
        g_hi = (run_hi[last] + seg.start).tolist()
        g_peak = np.maximum.reduceat(run_peak, first).tolist()
        if pending is not None:
            if g_lo[0] - pending[1] <= gap:  # contiguous ("next"): bridge into this segment
                g_lo[0] = pending[0]
                g_peak[0] = max(g_peak[0], pending[2])
            else:
                spans.append(pending[:2])
                peaks.append(pending[2])
        spans.extend(zip(g_lo[:-1], g_hi[:-1]))
        peaks.extend(g_peak[:-1])
        pending = (g_lo[-1], g_hi[-1], g_peak[-1])
    if pending is not None and seg.end - pending[1] > gap:
        spans.append(pending[:2])
        peaks.append(pending[2])
        pending = None
    st.update(rate=seg.rate, end=seg.end, open=pending)
    return Ranges(tuple(spans), tuple(peaks)), st


def threshold_ranges_flush(state: dict) -> Ranges | None:
    """The range still open at end of stream (ending at its last above sample), or None."""
    pending = state.get("open")
    if pending is None:
        return None
    return Ranges((pending[:2],), (pending[2],))


# -- registry -------------------------------------------------------------------------------
register(SignalFunction(
    name="trimpeak", kernel=trimpeak,
    params=(Param("seg", "sigseg"), Param("mode", "string", literal=True)),
    returns="sigseg", output="segment",
    doc=("XStream's trimpeak: finds the segment's minimum (mode 'min') or maximum ('max') "
         "and splits there, returning the part from the peak on: start is the peak's sample "
         "number and samples[0] its value. Ties go to the first occurrence, NaN samples are "
         "ignored, empty segments raise EMPTY_SEGMENT. Chains: the PIPELINE application "
         "takes min, max, min, max and compares the peak magnitudes.\n"
         "Example: SELECT trimpeak(p, 'min').samples[0] AS low, "
         "trimpeak(trimpeak(p, 'min'), 'max').start AS high_at FROM pipe [SAMPLES 8192]")))

register(SignalFunction(
    name="cfar", kernel=cfar,
    params=(Param("score", "double"), Param("k", "double", 3.0, literal=True),
            Param("alpha", "double", 0.01, literal=True),
            Param("warmup", "int", 32, literal=True)),
    returns="boolean", output="scalar", stateful=True, causal=True, lookback=None,
    unbounded="cfar's noise estimate is seeded by the first scores of the stream and "
              "then runs over every score since",
    init_state=cfar_init, scan=cfar_scan,
    doc=("Constant-false-alarm-rate detector over a stream of scores (one per row, in "
         "time order): true when score > mu + k * sigma of a running Gaussian noise "
         "estimate. The first `warmup` scores seed mu and sigma and never fire; afterwards "
         "each score updates the estimate with exponential forgetting alpha, clipped at the "
         "threshold so events do not inflate it. NaN scores are false and ignored.\n"
         "Example: SELECT start_time(ch1), end_time(ch1) FROM mic [SAMPLES 32] "
         "WHERE cfar(band_energy(fft(hanning(ch1)), 3, 4), 4.0, 0.01, 64)")))

register(SignalFunction(
    name="threshold_ranges", kernel=threshold_ranges,
    params=(Param("seg", "sigseg"), Param("threshold", "double", literal=True),
            Param("min_gap", "bigint", 0, literal=True)),
    returns="ranges", output="ranges", stateful=True, causal=True, lookback=None,
    unbounded="threshold_ranges may hold a range open for any number of samples",
    init_state=threshold_ranges_init, flush=threshold_ranges_flush,
    doc=("Sample ranges [start, end) where the signal is above threshold, merging ranges "
         "separated by at most min_gap samples; each range carries its peak value. Ranges "
         "crossing segment boundaries are reported once, by the segment in which they "
         "close; the range still open at end of stream comes from flush. A gap in sample "
         "numbers closes the open range; NaN samples count as below.\n"
         "Example: SELECT threshold_ranges(seg_env, 0.2, 441) FROM envelope")))
