"""Several SYNC JOINs in one continuous query with signals read from Kafka (issue 21): a
control stream of files synced with a Kafka signal and a WAV signal, and with two Kafka
signals, on the real broker of ``tests/kafka_broker.py``. Each round sends blocks, files
and control rows, then runs the query to the end of its inputs on one checkpoint (so every
round after the first is a restart). A control row is emitted once, final, in the first
round where every signal covers its range -- waiting for the Kafka signal while the WAV
files cover it, and for the WAV files while the Kafka blocks do --; each segment is
numpy's slice of the samples written here; the blocks that cannot join their signal's
timeline are quarantined under that signal's name."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.test_kafka import _block, _topic

pytestmark = pytest.mark.spark

K_RATE, W_RATE = 1000, 250  # the Kafka signal's rate; the WAV (or second Kafka) signal's
K_SAMPLES, W_SAMPLES = 4000, 1000  # 4 s each
BLOCK = 500  # samples per block of the first Kafka signal (0.5 s)


def first_sample(ms: int, rate: int) -> int:
    """The oracle's time-to-sample rule (README: the first sample at or after the time)."""
    return -((-ms * rate) // 1000)


def _stamp(ms: int) -> str:
    return f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"


def _marks(tmp_path, name: str, rows) -> None:
    """rows: (id, range start ms, range end ms) -> a JSON-lines file of the control."""
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "t0": _stamp(a), "t1": _stamp(b)}) + "\n" for i, a, b in rows))


def _samples(seed: int, channels: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((channels, n)).astype(np.float32)


def _kafka_blocks(x: np.ndarray, size: int, partitions: int) -> list:
    """Block i (samples [i*size, (i+1)*size)) as a record for partition (i // 2) %
    partitions: each partition gets its blocks in sample order, two at a time."""
    return [(None, _block(i, x[:, i:i + size]), (i // size // 2) % partitions)
            for i in range(0, x.shape[1], size)]


def _end_block(x: np.ndarray, at: int, partition: int):
    return (None, _block(at, x[:, :0]), partition)


def _run(ws, spark, tmp_path, query: str):
    """Runs ``query`` to the end of its inputs on the test's checkpoint: the ids in the
    output so far, and the run's reports."""
    q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
    q.await_termination()
    assert q.error is None, q.error
    return {r.id for r in spark.read.parquet(str(tmp_path / "out")).collect()}, q.reports


def _slice(x: np.ndarray, rate: int, t0: int, t1: int):
    """numpy's answer for [t0, t1) ms of a signal whose samples are ``x`` (channels x n)
    from sample 0: (first sample, the channels' samples), or None where the range is
    reversed or not wholly recorded."""
    lo, hi = first_sample(t0, rate), first_sample(t1, rate)
    if hi < lo or lo < 0 or hi > x.shape[1]:
        return None
    return lo, x[:, lo:hi]


def _check_segment(seg, want, channel: int, rate: int, what: str) -> None:
    if want is None:
        assert seg is None, what
        return
    lo, samples = want
    assert (seg.start, seg.rate) == (lo, rate), what
    np.testing.assert_array_equal(np.asarray(seg.samples, np.float32), samples[channel],
                                  err_msg=what)


def _quarantined(spark, tmp_path) -> list:
    return spark.read.parquet(str(tmp_path / "ckpt" / "quarantine")).collect()


def test_a_kafka_signal_and_a_wav_signal_synced_together(ws, spark, kafka, tmp_path):
    """A control stream of JSON files whose rows give each signal a range of its own, a
    2-channel 1 kHz Kafka signal (blocks of 0.5 s over 2 partitions, shuffled) and a 250 Hz
    WAV signal (1 s files), two rounds on one checkpoint. Round 1: the blocks cover 1 s
    (partition 0 reached 1 s, partition 1 2 s), the files 2 s: row 2 waits for Kafka, its
    WAV range covered; row 3 waits for the files, its Kafka range covered. Round 2: the
    other blocks, a late block, a malformed record, the end block and the files to 4 s."""
    from scipy.io import wavfile

    for d in ("acc", "ctl"):
        (tmp_path / d).mkdir()
    x, z = _samples(1, 2, K_SAMPLES), _samples(2, 1, W_SAMPLES)
    topic = _topic(kafka, 2)
    blocks = _kafka_blocks(x, BLOCK, 2)

    def files(*seconds):
        for s in seconds:
            wavfile.write(tmp_path / "acc" / f"acc_{s:03d}.wav", W_RATE,
                          z[0, s * W_RATE:(s + 1) * W_RATE])

    files(0, 1)  # round 1's files (CREATE SIGNAL over a folder wants one)
    ws.sql(f"CREATE SIGNAL kmic (a FLOAT, b FLOAT) RATE {K_RATE} HZ FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 256")
    ws.sql(f"CREATE SIGNAL acc (z FLOAT) RATE {W_RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT wav SEGMENT 64")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP, u0 TIMESTAMP, "
           f"u1 TIMESTAMP) FROM '{tmp_path / 'ctl'}' FORMAT json "
           "EVENT TIME t0 WATERMARK 1 SECOND")
    query = ("SELECT c.id, k.a, k.b, w.z, seg_rms(k.a) AS rms_a FROM marks c "
             "SYNC JOIN kmic k ON RANGE (c.t0, c.t1) SYNC JOIN acc w ON RANGE (c.u0, c.u1)")
    ranges = {  # id -> (Kafka range, WAV range), ms
        1: ((100, 900), (100, 900)), 2: ((800, 1500), (800, 1500)),     # round 1
        3: ((200, 600), (2200, 2900)), 4: ((300, 200), (300, 200)),      # (4: reversed)
        5: ((3100, 3900), (3100, 3900)), 6: ((200, 700), (1200, 1700)),  # round 2
    }

    def marks(name, ids):
        (tmp_path / "ctl" / f"{name}.json").write_text("".join(json.dumps(
            {"id": i, "t0": _stamp(ranges[i][0][0]), "t1": _stamp(ranges[i][0][1]),
             "u0": _stamp(ranges[i][1][0]), "u1": _stamp(ranges[i][1][1])}) + "\n"
            for i in ids))

    rng = np.random.default_rng(3)
    rounds = [
        [blocks[j] for j in rng.permutation(4)],
        [blocks[j] for j in (4, 5, 6, 7)]
        + [(None, _block(200, x[:, 200:700]), 1),  # late: below the 1 s already used
           (None, b"WSB1 not a block", 0),         # malformed
           _end_block(x, K_SAMPLES, 1)],
    ]
    kafka.produce(topic, rounds[0])
    marks("r1", (1, 2, 3, 4))
    first, reports = _run(ws, spark, tmp_path, query)
    assert first == {1, 4}  # 2 waits for Kafka (covered to 1 s), 3 for the files (2 s)
    kafka.produce(topic, rounds[1])
    files(2, 3)
    marks("r2", (5, 6))
    second, more = _run(ws, spark, tmp_path, query)
    reports += more
    assert second == set(ranges)

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(r.id for r in rows) == Counter(list(ranges))  # each row exactly once
    for row in rows:
        (t0, t1), (u0, u1) = ranges[row.id]
        k, w = _slice(x, K_RATE, t0, t1), _slice(z, W_RATE, u0, u1)
        _check_segment(row.a, k, 0, K_RATE, f"row {row.id} a")
        _check_segment(row.b, k, 1, K_RATE, f"row {row.id} b")
        _check_segment(row.z, w, 0, W_RATE, f"row {row.id} z")
        if k is None:
            assert row.rms_a is None
        else:
            assert row.rms_a == pytest.approx(
                np.sqrt(np.mean(k[1][0].astype(np.float64) ** 2)), rel=1e-6)
    bad = _quarantined(spark, tmp_path)
    assert sorted(q._reason.split(":")[0] for q in bad) == ["late", "malformed"]
    assert {q._stream for q in bad} == {"kmic"}
    assert all(q._file.startswith(f"kafka:{topic}/") for q in bad)
    records = sum(len(r) for r in rounds)
    assert sum(r.rows_in for r in reports) == records + len(ranges)
    assert sum(r.quarantined for r in reports) == 2
    assert sum(r.on_time for r in reports) == records + len(ranges) - 2


def test_two_kafka_signals_synced_together(ws, spark, kafka, tmp_path):
    """Two Kafka signals of different rates (1 kHz over 2 partitions, 250 Hz in one), each
    covering its own span, two rounds on one checkpoint: a row waits for the one behind;
    a late block of the second is quarantined under its name; once both end blocks are in,
    a range past both recordings is NULL for both."""
    (tmp_path / "ctl").mkdir()
    x, z = _samples(4, 2, K_SAMPLES), _samples(5, 1, W_SAMPLES)
    t_mic, t_acc = _topic(kafka, 2), _topic(kafka, 1)
    mic, acc = _kafka_blocks(x, BLOCK, 2), _kafka_blocks(z, 125, 1)
    for name, channels, rate, topic in (("kmic", "a FLOAT, b FLOAT", K_RATE, t_mic),
                                        ("kacc", "z FLOAT", W_RATE, t_acc)):
        ws.sql(f"CREATE SIGNAL {name} ({channels}) RATE {rate} HZ FROM KAFKA '{topic}' "
               f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 128")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    query = ("SELECT c.id, k.a, k.b, w.z FROM marks c SYNC JOIN kmic k ON RANGE (c.t0, c.t1) "
             "SYNC JOIN kacc w ON RANGE (c.t0 - INTERVAL 100 MILLISECONDS, c.t1)")
    ranges = {1: (100, 900), 2: (800, 1500),                 # round 1
              3: (3000, 3800), 4: (3500, 4500)}              # round 2 (4: past both ends)
    # round 1: kmic covered to 1 s (partition 0 reached 1 s, 1 reached 2 s), kacc to 2 s
    kafka.produce(t_mic, mic[:4])
    kafka.produce(t_acc, acc[:4])
    _marks(tmp_path, "r1", [(i, *ranges[i]) for i in (1, 2)])
    first, reports = _run(ws, spark, tmp_path, query)
    assert first == {1}  # 2 waits for kmic
    # round 2: the rest of both, their end blocks, and a late block of kacc (0-0.5 s)
    kafka.produce(t_mic, mic[4:] + [_end_block(x, K_SAMPLES, 0)])
    kafka.produce(t_acc, [(None, _block(0, z[:, :125]), 0)] + acc[4:]
                  + [_end_block(z, W_SAMPLES, 0)])
    _marks(tmp_path, "r2", [(i, *ranges[i]) for i in (3, 4)])
    second, more = _run(ws, spark, tmp_path, query)
    reports += more
    assert second == set(ranges)

    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(r.id for r in rows) == Counter(list(ranges))
    for row in rows:
        t0, t1 = ranges[row.id]
        k, w = _slice(x, K_RATE, t0, t1), _slice(z, W_RATE, t0 - 100, t1)
        if row.id == 4:
            assert k is None and w is None  # the oracle agrees the range is past both
        _check_segment(row.a, k, 0, K_RATE, f"row {row.id} a")
        _check_segment(row.b, k, 1, K_RATE, f"row {row.id} b")
        _check_segment(row.z, w, 0, W_RATE, f"row {row.id} z")
    bad = _quarantined(spark, tmp_path)
    assert [(q._stream, q._reason.split(":")[0]) for q in bad] == [("kacc", "late")]
    assert bad[0]._file == f"kafka:{t_acc}/0/4"  # the record after the first four
    records = 4 + 4 + (len(mic) - 4 + 1) + (len(acc) - 4 + 2)
    assert sum(r.rows_in for r in reports) == records + len(ranges)
    assert sum(r.quarantined for r in reports) == 1


def test_what_stays_refused_and_which_checkpoints_load(ws, tmp_path, monkeypatch):
    """With a Kafka signal among several SYNCs: windows around them and SYNCs in different
    SELECTs are refused, each saying what (an ORDER BY in a stateful function's per-key
    OVER too); a checkpoint's SYNC state loads only for the signals and kinds it records (a lone
    Kafka signal's index of the format before, as the state itself, for that query only)."""
    from scipy.io import wavfile

    from wavesql.errors import WaveSQLError
    from wavesql.sources import kafka
    from wavesql.streaming import kafka_sync, sync_state

    # CREATE SIGNAL ... FROM KAFKA asks the broker for the topic; nothing here reads it, so
    # no broker is needed: the topic is taken as there
    monkeypatch.setattr(kafka, "describe_topic", lambda spark, options, topic: 1)
    for d in ("acc", "ctl"):
        (tmp_path / d).mkdir()
    wavfile.write(tmp_path / "acc" / "acc_000.wav", W_RATE, np.zeros(W_RATE, np.float32))
    ws.sql(f"CREATE SIGNAL kmic (a FLOAT) RATE {K_RATE} HZ FROM KAFKA 'kmic' "
           "OPTIONS (bootstrap = 'localhost:9') FORMAT samples SEGMENT 128")
    ws.sql(f"CREATE SIGNAL acc (z FLOAT) RATE {W_RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT wav SEGMENT 64")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    both = ("FROM marks c SYNC JOIN kmic k ON RANGE (c.t0, c.t1) "
            "SYNC JOIN acc w ON RANGE (c.t0, c.t1)")
    cases = {
        # (windows over a SYNC subquery passing c.t0 through run, as over a SYNC CTE:
        # tests/test_derived_forms.py; an OVER window in its own SELECT beside a column
        # Spark would name after its text is not cut, and stays refused)
        f"SELECT seg_rms(w.z), count(*) OVER (ORDER BY c.t0 ROWS 2 PRECEDING) AS n {both}":
            "with windows",
        f"SELECT x.id FROM (SELECT c.id, k.a {both}) x UNION ALL "
        "SELECT c.id FROM marks c SYNC JOIN kmic k ON RANGE (c.t0, c.t1)": "different SELECTs",
    }
    for text, why in cases.items():
        with pytest.raises(WaveSQLError) as err:
            ws.stream(text, tmp_path / "o", tmp_path / "c")
        assert err.value.code == "NOT_IMPLEMENTED", err.value
        assert why in err.value.message and err.value.hint, err.value
    # a per-key order runs (tests/test_sync_keyed_state.py); an ORDER BY in it is refused:
    # the order is the ranges' own
    with pytest.raises(WaveSQLError) as err:
        ws.stream("SELECT c.id, iir(k.a, ARRAY(0.5D, 0.5D), ARRAY(1.0D)) OVER (PARTITION BY "
                  f"c.id ORDER BY c.t0) AS f {both}", tmp_path / "o", tmp_path / "c")
    assert err.value.code == "INVALID_OPTION" and "PARTITION BY only" in err.value.message

    k, w = ws.catalog.get("kmic"), ws.catalog.get("acc")
    lone = {"version": 1, "kind": "kafka", "reached": {"0": 500}, "covered": 500}
    assert sync_state.records({"signal": lone}, [k]) == {"kmic": lone}
    assert sync_state.records({}, [k, w]) == {"kmic": {}, "acc": {"end": None, "files": None}}
    record = {"end": 250, "files": "0" * 64}
    now = {"version": 3, "signals": {"kmic": lone, "acc": {"kind": "files", **record}}}
    assert sync_state.records({"signal": now}, [w, k]) == {"kmic": lone, "acc": record}
    for state, why in [
            (lone, "is a Kafka signal's index (one Kafka signal synced alone)"),
            ({"version": 2, "kind": "wav", "signals": {"kmic": record, "acc": record}},
             "records signal kmic as read from files"),
            ({"version": 3, "signals": {"kmic": {"kind": "files", **record},
                                        "acc": {"kind": "files", **record}}},
             "records signal kmic as read from files; it is now read from Kafka"),
            ({"version": 3, "signals": {"kmic": lone}}, "records the signals kmic; this "
                                                         "query syncs acc, kmic")]:
        with pytest.raises(WaveSQLError) as err:
            sync_state.records({"signal": state}, [k, w])
        assert err.value.code == "CHECKPOINT_MISMATCH" and why in err.value.message, err.value
    with pytest.raises(WaveSQLError) as err:  # a Kafka index of another format
        kafka_sync.advance(None, k, {**lone, "version": 9}, None)
    assert err.value.code == "CHECKPOINT_MISMATCH" and "format 9" in err.value.message


@pytest.mark.slow  # four runs on one checkpoint: minutes on a loaded machine
def test_random_rounds_over_two_kafka_signals_and_a_wav_signal(ws, spark, kafka, tmp_path):
    """Three signals -- Kafka (1 kHz, 2 partitions), WAV (250 Hz, 1 s files), Kafka (500
    Hz, 1 partition) -- arriving in four random steps, with random control rows (some
    reversed, some past the Kafka signals' ends) each step. Each row is emitted once, in
    the first step where every signal covers its range by the README's rules (a Kafka
    signal: the least end any partition has reached, everything once its end block is in;
    WAV: its files' end), its segments numpy's slices."""
    from scipy.io import wavfile

    for d in ("acc", "ctl"):
        (tmp_path / d).mkdir()
    rng = np.random.default_rng(7)
    x, z, y = _samples(8, 1, 5000), _samples(9, 1, 6 * W_RATE), _samples(10, 1, 2500)
    t_mic, t_q = _topic(kafka, 2), _topic(kafka, 1)
    mic = [(None, _block(i, x[:, i:i + 500]), (i // 500) % 2) for i in range(0, 5000, 500)]
    qq = [(None, _block(i, y[:, i:i + 250]), 0) for i in range(0, 2500, 250)]

    def files(upto, since=0):
        for s in range(since, upto):
            wavfile.write(tmp_path / "acc" / f"acc_{s:03d}.wav", W_RATE,
                          z[0, s * W_RATE:(s + 1) * W_RATE])

    # per step: blocks of mic and of q sent so far, files so far
    steps = [(int(rng.integers(2, 5)), int(rng.integers(1, 4)), 1)]
    for _ in range(2):
        m, q, f = steps[-1]
        steps.append((int(rng.integers(m, 10)), int(rng.integers(q, 10)),
                      int(rng.integers(f, 6))))
    steps.append((10, 10, 6))
    files(steps[0][2])
    ws.sql(f"CREATE SIGNAL kmic (a FLOAT) RATE {K_RATE} HZ FROM KAFKA '{t_mic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 256")
    ws.sql(f"CREATE SIGNAL acc (z FLOAT) RATE {W_RATE} HZ FROM '{tmp_path / 'acc'}' "
           "FORMAT wav SEGMENT 64")
    ws.sql(f"CREATE SIGNAL kq (y FLOAT) RATE 500 HZ FROM KAFKA '{t_q}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 100")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT json EVENT TIME ts WATERMARK 1 SECOND")
    query = ("SELECT c.id, k.a, w.z, q.y FROM marks c SYNC JOIN kmic k ON RANGE (c.t0, c.t1) "
             "SYNC JOIN acc w ON RANGE (c.t0, c.t1) SYNC JOIN kq q ON RANGE (c.t0, c.t1)")

    def covered(step: int):
        """Each signal's coverage after ``step`` (ms; None: everything), the README's way."""
        m, q, f = steps[step]
        reached = [max([i + 500 for i in range(0, m * 500, 500) if (i // 500) % 2 == p],
                       default=None) for p in (0, 1)]
        mic_ms = None if m == 10 else min(r for r in reached if r is not None)
        q_ms = None if q == 10 else q * 250 * 2
        return mic_ms, f * 1000, q_ms

    ranges, sent_at, expected_at = {}, {}, {}
    sent = [0, 0, steps[0][2]]
    for step, (m, q, f) in enumerate(steps):
        kafka.produce(t_mic, mic[sent[0]:m] + ([_end_block(x, 5000, 1)] if m == 10 else []))
        kafka.produce(t_q, qq[sent[1]:q] + ([_end_block(y, 2500, 0)] if q == 10 else []))
        files(f, sent[2])
        sent = [m, q, f]
        rows = []
        for _ in range(6):
            i = len(ranges) + 1
            t0 = int(rng.integers(0, 5800))
            t1 = t0 - 50 if rng.random() < 0.15 else min(6000, t0 + int(rng.integers(50, 1500)))
            ranges[i], sent_at[i] = (t0, t1), step
            rows.append(i)
        (tmp_path / "ctl" / f"s{step}.json").write_text("".join(json.dumps(
            {"id": i, "t0": _stamp(ranges[i][0]), "t1": _stamp(ranges[i][1]),
             "ts": f"1970-01-01T00:01:{10 * step + 1:02d}Z"}) + "\n" for i in rows))
        got, _ = _run(ws, spark, tmp_path, query)
        cover = covered(step)
        for i in ranges:
            t0, t1 = ranges[i]
            if i not in expected_at and (t1 < t0 or all(c is None or t1 <= c for c in cover)):
                expected_at[i] = step
        assert got == set(expected_at), step

    assert set(expected_at) == set(ranges)
    assert sum(expected_at[i] > sent_at[i] for i in ranges) >= 6  # (12 rows wait here)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(r.id for r in rows) == Counter(list(ranges))
    for row in rows:
        t0, t1 = ranges[row.id]
        _check_segment(row.a, _slice(x, K_RATE, t0, t1), 0, K_RATE, f"row {row.id} a")
        _check_segment(row.z, _slice(z, W_RATE, t0, t1), 0, W_RATE, f"row {row.id} z")
        _check_segment(row.y, _slice(y, 500, t0, t1), 0, 500, f"row {row.id} y")


@pytest.mark.slow  # two continuous runs
def test_a_lone_kafka_signals_checkpoint_of_the_format_before(ws, spark, kafka, tmp_path):
    """A checkpoint written when a Kafka signal was synced only alone -- its index the
    state's ``signal`` entry itself -- resumes the one-signal query: rows neither repeated
    nor lost, their samples numpy's."""
    from wavesql import storage

    (tmp_path / "ctl").mkdir()
    x = _samples(11, 1, 4000)
    topic = _topic(kafka, 1)
    blocks = [(None, _block(i, x[:, i:i + 500]), 0) for i in range(0, 4000, 500)]
    ws.sql(f"CREATE SIGNAL kmic (a FLOAT) RATE {K_RATE} HZ FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 256")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    query = "SELECT c.id, k.a FROM marks c SYNC JOIN kmic k ON RANGE (c.t0, c.t1)"
    ranges = {1: (100, 900), 2: (1500, 2500), 3: (3000, 3500)}
    kafka.produce(topic, blocks[:4])
    _marks(tmp_path, "c1", [(i, *ranges[i]) for i in (1, 2)])
    assert _run(ws, spark, tmp_path, query)[0] == {1}
    state_dir = tmp_path / "ckpt" / "state"
    latest = max((d for d in state_dir.iterdir() if d.name.isdigit()), key=lambda d: int(d.name))
    state = json.loads((latest / "state.json").read_text())
    assert state["signal"]["version"] == 4  # (format 4: format 3 + merged query records)
    state["signal"] = state["signal"]["signals"]["kmic"]  # as the lone-Kafka runner wrote it
    assert state["signal"]["kind"] == "kafka" and state["signal"]["covered"] == 2000
    storage.write_text(str(latest / "state.json"), json.dumps(state))
    kafka.produce(topic, blocks[4:] + [_end_block(x, 4000, 0)])
    _marks(tmp_path, "c2", [(3, *ranges[3])])
    assert _run(ws, spark, tmp_path, query)[0] == set(ranges)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(r.id for r in rows) == Counter(list(ranges))
    for row in rows:
        _check_segment(row.a, _slice(x, K_RATE, *ranges[row.id]), 0, K_RATE, f"row {row.id}")
