"""The floor of one incremental run: the least work that reads the new files once and writes
their rows exactly once, with a warm-started Spark, one process per run.

    python benchmarks/files/floor_job.py --input DIR --output DIR --checkpoint DIR

Not a system anyone runs: what ``run.py`` measures next to ``wavesql run`` and plain Spark so
that the note can say how far either is from the least a run can cost here. One run:

1. list the input folder (one ``os.scandir``) and take the Parquet files not in the set
   already processed (``<checkpoint>/seen.txt``, one file name a line);
2. if there are any: ``spark.read.schema(...).parquet(new files).where("v >= 0")`` written as
   ``<output>/_staging/batch=N`` and renamed to ``<output>/batch=N`` (N: the batches
   committed so far), its rows counted from the written files' footers;
3. commit: ``seen.txt`` rewritten with the new names (aside, then renamed: the commit
   record). A run killed before 3 redoes batch N from the same listing diff and replaces the
   folder it left, so every row is written exactly once (what WaveSQL's and Spark's file
   logs also guarantee).

No late-row routing, no malformed-row quarantine, no wait for files still being written,
no lock: what the two systems do on top of this is what they cost above the floor.

Prints one line ``RESULT {json}``: ``query_s`` (from before the listing to after the commit),
``rows_in`` (the rows written, all of which pass the filter in this benchmark's data) and
``batches``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(args.master).appName("files-bench-floor")
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    began = time.perf_counter()
    os.makedirs(args.checkpoint, exist_ok=True)
    record = os.path.join(args.checkpoint, "seen.txt")
    seen: list[str] = []
    if os.path.exists(record):
        with open(record) as f:
            seen = f.read().split("\n")[:-1]
    batch = sum(1 for name in os.listdir(args.output)
                if name.startswith("batch=")) if os.path.isdir(args.output) else 0
    known = set(seen)
    new = sorted(e.name for e in os.scandir(args.input)
                 if e.is_file() and e.name.endswith(".parquet") and e.name not in known)
    rows = 0
    if new:
        import pyarrow.parquet as pq

        target = os.path.join(args.output, f"batch={batch:09d}")
        staging = os.path.join(args.output, "_staging", f"batch={batch:09d}")
        (spark.read.schema("id BIGINT, v DOUBLE, ts TIMESTAMP")
         .parquet(*[os.path.join(args.input, n) for n in new]).where("v >= 0")
         .write.mode("overwrite").parquet(staging))
        if os.path.exists(target):  # a run killed after its rename, before its commit
            shutil.rmtree(target)
        os.replace(staging, target)
        rows = sum(pq.ParquetFile(os.path.join(target, n)).metadata.num_rows
                   for n in os.listdir(target) if n.endswith(".parquet"))
        tmp = record + ".tmp"
        with open(tmp, "w") as f:
            f.write("".join(n + "\n" for n in seen + new))
        os.replace(tmp, record)  # the commit
    query_s = time.perf_counter() - began
    print("RESULT " + json.dumps({"query_s": query_s, "rows_in": rows,
                                  "batches": 1 if new else 0}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
