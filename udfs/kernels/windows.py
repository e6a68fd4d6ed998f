"""Window (taper) functions: multiply a segment by a symmetric window of its own width.

The windows are numpy's (``numpy.hanning``, ``numpy.hamming``, ``numpy.blackman``):
symmetric, so the first and last samples of a Hann-windowed segment are 0. An empty
segment stays empty and a one-sample segment is multiplied by 1 (numpy's convention).
NaN/Inf samples stay non-finite. The result keeps the segment's start and rate.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> hanning(SigSeg(0, 8.0, np.ones(5))).samples.tolist()
[0.0, 0.5, 1.0, 0.5, 0.0]
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SegBlock, SigSeg
from ._common import as_seg, samples64


def _windowed(seg: SigSeg, fname: str, window: Callable[[int], np.ndarray]) -> SigSeg:
    seg = as_seg(seg, fname)
    x = samples64(seg)
    return SigSeg(seg.start, seg.rate, x * window(x.shape[0]))


def hanning(seg: SigSeg) -> SigSeg:
    """``seg`` times ``numpy.hanning(width)``."""
    return _windowed(seg, "hanning", np.hanning)


def hamming(seg: SigSeg) -> SigSeg:
    """``seg`` times ``numpy.hamming(width)``."""
    return _windowed(seg, "hamming", np.hamming)


def blackman(seg: SigSeg) -> SigSeg:
    """``seg`` times ``numpy.blackman(width)``."""
    return _windowed(seg, "blackman", np.blackman)


def _batch_window(window: Callable[[int], np.ndarray]):
    def batch(block: SegBlock) -> SegBlock:
        data = block.data.astype(np.float64, copy=False) * window(block.width)
        return SegBlock(block.starts, block.rate, data)

    return batch


for _name, _kernel, _np, _fn in (("hanning", hanning, "numpy.hanning", np.hanning),
                                 ("hamming", hamming, "numpy.hamming", np.hamming),
                                 ("blackman", blackman, "numpy.blackman", np.blackman)):
    register(SignalFunction(
        name=_name, kernel=_kernel, batch=_batch_window(_fn),
        params=(Param("seg", "sigseg"),), returns="sigseg",
        output="segment",
        doc=(f"Multiplies the segment by the symmetric {_name.capitalize()} window of its "
             f"width ({_np}), tapering its ends before a transform to reduce spectral "
             f"leakage. Start and rate are kept; empty segments stay empty.\n"
             f"Example: SELECT band_energy(fft({_name}(ch1)), 3, 4) FROM mic [SAMPLES 32]")))
