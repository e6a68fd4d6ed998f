"""Stateful kernels (filters, resample, degap, threshold_ranges, cfar) and trimpeak.

The central property: a signal cut into segments of random sizes (1..5000 samples, several
seeds), state carried from call to call -- and pickled between calls, as Spark carries it
across micro-batches -- gives the same output as one piece, and that output is what
scipy computes on the whole signal.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV, counting_voice, raises
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
from scipy import signal as sps

from wavesql.udfs import registry
from wavesql.udfs.kernels import Ranges
from wavesql.udfs.kernels.resample import design, ratio
from wavesql.udfs.sigseg import SigSeg

WAV = Path(COUNTING_WAV)
SEEDS = (0, 1, 2)


@pytest.fixture(scope="module")
def voice() -> SigSeg:
    return counting_voice()




def cuts(n: int, seed: int, lo: int = 1, hi: int = 5000) -> list[tuple[int, int]]:
    """Random segmentation of ``range(n)`` into pieces of lo..hi samples."""
    rng = np.random.default_rng(seed)
    out, pos = [], 0
    while pos < n:
        w = int(rng.integers(lo, hi + 1))
        out.append((pos, min(pos + w, n)))
        pos += w
    return out


def pieces(x: np.ndarray, rate: float, seed: int, start: int = 0, drop: float = 0.0,
           dtype=np.float64, hi: int = 5000) -> list[SigSeg]:
    """``x`` as segments of random sizes; with ``drop`` > 0 some are left out (gaps)."""
    rng = np.random.default_rng(seed + 1000)
    segs = []
    for i, (a, b) in enumerate(cuts(len(x), seed, 1, hi)):
        if i > 0 and drop and rng.random() < drop:
            continue
        segs.append(SigSeg(start + a, rate, x[a:b].astype(dtype)))
    return segs


def run(name: str, segs, *args):
    """Feed ``segs`` through ``registry.call``, pickling the state between calls."""
    state, outs = None, []
    for s in segs:
        out, state = registry.call(name, s, *args, state=state)
        state = pickle.loads(pickle.dumps(state))
        outs.append(out)
    return outs, state


def joined(outs: list[SigSeg]) -> np.ndarray:
    for p, q in zip(outs, outs[1:]):
        assert p.end == q.start, "outputs must be adjacent"
    return np.concatenate([o.samples for o in outs])


# ------------------------------------------------------------------------------------------
# filters: fir, iir, lowpass, highpass, bandpass, notch
# ------------------------------------------------------------------------------------------
_TAPS = sps.firwin(101, 0.1)
_B, _A = sps.butter(3, 0.2)


def _sos(*args, **kw):
    return lambda x, fs: sps.sosfilt(sps.butter(*args, output="sos", fs=fs, **kw), x)


FILTER_CASES = [
    ("lowpass", (1000.0,), _sos(4, 1000.0)),
    ("lowpass", (3000.0, 8), _sos(8, 3000.0)),
    ("highpass", (300.0, 6), _sos(6, 300.0, btype="highpass")),
    ("bandpass", (300.0, 3400.0), _sos(4, [300.0, 3400.0], btype="bandpass")),
    ("notch", (50.0,), lambda x, fs: sps.lfilter(*sps.iirnotch(50.0, 30.0, fs=fs), x)),
    ("notch", (1000.0, 5.0), lambda x, fs: sps.lfilter(*sps.iirnotch(1000.0, 5.0, fs=fs), x)),
    ("fir", (_TAPS,), lambda x, fs: sps.lfilter(_TAPS, [1.0], x)),
    ("fir", (np.array([2.0]),), lambda x, fs: 2.0 * x),             # no delay line at all
    ("iir", (_B, _A), lambda x, fs: sps.lfilter(_B, _A, x)),
    ("iir", (2 * _B, 2 * _A), lambda x, fs: sps.lfilter(_B, _A, x)),  # normalised by a[0]
]
_IDS = [f"{c[0]}{i}" for i, c in enumerate(FILTER_CASES)]


@pytest.mark.parametrize("name,args,oracle", FILTER_CASES, ids=_IDS)
def test_filter_segmented_equals_scipy_on_the_recording(voice, name, args, oracle):
    want = oracle(voice.samples, voice.rate)
    for seed in SEEDS:
        outs, _ = run(name, pieces(voice.samples, voice.rate, seed), *args)
        assert outs[0].start == 0 and outs[-1].end == voice.width
        np.testing.assert_allclose(joined(outs), want, rtol=0, atol=1e-9)
    one, _ = registry.call(name, voice, *args)
    np.testing.assert_allclose(one.samples, want, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name,args,oracle", FILTER_CASES, ids=_IDS)
def test_filter_segmented_equals_scipy_on_noise(name, args, oracle):
    rate = 16000.0
    x = np.random.default_rng(11).normal(size=30_000)
    want = oracle(x, rate)
    segs = [SigSeg(i, rate, x[i:i + 1]) for i in range(300)]        # width-1 segments first
    segs += pieces(x[300:], rate, 5, start=300)
    outs, _ = run(name, segs, *args)
    np.testing.assert_allclose(joined(outs), want, rtol=0, atol=1e-9)
    # float32 samples, as Spark ships them: same as scipy on the float32 values
    outs32, _ = run(name, pieces(x, rate, 6, dtype=np.float32), *args)
    np.testing.assert_allclose(joined(outs32), oracle(x.astype(np.float32).astype(np.float64),
                                                      rate), rtol=0, atol=1e-9)


def test_filter_gap_resets_state_and_keeps_the_gap():
    rate = 8000.0
    x = np.random.default_rng(1).normal(size=5000)
    sos = sps.butter(4, 500.0, output="sos", fs=rate)
    y1, st = registry.call("lowpass", SigSeg(0, rate, x[:1000]), 500.0)
    y2, st = registry.call("lowpass", SigSeg(1500, rate, x[1500:3000]), 500.0, state=st)
    y3, st = registry.call("lowpass", SigSeg(3000, rate, x[3000:]), 500.0, state=st)
    assert (y2.start, y3.start) == (1500, 3000)                      # the gap stays
    np.testing.assert_allclose(y1.samples, sps.sosfilt(sos, x[:1000]), atol=1e-12)
    np.testing.assert_allclose(np.concatenate([y2.samples, y3.samples]),
                               sps.sosfilt(sos, x[1500:]), atol=1e-12)   # fresh run


def test_filter_stream_errors_and_empty_segments():
    rate = 8000.0
    x = np.ones(100)
    y, st = registry.call("highpass", SigSeg(0, rate, x), 100.0)
    raises("SEGMENT_ORDER", registry.call, "highpass", SigSeg(50, rate, x), 100.0, state=st)
    raises("SEGMENT_ORDER", registry.call, "highpass", SigSeg(-500, rate, x), 100.0, state=st)
    raises("RATE_MISMATCH", registry.call, "highpass", SigSeg(100, 16000.0, x), 100.0, state=st)
    e, st2 = registry.call("highpass", SigSeg(100, rate, np.zeros(0)), 100.0, state=st)
    assert e.width == 0 and e.start == 100 and st2["end"] == st["end"]
    np.testing.assert_array_equal(st2["zi"], st["zi"])
    # calling twice with the same state gives the same answer (states are never mutated)
    a, _ = registry.call("highpass", SigSeg(100, rate, x), 100.0, state=st)
    b, _ = registry.call("highpass", SigSeg(100, rate, x), 100.0, state=st)
    np.testing.assert_array_equal(a.samples, b.samples)


def test_filter_design_errors():
    s = SigSeg(0, 8000.0, np.ones(10))
    raises("INVALID_ARGUMENT", registry.call, "lowpass", s, 4000.0)          # = Nyquist
    raises("INVALID_ARGUMENT", registry.call, "highpass", s, 5000.0)
    raises("INVALID_ARGUMENT", registry.call, "bandpass", s, 300.0, 4500.0)
    raises("INVALID_ARGUMENT", registry.call, "notch", s, 4000.0)
    raises("INVALID_ARGUMENT", registry.call, "lowpass", s, -1.0)
    raises("INVALID_ARGUMENT", registry.call, "lowpass", s, 100.0, 0)
    raises("INVALID_ARGUMENT", registry.call, "lowpass", s, 100.0, 99)
    raises("INVALID_ARGUMENT", registry.call, "lowpass", s, math.inf)
    raises("INVALID_ARGUMENT", registry.call, "bandpass", s, 400.0, 300.0)
    raises("INVALID_ARGUMENT", registry.call, "notch", s, 50.0, 0.0)
    raises("INVALID_ARGUMENT", registry.call, "fir", s, np.array([]))
    raises("INVALID_ARGUMENT", registry.call, "fir", s, np.array([1.0, np.nan]))
    raises("INVALID_ARGUMENT", registry.call, "iir", s, np.array([1.0]), np.array([0.0, 1.0]))
    raises("TYPE_ERROR", registry.call, "fir", s, "0.5, 0.5")
    raises("TYPE_ERROR", registry.call, "fir", s, 0.5)
    raises("TYPE_ERROR", registry.call, "lowpass", s, "100")
    raises("TYPE_ERROR", registry.call, "lowpass", s, 100.0, 4.0)
    raises("TYPE_ERROR", registry.call, "lowpass", s.samples, 100.0)
    # init_state validates at plan time, before any data (the planner may call it)
    raises("INVALID_ARGUMENT", registry.lookup("bandpass").init_state, 400.0, 300.0)


def test_filter_nan_propagates_like_scipy():
    x = np.random.default_rng(2).normal(size=400)
    x[150] = np.nan
    sos = sps.butter(2, 0.1, output="sos")
    outs, _ = run("lowpass", pieces(x, 2.0, 3, hi=60), 0.1, 2)
    y = joined(outs)
    np.testing.assert_allclose(y, sps.sosfilt(sos, x), atol=1e-12)
    assert np.isnan(y[150:]).all() and not np.isnan(y[:150]).any()
    f = joined(run("fir", pieces(x, 2.0, 3, hi=60), np.ones(3))[0])
    assert np.isnan(f[150:153]).all() and not np.isnan(f[153:]).any()


# ------------------------------------------------------------------------------------------
# resample
# ------------------------------------------------------------------------------------------
def _upfirdn_run(x, s0, rate, new_rate):
    """Oracle: upfirdn over the whole run, placed on the new rate's grid (module doc)."""
    up, down = ratio(rate, new_rate)
    b0 = (s0 // down) * down
    full = sps.upfirdn(design(up, down), np.concatenate([np.zeros(s0 - b0), x]), up, down)
    k0 = -((-s0 * up) // down)
    n = -((-(s0 + len(x)) * up) // down) - k0
    off = k0 - b0 * up // down
    return k0, full[off:off + n]


@pytest.mark.parametrize("rate,new_rate,s0", [(44100.0, 16000.0, 0), (44100.0, 48000.0, 12345),
                                              (44100.0, 8000.0, 3)])
def test_resample_recording_segmented_equals_upfirdn(voice, rate, new_rate, s0):
    x = voice.samples[:200_000]
    k0, want = _upfirdn_run(x, s0, rate, new_rate)
    for seed in SEEDS:
        outs, st = run("resample", pieces(x, rate, seed, start=s0), new_rate)
        assert outs[0].start == k0 and all(o.rate == new_rate for o in outs)
        np.testing.assert_allclose(joined(outs), want, rtol=0, atol=1e-9)
        assert registry.flush("resample", st) is None


@pytest.mark.parametrize("rate,new_rate", [(48000.0, 44100.0), (1e6, 44100.0), (8000.0, 16000.0),
                                           (1000.0, 333.0), (250.0, 1000.0)])
def test_resample_generated_signals(rate, new_rate):
    x = np.random.default_rng(9).normal(size=20_000)
    k0, want = _upfirdn_run(x, 777, rate, new_rate)
    outs, _ = run("resample", pieces(x, rate, 4, start=777), new_rate)
    assert outs[0].start == k0
    np.testing.assert_allclose(joined(outs), want, rtol=0, atol=1e-9)


def test_resample_delay_and_grid_match_resample_poly():
    # The output is resample_poly's, delayed by the uncompensated group delay
    # 10 * max(up, down) / down output samples (20 for 8 kHz -> 16 kHz).
    x = np.random.default_rng(8).normal(size=8000)
    outs, _ = run("resample", pieces(x, 8000.0, 1), 16000.0)
    y = joined(outs)
    ref = sps.resample_poly(x, 2, 1)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y[20:], ref[:-20], atol=1e-9)
    # a 10 Hz tone keeps its frequency; the rate is the requested one
    t = np.arange(44100) / 44100.0
    tone, _ = registry.call("resample", SigSeg(0, 44100.0, np.sin(2 * np.pi * 10 * t)), 16000.0)
    assert tone.rate == 16000.0 and tone.width == 16000
    spec = registry.call("fft", tone)
    assert spec.frequencies[int(np.argmax(registry.call("magnitude", spec)))] == 10.0


def test_resample_gap_starts_a_new_run_and_same_rate_is_identity():
    x = np.random.default_rng(3).normal(size=3000)
    y1, st = registry.call("resample", SigSeg(0, 44100.0, x[:1000]), 16000.0)
    y2, st = registry.call("resample", SigSeg(2000, 44100.0, x[2000:]), 16000.0, state=st)
    k0, want = _upfirdn_run(x[2000:], 2000, 44100.0, 16000.0)
    assert y2.start == k0 == math.ceil(2000 * 160 / 441)
    np.testing.assert_allclose(y2.samples, want, atol=1e-12)
    same, _ = registry.call("resample", SigSeg(5, 100.0, x), 100.0)
    assert same.start == 5 and same.rate == 100.0
    np.testing.assert_array_equal(same.samples, x)


def test_resample_inexact_ratio_and_errors():
    y, st = registry.call("resample", SigSeg(0, 1000.0, np.ones(1000)), 1000.0 * math.pi)
    up, down = st["up"], st["down"]
    assert max(up, down) <= 10_000 and y.rate == pytest.approx(1000.0 * up / down)
    assert abs(y.rate / (1000.0 * math.pi) - 1) < 1e-6
    s = SigSeg(0, 44100.0, np.ones(10))
    raises("INVALID_RATE", registry.call, "resample", s, 0.0)
    raises("INVALID_RATE", registry.call, "resample", s, -16000.0)
    raises("INVALID_ARGUMENT", registry.call, "resample", s, 44100.0 * 1e5)
    raises("TYPE_ERROR", registry.call, "resample", s, "16k")
    y, st = registry.call("resample", s, 16000.0)
    raises("RATE_MISMATCH", registry.call, "resample", SigSeg(10, 48000.0, np.ones(5)), 16000.0,
           state=st)
    raises("SEGMENT_ORDER", registry.call, "resample", SigSeg(5, 44100.0, np.ones(5)), 16000.0,
           state=st)
    e, st2 = registry.call("resample", SigSeg(10, 44100.0, np.zeros(0)), 16000.0, state=st)
    assert e.width == 0 and st2["next_k"] == st["next_k"]


# ------------------------------------------------------------------------------------------
# degap
# ------------------------------------------------------------------------------------------
def _degap_reference(x, segs, policy):
    """The whole stream with every gap filled, from the first sample to the last."""
    out = x[segs[0].start:segs[-1].end].copy()
    base = segs[0].start
    for p, q in zip(segs, segs[1:]):
        g = q.start - p.end
        if g:
            last, first = x[p.end - 1], x[q.start]
            fill = {"zero": np.zeros(g), "hold": np.full(g, last),
                    "linear": np.linspace(last, first, g + 2)[1:-1]}[policy]
            out[p.end - base:q.start - base] = fill
    return out


@pytest.mark.parametrize("policy", ["zero", "hold", "linear"])
def test_degap_fills_random_gaps(voice, policy):
    x = voice.samples
    for seed in SEEDS:
        segs = pieces(x, voice.rate, seed, drop=0.3)
        assert any(p.end != q.start for p, q in zip(segs, segs[1:]))
        outs, _ = run("degap", segs, policy)
        assert outs[0].start == 0
        np.testing.assert_allclose(joined(outs), _degap_reference(x, segs, policy), atol=1e-12)


def test_degap_max_gap_error_policy_and_order():
    r = 100.0
    a, b, c = SigSeg(0, r, np.array([1.0, 2.0])), SigSeg(4, r, np.array([5.0])), \
        SigSeg(20, r, np.array([9.0]))
    y, st = registry.call("degap", a, "hold", 3)
    y, st = registry.call("degap", b, "hold", 3, state=st)
    assert (y.start, y.samples.tolist()) == (2, [2.0, 2.0, 5.0])
    y, st = registry.call("degap", c, "hold", 3, state=st)           # 15 > max_gap: left open
    assert (y.start, y.samples.tolist()) == (20, [9.0])
    _, st = registry.call("degap", a, "error")
    raises("SIGNAL_GAP", registry.call, "degap", b, "error", state=st)
    y, _ = registry.call("degap", SigSeg(2, r, np.array([3.0])), "error", state=st)
    assert y.samples.tolist() == [3.0]                               # adjacent: fine
    raises("SEGMENT_ORDER", registry.call, "degap", SigSeg(1, r, np.ones(3)), "zero", state=st)
    raises("RATE_MISMATCH", registry.call, "degap", SigSeg(2, 50.0, np.ones(3)), "zero",
           state=st)
    e, st2 = registry.call("degap", SigSeg(9, r, np.zeros(0)), "zero", state=st)
    assert e.width == 0 and st2 == st
    raises("INVALID_ARGUMENT", registry.call, "degap", a, "cubic")
    raises("INVALID_ARGUMENT", registry.call, "degap", a, "zero", -1)
    raises("TYPE_ERROR", registry.call, "degap", a, 0)
    # NaN before a gap: hold/linear fills are NaN, documented
    _, st = registry.call("degap", SigSeg(0, r, np.array([np.nan])), "linear")
    y, _ = registry.call("degap", SigSeg(3, r, np.array([1.0])), "linear", state=st)
    assert np.isnan(y.samples[:2]).all() and y.samples[2] == 1.0


# ------------------------------------------------------------------------------------------
# threshold_ranges
# ------------------------------------------------------------------------------------------
def _ranges_reference(segs, thr, min_gap):
    out, cur, prev_end = [], None, None
    for s in segs:
        if prev_end is not None and s.start != prev_end and cur:
            out.append(cur)
            cur = None
        for i, v in enumerate(s.samples.tolist()):
            if v > thr:
                n = s.start + i
                if cur and n - cur[1] <= min_gap:
                    cur[1], cur[2] = n + 1, max(cur[2], v)
                else:
                    if cur:
                        out.append(cur)
                    cur = [n, n + 1, v]
        prev_end = s.end
    if cur:
        out.append(cur)
    return [(a, b) for a, b, _ in out], [v for *_, v in out]


def _collect(outs, state):
    return Ranges.concat(outs + [registry.flush("threshold_ranges", state)])


@pytest.mark.parametrize("thr,min_gap", [(0.2, 0), (0.2, 40), (0.05, 2000)])
def test_threshold_ranges_segmented_equals_one_piece(voice, thr, min_gap):
    x = voice.samples[:200_000]
    whole = [SigSeg(0, voice.rate, x)]
    want = _ranges_reference(whole, thr, min_gap)
    one = _collect(*run("threshold_ranges", whole, thr, min_gap))
    assert (list(one.spans), list(one.values)) == want and len(one) > 0
    for seed in SEEDS:
        got = _collect(*run("threshold_ranges", pieces(x, voice.rate, seed), thr, min_gap))
        assert got == one
    # with data gaps: a gap closes the open range
    segs = pieces(x, voice.rate, 7, drop=0.25)
    got = _collect(*run("threshold_ranges", segs, thr, min_gap))
    assert (list(got.spans), list(got.values)) == _ranges_reference(segs, thr, min_gap)


def test_threshold_ranges_reports_each_range_once_when_it_closes():
    r = 10.0
    y1, st = registry.call("threshold_ranges", SigSeg(0, r, np.array([0, 2, 2.0])), 1.0)
    assert len(y1) == 0 and st["open"] == (1, 3, 2.0)                # still open
    y2, st = registry.call("threshold_ranges", SigSeg(3, r, np.array([3, 0, 0, 4.0])), 1.0,
                           state=st)
    assert y2.spans == ((1, 4),) and y2.values == (3.0,)             # crossed the boundary
    assert registry.flush("threshold_ranges", st).spans == ((6, 7),)
    y, st = registry.call("threshold_ranges", SigSeg(0, r, np.array([5, 0, 0, 5.0, 0])), 1.0, 2)
    assert len(y) == 0 and st["open"] == (0, 4, 5.0)                 # merged over 2 samples
    y, st = registry.call("threshold_ranges", SigSeg(5, r, np.array([0, 0.0])), 1.0, 2, state=st)
    assert y.spans == ((0, 4),) and registry.flush("threshold_ranges", st) is None
    # NaN counts as below; empty and all-below segments give empty ranges
    y, _ = registry.call("threshold_ranges", SigSeg(0, r, np.array([2, np.nan, 2.0])), 1.0)
    assert y.spans == ((0, 1),)
    assert len(registry.call("threshold_ranges", SigSeg(0, r, np.zeros(0)), 1.0)[0]) == 0
    raises("INVALID_ARGUMENT", registry.call, "threshold_ranges", SigSeg(0, r, np.ones(2)),
           np.nan)
    raises("INVALID_ARGUMENT", registry.call, "threshold_ranges", SigSeg(0, r, np.ones(2)),
           1.0, -1)
    raises("TYPE_ERROR", registry.call, "threshold_ranges", SigSeg(0, r, np.ones(2)), "1")


# ------------------------------------------------------------------------------------------
# cfar
# ------------------------------------------------------------------------------------------
def _cfar_reference(scores, k, alpha, warmup):
    mean = var = 0.0
    seen, out = [], []
    for s in scores:
        if s is None or math.isnan(s):
            out.append(False)
            continue
        if len(seen) < warmup:
            if not math.isinf(s):
                seen.append(s)
                mean, var = float(np.mean(seen)), float(np.var(seen))
            out.append(False)
            continue
        thr = mean + k * math.sqrt(var)
        out.append(s > thr)
        if not math.isinf(s):
            d = min(s, thr) - mean
            mean, var = mean + alpha * d, (1 - alpha) * (var + alpha * d * d)
    return out


def _cfar_batches(scores, seed, *args):
    """Scores in micro-batches of random sizes, the state pickled between batches."""
    out, state = [], None
    for a, b in cuts(len(scores), seed, 1, 5000):
        for s in scores[a:b]:
            fired, state = registry.call("cfar", s, *args, state=state)
            out.append(fired)
        state = pickle.loads(pickle.dumps(state))
    return out


def test_cfar_on_detectaudio_scores(voice):
    # DETECTAUDIO: 32-sample windows -> fft(hanning) -> band energy -> CFAR
    x = voice.samples
    wins = x[: len(x) // 32 * 32].reshape(-1, 32) * np.hanning(32)
    spec = np.fft.rfft(wins, axis=1)
    scores = np.sum(np.abs(spec[:, 3:5]) ** 2, axis=1).tolist()
    w = SigSeg(32 * 1000, voice.rate, x[32 * 1000:32 * 1001])
    assert registry.call("band_energy", registry.call("fft", registry.call("hanning", w)), 3, 4) \
        == pytest.approx(scores[1000], rel=1e-12)
    args = (4.0, 0.01, 64)
    want = _cfar_reference(scores, *args)
    for seed in SEEDS:
        assert _cfar_batches(scores, seed, *args) == want
    fired = np.array(want)
    rms = np.sqrt(np.mean(wins ** 2, axis=1))
    assert 10 < fired.sum() < 0.2 * len(fired)
    assert np.median(rms[fired]) > 3 * np.median(rms)       # it fires on the voice


def test_cfar_false_alarms_and_spikes():
    rng = np.random.default_rng(12)
    scores = rng.normal(10.0, 1.0, size=20_000)
    spikes = np.arange(500, 20_000, 1000)
    scores[spikes] += 12.0
    scores = scores.tolist()
    scores[300] = math.nan
    scores[301] = None
    scores[5] = math.inf            # during warm-up: ignored
    scores[777] = math.inf          # fires, not absorbed
    want = _cfar_reference(scores, 3.0, 0.01, 32)
    got = _cfar_batches(scores, 1, 3.0, 0.01, 32)
    assert got == want and all(got[i] for i in spikes) and got[777]
    assert not got[300] and not got[301] and not any(got[:32])
    false = sum(got) - len(spikes) - 1
    assert false < 0.01 * len(scores)


def test_cfar_adapts_to_a_lasting_level_change_and_rejects_bad_parameters():
    scores = [1.0, 2.0] * 100 + [50.0, 51.0] * 2000
    got = _cfar_batches(scores, 0, 3.0, 0.05, 32)
    assert got[200] and not any(got[-500:])                          # no lock-in
    _, st = registry.call("cfar", 1.0)
    _, st2 = registry.call("cfar", math.nan, state=st)
    assert st2 == st
    raises("INVALID_ARGUMENT", registry.call, "cfar", 1.0, 3.0, 0.0)
    raises("INVALID_ARGUMENT", registry.call, "cfar", 1.0, 3.0, 1.5)
    raises("INVALID_ARGUMENT", registry.call, "cfar", 1.0, -1.0)
    raises("INVALID_ARGUMENT", registry.call, "cfar", 1.0, 3.0, 0.1, 1)
    raises("TYPE_ERROR", registry.call, "cfar", "loud")
    raises("TYPE_ERROR", registry.call, "cfar", 1.0, 3.0, 0.1, 8.5)


# ------------------------------------------------------------------------------------------
# trimpeak
# ------------------------------------------------------------------------------------------
def test_trimpeak_splits_at_the_extreme(voice):
    rng = np.random.default_rng(0)
    for start in rng.integers(0, voice.width - 8192, size=20).tolist():
        w = voice.subseg(start, 8192)
        lo = registry.call("trimpeak", w, "min")
        hi = registry.call("trimpeak", w, "MAX")
        i, j = int(np.argmin(w.samples)), int(np.argmax(w.samples))
        assert (lo.start, lo.end, lo.samples[0]) == (start + i, w.end, w.samples[i])
        assert (hi.start, hi.samples[0]) == (start + j, w.samples[j])


def test_trimpeak_chain_as_in_pipeline(voice):
    # PIPELINE: trimpeak min / max / min / max, then a ratio of peak magnitudes
    w = voice.subseg(100_000, 8192)
    p1 = registry.call("trimpeak", w, "min")
    p2 = registry.call("trimpeak", p1, "max")
    p3 = registry.call("trimpeak", p2, "min")
    p4 = registry.call("trimpeak", p3, "max")
    x = w.samples
    i1 = int(np.argmin(x))
    i2 = i1 + int(np.argmax(x[i1:]))
    i3 = i2 + int(np.argmin(x[i2:]))
    i4 = i3 + int(np.argmax(x[i3:]))
    assert [p.start - w.start for p in (p1, p2, p3, p4)] == [i1, i2, i3, i4]
    ratio_ = abs(p2.samples[0]) / abs(p1.samples[0])
    assert ratio_ == pytest.approx(abs(x[i2]) / abs(x[i1]))


def test_trimpeak_ties_nan_and_bad_input():
    s = SigSeg(10, 1.0, np.array([3.0, 1.0, 1.0, 3.0]))
    assert registry.call("trimpeak", s, "min").start == 11           # first occurrence
    assert registry.call("trimpeak", s, "max").start == 10
    n = SigSeg(0, 1.0, np.array([np.nan, 2.0, -1.0, np.nan]))
    assert registry.call("trimpeak", n, "min").start == 2            # NaN ignored
    assert registry.call("trimpeak", SigSeg(4, 1.0, np.full(3, np.nan)), "max").start == 4
    assert registry.call("trimpeak", SigSeg(4, 1.0, np.array([7.0])), "max").width == 1
    raises("EMPTY_SEGMENT", registry.call, "trimpeak", SigSeg(0, 1.0, np.zeros(0)), "min")
    raises("INVALID_ARGUMENT", registry.call, "trimpeak", s, "peak")
    raises("TYPE_ERROR", registry.call, "trimpeak", s, 1)
