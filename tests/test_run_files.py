"""`wavesql run` over a growing input folder: incremental, exactly once, killed and restarted.

The command runs as a real subprocess (its own JVM), the way cron runs it. The oracle is
pandas over the input files -- not WaveSQL, not Spark: the sink must hold exactly the rows
of the query over all the input (no duplicates, no gaps), and a run must read only the
files that arrived since the previous one.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROWS = 50  # rows per input file
STEP_MS = 200  # event time step between rows (one file spans 10 s)
WINDOW_S, WATERMARK_S = 5, 1

JOB = textwrap.dedent(f"""\
    -- the job under test: a filter and a tumbling-window aggregate over one stream
    CREATE STREAM IF NOT EXISTS readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP)
      FROM 'in/' FORMAT parquet
      EVENT TIME ts WATERMARK {WATERMARK_S} SECOND;
    CREATE SINK IF NOT EXISTS hot TO 'out/hot/' FORMAT parquet;
    CREATE SINK IF NOT EXISTS per_sensor TO 'out/per_sensor/' FORMAT parquet;

    INSERT INTO hot
      SELECT id, sensor, v, ts FROM readings WHERE v >= 0.5;

    INSERT INTO per_sensor
      SELECT _time, sensor, count(*) AS n, sum(id) AS ids
      FROM readings [RANGE {WINDOW_S} SECONDS SLIDE {WINDOW_S} SECONDS]
      GROUP BY sensor;
""")


# -- input and oracle ------------------------------------------------------------------------
def write_input(folder: Path, index: int) -> None:
    """Input file ``index``: ROWS rows after every earlier file's (event time and mtime)."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = list(range(index * ROWS, (index + 1) * ROWS))
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "sensor": pa.array([f"s{i % 3}" for i in ids]),
        "v": pa.array([(i * 7 % 10) / 10 for i in ids], pa.float64()),
        "ts": pa.array([i * STEP_MS * 1000 for i in ids], pa.timestamp("us")),
    })
    path = folder / f"part-{index:03d}.parquet"
    pq.write_table(table, folder / f".{path.name}.tmp")
    os.replace(folder / f".{path.name}.tmp", path)  # appears whole, like a real producer
    stamp = 1_700_000_000 + index  # Spark's file source takes the oldest files first
    os.utime(path, (stamp, stamp))


def input_frame(folder: Path) -> pd.DataFrame:
    return pd.concat([pq.read_table(p).to_pandas() for p in sorted(folder.glob("*.parquet"))],
                     ignore_index=True)


def to_us(times: pd.Series) -> pd.Series:
    """Microseconds since 1970, whatever unit pandas chose for the timestamps."""
    return (times - pd.Timestamp(0)) // pd.Timedelta(microseconds=1)


def oracle_hot(data: pd.DataFrame) -> list[tuple]:
    rows = data[data.v >= 0.5]
    return sorted(zip(rows.id, rows.sensor, rows.v, to_us(rows.ts)))


def oracle_windows(data: pd.DataFrame) -> list[tuple]:
    """Tumbling windows (t - 5 s, t] at multiples of 5 s; final once t < max(ts) - 1 s."""
    us = to_us(data.ts)
    step = WINDOW_S * 1_000_000
    t = us.map(lambda x: math.ceil(x / step) * step)
    progress = int(us.max()) - WATERMARK_S * 1_000_000
    frame = data.assign(t=t)
    frame = frame[frame.t < progress]
    grouped = frame.groupby(["t", "sensor"]).agg(n=("id", "size"), ids=("id", "sum"))
    return sorted((int(t), s, int(r.n), int(r.ids)) for (t, s), r in grouped.iterrows())


def sink_rows(sink: Path) -> pd.DataFrame:
    """Every row of a sink, read with pyarrow straight from the batch folders."""
    parts = []
    for f in sorted(sink.glob("job=*/batch=*/*.parquet")):
        frame = pq.read_table(f).to_pandas()
        frame["batch"] = int(f.parent.name.split("=")[1])
        parts.append(frame)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def hot_of(sink: Path) -> list[tuple]:
    rows = sink_rows(sink)
    return sorted(zip(rows.id, rows.sensor, rows.v, to_us(rows.ts))) if len(rows) else []


def windows_of(sink: Path) -> list[tuple]:
    rows = sink_rows(sink)
    if not len(rows):
        return []
    assert rows["_final"].all()
    us = to_us(rows["_time"])
    return sorted((int(t), s, int(n), int(i)) for t, s, n, i in
                  zip(us, rows.sensor, rows.n, rows.ids))


# -- the command -----------------------------------------------------------------------------
def wavesql_cmd(tmp: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "wavesql", "--master", "local[2]",
            "--catalog", str(tmp / "catalog.db"), *args]


def env() -> dict:
    """The environment of a test's own `wavesql` process: this interpreter, and a JVM
    quick to start (tests/processes.py)."""
    from tests.processes import quick_jvm_env

    return quick_jvm_env({**os.environ, "PYSPARK_PYTHON": sys.executable,
                          "PYSPARK_DRIVER_PYTHON": sys.executable})


def run(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(wavesql_cmd(tmp, *args), cwd=tmp, env=env(), capture_output=True,
                          text=True, timeout=600)


def start(tmp: Path, *args: str) -> subprocess.Popen:
    # Its own process group: SIGKILL then takes the Python driver and its JVM together.
    return subprocess.Popen(wavesql_cmd(tmp, *args), cwd=tmp, env=env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def batches(sink: Path) -> set[Path]:
    return set(sink.glob("job=*/batch=*"))


def kill_when(proc: subprocess.Popen, ready, timeout: float = 400) -> bool:
    """SIGKILL ``proc`` as soon as ``ready()``; False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if ready():
            kill(proc)
            return True
        time.sleep(0.05)
    kill(proc)
    raise AssertionError("the run neither produced output nor ended in time")


def run_killed_at(tmp: Path, stage: str) -> subprocess.CompletedProcess:
    """``wavesql run job.wsql`` (a file per micro-batch) with WAVESQL_FAULT set: it SIGKILLs
    itself and its JVM the second time a micro-batch reaches ``stage`` (wavesql/faults.py)."""
    killed = subprocess.run(wavesql_cmd(tmp, "run", "--max-files-per-trigger", "1",
                                        "job.wsql"), cwd=tmp,
                            env={**env(), "WAVESQL_FAULT": f"{stage}@2"},
                            capture_output=True, text=True, timeout=600,
                            start_new_session=True)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr
    return killed


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.spark
def test_incremental_runs_and_a_killed_run_are_exactly_once(ws, tmp_path):
    """Run 1 over 3 files; 4 more files arrive; run 2 (two files per micro-batch) is SIGKILLed
    right after its first new batch is in the sink; run 3 restarts it. Then: each sink equals
    the pandas oracle over all 7 files (no duplicates, no gaps), run 1's batches are
    untouched, and every batch written after run 1 holds only rows of the new files. (Runs 1
    and 3 run in this process, as `wavesql run` does; run 2 is a process of its own.)"""
    (tmp_path / "job.wsql").write_text(JOB)
    hot, per_sensor = tmp_path / "out" / "hot", tmp_path / "out" / "per_sensor"
    for i in range(3):
        write_input(tmp_path / "in", i)

    first = run_in_process(ws, tmp_path, None)
    data = input_frame(tmp_path / "in")
    assert hot_of(hot) == oracle_hot(data)
    assert windows_of(per_sensor) == oracle_windows(data)
    assert first.statements == 5 and first.rows_in == 2 * 3 * ROWS  # (both INSERTs read all)
    after_first = {p: sorted(f.name for f in p.iterdir()) for p in batches(hot)}
    after_first_windows = batches(per_sensor)

    for i in range(3, 7):
        write_input(tmp_path / "in", i)
    proc = start(tmp_path, "run", "--max-files-per-trigger", "2", "job.wsql")
    killed = kill_when(proc, lambda: len(batches(hot)) > len(after_first))
    assert killed, "run 2 finished before it could be killed: " + proc.stdout.read()
    assert len(batches(hot)) < len(after_first) + 2, "killed after all of its batches"
    assert not batches(per_sensor) - set(after_first_windows), "killed after statement 1"

    run_in_process(ws, tmp_path, 2)

    data = input_frame(tmp_path / "in")
    got = hot_of(hot)
    assert len(got) == len(set(got)), "duplicates in the sink"
    assert got == oracle_hot(data)
    assert windows_of(per_sensor) == oracle_windows(data)
    # run 1's output is untouched; what came later holds only the new files' rows
    for folder, files in after_first.items():
        assert sorted(f.name for f in folder.iterdir()) == files
    later = sink_rows(hot)
    later = later[~later.batch.isin([int(p.name.split("=")[1]) for p in after_first])]
    assert len(later) and later.id.min() >= 3 * ROWS
    # the per-batch records count every input row once, over all three runs
    records = [pd.read_json(p, typ="series") for p in hot.glob("job=*/_progress/*.json")]
    assert sum(int(r["rows_in"]) for r in records) == 7 * ROWS
    # the run history: run 2 never recorded its end (it was killed); runs 1 and 3 did
    import sqlite3

    conn = sqlite3.connect(tmp_path / "catalog.db")
    statuses = [r[0] for r in conn.execute("SELECT status FROM runs ORDER BY id")]
    conn.close()
    assert statuses == ["ok", "running", "ok"]


@pytest.mark.spark
@pytest.mark.parametrize("cycles, seed", [
    # slow: CI kills `wavesql run` at each commit stage deterministically (the tests above
    # and below); these random moments are the search for a window those stages miss
    pytest.param(2, 11, marks=pytest.mark.slow),  # one kill after a batch landed, one random
    pytest.param(8, 7, marks=pytest.mark.slow)])
def test_many_random_kills(ws, tmp_path, cycles, seed):
    """Kill `wavesql run` at random moments, again and again, while files keep arriving;
    the sinks end equal to the oracle. (The last run runs in this process.)"""
    rng = random.Random(seed)
    (tmp_path / "job.wsql").write_text(JOB)
    hot, per_sensor = tmp_path / "out" / "hot", tmp_path / "out" / "per_sensor"
    files = 0
    kills = 0
    for cycle in range(cycles):
        for _ in range(rng.randint(1, 3)):
            write_input(tmp_path / "in", files)
            files += 1
        proc = start(tmp_path, "run", "--max-files-per-trigger", "1", "job.wsql")
        began = time.monotonic()
        if cycle % 2:  # at a random moment: starting up, mid-batch, between statements ...
            delay = rng.uniform(1, 15)
            ready = lambda: time.monotonic() - began > delay  # noqa: E731
        else:  # a random moment after a new batch reached the sink (mid-run for sure)
            seen, extra = len(batches(hot)), rng.uniform(0, 2)
            landed = []

            def ready():
                if not landed and len(batches(hot)) > seen:
                    landed.append(time.monotonic())
                return bool(landed) and time.monotonic() - landed[0] > extra
        kills += kill_when(proc, ready)
    run_in_process(ws, tmp_path, None)
    data = input_frame(tmp_path / "in")
    got = hot_of(hot)
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == oracle_hot(data)
    assert windows_of(per_sensor) == oracle_windows(data)
    # (a fast machine may finish a run before its moment comes: at least one kill in CI)
    assert kills >= (3 if cycles > 2 else 1), f"only {kills} of {cycles} runs were killed"


# -- in-process: the statement's errors ----------------------------------------------------------
@pytest.mark.spark
def test_insert_errors_are_positioned(ws, tmp_path):
    from wavesql.errors import WaveSQLError

    write_input(tmp_path / "in", 0)
    ws.sql(f"CREATE STREAM readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'in'}' FORMAT parquet EVENT TIME ts")
    ws.sql(f"CREATE SINK c TO '{tmp_path / 'c'}' FORMAT csv")
    ws.sql(f"CREATE SINK p (id BIGINT, extra INT) TO '{tmp_path / 'p'}' FORMAT parquet")
    cases = {
        "INSERT INTO readings SELECT 1 AS x": ("WRONG_OBJECT_KIND", "readings"),
        "INSERT INTO c SELECT named_struct('i', id) AS s FROM readings": (
            "SINK_MISMATCH", "SELECT named_struct('i', id) AS s FROM readings"),
        "INSERT INTO p (id) SELECT id FROM readings": ("NOT_IMPLEMENTED", "id"),
        "INSERT INTO p SELECT id FROM readings": ("SINK_MISMATCH", "SELECT id FROM readings"),
        "INSERT INTO p SELECT idd FROM readings": ("UNKNOWN_COLUMN", "idd"),
    }
    for text, (code, underlined) in cases.items():
        with pytest.raises(WaveSQLError) as info:
            ws.sql(text)
        err = info.value
        assert err.code == code, (text, err)
        assert err.span is not None and text[err.span.start:err.span.end] == underlined, (
            text, err.span)


@pytest.mark.spark
def test_check_reports_every_error(ws, tmp_path):
    from wavesql.cli import check_text

    text = ("SELECT nope FROM range(3);\n"
            "SELEC 1;\n"
            "CREATE STREAM s (a INT) FROM 'missing/' FORMAT parquet;\n"
            "SELECT 1 AS fine;\n"
            "SELECT * FROM range(2) [BAD;\n")
    errors = check_text(ws, text, str(tmp_path))
    located = [(e.code, text.count("\n", 0, e.span.start) + 1) for e in errors]
    assert [line for _, line in located] == [1, 2, 3, 5], located
    assert located[0][0] == "UNKNOWN_COLUMN" and located[2][0] == "MISSING_PATH"


# -- in-process: a second run with nothing new does nothing, a third takes only the new file ---
@pytest.mark.spark
def test_insert_again_with_nothing_new_does_nothing(ws, tmp_path):
    write_input(tmp_path / "in", 0)
    ws.sql(f"CREATE STREAM readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'in'}' FORMAT parquet EVENT TIME ts")
    ws.sql(f"CREATE SINK hot TO '{tmp_path / 'hot'}' FORMAT parquet")
    insert = "INSERT INTO hot SELECT id, sensor, v, ts FROM readings WHERE v >= 0.5"
    first = ws.execute(insert)[-1].report
    assert first.batches >= 1 and first.rows_in == ROWS
    again = ws.execute(insert)[-1].report
    assert again.batches == 0 and "no new input" in again.summary()
    write_input(tmp_path / "in", 1)
    third = ws.execute(insert)[-1].report
    assert third.rows_in == ROWS  # only the new file
    assert hot_of(tmp_path / "hot") == oracle_hot(input_frame(tmp_path / "in"))


# -- CSV and JSON sinks: the same incremental job, read back by Spark's readers and pandas -----
@pytest.mark.spark
@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_insert_into_csv_and_json_sinks(ws, spark, tmp_path, fmt):
    write_input(tmp_path / "in", 0)
    ws.sql(f"CREATE STREAM readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'in'}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    ws.sql(f"CREATE SINK hot TO '{tmp_path / 'hot'}' FORMAT {fmt}")
    ws.sql(f"CREATE SINK per_sensor TO '{tmp_path / 'per'}' FORMAT {fmt}")
    hot = "INSERT INTO hot SELECT id, sensor, v, ts FROM readings WHERE v >= 0.5"
    per = (f"INSERT INTO per_sensor SELECT _time, sensor, count(*) AS n, sum(id) AS ids "
           f"FROM readings [RANGE {WINDOW_S} SECONDS SLIDE {WINDOW_S} SECONDS] GROUP BY sensor")
    ws.execute(hot), ws.execute(per)
    write_input(tmp_path / "in", 1)
    second = ws.execute(hot)[-1].report
    assert second.rows_in == ROWS  # incremental in any format
    ws.execute(per)

    # the batch folders hold files of the sink's format, nothing else
    files = {p.suffix for p in (tmp_path / "hot").glob("job=*/batch=*/part-*")}
    assert files == {f".{fmt}"}
    data = input_frame(tmp_path / "in")
    # read back by pandas (an oracle independent of Spark's readers) ...
    assert hot_of_format(tmp_path / "hot", fmt) == oracle_hot(data)
    windows = read_format(tmp_path / "per", fmt)
    assert windows["_final"].all()
    got = sorted((int(t), s, int(n), int(i)) for t, s, n, i in zip(
        to_us(utc(windows["_time"])), windows.sensor, windows.n, windows.ids))
    assert got == oracle_windows(data)
    # ... and by Spark, with job and batch as partition columns, as the README says
    reader = spark.read.option("header", "true") if fmt == "csv" else spark.read
    back = reader.format(fmt).load(str(tmp_path / "per"))
    assert {"job", "batch", "_time", "_final", "_progress"} <= set(back.columns)
    assert back.count() == len(windows)


def utc(column: pd.Series) -> pd.Series:
    """ISO-8601 text with an offset (as Spark writes CSV/JSON timestamps) -> naive UTC."""
    return pd.to_datetime(column, utc=True).dt.tz_localize(None)


def read_format(sink: Path, fmt: str) -> pd.DataFrame:
    read = pd.read_csv if fmt == "csv" else (lambda p: pd.read_json(p, lines=True, precise_float=True))
    parts = [read(p) for p in sorted(sink.glob(f"job=*/batch=*/part-*.{fmt}"))
             if p.stat().st_size]
    return pd.concat(parts, ignore_index=True)


def hot_of_format(sink: Path, fmt: str) -> list[tuple]:
    rows = read_format(sink, fmt)
    return sorted(zip(rows.id, rows.sensor, rows.v, to_us(utc(rows.ts))))


@pytest.mark.spark
def test_csv_sink_refuses_nested_columns(ws, tmp_path):
    write_input(tmp_path / "in", 0)
    ws.sql(f"CREATE STREAM readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP) "
           f"FROM '{tmp_path / 'in'}' FORMAT parquet EVENT TIME ts")
    ws.sql(f"CREATE SINK flat TO '{tmp_path / 'flat'}' FORMAT csv")
    from wavesql.errors import WaveSQLError

    with pytest.raises(WaveSQLError) as err:
        ws.execute("INSERT INTO flat SELECT id, array(v, v) AS pair FROM readings")
    assert err.value.code == "SINK_MISMATCH" and "pair" in err.value.message
    assert err.value.span is not None and "json" in err.value.hint


WINDOW_JOB = "\n".join(line for line in JOB.splitlines()
                       if "hot" not in line and "v >= 0.5" not in line)


OVER_JOB = textwrap.dedent(f"""\
    CREATE STREAM IF NOT EXISTS readings (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP)
      FROM 'in/' FORMAT parquet
      EVENT TIME ts WATERMARK {WATERMARK_S} SECOND;
    CREATE SINK IF NOT EXISTS smoothed TO 'out/smoothed/' FORMAT parquet;

    INSERT INTO smoothed
      SELECT id, ts, sum(id) OVER (PARTITION BY sensor ORDER BY ts
                                   RANGE BETWEEN INTERVAL 2 SECONDS PRECEDING AND CURRENT ROW)
               AS recent, id - lag(id) OVER (PARTITION BY sensor ORDER BY ts) AS gap
      FROM readings;
""")


def oracle_over(data: pd.DataFrame) -> list[tuple]:
    """Per sensor: the sum of ids over the 2 s up to each row, and the id step from the
    sensor's previous row; a row final once its time is below max(ts) - 1 s."""
    us = to_us(data.ts)
    progress = int(us.max()) - WATERMARK_S * 1_000_000
    out = []
    for _, g in data.assign(us=us).sort_values("us").groupby("sensor"):
        t, ids = g.us.to_numpy(), g.id.to_numpy()
        for i in range(len(g)):
            if t[i] < progress:
                recent = int(ids[(t >= t[i] - 2_000_000) & (t <= t[i])].sum())
                out.append((int(ids[i]), int(t[i]), recent,
                            int(ids[i] - ids[i - 1]) if i else None))
    return sorted(out, key=lambda r: r[0])


@pytest.mark.spark
def test_an_over_window_job_on_the_state_store_killed_mid_run_is_exactly_once(ws, tmp_path):
    """An OVER-window job (per-key look-back on Spark's state store, the batch plan over the
    rows handed back: lag is not a frame the kernel computes), SIGKILLed once its second
    micro-batch's results are in the sink (its state and Spark's commit log a batch
    behind), then run again: the sink equals the pandas oracle, each row once."""
    (tmp_path / "job.wsql").write_text(OVER_JOB)
    smoothed = tmp_path / "out" / "smoothed"
    for i in range(6):
        write_input(tmp_path / "in", i)
    run_killed_at(tmp_path, "renamed")  # its second batch's output just visible
    assert len(batches(smoothed)) == 2
    markers = list(smoothed.glob("_wavesql/*/checkpoint/wavesql.json"))
    assert markers and json.loads(markers[0].read_text())["engine"] == "stateful-over"
    run_in_process(ws, tmp_path)
    rows = sink_rows(smoothed)
    assert rows["_final"].all()
    got = sorted(((int(i), int(t), int(r), None if pd.isna(g) else int(g))
                  for i, t, r, g in zip(rows.id, to_us(rows.ts), rows.recent, rows.gap)),
                 key=lambda r: r[0])
    assert len(got) == len({r[0] for r in got}), "a row twice in the sink"
    assert got == oracle_over(input_frame(tmp_path / "in"))


HOT_JOB = "\n".join(line for line in JOB.splitlines() if "per_sensor" not in line
                    and "_time, sensor" not in line and "[RANGE" not in line
                    and "GROUP BY sensor" not in line)


_SLOW_STAGE = pytest.mark.slow


def run_in_process(ws, tmp: Path, max_files: int | None = 1):
    """``job.wsql`` run to its end in this process, as `wavesql run --max-files-per-trigger
    1` runs it -- for the runs after a killed one (a process of its own: SIGKILL takes its
    JVM), which saves starting a JVM. The ``ws`` fixture's catalog is ``tmp/catalog.db``,
    the file the command uses."""
    from wavesql.jobs import run_file

    ws.job_options["max_files_per_trigger"] = max_files
    done = run_file(ws, str(tmp / "job.wsql"))
    assert done.status == "ok", done.error
    return done


def rerun_equals_the_oracle(ws, tmp: Path, hot: Path) -> None:
    """Run the job to its end; its sink holds every row of the oracle exactly once."""
    run_in_process(ws, tmp)
    got = hot_of(hot)
    assert len(got) == len(set(got)), "a row twice in the sink"
    assert got == oracle_hot(input_frame(tmp / "in"))


@pytest.mark.spark
def test_a_job_killed_at_three_stages_in_a_row_is_exactly_once(ws, tmp_path):
    """Three runs in a row die at a different stage of their second micro-batch's commit --
    output staged but not visible; output and state committed, Spark's commit log not; the
    batch done, its commit log not written -- each resuming what the one before left; a
    fourth completes. The sink equals the pandas oracle, every row once. (Each stage alone,
    and the other two, in the `slow` test below.)"""
    (tmp_path / "job.wsql").write_text(HOT_JOB)
    hot = tmp_path / "out" / "hot"
    for i in range(5):  # the killed runs take 4; the last redoes the 4th and takes the 5th
        write_input(tmp_path / "in", i)
    for stage in ("staged", "state-written", "batch-done"):
        run_killed_at(tmp_path, stage)
    # batches 0-3 visible; Spark never logged 3's commit, so the next run redoes it,
    # replacing its folder
    assert len(batches(hot)) == 4
    rerun_equals_the_oracle(ws, tmp_path, hot)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("stage", ["staged", "renamed", "state-written", "progress-written",
                                   "batch-done"])
def test_a_job_killed_at_each_commit_stage_is_exactly_once(ws, tmp_path, stage):
    """WAVESQL_FAULT kills `wavesql run` (driver and JVM, SIGKILL) the second time a
    micro-batch reaches ``stage`` of its commit; the next run redoes what was half done: the
    sink equals the pandas oracle, every row once, and no reader sees a staged batch."""
    (tmp_path / "job.wsql").write_text(HOT_JOB)
    hot = tmp_path / "out" / "hot"
    for i in range(4):
        write_input(tmp_path / "in", i)
    run_killed_at(tmp_path, stage)
    done = len(batches(hot))
    assert done == (1 if stage == "staged" else 2)  # the first batch, and the second once renamed
    rerun_equals_the_oracle(ws, tmp_path, hot)


@pytest.mark.spark
@pytest.mark.parametrize("stage", ["renamed", pytest.param("batch-done", marks=_SLOW_STAGE)])
def test_a_windowed_job_on_the_state_store_killed_at_a_commit_stage(ws, tmp_path, stage):
    """The same for the tumbling-window job on Spark's state store: killed once its second
    batch's output is visible (state store and commit log one batch behind), or once the
    batch is done but before Spark's commit log; the rerun's sink equals the oracle."""
    (tmp_path / "job.wsql").write_text(WINDOW_JOB)
    per_sensor = tmp_path / "out" / "per_sensor"
    for i in range(5):
        write_input(tmp_path / "in", i)
    run_killed_at(tmp_path, stage)
    markers = list(per_sensor.glob("_wavesql/*/checkpoint/wavesql.json"))
    assert markers and json.loads(markers[0].read_text())["engine"] == "stateful-window"
    run_in_process(ws, tmp_path)
    got = windows_of(per_sensor)
    assert len(got) == len(set(got)), "a window twice in the sink"
    assert got == oracle_windows(input_frame(tmp_path / "in"))
