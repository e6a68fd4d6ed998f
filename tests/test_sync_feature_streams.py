"""A continuous SYNC's ``_progress`` is honest (no row delivered later is below it), and a
SYNC CTE runs as a derived part with windows around it (streaming/derived.py): the rows
once the recording covers their ranges, the windows over them equal to pandas' over
numpy's RMS of each range."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

pytestmark = pytest.mark.spark

RATE = 1000  # 1 sample per millisecond: a time in ms is its sample number
SECOND = 1000


def _mic(tmp_path, files: int, seed: int = 21):
    """``files`` 2-second mono float32 WAV files (scipy's writer) under all/, and their
    samples."""
    from scipy.io import wavfile

    data = np.random.default_rng(seed).standard_normal(files * 2 * SECOND) \
        .astype(np.float32)
    for d in ("all", "sig", "ctl"):
        (tmp_path / d).mkdir()
    for i in range(files):
        wavfile.write(tmp_path / "all" / f"mic_{i:03d}.wav", RATE,
                      data[i * 2 * SECOND:(i + 1) * 2 * SECOND])
    return data


def _define(ws, tmp_path, watermark: str = "1 SECOND"):
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{tmp_path / 'sig'}' "
           "FORMAT wav SEGMENT 256")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, t0 TIMESTAMP, t1 TIMESTAMP) FROM "
           f"'{tmp_path / 'ctl'}' FORMAT json EVENT TIME t0 WATERMARK {watermark}")


def _ts(ms: int) -> str:
    return f"1970-01-01T00:{ms // 60_000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}Z"


def _control(tmp_path, name, rows):
    """rows: (id, start ms, end ms) -> a JSON-lines file of control rows."""
    (tmp_path / "ctl" / f"{name}.json").write_text("".join(
        json.dumps({"id": i, "t0": _ts(a), "t1": _ts(b)}) + "\n" for i, a, b in rows))


def _arrive(tmp_path, *names):
    for name in names:
        shutil.copy(tmp_path / "all" / name, tmp_path / "sig" / name)


def _ms(value) -> int:
    """A timestamp Spark returned (naive, UTC session) in ms since 1970."""
    return int(round(pd.Timestamp(value).value / 1e6))


def test_sync_progress_is_never_above_a_row_delivered_later(ws, spark, tmp_path):
    """A control row waiting for the recording holds ``_progress`` back to its time: the
    control's progress (max event time 3500 ms - 1 s = 2500 ms) would be above row 3's
    1800 ms, which is delivered in the next run. Oracle: the rows' own times against the
    progress each batch emitted (hand-computed: 1800 ms while row 3 waits)."""
    _mic(tmp_path, 2)
    query = ("SELECT c.id, c.t0, seg_rms(m.ch1) AS r FROM ctl c "
             "SYNC JOIN mic m ON RANGE (c.t0, c.t1)")

    def run():
        q = ws.stream(query, tmp_path / "out", tmp_path / "ckpt")
        q.await_termination()
        assert q.error is None, q.error
        return q.reports

    _arrive(tmp_path, "mic_000.wav")  # 0 .. 2000 ms
    _define(ws, tmp_path)
    _control(tmp_path, "c1", [(1, 300, 800), (3, 1800, 2300), (8, 3500, 3900)])
    first = run()
    assert _ms(pd.Timestamp(first[-1].progress_us, unit="us")) == 1800
    _arrive(tmp_path, "mic_001.wav")  # .. 4000 ms: rows 3 and 8 are synced now
    second = run()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    assert sorted(r.id for r in rows) == [1, 3, 8]
    by_batch = {}
    for r in rows:
        by_batch.setdefault(r.batch, []).append(r)
    batches = sorted(by_batch)
    assert len(batches) == 2
    for i, b in enumerate(batches):
        promised = max(_ms(r._progress) for r in by_batch[b])
        for later in batches[i + 1:]:
            assert all(_ms(r.t0) >= promised for r in by_batch[later]), (b, later)
    emitted = [r.progress_us for r in first + second if r.progress_us is not None]
    assert emitted == sorted(emitted)  # never goes back

