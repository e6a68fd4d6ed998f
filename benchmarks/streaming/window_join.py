"""Continuous per-instant join of windowed streams: micro-batch time vs keys of state, on
the state store vs the re-evaluating runner, interleaved in one run.

    python benchmarks/streaming/window_join.py [--keys 1000,10000,100000]
        [--reeval-keys 1000] [--per-instant-keys 1000,10000] [--updates 5] [--last 3]
        [--reps 2] [--rows 200]

Two streams, ``a`` and ``b`` (``k STRING, v DOUBLE, ts TIMESTAMP``, WATERMARK 2 SECONDS).
The first file of each holds one row per key (``--keys`` keys, at one instant): that is the
state every later batch runs with; each of the ``--updates`` later files holds ``--rows``
rows over 10 s of event time on random keys. One file of each stream per
micro-batch. The query keeps each key's last row of each stream and emits the pairs each
instant gains::

    ISTREAM (SELECT x.k, x.v, y.v AS w FROM a [PARTITION BY k ROWS 1] x,
             b [PARTITION BY k ROWS 1] y WHERE x.k = y.k)

so a micro-batch's new rows reach about ``--rows`` keys of ``--keys``. Run by WaveSQL on
Spark's state store -- ISTREAM from the pairs entering and leaving (the default) and, for
``--per-instant-keys``, evaluated per instant over the keys handed back
(``WAVESQL_WINDOW_JOIN_PAIRS=0``) -- and by its re-evaluating runner
(``WAVESQL_STATEFUL=0``) for ``--reeval-keys`` (it evaluates every instant of its buffer
each batch: keys x keys), each key count and runner alternating (``--reps`` rounds).
A micro-batch's time is Spark's ``triggerExecution``; the figure is the median [min-max]
of the last ``--last`` batches with rows over all rounds, and the batch of each run where
every key changes (the third: it makes the first file's instant final). Prepended to
``results.md`` (the newest on top).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402
from interval import run_wavesql  # noqa: E402
from run import Durations, connect  # noqa: E402

HERE = Path(__file__).resolve().parent
SECOND = 1_000_000
#: (label, WAVESQL_STATEFUL, WAVESQL_WINDOW_JOIN_PAIRS) of each runner compared
RUNNERS = (("state store", "1", "1"), ("state store, per instant", "1", "0"),
           ("re-evaluating", "0", "1"))
PAIRS = "WAVESQL_WINDOW_JOIN_PAIRS"
#: the index of the batch with rows where every key changes (see main)
EVERY_KEY = 2
QUERY = ("ISTREAM (SELECT x.k, x.v, y.v AS w FROM a [PARTITION BY k ROWS 1] x, "
         "b [PARTITION BY k ROWS 1] y WHERE x.k = y.k)")


def write_streams(folder: Path, keys: int, updates: int, rows: int) -> dict:
    """Both streams' files: one row per key at one instant, then ``updates`` files of
    ``rows`` rows on random keys, each 10 s of event time."""
    folders = {}
    for seed, name in enumerate(("a", "b")):
        out = folder / name
        folders[name] = out
        if out.exists():
            continue
        out.mkdir(parents=True)
        rng = np.random.default_rng(seed)
        base = int(dt.datetime(2026, 1, 1).timestamp()) * SECOND
        # the state: one row per key, all at one instant (the batch plan pairs each row
        # with the instants in its window: rows spread over many instants would cost
        # keys x instants once, while the state is built)
        frames = [pd.DataFrame({"k": np.arange(keys).astype(str), "v": rng.random(keys),
                                "ts": np.full(keys, base)})]
        start = len(frames)
        for i in range(start, start + updates):
            frames.append(pd.DataFrame({
                "k": rng.integers(0, keys, rows).astype(str), "v": rng.random(rows),
                "ts": base + i * 10 * SECOND + np.sort(rng.integers(0, 10 * SECOND,
                                                                     rows))}))
        for i, f in enumerate(frames):
            f = f.assign(ts=pd.to_datetime(f.ts, unit="us").astype("datetime64[us]"))
            path = out / f"part-{i:05d}.parquet"
            f.to_parquet(path)
            stamp = time.time() - 3600 + i
            os.utime(path, (stamp, stamp))
    return folders


def _median(cell: dict) -> float:
    """The median time of the batches where every key changes (NaN: none)."""
    return statistics.median(cell["every"]) if cell.get("every") else float("nan")


def _every(cell: dict) -> str:
    t = cell.get("every") or []
    return f"{statistics.median(t):.3f} s" + (f" [{min(t):.3f}-{max(t):.3f}]"
                                              if len(t) > 1 else "") if t else "-"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="1000,100000")
    parser.add_argument("--reeval-keys", default="1000")
    parser.add_argument("--per-instant-keys", default="1000,10000")
    parser.add_argument("--updates", type=int, default=5)
    parser.add_argument("--last", type=int, default=3)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rows", type=int, default=200,
                        help="new rows per stream per micro-batch")
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=str(HERE / "results.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.work or tempfile.mkdtemp(prefix="wavesql-window-join-bench-"))
    keys = [int(k) for k in args.keys.split(",")]
    reeval = {int(k) for k in args.reeval_keys.split(",") if k}
    per_instant = {int(k) for k in args.per_instant_keys.split(",") if k}
    folders = {n: write_streams(work / f"keys_{n}", n, args.updates, args.rows)
               for n in keys}
    load0 = os.getloadavg()
    ws = connect(work)
    durations = Durations(ws.spark)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    got: dict = {}
    loads = [load0[0]]
    for rep in range(args.reps):
        for n in keys:
            for runner, flag, pairs in RUNNERS:
                if (flag == "0" and n not in reeval) or (pairs == "0" and
                                                         n not in per_instant):
                    continue
                os.environ["WAVESQL_STATEFUL"] = flag
                os.environ[PAIRS] = pairs
                try:
                    r = run_wavesql(ws, durations, folders[n], work, f"{n}_{flag}{pairs}",
                                    QUERY)
                finally:
                    os.environ.pop("WAVESQL_STATEFUL", None)
                    os.environ.pop(PAIRS, None)
                loads.append(os.getloadavg()[0])
                mine = got.setdefault((n, runner), {"times": [], "runs": []})
                mine["times"] += [d for _, d, _ in r["batches"][-args.last:]]
                # the third batch with rows makes the first file's instant final: every
                # key's first rows enter the join (batch 0 has no progress, batch 1's is
                # below the first file's instant)
                if len(r["batches"]) > EVERY_KEY:
                    mine.setdefault("every", []).append(r["batches"][EVERY_KEY][1])
                mine["runs"].append(r)
                print(rep, n, runner, r["engine"], [round(d, 3) for _, d, _ in
                                                    r["batches"]], r["state"][-1:],
                      r["rows"], flush=True)
    lines = [f"# Per-instant join of windowed streams: micro-batch time vs keys of state "
             f"({started})", "", f"`{QUERY}`", "",
             f"The first file of each stream: one row per key at one instant (the state every "
             f"later batch runs with); then {args.updates} files of {args.rows:,} rows each on "
             f"random keys; one file of each stream per micro-batch. Median [min-max] of the last "
             f"{args.last} batches with rows of each run, {args.reps} runs per cell, the cells "
             "alternating (Spark's triggerExecution).", "",
             "| keys of state | runner | micro-batch | the batch where every key changes | "
             "state rows (last batch) | rows out (per run) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for n in keys:
        for runner, _, _ in RUNNERS:
            cell = got.get((n, runner))
            if cell is None:
                continue
            t = cell["times"]
            run = cell["runs"][-1]
            lines.append(f"| {n:,} | {runner} ({run['engine']}) | {statistics.median(t):.3f} s "
                         f"[{min(t):.3f}-{max(t):.3f}] | {_every(cell)} | "
                         f"{run['state'][-1]:,} | {run['rows']:,} |")
    for n in keys:
        a = got.get((n, "state store"))
        for runner, _, _ in RUNNERS[1:]:
            b = got.get((n, runner))
            if a and b:
                lines.append(
                    f"\nAt {n:,} keys {runner}: median "
                    f"{statistics.median(b['times']) / statistics.median(a['times']):.1f}x, "
                    f"the batch where every key changes {_median(b) / _median(a):.1f}x "
                    "the pairs'.")
    small, large = got.get((keys[0], "state store")), got.get((keys[-1], "state store"))
    if small and large and len(keys) > 1:
        lines.append(f"\nState store, {keys[-1]:,} vs {keys[0]:,} keys: "
                     f"{statistics.median(large['times']) / statistics.median(small['times']):.2f}x "
                     "the micro-batch time.")
    lines += ["", f"Machine: {machine.describe(load0, os.getloadavg())} (load average "
              f"{min(loads):.1f}-{max(loads):.1f} over the run); Spark {ws.spark.version}, "
              "local[2], 2 shuffle partitions (4 buckets).", ""]
    text = "\n".join(lines)
    print(text)
    old = Path(args.out).read_text() if Path(args.out).exists() else ""
    Path(args.out).write_text(text + "\n\n" + old)  # the newest on top
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
