"""Continuous OVER windows, RESAMPLE, ASOF joins and EMIT CHANGES over Kafka streams (issue
24: every continuous feature works over Kafka as over files), on the real broker of
``tests/kafka_broker.py``, against pandas/numpy oracles computed here.

Each stream is a 2-partition topic produced in rounds, the query run to completion
(``availableNow``) after each round on one checkpoint; rows arrive out of order within the
WATERMARK and never late. A last round sends a punctuation record (``PROGRESS COLUMN``)
into *every* partition: the stream's progress is the minimum over its partitions, so only
then is every result final, and the output must equal the oracle over all rows -- each
result exactly once.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_kafka import SECOND, T0_US, _iso, _micros, _topic

pytestmark = pytest.mark.spark

ROUNDS = 2
END_S = 10_000  # the punctuation's promise: far past every row


def _rounds(seed: int, n: int, columns=("v",), keys="abc"):
    """``ROUNDS`` frames of ``n`` rows ``(k, <columns>, ts, p)``: round i spans event times
    [30 i, 30 i + 20) s, shuffled within 1.5 s, partition ``p`` drawn per row; event times
    unique (microseconds after T0)."""
    rng = np.random.default_rng(seed)
    frames = []
    for i in range(ROUNDS):
        ts = np.sort(rng.choice(np.arange(0, 20_000, 7), n, replace=False)) * 1000
        ts += i * 30 * SECOND
        order = np.argsort(ts + rng.integers(0, 1_500_000, n))
        frame = pd.DataFrame({"k": rng.choice(list(keys), n), "ts": ts,
                              "p": rng.integers(0, 2, n)})
        for c in columns:
            frame[c] = rng.integers(0, 100, n)
        frames.append(frame.iloc[order].reset_index(drop=True))
    return frames


def _produce(kafka, topic, frame, columns=("v",)):
    kafka.produce(topic, [(r.k, json.dumps({"k": r.k, "ts": _iso(r.ts),
                                            **{c: int(getattr(r, c)) for c in columns}}),
                           int(r.p)) for r in frame.itertuples()])


def _punctuate(kafka, topic, last_us: int):
    """One punctuation record per partition, promising progress to END_S."""
    value = json.dumps({"k": None, "ts": _iso(last_us), "done": _iso(END_S * SECOND)})
    kafka.produce(topic, [(None, value, p) for p in range(2)])


def _create(ws, kafka, name, topic, columns=("v",)):
    cols = ", ".join(f"{c} INT" for c in columns)
    ws.sql(f"CREATE STREAM {name} (k STRING, {cols}, ts TIMESTAMP, done TIMESTAMP) "
           f"FROM KAFKA '{topic}' OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json "
           "EVENT TIME ts WATERMARK 2 SECONDS PROGRESS COLUMN done")


def _run_rounds(ws, kafka, tmp_path, sql, feeds, progress_to_the_end=True):
    """Produce each round of every ``(topic, frames, columns)`` feed, run ``sql`` after it;
    then the punctuation, and a last run. Returns the output rows and the reports.
    ``progress_to_the_end``: the query's progress is then the punctuation's (not so for a
    RESAMPLE, whose series end at their last rows: its progress stops there)."""
    reports = []
    for i in range(ROUNDS + 1):
        for topic, frames, columns in feeds:
            if i < ROUNDS:
                _produce(kafka, topic, frames[i], columns)
            else:
                _punctuate(kafka, topic, int(max(f.ts.max() for f in frames)))
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
        cq.await_termination()
        reports += cq.reports
    assert sum(r.late for r in reports) == 0
    if progress_to_the_end:
        assert cq.progress_us == T0_US + END_S * SECOND
    return ws.spark.read.parquet(str(tmp_path / "out")).collect(), reports


def _one_stream(ws, kafka, tmp_path, seed: int, n: int, sql: str, **kw):
    """``sql`` over one 2-partition stream ``ev`` of ``_rounds(seed, n)``, run round by
    round: ``(output rows, reports, every row sent)``."""
    topic = _topic(kafka, 2)
    frames = _rounds(seed, n)
    _create(ws, kafka, "ev", topic)
    rows, reports = _run_rounds(ws, kafka, tmp_path, sql, [(topic, frames, ("v",))], **kw)
    return rows, reports, pd.concat(frames, ignore_index=True)


def test_over_window_per_key_over_kafka(ws, kafka, tmp_path):
    sql = ("SELECT k, ts, v, sum(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN "
           "INTERVAL 5 SECONDS PRECEDING AND CURRENT ROW) AS s FROM ev")
    rows, reports, every = _one_stream(ws, kafka, tmp_path, 31, 80, sql)
    want = Counter()
    for r in every.itertuples():
        same = every[(every.k == r.k) & (every.ts >= r.ts - 5 * SECOND) & (every.ts <= r.ts)]
        want[(r.k, T0_US + int(r.ts), int(r.v), int(same.v.sum()))] += 1
    got = Counter((r.k, _micros(r.ts), r.v, r.s) for r in rows)
    assert got == want
    assert sum(r.rows_in for r in reports) == len(every) + 2  # the two punctuation records


def test_resample_per_key_over_kafka(ws, kafka, tmp_path):
    sql = "SELECT k, ts, v FROM RESAMPLE(ev, ts, INTERVAL 1 SECOND, 'prev' PARTITION BY k) r"
    rows, _, every = _one_stream(ws, kafka, tmp_path, 32, 60, sql, progress_to_the_end=False)
    want = Counter()
    for k, g in every.groupby("k"):
        t = np.sort(g.ts.to_numpy()) + T0_US
        v = g.sort_values("ts").v.to_numpy()
        grid = np.arange(-(-t[0] // SECOND) * SECOND, t[-1] + 1, SECOND)
        for point in grid:  # 'prev': the last row at or before the point
            want[(k, int(point), int(v[np.searchsorted(t, point, side="right") - 1]))] += 1
    got = Counter((r.k, _micros(r.ts), r.v) for r in rows)
    assert len(want) > 60
    assert got == want


def test_asof_join_of_two_kafka_streams(ws, kafka, tmp_path):
    left, right = _topic(kafka, 2), _topic(kafka, 2)
    trades, quotes = _rounds(33, 60), _rounds(34, 60, columns=("bid",))
    _create(ws, kafka, "trades", left)
    _create(ws, kafka, "quotes", right, columns=("bid",))
    sql = ("SELECT t.k, t.ts, t.v, q.bid FROM trades t ASOF JOIN quotes q "
           "ON t.k = q.k AND t.ts >= q.ts")
    rows, _ = _run_rounds(ws, kafka, tmp_path, sql, [(left, trades, ("v",)),
                                                     (right, quotes, ("bid",))])
    a = pd.concat(trades, ignore_index=True).sort_values("ts")
    b = pd.concat(quotes, ignore_index=True).sort_values("ts")
    joined = pd.merge_asof(a, b[["k", "ts", "bid"]], on="ts", by="k", direction="backward",
                           allow_exact_matches=True).dropna(subset=["bid"])
    want = Counter((r.k, T0_US + int(r.ts), int(r.v), int(r.bid)) for r in joined.itertuples())
    got = Counter((r.k, _micros(r.ts), r.v, r.bid) for r in rows)
    assert sum(want.values()) > 60
    assert got == want



@pytest.mark.slow
def test_asof_join_of_a_cte_and_a_view_over_kafka_streams(ws, kafka, tmp_path):
    """The ASOF JOIN above with each side a view row by row over its Kafka stream (issue
    21): a CTE keeping even ``v`` and computing a column, a catalog view keeping ``bid >
    20``; rounds across restarts, punctuation to the end: merge_asof over the rows the
    views keep."""
    left, right = _topic(kafka, 2), _topic(kafka, 2)
    trades, quotes = _rounds(36, 60), _rounds(37, 60, columns=("bid",))
    _create(ws, kafka, "trades", left)
    _create(ws, kafka, "quotes", right, columns=("bid",))
    ws.sql("CREATE VIEW qv AS SELECT k, bid, ts FROM quotes WHERE bid > 20")
    sql = ("WITH t AS (SELECT k, v * 3 AS w, ts FROM trades WHERE v % 2 = 0) "
           "SELECT t.k, t.ts, t.w, q.bid FROM t ASOF JOIN qv q "
           "ON t.k = q.k AND t.ts >= q.ts")
    rows, _ = _run_rounds(ws, kafka, tmp_path, sql, [(left, trades, ("v",)),
                                                     (right, quotes, ("bid",))])
    a = pd.concat(trades, ignore_index=True).sort_values("ts")
    a = a[a.v % 2 == 0].assign(w=lambda f: f.v * 3)
    b = pd.concat(quotes, ignore_index=True).sort_values("ts")
    b = b[b.bid > 20]
    joined = pd.merge_asof(a, b[["k", "ts", "bid"]], on="ts", by="k", direction="backward",
                           allow_exact_matches=True).dropna(subset=["bid"])
    want = Counter((r.k, T0_US + int(r.ts), int(r.w), int(r.bid)) for r in joined.itertuples())
    got = Counter((r.k, _micros(r.ts), r.w, r.bid) for r in rows)
    assert sum(want.values()) > 30
    assert got == want

def test_emit_changes_over_kafka(ws, kafka, tmp_path):
    """Tumbling 10-s counts per key with EMIT CHANGES: early rows (``_final`` false) as
    rows come, one final row per window and key equal to pandas' count, never an early
    count above the final one."""
    sql = ("SELECT k, count(*) AS n FROM ev [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k "
           "EMIT CHANGES")
    rows, _, every = _one_stream(ws, kafka, tmp_path, 35, 80, sql)
    end = -(-(every.ts + T0_US) // (10 * SECOND)) * 10 * SECOND  # window (t - 10 s, t]
    want = Counter({(int(t), k): len(g) for (t, k), g in every.assign(t=end).groupby(["t", "k"])})
    final = [r for r in rows if r._final]
    assert Counter((_micros(r._time), r.k) for r in final) == Counter(want.keys())
    assert {(_micros(r._time), r.k): r.n for r in final} == dict(want)
    early = [r for r in rows if not r._final]
    assert early, "EMIT CHANGES gave no early rows"
    assert all(r.n <= want[(_micros(r._time), r.k)] for r in early)


def test_late_rows_into_a_kafka_sink(ws, kafka, tmp_path):
    """``LATE INTO <Kafka sink>``, from a continuous query and from an INSERT INTO job: the
    rows below the progress already promised arrive on the topic (``_stream``, ``_reason``,
    ``_row``), one keyed record each, as pandas picks them."""
    source, job_source = _topic(kafka, 1), _topic(kafka, 1)
    results, late_topic = _topic(kafka), _topic(kafka)
    for name, topic in (("ev", source), ("ev2", job_source)):
        ws.sql(f"CREATE STREAM {name} (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' "
               f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json EVENT TIME ts "
               "WATERMARK 2 SECONDS")
    for name, topic in (("out", results), ("late_rows", late_topic)):
        ws.sql(f"CREATE SINK {name} TO KAFKA '{topic}' OPTIONS (bootstrap = "
               f"'{kafka.bootstrap}') FORMAT json")
    first = pd.DataFrame({"k": ["a"] * 5, "v": range(5), "ts": np.arange(5) * 5 * SECOND})
    second = pd.DataFrame({"k": ["b"] * 6, "v": range(10, 16),
                           "ts": np.array([1, 30, 12, 21, 19, 40]) * SECOND})
    progress = first.ts.max() - 2 * SECOND  # promised after the first micro-batch: 18 s
    want = sorted(int(v) for v in second[second.ts < progress].v)  # 10, 12 (1 s, 12 s)
    assert want == [10, 12]
    sql = "SELECT k, v, ts FROM ev LATE INTO late_rows"

    def send(topic, frame):
        kafka.produce(topic, [(r.k, json.dumps({"k": r.k, "v": int(r.v), "ts": _iso(r.ts)}),
                               0) for r in frame.itertuples()])

    for frame in (first, second):
        send(source, frame)
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
        cq.await_termination()
    sent = kafka.consume(late_topic)
    rows = [json.loads(value) for _, _, _, value in sent]
    assert sorted(json.loads(r["_row"])["v"] for r in rows) == want
    assert all(r["_stream"] == "ev" and r["_reason"] for r in rows)
    assert "_final" not in rows[0]
    keys = [key for _, _, key, _ in sent]
    assert len(set(keys)) == len(keys)

    # the same from an INSERT INTO job into a Kafka sink, run once per arrival (a catalog
    # on disk keeps its jobs' checkpoints), on a topic of its own
    for frame in (first, second):
        send(job_source, frame)
        ws.sql("INSERT INTO out SELECT k, v, ts FROM ev2 LATE INTO late_rows")
    again = [json.loads(v) for _, _, _, v in kafka.consume(late_topic)]
    assert sorted(json.loads(r["_row"])["v"] for r in again) == sorted(want + want)
