"""The WAV data source: exact windows across files, partitions and micro-batches.

The oracle is numpy over the concatenated samples: window k of width n and slide m covers
samples [k*m, k*m + n), cut to each gap-free run. Most checks run the source's own planning
and reading in-process (fast, many cases); the Spark tests run the same through
``spark.read`` / ``spark.readStream`` on the shared local[2] session.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV
import json
import os

import numpy as np
import pyarrow as pa
import pytest

from wavesql.sources import wav_plan, wav_scan
from wavesql.sources import wav_source as ws
from wavesql.udfs.program import Output, Program
from wavesql.udfs.wav import WavError, write_wav

SIGSEG = "struct<start:bigint,rate:double,samples:array<float>>"
COUNTING = COUNTING_WAV


# ---------------------------------------------------------------------------------- helpers
def write_files(folder, lengths, *, rate=8000, channels=1, fmt="float32", names=None, seed=0):
    """Random files ``r_<i>.wav``; returns the concatenated float32 signal (frames, ch)."""
    rng = np.random.default_rng(seed)
    parts = []
    for i, length in enumerate(lengths):
        if fmt == "int16":
            x = rng.integers(-32768, 32768, size=(length, channels), dtype=np.int16)
            parts.append(x.astype(np.float32) / 32768)
        else:
            x = (rng.standard_normal((length, channels)) * 0.2).astype(np.float32)
            parts.append(x)
        name = names[i] if names else f"r_{i}.wav"
        write_wav(os.path.join(folder, name), x, rate, fmt)
    return np.concatenate(parts) if parts else np.zeros((0, channels), np.float32)


def oracle(signal, n, m, start=0):
    """(start, samples (width, ch)) of every window piece of one run starting at ``start``."""
    end = start + len(signal)
    # windows starting in the run, plus the one starting just before an off-grid run start
    out, k = [], start // m
    if k * m + n <= start:
        k += 1
    while k * m < end:
        s, e = max(k * m, start), min(k * m + n, end)
        out.append((s, signal[s - start:e - start]))
        k += 1
    return sorted(out, key=lambda r: (r[0], len(r[1])))


def segments(table, names):
    """Rows of SigSeg columns as sorted (start, samples (width, ch)) pairs."""
    fields = [table.column(c).combine_chunks().flatten() for c in names]  # start, rate, samples
    starts = fields[0][0].to_numpy()
    for f in fields[1:]:
        assert np.array_equal(f[0].to_numpy(), starts)
    offsets = fields[0][2].offsets.to_numpy()
    offsets = offsets - offsets[0]  # (a sliced list array keeps its parent's offsets)
    values = np.stack([f[2].flatten().to_numpy(zero_copy_only=False) for f in fields], 1)
    rows = [(int(s), values[offsets[i]:offsets[i + 1]]) for i, s in enumerate(starts)]
    return sorted(rows, key=lambda r: (r[0], len(r[1])))


def assert_same(got, expected):
    assert [s for s, _ in got] == [s for s, _ in expected]
    for (s, a), (_, b) in zip(got, expected):
        assert a.shape == b.shape and np.array_equal(a, b), f"window at {s} differs"


def read_in_process(options):
    """Plan + read every partition here (what Spark's workers do) -> pyarrow Table."""
    p = ws.plan(options)
    parts = p.partitions()
    batches = [b for part in parts for b in wav_scan.read_partition(
        part, p.options, p.program_json, p.channels, p.stateful)]
    schema = wav_plan.load_program(p.program_json).arrow_schema()
    return pa.Table.from_batches(batches, schema=schema), parts


def spark_schema(program: Program):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(program.arrow_schema())


# ---------------------------------------------------------------------------------- windows
@pytest.mark.parametrize("n,m", [(1000, 300), (256, 256), (100, 250), (7, 1), (5000, 5000)])
def test_windows_equal_numpy_cut_across_files_and_partitions(tmp_path, n, m):
    signal = write_files(tmp_path, [5000, 700, 12345, 1, 999, 3000], channels=2)
    table, parts = read_in_process({"path": str(tmp_path), "window": str(n), "slide": str(m),
                                    "partition_samples": "2000", "block_samples": "1500"})
    assert len(parts) > 5 or n == 5000
    got = segments(table, ["ch1", "ch2"])
    assert_same(got, oracle(signal, n, m))
    if m == n:  # tumbling: every sample exactly once
        assert sum(len(a) for _, a in got) == len(signal)


def test_sliding_windows_are_views_and_blocks_stitch_files(tmp_path):
    write_files(tmp_path, [3000, 3000])
    p = ws.plan({"path": str(tmp_path), "window": "1000", "slide": "300"})
    blocks = list(wav_scan.iter_window_blocks(p.partitions()[0].tasks[0], 1000, 300, [0],
                                              block_samples=2400))
    full = [b for _, (b, *_) in blocks if isinstance(b, np.ndarray)]
    assert full and all(b.base is not None and b.shape[1] == 1000 for b in full)
    # the window [2700, 3700) spans both files and comes out whole
    starts = np.concatenate([s for s, _ in blocks]).tolist()
    assert 2700 in starts and starts == sorted(starts)
    assert starts[:2] == [0, 300]  # the run starts on the grid: no slivers before window 0


def test_timestamped_gap_gives_partial_windows_on_both_sides(tmp_path):
    # 1000 Hz; file b starts 2.5 s after a (a holds 1.3 s): a gap of samples [1300, 2500)
    a = write_files(tmp_path, [1300], rate=1000, names=["mic_1970-01-01T00-00-00Z.wav"])
    b = write_files(tmp_path, [900], rate=1000, names=["mic_1970-01-01T00-00-02.5Z.wav"],
                    seed=1)
    table, _ = read_in_process({"path": str(tmp_path), "timeline": "timestamped",
                                "window": "1000", "partition_samples": "500"})
    got = segments(table, ["ch1"])
    assert [(s, len(x)) for s, x in got] == [(0, 1000), (1000, 300), (2500, 500),
                                             (3000, 400)]
    assert_same(got, oracle(a, 1000, 1000) + oracle(b, 1000, 1000, start=2500))


def test_lookback_makes_partitioned_fir_equal_sequential(tmp_path):
    write_files(tmp_path, [1500, 1000, 2000])
    taps = [0.1] * 50
    prog = Program(("ch1",), (Output("y", {"call": "fir", "args": [
        {"col": "ch1"}, {"lit": taps}]}, "sigseg"),))
    assert prog.stateful and prog.lookback(8000.0) == 49
    base = {"path": str(tmp_path), "window": "128", "program": prog.to_json()}
    seq, parts = read_in_process({**base, "sequential": "true"})
    assert len(parts) == 1
    par, parts = read_in_process({**base, "partition_samples": "500"})  # lookback: program's
    assert len(parts) > 8 and all(p.warmup for p in parts[1:])
    assert_same(segments(par, ["y"]), segments(seq, ["y"]))
    cold, _ = read_in_process({**base, "partition_samples": "500", "lookback": "0"})
    assert not np.array_equal(cold.column("y").combine_chunks().field("samples").flatten(),
                              seq.column("y").combine_chunks().field("samples").flatten())


# ---------------------------------------------------------------------------------- errors
def _code(excinfo) -> str:
    return excinfo.value.code


def test_driver_side_errors_carry_code_and_file(tmp_path):
    write_files(tmp_path, [100, 100])
    with pytest.raises(WavError) as e:
        ws.plan({"path": str(tmp_path), "rate": "44100"})
    assert _code(e) == "RATE_MISMATCH" and e.value.path.endswith("r_0.wav")
    write_wav(tmp_path / "r_2.wav", np.zeros((10, 2)), 8000)
    with pytest.raises(WavError) as e:
        ws.plan({"path": str(tmp_path)})
    assert _code(e) == "CHANNEL_MISMATCH" and e.value.path.endswith("r_2.wav")
    os.remove(tmp_path / "r_2.wav")
    (tmp_path / "r_3.wav").write_bytes(b"RIFF\x00\x00\x00\x00JUNKnothing")
    with pytest.raises(WavError) as e:
        ws.plan({"path": str(tmp_path)})
    assert _code(e) == "CORRUPT_FILE" and "r_3.wav" in str(e.value)
    empty = tmp_path / "empty"
    empty.mkdir()
    for path in (empty, tmp_path / "missing", tmp_path / "nope*.wav"):
        with pytest.raises(WavError) as e:
            ws.plan({"path": str(path)})
        assert _code(e) == "MISSING_PATH" and str(path) in str(e.value)
    for bad in ({"window": "0"}, {"channels": "ch1"}, {"timeline": "sorted"}, {"bogus": "1"},
                {"program": Program.identity(["x"]).to_json()}):
        with pytest.raises(WavError) as e:
            ws.plan({"path": str(empty), **bad}, streaming=True)
        assert _code(e) == "INVALID_OPTION"


def test_truncated_file_lenient_by_default_strict_on_request(tmp_path):
    write_wav(tmp_path / "a.wav", np.arange(100, dtype=np.int16), 8000)
    with open(tmp_path / "a.wav", "r+b") as f:
        f.truncate(44 + 2 * 60 + 1)  # 60 whole frames and half of one
    p = ws.plan({"path": str(tmp_path)})
    assert p.truncated == [str(tmp_path / "a.wav")] and p.runs[0].end == 60
    with pytest.raises(WavError) as e:
        ws.plan({"path": str(tmp_path), "strict": "true"})
    assert _code(e) == "TRUNCATED_FILE"


# ---------------------------------------------------------------------------------- streaming
def _micro_batch(reader, start):
    end = reader.latestOffset(start, None)
    parts = reader.partitions(start, end) if end != start else []
    return end, [b for p in parts for b in reader.read(p)]


def test_stream_reader_micro_batches_equal_batch_read(tmp_path):
    """Many micro-batches driven in-process: each window once, equal to the batch read."""
    rng = np.random.default_rng(7)
    prog = Program.identity(["ch1"])
    opts = {"path": str(tmp_path), "window": "1000", "slide": "300", "rate": "8000",
            "channels": '["ch1"]', "partition_samples": "1500"}
    reader = ws.WavStreamReader(opts, spark_schema(prog))
    offset, batches, lengths = reader.initialOffset(), [], []
    for i in range(9):
        lengths.append(int(rng.integers(1, 2500)))
        write_wav(tmp_path / f"r_{i}.wav", rng.standard_normal(lengths[-1]) * 0.1, 8000,
                  "float32")
        offset, got = _micro_batch(reader, offset)
        batches += got
        assert offset["end"] % 300 == 0 and offset["files"][-1].endswith(f"r_{i}.wav")
    total = sum(lengths)
    expected = segments(read_in_process(opts)[0], ["ch1"])
    waiting = [w for w in expected if w[0] + 1000 > total]  # the incomplete tail windows
    streamed = segments(pa.Table.from_batches(batches), ["ch1"])
    assert waiting and len(streamed) == len(expected) - len(waiting)
    assert_same(streamed, expected[:len(streamed)])
    assert _micro_batch(reader, offset)[0] == offset  # nothing new: no batch
    (tmp_path / "done.eof").write_text("")
    offset, got = _micro_batch(reader, offset)
    assert offset["final"]
    assert_same(segments(pa.Table.from_batches(batches + got), ["ch1"]), expected)

    write_wav(tmp_path / "r_0a.wav", np.zeros(10), 8000, "float32")  # after the marker
    with pytest.raises(WavError) as e:
        reader.latestOffset(offset, None)
    assert _code(e) == "OUT_OF_ORDER_FILE" and "r_0a.wav" in str(e.value)


def test_stream_timestamped_gaps_random_micro_batches(tmp_path):
    """Random windows, gaps and file sizes, one micro-batch per file: union == batch."""
    for trial in range(12):
        rng = np.random.default_rng(trial)
        folder = tmp_path / str(trial)
        folder.mkdir()
        n, m = int(rng.integers(1, 400)), int(rng.integers(1, 500))
        opts = {"path": str(folder), "timeline": "timestamped", "window": str(n),
                "slide": str(m), "rate": "1000", "channels": '["ch1"]',
                "partition_samples": str(int(rng.integers(50, 3000)))}
        reader = ws.WavStreamReader(opts, spark_schema(Program.identity(["ch1"])))
        offset, batches, t_ms = reader.initialOffset(), [], 1_700_000_000_000
        for _ in range(int(rng.integers(1, 7))):
            t_ms += int(rng.choice([0, 0, int(rng.integers(1, 700))]))  # gap or not
            length = int(rng.integers(1, 900))
            write_wav(folder / f"mic_{t_ms}.wav", rng.standard_normal(length) * 0.1, 1000,
                      "float32")
            t_ms += length  # 1 sample per ms
            offset, got = _micro_batch(reader, offset)
            batches += got
        (folder / "z.eof").write_text("")
        batches += _micro_batch(reader, offset)[1]
        schema = Program.identity(["ch1"]).arrow_schema()
        assert_same(segments(pa.Table.from_batches(batches, schema=schema), ["ch1"]),
                    segments(read_in_process(opts)[0], ["ch1"]))


def test_stream_out_of_order_file_and_stateful_programs(tmp_path):
    opts = {"path": str(tmp_path), "window": "100", "rate": "8000", "channels": '["ch1"]'}
    reader = ws.WavStreamReader(opts, spark_schema(Program.identity(["ch1"])))
    write_files(tmp_path, [500, 500], names=["r_5.wav", "r_7.wav"])
    offset, _ = _micro_batch(reader, reader.initialOffset())
    write_files(tmp_path, [500], names=["r_6.wav"])  # sorts before r_7, already read
    with pytest.raises(WavError) as e:
        reader.latestOffset(offset, None)
    assert _code(e) == "OUT_OF_ORDER_FILE" and e.value.path.endswith("r_6.wav")
    assert "r_7.wav" in e.value.message

    ranges = Program(("ch1",), (Output("r", {"call": "threshold_ranges", "args": [
        {"col": "ch1"}, {"lit": 0.5}]}, "ranges"),))
    assert ranges.stateful and "threshold_ranges" in ranges.lookback(8000.0)
    with pytest.raises(WavError) as e:
        ws.plan({**opts, "program": ranges.to_json()}, streaming=True)
    assert _code(e) == "NOT_IMPLEMENTED"
    assert ws.plan({**opts, "program": ranges.to_json()}).sequential  # batch: one pass


def test_stream_with_finite_lookback_program_equals_batch(tmp_path):
    prog = Program(("ch1",), (Output("y", {"call": "fir", "args": [
        {"col": "ch1"}, {"lit": [0.5, 0.3, 0.2]}]}, "sigseg"),))
    opts = {"path": str(tmp_path), "window": "64", "rate": "8000", "channels": '["ch1"]',
            "program": prog.to_json(), "partition_samples": "300"}
    reader = ws.WavStreamReader(opts, spark_schema(prog))
    offset, batches = reader.initialOffset(), []
    for i, length in enumerate([700, 90, 1000, 333]):
        write_files(tmp_path, [length], names=[f"r_{i}.wav"], seed=i)
        offset, got = _micro_batch(reader, offset)
        batches += got
    (tmp_path / "x.eof").write_text("")
    batches += _micro_batch(reader, offset)[1]
    assert_same(segments(pa.Table.from_batches(batches), ["y"]),
                segments(read_in_process({**opts, "sequential": "true"})[0], ["y"]))


# ---------------------------------------------------------------------------------- Spark
@pytest.mark.spark
def test_spark_batch_multichannel_sliding_many_partitions(spark, tmp_path):
    signal = write_files(tmp_path, [20000, 333, 17000, 9000], rate=48000, channels=4,
                         fmt="int16")
    names = ["ch1", "ch2", "ch3", "ch4"]
    ws.register(spark)
    ws.register(spark)  # idempotent
    opts = {"path": str(tmp_path), "rate": "48000", "channels": json.dumps(names),
            "window": "1000", "slide": "300", "partition_samples": "12000"}
    assert len(ws.plan(opts).partitions()) >= 4
    df = (spark.read.format(ws.SHORT_NAME).schema(", ".join(f"{c} {SIGSEG}" for c in names))
          .options(**opts).load())
    assert_same(segments(df.toArrow(), names), oracle(signal, 1000, 300))

    tumbling = ws.load(spark, path=str(tmp_path), window=256, channels=names, rate=48000,
                       partition_samples=10000)
    row = tumbling.selectExpr("sum(size(ch3.samples)) AS n", "count(*) AS k",
                              "count_if(size(ch1.samples) = 256) AS full").first()
    assert row.n == len(signal) and row.k == -(-len(signal) // 256)
    assert row.full == len(signal) // 256


@pytest.mark.spark
def test_spark_counting_recording_in_4096_windows(spark):
    from scipy.io import wavfile

    rate, data = wavfile.read(COUNTING)
    expected = (data.astype(np.float32) / 32768).reshape(len(data), -1)
    df = ws.load(spark, path=COUNTING, window=4096, rate=rate, partition_samples=100_000)
    got = segments(df.toArrow(), ["ch1"])
    assert_same(got, oracle(expected[:, :1], 4096, 4096))
    full = len(expected) // 4096
    assert np.array_equal(np.stack([x[:, 0] for _, x in got[:full]]),
                          expected[:full * 4096, 0].reshape(full, 4096))


@pytest.mark.spark
def test_spark_program_statfilter_runs_in_the_scan(spark, tmp_path):
    rng = np.random.default_rng(3)
    signal = (rng.standard_normal(35000) * 0.1).astype(np.float32)
    signal[(np.arange(len(signal)) // 4096) % 3 != 0] *= 0.1  # two quiet windows in three
    write_wav(tmp_path / "a_1.wav", signal[:30000], 8000, "float32")
    write_wav(tmp_path / "a_2.wav", signal[30000:], 8000, "float32")
    std = {"call": "seg_std", "args": [{"col": "ch1"}]}
    prog = Program(("ch1",), (Output("t", {"call": "start_time", "args": [{"col": "ch1"}]},
                                     "bigint"), Output("sd", std, "double")),
                   ({"op": ">", "args": [std, {"lit": 0.05}]},))
    df = ws.load(spark, path=str(tmp_path), window=4096, program=prog,
                 partition_samples=9000)
    rows = sorted((r.t, r.sd) for r in df.collect())
    expected = [(s * 125, float(np.std(x, ddof=1)))
                for s, x in oracle(signal, 4096, 4096) if np.std(x, ddof=1) > 0.05]
    assert [t for t, _ in rows] == [t for t, _ in expected] and len(rows) >= 3
    assert np.allclose([v for _, v in rows], [v for _, v in expected], rtol=1e-6)


@pytest.mark.spark
def test_spark_errors_name_file_and_code(spark, tmp_path):
    write_files(tmp_path, [100, 100])
    ws.register(spark)
    schema = f"ch1 {SIGSEG}"
    with pytest.raises(Exception) as e:
        spark.read.format(ws.SHORT_NAME).schema(schema).options(
            path=str(tmp_path), rate="44100").load().count()
    assert "[RATE_MISMATCH]" in str(e.value) and "r_0.wav" in str(e.value)
    with pytest.raises(WavError) as e:  # load() checks here, before Spark
        ws.load(spark, path=str(tmp_path / "nothing"))
    assert _code(e) == "MISSING_PATH"

    # A file cut short after the scan was planned: the worker reading it fails (Spark reuses
    # the planned partitions; were it to re-plan, the driver would find the header corrupt).
    df = spark.read.format(ws.SHORT_NAME).schema(schema).options(
        path=str(tmp_path), window="10").load()
    assert df.count() == 20
    with open(tmp_path / "r_1.wav", "r+b") as f:
        f.truncate(20)
    with pytest.raises(Exception) as e:
        df.count()
    text = str(e.value)
    assert ("[TRUNCATED_FILE]" in text or "[CORRUPT_FILE]" in text) and "r_1.wav" in text


@pytest.mark.spark
def test_spark_streaming_available_now_equals_batch(spark, tmp_path):
    src, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    src.mkdir()
    opts = {"path": str(src), "window": "1000", "slide": "300", "rate": "8000",
            "channels": '["ch1"]', "partition_samples": "4000"}
    ws.register(spark)

    def run():
        query = (spark.readStream.format(ws.SHORT_NAME).schema(f"ch1 {SIGSEG}")
                 .options(**opts).load().writeStream.format("parquet")
                 .option("path", str(out)).option("checkpointLocation", str(ck))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(240), "the streaming query did not finish in 240 s"

    # windows cross both file boundaries and the micro-batch boundary
    first = write_files(src, [2500, 700])
    run()
    second = write_files(src, [4100], names=["r_2.wav"], seed=2)
    (src / "end.eof").write_text("")
    run()
    signal = np.concatenate([first, second])
    streamed = segments(spark.read.parquet(str(out)).toArrow(), ["ch1"])
    assert_same(streamed, oracle(signal, 1000, 300))
