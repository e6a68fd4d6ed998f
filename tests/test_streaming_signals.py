"""Continuous signal queries (streaming/signals.py): a query over a SIGNAL run with
Session.stream over a directory where WAV files keep arriving gives, once the recording is
marked ended, the rows of the batch query over the complete recording -- stateful signal
functions included, whatever the cut into files and micro-batches -- with ``_time``,
``_final`` and ``_progress`` on every row and live metrics on every batch."""

from __future__ import annotations

import datetime as dt
import json
import time

import numpy as np
import pytest
from scipy import signal as sps

from tests.test_kernels_stream import _cfar_reference
from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATE = 8000
EPOCH = dt.datetime(1970, 1, 1)


def _us(value: dt.datetime) -> int:
    d = value - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _recording(seed: int, n: int) -> np.ndarray:
    """Noise with bursts, float32 (what the WAV files hold)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n) * 0.05
    for start in rng.integers(0, n - 800, 6):
        x[start:start + 800] += np.sin(np.arange(800) * 0.3) * 0.6
    return x.astype(np.float32)


def _write_files(folder, x, cuts, first=0):
    """``x`` cut at ``cuts`` into files r_<i>.wav (natural order = timeline order)."""
    folder.mkdir(parents=True, exist_ok=True)
    edges = [0, *cuts, len(x)]
    for i, (a, b) in enumerate(zip(edges[:-1], edges[1:])):
        write_wav(folder / f"r_{first + i:03d}.wav", x[a:b], RATE, "float32")
    return len(edges) - 1


def _signal(ws, folder):
    ws.sql(f"CREATE SIGNAL mic (voice FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")


def _stream(ws, tmp_path, sql, **kw):
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", **kw)
    cq.await_termination()
    return cq


def _out(spark, tmp_path):
    return spark.read.parquet(str(tmp_path / "out")).toPandas()


def _sorted(frame, by="t"):
    return frame.sort_values(by).reset_index(drop=True)


STATELESS = ("SELECT start_time(voice) AS t, seg_rms(voice) AS rms, seg_max(voice) AS peak "
             "FROM mic [SAMPLES 512] WHERE seg_rms(voice) > 0.1")


def test_stream_over_arriving_files_equals_the_batch_query(ws, spark, tmp_path, capsys):
    """Oracle: numpy over the samples written (each 512-sample window's start, rms and
    peak), plus the batch query."""
    x = _recording(1, 20_000)
    folder = tmp_path / "rec"
    # arrives in two rounds; the first round's last file ends inside a window
    written = time.time()
    _write_files(folder, x[:9_000], [300, 5_000])
    _signal(ws, folder)
    cq = _stream(ws, tmp_path, STATELESS, max_files_per_trigger=1)
    since = time.time() - written + 1.0  # no result can come later after its file arrived
    assert len(cq.reports) == 3  # one micro-batch per file
    # live metrics (streaming/metrics.py), also in <output>/_progress/
    status = cq.status()
    assert status["batches"] == 3 and status["rows_in"] == 9_000 // 512
    assert status["samples_in"] == (9_000 // 512) * 512
    assert 0 <= status["latency_p50_s"] <= status["latency_p99_s"] <= since
    assert status["input_samples_per_second"] > 0 and status["processed_samples_per_second"] > 0
    records = sorted((tmp_path / "out" / "_progress").glob("*.json"))
    assert len(records) == 3 and 0 <= json.loads(records[-1].read_text())["latency_s"] <= since
    from wavesql.cli import main as cli

    assert cli(["status", str(tmp_path / "out"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples_in"] == status["samples_in"]
    first = _out(spark, tmp_path)
    assert first["_final"].all()
    # no window reaching past sample 9000 yet: the tail window [8704, 9216) is pending
    assert (first["t"].map(_us) + 512 * 125 <= 9_000 * 125).all()
    assert max(_us(p) for p in first["_progress"]) == (9_000 // 512) * 512 * 125

    _write_files(folder, x[9_000:], [2_222, 6_000], first=4)
    (folder / "done.eof").write_text("")  # the recording is complete: flush the tail
    cq = _stream(ws, tmp_path, STATELESS)
    streamed = _out(spark, tmp_path)
    batch = _sorted(ws.sql(STATELESS).toPandas())
    got = _sorted(streamed)
    assert len(got) == len(batch) > 5
    assert got["t"].tolist() == batch["t"].tolist()
    np.testing.assert_array_equal(got["rms"], batch["rms"])
    np.testing.assert_array_equal(got["peak"], batch["peak"])
    assert (got["_time"] == got["t"]).all() and got["_final"].all()
    # every row's progress is past its window start; no later row starts below it
    for _, part in streamed.groupby("_progress"):
        assert (part["_time"] < part["_progress"]).all()
    # numpy oracle
    windows = [x[s:s + 512] for s in range(0, len(x), 512)]
    rms = np.array([np.sqrt(np.mean(w.astype(np.float64) ** 2)) for w in windows])
    np.testing.assert_allclose(got["rms"], rms[rms > 0.1], rtol=1e-6)
    peak = np.array([w.max() for w in windows])
    np.testing.assert_allclose(got["peak"], peak[rms > 0.1], rtol=1e-6)
    starts = np.arange(0, len(x), 512)[rms > 0.1]
    assert [_us(t) for t in got["t"]] == (starts * 1_000_000 // RATE).tolist()
    assert cq.progress_us == (20_000 // 512 + 1) * 512 * 125  # the tail window's grid end



def test_overlapping_windows_promise_the_next_window_start(ws, spark, tmp_path):
    """``[SAMPLES 512 SLIDE 256]``: after 3,000 samples the windows starting at 0 ... 2304
    are out (each needs its 512 samples) and the next starts at 2560, below the last one's
    end (2816): ``_progress`` must be 2560 samples, or the next run's first row would start
    below a promise. Oracle: hand-computed window starts and numpy's mean per window."""
    x = _recording(5, 6_000)
    folder = tmp_path / "rec"
    _write_files(folder, x[:3_000], [])
    _signal(ws, folder)
    sql = "SELECT start_sample(voice) AS s, seg_avg(voice) AS m FROM mic [SAMPLES 512 SLIDE 256]"
    _stream(ws, tmp_path, sql)
    first = _out(spark, tmp_path)
    assert sorted(first["s"]) == list(range(0, 2305, 256))
    assert {_us(p) for p in first["_progress"]} == {2_560 * 125}
    _write_files(folder, x[3_000:], [], first=1)
    (folder / "done.eof").write_text("")
    _stream(ws, tmp_path, sql)
    got = _out(spark, tmp_path).sort_values("s")
    later = got[~got["s"].isin(first["s"])]
    assert later["s"].min() == 2_560
    assert (later["_time"].map(_us) >= 2_560 * 125).all()  # the first run's promise held
    starts = list(range(0, 6_000, 256))
    assert got["s"].tolist() == starts
    np.testing.assert_allclose(
        got["m"], [np.mean(x[a:a + 512].astype(np.float64)) for a in starts], rtol=1e-5)

STATEFUL = (
    "SELECT start_time(voice) AS t, seg_rms(lowpass(voice, 600.0, 4)) AS lp, "
    "seg_rms(iir(voice, array(0.1), array(1.0, -0.9))) AS ii, "
    "seg_rms(fir(voice, array(0.25, 0.5, 0.25))) AS fi, "
    "cfar(seg_rms(voice), 3.0, 0.05, 8) AS det FROM mic [SAMPLES 256]")


def test_stateful_functions_carry_state_across_micro_batches(ws, spark, tmp_path):
    """lowpass / iir (unbounded look-back), fir, cfar: one file in one batch, or many files
    over many micro-batches and restarts, give the batch query's rows and scipy's filter.
    Oracle: scipy (sosfilt, lfilter) over the samples written, numpy rms, and cfar's
    reference loop from tests/test_kernels_stream.py over those rms; plus the batch."""
    x = _recording(2, 12_000)
    x[9_000:9_600] += np.float32(1.0)  # an event well after cfar's warm-up
    one, many = tmp_path / "one", tmp_path / "many"
    _write_files(one / "rec", x, [])
    (one / "rec" / "x.eof").write_text("")
    rng = np.random.default_rng(3)
    cuts = sorted(rng.choice(np.arange(1, 12_000), 9, replace=False).tolist())
    _write_files(many / "rec", x[:cuts[4]], cuts[:4])
    _signal(ws, many / "rec")
    cq = _stream(ws, many, STATEFUL, max_files_per_trigger=3)  # first 5 files, 2 batches
    assert len(cq.reports) == 2
    _write_files(many / "rec", x[cuts[4]:], [c - cuts[4] for c in cuts[5:]], first=5)
    (many / "rec" / "x.eof").write_text("")
    cq = _stream(ws, many, STATEFUL, max_files_per_trigger=3)  # a restart, state carried
    got = _sorted(_out(spark, many))
    assert (got["_time"] == got["t"]).all() and got["_final"].all()
    assert max(r.state_bytes for r in cq.reports) > 0

    ws.sql("DROP SIGNAL mic")
    _signal(ws, one / "rec")
    _stream(ws, one, STATEFUL)
    whole = _sorted(_out(spark, one))
    batch = _sorted(ws.sql(STATEFUL).toPandas())
    assert len(got) == len(whole) == len(batch) == -(-12_000 // 256)
    for col in ("lp", "ii", "fi"):
        np.testing.assert_array_equal(got[col], batch[col])
        np.testing.assert_array_equal(whole[col], batch[col])
    assert got["det"].tolist() == batch["det"].tolist() == whole["det"].tolist()
    assert got["det"].any()

    # scipy over the complete recording
    xd = x.astype(np.float64)
    sos = sps.butter(4, 600.0, fs=RATE, output="sos")
    for col, y in (("lp", sps.sosfilt(sos, xd)), ("ii", sps.lfilter([0.1], [1.0, -0.9], xd)),
                   ("fi", sps.lfilter([0.25, 0.5, 0.25], [1.0], xd))):
        want = [np.sqrt(np.mean(y[s:s + 256] ** 2)) for s in range(0, len(y), 256)]
        np.testing.assert_allclose(got[col], want, rtol=1e-4, atol=1e-6)
    scores = [float(np.sqrt(np.mean(xd[s:s + 256] ** 2))) for s in range(0, len(xd), 256)]
    assert got["det"].tolist() == _cfar_reference(scores, 3.0, 0.05, 8)
    assert got["t"].map(_us).tolist() == [s * 125 for s in range(0, len(xd), 256)]


@pytest.mark.parametrize("sql, code", [
    ("SELECT count(*) AS n FROM mic [SAMPLES 512]", "STREAMING_RULE"),
    # (OVER windows, and a signal subquery, run as parts: tests/test_derived_forms.py; not
    # beside a column Spark names after its text, nor a subquery of the segments)
    ("SELECT start_time(voice), avg(seg_rms(voice)) OVER (ORDER BY start_time(voice) "
     "ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS a FROM mic [SAMPLES 512]", "STREAMING_RULE"),
    ("SELECT seg_rms(voice) AS r FROM (SELECT * FROM mic [SAMPLES 512]) s",
     "NOT_IMPLEMENTED"),
])
def test_signal_streaming_rules(ws, tmp_path, sql, code):
    _write_files(tmp_path / "rec", _recording(5, 2_000), [])
    _signal(ws, tmp_path / "rec")
    with pytest.raises(WaveSQLError) as e:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert e.value.code == code


def test_reader_checkpointed_state_equals_one_sequential_pass(tmp_path):
    """The WAV stream reader with ``state_dir`` (no Spark): IIR state, a detector and an
    open range carried across micro-batches of at most 2 files, the end marked in a batch of
    its own (a partition of no windows flushes the open range) == one sequential read."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    from wavesql.sources import wav_scan
    from wavesql.sources import wav_source as wsrc
    from wavesql.udfs.program import Output, Program

    prog = Program(("ch1",), (
        Output("s", {"call": "start_time", "args": [{"col": "ch1"}]}, "bigint"),
        Output("lp", {"call": "seg_rms", "args": [
            {"call": "lowpass", "args": [{"col": "ch1"}, {"lit": 500.0}]}]}, "double"),
        Output("det", {"call": "cfar", "args": [
            {"call": "seg_rms", "args": [{"col": "ch1"}]}, {"lit": 2.0}]}, "boolean"),
        Output("r", {"call": "threshold_ranges", "args": [{"col": "ch1"}, {"lit": 0.5}]},
               "ranges")))
    folder = tmp_path / "rec"
    x = _recording(6, 64 * 40)
    x[-100:] = 0.9  # a range still open at the end: only the flush reports it
    _write_files(folder, x, [30, 700, 790, 1_800, 1_864, 2_000])
    opts = {"path": str(folder), "window": "64", "rate": str(RATE), "channels": '["ch1"]',
            "program": prog.to_json()}
    reader = wsrc.WavStreamReader({**opts, "state_dir": str(tmp_path / "state"),
                                   "max_files_per_trigger": "2"},
                                  from_arrow_schema(prog.arrow_schema()))
    offset, batches, shapes = reader.initialOffset(), [], []
    for _ in range(10):
        if offset.get("final"):
            break
        if len(offset["files"]) == 7:
            (folder / "end.eof").write_text("")
        end = reader.latestOffset(offset, None)
        parts = reader.partitions(offset, end)
        shapes.append([(len(p.tasks), p.flush) for p in parts])
        batches += [b for p in parts for b in reader.read(p)]
        offset = end
    assert shapes[-1] == [(0, True)]  # the end marker alone: flush, no windows
    assert len(shapes) == 5
    plan = wsrc.plan(opts)
    assert plan.sequential
    whole = [b for p in plan.partitions() for b in wav_scan.read_partition(
        p, plan.options, plan.program_json, plan.channels, plan.stateful)]
    got, want = pa.Table.from_batches(batches), pa.Table.from_batches(whole)
    assert got.num_rows == want.num_rows == 41  # 40 windows + the flushed range
    assert got.to_pylist() == want.to_pylist()


def test_pass_through_subqueries_stream_like_the_merged_query(ws, spark, tmp_path):
    """planner/passthrough.py merges the subqueries into the scan's program; a continuous
    query over files arriving one per micro-batch gives the batch query's rows.
    Oracle: numpy rms and window sizes over the samples written, plus the batch."""
    x = _recording(3, 12_000)
    _write_files(tmp_path / "rec", x, [300, 5_000, 9_000])
    (tmp_path / "rec" / "done.eof").write_text("")
    _signal(ws, tmp_path / "rec")
    query = ("SELECT start_time(voice) AS t, seg_rms(voice) AS rms, size(voice.samples) AS n "
             "FROM (SELECT voice FROM (SELECT voice FROM mic [SAMPLES 512]) p "
             "WHERE seg_rms(voice) > 0.1) q")
    _stream(ws, tmp_path, query, max_files_per_trigger=1)
    got = _sorted(_out(spark, tmp_path))
    batch = _sorted(ws.sql(query).toPandas())
    windows = [x[s:s + 512] for s in range(0, len(x), 512)]
    rms = np.array([np.sqrt(np.mean(w.astype(np.float64) ** 2)) for w in windows])
    assert len(got) == len(batch) == int((rms > 0.1).sum()) > 3
    np.testing.assert_array_equal(got["rms"], batch["rms"])
    np.testing.assert_allclose(got["rms"], rms[rms > 0.1], rtol=1e-6)
    assert got["n"].tolist() == [len(w) for w, r in zip(windows, rms) if r > 0.1]
