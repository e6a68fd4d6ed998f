"""Spectral and wavelet kernels against numpy / scipy / PyWavelets (no Spark)."""

from __future__ import annotations

from tests.data import COUNTING_WAV, counting_voice, raises
from pathlib import Path

import numpy as np
import pytest
import pywt
from scipy import signal as sps

from wavesql.udfs import registry
from wavesql.udfs.kernels import Spectrum
from wavesql.udfs.sigseg import SigSeg

WAV = Path(COUNTING_WAV)


@pytest.fixture(scope="module")
def voice() -> SigSeg:
    return counting_voice()




def seg(values, start=0, rate=1000.0) -> SigSeg:
    return SigSeg(start, rate, np.asarray(values, dtype=np.float64))


# ------------------------------------------------------------------------------------------
# fft, ifft, magnitude
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 31, 32, 4096])
def test_fft_is_rfft_and_ifft_inverts_it(voice, n):
    win = voice.subseg(100_000, n)
    spec = registry.call("fft", win)
    assert isinstance(spec, Spectrum)
    assert (spec.start, spec.rate, spec.n) == (100_000, voice.rate, n)
    assert spec.bins.dtype == np.complex128 and spec.bins.shape == (n // 2 + 1,)
    np.testing.assert_allclose(spec.bins, np.fft.rfft(win.samples), rtol=1e-12, atol=1e-12)
    back = registry.call("ifft", spec)
    assert (back.start, back.rate, back.width) == (win.start, win.rate, n)
    np.testing.assert_allclose(back.samples, win.samples, atol=1e-12)
    np.testing.assert_allclose(registry.call("magnitude", spec), np.abs(np.fft.rfft(win.samples)),
                               rtol=1e-12, atol=1e-12)


def test_fft_of_a_tone_and_float32_input():
    t = np.arange(64) / 64.0
    spec = registry.call("fft", SigSeg(0, 64.0, (3 * np.cos(2 * np.pi * 5 * t)).astype(np.float32)))
    mag = registry.call("magnitude", spec)
    assert int(np.argmax(mag)) == 5 and mag[5] == pytest.approx(96.0, rel=1e-6)
    assert spec.frequencies[5] == 5.0


def test_spectral_bad_input():
    raises("EMPTY_SEGMENT", registry.call, "fft", seg([]))
    raises("EMPTY_SEGMENT", registry.call, "psd", seg([]))
    raises("TYPE_ERROR", registry.call, "ifft", seg([1.0, 2.0]))       # a segment, not a spectrum
    raises("TYPE_ERROR", registry.call, "magnitude", np.ones(3))
    raises("TYPE_ERROR", registry.call, "fft", np.ones(3))
    nan = registry.call("fft", seg([1.0, np.nan, 2.0, 0.0]))
    assert np.isnan(nan.bins).all()                                     # a DFT mixes all samples


# ------------------------------------------------------------------------------------------
# psd, spectrogram
# ------------------------------------------------------------------------------------------
def test_psd_is_scipy_periodogram(voice):
    for start, n in ((50_000, 4096), (200_000, 1000), (5, 1), (7, 2)):
        win = voice.subseg(start, n)
        got = registry.call("psd", win)
        want = sps.periodogram(win.samples, fs=voice.rate)[1]
        assert got.shape == (n // 2 + 1,)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-20)


def test_psd_of_white_noise_integrates_to_its_variance():
    x = np.random.default_rng(2).normal(scale=0.5, size=1 << 16)
    p = registry.call("psd", SigSeg(0, 8000.0, x))
    assert np.sum(p) * (8000.0 / x.size) == pytest.approx(np.var(x), rel=1e-6)


@pytest.mark.parametrize("nperseg", [2, 16, 256, 4410])
def test_spectrogram_is_scipy_flattened_time_major(voice, nperseg):
    win = voice.subseg(44_100, 44_100)
    got = registry.call("spectrogram", win, nperseg)
    _, t, sxx = sps.spectrogram(win.samples, fs=voice.rate, nperseg=nperseg)
    n_freq = nperseg // 2 + 1
    n_time = 1 + (win.width - nperseg) // (nperseg - nperseg // 8)
    assert sxx.shape == (n_freq, n_time) == (n_freq, len(t))
    np.testing.assert_allclose(got.reshape(n_time, n_freq), sxx.T, rtol=1e-10, atol=1e-20)


def test_spectrogram_bad_input():
    s = seg(np.ones(100))
    raises("SEGMENT_TOO_SHORT", registry.call, "spectrogram", s, 101)
    raises("INVALID_ARGUMENT", registry.call, "spectrogram", s, 1)
    raises("TYPE_ERROR", registry.call, "spectrogram", s, 16.0)
    raises("SEGMENT_TOO_SHORT", registry.call, "spectrogram", seg([]), 2)
    assert registry.call("spectrogram", s, 100).shape == (51,)     # one slice


# ------------------------------------------------------------------------------------------
# band_energy, band_energy_hz
# ------------------------------------------------------------------------------------------
def test_band_energy_sums_inclusive_bins(voice):
    # DETECTAUDIO's score: band_energy(fft(hanning(ch1)), 3, 4) over 32-sample windows.
    for start in range(30_000, 300_000, 37_000):
        win = registry.call("hanning", voice.subseg(start, 32))
        spec = registry.call("fft", win)
        bins = np.fft.rfft(win.samples)
        assert registry.call("band_energy", spec, 3, 4) == pytest.approx(
            np.sum(np.abs(bins[3:5]) ** 2), rel=1e-12)
        assert registry.call("band_energy", spec, 0, 16) == pytest.approx(
            np.sum(np.abs(bins) ** 2), rel=1e-12)
        assert registry.call("band_energy", spec, 7, 7) == pytest.approx(
            abs(bins[7]) ** 2, rel=1e-12)
    spec = registry.call("fft", voice.subseg(100_000, 32))
    # bins beyond the last one contribute nothing
    assert registry.call("band_energy", spec, 16, 1000) == pytest.approx(
        abs(spec.bins[16]) ** 2)
    assert registry.call("band_energy", spec, 17, 20) == 0.0
    raises("INVALID_ARGUMENT", registry.call, "band_energy", spec, 4, 3)
    raises("INVALID_ARGUMENT", registry.call, "band_energy", spec, -1, 3)
    raises("TYPE_ERROR", registry.call, "band_energy", spec, 1.5, 3)
    raises("TYPE_ERROR", registry.call, "band_energy", voice.subseg(0, 32), 3, 4)


def test_band_energy_hz_selects_bins_by_frequency():
    rate, n = 8000.0, 800                      # 10 Hz bins
    x = np.sin(2 * np.pi * 440.0 * np.arange(n) / rate) + 0.5 * np.sin(2 * np.pi * 1000.0 *
                                                                        np.arange(n) / rate)
    spec = registry.call("fft", SigSeg(0, rate, x))
    total = registry.call("band_energy", spec, 0, n // 2)
    low = registry.call("band_energy_hz", spec, 400.0, 480.0)
    assert low == pytest.approx(registry.call("band_energy", spec, 40, 48), rel=1e-12)
    assert low == pytest.approx(total * 0.8, rel=1e-6)      # 1 : 0.25 power split
    assert registry.call("band_energy_hz", spec, 440.0, 440.0) == pytest.approx(
        abs(spec.bins[44]) ** 2)                              # inclusive edges
    assert registry.call("band_energy_hz", spec, 0, 4000) == pytest.approx(total)   # ints ok
    raises("INVALID_ARGUMENT", registry.call, "band_energy_hz", spec, 500.0, 400.0)
    raises("INVALID_ARGUMENT", registry.call, "band_energy_hz", spec, np.nan, 400.0)
    raises("TYPE_ERROR", registry.call, "band_energy_hz", spec, "low", 400.0)


# ------------------------------------------------------------------------------------------
# wavelets: haar, dwt
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n,level", [(2, 1), (8192, 4), (8191, 4), (1000, 3), (777, 9)])
def test_haar_band_energies_match_pywt(voice, n, level):
    win = voice.subseg(120_000, n)
    got = registry.call("haar", win, level)
    coeffs = pywt.wavedec(win.samples, "haar", level=level)      # [aL, dL, ..., d1]
    want = [np.sum(c ** 2) for c in coeffs[1:][::-1]] + [np.sum(coeffs[0] ** 2)]
    assert got.shape == (level + 1,)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-300)


def test_haar_band_order_and_parseval():
    rate, n = 1024.0, 1024
    t = np.arange(n) / rate
    # A tone at 400 Hz lies in d1 (256..512 Hz); one at 5 Hz in the approximation a4 (0..32 Hz)
    e_hi = registry.call("haar", SigSeg(0, rate, np.sin(2 * np.pi * 400 * t)), 4)
    e_lo = registry.call("haar", SigSeg(0, rate, np.sin(2 * np.pi * 5 * t)), 4)
    assert int(np.argmax(e_hi)) == 0 and int(np.argmax(e_lo)) == 4
    x = np.random.default_rng(4).normal(size=n)
    assert np.sum(registry.call("haar", SigSeg(0, rate, x), 6)) == pytest.approx(np.dot(x, x))


@pytest.mark.parametrize("wavelet,level,n", [("db4", 1, 1000), ("db4", 3, 4096),
                                             ("haar", 2, 7), ("sym5", 2, 333),
                                             ("bior3.5", 1, 64)])
def test_dwt_concatenates_pywt_wavedec(voice, wavelet, level, n):
    win = voice.subseg(250_000, n)
    got = registry.call("dwt", win, wavelet, level)
    want = np.concatenate(pywt.wavedec(win.samples, wavelet, level=level))
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-15)


def test_dwt_defaults_are_db4_level_1():
    x = np.random.default_rng(5).normal(size=100)
    np.testing.assert_allclose(registry.call("dwt", seg(x)),
                               np.concatenate(pywt.wavedec(x, "db4", level=1)))
    assert registry.call("dwt", seg(x), "DB4").shape == ((100 + 8 - 1) // 2 * 2,)


def test_wavelet_bad_input():
    raises("SEGMENT_TOO_SHORT", registry.call, "haar", seg(np.ones(15)), 4)   # 2**4 > 15
    raises("SEGMENT_TOO_SHORT", registry.call, "dwt", seg(np.ones(20)), "db4", 2)
    raises("EMPTY_SEGMENT", registry.call, "haar", seg([]), 1)
    raises("INVALID_ARGUMENT", registry.call, "haar", seg(np.ones(16)), 0)
    raises("TYPE_ERROR", registry.call, "haar", seg(np.ones(16)), 2.0)
    raises("INVALID_ARGUMENT", registry.call, "dwt", seg(np.ones(16)), "morlet")  # continuous
    raises("TYPE_ERROR", registry.call, "dwt", seg(np.ones(16)), 4)
    e = registry.call("haar", seg([1.0, np.nan, 1.0, 1.0]), 1)
    assert np.isnan(e[0]) and np.isnan(e[1])


def test_pipeline_haar_energies_sum_to_the_window_energy(voice):
    # PIPELINE: rewindow(8192, overlap 500) -> haar level 4 per window. The energies of a
    # window sum to its energy (orthonormal) up to boundary padding.
    start, n = 150_000, 8192
    win = voice.subseg(start, n)
    e = registry.call("haar", win, 4)
    assert np.sum(e) == pytest.approx(np.dot(win.samples, win.samples), rel=1e-9)


def test_haar_approx_is_pywt_approximation():
    import pywt

    from wavesql.udfs import registry
    from wavesql.udfs.sigseg import SigSeg

    rng = np.random.default_rng(3)
    x = rng.standard_normal(8192)
    out = registry.call("haar_approx", SigSeg(8192 * 5, 1000.0, x), 4)
    np.testing.assert_allclose(out.samples, pywt.wavedec(x, "haar", level=4)[0], rtol=1e-12)
    assert (out.start, out.rate, out.width) == (8192 * 5 // 16, 1000.0 / 16, 512)
    partial = registry.call("haar_approx", SigSeg(0, 1000.0, x[:8200]), 4)
    assert partial.width == 512  # the last partial block of 8 samples is dropped
