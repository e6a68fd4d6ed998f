"""Progress across a restart on Spark's state store (streaming/stateful/resume.py): an input
that is idle in a run keeps the progress it had made before the restart.

A windowed count over one Kafka topic of two partitions -- each partition its own Spark
source and watermark. Run 1 writes rows to both partitions; run 2 (the query restarted on
its checkpoint) writes rows to partition 0 only. The stream's progress after run 2 is the
smaller of the two partitions' (each its largest event time minus the WATERMARK): partition
1's, from run 1. Spark alone would keep the progress of run 1 (the smaller of the two
then) until partition 1 had a row in run 2.

The oracle is pandas over the rows written, from the definitions: each row in the
tumbling window ``(t - 10 s, t]`` with ``t`` a multiple of 10 s, a window out once its end
lies below the progress computed here from the rows -- nothing of WaveSQL's.
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest

from tests.test_kafka import SECOND, T0_US, _iso, _micros, _topic

WATERMARK = 2 * SECOND
WIDTH = 10 * SECOND
SQL = "SELECT k, count(*) AS n FROM ev [RANGE 10 SECONDS SLIDE 10 SECONDS] GROUP BY k"


def _rows(rng, n: int, partition: int, start_s: int, end_s: int) -> pd.DataFrame:
    """``n`` rows of partition ``partition``, event times (µs after T0, whole ms) drawn in
    [start_s, end_s) s, in a shuffled order."""
    ts = np.sort(rng.choice(np.arange(start_s * 1000, end_s * 1000), n, replace=False)) * 1000
    return pd.DataFrame({"k": rng.choice(list("ab"), n), "v": np.arange(n), "ts": ts,
                         "p": partition}).sample(frac=1, random_state=1).reset_index(drop=True)


def _produce(kafka, topic, frame: pd.DataFrame) -> None:
    kafka.produce(topic, [(r.k, json.dumps({"k": r.k, "v": int(r.v), "ts": _iso(r.ts)}),
                           int(r.p)) for r in frame.itertuples()])


def _windows(rows: pd.DataFrame, below: int) -> Counter:
    """``(window end, k, count)`` of the windows ending below ``below`` (absolute µs)."""
    at = T0_US + rows.ts
    end = -(-at // WIDTH) * WIDTH  # the window (end - 10 s, end] holding the row
    counts = rows.assign(end=end).groupby(["end", "k"]).size()
    return Counter({(int(e), k, int(n)): 1 for (e, k), n in counts.items() if e < below})


def _progress(rows_by_partition: list[pd.DataFrame]) -> int:
    """The stream's progress (absolute µs): its slowest partition's largest event time
    minus the WATERMARK."""
    return T0_US + min(int(f.ts.max()) for f in rows_by_partition) - WATERMARK


def _dead_start(checkpoint) -> None:
    """What a start SIGKILLed right after writing its resume files leaves: one more file per
    input, promising what the record says (as the next start's will), nothing else."""
    record = sorted((checkpoint / "resume" / "progress").glob("*.json"))[-1]
    inputs = json.loads(record.read_text())["inputs"]
    assert len(inputs) == 2 and None not in inputs  # one input per partition, both promised
    for i, promise in enumerate(inputs):
        (checkpoint / "resume" / f"input-{i}" / "0-dead-start.json").write_text(
            json.dumps({"p": promise}) + "\n")


@pytest.mark.timeout(900)  # two query starts
def test_an_idle_partition_keeps_its_progress_across_a_restart(ws, spark, kafka, tmp_path):
    """Run 1: partition 0 to 19 s, partition 1 to 39 s (progress 17 s: partition 0's); run
    2: partition 0 alone, to 59 s. The progress is then partition 1's 37 s, and the windows
    ending at 20 and 30 s are out in run 2 -- each window once, no row late, the resume
    rows counted nowhere. Before run 2, a start died after writing its resume files: their
    rows, read with the next start's, change nothing."""
    rng = np.random.default_rng(2626)
    topic = _topic(kafka, 2)
    ws.sql(f"CREATE STREAM ev (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json "
           "EVENT TIME ts WATERMARK 2 SECONDS")
    assert "state store" in ws.explain(SQL, "STREAM")
    p0, p1 = _rows(rng, 25, 0, 0, 20), _rows(rng, 25, 1, 0, 40)
    later = _rows(rng, 25, 0, 40, 60)
    progress = []
    reports = []
    for run, produced in enumerate(([p0, p1], [later])):
        for frame in produced:
            _produce(kafka, topic, frame)
        if run == 1:  # a start killed after writing its resume files, before its batch
            _dead_start(tmp_path / "ckpt")
        cq = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt")
        cq.await_termination()
        assert cq.error is None
        progress.append(cq.progress_us)
        reports += cq.reports
    want_progress = [_progress([p0, p1]), _progress([pd.concat([p0, later]), p1])]
    assert want_progress[1] - want_progress[0] > WIDTH  # (windows ending at 20 and 30 s)
    assert progress == want_progress
    rows = pd.concat([p0, p1, later], ignore_index=True)
    want = _windows(rows, want_progress[1])
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    got = Counter((_micros(r._time), r.k, r.n) for r in out)
    assert got == want and len(want) >= 6
    # the windows run 2 made final are there: ends 20 s and 30 s after T0's window
    assert len(_windows(rows, want_progress[1]) - _windows(rows, want_progress[0])) >= 2
    assert sum(r.rows_in for r in reports) == len(rows)
    assert sum(r.on_time for r in reports) == len(rows)
    assert sum(r.late for r in reports) == 0
    assert not (tmp_path / "ckpt" / "late").exists() or not spark.read.parquet(
        str(tmp_path / "ckpt" / "late")).count()


@pytest.mark.slow
@pytest.mark.timeout(900)  # two query starts
def test_a_checkpoint_from_before_resume_inputs_keeps_its_plan(ws, spark, kafka, tmp_path,
                                                                monkeypatch):
    """A checkpoint written before resume inputs (``wavesql.json`` without ``"resume"``,
    its Spark plan without their sources) restarts on its old plan -- no error, the same
    sources -- and with the old behaviour: partition 1 idle in run 2 holds the progress at
    run 1's, the windows past it wait. (Run 1 here is WaveSQL with resume inputs switched
    off, as an older WaveSQL wrote its checkpoints.)"""
    from wavesql.streaming.stateful import query as stateful_query

    rng = np.random.default_rng(2627)
    topic = _topic(kafka, 2)
    ws.sql(f"CREATE STREAM ev (k STRING, v INT, ts TIMESTAMP) FROM KAFKA '{topic}' "
           f"OPTIONS (bootstrap = '{kafka.bootstrap}') FORMAT json "
           "EVENT TIME ts WATERMARK 2 SECONDS")
    p0, p1 = _rows(rng, 20, 0, 0, 20), _rows(rng, 20, 1, 0, 40)
    later = _rows(rng, 20, 0, 40, 60)
    progress = []
    for run, produced in enumerate(([p0, p1], [later])):
        for frame in produced:
            _produce(kafka, topic, frame)
        with monkeypatch.context() as m:
            if run == 0:  # the older WaveSQL: no resume inputs in the plan, none recorded
                m.setattr(stateful_query, "RESUME_VERSION", None)
            cq = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt")
            cq.await_termination()
        assert cq.error is None
        progress.append(cq.progress_us)
    marker = json.loads((tmp_path / "ckpt" / "wavesql.json").read_text())
    assert marker.get("resume") is None and not (tmp_path / "ckpt" / "resume").exists()
    stuck = _progress([p0, p1])
    assert progress == [stuck, stuck]
    rows = pd.concat([p0, p1, later], ignore_index=True)
    got = Counter((_micros(r._time), r.k, r.n)
                  for r in spark.read.parquet(str(tmp_path / "out")).collect())
    assert got == _windows(rows, stuck) and len(got) >= 2


# -- without Spark: the record and the files' bookkeeping ---------------------------------
def test_the_record_keeps_each_inputs_largest_promise_never_going_back(tmp_path, monkeypatch):
    """Batch by batch, each input's recorded progress is the largest promise observed so
    far (Spark's watermark milliseconds, offset by 2^50 as processor.py encodes them); an
    input without a row in a batch keeps its own; a re-run of a batch writes the same."""
    from wavesql.streaming.stateful import resume

    off = 1 << 50
    seen = iter([[off + 5, None], [off + 3, off + 9], [None, None], [off + 3, off + 9]])
    monkeypatch.setattr(resume, "_observed", lambda spark, n: next(seen))
    r = resume.Resume(None, str(tmp_path), True)
    r.n_inputs = 2
    got = []
    for batch in (0, 1, 2, 2):  # batch 2 run twice (a re-run after a kill)
        r.record(batch)
        record = json.loads((tmp_path / "resume" / "progress" / f"{batch:09d}.json").read_text())
        got.append(record["inputs"])
    assert got == [[5, None], [5, 9], [5, 9], [5, 9]]
    assert record["version"] == resume.VERSION
    again = resume.Resume(None, str(tmp_path), True)  # the next start reads the latest
    assert again.before["inputs"] == [5, 9]
    old = resume.Resume(None, str(tmp_path), False)  # an old checkpoint: nothing
    frame = object()
    assert old.add(frame) is frame and old.before == {}


@pytest.mark.parametrize("checkpoint, path, mine", [
    ("/c/k", "file:///c/k/resume/input-0/1.json", True),
    ("/c/k", "file:/c/k/resume/input-1/2.json", True),
    ("file:///c/k", "/c/k/resume/input-0/1.json", True),
    ("/c/k", "file:///c/k/resumed/1.json", False),
    ("/c/k", "file:///c/in/resume/input-0/1.json", False),
    ("/c/k", "file:///c/k/x.json", False),
    ("s3a://b/c/k", "s3a://b/c/k/resume/input-0/1.json", True),
    ("s3a://b/c/k", "s3a://b/c/in/1.json", False),
    # a folder name with a space and quotes: the log percent-escapes it (test_odd_names)
    ("/c/ck 'x'", "file:/c/ck%20'x'/resume/input-0/1.json", True),
    ("s3a://b/ck 'x'", "s3a://b/ck%20'x'/resume/input-0/1.json", True),
    ("/c/ck 'x'", "file:/c/ck%20'y'/resume/input-0/1.json", False)])
def test_resume_files_are_told_from_the_streams_files(checkpoint, path, mine):
    """The micro-batch's file bookkeeping skips the resume inputs' files -- those under
    ``<checkpoint>/resume/`` however Spark's file log spells the path -- and no other."""
    from wavesql.streaming.stateful.resume import is_resume_file

    assert is_resume_file(checkpoint, path) is mine
