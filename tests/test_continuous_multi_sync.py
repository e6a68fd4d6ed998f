"""Several SYNC JOINs in one continuous query (issue 21): a control stream synced with two
WAV signals of different rates whose files arrive in steps, one signal ahead of the other
and then the other ahead. A control row is emitted once, final, when both recordings cover
its range, across restarts from the checkpoint; each row's segments, their RMS and a
filter from rest are numpy's/scipy's over the samples written."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import numpy as np
import pytest

from wavesql.errors import WaveSQLError

MIC_RATE, ACC_RATE = 1000, 250  # 1 s files: 1000 and 250 samples
FILES = 4
QUERY = ("SELECT c.id, a.ch1, b.z, seg_rms(a.ch1) AS rms_a, seg_rms(b.z) AS rms_b, "
         "iir(b.z, ARRAY(0.5D, 0.5D), ARRAY(1.0D)) AS smooth_b "
         "FROM marks c SYNC JOIN mic a ON RANGE (c.t0, c.t1) "
         "SYNC JOIN acc b ON RANGE (c.t0 - INTERVAL 100 MILLISECONDS, c.t1)")



def control_rows(spark, ranges: dict, ids):
    """Control rows ``(id, t0, t1)`` of the ``ids``, their ranges in milliseconds from the
    epoch (``ranges[id] = (start, end)``), as a continuous SYNC's split is handed them."""
    epoch = dt.datetime(1970, 1, 1)
    return spark.createDataFrame(
        [(i, epoch + dt.timedelta(milliseconds=ranges[i][0]),
          epoch + dt.timedelta(milliseconds=ranges[i][1])) for i in ids],
        "id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP")

def first_sample(ms: int, rate: int) -> int:
    """The oracle's time-to-sample rule (README: the first sample at or after the time)."""
    return -((-ms * rate) // 1000)


@pytest.fixture
def recordings(tmp_path):
    """Each signal's samples, written as FILES one-second WAV files under all/ (scipy's
    writer); the signals' folders and the control's start empty."""
    from scipy.io import wavfile

    mic = np.random.default_rng(1).standard_normal(FILES * MIC_RATE).astype(np.float32)
    acc = np.random.default_rng(2).standard_normal(FILES * ACC_RATE).astype(np.float32)
    for d in ("all", "mic", "acc", "ctl"):
        (tmp_path / d).mkdir()
    for i in range(FILES):
        wavfile.write(tmp_path / "all" / f"mic_{i:03d}.wav", MIC_RATE,
                      mic[i * MIC_RATE:(i + 1) * MIC_RATE])
        wavfile.write(tmp_path / "all" / f"acc_{i:03d}.wav", ACC_RATE,
                      acc[i * ACC_RATE:(i + 1) * ACC_RATE])
    return mic, acc


def _define(ws, tmp_path):
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {MIC_RATE} HZ FROM '{tmp_path / 'mic'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE SIGNAL acc (z FLOAT) RATE {ACC_RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT wav SEGMENT 64")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")


def _arrive(tmp_path, *names):
    for name in names:
        shutil.copy(tmp_path / "all" / name, tmp_path / name.split("_")[0] / name)


def _stamp(ms: int) -> str:
    return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def _marks(tmp_path, name, rows):
    """rows: (id, range start ms, range end ms) -> a JSON-lines file of the control."""
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "t0": _stamp(a), "t1": _stamp(b)}) + "\n" for i, a, b in rows))


def _run(ws, tmp_path, query=QUERY):
    q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return q.reports[-1]


def _emitted(spark, tmp_path) -> list[int]:
    return sorted(r.id for r in spark.read.parquet(str(tmp_path / "out")).collect())


def _check(rows, recordings, ranges):
    """Each result row against numpy/scipy over the samples written: the mic's samples in
    [t0, t1), the accelerometer's in [t0 - 100 ms, t1) at its own rate, their RMS, and
    lfilter from rest over the accelerometer's range; a reversed range: NULL."""
    from scipy.signal import lfilter

    mic, acc = recordings
    for r in rows:
        t0, t1 = ranges[r.id]
        if t1 < t0:
            assert r.ch1 is None and r.z is None and r.rms_a is None and r.smooth_b is None
            continue
        lo, hi = first_sample(t0, MIC_RATE), first_sample(t1, MIC_RATE)
        x = mic[lo:hi]
        assert (r.ch1.start, r.ch1.rate) == (lo, MIC_RATE)
        np.testing.assert_array_equal(np.asarray(r.ch1.samples, np.float32), x)
        assert r.rms_a == pytest.approx(np.sqrt(np.mean(x.astype(np.float64) ** 2)), rel=1e-6)
        lo, hi = first_sample(t0 - 100, ACC_RATE), first_sample(t1, ACC_RATE)
        y = acc[lo:hi]
        assert (r.z.start, r.z.rate) == (lo, ACC_RATE)
        np.testing.assert_array_equal(np.asarray(r.z.samples, np.float32), y)
        assert r.rms_b == pytest.approx(np.sqrt(np.mean(y.astype(np.float64) ** 2)), rel=1e-6)
        assert (r.smooth_b.start, r.smooth_b.rate) == (lo, ACC_RATE)
        np.testing.assert_allclose(r.smooth_b.samples, lfilter([0.5, 0.5], [1.0], y),
                                   rtol=1e-5, atol=1e-6)


def test_a_continuous_query_syncs_two_signals_across_a_restart(ws, spark, tmp_path,
                                                                recordings):
    """Two continuous runs on one checkpoint (CI's end-to-end case; the steps in every
    order are in the slow test below): the mic ahead, then the accelerometer catching up
    with a control row whose samples both signals had before it came. Each row is emitted
    once, when both recordings cover it, equal to numpy/scipy; a row the mic does not
    cover yet stays in the state."""
    ranges = {1: (200, 600), 2: (800, 1500), 3: (2500, 2900), 4: (1600, 1900), 7: (700, 500)}
    _arrive(tmp_path, "mic_000.wav", "mic_001.wav", "acc_000.wav")
    _define(ws, tmp_path)
    _marks(tmp_path, "c1", [(i, *ranges[i]) for i in (1, 2, 3, 7)])
    assert _run(ws, tmp_path).buffered == 2  # row 2 waits for acc, row 3 for both
    assert _emitted(spark, tmp_path) == [1, 7]
    _arrive(tmp_path, "acc_001.wav", "acc_002.wav")
    _marks(tmp_path, "c2", [(4, *ranges[4])])
    assert _run(ws, tmp_path).buffered == 1  # row 3 waits for the mic
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.id for r in rows) == [1, 2, 4, 7]  # once each
    _check(rows, recordings, ranges)


@pytest.mark.slow  # four continuous runs with signal functions: 70-120 s at load ~10
def test_a_control_row_waits_for_every_signal(ws, spark, tmp_path, recordings):
    """Steps: the mic ahead, then the accelerometer ahead, then the mic catching up with
    control rows arriving with it; control rows arriving before the samples they need and
    after; each step a run of its own from the checkpoint (a restart). Every row is
    emitted exactly once, in the step where the second signal covers its range, and
    equals numpy/scipy over the samples written. A file then landing out of timeline
    order in the second signal fails the query, naming it."""
    ranges = {1: (200, 600), 2: (800, 1500), 3: (2500, 2900), 4: (1600, 1900),
              5: (3500, 3900), 6: (3800, 4500), 7: (700, 500)}
    # 1. mic 0-2 s, acc 0-1 s. Row 1 is covered by both; row 2 by the mic only (acc's
    # range ends at 1500 ms), row 3 by neither; row 7's range is reversed: NULL segments,
    # released at once.
    _arrive(tmp_path, "mic_000.wav", "mic_001.wav", "acc_000.wav")
    _define(ws, tmp_path)
    _marks(tmp_path, "c1", [(i, *ranges[i]) for i in (1, 2, 3, 7)])
    assert _run(ws, tmp_path).buffered == 2
    assert _emitted(spark, tmp_path) == [1, 7]
    # 2. the accelerometer ahead (0-4 s), no new control row: its files alone run a batch;
    # row 2 now has both, row 3 still waits for the mic
    _arrive(tmp_path, "acc_001.wav", "acc_002.wav", "acc_003.wav")
    assert _run(ws, tmp_path).buffered == 1
    assert _emitted(spark, tmp_path) == [1, 2, 7]
    # 3. the mic's last 2 s and control rows: row 4 over samples both have had for a
    # while, row 5 over the mic's new samples, row 6 past both recordings' end (waits)
    _arrive(tmp_path, "mic_002.wav", "mic_003.wav")
    _marks(tmp_path, "c2", [(i, *ranges[i]) for i in (4, 5, 6)])
    assert _run(ws, tmp_path).buffered == 1
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.id for r in rows) == [1, 2, 3, 4, 5, 7]  # once each
    assert all(r._progress is not None for r in rows)
    _check(rows, recordings, ranges)
    # 4. a file sorting between the accelerometer's first two would move samples used
    shutil.copy(tmp_path / "all" / "acc_000.wav", tmp_path / "acc" / "acc_000a.wav")
    q = ws.stream(QUERY, tmp_path / "out", tmp_path / "ckpt")
    with pytest.raises(WaveSQLError) as err:
        q.await_termination()
    assert err.value.code == "OUT_OF_ORDER_FILE" and "`acc`" in err.value.message
    assert _emitted(spark, tmp_path) == [1, 2, 3, 4, 5, 7]


def test_one_micro_batch_split_waits_for_every_signal(ws, spark, tmp_path, recordings):
    """The split each micro-batch makes (no continuous run, so it stays cheap), carried
    from one call to the next by its state as the runner carries it: a control row goes
    once both recordings -- 1000 Hz and 250 Hz, each its range in its own samples --
    cover it; the signals catch up in turn; each signal's record says how far its files
    went; a file out of order in either signal is refused, naming it."""
    import time

    from wavesql import planner
    from wavesql.dialect import parse_statements
    from wavesql.streaming.planning import plan_continuous
    from wavesql.streaming.sync import sync_split

    ranges = {1: (200, 600), 2: (800, 1500), 3: (2500, 2900), 4: (1600, 1900),
              5: (3500, 3900), 7: (700, 500)}

    def control(*ids):
        return control_rows(spark, ranges, ids)

    def split(rows, state):
        now, waiting, after, placements = sync_split(plan, rows, state, time.time())
        ends = {k: max(p.end_sample for p in v) for k, v in placements.items()}
        assert {k: r["end"] for k, r in after["signals"].items()} == ends
        return (sorted(r.id for r in now.collect()), waiting.cache(),
                {"signal": after}, ends)

    _arrive(tmp_path, "mic_000.wav", "mic_001.wav", "acc_000.wav")
    _define(ws, tmp_path)
    stmt = parse_statements(QUERY)[0]
    plan = plan_continuous(planner.optimize(planner.bind(stmt, ws.catalog,
                                                         ws.env.for_text(QUERY))).relation,
                           stmt)
    # the mic ahead (2 s against 1 s): row 2's acc range (700-1500 ms) is not recorded yet
    now, waiting, state, ends = split(control(1, 2, 3, 7), {})
    assert now == [1, 7] and ends == {"mic": 2 * MIC_RATE, "acc": ACC_RATE}
    # the accelerometer ahead (4 s): row 2 goes, row 4 (both recorded already) too; rows
    # 3 and 5 wait for the mic
    _arrive(tmp_path, "acc_001.wav", "acc_002.wav", "acc_003.wav")
    now, waiting, state, ends = split(waiting.unionByName(control(4, 5)), state)
    assert now == [2, 4] and ends == {"mic": 2 * MIC_RATE, "acc": 4 * ACC_RATE}
    # the mic catches up to 3 s: row 3 (to 2900 ms) goes, row 5 (to 3900 ms) waits
    _arrive(tmp_path, "mic_002.wav")
    now, waiting, state, _ = split(waiting, state)
    assert now == [3] and sorted(r.id for r in waiting.collect()) == [5]
    # a file sorting between the accelerometer's first two would move samples used
    shutil.copy(tmp_path / "all" / "acc_000.wav", tmp_path / "acc" / "acc_000a.wav")
    with pytest.raises(WaveSQLError) as err:
        split(waiting, state)
    assert err.value.code == "OUT_OF_ORDER_FILE" and "`acc`" in err.value.message


def test_what_several_continuous_syncs_refuse(ws, tmp_path, recordings):
    """SYNCs in different SELECTs and signal functions over a channel whose name two
    synced signals share (batch too) are refused before anything
    runs, each saying what to do instead."""
    _arrive(tmp_path, "mic_000.wav", "acc_000.wav")
    _define(ws, tmp_path)
    # the accelerometer again, its channel named as the mic's
    ws.sql(f"CREATE SIGNAL acc1 (ch1 FLOAT) RATE {ACC_RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT wav SEGMENT 64")
    cases = {
        "SELECT c.id, seg_rms(a.ch1) AS ra, seg_rms(b.ch1) AS rb FROM marks c "
        "SYNC JOIN mic a ON RANGE (c.t0, c.t1) SYNC JOIN acc1 b ON RANGE (c.t0, c.t1)":
            "channel `ch1` is the name of another synced channel",
        # (a Kafka signal among several runs: tests/test_kafka_multi_sync.py)
        "SELECT c.id, a.ch1 AS x FROM marks c SYNC JOIN mic a ON RANGE (c.t0, c.t1) "
        "UNION ALL SELECT c.id, b.z AS x FROM marks c SYNC JOIN acc b ON RANGE (c.t0, c.t1)":
            "different SELECTs",
    }
    for text, why in cases.items():
        with pytest.raises(WaveSQLError) as err:
            ws.stream(text, tmp_path / "o", tmp_path / "c")
        assert err.value.code == "NOT_IMPLEMENTED", err.value
        assert why in err.value.message and err.value.hint, err.value


@pytest.mark.slow  # two continuous runs: 17-67 s at load 10-15
def test_a_one_signal_checkpoint_of_the_format_before(ws, spark, tmp_path, recordings):
    """A checkpoint written before several signals were synced -- its signal record the
    state's ``signal`` entry itself, ``{"end", "files"}`` -- resumes a one-signal query:
    rows neither repeated nor lost."""
    from wavesql import storage

    query = "SELECT c.id, a.ch1 FROM marks c SYNC JOIN mic a ON RANGE (c.t0, c.t1)"
    _arrive(tmp_path, "mic_000.wav", "acc_000.wav")
    _define(ws, tmp_path)
    _marks(tmp_path, "c1", [(1, 100, 300), (2, 900, 1300)])
    _run(ws, tmp_path, query)
    state_dir = tmp_path / "ckpt" / "state"
    latest = max((d for d in state_dir.iterdir() if d.name.isdigit()), key=lambda d: int(d.name))
    state = json.loads((latest / "state.json").read_text())
    assert state["signal"]["signals"]["mic"]["end"] == MIC_RATE
    state["signal"] = state["signal"]["signals"]["mic"]  # as the one-signal runner wrote it
    storage.write_text(str(latest / "state.json"), json.dumps(state))
    _arrive(tmp_path, "mic_001.wav")
    _run(ws, tmp_path, query)
    assert _emitted(spark, tmp_path) == [1, 2]


def test_which_checkpoint_records_load(ws, tmp_path, recordings):
    """The per-signal records a checkpoint holds, against the signals a query syncs: the
    format before (one record) loads for one signal and is refused for two; records of
    other signals, of another format or of a Kafka signal are refused, saying why."""
    from wavesql.streaming import sync_state

    _arrive(tmp_path, "mic_000.wav", "acc_000.wav")
    _define(ws, tmp_path)
    mic, acc = ws.catalog.get("mic"), ws.catalog.get("acc")
    record = {"end": 1000, "files": "0" * 64}
    assert sync_state.records({}, [mic, acc]) == {"mic": {"end": None, "files": None},
                                                 "acc": {"end": None, "files": None}}
    assert sync_state.records({"signal": record}, [mic]) == {"mic": record}
    both = {"signal": {"version": 2, "kind": "wav", "signals": {"mic": record, "acc": record}}}
    assert sync_state.records(both, [acc, mic]) == {"mic": record, "acc": record}
    for state, why in [
            ({"signal": record}, "one-signal SYNC (format 1"),
            ({"signal": {"version": 2, "kind": "wav", "signals": {"mic": record}}},
             "records the signals mic; this query syncs acc, mic"),
            ({"signal": {"version": 5, "kind": "wav", "signals": {}}}, "format 5"),
            ({"signal": {"version": 1, "kind": "kafka"}}, "Kafka signal's index")]:
        with pytest.raises(WaveSQLError) as err:
            sync_state.records(state, [mic, acc])
        assert err.value.code == "CHECKPOINT_MISMATCH" and why in err.value.message, err.value
        assert err.value.hint
