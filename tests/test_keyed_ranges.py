"""A detector's range still open at the end of a view's segments: ``threshold_ranges(ch1, t)
OVER (PARTITION BY sensor)`` (per key), and without a key (one ordered pass).

The range above the threshold up to a key's last sample is reported once, at the key's
end -- as a WAV signal's scan reports it at the signal's end: a row of its own, NULL in
the other outputs and columns, the key columns the key's. (It used to be dropped without
an error: the stage never flushed the detector.)

Oracle: the rule of ``threshold_ranges``' docstring written out here over each recording's
samples with numpy -- maximal runs of samples ``> t``, runs at most ``min_gap`` samples
apart merged, each range ``[first, last above + 1)`` with its largest sample -- including
the range open at the end.
"""

from __future__ import annotations

import numpy as np
import pytest

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

pytestmark = pytest.mark.spark

RATE = 8000
THR = 0.5
#: key -> (samples, bursts above the threshold): 'a' ends above (its last two bursts 20
#: samples apart: one range with min_gap 40), 'b' ends 10 samples below (closed with
#: min_gap 0, still open with min_gap 40), 'c' is one segment ending above, None (a NULL
#: key) ends above too
SENSORS = {
    "a": (5037, [(1200, 1350), (2990, 3020), (2000, 2100), (2130, 2200), (4800, 4990),
                 (5010, 5037)]),
    "b": (4000, [(500, 600), (2500, 2700), (3980, 3990)]),
    "c": (700, [(650, 700)]),
    None: (2000, [(10, 20), (1900, 2000)]),
}


def _samples(n: int, bursts, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = 0.3 * rng.random(n)
    for lo, hi in bursts:
        x[lo:hi] = 0.6 + 0.3 * rng.random(hi - lo)
    return x.astype(np.float32)


def _oracle(x: np.ndarray, thr: float, min_gap: int) -> list[tuple[int, int, float]]:
    above = np.concatenate(([0], (x > thr).astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(above))
    out: list[list] = []
    for lo, hi in zip(edges[0::2].tolist(), edges[1::2].tolist()):
        if out and lo - out[-1][1] <= min_gap:
            out[-1][1] = hi
        else:
            out.append([lo, hi])
    return [(lo, hi, float(x[lo:hi].max())) for lo, hi in out]


@pytest.fixture
def sensors(ws, tmp_path):
    data, parts = {}, []
    for i, (key, (n, bursts)) in enumerate(SENSORS.items()):
        name = f"s{i}"
        x = _samples(n, bursts, seed=40 + i)
        folder = tmp_path / name
        folder.mkdir()
        write_wav(str(folder / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
        ws.sql(f"CREATE SIGNAL {name} (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
        data[key] = x.astype(np.float64)
        label = "CAST(NULL AS STRING)" if key is None else f"'{key}'"
        parts.append(f"SELECT {label} AS sensor, start_sample(ch1) AS s, ch1 "
                     f"FROM {name} [SAMPLES 1000]")
    ws.sql("CREATE VIEW all_sensors AS " + " UNION ALL ".join(parts))
    return ws, data


def _ranges(rows, column: str) -> list[tuple[int, int, float]]:
    return sorted((t.start, t.end, t.value) for r in rows
                  for t in (getattr(r, column) or []))


def _check(got, want):
    assert [g[:2] for g in got] == [w[:2] for w in want]
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=1e-6)


def test_a_range_open_at_a_keys_end_is_closed_there(sensors):
    """Four keys (one of one segment, a NULL key) in parallel, min_gap 0 and 40 in one
    program: every key's ranges are the oracle's, the one open at its end included, each
    once; that one comes in the key's tail row (its key, NULL segment columns)."""
    ws, data = sensors
    rows = ws.sql("SELECT sensor, s, threshold_ranges(ch1, 0.5) OVER (PARTITION BY sensor) AS r0,"
                  " threshold_ranges(ch1, 0.5, 40) OVER (PARTITION BY sensor) AS r40 "
                  "FROM all_sensors").collect()
    assert {r.sensor for r in rows} == set(SENSORS)
    for key, x in data.items():
        mine = [r for r in rows if r.sensor == key]
        want0, want40 = _oracle(x, THR, 0), _oracle(x, THR, 40)
        _check(_ranges(mine, "r0"), want0)
        _check(_ranges(mine, "r40"), want40)
        # the tail row: no segment's row, holding the ranges open at the key's end
        tails = [r for r in mine if r.s is None]
        assert len(tails) == 1, key
        tail = tails[0]
        assert [(t.start, t.end) for t in tail.r40] == [want40[-1][:2]]
        assert want40[-1][1] >= len(x) - 40  # open at the end with min_gap 40
        if want0[-1][1] == len(x):  # above to the last sample: open with min_gap 0 too
            assert [(t.start, t.end) for t in tail.r0] == [want0[-1][:2]]
        else:  # 'b': closed by its last segment's 10 samples below; nothing pending
            assert key == "b" and tail.r0 is None


@pytest.mark.slow
def test_without_a_key_the_signals_end_closes_it_as_the_wav_scan_does(sensors):
    """The ordered pass over a subquery's segments (no key) and the WAV scan itself: the
    range above up to the signal's last sample is reported once, in a last row of its own
    (NULL in the other columns), both equal to the oracle."""
    ws, data = sensors
    want = _oracle(data["a"], THR, 0)
    assert want[-1][1] == len(data["a"])
    over_rows = ws.sql("SELECT s, threshold_ranges(ch1, 0.5) AS r FROM "
                       "(SELECT start_sample(ch1) AS s, ch1 FROM s0 [SAMPLES 1000]) v").collect()
    scan_rows = ws.sql("SELECT start_sample(ch1) AS s, threshold_ranges(ch1, 0.5) AS r "
                       "FROM s0 [SAMPLES 1000]").collect()
    for rows in (over_rows, scan_rows):
        _check(_ranges(rows, "r"), want)
        tail = [r for r in rows if r.s is None]
        assert len(tail) == 1 and [(t.start, t.end) for t in tail[0].r] == [want[-1][:2]]
    # a condition on the other columns applies to the tail row as to any row (NULL there)
    sql = ("SELECT s, threshold_ranges(ch1, 0.5) AS r FROM (SELECT start_sample(ch1) AS s, "
           "ch1 FROM s0 [SAMPLES 1000]) v WHERE s >= 0")
    assert _ranges(ws.sql(sql).collect(), "r")[-1][:2] == want[-2][:2]
    _check(_ranges(ws.sql(sql + " OR s IS NULL").collect(), "r"), want)


# -- over a SYNC result: each key's synced ranges, in start order, are one signal ----------
N_SYNC = 20000
#: (key, start, end), out of start order: x's ranges meet (one signal; a burst crosses 3000,
#: one ends at 4500 exactly and is closed by the next range's first sample), x and the NULL
#: key end above; y's burst open at 5000 is closed by the gap to 7000 (at its last above
#: sample) and y ends above; z is one range ending above; w's second range lies beyond the
#: recording (a NULL segment: NULL results, the key's state left alone), so w's open range
#: is flushed after it.
SYNC_RANGES = [("x", 3000, 4500), ("y", 7000, 8000), ("x", 1000, 3000), (None, 1200, 1700),
               ("y", 0, 2500), ("z", 5000, 6000), ("x", 4500, 9000), ("y", 2500, 5000),
               (None, 200, 1200), ("w", 19000, 25000), ("w", 100, 600)]
SYNC_BURSTS = [(550, 600), (900, 1100), (1650, 1700), (2950, 3100), (4400, 4500),
               (4950, 5000), (5990, 6000), (7900, 8000), (8800, 9000)]


def _sync_oracle(x, ranges, min_gap):
    """{key: ranges}: each key's ranges cut into runs that meet; a gap (or a range beyond
    the recording) ends a run, and each run is one signal for the oracle."""
    out = {}
    for key in {r[0] for r in ranges}:
        mine = sorted((lo, hi) for k, lo, hi in ranges if k == key and hi <= len(x))
        runs: list[list[int]] = []
        for lo, hi in mine:
            if runs and runs[-1][1] == lo:
                runs[-1][1] = hi
            else:
                runs.append([lo, hi])
        out[key] = sorted((lo + a, lo + b, v) for lo, hi in runs
                          for a, b, v in _oracle(x[lo:hi], THR, min_gap))
    return out


@pytest.fixture
def synced(ws, tmp_path):
    import pandas as pd

    x = _samples(N_SYNC, SYNC_BURSTS, seed=7)
    for d in ("mic", "ctl"):
        (tmp_path / d).mkdir()
    write_wav(str(tmp_path / "mic" / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'mic'}' "
           "FORMAT wav SEGMENT 512")
    pd.DataFrame({"id": np.arange(len(SYNC_RANGES), dtype=np.int64),
                  "sensor": [r[0] for r in SYNC_RANGES],
                  "a": np.array([r[1] for r in SYNC_RANGES], dtype=np.int64),
                  "b": np.array([r[2] for r in SYNC_RANGES], dtype=np.int64),
                  "ts": pd.to_datetime([r[1] * 1_000_000 // RATE for r in SYNC_RANGES],
                                       unit="us").astype("datetime64[us]")}).to_parquet(
        tmp_path / "ctl" / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    return ws, x.astype(np.float64)


SYNC_SQL = ("SELECT c.id, c.sensor, threshold_ranges(s.ch1, 0.5) OVER (PARTITION BY c.sensor) "
            "AS r0, threshold_ranges(s.ch1, 0.5, 40) OVER (PARTITION BY c.sensor) AS r40 "
            "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)")


@pytest.mark.slow
def test_over_a_sync_result_a_keys_last_range_closes_its_open_range(synced):
    ws, x = synced
    rows = ws.sql(SYNC_SQL).collect()
    assert sorted(r.id for r in rows if r.id is not None) == list(range(len(SYNC_RANGES)))
    for column, gap in (("r0", 0), ("r40", 40)):
        want = _sync_oracle(x, SYNC_RANGES, gap)
        for key, ranges in want.items():
            _check(_ranges([r for r in rows if r.sensor == key], column), ranges)
    # the tail rows: a control row holding the key only (c.id NULL)
    tails = {r.sensor: r for r in rows if r.id is None}
    assert sum(r.id is None for r in rows) == 5 and set(tails) == {"x", "y", "z", "w", None}
    assert [(t.start, t.end) for t in tails["x"].r0] == [(8800, 9000)]
    assert [(t.start, t.end) for t in tails["w"].r0] == [(550, 600)]
    # y's burst open at 5000 is closed by the gap, in the row of y's next range
    assert (4950, 5000) in [(t.start, t.end) for r in rows if r.id == 1 for t in r.r0]
    assert next(r for r in rows if r.id == 9).r0 is None  # beyond the recording: NULL


def test_continuously_per_key_over_a_sync_it_stays_refused(synced, tmp_path):
    """Continuously a key's next micro-batch may continue its open range, and a key that
    never comes again would hold it forever: NOT_IMPLEMENTED, with the statement's
    position, when the query is planned -- before anything runs."""
    ws, _ = synced
    with pytest.raises(WaveSQLError) as err:
        ws.stream(SYNC_SQL, tmp_path / "out", tmp_path / "ckpt")
    assert err.value.code == "NOT_IMPLEMENTED" and err.value.span is not None
    assert "threshold_ranges" in err.value.message and "drop the OVER" in err.value.hint
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt").exists()
