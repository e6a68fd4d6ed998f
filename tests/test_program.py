"""The fused program evaluator against per-window numpy and against the kernels one by one.

No Spark: programs run where samples are in Python (the WAV scan, mapInArrow), so they are
tested here directly; the Spark tests check the same programs end to end.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV
import json

import numpy as np
import pyarrow as pa
import pytest
from scipy.io import wavfile

from wavesql.udfs import registry
from wavesql.udfs.program import Evaluator, Output, Program
from wavesql.udfs.sigseg import SegBlock, SigSeg

WAV = COUNTING_WAV


def _call(name, *args):
    return {"call": name, "args": list(args)}


CH = {"col": "ch1"}


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    rate, data = wavfile.read(WAV)
    assert rate == 44100
    return (data / 32768.0).astype(np.float32)


@pytest.mark.parametrize("name", sorted(
    f.name for f in registry.all() if f.batch is not None))
def test_every_batch_kernel_agrees_with_its_kernel(name, voice):
    rng = np.random.default_rng(3)
    blocks = [voice[: 64 * 700].reshape(64, 700),
              rng.normal(5.0, 0.01, (7, 33)).astype(np.float32),   # large DC offset
              np.zeros((3, 16), np.float32),                       # constant: NaN cases
              np.array([[1.0, np.nan, 2.0]], np.float32),
              np.zeros((2, 1), np.float32), np.zeros((2, 0), np.float32)]
    fn = registry.lookup(name)
    for data in blocks:
        starts = np.arange(data.shape[0], dtype=np.int64) * 1000 + 7
        got = fn.batch(SegBlock(starts, 44100.0, data))
        want = [fn.kernel(SigSeg(int(s), 44100.0, row)) for s, row in zip(starts, data)]
        if isinstance(got, SegBlock):
            for g, w in zip(got.data, want):
                np.testing.assert_allclose(g, w.samples, rtol=1e-12)
        else:
            np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, float),
                                       rtol=1e-9, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("name", ["seg_avg", "seg_std", "seg_rms", "seg_kurtosis",
                                  "crest_factor"])
def test_statistics_over_a_block_too_large_to_copy(name, voice):
    # Overlapping windows are a strided view; above 2^23 samples the statistics reduce it
    # in place instead of copying it to float64 (udfs/kernels/stats.py: _f64): same values.
    from wavesql.udfs.kernels.stats import _F64_MAX

    view = np.lib.stride_tricks.sliding_window_view(voice[:8000], 2048)[::1]
    assert view.size > _F64_MAX and not view.flags.c_contiguous
    starts = np.arange(view.shape[0], dtype=np.int64)
    fn = registry.lookup(name)
    got = np.asarray(fn.batch(SegBlock(starts, 44100.0, view)), float)
    rows = range(0, view.shape[0], 97)
    want = [fn.kernel(SigSeg(int(starts[i]), 44100.0, view[i])) for i in rows]
    np.testing.assert_allclose(got[list(rows)], want, rtol=1e-9, atol=1e-12, equal_nan=True)
    small = np.asarray(fn.batch(SegBlock(starts[:500], 44100.0, np.ascontiguousarray(view[:500]))))
    np.testing.assert_allclose(got[:500], small, rtol=1e-12, atol=1e-15, equal_nan=True)


def _statfilter(alpha, beta) -> Program:
    return Program(
        ("ch1",),
        (Output("t", _call("start_time", CH), "timestamp", epoch_us=1_000_000),
         Output("sd", _call("seg_std", CH), "double")),
        ({"op": ">", "args": [_call("seg_std", CH), {"lit": alpha}]},
         {"op": "<", "args": [_call("seg_avg", CH), {"lit": beta}]}))


def test_statfilter_program_matches_numpy(voice):
    n = 4096
    k = len(voice) // n
    mat = voice[: k * n].reshape(k, n)
    sd = mat.astype(np.float64).std(axis=1, ddof=1)
    avg = mat.astype(np.float64).mean(axis=1)
    alpha, beta = float(np.median(sd)), float(np.median(avg))
    prog = Program.from_json(_statfilter(alpha, beta).to_json())   # survives the wire
    starts = np.arange(k, dtype=np.int64) * n
    batch = Evaluator(prog).run_windows(starts, 44100.0, [mat])
    keep = (sd > alpha) & (avg < beta)
    assert batch.num_rows == keep.sum() > 0
    np.testing.assert_allclose(batch.column("sd").to_numpy(), sd[keep], rtol=1e-9)
    times = batch.column("t").cast(pa.int64()).to_numpy()
    np.testing.assert_array_equal(times, 1_000_000 + starts[keep].astype(np.int64) * 1_000_000 // 44100)
    # the ragged path (a list of windows) gives the same rows
    ragged = Evaluator(prog).run_windows(starts, 44100.0, [list(mat)])
    assert ragged.column("t").equals(batch.column("t"))
    np.testing.assert_allclose(ragged.column("sd").to_numpy(), batch.column("sd").to_numpy(),
                               rtol=1e-12)


def test_identity_program_round_trips_segments():
    prog = Program.identity(["a", "b"])
    data_a = np.arange(12, dtype=np.float32).reshape(3, 4)
    data_b = [np.ones(2, np.float32), np.zeros(0, np.float32), np.arange(5, dtype=np.float32)]
    out = Evaluator(prog).run_windows(np.array([0, 4, 8]), 10.0, [data_a, data_b])
    rows = out.to_pylist()
    assert [r["a"]["samples"] for r in rows] == data_a.tolist()
    assert [r["b"]["samples"] for r in rows] == [[1.0, 1.0], [], [0, 1, 2, 3, 4]]
    assert [r["a"]["start"] for r in rows] == [0, 4, 8] and rows[0]["b"]["rate"] == 10.0
    assert prog.spark_ddl().startswith("`a` struct<start:bigint,rate:double,samples:")


def test_nested_calls_and_spark_nan_ordering():
    # band_energy(fft(hanning(ch1)), 1, 2) per window, against numpy.
    rng = np.random.default_rng(1)
    mat = rng.normal(size=(10, 32)).astype(np.float32)
    mat[3] = np.nan
    expr = _call("band_energy", _call("fft", _call("hanning", CH)), {"lit": 1}, {"lit": 2})
    prog = Program(("ch1",), (Output("e", expr, "double"),),
                   ({"op": ">", "args": [expr, {"lit": 0.5}]},))
    out = Evaluator(prog).run_windows(np.arange(10) * 32, 1000.0, [mat])
    spec = np.fft.rfft(mat.astype(np.float64) * np.hanning(32), axis=1)
    energy = (np.abs(spec[:, 1:3]) ** 2).sum(axis=1)
    # Spark orders NaN above every number: the NaN window passes `> 0.5`, as it would there.
    keep = (energy > 0.5) | np.isnan(energy)
    got = out.column("e").to_numpy(zero_copy_only=False)
    np.testing.assert_allclose(got, energy[keep], rtol=1e-9, equal_nan=True)
    assert np.isnan(got).sum() == 1


def test_stateful_program_carries_state_across_calls_and_discards_warmup(voice):
    from scipy import signal

    x = voice[: 32 * 1000]
    prog = Program(("ch1",), (Output("y", _call("lowpass", CH, {"lit": 1000.0}), "sigseg"),))
    assert prog.stateful and prog.lookback(32000.0) == 1024
    ev = Evaluator(prog)
    pieces = []
    starts = np.arange(32) * 1000
    for lo in range(0, 32, 5):  # calls of 5 windows each: state must flow between them
        hi = min(lo + 5, 32)
        b = ev.run_windows(starts[lo:hi], 44100.0, [x.reshape(32, 1000)[lo:hi]],
                           discard_before=3000)
        pieces.extend(r["y"]["samples"] for r in b.to_pylist())
    sos = signal.butter(4, 1000.0, btype="low", fs=44100.0, output="sos")
    want = signal.sosfilt(sos, x.astype(np.float64))
    got = np.concatenate(pieces)
    assert len(got) == len(x) - 3000                   # the warm-up windows are not emitted
    np.testing.assert_allclose(got, want[3000:].astype(np.float32), rtol=1e-5, atol=1e-6)


def test_program_json_is_stable():
    prog = _statfilter(0.1, 0.0)
    assert Program.from_json(prog.to_json()) == prog
    assert json.loads(prog.to_json())["filters"][0]["op"] == ">"


def test_cfar_over_blocks_of_rows_equals_the_recursion_score_by_score():
    # The evaluator runs cfar's scan form once per block of rows; the oracle is the
    # detector's recursion as documented (udfs/kernels/detect.py), written out here.
    import math

    rng = np.random.default_rng(11)
    scores = np.abs(rng.normal(1.0, 0.3, 3000))
    scores[rng.integers(0, 3000, 40)] = 6.0      # events
    scores[[5, 700, 1500]] = np.nan              # ignored
    scores[[900, 2000]] = np.inf                 # fire, not absorbed

    def reference(k=2.5, alpha=0.02, warmup=40):
        out, n, mean, m2, var = [], 0, 0.0, 0.0, 0.0
        for s in scores:
            if math.isnan(s) or (n < warmup and math.isinf(s)):
                out.append(False)
                continue
            if n < warmup:
                n += 1
                d = s - mean
                mean += d / n
                m2 += d * (s - mean)
                var = m2 / n
                out.append(False)
                continue
            limit = mean + k * math.sqrt(var)
            out.append(bool(s > limit))
            if not math.isinf(s):
                d = min(s, limit) - mean
                n, mean, var = n + 1, mean + alpha * d, (1 - alpha) * (var + alpha * d * d)
        return out

    prog = Program(("ch1",), (Output("f", {"call": "cfar", "args": [
        {"call": "seg_avg", "args": [CH]}, {"lit": 2.5}, {"lit": 0.02}, {"lit": 40}]},
        "boolean"),))
    ev = Evaluator(prog)
    got, at = [], 0
    for size in rng.integers(1, 400, 40):  # blocks of rows of random sizes, state between
        size = int(min(size, len(scores) - at))
        if size <= 0:
            break
        got += ev.run_windows(np.arange(at, at + size), 1.0,
                              [scores[at:at + size].reshape(-1, 1)]).column("f").to_pylist()
        at += size
    want = reference()[:at]
    assert sum(want) > 30 and got == want


def test_per_row_evaluation_filters_each_row_from_rest(voice):
    """``per_row`` (a SYNC result's excerpts): every row is a signal of its own -- a filter
    from rest over its samples alone (scipy over the row), overlapping and repeated rows
    alike, a NULL row NULL, and a range still open at the row's end is the row's."""
    from scipy import signal

    from wavesql.udfs.program import _ARROW_TYPES

    spans = [(0, 700), (300, 1300), (300, 1300), (5000, 5001), (9000, 9800)]
    segs = [{"start": lo, "rate": 44100.0, "samples": voice[lo:hi].tolist()} for lo, hi in spans]
    segs.insert(2, None)
    batch = pa.RecordBatch.from_arrays(
        [pa.array(segs, type=_ARROW_TYPES["sigseg"]), pa.array(range(len(segs)))],
        names=["ch1", "id"])
    prog = Program(("ch1",), (
        Output("y", _call("lowpass", CH, {"lit": 1000.0}), "sigseg"),
        Output("r", _call("threshold_ranges", CH, {"lit": 0.05}), "ranges")))
    out = Evaluator(prog, per_row=True).run_batch(batch, ("id",)).to_pylist()
    assert [r["id"] for r in out] == list(range(len(segs)))
    sos = signal.butter(4, 1000.0, btype="low", fs=44100.0, output="sos")
    for row, seg in zip(out, segs):
        if seg is None:
            assert row["y"] is None and row["r"] is None
            continue
        x = np.asarray(seg["samples"], dtype=np.float64)
        np.testing.assert_allclose(row["y"]["samples"], signal.sosfilt(sos, x), atol=1e-6)
        edges = np.flatnonzero(np.diff(np.concatenate(([0], (x > 0.05).astype(np.int8), [0]))))
        assert [(t["start"], t["end"]) for t in row["r"]] == [
            (seg["start"] + a, seg["start"] + b) for a, b in zip(edges[0::2], edges[1::2])]
    with pytest.raises(Exception, match="NULL segments"):  # carried state: no NULL rows
        Evaluator(prog).run_batch(batch, ("id",))
