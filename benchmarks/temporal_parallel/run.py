"""Un-keyed RESAMPLE and ASOF JOIN over CSV streams: the parallel chunked pass
(planner/physical/chunked_temporal.py) vs the Spark SQL lowering in one partition
(``SET wavesql.temporal.parallel = false``) vs pandas, on this machine (local[2]).

    .venv/bin/python benchmarks/temporal_parallel/run.py [--rows 2000000] [--repeats 3]

Every measurement runs in a fresh process, the modes interleaved round-robin; each times
the query from its text to its collected result (planning jobs included, Spark start-up
and the CSV written beforehand excluded; pandas includes reading the CSV). Writes
results.md next to this file.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
T0 = 1_700_000_000_000_000

QUERIES = {
    "resample": "SELECT count(*) AS n, sum(v) AS sv, sum(q) AS sq FROM RESAMPLE(s, ts, "
                "INTERVAL 2 MILLISECONDS, 'linear') r",
    "asof": "SELECT count(*) AS n, sum(q.w) AS sw FROM s t ASOF JOIN r q ON t.ts >= q.rts",
}


def write(folder: Path, rows: int, seed: int, names) -> None:
    import numpy as np
    import pandas as pd

    if (folder / "_done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    steps = rng.choice([0, 1000, 2000, 3000], rows, p=[0.1, 0.5, 0.3, 0.1])
    steps[rows // 2] = 600_000_000  # a 10-minute dropout
    us = T0 + np.cumsum(steps)
    v = rng.normal(0, 5, rows)
    v[rng.random(rows) < 0.02] = np.nan
    frame = pd.DataFrame({names[0]: pd.to_datetime(us, unit="us", utc=True)
                          .strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                          names[1]: v, "q": rng.integers(-100, 100, rows)})
    frame = frame.sample(frac=1.0, random_state=seed)  # files are not in time order
    for i, part in enumerate(np.array_split(frame, 4)):
        part.to_csv(folder / f"part-{i}.csv", index=False)
    (folder / "_done").write_text("")


def one(query: str, mode: str, data: Path) -> dict:
    if mode == "pandas":
        return _pandas(query, data)
    from wavesql.spark import start_spark

    import wavesql

    spark = start_spark("local[2]", {"spark.ui.enabled": "false",
                                     "spark.sql.session.timeZone": "UTC",
                                     "spark.driver.memory": "4g"})
    ws = wavesql.connect(spark=spark, catalog=data / f"catalog-{mode}-{time.time_ns()}.db")
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, v DOUBLE, q INT) FROM '{data / 's'}' FORMAT csv "
           "EVENT TIME ts")
    ws.sql(f"CREATE STREAM r (rts TIMESTAMP, w DOUBLE, q INT) FROM '{data / 'r'}' "
           "FORMAT csv EVENT TIME rts")
    if mode == "sql":
        spark.conf.set("wavesql.temporal.parallel", "false")
    start = time.perf_counter()
    df = ws.sql(QUERIES[query])
    plan = df._jdf.queryExecution().executedPlan().toString()
    row = df.collect()[0]
    elapsed = time.perf_counter() - start
    marker = "resample_chunks" if query == "resample" else "asof_chunks"
    assert (marker in plan) == (mode == "pass"), plan
    spark.stop()
    return {"seconds": elapsed, "result": [float(x) if x is not None else None for x in row]}


def _pandas(query: str, data: Path) -> dict:
    import numpy as np
    import pandas as pd

    start = time.perf_counter()
    s = pd.concat(pd.read_csv(p) for p in sorted((data / "s").glob("*.csv")))
    s["t"] = pd.to_datetime(s["ts"], utc=True).astype("int64") // 1000
    if query == "resample":
        # duplicate times: the greatest row (NULL lowest) wins, as WaveSQL's rule
        s = s.assign(_hv=s["v"].notna()).sort_values(["t", "_hv", "v", "q"], kind="stable")
        s = s.drop_duplicates("t", keep="last")
        t = s["t"].to_numpy()
        P = 2000
        grid = np.arange(-(-t[0] // P), t[-1] // P + 1) * P
        out = []
        for c in ("v", "q"):
            have = s[c].notna().to_numpy()
            tc, vc = t[have], s[c].to_numpy(dtype=float)[have]
            y = np.interp(grid, tc, vc)
            out.append(np.where((grid >= tc[0]) & (grid <= tc[-1]), y, np.nan))
        result = [len(grid), float(np.nansum(out[0])), float(np.nansum(out[1]))]
    else:
        r = pd.concat(pd.read_csv(p) for p in sorted((data / "r").glob("*.csv")))
        r["rt"] = pd.to_datetime(r["rts"], utc=True).astype("int64") // 1000
        r = r.assign(_hw=r["w"].notna()).sort_values(["rt", "_hw", "w", "q"], kind="stable")
        r = r.drop_duplicates("rt", keep="last")
        m = pd.merge_asof(s.sort_values("t"), r[["rt", "w"]], left_on="t", right_on="rt")
        m = m[m["rt"].notna()]
        result = [len(m), float(m["w"].sum())]
    return {"seconds": time.perf_counter() - start, "result": result}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path("/tmp/wavesql_bench_temporal"))
    ap.add_argument("--one", nargs=2, metavar=("QUERY", "MODE"))
    args = ap.parse_args()
    data = args.data / str(args.rows)
    if args.one:
        print(json.dumps(one(args.one[0], args.one[1], data)))
        return
    write(data / "s", args.rows, 1, ("ts", "v"))
    write(data / "r", args.rows, 2, ("rts", "w"))
    modes = ("pass", "sql", "pandas")
    times = {(q, m): [] for q in QUERIES for m in modes}
    results = {}
    for rep in range(args.repeats):
        for q in QUERIES:
            for m in modes:
                out = subprocess.run([sys.executable, __file__, "--one", q, m, "--rows",
                                      str(args.rows), "--data", str(args.data)],
                                     capture_output=True, text=True, check=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                times[(q, m)].append(got["seconds"])
                results[(q, m)] = got["result"]
                print(rep, q, m, f"{got['seconds']:.2f}s", got["result"], flush=True)
    lines = [f"# Un-keyed RESAMPLE and ASOF JOIN in parallel chunks ({args.rows:,} CSV rows "
             "per stream)", "",
             "`benchmarks/temporal_parallel/run.py`: local[2] on this 2-core machine, each "
             f"run in a fresh process, modes interleaved; median of {args.repeats} "
             "runs (min - max). *pass*: planner/physical/chunked_temporal.py; *sql*: "
             "`SET wavesql.temporal.parallel = false` (the window in one partition); "
             "*pandas*: one thread, reading the CSV included.", "",
             "| query | pass | sql | pandas | sql / pass | pandas / pass |",
             "|---|---|---|---|---|---|"]
    for q, text in QUERIES.items():
        med = {m: statistics.median(times[(q, m)]) for m in modes}
        cells = [f"{med[m]:.2f} s ({min(times[(q, m)]):.2f} - {max(times[(q, m)]):.2f})"
                 for m in modes]
        lines.append(f"| {q} | " + " | ".join(cells)
                     + f" | {med['sql'] / med['pass']:.2f}x | {med['pandas'] / med['pass']:.2f}x |")
    lines += ["", "Queries:", ""] + [f"- {q}: `{text}`" for q, text in QUERIES.items()]
    lines += ["", "Results (the last run of each mode; sums differ only by rounding):", ""]
    lines += [f"- {q} {m}: {results[(q, m)]}" for q in QUERIES for m in modes]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
