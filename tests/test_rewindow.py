"""Rewindow over a stream of segments: exact windows whatever the order, sizes and partitioning.

The oracle is numpy slicing of the original signal: window k of width n and slide m covers
samples [k*m, k*m + n), cut to each gap-free run, emitted for the windows starting inside
the run plus the one its off-grid start falls in (the WAV scan's rule, written here as an
independent loop). Samples are compared bit for bit (the signals hold NaNs with payloads,
-0.0, infinities and subnormals). Most cases run the two Arrow stages in-process, grouping
like Spark would (fast, many cases); the Spark tests run ``rewindow_frame`` on the shared
local[2] session over shuffled, repartitioned rows.
"""

from __future__ import annotations

import re
import zlib
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

from tests.data import COUNTING_WAV, raises
from wavesql.errors import ERROR_CODES
from wavesql.udfs import rewindow as rw
from wavesql.udfs.sigseg import SigSeg, SignalError

RATE = 8000.0


# ---------------------------------------------------------------------------------- helpers
def make_signal(length: int, channels: int = 1, seed: int = 0) -> np.ndarray:
    """float32 (length, channels) noise with bit patterns a float round trip would change."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((length, channels)).astype(np.float32)
    specials = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000, 0x00000001],
                        dtype=np.uint32).view(np.float32)  # NaN payloads, -0.0, inf, subnormal
    where = rng.integers(0, length, size=min(length, 50))
    x[where, rng.integers(0, channels, size=where.size)] = rng.choice(specials, where.size)
    return x


def cut_sizes(length: int, rng, sizes=(1, 1, 2, 5, 64, 333, 1000, 5000)) -> list[tuple]:
    """[a, b) bounds of random sizes (1 sample up to larger than the windows) tiling length."""
    bounds = [0]
    while bounds[-1] < length:
        bounds.append(min(length, bounds[-1] + int(rng.choice(sizes))))
    return list(zip(bounds[:-1], bounds[1:]))


def pieces_of(signal: np.ndarray, start: int, rng, **kw) -> list[tuple[int, np.ndarray]]:
    """The signal (first sample number ``start``) cut into segments of random sizes."""
    return [(start + a, signal[a:b]) for a, b in cut_sizes(len(signal), rng, **kw)]


def oracle(runs, n: int, m: int) -> list[tuple[int, np.ndarray]]:
    """Window pieces of gap-free runs ``[(start, samples (len, ch)), ...]``, by slicing."""
    out = []
    for start, signal in runs:
        end = start + len(signal)
        k = start // m  # the window the run's first sample falls in ...
        if k * m + n <= start:  # ... unless it ends before it (m > n)
            k += 1
        while k * m < end:
            a, b = max(k * m, start), min(k * m + n, end)
            out.append((a, signal[a - start:b - start]))
            k += 1
    return sorted(out, key=lambda r: (r[0], len(r[1])))


def segment_table(pieces, channels=("v",), rate=RATE, columns=None) -> pa.Table:
    """Rows of SigSeg columns (plus ``columns``: name -> one value per piece)."""
    arrays, names = [], []
    for name, values in (columns or {}).items():
        arrays.append(pa.array(values))
        names.append(name)
    rates = rate if isinstance(rate, list) else [rate] * len(pieces)
    for c, name in enumerate(channels):
        samples = pa.array([np.ascontiguousarray(p[:, c]) for _, p in pieces],
                           pa.list_(pa.float32()))
        arrays.append(pa.StructArray.from_arrays(
            [pa.array([s for s, _ in pieces], pa.int64()), pa.array(rates, pa.float64()),
             samples], fields=list(rw.SIGSEG_ARROW)))
        names.append(name)
    return pa.Table.from_arrays(arrays, names=names)


def shuffled(table: pa.Table, seed: int) -> pa.Table:
    return table.take(np.random.default_rng(seed).permutation(table.num_rows))


def run_local(table, channels, n, m=None, keys=(), carry=(), *, block_samples=1 << 20,
              seed=0) -> pa.Table:
    """Both Arrow stages in-process: random input batches, then group by (keys, block)."""
    grid = rw.Grid.of(n, m, block_samples)
    rng = np.random.default_rng(seed)
    table = shuffled(table, seed)
    groups = defaultdict(list)
    i = 0
    while i < table.num_rows:  # batches of random sizes, as partitions would cut them
        size = int(rng.integers(1, 40))
        for batch in table.slice(i, size).combine_chunks().to_batches():
            for tagged in rw.tag_batch(batch, list(channels), grid, list(keys), list(carry)):
                key_cols = [tagged.column(c).to_pylist() for c in (*keys, rw.BLOCK)]
                for r, group in enumerate(zip(*key_cols)):
                    if group[-1] is None:  # census: keys masked, a few shards (as in Spark)
                        group = (None,) * len(keys) + (None, zlib.crc32(repr(group).encode()) % 2)
                    groups[group].append(tagged.slice(r, 1))
        i += size
    out = [rw.rewindow_group(pa.Table.from_batches(rows), list(channels), grid, list(keys),
                             list(carry)) for rows in groups.values()]
    schema = rw.output_schema(table.schema, channels, keys, carry)
    return pa.concat_tables([t.cast(schema) for t in out]) if out else schema.empty_table()


def rows_of(table: pa.Table, channels=("v",), keys=()) -> list[tuple]:
    """Sorted ``(key values, start, samples (width, ch))`` of a rewindow result."""
    segs = [table.column(c).to_pylist() for c in channels]
    keyvals = [table.column(c).to_pylist() for c in keys]
    out = []
    for r in range(table.num_rows):
        starts = {s[r]["start"] for s in segs}
        assert len(starts) == 1, "channels of one output row must share their start"
        assert all(s[r]["rate"] == segs[0][r]["rate"] for s in segs)
        samples = np.stack([np.array(s[r]["samples"], dtype=np.float32) for s in segs], axis=1)
        out.append((tuple(k[r] for k in keyvals), starts.pop(), samples))
    return sorted(out, key=lambda x: (x[0], x[1], len(x[2])))


def assert_rows(got, expected):
    """Same pieces, in the same order, bit for bit."""
    assert [(k, s, len(x)) for k, s, x in got] == [(k, s, len(x)) for k, s, x in expected]
    for (_, s, x), (_, _, y) in zip(got, expected):
        assert x.shape == y.shape and np.array_equal(x.view(np.uint32), y.view(np.uint32)), s


def keyed(rows, key=()):
    return [(key, s, x.reshape(len(x), -1)) for s, x in rows]


# ---------------------------------------------------------------------------------- the rule
WINDOWS = [(256, 256), (1000, 1000), (256, 100), (100, 37), (100, 256), (3, 1000), (1, 1),
           (7, 3)]


@pytest.mark.parametrize("n,m", WINDOWS)
def test_grid_rule_is_the_wav_scans(n, m):
    from wavesql.sources.wav_plan import Run, k_range

    rng = np.random.default_rng(n * 1000 + m)
    for _ in range(300):
        a = int(rng.integers(-5000, 5000))
        b = a + int(rng.integers(1, 3000))
        assert (int(rw.first_window(a, n, m)), int(rw.end_window(b, m))) == \
            k_range(Run(a, b, ()), n, m)


@pytest.mark.parametrize("n,m", WINDOWS)
def test_reference_equals_numpy_slicing_with_gaps_and_off_grid_starts(n, m):
    rng = np.random.default_rng(n + m)
    x = make_signal(6000)
    # three runs: off-grid start, a gap of 1 sample, a gap inside one window, a long gap
    runs = [(13, x[:2000]), (2014, x[2000:2900]), (2900 + 2014 + n // 2 + 1, x[2900:])]
    segs = [SigSeg(s, RATE, v[:, 0]) for start, run in runs
            for s, v in pieces_of(run, start, rng)]
    rng.shuffle(segs)
    got = [((), s.start, s.samples.reshape(-1, 1)) for s in rw.rewindow(segs, n, m)]
    assert_rows(got, keyed(oracle(runs, n, m)))


def test_rule_examples():
    run = [(3, np.arange(3, 13, dtype=np.float32).reshape(-1, 1))]
    spans = lambda n, m: [(s, len(x)) for s, x in oracle(run, n, m)]  # noqa: E731
    assert spans(4, 4) == [(3, 1), (4, 4), (8, 4), (12, 1)]      # off-grid head, partial tail
    assert spans(4, 2) == [(3, 3), (4, 4), (6, 4), (8, 4), (10, 3), (12, 1)]  # no (2, ...)
    assert spans(2, 4) == [(4, 2), (8, 2), (12, 1)]              # skip: 3, 6, 7, 10, 11 left out
    # a window that spans a gap yields its pieces as separate rows; each starts in window
    # k's first slide step, so k = start // m
    gap = [(0, np.zeros((6, 1), np.float32)), (8, np.zeros((4, 1), np.float32))]
    assert [(s, len(x)) for s, x in oracle(gap, 5, 5)] == [(0, 5), (5, 1), (8, 2), (10, 2)]
    assert [(s, len(x)) for s, x in oracle(gap, 4, 2)] == \
        [(0, 4), (2, 4), (4, 2), (8, 4), (10, 2)]                 # no (6, ...): 8 >= 3*2


def test_stitch_returns_the_contiguous_runs_of_one_window():
    x = np.arange(100, dtype=np.float32)
    segs = [SigSeg(40, 1.0, x[40:45]), SigSeg(10, 1.0, x[10:40]), SigSeg(50, 1.0, x[50:60]),
            SigSeg(45, 1.0, x[45:46]), SigSeg(70, 1.0, x[70:70])]  # any order; one empty
    runs = rw.stitch(segs, 32, 64)  # window [32, 64)
    assert [(r.start, r.width) for r in runs] == [(32, 14), (50, 10)]
    assert all(np.array_equal(r.samples, x[r.start:r.end]) for r in runs)
    assert rw.stitch([]) == []
    err = raises("OVERLAPPING_SEGMENTS", rw.stitch, [SigSeg(0, 1.0, x[:10]),
                                                     SigSeg(8, 1.0, x[8:20])])
    assert "samples 8..9" in str(err) and "[OVERLAPPING_SEGMENTS]" in str(err)
    raises("RATE_MISMATCH", rw.stitch, [SigSeg(0, 1.0, x[:10]), SigSeg(10, 2.0, x[10:20])])


def test_grid_checks_its_arguments():
    for bad in ((0, None), (10, 0), (-1, 2), (2.5, None), (True, None)):
        raises("INVALID_ARGUMENT", rw.Grid.of, *bad)
    assert rw.Grid.of(4096).per_block == 256 and rw.Grid.of(100, 300, 1000).per_block == 3
    assert rw.Grid.of(1 << 21).per_block == 1


# ---------------------------------------------------------------------------------- Arrow path
@pytest.mark.parametrize("n,m", WINDOWS)
@pytest.mark.parametrize("block_samples", [1, 1000, 1 << 20])
def test_arrow_stages_equal_numpy_slicing(n, m, block_samples):
    rng = np.random.default_rng(7 * n + m)
    x = make_signal(7000, channels=2, seed=n)
    runs = [(-4321, x[:3000]), (-4321 + 3000 + 5, x[3000:3001]), (1, x[3001:])]
    pieces = [p for start, run in runs for p in pieces_of(run, start, rng)]
    got = run_local(segment_table(pieces, ("a", "b")), ("a", "b"), n, m,
                    block_samples=block_samples, seed=n + m)
    assert_rows(rows_of(got, ("a", "b")), keyed(oracle(runs, n, m)))


def test_arrow_stages_fuzz_small_configurations():
    """Many tiny random cases: windows, blocks and segments of a few samples, where the
    block and window edges are dense enough for every corner to occur."""
    rng = np.random.default_rng(2024)
    for case in range(300):
        n, m = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        block_samples = int(rng.integers(1, 30))
        runs, pieces, keys = [], [], []
        for key in range(int(rng.integers(1, 3))):
            pos = int(rng.integers(-20, 20))
            for _ in range(int(rng.integers(1, 4))):
                x = make_signal(int(rng.integers(1, 40)), seed=case)
                key_pieces = pieces_of(x, pos, rng, sizes=(1, 2, 3, 5, 11))
                key_pieces.insert(int(rng.integers(0, len(key_pieces) + 1)), (pos, x[:0]))
                pieces += key_pieces
                keys += [key] * len(key_pieces)
                runs.append((key, pos, x))
                pos += len(x) + int(rng.integers(1, 12))  # a gap before the next run
        table = segment_table(pieces, columns={"k": keys})
        got = run_local(table, ["v"], n, m, keys=["k"], block_samples=block_samples, seed=case)
        expected = sorted((r for key in {k for k, _, _ in runs}
                           for r in keyed(oracle([(p, x) for k, p, x in runs if k == key], n, m),
                                          (key,))), key=lambda r: (r[0], r[1], len(r[2])))
        assert_rows(rows_of(got, keys=["k"]), expected)


@pytest.mark.parametrize("n,m", [(64, 64), (64, 20), (20, 64)])
def test_big_batches_are_tagged_in_chunks(monkeypatch, n, m):
    monkeypatch.setattr(rw, "_CHUNK_SAMPLES", 100)
    rng = np.random.default_rng(5)
    x = make_signal(3000, channels=2)
    pieces = pieces_of(x, 9, rng)
    got = run_local(segment_table(pieces, ("a", "b")), ("a", "b"), n, m, block_samples=500)
    assert_rows(rows_of(got, ("a", "b")), keyed(oracle([(9, x)], n, m)))


def test_arrow_stages_keys_and_carry():
    rng = np.random.default_rng(3)
    n, m = 300, 120
    expected, pieces, cols = [], [], {"sensor": [], "site": [], "label": []}
    for sensor, start in ((1, 0), (2, 7777), (3, -50)):
        x = make_signal(4000, seed=sensor)
        runs = [(start, x[:2500]), (start + 2600, x[2500:])]  # each sensor has a gap
        for s, p in (p for st, run in runs for p in pieces_of(run, st, rng)):
            pieces.append((s, p))
            cols["sensor"].append(sensor)
            cols["site"].append(f"site-{sensor}")
            cols["label"].append(s)  # varies per segment: names the segment
        expected += keyed(oracle(runs, n, m), (sensor,))
    table = segment_table(pieces, columns=cols)
    got = run_local(table, ["v"], n, m, keys=["sensor"], carry=["site", "label"],
                    block_samples=700)
    assert got.schema.names == ["sensor", "v", "site", "label"]
    assert_rows(rows_of(got, keys=["sensor"]), sorted(expected, key=lambda r: (r[0], r[1])))
    # carried: the value of the input row holding the output row's first sample
    seg_starts = {sensor: np.array(sorted(s for (s, _), k in zip(pieces, cols["sensor"])
                                          if k == sensor)) for sensor in (1, 2, 3)}
    for sensor, site, label, seg in zip(*(got.column(c).to_pylist()
                                          for c in ("sensor", "site", "label", "v"))):
        assert site == f"site-{sensor}"
        starts = seg_starts[sensor]
        assert label == starts[np.searchsorted(starts, seg["start"], side="right") - 1]


def test_arrow_stages_ship_only_what_blocks_need():
    # one long segment, small windows: each block gets its own samples, not the segment
    grid = rw.Grid.of(100, 100, 1000)
    x = make_signal(10_000)
    batch = segment_table([(0, x)]).to_batches()[0]
    pieces, census = rw.tag_batch(batch, ["v"], grid)
    assert pieces.num_rows == 10 and census.num_rows == 1
    assert sum(len(v) for v in pieces.column("v").to_pylist()) == 10_000
    # skipping (m > n): only the samples inside windows travel, bounds still whole
    grid = rw.Grid.of(10, 100, 1000)
    pieces, _ = rw.tag_batch(batch, ["v"], grid)
    assert sum(len(v) for v in pieces.column("v").to_pylist()) == 1000
    assert pieces.column(rw.LO).to_pylist()[0] == 0 and pieces.column(rw.HI).to_pylist()[-1] \
        == 10_000


def test_a_segment_in_two_overlapping_blocks_next_to_an_empty_one():
    # m < n: blocks overlap by n - m; [6, 8) lies uncut in blocks 0 and 1 (and no other)
    x = make_signal(10)
    batch = segment_table([(0, x[:0]), (6, x[6:8])], rate=[0.0, RATE]).to_batches()[0]
    pieces, _ = rw.tag_batch(batch, ["v"], rw.Grid.of(10, 4, 10))
    assert pieces.column(rw.BLOCK).to_pylist() == [0, 1]
    for v in pieces.column("v").to_pylist():
        assert np.array_equal(np.array(v, np.float32).view(np.uint32), x[6:8, 0].view(np.uint32))


def test_empty_segments_are_ignored_and_nothing_in_gives_nothing_out():
    x = make_signal(50)
    table = segment_table([(0, x[:0]), (10, x[:20]), (30, x[:0])])
    got = run_local(table, ["v"], 8)
    assert [(s, len(v)) for _, s, v in rows_of(got)] == [(10, 6), (16, 8), (24, 6)]
    empty = run_local(segment_table([]), ["v"], 8)
    assert empty.num_rows == 0 and empty.schema.names == ["v"]


def test_overlapping_segments_are_errors_wherever_they_are():
    x = make_signal(5000)
    dup = [(0, x[:3000]), (2990, x[2990:]), ]
    raises("OVERLAPPING_SEGMENTS", run_local, segment_table(dup), ["v"], 256)
    same = [(0, x[:100]), (100, x[100:200]), (100, x[100:200])]  # a segment sent twice
    err = raises("OVERLAPPING_SEGMENTS", run_local, segment_table(same), ["v"], 64)
    assert "samples 100..199" in err.message or "samples 100..127" in err.message
    # with slide > width the overlap lies between windows: still found
    between = [(0, x[:50]), (45, x[45:55])]  # windows [0, 10), [100, 110): 45..49 is skipped
    raises("OVERLAPPING_SEGMENTS", run_local, segment_table(between), ["v"], 10, 100)
    # keyed: the message says which signal
    t = segment_table(same, columns={"sensor": ["s1", "s1", "s1"]})
    err = raises("OVERLAPPING_SEGMENTS", run_local, t, ["v"], 64, keys=["sensor"])
    assert "sensor='s1'" in err.message
    # the same samples under different keys are fine
    t = segment_table(same, columns={"sensor": ["s1", "s1", "s2"]})
    got = rows_of(run_local(t, ["v"], 64, keys=["sensor"]), keys=["sensor"])
    assert [(k, s, len(v)) for k, s, v in got] == [
        (("s1",), 0, 64), (("s1",), 64, 64), (("s1",), 128, 64), (("s1",), 192, 8),
        (("s2",), 100, 28), (("s2",), 128, 64), (("s2",), 192, 8)]


def test_rates_must_agree_within_a_signal_and_across_channels():
    x = make_signal(100_000)
    far = [(0, x[:10]), (90_000, x[90_000:])]  # never in one window or block
    t = segment_table(far, rate=[8000.0, 16000.0])
    err = raises("RATE_MISMATCH", run_local, t, ["v"], 16, block_samples=64)
    assert "8000 Hz and 16000 Hz" in err.message
    t = segment_table(far, rate=[8000.0, 16000.0], columns={"k": [1, 2]})
    assert run_local(t, ["v"], 16, keys=["k"], block_samples=64).num_rows > 1  # two signals
    # many keys share census groups; the one key with two rates is found and named
    many = [(s, x[:10]) for s in (0, 90_000)] * 20
    keys = [i // 2 for i in range(40)]
    rates = [8000.0] * 40
    rates[31] = 8000.25
    err = raises("RATE_MISMATCH", run_local, segment_table(many, rate=rates, columns={"k": keys}),
                 ["v"], 16, keys=["k"], block_samples=64)
    assert "(key k=15)" in err.message and "8000.25 Hz" in err.message

    two = segment_table([(0, make_signal(10, 2))], ("a", "b"))
    bad_rate = two.set_column(1, "b", segment_table([(0, x[:10])], rate=1.0).column("v"))
    raises("RATE_MISMATCH", run_local, bad_rate, ["a", "b"], 4)
    bad_start = two.set_column(1, "b", segment_table([(1, x[:10])]).column("v"))
    raises("MISALIGNED_CHANNELS", run_local, bad_start, ["a", "b"], 4)
    bad_width = two.set_column(1, "b", segment_table([(0, x[:9])]).column("v"))
    raises("MISALIGNED_CHANNELS", run_local, bad_width, ["a", "b"], 4)
    raises("INVALID_RATE", run_local, segment_table([(0, x[:10])], rate=0.0), ["v"], 4)


def test_overlaps_fuzz_every_duplicate_sample_is_found():
    rng = np.random.default_rng(99)
    for case in range(200):
        n, m = int(rng.integers(1, 9)), int(rng.integers(1, 12))
        x = make_signal(int(rng.integers(2, 60)), seed=case)
        start = int(rng.integers(-30, 30))
        pieces = pieces_of(x, start, rng, sizes=(1, 2, 3, 7))
        a = int(rng.integers(0, len(x)))
        b = int(rng.integers(a + 1, min(len(x), a + 5) + 1))
        pieces.append((start + a, x[a:b]))  # samples start+a .. start+b-1 twice
        err = raises("OVERLAPPING_SEGMENTS", run_local, segment_table(pieces), ["v"], n, m,
                     block_samples=int(rng.integers(1, 30)), seed=case)
        # the block that finds it names the duplicated samples it sees
        found = [int(v) for v in re.findall(r"-?\d+", err.message.split(" in ")[0])]
        assert all(start + a <= v < start + b for v in found), (err.message, start + a, start + b)


def test_null_segments_are_type_errors():
    t = segment_table([(0, make_signal(10))])
    nulls = pa.table({"v": pa.array([None], rw.SIGSEG_ARROW)})
    raises("TYPE_ERROR", run_local, pa.concat_tables([t, nulls]), ["v"], 4)


def test_new_error_codes_are_registered():
    for code in ("OVERLAPPING_SEGMENTS", "MISALIGNED_CHANNELS", "RATE_MISMATCH"):
        assert code in ERROR_CODES


# ---------------------------------------------------------------------------------- Spark
def spark_frame(spark, table: pa.Table, partitions: int = 4, seed: int = 0):
    """The rows shuffled, then spread over ``partitions`` partitions."""
    return spark.createDataFrame(shuffled(table, seed)).repartition(partitions)


def spark_rows(df, channels=("v",), keys=()):
    return rows_of(df.toArrow(), channels, keys)


@pytest.mark.parametrize("n,m,start,block_samples", [
    (1024, 1024, 0, 1 << 20),        # tumbling, on the grid
    (256, 100, 12_345, 5_000),       # sliding, off-grid start, several blocks
    (100, 256, -777, 1 << 20),       # skipping, negative sample numbers
])
def test_spark_random_segments_equal_numpy_slicing(spark, n, m, start, block_samples):
    from wavesql.planner.rewindow import rewindow_frame

    rng = np.random.default_rng(n)
    x = make_signal(60_000, channels=2, seed=n)
    runs = [(start, x[:40_000]), (start + 40_000 + 333, x[40_000:])]  # and a gap
    pieces = [p for st, run in runs for p in pieces_of(run, st, rng)]
    df = spark_frame(spark, segment_table(pieces, ("left", "right")), seed=n)
    out = rewindow_frame(df, ["left", "right"], n, m, block_samples=block_samples)
    assert out.columns == ["left", "right"]
    assert_rows(spark_rows(out, ("left", "right")), keyed(oracle(runs, n, m)))


def test_spark_keys_carry_and_a_gap(spark):
    from wavesql.planner.rewindow import rewindow_frame

    rng = np.random.default_rng(11)
    n, m = 500, 200
    expected, pieces, cols = [], [], {"sensor": [], "site": []}
    for sensor, start in (("a", 0), ("b", 3), ("c", 1_000_000)):
        x = make_signal(20_000, seed=len(expected))
        runs = [(start, x[:9_000]), (start + 9_100, x[9_000:])]
        for p in (p for st, run in runs for p in pieces_of(run, st, rng)):
            pieces.append(p)
            cols["sensor"].append(sensor)
            cols["site"].append(f"site-{sensor}")
        expected += keyed(oracle(runs, n, m), (sensor,))
    df = spark_frame(spark, segment_table(pieces, columns=cols), partitions=5)
    out = rewindow_frame(df, ["v"], n, m, keys=["SENSOR"], carry=["site"])
    assert out.columns == ["sensor", "v", "site"]
    got = out.toArrow()
    assert_rows(rows_of(got, keys=["sensor"]), sorted(expected, key=lambda r: (r[0], r[1])))
    assert all(site == f"site-{s}" for s, site in zip(got.column("sensor").to_pylist(),
                                                       got.column("site").to_pylist()))


def test_spark_empty_input(spark):
    from wavesql.planner.rewindow import rewindow_frame

    df = spark.createDataFrame([], "k int, v struct<start:bigint,rate:double,samples:array<float>>")
    out = rewindow_frame(df, ["v"], 64, keys=["k"])
    assert out.collect() == [] and out.columns == ["k", "v"]


@pytest.mark.parametrize("case,code", [("overlap", "OVERLAPPING_SEGMENTS"),
                                       ("rate", "RATE_MISMATCH")])
def test_spark_runtime_errors_carry_their_code(spark, case, code):
    from wavesql.planner.rewindow import rewindow_frame
    from wavesql.spark_errors import translate_runtime_error

    x = make_signal(50_000)
    if case == "overlap":
        table = segment_table([(0, x[:30_000]), (29_000, x[29_000:])])
    else:  # far apart, among other keys: only the census (one rate per key) sees it
        pieces = [(0, x[:100]), (40_000, x[40_000:])] * 10
        table = segment_table(pieces, rate=[8000.0] * 17 + [8000.5] + [8000.0] * 2,
                              columns={"k": [f"s{i // 2}" for i in range(20)]})
    out = rewindow_frame(spark_frame(spark, table), ["v"], 256, block_samples=1024,
                         keys=["k"] if case == "rate" else ())
    with pytest.raises(Exception) as info:
        out.collect()
    err = translate_runtime_error(info.value)
    assert err.code == code, str(info.value)[-2000:]
    if case == "rate":
        assert "k='s8'" in err.message


def test_spark_errors_before_any_job(spark):
    from wavesql.planner.rewindow import rewindow_frame

    df = spark.createDataFrame(
        [(1, 2.0, None, None)],
        "k int, d double, v struct<start:bigint,rate:double,samples:array<float>>, "
        "w struct<start:bigint,rate:double,samples:array<double>>")
    cases = [
        ("INVALID_ARGUMENT", (["v"], 0), {}),
        ("INVALID_ARGUMENT", (["v"], 10, -1), {}),
        ("INVALID_ARGUMENT", ([], 10), {}),
        ("INVALID_ARGUMENT", (["v"], 10), {"keys": ["k"], "carry": ["k"]}),
        ("UNKNOWN_COLUMN", (["x"], 10), {}),
        ("UNKNOWN_COLUMN", (["v"], 10), {"keys": ["kk"]}),
        ("TYPE_ERROR", (["d"], 10), {}),
        ("TYPE_ERROR", (["w"], 10), {}),  # float64 samples: would not be float32-exact
    ]
    for code, args, kwargs in cases:
        with pytest.raises(SignalError) as info:
            rewindow_frame(df, *args, **kwargs)
        assert info.value.code == code, (args, kwargs, str(info.value))


def test_spark_counting_recording_matches_the_wav_scan(spark):
    """Segments of the real recording, shuffled: rewindow gives the WAV scan's windows."""
    from pyspark.sql import functions as F

    from wavesql.planner.rewindow import rewindow_frame
    from wavesql.sources import wav_source

    n, m = 4096, 1024
    segs = wav_source.load(spark, path=COUNTING_WAV, channels=["voice"], segment=777)
    segs = segs.orderBy(F.rand(5))
    out = rewindow_frame(segs.repartition(3), ["voice"], n, m, block_samples=100_000)
    scan = wav_source.load(spark, path=COUNTING_WAV, channels=["voice"], window=n, slide=m)
    got, want = spark_rows(out, ["voice"]), spark_rows(scan, ["voice"])
    assert len(want) > 300
    assert_rows(got, want)


def test_rewindow_a_view_of_segments_through_the_language(ws, tmp_path):
    """`FROM view [SAMPLES n SLIDE m]` re-cuts a view's segments exactly (and signal
    functions then run over the new windows)."""
    from wavesql.udfs.wav import read_frames

    voice = read_frames(COUNTING_WAV)[:, 0].astype(np.float32)
    ws.sql(f"CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{COUNTING_WAV}' "
           "FORMAT wav SEGMENT 777")
    ws.sql("CREATE VIEW pieces AS SELECT start_time(voice) AS t, voice FROM counting")
    rows = ws.sql("SELECT voice FROM pieces [SAMPLES 8192 SLIDE 7692]").collect()
    got = sorted((r.voice.start, np.asarray(r.voice.samples, dtype=np.float32)) for r in rows)
    starts = list(range(0, len(voice), 7692))
    assert [s for s, _ in got] == starts
    for s, samples in got:
        np.testing.assert_array_equal(samples, voice[s:s + 8192])
    stats = ws.sql("SELECT seg_max(voice) AS top FROM pieces [SAMPLES 8192 SLIDE 7692]").collect()
    want = sorted(float(voice[s:s + 8192].max()) for s in starts)
    np.testing.assert_allclose(sorted(r.top for r in stats), want)
