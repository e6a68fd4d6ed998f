"""The signal-function kernel families; importing this package registers all of them.

One module per family (README: Signals lists them); each defines its kernels and registers them in
:mod:`wavesql.udfs.registry` at import. Kernels are numpy/scipy/PyWavelets only -- nothing
here imports Spark. :mod:`.values` holds the value types kernels return besides SigSeg.

===========  ===================================================================
module       functions
===========  ===================================================================
shape        subseg, append, width, start_sample, sample_rate, start_time, end_time,
             dewindow
stats        seg_avg, seg_std, seg_rms, seg_min, seg_max, seg_kurtosis,
             crest_factor, zero_crossings
windows      hanning, hamming, blackman
spectra      fft, ifft, magnitude, psd, spectrogram, band_energy, band_energy_hz
filters      fir, iir, lowpass, highpass, bandpass, notch (stateful)
resample     resample (stateful)
wavelets     haar, dwt
detect       trimpeak, cfar (stateful), threshold_ranges (stateful, flushes)
gaps         degap (stateful)
pointwise    square
===========  ===================================================================
"""

from __future__ import annotations

from . import (detect, filters, gaps, pointwise, resample, shape, spectra, stats, wavelets,
               windows)
from .values import Ranges, Spectrum

__all__ = ["Ranges", "Spectrum", "detect", "filters", "gaps", "pointwise", "resample", "shape",
           "spectra", "stats", "wavelets", "windows"]
