"""NaN and +-Inf samples through EVERY registered signal function (no Spark).

The policy (``udfs/registry.py``'s docstring): the result follows IEEE 754 / numpy
propagation as each function documents it, or the function raises a documented
``SignalError`` code -- never another exception, never a floating-point warning, never a
silently finite value where the sample it depends on was not.

Each function is called, through ``registry.call`` as the engine calls it, on segments with
one NaN, one +Inf, one -Inf, all NaN, all +Inf and no samples; the result must equal the
numpy/scipy oracle of :data:`ORACLES` computed the same IEEE way (NaN equal to NaN) or be
the documented error. The functions come from the registry, so a new one fails
:func:`test_every_function_has_a_documented_nonfinite_behaviour` until it is given an
oracle here (and a sample call in ``test_kernels.SAMPLE_CALLS``).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import pywt
from scipy import signal as sps

from tests.test_kernels import SAMPLE_CALLS
from wavesql.udfs import registry
from wavesql.udfs.kernels import Ranges, Spectrum
from wavesql.udfs.kernels.resample import design
from wavesql.udfs.program import Evaluator, Output, Program
from wavesql.udfs.sigseg import SegBlock, SigSeg, SignalError

RATE = 1000.0
BAD_AT = 12  # inside every sample call's reach (subseg 10..30, dewindow's kept part, ...)


def _with(x: np.ndarray, value: float) -> np.ndarray:
    y = np.array(x, dtype=np.float64)
    y[min(BAD_AT, y.size - 1)] = value
    return y


#: name -> samples made from the sample call's (finite) samples
VARIANTS = {
    "nan": lambda x: _with(x, np.nan),
    "+inf": lambda x: _with(x, np.inf),
    "-inf": lambda x: _with(x, -np.inf),
    "all_nan": lambda x: np.full(len(x), np.nan),
    "all_inf": lambda x: np.full(len(x), np.inf),
    "empty": lambda x: np.zeros(0),
}
#: the score (cfar's first argument) for each variant
SCORES = {"nan": np.nan, "+inf": np.inf, "-inf": -np.inf, "all_nan": np.nan,
          "all_inf": np.inf, "empty": None}


class Err:
    """An expected SignalError code."""

    def __init__(self, code: str):
        self.code = code

    def __repr__(self):
        return f"Err({self.code})"


def _rfft(x):
    return np.fft.rfft(x)


def _spec(x) -> Spectrum:
    return Spectrum(0, RATE, x.size, _rfft(x))


def _stats():
    def kurt(x):
        if not x.size:
            return math.nan
        d = x - x.mean()
        m2 = float(np.mean(d * d))
        m4 = float(np.mean(d ** 4))
        return m4 / (m2 * m2) if m2 > 0 else math.nan

    def crest(x):
        if not x.size:
            return math.nan
        rms = math.sqrt(float(np.sum(x * x)) / x.size)
        return float(np.max(np.abs(x))) / rms if rms > 0 else math.nan

    def zc(x):
        s = np.sign(x[(x != 0) & ~np.isnan(x)])
        return int(np.count_nonzero(s[1:] != s[:-1]))

    nan_if_empty = lambda f: (lambda x: f(x) if x.size else math.nan)  # noqa: E731
    return {
        "seg_avg": nan_if_empty(lambda x: float(np.mean(x))),
        "seg_std": lambda x: float(np.std(x, ddof=1)) if x.size >= 2 else math.nan,
        "seg_rms": nan_if_empty(lambda x: math.sqrt(float(np.sum(x * x)) / x.size)),
        "seg_min": nan_if_empty(lambda x: float(np.min(x))),
        "seg_max": nan_if_empty(lambda x: float(np.max(x))),
        "seg_kurtosis": kurt, "crest_factor": crest, "zero_crossings": zc,
    }


def _sos(kind, *spec):
    if kind == "notch":
        b, a = sps.iirnotch(spec[0], 30.0, fs=RATE)
        return sps.tf2sos(b, a)
    if kind == "bandpass":
        return sps.butter(4, list(spec), btype="bandpass", output="sos", fs=RATE)
    return sps.butter(spec[1] if len(spec) > 1 else 4, spec[0], btype=kind, output="sos",
                      fs=RATE)


def _trimpeak(x):
    if not x.size:
        return Err("EMPTY_SEGMENT")
    i = 0 if np.isnan(x).all() else int(np.nanargmax(x))
    return x[i:]


def _ranges(x, thr=0.5):
    above = np.nan_to_num(x, nan=-np.inf) > thr
    spans, peaks, i = [], [], 0
    while i < x.size:
        if above[i]:
            j = i
            while j < x.size and above[j]:
                j += 1
            if j < x.size:  # a run reaching the end stays open (threshold_ranges_flush)
                spans.append((i, j))
                peaks.append(float(np.max(x[i:j])))
            i = j
        else:
            i += 1
    return tuple(spans), tuple(peaks)


def _haar(x, level):
    if not x.size:
        return Err("EMPTY_SEGMENT")
    c = pywt.wavedec(x, "haar", level=level)
    e = np.array([float(np.dot(v, v)) for v in c])
    return np.concatenate([e[:0:-1], e[:1]])


def _resample(x):
    up, down = 1, 2  # 1000 Hz -> 500 Hz
    return sps.upfirdn(design(up, down), x, up, down)[:-(-x.size * up // down)] \
        if x.size else np.zeros(0)


def _filter(f):
    return lambda x: f(x) if x.size else x  # empty segments pass through


def _empty_or(code, f):
    return lambda x: Err(code) if not x.size else f(x)


#: name -> oracle(samples of the segment / spectrum argument) -> expected result or Err.
ORACLES = {
    # shape: samples move untouched, NaN and Inf included
    "subseg": _empty_or("OUT_OF_RANGE", lambda x: x[10:30]),
    "append": lambda x: (Err("TYPE_ERROR") if not x.size  # b no longer adjacent
                         else np.concatenate([x, np.ones(2)])),
    "width": lambda x: x.size,
    "start_sample": lambda x: 0,
    "sample_rate": lambda x: float(RATE),
    "start_time": lambda x: 0,
    "end_time": lambda x: int(x.size * 1_000_000 // RATE),
    "dewindow": lambda x: x[:max(x.size - 16, 0)],
    # statistics: IEEE (NaN in -> NaN out; Inf per arithmetic); empty -> NaN
    **_stats(),
    # pointwise and windows: per sample
    "square": lambda x: x * x,
    "hanning": lambda x: x * np.hanning(x.size),
    "hamming": lambda x: x * np.hamming(x.size),
    "blackman": lambda x: x * np.blackman(x.size),
    # spectra: a DFT mixes every sample
    "fft": _empty_or("EMPTY_SEGMENT", _rfft),
    "ifft": lambda x: np.fft.irfft(_rfft(x), x.size),
    "magnitude": lambda x: np.abs(_rfft(x)),
    "psd": _empty_or("EMPTY_SEGMENT", lambda x: sps.periodogram(x, fs=RATE)[1]),
    "spectrogram": _empty_or("SEGMENT_TOO_SHORT", lambda x: np.ascontiguousarray(
        sps.spectrogram(x, fs=RATE, nperseg=64)[2].T).ravel()),
    "band_energy": lambda x: float(np.sum(np.abs(_rfft(x)[3:5]) ** 2)),
    "band_energy_hz": lambda x: float(np.sum(np.abs(_rfft(x)[
        (np.arange(x.size // 2 + 1) * RATE / x.size >= 10.0)
        & (np.arange(x.size // 2 + 1) * RATE / x.size <= 60.0)]) ** 2)),
    # filters: the delay line carries NaN/Inf on (scipy's lfilter / sosfilt)
    "fir": _filter(lambda x: sps.lfilter([0.5, 0.5], [1.0], x)),
    "iir": _filter(lambda x: sps.lfilter([0.1], [1.0, -0.9], x)),
    "lowpass": _filter(lambda x: sps.sosfilt(_sos("lowpass", 100.0), x)),
    "highpass": _filter(lambda x: sps.sosfilt(_sos("highpass", 100.0, 2), x)),
    "bandpass": _filter(lambda x: sps.sosfilt(_sos("bandpass", 50.0, 150.0), x)),
    "notch": _filter(lambda x: sps.sosfilt(_sos("notch", 50.0), x)),
    "resample": _resample,
    # wavelets: coefficients whose support holds the sample
    "haar": lambda x: _haar(x, 4),
    "haar_approx": _empty_or("SEGMENT_TOO_SHORT", lambda x: x[:x.size // 4 * 4].reshape(
        -1, 4).sum(axis=1) / 2.0),
    "dwt": _empty_or("EMPTY_SEGMENT", lambda x: np.concatenate(pywt.wavedec(x, "db4",
                                                                            level=2))),
    # detectors: documented handling of NaN (ignored) and Inf
    "trimpeak": _trimpeak,
    "threshold_ranges": _ranges,
    "degap": lambda x: x,  # the first segment passes unchanged
    "cfar": None,  # a score stream, not samples: test_cfar_scores below
}


def _call_args(name: str, variant: str):
    """The sample call of ``name`` with its samples replaced by ``variant``; the samples."""
    args, _ = SAMPLE_CALLS[name]
    make = VARIANTS[variant]
    out, samples = [], None
    for a in args:
        if isinstance(a, SigSeg) and samples is None:
            samples = make(np.asarray(a.samples))
            a = SigSeg(a.start, a.rate, samples)
        elif isinstance(a, Spectrum):
            samples = make(np.fft.irfft(a.bins, a.n))
            if not samples.size:
                return None, None  # a spectrum is never empty: fft refuses (EMPTY_SEGMENT)
            with np.errstate(all="ignore"):
                a = _spec(samples)
        out.append(a)
    return out, samples


def _values(result):
    if isinstance(result, tuple):  # stateful: (result, state)
        result = result[0]
    if isinstance(result, SigSeg):
        return np.asarray(result.samples, dtype=np.float64)
    if isinstance(result, Spectrum):
        return result.bins
    if isinstance(result, Ranges):
        return tuple(tuple(s) for s in result.spans), tuple(result.values)
    return result


def _same(got, want) -> bool:
    if isinstance(want, tuple) and isinstance(got, tuple):  # ranges
        return got[0] == want[0] and np.array_equal(got[1], want[1], equal_nan=True)
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if np.iscomplexobj(got) or np.iscomplexobj(want):
        return _same(got.real, want.real) and _same(got.imag, want.imag)
    if got.dtype == bool or want.dtype == bool or np.issubdtype(want.dtype, np.integer):
        return np.array_equal(got, want)
    got, want = got.astype(np.float64), want.astype(np.float64)
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    if not np.array_equal(np.where(np.isinf(got), np.sign(got), 0),
                          np.where(np.isinf(want), np.sign(want), 0)):
        return False
    finite = np.isfinite(want)
    return bool(np.allclose(got[finite], want[finite], rtol=1e-9, atol=1e-9))


def _run(name, args):
    """``registry.call`` with every warning an error; (result, None) or (None, error)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            return registry.call(name, *args), None
        except SignalError as err:
            return None, err


def test_every_function_has_a_documented_nonfinite_behaviour():
    assert set(registry.names()) <= set(ORACLES), (
        "give each new signal function its NaN/Inf oracle in ORACLES (the policy is in "
        "udfs/registry.py's docstring)")
    assert set(registry.names()) <= set(SAMPLE_CALLS)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(n for n in registry.names() if n != "cfar"))
def test_nonfinite_samples_propagate_or_raise_a_documented_code(name, variant):
    args, samples = _call_args(name, variant)
    if args is None:
        pytest.skip("no empty spectrum exists (fft of an empty segment is EMPTY_SEGMENT)")
    got, err = _run(name, args)
    with np.errstate(all="ignore"):
        want = ORACLES[name](samples)
    if isinstance(want, Err):
        assert err is not None and err.code == want.code, (got, err)
        return
    # Nothing else is allowed: in particular not NON_FINITE_SAMPLES where the oracle
    # shows numpy computes a value (the guard is for kernels numpy cannot run).
    assert err is None, err
    assert _same(_values(got), want), (name, variant, _values(got), want)


def test_propagation_is_never_silently_finite():
    """A single non-finite sample reaches the output of every function that reads sample
    values -- except where the function documents what it does with it instead."""
    documented = {
        "width", "start_sample", "sample_rate", "start_time", "end_time",  # metadata only
        "zero_crossings",                   # skips NaN like zeros; +-Inf have a sign
        "trimpeak",                         # ignores NaN; an Inf is an ordinary extreme
        "threshold_ranges",                 # NaN is not above; Inf above / not
        "seg_min", "seg_max",               # an Inf on the other side does not show
        "cfar",                             # NaN scores ignored
    }
    for name in registry.names():
        if name in documented:
            continue
        args, _ = _call_args(name, "nan")
        got, err = _run(name, args)
        values = np.asarray(_values(got), dtype=np.complex128)
        assert err is None and not np.all(np.isfinite(values)), name


def test_cfar_scores():
    """NaN/None scores never fire and leave the state alone; +Inf fires after warm-up
    without being absorbed; -Inf never fires."""
    state = None
    for s in [1.0, 2.0] * 20:
        _, state = registry.call("cfar", s, 3.0, 0.1, 10, state=state)
    for score, fires in ((np.nan, False), (None, False), (np.inf, True), (-np.inf, False)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            fired, after = registry.call("cfar", score, 3.0, 0.1, 10, state=state)
        assert fired is fires, score
        assert after == state  # none of them is absorbed into the noise estimate
    # during warm-up nothing fires, whatever the score
    for score in (np.nan, np.inf, -np.inf, None):
        assert registry.call("cfar", score)[0] is False


def test_iir_state_stays_nan_until_a_gap():
    """Documented: one NaN poisons an IIR filter's delay line for the rest of its run, in
    later segments (and micro-batches) too; a gap in sample numbers resets it."""
    x = np.sin(np.arange(100) * 0.3)
    _, st = registry.call("lowpass", SigSeg(0, RATE, _with(x, np.nan)), 100.0)
    y, st = registry.call("lowpass", SigSeg(100, RATE, x), 100.0, state=st)
    assert np.isnan(y.samples).all()
    y, st = registry.call("lowpass", SigSeg(300, RATE, x), 100.0, state=st)  # gap
    assert np.isfinite(y.samples).all()
    # an FIR forgets it after len(taps) - 1 samples
    _, st = registry.call("fir", SigSeg(0, RATE, _with(x, np.nan)), np.array([0.5, 0.5]))
    y, _ = registry.call("fir", SigSeg(100, RATE, x), np.array([0.5, 0.5]), state=st)
    assert np.isfinite(y.samples).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", sorted(f.name for f in registry.all() if f.batch is not None))
def test_vectorised_forms_agree_on_nonfinite_rows(name, dtype):
    x = np.sin(np.arange(64) * 0.3)
    rows = np.stack([x] + [VARIANTS[v](x) for v in ("nan", "+inf", "-inf", "all_nan",
                                                    "all_inf")]).astype(dtype)
    starts = np.arange(rows.shape[0], dtype=np.int64) * 64
    fn = registry.lookup(name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fn.batch(SegBlock(starts, RATE, rows))
        want = [registry.call(name, SigSeg(int(s), RATE, r)) for s, r in zip(starts, rows)]
    if isinstance(got, SegBlock):
        got = list(got.data)
        want = [w.samples for w in want]
    for i, (g, w) in enumerate(zip(got, want)):
        assert _same(g, w), (name, i, g, w)


def test_program_over_nonfinite_windows_is_quiet_and_keeps_spark_nan_order():
    """The evaluator (the WAV scan, mapInArrow) runs every kernel without warnings; in a
    WHERE, NaN is above every number, as in Spark."""
    x = np.sin(np.arange(256) * 0.3)
    data = np.stack([x, _with(x, np.nan), _with(x, np.inf), np.full(256, np.nan)])
    ch = {"col": "ch1"}
    outputs = tuple(Output(n, {"call": n, "args": [ch]}, registry.lookup(n).returns)
                    for n in ("seg_rms", "seg_std", "psd", "hanning", "zero_crossings"))
    keep_finite = {"op": "<", "args": [{"call": "seg_rms", "args": [ch]}, {"lit": 1e300}]}
    above = {"op": ">", "args": [{"call": "seg_rms", "args": [ch]}, {"lit": 0.1}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        everything = Evaluator(Program(("ch1",), outputs)).run_windows(
            np.arange(4) * 256, RATE, [data])
        finite = Evaluator(Program(("ch1",), outputs, (keep_finite,))).run_windows(
            np.arange(4) * 256, RATE, [data])
        loud = Evaluator(Program(("ch1",), outputs, (above,))).run_windows(
            np.arange(4) * 256, RATE, [data])
    assert everything.num_rows == 4
    rms = everything.column("seg_rms").to_pylist()
    assert np.isfinite(rms[0]) and np.isnan(rms[1]) and rms[2] == np.inf and np.isnan(rms[3])
    assert finite.num_rows == 1
    assert loud.num_rows == 4  # NaN > 0.1 and Inf > 0.1 are true, as in Spark


def test_guard_turns_a_library_failure_on_nonfinite_input_into_a_code():
    """Should numpy/scipy/PyWavelets ever raise on NaN/Inf, the query fails with
    NON_FINITE_SAMPLES naming the function; on finite input the failure is a bug and is
    not hidden."""
    def picky(seg):
        if not np.all(np.isfinite(seg.samples)):
            raise ValueError("array must not contain infs or NaNs")  # as scipy.linalg says
        raise ZeroDivisionError("a bug")

    guarded = registry.guarded("picky", picky)
    with pytest.raises(SignalError) as caught:
        guarded(SigSeg(0, RATE, np.array([1.0, np.nan])))
    assert caught.value.code == "NON_FINITE_SAMPLES" and "picky" in str(caught.value)
    with pytest.raises(ZeroDivisionError):
        guarded(SigSeg(0, RATE, np.array([1.0, 2.0])))
    # every registered kernel and vectorised form is guarded
    for fn in registry.all():
        assert getattr(fn.kernel, "__wavesql_guarded__", False), fn.name
        assert fn.batch is None or getattr(fn.batch, "__wavesql_guarded__", False), fn.name
