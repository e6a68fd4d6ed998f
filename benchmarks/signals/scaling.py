"""Stateful signal functions on one core and on two: WaveSQL local[1] vs local[2] vs scipy.

    python benchmarks/signals/scaling.py [--runs 3] [--sizes 30m,3h] [--out scaling.md]

Issue 22's table. Two recordings of 48 kHz mono float32 audio (generated once into
``benchmarks/signals/.data/scaling/``): 30 minutes (one file) and 3 hours (six 30-minute
files, as a recorder writes them). Queries:

- ``lowpass``: ``SELECT count(*), sum(seg_rms(lowpass(ch1, 1000.0))) FROM sig [SAMPLES 48000]``
  -- a 4th-order Butterworth IIR filter, now cut into parallel partitions that each warm up
  on the 1,024 samples before them (udfs/kernels/filters.py);
- ``cfar``: ``SELECT count(*) FROM sig [SAMPLES 480] WHERE cfar(seg_rms(ch1), 4.0, 0.01, 64)``
  -- a detector whose noise estimate runs over every score since the first: sequential.

Peers, each in its idiomatic form on one thread, reading the same WAV files (page cache):
scipy ``sosfilt`` over 2**22-sample chunks with the state carried (``zi``), the RMS of each
48,000-sample window with numpy, summed; for ``cfar`` the window RMS with numpy and the
detector's recursion (as documented in udfs/kernels/detect.py) as a Python loop. Every
answer is compared with scipy's (the window count exactly, the sum to 1e-9 relative).

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
}
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


# ---------------------------------------------------------------------------- workers
def spark_worker(master: str, sizes: dict[str, list[str]]) -> None:
    """Answer ``{"size": .., "query": ..}`` lines with ``{"seconds": .., "n": .., "s": ..}``."""
    import wavesql

    catalog = tempfile.mkdtemp(prefix="wavesql-scaling-") + "/catalog.db"
    ws = wavesql.connect(master=master, catalog=catalog)
    for size, files in sizes.items():
        folder = tempfile.mkdtemp(prefix=f"scaling-{size}-")
        for f in files:  # one folder per size: links to the shared files
            os.symlink(f, os.path.join(folder, os.path.basename(f)))
        ws.sql(f"CREATE SIGNAL sig_{size} (ch1 FLOAT) RATE {RATE} HZ FROM '{folder}' FORMAT wav")
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        text = QUERIES[ask["query"]].format(sig=f"sig_{ask['size']}")
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


def scipy_cfar(files: list[str], k=4.0, alpha=0.01, warmup=64) -> tuple[int, None]:
    scores = []
    for x in _read(files):  # 30-minute files hold whole 480-sample windows
        assert len(x) % 480 == 0
        for a in range(0, len(x), 480 << 12):
            w = np.asarray(x[a:a + (480 << 12)], np.float64).reshape(-1, 480)
            scores += np.sqrt(np.mean(w * w, axis=1)).tolist()
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


def scipy_worker(sizes: dict[str, list[str]]) -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        ask = json.loads(line)
        fn = scipy_lowpass if ask["query"] == "lowpass" else scipy_cfar
        began = time.perf_counter()
        n, s = fn(sizes[ask["size"]])
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

    def ask(self, size: str, query: str) -> dict:
        self.proc.stdin.write(json.dumps({"size": size, "query": query}) + "\n")
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
    files = recordings(Path(args.cache))
    wanted = args.sizes.split(",")
    sizes = {s: [str(p) for p in files[s]] for s in wanted}
    queries = args.queries.split(",")
    workers = {system: Worker(system, sizes) for system in SYSTEMS}
    times: dict[tuple, list[float]] = {}
    answers: dict[tuple, tuple] = {}
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
    finally:
        for w in workers.values():
            w.close()
    load_end = os.getloadavg()
    print(report(times, answers, queries, wanted, args.runs, load_start, load_end))
    Path(args.out).write_text(report(times, answers, queries, wanted, args.runs, load_start,
                                     load_end))


def _check(answers, query, size, system) -> str:
    n, s = answers[(query, size, system)]
    n0, s0 = answers[(query, size, "scipy")]
    ok = n == n0 and (s is None or s0 is None or abs(s - s0) <= 1e-9 * abs(s0))
    return "" if ok else " **MISMATCH**"


def report(times, answers, queries, sizes, runs, load_start, load_end) -> str:
    def med(key):
        return statistics.median(times[key])

    def cell(key):
        t = times[key]
        return f"{med(key):.2f} s ({min(t):.2f}–{max(t):.2f})"

    lines = [f"# Stateful signal functions: one core, two cores, scipy (issue 22)", "",
             f"Run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
             f"{machine.describe(load_start, load_end)}; median of {runs} interleaved runs "
             "after one warm-up, range in brackets. `python benchmarks/signals/scaling.py`.",
             "", "| query | audio | local[1] | local[2] | scipy, 1 thread | 2nd core gain "
             "(local[1] / local[2]) | vs scipy (scipy / local[2]) | 3h / 30m (local[2]) |",
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
    return "\n".join(lines)


if __name__ == "__main__":
    main()
