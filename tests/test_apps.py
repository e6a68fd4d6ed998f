"""The XStream applications as shipped .wsql files, run end to end on generated recordings
whose true content is known (wavesql/datasets.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from wavesql.datasets import array_recording
from wavesql.udfs.sigseg import sample_at

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run_example(request, tmp_path, name: str, where: str):
    """Run the example file ``name`` copied beside ``tmp_path/data``; with ``where`` "s3",
    the data is first moved into the S3 bucket (tests/object_store.py) and the file's
    locations point there. Returns the last statement's rows."""
    shutil.copy(EXAMPLES / name, tmp_path)
    if where == "s3":
        from tests.object_store import move_to_bucket

        move_to_bucket(request.getfixturevalue("s3"), tmp_path / "data", tmp_path / name,
                       f"{tmp_path.name}/apps")
    ws = request.getfixturevalue("ws")
    return ws.execute_file(tmp_path / name)[-1].dataframe.collect()


def _micros(value) -> int:
    import datetime as dt

    delta = value - dt.datetime(1970, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


@pytest.mark.parametrize("seconds, events, where", [(8.0, 6, "local"), (50.0, 40, "local"),
                                                    (8.0, 6, "s3")])
def test_detectaudio_finds_every_event_and_syncs_the_exact_audio(request, tmp_path, seconds,
                                                                 events, where):
    # 50 s is 2.4 M samples: the scan runs in several partitions, and the detector (stateful)
    # must still see one unbroken signal (it once restarted at every 2^20 samples under SYNC)
    # -- an event starts just after the first partition's end, inside a restarted detector's
    # warm-up (256 windows), so the restart would miss it
    truth = array_recording(tmp_path / "data" / "array", seconds=seconds, events=events,
                            file_seconds=min(seconds / 4, 10.0),
                            also_at=(2**20 + 1000,) if seconds > 30 else ())
    rows = _run_example(request, tmp_path, "detectaudio.wsql", where)
    assert len(rows) == len(truth.event_starts)  # every event, no false alarm
    for row, start in zip(rows, truth.event_starts):
        lo = sample_at(_micros(row.t_from) - 5000, truth.rate)
        hi = sample_at(_micros(row.t_to) + 5000, truth.rate)
        # the detected range covers the loud middle of the burst
        assert lo <= start + truth.event_length // 4 and hi >= start + 3 * truth.event_length // 4
        segments = [row.ch1, row.ch2, row.ch3, row.ch4]
        for c, seg in enumerate(segments):
            assert seg.start == lo and seg.rate == truth.rate
            np.testing.assert_array_equal(np.asarray(seg.samples, dtype=np.float32),
                                          truth.samples[lo:hi, c])
        # the array geometry is in the synced audio: channel c lags channel 1 by delays[c]
        ref = np.asarray(row.ch1.samples, dtype=np.float64)
        for c in range(1, 4):
            other = np.asarray(segments[c].samples, dtype=np.float64)
            lags = np.arange(-40, 41)
            score = [np.dot(ref[max(0, -k):len(ref) - max(0, k)],
                            other[max(0, k):len(other) - max(0, -k)]) for k in lags]
            assert abs(lags[int(np.argmax(score))] - truth.delays[c]) <= 1


@pytest.mark.parametrize("where", ["local", "s3"])
def test_silencefilter_with_sync_returns_each_utterance_exactly(request, tmp_path, where):
    from tests.data import COUNTING_WAV
    from wavesql.udfs.wav import read_frames

    (tmp_path / "data").mkdir()
    shutil.copy(COUNTING_WAV, tmp_path / "data")
    rows = _run_example(request, tmp_path, "silencefilter_sync.wsql", where)
    voice = read_frames(COUNTING_WAV)[:, 0]
    n = 4096
    loud = [k for k in range(-(-len(voice) // n))
            if voice[k * n:(k + 1) * n].astype(np.float64).std(ddof=1) > 0.02]
    runs = []  # utterances: runs of consecutive voiced windows
    for k in loud:
        if runs and runs[-1][1] == k:
            runs[-1][1] = k + 1
        else:
            runs.append([k, k + 1])
    assert len(rows) == len(runs) >= 3  # "one" to "five", some split by short pauses
    for row, (a, b) in zip(rows, runs):
        lo, hi = a * n, min(b * n, len(voice))
        assert row.voice.start == lo and row.samples == hi - lo
        np.testing.assert_array_equal(np.asarray(row.voice.samples, dtype=np.float32),
                                      voice[lo:hi].astype(np.float32))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_pipeline_flags_exactly_the_leaking_windows(request, tmp_path, where):
    from wavesql.datasets import pipeline_recording

    truth = pipeline_recording(tmp_path / "data" / "pipe")
    rows = _run_example(request, tmp_path, "pipeline.wsql", where)
    full = [r for r in rows if _micros(r.t) // 1000 % truth.slide == 0][:len(truth.ratios)]
    assert len(full) == len(truth.ratios)
    assert [r.leak for r in full] == [ratio < 0.32 for ratio in truth.ratios]
    np.testing.assert_allclose([r.ratio for r in full], truth.ratios, atol=0.08)
