"""Signal functions over a segment column that is not a signal (issue 21 item 2: segments
are values), continuously and in batch: a SYNC CTE's synced segments windowed by the
control's time, a signal CTE's windows read row by row and windowed again, a view of
them -- the signal functions applied in the query that reads the column, not in the one
that cut it (planner/analyze/signal_stages.py ``_segment_source``; continuously the rest
over a part's rows, streaming/planning.py ``_check_row_by_row_stage``).

Oracles: numpy's RMS over the samples written, grouped by pandas into the windows by
hand -- nothing from WaveSQL."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from tests.test_derived_forms import SYNC_RATE, _catalog, _ms, _run, _split, _sync_setup
from wavesql.errors import WaveSQLError

SYNC_CTE = ("WITH q AS (SELECT c.id, c.t0, m.ch1 AS seg FROM ctl c SYNC JOIN mic m "
            "ON RANGE (c.t0, c.t1)) ")
WINDOWS = ("WITH w AS (SELECT start_time(ch1) AS t, ch1 AS seg FROM mic [SAMPLES 500]) ")


def _samples() -> np.ndarray:
    """The recording _sync_setup writes (same seed): 6 s at 1 kHz."""
    return np.random.default_rng(5).standard_normal(6 * SYNC_RATE).astype(np.float32)


def _rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(x.astype(np.float64) ** 2)))


def _instants(t_ms: pd.Series, width_ms: int) -> pd.Series:
    """The tumbling window instant of each time: [RANGE w SLIDE w] at instant i holds
    (i - w, i]."""
    return (np.ceil(t_ms / width_ms) * width_ms).astype(int)


def test_a_subquery_or_view_passing_segments_on_is_a_part_where_it_has_a_time():
    """Passing a channel's segments on with a ``start_time(...)`` column, a subquery or a
    view is a part marked ``segments`` (launch runs the query whole when it can: a
    pass-through subquery merges into the SELECT around it); without one it is no part
    (planned whole, as before), not a "needs start_time" error."""
    from wavesql.catalog import ViewDef

    body = WINDOWS[len("WITH w AS ("):-2]
    (part,) = _split(f"SELECT t, seg_rms(seg) AS r FROM ({body}) w").parts
    assert (part.name, part.time_column, part.segments, part.sync) == ("w", "t", True, False)
    catalog = _catalog(w=ViewDef("w", body))
    (part,) = _split("SELECT max(seg_rms(seg)) FROM w [RANGE 2 SECONDS]", catalog).parts
    assert (part.name, part.origin, part.segments) == ("w", "view", True)
    assert _split("SELECT count(*) FROM (SELECT ch1 FROM mic [SAMPLES 500] "
                  "WHERE seg_rms(ch1) > 1) q") is None
    # naming its columns (seg_rms(...), no segments) it is a part as before, not `segments`
    (part,) = _split("SELECT max(r) FROM (SELECT start_time(ch1) AS t, seg_rms(ch1) AS r "
                     "FROM mic [SAMPLES 500]) w [RANGE 2 SECONDS]").parts
    assert not part.segments


@pytest.mark.spark
def test_windows_over_a_sync_ctes_segment_column(ws, spark, tmp_path):
    """``avg(seg_rms(seg))`` per 2-second window of the control's time, the segments
    synced in a CTE: continuously the windows below the control's progress (4200 ms), in
    batch all three -- each equal to pandas over numpy's RMS of each control row's range.
    Before: NOT_IMPLEMENTED (continuously), "applied to a relation that is not a signal"
    (batch)."""
    rows = _sync_setup(ws, tmp_path)
    sql = SYNC_CTE + ("SELECT count(*) AS n, avg(seg_rms(seg)) AS r FROM q "
                      "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    want = rows.assign(instant=_instants(rows["t"], 2000)).groupby("instant").agg(
        n=("r", "size"), r=("r", "mean")).reset_index()
    got = _run(ws, spark, tmp_path, sql)
    got = got.assign(instant=_ms(got["_time"])).sort_values("instant")
    final = want[want["instant"] < 4200]
    assert got["instant"].tolist() == final["instant"].tolist() == [2000, 4000]
    assert got["n"].tolist() == final["n"].tolist()
    np.testing.assert_allclose(got["r"], final["r"], rtol=1e-6)
    assert got["_final"].all()
    batch = ws.sql(sql).toPandas()
    batch = batch.assign(instant=_ms(batch["_time"])).sort_values("instant")
    assert batch["instant"].tolist() == want["instant"].tolist() == [2000, 4000, 6000]
    assert batch["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(batch["r"], want["r"], rtol=1e-6)


@pytest.mark.spark
@pytest.mark.parametrize("form", ["cte", pytest.param("view", marks=pytest.mark.slow),
                                  pytest.param("subquery", marks=pytest.mark.slow)])
def test_a_signal_querys_segment_column_row_by_row_and_windowed(ws, spark, tmp_path, form):
    """The windows of 500 samples as a column of a CTE (or a catalog view, a subquery;
    these two before: "SignalStage in a continuous signal query"): ``seg_rms``
    of each row, and the ``max`` of it per 2-second window, continuously (every window:
    the recording is complete) and in batch, equal to numpy's RMS of each 500 samples."""
    _sync_setup(ws, tmp_path)
    x = _samples()
    starts = np.arange(0, len(x), 500)
    each = pd.DataFrame({"t": starts, "r": [_rms(x[s:s + 500]) for s in starts]})
    body = WINDOWS[len("WITH w AS ("):-2]
    head, source = (WINDOWS, "w") if form == "cte" else ("", "w") if form == "view" \
        else ("", f"({body}) w")
    if form == "view":
        ws.sql(f"CREATE VIEW w AS {body}")
    rows_sql = head + f"SELECT t, seg_rms(seg) AS r FROM {source}"
    for got in (_run(ws, spark, tmp_path, rows_sql), ws.sql(rows_sql).toPandas()):
        got = got.assign(ms=_ms(got["t"])).sort_values("ms")
        assert got["ms"].tolist() == each["t"].tolist()
        np.testing.assert_allclose(got["r"], each["r"], rtol=1e-6)

    windowed = head + (f"SELECT max(seg_rms(seg)) AS p FROM {source} "
                       "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    want = each.assign(instant=_instants(each["t"], 2000)).groupby("instant").agg(
        p=("r", "max")).reset_index()
    got = _run(ws, spark, tmp_path / "again", windowed)
    got = got.assign(instant=_ms(got["_time"])).sort_values("instant")
    # the signal's progress is its last sample's end, 6000 ms: a window at 6000 ms (rows
    # in (4000, 6000]) could still get a row at 6000 ms, so it is not final yet
    final = want[want["instant"] < 6000]
    assert got["instant"].tolist() == final["instant"].tolist() == [0, 2000, 4000]
    np.testing.assert_allclose(got["p"], final["p"], rtol=1e-6)
    batch = ws.sql(windowed).toPandas()
    batch = batch.assign(instant=_ms(batch["_time"])).sort_values("instant")
    assert batch["instant"].tolist() == want["instant"].tolist()
    np.testing.assert_allclose(batch["p"], want["p"], rtol=1e-6)


@pytest.mark.spark
def test_state_along_a_ctes_segment_column_goes_on_across_runs(ws, spark, tmp_path):
    """``lowpass(seg, 100.0)`` over a signal CTE's windows: in batch one ordered pass in
    start order; continuously the same, its state carried from micro-batch to micro-batch
    -- a first run over two files, a second over the third: the windows of both runs put
    end to end equal scipy's ``sosfilt`` over the whole recording (from rest, the second
    run's first window would not). Before: NOT_IMPLEMENTED."""
    from scipy import signal as sps
    from scipy.io import wavfile

    x = _samples()
    (tmp_path / "sig").mkdir()
    for i in range(2):
        wavfile.write(tmp_path / "sig" / f"mic_{i:03d}.wav", SYNC_RATE,
                      x[i * 2000:(i + 1) * 2000])
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {SYNC_RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    sql = WINDOWS + "SELECT t, lowpass(seg, 100.0) AS f FROM w"
    assert "state one ordered pass, kept between batches" in ws.explain(sql, "STREAM")
    first = _run(ws, spark, tmp_path, sql)
    wavfile.write(tmp_path / "sig" / "mic_002.wav", SYNC_RATE, x[4000:])
    got = _run(ws, spark, tmp_path, sql)
    assert set(first["batch"]) < set(got["batch"])  # (two runs: later batches added rows)
    got = got.assign(ms=_ms(got["t"])).sort_values("ms")
    assert got["ms"].tolist() == list(range(0, 6000, 500))
    assert [r["start"] for r in got["f"]] == list(range(0, 6000, 500))
    sos = sps.butter(4, 100.0, btype="low", fs=SYNC_RATE, output="sos")
    want = sps.sosfilt(sos, x.astype(np.float64))
    np.testing.assert_allclose(np.concatenate([r["samples"] for r in got["f"]]), want,
                               atol=2e-6)
    batch = ws.sql(sql).toPandas().assign(ms=lambda d: _ms(d["t"])).sort_values("ms")
    np.testing.assert_allclose(np.concatenate([r["samples"] for r in batch["f"]]), want,
                               atol=2e-6)


@pytest.mark.spark
def test_state_over_a_segment_column_is_refused_where_no_order_holds(ws, spark, tmp_path):
    """Over a window's rows a stateful function has no order in either mode (a sliding
    window repeats rows): refused at the call. Continuously, a detector whose range may
    stay open at the last segment is refused (no row would close it), and a stateful
    function under the rest's windows (whose runner re-evaluates kept rows)."""
    _sync_setup(ws, tmp_path)
    windowed = WINDOWS + ("SELECT max(seg_rms(lowpass(seg, 100.0))) AS p FROM w "
                          "[RANGE 2 SECONDS SLIDE 1 SECOND]")
    with pytest.raises(WaveSQLError) as err:
        ws.sql(windowed)
    assert err.value.code == "NOT_IMPLEMENTED"
    assert err.value.span.start == windowed.index("lowpass")
    assert "before the window" in err.value.hint
    detector = WINDOWS + "SELECT t, threshold_ranges(seg, 0.5) AS r FROM w"
    with pytest.raises(WaveSQLError) as err:
        _run(ws, spark, tmp_path, detector)
    assert err.value.code == "NOT_IMPLEMENTED" and "never come" in err.value.message
    assert err.value.span.start == detector.index("threshold_ranges")
    two = WINDOWS + ("SELECT t, highpass(g, 10.0) AS h FROM (SELECT t, lowpass(seg, 100.0) "
                     "AS g FROM w) f")  # (one stage's states are kept: nest them)
    with pytest.raises(WaveSQLError) as err:
        _run(ws, spark, tmp_path, two)
    assert err.value.code == "NOT_IMPLEMENTED" and "two" in err.value.message
    assert "highpass(lowpass(" in err.value.hint
    over = WINDOWS + ("SELECT t, seg_rms(lowpass(seg, 100.0)) AS r, count(*) OVER (ORDER BY "
                      "t ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS n FROM w")
    with pytest.raises(WaveSQLError) as err:
        _run(ws, spark, tmp_path, over)
    assert err.value.code == "NOT_IMPLEMENTED" and "over query" in err.value.message
    assert err.value.span.start == over.index("lowpass")
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_state_per_key_along_a_sync_ctes_segment_column(ws, spark, tmp_path):
    """``lowpass(seg, 100.0) OVER (PARTITION BY sensor)`` over a SYNC CTE's segments,
    continuously: each sensor's ranges one signal in start order (x's three meet, y's
    third after a gap, NULL one key), as scipy's ``sosfilt`` with the delay line carried
    along each key's ranges (tests/test_sync_keyed_state.py's oracle). The range beyond
    the recording waits for it (no row yet), and the last control row (10 s) for the
    control's progress (9 s: the SYNC part syncs each row once the progress passed it, so
    a key's ranges reach its state in start order)."""
    from tests.test_sync_keyed_state import RANGES, RATE, _oracle, _recording

    folder, x = _recording(tmp_path)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav "
           "SEGMENT 512")
    (tmp_path / "ctl").mkdir()
    (tmp_path / "ctl" / "c.json").write_text("".join(json.dumps(
        {"id": i, "sensor": r[0], "a": r[1], "b": r[2], "ts": f"1970-01-01T00:00:{i:02d}Z"})
        + "\n" for i, r in enumerate(RANGES)))
    ws.sql(f"CREATE STREAM ctl (id BIGINT, sensor STRING, a BIGINT, b BIGINT, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'ctl'}' FORMAT json EVENT TIME ts WATERMARK 1 SECOND")
    sql = ("WITH q AS (SELECT c.id, c.sensor, c.ts, s.ch1 AS seg FROM ctl c SYNC JOIN mic s "
           "ON RANGE (c.a, c.b)) SELECT id, sensor, lowpass(seg, 100.0) OVER (PARTITION BY "
           "sensor) AS f FROM q")
    assert "state per key (sensor), kept between batches" in ws.explain(sql, "STREAM")
    got = {r.id: r for r in _run(ws, spark, tmp_path, sql).itertuples()}
    want = _oracle(x, RANGES)
    assert sorted(got) == [i for i in range(len(RANGES)) if want[i] is not None and i < 9]
    for i, row in got.items():
        assert row.f["start"] == RANGES[i][1]
        np.testing.assert_allclose(row.f["samples"], want[i][0], atol=2e-6, err_msg=str(i))


@pytest.mark.spark
@pytest.mark.parametrize("form", ["cte", "subquery"])
def test_windows_over_a_relation_applying_signal_functions(ws, tmp_path, form):
    """Batch: ``f`` filters the windows' segments (a stateful ``lowpass``, carried along
    them in start order) and the query windows ``f``'s rows, applying ``seg_rms`` to its
    column: max per 2 seconds equal to numpy's RMS of scipy's ``sosfilt`` over the whole
    recording, cut into the 500-sample windows. Before: refused at the ``lowpass`` inside
    ``f`` ("over a window's rows"), the CTE read by the window left behind."""
    from scipy import signal as sps

    _sync_setup(ws, tmp_path)
    x = _samples()
    inner = "SELECT t, lowpass(seg, 100.0) AS g FROM w"
    sql = (WINDOWS.rstrip() + f", f AS ({inner}) SELECT max(seg_rms(g)) AS p FROM f "
           "[RANGE 2 SECONDS SLIDE 2 SECONDS]" if form == "cte" else
           WINDOWS + f"SELECT max(seg_rms(g)) AS p FROM ({inner}) f "
           "[RANGE 2 SECONDS SLIDE 2 SECONDS]")
    sos = sps.butter(4, 100.0, btype="low", fs=SYNC_RATE, output="sos")
    y = sps.sosfilt(sos, x.astype(np.float64))
    starts = np.arange(0, len(y), 500)
    each = pd.DataFrame({"t": starts, "r": [_rms(y[s:s + 500]) for s in starts]})
    want = each.assign(instant=_instants(each["t"], 2000)).groupby("instant").agg(
        p=("r", "max")).reset_index()
    got = ws.sql(sql).toPandas()
    got = got.assign(instant=_ms(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist()
    np.testing.assert_allclose(got["p"], want["p"], rtol=1e-5)
