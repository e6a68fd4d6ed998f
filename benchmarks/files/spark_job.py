"""The peer of one ``wavesql run``: plain Spark Structured Streaming, one process per run.

    python benchmarks/files/spark_job.py --input DIR --output DIR --checkpoint DIR

What a Spark user writes for "copy the new rows of a folder of Parquet files to a Parquet
sink, from cron": ``readStream`` over the folder with the schema given, the same filter as
the WaveSQL job (``v >= 0``), a Parquet file sink with its own checkpoint, trigger
``availableNow`` (every file that arrived since the last run, then stop). Started by
``run.py`` in a subprocess so that, like ``wavesql run``, every run pays for its own JVM.

Prints one line ``RESULT {json}``: ``query_s``, the query alone (from the ``readStream``
definition to the end of ``awaitTermination``), and the rows and micro-batches it read.
"""

from __future__ import annotations

import argparse
import json
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

    builder = SparkSession.builder.master(args.master).appName("files-bench-spark")
    for item in args.conf:
        key, _, value = item.partition("=")
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    began = time.perf_counter()
    src = spark.readStream.schema("id BIGINT, v DOUBLE, ts TIMESTAMP").parquet(args.input)
    query = (src.where("v >= 0").select("id", "v", "ts").writeStream.format("parquet")
             .option("path", args.output).option("checkpointLocation", args.checkpoint)
             .trigger(availableNow=True).start())
    query.awaitTermination()
    query_s = time.perf_counter() - began

    progress = query.recentProgress
    rows = [getattr(p, "numInputRows", None) if not isinstance(p, dict)
            else p.get("numInputRows") for p in progress]
    batches = sum(1 for r in rows if r)
    print("RESULT " + json.dumps({"query_s": query_s, "rows_in": sum(r or 0 for r in rows),
                                  "batches": batches}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
