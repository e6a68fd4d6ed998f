"""Value types kernels produce besides SigSeg: spectra and detection ranges.

Examples
--------
>>> import numpy as np
>>> s = Spectrum(0, 8.0, 4, np.zeros(3, dtype=complex))
>>> s.frequencies.tolist()
[0.0, 2.0, 4.0]
>>> r = Ranges([(10, 20), (30, 31)], [1.5, 2.0])
>>> len(r), r.spans[0]
(2, (10, 20))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

from ..sigseg import SignalError


@dataclass(frozen=True, eq=False)
class Spectrum:
    """The discrete Fourier transform of one segment.

    Parameters
    ----------
    start : int
        ``start`` of the segment it was computed from (keeps the timebase for ``ifft``).
    rate : float
        Sample rate of that segment (> 0); bin ``k`` is at ``k * rate / n`` Hz.
    n : int
        Transform length (the segment's width).
    bins : numpy.ndarray
        complex128; ``numpy.fft.rfft`` bins (``n // 2 + 1`` of them) for real input.
    """

    start: int
    rate: float
    n: int
    bins: np.ndarray

    def __post_init__(self):
        if not (self.rate > 0 and np.isfinite(self.rate)):
            raise SignalError("INVALID_RATE", f"spectrum rate must be positive, got {self.rate}")
        if int(self.n) != self.n or self.n < 1:
            raise SignalError("TYPE_ERROR", f"spectrum length must be a positive int, got {self.n}")
        bins = np.asarray(self.bins, dtype=np.complex128)
        if bins.ndim != 1 or bins.shape[0] != self.n // 2 + 1:
            raise SignalError("TYPE_ERROR",
                              f"a spectrum of length {self.n} has {self.n // 2 + 1} rfft bins, "
                              f"got shape {bins.shape}")
        object.__setattr__(self, "bins", bins)
        object.__setattr__(self, "n", int(self.n))

    @property
    def frequencies(self) -> np.ndarray:
        """Centre frequency of each bin in Hz."""
        return np.arange(self.bins.shape[0]) * (self.rate / self.n)


@dataclass(frozen=True)
class Ranges:
    """Sample ranges found by a detector, in order.

    Parameters
    ----------
    spans : sequence of (int, int)
        ``(start_sample, end_sample_exclusive)`` absolute sample numbers, ``start < end``.
    values : sequence of float, optional
        One value per range (for ``threshold_ranges``: the peak sample inside it).
    """

    spans: tuple[tuple[int, int], ...] = ()
    values: tuple[float, ...] | None = None

    def __post_init__(self):
        spans = tuple((int(a), int(b)) for a, b in self.spans)
        for a, b in spans:
            if not a < b:
                raise SignalError("TYPE_ERROR", f"a range needs start < end, got [{a}, {b})")
        object.__setattr__(self, "spans", spans)
        if self.values is not None:
            values = tuple(float(v) for v in self.values)
            if len(values) != len(spans):
                raise SignalError("TYPE_ERROR", "ranges need one value per span")
            object.__setattr__(self, "values", values)

    def __len__(self) -> int:
        return len(self.spans)

    def __iter__(self):
        return iter(self.spans)

    @staticmethod
    def concat(parts: Iterable["Ranges | None"]) -> "Ranges":
        """All spans (and values) of ``parts`` in order; None parts are skipped."""
        spans: list[tuple[int, int]] = []
        values: list[float] = []
        with_values = True
        for part in parts:
            if part is None:
                continue
            spans.extend(part.spans)
            if part.values is None:
                with_values = with_values and not part.spans
            else:
                values.extend(part.values)
        return Ranges(spans, values if with_values else None)

