"""The pair-events kernel of a keyed window join alone (numpy, no Spark): time per call vs
rows per key, for a long ``[RANGE]`` window, inner and LEFT (NULL-padded) joins.

    python benchmarks/streaming/window_join_pairs_kernel.py [--rows 500,2000] [--reps 5]

One key, ``--rows`` rows per stream spread evenly over one hour of event time, both
streams under ``[RANGE 1 HOUR]`` (every row overlaps about half of the other stream's).
A call makes 10 s of instants final in the middle of the history (``[start, P)``: a
micro-batch of a running query), so few pairs enter or leave in it while |a| x |b| pairs
are held. The figure is the median [min-max] of ``--reps`` calls of
:func:`streaming.stateful.window_join.step` with the bucket's state, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SECOND = 1_000_000
HOUR = 3600 * SECOND


def _rows(n: int, right: bool, first_id: int, rng) -> pd.DataFrame:
    ts = np.sort(rng.choice(HOUR, n, replace=False)).astype(np.int64)
    cols = {"ts": ts, "right": np.full(n, right), "sk": np.full(n, 11, np.int64),
            "sh": np.full(n, 17, np.int64), "nk": np.zeros(n, bool)}
    for side in ("l", "r"):
        mine = (side == "r") == right
        cols[f"{side}n0"] = ~np.full(n, mine)
        cols[f"{side}0"] = np.full(n, "k" if mine else "", object)
        cols[f"{side}n1"] = ~np.full(n, mine)
        cols[f"{side}1"] = (np.arange(first_id, first_id + n) if mine
                            else np.zeros(n, np.int64))
    cols["pk"], cols["ph"] = np.zeros(n, np.int64), np.zeros(n, np.int64)
    return pd.DataFrame(cols)


def measure(n: int, preserve: tuple[bool, bool], reps: int) -> list[float]:
    from streaming.stateful import window_join as kernel

    rng = np.random.default_rng(n)
    extra = {"keys": ((0, 0),)} if "keys" in kernel.WindowJoinOperator.__dataclass_fields__ \
        else {}
    window = kernel.JoinWindow("RANGE", HOUR)
    op = kernel.WindowJoinOperator(("string", "bigint"), ("string", "bigint"), window, window,
                                   keyed=True, pairs=True, preserve=preserve, **extra)
    rows = pd.concat([_rows(n, False, 0, rng), _rows(n, True, 10 * n, rng)],
                     ignore_index=True)
    seen = 2 * HOUR // 3  # the bucket last saw this progress; the call makes 10 s final
    first = kernel.step(op, None, rows, None, None, None)
    state = kernel.step(op, first.state, rows.iloc[:0], seen, seen, seen).state
    times, events = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        got = kernel.step(op, state, rows.iloc[:0], seen + 10 * SECOND, seen + 10 * SECOND,
                          seen + 10 * SECOND)
        times.append((time.perf_counter() - t0) * 1000)
        events = len(got.context)
    print(f"  {n} rows per side, {'LEFT' if preserve[0] else 'inner'}: {events} events",
          file=sys.stderr)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="500,2000")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    for n in (int(x) for x in args.rows.split(",")):
        for preserve in ((False, False), (True, False)):
            t = measure(n, preserve, args.reps)
            print(f"{n:>6} rows/side {'LEFT ' if preserve[0] else 'inner'}: "
                  f"{statistics.median(t):8.1f} ms [{min(t):.1f}-{max(t):.1f}]")


if __name__ == "__main__":
    main()
