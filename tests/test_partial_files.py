"""Files that appear while they are still being written (copied in place, not renamed).

What happened before (measured): a CSV file listed by Spark while half written was read up
to the size Spark saw and never again -- the rows written after were lost without a word;
a Parquet file listed before its footer stopped the query with FAILED_READ_FILE; a WAV file
listed while being copied was read as truncated, and a growing one moved the timeline of
every file after it. Now (``streaming/files.py``, ``sources/wav_stream.py``): a file is read
only once complete -- waited for inside the micro-batch (Parquet/CSV/JSON) or deferred to a
later trigger (WAV) -- a file that never completes fails with ``INCOMPLETE_FILE`` and the
re-run reads it exactly once, and a file that changes after it was read is reported
(quarantine record, or ``FILE_CHANGED`` for a signal), never silently dropped.
"""

from __future__ import annotations

import glob
import io
import os
import threading
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.test_wav_source import spark_schema
from wavesql.errors import WaveSQLError
from wavesql.sources import wav_source as wsrc
from wavesql.sources import wav_stream
from wavesql.streaming import files
from wavesql.udfs.program import Program
from wavesql.udfs.wav import WavError, read_info, write_wav

pytestmark = pytest.mark.spark

N = 20


def _rows(first=0, n=N):
    return pd.DataFrame({"id": np.arange(first, first + n, dtype=np.int64),
                         "v": np.arange(first, first + n) * 0.5,
                         "ts": pd.date_range("2024-01-01", periods=n, freq="s")
                         + pd.Timedelta(seconds=first)})


def _csv_text(frame) -> str:
    return "id,v,ts\n" + "".join(f"{r.id},{r.v},{r.ts.isoformat()}\n"
                                 for r in frame.itertuples())


def _parquet_bytes(frame) -> bytes:
    buf = io.BytesIO()
    table = pa.Table.from_pandas(frame.astype({"ts": "datetime64[us]"}), preserve_index=False)
    pq.write_table(table, buf)
    return buf.getvalue()


def _old(path, seconds=60):
    """Make ``path`` look written ``seconds`` ago (a complete file from an earlier copy)."""
    t = time.time() - seconds
    os.utime(path, (t, t))


def _stream(ws, fmt, folder):
    ws.sql(f"CREATE STREAM IF NOT EXISTS s (id BIGINT, v DOUBLE, ts TIMESTAMP) "
           f"FROM '{folder}' FORMAT {fmt} EVENT TIME ts WATERMARK 1 SECOND")


def _run(ws, tmp_path):
    cq = ws.stream("SELECT id, v, ts FROM s", output=str(tmp_path / "out"),
                   checkpoint=str(tmp_path / "chk"))
    cq.await_termination()
    return cq


def _ids(tmp_path):
    parts = glob.glob(str(tmp_path / "out" / "batch=*"))
    if not parts:
        return []
    return sorted(pd.concat([pd.read_parquet(p) for p in parts])["id"].tolist())


def _quarantine(tmp_path):
    parts = glob.glob(str(tmp_path / "chk" / "quarantine" / "batch=*"))
    return pd.concat([pd.read_parquet(p) for p in parts]) if parts else pd.DataFrame()


def _slow_copy(monkeypatch, path, data: bytes, delay: float):
    """A copy in place that is still going when the micro-batch looks at its files: the
    writer keeps writing (touching ``path``) until then, and writes the last bytes ``delay``
    seconds later. Returns the sizes the batch saw."""
    seen, looked = [], threading.Event()
    original = files.wait_until_ready

    def waiting(paths, fmt, **kw):
        seen.append([os.path.getsize(files.local_path(p)) for p in paths])
        looked.set()
        return original(paths, fmt, **kw)

    def writer():
        while not looked.wait(0.05):
            os.utime(path)  # still copying
        time.sleep(delay)
        path.write_bytes(data)

    monkeypatch.setattr(files, "wait_until_ready", waiting)
    threading.Thread(target=writer, daemon=True).start()
    return seen


def test_csv_with_a_half_written_last_line_is_read_whole(ws, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    text = _csv_text(_rows())
    cut = text.index("\n", len(text) // 2) + 7  # the copy stopped in the middle of a row
    (folder / "a.csv").write_text(text[:cut])
    monkeypatch.setattr(files, "SETTLE_SECONDS", 0.8)
    seen = _slow_copy(monkeypatch, folder / "a.csv", text.encode(), 0.3)
    _stream(ws, "csv", folder)
    cq = _run(ws, tmp_path)
    assert seen and seen[0] == [cut]  # Spark listed the file half written
    assert _ids(tmp_path) == list(range(N))  # ... and every row is there, once
    assert sum(r.quarantined for r in cq.reports) == 0 and _quarantine(tmp_path).empty
    assert sum(r.rows_in for r in cq.reports) == N


def test_parquet_without_its_footer_is_waited_for(ws, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    data = _parquet_bytes(_rows())
    (folder / "a.parquet").write_bytes(data[:len(data) // 2])
    assert not files.parquet_complete(str(folder / "a.parquet"))
    seen = _slow_copy(monkeypatch, folder / "a.parquet", data, 0.3)
    _stream(ws, "parquet", folder)
    _run(ws, tmp_path)
    assert seen and seen[0] == [len(data) // 2]
    assert _ids(tmp_path) == list(range(N))


def test_a_file_that_never_completes_fails_then_the_rerun_reads_it_once(ws, tmp_path,
                                                                         monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(_parquet_bytes(_rows()))
    _old(folder / "a.parquet")
    _stream(ws, "parquet", folder)
    _run(ws, tmp_path)
    assert _ids(tmp_path) == list(range(N))
    data = _parquet_bytes(_rows(N))
    (folder / "b.parquet").write_bytes(data[:100])  # the copy died half way
    monkeypatch.setattr(files, "READY_TIMEOUT_SECONDS", 1.0)
    with pytest.raises(WaveSQLError) as caught:
        _run(ws, tmp_path)
    assert caught.value.code == "INCOMPLETE_FILE" and "b.parquet" in caught.value.message
    assert "Parquet footer" in caught.value.message
    assert _ids(tmp_path) == list(range(N))  # nothing of the failed batch was committed
    (folder / "b.parquet").write_bytes(data)  # copied again, completely
    _run(ws, tmp_path)
    assert _ids(tmp_path) == list(range(2 * N))  # the batch redone: every row once


def test_rows_appended_after_a_file_was_read_are_reported(ws, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.csv").write_text(_csv_text(_rows()))
    _old(folder / "a.csv")
    _stream(ws, "csv", folder)
    _run(ws, tmp_path)
    assert _ids(tmp_path) == list(range(N))
    # a writer that had stalled for longer than the settle time appends to a.csv; later a
    # new file arrives (the next micro-batch)
    extra = _csv_text(_rows(N, 3)).split("\n", 1)[1]
    with open(folder / "a.csv", "a") as f:
        f.write(extra)
    _old(folder / "a.csv", 30)
    (folder / "b.csv").write_text(_csv_text(_rows(100, 2)))
    _old(folder / "b.csv")
    cq = _run(ws, tmp_path)
    assert _ids(tmp_path) == list(range(N)) + [100, 101]
    bad = _quarantine(tmp_path)
    assert len(bad) == 1, bad
    row = bad.iloc[0]
    assert row["_file"].endswith("a.csv") and row["_stream"] == "s" and row["_record"] is None
    assert f"grew by {len(extra)} bytes after micro-batch 0 read it" in row["_reason"]
    # reported once: the next batch does not report it again
    (folder / "c.csv").write_text(_csv_text(_rows(200, 1)))
    _old(folder / "c.csv")
    _run(ws, tmp_path)
    assert len(_quarantine(tmp_path)) == 1
    assert cq.reports[-1].quarantined == 0  # not an input row: rows_in is unchanged


@pytest.mark.parametrize("query", [
    "SELECT id, v, ts FROM s",  # row by row: the re-evaluating runner reads the files itself
    "SELECT count(*) AS n FROM s [RANGE 10 SECONDS SLIDE 10 SECONDS]",  # on the state store
])
def test_a_file_removed_after_it_was_listed_is_quarantined_and_the_batch_goes_on(
        ws, tmp_path, monkeypatch, query):
    """Before: the batch waited 120 s for the file, failed with INCOMPLETE_FILE, and every
    re-run did the same (the batch is pinned to its files) until the file came back."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name, first in (("a", 0), ("b", N)):
        (folder / f"{name}.parquet").write_bytes(_parquet_bytes(_rows(first)))
        _old(folder / f"{name}.parquet")
    original = files.wait_until_ready

    def removed_first(paths, fmt, **kw):  # b.parquet is deleted after Spark listed it
        if (folder / "b.parquet").exists():
            (folder / "b.parquet").unlink()
        return original(paths, fmt, **kw)

    monkeypatch.setattr(files, "wait_until_ready", removed_first)
    monkeypatch.setattr(files, "READY_TIMEOUT_SECONDS", 5.0)
    _stream(ws, "parquet", folder)
    cq = ws.stream(query, output=str(tmp_path / "out"), checkpoint=str(tmp_path / "chk"))
    cq.await_termination()
    out = pd.concat([pd.read_parquet(p) for p in glob.glob(str(tmp_path / "out/batch=*"))])
    if "count" in query:  # a's 20 rows, 1 s apart from 0 s; progress 18 s: the instants
        # 0 s (row 0) and 10 s (rows 1-10: (t - 10 s, t]) are final
        assert sorted(out[out["_final"]]["n"]) == [1, 10]
    else:
        assert sorted(out["id"]) == list(range(N))
    assert sum(r.rows_in for r in cq.reports) == N  # b's rows were never read
    bad = _quarantine(tmp_path)
    assert len(bad) == 1, bad
    row = bad.iloc[0]
    assert row["_file"].endswith("b.parquet") and row["_stream"] == "s" and row["_record"] is None
    assert "was removed before the batch read it" in row["_reason"]
    # the query goes on: a later file is read, the removed one is not reported again
    (folder / "c.parquet").write_bytes(_parquet_bytes(_rows(100, 2)))
    _old(folder / "c.parquet", 30)
    cq = ws.stream(query, output=str(tmp_path / "out"), checkpoint=str(tmp_path / "chk"))
    cq.await_termination()
    assert sum(r.rows_in for r in cq.reports) == 2 and len(_quarantine(tmp_path)) == 1


# -- WAV: the reader defers files that are not complete yet ---------------------------------
RATE = 8000
OPTS = {"rate": str(RATE), "channels": '["ch1"]', "window": "100", "settle_ms": "1000"}


def _reader(folder):
    return wsrc.WavStreamReader({**OPTS, "path": str(folder)},
                                spark_schema(Program.identity(["ch1"])))


def _wav(path, n, seed=0):
    write_wav(path, np.random.default_rng(seed).standard_normal(n).astype(np.float32) * 0.1,
              RATE, "float32")


def _names(offset):
    return [os.path.basename(f) for f in offset["files"]]


def test_wav_being_copied_is_deferred_with_the_files_after_it(tmp_path):
    _wav(tmp_path / "r_0.wav", 1000)
    _wav(tmp_path / "r_1.wav", 1000, seed=1)
    _wav(tmp_path / "r_2.wav", 1000, seed=2)
    for name in ("r_0.wav", "r_2.wav"):
        _old(tmp_path / name)
    whole = (tmp_path / "r_1.wav").read_bytes()
    (tmp_path / "r_1.wav").write_bytes(whole[:len(whole) // 2])  # header says 1000 frames
    assert read_info(tmp_path / "r_1.wav").truncated
    (tmp_path / "done.eof").write_text("")
    reader = _reader(tmp_path)
    first = reader.latestOffset(reader.initialOffset(), None)
    # r_1 is being copied: it and r_2 (after it on the timeline) wait; the stream is not
    # final although the marker is there, and no window past r_0 is promised
    assert _names(first) == ["r_0.wav"] and not first["final"]
    assert first["end"] == 1000 and first["sizes"] == [os.path.getsize(tmp_path / "r_0.wav")]
    (tmp_path / "r_1.wav").write_bytes(whole)  # the copy finishes
    second = reader.latestOffset(first, None)
    assert _names(second) == ["r_0.wav", "r_1.wav", "r_2.wav"] and second["final"]
    assert second["end"] == 3000


def test_wav_with_an_unpatched_header_waits_until_quiet(tmp_path):
    _wav(tmp_path / "r_0.wav", 1000)
    _old(tmp_path / "r_0.wav")
    _wav(tmp_path / "r_1.wav", 500, seed=1)
    info = read_info(tmp_path / "r_1.wav")
    with open(tmp_path / "r_1.wav", "r+b") as f:  # a recorder that never patches the size
        f.seek(info.data_offset - 4)
        f.write(b"\xff\xff\xff\xff")
    assert read_info(tmp_path / "r_1.wav").open_ended
    reader = _reader(tmp_path)
    first = reader.latestOffset(reader.initialOffset(), None)
    assert _names(first) == ["r_0.wav"]  # still being recorded, perhaps
    _old(tmp_path / "r_1.wav", 1.5)  # settle_ms = 1000: nobody touched it since
    second = reader.latestOffset(first, None)
    assert _names(second) == ["r_0.wav", "r_1.wav"] and second["end"] == 1500 // 100 * 100


def test_wav_that_changes_after_it_was_read_is_file_changed(tmp_path):
    _wav(tmp_path / "r_0.wav", 1000)
    _old(tmp_path / "r_0.wav")
    reader = _reader(tmp_path)
    first = reader.latestOffset(reader.initialOffset(), None)
    assert _names(first) == ["r_0.wav"]
    _wav(tmp_path / "r_0.wav", 1200)  # rewritten longer: every later file would move
    with pytest.raises(WavError) as caught:
        reader.latestOffset(first, None)
    assert caught.value.code == "FILE_CHANGED" and "r_0.wav" in str(caught.value)


def test_wav_that_changes_before_its_micro_batch_runs_again_is_file_changed(tmp_path):
    # a crash after the offset was logged: the re-run plans the files from disk, and a
    # file rewritten in between (its samples would land elsewhere) is FILE_CHANGED, not read
    _wav(tmp_path / "r_0.wav", 1000)
    _wav(tmp_path / "r_1.wav", 1000, seed=1)
    for name in ("r_0.wav", "r_1.wav"):
        _old(tmp_path / name)
    reader = _reader(tmp_path)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert _names(end) == ["r_0.wav", "r_1.wav"] and reader.partitions(start, end)
    _wav(tmp_path / "r_1.wav", 1500, seed=1)
    with pytest.raises(WavError) as caught:
        _reader(tmp_path).partitions(start, end)  # the re-run, in a new process
    assert caught.value.code == "FILE_CHANGED" and "r_1.wav" in str(caught.value)
    assert "logged for this micro-batch" in str(caught.value)


def test_wav_headers_are_read_once_per_file_version(tmp_path, monkeypatch):
    for i in range(5):
        _wav(tmp_path / f"r_{i}.wav", 300, seed=i)
        _old(tmp_path / f"r_{i}.wav")
    reader = _reader(tmp_path)
    calls = []
    real = wav_stream.read_info
    monkeypatch.setattr(wav_stream, "read_info", lambda p, **kw: calls.append(p) or real(p, **kw))
    offset = reader.latestOffset(reader.initialOffset(), None)
    assert len(calls) == 5
    for i in range(5, 8):  # one new file per micro-batch: one header read each
        _wav(tmp_path / f"r_{i}.wav", 300, seed=i)
        _old(tmp_path / f"r_{i}.wav")
        calls.clear()
        offset = reader.latestOffset(offset, None)
        reader.partitions(reader.initialOffset(), offset)
        assert [os.path.basename(c) for c in calls] == [f"r_{i}.wav"]
    assert len(offset["files"]) == 8
