"""Stateful signal functions per key over a SYNC result's rows: ``lowpass(s.ch1, f) OVER
(PARTITION BY c.sensor)`` (planner/segment_stage.py ``refuse_pending_per_key``,
planner/segment_stage.py).

Each key's synced ranges, in range-start order, are one signal: the filter's state runs
from one range's last sample into the next range's first; a gap between two ranges resets
it (as across a gap of a WAV signal); two overlapping ranges of one key are
``SEGMENT_ORDER``. Oracle: scipy's ``sosfilt`` / ``lfilter`` over numpy slices of the
samples written to the WAV file, the delay line (``zi``) carried from range to range of a
key and zeroed at a gap -- computed here, from the ranges, without WaveSQL.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import signal as sps

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

pytestmark = pytest.mark.spark

RATE = 8000
N = 20000
B, A = [0.2, 0.3], [1.0, -0.5]  # iir(x, b, a): a one-pole smoother

# (sensor, start, end): written out of start order; x's three ranges meet (one signal), y's
# third comes after a gap, NULL is one key, z has one row, w's second range lies beyond the
# recording (a NULL segment, NULL results) and its first meets nothing.
RANGES = [("x", 3000, 4500), ("y", 7000, 8000), ("x", 1000, 3000), (None, 1200, 1700),
          ("y", 0, 2500), ("z", 5000, 6000), ("x", 4500, 9000), ("y", 2500, 5000),
          (None, 200, 1200), ("w", 19000, 25000), ("w", 100, 600)]


def _recording(tmp_path):
    rng = np.random.default_rng(21)
    t = np.arange(N) / RATE
    x = (0.4 * np.sin(2 * np.pi * 40.0 * t) + 0.3 * rng.standard_normal(N)).astype(np.float32)
    folder = tmp_path / "mic"
    folder.mkdir()
    write_wav(str(folder / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
    return folder, x.astype(np.float64)


def _control(ws, tmp_path, ranges):
    folder = tmp_path / "ctl"
    folder.mkdir()
    pd.DataFrame({"id": np.arange(len(ranges), dtype=np.int64),
                  "sensor": [r[0] for r in ranges],
                  "a": np.array([r[1] for r in ranges], dtype=np.int64),
                  "b": np.array([r[2] for r in ranges], dtype=np.int64)}).to_parquet(
        folder / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT) "
           f"FROM '{folder}' FORMAT parquet")


def _oracle(x, ranges):
    """{id: (lowpass, iir)} with each key's state carried along its ranges in start order,
    reset at a gap; a range beyond the recording: None."""
    sos = sps.butter(4, 100.0, btype="low", fs=RATE, output="sos")
    out = {}
    keys = {r[0] for r in ranges}
    for key in keys:
        mine = sorted((r[1], r[2], i) for i, r in enumerate(ranges) if r[0] == key)
        end = None
        for lo, hi, i in mine:
            if hi > len(x):
                out[i] = None
                continue
            if lo != end:  # first range of the key, or after a gap: from rest
                zs, zi = np.zeros((sos.shape[0], 2)), np.zeros(max(len(A), len(B)) - 1)
            f, zs = sps.sosfilt(sos, x[lo:hi], zi=zs)
            g, zi = sps.lfilter(B, A, x[lo:hi], zi=zi)
            out[i], end = (f, g), hi
    return out


@pytest.fixture
def synced(ws, tmp_path):
    folder, x = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512")
    _control(ws, tmp_path, RANGES)
    return ws, x


SQL = ("SELECT c.id, c.sensor, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensor) AS f, "
       "iir(s.ch1, ARRAY(0.2D, 0.3D), ARRAY(1.0D, -0.5D)) OVER (PARTITION BY c.sensor) AS g "
       "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)")


def test_each_keys_ranges_are_one_signal_in_start_order(synced):
    ws, x = synced
    assert "state per key (sensor)" in ws.explain(SQL, "IR")
    rows = {r.id: r for r in ws.sql(SQL).collect()}
    want = _oracle(x, RANGES)
    assert sorted(rows) == sorted(want) == list(range(len(RANGES)))
    for i, (sensor, lo, hi) in enumerate(RANGES):
        row = rows[i]
        assert row.sensor == sensor
        if want[i] is None:
            assert row.f is None and row.g is None, i
            continue
        assert row.f.start == lo and len(row.f.samples) == hi - lo
        np.testing.assert_allclose(row.f.samples, want[i][0], atol=2e-6, err_msg=str(i))
        np.testing.assert_allclose(row.g.samples, want[i][1], atol=2e-6, err_msg=str(i))
    # the state did cross: x's second range filtered from rest would differ
    rest = sps.sosfilt(sps.butter(4, 100.0, btype="low", fs=RATE, output="sos"), x[3000:4500])
    assert np.abs(np.asarray(rows[0].f.samples) - rest).max() > 1e-2


@pytest.mark.parametrize("form", ["cte", "subquery"])
def test_segments_of_a_sync_cte_or_subquery_are_values(synced, form):
    """The synced segments as a column of a CTE or subquery (issue 21 item 2: segments are
    values), signal functions applied outside it: per key the same one signal per sensor
    as in the SYNC's own SELECT, ``seg_rms`` per row as numpy's. Before: UNKNOWN_STREAM
    `__wavesql_sync_0` at line 1 column 1 (the SYNC rule's input was not readable while
    the CTE was bound for the segment stage)."""
    ws, x = synced
    body = ("SELECT c.id, c.sensor, c.a, c.b, s.ch1 AS seg FROM ctl c SYNC JOIN mic s "
            "ON RANGE (c.a, c.b)")
    outer = ("SELECT id, sensor, lowpass(seg, 100.0) OVER (PARTITION BY sensor) AS f, "
             "seg_rms(seg) AS r FROM {}")
    sql = (f"WITH q AS ({body}) " + outer.format("q") if form == "cte"
           else outer.format(f"({body}) q"))
    rows = {r.id: r for r in ws.sql(sql).collect()}
    want = _oracle(x, RANGES)
    assert sorted(rows) == list(range(len(RANGES)))
    for i, (sensor, lo, hi) in enumerate(RANGES):
        if want[i] is None:
            assert rows[i].f is None and rows[i].r is None, i
            continue
        np.testing.assert_allclose(rows[i].f.samples, want[i][0], atol=2e-6, err_msg=str(i))
        assert rows[i].r == pytest.approx(np.sqrt(np.mean(x[lo:hi] ** 2)), rel=1e-5)


def test_a_where_on_the_control_applies_before_each_keys_state(ws, tmp_path):
    """SQL applies WHERE before windows: ``WHERE c.kind = 'a'`` keeps x's [1000, 3000) and
    [4500, 9000), which then do not meet (a gap: the filter restarts from rest) -- the
    state does not run through the [3000, 4500) the WHERE drops. Oracle: scipy over the
    kept rows' ranges only."""
    folder, x = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512")
    ranges = [("x", 1000, 3000, "a"), ("x", 3000, 4500, "b"), ("x", 4500, 9000, "a"),
              ("y", 0, 2500, "a"), ("y", 2500, 4000, "b")]
    (tmp_path / "ctl").mkdir()
    pd.DataFrame({"id": np.arange(len(ranges), dtype=np.int64),
                  "sensor": [r[0] for r in ranges], "a": [r[1] for r in ranges],
                  "b": [r[2] for r in ranges], "kind": [r[3] for r in ranges]}).to_parquet(
        tmp_path / "ctl" / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, kind STRING) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet")
    rows = {r.id: r for r in ws.sql(
        "SELECT c.id, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensor) AS f "
        "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b) WHERE c.kind = 'a'").collect()}
    ids = [i for i, r in enumerate(ranges) if r[3] == "a"]
    want = _oracle(x, [ranges[i][:3] for i in ids])
    assert sorted(rows) == ids
    for j, i in enumerate(ids):
        np.testing.assert_allclose(rows[i].f.samples, want[j][0], atol=2e-6, err_msg=str(i))

def test_what_per_key_state_over_sync_refuses(synced):
    ws, _ = synced
    # (threshold_ranges per key runs in batch, each key's open range flushed at its end;
    # continuously it is NOT_IMPLEMENTED: tests/test_keyed_ranges.py)
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT c.id, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensr) "
               "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)")
    assert err.value.code == "UNKNOWN_COLUMN" and err.value.span is not None
    with pytest.raises(WaveSQLError) as err:  # without OVER the rows still have no order
        ws.sql("SELECT c.id FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b) "
               "WHERE cfar(seg_rms(s.ch1))")
    assert err.value.code == "UNDEFINED_ORDER" and "PARTITION BY" in (err.value.hint or "")


@pytest.mark.slow
def test_overlapping_ranges_of_one_key_are_segment_order(ws, tmp_path):
    folder, _ = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
    # b's ranges overlap; a's meet: the error names b and both of its ranges
    _control(ws, tmp_path, [("a", 0, 100), ("b", 500, 900), ("a", 100, 300),
                            ("b", 800, 1000)])
    with pytest.raises(Exception) as err:  # noqa: PT011 -- a task's error, as Spark raises it
        ws.sql("SELECT c.id, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensor) AS f "
               "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)").collect()
    text = str(err.value)
    assert "SEGMENT_ORDER" in text and "'b'" in text and "[500, 900) and" in text \
        and "[800, 1000)" in text


@pytest.mark.slow
def test_ranges_of_one_start_are_named_in_a_fixed_order(ws, tmp_path):
    """Batch: a key's ranges of one start overlap (SEGMENT_ORDER); the shorter range is
    taken first whatever order the rows come in (written longest first here, and shuffled
    by Spark), so the error names the same pair every run: the two shortest."""
    folder, _ = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
    _control(ws, tmp_path, [("c", 2000, 2900), ("c", 2000, 2600), ("c", 2000, 2300)])
    with pytest.raises(Exception) as err:  # noqa: PT011 -- a task's error, as Spark raises it
        ws.sql("SELECT c.id, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensor) AS f "
               "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)").collect()
    assert "SEGMENT_ORDER" in str(err.value)
    assert "[2000, 2300) and [2000, 2600) overlap" in str(err.value)


@pytest.mark.slow
def test_many_keys_in_parallel(ws, tmp_path):
    """40 keys, each three ranges that meet and one after a gap, over several shuffle
    partitions: each key's values are its own signal's, whatever partition it lands in."""
    folder, x = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512")
    rng = np.random.default_rng(4)
    ranges = []
    for k in range(40):
        lo = int(rng.integers(0, N - 3000))
        cuts = sorted(rng.integers(lo + 1, lo + 2000, size=2))
        ranges += [(f"k{k}", lo, int(cuts[0])), (f"k{k}", int(cuts[0]), int(cuts[1])),
                   (f"k{k}", int(cuts[1]), lo + 2000), (f"k{k}", lo + 2500, lo + 3000)]
    order = rng.permutation(len(ranges))
    ranges = [ranges[i] for i in order]
    _control(ws, tmp_path, ranges)
    ws.spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        rows = {r.id: r for r in ws.sql(SQL).collect()}
    finally:
        ws.spark.conf.unset("spark.sql.shuffle.partitions")
    want = _oracle(x, ranges)
    assert sorted(rows) == list(range(len(ranges)))
    for i in range(len(ranges)):
        np.testing.assert_allclose(rows[i].f.samples, want[i][0], atol=2e-6, err_msg=str(i))
        np.testing.assert_allclose(rows[i].g.samples, want[i][1], atol=2e-6, err_msg=str(i))


def _cfar(scores, k, alpha, warmup):
    """cfar's rule as its docstring states it (udfs/kernels/detect.py), written out here:
    the first ``warmup`` scores seed mean and population variance; then a score fires
    above ``mean + k * sd`` and is absorbed clipped at that threshold."""
    mean, var = float(np.mean(scores[:warmup])), float(np.var(scores[:warmup]))
    fired = [False] * warmup
    for s in scores[warmup:]:
        threshold = mean + k * np.sqrt(var)
        fired.append(bool(s > threshold))
        d = min(s, threshold) - mean
        mean += alpha * d
        var = (1 - alpha) * (var + alpha * d * d)
    return fired


@pytest.mark.slow
def test_cfar_runs_along_each_keys_rows_in_range_order(ws, tmp_path):
    """A function whose state runs from row to row (cfar over one score per row) takes
    each key's rows in range-start order, whatever order the control rows come in."""
    rng = np.random.default_rng(9)
    x = (0.1 * rng.standard_normal(N)).astype(np.float32)
    x[4000:4100] *= 20  # a burst in p's ranges, another in q's
    x[12000:12100] *= 20
    folder = tmp_path / "mic"
    folder.mkdir()
    write_wav(str(folder / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
    ranges = [("p", lo, lo + 100) for lo in range(0, 8000, 100)]
    ranges += [("q", lo, lo + 100) for lo in range(6000, 14000, 100)]
    ranges = [ranges[i] for i in rng.permutation(len(ranges))]
    _control(ws, tmp_path, ranges)
    rows = ws.sql("SELECT c.id, cfar(seg_rms(s.ch1), 3.0, 0.05, 10) OVER (PARTITION BY "
                  "c.sensor) AS hit FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)").collect()
    got = {r.id: r.hit for r in rows}
    xs = x.astype(np.float64)
    for key in ("p", "q"):
        mine = sorted((lo, i) for i, (k, lo, _) in enumerate(ranges) if k == key)
        scores = [float(np.sqrt(np.mean(xs[lo:lo + 100] ** 2))) for lo, _ in mine]
        want = _cfar(scores, 3.0, 0.05, 10)
        assert [got[i] for _, i in mine] == want, key
        assert any(want)  # the burst fires


def test_continuously_each_keys_state_crosses_micro_batches(ws, spark, tmp_path):
    """The same query run continuously: control rows and WAV files arrive in three steps,
    each run a restart on the checkpoint. A key's rows reach its state only once the
    control's progress (its largest event time minus the 1 s watermark) passed their event
    time, then in range order -- so x's [3000, 4500), on time but arriving a micro-batch
    after x's [4500, 9000), is run before it (immediate release would have run [4500, 9000)
    first and stopped the query with SEGMENT_ORDER) -- and a key's state goes from one
    micro-batch to the next in the SYNC's state (x's [9000, 12000) starts from the state
    [4500, 9000) left, a run later). A row on time whose range starts before ranges of its
    key already delivered (y's [4000, 4200)) goes to the late sink with its reason; the
    query runs on. Oracle: scipy with zi carried per key over the delivered rows' ranges in
    start order."""
    import json

    rng = np.random.default_rng(21)
    x = (0.4 * np.sin(2 * np.pi * 40.0 * np.arange(N) / RATE)
         + 0.3 * rng.standard_normal(N)).astype(np.float32)
    for d in ("all", "sig", "ctl"):
        (tmp_path / d).mkdir()
    for i, lo in enumerate(range(0, N, 8000)):
        write_wav(str(tmp_path / "all" / f"rec_{i:03d}.wav"),
                  x[lo:lo + 8000].reshape(-1, 1), RATE, "float32")
    (tmp_path / "sig" / "rec_000.wav").write_bytes((tmp_path / "all" / "rec_000.wav")
                                                   .read_bytes())
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 512")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    written = []

    def arrive(name, rows, files=()):  # rows: (sensor, start, end, event time in s)
        for f in files:
            (tmp_path / "sig" / f).write_bytes((tmp_path / "all" / f).read_bytes())
        first = len(written)
        written.extend(rows)
        pd.DataFrame({"id": np.arange(first, len(written), dtype=np.int64),
                      "sensor": [r[0] for r in rows],
                      "a": np.array([r[1] for r in rows], dtype=np.int64),
                      "b": np.array([r[2] for r in rows], dtype=np.int64),
                      "ts": pd.to_datetime([int(r[3] * 1_000_000) for r in rows], unit="us")
                      .astype("datetime64[us]")}).to_parquet(tmp_path / "ctl" / f"{name}.parquet")
        q = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q

    def delivered():
        return spark.read.parquet(str(tmp_path / "out")).collect()

    # progress 1 s: x's [1000, 3000) and y's [0, 2500) pass; the rows at 2 s wait
    q = arrive("c1", [("x", 4500, 9000, 2.0), ("y", 2500, 5000, 2.0), ("x", 1000, 3000, 0.5),
                      ("y", 0, 2500, 0.2)])
    assert sorted(r.id for r in delivered()) == [2, 3]
    assert q.reports[-1].buffered == 2
    # progress 3 s: x's [3000, 4500) (1.5 s, on time) comes a run after x's [4500, 9000)
    q = arrive("c2", [("x", 3000, 4500, 1.5), ("y", 7000, 8000, 2.5), ("x", 9000, 12000, 3.0),
                      (None, 200, 1200, 2.2), ("z", 15000, 16000, 4.0)], ["rec_001.wav"])
    assert sorted(r.id for r in delivered()) == [0, 1, 2, 3, 4, 5, 7]
    assert q.reports[-1].buffered == 2  # x's [9000, 12000) at 3 s, z's at 4 s
    # progress 5 s: y's [4000, 4200) is on time (3.5 s) but y's state is past 8000 -> late;
    # w's row (6 s) holds the progress and waits. Ties of a range start, each pair written
    # in the order the rule does not take it (Spark's shuffle would take either, by its
    # hashes: four pairs of each): e<j>'s [10000, 11000) (+ 500 j) runs before [10000,
    # 12000) (the shorter first; the longer then overlaps it: late), t<j>'s two [12000,
    # 13000) by event time (3.6 s before 4.5 s; the later one repeats it: late)
    ties = []
    for j in range(4):
        lo = 500 * j
        ties += [(f"e{j}", 10000 + lo, 12000 + lo, 3.8), (f"e{j}", 10000 + lo, 11000 + lo, 3.7),
                 (f"t{j}", 12000 + lo, 13000 + lo, 4.5), (f"t{j}", 12000 + lo, 13000 + lo, 3.6)]
    q = arrive("c3", [("y", 4000, 4200, 3.5), ("w", 100, 600, 6.0)] + ties, ["rec_002.wav"])
    behind = [9] + [11 + 2 * k for k in range(8)]  # y's, and the first of each pair
    assert q.reports[-1].late == len(behind) and q.reports[-1].buffered == 1
    late = {json.loads(r._row)["c"]["id"]: r  # the control row, not its samples
            for r in spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()}
    assert sorted(late) == behind
    assert all(r._stream == "ctl" and "too late for its key's state" in r._reason
               and "samples" not in r._row for r in late.values())
    assert "[4000, 4200)" in late[9]._reason and "comes before [7000, 8000)" in late[9]._reason
    assert "sensor = 'y'" in late[9]._reason
    assert "[10000, 12000)" in late[11]._reason and "overlaps [10000, 11000)" in late[11]._reason
    assert "overlaps [12000, 13000)" in late[13]._reason
    # each control row counted once: 27 in, 9 late (on time when they came, found late in
    # the stage), the rest on time -- per batch and in the totals
    reports = [json.loads(p.read_text()) for p in (tmp_path / "out" / "_progress").iterdir()]
    for r in reports:
        assert r["rows_in"] == sum(r[k] for k in ("on_time", "late", "no_time", "punctuation",
                                                  "quarantined")), r
    assert [sum(r[k] for r in reports) for k in ("rows_in", "on_time", "late")] == [27, 18, 9]
    kept = {i: r for i, r in enumerate(written) if i not in behind + [10]}
    rows = {r.id: r for r in delivered()}
    assert sorted(rows) == sorted(kept)  # each once
    ids = sorted(kept)
    by_place = _oracle(x.astype(np.float64), [kept[i][:3] for i in ids])
    want = {i: by_place[j] for j, i in enumerate(ids)}
    for i, (sensor, lo, hi, _) in kept.items():
        assert rows[i].sensor == sensor and rows[i].f.start == lo
        np.testing.assert_allclose(rows[i].f.samples, want[i][0], atol=2e-6, err_msg=str(i))
        np.testing.assert_allclose(rows[i].g.samples, want[i][1], atol=2e-6, err_msg=str(i))
    # _progress: the control's (1 s, 3 s, 5 s): no row delivered later is below it
    assert sorted({r._progress for r in rows.values()}) == [
        pd.Timestamp(s, unit="s").to_pydatetime() for s in (1, 3, 5)]


@pytest.mark.slow
def test_continuously_a_where_on_the_control_applies_before_each_keys_state(ws, spark,
                                                                           tmp_path):
    """Continuously too, the WHERE on the control's columns keeps rows before the per-key
    state: x's kept [1000, 3000) and [4500, 9000) do not meet (the dropped [3000, 4500)
    is a gap), in one run and across two; oracle: scipy over the kept rows' ranges."""
    folder, x = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512")
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, kind STRING, "
           f"ts TIMESTAMP) FROM '{tmp_path / 'ctl'}' FORMAT parquet EVENT TIME ts "
           "WATERMARK 1 SECOND")
    runs = [[("x", 1000, 3000, "a", 0.1), ("x", 3000, 4500, "b", 0.2),
             ("y", 0, 2500, "a", 0.3), ("x", 9000, 12000, "a", 3.0)],
            [("x", 4500, 9000, "a", 2.5), ("y", 2500, 4000, "b", 2.6),
             ("y", 4000, 6000, "a", 2.7), ("x", 3000, 3500, "a", 9.0)]]
    written = []
    for n, rows in enumerate(runs):
        first = len(written)
        written += rows
        pd.DataFrame({"id": np.arange(first, len(written), dtype=np.int64),
                      "sensor": [r[0] for r in rows], "a": [r[1] for r in rows],
                      "b": [r[2] for r in rows], "kind": [r[3] for r in rows],
                      "ts": pd.to_datetime([int(r[4] * 1e6) for r in rows], unit="us")
                      .astype("datetime64[us]")}).to_parquet(tmp_path / "ctl" / f"c{n}.parquet")
        q = ws.stream("SELECT c.id, lowpass(s.ch1, 100.0) OVER (PARTITION BY c.sensor) AS f "
                      "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b) WHERE c.kind = 'a'",
                      tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
    got = {r.id: r for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    # synced: the rows below the progress (8 s); x's [3000, 3500) at 9 s waits
    ids = [i for i, r in enumerate(written) if r[3] == "a" and r[4] < 8.0]
    want = _oracle(x, [written[i][:3] for i in ids])
    assert sorted(got) == ids
    for j, i in enumerate(ids):
        np.testing.assert_allclose(got[i].f.samples, want[j][0], atol=2e-6, err_msg=str(i))


KEYED_JOB = """\
CREATE SIGNAL IF NOT EXISTS sig (x FLOAT) RATE 8000 HZ FROM 'sig/' FORMAT wav SEGMENT 1024;
CREATE STREAM IF NOT EXISTS events (id BIGINT, sensor STRING, a BIGINT, b BIGINT, ts TIMESTAMP)
  FROM 'events/' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND;
CREATE SINK IF NOT EXISTS synced TO 'out/synced/' FORMAT parquet;

INSERT INTO synced
  SELECT e.id, lowpass(s.x, 100.0) OVER (PARTITION BY e.sensor) AS f,
         iir(s.x, ARRAY(0.2D, 0.3D), ARRAY(1.0D, -0.5D)) OVER (PARTITION BY e.sensor) AS g
  FROM events e SYNC JOIN sig s ON RANGE (e.a, e.b);
"""


def test_a_rerun_batch_holds_back_what_its_first_attempt_held(ws, spark, tmp_path):
    """Per key a row is synced only once the control's progress passed it -- with a
    HEARTBEAT, progress moves with the wall clock -- and once the recording covers it. A
    batch re-run after a crash (its entry in Spark's commit log removed, as a kill after
    the delivery leaves it) decides both as its first attempt did: at 12 s - 10 s the
    progress held x's [0, 1000) (2.5 s), and y's [7000, 9000) waited for the samples past
    8000; the re-run, 8 s later and with the next file complete, holds both again and
    delivers the same rows, x's [1000, 2000) and y's [7500, 8000) filtered from rest.
    (With its own clock it would release [0, 1000) and run [1000, 2000) from its state,
    other values; with its own files, run [7000, 9000) and send [7500, 8000), delivered,
    late.) Oracle: scipy over the recording's samples."""
    import json

    rng = np.random.default_rng(21)
    x = (0.4 * np.sin(2 * np.pi * 40.0 * np.arange(N) / RATE)
         + 0.3 * rng.standard_normal(N)).astype(np.float32)
    for d in ("sig", "ctl"):
        (tmp_path / d).mkdir()
    write_wav(str(tmp_path / "sig" / "rec_000.wav"), x[:8000].reshape(-1, 1), RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 512")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND "
           "HEARTBEAT 10 SECONDS")
    pd.DataFrame({"id": [0, 1, 2, 3], "sensor": ["x", "x", "y", "y"],
                  "a": [1000, 0, 7000, 7500], "b": [2000, 1000, 9000, 8000],
                  "ts": pd.to_datetime([500_000, 2_500_000, 200_000, 300_000], unit="us")
                  .astype("datetime64[us]")}).to_parquet(tmp_path / "ctl" / "c.parquet")

    def run(now):
        q = ws.stream(SQL, tmp_path / "out", tmp_path / "ckpt", clock=lambda: now)
        q.await_termination()
        assert q.error is None, q.error
        return q

    run(12.0)
    commits = tmp_path / "ckpt" / "offsets" / "commits"
    (last,) = [p for p in commits.iterdir() if p.name.isdigit()]
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    write_wav(str(tmp_path / "sig" / "rec_001.wav"), x[8000:16000].reshape(-1, 1), RATE,
              "float32")
    q = run(20.0)
    assert q.reports[0].batch == int(last.name)  # the batch ran again
    assert q.reports[0].inputs == {"ctl": 2_000_000} and q.reports[0].buffered == 2
    assert q.reports[0].late == 0
    # then the next batch (the new file's): both rows released, both behind their key's
    # state -- late, the delivered rows stay
    assert [r.late for r in q.reports[1:]] == [2]
    late = spark.read.parquet(str(tmp_path / "ckpt" / "late")).collect()
    assert sorted(json.loads(r._row)["c"]["id"] for r in late) == [1, 2]
    rows = {r.id: r for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert sorted(rows) == [0, 3]
    for i, lo, hi in ((0, 1000, 2000), (3, 7500, 8000)):
        want = _oracle(x.astype(np.float64), [("k", lo, hi)])[0]
        np.testing.assert_allclose(rows[i].f.samples, want[0], atol=2e-6, err_msg=str(i))
        np.testing.assert_allclose(rows[i].g.samples, want[1], atol=2e-6, err_msg=str(i))


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["renamed", "state-written"])
def test_a_keyed_sync_job_killed_at_a_stage_is_exactly_once(ws, tmp_path, stage):
    """``wavesql run`` of a job with per-key state over a SYNC, one control file per
    micro-batch, SIGKILLed the second time a batch reaches ``stage``, then run to its end:
    every row once, equal to the oracle -- the rerun batch started from the keys' states
    the batch before it committed, not from those the killed one computed. (A key's rows
    are synced once the control's progress passed them: each file's rows in the batch of
    the next file.)"""
    import os

    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.test_run_files import run_in_process, run_killed_at

    rng = np.random.default_rng(23)
    x = rng.standard_normal(4 * RATE).astype(np.float32)
    (tmp_path / "sig").mkdir()
    (tmp_path / "events").mkdir()
    for i in range(4):
        write_wav(str(tmp_path / "sig" / f"part_{i}.wav"), x[i * RATE:(i + 1) * RATE]
                  .reshape(-1, 1), RATE, "float32")
    ranges = []
    for f in range(3):  # each key's next ranges in each file; key c's after a gap
        rows = []
        for k, key in enumerate("abc"):
            lo = f * 9000 + k * 100 + (50 if key == "c" and f else 0)
            cut = lo + int(rng.integers(1000, 8000))
            rows += [(key, lo, cut), (key, cut, f * 9000 + 9000 + k * 100)]
        first = len(ranges)
        ranges += rows
        ids = np.arange(first, len(ranges))
        path = tmp_path / "events" / f"e{f}.parquet"
        # each file's rows 10 s after the last's: the next file's rows move the progress
        # (1 s watermark) past them, and they are synced then (a key's rows wait for it)
        pq.write_table(pa.table({
            "id": pa.array(ids, pa.int64()), "sensor": [r[0] for r in rows],
            "a": pa.array([r[1] for r in rows], pa.int64()),
            "b": pa.array([r[2] for r in rows], pa.int64()),
            "ts": pa.array((f * 10_000_000 + ids * 100_000).tolist(), pa.timestamp("us"))}),
            path)
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))  # oldest first
    # a last row at 40 s moves the progress past the third file's rows (it waits itself)
    path = tmp_path / "events" / "e3.parquet"
    pq.write_table(pa.table({
        "id": pa.array([len(ranges)], pa.int64()), "sensor": ["end"],
        "a": pa.array([0], pa.int64()), "b": pa.array([0], pa.int64()),
        "ts": pa.array([40_000_000], pa.timestamp("us"))}), path)
    os.utime(path, (1_700_000_003, 1_700_000_003))
    (tmp_path / "job.wsql").write_text(KEYED_JOB)
    run_killed_at(tmp_path, stage)
    run_in_process(ws, tmp_path)
    got = {}
    for part in sorted((tmp_path / "out" / "synced").glob("job=*/batch=*/*.parquet")):
        for r in pq.read_table(part).to_pylist():
            assert r["id"] not in got, "a row twice"
            got[r["id"]] = r
    want = _oracle(x.astype(np.float64), ranges)
    assert sorted(got) == list(range(len(ranges)))
    for i in range(len(ranges)):
        np.testing.assert_allclose(got[i]["f"]["samples"], want[i][0], atol=2e-6,
                                   err_msg=str(i))
        np.testing.assert_allclose(got[i]["g"]["samples"], want[i][1], atol=2e-6,
                                   err_msg=str(i))


@pytest.mark.parametrize("order", [[(100, 0), (100, 50), (150, 10)],
                                   [(100, 50), (100, 0), (150, 0), (150, 10)]])
def test_an_empty_range_overlaps_nothing_wherever_it_sorts(order):
    """No Spark: a key's ranges as the stage checks them, (start sample, samples): an empty
    range (a point event) beside one of the same start is no overlap, in either order;
    a range starting inside another still is (SEGMENT_ORDER)."""
    import pyarrow as pa

    from wavesql.planner.segment_stage import _check_disjoint
    from wavesql.udfs.sigseg import SignalError

    seg = pa.struct([("start", pa.int64()), ("rate", pa.float64()),
                     ("samples", pa.list_(pa.float32()))])

    def piece(rows):
        return pa.RecordBatch.from_arrays([pa.array(
            [{"start": s, "rate": 1000.0, "samples": [0.0] * n} for s, n in rows], seg)],
            names=["ch1"])

    _check_disjoint(piece(order), ["ch1"], {}, ("x",), ("sensor",))
    with pytest.raises(SignalError) as err:
        _check_disjoint(piece(order + [(155, 5)]), ["ch1"], {}, ("x",), ("sensor",))
    assert err.value.code == "SEGMENT_ORDER" and "overlap" in str(err.value)


def test_a_timestamp_keys_saved_state_is_found_in_any_session_time_zone():
    """No Spark: a TIMESTAMP key comes in the session's time zone; the name its state is
    saved under is the same instant's in any zone, and the one UTC sessions wrote."""
    import datetime
    import json
    from zoneinfo import ZoneInfo

    from wavesql.planner.segment_stage import _key_text

    utc = datetime.datetime(2026, 3, 1, 12, 30, tzinfo=datetime.timezone.utc)
    paris = utc.astimezone(ZoneInfo("Europe/Paris"))
    assert _key_text(("a", paris)) == _key_text(("a", utc))
    assert _key_text(("a", utc)) == json.dumps(["a", "2026-03-01 12:30:00+00:00"])
    assert _key_text((None, 3)) == json.dumps([None, 3])


def test_a_row_behind_its_keys_state_is_split_off_with_its_reason():
    """No Spark: continuously a key's rows (start order) whose range starts before the end
    of the key's last range -- one delivered before (``ends``) or one before it in the
    batch -- are split off as late rows with their reason; NULL and empty ranges never
    are; ``ends`` advances over the kept rows only."""
    import pyarrow as pa

    from wavesql.planner.segment_stage import _split_late

    seg = pa.struct([("start", pa.int64()), ("rate", pa.float64()),
                     ("samples", pa.list_(pa.float32()))])
    rows = [(100, 50), None, (150, 0), (150, 20), (160, 10), (170, 30)]
    piece = pa.RecordBatch.from_arrays(
        [pa.array([None if r is None else {"start": r[0], "rate": 1.0,
                                            "samples": [0.0] * r[1]} for r in rows], seg),
         pa.array(range(len(rows)), pa.int64())], names=["ch1", "id"])
    ends = {"ch1": (120, 160)}  # delivered: [120, 160)
    kept, late = _split_late(piece, ["ch1"], ends, ("y",), ("sensor",))
    assert kept.column("id").to_pylist() == [1, 2, 4, 5]  # [160, 170) meets [120, 160)
    rows_late, reasons = late
    assert rows_late.column("id").to_pylist() == [0, 3]
    assert "[100, 150) of `ch1` (samples) for key (sensor = 'y') comes before [120, 160)" \
        in reasons[0]
    assert "[150, 170) of `ch1` (samples) for key (sensor = 'y') overlaps [120, 160)" \
        in reasons[1]
    assert all(r.startswith("too late for its key's state") for r in reasons)
    assert ends == {"ch1": (170, 200)}
    # nothing behind: all kept, None for the late rows
    kept, late = _split_late(piece.slice(5), ["ch1"], {"ch1": (0, 170)}, ("y",), ("sensor",))
    assert late is None and kept.num_rows == 1
