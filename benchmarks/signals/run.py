"""WaveSQL signal benchmark: XStream Table I (PASSCHAIN, STATFILTER, SILENCEFILTER) vs peers.

    python benchmarks/signals/run.py [--copies 1000] [--runs 3] [--only statfilter,...]
                                     [--skip-scaling]

Every system answers the same query over the same samples (data.py), each from its natural
layout; each timing is in-process, from issuing the query to having the result on the
driver, median of ``--runs`` runs after one warm-up. Every answer is checked against the
numpy reference computed when the data was generated; a mismatch is printed loudly and the
row is marked. The table goes to stdout and to ``results.md`` beside this file.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

import numpy as np

import data
from data import RATE, RECORDING, W

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
QUERIES = ("statfilter", "passchain", "silencefilter")
NAMES = {"statfilter": "STATFILTER", "passchain": "PASSCHAIN", "silencefilter": "SILENCEFILTER"}


def lit(x: float) -> str:
    # Scientific notation round-trips the double exactly and is a DOUBLE literal in Spark,
    # DuckDB and WaveSQL alike (Spark would read 0.0123... as a DECIMAL).
    return f"{x:.17e}"


def nest(inner: str, cols: str, depth: int = 10) -> str:
    """``depth`` pass-through SELECTs around ``inner`` (PASSCHAIN's chain of operators)."""
    for i in range(1, depth + 1):
        inner = f"(SELECT {cols} FROM {inner} p{i})"
    return inner


def passchain_wsql() -> str:
    """The SELECT of examples/passchain.wsql, so the benchmark runs the example's query."""
    text = (ROOT / "examples" / "passchain.wsql").read_text()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    return next(s.strip() for s in body.split(";") if s.strip().upper().startswith("SELECT"))


# ---------------------------------------------------------------------------- the queries
def wavesql_queries(meta: dict, sig: str = "counting") -> dict:
    a, b, g = lit(meta["alpha"]), lit(meta["beta"]), lit(meta["gamma"])
    return {
        "statfilter": f"SELECT start_time(voice) AS t, seg_std(voice) AS sd FROM {sig} "
                      f"[SAMPLES {W}] WHERE seg_std(voice) > {a} AND seg_avg(voice) < {b}",
        "passchain": passchain_wsql().replace("FROM counting", f"FROM {sig}"),
        # The voiced audio leaves the scan as segments; Spark counts its samples.
        "silencefilter": f"SELECT count(*) AS segs, sum(size(voice.samples)) AS samples FROM "
                         f"(SELECT voice FROM {sig} [SAMPLES {W}] WHERE seg_std(voice) > {g}) q",
    }


def sql_queries(meta: dict, dialect: str) -> dict:
    """Per-sample SQL over ``s(t, v)`` for Spark SQL (``spark``) and DuckDB (``duckdb``)."""
    a, b, g = lit(meta["alpha"]), lit(meta["beta"]), lit(meta["gamma"])
    div = "t DIV 4096" if dialect == "spark" else "t // 4096"
    q = {
        "statfilter": f"SELECT {div} AS w, stddev_samp(v) AS sd, avg(v) AS m FROM s "
                      f"GROUP BY 1 HAVING stddev_samp(v) > {a} AND avg(v) < {b}",
        # sum(v) makes every sample be read: DuckDB answers a bare count(v) from the
        # Parquet metadata (no nulls, row counts) in a millisecond.
        "passchain": f"SELECT sum(v) AS total, count(v) AS n FROM {nest('s', 't, v')} q",
        # the voiced samples counted per window, no join back to the samples: the same count
        # as joining the voiced window ids to the samples (what the runs up to F did), in the
        # form a SQL user would write for a count (issue 23: the join was not the peers'
        # fair form)
        "silencefilter": f"SELECT sum(n) AS n FROM (SELECT {div} AS w, count(v) AS n FROM s "
                         f"GROUP BY 1 HAVING stddev_samp(v) > {g}) voiced",
    }
    return q


def duckdb_list_queries(meta: dict) -> dict:
    a, b, g = lit(meta["alpha"]), lit(meta["beta"]), lit(meta["gamma"])
    return {
        "statfilter": f"SELECT * FROM (SELECT w, list_aggregate(samples, 'stddev_samp') AS sd, "
                      f"list_avg(samples) AS m FROM l) q WHERE sd > {a} AND m < {b}",
        "passchain": f"SELECT sum(len(samples)) AS n FROM {nest('l', 'w, samples')} q",
        "silencefilter": "SELECT sum(len(samples)) AS n FROM l "
                         f"WHERE list_aggregate(samples, 'stddev_samp') > {g}",
    }


def expected(meta: dict, query: str) -> int:
    return meta["ref"]["silence_samples" if query == "silencefilter" else query]


def answer(query: str, rows) -> int:
    """The checked number: passing windows (STATFILTER) or samples (the other two, always
    the last column)."""
    if query == "statfilter":
        return len(rows)
    value = rows[0][-1]
    return int(value or 0)


# ---------------------------------------------------------------------------- timing
def timed(fn, runs: int) -> tuple[list[float], object]:
    fn()  # warm-up: JIT, page cache, Python workers, Parquet footers
    times, out = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


class Bench:
    def __init__(self, runs: int):
        self.runs, self.rows = runs, []

    def run(self, section: str, query: str, system: str, layout: str, samples: int, fn,
            want: int | None, runs: int | None = None) -> dict:
        row = {"section": section, "query": query, "system": system, "layout": layout,
               "samples": samples, "times": [], "median": None, "got": None, "want": want,
               "ok": None, "error": None}
        print(f"-- {section} {NAMES.get(query, query)} | {system} | {layout} ...", flush=True)
        try:
            times, got = timed(fn, runs or self.runs)
            row.update(times=times, median=statistics.median(times), got=got)
            row["ok"] = want is None or got == want
        except Exception as err:  # noqa: BLE001 - one failing system must not stop the rest
            row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
            traceback.print_exc(limit=3)
        self.report(row)
        self.rows.append(row)
        return row

    @staticmethod
    def report(row: dict) -> None:
        if row["error"]:
            print(f"   FAILED: {row['error']}", flush=True)
            return
        rate = row["samples"] / row["median"] / 1e6
        times = ", ".join(f"{t:.3f}" for t in row["times"])
        print(f"   median {row['median']:.3f} s ({times}) = {rate:.1f} Msamples/s; "
              f"answer {row['got']:,}", flush=True)
        if row["ok"] is False:
            print(f"   !!!!!!!! MISMATCH: {row['system']} answered {row['got']:,}, the numpy "
                  f"reference is {row['want']:,} !!!!!!!!", flush=True)


# ---------------------------------------------------------------------------- numpy
def numpy_worker(spec: dict) -> dict:
    """Runs in a child process whose environment has no OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE
    (they are read when OpenBLAS loads, so they cannot be dropped in this process)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    out = {"threadpool": [{k: p.get(k) for k in ("internal_api", "version", "architecture",
                                                 "num_threads")} for p in threadpool_info()]}
    with threadpool_limits(limits=1):  # single-threaded reference, whatever BLAS is loaded
        for name, job in spec["jobs"].items():
            if job["path"] == RECORDING:
                x = data.recording()
            else:  # the WAV's samples copied into RAM (not timed: file loading excluded)
                from wavesql.udfs.wav import read_info

                info = read_info(job["path"])
                x = np.array(np.memmap(job["path"], np.float32, "r", info.data_offset,
                                       (info.frames,)))
            fns = {"statfilter": lambda: np_statfilter(x, job["alpha"], job["beta"]),
                   "silencefilter": lambda: np_silencefilter(x, job["gamma"])}
            for q in job["queries"]:
                times, got = timed(fns[q], job["runs"])
                out[f"{name}:{q}"] = {"times": times, "got": int(got)}
            del x
    return out


def np_statfilter(x: np.ndarray, alpha: float, beta: float) -> int:
    sd, mean = data.window_stats(x)  # x.reshape(-1, 4096) in cache-sized blocks; tail too
    return int(np.count_nonzero((sd > alpha) & (mean < beta)))


def np_silencefilter(x: np.ndarray, gamma: float) -> int:
    sd, _ = data.window_stats(x)
    voiced = sd > gamma
    full = len(x) // W
    audio = x[:full * W].reshape(-1, W)[voiced[:full]]  # copies the voiced samples out
    tail = x[full * W:] if len(voiced) > full and voiced[-1] else x[:0]
    return audio.size + tail.size


def run_numpy(spec: dict) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    proc = subprocess.run([sys.executable, __file__, "--numpy-worker", json.dumps(spec)],
                          env=env, capture_output=True, text=True, cwd=HERE)
    if proc.returncode:
        raise RuntimeError(f"numpy worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def numpy_row(bench: Bench, res: dict, key: str, section: str, query: str, layout: str,
              samples: int, want: int) -> None:
    row = {"section": section, "query": query, "system": "numpy, 1 thread", "layout": layout,
           "samples": samples, "want": want, "error": None}
    if key in res:
        r = res[key]
        row.update(times=r["times"], median=statistics.median(r["times"]), got=r["got"],
                   ok=r["got"] == want)
    else:
        row.update(times=[], median=None, got=None, ok=None, error=res.get("error", "not run"))
    print(f"-- {section} {NAMES[query]} | numpy, 1 thread | {layout}")
    bench.report(row)
    bench.rows.append(row)


# ---------------------------------------------------------------------------- sessions
def connect(master: str):
    import wavesql

    catalog = tempfile.mkdtemp(prefix="wavesql-bench-") + "/catalog.db"
    return wavesql.connect(master=master, catalog=catalog)


def register(ws, name: str, path: str) -> None:
    ws.sql(f"CREATE OR REPLACE SIGNAL {name} (voice FLOAT) RATE {RATE} HZ FROM '{path}' "
           f"FORMAT wav SEGMENT {W}")


def register_rows(ws, name: str, path: str, numbered: bool = True) -> None:
    """The row-per-sample Parquet file the peers read, as a WaveSQL signal stored as a
    table (sources/table_signal.py): channel ``v``; ``numbered``: placed by the sample
    numbers in ``t`` (read and checked in every task), else in row order (``t`` unread:
    the same samples, since the file holds them in order without gaps)."""
    position = " OPTIONS (sample_column = 't')" if numbered else ""
    ws.sql(f"CREATE OR REPLACE SIGNAL {name} (v FLOAT) RATE {RATE} HZ FROM '{path}' "
           f"FORMAT parquet{position} SEGMENT {W}")


def wavesql_fn(ws, text: str, query: str):
    return lambda: answer(query, ws.sql(text).collect())


# ---------------------------------------------------------------------------- the table
def fmt_rate(row: dict | None) -> str:
    if row is None or row["median"] is None:
        return "—"
    return f"{row['samples'] / row['median'] / 1e6:.1f}"


def ratio(a: dict | None, b: dict | None) -> str:
    if not a or not b or a["median"] is None or b["median"] is None:
        return "—"
    return f"{b['median'] / a['median']:.2f}×"  # throughput ratio = inverse time ratio


def table(bench: Bench, meta: dict, notes: dict) -> str:
    mark = {True: "ok", False: "**MISMATCH**", None: "—"}
    out = [f"Run {notes['date']} on {notes['machine']}.", "",
           f"Data: {meta['copies']} copies of the 9 s recording = {meta['samples']:,} samples "
           f"({meta['windows']:,} windows of {W}, the last one partial with {meta['tail']} "
           f"samples and included by every system); α = {meta['alpha']:.6g}, "
           f"β = {meta['beta']:.6g}, γ = α. Median of {bench.runs} runs after one warm-up; "
           "Msamples/s = input samples / median time.", "",
           "| section | query | system | layout | median s | Msamples/s | answer | check | "
           "runs (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for r in bench.rows:
        ans = r["error"] and f"failed: {r['error'][:80]}" or f"{r['got']:,}"
        med = "—" if r["median"] is None else f"{r['median']:.3f}"
        out.append(f"| {r['section']} | {NAMES.get(r['query'], r['query'])} | {r['system']} | "
                   f"{r['layout']} | {med} | {fmt_rate(r)} | {ans} | {mark[r['ok']]} | "
                   + " ".join(f"{t:.3f}" for t in r["times"]) + " |")
    main = [r for r in bench.rows if r["section"] == "throughput"]
    out += ["", "Throughput ratios (WaveSQL local[2] samples/s ÷ peer's; > 1 means WaveSQL is "
            "faster; the WAV signal, then the Parquet table signal placed by its sample "
            "numbers, and in row order):", "",
            "| query | vs faster DuckDB | vs Spark SQL | vs numpy | vs best peer | "
            "table signal / WAV | table signal / Spark SQL | row order / WAV | "
            "row order / Spark SQL |", "|---|---|---|---|---|---|---|---|---|"]
    for q in QUERIES:
        rows = [r for r in main if r["query"] == q and r["median"] is not None]
        ws = next((r for r in rows if r["system"].startswith("WaveSQL")
                   and "WAV" in r["layout"]), None)
        rows_sig = next((r for r in rows if r["system"].startswith("WaveSQL")
                         and r["layout"].endswith("(signal)")), None)
        in_order = next((r for r in rows if r["system"].startswith("WaveSQL")
                         and r["layout"].endswith("row order)")), None)
        peers = [r for r in rows if not r["system"].startswith("WaveSQL")]
        if not peers and ws is None:
            continue
        duck = min((r for r in peers if r["system"].startswith("DuckDB")),
                   key=lambda r: r["median"], default=None)
        spark = next((r for r in peers if r["system"].startswith("Spark")), None)
        npy = next((r for r in peers if r["system"].startswith("numpy")), None)
        best = min(peers, key=lambda r: r["median"], default=None)
        out.append(f"| {NAMES[q]} | {ratio(ws, duck)} | {ratio(ws, spark)} | {ratio(ws, npy)} "
                   f"| {ratio(ws, best)} ({best['system'] + ', ' + best['layout'] if best else '—'}) "
                   f"| {ratio(rows_sig, ws)} | {ratio(rows_sig, spark)} "
                   f"| {ratio(in_order, ws)} | {ratio(in_order, spark)} |")
    bad = [r for r in bench.rows if r["ok"] is False or r["error"]]
    out += ["", "Notes: " + notes["text"]]
    if bad:
        out.append("\n**Anomalies:** " + "; ".join(
            f"{r['section']} {r['query']} {r['system']}: "
            + (r["error"] or f"answered {r['got']:,} vs reference {r['want']:,}") for r in bad))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=",".join(QUERIES), help="comma list of " + ",".join(QUERIES))
    ap.add_argument("--skip-scaling", action="store_true",
                    help="skip the latency, size-scaling and local[1] sections")
    ap.add_argument("--scale-base", type=int, default=25, help="copies of the 1x scaling point")
    ap.add_argument("--cache", default=str(data.DEFAULT_CACHE))
    ap.add_argument("--out", default=str(HERE / "results.md"))
    ap.add_argument("--numpy-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.numpy_worker:
        print(json.dumps(numpy_worker(json.loads(args.numpy_worker))))
        return
    only = [q.strip().lower() for q in args.only.split(",") if q.strip()]
    unknown = set(only) - set(QUERIES)
    if unknown:
        ap.error(f"unknown queries {sorted(unknown)}; choose from {QUERIES}")
    load0 = os.getloadavg()
    started = dt.datetime.now(dt.timezone.utc)
    meta = data.dataset(args.copies, args.cache)
    n = meta["samples"]
    print(f"alpha = {meta['alpha']!r} (median window std), beta = {meta['beta']!r} (median "
          f"window mean), gamma = alpha; margins {meta['margin']}; references {meta['ref']}")
    bench = Bench(args.runs)

    # numpy first, in its own process (see numpy_worker); it also does the latency point.
    rec = data.recording()
    rec_sd, rec_mean = data.window_stats(rec)
    rec_meta = {"alpha": data.threshold(rec_sd), "beta": data.threshold(rec_mean),
                "gamma": data.threshold(rec_sd), "samples": len(rec)}
    rec_meta["ref"] = {"statfilter": int(np.count_nonzero((rec_sd > rec_meta["alpha"])
                                                          & (rec_mean < rec_meta["beta"])))}
    jobs = {"main": {"path": meta["wav"], "alpha": meta["alpha"], "beta": meta["beta"],
                     "gamma": meta["gamma"], "runs": args.runs,
                     "queries": [q for q in only if q != "passchain"]}}
    if not args.skip_scaling:
        jobs["rec"] = {"path": RECORDING, "runs": 5, "queries": ["statfilter"], **{
            k: rec_meta[k] for k in ("alpha", "beta", "gamma")}}
    print("-- numpy (child process, OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE unset) ...", flush=True)
    try:
        npres = run_numpy({"jobs": jobs})
    except Exception as err:  # noqa: BLE001
        npres = {"error": str(err).splitlines()[0], "threadpool": []}
        print(err)
    print(f"   numpy {np.__version__}, threadpoolctl: {npres['threadpool']}")

    ws = connect("local[2]")
    spark = ws.spark
    spark.read.parquet(meta["rows"]).createOrReplaceTempView("s")
    import duckdb

    duck = duckdb.connect()
    duck.execute("SET threads = 2")
    duck.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet('{meta['rows']}')")
    duck.execute(f"CREATE VIEW l AS SELECT * FROM read_parquet('{meta['lists']}')")
    try:
        register(ws, "counting", meta["wav"])
        register_rows(ws, "rows", meta["rows"])
        register_rows(ws, "rows_in_order", meta["rows"], numbered=False)
    except Exception as err:  # noqa: BLE001 - the WaveSQL rows then fail, the peers still run
        print(f"!! CREATE SIGNAL failed: {err}")
    wq, sq, dq, lq = (wavesql_queries(meta), sql_queries(meta, "spark"),
                      sql_queries(meta, "duckdb"), duckdb_list_queries(meta))
    rq = {k: v.replace("voice", "v") for k, v in wavesql_queries(meta, "rows").items()}
    oq = {k: v.replace("voice", "v") for k, v in wavesql_queries(meta, "rows_in_order").items()}
    for q in only:
        want = expected(meta, q)
        bench.run("throughput", q, "WaveSQL local[2]", "float32 WAV", n,
                  wavesql_fn(ws, wq[q], q), want)
        bench.run("throughput", q, "WaveSQL local[2]", "Parquet, row per sample (signal)", n,
                  wavesql_fn(ws, rq[q], q), want)
        bench.run("throughput", q, "WaveSQL local[2]",
                  "Parquet, row per sample (signal, row order)", n, wavesql_fn(ws, oq[q], q),
                  want)
        bench.run("throughput", q, "Spark SQL local[2]", "Parquet, row per sample", n,
                  lambda: answer(q, spark.sql(sq[q]).collect()), want)
        bench.run("throughput", q, "DuckDB, 2 threads", "Parquet, row per sample", n,
                  lambda: answer(q, duck.execute(dq[q]).fetchall()), want)
        bench.run("throughput", q, "DuckDB, 2 threads", "Parquet, list per window", n,
                  lambda: answer(q, duck.execute(lq[q]).fetchall()), want)
        if q != "passchain":  # a pass-through chain has nothing for numpy to do
            numpy_row(bench, npres, f"main:{q}", "throughput", q, "float32 array in RAM",
                      n, want)

    if not args.skip_scaling:
        # Latency: the 9 s recording alone, Spark session already started.
        register(ws, "rec", RECORDING)
        rq = wavesql_queries(rec_meta, "rec")["statfilter"]
        bench.run("latency (9 s recording)", "statfilter", "WaveSQL local[2]", "int16 WAV",
                  len(rec), wavesql_fn(ws, rq, "statfilter"), rec_meta["ref"]["statfilter"],
                  runs=5)
        numpy_row(bench, npres, "rec:statfilter", "latency (9 s recording)", "statfilter",
                  "float32 array in RAM", len(rec), rec_meta["ref"]["statfilter"])
        # Size scaling: throughput should stay flat from 1x to 16x once the fixed cost fades.
        for k in (1, 4, 16):
            m = data.dataset(args.scale_base * k, args.cache, parts=("wav",))
            register(ws, f"scale{k}", m["wav"])
            bench.run(f"size scaling ×{args.scale_base * k}", "statfilter", "WaveSQL local[2]",
                      "float32 WAV", m["samples"], wavesql_fn(
                          ws, wavesql_queries(m, f"scale{k}")["statfilter"], "statfilter"),
                      m["ref"]["statfilter"])
        # Cores: the same query on a fresh local[1] session (the JVM is reused).
        spark.stop()
        ws1 = connect("local[1]")
        print(f"   local[1] session: master={ws1.spark.sparkContext.master}, "
              f"parallelism={ws1.spark.sparkContext.defaultParallelism}")
        register(ws1, "counting", meta["wav"])
        bench.run("cores", "statfilter", "WaveSQL local[1]", "float32 WAV", n,
                  wavesql_fn(ws1, wq["statfilter"], "statfilter"), meta["ref"]["statfilter"])
        local2 = next((r for r in bench.rows if r["section"] == "throughput"
                       and r["query"] == "statfilter" and r["system"] == "WaveSQL local[2]"),
                      None)
        if local2:
            copy = dict(local2, section="cores")
            bench.rows.append(copy)

    load1 = os.getloadavg()
    import pyarrow
    import pyspark

    tp = ", ".join(f"{p['internal_api']} {p['version']} kernel {p['architecture']}"
                   for p in npres.get("threadpool", [])) or "unknown"
    notes = {
        "date": started.strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine.describe(load0, load1),
        "text": f"Spark {pyspark.__version__}, DuckDB {duckdb.__version__}, numpy "
                f"{np.__version__} (threadpoolctl: {tp}; OPENBLAS_CORETYPE/L2_SIZE unset for "
                f"numpy only), pyarrow {pyarrow.__version__}, Python "
                f"{platform.python_version()}. Files in the page cache (warm-up run).",
    }
    text = table(bench, meta, notes)
    print("\n" + text)
    Path(args.out).write_text("# Signal benchmark results\n\n" + text)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
