"""Stateful signal functions on one core and on two: WaveSQL local[1] vs local[2] vs scipy.

    python benchmarks/signals/scaling.py [--runs 3] [--sizes 30m,3h] [--out scaling.md]

Issue 22's table. Two recordings of 48 kHz mono float32 audio (generated once into
``benchmarks/signals/.data/scaling/``): 30 minutes (one file) and 3 hours (six 30-minute
files, as a recorder writes them). Queries:

- ``lowpass``: ``SELECT count(*), sum(seg_rms(lowpass(ch1, 1000.0))) FROM sig [SAMPLES 48000]``
  -- a 4th-order Butterworth IIR filter, now cut into parallel partitions that each warm up
  on the 1,024 samples before them (udfs/kernels/filters.py);
- ``cfar``: ``SELECT count(*) FROM sig [SAMPLES 480] WHERE cfar(seg_rms(ch1), 4.0, 0.01, 64)``
  -- a detector whose noise estimate runs over every score since the first (a clipped
  exponentially-forgetting recursion seeded by the stream's first scores): the windows are
  read and scored in parallel partitions, and each partition also runs cfar from a
  warm-up on the scores before it, speculatively; one ordered task checks that each
  partition's guessed start state is the one before's end state bit for bit and re-runs
  any that is not (udfs/row_chain.py; before 2026-11-30 cfar ran in one ordered pass over
  the scores, udfs/row_state.py);
- ``resample``: ``SELECT count(*), sum(v) FROM RESAMPLE(ev, ts, INTERVAL 1 MILLISECOND,
  'linear')`` -- an un-keyed RESAMPLE of an event stream (Parquet, one file per 30 minutes,
  about 1,000 irregular events a second: 1.8 M rows for 30 minutes, 10.8 M for 3 hours) onto
  a 1 ms grid, which WaveSQL runs in parallel ranges of event time
  (planner/physical/direct_resample.py) with the aggregate in the same pass.

Peers, each in its idiomatic form on one thread, reading the same files (page cache):
scipy ``sosfilt`` over 2**22-sample chunks with the state carried (``zi``), the RMS of each
48,000-sample window with numpy, summed; for ``cfar`` the window RMS with numpy and the
detector's recursion (as documented in udfs/kernels/detect.py) as a Python loop (a
nonlinear recursion has no vectorised numpy/scipy form; the loop is as tight as the
recursion allows); for ``resample`` pandas: ``read_parquet``, then the series reindexed to
the union of its times and the grid, ``interpolate(method="time")``, reindexed to the grid
(pandas' ``resample("1ms").interpolate()`` would first drop every event off the grid, so it
is not the same answer). Every answer is compared with the peer's (the row count exactly,
the sum to 1e-9 relative).

Notes under the table, measured in the peer's process in the same rounds: for ``cfar`` its
sequential part with no Spark around it -- WaveSQL's own ``cfar_scan`` over the scores, once
the scores exist -- the part a plan that keeps cfar's exact flags had to run in one ordered
pass before the speculative partitions (now each partition runs its share of it, plus a
look-back); for ``resample`` the same answer in numpy (``np.interp``), the
fastest single-thread form, beside pandas.

Each system runs in its own process (a Spark session of its own per master), kept alive for
the whole run; the runs are interleaved (round r times every system on every query before
round r + 1), one warm-up each, median of ``--runs`` reported with the range.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RATE = 48_000
FILE_SECONDS = 30 * 60
SIZES = {"30m": 1, "3h": 6}  # files of 30 minutes
QUERIES = {
    "lowpass": "SELECT count(*) AS n, sum(seg_rms(lowpass(ch1, 1000.0))) AS s "
               "FROM {sig} [SAMPLES 48000]",
    "cfar": "SELECT count(*) AS n, CAST(NULL AS DOUBLE) AS s FROM {sig} [SAMPLES 480] "
            "WHERE cfar(seg_rms(ch1), 4.0, 0.01, 64)",
    "resample": "SELECT count(*) AS n, sum(v) AS s "
                "FROM RESAMPLE({ev}, ts, INTERVAL 1 MILLISECOND, 'linear')",
}
EVENT_GAP_US = (1, 2000)  # gaps between events, uniform in [1, 2000) microseconds
SYSTEMS = ("local[1]", "local[2]", "scipy")


# ------------------------------------------------------------------------------- data
def recordings(cache: Path) -> dict[str, list[Path]]:
    """The 30-minute files (generated once): noise, a drifting tone and bursts."""
    folder = cache / "scaling"
    folder.mkdir(parents=True, exist_ok=True)
    from wavesql.udfs.wav import write_wav

    files = []
    for i in range(max(SIZES.values())):
        path = folder / f"part_{i}.wav"
        files.append(path)
        if path.exists():
            continue
        rng = np.random.default_rng(22 + i)
        n = FILE_SECONDS * RATE
        t = np.arange(n, dtype=np.float64) / RATE
        x = 0.05 * rng.standard_normal(n) + 0.2 * np.sin(2 * np.pi * (300 + 50 * i) * t)
        bursts = rng.integers(0, n - RATE, size=200)
        for b in bursts:  # 200 loud 0.1 s bursts per file: something for cfar to find
            x[b:b + RATE // 10] += rng.standard_normal(RATE // 10)
        write_wav(path.with_suffix(".tmp"), x.astype(np.float32), RATE, "float32")
        os.replace(path.with_suffix(".tmp"), path)
    return {size: files[:count] for size, count in SIZES.items()}


def event_files(cache: Path) -> dict[str, list[Path]]:
    """The 30-minute event files (generated once): strictly increasing microsecond times
    with random gaps, a noisy sine as the value; row groups of 2**18 rows (what the
    direct RESAMPLE cuts its ranges from)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = cache / "scaling_events"
    folder.mkdir(parents=True, exist_ok=True)
    span = FILE_SECONDS * 1_000_000
    files = []
    for i in range(max(SIZES.values())):
        path = folder / f"part_{i}.parquet"
        files.append(path)
        if path.exists():
            continue
        rng = np.random.default_rng(220 + i)
        gaps = rng.integers(*EVENT_GAP_US, size=2 * span // sum(EVENT_GAP_US) + 10_000)
        t = i * span + np.cumsum(gaps)
        t = t[t < (i + 1) * span]
        v = np.sin(2 * np.pi * t / 7e6) + 0.1 * rng.standard_normal(len(t))
        table = pa.table({"ts": pa.array(t, pa.timestamp("us", tz="UTC")), "v": v})
        pq.write_table(table, path.with_suffix(".tmp"), row_group_size=1 << 18)
        os.replace(path.with_suffix(".tmp"), path)
    return {size: files[:count] for size, count in SIZES.items()}


# ---------------------------------------------------------------------------- workers
def _linked(files: list[str], prefix: str) -> str:
    """A folder of links to ``files`` (one folder per size, the files shared)."""
    folder = tempfile.mkdtemp(prefix=prefix)
    for f in files:
        os.symlink(f, os.path.join(folder, os.path.basename(f)))
    return folder


def spark_worker(master: str, sizes: dict[str, dict[str, list[str]]]) -> None:
    """Answer ``{"size": .., "query": ..}`` lines with ``{"seconds": .., "n": .., "s": ..}``."""
    import wavesql

    catalog = tempfile.mkdtemp(prefix="wavesql-scaling-") + "/catalog.db"
    ws = wavesql.connect(master=master, catalog=catalog)
    for size, files in sizes.items():
        ws.sql(f"CREATE SIGNAL sig_{size} (ch1 FLOAT) RATE {RATE} HZ "
               f"FROM '{_linked(files['wav'], f'scaling-{size}-')}' FORMAT wav")
        ws.sql(f"CREATE STREAM ev_{size} (ts TIMESTAMP, v DOUBLE) "
               f"FROM '{_linked(files['events'], f'scaling-ev-{size}-')}' FORMAT parquet "
               f"EVENT TIME ts")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        if ask.get("explain"):
            text = QUERIES[ask["query"]].format(sig=f"sig_{ask['size']}", ev=f"ev_{ask['size']}")
            plan = "\n".join(r[0] for r in ws.sql("EXPLAIN " + text).collect())
            print(json.dumps({"plan": plan}), flush=True)
            continue
        text = QUERIES[ask["query"]].format(sig=f"sig_{ask['size']}", ev=f"ev_{ask['size']}")
        began = time.perf_counter()
        row = ws.sql(text).collect()[0]
        print(json.dumps({"seconds": time.perf_counter() - began, "n": row["n"],
                          "s": row["s"]}), flush=True)


def _read(files: list[str]):
    from scipy.io import wavfile

    for f in files:
        yield wavfile.read(f, mmap=True)[1]


def scipy_lowpass(files: list[str]) -> tuple[int, float]:
    from scipy import signal as sps

    sos = sps.butter(4, 1000.0, fs=RATE, output="sos")
    zi = np.zeros((sos.shape[0], 2))
    total, count, tail = 0.0, 0, np.zeros(0)
    chunk = 1 << 22  # whole windows per chunk would need 48000 | chunk; carry the rest
    for x in _read(files):  # files are contiguous: the filter state runs across them
        for a in range(0, len(x), chunk):
            y, zi = sps.sosfilt(sos, np.asarray(x[a:a + chunk], np.float64), zi=zi)
            y = np.concatenate([tail, y])
            whole = len(y) // 48000 * 48000
            w = y[:whole].reshape(-1, 48000)
            total += float(np.sqrt(np.mean(w * w, axis=1)).sum())
            count += w.shape[0]
            tail = y[whole:]
    if len(tail):
        total += float(np.sqrt(np.mean(tail * tail)))
        count += 1
    return count, total


def _window_rms(files: list[str]) -> list[float]:
    scores = []
    for x in _read(files):  # 30-minute files hold whole 480-sample windows
        assert len(x) % 480 == 0
        for a in range(0, len(x), 480 << 12):
            w = np.asarray(x[a:a + (480 << 12)], np.float64).reshape(-1, 480)
            scores += np.sqrt(np.mean(w * w, axis=1)).tolist()
    return scores


def scipy_cfar(files: list[str], k=4.0, alpha=0.01, warmup=64) -> tuple[int, None]:
    scores = _window_rms(files)
    fired, seen, mean, m2, var = 0, 0, 0.0, 0.0, 0.0
    for s in scores:  # the detector's recursion (udfs/kernels/detect.py's docstring)
        if seen < warmup:
            seen += 1
            d = s - mean
            mean += d / seen
            m2 += d * (s - mean)
            var = m2 / seen
            continue
        limit = mean + k * math.sqrt(var)
        fired += s > limit
        d = min(s, limit) - mean
        mean += alpha * d
        var = (1 - alpha) * (var + alpha * d * d)
    return fired, None


def pandas_resample(files: list[str]) -> tuple[int, float]:
    import pandas as pd

    df = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    s = pd.Series(df["v"].to_numpy(), index=pd.DatetimeIndex(df["ts"]))
    # the grid in the events' unit (microseconds): a nanosecond grid makes the union's
    # reindex take pandas' slow path (16 s instead of 1 s for 200 k rows, measured)
    grid = pd.date_range(s.index[0].ceil("1ms"), s.index[-1].floor("1ms"), freq="1ms",
                         unit="us")
    y = s.reindex(s.index.union(grid)).interpolate(method="time").reindex(grid)
    return len(y), float(y.sum())


def cfar_floor(files: list[str]) -> dict:
    """cfar's sequential part with no Spark around it: WaveSQL's ``cfar_scan`` over the
    scores (made first with numpy, not timed)."""
    from wavesql.udfs.kernels.detect import cfar_init, cfar_scan

    scores = np.asarray(_window_rms(files))
    began = time.perf_counter()
    fired, _ = cfar_scan(scores, 4.0, 0.01, 64, cfar_init(4.0, 0.01, 64))
    return {"seconds": time.perf_counter() - began, "n": int(fired.sum()), "s": None}


def numpy_resample(files: list[str]) -> dict:
    """The same RESAMPLE in numpy (``np.interp`` over integer microseconds), for the notes:
    what a single thread does with no index to build."""
    import pyarrow.parquet as pq

    began = time.perf_counter()
    t = np.concatenate([pq.read_table(f, columns=["ts"]).column(0).to_numpy().view(np.int64)
                        for f in files])
    v = np.concatenate([pq.read_table(f, columns=["v"]).column(0).to_numpy() for f in files])
    grid = np.arange(-(-t[0] // 1000) * 1000, t[-1] // 1000 * 1000 + 1, 1000)
    y = np.interp(grid, t, v)
    return {"seconds": time.perf_counter() - began, "n": len(y), "s": float(y.sum())}


#: the notes' extra single-thread measurement per query
FLOORS = {"cfar": cfar_floor, "resample": numpy_resample}

PEERS = {"lowpass": scipy_lowpass, "cfar": scipy_cfar, "resample": pandas_resample}


def scipy_worker(sizes: dict[str, dict[str, list[str]]]) -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        files = sizes[ask["size"]]["events" if ask["query"] == "resample" else "wav"]
        if ask.get("floor"):
            print(json.dumps(FLOORS[ask["query"]](files)), flush=True)
            continue
        began = time.perf_counter()
        n, s = PEERS[ask["query"]](files)
        print(json.dumps({"seconds": time.perf_counter() - began, "n": n, "s": s}), flush=True)


class Worker:
    def __init__(self, system: str, sizes: dict[str, list[str]]):
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--worker", system, "--sizes-json", json.dumps(sizes)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self._reply()

    def _reply(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("a worker died (see its stderr above)")
            if line.startswith("{"):
                return json.loads(line)

    def ask(self, size: str, query: str, **extra) -> dict:
        self.proc.stdin.write(json.dumps({"size": size, "query": query, **extra}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=120)


# ------------------------------------------------------------------------------ main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default=",".join(SIZES))
    ap.add_argument("--queries", default=",".join(QUERIES))
    ap.add_argument("--cache", default=str(HERE / ".data"))
    ap.add_argument("--out", default=str(HERE / "scaling.md"))
    ap.add_argument("--worker")
    ap.add_argument("--sizes-json")
    args = ap.parse_args()
    if args.worker:
        sizes = json.loads(args.sizes_json)
        return scipy_worker(sizes) if args.worker == "scipy" else spark_worker(args.worker,
                                                                               sizes)
    load_start = os.getloadavg()
    wav, events = recordings(Path(args.cache)), event_files(Path(args.cache))
    wanted = args.sizes.split(",")
    sizes = {s: {"wav": [str(p) for p in wav[s]], "events": [str(p) for p in events[s]]}
             for s in wanted}
    queries = args.queries.split(",")
    workers = {system: Worker(system, sizes) for system in SYSTEMS}
    times: dict[tuple, list[float]] = {}
    answers: dict[tuple, tuple] = {}
    plans = {q: workers["local[2]"].ask(wanted[-1], q, explain=True)["plan"] for q in queries}
    floors: dict[str, list[float]] = {}
    try:
        for rnd in range(args.runs + 1):  # round 0 is the warm-up
            for query in queries:
                for size in wanted:
                    for system in SYSTEMS:
                        got = workers[system].ask(size, query)
                        answers[(query, size, system)] = (got["n"], got["s"])
                        if rnd:
                            times.setdefault((query, size, system), []).append(got["seconds"])
                        print(f"round {rnd} {query} {size} {system}: {got['seconds']:.2f} s",
                              flush=True)
                    if query in FLOORS and rnd:
                        got = workers["scipy"].ask(size, query, floor=True)
                        floors.setdefault((query, size), []).append(got["seconds"])
                        answers[(query, size, "floor")] = (got["n"], got["s"])
    finally:
        for w in workers.values():
            w.close()
    load_end = os.getloadavg()
    text = report(times, answers, queries, wanted, args.runs, load_start, load_end, plans,
                  floors)
    print(text)
    out = Path(args.out)  # each run appends its dated section: the table's history stays
    previous = out.read_text() if out.exists() else ""
    out.write_text(previous.rstrip("\n") + "\n\n" + text if previous else text)


def _check(answers, query, size, system) -> str:
    n, s = answers[(query, size, system)]
    n0, s0 = answers[(query, size, "scipy")]
    ok = n == n0 and (s is None or s0 is None or abs(s - s0) <= 1e-9 * abs(s0))
    return "" if ok else " **MISMATCH**"


def report(times, answers, queries, sizes, runs, load_start, load_end, plans=None,
           floors=None) -> str:
    def med(key):
        return statistics.median(times[key])

    def cell(key):
        t = times[key]
        return f"{med(key):.2f} s ({min(t):.2f}–{max(t):.2f})"

    lines = [f"## Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"{machine.describe(load_start, load_end)}; median of {runs} interleaved runs "
             "after one warm-up, range in brackets. `python benchmarks/signals/scaling.py`.",
             "", "| query | data | local[1] | local[2] | peer, 1 thread | 2nd core gain "
             "(local[1] / local[2]) | vs peer (peer / local[2]) | 3h / 30m (local[2]) |",
             "|---|---|---|---|---|---|---|---|"]
    for q in queries:
        for size in sizes:
            one, two, sp = (q, size, "local[1]"), (q, size, "local[2]"), (q, size, "scipy")
            grow = (f"{med(two) / med((q, '30m', 'local[2]')):.2f}×"
                    if size != "30m" and (q, "30m", "local[2]") in times else "")
            n, s = answers[two]
            lines.append(
                f"| {q} | {size} | {cell(one)}{_check(answers, q, size, 'local[1]')} | "
                f"{cell(two)}{_check(answers, q, size, 'local[2]')} | {cell(sp)} | "
                f"{med(one) / med(two):.2f}× | {med(sp) / med(two):.2f}× | {grow} |")
    lines += ["", "Answers (local[2]): " + "; ".join(
        f"{q} {size}: {answers[(q, size, 'local[2]')][0]} rows"
        + (f", sum {answers[(q, size, 'local[2]')][1]:.6f}"
           if answers[(q, size, 'local[2]')][1] is not None else "")
        for q in queries for size in sizes), ""]
    what = {"cfar": "WaveSQL's cfar_scan alone over the scores, no Spark, one core",
            "resample": "numpy np.interp over integer microseconds, reading included, "
                        "one thread"}
    for (q, size), seconds in (floors or {}).items():
        lines.append(f"- {q} {size}, {what[q]}: {statistics.median(seconds):.2f} s "
                     f"({min(seconds):.2f}–{max(seconds):.2f})"
                     f"{_check(answers, q, size, 'floor')}")
    if floors:
        lines.append("")
    for q, plan in (plans or {}).items():
        lines += [f"EXPLAIN {q} ({sizes[-1]}):", "", "```", plan.strip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
