"""One incremental run after N files: ``wavesql run`` vs plain Spark Structured Streaming.

    python benchmarks/files/run.py [--sizes 10,2000,20000] [--repeats 5] [--work DIR]
    python benchmarks/files/run.py --quick        # sizes 10,200, 2 repeats: a smoke check

A query file run from cron processes only the input files that arrived since its previous
run (README, "Query files run incrementally"). This measures what one such run costs when it
finds ONE new 10-row Parquet file after N files already processed, for each N, next to the
peer a Spark user would write for the same job (``spark_job.py``: ``readStream`` parquet on
the same folder, trigger ``availableNow``, Parquet file sink with its own checkpoint).

For each N, in ``<work>/n<N>/``:

1. N Parquet files of 10 rows ``(id BIGINT, v DOUBLE, ts TIMESTAMP)`` are written with
   pyarrow into ``in/``;
2. both systems and the floor (``floor_job.py``: the least a run can do that reads the new
   files once and writes their rows exactly once) are primed over them, one run each (each
   reads all N files, checked by its row count);
3. ``--repeats`` times: one new file is added (written aside and renamed into ``in/``), then
   one run of each is timed (the order rotates between repeats); each must read exactly the
   new file's 10 rows.

Every run is a fresh process, as from cron: ``python -m wavesql --master local[2] --catalog
... run job.wsql`` and ``python spark_job.py ...``. Two times are taken per run: the whole
process (wall clock, JVM start included) and the incremental query alone -- for WaveSQL the
seconds the CLI prints on the ``insert into out`` line (``jobs.run_insert``: lock, planning,
the availableNow query to its end), for Spark the seconds from the ``readStream`` definition to
the end of ``awaitTermination``, printed by the script. Both get ``spark.sql.shuffle.partitions
= 2``, UTC, the UI off; the Spark script also gets the driver memory ``wavesql`` gives itself.
Reported: median [min-max] over the repeats per system, and WaveSQL / Spark (ratio of the
medians). A dated section is appended to results.md (or ``--out``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
import machine  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROWS = 10  # rows per file
EPOCH_US = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 1_000_000
SCHEMA = pa.schema([("id", pa.int64()), ("v", pa.float64()),
                    ("ts", pa.timestamp("us", tz="UTC"))])
# what both systems run with (WaveSQL's own defaults give local[2] 4 shuffle partitions)
COMMON_CONF = {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC",
               "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}
INSERT_LINE = re.compile(r"^job\.wsql:\d+: insert into out: (?P<what>.*) · (?P<s>[0-9.]+) s$",
                         re.M)

JOB = """\
CREATE STREAM IF NOT EXISTS ev (id BIGINT, v DOUBLE, ts TIMESTAMP)
  FROM '{input}' FORMAT parquet EVENT TIME ts WATERMARK 1 SECOND;
CREATE SINK IF NOT EXISTS out TO '{sink}' FORMAT parquet;
INSERT INTO out SELECT id, v, ts FROM ev WHERE v >= 0;
"""


# ---------------------------------------------------------------------------------------
# data
# ---------------------------------------------------------------------------------------
def file_table(i: int, rng: np.random.Generator) -> pa.Table:
    """File ``i``: ids ``10i..10i+9``, event times one second apart after file ``i-1``'s (so
    no row is ever late), ``v`` in [0, 1) (every row passes ``v >= 0``)."""
    ids = np.arange(i * ROWS, (i + 1) * ROWS, dtype=np.int64)
    ts = EPOCH_US + ids * 1_000_000
    return pa.table([pa.array(ids), pa.array(rng.random(ROWS)),
                     pa.array(ts, pa.timestamp("us", tz="UTC"))], schema=SCHEMA)


def generate(folder: Path, n: int, seed: int = 0) -> float:
    """N files ``part-000000.parquet``... into ``folder`` (nothing reads it yet); seconds."""
    t0 = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        pq.write_table(file_table(i, rng), folder / f"part-{i:06d}.parquet")
    return time.perf_counter() - t0


def add_file(folder: Path, staging: Path, i: int) -> None:
    """One new file, written aside and renamed in: a reader never sees it half-written."""
    staging.mkdir(parents=True, exist_ok=True)
    tmp = staging / f"part-{i:06d}.parquet"
    pq.write_table(file_table(i, np.random.default_rng(i)), tmp)
    os.replace(tmp, folder / tmp.name)


# ---------------------------------------------------------------------------------------
# the two systems and the floor, one process per run
# ---------------------------------------------------------------------------------------
def child_env() -> dict:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def conf_args(conf: dict) -> list[str]:
    return [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]


def run_wavesql(case: Path, timeout: float) -> dict:
    """``wavesql run job.wsql`` in ``case``: process seconds, the INSERT's seconds, rows."""
    cmd = [sys.executable, "-m", "wavesql", "--master", "local[2]", "--catalog",
           str(case / "catalog.db"), *conf_args(COMMON_CONF), "run", "job.wsql"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=case, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    match = INSERT_LINE.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"wavesql run failed (exit {done.returncode}):\n{done.stdout}\n"
                           f"{done.stderr[-4000:]}")
    what = match.group("what")
    rows = re.search(r"\bin (\d+)\b", what)
    late = re.search(r"\blate (\d+)\b", what)
    return {"wall": wall, "query": float(match.group("s")), "what": what,
            "rows_in": int(rows.group(1)) if rows else 0,
            "late": int(late.group(1)) if late else 0}


def run_spark(case: Path, conf: dict, timeout: float) -> dict:
    """``spark_job.py`` over ``case/in``: process seconds, the query's seconds, rows."""
    cmd = [sys.executable, str(HERE / "spark_job.py"), "--input", str(case / "in"),
           "--output", str(case / "spark_out"), "--checkpoint", str(case / "spark_ck"),
           "--master", "local[2]", *conf_args(conf)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=case, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"spark_job.py failed (exit {done.returncode}):\n{done.stdout}\n"
                           f"{done.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    return {"wall": wall, "query": result["query_s"], "rows_in": result["rows_in"],
            "what": f"{result['batches']} batch(es) · in {result['rows_in']}"}


def run_floor(case: Path, conf: dict, timeout: float) -> dict:
    """``floor_job.py`` over ``case/in``: the least a run can cost (its docstring)."""
    cmd = [sys.executable, str(HERE / "floor_job.py"), "--input", str(case / "in"),
           "--output", str(case / "floor_out"), "--checkpoint", str(case / "floor_ck"),
           "--master", "local[2]", *conf_args(conf)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=case, env=child_env(), capture_output=True, text=True,
                          timeout=timeout)
    wall = time.perf_counter() - t0
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"floor_job.py failed (exit {done.returncode}):\n{done.stdout}\n"
                           f"{done.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    return {"wall": wall, "query": result["query_s"], "rows_in": result["rows_in"],
            "what": f"{result['batches']} batch(es) · in {result['rows_in']}"}


SYSTEMS = ("wavesql", "spark", "floor")


def run_system(system: str, case: Path, spark_conf: dict, timeout: float) -> dict:
    if system == "wavesql":
        return run_wavesql(case, timeout)
    return (run_spark if system == "spark" else run_floor)(case, spark_conf, timeout)


def check(system: str, result: dict, rows: int) -> None:
    if result["rows_in"] != rows or result.get("late", 0):
        raise RuntimeError(f"{system} read {result['rows_in']} rows ({result['what']}), "
                           f"expected {rows} and none late")


# ---------------------------------------------------------------------------------------
# one N
# ---------------------------------------------------------------------------------------
def one_size(work: Path, n: int, repeats: int, spark_conf: dict, timeout: float,
             reuse: bool = False) -> dict:
    case = work / f"n{n}"
    folder = case / "in"
    done_before = len(list(folder.glob("*.parquet"))) if reuse and folder.is_dir() else 0
    prime: dict = {}
    if done_before:  # --reuse: an earlier run's data, every system caught up with it
        gen_s = 0.0
        print(f"N={n}: reusing {case} ({done_before} files, processed by all three)",
              flush=True)
    else:
        shutil.rmtree(case, ignore_errors=True)
        case.mkdir(parents=True)
        gen_s = generate(folder, n)
        (case / "job.wsql").write_text(JOB.format(input=folder, sink=case / "out"))
        print(f"N={n}: {n} files written in {gen_s:.1f} s; priming", flush=True)
        prime = {system: run_system(system, case, spark_conf, timeout) for system in SYSTEMS}
    for system, result in prime.items():
        check(system, result, n * ROWS)
        print(f"  prime {system:8s} process {result['wall']:7.2f} s · query "
              f"{result['query']:7.2f} s · {result['what']}", flush=True)

    runs = {system: [] for system in SYSTEMS}
    for r in range(repeats):
        add_file(folder, case / "staging", max(n, done_before) + r)
        # the order rotates between repeats, so no system always runs first after the add
        order = SYSTEMS[r % len(SYSTEMS):] + SYSTEMS[:r % len(SYSTEMS)]
        for system in order:
            result = run_system(system, case, spark_conf, timeout)
            check(system, result, ROWS)
            runs[system].append(result)
            print(f"  run {r + 1}/{repeats} {system:8s} process {result['wall']:6.2f} s · "
                  f"query {result['query']:6.2f} s · {result['what']}", flush=True)
    return {"n": n, "generate": gen_s, "prime": prime, "runs": runs,
            "processed": max(n, done_before)}


# ---------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------
def stats(xs: list[float]) -> tuple[float, float, float]:
    return statistics.median(xs), min(xs), max(xs)


def cell(xs: list[float]) -> str:
    m, lo, hi = stats(xs)
    return f"{m:.2f} s [{lo:.2f}-{hi:.2f}]"


def ratio(a: list[float], b: list[float]) -> str:
    return f"{statistics.median(a) / statistics.median(b):.2f}x"


def report(results: list[dict], repeats: int, started: str, quick: bool, load0, load1,
           command: str) -> str:
    import pyspark

    lines = [f"## {started}{' (--quick: a smoke check, not a result)' if quick else ''}", "",
             f"One incremental run finding 1 new {ROWS}-row Parquet file after N files already "
             f"processed; median [min-max] of {repeats} runs per system, each its own process "
             "(`wavesql run job.wsql` vs `spark_job.py`, availableNow). WaveSQL / Spark is the "
             "ratio of the medians.", "",
             "| N files processed | WaveSQL process | Spark process | WaveSQL / Spark "
             "| WaveSQL INSERT | Spark query | WaveSQL / Spark |",
             "| ---: | --- | --- | ---: | --- | --- | ---: |"]
    for res in results:
        w, s = res["runs"]["wavesql"], res["runs"]["spark"]
        ww, sw = [x["wall"] for x in w], [x["wall"] for x in s]
        wq, sq = [x["query"] for x in w], [x["query"] for x in s]
        lines.append(f"| {res['processed']:,} | {cell(ww)} | {cell(sw)} | {ratio(ww, sw)} "
                     f"| {cell(wq)} | {cell(sq)} | {ratio(wq, sq)} |")
    lines += ["", "Priming (the first run over the N files, once; not part of the figures "
              "above):", "",
              "| N | WaveSQL process | WaveSQL INSERT | Spark process | Spark query "
              "| floor process | floor query |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for res in results:
        if not res["prime"]:
            lines.append(f"| {res['n']:,} | primed by an earlier run (--reuse) | | | | | |")
            continue
        w, s, f = (res["prime"][k] for k in SYSTEMS)
        lines.append(f"| {res['n']:,} | {w['wall']:.2f} s | {w['query']:.2f} s "
                     f"| {s['wall']:.2f} s | {s['query']:.2f} s "
                     f"| {f['wall']:.2f} s | {f['query']:.2f} s |")
    lines += ["", "The floor (`floor_job.py`: list the folder, diff with the names already "
              "processed, read the new file, filter, write one batch folder renamed into place, "
              "commit the new names; a Spark process started the same way), in the same run:",
              "", "| N | floor process | floor query | WaveSQL INSERT / floor query "
              "| Spark query / floor query | WaveSQL process / floor process "
              "| Spark process / floor process |",
              "| ---: | --- | --- | ---: | ---: | ---: | ---: |"]
    for res in results:
        w, s, f = (res["runs"][k] for k in SYSTEMS)
        fw, fq = [x["wall"] for x in f], [x["query"] for x in f]
        lines.append(f"| {res['processed']:,} | {cell(fw)} | {cell(fq)} "
                     f"| {ratio([x['query'] for x in w], fq)} "
                     f"| {ratio([x['query'] for x in s], fq)} "
                     f"| {ratio([x['wall'] for x in w], fw)} "
                     f"| {ratio([x['wall'] for x in s], fw)} |")
    lines += ["", f"Machine: {machine.describe(load0, load1)}; Spark {pyspark.__version__}, "
              f"Python {sys.version.split()[0]}, local[2], 2 shuffle partitions; WaveSQL at "
              f"{git_revision()}.", "", f"Command: `{command}`", ""]
    return "\n".join(lines)


def git_revision() -> str:
    try:
        head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return "an unknown revision"
    return f"{head or 'unknown'}{' with local changes' if dirty else ''}"


def append_results(path: Path, section: str) -> None:
    if not path.exists() or not path.read_text().strip():
        path.write_text("# Files benchmark: one incremental run after N files\n\n"
                        "Method: README.md. One section per run, newest last.\n\n")
    with path.open("a") as f:
        f.write("\n" + section)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,2000,20000",
                        help="comma list of N, the files already processed (default %(default)s)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed runs per system and N (default %(default)s)")
    parser.add_argument("--quick", action="store_true",
                        help="sizes 10,200 and 2 repeats: a smoke check")
    parser.add_argument("--work", default=None,
                        help="data, sinks, checkpoints and catalogs (default: a temp dir, "
                             "deleted at the end unless --keep)")
    parser.add_argument("--keep", action="store_true", help="keep the temp work dir")
    parser.add_argument("--reuse", action="store_true",
                        help="with --work: reuse each N's data and primed systems left there "
                             "by an earlier run (no generation, no priming)")
    parser.add_argument("--out", default=str(HERE / "results.md"),
                        help="markdown file the dated section is appended to")
    parser.add_argument("--timeout", type=float, default=3600,
                        help="seconds allowed for one run of either system")
    args = parser.parse_args(argv)
    sizes = [10, 200] if args.quick else [int(s) for s in args.sizes.split(",") if s.strip()]
    repeats = 2 if args.quick else args.repeats
    if repeats < 1 or not sizes or min(sizes) < 1:
        parser.error("--repeats and every size must be at least 1")

    from wavesql.spark import _default_config

    # the peer gets the driver memory the wavesql command gives itself
    spark_conf = {**COMMON_CONF,
                  "spark.driver.memory": _default_config("local[2]")["spark.driver.memory"]}
    own_work = args.work is None
    work = Path(args.work or tempfile.mkdtemp(prefix="wavesql-files-bench-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"work dir: {work}", flush=True)
    command = "python benchmarks/files/run.py " + " ".join(
        argv if argv is not None else sys.argv[1:])
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()
    try:
        results = [one_size(work, n, repeats, spark_conf, args.timeout, args.reuse)
                   for n in sizes]
    finally:
        if own_work and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    section = report(results, repeats, started, args.quick, load0, os.getloadavg(),
                     command.strip())
    print()
    print(section)
    append_results(Path(args.out), section)
    print(f"appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
