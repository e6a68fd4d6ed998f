"""Discrete wavelet transforms (PyWavelets): Haar band energies and raw DWT coefficients.

Both use ``pywt.wavedec`` with PyWavelets' default signal extension (``'symmetric'``), so
segments of any width >= 2**level work and odd widths are padded by mirroring. A level
beyond ``pywt.dwt_max_level(width, filter_length)`` -- where every coefficient would be a
boundary artefact -- is ``SEGMENT_TOO_SHORT``; an empty segment ``EMPTY_SEGMENT``; NaN
samples make the affected coefficients (and energies) NaN.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> haar(SigSeg(0, 8.0, np.array([1.0, 1.0, 1.0, 1.0, 2.0, 0.0, 2.0, 0.0])), 2).round(6).tolist()
[4.0, 0.0, 8.0]
"""

from __future__ import annotations

import numpy as np
import pywt

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import as_seg, lit_choice, lit_int, samples64

_DISCRETE = tuple(pywt.wavelist(kind="discrete"))


def _decompose(seg: SigSeg, wavelet: str, level, fname: str) -> list[np.ndarray]:
    x = samples64(as_seg(seg, fname))
    lv = lit_int(level, fname, "level", lo=1)
    if x.shape[0] == 0:
        raise SignalError("EMPTY_SEGMENT", f"{fname} of an empty segment is undefined")
    top = pywt.dwt_max_level(x.shape[0], pywt.Wavelet(wavelet).dec_len)
    if lv > top:
        raise SignalError("SEGMENT_TOO_SHORT",
                          f"{fname}: level {lv} needs a longer segment; {x.shape[0]} samples "
                          f"allow at most level {top} with {wavelet!r}",
                          hint="use a wider window or a lower level")
    return pywt.wavedec(x, wavelet, level=lv)


def haar(seg: SigSeg, level: int) -> np.ndarray:
    """Energy (sum of squared coefficients) per band of a ``level``-level Haar DWT.

    ``level + 1`` values, finest band first: ``[E(d1), E(d2), ..., E(dL), E(aL)]``, where
    ``d1`` is the detail band ``rate/4 .. rate/2``, ``dL`` the coarsest detail and ``aL``
    the approximation (``0 .. rate / 2**(L+1)``). The Haar transform is orthonormal, so
    the energies of a power-of-two-wide segment sum to ``sum(v**2)``.
    """
    coeffs = _decompose(seg, "haar", level, "haar")  # [aL, dL, ..., d1]
    energy = np.array([float(np.dot(c, c)) for c in coeffs])
    return np.concatenate([energy[:0:-1], energy[:1]])


def dwt(seg: SigSeg, wavelet: str = "db4", level: int = 1) -> np.ndarray:
    """All coefficients of a ``level``-level DWT, concatenated in ``pywt.wavedec`` order.

    ``[aL, dL, d(L-1), ..., d1]`` (coarsest first); band ``i`` has
    ``pywt.dwt_coeff_len`` coefficients, e.g. ``(width + filter_len - 1) // 2`` at level 1.
    ``wavelet`` is any ``pywt.wavelist(kind='discrete')`` name ('haar', 'db1'..'db38',
    'sym2'.., 'coif1'.., 'bior*', ...); others are ``INVALID_ARGUMENT``.

    Examples
    --------
    >>> import numpy as np
    >>> dwt(SigSeg(0, 1.0, np.array([1.0, 1.0, 3.0, 3.0])), "haar", 1).round(6).tolist()
    [1.414214, 4.242641, 0.0, 0.0]
    """
    name = lit_choice(wavelet, "dwt", "wavelet", _DISCRETE)
    return np.concatenate(_decompose(seg, name, level, "dwt"))


register(SignalFunction(
    name="haar", kernel=haar, params=(Param("seg", "sigseg"), Param("level", "int")),
    returns="array<double>", output="array",
    doc=("Energy per frequency band of a level-L Haar wavelet decomposition (pywt.wavedec "
         "'haar'): L + 1 doubles, finest first [d1, d2, ..., dL, aL] where d1 covers "
         "rate/4..rate/2 and aL 0..rate/2^(L+1). level > log2(width) is SEGMENT_TOO_SHORT.\n"
         "Example: SELECT haar(p, 4) FROM pipe [SAMPLES 8192 SLIDE 7692]")))

def haar_approx(seg: SigSeg, level: int) -> SigSeg:
    """The level-``level`` Haar approximation of ``seg`` as a segment at ``rate / 2**level``.

    Coefficient ``j`` is ``sum(x[j*B:(j+1)*B]) / sqrt(B)`` with ``B = 2**level`` -- exactly
    ``pywt.wavedec(x, 'haar', level=level)[0]`` for widths divisible by ``B`` (a partial last
    block is dropped rather than mirrored, so every coefficient is a true average). The
    result starts at sample ``start // B`` of the coarser timebase, so it stays a signal that
    ``trimpeak`` and the statistics apply to (XStream's PIPELINE).
    """
    s = as_seg(seg, "haar_approx")
    lv = lit_int(level, "haar_approx", "level", lo=1)
    block = 1 << lv
    x = samples64(s)
    if x.shape[0] < block:
        raise SignalError("SEGMENT_TOO_SHORT", f"haar_approx: level {lv} needs at least {block} "
                          f"samples, the segment has {x.shape[0]}",
                          hint="use a wider window or a lower level")
    whole = x.shape[0] // block * block
    coeffs = x[:whole].reshape(-1, block).sum(axis=1) / np.sqrt(block)
    return SigSeg(s.start // block, s.rate / block, coeffs)


register(SignalFunction(
    name="haar_approx", kernel=haar_approx,
    params=(Param("seg", "sigseg"), Param("level", "int")), returns="sigseg", output="segment",
    doc=("Level-L Haar approximation (pywt.wavedec 'haar' aL) as a segment at rate / 2^L, "
         "starting at sample start // 2^L; a partial last block of 2^L samples is dropped.\n"
         "Example: SELECT trimpeak(haar_approx(p, 4), 'min') FROM pipe [SAMPLES 8192 SLIDE 7692]")))

register(SignalFunction(
    name="dwt", kernel=dwt,
    params=(Param("seg", "sigseg"), Param("wavelet", "string", "db4", literal=True),
            Param("level", "int", 1)),
    returns="array<double>", output="array",
    doc=("Discrete wavelet transform coefficients (pywt.wavedec, symmetric extension), "
         "concatenated coarsest first: [aL, dL, ..., d1]. wavelet is a PyWavelets discrete "
         "wavelet name (default 'db4'), level defaults to 1; too high a level for the width "
         "is SEGMENT_TOO_SHORT.\n"
         "Example: SELECT dwt(ecg, 'db4', 3) FROM patient [SAMPLES 1024]")))
