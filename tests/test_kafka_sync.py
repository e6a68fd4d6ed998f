"""A continuous SYNC JOIN over a signal published to Kafka as sample blocks, its control an
event stream in Kafka too (issue 24), on the real broker of ``tests/kafka_broker.py``:
every control row synced exactly once, as soon as the blocks cover its range, each
segment numpy's slice of the signal; the blocks that cannot join the timeline quarantined.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from tests.test_kafka import RATE, _block, _iso, _signal_blocks, _topic

pytestmark = pytest.mark.spark

GAP_AT, GAP = 8_000, 2_000  # blocks from sample 8,000 on are placed 2,000 samples later


def _at(i: int) -> int:
    return i if i < GAP_AT else i + GAP


def _expected(x, lo: int, hi: int):
    """numpy's answer for the range [lo, hi) of the timeline: the two channels' samples,
    or None where the range is not wholly recorded (a gap, past the end) or reversed."""
    end = 12_000 + GAP
    if hi <= lo or lo < 0 or hi > end or (lo < GAP_AT + GAP and hi > GAP_AT):
        return None
    src = slice(lo, hi) if hi <= GAP_AT else slice(lo - GAP, hi - GAP)
    return x[0, src], x[1, src]


def test_continuous_sync_over_a_kafka_signal_with_a_kafka_control(ws, spark, kafka, tmp_path):
    """Three rounds, the query run to the end of both topics after each on one checkpoint:
    blocks shuffled over 2 partitions (a row waits until every partition has passed its
    range's end), a real gap, a resent block, a late block and a malformed record, then the
    end block, which releases the rows past the recording's end (NULL, MISSING NULL)."""
    signal_topic, control_topic = _topic(kafka, 2), _topic(kafka)
    x, blocks = _signal_blocks(11, 12_000)
    records = [(None, _block(_at(i), b), (i // 1000) % 2) for i, b in blocks]
    rng = np.random.default_rng(12)
    ranges = {  # id -> (first sample, end sample), in the round its control row is sent
        1: [(0, (0, 10)), (1, (100, 4_999)), (2, (4_321, 5_000)), (3, (4_500, 5_600)),
            (4, (7_990, 10_010)), (5, (300, 200)), (6, (9_000, 9_500))],
        2: [(7, (5_000, 8_000)), (8, (10_100, 10_900)), (9, (12_500, 14_100))],
        3: [(10, (13_000, 14_000)), (11, (2_000, 2_001))],
    }
    rounds = [
        # blocks 0-5: partition 0 reaches 5,000 and partition 1 6,000 -> covered to 5,000
        [records[j] for j in rng.permutation(6)],
        # blocks 6-8: partition 0 reaches 11,000 (block 8 is past the gap), 1 reaches 8,000
        [records[j] for j in (6, 7, 8)]
        + [records[7],                                             # sent again
           (None, _block(2_500, x[:, :700] * 0), 0),               # late: 2500..3199
           (None, b"WSB1 not a block", 1)],                        # malformed
        # blocks 9-11 and the end block
        [records[j] for j in (11, 9, 10)] + [(None, _block(12_000 + GAP, x[:, :0]), 1)],
    ]
    ws.sql(f"CREATE SIGNAL mic (a FLOAT, b FLOAT) RATE {RATE} HZ FROM KAFKA '{signal_topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT samples SEGMENT 512")
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 BIGINT, t1 BIGINT, ts TIMESTAMP) FROM KAFKA "
           f"'{control_topic}' OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json "
           "EVENT TIME ts WATERMARK 1 SECOND")
    sql = "SELECT m.id, s.a, s.b FROM marks m SYNC JOIN mic s ON RANGE (m.t0, m.t1)"
    synced_by_round, reports = [], []
    for r, batch in enumerate(rounds, start=1):
        kafka.produce(signal_topic, batch)
        kafka.produce(control_topic, [(None, json.dumps(
            {"id": i, "t0": lo, "t1": hi, "ts": _iso(1_000_000 * i)}), 0)
            for i, (lo, hi) in ranges[r]])
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
        cq.await_termination()
        assert cq.error is None, cq.error
        reports += cq.reports
        synced_by_round.append({row.id for row in spark.read.parquet(
            str(tmp_path / "out")).collect()})
    # each row synced in the first round whose blocks cover its range
    assert synced_by_round[0] == {0, 1, 2, 5}  # covered to 5,000; 5 is reversed (NULL)
    assert synced_by_round[1] - synced_by_round[0] == {3, 7}  # covered to 8,000
    assert synced_by_round[2] == set(range(12))  # the end block: everything
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert Counter(r.id for r in rows) == Counter(range(12))  # each row exactly once
    wanted = {i: lohi for rs in ranges.values() for i, lohi in rs}
    for row in rows:
        lo, hi = wanted[row.id]
        expect = _expected(x, lo, hi)
        if expect is None:
            assert row.a is None and row.b is None, row.id
            continue
        assert row.a.start == lo and row.b.start == lo, row.id
        np.testing.assert_array_equal(np.asarray(row.a.samples, np.float32), expect[0])
        np.testing.assert_array_equal(np.asarray(row.b.samples, np.float32), expect[1])
    quarantined = spark.read.parquet(str(tmp_path / "ckpt" / "quarantine")).collect()
    reasons = sorted(q._reason.split(":")[0].split(" (")[0] for q in quarantined)
    assert reasons == ["a resent copy of kafka", "late", "malformed"], reasons
    assert all(q._file.startswith(f"kafka:{signal_topic}/") for q in quarantined)
    sent = sum(len(b) for b in rounds) + sum(len(v) for v in ranges.values())
    assert sum(r.rows_in for r in reports) == sent
    assert sum(r.quarantined for r in reports) == 3
    assert sum(r.on_time for r in reports) == sent - 3
