"""Per-key continuous SYNC vs the same SYNC per row, on the same data, in one run.

    python benchmarks/sync/per_key.py [--seconds 40] [--keys 8] [--reps 3]

A continuous SYNC whose stateful function runs per key (``lowpass(s.ch1, 100.0) OVER
(PARTITION BY c.k)``) holds each control row until the control's progress has passed its
event time, then runs each key's rows in range order -- ties broken by the range end, the
event time and the control row as JSON (streaming/sync_state.py, query_sync.py) -- with the
filter's state carried from one range to the next of a key, across micro-batches. The same
SYNC per row (``seg_rms(s.ch1)``: nothing kept between rows) delivers each row as it comes.
This measures what the per-key path costs over the per-row one; a third query, the filter
per row (``seg_rms(lowpass(s.ch1, 100.0))``: each range a signal of its own, from rest),
does the same arithmetic as the per-key one without the per-key order and state, so
per key ÷ per row filtered is the cost of the per-key path itself.

Data: one mono 8 kHz float32 WAV recording (``--seconds``), ``--keys`` keys, each tiling
the whole recording with contiguous 1000-sample ranges (one signal per key), the control
rows' event time the range start, in ``--files`` Parquet files of ascending time (plus a
last row far ahead, so the progress passes every other row). Both queries reduce each
range to one number (per key: ``seg_rms`` of the filtered segment), so they write the same
rows.

Each repetition runs each query once, in alternating order, from an empty checkpoint and
output to the end (availableNow, one micro-batch per control file); after a warm-up of
each, ``--reps`` repetitions. Reported: each query's median and range, and the ratios per
key ÷ per row and per key ÷ per row filtered of each repetition (median and range).
Checks (of the last run of each): per row, every range's RMS against numpy; the filtered
ones against scipy's ``sosfilt`` (per row from rest in each range, per key with the state
carried along each key's ranges). A mismatch is printed, marked in the results, and the
exit status is 1.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
RATE = 8000
RANGE = 1000  # samples per control row
PER_ROW = ("SELECT c.id, c.k, seg_rms(s.ch1) AS r FROM ctl c SYNC JOIN mic s "
           "ON RANGE (c.a, c.b)")
PER_ROW_FILTERED = ("SELECT c.id, c.k, seg_rms(lowpass(s.ch1, 100.0)) AS r FROM ctl c "
                    "SYNC JOIN mic s ON RANGE (c.a, c.b)")
PER_KEY = ("SELECT c.id, c.k, seg_rms(lowpass(s.ch1, 100.0) OVER (PARTITION BY c.k)) AS r "
           "FROM ctl c SYNC JOIN mic s ON RANGE (c.a, c.b)")


def write_data(root: Path, seconds: float, keys: int, files: int, seed: int = 5):
    """The recording and the control files; (samples, control frame)."""
    import pandas as pd

    from wavesql.udfs.wav import write_wav

    n = int(seconds * RATE) // RANGE * RANGE
    rng = np.random.default_rng(seed)
    t = np.arange(n) / RATE
    x = (0.4 * np.sin(2 * np.pi * 40.0 * t) + 0.3 * rng.standard_normal(n)).astype(np.float32)
    (root / "sig").mkdir(parents=True)
    write_wav(str(root / "sig" / "rec.wav"), x.reshape(-1, 1), RATE, "float32")
    starts = np.arange(0, n, RANGE, dtype=np.int64)
    ctl = pd.DataFrame({"k": np.repeat([f"k{i}" for i in range(keys)], len(starts)),
                        "a": np.tile(starts, keys)})
    ctl["b"] = ctl.a + RANGE
    ctl = ctl.sort_values(["a", "k"], kind="stable").reset_index(drop=True)
    ctl.insert(0, "id", np.arange(len(ctl), dtype=np.int64))
    ctl["ts"] = pd.to_datetime(ctl.a * 1_000_000 // RATE, unit="us").astype("datetime64[us]")
    # a last row far ahead (its own key): the progress passes every other row
    last = pd.DataFrame({"id": [len(ctl)], "k": ["end"], "a": [0], "b": [RANGE],
                         "ts": [pd.Timestamp(seconds + 3600, unit="s")]})
    last["ts"] = last.ts.astype("datetime64[us]")
    (root / "ctl").mkdir()
    edges = np.linspace(0, len(ctl), files + 1).astype(int)
    for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        part = ctl.iloc[lo:hi]
        if i == files - 1:
            part = pd.concat([part, last], ignore_index=True)
        part.to_parquet(root / "ctl" / f"c{i:03d}.parquet")
    return x.astype(np.float64), ctl


def oracle(x: np.ndarray, ctl, name: str) -> dict:
    """id -> the RMS of the range's samples (filtered: of the low-passed samples, from rest
    in each range; per key: the filter's state carried from range to range of a key --
    they tile the recording)."""
    from scipy import signal as sps

    sos = sps.butter(4, 100.0, btype="low", fs=RATE, output="sos")
    if name == "per row":
        return {int(i): float(np.sqrt(np.mean(x[a:b] ** 2)))
                for i, a, b in zip(ctl.id, ctl.a, ctl.b)}
    if name == "per row filtered":
        return {int(i): float(np.sqrt(np.mean(sps.sosfilt(sos, x[a:b]) ** 2)))
                for i, a, b in zip(ctl.id, ctl.a, ctl.b)}
    filtered = sps.sosfilt(sos, x)  # one key's contiguous ranges: the whole signal filtered
    return {int(i): float(np.sqrt(np.mean(filtered[a:b] ** 2)))
            for i, a, b in zip(ctl.id, ctl.a, ctl.b)}


def check(rows, want: dict) -> str:
    got = {int(r["id"]): r["r"] for r in rows if r["k"] != "end"}
    if set(got) != set(want):
        return f"**MISMATCH**: {len(set(got) ^ set(want))} ids differ"
    worst = max(abs(got[i] - w) / max(abs(w), 1e-12) for i, w in want.items())
    return "ok" if worst < 1e-5 else f"**MISMATCH**: relative error {worst:.2e}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=40.0, help="length of the recording")
    ap.add_argument("--keys", type=int, default=8)
    ap.add_argument("--files", type=int, default=2, help="control files (micro-batches)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=str(HERE / "results_per_key.md"))
    args = ap.parse_args()
    load0, wall0 = os.getloadavg(), time.perf_counter()
    started = dt.datetime.now(dt.timezone.utc)

    import pyspark

    import wavesql

    scratch = Path(tempfile.mkdtemp(prefix="wavesql-sync-key-"))
    x, ctl = write_data(scratch, args.seconds, args.keys, args.files)
    ws = wavesql.connect(master="local[2]", catalog=str(scratch / "catalog.db"))
    ws.sql(f"CREATE SIGNAL mic (ch1 FLOAT) RATE {RATE} HZ FROM '{scratch / 'sig'}' "
           "FORMAT wav")
    ws.sql(f"CREATE STREAM ctl (id BIGINT, k STRING, a BIGINT, b BIGINT, ts TIMESTAMP) "
           f"FROM '{scratch / 'ctl'}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND")
    queries = {"per row": PER_ROW, "per row filtered": PER_ROW_FILTERED, "per key": PER_KEY}
    times: dict[str, list[float]] = {k: [] for k in queries}
    last = {}
    for rep in range(args.reps + 1):  # the first: a warm-up of each
        order = list(queries) if rep % 2 == 0 else list(reversed(queries))  # (drift)
        for name in order:
            run = scratch / f"run-{rep}-{name.replace(' ', '_')}"
            t0 = time.perf_counter()
            q = ws.stream(queries[name], run / "out", run / "ckpt",
                          max_files_per_trigger=1)
            q.await_termination()
            elapsed = time.perf_counter() - t0
            if q.error is not None:
                raise SystemExit(f"{name}: {q.error}")
            if rep:
                times[name].append(elapsed)
            last[name] = run
            print(f"rep {rep} {name}: {elapsed:.2f} s{' (warm-up)' if not rep else ''}",
                  flush=True)
    checks = {}
    for name, run in last.items():
        rows = ws.spark.read.parquet(str(run / "out")).collect()
        checks[name] = check(rows, oracle(x, ctl, name))
        print(f"{name}: {len(rows)} rows, {checks[name]}", flush=True)
    load1 = os.getloadavg()
    ws.spark.stop()
    shutil.rmtree(scratch, ignore_errors=True)

    ratios = {other: [k / r for k, r in zip(times["per key"], times[other])]
              for other in ("per row", "per row filtered")}
    lines = [
        "# Per-key continuous SYNC vs per-row SYNC",
        "",
        f"Command: `{' '.join([Path(sys.executable).name] + sys.argv)}`",
        "",
        f"Run {started:%Y-%m-%d %H:%M} UTC on {machine.describe(load0, load1)}. **The machine "
        "was loaded** (other sessions' Spark tests on its 2 cores): absolute times are "
        "inflated and noisy; the ratio, of runs alternating in one Spark session, is what "
        "to read.",
        "",
        f"Data: {args.seconds:g} s of mono {RATE} Hz float32 audio ({len(x):,} samples); "
        f"{args.keys} keys, each tiling the recording with {RANGE}-sample ranges: "
        f"{len(ctl):,} control rows (+1 far ahead) in {args.files} files, one micro-batch "
        f"each; {len(ctl) * RANGE:,} samples synced per run. Spark {pyspark.__version__}, "
        "local[2]. Each run: an empty checkpoint, availableNow to the end, timed from "
        "`ws.stream` to its end; 1 warm-up of each, then "
        f"{args.reps} repetitions, the queries alternating; the whole run took "
        f"{time.perf_counter() - wall0:.0f} s (Spark's start included).",
        "",
        "| query | SQL | median s | range s | check |",
        "|---|---|---|---|---|",
    ]
    for name, sql in queries.items():
        ts = times[name]
        lines.append(f"| {name} | `{sql}` | {statistics.median(ts):.2f} | "
                     f"{min(ts):.2f}-{max(ts):.2f} | {checks[name]} |")
    lines.append("")
    for other, rs in ratios.items():
        lines.append(f"**per key ÷ {other}: median {statistics.median(rs):.2f}×, range "
                     f"{min(rs):.2f}-{max(rs):.2f}×** (per repetition: "
                     + ", ".join(f"{r:.2f}" for r in rs) + ")  ")
    lines += ["", "Per key ÷ per row filtered is the per-key path's own cost (holding rows "
              "until the progress passes them, the per-key order, the state carried across "
              "micro-batches), the filter's arithmetic on both sides; per key ÷ per row adds "
              "the filter. The per-key query delivers one row fewer: the row far ahead waits "
              "for a progress that passes it.", ""]
    text = "\n".join(lines)
    print("\n" + text)
    Path(args.out).write_text(text)
    print(f"written to {args.out}")
    return 0 if all(c == "ok" for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
