"""SYNC JOIN: sample-exact segments over control ranges, against a numpy oracle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.data import COUNTING_WAV
from wavesql.errors import WaveSQLError
from wavesql.udfs.sigseg import SigSeg
from wavesql.udfs.sync import cut_range
from wavesql.udfs.wav import write_wav

RATE = 8000
SECOND = 1_000_000


def sample_at(time_us: int, rate: int) -> int:
    """The oracle's time-to-sample rule, as the README states it (not WaveSQL's code): a
    bound at ``time_us`` goes to the first sample at or after it, ceil(t * rate / 1 s),
    in exact integers."""
    return -((-time_us * rate) // 1_000_000)


def _counting_samples():
    """The real recording's samples, read by scipy (16-bit PCM, scaled by 1/32768 as
    WaveSQL declares FLOAT channels of integer WAVs)."""
    import scipy.io.wavfile

    rate, data = scipy.io.wavfile.read(COUNTING_WAV)
    assert rate == 44100 and data.dtype == np.int16
    return data.astype(np.float32) / 32768


@pytest.fixture(autouse=True, params=["files", "join"])
def read_mode(request, spark):
    """Every test runs with both ways of reading a range (planner/lower.py SYNC_READ_CONF):
    from the WAV files directly, and the binned range join over the stored segments."""
    spark.conf.set("wavesql.sync.read", request.param)
    yield request.param
    spark.conf.unset("wavesql.sync.read")


def _timeline(tmp_path):
    """Two channels, three timestamped files: [0, 5000), [5000, 9000), gap, [12000, 15000)."""
    rng = np.random.default_rng(5)
    folder = tmp_path / "rec"
    folder.mkdir()
    truth = np.full((15000, 2), np.nan, dtype=np.float64)
    for start, length, name in ((0, 5000, "a_1970-01-01T00-00-00Z.wav"),
                                (5000, 4000, "a_1970-01-01T00-00-00.625Z.wav"),
                                (12000, 3000, "a_1970-01-01T00-00-01.5Z.wav")):
        x = (rng.standard_normal((length, 2)) * 0.3).astype(np.float32)
        write_wav(folder / name, x, RATE, "float32")
        truth[start:start + length] = x
    return folder, truth


def _control(ws, tmp_path, ranges, kind="TIMESTAMP"):
    folder = tmp_path / "ctl"
    folder.mkdir()
    frame = pd.DataFrame({"id": np.arange(len(ranges), dtype=np.int64),
                          "a": [r[0] for r in ranges], "b": [r[1] for r in ranges]})
    if kind == "TIMESTAMP":
        for col in ("a", "b"):
            frame[col] = pd.to_datetime(frame[col], unit="us").astype("datetime64[us]")
    frame.to_parquet(folder / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, a {kind}, b {kind}) FROM '{folder}' FORMAT parquet")


def _expected(truth, lo, hi, policy):
    if hi < lo:
        return None
    if hi == lo:
        return np.zeros((0, truth.shape[1]))
    inside = truth[max(lo, 0):max(min(hi, len(truth)), 0)]
    covered = ~np.isnan(inside[:, 0])
    if lo >= 0 and hi <= len(truth) and covered.all():
        return inside
    if policy == "TRUNCATE" and covered.any():
        idx = np.flatnonzero(covered)
        if idx[-1] - idx[0] + 1 == len(idx):  # one run, no gap inside
            return inside[idx[0]:idx[-1] + 1]
    return None


@pytest.mark.parametrize("policy", ["NULL", "TRUNCATE"])
def test_sync_is_sample_exact_over_files_segments_and_gaps(ws, tmp_path, policy):
    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    rng = np.random.default_rng(1)
    us_per_sample = SECOND // RATE  # 125
    ranges = [(0, 125), (0, 5000 * us_per_sample), (4999 * us_per_sample, 5001 * us_per_sample),
              (8000 * us_per_sample, 13000 * us_per_sample),  # across the gap
              (12000 * us_per_sample, 15000 * us_per_sample),  # touches the end
              (14000 * us_per_sample, 16000 * us_per_sample),  # past the end
              (3 * SECOND, 4 * SECOND), (700_000, 700_000), (900_000, 800_000)]
    for _ in range(30):  # random, including ranges starting and ending inside segments
        a = int(rng.integers(0, 15500 * us_per_sample))
        ranges.append((a, a + int(rng.integers(1, 6000 * us_per_sample))))
    _control(ws, tmp_path, ranges)
    rows = ws.sql(f"SELECT c.id, c.a, r.x, r.y FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
                  f"MISSING {policy}").collect()
    assert len(rows) == len(ranges)
    for row in rows:
        a, b = ranges[row.id]
        lo, hi = sample_at(a, RATE), sample_at(b, RATE)
        want = _expected(truth, lo, hi, policy)
        if want is None:
            assert row.x is None and row.y is None, (a, b)
            continue
        assert row.x is not None, (a, b)
        first = lo if policy == "NULL" or lo >= 0 and not np.isnan(truth[lo, 0]) else None
        if first is not None:
            assert row.x.start == first
        np.testing.assert_array_equal(np.asarray(row.x.samples, dtype=np.float32),
                                      want[:, 0].astype(np.float32))
        np.testing.assert_array_equal(np.asarray(row.y.samples, dtype=np.float32),
                                      want[:, 1].astype(np.float32))
        assert row.x.rate == RATE


def test_sync_over_the_real_recording_with_sample_numbers(ws, tmp_path):
    samples = _counting_samples()
    frames = len(samples)
    ws.sql(f"CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{COUNTING_WAV}' "
           "FORMAT wav SEGMENT 4096")
    rng = np.random.default_rng(2)
    ranges = [(int(s), int(s + rng.integers(1, 50_000)))
              for s in rng.integers(0, frames - 50_000, 25)]
    ranges += [(0, frames), (frames - 10, frames)]
    _control(ws, tmp_path, ranges, kind="BIGINT")
    rows = ws.sql("SELECT id, voice FROM ctl d SYNC JOIN counting m ON RANGE (d.a, d.b)").collect()
    for row in rows:
        lo, hi = ranges[row.id]
        assert row.voice.start == lo
        np.testing.assert_array_equal(np.asarray(row.voice.samples, dtype=np.float32),
                                      samples[lo:hi].astype(np.float32))


@pytest.mark.parametrize("kind", ["DOUBLE", "FLOAT", "DECIMAL(12,6)"])
def test_sync_ranges_in_seconds_on_the_signals_timeline(ws, tmp_path, kind):
    # Annotation files give times in seconds from the start of the recording; a bound
    # goes to the first sample at or after it, the seconds taken as written (0.1 s at
    # 8 kHz is sample 800, although 0.1 * 8000 is 800.0000000000001 in binary floating
    # point). Oracle: Python's Decimal over the same text.
    import decimal
    import math

    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    ranges = [("0.1", "0.35"), ("0", "0.000125"), ("0.0001", "0.0002"), ("0.624", "0.626"),
              ("1.1", "1.6"), ("1.5", "1.875"), ("0.3", "0.3"), ("1.7", "1.6")]
    rng = np.random.default_rng(8)
    for _ in range(12):
        a = round(float(rng.uniform(0, 1.9)), 4)
        ranges.append((repr(a), repr(round(a + float(rng.uniform(0.001, 0.3)), 4))))
    folder_c = tmp_path / "ctl"
    folder_c.mkdir()
    csv = "id,a,b\n" + "".join(f"{i},{a},{b}\n" for i, (a, b) in enumerate(ranges))
    (folder_c / "c.csv").write_text(csv)
    ws.sql(f"CREATE STREAM ctl (id BIGINT, a {kind}, b {kind}) FROM '{folder_c}' FORMAT csv "
           "OPTIONS (header = 'true')")
    rows = ws.sql("SELECT c.id, r.x FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b)").collect()
    assert len(rows) == len(ranges)

    def sample(text):  # a FLOAT holds the nearest float32, whose shortest text is read
        exact = decimal.Decimal(text if kind != "FLOAT" else str(np.float32(text)))
        return math.ceil(exact * RATE)

    for row in rows:
        lo, hi = (sample(t) for t in ranges[row.id])
        want = _expected(truth, lo, hi, "NULL")
        if want is None:
            assert row.x is None, ranges[row.id]
            continue
        assert row.x.start == lo, ranges[row.id]
        np.testing.assert_array_equal(np.asarray(row.x.samples, dtype=np.float32),
                                      want[:, 0].astype(np.float32))


@pytest.mark.parametrize("query", [
    # a CTE over a CTE as the control
    "WITH q AS (SELECT * FROM ctl), c AS (SELECT id, a, b FROM q WHERE id % 2 = 0) "
    "SELECT c.id, r.x FROM c SYNC JOIN rec r ON RANGE (c.a, c.b)",
    # a subquery as the control
    "SELECT c.id, r.x FROM (SELECT id, a, b FROM ctl WHERE id % 2 = 0) c "
    "SYNC JOIN rec r ON RANGE (c.a, c.b)",
])
def test_a_cte_or_a_subquery_is_a_sync_control(ws, tmp_path, query):
    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    ranges = [(int(a), int(a) + int(n)) for a, n in zip(range(0, 4000, 300), range(5, 400, 29))]
    _control(ws, tmp_path, ranges, kind="BIGINT")
    rows = ws.sql(query).collect()
    assert sorted(r.id for r in rows) == list(range(0, len(ranges), 2))
    for row in rows:
        lo, hi = ranges[row.id]
        np.testing.assert_array_equal(np.asarray(row.x.samples, dtype=np.float32),
                                      truth[lo:hi, 0].astype(np.float32))


def test_signal_functions_over_the_synced_segments_in_the_same_select(ws, tmp_path):
    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    ranges = [(0, 700), (4500, 5600), (100, 101), (8900, 9100)]  # the last: over the gap
    _control(ws, tmp_path, ranges, kind="BIGINT")
    rows = ws.sql("SELECT c.id, seg_rms(r.x) AS rx, seg_max(y) AS my, width(r.x) AS n "
                  "FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
                  "WHERE seg_rms(r.x) > 0").collect()
    got = {r.id: (r.rx, r.my, r.n) for r in rows}
    assert sorted(got) == [0, 1, 2]  # the gap's range has NULL segments: no rms, filtered
    for i in got:
        lo, hi = ranges[i]
        seg = truth[lo:hi].astype(np.float32).astype(np.float64)
        assert got[i][2] == hi - lo
        np.testing.assert_allclose(got[i][0], np.sqrt(np.mean(seg[:, 0] ** 2)), rtol=1e-12)
        assert got[i][1] == seg[:, 1].max()
    every = ws.sql("SELECT c.id, seg_rms(r.x) AS rx FROM ctl c SYNC JOIN rec r "
                   "ON RANGE (c.a, c.b)").collect()  # without a WHERE: NULL for the gap
    assert sorted((r.id, r.rx is None) for r in every) == [(0, False), (1, False),
                                                           (2, False), (3, True)]


def test_stateful_functions_over_synced_segments_start_from_rest_per_range(ws, tmp_path):
    """A SYNC row's segment is a signal of its own: a filter starts from rest at the
    range's first sample (scipy over x[lo:hi] alone), whatever other rows there are --
    overlapping ranges included -- and a detector's range still open at the row's end is
    the row's. A NULL segment (over the gap) gives NULL. cfar, whose state runs from row
    to row, has no row order here: UNDEFINED_ORDER at the call."""
    import scipy.signal as sps

    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    ranges = [(0, 700), (4500, 5600), (100, 101), (8900, 9100), (300, 1300), (12000, 12900)]
    _control(ws, tmp_path, ranges, kind="BIGINT")
    rows = ws.sql("SELECT c.id, lowpass(r.x, 100.0) AS f, fir(y, array(0.5D, 0.25D, 0.25D)) AS g,"
                  " threshold_ranges(x, 0.3) AS tr, seg_rms(lowpass(x, 100.0)) AS rms "
                  "FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b)").collect()
    got = {r.id: r for r in rows}
    assert sorted(got) == list(range(len(ranges)))
    sos = sps.butter(4, 100.0, btype="low", fs=RATE, output="sos")
    for i, (lo, hi) in enumerate(ranges):
        row = got[i]
        if i == 3:  # over the gap: NULL segments, NULL results
            assert row.f is None and row.g is None and row.tr is None and row.rms is None
            continue
        x = truth[lo:hi, 0].astype(np.float32).astype(np.float64)
        y = truth[lo:hi, 1].astype(np.float32).astype(np.float64)
        want_f = sps.sosfilt(sos, x)
        assert row.f.start == lo and len(row.f.samples) == hi - lo
        np.testing.assert_allclose(row.f.samples, want_f, atol=1e-6)
        np.testing.assert_allclose(row.g.samples, sps.lfilter([0.5, 0.25, 0.25], [1.0], y),
                                   atol=1e-6)
        assert row.rms == pytest.approx(np.sqrt(np.mean(want_f.astype(np.float32)
                                                        .astype(np.float64) ** 2)), rel=1e-6)
        above = np.concatenate(([0], (x > 0.3).astype(np.int8), [0]))
        edges = np.flatnonzero(np.diff(above))
        want_tr = [(lo + a, lo + b, x[a:b].max()) for a, b in zip(edges[0::2], edges[1::2])]
        assert [(t.start, t.end) for t in row.tr] == [w[:2] for w in want_tr]
        np.testing.assert_allclose([t.value for t in row.tr], [w[2] for w in want_tr], rtol=1e-6)
    assert got[1].tr[-1].end == 5600  # above at the row's last sample: closed there
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SELECT c.id FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
               "WHERE cfar(seg_rms(r.x))")
    assert e.value.code == "UNDEFINED_ORDER" and e.value.span is not None
    assert "cfar" in e.value.message and "subquery" in (e.value.hint or "")


def test_duplicate_and_null_control_rows(ws, tmp_path):
    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    folder = tmp_path / "ctl"
    folder.mkdir()
    pd.DataFrame({"a": [10, 10, None], "b": [20, 20, 30]}, dtype="Int64").to_parquet(
        folder / "c.parquet")
    ws.sql(f"CREATE STREAM ctl (a BIGINT, b BIGINT) FROM '{folder}' FORMAT parquet")
    rows = ws.sql("SELECT a, x FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b)").collect()
    assert sorted((r.a is None, r.x is None) for r in rows) == [(False, False), (False, False),
                                                               (True, True)]


def test_sync_errors(ws, tmp_path):
    folder, _ = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    _control(ws, tmp_path, [(8000 * 125, 13000 * 125)])
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT c.id FROM ctl c SYNC JOIN rec r ON RANGE (c.id, 'x')")
    assert err.value.code == "TYPE_ERROR" and err.value.span is not None
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT * FROM ctl c SYNC JOIN ctl r ON RANGE (c.a, c.b)")
    assert err.value.code == "STREAMING_RULE"
    from wavesql.spark_errors import translate_runtime_error

    df = ws.sql("SELECT c.id, r.x FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) MISSING ERROR")
    with pytest.raises(Exception) as raised:
        df.collect()
    error = translate_runtime_error(raised.value)
    assert error.code == "SIGNAL_GAP" and "[8000, 13000)" in error.message


def test_cut_range_rules():
    f = lambda s, n: SigSeg(s, 10.0, np.arange(s, s + n, dtype=np.float32))  # noqa: E731
    pieces = [f(0, 4), f(4, 4), f(10, 5)]
    assert cut_range(pieces, 1, 7, 10.0, "NULL").samples.tolist() == [1, 2, 3, 4, 5, 6]
    assert cut_range(pieces, 6, 12, 10.0, "NULL") is None          # over the gap
    assert cut_range(pieces, 6, 12, 10.0, "TRUNCATE") is None      # a gap inside: never closed
    assert cut_range(pieces, 12, 20, 10.0, "TRUNCATE").samples.tolist() == [12, 13, 14]
    assert cut_range(pieces, 3, 3, 10.0, "NULL").width == 0
    with pytest.raises(Exception) as err:
        cut_range(pieces, 6, 12, 10.0, "ERROR")
    assert "SIGNAL_GAP" in str(err.value)


def test_several_signals_in_one_select(ws, tmp_path):
    """Two SYNC JOINs over one control, each with its own range: each signal's segments are
    those of a SYNC of it alone (numpy oracle), the control row is kept once."""
    folder, truth = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    other = tmp_path / "other"
    other.mkdir()
    z = (np.random.default_rng(9).standard_normal((16000, 1)) * 0.1).astype(np.float32)
    write_wav(other / "z.wav", z, RATE, "float32")
    ws.sql(f"CREATE SIGNAL acc (z FLOAT) RATE {RATE} HZ FROM '{other}' FORMAT wav SEGMENT 700")
    rng = np.random.default_rng(4)
    ranges = [(int(a), int(a) + int(rng.integers(1, 3000)) * 125)
              for a in rng.integers(1000, 14000 * 125, 25)] + [(0, 125), (0, 125)]
    _control(ws, tmp_path, ranges)
    rows = ws.sql("SELECT c.id, r.x, y, q.z AS acc_z FROM ctl c "
                  "SYNC JOIN rec r ON RANGE (c.a, c.b) "
                  "SYNC JOIN acc q ON RANGE (c.a - INTERVAL 1 MILLISECOND, c.b)").collect()
    assert sorted(r.id for r in rows) == list(range(len(ranges)))
    for row in rows:
        a, b = ranges[row.id]
        lo, hi = sample_at(a, RATE), sample_at(b, RATE)
        want = _expected(truth, lo, hi, "NULL")
        if want is None:
            assert row.x is None and row.y is None
        else:
            np.testing.assert_array_equal(np.asarray(row.x.samples, np.float32), want[:, 0])
            np.testing.assert_array_equal(np.asarray(row.y.samples, np.float32), want[:, 1])
        lo_z = sample_at(a - 1000, RATE)
        if lo_z < 0 or hi > len(z):  # beyond the recording: NULL (MISSING NULL)
            assert row.acc_z is None
            continue
        assert row.acc_z.start == lo_z
        np.testing.assert_array_equal(np.asarray(row.acc_z.samples, np.float32), z[lo_z:hi, 0])
    star = ws.sql("SELECT * FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
                  "SYNC JOIN acc q ON RANGE (c.a, c.b)")
    assert star.columns == ["id", "a", "b", "x", "y", "z"]
    # the same signal twice, under two aliases and two ranges
    rows = ws.sql("SELECT c.id, p.z AS before, n.z AS after FROM ctl c "
                  "SYNC JOIN acc p ON RANGE (c.a - INTERVAL 10 MILLISECONDS, c.a) "
                  "SYNC JOIN acc n ON RANGE (c.a, c.a + INTERVAL 10 MILLISECONDS)").collect()
    for row in rows:
        at = sample_at(ranges[row.id][0], RATE)
        if at < 80:
            assert row.before is None and row.after.start == at
            continue
        assert row.before.start == at - 80 and row.after.start == at
        np.testing.assert_array_equal(np.asarray(row.after.samples, np.float32),
                                      z[at:at + 80, 0])


def test_several_signals_errors(ws, tmp_path):
    folder, _ = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    ws.sql(f"CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{COUNTING_WAV}' "
           "FORMAT wav SEGMENT 4096")
    _control(ws, tmp_path, [(0, 1000)])
    cases = {
        "SELECT * FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
        "SYNC JOIN rec r ON RANGE (c.a, c.b)": ("INVALID_OPTION", "rec"),
        "SELECT * FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
        "JOIN ctl d ON c.id = d.id": ("NOT_IMPLEMENTED", "ctl"),
    }
    for text, (code, underlined) in cases.items():
        with pytest.raises(WaveSQLError) as err:
            ws.sql(text)
        assert err.value.code == code, (text, err.value)
        assert text[err.value.span.start:err.value.span.end] == underlined, err.value.span
    # signals of different rates SYNC together: each range in its own signal's samples
    # (0..1000 us: samples 0..7 at 8 kHz, 0..44 at 44.1 kHz, the first at or after each bound)
    mixed = ws.sql("SELECT c.id, r.x, m.voice FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b) "
                   "SYNC JOIN counting m ON RANGE (c.a, c.b)").collect()
    assert mixed[0].x.rate == RATE and len(mixed[0].x.samples) == sample_at(1000, RATE) == 8
    assert mixed[0].voice.rate == 44100 and mixed[0].voice.start == 0
    np.testing.assert_array_equal(np.asarray(mixed[0].voice.samples, np.float32),
                                  _counting_samples()[:sample_at(1000, 44100)])


def test_read_mode_decides_whether_the_recording_is_scanned(ws, tmp_path, read_mode):
    """`files` reads only the ranges' samples: no scan of the signal in the plan."""
    folder, _ = _timeline(tmp_path)
    ws.sql(f"CREATE SIGNAL rec (x FLOAT, y FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512 OPTIONS (timeline = 'timestamped')")
    _control(ws, tmp_path, [(0, 1000)])
    df = ws.sql("SELECT c.id, r.x FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b)")
    plan = df._jdf.queryExecution().executedPlan().toString()
    scanned = "wavesql_wav" in plan.lower() or "BatchScan" in plan or "wav_scan" in plan
    assert scanned == (read_mode == "join"), plan
    ws.spark.conf.set("wavesql.sync.read", "sometimes")
    with pytest.raises(WaveSQLError) as err:
        ws.sql("SELECT c.id, r.x FROM ctl c SYNC JOIN rec r ON RANGE (c.a, c.b)")
    assert err.value.code == "INVALID_SETTING"
