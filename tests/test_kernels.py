"""Signal-function registry and the shape, statistics and window kernels (no Spark).

Oracles are numpy/scipy on generated signals and on the real recording
``examples/data/counting_44k1.wav`` (44.1 kHz voice, 9 s). The spectral, wavelet and
streaming families are in ``test_kernels_spectral.py`` and ``test_kernels_stream.py``.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV, counting_voice, raises
import doctest
import importlib
import pickle
import re
import subprocess
import sys
import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as spstats

from wavesql.udfs import registry
from wavesql.udfs.kernels import Ranges, Spectrum
from wavesql.udfs.sigseg import SigSeg

WAV = Path(COUNTING_WAV)
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def voice() -> SigSeg:
    return counting_voice()




def seg(values, start=0, rate=1000.0, dtype=np.float64) -> SigSeg:
    return SigSeg(start, rate, np.asarray(values, dtype=dtype))


# ------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------
DESIGN_NAMES = """subseg append width start_time end_time dewindow seg_avg seg_std seg_rms
seg_min seg_max seg_kurtosis crest_factor zero_crossings fft ifft magnitude psd spectrogram
band_energy hanning hamming blackman fir iir lowpass highpass bandpass notch resample haar dwt
trimpeak cfar threshold_ranges degap""".split()

_S = SigSeg(0, 1000.0, np.sin(np.arange(256) * 0.3))
_SPEC = Spectrum(0, 1000.0, 256, np.fft.rfft(_S.samples))

#: One working call per function: arguments, and the Python type of the result.
SAMPLE_CALLS = {
    "subseg": ((_S, 10, 20), SigSeg), "append": ((_S, SigSeg(256, 1000.0, np.ones(2))), SigSeg),
    "width": ((_S,), int), "start_sample": ((_S,), int), "sample_rate": ((_S,), float), "start_time": ((_S,), int), "end_time": ((_S,), int),
    "dewindow": ((_S, 16), SigSeg),
    "seg_avg": ((_S,), float), "seg_std": ((_S,), float), "seg_rms": ((_S,), float),
    "seg_min": ((_S,), float), "seg_max": ((_S,), float), "seg_kurtosis": ((_S,), float),
    "crest_factor": ((_S,), float), "zero_crossings": ((_S,), int),
    "hanning": ((_S,), SigSeg), "hamming": ((_S,), SigSeg), "blackman": ((_S,), SigSeg),
    "fft": ((_S,), Spectrum), "ifft": ((_SPEC,), SigSeg), "magnitude": ((_SPEC,), np.ndarray),
    "psd": ((_S,), np.ndarray), "spectrogram": ((_S, 64), np.ndarray),
    "band_energy": ((_SPEC, 3, 4), float), "band_energy_hz": ((_SPEC, 10.0, 60.0), float),
    "fir": ((_S, np.array([0.5, 0.5])), SigSeg),
    "iir": ((_S, np.array([0.1]), np.array([1.0, -0.9])), SigSeg),
    "lowpass": ((_S, 100.0), SigSeg), "highpass": ((_S, 100.0, 2), SigSeg),
    "bandpass": ((_S, 50.0, 150.0), SigSeg), "notch": ((_S, 50.0), SigSeg),
    "resample": ((_S, 500.0), SigSeg),
    "haar": ((_S, 4), np.ndarray), "haar_approx": ((_S, 2), SigSeg), "dwt": ((_S, "db4", 2), np.ndarray),
    "trimpeak": ((_S, "max"), SigSeg), "cfar": ((1.0,), bool),
    "square": ((_S,), SigSeg),
    "threshold_ranges": ((_S, 0.5), Ranges), "degap": ((_S, "zero"), SigSeg),
}
_PY_TYPE_OF = {"sigseg": SigSeg, "spectrum": Spectrum, "double": float, "bigint": int,
               "int": int, "boolean": bool, "string": str, "array<double>": np.ndarray,
               "ranges": Ranges}


def test_registry_has_every_design_function():
    assert set(DESIGN_NAMES) <= set(registry.names())
    assert registry.names() == sorted(registry.names())
    assert [f.name for f in registry.all()] == registry.names()
    assert set(SAMPLE_CALLS) == set(registry.names())


def test_lookup_is_case_insensitive_and_unknown_is_none():
    assert registry.lookup("SEG_Std") is registry.lookup("seg_std") is not None
    assert registry.lookup("no_such_fn") is None
    raises("UNKNOWN_FUNCTION", registry.call, "no_such_fn", _S)


@pytest.mark.parametrize("entry", registry.all(), ids=lambda f: f.name)
def test_entry_is_documented_and_typed(entry):
    # A doc paragraph plus a SQL example naming the function itself.
    para, _, example = entry.doc.partition("\nExample: ")
    assert len(para) > 40 and example.upper().startswith("SELECT ")
    assert re.search(rf"\b{entry.name}\(", example, re.IGNORECASE)
    assert entry.output in registry.OUTPUT_KINDS
    # The type rule accepts the documented signature, with and without the optional args.
    assert entry.result_type(list(entry.arg_types)) == entry.returns
    assert entry.result_type(list(entry.arg_types[:entry.min_args])) == entry.returns
    assert entry.result_type(list(entry.arg_types), [True] * entry.max_args) == entry.returns
    # ... and rejects a wrong first argument, too few and too many.
    wrong = "string" if entry.arg_types[0] != "string" else "double"
    raises("TYPE_ERROR", entry.result_type, [wrong] + list(entry.arg_types[1:]))
    raises("TYPE_ERROR", entry.result_type, list(entry.arg_types) + ["double"])
    if entry.min_args:
        raises("TYPE_ERROR", entry.result_type, list(entry.arg_types[:entry.min_args - 1]))
    if entry.literal_positions:
        literals = [True] * entry.max_args
        literals[entry.literal_positions[0]] = False
        raises("LITERAL_REQUIRED", entry.result_type, list(entry.arg_types), literals)
    # Stateful entries build their state from literals only (it is created once per stream).
    if entry.stateful:
        assert entry.init_state is not None
        assert set(entry.literal_positions) == set(range(1, entry.max_args))
    assert entry.name in entry.signature()


@pytest.mark.parametrize("entry", registry.all(), ids=lambda f: f.name)
def test_entry_is_named_in_a_kernel_test(entry):
    text = "\n".join(p.read_text() for p in TESTS.glob("test_kernels*.py")
                     if p.name != Path(__file__).name)
    # In this file only the family tests count, not the tables above them.
    text += Path(__file__).read_text().split("# -- " + "family tests", 1)[1]
    assert re.search(rf"\b{entry.name}\b", text), f"{entry.name} has no kernel test"


@pytest.mark.parametrize("name", sorted(SAMPLE_CALLS))
def test_call_returns_the_declared_type_and_states_pickle(name):
    args, py_type = SAMPLE_CALLS[name]
    entry = registry.lookup(name)
    out = registry.call(name, *args)
    if entry.stateful:
        out, state = out
        again = pickle.loads(pickle.dumps(state))
        assert type(again) is type(state)
        registry.flush(name, again)  # never fails, returns None when nothing is pending
    assert isinstance(out, py_type) and isinstance(out, _PY_TYPE_OF[entry.returns])
    if isinstance(out, np.ndarray):
        assert out.ndim == 1 and out.dtype == np.float64


def test_type_rule_widening_and_literal_check():
    lp = registry.lookup("lowpass")
    assert lp.result_type(["sigseg", "int"]) == "sigseg"          # 1000 -> double
    assert lp.result_type(["sigseg", "decimal(5,1)", "bigint"]) == "sigseg"
    raises("TYPE_ERROR", lp.result_type, ["sigseg", "string"])
    raises("TYPE_ERROR", lp.result_type, ["sigseg", "double", "double"])  # order is int
    raises("LITERAL_REQUIRED", lp.result_type, ["sigseg", "double"], [False, False])
    assert registry.lookup("fir").result_type(["sigseg", "array<float>"]) == "sigseg"
    assert registry.accepts("double", "DECIMAL(3, 2)")


def test_call_dispatch_fills_defaults_and_rejects_state_for_stateless():
    y, st = registry.call("lowpass", _S, 100.0)           # order defaults to 4
    assert st["spec"] == ("lowpass", 100.0, 4)
    y2, _ = registry.call("lowpass", _S, 100.0, 4)
    np.testing.assert_array_equal(y.samples, y2.samples)
    raises("TYPE_ERROR", registry.call, "seg_avg", _S, state={})
    raises("TYPE_ERROR", registry.call, "seg_avg")
    raises("TYPE_ERROR", registry.flush, "seg_avg", None)
    assert registry.flush("lowpass", st) is None
    assert registry.flush("threshold_ranges", None) is None


def test_lookback_declarations():
    assert registry.lookup("seg_avg").lookback == 0
    assert registry.lookup("fir").lookback_of(48000.0, np.ones(5)) == 4
    # IIR filters: the warm-up after which any start state has shrunk below 2**-53 of itself
    assert registry.lookup("lowpass").lookback_of(48000.0, 1000.0) == 1024
    assert "never forgets" in registry.lookup("iir").lookback_of(48000.0, [1.0], [1.0, -1.0])
    assert "cfar" in registry.lookup("cfar").lookback_of(48000.0)   # a reason: sequential
    assert all(f.causal for f in registry.all() if f.name in ("fir", "lowpass", "resample"))


def test_malformed_entries_fail_at_definition():
    P = registry.Param
    with pytest.raises(ValueError):
        registry.SignalFunction("Bad", len, (P("s", "sigseg"),), "double", "scalar",
                                "x\nExample: SELECT 1")
    with pytest.raises(ValueError):
        registry.SignalFunction("bad", len, (P("s", "sigseg"),), "double", "scalar", "no ex")
    with pytest.raises(ValueError):
        registry.SignalFunction("bad", len, (P("s", "sigseg", 1), P("t", "int")), "double",
                                "scalar", "x\nExample: SELECT 1")
    with pytest.raises(ValueError):
        registry.SignalFunction("bad", len, (P("s", "float"),), "double", "scalar",
                                "x\nExample: SELECT 1")
    with pytest.raises(ValueError):  # stateful without init_state
        registry.SignalFunction("bad", len, (P("s", "sigseg"),), "double", "scalar",
                                "x\nExample: SELECT 1", stateful=True)
    with pytest.raises(ValueError):
        registry.register(registry.lookup("width"))


def test_udfs_never_import_pyspark():
    code = ("import sys; from wavesql.udfs import registry; import wavesql.udfs.kernels; "
            "assert len(registry.names()) > 30; "
            "print([m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("module", ["registry", "kernels.values", "kernels.shape",
                                    "kernels.stats", "kernels.windows", "kernels.spectra",
                                    "kernels.filters", "kernels.resample", "kernels.wavelets",
                                    "kernels.detect", "kernels.gaps"])
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"wavesql.udfs.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


def test_kernel_modules_stay_small():
    root = Path(registry.__file__).parent
    for path in [root / "registry.py", *sorted((root / "kernels").glob("*.py"))]:
        assert len(path.read_text().splitlines()) < 800, path


# -- family tests ---------------------------------------------------------------------------
# ------------------------------------------------------------------------------------------
# shape: subseg, append, width, start_time, end_time, dewindow
# ------------------------------------------------------------------------------------------
def test_subseg_uses_absolute_sample_numbers():
    s = seg(np.arange(10.0), start=1000)
    out = registry.call("subseg", s, 1003, 4)
    assert (out.start, out.samples.tolist()) == (1003, [3.0, 4.0, 5.0, 6.0])
    assert registry.call("subseg", s, 1010, 0).width == 0
    assert registry.call("subseg", s, 1000, 10).width == 10
    raises("OUT_OF_RANGE", registry.call, "subseg", s, 3, 4)          # offset, not number
    raises("OUT_OF_RANGE", registry.call, "subseg", s, 1008, 3)
    raises("INVALID_ARGUMENT", registry.call, "subseg", s, 1003, -1)
    raises("TYPE_ERROR", registry.call, "subseg", s, 1003.0, 4)
    raises("TYPE_ERROR", registry.call, "subseg", s.samples, 1003, 4)


def test_append_reuses_sigseg_rules():
    a, b = seg([1.0, 2.0], start=5), seg([3.0], start=7)
    out = registry.call("append", a, b)
    assert (out.start, out.samples.tolist()) == (5, [1.0, 2.0, 3.0])
    raises("TYPE_ERROR", registry.call, "append", a, seg([3.0], start=8))   # gap
    raises("TYPE_ERROR", registry.call, "append", a, seg([3.0], start=6))   # overlap
    raises("TYPE_ERROR", registry.call, "append", a, seg([3.0], start=7, rate=2000.0))
    assert registry.call("append", a, seg([], start=7)).width == 2


def test_width_and_times_in_microseconds(voice):
    assert registry.call("width", voice) == voice.width == 396900
    assert registry.call("start_time", voice) == 0
    assert registry.call("end_time", voice) == 9_000_000
    s = SigSeg(44101, 44100.0, np.zeros(3))
    assert registry.call("start_time", s) == 1_000_022          # 1.0000227 s, rounded down
    assert registry.call("end_time", s) == 44104 * 1_000_000 // 44100
    assert registry.call("width", seg([])) == 0
    raises("TYPE_ERROR", registry.call, "width", np.zeros(3))


def test_dewindow_rebuilds_the_stream_from_sliding_windows(voice):
    x = voice.samples[:10_000]
    w, slide = 256, 128
    windows = [SigSeg(i, voice.rate, x[i:i + w]) for i in range(0, len(x) - w + 1, slide)]
    parts = [registry.call("dewindow", win, w - slide) for win in windows]
    for p, q in zip(parts, parts[1:]):
        assert p.end == q.start                           # adjacent: nothing twice
    joined = np.concatenate([p.samples for p in parts])
    np.testing.assert_array_equal(joined, x[:len(joined)])
    assert len(joined) == windows[-1].end - (w - slide)  # the last overlap is not repeated
    assert registry.call("dewindow", seg([1.0, 2.0]), 5).width == 0
    assert registry.call("dewindow", seg([1.0, 2.0]), 0).width == 2
    raises("INVALID_ARGUMENT", registry.call, "dewindow", seg([1.0]), -1)
    raises("TYPE_ERROR", registry.call, "dewindow", seg([1.0]), "1")


# ------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------
STAT_ORACLES = {
    "seg_avg": np.mean,
    "seg_std": lambda v: np.std(v, ddof=1),
    "seg_rms": lambda v: np.sqrt(np.mean(v ** 2)),
    "seg_min": np.min,
    "seg_max": np.max,
    "seg_kurtosis": lambda v: spstats.kurtosis(v, fisher=False, bias=True),
    "crest_factor": lambda v: np.max(np.abs(v)) / np.sqrt(np.mean(v ** 2)),
}


def _zero_crossings_loop(v):
    signs = [np.sign(a) for a in v if a != 0 and not np.isnan(a)]
    return sum(1 for a, b in zip(signs, signs[1:]) if a != b)


@pytest.mark.parametrize("name", sorted(STAT_ORACLES) + ["zero_crossings"])
def test_statistics_match_numpy_on_the_recording(voice, name):
    oracle = STAT_ORACLES.get(name, _zero_crossings_loop)
    for start in range(0, voice.width - 4096, 4096 * 7):
        win = voice.subseg(start, 4096)
        got = registry.call(name, win)
        with np.errstate(all="ignore"):  # the recording ends in digital silence: NaN both
            want = oracle(win.samples)
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True), (name, start)
        # Spark ships float32: same answer on the float32 samples, computed in double.
        w32 = SigSeg(win.start, win.rate, win.samples.astype(np.float32))
        with np.errstate(all="ignore"):
            want = oracle(w32.samples.astype(np.float64))
        assert registry.call(name, w32) == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True)


@pytest.mark.parametrize("name", sorted(STAT_ORACLES))
def test_statistics_match_numpy_on_generated_signals(name):
    rng = np.random.default_rng(7)
    for n in (2, 3, 17, 1000):
        v = rng.standard_t(5, size=n) + 0.3
        assert registry.call(name, seg(v)) == pytest.approx(STAT_ORACLES[name](v), rel=1e-9)


def test_statistics_bad_input_is_nan_not_a_crash():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no RuntimeWarning leaks out of numpy either
        for name in STAT_ORACLES:
            assert np.isnan(registry.call(name, seg([]))), name
            assert np.isnan(registry.call(name, seg([1.0, np.nan, 2.0]))), name
        assert registry.call("zero_crossings", seg([])) == 0
        assert np.isnan(registry.call("seg_std", seg([4.0])))           # ddof = 1
        assert registry.call("seg_avg", seg([4.0])) == 4.0
        assert np.isnan(registry.call("seg_kurtosis", seg([2.0, 2.0, 2.0])))
        assert np.isnan(registry.call("crest_factor", seg([0.0, 0.0])))
        assert registry.call("seg_max", seg([1.0, np.inf])) == np.inf
        assert np.isnan(registry.call("seg_avg", seg([np.inf, -np.inf])))
        assert np.isnan(registry.call("crest_factor", seg([1.0, np.inf])))
    raises("TYPE_ERROR", registry.call, "seg_avg", [1.0, 2.0])


def test_zero_crossings_definition():
    zc = lambda v: registry.call("zero_crossings", seg(v))  # noqa: E731
    assert zc([1.0, -1.0, 1.0]) == 2
    assert zc([1.0, 0.0, -1.0]) == 1        # through zero: one crossing
    assert zc([1.0, 0.0, 0.0, 1.0]) == 0    # touching zero: none
    assert zc([0.0, 0.0]) == 0
    assert zc([-1.0, np.nan, 2.0]) == 1     # NaN skipped like a zero
    t = np.arange(44100) / 44100.0
    assert zc(np.sin(2 * np.pi * 100.0 * t + 0.1)) == 200   # 100 periods in 1 s


def test_kurtosis_and_crest_factor_of_known_signals():
    t = np.arange(48000) / 48000.0
    sine = seg(np.sin(2 * np.pi * 50 * t))
    assert registry.call("crest_factor", sine) == pytest.approx(np.sqrt(2), rel=1e-6)
    assert registry.call("seg_kurtosis", sine) == pytest.approx(1.5, rel=1e-3)
    noise = seg(np.random.default_rng(3).normal(size=200_000))
    assert registry.call("seg_kurtosis", noise) == pytest.approx(3.0, abs=0.05)
    assert registry.call("crest_factor", seg([1.0, -1.0, 1.0])) == 1.0


# ------------------------------------------------------------------------------------------
# windows: hanning, hamming, blackman
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,np_window", [("hanning", np.hanning), ("hamming", np.hamming),
                                            ("blackman", np.blackman)])
def test_windows_match_numpy(voice, name, np_window):
    for n in (0, 1, 2, 32, 4096):
        win = voice.subseg(20_000, n)
        out = registry.call(name, win)
        assert (out.start, out.rate, out.width) == (20_000, voice.rate, n)
        np.testing.assert_allclose(out.samples, win.samples * np_window(n), rtol=1e-12)
    w32 = SigSeg(0, 8.0, np.ones(8, dtype=np.float32))
    assert registry.call(name, w32).samples.dtype == np.float64
    nan = registry.call(name, seg([1.0, np.nan, 1.0]))
    assert np.isnan(nan.samples[1])
    raises("TYPE_ERROR", registry.call, name, _SPEC)


def test_sigseg_rate_rules_hold_for_kernel_inputs():
    # Zero / negative rates never reach a kernel: the value types refuse them.
    raises("INVALID_RATE", SigSeg, 0, 0.0, np.zeros(3))
    raises("INVALID_RATE", SigSeg, 0, -44100.0, np.zeros(3))
    raises("INVALID_RATE", Spectrum, 0, 0.0, 4, np.zeros(3))
    raises("TYPE_ERROR", Spectrum, 0, 8.0, 4, np.zeros(4))
    raises("TYPE_ERROR", Ranges, [(5, 5)])
    assert Ranges.concat([Ranges([(1, 2)], [1.0]), None, Ranges((), ())]).spans == ((1, 2),)


def test_literal_types_are_checked_at_run_time_too():
    raises("TYPE_ERROR", registry.call, "subseg", _S, True, 3)   # bool is not an int
    raises("TYPE_ERROR", registry.call, "lowpass", _S, "100")
    raises("TYPE_ERROR", registry.call, "lowpass", _S, 100.0, 4.0)
    y, _ = registry.call("lowpass", _S, Decimal("100.5"), np.int64(2))  # Spark literals
    assert y.width == _S.width


def test_time_and_sample_rules_are_inverse():
    """start_time/end_time map back to the same samples (SYNC ranges written with them cut
    exactly the segment they came from)."""
    from wavesql.udfs.sigseg import sample_at, time_of

    rng = np.random.default_rng(0)
    for rate in (8000, 44100, 48000, 96000, 192000, 1_000_000, 22050.5, 1.5):
        for n in list(rng.integers(0, 10**11, 2000)) + [0, 1, 2, 47, 48, 10**12]:
            assert sample_at(time_of(int(n), rate), rate) == n, (rate, n)
