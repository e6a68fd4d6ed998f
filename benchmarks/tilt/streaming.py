"""TiLT applications as continuous queries: per-result latency, arrival to sink (p50, p99).

    python benchmarks/tilt/streaming.py [--seconds 60] [--files 60] [--period 0.5]
                                        [--only trend,ysb,...]

For each application, the example file's own query (examples/tilt/<app>.wsql) runs as a
continuous query (``ws.stream``, trigger every second) while its input arrives: the first
``--seconds`` of event time of the benchmark's data (examples/tilt/generate.py, same seeds),
cut into ``--files`` files in time order, are moved into the stream's folder one every
``--period`` seconds of wall-clock time (each touched just before, so its arrival is its
mtime; written aside and renamed, so Spark never sees half a file). At 60 s in 60 files every
0.5 s, the input arrives at 2x real time. Event streams are closed at the end by a
punctuation row (streams with a PROGRESS COLUMN) and the ECG by its ``.eof`` marker.

**Latency** is the runner's (streaming/runner.py): for each micro-batch, the wall-clock time
from the earliest of its new files appearing to its results being in the sink -- so it
includes up to one trigger interval of waiting, the micro-batch and Spark's log writes. The
first ``--warmup`` fraction of the batches (Spark and the Python workers warming up) is left
out; p50 and p99 are nearest-rank over the rest. Results go to stdout and to
``streaming_results.md`` beside this file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE.parent))  # benchmarks/: machine
sys.path.insert(0, str(HERE))  # run.py beside this file

import machine  # noqa: E402

from examples.tilt import generate as gen  # noqa: E402

APPS = ("trend", "rsi", "normalize", "impute", "resample", "pan_tompkins", "vibration",
        "fraud", "ysb")
#: app -> dataset folder of the example (examples/tilt/generate.py: DATASETS, or the ECG)
DATA = {
    "trend": "prices", "rsi": "prices", "normalize": "sensor", "impute": "sensor_gaps",
    "resample": "sensor_4ms", "pan_tompkins": "ecg", "vibration": "vibration",
    "fraud": "transactions", "ysb": "ysb",
}


def _pct(values, q):
    if not values:
        return None
    return float(np.percentile(np.asarray(values, dtype=float), q, method="nearest"))


def stage(app: str, seconds: float, files: int, staging: Path) -> tuple[list[Path], object]:
    """Write the app's input as ``files`` files under ``staging``; return them in time order
    and what closes the stream (a punctuation frame, or None for the ECG)."""
    folder = DATA[app]
    if folder == "ecg":
        codes = gen.ecg(seconds)
        gen.write_ecg(codes, staging, parts=files)
        return sorted(staging.glob("*.wav")), None
    ticks = int(round(seconds * 1_000_000 / gen.TICK_US))
    frame = gen.DATASETS[folder](ticks)  # the benchmark's data, as many ticks as seconds
    ts = frame["ts"].to_numpy()
    frame = frame[ts < ts.min() + int(seconds * 1_000_000)].reset_index(drop=True)
    gen.write_stream(frame, staging, parts=files)
    return sorted(staging.glob("*.parquet")), frame


def run_app(ws, app: str, args, root: Path) -> dict:
    from run import example  # benchmarks/tilt/run.py: the example file's statements

    work = root / app
    if work.exists():
        shutil.rmtree(work)
    data = work / "data"
    folder = DATA[app]
    staged, frame = stage(app, args.seconds, args.files, work / "staging")
    (data / folder).mkdir(parents=True)
    create, query = example(app, str(data))
    first = staged[0]
    _arrive(first, data / folder)  # CREATE checks the folder has something to read
    ws.sql(create)
    cq = ws.stream(query, work / "out", work / "ckpt", trigger="every 1 second")
    started = time.monotonic()
    while not cq.reports and time.monotonic() - started < 300:
        if cq.error is not None:
            raise cq.error
        time.sleep(0.1)
    schedule = time.monotonic()
    for i, path in enumerate(staged[1:], start=1):
        wait = schedule + i * args.period - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        _arrive(path, data / folder)
    if frame is not None:
        closing = gen.write_punctuation(work / "staging", frame)
        _arrive(closing, data / folder)
    else:
        (data / folder / "end.eof").write_text("")
    last_arrival = time.time()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and cq.error is None and not _done(cq, last_arrival):
        time.sleep(0.5)
    cq.stop()
    if cq.error is not None:
        raise cq.error
    reports = [r for r in cq.reports if r.latency_s is not None]
    steady = reports[int(len(reports) * args.warmup):]
    lat = [r.latency_s for r in steady]
    rows_out = sum(r.final_out for r in cq.reports)
    return {"app": app, "batches": len(steady), "p50": _pct(lat, 50), "p99": _pct(lat, 99),
            "max": max(lat) if lat else None, "rows_out": rows_out}


def _arrive(path: Path, folder: Path) -> None:
    """Move ``path`` into ``folder`` now: touched first (arrival = mtime), then renamed."""
    now = time.time()
    os.utime(path, (now, now))
    os.replace(path, folder / path.name)


def _done(cq, last_arrival: float, quiet: float = 3.0) -> bool:
    """A batch began after the last file arrived, and none has begun for ``quiet`` s."""
    reports = [r for r in cq.reports if r.started_at is not None]
    return (bool(reports) and any(r.started_at > last_arrival for r in reports)
            and time.time() - max(r.started_at for r in reports) > quiet)


def table(results: list[dict], args, notes: dict) -> str:
    lines = [
        f"Run {notes['when']} on {notes['machine']}.",
        "",
        f"Input per app: the first {args.seconds:g} s of event time of the benchmark's data "
        f"in {args.files} files, one every {args.period:g} s "
        f"({args.seconds / args.files / args.period:g}x real time); trigger every 1 s; "
        f"the first {args.warmup:.0%} of the batches left out.",
        "",
        "| app | batches | latency p50 | latency p99 | max | final rows out |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['app']} | **failed**: {r['error']} | | | | |")
            continue
        f = lambda v: "—" if v is None else f"{v:.2f} s"  # noqa: E731
        lines.append(f"| {r['app']} | {r['batches']} | {f(r['p50'])} | {f(r['p99'])} | "
                     f"{f(r['max'])} | {r['rows_out']:,} |")
    lines += ["", f"Notes: {notes['versions']}. Whole run {notes['elapsed']:.0f} s."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="event time per app")
    ap.add_argument("--files", type=int, default=60)
    ap.add_argument("--period", type=float, default=0.5, help="wall-clock seconds per file")
    ap.add_argument("--warmup", type=float, default=0.2)
    ap.add_argument("--only", default=",".join(APPS))
    ap.add_argument("--out", default=str(HERE / "streaming_results.md"))
    args = ap.parse_args(argv)

    import wavesql

    t0, load_start = time.time(), os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="wavesql_tilt_stream_"))
    ws = wavesql.connect(catalog=root / "catalog.db")
    results = []
    for app in [a for a in args.only.split(",") if a]:
        print(f"-- {app}", flush=True)
        try:
            results.append(run_app(ws, app, args, root))
        except Exception as err:  # noqa: BLE001 -- reported in the table, the run goes on
            results.append({"app": app, "error": f"{type(err).__name__}: {err}"[:200]})
        print(results[-1], flush=True)
    import pyspark

    notes = {"when": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
             "machine": machine.describe(load_start, os.getloadavg()),
             "versions": f"Spark {pyspark.__version__} local[2], Python "
                         f"{platform.python_version()}",
             "elapsed": time.time() - t0}
    text = table(results, args, notes)
    print(text)
    Path(args.out).write_text("# TiLT applications as continuous queries: result latency\n\n"
                              + text)
    print(f"written to {args.out}")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
