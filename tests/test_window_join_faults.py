"""Continuous per-instant joins of windowed streams on Spark's state store (issue 26) under
faults and progress from outside the rows: ``wavesql run`` SIGKILLed at a named commit
stage (``WAVESQL_FAULT``, wavesql/faults.py) and run again; punctuation rows (``PROGRESS
COLUMN``) and a ``HEARTBEAT`` on an idle stream; both streams read from Kafka.

The oracle is the CQL reference evaluator (tests/cql_reference.py, brute force from the
definitions, nothing of WaveSQL's) over every data row that is not late, kept to the
instants below the progress of the moment -- with each stream's progress computed here
from what each micro-batch reads: the largest event time minus the WATERMARK, the largest
punctuation (``done``), for a Kafka topic the smallest over its partitions; a row is late
below its own stream's progress of the micro-batch it arrives in. A punctuation row is
counted, never joined, never late.
"""

from __future__ import annotations

import json
import os
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests import cql_reference as ref
from tests.test_run_files import run_in_process, run_killed_at
from tests.test_stateful_asof import (SECOND, WATERMARK, _draw, _files, _in_files,
                                      oracle_late, oracle_progress)

WA, WB = ref.Window("RANGE", 3 * SECOND), ref.Window("RANGE", 2 * SECOND)
SQL = ("ISTREAM (SELECT t.k, t.v AS id, q.v AS qid FROM trades [RANGE 3 SECONDS] t, "
       "quotes [RANGE 2 SECONDS] q WHERE t.k = q.k)")


# -- the oracle ----------------------------------------------------------------------------
def inner(A, B):
    """The query, as the reference evaluator runs it: pairs of equal (non-NULL) keys."""
    return [(a["k"], a["id"], b["id"]) for a in A for b in B
            if a["k"] is not None and a["k"] == b["k"]]


def left_outer(A, B):
    out = []
    for a in A:
        hits = [b["id"] for b in B if a["k"] is not None and a["k"] == b["k"]]
        out += [(a["k"], a["id"], h) for h in hits] or [(a["k"], a["id"], None)]
    return out


def reference(a: pd.DataFrame, b: pd.DataFrame, below: int | None, query=inner,
              kind: str = "ISTREAM", wa=WA, wb=WB) -> Counter:
    """``kind(query(a [wa], b [wb]))`` over the rows given, at the instants below ``below``
    (the query's progress: the instants final by then)."""
    cols = ("k", "id", "ts")
    rows = ref.evaluate_join([(a[list(cols)].to_dict("records"), "ts", wa, cols),
                              (b[list(cols)].to_dict("records"), "ts", wb, cols)], query, kind)
    return Counter({r: n for r, n in rows.items() if below is not None and r[0] < below})


def _micros(value) -> int:
    return int((pd.Timestamp(value) - pd.Timestamp(0)) // pd.Timedelta(microseconds=1))


def got_rows(rows, shift: int = 0) -> Counter:
    """Output rows as the reference's ``(instant, k, id, qid)``, instants ``shift`` µs back."""
    return Counter((_micros(r["_time"]) - shift, r["k"], int(r["id"]),
                    None if r["qid"] is None or r["qid"] != r["qid"] else int(r["qid"]))
                   for r in rows)


def accounted(records: list[dict]) -> None:
    """Every micro-batch accounts for each input row five ways."""
    assert records
    for r in records:
        assert r["rows_in"] == (r["on_time"] + r["late"] + r["no_time"] + r["punctuation"]
                                + r["quarantined"]), r


# -- 1. kill -9 at a commit stage of `wavesql run` -----------------------------------------
JOB = textwrap.dedent(f"""\
    CREATE STREAM IF NOT EXISTS trades (k STRING, v DOUBLE, ts TIMESTAMP)
      FROM 'in/trades/' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS;
    CREATE STREAM IF NOT EXISTS quotes (k STRING, v DOUBLE, ts TIMESTAMP)
      FROM 'in/quotes/' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS;
    CREATE SINK IF NOT EXISTS joined TO 'out/joined/' FORMAT parquet;

    INSERT INTO joined
      {SQL[:-1]} LATE INTO 'late/');
""")


def test_a_job_s_query_may_be_a_relation_to_stream_query():
    """``INSERT INTO <sink> ISTREAM (...)`` parses as an INSERT of that query (the job hands
    its text to the continuous runner, which reads it as ``ws.stream`` does), its ``LATE
    INTO`` inside; a view's query is not read that way."""
    from wavesql.dialect import nodes as wn
    from wavesql.dialect import parse_one

    node = parse_one("INSERT INTO joined " + SQL)
    assert isinstance(node.expression, wn.RelationToStream)
    assert node.expression.kind == "ISTREAM" and node.this.name == "joined"
    late = parse_one("INSERT INTO j DSTREAM (SELECT a FROM s [NOW] LATE INTO 'x')")
    assert late.expression.kind == "DSTREAM"
    assert late.expression.this.args.get("late_into") is not None
    assert not isinstance(parse_one("INSERT INTO j SELECT a FROM s").expression,
                          wn.RelationToStream)


def _sink(sink: Path) -> list[dict]:
    rows = []
    for f in sorted(sink.glob("job=*/batch=*/*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


@pytest.mark.timeout(900)  # a JVM of its own, then the rerun: ~5 min at load 15
@pytest.mark.parametrize("stage", ["renamed"] + [
    pytest.param(s, marks=pytest.mark.slow) for s in ("staged", "progress-written",
                                                      "batch-done")])
def test_a_window_join_job_killed_at_a_commit_stage_is_exactly_once(ws, tmp_path, stage):
    """``wavesql run`` of a keyed ISTREAM window join into a sink (one file of each stream
    per micro-batch), SIGKILLed with its JVM the second time a batch reaches ``stage``,
    then run again to the end: the sink holds the reference evaluator's rows over the rows
    not late, up to the last progress, each exactly once and final; the late rows -- below
    their own stream's progress -- are in its LATE INTO sink (written inside the ISTREAM)
    and nowhere else. (``renamed`` in CI: a batch visible, its state, driver record and
    commit log not.)"""
    rng = np.random.default_rng(2601)
    a, b = _draw(rng, 120, 150, True, span_s=40)
    parts = {"l": _in_files(rng, a, 4), "r": _in_files(rng, b, 4)}
    _files(tmp_path / "in" / "trades", parts["l"])
    _files(tmp_path / "in" / "quotes", parts["r"], timeless=True)
    (tmp_path / "job.wsql").write_text(JOB)
    sink = tmp_path / "out" / "joined"
    run_killed_at(tmp_path, stage)
    markers = list(sink.glob("_wavesql/*/checkpoint/wavesql.json"))
    assert markers and json.loads(markers[0].read_text())["engine"] == "stateful-window-join"
    killed_rows = len(_sink(sink))
    run_in_process(ws, tmp_path)
    progress = oracle_progress(parts)
    late = oracle_late(parts, progress)
    every = {s: pd.concat(p, ignore_index=True) for s, p in parts.items()}
    ok_a, ok_b = (f[~f.id.isin(late)] for f in (every["l"], every["r"]))
    want = reference(ok_a, ok_b, min(progress[-1].values()))
    rows = _sink(sink)
    assert len(rows) > killed_rows  # the rerun did the rest
    assert all(r["_final"] for r in rows)
    got = got_rows(rows)
    assert sum(want.values()) > 30
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    late_rows = []
    for f in (tmp_path / "late").glob("batch=*/*.parquet"):  # (LATE INTO inside ISTREAM)
        late_rows += pq.read_table(f).to_pylist()
    timed = Counter(int(json.loads(r["_row"])["v"]) for r in late_rows
                    if json.loads(r["_row"]).get("ts") is not None)
    assert len(late) >= 4 and timed == Counter(late)  # each late row once
    assert sum(json.loads(r["_row"]).get("ts") is None for r in late_rows) == 1
    records = {}
    for p in sink.glob("job=*/_progress/*.json"):
        records[p.name] = json.loads(p.read_text())  # (a redone batch's record replaced)
    accounted(list(records.values()))
    assert sum(r["late"] for r in records.values()) == len(late)


# -- 2. punctuation rows, and a HEARTBEAT on an idle stream ---------------------------------
def _streams(ws, tmp_path, quotes_extra: str = "", punctuated: bool = True) -> None:
    for name in ("trades", "quotes"):
        (tmp_path / "in" / name).mkdir(parents=True, exist_ok=True)
        done = ", done TIMESTAMP" if punctuated else ""
        extra = " PROGRESS COLUMN done" if punctuated else ""
        ws.sql(f"CREATE OR REPLACE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP{done}) FROM "
               f"'{tmp_path / 'in' / name}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS"
               + extra + (quotes_extra if name == "quotes" else ""))


def _write(folder: Path, name: str, frame: pd.DataFrame, stamp: float) -> None:
    """``frame`` (``id`` as ``v``, times in µs, ``done`` NaN/None where no punctuation)
    as one Parquet file appearing whole, modification time ``stamp``."""
    out = pd.DataFrame({
        "k": frame.k.astype(object), "v": frame.id.astype(float),
        "ts": pd.to_datetime(frame.ts, unit="us").astype("datetime64[us]")})
    if "done" in frame:
        out["done"] = pd.to_datetime(frame.done, unit="us").astype("datetime64[us]")
    tmp = folder / f".{name}.tmp"
    out.to_parquet(tmp)
    os.replace(tmp, folder / name)
    os.utime(folder / name, (stamp, stamp))


def _progress_with_punctuation(parts: dict) -> list[dict]:
    """Each stream's progress each micro-batch runs with: the largest event time of its
    data rows minus the WATERMARK, or of its punctuation (``done``), of the batches before
    (one more entry than batches)."""
    seen, out = {"l": None, "r": None}, [{"l": None, "r": None}]
    for batch in range(max(len(v) for v in parts.values())):
        for side, ps in parts.items():
            if batch >= len(ps) or not len(ps[batch]):
                continue
            part = ps[batch]
            punct = part.done.notna() if "done" in part else np.zeros(len(part), bool)
            tops = [int(part.ts[~punct].max()) - WATERMARK] if (~punct).any() else []
            tops += [int(part.done[punct].max())] if punct.any() else []
            top = max(tops)
            seen[side] = top if seen[side] is None else max(seen[side], top)
        out.append(dict(seen))
    return out


def _late(parts: dict, progress: list[dict]) -> set:
    """The ids of the data rows below their own stream's progress of their batch."""
    late = set()
    for side, ps in parts.items():
        for batch, part in enumerate(ps):
            p = progress[batch][side]
            data = part[part.done.isna()] if "done" in part else part
            if p is not None:
                late |= set(data.id[data.ts < p].astype(int))
    return late


PUNCTUATED = {
    "istream-inner": (SQL, inner, "ISTREAM"),
    "dstream-left": ("DSTREAM (SELECT t.k, t.v AS id, q.v AS qid FROM trades [RANGE 3 SECONDS] t "
                     "LEFT JOIN quotes [RANGE 2 SECONDS] q ON t.k = q.k)", left_outer, "DSTREAM"),
}


def _batch_rows(out: Path, batch: int) -> list[dict]:
    rows = []
    for f in sorted(out.glob(f"batch={batch:09d}/*.parquet")):
        rows += pq.read_table(f).to_pylist()
    return rows


def _run_punctuated(ws, tmp_path, sql, parts, rounds) -> list:
    """Each round's files of both streams in (a stream's part ``i`` read by the ``i``-th
    micro-batch with its rows), the query run after each round on one checkpoint; every
    run's reports."""
    stamp, at, reports = time.time() - 3600, 0, []
    for n in rounds:
        for side, name in (("l", "trades"), ("r", "quotes")):
            for i in range(at, min(at + n, len(parts[side]))):
                _write(tmp_path / "in" / name, f"part-{i}.parquet", parts[side][i], stamp + i)
        at += n
        cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        cq.await_termination()
        assert type(cq).__name__ == "StatefulWindowJoinQuery"
        reports += cq.reports
    return reports


@pytest.mark.timeout(900)  # two query starts: ~3 min at load 15
@pytest.mark.parametrize("case", ["istream-inner",
                                  pytest.param("dstream-left", marks=pytest.mark.slow)])
def test_punctuation_makes_instants_final_when_the_reference_says(ws, spark, tmp_path, case):
    """Both streams with a PROGRESS COLUMN: a first run over data (out of order); then, in
    one run, more data with trades' punctuation promising past its last row (its progress
    jumps; the quotes' holds the query back), and a lone punctuation row of quotes whose
    event time is long past (not late: punctuation is not data). The query's progress
    takes exactly the reference's steps -- the smaller of the two streams', each the
    larger of its rows' (minus the WATERMARK) and its punctuation -- and each micro-batch
    emits exactly the reference's rows at the instants its progress made final (from the
    previous progress up to its own), each once, so the rows below the quotes' progress
    come before the quotes' punctuation and the rest only after it. The punctuation rows
    (keyed like data, with ids that would join) are counted, never joined, never late."""
    sql, query, kind = PUNCTUATED[case]
    rng = np.random.default_rng(2602)
    a, b = _draw(rng, 90, 110, True, span_s=30)

    def halves(frame):
        order = np.argsort(frame.ts.to_numpy() + rng.integers(0, 3 * SECOND, len(frame)))
        return [frame.iloc[p].sample(frac=1, random_state=1).assign(done=np.nan)
                for p in np.array_split(order, 2)]

    pa_, pb = halves(a), halves(b)
    end_a, end_b = int(a.ts.max()) + 5 * SECOND, int(b.ts.max()) + 100 * SECOND
    pa_[1] = pd.concat([pa_[1], pd.DataFrame({"id": [-7], "k": ["a"], "ts": [int(
        a.ts.median())], "done": [end_a]})], ignore_index=True)
    parts = {"l": pa_, "r": pb + [pd.DataFrame({"id": [-8], "k": ["a"], "ts": [int(
        b.ts.min())], "done": [end_b]})]}
    _streams(ws, tmp_path)
    reports = _run_punctuated(ws, tmp_path, sql, parts, [1, 2])
    progress = _progress_with_punctuation(parts)
    assert progress[2]["l"] == end_a and progress[2]["r"] < end_a  # quotes hold it back
    assert progress[3] == {"l": end_a, "r": end_b}
    late = _late(parts, progress)
    every = {s: pd.concat(ps, ignore_index=True) for s, ps in parts.items()}
    ok = {s: f[f.done.isna() & ~f.id.isin(late)] for s, f in every.items()}
    want_all = reference(ok["l"], ok["r"], end_a, query, kind)
    # the query's progress, step by step: the reference's
    steps = [min(p.values()) for p in progress if None not in p.values()]
    shown = [r.progress_us for r in reports if r.progress_us is not None]
    assert list(dict.fromkeys(shown)) == list(dict.fromkeys(steps))
    assert len(set(steps)) == 3 and steps[-1] == end_a
    # each micro-batch: the instants from the previous progress up to its own, no others
    before, seen = None, Counter()
    for r in reports:
        rows = _batch_rows(tmp_path / "out", r.batch)
        want = Counter({row: n for row, n in want_all.items() if r.progress_us is not None
                        and (before is None or row[0] >= before) and row[0] < r.progress_us})
        got = got_rows(rows)
        assert got == want, (r.batch, sorted((got - want).items())[:5],
                             sorted((want - got).items())[:5])
        assert all(row["_final"] for row in rows)
        seen += got
        before = r.progress_us if r.progress_us is not None else before
    assert seen == want_all and sum(want_all.values()) > 30
    held = Counter({row: n for row, n in want_all.items() if row[0] < progress[2]["r"]})
    assert 0 < sum(held.values()) < sum(want_all.values())  # released by the punctuation
    assert sum(r.punctuation for r in reports) == 2
    sink = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect() if late else []
    assert {int(json.loads(r["_row"])["v"]) for r in sink} == late
    assert sum(r.late for r in reports) == len(late)
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").glob("*.json")]
    accounted(records)
    assert sum(r["rows_in"] for r in records) == len(a) + len(b) + 2
    assert sum(r["punctuation"] for r in records) == 2


@pytest.mark.timeout(900)  # three query starts
def test_punctuation_of_each_stream_in_its_own_run_makes_the_instants_final(ws, spark,
                                                                            tmp_path):
    """Ten rows a second apart in each stream (run 1: progress 7 s each), then trades'
    punctuation promising 100 s (run 2: the quotes hold the query at 7 s), then quotes'
    promising 200 s (run 3): the query's progress is 100 s, and every instant below it is
    out -- the reference's rows over the twenty rows, each once. Trades has no row in run
    3: its progress (100 s, promised in run 2) reaches Spark's watermark through its
    resume input (streaming/stateful/resume.py), not through a row of that run."""
    _punctuation_in_separate_runs(ws, spark, tmp_path, "StatefulWindowJoinQuery")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_re_evaluating_runner_keeps_each_streams_progress_across_runs(ws, spark, tmp_path,
                                                                          monkeypatch):
    """The scenario above on the re-evaluating runner (``WAVESQL_STATEFUL=0``), which keeps
    each stream's progress in its own state rather than in Spark's one watermark: the
    instants below 100 s are out after the third run -- the workaround for the state
    store's gap."""
    monkeypatch.setenv("WAVESQL_STATEFUL", "0")
    _punctuation_in_separate_runs(ws, spark, tmp_path, "ReEvaluatingQuery")


def _punctuation_in_separate_runs(ws, spark, tmp_path, engine: str):
    ten = np.arange(10) * SECOND
    a = pd.DataFrame({"id": np.arange(10), "k": "a", "ts": ten, "done": np.nan})
    b = pd.DataFrame({"id": 100 + np.arange(10), "k": "a", "ts": ten, "done": np.nan})
    parts = {"l": [a, pd.DataFrame({"id": [-7], "k": ["a"], "ts": [5 * SECOND],
                                    "done": [100 * SECOND]})],
             "r": [b, b.iloc[:0], pd.DataFrame({"id": [-8], "k": ["a"], "ts": [SECOND],
                                                "done": [200 * SECOND]})]}
    _streams(ws, tmp_path)
    stamp = time.time() - 3600
    progress = []
    for rnd in range(3):
        for side, name in (("l", "trades"), ("r", "quotes")):
            if rnd < len(parts[side]) and len(parts[side][rnd]):
                _write(tmp_path / "in" / name, f"part-{rnd}.parquet", parts[side][rnd],
                       stamp + rnd)
        cq = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1)
        assert type(cq).__name__ == engine
        cq.await_termination()
        progress.append(cq.progress_us)
    assert progress[:2] == [7 * SECOND, 7 * SECOND]
    want = reference(a, b, 100 * SECOND)
    got = got_rows(spark.read.parquet(str(tmp_path / "out")).collect())
    assert sum(want.values()) > 20
    assert (progress[2], got) == (100 * SECOND, want)


@pytest.mark.slow  # a processing-time trigger: a micro-batch a second while it runs
@pytest.mark.timeout(900)
def test_a_heartbeat_on_an_idle_stream_lets_the_instants_become_final(ws, spark, tmp_path):
    """Quotes arrive for the first 10 s of trades' 30 s, then the quotes stream is idle:
    without a HEARTBEAT its progress stays at its last row's (minus the WATERMARK) and
    holds the join back -- only the reference's instants below it are out; declared with
    ``HEARTBEAT 60 SECONDS`` (event times 20 minutes before the wall clock), its progress
    follows the clock (Spark's rate source ticks, a processing-time trigger) past every
    row, the query's is the trades' own, and every instant below that is out, each row
    once; no row is late."""
    rng = np.random.default_rng(2603)
    base = (int(time.time()) - 20 * 60) * SECOND  # whole seconds, 20 minutes ago
    a = pd.DataFrame({"id": np.arange(80), "k": rng.choice(list("abcd"), 80),
                      "ts": base + np.sort(rng.choice(np.arange(0, 30 * SECOND, 1000), 80,
                                                      replace=False))})
    b = pd.DataFrame({"id": np.arange(10_000, 10_040), "k": rng.choice(list("abcd"), 40),
                      "ts": base + np.sort(rng.choice(np.arange(0, 10 * SECOND, 1000), 40,
                                                      replace=False))})
    stamp = time.time() - 3600
    _streams(ws, tmp_path, punctuated=False)
    _write(tmp_path / "in" / "trades", "part-0.parquet", a, stamp)
    _write(tmp_path / "in" / "quotes", "part-0.parquet", b, stamp)
    shift = base  # instants compared relative to base (the reference's own numbers)
    rel = {s: f.assign(ts=f.ts - shift) for s, f in (("l", a), ("r", b))}
    held = int(b.ts.max()) - WATERMARK
    cq = ws.stream(SQL, tmp_path / "o1", tmp_path / "c1")
    cq.await_termination()
    assert cq.progress_us == held
    want = reference(rel["l"], rel["r"], held - shift)
    got = got_rows(spark.read.parquet(str(tmp_path / "o1")).collect(), shift)
    assert sum(want.values()) > 10 and got == want

    _streams(ws, tmp_path, quotes_extra=" HEARTBEAT 60 SECONDS", punctuated=False)
    own = int(a.ts.max()) - WATERMARK  # the trades' progress: below the clock's
    cq = ws.stream(SQL, tmp_path / "o2", tmp_path / "c2", trigger="every 1 second")
    try:  # (the ticks never run out: wait for the batch that reaches the trades' progress)
        deadline = time.monotonic() + 600
        while cq.error is None and time.monotonic() < deadline and not any(
                r.progress_us == own for r in cq.reports):
            cq.await_termination(timeout=1)
    finally:
        cq.stop()
    assert cq.error is None
    assert [r.progress_us for r in cq.reports if r.progress_us is not None][-1] == own
    want_all = reference(rel["l"], rel["r"], own - shift)
    rows = spark.read.parquet(str(tmp_path / "o2")).collect()
    assert sum(want_all.values()) > sum(want.values())
    assert got_rows(rows, shift) == want_all
    assert sum(r.late for r in cq.reports) == 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "o2" / "_progress").glob("*.json")]
    accounted(records)
    assert sum(r["rows_in"] for r in records) == len(a) + len(b)


# -- 3. both streams from Kafka ------------------------------------------------------------
def _kafka_progress(rounds: dict) -> list[dict]:
    """Each topic's progress each micro-batch (one per round) runs with: the smallest over
    its partitions of the largest promise (event time minus the WATERMARK, or ``done``)
    in that partition so far; None while a partition has promised nothing."""
    seen = {s: {} for s in rounds}
    out = [{s: None for s in rounds}]
    for rnd in range(max(len(v) for v in rounds.values())):
        for side, frames in rounds.items():
            if rnd >= len(frames):
                continue
            f = frames[rnd]
            promise = np.where(f.done.notna(), f.done.fillna(0), f.ts - WATERMARK)
            for p, x in zip(f.p, promise):
                seen[side][int(p)] = max(seen[side].get(int(p), int(x)), int(x))
        out.append({s: (min(v.values()) if len(v) == 2 else None) for s, v in seen.items()})
    return out


@pytest.mark.slow  # the broker, three query starts
@pytest.mark.timeout(900)
def test_a_window_join_of_two_kafka_streams(ws, spark, kafka, tmp_path):
    """Two 2-partition topics produced in three rounds (out of order within 3 s; in the
    second, stragglers far behind: late), the query run after each on one checkpoint, then
    a punctuation record into every partition: each row below its own topic's progress
    (its slowest partition's) is in the late sink with the reason, and counted; the rest
    joined equals the reference evaluator's over the rows not late, every instant final,
    each row once."""
    from tests.test_kafka import T0_US, _iso, _topic

    rng = np.random.default_rng(2604)
    end = 10_000 * SECOND

    def rounds(first_id):
        out = []
        for rnd, n in enumerate((50, 50)):
            ts = rnd * 20 * SECOND + np.sort(rng.choice(np.arange(0, 20 * SECOND, 1000), n,
                                                        replace=False))
            order = np.argsort(ts + rng.integers(0, 3 * SECOND, n))
            f = pd.DataFrame({"id": first_id + rnd * 100 + np.arange(n), "ts": ts,
                              "k": rng.choice(list("abc"), n), "p": rng.integers(0, 2, n),
                              "done": np.nan}).iloc[order]
            if rnd == 1:  # stragglers: 10 s behind the first round's rows -- late
                old = pd.DataFrame({"id": first_id + 900 + np.arange(4), "k": "a",
                                    "ts": 2 * SECOND + np.arange(4) * SECOND,
                                    "p": [0, 1, 0, 1], "done": np.nan})
                f = pd.concat([f, old], ignore_index=True)
            out.append(f.reset_index(drop=True))
        out.append(pd.DataFrame({"id": [-1, -2], "k": [None, None], "ts": [40 * SECOND] * 2,
                                 "p": [0, 1], "done": [end, end]}))
        return out

    feeds = {"l": rounds(0), "r": rounds(10_000)}
    topics = {}
    for side, name in (("l", "trades"), ("r", "quotes")):
        topics[side] = _topic(kafka, 2)
        ws.sql(f"CREATE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP, done TIMESTAMP) "
               f"FROM KAFKA '{topics[side]}' OPTIONS (bootstrap = '{kafka.bootstrap}') "
               "FORMAT json EVENT TIME ts WATERMARK 2 SECONDS PROGRESS COLUMN done")
    reports = []
    for rnd in range(3):
        for side in ("l", "r"):
            f = feeds[side][rnd]
            kafka.produce(topics[side], [
                (r.k, json.dumps({"k": r.k, "v": float(r.id), "ts": _iso(r.ts),
                                  "done": None if pd.isna(r.done) else _iso(r.done)}),
                 int(r.p)) for r in f.itertuples()])
        cq = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt")
        cq.await_termination()
        assert type(cq).__name__ == "StatefulWindowJoinQuery"
        reports += cq.reports
    progress = _kafka_progress(feeds)
    assert progress[-1] == {"l": end, "r": end}
    assert cq.progress_us == T0_US + end
    late = _late(feeds, progress)
    assert len(late) >= 6  # the stragglers of both topics, at least
    every = {s: pd.concat(f[:2], ignore_index=True) for s, f in feeds.items()}
    ok = {s: f[~f.id.isin(late)] for s, f in every.items()}
    want = reference(ok["l"], ok["r"], end)
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    got = got_rows(rows, T0_US)
    assert sum(want.values()) > 30
    assert got == want, (sorted((got - want).items())[:5], sorted((want - got).items())[:5])
    sink = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert Counter(int(json.loads(r["_row"])["v"]) for r in sink) == Counter(late)
    assert all(r["_reason"] and r["_stream"] in ("trades", "quotes") for r in sink)
    assert sum(r.late for r in reports) == len(late)
    assert sum(r.punctuation for r in reports) == 4
    records = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").glob("*.json")]
    accounted(records)
    assert sum(r["rows_in"] for r in records) == sum(len(f) for fs in feeds.values()
                                                     for f in fs)
