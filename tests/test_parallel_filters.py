"""Stateful linear filters in parallel partitions equal scipy over the whole signal.

Every IIR filter and ``fir`` runs in partitions that each warm up on the samples before
them (udfs/kernels/filters.py: the warm-up after which any start state has shrunk below
2**-53 of itself). The oracle is scipy over each whole gap-free run of samples, from zero
state, with the designs made here (``scipy.signal.butter`` / ``iirnotch``) -- nothing from
the code under test.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from scipy import signal as sps

from wavesql.sources import wav_plan, wav_scan
from wavesql.sources import wav_source as wsrc
from wavesql.udfs import row_state
from wavesql.udfs.program import Output, Program
from wavesql.udfs.wav import write_wav

RATE = 1000.0
BASE_MS = 1_700_000_000_000  #: file names carry unix ms; the epoch is the first one

#: name, SQL-ish arguments after the segment, scipy oracle over one run
FILTERS = {
    "lowpass": ([40.0, 4], lambda x: sps.sosfilt(sps.butter(4, 40.0, fs=RATE, output="sos"), x)),
    "highpass": ([5.0, 4], lambda x: sps.sosfilt(
        sps.butter(4, 5.0, btype="highpass", fs=RATE, output="sos"), x)),
    "bandpass": ([20.0, 120.0, 3], lambda x: sps.sosfilt(
        sps.butter(3, [20.0, 120.0], btype="bandpass", fs=RATE, output="sos"), x)),
    "notch": ([50.0, 5.0], lambda x: sps.lfilter(*sps.iirnotch(50.0, 5.0, fs=RATE), x)),
    "iir": ([[0.05], [1.0, -0.95]], lambda x: sps.lfilter([0.05], [1.0, -0.95], x)),
    "fir": ([list(np.hanning(17) / 8)], lambda x: sps.lfilter(np.hanning(17) / 8, [1.0], x)),
}


def _program(name: str, args) -> Program:
    filtered = {"call": name, "args": [{"col": "ch1"}] + [{"lit": a} for a in args]}
    return Program(("ch1",), (
        Output("s", {"call": "start_sample", "args": [{"col": "ch1"}]}, "bigint"),
        Output("y", filtered, "sigseg"),
        Output("mean", {"call": "seg_avg", "args": [filtered]}, "double")))


def _recording(folder, rng, fmt: str):
    """Random files (1-sample ones too) with random gaps between some of them, named by
    their start time (timestamped timeline, 1 sample per ms); returns the gap-free runs as
    (first sample, float64 samples as the scan reads them)."""
    runs, t_ms, current = [], 0, None
    for i in range(int(rng.integers(3, 9))):
        length = int(rng.choice([1, 2, int(rng.integers(1, 400)), int(rng.integers(400, 3000))]))
        if i and rng.random() < 0.3:
            t_ms += int(rng.integers(1, 900))  # a gap: the filters restart from zero state
            current = None
        if fmt == "int16":
            raw = rng.integers(-32768, 32768, size=length, dtype=np.int16)
            x = raw.astype(np.float64) / 32768
        else:
            raw = (rng.standard_normal(length) * 0.3).astype(np.float32)
            x = raw.astype(np.float64)
        write_wav(folder / f"rec_{BASE_MS + t_ms}.wav", raw, int(RATE), fmt)
        if current is None:
            current = [t_ms, []]
            runs.append(current)
        current[1].append(x)
        t_ms += length
    return [(start, np.concatenate(parts)) for start, parts in runs]


def _read(options) -> pa.Table:
    plan = wsrc.plan(options)
    parts = plan.partitions()
    batches = [b for part in parts for b in wav_scan.read_partition(
        part, plan.options, plan.program_json, plan.channels, plan.stateful)]
    return pa.Table.from_batches(batches, schema=wav_plan.load_program(plan.program_json).arrow_schema()), parts


def _expected(runs, oracle, n: int):
    """Rows (start sample, filtered float64 samples) of tumbling n-sample windows on the
    absolute grid, cut at the runs' ends (the scan's windows)."""
    rows = []
    for start, x in runs:
        y = oracle(x)
        k = start // n * n
        while k < start + len(x):
            lo, hi = max(k, start), min(k + n, start + len(x))
            rows.append((lo, y[lo - start:hi - start]))
            k += n
    return rows


@pytest.mark.parametrize("name", sorted(FILTERS))
@pytest.mark.parametrize("fmt", ["float32", "int16"])
def test_partitions_of_every_size_equal_scipy_over_the_whole_signal(tmp_path, name, fmt):
    args, oracle = FILTERS[name]
    program = _program(name, args)
    lookback = program.lookback(RATE)
    assert isinstance(lookback, int) and lookback > 0
    for trial in range(4):
        rng = np.random.default_rng([trial, len(name), len(fmt)])
        folder = tmp_path / str(trial)
        folder.mkdir()
        runs = _recording(folder, rng, fmt)
        # window and partition sizes: 1-sample windows, one window per partition, small
        # and large partitions, everything in one partition
        n, size = ((1, 1500), (7, 300), (64, 64), (500, 1 << 20))[trial]
        options = {"path": str(folder), "timeline": "timestamped",
                   "epoch_us": str(BASE_MS * 1000), "window": str(n),
                   "program": program.to_json(), "partition_samples": str(size)}
        table, parts = _read(options)
        want = _expected(runs, oracle, n)
        got = table.to_pylist()
        assert [r["s"] for r in got] == [s for s, _ in want]
        scale = max(1.0, max(float(np.max(np.abs(y))) for _, y in want))
        for row, (start, y) in zip(got, want):
            samples = np.asarray(row["y"]["samples"], np.float64)
            # the segment travels as float32: the same float32 as scipy's, but for a
            # rounding tie flipped by the ~1e-16 the warm-up leaves
            np.testing.assert_allclose(samples, y.astype(np.float32), rtol=2 ** -22,
                                       atol=scale * 2 ** -40, err_msg=f"window at {start}")
            # the mean is computed in float64 from the float64 filter output
            assert abs(row["mean"] - y.mean()) <= 1e-12 * scale, start
        # partitions after a run's first start from zero state a warm-up before them
        assert all(p.warmup for p in parts if p.tasks[0].k0 * n > p.tasks[0].run_start)


def test_a_warm_up_reaches_back_across_files_and_stops_at_a_gap(tmp_path):
    # Three contiguous files then a gap: partitions after the first re-read the samples
    # before them (from earlier files), and none reads across the gap.
    rng = np.random.default_rng(7)
    folder = tmp_path / "rec"
    folder.mkdir()
    x = (rng.standard_normal(9000) * 0.3).astype(np.float32)
    for start, (a, b) in zip((0, 3000, 6000), ((0, 3000), (3000, 6000), (6000, 9000))):
        write_wav(folder / f"rec_{BASE_MS + start}.wav", x[a:b], int(RATE), "float32")
    later = (rng.standard_normal(4000) * 0.3).astype(np.float32)
    write_wav(folder / f"rec_{BASE_MS + 20_000}.wav", later, int(RATE), "float32")
    args, oracle = FILTERS["highpass"]
    program = _program("highpass", args)
    table, parts = _read({"path": str(folder), "timeline": "timestamped", "window": "100",
                          "epoch_us": str(BASE_MS * 1000),
                          "program": program.to_json(), "partition_samples": "1000"})
    assert len(parts) == 13 and sum(bool(p.warmup) for p in parts) == 11
    runs = [(0, x.astype(np.float64)), (20_000, later.astype(np.float64))]
    want = _expected(runs, oracle, 100)
    for row, (start, y) in zip(table.to_pylist(), want):
        assert row["s"] == start
        assert abs(row["mean"] - y.mean()) <= 1e-12


def test_a_filter_that_never_forgets_runs_in_one_ordered_pass(tmp_path):
    # An integrator's pole sits on the unit circle: no warm-up reaches its state, so the
    # scan is one partition, and the running sum is right over every file.
    rng = np.random.default_rng(3)
    folder = tmp_path / "rec"
    folder.mkdir()
    x = rng.standard_normal(5000).astype(np.float32)
    for i, (a, b) in enumerate(((0, 1200), (1200, 1201), (1201, 5000))):
        write_wav(folder / f"r_{i}.wav", x[a:b], int(RATE), "float32")
    program = _program("iir", [[1.0], [1.0, -1.0]])
    assert "never forgets" in program.lookback(RATE)
    table, parts = _read({"path": str(folder), "window": "250", "program": program.to_json(),
                          "partition_samples": "500"})
    assert len(parts) == 1
    y = np.cumsum(x.astype(np.float64))
    means = [row["mean"] for row in table.to_pylist()]
    np.testing.assert_allclose(means, y.reshape(20, 250).mean(axis=1), rtol=1e-12)


def _cfar_oracle(scores, k, alpha, warmup):
    """The CFAR recursion as documented (udfs/kernels/detect.py), written here: the first
    ``warmup`` scores seed the mean and population variance (numpy's), then a score fires
    above mean + k*sigma and is absorbed clipped at that threshold."""
    seen, mean, var, fired = [], 0.0, 0.0, []
    for s in scores:
        if len(seen) < warmup:
            seen.append(s)
            mean, var = float(np.mean(seen)), float(np.var(seen))
            fired.append(False)
            continue
        threshold = mean + k * np.sqrt(var)
        fired.append(bool(s > threshold))
        d = min(s, threshold) - mean
        mean, var = mean + alpha * d, (1 - alpha) * (var + alpha * d * d)
    return fired


def test_cfar_runs_in_one_ordered_pass_equal_to_numpy_over_the_whole_signal(tmp_path):
    # cfar's noise estimate is a clipped recursion seeded by the stream's first scores: no
    # finite look-back gives the same flags, so the scan is one partition whatever the
    # partition size asked for -- and equals the recursion over every window's RMS in
    # time order, across random file splits and gaps (a gap cuts windows, it does not
    # reset the estimate: the scores are one stream).
    score = {"call": "seg_rms", "args": [{"col": "ch1"}]}
    program = Program(("ch1",), (
        Output("s", {"call": "start_sample", "args": [{"col": "ch1"}]}, "bigint"),
        Output("f", {"call": "cfar", "args": [score, {"lit": 2.0}, {"lit": 0.05},
                                              {"lit": 8}]}, "boolean")))
    assert "cfar's noise estimate" in program.lookback(RATE)
    for trial, (n, size) in enumerate(((1, 700), (7, 300), (50, 1 << 20))):
        rng = np.random.default_rng([trial, 22])
        folder = tmp_path / str(trial)
        folder.mkdir()
        runs = _recording(folder, rng, "float32")
        table, parts = _read({"path": str(folder), "timeline": "timestamped",
                              "epoch_us": str(BASE_MS * 1000), "window": str(n),
                              "program": program.to_json(), "partition_samples": str(size)})
        assert len(parts) == 1
        want = _expected(runs, lambda x: x, n)
        scores = [float(np.sqrt(np.mean(y * y))) for _, y in want]
        got = table.to_pylist()
        assert [r["s"] for r in got] == [s for s, _ in want]
        flags = _cfar_oracle(scores, 2.0, 0.05, 8)
        assert [r["f"] for r in got] == flags and 0 < sum(flags), trial


def _cfar_call(score, k=2.0, alpha=0.05, warmup=8) -> dict:
    return {"call": "cfar", "args": [score] + [{"lit": v} for v in (k, alpha, warmup)]}


_START = {"call": "start_sample", "args": [{"col": "ch1"}]}
_RMS = {"call": "seg_rms", "args": [{"col": "ch1"}]}
_LOW = {"call": "seg_rms", "args": [{"call": "lowpass", "args": [
    {"col": "ch1"}, {"lit": 40.0}, {"lit": 4}]}]}
_MAX = {"call": "seg_max", "args": [{"col": "ch1"}]}
#: cfar in the SELECT list, in an expression, and as the WHERE filter
_CFAR_SELECT = Program(("ch1",), (
    Output("s", _START, "bigint"), Output("f", _cfar_call(_RMS), "boolean"),
    Output("g", {"op": "and", "args": [_cfar_call(_RMS), {"op": ">", "args": [
        _MAX, {"lit": 0.0}]}]}, "boolean")))
_CFAR_WHERE = Program(("ch1",), (Output("s", _START, "bigint"),), (_cfar_call(_RMS),))


def _cfar_expected(runs, n, score=lambda x: x):
    """(start, flag, window max) of every window, the flags by the test's own recursion
    over the windows' RMS of ``score`` (each run filtered from rest) in time order."""
    want = _expected(runs, score, n)
    raw = _expected(runs, lambda x: x, n)
    flags = _cfar_oracle([float(np.sqrt(np.mean(y * y))) for _, y in want], 2.0, 0.05, 8)
    return [(s, f, float(np.max(y))) for (s, y), f in zip(raw, flags)]


def _split_read(options, split, rng) -> pa.Table:
    """The split without Spark: the scan program over every partition, each packed, the
    packed rows shuffled (a shuffle keeps no order), then the ordered pass."""
    plan = wsrc.plan({**options, "program": split.scan.to_json()})
    packed = [b for part in plan.partitions() for b in row_state.pack(part.index, (
        wav_scan.read_partition(part, plan.options, plan.program_json, plan.channels,
                                plan.stateful)))]
    order = rng.permutation(len(packed))
    out = list(row_state.ordered_pass([packed[i] for i in order], split))
    schema = split.ordered.arrow_schema()
    return pa.Table.from_batches(out, schema=schema), len(plan.partitions())


def _check_cfar_split(folder, fmt: str, trials) -> list[int]:
    """The split read (:func:`_split_read`) of random recordings vs the recursion, for
    ``trials`` of (seed, window, partition size, score); returns the flags each fired.
    The tests pack rows in pieces of 5: several pieces per partition, shuffled."""
    fired = []
    for seed, n, size, score in trials:
        rng = np.random.default_rng([seed, 23, len(fmt)])
        (folder / str(seed)).mkdir()
        runs = _recording(folder / str(seed), rng, fmt)
        options = {"path": str(folder / str(seed)), "timeline": "timestamped",
                   "epoch_us": str(BASE_MS * 1000), "window": str(n),
                   "partition_samples": str(size)}
        if score == "lowpass":  # a filter inside the score: partitions warm up before it
            programs = [Program(("ch1",), (Output("s", _START, "bigint"),),
                                (_cfar_call(_LOW),))]
            want = _cfar_expected(runs, n, FILTERS["lowpass"][1])
        else:
            programs = [_CFAR_SELECT, _CFAR_WHERE]
            want = _cfar_expected(runs, n)
        fired.append(sum(f for _, f, _ in want))
        for program in programs:
            split = row_state.split(program, RATE)
            assert split.functions == ("cfar",) and split.scan.stateful == (score != "rms")
            table, parts = _split_read(options, split, rng)
            assert parts > 1 or sum(len(x) for _, x in runs) <= size + n, seed
            got = table.to_pylist()
            if program is _CFAR_SELECT:
                assert got == [{"s": s, "f": f, "g": f and m > 0} for s, f, m in want], seed
            else:
                assert [r["s"] for r in got] == [s for s, f, _ in want if f], seed
    return fired


@pytest.mark.parametrize("fmt", ["float32", "int16"])
def test_cfar_scores_windows_in_parallel_and_flags_them_in_one_ordered_pass(tmp_path, fmt,
                                                                          monkeypatch):
    # The scan scores the windows in small partitions; the ordered pass runs cfar over the
    # scores in window order -- across random file splits, 1-sample files and gaps, which
    # cut windows but do not reset the estimate -- giving the recursion's flags bit for bit.
    assert row_state.split(_CFAR_WHERE, RATE).scan.filters == ()  # every window is scored
    monkeypatch.setattr(row_state, "PACK_ROWS", 5)
    fired = _check_cfar_split(tmp_path, fmt, ((0, 1, 97, "rms"), (1, 7, 300, "rms"),
                                              (2, 50, 100, "rms"), (3, 3, 30, "rms"),
                                              (4, 20, 60, "lowpass")))
    assert sum(f > 0 for f in fired) >= 3, fired  # not a test of all-False flags


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["float32", "int16"])
def test_cfar_split_over_many_random_recordings(tmp_path, fmt, monkeypatch):
    monkeypatch.setattr(row_state, "PACK_ROWS", 5)
    rng = np.random.default_rng(99)
    trials = [(seed, int(rng.choice([1, 2, 5, 16, 64])), int(rng.integers(20, 2000)),
               "lowpass" if seed % 5 == 0 else "rms") for seed in range(10, 50)]
    assert sum(f > 0 for f in _check_cfar_split(tmp_path, fmt, trials)) > 20


def test_what_cannot_be_split_stays_one_ordered_pass():
    iir = {"call": "iir", "args": [{"col": "ch1"}, {"lit": [1.0]}, {"lit": [1.0, -1.0]}]}
    whole_past = {"call": "seg_rms", "args": [iir]}
    cases = {
        "a score needing the whole past": (_cfar_call(whole_past), "boolean"),
        "a segment through the ordered pass": ({"col": "ch1"}, "sigseg"),
        "cfar of cfar": (_cfar_call({"op": "+", "args": [_cfar_call(_RMS), _RMS]}), "boolean"),
    }
    for what, (tree, typ) in cases.items():
        program = Program(("ch1",), (Output("x", tree, typ),), (_cfar_call(_RMS),))
        assert row_state.split(program, RATE) is None, what
    # nothing unbounded: nothing to split
    assert row_state.split(_program("lowpass", FILTERS["lowpass"][0]), RATE) is None


def test_cfar_split_through_spark_equals_the_recursion(spark, tmp_path):
    # The Spark form: scan tasks packing their rows, a shuffle, one ordered task -- over
    # many small partitions, cfar in the SELECT list and as the WHERE filter.
    rng = np.random.default_rng(41)
    runs = _recording(tmp_path, rng, "float32")
    want = _cfar_expected(runs, 5)
    options = {"path": str(tmp_path), "timeline": "timestamped", "rate": str(RATE),
               "epoch_us": str(BASE_MS * 1000), "window": "5", "partition_samples": "400"}
    for program in (_CFAR_SELECT, _CFAR_WHERE):
        split = row_state.split(program, RATE)
        df = wsrc.batch_frame(spark, split.scan.spark_ddl(),
                              {**options, "program": split.scan.to_json()}, split=split)
        got = [r.asDict() for r in df.collect()]
        if program is _CFAR_SELECT:
            assert got == [{"s": s, "f": f, "g": f and m > 0} for s, f, m in want]
        else:
            assert [r["s"] for r in got] == [s for s, f, _ in want if f]


def test_cfar_queries_score_in_parallel_and_flag_in_order(ws, tmp_path):
    # End to end: a recording of 2.2 M samples (three scan partitions) in two files with a
    # gap between them; cfar in WHERE, in the SELECT list, and through the data source.
    rng = np.random.default_rng(9)
    lengths, t_ms, runs = (1_300_000, 900_000), 0, []
    for i, length in enumerate(lengths):
        x = (rng.standard_normal(length) * 0.3).astype(np.float32)
        x[rng.integers(0, length, 40)] *= 30  # a few loud samples to flag
        write_wav(tmp_path / f"rec_{BASE_MS + t_ms}.wav", x, int(RATE), "float32")
        runs.append((t_ms, x.astype(np.float64)))
        t_ms += length + 1234
    want = _cfar_expected(runs, 400)
    flagged = [s for s, f, _ in want if f]
    assert 10 < len(flagged) < len(want)
    ws.sql(f"CREATE SIGNAL rs (ch1 FLOAT) RATE {int(RATE)} HZ FROM '{tmp_path}' FORMAT wav "
           "OPTIONS (timeline = 'timestamped')")
    cfar = "cfar(seg_rms(ch1), 2.0, 0.05, 8)"
    where = f"SELECT start_sample(ch1) AS s FROM rs [SAMPLES 400] WHERE {cfar} ORDER BY s"
    # partitions of ~2,600 windows, under 4x cfar's look-back of 2,213: in the ordered pass
    assert "cfar in partitions from a warm-up of 2,213 scores, verified in order" in \
        ws.explain(where)
    assert [r[0] - BASE_MS for r in ws.sql(where).collect()] == flagged
    rows = ws.sql(f"SELECT count(*), sum(CAST({cfar} AS INT)) FROM rs [SAMPLES 400]").collect()
    assert tuple(rows[0]) == (len(want), len(flagged))
    ws.sql("SET wavesql.wav.scan = source")  # a setting of the suite's one Spark session
    try:
        assert [r[0] - BASE_MS for r in ws.sql(where).collect()] == flagged
    finally:
        ws.spark.conf.unset("wavesql.wav.scan")


def test_explain_says_parallel_or_sequential_and_why(ws, tmp_path):
    x = (np.random.default_rng(1).standard_normal(4000) * 0.3).astype(np.float32)
    write_wav(tmp_path / "a.wav", x, 8000, "float32")
    ws.sql(f"CREATE SIGNAL pf (ch1 FLOAT) RATE 8000 HZ FROM '{tmp_path}' FORMAT wav")
    text = ws.explain("SELECT seg_rms(lowpass(ch1, 1000.0)) FROM pf [SAMPLES 400]")
    assert "parallel: each partition warms up on the 256 samples before it" in text
    text = ws.explain("SELECT seg_rms(iir(ch1, array(1.0), array(1.0, -1.0))) "
                       "FROM pf [SAMPLES 400]")
    assert "sequential: iir never forgets its state" in text
    text = ws.explain("SELECT cfar(seg_rms(ch1)) FROM pf [SAMPLES 400]")
    assert ("parallel: the windows scored in partitions; cfar in partitions from a warm-up "
            "of 11,054 scores, verified in order") in text
    text = ws.explain("SELECT cfar(seg_rms(lowpass(ch1, 1000.0))) FROM pf [SAMPLES 400]")
    assert ("parallel: each partition warms up on the 256 samples before it; cfar in "
            "partitions from a warm-up of 11,054 scores, verified in order") in text
    # alpha so small that the look-back would be over its cap: one ordered pass, and why
    text = ws.explain("SELECT cfar(seg_rms(ch1), 3.0, 0.0001) FROM pf [SAMPLES 400]")
    assert ("parallel: the windows scored in partitions; cfar in one ordered pass over the "
            "window scores (cfar would need a look-back of 1,102,137 scores, over "
            "131,072)") in text
    # a score that needs the whole past itself: the whole scan stays one ordered pass
    text = ws.explain("SELECT cfar(seg_rms(iir(ch1, array(1.0), array(1.0, -1.0)))) "
                       "FROM pf [SAMPLES 400]")
    assert "sequential: iir never forgets its state" in text


def test_a_micro_batch_of_several_files_filters_them_in_parallel(tmp_path):
    # The stream reader (no Spark) with the runner's ``tasks`` option: the second
    # micro-batch brings three files (3 M samples) and is cut into partitions warmed up on
    # the samples before them, the first of which were read by the batch before.
    from pyspark.sql.pandas.types import from_arrow_schema

    rng = np.random.default_rng(5)
    folder = tmp_path / "rec"
    folder.mkdir()
    x = (rng.standard_normal(3_600_000) * 0.3).astype(np.float32)
    cuts = [0, 600_000, 1_600_000, 2_600_000, 3_600_000]
    program = _program("bandpass", FILTERS["bandpass"][0])
    options = {"path": str(folder), "window": "1000", "rate": str(int(RATE)),
               "channels": '["ch1"]', "program": program.to_json(), "tasks": "4",
               "state_dir": str(tmp_path / "state")}  # unused: the look-back is finite
    reader = wsrc.WavStreamReader(options, from_arrow_schema(program.arrow_schema()))
    offset, rows, shapes = reader.initialOffset(), [], []
    for batch in ([0], [1, 2, 3]):
        for i in batch:
            write_wav(folder / f"r_{i}.wav", x[cuts[i]:cuts[i + 1]], int(RATE), "float32")
        if batch[-1] == 3:
            (folder / "end.eof").write_text("")
        end = reader.latestOffset(offset, None)
        parts = reader.partitions(offset, end)
        shapes.append((len(parts), sum(bool(p.warmup) for p in parts)))
        rows += [r for p in parts for b in reader.read(p) for r in b.to_pylist()]
        offset = end
    assert shapes[1][0] >= 3 and shapes[1][1] == shapes[1][0]  # parallel, every one warmed
    assert not (tmp_path / "state").exists()
    want = _expected([(0, x.astype(np.float64))], FILTERS["bandpass"][1], 1000)
    assert [r["s"] for r in rows] == [s for s, _ in want]
    for row, (start, y) in zip(rows, want):
        assert abs(row["mean"] - y.mean()) <= 1e-12, start
