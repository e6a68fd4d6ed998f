"""Spectral functions: FFT and inverse, magnitudes, power spectral densities, band energy.

Transforms are of real segments, so spectra hold the ``numpy.fft.rfft`` bins
(``n // 2 + 1`` of them; bin ``k`` is at ``k * rate / n`` Hz). A transform of an empty
segment is ``EMPTY_SEGMENT``; one NaN sample makes every bin NaN (a DFT mixes all samples).

Examples
--------
>>> import numpy as np
>>> from wavesql.udfs.sigseg import SigSeg
>>> s = SigSeg(0, 8.0, np.cos(2 * np.pi * 2.0 * np.arange(8) / 8.0))
>>> np.round(magnitude(fft(s)), 6).tolist()
[0.0, 0.0, 4.0, 0.0, 0.0]
>>> round(band_energy_hz(fft(s), 1.5, 2.5), 6)
16.0
"""

from __future__ import annotations

import numpy as np
from scipy import signal as sps

from ..registry import Param, SignalFunction, register
from ..sigseg import SigSeg, SignalError
from ._common import as_seg, as_spectrum, lit_float, lit_int, samples64
from .values import Spectrum


def _nonempty(seg: SigSeg, fname: str) -> np.ndarray:
    x = samples64(as_seg(seg, fname))
    if x.shape[0] == 0:
        raise SignalError("EMPTY_SEGMENT", f"{fname} of an empty segment is undefined")
    return x


def fft(seg: SigSeg) -> Spectrum:
    """Real FFT of the segment (``numpy.fft.rfft``), keeping its start and rate."""
    x = _nonempty(seg, "fft")
    return Spectrum(seg.start, seg.rate, x.shape[0], np.fft.rfft(x))


def ifft(spectrum: Spectrum) -> SigSeg:
    """Inverse real FFT (``numpy.fft.irfft`` with the original length ``n``).

    Examples
    --------
    >>> import numpy as np
    >>> s = SigSeg(5, 10.0, np.array([1.0, 2.0, 3.0]))
    >>> back = ifft(fft(s))
    >>> back.start, np.round(back.samples, 12).tolist()
    (5, [1.0, 2.0, 3.0])
    """
    spec = as_spectrum(spectrum, "ifft")
    return SigSeg(spec.start, spec.rate, np.fft.irfft(spec.bins, spec.n))


def magnitude(spectrum: Spectrum) -> np.ndarray:
    """``|X_k|`` per bin."""
    return np.abs(as_spectrum(spectrum, "magnitude").bins)


def psd(seg: SigSeg) -> np.ndarray:
    """Power spectral density by ``scipy.signal.periodogram(x, fs=rate)``.

    One-sided density in units^2/Hz, boxcar window, mean removed (scipy's
    ``detrend='constant'`` default), ``n // 2 + 1`` values at ``k * rate / n`` Hz.
    The periodogram (one window over the whole segment) rather than Welch because a
    WaveSQL window already chooses the averaging length: ``avg`` over rows averages.
    """
    x = _nonempty(seg, "psd")
    return sps.periodogram(x, fs=seg.rate)[1]


def spectrogram(seg: SigSeg, nperseg: int) -> np.ndarray:
    """Short-time PSDs by ``scipy.signal.spectrogram(x, fs=rate, nperseg=nperseg)``,
    flattened time-major.

    scipy's defaults: Tukey(0.25) window, ``nperseg // 8`` overlap, mean removed per
    slice, density scaling. With ``F = nperseg // 2 + 1`` frequencies and
    ``T = 1 + (width - nperseg) // (nperseg - nperseg // 8)`` slices, element
    ``t * F + f`` is the power at frequency ``f * rate / nperseg`` in slice ``t``.

    Examples
    --------
    >>> import numpy as np
    >>> spectrogram(SigSeg(0, 100.0, np.random.default_rng(0).normal(size=100)), 16).shape
    (63,)
    """
    x = samples64(as_seg(seg, "spectrogram"))
    n = lit_int(nperseg, "spectrogram", "nperseg", lo=2)
    if n > x.shape[0]:
        raise SignalError("SEGMENT_TOO_SHORT",
                          f"spectrogram: nperseg {n} is longer than the segment "
                          f"({x.shape[0]} samples)", hint="use a wider window or smaller nperseg")
    sxx = sps.spectrogram(x, fs=seg.rate, nperseg=n)[2]  # shape (F, T)
    return np.ascontiguousarray(sxx.T).ravel()


def _check_band(lo, hi, fname: str, what: str):
    if lo < 0 or hi < lo:
        raise SignalError("INVALID_ARGUMENT",
                          f"{fname}: need 0 <= lo <= hi, got {what} {lo!r}..{hi!r}")


def band_energy(spectrum: Spectrum, lo_bin: int, hi_bin: int) -> float:
    """``sum |X_k|^2`` for bins ``lo_bin .. hi_bin`` inclusive.

    Bins past the last one contribute nothing (so a band above Nyquist has energy 0).
    Unnormalised rfft bins: scale by ``1 / n`` (or ``2 / n`` for one-sided power) yourself
    if you compare windows of different widths.
    """
    spec = as_spectrum(spectrum, "band_energy")
    lo = lit_int(lo_bin, "band_energy", "lo_bin")
    hi = lit_int(hi_bin, "band_energy", "hi_bin")
    _check_band(lo, hi, "band_energy", "bins")
    b = spec.bins[lo:hi + 1]
    return float(np.sum(b.real * b.real + b.imag * b.imag))


def band_energy_hz(spectrum: Spectrum, lo_hz: float, hi_hz: float) -> float:
    """``sum |X_k|^2`` over bins whose frequency ``k * rate / n`` lies in ``[lo_hz, hi_hz]``."""
    spec = as_spectrum(spectrum, "band_energy_hz")
    lo = lit_float(lo_hz, "band_energy_hz", "lo_hz")
    hi = lit_float(hi_hz, "band_energy_hz", "hi_hz")
    _check_band(lo, hi, "band_energy_hz", "Hz")
    f = spec.frequencies
    b = spec.bins[(f >= lo) & (f <= hi)]
    return float(np.sum(b.real * b.real + b.imag * b.imag))


SEG = Param("seg", "sigseg")
SPEC = Param("spectrum", "spectrum")

register(SignalFunction(
    name="fft", kernel=fft, params=(SEG,), returns="spectrum", output="spectrum",
    doc=("Discrete Fourier transform of a real segment (numpy.fft.rfft): n // 2 + 1 "
         "complex bins, bin k at k * rate / n Hz; the spectrum remembers the segment's start "
         "and rate. An empty segment raises EMPTY_SEGMENT; a NaN sample makes all bins NaN.\n"
         "Example: SELECT magnitude(fft(hanning(ch1))) FROM mic [SAMPLES 1024]")))

register(SignalFunction(
    name="ifft", kernel=ifft, params=(SPEC,), returns="sigseg", output="segment",
    doc=("Inverse of fft (numpy.fft.irfft with the original length): a segment with the "
         "start and rate the spectrum was computed from.\n"
         "Example: SELECT ifft(fft(ch1)) FROM mic [SAMPLES 1024]")))

register(SignalFunction(
    name="magnitude", kernel=magnitude, params=(SPEC,), returns="array<double>",
    output="array",
    doc=("Magnitude |X_k| of every bin of a spectrum, as an array of n // 2 + 1 doubles.\n"
         "Example: SELECT magnitude(fft(hanning(ch1)))[3] FROM mic [SAMPLES 32]")))

register(SignalFunction(
    name="psd", kernel=psd, params=(SEG,), returns="array<double>", output="array",
    doc=("Power spectral density of the segment by the periodogram "
         "(scipy.signal.periodogram with fs = rate: boxcar window, mean removed, one-sided, "
         "units^2/Hz), n // 2 + 1 values at k * rate / n Hz. Empty segments raise "
         "EMPTY_SEGMENT.\n"
         "Example: SELECT psd(ch1) FROM mic [SAMPLES 4096]")))

register(SignalFunction(
    name="spectrogram", kernel=spectrogram, params=(SEG, Param("nperseg", "int")),
    returns="array<double>", output="array",
    doc=("Short-time power spectra of the segment (scipy.signal.spectrogram with "
         "fs = rate and nperseg; Tukey window, nperseg // 8 overlap, density scaling), "
         "flattened time-major: element t * F + f, F = nperseg // 2 + 1 frequencies, "
         "T = 1 + (width - nperseg) // (nperseg - nperseg // 8) slices. nperseg < 2 is "
         "INVALID_ARGUMENT, nperseg > width SEGMENT_TOO_SHORT.\n"
         "Example: SELECT spectrogram(ch1, 256) FROM mic [SAMPLES 44100]")))

register(SignalFunction(
    name="band_energy", kernel=band_energy,
    params=(SPEC, Param("lo_bin", "int"), Param("hi_bin", "int")),
    returns="double", output="scalar",
    doc=("Energy sum |X_k|^2 of the spectrum's bins lo_bin..hi_bin inclusive (unnormalised "
         "rfft bins). Bins beyond the last contribute nothing; lo_bin < 0 or hi_bin < lo_bin "
         "is INVALID_ARGUMENT.\n"
         "Example: SELECT start_time(ch1), band_energy(fft(hanning(ch1)), 3, 4) AS score "
         "FROM mic [SAMPLES 32]")))

register(SignalFunction(
    name="band_energy_hz", kernel=band_energy_hz,
    params=(SPEC, Param("lo_hz", "double"), Param("hi_hz", "double")),
    returns="double", output="scalar",
    doc=("Energy sum |X_k|^2 over the bins whose frequency k * rate / n lies in "
         "[lo_hz, hi_hz] (inclusive); the band in Hz instead of bin numbers, so the query "
         "does not change with the window width.\n"
         "Example: SELECT band_energy_hz(fft(ch1), 300.0, 3400.0) FROM mic [SAMPLES 4096]")))
