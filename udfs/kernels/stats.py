"""Per-segment statistics (each returns one double, or a bigint count).

Conventions shared by the family, chosen to match SQL aggregates over the samples:

- computed in float64 whatever the sample type;
- an empty segment gives NaN (``zero_crossings`` gives 0), never an error: a statistic of
  no samples is undefined, like SQL's ``avg`` of no rows. In a ``WHERE`` a NaN compares as
  in Spark (equal to NaN, above every number: ``seg_std(ch1) > 0.01`` keeps it, ``< 0.01``
  drops it; see the non-finite policy in ``udfs/registry.py``);
- NaN samples propagate (the result is NaN), as in numpy; +-Inf follow IEEE arithmetic;
- degenerate denominators give NaN: ``seg_std`` of one sample, ``seg_kurtosis`` and
  ``crest_factor`` of a constant / all-zero segment.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> s = SigSeg(0, 100.0, np.array([1.0, -1.0, 1.0, -1.0]))
>>> seg_avg(s), seg_std(s) > 1.15, seg_rms(s), crest_factor(s), zero_crossings(s)
(0.0, True, 1.0, 1.0, 3)
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SegBlock, SigSeg
from ._common import as_seg, samples64

SEG = Param("seg", "sigseg")
NAN = float("nan")


def _x(seg: SigSeg, fname: str) -> np.ndarray:
    return samples64(as_seg(seg, fname))


def _quiet(kernel):
    """Run ``kernel`` with numpy's floating-point warnings off: Inf - Inf and 0/0 are
    documented to give NaN here, and a warning per segment would flood executor logs."""

    @functools.wraps(kernel)
    def wrapper(seg):
        with np.errstate(all="ignore"):
            return kernel(seg)

    return wrapper


@_quiet
def seg_avg(seg: SigSeg) -> float:
    """Mean of the samples (NaN if empty)."""
    x = _x(seg, "seg_avg")
    return float(np.mean(x)) if x.size else NAN


@_quiet
def seg_std(seg: SigSeg) -> float:
    """Sample standard deviation (``ddof=1``, as SQL ``stddev``); NaN below two samples."""
    x = _x(seg, "seg_std")
    return float(np.std(x, ddof=1)) if x.size >= 2 else NAN


@_quiet
def seg_rms(seg: SigSeg) -> float:
    """Root mean square ``sqrt(mean(v**2))`` (NaN if empty)."""
    x = _x(seg, "seg_rms")
    # np.dot keeps this one pass and float64-accumulated.
    return math.sqrt(float(np.dot(x, x)) / x.size) if x.size else NAN


@_quiet
def seg_min(seg: SigSeg) -> float:
    """Smallest sample (NaN if empty or if any sample is NaN)."""
    x = _x(seg, "seg_min")
    return float(np.min(x)) if x.size else NAN


@_quiet
def seg_max(seg: SigSeg) -> float:
    """Largest sample (NaN if empty or if any sample is NaN)."""
    x = _x(seg, "seg_max")
    return float(np.max(x)) if x.size else NAN


@_quiet
def seg_kurtosis(seg: SigSeg) -> float:
    """Population kurtosis ``mean((v - mu)**4) / var_pop**2`` (3 for a Gaussian).

    Same as ``scipy.stats.kurtosis(v, fisher=False, bias=True)``; NaN if empty or
    constant (zero variance).
    """
    x = _x(seg, "seg_kurtosis")
    if not x.size:
        return NAN
    d = x - np.mean(x)
    d2 = d * d
    m2 = float(np.mean(d2))
    m4 = float(np.mean(d2 * d2))
    # A constant segment has no defined kurtosis; numpy would warn on 0/0.
    return m4 / (m2 * m2) if m2 > 0 else NAN


@_quiet
def crest_factor(seg: SigSeg) -> float:
    """Peak-to-RMS ratio ``max(|v|) / rms`` (NaN if empty or all zero)."""
    x = _x(seg, "crest_factor")
    if not x.size:
        return NAN
    rms = math.sqrt(float(np.dot(x, x)) / x.size)
    peak = float(np.max(np.abs(x)))
    if math.isnan(peak) or math.isnan(rms):
        return NAN
    return peak / rms if rms > 0 else NAN


@_quiet
def zero_crossings(seg: SigSeg) -> int:
    """Number of sign changes between consecutive non-zero samples.

    Zeros (and NaN samples) are skipped, so ``+, 0, -`` counts one crossing and
    ``+, 0, +`` none; only crossings inside the segment are counted (not with the
    neighbouring segment).

    Examples
    --------
    >>> import numpy as np
    >>> zero_crossings(SigSeg(0, 1.0, np.array([1.0, 0.0, -2.0, 0.0, -1.0, 3.0])))
    2
    """
    x = _x(seg, "zero_crossings")
    s = np.sign(x[(x != 0) & ~np.isnan(x)])
    return int(np.count_nonzero(s[1:] != s[:-1]))


# -- batch forms: k equal-width windows at once (a SegBlock), same results as the kernels ----
def _batch(fn):
    """Vectorised statistic over a block's rows; width-0 blocks give NaN like the kernels."""

    @functools.wraps(fn)
    def wrapper(block: SegBlock) -> np.ndarray:
        if block.width == 0:
            return np.full(block.k, NAN)
        with np.errstate(all="ignore"):
            return fn(block)

    return wrapper


#: Largest block (in samples) converted to float64 as a whole: a block of overlapping
#: windows is a strided view whose copy would hold every window's samples.
_F64_MAX = 1 << 23


def _f64(block: SegBlock) -> np.ndarray:
    """The block's samples as float64, converted once and shared by the statistics (one
    cast, then plain float64 reductions: 1.5x faster than reductions that cast float32 on
    the fly, once per statistic). Reductions still pass ``dtype=np.float64``: a block too
    large to copy is returned as it is."""
    if "f64" not in block.cache:
        d = block.data
        block.cache["f64"] = d.astype(np.float64) if d.size <= _F64_MAX else d
    return block.cache["f64"]


def _row_means(block: SegBlock) -> np.ndarray:
    if "mean" not in block.cache:
        block.cache["mean"] = _f64(block).sum(axis=1, dtype=np.float64) / block.width
    return block.cache["mean"]


def _sumsq_dev(d, mean):
    """Squared deviations from the row means, two-pass (robust), and the deviations."""
    dev = d - mean[:, None]
    return np.einsum("ij,ij->i", dev, dev), dev


def _sumsq(block: SegBlock) -> np.ndarray:
    """Sum of squared deviations from each row's mean, in float64.

    One pass, sum(x^2) - n*mean^2, is 1.5x faster than two, but cancels when the mean is
    large against the spread (a DC offset): rows where sum(x^2) exceeds the result 10^4-fold
    (relative error above ~1e-9) are recomputed with two passes.
    """
    d, n = _f64(block), block.width
    mean = _row_means(block)
    squares = np.einsum("ij,ij->i", d, d, dtype=np.float64)
    out = squares - n * mean * mean
    risky = ~(out * 1e4 > squares)  # also catches NaN, zero spread and negative round-off
    if risky.any():
        rows = np.flatnonzero(risky)
        out[rows] = _sumsq_dev(d[rows], mean[rows])[0]
    return out


@_batch
def seg_avg_batch(block):
    return _row_means(block).copy()


@_batch
def seg_std_batch(block):
    if block.width < 2:
        return np.full(block.k, NAN)
    return np.sqrt(_sumsq(block) / (block.width - 1))


@_batch
def seg_rms_batch(block):
    d, n = _f64(block), block.width
    return np.sqrt(np.einsum("ij,ij->i", d, d, dtype=np.float64) / n)


@_batch
def seg_min_batch(block):
    d = block.data
    return d.min(axis=1).astype(np.float64)


@_batch
def seg_max_batch(block):
    d = block.data
    return d.max(axis=1).astype(np.float64)


@_batch
def seg_kurtosis_batch(block):
    d, n = _f64(block), block.width
    ss, dev = _sumsq_dev(d, _row_means(block))
    m2 = ss / n
    m4 = np.mean((dev * dev) ** 2, axis=1)
    out = m4 / (m2 * m2)
    out[~(m2 > 0)] = NAN
    out[np.isnan(m2)] = NAN
    return out


@_batch
def crest_factor_batch(block):
    x, n = _f64(block), block.width
    rms = np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64) / n)
    peak = np.abs(x).max(axis=1)
    out = peak / rms
    out[~(rms > 0)] = NAN
    out[np.isnan(rms) | np.isnan(peak)] = NAN
    return out


_BATCH = {"seg_avg": seg_avg_batch, "seg_std": seg_std_batch, "seg_rms": seg_rms_batch,
          "seg_min": seg_min_batch, "seg_max": seg_max_batch,
          "seg_kurtosis": seg_kurtosis_batch, "crest_factor": crest_factor_batch}


_EMPTY = "An empty segment gives NaN; NaN samples give NaN."

register(SignalFunction(
    name="seg_avg", kernel=seg_avg, batch=_BATCH["seg_avg"], params=(SEG,), returns="double", output="scalar",
    doc=("Mean of the segment's samples, in double precision. " + _EMPTY + "\n"
         "Example: SELECT seg_avg(ch1) FROM mic [SAMPLES 4096] WHERE seg_avg(ch1) < 0.001")))

register(SignalFunction(
    name="seg_std", kernel=seg_std, batch=_BATCH["seg_std"], params=(SEG,), returns="double", output="scalar",
    doc=("Sample standard deviation of the segment (ddof = 1, like SQL stddev / "
         "stddev_samp). Fewer than two samples give NaN; NaN samples give NaN.\n"
         "Example: SELECT start_time(ch1), seg_std(ch1) FROM mic [SAMPLES 4096] "
         "WHERE seg_std(ch1) > 0.05")))

register(SignalFunction(
    name="seg_rms", kernel=seg_rms, batch=_BATCH["seg_rms"], params=(SEG,), returns="double", output="scalar",
    doc=("Root mean square sqrt(avg(v^2)) of the segment. " + _EMPTY + "\n"
         "Example: SELECT seg_rms(ch1) FROM mic [SAMPLES 1024]")))

register(SignalFunction(
    name="seg_min", kernel=seg_min, batch=_BATCH["seg_min"], params=(SEG,), returns="double", output="scalar",
    doc=("Smallest sample of the segment. " + _EMPTY + "\n"
         "Example: SELECT seg_min(ch1), seg_max(ch1) FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="seg_max", kernel=seg_max, batch=_BATCH["seg_max"], params=(SEG,), returns="double", output="scalar",
    doc=("Largest sample of the segment. " + _EMPTY + "\n"
         "Example: SELECT seg_max(ch1) - seg_min(ch1) AS range FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="seg_kurtosis", kernel=seg_kurtosis, batch=_BATCH["seg_kurtosis"], params=(SEG,), returns="double",
    output="scalar",
    doc=("Population (Pearson) kurtosis avg((v - mu)^4) / var_pop^2 of the samples, 3 for "
         "Gaussian noise, large for impulsive signals (same as scipy.stats.kurtosis with "
         "fisher=False). Empty or constant segments give NaN; NaN samples give NaN.\n"
         "Example: SELECT seg_kurtosis(vib) FROM bearing [SAMPLES 8192] "
         "WHERE seg_kurtosis(vib) > 6")))

register(SignalFunction(
    name="crest_factor", kernel=crest_factor, batch=_BATCH["crest_factor"], params=(SEG,), returns="double",
    output="scalar",
    doc=("Peak-to-RMS ratio max|v| / rms of the segment (1 for a square wave, sqrt(2) for "
         "a sine). Empty or all-zero segments give NaN; NaN samples give NaN.\n"
         "Example: SELECT crest_factor(vib) FROM bearing [SAMPLES 8192]")))

register(SignalFunction(
    name="zero_crossings", kernel=zero_crossings, params=(SEG,), returns="bigint",
    output="scalar",
    doc=("Number of sign changes between consecutive non-zero samples of the segment; "
         "zero and NaN samples are skipped (+, 0, - is one crossing). Empty segments "
         "give 0. Crossings between two segments are not counted.\n"
         "Example: SELECT zero_crossings(ch1) / (width(ch1) / 44100.0) / 2 AS hz "
         "FROM mic [SAMPLES 4096]")))
