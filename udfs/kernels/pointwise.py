"""Sample-by-sample transforms of a segment (the output sample n depends on input sample n only).

``square`` is the squaring stage of Pan-Tompkins QRS detection (TiLT application 6): the
derivative of the band-passed ECG is squared before the moving-window integration, so that
all slopes count positively and the steep QRS slopes dominate.

The result keeps the segment's start and rate; empty segments stay empty; NaN stays NaN
and an infinite sample gives ``inf``.

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> square(SigSeg(10, 200.0, np.array([-2.0, 0.5, 3.0]))).samples.tolist()
[4.0, 0.25, 9.0]
"""

from __future__ import annotations

import numpy as np

from ..registry import Param, SignalFunction, register
from ..sigseg import SegBlock, SigSeg
from ._common import as_seg, samples64


def square(seg: SigSeg) -> SigSeg:
    """Every sample squared (in float64)."""
    seg = as_seg(seg, "square")
    x = samples64(seg)
    return SigSeg(seg.start, seg.rate, x * x)


def _square_batch(block: SegBlock) -> SegBlock:
    data = block.data.astype(np.float64, copy=False)
    return SegBlock(block.starts, block.rate, data * data)


register(SignalFunction(
    name="square", kernel=square, batch=_square_batch, params=(Param("seg", "sigseg"),),
    returns="sigseg", output="segment",
    doc="Squares every sample (float64), keeping start and rate: the squaring stage of "
        "Pan-Tompkins QRS detection, or instantaneous power before a moving average. "
        "Stateless; empty segments stay empty.\n"
        "Example: SELECT fir(square(ecg), array(0.5, 0.5)) FROM patient [SAMPLES 2000]"))
