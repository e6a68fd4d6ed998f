"""Continuous queries over a signal query's rows (streaming/derived.py): a CTE computing
per-window features of a signal, and a stream query over them -- a CQL window aggregate,
an OVER window, an ASOF JOIN with a catalog stream -- run continuously as WAV files arrive
in separate runs (availableNow, a restart between them), each result once and final.

Oracles: numpy's RMS over each 4096-sample window of the samples written, then pandas
(groupby per tumbling window, rolling, merge_asof) -- nothing from WaveSQL."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

from wavesql.errors import WaveSQLError
from wavesql.udfs.wav import write_wav

RATE = 8000
N = 4096  # samples per window: 0.512 s
EPOCH = dt.datetime(1970, 1, 1)
FEATURES = ("WITH f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms "
            "FROM mic [SAMPLES 4096]) ")


def _recording(seconds: int) -> np.ndarray:
    """A sine whose amplitude changes every few seconds, plus noise (float32, as written)."""
    n = seconds * RATE
    rng = np.random.default_rng(7)
    amplitude = np.repeat(rng.uniform(0.1, 0.9, seconds // 3 + 1), 3 * RATE)[:n]
    x = amplitude * np.sin(np.arange(n) * 2 * np.pi * 440 / RATE) + rng.normal(0, 0.02, n)
    return x.astype(np.float32)


def _write(folder, x, a, b, index):
    folder.mkdir(parents=True, exist_ok=True)
    write_wav(folder / f"r_{index:03d}.wav", x[a:b], RATE, "float32")


def _features(x: np.ndarray) -> pd.DataFrame:
    """Each window's start (seconds) and RMS, numpy over the samples (the last window cut
    to the data, as the recording's end marker makes the query cut it)."""
    starts = np.arange(0, len(x), N)
    rms = [np.sqrt(np.mean(x[s:s + N].astype(np.float64) ** 2)) for s in starts]
    return pd.DataFrame({"t": starts / RATE, "rms": rms})


def _seconds(column: pd.Series) -> np.ndarray:
    return np.array([(v - EPOCH).total_seconds() for v in column])


def _run(ws, tmp_path, sql):
    cq = ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    cq.await_termination()
    # the rest of the query ran on Spark's state store, as over a catalog stream
    assert type(cq.outer).__module__.startswith("wavesql.streaming.stateful."), type(cq.outer)
    return cq


def _out(spark, tmp_path) -> pd.DataFrame:
    return spark.read.parquet(str(tmp_path / "out")).toPandas()


def _setup(ws, tmp_path, x, first_run_samples):
    _write(tmp_path / "rec", x, 0, first_run_samples, 0)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'rec'}' FORMAT wav")


def _second_round(tmp_path, x, first_run_samples):
    _write(tmp_path / "rec", x, first_run_samples, len(x), 1)
    (tmp_path / "rec" / "done.eof").write_text("")  # the recording ends: its tail is flushed


WINDOWED = FEATURES + ("SELECT max(rms) AS peak, count(*) AS n "
                       "FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]")


def test_window_aggregate_over_signal_features_across_runs(ws, spark, tmp_path):
    """Tumbling 2-second windows over the per-window RMS: each window once, final, equal to
    pandas over numpy's RMS; a window closes on the signal query's progress, not on a later
    row (the first run's last window closes without any row after it)."""
    x = _recording(20)
    cut = 9 * RATE + 1000
    _setup(ws, tmp_path, x, cut)
    feats = _features(x)
    # [RANGE 2 SECONDS SLIDE 2 SECONDS] at instant i holds t in (i - 2, i]
    feats["instant"] = np.ceil(feats["t"] / 2.0) * 2.0
    want = feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()

    cq = _run(ws, tmp_path, WINDOWED)
    first = _out(spark, tmp_path)
    assert first["_final"].all()
    # the signal query covered every whole window of the first file: up to 17 * 4096 samples
    covered = (cut // N) * N / RATE
    assert cq.progress_us == int(round(covered * 1e6))
    assert sorted(_seconds(first["_time"])) == [i for i in want["instant"] if i < covered]
    assert (_seconds(first["_time"]) < _seconds(first["_progress"])).all()

    _second_round(tmp_path, x, cut)
    _run(ws, tmp_path, WINDOWED)  # a restart: a new handle on the same checkpoint
    got = _out(spark, tmp_path)
    got = got.assign(instant=_seconds(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist()  # each window once
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)
    assert got["_final"].all()
    # the batch query over the whole recording: the same windows (planner/analyze/windows.py)
    batch = ws.sql(WINDOWED).toPandas()
    batch = batch.assign(instant=_seconds(batch["_time"])).sort_values("instant")
    assert batch["instant"].tolist() == want["instant"].tolist()
    assert batch["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(batch["peak"], want["peak"], rtol=1e-6)


@pytest.mark.parametrize("sql, code, where", [
    ("WITH f AS (SELECT seg_rms(ch1) AS rms FROM mic [SAMPLES 4096]) "
     "SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]", "STREAMING_RULE",
     "start_time"),
    ("WITH f(t, rms) AS (SELECT start_time(ch1), seg_rms(ch1) FROM mic [SAMPLES 4096]) "
     "SELECT count(*) AS n FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]", "NOT_IMPLEMENTED",
     "column list"),
    # the rest of the query is checked before the signal part runs
    (FEATURES + "SELECT count(*) AS n FROM f", "STREAMING_RULE", "window"),
    # the signal query's own SELECT stays row by row; the hint says how to compose
    ("SELECT count(*) AS n FROM mic [SAMPLES 512]", "STREAMING_RULE", "WITH f AS"),
])
def test_signal_feature_queries_refused_before_anything_runs(ws, tmp_path, sql, code, where):
    _setup(ws, tmp_path, _recording(1), RATE)
    with pytest.raises(WaveSQLError) as e:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert e.value.code == code and where in str(e.value)
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "ckpt" / "derived").exists()  # nothing ran


@pytest.mark.slow
def test_over_window_over_signal_features_across_runs(ws, spark, tmp_path):
    """A moving average over the last 5 feature rows: pandas rolling(5) over numpy's RMS."""
    x = _recording(12)
    cut = 5 * RATE + 333
    _setup(ws, tmp_path, x, cut)
    sql = FEATURES + ("SELECT t, rms, avg(rms) OVER (ORDER BY t ROWS BETWEEN 4 PRECEDING "
                      "AND CURRENT ROW) AS ma FROM f")
    _run(ws, tmp_path, sql)
    _second_round(tmp_path, x, cut)
    _run(ws, tmp_path, sql)
    got = _out(spark, tmp_path)
    got = got.assign(s=_seconds(got["t"])).sort_values("s").reset_index(drop=True)
    want = _features(x)
    want["ma"] = want["rms"].rolling(5, min_periods=1).mean()
    assert got["s"].tolist() == want["t"].tolist()  # each row once
    np.testing.assert_allclose(got["rms"], want["rms"], rtol=1e-6)
    np.testing.assert_allclose(got["ma"], want["ma"], rtol=1e-6)


@pytest.mark.slow
def test_asof_join_of_a_stream_with_signal_features(ws, spark, tmp_path):
    """Annotations joined with the latest feature row at or before them: pandas merge_asof
    (backward) over numpy's RMS."""
    x = _recording(12)
    cut = 6 * RATE + 77
    _setup(ws, tmp_path, x, cut)
    events = pd.DataFrame({"ts": [0.3, 2.05, 4.6, 5.1, 7.77, 9.0, 10.4],
                           "label": list("abcdefg")})
    folder = tmp_path / "events"
    folder.mkdir()

    def land(part, rows):
        frame = rows.assign(ts=pd.to_datetime((rows["ts"] * 1e6).round().astype("int64"),
                                              unit="us").astype("datetime64[us]"))
        frame.to_parquet(folder / f"e_{part}.parquet", index=False)

    land(0, events[events["ts"] < 5.5])
    ws.sql(f"CREATE STREAM ev (ts TIMESTAMP, label STRING) FROM '{folder}' FORMAT parquet "
           "EVENT TIME ts WATERMARK 0 SECONDS")
    sql = FEATURES + "SELECT e.ts, e.label, f.t, f.rms FROM ev e ASOF JOIN f ON e.ts >= f.t"
    _run(ws, tmp_path, sql)
    land(1, events[events["ts"] >= 5.5])
    _second_round(tmp_path, x, cut)
    _run(ws, tmp_path, sql)
    got = _out(spark, tmp_path)
    got = got.assign(s=_seconds(got["ts"])).sort_values("s").reset_index(drop=True)
    want = pd.merge_asof(events, _features(x), left_on="ts", right_on="t",
                         direction="backward")
    assert got["label"].tolist() == want["label"].tolist()  # each event once
    np.testing.assert_allclose(_seconds(got["t"]), want["t"], atol=1e-9)
    np.testing.assert_allclose(got["rms"], want["rms"], rtol=1e-6)


@pytest.mark.slow
def test_signal_batch_rerun_after_a_crash_is_read_once(ws, spark, tmp_path):
    """A crash after the signal part committed its batch folder but before Spark committed
    the batch (simulated: the batch's entry in Spark's commit log removed) makes the batch
    run again on restart; the rest still reads each feature row once -- no late rows, every
    window once, equal to pandas over numpy's RMS."""
    x = _recording(10)
    cut = 4 * RATE + 500
    _setup(ws, tmp_path, x, cut)
    _run(ws, tmp_path, WINDOWED)
    commits = tmp_path / "ckpt" / "derived" / "f" / "offsets" / "commits"
    (last,) = [p for p in commits.iterdir() if p.name.isdigit()]
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    _second_round(tmp_path, x, cut)
    cq = _run(ws, tmp_path, WINDOWED)
    assert cq.inner.reports[0].batch == int(last.name)  # the batch ran again
    assert not (tmp_path / "ckpt" / "late").exists() or \
        spark.read.parquet(str(tmp_path / "ckpt" / "late")).count() == 0
    assert cq.status()["late"] == 0
    feats = _features(x)
    feats["instant"] = np.ceil(feats["t"] / 2.0) * 2.0
    want = feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()
    got = _out(spark, tmp_path)
    got = got.assign(instant=_seconds(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist()
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)


class _Catalog(dict):
    def get(self, name):
        return super().get(name.lower())


@pytest.mark.parametrize("text", [
    FEATURES + "SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]",
    "WITH g AS (SELECT 1 AS a), f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM "
    "mic [SAMPLES 4096]) SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]",
    "WITH f AS (SELECT start_time(ch1) AS t, (seg_rms(ch1)) AS rms FROM mic [SAMPLES 4096]),\n"
    "  g AS (SELECT t, rms FROM f WHERE rms > 0.1)\nSELECT max(rms) AS peak FROM g "
    "[RANGE 2 SECONDS SLIDE 2 SECONDS]",
    # comments and string literals saying WITH, "(" or "," do not mislead the split
    "WITH /* a WITH (x, y */ f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms, "
    "'with (' AS w FROM mic [SAMPLES 4096]) -- with )\n"
    "SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]",
    "WITH g AS (SELECT 'with, (' AS a), -- then, the features\n"
    "f AS (SELECT start_time(ch1) AS t, seg_rms(ch1) AS rms FROM mic [SAMPLES 4096])\n"
    "SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]",
    "WITH RECURSIVE -- with\n f AS MATERIALIZED (SELECT start_time(ch1) AS t, seg_rms(ch1) "
    "AS rms FROM mic [SAMPLES 4096]) SELECT max(rms) AS peak FROM f "
    "[RANGE 2 SECONDS SLIDE 2 SECONDS]",
])
def test_split_keeps_each_part_where_it_was(text):
    """No Spark: the signal CTE's body and the rest, each at its place in the statement
    (so positions of errors stay right), the rest without the CTE."""
    from wavesql.catalog import SignalDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(mic=SignalDef("mic", [("ch1", "FLOAT")], 8000.0, "/nowhere"))
    (stmt,) = parse_statements(text)
    split = find_split(stmt, text, catalog)
    assert (split.name, split.time_column) == ("f", "t")
    body = "SELECT start_time(ch1) AS t, "
    assert split.inner.strip().startswith(body)
    assert split.inner.index(body) == text.index(body) and split.inner.strip().endswith("4096]")
    assert split.inner.count("\n") == text[:len(split.inner)].count("\n")  # lines kept
    assert len(split.outer) == len(text) and "mic" not in split.outer
    assert split.outer.index("SELECT max(rms)") == text.index("SELECT max(rms)")
    (rest,) = parse_statements(split.outer)
    ctes = rest.node.args.get("with_")
    assert [c.alias_or_name for c in (ctes.expressions if ctes else [])] == \
        [n for n in ("g",) if " g AS " in text]


def test_split_refuses_a_signal_cte_with_a_column_list():
    """``f(t, rms) AS (...)``: the rows would be written under the body's names; refused
    with the position of the list and a hint (no Spark)."""
    from wavesql.catalog import SignalDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(mic=SignalDef("mic", [("ch1", "FLOAT")], 8000.0, "/nowhere"))
    text = ("WITH f(t, rms) AS (SELECT start_time(ch1), seg_rms(ch1) FROM mic [SAMPLES 4096]) "
            "SELECT max(rms) AS peak FROM f [RANGE 2 SECONDS SLIDE 2 SECONDS]")
    (stmt,) = parse_statements(text)
    with pytest.raises(WaveSQLError) as e:
        find_split(stmt, text, catalog)
    assert e.value.code == "NOT_IMPLEMENTED" and "column list" in str(e.value)
    assert e.value.span.start == text.index("f(t, rms)")


def test_select_star_over_signal_features_is_the_ctes_columns(ws, spark, tmp_path):
    """``*`` over the CTE's rows is the CTE's columns (not the internal punctuation
    column), in the rest's SELECT and as ``f.*``: a moving average beside them, equal to
    pandas rolling(3) over numpy's RMS."""
    x = _recording(4)
    _setup(ws, tmp_path, x, len(x))
    (tmp_path / "rec" / "done.eof").write_text("")
    sql = FEATURES + ("SELECT *, avg(rms) OVER (ORDER BY t ROWS BETWEEN 2 PRECEDING "
                      "AND CURRENT ROW) AS ma FROM f")
    _run(ws, tmp_path, sql)
    got = _out(spark, tmp_path)
    # (batch: the output's batch=N folders; _time, _final, _progress: every output's own)
    assert [c for c in got.columns if c not in ("batch", "_time", "_final", "_progress")] \
        == ["t", "rms", "ma"]
    got = got.assign(s=_seconds(got["t"])).sort_values("s").reset_index(drop=True)
    want = _features(x)
    want["ma"] = want["rms"].rolling(3, min_periods=1).mean()
    assert got["s"].tolist() == want["t"].tolist()
    np.testing.assert_allclose(got["rms"], want["rms"], rtol=1e-6)
    np.testing.assert_allclose(got["ma"], want["ma"], rtol=1e-6)


def test_explain_stream_shows_both_parts(ws, tmp_path):
    """EXPLAIN STREAM of a query over a signal CTE: the signal part's plan and the rest's
    (on the state store), not a refusal; nothing runs."""
    _setup(ws, tmp_path, _recording(1), RATE)
    for text in (ws.explain(WINDOWED, "STREAM"),
                 ws.sql("EXPLAIN STREAM " + WINDOWED).collect()[0][0]):
        lines = text.splitlines()
        signal = next(i for i, line in enumerate(lines) if line.startswith("signal part `f`"))
        rest = next(i for i, line in enumerate(lines) if line.startswith("rest:"))
        assert signal < rest
        assert "continuous signal query" in "\n".join(lines[signal:rest])
        assert "state store" in "\n".join(lines[rest:])
        assert "event time t" in lines[signal] and "columns t, rms" in lines[rest]
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.parametrize("sql, want", [
    ("SELECT * FROM f WHERE rms > 0", "SELECT `t`, `rms` FROM f WHERE rms > 0"),
    ("SELECT x.*, 1 AS one FROM f AS x", "SELECT `x`.`t`, `x`.`rms`, 1 AS one FROM f AS x"),
    ("SELECT * FROM ev AS e ASOF JOIN f ON e.ts >= f.t",
     "SELECT `e`.*, `f`.`t`, `f`.`rms` FROM ev AS e ASOF JOIN f ON e.ts >= f.t"),
    ("SELECT e.* FROM ev AS e ASOF JOIN f ON e.ts >= f.t",  # another input's star: kept
     "SELECT e.* FROM ev AS e ASOF JOIN f ON e.ts >= f.t"),
    ("SELECT *, '*  ' AS s FROM (SELECT * FROM f) AS q",  # (a literal's star, spaces: kept)
     "SELECT *, '*  ' AS s FROM (SELECT `t`, `rms` FROM f) AS q"),
])
def test_stars_over_the_derived_stream_are_its_columns(sql, want):
    """No Spark: the rest's ``*`` / ``f.*`` spelled out as the CTE's columns (the
    punctuation column is not the user's); with blanks before it (as the blanked CTE
    leaves), they make room, so that what follows the star keeps its offset."""
    from wavesql.streaming.derived import expand_stars

    assert expand_stars(sql, "f", ["t", "rms"]) == want  # no room: what follows moves
    pad = " " * 40 + "/* a   comment */ "
    got = expand_stars(pad + sql, "f", ["t", "rms"])
    assert got.strip() == "/* a   comment */ " + want and len(got) == len(pad + sql)
    assert got.endswith(sql[sql.rindex("FROM"):])  # the tail at its place


@pytest.mark.slow
def test_signal_features_with_everything_in_a_bucket(s3, ws, spark, tmp_path):
    """Recording, output and checkpoint (with the signal part's rows folder) in a bucket
    (tests/object_store.py), two runs with a crash between them: the signal part's last
    batch ran again (its entry in Spark's commit log removed) and its committed folder is
    kept -- one data file per batch folder (boto3's listing), no late rows -- and every
    window once, equal to pandas over numpy's RMS."""
    from tests.store_cases import unique_prefix

    p = unique_prefix(tmp_path)
    x = _recording(8)
    cut = 3 * RATE + 500

    def put(name, a=None, b=None):
        if a is None:
            s3.put(f"{p}/rec/{name}", b"")
            return
        write_wav(tmp_path / name, x[a:b], RATE, "float32")
        s3.put(f"{p}/rec/{name}", tmp_path / name)

    put("r_000.wav", 0, cut)
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{s3.uri(p)}/rec/' FORMAT wav")
    out, ckpt = s3.uri(f"{p}/out"), s3.uri(f"{p}/ckpt")
    ws.stream(WINDOWED, out, ckpt).await_termination()
    commits = [k for k in s3.keys(f"{p}/ckpt/derived/f/offsets/commits/")
               if k.rsplit("/", 1)[1].isdigit()]
    last = max(commits, key=lambda k: int(k.rsplit("/", 1)[1]))
    s3.client().delete_object(Bucket=s3.bucket, Key=last)  # killed before Spark's commit
    put("r_001.wav", cut, len(x))
    put("done.eof")
    cq = ws.stream(WINDOWED, out, ckpt)
    cq.await_termination()
    assert cq.inner.reports[0].batch == int(last.rsplit("/", 1)[1])  # the batch ran again
    assert cq.status()["late"] == 0
    assert not [k for k in s3.keys(f"{p}/ckpt/late/") if k.endswith(".parquet")]
    rows = {}
    for k in s3.keys(f"{p}/ckpt/derived/f/rows/"):
        if k.endswith(".parquet") and "/batch=" in k:
            rows.setdefault(k.split("/batch=")[1].split("/")[0], []).append(k)
    assert rows and all(len(files) == 1 for files in rows.values()), rows
    feats = _features(x)
    feats["instant"] = np.ceil(feats["t"] / 2.0) * 2.0
    want = feats.groupby("instant").agg(peak=("rms", "max"), n=("rms", "size")).reset_index()
    got = spark.read.parquet(out).toPandas()
    got = got.assign(instant=_seconds(got["_time"])).sort_values("instant")
    assert got["instant"].tolist() == want["instant"].tolist()  # each window once
    assert got["n"].tolist() == want["n"].tolist()
    np.testing.assert_allclose(got["peak"], want["peak"], rtol=1e-6)
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.glob("**/_spark_metadata"))


PEAKS = "g AS (SELECT start_time(ch1) AS t, seg_max(ch1) AS m FROM mic [SAMPLES 1000])"


@pytest.mark.parametrize("ctes, kept", [
    (["F", "PEAKS"], []),
    (["F", "h AS (SELECT 1 AS a)", "PEAKS"], ["h"]),
    (["h AS (SELECT 1 AS a)", "F", "PEAKS"], ["h"]),
    (["F", "PEAKS", "h AS (SELECT 1 AS a)"], ["h"]),
    (["h AS (SELECT 1 AS a)", "F", "k AS (SELECT 2 AS b)", "PEAKS"], ["h", "k"]),
])
def test_split_of_several_signal_ctes(ctes, kept):
    """No Spark: two signal CTEs, each a part at its place; the rest keeps the other CTEs
    with the commas between them (and no WITH when none is left)."""
    from wavesql.catalog import SignalDef
    from wavesql.dialect import parse_statements
    from wavesql.streaming.derived import find_split

    catalog = _Catalog(mic=SignalDef("mic", [("ch1", "FLOAT")], 8000.0, "/nowhere"))
    body = {"F": FEATURES.strip()[len("WITH "):], "PEAKS": PEAKS}
    text = ("WITH " + ",\n  ".join(body.get(c, c) for c in ctes)
            + " SELECT f.t, f.rms, g.m FROM f ASOF JOIN g ON f.t >= g.t")
    (stmt,) = parse_statements(text)
    split = find_split(stmt, text, catalog)
    assert [(p.name, p.time_column) for p in split.parts] == [("f", "t"), ("g", "t")]
    for part, window in zip(split.parts, ("4096]", "1000]")):
        assert len(part.inner.strip()) == part.inner.strip().index(window) + len(window)
        assert text.index(part.inner.strip()) == len(part.inner) - len(part.inner.lstrip())
    assert len(split.outer) == len(text) and "mic" not in split.outer
    (rest,) = parse_statements(split.outer)
    ctes_left = rest.node.args.get("with_")
    assert [c.alias_or_name for c in (ctes_left.expressions if ctes_left else [])] == kept
    assert split.outer.index("SELECT f.t") == text.index("SELECT f.t")


def test_asof_join_of_two_signal_ctes(ws, spark, tmp_path):
    """Two signal CTEs over one recording -- RMS per 4096 samples and the peak per 1000 --
    each a signal part of its own, the rest an ASOF JOIN of their rows on the state store:
    pandas merge_asof (backward) over numpy's RMS and max."""
    x = _recording(5)
    _setup(ws, tmp_path, x, len(x))
    (tmp_path / "rec" / "done.eof").write_text("")
    sql = FEATURES.rstrip() + ", " + PEAKS + (
        " SELECT f.t, f.rms, g.t AS gt, g.m FROM f ASOF JOIN g ON f.t >= g.t")
    cq = _run(ws, tmp_path, sql)
    assert [q.derived_name for q in cq.inners] == ["f", "g"]
    assert set(cq.status()["derived"]) == {"f", "g"}
    got = _out(spark, tmp_path)
    got = got.assign(s=_seconds(got["t"])).sort_values("s").reset_index(drop=True)
    starts = np.arange(0, len(x), 1000)
    peaks = pd.DataFrame({"gt": starts / RATE,
                          "m": [x[s:s + 1000].max() for s in starts]})
    want = pd.merge_asof(_features(x), peaks, left_on="t", right_on="gt",
                         direction="backward")
    assert got["s"].tolist() == want["t"].tolist()  # each row once
    np.testing.assert_allclose(got["rms"], want["rms"], rtol=1e-6)
    np.testing.assert_allclose(_seconds(got["gt"]), want["gt"], atol=1e-9)
    np.testing.assert_allclose(got["m"], want["m"], rtol=1e-6)


def test_a_sync_cte_without_the_controls_event_time_is_refused_naming_it(ws, tmp_path):
    """A SYNC CTE under windows runs as a part (tests/test_sync_feature_streams.py) when it
    passes its control's event time through; without that column the query is planned
    whole and the error names the column to keep (not a misleading start_time(...) or
    file-signal error), and nothing runs."""
    _setup(ws, tmp_path, _recording(1), RATE)
    (tmp_path / "ctl").mkdir()
    ws.sql(f"CREATE STREAM marks (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK 1 SECOND")
    sql = ("WITH s AS (SELECT c.id, c.t1, seg_rms(m.ch1) AS rms FROM marks c "
           "SYNC JOIN mic m ON RANGE (c.t0, c.t1)) "
           "SELECT max(rms) AS peak FROM s [RANGE 2 SECONDS SLIDE 2 SECONDS]")
    with pytest.raises(WaveSQLError) as e:
        ws.stream(sql, tmp_path / "out", tmp_path / "ckpt")
    assert e.value.code == "STREAMING_RULE", e.value  # (the binder's: windows need it)
    assert "EVENT TIME" in e.value.message and "'t0'" in e.value.hint
    assert not (tmp_path / "out").exists() and not (tmp_path / "ckpt" / "derived").exists()


def test_a_parts_folder_stays_inside_the_checkpoint_whatever_the_ctes_name():
    """No Spark: a plain CTE name is its folder under <checkpoint>/derived/ (as before); a
    quoted name with slashes or dots is encoded -- one path component, never `.` or `..`,
    never equal to a plain name's folder."""
    from wavesql.streaming.derived import home_name

    assert home_name("F") == "f" and home_name("rms_1") == "rms_1"
    odd = ["../../x", "..", ".", "a/b", "a b", "x.y", "%2e"]
    for name in odd:
        folder = home_name(name)
        assert "/" not in folder and folder not in (".", "..") and folder.startswith("q-")
    plain = [home_name(n) for n in ("f", "q-", "q-x", "x_y")]
    assert len(set(plain + [home_name(n) for n in odd])) == len(plain) + len(odd)


@pytest.mark.parametrize("sql, why", [
    ("SELECT * FROM f LATERAL VIEW explode(array(1, 2)) e AS n", "LATERAL VIEW"),
    ("SELECT * FROM f JOIN g USING (t)", "USING or NATURAL"),
    ("SELECT * FROM f NATURAL JOIN g", "USING or NATURAL"),
    ("SELECT * FROM f, (SELECT 1 AS one)", "without a name"),
])
def test_a_star_that_cannot_be_spelled_out_is_refused_at_the_star(sql, why):
    """No Spark: a `*` over the CTE's rows whose columns are not each input's in order
    (a LATERAL VIEW's, a USING join's merged key) or beside an unnamed input is refused
    (NOT_IMPLEMENTED at the star, the columns to name in the hint) -- not spelled out
    dropping columns or doubling them, nor left showing the punctuation column."""
    from wavesql.errors import WaveSQLError
    from wavesql.streaming.derived import expand_stars

    with pytest.raises(WaveSQLError) as err:
        expand_stars(sql, "f", ["t", "rms"])
    assert err.value.code == "NOT_IMPLEMENTED" and why in err.value.message
    assert err.value.span.start == sql.index("*") and "`f`.`t`, `f`.`rms`" in err.value.hint
