"""cfar run speculatively in every scan partition, verified in order: the flags equal a
plain-Python cfar loop over the whole stream of window scores.

The oracle (:func:`_cfar_oracle`) is the recursion as udfs/kernels/detect.py documents it,
written here, over window scores computed here with numpy (``seg_max``: exact, so the
comparison is bit for bit; ``seg_rms`` in one case). Recordings are random WAV files --
1-sample files, gaps between some, NaN and Inf samples -- read by the scan's own
partitions (udfs/row_chain.py); nothing from the code under test makes the expected flags.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa
import pytest

from wavesql.sources import wav_scan
from wavesql.sources import wav_source as wsrc
from wavesql.udfs import row_chain, row_state
from wavesql.udfs.program import Output, Program
from wavesql.udfs.wav import write_wav

RATE = 1000.0
BASE_MS = 1_700_000_000_000  #: file names carry unix ms; the epoch is the first one
_CH = {"col": "ch1"}
_START = {"call": "start_sample", "args": [_CH]}
_SCORES = {"max": {"call": "seg_max", "args": [_CH]}, "rms": {"call": "seg_rms", "args": [_CH]}}


def _cfar_oracle(scores, k, alpha, warmup):
    """cfar as documented: the first ``warmup`` finite scores seed the mean and the
    population variance (Welford, as the docstring's "plain mean and population variance"
    is computed incrementally); after that a score fires above mean + k*sigma and is
    absorbed clipped there; NaN never fires and is not absorbed, +Inf fires and is not
    absorbed, -Inf neither."""
    n, mean, m2, var, fired = 0, 0.0, 0.0, 0.0, []
    for s in scores:
        if n < warmup:
            fired.append(False)
            if math.isfinite(s):
                n += 1
                d = s - mean
                mean += d / n
                m2 += d * (s - mean)
                var = m2 / n
            continue
        threshold = mean + k * math.sqrt(var)
        fired.append(s > threshold)
        if math.isnan(s) or math.isinf(s):
            continue
        d = min(s, threshold) - mean
        mean, var = mean + alpha * d, (1 - alpha) * (var + alpha * d * d)
    return fired


def _recording(folder, rng, length: int, nonfinite: bool = False):
    """Random float32 files (1-sample ones among them), gaps between some, named by their
    start (1 sample per ms); noise whose level drifts, loud bursts, and with ``nonfinite``
    NaN and Inf samples. Returns the gap-free runs as (first sample, float64 samples)."""
    runs, t_ms, left, current = [], 0, length, None
    while left > 0:
        size = min(left, int(rng.choice([1, int(rng.integers(1, 50)),
                                         int(rng.integers(50, 4000))])))
        if runs and rng.random() < 0.25:
            t_ms += int(rng.integers(1, 700))  # a gap: cuts windows, not the estimate
            current = None
        level = 0.2 + 0.15 * np.sin(t_ms / 3000.0)
        x = rng.standard_normal(size) * level
        loud = rng.random(size) < 0.004
        x[loud] *= 12
        if nonfinite and size > 1:
            x[rng.integers(0, size, 2)] = [np.nan, rng.choice([np.inf, -np.inf])]
        raw = x.astype(np.float32)
        write_wav(folder / f"rec_{BASE_MS + t_ms}.wav", raw, int(RATE), "float32")
        if current is None:
            current = [t_ms, []]
            runs.append(current)
        current[1].append(raw.astype(np.float64))
        t_ms += size
        left -= size
    return [(start, np.concatenate(parts)) for start, parts in runs]


def _windows(runs, n: int):
    """(start, samples) of tumbling n-sample windows on the absolute grid, cut at the
    runs' ends."""
    rows = []
    for start, x in runs:
        k = start // n * n
        while k < start + len(x):
            lo, hi = max(k, start), min(k + n, start + len(x))
            rows.append((lo, x[lo - start:hi - start]))
            k += n
    return rows


def _score(name: str, y: np.ndarray) -> float:
    if name == "max":
        return float(np.max(y))
    return float(np.sqrt(np.mean(y * y)))


def _program(score: str, k, alpha, warmup, where: bool) -> Program:
    call = {"call": "cfar", "args": [_SCORES[score]] + [{"lit": v} for v in (k, alpha, warmup)]}
    if where:
        return Program(("ch1",), (Output("s", _START, "bigint"),), (call,))
    return Program(("ch1",), (Output("s", _START, "bigint"), Output("f", call, "boolean"),
                              Output("g", {"op": "and", "args": [call, {"op": ">", "args": [
                                  _SCORES["max"], {"lit": 1.0}]}]}, "boolean")))


def _split_read(folder, split, n: int, size: int, rng, stats: dict, source=None):
    """The scan as batch_frame runs it, without Spark: the partitions with their
    look-back (wav_source.lookback_partitions), each packed, the packed rows shuffled,
    then the ordered pass; returns the rows and the heads. ``source``: the options naming
    the files (default: ``folder``'s, timestamped, at RATE)."""
    options = {**(source or {"path": str(folder), "timeline": "timestamped",
                             "rate": str(RATE), "epoch_us": str(BASE_MS * 1000)}),
               "window": str(n), "partition_samples": str(size),
               "program": split.scan.to_json()}
    plan = wsrc.plan(options)
    parts, heads = plan.partitions(), None
    if isinstance(split.lookback, int):
        parts, heads = wsrc.lookback_partitions(plan, split.lookback, parts)
    heads = heads or [None] * len(parts)
    packed = [b for part, head in zip(parts, heads) for b in row_state.pack(
        part.index, wav_scan.read_partition(part, plan.options, plan.program_json,
                                            plan.channels, plan.stateful), split, head)]
    order = rng.permutation(len(packed))
    out = list(row_state.ordered_pass([packed[i] for i in order], split, stats))
    return pa.Table.from_batches(out, schema=split.ordered.arrow_schema()).to_pylist(), heads


def _check(folder, runs, *, n, size, score="max", k=3.0, alpha=0.5, warmup=8, rng,
           lookback=None, meet=True) -> dict:
    """Both programs (cfar in the SELECT list and in an expression; cfar as the WHERE
    filter) read in partitions of ``size`` samples vs the oracle; returns the counts of
    accepted and re-run partitions (over both programs) and the partitions' heads."""
    windows = _windows(runs, n)
    flags = _cfar_oracle([_score(score, y) for _, y in windows], k, alpha, warmup)
    assert 0 < sum(flags) < len(flags)
    stats: dict = {}
    for where in (False, True):
        split = row_state.split(_program(score, k, alpha, warmup, where), RATE)
        if lookback is not None:  # forced (a look-back too short to meet: re-runs)
            split = dataclasses.replace(split, lookback=lookback)
        got, heads = _split_read(folder, split, n, size, rng, stats)
        full = sum(h == split.lookback for h in heads)  # a whole look-back before them
        if where:
            assert [r["s"] for r in got] == [s for (s, _), f in zip(windows, flags) if f]
        else:
            assert got == [{"s": s, "f": f, "g": f and bool(np.max(y) > 1.0)}
                           for (s, y), f in zip(windows, flags)]
    assert stats.get("accepted", 0) + stats.get("rerun", 0) == 2 * len(heads)
    # the first partition and (most likely: the look-back is 3x what runs needed in
    # measurements) every partition with a whole look-back before it are accepted
    if meet and isinstance(split.lookback, int):
        assert stats.get("accepted", 0) >= 2 * (1 + full), (stats, heads)
    return stats, heads


def test_the_lookback_follows_alpha_and_has_a_cap():
    split = row_state.split(_program("max", 4.0, 0.01, 64, True), RATE)
    assert split.lookback == 64 + math.ceil(3 * math.log(2 ** 53) / 0.01)  # 11,086
    assert "cfar in partitions from a warm-up of 11,086 scores, verified in order" in \
        split.label(RATE)
    assert row_state.split(_program("max", 4.0, 0.5, 8, True), RATE).lookback == 8 + 221
    assert row_state.split(_program("max", 4.0, 0.001, 64, True), RATE).lookback == 110_275
    tiny = row_state.split(_program("max", 4.0, 0.0001, 64, True), RATE)
    need = 64 + math.ceil(3 * math.log(2 ** 53) / 0.0001)  # 1,102,169
    assert tiny.lookback == f"cfar would need a look-back of {need:,} scores, over 131,072"
    assert ("cfar in one ordered pass over the window scores (cfar would need a look-back "
            f"of {need:,} scores, over 131,072)") in tiny.label(RATE)


@pytest.mark.parametrize("n,size", [(1, 1500), (2, 2000), (3, 3000), (5, 6000), (7, 1400)])
def test_partitions_of_every_size_give_the_oracles_flags(tmp_path, n, size, monkeypatch):
    # alpha 0.5: a look-back of 229 windows; partitions of 1,500 to 1,000 windows speculate
    # (>= 4 look-backs), those of 200 windows (the last case) run in the ordered pass.
    # Several packed pieces per partition, shuffled.
    monkeypatch.setattr(row_state, "PACK_ROWS", 97)
    rng = np.random.default_rng([n, size])
    runs = _recording(tmp_path, rng, 20_000)
    (stats, heads) = _check(tmp_path, runs, n=n, size=size, rng=rng)
    if n == 7:
        assert heads[0] == 0 and set(heads[1:]) == {None} and stats["accepted"] == 2
    else:
        assert heads.count(229) >= 1 and stats["accepted"] >= 2 * 2, (stats, heads)


def test_rms_scores_nan_and_inf_samples_and_one_sample_files(tmp_path):
    rng = np.random.default_rng(7)
    runs = _recording(tmp_path, rng, 16_000, nonfinite=True)
    assert any(np.isnan(x).any() for _, x in runs) and any(np.isinf(x).any() for _, x in runs)
    stats, _ = _check(tmp_path, runs, n=4, size=4000, score="rms", rng=rng)
    assert stats.get("accepted", 0) > 2, stats


def test_a_look_back_too_short_to_meet_is_re_run_from_the_true_state(tmp_path):
    # A forced look-back of 3 windows: a run from a fresh warm-up of 2 scores cannot have
    # met the true run; every speculating partition's guess is refused and re-run.
    rng = np.random.default_rng(3)
    runs = _recording(tmp_path, rng, 12_000)
    stats, heads = _check(tmp_path, runs, n=2, size=600, warmup=2, rng=rng, lookback=3,
                          meet=False)
    assert heads.count(3) >= 5 and stats["accepted"] == 2, (stats, heads)


def test_a_run_of_nan_scores_before_a_partition_is_re_run(tmp_path):
    # Adversarial scores: NaN windows are not absorbed, so a look-back of only NaN leaves
    # the fresh run in its warm-up -- the guess cannot agree; the partition is re-run.
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(9000) * 0.3).astype(np.float32)
    x[rng.integers(0, 9000, 40)] *= 15
    x[3000:4000] = np.nan  # the look-back (229 windows of 2 = 458 samples) of the 2nd
    write_wav(tmp_path / f"rec_{BASE_MS}.wav", x, int(RATE), "float32")
    # partitions of 2,000 windows: the first, the second (all-NaN look-back), the third
    # (500 windows: in the ordered pass)
    stats, heads = _check(tmp_path, [(0, x.astype(np.float64))], n=2, size=4000, rng=rng,
                          meet=False)
    assert heads == [0, 229, None] and stats == {"accepted": 2, "rerun": 4}, stats


def test_short_partitions_and_a_large_look_back_stay_in_the_ordered_pass(tmp_path):
    # alpha 0.001: 110,275 windows of look-back; no partition holds 4x that, so only the
    # first (from the stream's start) runs cfar itself; the rest run in the ordered pass.
    rng = np.random.default_rng(11)
    runs = _recording(tmp_path, rng, 10_000)
    stats, heads = _check(tmp_path, runs, n=1, size=2000, alpha=0.001, k=2.0, rng=rng)
    assert heads[0] == 0 and set(heads[1:]) == {None} and len(heads) >= 5
    assert stats["accepted"] == 2, stats
    # over the cap: the ordered pass runs every partition
    stats, heads = _check(tmp_path, runs, n=1, size=2000, alpha=0.0001, k=2.0, rng=rng)
    assert "accepted" not in stats and set(heads) == {None}, stats


def test_the_real_recording_speculates_and_gives_the_oracles_flags():
    # The counting voice (9 s of speech, int16, silences): cfar over the peaks of
    # 16-sample windows at alpha 0.05 (a look-back of 2,237 windows) in partitions of
    # 10,000 windows, the flags vs the oracle over the same windows read with scipy.
    from scipy.io import wavfile

    from tests.data import COUNTING_WAV

    rate, data = wavfile.read(COUNTING_WAV)
    x = data.astype(np.float64) / 32768
    windows = _windows([(0, x)], 16)
    flags = _cfar_oracle([_score("max", y) for _, y in windows], 3.0, 0.05, 32)
    assert 0 < sum(flags) < len(windows)
    stats: dict = {}
    split = row_state.split(_program("max", 3.0, 0.05, 32, True), float(rate))
    assert split.lookback == 2237
    got, heads = _split_read(None, split, 16, 160_000, np.random.default_rng(1), stats,
                             source={"path": COUNTING_WAV, "rate": str(rate)})
    assert [r["s"] for r in got] == [s for (s, _), f in zip(windows, flags) if f]
    assert heads == [0, 2237, None] and stats == {"accepted": 2, "rerun": 1}, (heads, stats)


def test_guesses_agree_on_the_bits_of_mean_and_variance_past_the_warm_up():
    from wavesql.udfs.kernels.detect import cfar_agrees, cfar_init, cfar_rebase

    true = dict(cfar_init(3.0, 0.1, 4), n=100, mean=1.5, m2=2.0, var=0.25)
    assert cfar_agrees(dict(true, n=50, m2=9.0), true)  # n and m2 no longer read
    assert not cfar_agrees(dict(true, mean=np.nextafter(1.5, 2)), true)
    assert not cfar_agrees(dict(true, var=np.nextafter(0.25, 1)), true)
    assert not cfar_agrees(dict(true, n=3, m2=9.0), true)  # the guess still warming up
    assert not cfar_agrees(dict(true, alpha=0.2), true)
    early = dict(cfar_init(3.0, 0.1, 4), n=2, mean=1.0, m2=0.5, var=0.25)
    assert cfar_agrees(dict(early), early) and not cfar_agrees(dict(early, m2=0.6), early)
    assert not cfar_agrees(dict(true, mean=-0.0), dict(true, mean=0.0))  # bits, not ==
    end = dict(true, n=70, mean=2.0, m2=9.0, var=0.5)
    assert cfar_rebase(end, dict(true, n=50, m2=9.0), true) == dict(end, n=120, m2=2.0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
def test_many_random_splits(tmp_path, seed, monkeypatch):
    monkeypatch.setattr(row_state, "PACK_ROWS", int(np.random.default_rng(seed).integers(5, 500)))
    rng = np.random.default_rng([seed, 77])
    runs = _recording(tmp_path, rng, int(rng.integers(5_000, 60_000)), nonfinite=seed % 3 == 0)
    n = int(rng.choice([1, 2, 3, 8]))
    _check(tmp_path, runs, n=n, size=int(rng.integers(300, 20_000)), alpha=float(
        rng.choice([0.5, 0.2, 0.05])), warmup=int(rng.integers(2, 20)),
        score=str(rng.choice(["max", "rms"])), rng=rng)


@pytest.mark.spark
def test_cfar_through_spark_speculates_and_equals_the_oracle(spark, tmp_path):
    # The Spark form: scan tasks with their look-back, a shuffle, one ordered task that
    # verifies the chain (12 partitions, all but the first with a look-back).
    rng = np.random.default_rng(41)
    runs = _recording(tmp_path, rng, 30_000)
    windows = _windows(runs, 2)
    flags = _cfar_oracle([_score("max", y) for _, y in windows], 3.0, 0.5, 8)
    options = {"path": str(tmp_path), "timeline": "timestamped", "rate": str(RATE),
               "epoch_us": str(BASE_MS * 1000), "window": "2", "partition_samples": "2500"}
    for where in (False, True):
        split = row_state.split(_program("max", 3.0, 0.5, 8, where), RATE)
        plan = wsrc.plan({**options, "program": split.scan.to_json()})
        _, heads = wsrc.lookback_partitions(plan, split.lookback, plan.partitions())
        assert heads[0] == 0 and sum(h is not None for h in heads) > 5, heads
        df = wsrc.batch_frame(spark, split.scan.spark_ddl(),
                              {**options, "program": split.scan.to_json()}, split=split)
        got = [r.asDict() for r in df.collect()]
        if where:
            assert [r["s"] for r in got] == [s for (s, _), f in zip(windows, flags) if f]
        else:
            assert got == [{"s": s, "f": f, "g": f and bool(np.max(y) > 1.0)}
                           for (s, y), f in zip(windows, flags)]
