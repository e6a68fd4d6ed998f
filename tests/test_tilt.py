"""The TiLT applications (examples/tilt/*.wsql) against the numpy reference written from
TILT_APPS.md (examples/tilt/reference.py), in batch and as continuous queries.

Each test generates a small input (examples/tilt/generate.py) into ``tmp_path/data`` and
runs the example file itself, copied beside it, so its relative paths resolve there.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pandas as pd
import pytest

from examples.tilt import generate as gen
from examples.tilt import reference as ref
from tests.data import ROOT
from wavesql.dialect import parse_statements
from wavesql.errors import WaveSQLError

pytestmark = pytest.mark.spark

EXAMPLES = ROOT / "examples" / "tilt"
#: An S3Server while a test runs an app with its data in the bucket (test below), else None.
_BUCKET = None
#: Ticks for the apps with 10 s buckets (two full buckets and a partial one) and for the rest.
LONG, SHORT = 25_000, 5_000


# ---------------------------------------------------------------------------- helpers
def _example(ws, tmp_path, app: str, inputs: dict, parts: int = 1):
    """Write ``inputs`` (dataset folder -> frame) under tmp_path/data, run the example file
    and return (its query's DataFrame, the query text)."""
    for folder, frame in inputs.items():
        gen.write_stream(frame, tmp_path / "data" / folder, parts)
    path = tmp_path / f"{app}.wsql"
    shutil.copy(EXAMPLES / f"{app}.wsql", path)
    if _BUCKET is not None:
        from tests.object_store import move_to_bucket

        move_to_bucket(_BUCKET, tmp_path / "data", path, f"{tmp_path.name}/{app}")
    results = ws.execute_file(path)
    assert [r.kind for r in results] == ["create", "query"]
    return results[-1].dataframe, parse_statements(path.read_text())[-1].text


def _pandas(df) -> pd.DataFrame:
    """A Spark result as pandas, timestamps as integer microseconds (time-zone proof)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampType

    cols = [F.unix_micros(F.col(f.name)).alias(f.name) if isinstance(f.dataType, TimestampType)
            else F.col(f.name) for f in df.schema.fields]
    return df.select(*cols).toPandas()


def _same(got: pd.DataFrame, want: pd.DataFrame, keys: list[str], exact=(), close=(),
          rtol=1e-9, atol=1e-12) -> None:
    """Equal row sets: ``keys`` and ``exact`` columns equal, ``close`` ones within tolerance
    (NULL = NaN on both sides)."""
    assert len(got) == len(want)
    got = got.sort_values(keys).reset_index(drop=True)
    want = want.sort_values(keys).reset_index(drop=True)
    for c in list(keys) + list(exact):
        np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy(), err_msg=c)
    for c in close:
        np.testing.assert_allclose(got[c].to_numpy(np.float64), want[c].to_numpy(np.float64),
                                   rtol=rtol, atol=atol, err_msg=c)


def _stream(ws, spark, tmp_path, query: str, frame: pd.DataFrame, folder: str,
            closed_us: int = gen.CLOSED_US):
    """Run ``query`` continuously over its input, already written in several files, closed
    by a punctuation row; return (final rows as pandas, the ContinuousQuery). ``closed_us``:
    the result's progress at the end."""
    gen.write_punctuation(tmp_path / "data" / folder, frame)
    cq = ws.stream(query, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1,
                   clock=lambda: 0.0)
    cq.await_termination()
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.where("NOT _final").count() == 0  # no EMIT CHANGES: only final rows
    assert sum(r.late + r.no_time for r in cq.reports) == 0
    assert sum(r.rows_in for r in cq.reports) == len(frame) + 1
    assert cq.progress_us == closed_us  # the punctuation closed the stream
    return _pandas(out.where("_final").drop("_final", "_progress")), cq


# ---------------------------------------------------------------------------- 1. trend
def test_trend(ws, tmp_path):
    prices = gen.prices(SHORT)
    df, _ = _example(ws, tmp_path, "trend", {"prices": prices})
    want = ref.trend(prices)
    assert 50 < len(want) < SHORT / 3  # the signal does flip, but not on every tick
    # prices are multiples of 1/64, so sums are exact and `up` is decided identically
    _same(_pandas(df), want, ["ts"], exact=["v", "up"])


# ---------------------------------------------------------------------------- 2. RSI
def test_rsi(ws, tmp_path):
    prices = gen.prices(SHORT)
    df, _ = _example(ws, tmp_path, "rsi", {"prices": prices})
    want = ref.rsi(prices)
    assert want["rsi"].isna().sum() >= 1 and (want["rsi"] == 100).any()  # corner cases occur
    _same(_pandas(df), want, ["ts"], exact=["v"], close=["rsi"], rtol=1e-12)


# ---------------------------------------------------------------------------- 3. normalisation
def test_normalize(ws, tmp_path):
    sensor = gen.sensor(LONG)
    df, _ = _example(ws, tmp_path, "normalize", {"sensor": sensor})
    _same(_pandas(df), ref.normalize(sensor), ["ts"], exact=["_time", "v"], close=["z"])


# ---------------------------------------------------------------------------- 4. imputation
def test_impute_fills_the_gaps_with_the_bucket_mean(ws, tmp_path):
    readings = gen.sensor_with_gaps(LONG)
    assert len(readings) < LONG * 0.97  # the input has gaps ...
    df, _ = _example(ws, tmp_path, "impute", {"sensor_gaps": readings})
    want = ref.impute(readings)
    assert len(want) == LONG and want["imputed"].sum() == LONG - len(readings)  # ... filled
    _same(_pandas(df), want, ["ts"], exact=["imputed"], close=["v"])


# ---------------------------------------------------------------------------- 5. resampling
@pytest.mark.parametrize("period_in, period_out", [(4, 5), (5, 4), (6, 3), (3, 6)])
def test_resample(ws, tmp_path, period_in, period_out):
    sensor = gen.sensor(SHORT // period_in * 4, seed=4, period_us=period_in * gen.TICK_US)
    gen.write_stream(sensor, tmp_path / "data" / "sensor_4ms")
    path = tmp_path / "resample.wsql"
    # the example is 4 ms -> 5 ms; the paper's other directions only change the interval
    path.write_text((EXAMPLES / "resample.wsql").read_text().replace(
        "INTERVAL 5 MILLISECONDS", f"INTERVAL {period_out} MILLISECONDS"))
    df = ws.execute_file(path)[-1].dataframe
    want = ref.resample(sensor, period_out)
    assert len(want) > 1000
    _same(_pandas(df), want, ["ts"], close=["v"], rtol=1e-12)


# ---------------------------------------------------------------------------- 6. Pan-Tompkins
def test_pan_tompkins_reference_coefficients_are_the_recurrences():
    # reference.py writes the four equations of TILT_APPS.md as lfilter coefficients, the
    # form the example uses; check them against the equations evaluated literally.
    x = gen.ecg_samples(gen.ecg(5.0))
    np.testing.assert_allclose(ref.pan_tompkins(x), ref.pan_tompkins_loop(x),
                               rtol=1e-9, atol=1e-9)


def test_pan_tompkins_kernels_in_segments_equal_the_reference():
    # The example's chain of signal functions, called as the scan calls them: segment by
    # segment of uneven widths, each function's state carried to the next segment.
    from wavesql.udfs import registry
    from wavesql.udfs.sigseg import SigSeg

    x = gen.ecg_samples(gen.ecg(30.0))
    chain = [("iir", ref.LP_B, ref.LP_A), ("iir", ref.HP_B, ref.HP_A), ("fir", ref.D_B),
             ("square",), ("fir", np.full(ref.MWI, 0.03333333333333333))]
    states = [None] * len(chain)
    out, cuts = [], [0, 1, 13, 500, 2017, 2018, 4000, len(x)]
    for a, b in zip(cuts, cuts[1:]):
        seg = SigSeg(a, 200.0, x[a:b])
        for i, (name, *args) in enumerate(chain):
            if registry.lookup(name).stateful:
                seg, states[i] = registry.call(name, seg, *args, state=states[i])
            else:
                seg = registry.call(name, seg, *args)
        out.append(seg.samples)
    np.testing.assert_allclose(np.concatenate(out), ref.pan_tompkins(x), rtol=1e-9, atol=1e-9)


def test_pan_tompkins_one_file_or_many_equals_the_reference(ws, tmp_path):
    codes = gen.ecg(120.0)  # 24 000 samples, 12 windows of 2000
    shutil.copy(EXAMPLES / "pan_tompkins.wsql", tmp_path / "pan_tompkins.wsql")
    outputs = []
    for parts in (1, 7):  # one WAV, then the same recording cut into 7 files
        gen.write_ecg(codes, tmp_path / "data" / "ecg", parts)
        rows = ws.execute_file(tmp_path / "pan_tompkins.wsql")[-1].dataframe.collect()
        rows.sort(key=lambda r: r.mwi.start)
        assert [r.mwi.start for r in rows] == list(range(0, len(codes), 2000))
        outputs.append(np.concatenate([np.asarray(r.mwi.samples, np.float64) for r in rows]))
    np.testing.assert_array_equal(outputs[0], outputs[1])  # files do not matter, at all
    want = ref.pan_tompkins(gen.ecg_samples(codes))
    # the segments travel as float32
    np.testing.assert_allclose(outputs[0], want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


# ---------------------------------------------------------------------------- 7. vibration
def test_vibration(ws, tmp_path):
    accel = gen.vibration(SHORT)
    df, _ = _example(ws, tmp_path, "vibration", {"vibration": accel})
    want = ref.vibration(accel)
    assert want["kurtosis"].max() > 4 > want["kurtosis"].median()  # bursts stand out
    _same(_pandas(df), want, ["_time"], close=["rms", "kurtosis", "crest"])


def test_vibration_over_the_recording(ws, tmp_path):
    # the same application over the accelerometer as a WAV signal: statistics in the scan
    accel = gen.vibration(SHORT)
    gen.write_signal(accel, tmp_path / "data" / "vibration_wav", parts=3)
    shutil.copy(EXAMPLES / "vibration_signal.wsql", tmp_path / "vibration_signal.wsql")
    df = ws.execute_file(tmp_path / "vibration_signal.wsql")[-1].dataframe
    _same(_pandas(df), ref.vibration(gen.as_recorded(accel)), ["_time"],
          close=["rms", "kurtosis", "crest"])


# ---------------------------------------------------------------------------- 8. fraud
def test_fraud(ws, tmp_path):
    payments = gen.transactions(SHORT // 25)
    df, _ = _example(ws, tmp_path, "fraud", {"transactions": payments})
    want = ref.fraud(payments)
    # flag, as pinned, cannot fire (see reference.py); mean and std carry the check
    assert not want["flag"].any()
    _same(_pandas(df), want, ["customer", "ts"], exact=["v", "flag"], close=["mean", "std"],
          atol=1e-9)


# ---------------------------------------------------------------------------- Y. YSB
def test_ysb(ws, tmp_path):
    events = gen.ysb_events(SHORT)
    df, _ = _example(ws, tmp_path, "ysb", {"ysb": events})
    _same(_pandas(df), ref.ysb(events), ["_time", "campaign"], exact=["n"])


# ---------------------------------------------------------------------------- fused passes
@pytest.mark.parametrize("app", ["trend", "rsi", "normalize", "impute", "vibration", "fraud",
                                 "ysb"])
def test_examples_through_the_fused_passes(ws, tmp_path, monkeypatch, app):
    """The example files at these sizes stay under ``wavesql.windows.min_rows``; with it at
    0 and ranges of 2,000 rows each app (or its bucket means) runs as a fused query chain
    (planner/physical/fused_chains.py) and must still equal the numpy reference."""
    from wavesql.planner.physical import fused_chains as fused_chain

    fused = []
    fuse = fused_chain.fuse

    def spy(*args, **kwargs):
        tree, views, whole = fuse(*args, **kwargs)
        fused.append(bool(views) or whole is not None)
        return tree, views, whole

    monkeypatch.setattr(fused_chain, "fuse", spy)
    _fused(ws, lambda: _APPS[app](ws, tmp_path))
    assert any(fused), fused


def _fused(ws, run) -> None:
    """``run()`` with the fused passes on at any size (ranges of 2,000 rows)."""
    ws.spark.conf.set("wavesql.windows.min_rows", "0")
    ws.spark.conf.set("wavesql.windows.chunk_rows", "2000")
    try:
        run()
    finally:
        ws.spark.conf.unset("wavesql.windows.min_rows")
        ws.spark.conf.unset("wavesql.windows.chunk_rows")


_APPS = {"trend": test_trend, "rsi": test_rsi, "normalize": test_normalize,
         "impute": test_impute_fills_the_gaps_with_the_bucket_mean,
         "vibration": test_vibration, "fraud": test_fraud, "ysb": test_ysb}


@pytest.mark.parametrize("fused", [False, True], ids=["spark", "fused"])
@pytest.mark.parametrize("app", ["trend", "normalize", "impute", "ysb"])
def test_examples_with_their_data_in_a_bucket(ws, tmp_path, monkeypatch, s3, app, fused):
    """The example files with every input in the S3 bucket (the local copy deleted) equal
    the numpy reference: Spark's S3A scan, and (``fused``) the direct passes reading the
    Parquet row groups from the bucket themselves."""
    from wavesql.sources import parquet_chunks

    read = []
    monkeypatch.setattr(parquet_chunks, "parquet_file",
                        lambda loc, _f=parquet_chunks.parquet_file: read.append(loc) or _f(loc))
    monkeypatch.setattr(__import__(__name__, fromlist=["_BUCKET"]), "_BUCKET", s3)
    if fused:
        _fused(ws, lambda: _APPS[app](ws, tmp_path))
        assert read and all(loc.startswith("s3a://") for loc in read)
    else:
        _APPS[app](ws, tmp_path)
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------------------- streaming
# The input in 4 files, one micro-batch each, then a punctuation row that closes the
# stream: every result becomes final and must equal the reference.
WINDOWED = {
    "normalize": ("sensor", lambda: gen.sensor(LONG), ref.normalize,
                  dict(keys=["ts"], exact=["_time", "v"], close=["z"])),
    "vibration": ("vibration", lambda: gen.vibration(SHORT), ref.vibration,
                  dict(keys=["_time"], close=["rms", "kurtosis", "crest"])),
    "ysb": ("ysb", lambda: gen.ysb_events(SHORT), ref.ysb,
            dict(keys=["_time", "campaign"], exact=["n"])),
    # a grid point is final with its bucket (_time); the 'null' RESAMPLE rides along
    "impute": ("sensor_gaps", lambda: gen.sensor_with_gaps(LONG), ref.impute,
               dict(keys=["ts"], exact=["imputed"], close=["v"])),
    # an outage of 35 s, longer than the window's look-back (20 s): the grid must go on
    # across it from the last reading before it, which the state keeps
    "impute_outage": ("sensor_gaps", lambda: _with_outage(gen.sensor_with_gaps(LONG)),
                      ref.impute, dict(keys=["ts"], exact=["imputed"], close=["v"])),
}


def _with_outage(frame: pd.DataFrame, us: int = 35_000_000):
    """``frame`` with the readings after its 46th percentile row moved ``us`` later: the
    second of 4 files then ends just after the outage, so that batch's progress is past the
    outage's start + 20 s (the pre-outage rows leave the window's look-back) while the
    bucket the outage ends in is not final yet."""
    out = frame.copy()
    late = out.index > int(len(out) * 0.46)
    out.loc[late, "ts"] += us
    return out


@pytest.mark.parametrize("app", sorted(WINDOWED))
def test_windowed_apps_stream_to_the_reference(ws, spark, tmp_path, app):
    folder, build, reference, check = WINDOWED[app]
    frame = build()
    _, query = _example(ws, tmp_path, app.split("_")[0], {folder: frame}, parts=4)
    got, cq = _stream(ws, spark, tmp_path, query, frame, folder)
    # one micro-batch per file (4 and the closing punctuation); on Spark's state store
    # (YSB's tumbling count) one more without rows closes the last windows
    assert [r.rows_in > 0 for r in cq.reports][:5] == [True] * 5 and len(cq.reports) <= 6
    _same(got, reference(frame), **check)


OVER = {
    "trend": ("prices", lambda: gen.prices(SHORT), ref.trend,
              dict(keys=["ts"], exact=["v", "up"])),
    "rsi": ("prices", lambda: gen.prices(SHORT), ref.rsi,
            dict(keys=["ts"], exact=["v"], close=["rsi"])),
    "fraud": ("transactions", lambda: gen.transactions(SHORT // 25), ref.fraud,
              dict(keys=["customer", "ts"], exact=["v", "flag"], close=["mean", "std"],
                   atol=1e-9)),
}


# RSI nests two OVER windows: the 14 ms sums read d, which reads lag(v); the runner keeps
# the sum of the look-backs along the nesting (13 ms + 1 row), so d of the oldest tick in
# the window is known at every batch boundary.
@pytest.mark.parametrize("app", sorted(OVER))
def test_over_window_apps_stream_to_the_reference(ws, spark, tmp_path, app):
    folder, build, reference, check = OVER[app]
    frame = build()
    _, query = _example(ws, tmp_path, app, {folder: frame}, parts=4)
    got, cq = _stream(ws, spark, tmp_path, query, frame, folder)
    # one micro-batch per file and the punctuation; on Spark's state store one more, without
    # rows, emits the rows the punctuation made final
    assert type(cq).__name__ == "StatefulOverQuery"
    assert [r.rows_in > 0 for r in cq.reports][:5] == [True] * 5 and len(cq.reports) <= 6
    _same(got, reference(frame), **check)


def test_resample_streams_to_the_reference(ws, spark, tmp_path):
    # a 'linear' grid point is final once the next reading after it has arrived
    sensor = gen.sensor(SHORT, seed=4, period_us=4 * gen.TICK_US)
    _, query = _example(ws, tmp_path, "resample", {"sensor_4ms": sensor}, parts=4)
    # the result's progress stops just past the last reading: a 'linear' point after it
    # would need a next reading, and none will come
    last = int(sensor["ts"].iloc[-1])
    got, cq = _stream(ws, spark, tmp_path, query, sensor, "sensor_4ms", closed_us=last + 1)
    # one micro-batch per file and the punctuation; on Spark's state store one more, without
    # rows, emits the points the punctuation made final
    assert type(cq).__name__ == "StatefulResampleQuery"
    assert [r.rows_in > 0 for r in cq.reports][:5] == [True] * 5 and len(cq.reports) <= 6
    _same(got, ref.resample(sensor), ["ts"], close=["v"], rtol=1e-12)


def test_pan_tompkins_streams_to_the_reference(ws, spark, tmp_path):
    # the recording arrives file by file, a micro-batch each; the filters' state is carried
    # from one batch to the next in the checkpoint; the .eof marker flushes the tail
    codes = gen.ecg(60.0)  # 12 000 samples, 6 windows of 2000, in 5 files cut anywhere
    staging = tmp_path / "staging"
    gen.write_ecg(codes, staging, parts=5)
    folder = tmp_path / "data" / "ecg"
    folder.mkdir(parents=True)
    files = sorted(staging.glob("*.wav"))
    shutil.copy(files[0], folder / files[0].name)
    shutil.copy(EXAMPLES / "pan_tompkins.wsql", tmp_path / "pan_tompkins.wsql")
    ws.execute_file(tmp_path / "pan_tompkins.wsql")  # CREATE SIGNAL (and a batch query)
    query = parse_statements((tmp_path / "pan_tompkins.wsql").read_text())[-1].text
    for i, f in enumerate(files):
        if i:
            shutil.copy(f, folder / f.name)
            os.utime(folder / f.name, (1_000_000 + i, 1_000_000 + i))  # arrival order
        if i == len(files) - 1:
            (folder / "end.eof").write_text("")
        ws.stream(query, tmp_path / "out", tmp_path / "ckpt").await_termination()
    out = spark.read.parquet(str(tmp_path / "out")).where("_final").collect()
    out.sort(key=lambda r: r.mwi.start)
    assert [r.mwi.start for r in out] == list(range(0, len(codes), 2000))
    got = np.concatenate([np.asarray(r.mwi.samples, np.float64) for r in out])
    want = ref.pan_tompkins(gen.ecg_samples(codes))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


def test_linear_imputation_streams_to_the_batch_result(ws, spark, tmp_path):
    """The imputation over a 'linear' RESAMPLE: a grid point needs the next reading, so a
    bucket is final once every point in it has its next reading below progress -- the
    final rows are the batch query's up to there; the last bucket (its points after the
    last reading have none) waits.
    Oracle: the numpy reference's linear resample (examples/tilt/reference.py) on the 1 ms
    grid -- v has no NULLs, so no point is imputed -- each point in its 10 s bucket; plus
    the batch query."""
    frame = gen.sensor_with_gaps(LONG)
    _, query = _example(ws, tmp_path, "impute", {"sensor_gaps": frame}, parts=4)
    linear = query.replace("'null'", "'linear'")
    assert linear != query
    gen.write_punctuation(tmp_path / "data" / "sensor_gaps", frame)
    cq = ws.stream(linear, tmp_path / "out", tmp_path / "ckpt", max_files_per_trigger=1,
                   clock=lambda: 0.0)
    cq.await_termination()
    last = int(frame["ts"].iloc[-1])
    assert cq.progress_us == last + 1  # just past the last reading (v has no NULLs)
    out = spark.read.parquet(str(tmp_path / "out"))
    assert out.where("NOT _final").count() == 0
    got = _pandas(out.drop("_final", "_progress"))
    batch = _pandas(ws.sql(linear))
    want = batch[batch["_time"] < last + 1]
    assert len(got) > 0.5 * len(batch)
    _same(got.sort_values("ts").reset_index(drop=True),
          want.sort_values("ts").reset_index(drop=True), keys=["ts"], exact=["imputed"],
          close=["v"])
    grid = ref.resample(frame, period_ms=1)
    grid = grid.assign(_time=-(-grid["ts"] // 10_000_000) * 10_000_000, imputed=False)
    _same(got, grid[grid["_time"] < last + 1], keys=["ts"], exact=["_time", "imputed"],
          close=["v"], rtol=1e-12)
