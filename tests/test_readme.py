"""The README's examples, run as a user would run them.

Every fenced block of README.md is accounted for here: run (Python blocks executed, SQL
blocks executed statement by statement, the ``wavesql run`` transcript compared with a real
run of the command), checked against the program (the shell lines parse with the real
command-line parser, the REPL's meta-command table is the REPL's own list), or listed in
``NOT_RUNNABLE`` with the reason. A new block that is none of these fails
:func:`test_every_block_is_accounted_for`, so the README cannot drift from the program.

Relative paths in the examples (``data/trades/``, ``array/``, ``out/counts``) resolve against
a scratch folder holding generated data, made the current directory.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.data import COUNTING_WAV

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()

# Blocks that are not examples to run, each with the reason (matched by their first line).
NOT_RUNNABLE = {
    "make demo": "the quick start: CI runs `make test`, and `make demo` is run by hand",
    "CREATE [OR REPLACE] STREAM [IF NOT EXISTS]": "grammar, with [optional] parts",
    "error[UNKNOWN_STREAM]": "an error as printed: tests/test_errors.py snapshots it",
    "wavesql/     front door": "the folder layout",
    "make kafka-broker && ": "starts a broker in the foreground until Ctrl-C: the tests start "
                             "the same one (tests/kafka_broker.py) as the `kafka` fixture, "
                             "which test_kafka_quick_start uses",
    "-- alarms.wsql: wavesql run alarms.wsql": "a service that runs until SIGTERM: "
                                               "tests/test_kafka_jobs.py runs a file of the "
                                               "same shape through `wavesql run` against the "
                                               "test broker",
    "ws = wavesql.connect(config={": "object storage in the cloud: the same connect(config="
                                     "{spark.hadoop.fs.s3a.*}) reaches the tests' S3 server "
                                     "in tests/object_store.py (_stream_main) and the cluster "
                                     "test's runner (tests/cluster.py)",
}


def fenced_blocks(text: str = README) -> list[tuple[str, str]]:
    """(language, body) of every fenced block, in order (indented ones included)."""
    found = re.finditer(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```",
                        text, re.M | re.S)
    return [(m["lang"], "\n".join(line[len(m["indent"]):]
                                  for line in m["body"].splitlines()))
            for m in found]


def block(containing: str, lang: str | None = None) -> str:
    """The one block holding ``containing``."""
    hits = [body for la, body in fenced_blocks()
            if containing in body and (lang is None or la == lang)]
    assert len(hits) == 1, f"{len(hits)} README blocks hold {containing!r}"
    return hits[0]


# -- data the examples read --------------------------------------------------------------------
def write_trades(folder: Path, *, qty: bool = False, seconds: int = 40) -> None:
    """Trades of three symbols, one every 250 ms, over ``seconds``, in two files."""
    folder.mkdir(parents=True, exist_ok=True)
    n = seconds * 4
    ts = np.arange(n) * 250_000
    cols = {"sym": pa.array([f"s{i % 3}" for i in range(n)]),
            "px": pa.array(10 + np.sin(np.arange(n) / 7.0), pa.float64()),
            "ts": pa.array(ts, pa.timestamp("us"))}
    if qty:
        cols["qty"] = pa.array(np.arange(n) % 5 + 1, pa.int32())
    table = pa.table(cols)
    pq.write_table(table.slice(0, n // 2), folder / "part-0.parquet")
    pq.write_table(table.slice(n // 2), folder / "part-1.parquet")


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def statements(sql: str) -> list[str]:
    """A block's statements: split at `;` ending a line (the examples keep `;` out of
    strings), comments kept (WaveSQL skips them)."""
    parts = re.split(r";[ \t]*(?:--[^\n]*)?\n", sql.strip() + "\n")
    return [p for p in parts if p.strip() and not all(
        line.strip().startswith("--") or not line.strip() for line in p.splitlines())]


# -- Python ------------------------------------------------------------------------------------
@pytest.mark.spark
def test_from_python(spark, scratch, monkeypatch):
    import wavesql

    write_trades(scratch / "data" / "trades", qty=True)
    (scratch / "jobs").mkdir()
    (scratch / "jobs" / "daily.wsql").write_text(
        "CREATE VIEW daily AS SELECT sym, max(px) AS top FROM trades GROUP BY sym;\n")
    real = wavesql.connect
    # the suite's one Spark stands in for local[*]; the catalog is the README's default path
    monkeypatch.setattr(wavesql, "connect", lambda **kw: real(spark=spark, **kw))
    space: dict = {}
    exec(compile(block("ws = wavesql.connect()"), "README.md", "exec"), space)
    ws = space["ws"]
    try:
        assert (scratch / "wavesql_catalog.db").is_file()
        got = {r.sym: r.avg_px for r in space["df"].collect()}
        data = pq.read_table(scratch / "data" / "trades").to_pandas()
        want = data.groupby("sym").px.mean().to_dict()
        assert got.keys() == want.keys()
        assert all(abs(got[k] - want[k]) < 1e-9 for k in want)
        assert ws.catalog.get("daily") is not None  # execute_file ran the job file
    finally:
        ws.close()


@pytest.mark.spark
def test_continuous_query_example(ws, scratch):
    write_trades(scratch / "data" / "trades")
    ws.sql(f"CREATE STREAM trades (sym STRING, px DOUBLE, ts TIMESTAMP) "
           f"FROM 'data/trades/' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    space = {"ws": ws}
    exec(compile(block('output="out/counts"'), "README.md", "exec"), space)
    status = space["q"].status()
    assert status["rows_in"] == 160 and status["late"] == 0
    out = pq.read_table(scratch / "out" / "counts").to_pandas()
    final = out[out._final]
    # trades at 0, 0.25 ... 39.75 s; progress 39.75 - 2 s: the windows (t - 10 s, t] for
    # t = 0, 10, 20, 30 s are final (the first holds only the trade at 0), t = 40 s is not
    assert sorted(set(final._time.dt.second)) == [0, 10, 20, 30]
    assert final.groupby("_time").n.sum().tolist() == [1, 40, 40, 40]


@pytest.mark.spark
def test_signal_continuous_query_example(ws, scratch):
    """Oracle: numpy over the WAV's samples (each 4096-sample window's rms and start time),
    plus the batch query."""
    (scratch / "mic").mkdir()
    shutil.copy(COUNTING_WAV, scratch / "mic" / "part-000.wav")
    (scratch / "mic" / "end.eof").touch()
    ws.sql("CREATE SIGNAL mic (voice FLOAT) RATE 44100 HZ FROM 'mic/' FORMAT wav")
    space = {"ws": ws}
    exec(compile(block('output="out/loud"'), "README.md", "exec"), space)
    q = space["q"]
    try:
        import time

        deadline = time.monotonic() + 240
        while not q.reports and time.monotonic() < deadline and q.error is None:
            time.sleep(0.5)
    finally:
        q.stop()
    assert q.error is None and q.reports
    got = sorted(r.t for r in ws.spark.read.parquet(str(scratch / "out" / "loud")).collect())
    want = sorted(r.t for r in ws.sql(
        "SELECT start_time(voice) AS t FROM mic [SAMPLES 4096] "
        "WHERE seg_rms(voice) > 0.1").collect())
    assert got == want and want
    from scipy.io import wavfile

    rate, data = wavfile.read(COUNTING_WAV)
    x = data.astype(np.float64) / 32768.0  # 16-bit PCM as FLOAT in [-1, 1)
    starts = np.arange(0, len(x), 4096)
    rms = np.array([np.sqrt(np.mean(x[s:s + 4096] ** 2)) for s in starts])
    epoch = dt.datetime(1970, 1, 1)
    assert got == [epoch + dt.timedelta(microseconds=int(s * 1_000_000 // rate))
                   for s in starts[rms > 0.1]]


# -- SQL blocks of "The language" ----------------------------------------------------------------
@pytest.mark.spark
def test_signal_examples(ws, scratch):
    (scratch / "data").mkdir()
    shutil.copy(COUNTING_WAV, scratch / "data" / "counting_44k1.wav")
    results = [ws.sql(s) for s in statements(block("CREATE SIGNAL counting", "sql"))]
    statfilter = results[1].collect()
    # oracle: numpy over the recording's 4096-sample windows
    from scipy.io import wavfile

    rate, samples = wavfile.read(COUNTING_WAV)
    x = samples.astype(np.float64) / (32768.0 if samples.dtype == np.int16 else 1.0)
    want = [k * 4096 for k in range(-(-len(x) // 4096))
            if np.std(x[k * 4096:(k + 1) * 4096]) > 0.01
            and np.mean(x[k * 4096:(k + 1) * 4096]) < 0.001]
    assert len(statfilter) == len(want) and want
    assert results[2].count() == -(-len(x) // 4410)  # 100 ms windows
    assert results[3].count() > 0


@pytest.mark.spark
def test_signal_from_a_table_example(ws, scratch):
    (scratch / "acc").mkdir()
    rng = np.random.default_rng(0)
    xyz = rng.standard_normal((3, 640)).astype(np.float32)
    keep = np.r_[0:300, 364:640]  # one second missing
    rows = ["n,x,y,z"] + [",".join([str(n)] + [repr(float(v)) for v in xyz[:, n]])
                          for n in keep[::-1]]
    (scratch / "acc" / "a.csv").write_text("\n".join(rows) + "\n")
    ws.sql(block("CREATE SIGNAL acc (x FLOAT, y FLOAT, z FLOAT)", "sql"))
    got = ws.sql("SELECT start_sample(z) AS s, seg_avg(z) AS a FROM acc [SAMPLES 64]").collect()
    want = {max(k * 64, a): float(np.mean(xyz[2, max(k * 64, a):min(k * 64 + 64, b)]
                                          .astype(np.float64)))
            for a, b in [(0, 300), (364, 640)] for k in range(a // 64, (b - 1) // 64 + 1)}
    assert {r.s: r.a for r in got} == pytest.approx(want, rel=1e-9)


@pytest.mark.spark
def test_sync_example(ws, scratch):
    from wavesql.datasets import array_recording

    truth = array_recording(scratch / "array", seconds=4.0, events=3)
    ws.sql("CREATE SIGNAL array4 (ch1 FLOAT, ch2 FLOAT, ch3 FLOAT, ch4 FLOAT) RATE 48000 HZ "
           "FROM 'array/' FORMAT wav SEGMENT 4096")
    starts = ", ".join(f"({i}, TIMESTAMP_MICROS({s * 1_000_000 // 48000}), "
                       f"TIMESTAMP_MICROS({(s + truth.event_length) * 1_000_000 // 48000}))"
                       for i, s in enumerate(truth.event_starts))
    ws.sql(f"CREATE VIEW events AS SELECT * FROM VALUES {starts} AS v(event, t_from, t_to)")
    rows = ws.sql(block("SYNC JOIN array4 a ON RANGE", "sql").replace(
        "[MISSING NULL | TRUNCATE | ERROR]", "")).collect()
    assert len(rows) == 3
    for r in sorted(rows, key=lambda r: r.event):
        start = truth.event_starts[r.event]
        assert r.ch1.start == start and len(r.ch1.samples) == truth.event_length
        assert np.array_equal(np.asarray(r.ch3.samples, np.float32),
                              truth.samples[start:start + truth.event_length, 2])


@pytest.mark.spark
def test_merge_zip_examples(ws, scratch):
    rng = np.random.default_rng(5)
    plants = {}
    for name, n in (("north", 7), ("south", 5)):
        table = pa.table({"id": pa.array(np.arange(n), pa.int64()),
                          "sensor": pa.array([f"{name[0]}{i % 2}" for i in range(n)]),
                          "v": pa.array(rng.normal(size=n)),
                          "ts": pa.array(rng.permutation(n) * 1_000_000, pa.timestamp("us"))})
        (scratch / name).mkdir()
        pq.write_table(table, scratch / name / "part-0.parquet")
        ws.sql(f"CREATE STREAM {name} (id BIGINT, sensor STRING, v DOUBLE, ts TIMESTAMP) "
               f"FROM '{name}/' FORMAT parquet EVENT TIME ts")
        plants[name] = table.to_pandas()
    merged, zipped = [ws.sql(s).collect()
                      for s in statements(block("FROM MERGE(north, south)", "sql"))]
    want = sorted((name, r.sensor, r.v) for name, df in plants.items()
                  for r in df.itertuples())
    assert sorted((r._source, r.sensor, r.v) for r in merged) == want
    # ZIP ... BY id pairs the rows with equal rank of id; stops at the shorter input (5)
    north, south = (plants[n].sort_values("id") for n in ("north", "south"))
    assert sorted(r.drift for r in zipped) == sorted(
        a - b for a, b in zip(north.v, south.v))


@pytest.mark.spark
def test_time_examples(ws, scratch):
    write_trades(scratch / "data" / "trades")
    write_trades(scratch / "data" / "quotes")
    ws.sql("CREATE STREAM quotes (sym STRING, px DOUBLE, ts TIMESTAMP) "
           "FROM 'data/quotes/' FORMAT parquet EVENT TIME ts")
    results = [ws.sql(s) for s in statements(block("ISTREAM (SELECT sym", "sql"))]
    counts = [r.count() for r in results[1:]]
    assert all(c > 0 for c in counts)
    # the tumbling-window average at one instant, against pandas
    data = pq.read_table(scratch / "data" / "trades").to_pandas()
    first = data[(data.ts > data.ts.min() - np.timedelta64(1, "s"))
                 & (data.ts <= np.datetime64("1970-01-01T00:00:10"))]
    import datetime as dt

    row = [r for r in results[1].collect()
           if r["_time"] == dt.datetime(1970, 1, 1, 0, 0, 10) and r.sym == "s0"]
    assert row and abs(row[0][2] - first[first.sym == "s0"].px.mean()) < 1e-9
    # each trade at its instant with its symbol's last quote: one row per trade (ROWS 1 per
    # symbol matches at most one quote)
    assert results[5].count() == len(data)
    # RESAMPLE every 5 ms over 40 s of trades
    assert results[6].count() == int(39.75 / 0.005) + 1


# -- the shell ---------------------------------------------------------------------------------
def test_shell_lines_are_real_commands():
    from wavesql.cli import build_parser

    lines = [line.split("#")[0].strip() for line in block("wavesql check jobs/*.wsql").splitlines()]
    commands = [line.split("|")[-1].strip() for line in lines if line]
    assert len(commands) >= 8
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "wavesql"
        build_parser().parse_args(argv[1:])  # SystemExit (a failure) on an unknown option


@pytest.mark.spark
def test_wavesql_run_transcript(scratch):
    """The job file of "Query files run incrementally", run twice by the real command: the
    output has the README's lines (times aside)."""
    job = block("-- jobs/ingest.wsql", "sql")
    (scratch / "jobs").mkdir()
    (scratch / "jobs" / "ingest.wsql").write_text(job)
    for i in range(3):  # 150 readings, half of them hot
        ids = np.arange(i * 50, (i + 1) * 50)
        pq.write_table(pa.table({
            "id": pa.array(ids, pa.int64()), "sensor": pa.array([f"s{k % 3}" for k in ids]),
            "v": pa.array((ids % 2) * 0.5 + 0.25, pa.float64()),
            "ts": pa.array(ids * 200_000, pa.timestamp("us"))}),
            (scratch / "in").mkdir(exist_ok=True) or scratch / "in" / f"part-{i}.parquet")
    transcript = block("$ wavesql run jobs/ingest.wsql", "text")
    runs = re.split(r"^\$ ", transcript, flags=re.M)[1:]
    assert len(runs) == 2
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    for run in runs:
        command, *expected = run.splitlines()
        argv = shlex.split(command.split("#")[0])
        got = subprocess.run([sys.executable, "-m", "wavesql", "--master", "local[2]",
                              *argv[1:]], cwd=scratch, env=env, capture_output=True,
                             text=True, timeout=600)
        assert got.returncode == 0, got.stderr
        lines = got.stdout.splitlines()
        for line in (e for e in expected if e.strip() != "..."):
            pattern = re.escape(line).replace(r"\ ", " ")
            pattern = re.sub(r"\d+\\\.\d+ s", r"\\d+\\.\\d+ s", pattern)
            assert any(re.fullmatch(pattern, have) for have in lines), (line, lines)


# -- the REPL and the notebook -----------------------------------------------------------------
def test_repl_meta_command_table_is_the_repl_s_own():
    from wavesql.repl import META_COMMANDS

    table = README[README.index("| meta-command | does |"):]
    table = table[:table.index("\n\n")]
    documented = {re.match(r"\| `(\\\w+)", line).group(1)
                  for line in table.splitlines()[2:]}
    assert documented == set(META_COMMANDS)
    for body in (block("wavesql> CREATE STREAM trades", "text"),
                 block("wavesql> STREAM SELECT", "text")):
        assert "wavesql>" in body  # transcripts; tests/test_repl.py drives the real REPL


@pytest.mark.spark
def test_notebook_examples(ws, scratch):
    from IPython.core.interactiveshell import InteractiveShell

    from wavesql.datasets import array_recording

    array_recording(scratch / "array", seconds=4.0, events=3)
    shell = InteractiveShell.instance()
    magics = None
    saved = {k: ws.spark.conf.get(k) for k in ("spark.sql.shuffle.partitions",
                                               "spark.sql.session.timeZone")}
    try:
        for text in (block("%load_ext wavesql", "python"), block("%%wavesql -o audio", "sql"),
                     block("wavesql.plot.spectrogram", "python")):
            outcome = shell.run_cell(text)
            assert outcome.success, outcome.error_in_exec or outcome.error_before_exec
            magics = shell.magics_manager.registry["WaveSQLMagics"]
        audio = shell.user_ns["audio"]
        assert audio.count() == -(-4 * 48000 // 4096)
        figure = outcome.result  # the spectrogram's figure
        assert figure is not None and figure.axes
        assert len(shell.user_ns["loud"].collect()) > 0
    finally:
        for k, v in saved.items():  # --connect applied its defaults to the shared Spark
            ws.spark.conf.set(k, v)
        if magics is not None:
            if magics.session is not None and magics.session is not ws:
                magics.session.close()
            magics.session = magics._owned = magics._opened = None


@pytest.mark.spark
def test_kafka_quick_start(ws, kafka, scratch):
    """The Kafka block against the tests' broker: the batch count per user equals the
    records produced, and the REPL's STREAM line runs as a continuous query."""
    import json


    sql = block("FROM KAFKA 'clicks'").replace("localhost:9092", kafka.bootstrap)
    if "clicks" not in kafka.admin().list_topics(timeout=10).topics:
        kafka.create_topic("clicks", 2)
    users = [f"u{i % 4}" for i in range(40)]
    kafka.produce("clicks", [(u, json.dumps({"user_id": u, "url": f"/p{i}",
                                            "ts": f"2024-01-01 00:00:{i:02d}"}), i % 2)
                             for i, u in enumerate(users)])
    create, batch, stream = statements(sql)
    ws.sql(create)
    counts = {r[0]: r[1] for r in ws.sql(batch).collect()}
    assert counts == {u: users.count(u) for u in set(users)}
    assert stream.strip().startswith("STREAM ")
    cq = ws.stream(stream.strip()[len("STREAM "):], scratch / "out", scratch / "ckpt")
    cq.await_termination()
    assert sum(r.on_time for r in cq.reports) == len(users)


def test_every_block_is_accounted_for():
    """Every README block is named by one of this file's ``block(...)`` calls, or listed."""
    source = Path(__file__).read_text()
    keys = [k.replace('\\"', '"') for _, k in re.findall(r'block\((["\'])(.+?)\1', source)]
    for lang, body in fenced_blocks():
        first = body.strip().splitlines()[0] if body.strip() else ""
        if any(first.startswith(k) for k in NOT_RUNNABLE):
            continue
        assert any(key in body for key in keys), \
            f"README block not covered by tests/test_readme.py:\n{body[:300]}"
