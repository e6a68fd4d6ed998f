"""Un-keyed RESAMPLE and ASOF JOIN over CSV and Parquet streams: the parallel chunked pass
(planner/physical/chunked_temporal.py) vs the Spark SQL lowering in one partition
(``SET wavesql.temporal.parallel = false``) vs pandas, on this machine (local[2]).

    .venv/bin/python benchmarks/temporal_parallel/run.py [--rows 300000 2000000]
        [--formats csv parquet] [--cases 300000:csv 1000000:csv ...] [--repeats 3]

Every measurement runs in a fresh process, the modes interleaved round-robin; each times
the query from its text to its collected result (planning jobs included, Spark start-up
and the files written beforehand excluded; pandas includes reading the files). The pass's
planning (its estimate and summary jobs) is also timed on its own. The load average is
recorded before and after. Writes results.md next to this file.
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


def series(rows: int, seed: int):
    """``(microseconds, values, generator)`` of a test series: steps of 0-3 ms (ties
    included) with a 10-minute dropout half way, normal values."""
    import numpy as np

    rng = np.random.default_rng(seed)
    steps = rng.choice([0, 1000, 2000, 3000], rows, p=[0.1, 0.5, 0.3, 0.1])
    steps[rows // 2] = 600_000_000  # a 10-minute dropout
    return T0 + np.cumsum(steps), rng.normal(0, 5, rows), rng


def write(folder: Path, rows: int, seed: int, names, fmt: str = "csv") -> None:
    import numpy as np
    import pandas as pd

    if (folder / "_done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    us, v, rng = series(rows, seed)
    v[rng.random(rows) < 0.02] = np.nan
    stamps = pd.to_datetime(us, unit="us", utc=True)
    frame = pd.DataFrame({names[0]: stamps.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if fmt == "csv"
                          else stamps,
                          names[1]: v, "q": rng.integers(-100, 100, rows).astype("int32")})
    frame = frame.sample(frac=1.0, random_state=seed)  # files are not in time order
    for i, part in enumerate(np.array_split(frame, 4)):
        if fmt == "csv":
            part.to_csv(folder / f"part-{i}.csv", index=False)
        else:  # NaN -> NULL, as the CSV's empty field
            part.to_parquet(folder / f"part-{i}.parquet", index=False,
                            coerce_timestamps="us", allow_truncated_timestamps=True)
    (folder / "_done").write_text("")


def one(query: str, mode: str, data: Path, fmt: str) -> dict:
    if mode == "pandas":
        return _pandas(query, data, fmt)
    from wavesql.spark import start_spark

    import wavesql

    spark = start_spark("local[2]", {"spark.ui.enabled": "false",
                                     "spark.sql.session.timeZone": "UTC",
                                     "spark.driver.memory": "4g"})
    ws = wavesql.connect(spark=spark, catalog=data / f"catalog-{mode}-{time.time_ns()}.db")
    ws.sql(f"CREATE STREAM s (ts TIMESTAMP, v DOUBLE, q INT) FROM '{data / 's'}' "
           f"FORMAT {fmt} EVENT TIME ts")
    ws.sql(f"CREATE STREAM r (rts TIMESTAMP, w DOUBLE, q INT) FROM '{data / 'r'}' "
           f"FORMAT {fmt} EVENT TIME rts")
    spark.conf.set("wavesql.temporal.parallel", "true" if mode == "pass" else "false")
    spark.conf.set("wavesql.asof.direct", "false")  # the chunked pass vs the SQL, here
    start = time.perf_counter()
    df = ws.sql(QUERIES[query])
    plan = df._jdf.queryExecution().executedPlan().toString()
    planned = time.perf_counter() - start
    row = df.collect()[0]
    elapsed = time.perf_counter() - start
    marker = "resample_chunks" if query == "resample" else "asof_chunks"
    assert (marker in plan) == (mode == "pass"), plan
    spark.stop()
    return {"seconds": elapsed, "planned": planned,
            "result": [float(x) if x is not None else None for x in row]}


def _read(folder: Path, fmt: str, time_col: str):
    import pandas as pd

    if fmt == "csv":
        frame = pd.concat(pd.read_csv(p) for p in sorted(folder.glob("*.csv")))
        frame["t"] = pd.to_datetime(frame[time_col], utc=True).astype("int64") // 1000
    else:
        frame = pd.concat(pd.read_parquet(p) for p in sorted(folder.glob("*.parquet")))
        frame["t"] = frame[time_col].astype("datetime64[us, UTC]").astype("int64")
    return frame


def _pandas(query: str, data: Path, fmt: str) -> dict:
    import numpy as np
    import pandas as pd

    start = time.perf_counter()
    s = _read(data / "s", fmt, "ts")
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
        r = _read(data / "r", fmt, "rts").rename(columns={"t": "rt"})
        r = r.assign(_hw=r["w"].notna()).sort_values(["rt", "_hw", "w", "q"], kind="stable")
        r = r.drop_duplicates("rt", keep="last")
        m = pd.merge_asof(s.sort_values("t"), r[["rt", "w"]], left_on="t", right_on="rt")
        m = m[m["rt"].notna()]
        result = [len(m), float(m["w"].sum())]
    return {"seconds": time.perf_counter() - start, "result": result}


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[300_000, 2_000_000])
    ap.add_argument("--formats", nargs="+", default=["csv", "parquet"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path("/tmp/wavesql_bench_temporal"))
    ap.add_argument("--cases", nargs="+", metavar="ROWS:FORMAT",
                    help="instead of every --rows with every --formats")
    ap.add_argument("--one", nargs=4, metavar=("QUERY", "MODE", "ROWS", "FORMAT"))
    args = ap.parse_args()
    if args.one:
        q, m, rows, fmt = args.one
        print(json.dumps(one(q, m, args.data / f"{fmt}-{rows}", fmt)))
        return
    cases = [(rows, fmt) for rows in args.rows for fmt in args.formats]
    if args.cases:
        cases = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.cases]
    for rows, fmt in cases:
        data = args.data / f"{fmt}-{rows}"
        write(data / "s", rows, 1, ("ts", "v"), fmt)
        write(data / "r", rows, 2, ("rts", "w"), fmt)
    modes = ("pass", "sql", "pandas")
    keys = [(rows, fmt, q) for rows, fmt in cases for q in QUERIES]
    times = {(k, m): [] for k in keys for m in modes}
    planned = {k: [] for k in keys}
    results = {}
    load_before = _load()
    for rep in range(args.repeats):
        for k in keys:
            rows, fmt, q = k
            for m in modes:
                out = subprocess.run([sys.executable, __file__, "--one", q, m, str(rows), fmt,
                                      "--data", str(args.data)],
                                     capture_output=True, text=True, check=True)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                times[(k, m)].append(got["seconds"])
                if m == "pass":
                    planned[k].append(got["planned"])
                results[(k, m)] = got["result"]
                print(rep, rows, fmt, q, m, f"{got['seconds']:.2f}s", got["result"],
                      f"load {_load()}", flush=True)
    load_after = _load()
    lines = ["# Un-keyed RESAMPLE and ASOF JOIN in parallel chunks", "",
             "`benchmarks/temporal_parallel/run.py`: local[2] on this 2-core machine, each "
             f"run in a fresh process, modes interleaved; median of {args.repeats} "
             "runs (min - max). *pass*: planner/physical/chunked_temporal.py "
             "(`SET wavesql.temporal.parallel = true`); *plan*: of which its planning (the "
             "estimate and summary jobs); *sql*: `SET wavesql.temporal.parallel = false` "
             "(the window in one partition); *pandas*: one thread, reading the files "
             f"included. Load average (1, 5, 15 min) before: {load_before}; after: "
             f"{load_after}.", "",
             "| rows per stream | input | query | pass | plan | sql | pandas | sql / pass "
             "| pandas / pass |",
             "|---|---|---|---|---|---|---|---|---|"]

    def cell(values):
        return f"{statistics.median(values):.2f} s ({min(values):.2f} - {max(values):.2f})"

    for k in keys:
        rows, fmt, q = k
        med = {m: statistics.median(times[(k, m)]) for m in modes}
        lines.append(f"| {rows:,} | {fmt} | {q} | {cell(times[(k, 'pass')])} | "
                     f"{statistics.median(planned[k]):.2f} s | {cell(times[(k, 'sql')])} | "
                     f"{cell(times[(k, 'pandas')])} | {med['sql'] / med['pass']:.2f}x | "
                     f"{med['pandas'] / med['pass']:.2f}x |")
    lines += ["", "Queries:", ""] + [f"- {q}: `{text}`" for q, text in QUERIES.items()]
    lines += ["", "Results (the last run of each mode; sums differ only by rounding):", ""]
    lines += [f"- {rows:,} {fmt} {q} {m}: {results[((rows, fmt, q), m)]}"
              for rows, fmt, q in keys for m in modes]
    (HERE / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
