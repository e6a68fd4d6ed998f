"""Signal queries end to end: WAV -> windows -> fused signal functions -> Spark.

Oracles: numpy/scipy on the samples read by scipy.io.wavfile (the real recording) or on the
generated arrays written to WAV files here.
"""

from __future__ import annotations

from tests.data import COUNTING_WAV
import numpy as np
import pytest
from scipy import signal as sps
from scipy.io import wavfile

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

pytestmark = pytest.mark.spark

WAV = COUNTING_WAV
RATE = 44100


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    rate, data = wavfile.read(WAV)
    assert rate == RATE
    return (data / 32768.0).astype(np.float32)


@pytest.fixture
def counting(ws):
    ws.sql(f"CREATE SIGNAL counting (voice FLOAT) RATE 44100 HZ FROM '{WAV}' FORMAT wav "
           "SEGMENT 4096")
    return ws


def _windows(x: np.ndarray, n: int, m: int):
    """numpy oracle: windows k*m .. k*m+n, cut at the end of the data (partial tails)."""
    return [(s, x[s:s + n]) for s in range(0, len(x), m)]


def test_statfilter_matches_numpy(counting, voice):
    rows = counting.sql("""
        SELECT start_time(voice) AS t, seg_std(voice) AS sd, seg_avg(voice) AS mean
        FROM counting [SAMPLES 4096]
        WHERE seg_std(voice) > 0.01 AND seg_avg(voice) < 0.001
        ORDER BY t""").collect()
    want = []
    for s, w in _windows(voice, 4096, 4096):
        w64 = w.astype(np.float64)
        sd = w64.std(ddof=1) if len(w) > 1 else np.nan
        if sd > 0.01 and w64.mean() < 0.001:
            want.append((s, sd, w64.mean()))
    assert len(rows) == len(want) > 5
    for row, (s, sd, mean) in zip(rows, want):
        micros = int(row.t.timestamp() * 1_000_000 + 0.5)
        assert micros == s * 1_000_000 // RATE
        assert row.sd == pytest.approx(sd, rel=1e-9) and row.mean == pytest.approx(mean, abs=1e-12)


def test_batch_scan_is_planned_on_the_driver_and_equals_the_data_source(counting):
    """A batch scan runs as mapInArrow tasks planned here (no Python data source planning
    per query); ``SET wavesql.wav.scan = source`` reads through the data source: same rows."""
    query = ("SELECT start_time(voice) AS t, seg_rms(voice) AS r FROM counting [SAMPLES 1000] "
             "WHERE seg_rms(voice) > 0.01")

    def run():
        df = counting.sql(query)
        return df._jdf.queryExecution().executedPlan().toString(), sorted(df.collect())

    plan, rows = run()
    assert "wav_scan" in plan and "BatchScan" not in plan
    counting.spark.conf.set("wavesql.wav.scan", "source")
    try:
        source_plan, source_rows = run()
    finally:
        counting.spark.conf.unset("wavesql.wav.scan")
    assert "BatchScan" in source_plan and "wav_scan" not in source_plan
    assert rows == source_rows and len(rows) > 5


@pytest.mark.parametrize("n,m", [(1000, 300), (4096, 4096), (256, 512)])
def test_sample_windows_recut_the_samples_exactly(counting, voice, n, m):
    rows = counting.sql(f"SELECT voice FROM counting [SAMPLES {n} SLIDE {m}]").collect()
    got = sorted((r.voice.start, r.voice.samples) for r in rows)
    want = _windows(voice, n, m)
    assert [s for s, _ in got] == [s for s, _ in want]
    for (s, samples), (_, w) in zip(got, want):
        np.testing.assert_array_equal(np.asarray(samples, np.float32), w)
    if m == n:  # tumbling: every sample exactly once
        assert sum(len(x) for _, x in got) == len(voice)


def test_unaliased_signal_calls_are_named_like_spark_names_columns(counting):
    df = counting.sql("SELECT start_time(voice), seg_rms(voice), width(voice) + 1 FROM counting")
    assert df.columns == ["start_time(voice)", "seg_rms(voice)", "width(voice) + 1"]


def test_range_window_is_samples_through_the_rate(counting):
    by_time = counting.sql("SELECT seg_rms(voice) AS r FROM counting [RANGE 100 MILLISECONDS]")
    by_count = counting.sql("SELECT seg_rms(voice) AS r FROM counting [SAMPLES 4410]")
    assert sorted(by_time.collect()) == sorted(by_count.collect())
    with pytest.raises(WaveSQLError) as e:
        counting.sql("SELECT seg_rms(voice) FROM counting [RANGE 1 MICROSECOND]")
    assert e.value.code == "INVALID_OPTION" and "SAMPLES" in e.value.hint


def test_spectral_chain_fused_in_one_pass(counting, voice):
    rows = counting.sql("""
        SELECT start_time(voice) AS t, band_energy(fft(hanning(voice)), 3, 4) AS score
        FROM counting [SAMPLES 32] ORDER BY t""").collect()
    n = len(voice) // 32
    spec = np.fft.rfft(voice[: n * 32].reshape(n, 32).astype(np.float64) * np.hanning(32), axis=1)
    want = (np.abs(spec[:, 3:5]) ** 2).sum(axis=1)
    got = np.array([r.score for r in rows])
    np.testing.assert_allclose(got[:n], want, rtol=1e-9, atol=1e-15)
    assert len(rows) == n + (1 if len(voice) % 32 else 0)  # the partial tail is a row too


def test_signal_stage_inside_a_larger_query(counting, voice):
    row = counting.sql("""
        WITH w AS (SELECT seg_std(voice) AS sd FROM counting [SAMPLES 4096])
        SELECT count(*) AS n, round(max(sd), 12) AS top, count_if(sd > 0.01) AS voiced FROM w
    """).collect()[0]
    stds = [w.astype(np.float64).std(ddof=1) for _, w in _windows(voice, 4096, 4096)]
    assert row.n == len(stds) and row.top == round(max(stds), 12)
    assert row.voiced == sum(s > 0.01 for s in stds)


def test_stateful_filter_equals_scipy_over_the_whole_signal(counting, voice):
    rows = counting.sql("""
        SELECT lowpass(voice, 1000.0) AS y FROM counting [SAMPLES 4096]""").collect()
    got = np.concatenate([np.asarray(r.y.samples) for r in sorted(rows, key=lambda r: r.y.start)])
    sos = sps.butter(4, 1000.0, btype="low", fs=RATE, output="sos")
    np.testing.assert_allclose(got, sps.sosfilt(sos, voice.astype(np.float64)), atol=1e-6)


def test_files_of_a_directory_form_one_timeline(ws, tmp_path):
    rng = np.random.default_rng(5)
    x = rng.normal(0, 0.3, (10_000, 2))
    cuts = [0, 1234, 1300, 7000, 10_000]
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        write_wav(tmp_path / f"rec_{i}.wav", x[a:b], 8000, "float32")
    ws.sql(f"CREATE SIGNAL pair (left FLOAT, right FLOAT) RATE 8000 HZ FROM '{tmp_path}' "
           "FORMAT wav")
    rows = ws.sql("SELECT right, seg_max(left) AS peak FROM pair [SAMPLES 500]").collect()
    rows.sort(key=lambda r: r.right.start)
    assert [r.right.start for r in rows] == list(range(0, 10_000, 500))
    xf = x.astype(np.float32)
    for r in rows:
        s = r.right.start
        np.testing.assert_array_equal(np.asarray(r.right.samples, np.float32), xf[s:s + 500, 1])
        assert r.peak == pytest.approx(float(xf[s:s + 500, 0].max()))


def test_explain_shows_the_program_pushed_into_the_scan(counting):
    text = counting.explain("SELECT seg_std(voice) AS sd FROM counting [SAMPLES 4096] "
                            "WHERE seg_avg(voice) < 0.001", "IR")
    assert "SignalScan counting v1" in text and "SAMPLES 4096" in text
    assert "program[_sig0=seg_std(voice)] filter[(seg_avg(voice) < 0.001)]" in text
    assert "SignalStage" not in text  # pushed into the scan by the rewrite


@pytest.mark.parametrize("query,code", [
    ("SELECT seg_std(voise) FROM counting", "UNKNOWN_COLUMN"),
    ("SELECT seg_std(1.5) FROM counting", "TYPE_ERROR"),
    ("SELECT seg_stdd(voice) FROM counting", "UNKNOWN_FUNCTION"),
    ("SELECT lowpass(voice, 30000.0) FROM counting", "INVALID_ARGUMENT"),
    ("SELECT band_energy(voice, 1, 2) FROM counting", "TYPE_ERROR"),
    ("SELECT seg_std(voice, 3) FROM counting", "TYPE_ERROR"),
    ("SELECT fir(voice, array(1, voice)) FROM counting [SAMPLES 4096]", "TYPE_ERROR"),
    ("SELECT fir(voice, array('a', 'b')) FROM counting [SAMPLES 4096]", "TYPE_ERROR"),
    ("SELECT iir(voice, array(1.0), array(0, 1)) FROM counting [SAMPLES 4096]",
     "INVALID_ARGUMENT"),
    ("SELECT voice FROM counting [SAMPLES 0]", "INVALID_OPTION"),
    ("SELECT voice FROM counting [ROWS 10]", "NOT_IMPLEMENTED"),
    ("SELECT lowpass(voice, 500.0) FROM counting [SAMPLES 256 SLIDE 128]", "STREAMING_RULE"),
    # a detector whose state runs from row to row, over SYNC results: no row order
    ("SELECT cfar(seg_rms(c.voice)) FROM (SELECT 0L AS a, 10L AS b) r SYNC JOIN counting c "
     "ON RANGE (r.a, r.b)", "UNDEFINED_ORDER"),
])
def test_bad_signal_queries_get_clear_errors(counting, query, code):
    with pytest.raises(WaveSQLError) as e:
        counting.sql(query).collect()
    assert e.value.code == code, str(e.value)


def test_array_literals_are_filter_coefficients(counting, voice):
    from scipy.signal import lfilter

    rows = counting.sql("SELECT fir(voice, array(0.25, 0.5, -0.25)) AS f, "
                        "iir(voice, array(1, 0), array(1, -0.5)) AS g "
                        "FROM counting [SAMPLES 4096]").collect()
    rows.sort(key=lambda r: r.f.start)
    x = voice.astype(np.float64)
    f = np.concatenate([np.asarray(r.f.samples, np.float64) for r in rows])
    g = np.concatenate([np.asarray(r.g.samples, np.float64) for r in rows])
    np.testing.assert_allclose(f, lfilter([0.25, 0.5, -0.25], [1.0], x), atol=1e-6)
    np.testing.assert_allclose(g, lfilter([1.0, 0.0], [1.0, -0.5], x), atol=1e-5)


def test_errors_raised_in_spark_tasks_keep_their_code(counting):
    from pyspark.errors import PySparkException

    from wavesql.spark_errors import translate_runtime_error

    # subseg's bounds are checked per window at run time: window 2 starts at 4096.
    df = counting.sql("SELECT subseg(voice, 0, 10) AS s FROM counting [SAMPLES 4096]")
    with pytest.raises(PySparkException) as e:
        df.collect()
    err = translate_runtime_error(e.value)
    assert err.code == "OUT_OF_RANGE" and "outside" in err.message


def test_declared_rate_must_match_the_recording(ws):
    with pytest.raises(WaveSQLError) as e:
        ws.sql(f"CREATE SIGNAL wrong (voice FLOAT) RATE 48000 HZ FROM '{WAV}' FORMAT wav")
    assert e.value.code == "RATE_MISMATCH" and "counting_44k1.wav" in e.value.message
    assert e.value.column is not None
    with pytest.raises(WaveSQLError) as e:
        ws.sql(f"CREATE SIGNAL wide (a FLOAT, b FLOAT) RATE 44100 HZ FROM '{WAV}' FORMAT wav")
    assert e.value.code == "CHANNEL_MISMATCH"


@pytest.mark.parametrize("name", ["statfilter", "passchain", "silencefilter"])
def test_table_one_examples_run_and_match_numpy(ws, voice, name):
    from tests.data import ROOT

    results = ws.execute_file(ROOT / "examples" / f"{name}.wsql")
    assert [r.kind for r in results] == ["create", "query"]
    rows = results[-1].dataframe.collect()
    windows = _windows(voice, 4096, 4096)
    stds = [w.astype(np.float64).std(ddof=1) if len(w) > 1 else np.nan for _, w in windows]
    if name == "statfilter":
        want = sum(1 for (_, w), sd in zip(windows, stds)
                   if sd > 0.01 and w.astype(np.float64).mean() < 0.001)
        assert len(rows) == want > 0
    elif name == "passchain":
        assert (rows[0].segments, rows[0].samples) == (len(windows), len(voice))
    else:
        voiced = [w for (_, w), sd in zip(windows, stds) if sd > 0.02]
        assert len(rows) == len(voiced)
        got = np.concatenate([np.asarray(r.voice.samples, np.float32) for r in rows])
        np.testing.assert_array_equal(got, np.concatenate(voiced))


def test_signal_functions_over_a_view_of_segments(counting, voice):
    # A view keeps segments; a later query computes over them in a mapInArrow stage and
    # carries the view's other columns through the same filter.
    counting.sql("""CREATE VIEW frames AS
        SELECT start_time(voice) AS t, voice FROM counting [SAMPLES 4096]""")
    rows = counting.sql("""
        SELECT t, seg_std(voice) AS sd, width(voice) AS n FROM frames
        WHERE seg_std(voice) > 0.01 ORDER BY t""").collect()
    want = [(s, w.astype(np.float64).std(ddof=1), len(w))
            for s, w in _windows(voice, 4096, 4096)
            if len(w) > 1 and w.astype(np.float64).std(ddof=1) > 0.01]
    assert len(rows) == len(want) > 5
    for row, (s, sd, n) in zip(rows, want):
        assert int(row.t.timestamp() * 1_000_000 + 0.5) == s * 1_000_000 // RATE
        assert row.sd == pytest.approx(sd, rel=1e-9) and row.n == n
    text = counting.explain("SELECT t, seg_rms(voice) FROM frames", "IR")
    assert "SignalStage program[_sig0=seg_rms(voice)] passthrough[t]" in text
    # a filter over the view's segments: one ordered pass, equal to scipy over the recording
    assert "sequential: one ordered pass" in counting.explain(
        "SELECT t, lowpass(voice, 100.0) AS y FROM frames", "IR")
    rows = counting.sql("SELECT t, lowpass(voice, 100.0) AS y FROM frames").collect()
    got = np.concatenate([np.asarray(r.y.samples) for r in sorted(rows, key=lambda r: r.t)])
    sos = sps.butter(4, 100.0, btype="low", fs=RATE, output="sos")
    np.testing.assert_allclose(got, sps.sosfilt(sos, voice.astype(np.float64)), atol=1e-5)


def test_signal_function_over_a_misspelled_table_is_unknown_stream(counting):
    with pytest.raises(WaveSQLError) as e:
        counting.sql("SELECT seg_rms(voice) FROM countng").collect()
    assert e.value.code == "UNKNOWN_STREAM" and "counting" in (e.value.hint or "")
    assert e.value.span is not None


def test_pass_through_subqueries_merge_into_the_signal_stage(counting, voice):
    # SILENCEFILTER counted: the subquery's filter and the outer count of samples become one
    # program; only each voiced window's width leaves the scan, never its samples.
    query = ("SELECT count(*) AS segs, sum(size(voice.samples)) AS samples FROM "
             "(SELECT voice FROM counting [SAMPLES 4096] WHERE seg_std(voice) > 0.02) q")
    text = counting.explain(query, "IR")
    assert "program[_sig0=width(voice)] filter[(seg_std(voice) > 0.02)]" in text
    assert "(_sig0: bigint)" in text  # no sigseg column out of the scan
    row = counting.sql(query).first()
    voiced = [w for _, w in _windows(voice, 4096, 4096)
              if len(w) > 1 and w.astype(np.float64).std(ddof=1) > 0.02]
    assert (row.segs, row.samples) == (len(voiced), sum(len(w) for w in voiced))
    assert len(voiced) > 5

    # A chain of pass-through SELECTs (PASSCHAIN) collapses onto the signal, qualifiers
    # and the outer WHERE included; a signal function over it now runs in the scan.
    chain = "counting [SAMPLES 1000] c"
    for i in range(10):
        chain = f"(SELECT voice FROM {chain} WHERE {chain.split()[-1]}.voice.start >= {i}) p{i}"
    rows = counting.sql(f"SELECT p9.voice.start AS s, seg_max(voice) AS peak FROM {chain} "
                        "WHERE size(p9.voice.samples) = 1000 ORDER BY s").collect()
    want = [(s, float(w.max())) for s, w in _windows(voice, 1000, 1000)
            if len(w) == 1000 and s >= 9]
    assert [(r.s, r.peak) for r in rows] == want
    assert counting.explain(f"SELECT voice FROM {chain}", "IR").count("SignalScan") == 1


def test_channel_fields_are_readable_in_the_signal_select(counting, voice):
    rows = counting.sql("SELECT voice.start AS s, counting.voice.rate AS r, "
                        "size(voice.samples) AS n, cardinality(voice.samples) + 1 AS m "
                        "FROM counting [SAMPLES 100000] WHERE voice.start > 0").collect()
    assert [(r.s, r.r, r.n, r.m) for r in rows] == [
        (s, 44100.0, len(w), len(w) + 1) for s, w in _windows(voice, 100000, 100000) if s > 0]
    schema = counting.sql("SELECT size(voice.samples) AS n FROM counting").schema
    assert schema["n"].dataType.simpleString() == "int"  # Spark's size() type, kept
    # start and rate come out of the scan as numbers, without the samples
    text = counting.explain("SELECT voice.start, voice.rate FROM counting "
                            "WHERE voice.start > 0", "IR")
    assert "program[_sig0=start_sample(voice), _sig1=sample_rate(voice)] " \
           "filter[(start_sample(voice) > 0)]" in text and "samples:" not in text
    assert counting.sql("SELECT voice.start FROM counting").columns == ["start"]


@pytest.mark.parametrize("query", [
    "SELECT * FROM (SELECT right FROM pair) q",  # a star would see the hidden channel
    "SELECT q.left FROM (SELECT right FROM pair) q",  # must stay an unknown column
    "SELECT r FROM (SELECT right AS r FROM pair) q",  # a rename
    "SELECT right FROM (SELECT right FROM pair LIMIT 2) q",
    "SELECT right FROM (SELECT right FROM pair ORDER BY right.start) q",
    "SELECT right FROM (SELECT DISTINCT right FROM pair) q",
    "SELECT right FROM (SELECT right FROM pair WHERE right.start IN (SELECT 1)) q",
    "SELECT q.right, o.x FROM (SELECT right FROM pair) q JOIN (SELECT 1 AS x) o",
    "SELECT right FROM (SELECT right FROM other) q",  # not a signal
    "SELECT x FROM (SELECT 1 AS x) q",  # no FROM at all
    # a stateful function over the windows that passed a filter sees gaps between them;
    # merged, it would run over every window
    "SELECT lowpass(right, 100.0) FROM (SELECT right FROM pair WHERE seg_std(right) > 0) q",
    # an outer alias named like a hidden channel: merged, the channel would win over it
    "SELECT 1 AS left, count(*) AS n FROM (SELECT right FROM pair) q GROUP BY left",
    "SELECT to_json(struct(*)) AS j FROM (SELECT right FROM pair) q",  # a star inside
    "SELECT left FROM (SELECT left, right FROM pair) q(right, left)",  # columns renamed
    "SELECT right FROM (SELECT right FROM pair AS left WHERE left.start > 0) q",
    "SELECT right FROM (SELECT right FROM pair WHERE q.right.start > 0) q",
])
def test_subqueries_that_change_the_result_are_not_merged(query):
    from wavesql.dialect import parse_one, to_sql
    from wavesql.planner.passthrough import merge_into_signal_selects

    node = parse_one(query)
    merged = merge_into_signal_selects(node, _pair_channels)
    assert to_sql(merged) == to_sql(parse_one(query))


def _pair_channels(table):
    return {"left", "right"} if table.name.lower() == "pair" else None


def test_a_stateful_function_over_an_unfiltered_subquery_merges():
    from wavesql.dialect import parse_one, to_sql
    from wavesql.planner.passthrough import merge_into_signal_selects

    node = parse_one("SELECT lowpass(q.right, 100.0) AS y FROM (SELECT right FROM pair) q "
                     "WHERE seg_std(right) > 0")
    merged = merge_into_signal_selects(node, _pair_channels)
    assert to_sql(merged) == ("SELECT lowpass(q.`right`, 100.0) AS y FROM pair AS q "
                              "WHERE seg_std(`right`) > 0")


def test_a_merged_subquery_keeps_its_errors(ws, tmp_path):
    write_wav(tmp_path / "pair.wav", np.zeros((100, 2)), 8000, "float32")
    ws.sql(f"CREATE SIGNAL pair (left FLOAT, right FLOAT) RATE 8000 HZ "
           f"FROM '{tmp_path}/pair.wav' FORMAT wav")
    with pytest.raises(WaveSQLError) as e:
        ws.sql("SELECT left FROM (SELECT right FROM pair) q").collect()
    assert e.value.code == "UNKNOWN_COLUMN"
    got = ws.sql("SELECT * FROM (SELECT right FROM pair WHERE width(right) > 0) q").columns
    assert got == ["right"]
