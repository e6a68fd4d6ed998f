"""Continuous interval join: micro-batch time on the state store vs the re-evaluating
runner vs plain Spark's stream-stream join, on the same files, in one run.

    python benchmarks/streaming/interval.py [--files 40] [--last 20] [--keys 200]

Two streams, ``trades`` and ``quotes``, each 500 events/s over ``--keys`` keys, one
Parquet file per 10 s of event time (up to 2 s out of order), one file of each per
micro-batch (``maxFilesPerTrigger 1``). The query pairs each trade with the quotes of its
key within one second::

    SELECT t.k, t.v, q.v AS qv, t.ts, q.ts AS qts FROM trades t JOIN quotes q
    ON t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 1 SECOND AND t.ts + INTERVAL 1 SECOND

run by WaveSQL on Spark's state store (late rows captured per stream, ``_progress`` on
every row, Parquet output committed whole), by WaveSQL's re-evaluating runner
(``WAVESQL_STATEFUL=0``: each side's new rows paired with the other side's kept rows, the
buffers rewritten every batch) and by plain Spark Structured Streaming (``withWatermark``
on both streams, the same join condition, append mode, Parquet file sink; late rows
dropped by Spark's one global watermark). A micro-batch's time is Spark's
``triggerExecution`` of that batch; the figure is the median [min-max] of the last
``--last`` batches with rows. Written to ``interval_results.md``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/
sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine  # noqa: E402
from run import Durations, connect, steady, write_events  # noqa: E402

HERE = Path(__file__).resolve().parent
QUERY = ("SELECT t.k, t.v, q.v AS qv, t.ts, q.ts AS qts FROM trades t JOIN quotes q "
         "ON t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 1 SECOND AND t.ts + INTERVAL 1 SECOND")


def run_wavesql(ws, durations, folders: dict, work: Path, tag: str,
                query: str = QUERY) -> dict:
    """``query`` over the streams of ``folders`` (name -> folder of Parquet files), one file
    per micro-batch, run to the end: wall time, runner, per-batch durations and state rows,
    rows out (also run by window_join.py)."""
    for name, folder in folders.items():
        ws.sql(f"CREATE OR REPLACE STREAM {name} (k STRING, v DOUBLE, ts TIMESTAMP) FROM "
               f"'{folder}' FORMAT parquet EVENT TIME ts WATERMARK 2 SECONDS")
    out, ck = work / f"out_{tag}", work / f"ck_{tag}"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)
    t0 = time.time()
    cq = ws.stream(query, out, ck, max_files_per_trigger=1)
    cq.await_termination()
    # the batches with input rows (the re-evaluating runner reads its files itself, so
    # Spark's numInputRows of its batches is 0: WaveSQL's own count says which had rows)
    with_rows = {r.batch for r in cq.reports if r.rows_in}
    return {"wall": time.time() - t0, "engine": type(cq).__name__,
            "batches": [b for b in durations.of(cq._query) if b[0] in with_rows],
            "state": [r.buffered for r in cq.reports if r.rows_in],
            "rows": ws.spark.read.parquet(str(out)).count()}


def run_spark(spark, durations, folders: dict, work: Path) -> dict:
    from pyspark.sql import functions as F

    out, ck = work / "spark_out", work / "spark_ck"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(ck, ignore_errors=True)

    def read(name):
        return (spark.readStream.schema("k STRING, v DOUBLE, ts TIMESTAMP")
                .option("maxFilesPerTrigger", 1).parquet(str(folders[name]))
                .withWatermark("ts", "2 seconds").alias(name[0]))

    joined = read("trades").join(read("quotes"), F.expr(
        "t.k = q.k AND q.ts BETWEEN t.ts - INTERVAL 1 SECOND AND t.ts + INTERVAL 1 SECOND"))
    joined = joined.select("t.k", "t.v", F.col("q.v").alias("qv"), "t.ts",
                           F.col("q.ts").alias("qts"))
    t0 = time.time()
    q = (joined.writeStream.outputMode("append").format("parquet").option("path", str(out))
         .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
    q.awaitTermination()
    return {"wall": time.time() - t0, "batches": [b for b in durations.of(q) if b[2] > 0],
            "rows": spark.read.parquet(str(out)).count()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--last", type=int, default=20)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--work", default=None, help="data and checkpoints (default: a temp dir)")
    parser.add_argument("--out", default=str(HERE / "interval_results.md"))
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = Path(args.work or tempfile.mkdtemp(prefix="wavesql-interval-bench-"))
    folders = {"trades": work / "trades", "quotes": work / "quotes"}
    for seed, folder in enumerate(folders.values()):
        if not folder.exists():
            write_events(folder, args.files, 500, args.keys, 10, seed=20 + seed)
    load0 = os.getloadavg()
    ws = connect(work)
    durations = Durations(ws.spark)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    got = {}
    for tag, flag in (("state store", "1"), ("re-evaluating", "0")):
        os.environ["WAVESQL_STATEFUL"] = flag
        try:
            got[tag] = run_wavesql(ws, durations, folders, work, tag.replace(" ", "_"))
        finally:
            os.environ.pop("WAVESQL_STATEFUL", None)
        print(tag, got[tag]["engine"], steady(got[tag]["batches"], args.last), flush=True)
    got["plain Spark"] = run_spark(ws.spark, durations, folders, work)
    print("spark", steady(got["plain Spark"]["batches"], args.last), flush=True)
    spark_median = steady(got["plain Spark"]["batches"], args.last)[0]
    lines = [f"# Interval join benchmark, {started}", "",
             f"`{QUERY}`", "",
             f"Two streams of 500 events/s over {args.keys} keys, {args.files} files of 10 s "
             f"each ({args.files * 10 / 60:.1f} min of event time), one file of each per "
             f"micro-batch; median [min-max] of the last {args.last} batches with rows "
             "(Spark's triggerExecution); wall: the whole run, query start included.", "",
             "| runner | micro-batch | / plain Spark | wall | state rows (last batch) | "
             "pairs out |", "| --- | --- | --- | --- | --- | --- |"]
    for tag, r in got.items():
        m, lo, hi = steady(r["batches"], args.last)
        state = f"{r['state'][-1]:,}" if r.get("state") else "-"
        name = f"{tag} ({r['engine']})" if "engine" in r else tag
        lines.append(f"| {name} | {m:.3f} s [{lo:.3f}-{hi:.3f}] | {m / spark_median:.2f}x | "
                     f"{r['wall']:.0f} s | {state} | {r['rows']:,} |")
    lines += ["", f"Machine: {machine.describe(load0, os.getloadavg())}; Spark "
              f"{ws.spark.version}, local[2], 2 shuffle partitions.", ""]
    text = "\n".join(lines)
    print(text)
    Path(args.out).write_text(text)
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
