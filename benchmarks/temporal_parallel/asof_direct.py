"""Un-keyed ASOF JOIN of two Parquet streams: the direct pass (planner/physical/direct_asof.py)
vs the Spark SQL lowering in one partition (``SET wavesql.asof.direct = false``) vs pandas
``merge_asof`` on one thread; and the direct pass on local[1] vs local[2] (the scaling).

    .venv/bin/python benchmarks/temporal_parallel/asof_direct.py [--rows 1000000] [--runs 3]

Data (written once under --data): a left and a right stream of ``--rows`` rows each,
irregular times (0 - 3 ms apart: equal times included) with a 10-minute dropout, v / w
DOUBLE with 2% NULLs, q INT; each stream four Parquet files in time order (as a recorder
writes them), row groups of 65,536 rows -- what the direct pass needs (files out of time
order leave the query to the SQL). Query: ``SELECT count(*) AS n, sum(q.w) AS sw FROM s t
ASOF JOIN r q ON t.ts >= q.rts`` (backward, inclusive, inner).

Systems, each in a process of its own kept alive for the whole run (one Spark session per
system; one warm-up query each, not timed): ``direct local[2]``, ``sql local[2]``, ``direct
local[1]``, ``pandas`` (``read_parquet`` of both sides, the right side's rows sharing a time
collapsed by WaveSQL's rule -- the greatest wins, NULL lowest -- ``merge_asof``, count and
sum; reading included). Each timing is the query from its text to its collected result.
Runs interleaved round-robin (round r times every system before round r + 1); median of
``--runs`` with the range. Every answer is compared with pandas' (count exactly, sum to
1e-9 relative). The load average is recorded before and after each round. Appends its
table to ``asof_direct.md`` next to this file.
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
sys.path.insert(0, str(HERE))
from run import series  # noqa: E402 -- the series run.py writes (this file's neighbour)
QUERY = "SELECT count(*) AS n, sum(q.w) AS sw FROM s t ASOF JOIN r q ON t.ts >= q.rts"
SYSTEMS = ("direct local[2]", "sql local[2]", "direct local[1]", "pandas")


def write(folder: Path, rows: int, seed: int, names) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if (folder / "_done").exists():
        return
    folder.mkdir(parents=True, exist_ok=True)
    us, v, rng = series(rows, seed)  # run.py's series
    table = pa.table({
        names[0]: pa.array(us, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        names[1]: pa.array(v, pa.float64(), mask=rng.random(rows) < 0.02),
        "q": pa.array(rng.integers(-100, 100, rows), pa.int32())})
    for i, part in enumerate(np.array_split(np.arange(rows), 4)):
        pq.write_table(table.take(pa.array(part)), folder / f"part-{i}.parquet",
                       row_group_size=65_536)
    (folder / "_done").write_text("")


def serve(system: str, data: Path) -> None:
    """One system's process: a query per line read from stdin, a JSON line per answer."""
    if system == "pandas":
        run = lambda: _pandas(data)  # noqa: E731
    else:
        from wavesql.spark import start_spark

        import wavesql

        mode, master = system.split()
        spark = start_spark(master, {"spark.ui.enabled": "false",
                                     "spark.sql.session.timeZone": "UTC",
                                     "spark.driver.memory": "3g"})
        ws = wavesql.connect(spark=spark, catalog=data / f"catalog-{time.time_ns()}.db")
        ws.sql(f"CREATE STREAM s (ts TIMESTAMP, v DOUBLE, q INT) FROM '{data / 's'}' "
               "FORMAT parquet EVENT TIME ts")
        ws.sql(f"CREATE STREAM r (rts TIMESTAMP, w DOUBLE, q INT) FROM '{data / 'r'}' "
               "FORMAT parquet EVENT TIME rts")
        spark.conf.set("wavesql.asof.direct", "true" if mode == "direct" else "false")

        def run():
            start = time.perf_counter()
            df = ws.sql(QUERY)
            plan = df._jdf.queryExecution().executedPlan().toString()
            row = df.collect()[0]
            seconds = time.perf_counter() - start
            assert ("asof_scan" in plan) == (mode == "direct"), plan
            return {"seconds": seconds, "result": [int(row[0]), float(row[1])]}
    print("ready", flush=True)
    for _ in sys.stdin:
        print(json.dumps(run()), flush=True)


def _pandas(data: Path) -> dict:
    import pandas as pd

    start = time.perf_counter()
    s = pd.read_parquet(data / "s")
    r = pd.read_parquet(data / "r")
    # the right rows sharing a time: the greatest (by w then q, NULL lowest) wins
    r = r.assign(_hw=r["w"].notna()).sort_values(["rts", "_hw", "w", "q"], kind="stable")
    r = r.drop_duplicates("rts", keep="last")
    m = pd.merge_asof(s.sort_values("ts", kind="stable"), r[["rts", "w"]], left_on="ts",
                      right_on="rts")
    m = m[m["rts"].notna()]
    return {"seconds": time.perf_counter() - start,
            "result": [len(m), float(m["w"].sum())]}


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", type=Path, default=Path("/tmp/wavesql_bench_asof_direct"))
    ap.add_argument("--serve", metavar="SYSTEM")
    args = ap.parse_args()
    data = args.data / str(args.rows)
    if args.serve:
        serve(args.serve, data)
        return
    write(data / "s", args.rows, 1, ("ts", "v"))
    write(data / "r", args.rows, 2, ("rts", "w"))
    procs = {}
    for system in SYSTEMS:
        p = subprocess.Popen([sys.executable, __file__, "--serve", system, "--rows",
                              str(args.rows), "--data", str(args.data)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        while p.stdout.readline().strip() != "ready":
            pass
        procs[system] = p

    def ask(system):
        p = procs[system]
        p.stdin.write("run\n")
        p.stdin.flush()
        while not (line := p.stdout.readline()).startswith("{"):  # (a stray log line)
            if not line:
                raise RuntimeError(f"{system} ended")
        return json.loads(line)

    try:
        for system in SYSTEMS:  # warm-up
            ask(system)
        times = {s: [] for s in SYSTEMS}
        results, loads = {}, [_load()]
        for rnd in range(args.runs):
            for system in SYSTEMS:
                got = ask(system)
                times[system].append(got["seconds"])
                results[system] = got["result"]
                print(rnd, system, f"{got['seconds']:.2f}s", got["result"], f"load {_load()}",
                      flush=True)
            loads.append(_load())
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait(timeout=120)
    want = results["pandas"]
    for system, got in results.items():
        assert got[0] == want[0] and abs(got[1] - want[1]) <= 1e-9 * abs(want[1]), \
            (system, got, want)
    med = {s: statistics.median(v) for s, v in times.items()}

    def cell(s):
        return f"{med[s]:.2f} s [{min(times[s]):.2f} - {max(times[s]):.2f}]"

    lines = [f"## {args.rows:,} left rows, {args.rows:,} right rows "
             f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"Median of {args.runs} interleaved runs [min - max]; load average (1, 5, 15 "
             f"min) before each round and after the last: {' | '.join(loads)}.", "",
             "| system | time | vs direct local[2] |", "|---|---|---|"]
    lines += [f"| {s} | {cell(s)} | {med[s] / med['direct local[2]']:.2f}x |" for s in SYSTEMS]
    lines += ["", f"- SQL (one partition) / direct, local[2]: "
              f"**{med['sql local[2]'] / med['direct local[2]']:.2f}x**",
              f"- pandas (one thread) / direct local[2]: "
              f"**{med['pandas'] / med['direct local[2]']:.2f}x**",
              f"- direct local[1] / local[2] (the second core): "
              f"**{med['direct local[1]'] / med['direct local[2]']:.2f}x**",
              f"- answers (count, sum): {want}, equal in every system", ""]
    out = HERE / "asof_direct.md"
    head = "" if out.exists() else (
        "# Un-keyed ASOF JOIN of Parquet streams: direct pass vs SQL vs pandas\n\n"
        "`benchmarks/temporal_parallel/asof_direct.py` (its docstring: data, systems, "
        "method). Times are wall-clock seconds per query, warm processes.\n\n")
    with open(out, "a") as f:
        f.write(head + "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
