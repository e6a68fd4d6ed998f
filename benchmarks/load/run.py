"""Load test: a continuous signal query sustained at a fixed input rate (issue 7, part 6).

A writer thread adds WAV files to a signal's directory at a fixed rate (default 48 kHz, one
channel, ``--file-seconds`` of audio per file, ``--speed`` times real time), each written
aside and renamed into place; a continuous query (``Session.stream``, a processing-time
trigger) runs a stateful signal query over it -- a low-pass filter and a CFAR detector,
whose state is carried across micro-batches -- while a sampler records, once a second, the
resident memory of the Python driver, the Spark driver JVM and the Python workers (every
process below this one, from ``/proc``). At the end the recording is marked ended
(``*.eof``), the last batch flushes the tail, and the output is checked against the number
of windows written.

Result latency (per micro-batch, from the batch reports): the wall-clock time from the
earliest new file of the batch appearing (its mtime, i.e. its rename into place) to the
batch's results being written -- the worst latency of any input in the batch.

    python benchmarks/load/run.py --seconds 300              # the figures in README.md
    python benchmarks/load/run.py --seconds 60 --json out.json

Prints one JSON object (also written to ``--json``): p50/p99/max latency over the whole run
and per half, peak RSS per process group, RSS at the start and end of the steady state and
its growth per minute, batches, samples/s in and processed, and whether every window came
out exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

QUERY = ("SELECT start_time(ch1) AS t, seg_rms(lowpass(ch1, 2000.0, 4)) AS lp, "
         "cfar(seg_rms(ch1), 4.0, 0.01, 64) AS det FROM mic [SAMPLES {window}]")


# ------------------------------------------------------------------------------ memory
def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            kids.setdefault(int(fields[1]), []).append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return kids


def _rss_and_name(pid: int) -> tuple[int, str]:
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return 0, ""
    rss = next((int(line.split()[1]) * 1024 for line in text.splitlines()
                if line.startswith("VmRSS:")), 0)
    return rss, cmd


def memory_sample() -> dict[str, int]:
    """RSS in bytes: this Python driver, the JVM(s) below it, Python workers below those."""
    kids = _children()
    out = {"python_driver": _rss_and_name(os.getpid())[0], "jvm": 0, "python_workers": 0}
    stack = list(kids.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        rss, cmd = _rss_and_name(pid)
        if "java" in cmd.split(" ")[0]:
            out["jvm"] += rss
        elif "python" in cmd or "pyspark" in cmd:
            out["python_workers"] += rss
        stack.extend(kids.get(pid, []))
    return out


# ------------------------------------------------------------------------------ writer
class Writer(threading.Thread):
    """Adds ``file_seconds`` of audio every ``file_seconds / speed`` seconds."""

    def __init__(self, folder: Path, rate: int, file_seconds: float, speed: float,
                 seconds: float, seed: int = 0):
        super().__init__(daemon=True)
        self.folder, self.rate, self.speed = folder, rate, speed
        self.frames = int(round(rate * file_seconds))
        self.period = file_seconds / speed
        self.seconds = seconds
        self.rng = np.random.default_rng(seed)
        self.files = 0
        self.lag_max = 0.0  # how far the writer fell behind its schedule
        self.error: BaseException | None = None

    def write_one(self) -> None:
        from wavesql.udfs.wav import write_wav

        x = (self.rng.standard_normal(self.frames) * 0.05).astype(np.float32)
        if self.rng.random() < 0.2:  # an event now and then, for the detector
            a = int(self.rng.integers(0, self.frames // 2))
            x[a:a + self.frames // 4] += np.float32(0.8)
        part = self.folder / f"r_{self.files:07d}.wav.part"
        write_wav(part, x, self.rate, "float32")
        os.replace(part, self.folder / f"r_{self.files:07d}.wav")
        self.files += 1

    def run(self) -> None:
        try:
            start, first = time.monotonic(), self.files
            while time.monotonic() - start < self.seconds:
                due = start + (self.files - first) * self.period
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self.lag_max = max(self.lag_max, -wait)
                self.write_one()
        except BaseException as err:  # noqa: BLE001 - reported by main
            self.error = err


# ------------------------------------------------------------------------------ figures
def _pct(values, q):
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q, method="nearest"))


def _latency(reports) -> dict:
    lat = [r.latency_s for r in reports if r.latency_s is not None]
    return {"batches": len(lat), "p50_s": _pct(lat, 50), "p99_s": _pct(lat, 99),
            "max_s": max(lat) if lat else None}


def run(seconds: float, *, rate: int = 48_000, file_seconds: float = 0.5, speed: float = 1.0,
        window: int = 4800, trigger: str = "every 1 second", workdir: str | None = None,
        master: str = "local[2]", warmup: float = 0.2, spark=None) -> dict:
    """Run the load test for ``seconds`` of writing; return the figures (module docstring).

    ``warmup``: the fraction of the run left out of the steady-state figures (Spark's and
    Python's first batches compile and load code)."""
    import wavesql

    root = Path(workdir or tempfile.mkdtemp(prefix="wavesql_load_"))
    if root.exists():
        shutil.rmtree(root)
    (root / "rec").mkdir(parents=True)
    owned = spark is None
    ws = wavesql.connect(master=master, catalog=root / "catalog.db", spark=spark,
                         config={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    writer = Writer(root / "rec", rate, file_seconds, speed, seconds)
    writer.write_one()  # CREATE SIGNAL wants a file to check
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {rate} HZ FROM '{root / 'rec'}' FORMAT wav")
    memory: list[tuple[float, dict]] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            memory.append((time.monotonic(), memory_sample()))
            stop.wait(1.0)

    sampler = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    sampler.start()
    cq = ws.stream(QUERY.format(window=window), root / "out", root / "ckpt", trigger=trigger)
    # Start the clock once the query runs: its first batch (over the first file) waits for
    # Spark to start the Python data source, which is not what the load test measures.
    started = time.monotonic()
    while not cq.reports and time.monotonic() - started < 600:
        if cq.error is not None:
            raise cq.error
        time.sleep(0.2)
    startup = time.monotonic() - started
    t0 = time.monotonic()
    writer.start()
    try:
        writer.join()
        if writer.error is not None:
            raise writer.error
        (root / "rec" / "end.eof").write_text("")
        deadline = time.monotonic() + 300
        total = writer.files * writer.frames
        want_windows = -(-total // window)
        while time.monotonic() < deadline:  # until the flush of the tail came out
            state = cq._load_state(None)
            if cq.error is not None:
                raise cq.error
            if state and state["inputs"].get("mic", {}).get("final"):
                break
            time.sleep(0.5)
        cq.stop()
    finally:
        stop.set()
        sampler.join()
    elapsed = time.monotonic() - t0
    spark_progress = [{"batch": p["batchId"], "ms": p["durationMs"]}
                      for p in cq._query.recentProgress]
    spark_session = ws.spark
    out = spark_session.read.parquet(str(root / "out"))
    rows, distinct = out.count(), out.select("t").distinct().count()
    reports = list(cq.reports)
    steady_from = t0 + warmup * seconds
    steady = [r for r in reports if r.started_at is not None
              and r.started_at - (time.time() - time.monotonic()) >= steady_from]
    half = len(steady) // 2
    mem_steady = [(t, m) for t, m in memory if t >= steady_from]

    def total_rss(m):
        return m["python_driver"] + m["jvm"] + m["python_workers"]

    def peak(key):
        return max((m[key] for _, m in memory), default=0)

    growth = None
    if len(mem_steady) >= 4:
        ts = np.array([t for t, _ in mem_steady]) - mem_steady[0][0]
        rss = np.array([total_rss(m) for _, m in mem_steady], dtype=float)
        growth = float(np.polyfit(ts, rss, 1)[0] * 60)  # bytes per minute
    from wavesql.streaming.metrics import summarize

    figures = {
        "seconds": seconds, "rate_hz": rate, "file_seconds": file_seconds, "speed": speed,
        "window": window, "trigger": trigger, "query": QUERY.format(window=window),
        "elapsed_s": round(elapsed, 1), "startup_s": round(startup, 1), "files": writer.files,
        "writer_lag_max_s": round(writer.lag_max, 3),
        "samples": writer.files * writer.frames,
        "windows_expected": want_windows, "rows_out": rows, "windows_distinct": distinct,
        "exactly_once": rows == distinct == want_windows,
        "batches": len(reports),
        "latency": _latency(steady),
        "latency_first_half": _latency(steady[:half]),
        "latency_second_half": _latency(steady[half:]),
        "batch_seconds_p50": _pct([r.seconds for r in steady], 50),
        "state_bytes_max": max((r.state_bytes for r in reports), default=0),
        "rss_peak_bytes": {k: peak(k) for k in ("python_driver", "jvm", "python_workers")},
        "rss_total_peak_bytes": max((total_rss(m) for _, m in memory), default=0),
        "rss_total_steady_first_bytes": total_rss(mem_steady[0][1]) if mem_steady else None,
        "rss_total_steady_last_bytes": total_rss(mem_steady[-1][1]) if mem_steady else None,
        "rss_total_growth_bytes_per_min": growth,
        "rss_samples": [(round(t - t0, 1), total_rss(m)) for t, m in memory],
        "metrics": summarize(reports),
        "spark_progress_last": spark_progress[-20:],
    }
    if owned:
        spark_session.stop()
    ws.close()
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0, help="how long files arrive")
    parser.add_argument("--rate", type=int, default=48_000)
    parser.add_argument("--file-seconds", type=float, default=0.5)
    parser.add_argument("--speed", type=float, default=1.0, help="times real time")
    parser.add_argument("--window", type=int, default=4800)
    parser.add_argument("--trigger", default="every 1 second")
    parser.add_argument("--workdir")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    figures = run(args.seconds, rate=args.rate, file_seconds=args.file_seconds,
                  speed=args.speed, window=args.window, trigger=args.trigger,
                  workdir=args.workdir)
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0 if figures["exactly_once"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
